//! Shared fixtures for the criterion benchmarks in `benches/benches/`: a realistic NodePool template, a pod's
//! requirements, and a catalogue of instance types with offerings ([`upstream`]: upstream Karpenter's
//! scheduling benchmark workload). Everything is deterministic.

pub mod disruption;
pub mod upstream;

use std::collections::BTreeSet;

use karpenter_requirements::{
    InstanceType, Offering, Operator, Overhead, Quantity, Requirement, Requirements, ResourceList,
};

/// Positional arguments of a bench binary (criterion's filter), without options and their values.
pub fn filters() -> Vec<String> {
    const WITH_VALUE: [&str; 16] = [
        "--warm-up-time",
        "--measurement-time",
        "--sample-size",
        "--nresamples",
        "--noise-threshold",
        "--confidence-level",
        "--significance-level",
        "--save-baseline",
        "--baseline",
        "--baseline-lenient",
        "--load-baseline",
        "--profile-time",
        "--output-format",
        "--color",
        "--format",
        "--plotting-backend",
    ];
    let mut out = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if WITH_VALUE.contains(&a.as_str()) {
            args.next();
        } else if !a.starts_with('-') {
            out.push(a);
        }
    }
    out
}

/// Whether criterion's filter (a regex) selects `id`, for the forms used in docs/benchmarks.md: alternatives
/// separated by `|`, each a substring, optionally anchored with `^` / `$`.
pub fn selected(id: &str) -> bool {
    let f = filters();
    f.is_empty()
        || f.iter().flat_map(|f| f.split('|')).any(|alt| {
            let (start, alt) = alt.strip_prefix('^').map_or((false, alt), |a| (true, a));
            let (end, alt) = alt.strip_suffix('$').map_or((false, alt), |a| (true, a));
            match (start, end) {
                (true, true) => id == alt,
                (true, false) => id.starts_with(alt),
                (false, true) => id.ends_with(alt),
                (false, false) => id.contains(alt),
            }
        })
}

/// Whether the bench should only print its report lines (one run per selected case, no criterion
/// measurement): `BENCH_REPORT_ONLY` (or `SCHEDULER_BENCH_REPORT_ONLY`) is set. This is the mode to run under
/// `valgrind --tool=callgrind` for instruction counts, which, unlike times, do not move with the machine's load.
pub fn report_only() -> bool {
    std::env::var_os("BENCH_REPORT_ONLY").is_some() || std::env::var_os("SCHEDULER_BENCH_REPORT_ONLY").is_some()
}

const ZONES: [&str; 3] = ["us-west-2a", "us-west-2b", "us-west-2c"];
const FAMILIES: [&str; 20] = [
    "c5", "c5a", "c5d", "c6a", "c6g", "c6i", "c7g", "c7i", "m5", "m5a", "m5d", "m6a", "m6g", "m6i", "m7g", "m7i", "r5",
    "r6g", "r6i", "r7i",
];
const SIZES: [(&str, i64); 7] =
    [("large", 2), ("xlarge", 4), ("2xlarge", 8), ("4xlarge", 16), ("8xlarge", 32), ("12xlarge", 48), ("16xlarge", 64)];

fn req(key: &str, op: Operator, values: &[&str]) -> Requirement {
    Requirement::new(key, op, values.iter().copied(), None).expect("fixture requirement is valid")
}

/// The well-known labels a pod may require without the NodePool defining them.
pub fn well_known_labels() -> BTreeSet<String> {
    [
        "karpenter.sh/nodepool",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "karpenter.sh/capacity-type",
        "node.kubernetes.io/windows-build",
        "karpenter.k8s.aws/instance-category",
        "karpenter.k8s.aws/instance-family",
        "karpenter.k8s.aws/instance-generation",
        "karpenter.k8s.aws/instance-size",
        "karpenter.k8s.aws/instance-cpu",
        "karpenter.k8s.aws/instance-memory",
        "karpenter.k8s.aws/capacity-reservation-id",
        "topology.k8s.aws/zone-id",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect()
}

/// A NodePool template's requirements (16 keys), as the scheduler builds them for a new NodeClaim.
pub fn nodepool_template() -> Requirements {
    [
        req("karpenter.sh/nodepool", Operator::In, &["default"]),
        req("karpenter.k8s.aws/ec2nodeclass", Operator::In, &["default"]),
        req("karpenter.sh/registered", Operator::In, &["true"]),
        req("karpenter.sh/initialized", Operator::In, &["true"]),
        req("kubernetes.io/hostname", Operator::In, &["hostname-placeholder-0001"]),
        req("karpenter.sh/capacity-type", Operator::In, &["spot", "on-demand"]),
        req("kubernetes.io/arch", Operator::In, &["amd64", "arm64"]),
        req("kubernetes.io/os", Operator::In, &["linux"]),
        req("topology.kubernetes.io/zone", Operator::In, &ZONES),
        req("karpenter.k8s.aws/instance-category", Operator::In, &["c", "m", "r"]),
        req("karpenter.k8s.aws/instance-generation", Operator::Gt, &["4"]),
        req("karpenter.k8s.aws/instance-cpu", Operator::Lte, &["64"]),
        req("karpenter.k8s.aws/instance-hypervisor", Operator::In, &["nitro"]),
        req("example.com/team", Operator::Exists, &[]),
        req("example.com/cost-center", Operator::In, &["ml", "web", "batch"]),
        req("example.com/gpu", Operator::DoesNotExist, &[]),
    ]
    .into_iter()
    .collect()
}

/// A pod's requirements (nodeSelector + node affinity), compatible with [`nodepool_template`].
pub fn pod_requirements() -> Requirements {
    [
        req("kubernetes.io/os", Operator::In, &["linux"]),
        req("kubernetes.io/arch", Operator::In, &["amd64"]),
        req("topology.kubernetes.io/zone", Operator::In, &["us-west-2a", "us-west-2b"]),
        req("karpenter.sh/capacity-type", Operator::In, &["spot"]),
        req("karpenter.k8s.aws/instance-category", Operator::NotIn, &["t"]),
        req("karpenter.k8s.aws/instance-cpu", Operator::Gt, &["3"]),
        req("example.com/team", Operator::In, &["ml"]),
        req("example.com/cost-center", Operator::In, &["ml"]),
        req("example.com/gpu", Operator::NotIn, &["true"]),
        req("node.kubernetes.io/instance-type", Operator::NotIn, &["c5.large", "m5.large"]),
    ]
    .into_iter()
    .collect()
}

/// `n` instance types (families × sizes, repeated with a numeric suffix beyond 140) with 3 zones × 2 capacity
/// types of offerings each, deterministic prices, and a few unavailable offerings.
pub fn instance_types(n: usize) -> Vec<InstanceType> {
    (0..n)
        .map(|i| {
            let family = FAMILIES[i % FAMILIES.len()];
            let (size, cpu) = SIZES[(i / FAMILIES.len()) % SIZES.len()];
            let round = i / (FAMILIES.len() * SIZES.len());
            let name = if round == 0 { format!("{family}.{size}") } else { format!("{family}{round}.{size}") };
            let arch = if family.contains('g') { "arm64" } else { "amd64" };
            let cpu_s = cpu.to_string();
            let mem_gib = cpu
                * if family.starts_with('c') {
                    2
                } else if family.starts_with('m') {
                    4
                } else {
                    8
                };
            let requirements: Requirements = [
                req("node.kubernetes.io/instance-type", Operator::In, &[&name]),
                req("kubernetes.io/arch", Operator::In, &[arch]),
                req("kubernetes.io/os", Operator::In, &["linux"]),
                req("topology.kubernetes.io/zone", Operator::In, &ZONES),
                req("karpenter.sh/capacity-type", Operator::In, &["spot", "on-demand"]),
                req("karpenter.k8s.aws/instance-category", Operator::In, &[&family[..1]]),
                req("karpenter.k8s.aws/instance-generation", Operator::In, &[&family[1..2]]),
                req("karpenter.k8s.aws/instance-cpu", Operator::In, &[&cpu_s]),
                req("karpenter.k8s.aws/instance-hypervisor", Operator::In, &["nitro"]),
                req("karpenter.k8s.aws/capacity-reservation-id", Operator::DoesNotExist, &[]),
            ]
            .into_iter()
            .collect();
            let base = 0.0125 * cpu as f64 * (1.0 + (i % 7) as f64 / 10.0);
            let mut offerings = Vec::new();
            for (z, zone) in ZONES.iter().enumerate() {
                for (ct, factor) in [("on-demand", 1.0), ("spot", 0.35 + z as f64 * 0.05)] {
                    let reqs: Requirements = [
                        req("topology.kubernetes.io/zone", Operator::In, &[zone]),
                        req("karpenter.sh/capacity-type", Operator::In, &[ct]),
                        req("karpenter.k8s.aws/capacity-reservation-id", Operator::DoesNotExist, &[]),
                    ]
                    .into_iter()
                    .collect();
                    let mut o = Offering::new(reqs, base * factor);
                    o.available = (i + z) % 11 != 0;
                    offerings.push(o);
                }
            }
            let capacity: ResourceList = [
                ("cpu", Quantity::from_int(cpu, karpenter_requirements::Format::DecimalSI)),
                ("memory", format!("{mem_gib}Gi").parse().expect("fixture quantity")),
                ("pods", Quantity::from_int(110, karpenter_requirements::Format::DecimalSI)),
                ("ephemeral-storage", "20Gi".parse().expect("fixture quantity")),
            ]
            .into_iter()
            .collect();
            let overhead = Overhead {
                kube_reserved: [("cpu", Quantity::from_milli(80)), ("memory", "893Mi".parse().expect("q"))]
                    .into_iter()
                    .collect(),
                system_reserved: ResourceList::new(),
                eviction_threshold: [("memory", "100Mi".parse().expect("q"))].into_iter().collect(),
            };
            InstanceType::new(name, requirements, offerings, capacity, overhead)
        })
        .collect()
}

/// A typical pod's requests.
pub fn pod_requests() -> ResourceList {
    [
        ("cpu", Quantity::from_milli(1500)),
        ("memory", "3Gi".parse().expect("q")),
        ("pods", Quantity::from_int(1, karpenter_requirements::Format::DecimalSI)),
        ("nvidia.com/gpu", Quantity::ZERO),
    ]
    .into_iter()
    .collect()
}
