use std::collections::BTreeMap;

use super::*;

fn buffer(yaml_spec: &str) -> CapacityBuffer {
    serde_saphyr::from_str(&format!(
        "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityBuffer\nmetadata: {{name: b, namespace: ns}}\nspec:\n{yaml_spec}"
    ))
    .unwrap()
}

fn template(cpu: &str, memory: &str) -> PodTemplateSpec {
    serde_json::from_value(serde_json::json!({
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
    }))
    .unwrap()
}

/// A PodTemplate `ns/tpl` (1 CPU, 1Gi) and a Deployment `ns/web` of 10 replicas (2 CPU, 1Gi).
struct Sources;

impl BufferSources for Sources {
    fn pod_template(&self, namespace: &str, name: &str) -> Option<(PodTemplateSpec, Option<i64>)> {
        (namespace == "ns" && name == "tpl").then(|| (template("1", "1Gi"), Some(3)))
    }
    fn scalable(&self, namespace: &str, kind: &str, name: &str) -> Option<Scalable> {
        (namespace == "ns" && kind == "Deployment" && name == "web")
            .then(|| Scalable { template: template("2", "1Gi"), replicas: 10 })
    }
}

fn count(spec: &str) -> Result<i32, Unresolved> {
    resolve(&buffer(spec), &Sources).map(|r| r.replicas)
}

#[test]
fn replicas_come_from_replicas_percentage_and_limits() {
    assert_eq!(count("  podTemplateRef: {name: tpl}\n  replicas: 3\n"), Ok(3));
    let web = "  scalableRef: {apiGroup: apps, kind: Deployment, name: web}\n";
    // 25 % of 10 = 2.5, rounded up.
    assert_eq!(count(&format!("{web}  percentage: 25\n")), Ok(3));
    // At least one.
    assert_eq!(count(&format!("{web}  percentage: 0\n")), Ok(1));
    // Both: the smaller wins.
    assert_eq!(count(&format!("{web}  percentage: 50\n  replicas: 2\n")), Ok(2));
    assert_eq!(count(&format!("{web}  percentage: 10\n  replicas: 4\n")), Ok(1));
    // Limits cap by total requests: 5 CPU / 2 CPU per chunk = 2.
    assert_eq!(count(&format!("{web}  replicas: 4\n  limits: {{cpu: '5'}}\n")), Ok(2));
    // Neither: as many as fit (memory is the tighter limit: 3Gi / 1Gi).
    assert_eq!(count("  podTemplateRef: {name: tpl}\n  limits: {cpu: '10', memory: 3Gi}\n"), Ok(3));
    // A limit on a resource the template does not request caps nothing.
    assert_eq!(count("  podTemplateRef: {name: tpl}\n  replicas: 4\n  limits: {nvidia.com/gpu: '1'}\n"), Ok(4));
}

#[test]
fn resolution_failures_carry_the_reason() {
    let reason = |spec: &str| count(spec).unwrap_err().reason();
    assert_eq!(reason("  podTemplateRef: {name: missing}\n  replicas: 1\n"), conditions::REASON_POD_TEMPLATE_NOT_FOUND);
    assert_eq!(
        reason("  scalableRef: {apiGroup: apps, kind: StatefulSet, name: web}\n  replicas: 1\n"),
        conditions::REASON_SCALABLE_REF_NOT_FOUND
    );
    assert_eq!(reason("  podTemplateRef: {name: tpl}\n"), conditions::REASON_RESOLUTION_FAILED);
    assert_eq!(
        reason("  podTemplateRef: {name: tpl}\n  limits: {nvidia.com/gpu: '1'}\n"),
        conditions::REASON_RESOLUTION_FAILED
    );
    assert_eq!(
        reason("  scalableRef: {apiGroup: example.com, kind: Deployment, name: web}\n  replicas: 1\n"),
        conditions::REASON_RESOLUTION_FAILED
    );
    let invalid = count("  podTemplateRef: {name: tpl}\n  percentage: 5\n").unwrap_err();
    assert!(invalid.to_string().contains("spec.percentage"), "{invalid}");
}

#[test]
fn resolved_status_names_the_template() {
    let r = resolve(&buffer("  podTemplateRef: {name: tpl}\n  replicas: 2\n"), &Sources);
    let (replicas, tref, status, reason, _) = resolution_status(&r);
    assert_eq!((replicas, tref.as_deref(), status, reason), (Some(2), Some("tpl"), ConditionStatus::True, "Resolved"));
    assert_eq!(r.unwrap().pod_template_generation, Some(3));
}

#[test]
fn validation_names_each_field() {
    let paths = |spec: &str| -> Vec<String> {
        buffer(spec)
            .validate(&ValidationContext::new(crate::test_vocabulary::aws()))
            .iter()
            .map(|v| v.path.clone())
            .collect()
    };
    assert_eq!(paths("  replicas: 1\n"), ["spec"]);
    assert_eq!(
        paths("  podTemplateRef: {name: a}\n  scalableRef: {kind: Job, name: b}\n  replicas: -1\n  limits: {cpu: x}\n"),
        ["spec", "spec.scalableRef.kind", "spec.replicas", "spec.limits[cpu]"]
    );
    assert!(paths("  scalableRef: {apiGroup: apps, kind: StatefulSet, name: b}\n  percentage: 20\n").is_empty());
}

fn ready(mut b: CapacityBuffer, replicas: i32) -> CapacityBuffer {
    let mut conds = Vec::new();
    crate::condition::set_condition(
        &mut conds,
        conditions::READY_FOR_PROVISIONING,
        ConditionStatus::True,
        conditions::REASON_RESOLVED,
        "",
        None,
        chrono::DateTime::UNIX_EPOCH,
    );
    b.status = Some(CapacityBufferStatus { replicas: Some(replicas), conditions: conds, ..Default::default() });
    b
}

#[test]
fn virtual_pods_carry_the_template_and_the_marks() {
    let b = ready(buffer("  podTemplateRef: {name: tpl}\n  replicas: 2\n"), 2);
    let pods = buffers_virtual_pods([&b], &Sources);
    assert_eq!(pods.len(), 2);
    let names: Vec<String> = pods.iter().map(CompactPod::key).collect();
    assert_eq!(names, ["ns/capacity-buffer-b-0", "ns/capacity-buffer-b-1"]);
    for p in &pods {
        assert!(is_virtual_pod(p));
        assert_eq!(buffer_of(p).as_deref(), Some("ns/b"));
        assert_eq!(p.spec.priority, Some(i32::MIN));
        assert_eq!(p.metadata.labels.as_ref().unwrap(), &BTreeMap::from([("app".to_owned(), "web".to_owned())]));
        assert!(p.node_name().is_none());
    }
    assert!(Arc::ptr_eq(&pods[0].spec, &pods[1].spec));
    // Not ready, another strategy or no status: no pods.
    let mut other = b.clone();
    other.spec.provisioning_strategy = Some("example.com/other".into());
    assert!(buffers_virtual_pods([&other], &Sources).is_empty());
    assert!(buffers_virtual_pods([&buffer("  podTemplateRef: {name: tpl}\n  replicas: 2\n")], &Sources).is_empty());
    // A buffer whose template went away contributes none.
    let gone = ready(buffer("  podTemplateRef: {name: missing}\n  replicas: 2\n"), 2);
    assert!(buffers_virtual_pods([&gone], &Sources).is_empty());
    let real = CompactPod::default();
    assert!(!is_virtual_pod(&real) && buffer_of(&real).is_none());
}
