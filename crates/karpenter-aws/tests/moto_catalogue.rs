//! Consistency of the conversion over moto's whole EC2 catalogue (1,395 types, us-east-1 and us-west-2 offerings).
//! Needs moto (`KARPENTER_MOTO_VENV`, default `target/moto-venv`, created by `.ci/run`): fails when `CI=true` and it
//! is missing, otherwise skips with a note.

use std::collections::BTreeSet;
use std::path::Path;

use karpenter_aws::api::AmiFamily;
use karpenter_aws::ec2::InstanceTypeInfo;
use karpenter_aws::instancetype::{self, InstanceTypeContext, NodeClassSettings};
use karpenter_aws::labels as aws_labels;
use karpenter_aws::moto::{LocationType, MotoCatalogue};
use karpenter_aws::pricing::{PriceSource, PriceTable};
use karpenter_requirements::Operator;

fn catalogue() -> Option<MotoCatalogue> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    match MotoCatalogue::discover(&root) {
        Ok(c) => Some(c),
        Err(e) if std::env::var("CI").as_deref() == Ok("true") => panic!("CI=true and moto is missing: {e}"),
        Err(e) => {
            eprintln!("skipping: {e}");
            None
        }
    }
}

fn context(cat: &MotoCatalogue, region: &str, family: AmiFamily) -> InstanceTypeContext {
    InstanceTypeContext {
        region: region.into(),
        zones: cat.locations(region, LocationType::AvailabilityZone).expect("zone offerings"),
        node_class: NodeClassSettings { ami_family: family, ..Default::default() },
        prices: PriceSource::Estimate,
        ..Default::default()
    }
}

#[test]
fn every_type_converts_consistently() {
    let Some(cat) = catalogue() else { return };
    let infos = cat.instance_types().expect("catalogue loads");
    assert!(infos.len() >= 1300, "moto 5.2.5 ships 1,395 types, got {}", infos.len());
    let ctx = context(&cat, "us-east-1", AmiFamily::Al2023);
    let region_types = cat.locations("us-east-1", LocationType::Region).expect("region offerings");
    let mut converted = 0;
    for info in &infos {
        let Some(it) = ctx.instance_type(info) else {
            assert!(!instancetype::is_supported(info));
            continue;
        };
        converted += 1;
        let name = &info.instance_type;
        let vcpus = info.vcpu_info.default_vcpus.expect("supported types have vCPUs");
        let mib = info.memory_info.size_in_mib.expect("supported types have memory");
        assert_eq!(it.capacity().cpu().value(), Some(vcpus), "{name}");
        let mem = it.capacity().memory().value().expect("memory");
        assert!(mem > 0 && mem < mib << 20, "{name}: memory {mem}");
        let pods = it.capacity().pods().value().expect("pods");
        assert!(pods >= 2, "{name}: every EC2 type has at least one ENI with two addresses: {pods}");
        // Every allocatable figure is non-negative, and CPU and memory leave room for pods on every type.
        assert!(!it.allocatable().any_negative(), "{name}: {}", it.allocatable());
        assert!(it.allocatable().cpu().milli_value().is_some_and(|m| m > 0), "{name}");
        assert!(it.allocatable().memory().value().is_some_and(|m| m > 0), "{name}: {}", it.allocatable());
        // Every requirement is single-valued In or DoesNotExist, except zone, zone-id, capacity type, tenancy.
        let multi: BTreeSet<&str> = [
            "topology.kubernetes.io/zone",
            "topology.k8s.aws/zone-id",
            "karpenter.sh/capacity-type",
            aws_labels::INSTANCE_TENANCY,
        ]
        .into();
        for r in it.requirements.iter() {
            match r.operator() {
                Operator::In if multi.contains(r.key()) => {}
                Operator::In => assert_eq!(r.values().len(), 1, "{name}: {r}"),
                Operator::DoesNotExist => {}
                op => panic!("{name}: unexpected operator {op} in {r}"),
            }
        }
        for key in [
            aws_labels::INSTANCE_CATEGORY,
            aws_labels::INSTANCE_FAMILY,
            aws_labels::INSTANCE_GENERATION,
            aws_labels::INSTANCE_SIZE,
            aws_labels::INSTANCE_CPU,
            aws_labels::INSTANCE_MEMORY,
        ] {
            assert_eq!(it.requirements.get(key).operator(), Operator::In, "{name}: {key}");
        }
        // GPU labels and resources agree.
        let gpus: i64 = ["nvidia.com/gpu", "amd.com/gpu", "habana.ai/gaudi"]
            .iter()
            .filter_map(|r| it.capacity().get(r).and_then(|q| q.value()))
            .sum();
        let label_count = it.requirements.get(aws_labels::INSTANCE_GPU_COUNT);
        if label_count.operator() == Operator::In {
            assert_eq!(label_count.values()[0].parse::<i64>().ok(), Some(gpus), "{name}");
        }
        // Offerings: one per offered zone × usage class (on-demand, spot), all estimated and available
        // (a1 excepted: AL2023 has no a1 images).
        let zones = ctx.zones_of(name);
        let classes = info.supported_usage_classes.iter().filter(|u| *u == "on-demand" || *u == "spot").count();
        assert_eq!(it.offerings.len(), zones.len() * classes, "{name}");
        let a1 = name.starts_with("a1.");
        assert!(it.offerings.iter().all(|o| o.available != a1 && o.price.is_finite()), "{name}");
        if region_types.contains_key(name) {
            assert!(!zones.is_empty(), "{name} is offered in us-east-1 but in no zone");
        }
    }
    assert!(converted >= 1300, "converted {converted}");
}

#[test]
fn conversion_is_deterministic_and_region_independent_in_capacity() {
    let Some(cat) = catalogue() else { return };
    let infos: Vec<InstanceTypeInfo> = cat.instance_types_in("us-west-2").expect("us-west-2 types");
    assert!(infos.len() > 500, "{}", infos.len());
    let west = context(&cat, "us-west-2", AmiFamily::Bottlerocket);
    let a = west.instance_types(&infos);
    let b = west.instance_types(infos.iter().rev());
    assert_eq!(a.len(), b.len());
    let east = context(&cat, "us-east-1", AmiFamily::Bottlerocket);
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.name, y.name);
        assert_eq!(x.requirements, y.requirements);
        assert_eq!(x.offerings, y.offerings);
        assert_eq!(x.allocatable(), y.allocatable());
        let info = infos.iter().find(|i| i.instance_type == x.name).expect("info");
        let e = east.instance_type(info).expect("converts");
        assert_eq!(e.capacity(), x.capacity(), "{}", x.name);
        assert!(x.offerings.iter().all(|o| o.zone().is_some_and(|z| z.starts_with("us-west-2"))), "{}", x.name);
    }
}

#[test]
fn priced_catalogue_from_the_shared_price_snapshot() {
    let Some(cat) = catalogue() else { return };
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/aws/on-demand-prices.json");
    let Ok(file) = karpenter_aws::pricing::PriceFile::read(&path) else {
        eprintln!("skipping: no price snapshot at {}", path.display());
        return;
    };
    let table: PriceTable = file.region("us-east-1");
    let mut ctx = context(&cat, "us-east-1", AmiFamily::Al2023);
    ctx.prices = PriceSource::Table(table.clone());
    let its = ctx.instance_types(&cat.instance_types_in("us-east-1").expect("types"));
    let available_od = its
        .iter()
        .filter(|it| it.offerings.iter().any(|o| o.available && o.capacity_type() == Some("on-demand")))
        .count();
    assert!(available_od > 700, "most us-east-1 types have a published price: {available_od}");
    // No spot prices in the snapshot: no spot offering is available.
    assert!(
        its.iter().flat_map(|it| &it.offerings).filter(|o| o.capacity_type() == Some("spot")).all(|o| !o.available)
    );
    let m5 = its.iter().find(|it| it.name == "m5.large").expect("m5.large");
    assert!(m5.offerings.iter().any(|o| o.available && Some(o.price) == table.on_demand("m5.large")));
}
