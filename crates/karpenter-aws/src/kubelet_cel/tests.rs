use std::collections::BTreeMap;

use crate::api::{KubeletConfiguration, MaxPods};

use super::*;

fn vars(max_pods: i64) -> Variables {
    Variables {
        vcpus: 4,
        memory_mib: 16_384,
        default_enis: 3,
        ips_per_eni: 10,
        max_pods,
        instance_type: "m5.xlarge".into(),
    }
}

fn kubelet(max_pods: Option<&str>, kube: &[(&str, &str)], system: &[(&str, &str)]) -> KubeletConfiguration {
    let map = |kv: &[(&str, &str)]| kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>();
    KubeletConfiguration {
        max_pods: max_pods.map(|e| MaxPods::Expression(e.into())),
        kube_reserved: map(kube),
        system_reserved: map(system),
        ..Default::default()
    }
}

fn max_pods_of(expr: &str) -> Result<Option<i64>, KubeletExpressionError> {
    KubeletExpressions::compile(&kubelet(Some(expr), &[], &[]))?.max_pods(&vars(58))
}

#[test]
fn max_pods_sees_every_variable() {
    assert_eq!(max_pods_of("min(max_pods, 50)").unwrap(), Some(50));
    assert_eq!(max_pods_of("max_pods").unwrap(), Some(58));
    assert_eq!(max_pods_of("vcpus * 10 + default_enis * ips_per_eni").unwrap(), Some(70));
    assert_eq!(max_pods_of("memory_mib / 1024").unwrap(), Some(16));
    assert_eq!(max_pods_of("instance_type.startsWith('m5') ? 20 : 30").unwrap(), Some(20));
    assert_eq!(max_pods_of("instance_type == 'c5.large' ? 20 : 30").unwrap(), Some(30));
}

#[test]
fn doubles_truncate_and_non_finite_values_fail() {
    assert_eq!(max_pods_of("double(vcpus) * 2.9").unwrap(), Some(11));
    assert_eq!(max_pods_of("max(vcpus, 7.9)").unwrap(), Some(7), "int and double give a double");
    assert_eq!(max_pods_of("min(2.5, vcpus)").unwrap(), Some(2));
    assert_eq!(max_pods_of("max(1.5, 2.5)").unwrap(), Some(2));
    for bad in ["double(vcpus) / 0.0", "-double(vcpus) / 0.0", "0.0 / 0.0", "max(0.0 / 0.0, 1)"] {
        let e = max_pods_of(bad).unwrap_err();
        assert!(
            matches!(&e, KubeletExpressionError::Evaluation { instance_type, .. } if instance_type == "m5.xlarge"),
            "{bad}: {e}"
        );
        assert!(e.to_string().contains("finite"), "{bad}: {e}");
    }
}

#[test]
fn max_pods_must_be_an_int32_count() {
    assert!(max_pods_of("2147483647").unwrap().is_some());
    for bad in ["2147483648", "0 - 1", "'twenty'", "vcpus > 2"] {
        let e = max_pods_of(bad).unwrap_err();
        assert!(matches!(e, KubeletExpressionError::Evaluation { .. }), "{bad}: {e}");
        assert!(e.to_string().contains(bad), "the message names the expression: {e}");
    }
}

#[test]
fn compile_errors_name_the_field_and_the_problem() {
    let cases = [
        (kubelet(Some("min(max_pods,"), &[], &[]), "maxPods", "min(max_pods,"),
        (kubelet(None, &[("memory", "vcpu * 2")], &[]), "kubeReserved[memory]", "undeclared variable \"vcpu\""),
        (kubelet(None, &[], &[("cpu", "floor(vcpus)")]), "systemReserved[cpu]", "unknown function \"floor\""),
    ];
    for (k, field, text) in cases {
        let e = KubeletExpressions::compile(&k).unwrap_err();
        assert!(matches!(e, KubeletExpressionError::Invalid { .. }), "{e}");
        let msg = e.to_string();
        assert!(msg.contains(field) && msg.contains(text), "{msg}");
    }
}

#[test]
fn reserved_values_are_read_in_their_keys_units() {
    let k = kubelet(
        Some("20"),
        &[("cpu", "vcpus * 3"), ("memory", "11 * max_pods + 255"), ("pid", "max_pods * 100")],
        &[("ephemeral-storage", "vcpus / 2"), ("memory", "100"), ("cpu", "100m")],
    );
    let e = KubeletExpressions::compile(&k).unwrap();
    let r = e.reserved(&vars(20)).unwrap();
    // 12m → 20m; 475 MiB → 480 MiB (16 Mi steps); the quantity `100m` is not an expression.
    assert_eq!(r.kube_reserved.get("cpu"), Some(&Quantity::from_milli(20)));
    assert_eq!(r.kube_reserved.get("memory"), Some(&Quantity::from_int(480 * MIB, Format::BinarySI)));
    assert_eq!(r.kube_reserved.get("pid"), Some(&Quantity::from_int(2000, Format::DecimalSI)));
    assert_eq!(r.system_reserved.get("ephemeral-storage"), Some(&Quantity::from_int(2 * GIB, Format::BinarySI)));
    assert_eq!(r.system_reserved.get("memory"), None, "`100` is a quantity (bytes), not an expression");
    assert_eq!(r.system_reserved.get("cpu"), None);
    assert_eq!(e.max_pods(&vars(58)).unwrap(), Some(20));
}

#[test]
fn reserved_rounding_and_bounds() {
    assert_eq!(reserved_quantity("cpu", 0).unwrap(), Quantity::from_milli(0));
    assert_eq!(reserved_quantity("cpu", 10).unwrap(), Quantity::from_milli(10));
    assert_eq!(reserved_quantity("cpu", 11).unwrap(), Quantity::from_milli(20));
    assert_eq!(reserved_quantity("memory", 16).unwrap(), Quantity::from_int(16 * MIB, Format::BinarySI));
    assert_eq!(reserved_quantity("memory", 17).unwrap(), Quantity::from_int(32 * MIB, Format::BinarySI));
    assert!(reserved_quantity("memory", -1).unwrap_err().contains("negative"));
    assert!(reserved_quantity("memory", i64::MAX).unwrap_err().contains("too large"));
    let e = KubeletExpressions::compile(&kubelet(None, &[("cpu", "100 - vcpus * 100")], &[])).unwrap();
    let err = e.reserved(&vars(20)).unwrap_err().to_string();
    assert!(err.contains("kubeReserved[cpu]") && err.contains("-300 is negative"), "{err}");
}

#[test]
fn programs_are_compiled_once() {
    let source = "vcpus * 7 + 3";
    let a = program(source).unwrap();
    let b = program(source).unwrap();
    assert!(Arc::ptr_eq(&a, &b), "the second compile comes from the cache");
}

#[test]
fn no_expressions_compile_to_an_empty_set() {
    let mut k = kubelet(None, &[("cpu", "100m")], &[("memory", "1Gi")]);
    k.max_pods = Some(MaxPods::Static(30));
    let e = KubeletExpressions::compile(&k).unwrap();
    assert!(e.is_empty());
    assert_eq!(e.max_pods(&vars(58)).unwrap(), None);
    assert_eq!(e.reserved(&vars(58)).unwrap(), ResolvedReserved::default());
}
