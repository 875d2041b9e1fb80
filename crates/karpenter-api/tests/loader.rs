//! Manifest loading: multi-document YAML, JSON, lists, error locations, directory walks, unknown kinds.

use std::path::PathBuf;

use karpenter_api::loader::{self, DecodeError, LoadError, Object};
use karpenter_api::node_class_api::NodeClassApis;
use karpenter_api::{ProviderLabels, ValidationContext, load_paths, load_str};

/// The AWS label set as test data: the manifests here are upstream's, which name AWS keys.
#[path = "../src/test_vocabulary.rs"]
mod test_vocabulary;

const PODS: &str = r#"
# leading comment
---
apiVersion: v1
kind: Pod
metadata:
  name: a
  namespace: default
spec:
  containers:
    - name: c
      image: nginx
      resources:
        requests:
          cpu: 1
          memory: 1Gi
---
# only a comment
---
apiVersion: v1
kind: Node
metadata:
  name: n1
  labels:
    kubernetes.io/arch: amd64
"#;

#[test]
fn multi_document_yaml_skips_empty_documents() {
    let loaded = load_str(PODS, "pods.yaml").unwrap();
    assert_eq!(loaded.len(), 2);
    let Object::Pod(pod) = &loaded[0].object else { panic!("expected a Pod, got {:?}", loaded[0].object) };
    let requests = pod.spec.as_ref().unwrap().containers[0].resources.as_ref().unwrap().requests.as_ref().unwrap();
    // A YAML integer is accepted as a quantity.
    assert_eq!(requests["cpu"].0, "1");
    assert_eq!(loaded[0].origin.document, 0);
    assert_eq!(loaded[0].object.display_name(), "Pod/default/a");
    assert!(matches!(loaded[1].object, Object::Node(_)));
    // The comment-only document is not counted.
    assert_eq!(loaded[1].origin.document, 1);
    assert_eq!(loaded[1].origin.item, None);
    assert_eq!(loaded[1].describe(), "pods.yaml: document 1: Node/n1");
}

#[test]
fn json_list_and_single_object() {
    let list = r#"{"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}},
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "ds", "namespace": "kube-system"},
         "spec": {"selector": {"matchLabels": {"app": "x"}},
                  "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c"}]}}}}
    ]}"#;
    let loaded = load_str(list, "list.json").unwrap();
    assert_eq!(loaded.len(), 2);
    assert!(matches!(loaded[0].object, Object::Namespace(_)));
    assert!(matches!(loaded[1].object, Object::DaemonSet(_)));
    assert_eq!((loaded[1].origin.document, loaded[1].origin.item), (0, Some(1)));
    assert_eq!(loaded[1].origin.to_string(), "list.json: document 0 item 1");

    let single = r#"{"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "gp3"},
                    "provisioner": "ebs.csi.aws.com"}"#;
    let loaded = load_str(single, "sc.json").unwrap();
    assert_eq!(loaded.len(), 1);
    assert_eq!(loaded[0].object.kind(), "StorageClass");
    assert_eq!(loaded[0].object.api_version(), "storage.k8s.io/v1");
}

#[test]
fn yaml_list_items_keep_document_and_item_index() {
    let text = r#"
apiVersion: v1
kind: Namespace
metadata: {name: first}
---
apiVersion: v1
kind: List
items:
  - apiVersion: policy/v1
    kind: PodDisruptionBudget
    metadata: {name: pdb, namespace: default}
    spec: {maxUnavailable: 1, selector: {matchLabels: {app: web}}}
  - apiVersion: v1
    kind: PersistentVolumeClaim
    metadata: {name: data, namespace: default}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 10Gi}}}
"#;
    let loaded = load_str(text, "x.yaml").unwrap();
    let origins: Vec<(usize, Option<usize>, &str)> =
        loaded.iter().map(|l| (l.origin.document, l.origin.item, l.object.kind())).collect();
    assert_eq!(
        origins,
        vec![(0, None, "Namespace"), (1, Some(0), "PodDisruptionBudget"), (1, Some(1), "PersistentVolumeClaim")]
    );
}

#[test]
fn unknown_field_error_names_document_object_path_and_line() {
    let text = r#"apiVersion: v1
kind: Namespace
metadata: {name: ok}
---
apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
    - name: c
      imagee: nginx
"#;
    let err = load_str(text, "examples/x.yaml").unwrap_err();
    let LoadError::Decode(d) = &err else { panic!("unexpected {err:?}") };
    let DecodeError { origin, object, path, line, message } = d.as_ref();
    assert_eq!(origin.document, 1);
    assert_eq!(object.as_deref(), Some("Pod/web"));
    assert_eq!(path, "spec.containers[0]");
    assert_eq!(*line, Some(12));
    assert_eq!(message, "unknown field \"imagee\"");
    assert_eq!(
        err.to_string(),
        "examples/x.yaml: document 1: Pod/web: spec.containers[0]: unknown field \"imagee\" (line 12)"
    );
}

#[test]
fn type_error_names_the_field_path() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n    - name: c\n      ports:\n        - containerPort: eighty\n";
    let err = load_str(text, "p.yaml").unwrap_err();
    let LoadError::Decode(d) = &err else { panic!("unexpected {err:?}") };
    let DecodeError { path, line, .. } = d.as_ref();
    assert_eq!(path, "spec.containers[0].ports[0].containerPort");
    assert_eq!(*line, Some(9));
}

#[test]
fn bad_yaml_syntax_names_file_and_line() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: [unclosed\n  other: x\n";
    let err = load_str(text, "broken.yaml").unwrap_err();
    let LoadError::Syntax { file, line, .. } = &err else { panic!("unexpected {err:?}") };
    assert_eq!(file, "broken.yaml");
    assert!(line.is_some_and(|l| l >= 4), "line {line:?}");
    let shown = err.to_string();
    assert!(shown.starts_with("broken.yaml: "), "{shown}");
    assert!(shown.contains("line"), "{shown}");
}

#[test]
fn bad_json_syntax_names_file_and_line() {
    let err = load_str("{\n  \"kind\": \"Pod\",\n  oops\n}", "x.json").unwrap_err();
    let LoadError::Syntax { line, .. } = &err else { panic!("unexpected {err:?}") };
    assert_eq!(*line, Some(3));
}

#[test]
fn documents_that_are_not_objects_are_errors() {
    let err = load_str("just a string\n", "s.yaml").unwrap_err();
    assert!(err.to_string().contains("expected a Kubernetes object"), "{err}");
    let err = load_str("metadata: {name: x}\n", "s.yaml").unwrap_err();
    assert!(err.to_string().contains("missing or empty apiVersion"), "{err}");
    let err = load_str("apiVersion: v1\nmetadata: {name: x}\n", "s.yaml").unwrap_err();
    assert!(err.to_string().contains("missing or empty kind"), "{err}");
}

#[test]
fn unknown_kinds_load_as_unknown_and_only_karpenter_groups_fail_validation() {
    let text = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: cm, namespace: default}
data: {a: b}
---
apiVersion: karpenter.sh/v1
kind: NodePoll
metadata: {name: typo}
---
apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata: {name: old}
"#;
    let loaded = load_str(text, "u.yaml").unwrap();
    assert_eq!(loaded.len(), 3);
    let ctx = ValidationContext::new(test_vocabulary::aws());
    let Object::Unknown(cm) = &loaded[0].object else { panic!() };
    assert_eq!(cm.kind, "ConfigMap");
    assert_eq!(loaded[0].object.display_name(), "ConfigMap/default/cm");
    assert!(!loaded[0].object.is_karpenter());
    assert!(loaded[0].object.validate(&ctx).is_none());

    let typo = loaded[1].object.validate(&ctx).expect("karpenter group is validated");
    assert!(typo.has_path("kind"), "{typo:?}");
    let old = loaded[2].object.validate(&ctx).expect("karpenter group is validated");
    assert!(old.has_path("apiVersion"), "{old:?}");
    assert!(old.iter().any(|v| v.message.contains("karpenter.sh/v1\"")), "{old:?}");
}

#[test]
fn load_str_all_keeps_good_documents_next_to_bad_ones() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containerz: [x]}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: b}\n";
    let (loaded, errors) = loader::load_str_all(text, "m.yaml");
    assert_eq!(loaded.len(), 1);
    assert_eq!(loaded[0].origin.document, 1);
    assert_eq!(errors.len(), 1);
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("karpenter-api-loader-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn directories_are_walked_in_order_reading_only_manifest_extensions() {
    let tmp = TempDir::new("walk");
    let ns = |name: &str| format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}}}\n");
    std::fs::create_dir_all(tmp.0.join("sub")).unwrap();
    std::fs::write(tmp.0.join("b.yaml"), ns("b")).unwrap();
    std::fs::write(tmp.0.join("a.yml"), ns("a")).unwrap();
    std::fs::write(tmp.0.join("sub/c.json"), r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"c"}}"#)
        .unwrap();
    std::fs::write(tmp.0.join("README.md"), "not: [yaml").unwrap();
    std::fs::write(tmp.0.join("notes.txt"), "garbage: {").unwrap();
    let explicit = tmp.0.join("explicit.txt");
    std::fs::write(&explicit, ns("explicit")).unwrap();

    let (loaded, errors) = load_paths([&tmp.0]);
    assert!(errors.is_empty(), "{errors:?}");
    let names: Vec<&str> = loaded.iter().filter_map(|l| l.object.name()).collect();
    assert_eq!(names, vec!["a", "b", "c"]);

    // A file named explicitly is read whatever its extension.
    let (loaded, errors) = load_paths([&explicit]);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(loaded.len(), 1);
    assert_eq!(loaded[0].origin.file, explicit.display().to_string());

    let (_, errors) = load_paths([tmp.0.join("missing.yaml")]);
    assert!(matches!(errors.as_slice(), [LoadError::Io { .. }]), "{errors:?}");
}

const KARPENTER: &str = r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
      requirements:
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["spot", "on-demand"]
      expireAfter: 720h
  limits:
    cpu: 1000
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 1m
---
apiVersion: example.com/v1
kind: TestNodeClass
metadata:
  name: default
spec:
  zone: zone-a
---
apiVersion: example.com/v1
kind: TestNodeClass
metadata:
  name: other
spec: {}
"#;

/// A provider's node class, written here as a new cloud would write its own: the loader and validation know it
/// only through the [`NodeClassApis`] they are given, nothing in karpenter-api names it.
mod test_node_class {
    use karpenter_api::crd::KarpenterCrd;
    use karpenter_api::node_class_api::TypedNodeClassApi;
    use karpenter_api::{Validate, ValidationContext, Violations};
    use kube::CustomResource;
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    #[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
    #[kube(group = "example.com", version = "v1", kind = "TestNodeClass", plural = "testnodeclasses")]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    pub struct TestNodeClassSpec {
        #[serde(default)]
        pub zone: String,
    }

    impl Validate for TestNodeClass {
        fn validate(&self, _ctx: &ValidationContext) -> Violations {
            let mut v = Violations::new();
            if self.spec.zone.is_empty() {
                v.push("spec.zone", "required");
            }
            v
        }
    }

    impl KarpenterCrd for TestNodeClass {}

    pub static API: TypedNodeClassApi<TestNodeClass> = TypedNodeClassApi::new();
}

#[test]
fn karpenter_kinds_load_and_validate() {
    let loaded = load_str(KARPENTER, "karpenter.yaml").unwrap();
    let kinds: Vec<&str> = loaded.iter().map(|l| l.object.kind()).collect();
    assert_eq!(kinds, ["NodePool", "TestNodeClass", "TestNodeClass"]);
    let Object::NodePool(pool) = &loaded[0].object else { panic!() };
    assert_eq!(pool.spec.template.spec.requirements.len(), 1);
    let ctx = ValidationContext::new(test_vocabulary::aws());
    let violations = loaded[0].object.validate(&ctx).expect("karpenter kinds are validated");
    assert!(violations.is_empty(), "{violations:?}");
    // Without its API a node class is a foreign object: loaded as it is, not validated.
    assert!(!loaded[1].object.is_karpenter() && loaded[1].object.validate(&ctx).is_none());
    let Object::Unknown(class) = &loaded[1].object else { panic!("{:?}", loaded[1].object) };
    let typed: test_node_class::TestNodeClass = class.decode().expect("its kind").expect("decodes");
    assert_eq!(typed.spec.zone, "zone-a");
    // With it, the node class is Karpenter's and validated through the API.
    let apis = NodeClassApis::none().with(&test_node_class::API);
    assert!(loaded[1].object.is_karpenter_in(&apis));
    assert!(loaded[1].object.validate_with(&ctx, &apis).expect("validated").is_empty());
    let missing = loaded[2].object.validate_with(&ctx, &apis).expect("validated");
    assert!(missing.has_path("spec.zone"), "{missing:?}");
}

#[test]
fn node_classes_are_validated_through_their_api() {
    let ctx = ValidationContext::new(test_vocabulary::aws());
    let apis = NodeClassApis::none().with(&test_node_class::API);
    let text = "apiVersion: example.com/v1\nkind: TestNodeClass\nmetadata: {name: a}\nspec: {zone: z, zones: [z]}\n\
                ---\napiVersion: example.com/v2\nkind: TestNodeClass\nmetadata: {name: b}\n\
                ---\napiVersion: example.com/v1\nkind: TestNodeClas\nmetadata: {name: c}\n";
    let loaded = load_str(text, "classes.yaml").expect("node classes load as they are");
    // A field the type does not know is the API's violation (the loader does not know the type).
    let unknown = loaded[0].object.validate_with(&ctx, &apis).expect("validated");
    assert!(unknown.iter().any(|v| v.message.contains("zones")), "{unknown:?}");
    // Another version or a misspelt kind in a node-class group is a mistake, as in karpenter.sh.
    let version = loaded[1].object.validate_with(&ctx, &apis).expect("group is a node class's");
    assert!(version.iter().any(|v| v.path == "apiVersion" && v.message.contains("example.com/v1")), "{version:?}");
    let kind = loaded[2].object.validate_with(&ctx, &apis).expect("group is a node class's");
    assert!(kind.iter().any(|v| v.path == "kind" && v.message.contains("TestNodeClass")), "{kind:?}");
    // Without the API, the same objects are foreign.
    assert!(loaded.iter().all(|l| l.object.validate(&ctx).is_none()));
}

#[test]
fn misspelt_karpenter_field_names_document_pool_and_path() {
    let text = KARPENTER.replace("          operator: In", "          operater: In");
    let (loaded, errors) = loader::load_str_all(&text, "examples/x.yaml");
    assert_eq!(loaded.len(), 2, "the other documents still load");
    let [err] = errors.as_slice() else { panic!("{errors:?}") };
    let LoadError::Decode(d) = err else { panic!("{err:?}") };
    let DecodeError { origin, object, path, line, message } = d.as_ref();
    assert_eq!(origin.document, 0);
    assert_eq!(object.as_deref(), Some("NodePool/default"));
    assert_eq!(path, "spec.template.spec.requirements[0]");
    assert_eq!(*line, Some(14));
    assert!(message.starts_with("unknown field \"operater\""), "{message}");
    assert!(
        err.to_string().starts_with(
            "examples/x.yaml: document 0: NodePool/default: spec.template.spec.requirements[0]: unknown field \"operater\""
        ),
        "{err}"
    );
}

#[test]
fn invalid_karpenter_objects_report_violations() {
    let text = KARPENTER.replace("values: [\"spot\", \"on-demand\"]", "values: []");
    let loaded = load_str(&text, "x.yaml").unwrap();
    let violations = loaded[0].object.validate(&ValidationContext::new(test_vocabulary::aws())).unwrap();
    assert!(violations.iter().any(|v| v.path.starts_with("spec.template.spec.requirements[0]")), "{violations:?}");
}

#[test]
fn yaml_1_2_scalars_stay_strings() {
    let text = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: n\n  labels: {a: yes, b: 'on', c: '0755'}\n";
    let loaded = load_str(text, "ns.yaml").unwrap();
    assert_eq!(loaded[0].object.name(), Some("n"));
    let Object::Namespace(ns) = &loaded[0].object else { panic!() };
    assert_eq!(ns.metadata.labels.as_ref().unwrap()["a"], "yes");
}

#[test]
fn numbers_in_string_fields_fail_on_the_field() {
    // As with the API server, a YAML integer is not a string.
    let text = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n  labels: {a: 1}\n";
    let err = load_str(text, "ns.yaml").unwrap_err();
    let LoadError::Decode(d) = &err else { panic!("{err:?}") };
    let DecodeError { path, line, .. } = d.as_ref();
    assert_eq!(path, "metadata.labels.a");
    assert_eq!(*line, Some(5));
}

#[test]
fn deeply_nested_input_is_an_error_not_a_crash() {
    let yaml = format!("a: {}{}\n", "[".repeat(500), "]".repeat(500));
    assert!(matches!(load_str(&yaml, "deep.yaml"), Err(LoadError::Syntax { .. })));
    let json = format!("{}{}", "[".repeat(500), "]".repeat(500));
    assert!(matches!(load_str(&json, "deep.json"), Err(LoadError::Syntax { .. })));
}

/// `kubectl get pods -A -o yaml` of a large cluster is one huge List document, and generated manifests can be
/// thousands of documents: both are past serde-saphyr's default budget (1,024 documents, 250,000 nodes).
#[test]
fn large_inputs_are_not_refused() {
    let mut many = String::new();
    for i in 0..2_000 {
        many.push_str(&format!("---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: ns-{i}}}\n"));
    }
    let objects = load_str(&many, "many.yaml").unwrap();
    assert_eq!(objects.len(), 2_000);

    // One document of more than 250,000 nodes (a key and a value per entry).
    let mut big = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big, namespace: default}\ndata:\n");
    for i in 0..130_000 {
        big.push_str(&format!("  k{i}: v\n"));
    }
    let objects = load_str(&big, "big.yaml").unwrap();
    assert_eq!(objects.len(), 1);
    // Duplicate keys are still caught in big maps (checked through a set past 32 entries).
    big.push_str("  k77: again\n");
    let err = load_str(&big, "big.yaml").unwrap_err().to_string();
    assert!(err.contains("duplicate") && err.contains("k77"), "{err}");
}
