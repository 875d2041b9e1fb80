//! Shared test helpers: fake instance-type catalogues.

#![allow(dead_code)]

use karpenter_api::labels;
use karpenter_requirements::{
    Format, InstanceType, Offering, Overhead, Quantity, Requirement, Requirements, ResourceList,
};

pub const FAMILY: &str = "karpenter.k8s.aws/instance-family";
pub const CPU_LABEL: &str = "karpenter.k8s.aws/instance-cpu";
pub const ZONES: [&str; 3] = ["test-zone-a", "test-zone-b", "test-zone-c"];

/// A fake instance type.
#[derive(Debug, Clone)]
pub struct Spec {
    pub name: String,
    pub family: String,
    pub arch: &'static str,
    pub cpu_milli: i64,
    pub memory_mib: i64,
    pub pods: i64,
    pub gpus: i64,
    /// (zone, capacity type, price, available)
    pub offerings: Vec<(String, String, f64, bool)>,
    pub overhead_cpu_milli: i64,
    pub overhead_memory_mib: i64,
}

pub fn build(s: &Spec) -> InstanceType {
    let mut reqs = Requirements::new();
    reqs.add(Requirement::in_values(labels::INSTANCE_TYPE, [s.name.as_str()]));
    reqs.add(Requirement::in_values(labels::ARCH, [s.arch]));
    reqs.add(Requirement::in_values(labels::OS, ["linux"]));
    reqs.add(Requirement::in_values(FAMILY, [s.family.as_str()]));
    reqs.add(Requirement::in_values(CPU_LABEL, [(s.cpu_milli / 1000).to_string()]));
    let zones: Vec<&str> = s.offerings.iter().map(|o| o.0.as_str()).collect();
    let cts: Vec<&str> = s.offerings.iter().map(|o| o.1.as_str()).collect();
    reqs.add(Requirement::in_values(labels::ZONE, zones));
    reqs.add(Requirement::in_values(labels::CAPACITY_TYPE, cts));
    reqs.add(Requirement::does_not_exist(karpenter_requirements::labels::RESERVATION_ID));
    let offerings = s
        .offerings
        .iter()
        .map(|(z, ct, price, available)| {
            let r: Requirements = [
                Requirement::in_values(labels::ZONE, [z.as_str()]),
                Requirement::in_values(labels::CAPACITY_TYPE, [ct.as_str()]),
                Requirement::does_not_exist(karpenter_requirements::labels::RESERVATION_ID),
            ]
            .into_iter()
            .collect();
            Offering { available: *available, ..Offering::new(r, *price) }
        })
        .collect();
    let mut cap = ResourceList::new()
        .with("cpu", Quantity::from_milli(s.cpu_milli))
        .with("memory", Quantity::from_int(s.memory_mib * 1024 * 1024, Format::BinarySI))
        .with("pods", Quantity::from_int(s.pods, Format::DecimalSI));
    if s.gpus > 0 {
        cap.insert("nvidia.com/gpu", Quantity::from_int(s.gpus, Format::DecimalSI));
    }
    let overhead = Overhead {
        kube_reserved: ResourceList::new()
            .with("cpu", Quantity::from_milli(s.overhead_cpu_milli))
            .with("memory", Quantity::from_int(s.overhead_memory_mib * 1024 * 1024, Format::BinarySI)),
        ..Default::default()
    };
    InstanceType::new(s.name.clone(), reqs, offerings, cap, overhead)
}

/// `it` with a reserved offering of reservation `id` in `zone` with `left` instances to go: the instance type's
/// capacity types and reservation ids widened to match, as a provider with a reservation reports them.
pub fn with_reservation(
    mut it: InstanceType,
    zone: &str,
    id: &str,
    left: i32,
    price: f64,
    available: bool,
) -> InstanceType {
    use karpenter_requirements::labels::RESERVATION_ID;
    let offering: Requirements = [
        Requirement::in_values(labels::ZONE, [zone]),
        Requirement::in_values(labels::CAPACITY_TYPE, ["reserved"]),
        Requirement::in_values(RESERVATION_ID, [id]),
    ]
    .into_iter()
    .collect();
    let mut reqs = Requirements::new();
    for r in it.requirements.iter() {
        match r.key() {
            k if k == labels::CAPACITY_TYPE => {
                let mut values: Vec<String> = r.values().as_slice().iter().map(|v| v.to_string()).collect();
                values.push("reserved".to_owned());
                reqs.add(Requirement::in_values(k, values));
            }
            k if k == RESERVATION_ID => {}
            _ => reqs.add(r.clone()),
        }
    }
    it.requirements = reqs;
    it.offerings.push(Offering { available, reservation_capacity: left, ..Offering::new(offering, price) });
    it
}

fn offerings(price: f64) -> Vec<(String, String, f64, bool)> {
    let mut out = Vec::new();
    for z in ZONES {
        out.push((z.to_string(), "spot".to_string(), (price * 0.6 * 10000.0).round() / 10000.0, true));
        out.push((z.to_string(), "on-demand".to_string(), price, true));
    }
    out
}

/// The `standard` catalogue: families c (2 GiB/vCPU), m (4 GiB/vCPU), r (8 GiB/vCPU) in amd64, and m-arm
/// (arm64), sizes 1..64 vCPU; plus a `g` family with one GPU per 8 vCPU. Spot and on-demand in three zones;
/// price 0.04/vCPU + 0.005/GiB (spot 60 %); overhead 100m CPU and 256Mi.
pub fn standard() -> Vec<InstanceType> {
    let mut out = Vec::new();
    for (family, gib_per_cpu, arch) in [("c", 2, "amd64"), ("m", 4, "amd64"), ("r", 8, "amd64"), ("m-arm", 4, "arm64")]
    {
        for cpu in [1i64, 2, 4, 8, 16, 32, 64] {
            let mem = cpu * gib_per_cpu;
            let price = 0.04 * cpu as f64 + 0.005 * mem as f64;
            out.push(build(&Spec {
                name: format!("{family}-{cpu}x"),
                family: family.to_string(),
                arch,
                cpu_milli: cpu * 1000,
                memory_mib: mem * 1024,
                pods: (cpu * 16).min(250),
                gpus: 0,
                offerings: offerings((price * 10000.0).round() / 10000.0),
                overhead_cpu_milli: 100,
                overhead_memory_mib: 256,
            }));
        }
    }
    for cpu in [8i64, 16] {
        let mem = cpu * 8;
        let price = 0.5 * (cpu / 8) as f64 + 0.04 * cpu as f64;
        out.push(build(&Spec {
            name: format!("g-{cpu}x"),
            family: "g".to_string(),
            arch: "amd64",
            cpu_milli: cpu * 1000,
            memory_mib: mem * 1024,
            pods: 110,
            gpus: cpu / 8,
            offerings: offerings(price),
            overhead_cpu_milli: 100,
            overhead_memory_mib: 256,
        }));
    }
    out
}

/// Upstream's benchmark catalogue: type k (1..=n): k vCPU, 2k GiB, 10k pods; price 0.1/vCPU + 0.1 per 10^9
/// bytes; spot in two zones and on-demand in three at the same price; overhead 100m / 10Mi.
pub fn benchmark(n: i64) -> Vec<InstanceType> {
    (1..=n)
        .map(|k| {
            let mem_bytes = k * 2 * 1024 * 1024 * 1024;
            let price = 0.1 * k as f64 + 0.1 * (mem_bytes as f64 / 1e9);
            let mut offerings = Vec::new();
            for z in &ZONES[..2] {
                offerings.push((z.to_string(), "spot".to_string(), price, true));
            }
            for z in ZONES {
                offerings.push((z.to_string(), "on-demand".to_string(), price, true));
            }
            let mut s = Spec {
                name: format!("fake-it-{k}"),
                family: "fake".into(),
                arch: "amd64",
                cpu_milli: k * 1000,
                memory_mib: k * 2 * 1024,
                pods: k * 10,
                gpus: 0,
                offerings,
                overhead_cpu_milli: 100,
                overhead_memory_mib: 10,
            };
            s.family = "fake".into();
            build(&s)
        })
        .collect()
}
