//! Runs `karpenter-controller simulate`: snapshots of the bundled examples (table and JSON), bad input, a custom
//! catalogue, node-class notes, existing nodes, `kubectl get -o yaml` List input.
//!
//! Snapshots live in `tests/snapshots/`; `UPDATE_SNAPSHOTS=1 cargo test -p karpenter-controller --test simulate`
//! rewrites them (review the diff before committing).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs the binary in the workspace root (so relative example paths in the output are stable).
fn run(args: &[&str]) -> (i32, String, String) {
    let Output { status, stdout, stderr } = Command::new(env!("CARGO_BIN_EXE_karpenter-controller"))
        .current_dir(workspace_root())
        .args(args)
        .output()
        .expect("running karpenter-controller");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

fn simulate_ok(args: &[&str]) -> String {
    simulate_with_notes(args).0
}

/// (stdout, stderr) of a successful run: stderr holds only notes and warnings.
fn simulate_with_notes(args: &[&str]) -> (String, String) {
    let mut all = vec!["simulate"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = run(&all);
    assert_eq!(code, 0, "simulate {args:?} failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.lines().all(|l| l.starts_with("note: ") || l.starts_with("warning: ")), "{stderr}");
    (stdout, stderr)
}

fn simulate_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--output", "json"]);
    let stdout = simulate_ok(&all);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}"))
}

fn check_snapshot(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots").join(name);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().expect("snapshot dir")).expect("creating snapshot dir");
        std::fs::write(&path, actual).expect("writing snapshot");
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_SNAPSHOTS=1 to create it)", path.display()));
    assert!(
        expected == actual,
        "{} differs from the output (UPDATE_SNAPSHOTS=1 rewrites it)\n--- expected\n{expected}\n--- actual\n{actual}",
        path.display()
    );
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("karpenter-controller-simulate-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("creating temp dir");
        TempDir(dir)
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("writing temp file");
        path.display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn bundled_example_table_snapshot() {
    check_snapshot("bundled.txt", &simulate_ok(&[]));
}

#[test]
fn bundled_example_json_snapshot() {
    let stdout = simulate_ok(&["-o", "json"]);
    check_snapshot("bundled.json", &stdout);
    let doc: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(doc["apiVersion"], "karpenter-rs.simulate/v1");
    assert_eq!(doc["decisions"]["apiVersion"], "karpenter-rs.scheduler/v1");
    assert_eq!(doc["bundledExample"], true);
    assert_eq!(doc["summary"]["pendingPods"], 10);
    assert_eq!(doc["summary"]["podsOnNewNodes"], 10);
    assert_eq!(doc["summary"]["unschedulablePods"], 0);
    // Every new node names the offering and the pods, and its price sums into the summary.
    let nodes = doc["newNodes"].as_array().expect("newNodes");
    assert!(!nodes.is_empty());
    let mut total = 0.0;
    for n in nodes {
        assert!(n["instanceType"].as_str().is_some_and(|t| t.ends_with("-linux")), "{n}");
        assert!(n["zone"].as_str().is_some_and(|z| z.starts_with("test-zone-")), "{n}");
        assert!(n["instanceTypeOptions"].as_u64().is_some_and(|c| c > 0), "{n}");
        total += n["price"].as_f64().expect("price");
    }
    let summary_total = doc["summary"]["newNodesPricePerHour"].as_f64().expect("total");
    assert!((total - summary_total).abs() < 1e-6, "{total} vs {summary_total}");
}

#[test]
fn inflate_100_table_and_json_snapshots() {
    let path = "examples/simulate/inflate-100.yaml";
    check_snapshot("inflate-100.txt", &simulate_ok(&[path]));
    let json = simulate_ok(&[path, "--output", "json"]);
    check_snapshot("inflate-100.json", &json);
    let doc: Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(doc["summary"]["pendingPods"], 100);
    assert_eq!(doc["summary"]["podsOnNewNodes"], 100);
    let pods: usize =
        doc["newNodes"].as_array().expect("newNodes").iter().map(|n| n["pods"].as_array().map_or(0, Vec::len)).sum();
    assert_eq!(pods, 100, "full pod names in JSON");
}

#[test]
fn bundled_example_runs_without_arguments_and_notes_the_missing_node_class() {
    let (table, notes) = simulate_with_notes(&[]);
    assert!(table.starts_with("Input: examples/simulate/default.yaml (the bundled example"), "{table}");
    // Standard input is empty here (`Command::output`): the bundled example runs, and standard error says so.
    assert_eq!(
        notes,
        "note: no input given and standard input is empty; simulating the bundled example \
         examples/simulate/default.yaml\n\
         note: KWOKNodeClass/default (karpenter.kwok.sh) is not in the input: treated as ready (NodePool default)\n"
    );
    assert!(table.contains("inflate x"), "{table}");
    assert!(table.contains("Summary: 10 pending pods: 10 on "), "{table}");
    // The bundled example is the file in examples/ (include_str!), loaded from disk it gives the same answer.
    let from_file = simulate_json(&["examples/simulate/default.yaml"]);
    let bundled = simulate_json(&[]);
    assert_eq!(from_file["decisions"], bundled["decisions"]);
    assert_eq!(from_file["newNodes"], bundled["newNodes"]);
}

const POOL: &str = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
        - {key: kubernetes.io/os, operator: In, values: [linux]}
";

fn pod(name: &str, cpu: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\n\
         spec: {{containers: [{{name: c, image: pause, resources: {{requests: {{cpu: \"{cpu}\"}}}}}}]}}\n"
    )
}

#[test]
fn present_node_class_gives_no_note_and_a_not_ready_one_leaves_the_pool_out() {
    let tmp = TempDir::new("classes");
    let ready = tmp.write(
        "ready.yaml",
        &format!(
            "{POOL}---\napiVersion: karpenter.kwok.sh/v1alpha1\nkind: KWOKNodeClass\nmetadata: {{name: default}}\nspec: {{}}\n---\n{}",
            pod("web", "1")
        ),
    );
    let doc = simulate_json(&[&ready]);
    assert_eq!(doc["notes"], Value::Array(vec![]), "{doc}");
    assert_eq!(doc["summary"]["podsOnNewNodes"], 1);

    let not_ready = tmp.write(
        "not-ready.yaml",
        &format!(
            "{POOL}---\napiVersion: karpenter.kwok.sh/v1alpha1\nkind: KWOKNodeClass\nmetadata: {{name: default}}\nspec: {{}}\n\
             status: {{conditions: [{{type: Ready, status: 'False', reason: Testing, lastTransitionTime: '2026-01-01T00:00:00Z'}}]}}\n---\n{}",
            pod("web", "1")
        ),
    );
    let (table, notes) = simulate_with_notes(&[&not_ready]);
    assert!(
        notes
            .contains("note: NodePool default left out: its KWOKNodeClass/default is not ready (Ready=False, Testing)"),
        "{notes}"
    );
    assert!(table.contains("Unschedulable pods: 1\n"), "{table}");
    assert!(
        table.contains("Summary: 1 pending pod: 0 on 0 new nodes, 0 on existing nodes, 1 unschedulable."),
        "{table}"
    );
}

#[test]
fn instance_types_file_replaces_the_catalogue() {
    let doc = simulate_json(&["--instance-types", "examples/simulate/instance-types.json"]);
    assert_eq!(doc["catalogue"]["source"], "file examples/simulate/instance-types.json");
    assert_eq!(doc["catalogue"]["instanceTypes"], 2);
    for n in doc["newNodes"].as_array().expect("newNodes") {
        let it = n["instanceType"].as_str().expect("instance type");
        assert!(it == "small-2x" || it == "large-8x", "{n}");
    }

    // One pod of 1 CPU: both types fit; the unavailable 0.015 spot offering is skipped, the 0.02 one picked.
    let tmp = TempDir::new("catalogue");
    let file = tmp.write("one.yaml", &format!("{POOL}---\n{}", pod("web", "1")));
    let doc = simulate_json(&[&file, "--instance-types", "examples/simulate/instance-types.json"]);
    let node = &doc["newNodes"][0];
    assert_eq!(node["instanceType"], "small-2x", "{doc}");
    assert_eq!(node["zone"], "zone-a");
    assert_eq!(node["capacityType"], "spot");
    assert_eq!(node["price"], 0.02);
    assert_eq!(node["instanceTypeOptions"], 2);
    assert_eq!(doc["summary"]["newNodesPricePerHour"], 0.02);

    // A pod larger than every type: unschedulable, with the scheduler's reason.
    let big = tmp.write("big.yaml", &format!("{POOL}---\n{}", pod("huge", "64")));
    let table = simulate_ok(&[&big, "--instance-types", "examples/simulate/instance-types.json"]);
    assert!(table.contains("Unschedulable pods: 1\nPODS  REASON\nhuge  "), "{table}");
    assert!(table.contains("New nodes: none"), "{table}");
}

#[test]
fn bad_instance_types_file_is_an_error_naming_the_file() {
    let tmp = TempDir::new("bad-catalogue");
    let file = tmp.write("types.json", "[{\"name\": \"x\"}]");
    let (code, stdout, stderr) = run(&["simulate", "--instance-types", &file]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stderr.contains(&file), "{stderr}");
    assert!(stderr.contains("entry 0"), "{stderr}");
    let (code, _, stderr) = run(&["simulate", "--instance-types", "/nonexistent/types.json"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("/nonexistent/types.json"), "{stderr}");
}

#[test]
fn bad_manifests_are_errors_naming_file_document_and_field() {
    let tmp = TempDir::new("bad");
    let invalid =
        tmp.write("pools.yaml", &format!("{}---\n{}", pod("web", "1"), POOL.replace("values: [linux]", "values: []")));
    let typo = tmp.write("typo.yaml", &POOL.replace("operator: In", "operater: In"));
    let (code, stdout, stderr) = run(&["simulate", &tmp.0.display().to_string()]);
    assert_eq!(code, 1, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.is_empty(), "nothing is simulated:\n{stdout}");
    let violation = format!("{invalid}: document 1: NodePool/default: spec.template.spec.requirements[0].values: ");
    assert!(stderr.lines().any(|l| l.starts_with(&violation)), "missing {violation:?} in\n{stderr}");
    let load_error =
        format!("{typo}: document 0: NodePool/default: spec.template.spec.requirements[0]: unknown field \"operater\"");
    assert!(stderr.lines().any(|l| l.starts_with(&load_error)), "missing {load_error:?} in\n{stderr}");
    assert!(stderr.ends_with("error: 2 problems in the input; nothing was simulated\n"), "{stderr}");

    let (code, _, stderr) = run(&["simulate", "/nonexistent/cluster.yaml"]);
    assert_eq!(code, 1);
    assert!(stderr.starts_with("/nonexistent/cluster.yaml: "), "{stderr}");
}

#[test]
fn existing_nodes_are_priced_and_receive_pods_first() {
    let tmp = TempDir::new("existing");
    // node-b is cordoned, so the pending pod can only go to node-a.
    let node = |name: &str, labels: &str| {
        let cordoned = if name == "node-b" { "spec: {unschedulable: true}\n" } else { "" };
        format!(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels: {{{labels}}}\n{cordoned}\
             status: {{allocatable: {{cpu: '8', memory: 16Gi, pods: '110'}}, capacity: {{cpu: '8', memory: 16Gi, pods: '110'}}}}\n"
        )
    };
    let bound = "apiVersion: v1\nkind: Pod\nmetadata: {name: db, namespace: default}\n\
                 spec: {nodeName: node-a, containers: [{name: c, image: x, resources: {requests: {cpu: '2'}}}]}\n";
    let file = tmp.write(
        "cluster.yaml",
        &[
            POOL.to_owned(),
            node(
                "node-a",
                "node.kubernetes.io/instance-type: large-8x, topology.kubernetes.io/zone: zone-a, \
                 karpenter.sh/capacity-type: on-demand, kubernetes.io/os: linux",
            ),
            node("node-b", "kubernetes.io/os: linux, topology.kubernetes.io/zone: zone-a"),
            bound.to_owned(),
            pod("web", "1"),
        ]
        .join("---\n"),
    );
    let args = [file.as_str(), "--instance-types", "examples/simulate/instance-types.json"];
    let doc = simulate_json(&args);
    let nodes = doc["existingNodes"].as_array().expect("existingNodes");
    assert_eq!(nodes.len(), 2, "{doc}");
    assert_eq!(nodes[0]["name"], "node-a");
    assert_eq!(nodes[0]["price"], 0.2);
    assert_eq!(nodes[0]["boundPods"], 1);
    assert_eq!(nodes[0]["pods"], serde_json::json!(["default/web"]));
    assert_eq!(nodes[1]["name"], "node-b");
    assert_eq!(nodes[1]["price"], Value::Null);
    assert_eq!(nodes[1]["priceUnknown"], "no node.kubernetes.io/instance-type, karpenter.sh/capacity-type label");
    assert_eq!(doc["summary"]["podsOnExistingNodes"], 1);
    assert_eq!(doc["summary"]["newNodes"], 0);
    assert_eq!(doc["summary"]["existingNodesPricePerHour"], 0.2);
    assert_eq!(doc["summary"]["existingNodesUnpriced"], 1);

    let table = simulate_ok(&args);
    assert!(table.contains("Existing nodes: 2 ($0.2000/h, 1 with unknown price)"), "{table}");
    let row = table.lines().find(|l| l.starts_with("node-a ")).expect("node-a row");
    assert!(row.contains("large-8x") && row.contains("0.2000") && row.ends_with("web"), "{row}");
    assert!(
        table.contains("node-b: price unknown: no node.kubernetes.io/instance-type, karpenter.sh/capacity-type label"),
        "{table}"
    );
}

#[test]
fn kubectl_list_output_groups_pods_by_deployment() {
    let tmp = TempDir::new("list");
    let item = |i: usize| {
        format!(
            "  - apiVersion: v1\n    kind: Pod\n    metadata:\n      name: web-6d4b-{i}\n      namespace: shop\n\
             \x20     labels: {{app: web, pod-template-hash: 6d4b}}\n\
             \x20     ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: web-6d4b, uid: u1, controller: true}}]\n\
             \x20   spec: {{containers: [{{name: c, image: x, resources: {{requests: {{cpu: 500m}}}}}}]}}\n"
        )
    };
    let list = format!("apiVersion: v1\nkind: List\nitems:\n{}{}", item(0), item(1));
    let file = tmp.write("pods.yaml", &list);
    let pool = tmp.write("pool.yaml", POOL);
    let table = simulate_ok(&[&file, &pool]);
    assert!(table.contains("shop/web x2"), "{table}");
    let doc = simulate_json(&[&file, &pool]);
    assert_eq!(
        doc["newNodes"][0]["podGroups"],
        serde_json::json!([{"namespace": "shop", "kind": "Deployment", "name": "web", "count": 2}])
    );
    assert_eq!(doc["newNodes"][0]["pods"], serde_json::json!(["shop/web-6d4b-0", "shop/web-6d4b-1"]));
}

#[test]
fn usage_errors_exit_2() {
    let (code, _, stderr) = run(&["simulate", "--output", "xml"]);
    assert_eq!(code, 2, "{stderr}");
    let (code, _, stderr) = run(&["simulate", "--provider", "gcp"]);
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn provider_flag_forces_its_labels_and_catalogue_for_every_pool() {
    // The bundled example's NodePool references a KWOKNodeClass; --provider aws evaluates it against AWS types.
    let doc = simulate_json(&["--provider", "aws"]);
    assert_eq!(doc["provider"], "aws");
    assert_eq!(doc["catalogue"]["source"], "aws us-east-1");
    assert_eq!(doc["summary"]["podsOnNewNodes"], 10);
    for n in doc["newNodes"].as_array().expect("newNodes") {
        assert!(n["instanceType"].as_str().is_some_and(|t| t.contains('.')), "an EC2 type name: {n}");
        assert!(n["zone"].as_str().is_some_and(|z| z.starts_with("us-east-1")), "{n}");
    }
    // And --provider kwok evaluates an EC2NodeClass's NodePools against the kwok catalogue.
    let doc = simulate_json(&["examples/simulate/aws-us-west-2.yaml", "--provider", "kwok"]);
    assert_eq!(doc["provider"], "kwok");
    assert_eq!(doc["catalogue"]["source"], "kwok");
    // The kwok types have no us-west-2a offering.
    assert_eq!(doc["summary"]["unschedulablePods"], 6, "{doc}");
}

/// The AWS scenarios: inputs in examples/simulate/, expected tables in tests/snapshots/.
#[test]
fn ec2_node_class_pools_use_the_aws_catalogue() {
    let table = simulate_ok(&["examples/simulate/aws-gpu.yaml"]);
    check_snapshot("aws-gpu.txt", &table);
    let doc = simulate_json(&["examples/simulate/aws-gpu.yaml"]);
    assert_eq!(doc["provider"], "aws");
    assert_eq!(doc["catalogue"]["source"], "aws us-east-1");
    assert_eq!(doc["notes"], serde_json::json!([]));
    let nodes = doc["newNodes"].as_array().expect("newNodes");
    let gpu = nodes.iter().find(|n| n["nodePool"] == "gpu").expect("a gpu node");
    assert_eq!(gpu["instanceType"], "g5.xlarge", "{gpu}");
    assert_eq!(gpu["capacityType"], "on-demand");
    // us-east-1's published on-demand price of g5.xlarge (snapshot 2026-07-20).
    assert_eq!(gpu["price"], 1.006);
    assert!(gpu.get("priceEstimated").is_none(), "{gpu}");
    assert_eq!(gpu["pods"], serde_json::json!(["default/trainer"]));
    let general = nodes.iter().find(|n| n["nodePool"] == "general").expect("a general node");
    assert!(general["instanceType"].as_str().is_some_and(|t| t.starts_with('c')), "{general}");
    if general["capacityType"] == "spot" {
        assert_eq!(general["priceEstimated"], true, "{general}");
    }
}

#[test]
fn other_regions_use_their_zones_and_us_east_1_prices_with_a_note() {
    let (table, stderr) = simulate_with_notes(&["examples/simulate/aws-us-west-2.yaml", "--region", "us-west-2"]);
    check_snapshot("aws-us-west-2.txt", &table);
    assert!(
        stderr.contains("note: the AWS catalogue has no prices for us-west-2: us-east-1's on-demand prices"),
        "{stderr}"
    );
    let doc = simulate_json(&["examples/simulate/aws-us-west-2.yaml", "--region", "us-west-2"]);
    assert_eq!(doc["catalogue"]["source"], "aws us-west-2");
    assert!(doc["notes"][0].as_str().is_some_and(|n| n.contains("us-east-1's on-demand prices")), "{doc}");
    for n in doc["newNodes"].as_array().expect("newNodes") {
        assert_eq!(n["zone"], "us-west-2a", "{n}");
        assert_eq!(n["priceEstimated"], true, "{n}");
        assert!(n["instanceType"].as_str().is_some_and(|t| t.starts_with('c')), "{n}");
    }
    assert_eq!(doc["summary"]["unschedulablePods"], 0);
    // Without --region the zone is not offered: nothing can be placed.
    let doc = simulate_json(&["examples/simulate/aws-us-west-2.yaml"]);
    assert_eq!(doc["summary"]["unschedulablePods"], 6, "{doc}");
    let (code, _, stderr) = run(&["simulate", "examples/simulate/aws-us-west-2.yaml", "--region", "mars-1"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("--region mars-1: region mars-1 is not in the catalogue (it has af-south-1"), "{stderr}");
}

#[test]
fn mixed_node_classes_get_their_own_catalogues() {
    let tmp = TempDir::new("mixed");
    let kwok_pool = POOL.replace("name: default}", "name: kwok}");
    let input = format!(
        "{kwok_pool}---\n{}---\n{}",
        std::fs::read_to_string(workspace_root().join("examples/simulate/aws-us-west-2.yaml")).expect("example"),
        pod("web", "1").replace("spec: {", "spec: {nodeSelector: {karpenter.sh/nodepool: kwok}, ")
    );
    let file = tmp.write("mixed.yaml", &input);
    let doc = simulate_json(&[&file, "--region", "us-west-2"]);
    assert_eq!(doc["provider"], "aws");
    assert_eq!(doc["catalogue"]["source"], "kwok + aws us-west-2");
    let nodes = doc["newNodes"].as_array().expect("newNodes");
    let kwok = nodes.iter().find(|n| n["nodePool"] == "kwok").expect("a kwok node");
    assert!(kwok["zone"].as_str().is_some_and(|z| z.starts_with("test-zone-")), "{kwok}");
    assert!(kwok.get("priceEstimated").is_none(), "{kwok}");
    assert!(nodes.iter().filter(|n| n["nodePool"] == "compute").all(|n| n["zone"] == "us-west-2a"), "{doc}");
    let table = simulate_ok(&[&file, "--region", "us-west-2"]);
    assert!(table.contains("from the kwok catalogue and the AWS catalogue (us-west-2)"), "{table}");
}

#[test]
fn instance_types_file_may_be_an_aws_catalogue() {
    let tmp = TempDir::new("aws-file");
    let catalogue = serde_json::json!({
        "apiVersion": "karpenter-rs.aws-catalogue/v1",
        "instanceTypes": [{
            "InstanceType": "c5.large", "SupportedUsageClasses": ["on-demand"],
            "SupportedVirtualizationTypes": ["hvm"], "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
            "VCpuInfo": {"DefaultVCpus": 2}, "MemoryInfo": {"SizeInMiB": 4096},
            "NetworkInfo": {"MaximumNetworkInterfaces": 3, "Ipv4AddressesPerInterface": 10,
                            "NetworkCards": [{"NetworkCardIndex": 0, "MaximumNetworkInterfaces": 3}]}
        }],
        "zones": {"us-west-2": {"c5.large": ["us-west-2a"]}},
        "prices": {"onDemand": {"us-west-2": {"c5.large": 0.085}}}
    });
    let file = tmp.write("catalogue.json", &catalogue.to_string());
    let doc =
        simulate_json(&["examples/simulate/aws-us-west-2.yaml", "--instance-types", &file, "--region", "us-west-2"]);
    assert_eq!(doc["catalogue"]["source"], format!("file {file} (aws us-west-2)"));
    assert_eq!(doc["catalogue"]["instanceTypes"], 1);
    assert_eq!(doc["notes"].as_array().map(Vec::len), Some(1), "only the missing node class: {doc}");
    let node = &doc["newNodes"][0];
    assert_eq!(node["instanceType"], "c5.large");
    assert_eq!(node["price"], 0.085);
    assert!(node.get("priceEstimated").is_none(), "the file's own region price: {node}");

    // Neither format: an error naming the file.
    let neither = tmp.write("neither.json", "{\"kind\": \"Something\"}");
    let (code, _, stderr) = run(&["simulate", "--instance-types", &neither]);
    assert_eq!(code, 1);
    assert!(stderr.contains(&neither) && stderr.contains("neither upstream's kwok instance-type JSON"), "{stderr}");
    // A catalogue with an error: named too.
    let bad = tmp.write("bad.json", &catalogue.to_string().replace("0.085", "-1"));
    let (code, _, stderr) = run(&["simulate", "examples/simulate/aws-us-west-2.yaml", "--instance-types", &bad]);
    assert_eq!(code, 1);
    assert!(stderr.contains(&bad) && stderr.contains("price"), "{stderr}");
}

#[test]
fn readme_and_docs_show_the_current_bundled_output() {
    let table = simulate_ok(&[]);
    for doc in ["README.md", "docs/simulate.md"] {
        let text = std::fs::read_to_string(workspace_root().join(doc)).expect("reading doc");
        assert!(
            text.contains(&table),
            "{doc} does not show the current output of `simulate` (paste it from tests/snapshots/bundled.txt):\n{table}"
        );
    }
}

#[test]
fn in_flight_node_claims_take_pods_and_are_priced() {
    let tmp = TempDir::new("in-flight");
    let claim = "apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-abcde
  labels:
    karpenter.sh/nodepool: default
    node.kubernetes.io/instance-type: small-2x
    topology.kubernetes.io/zone: zone-a
    karpenter.sh/capacity-type: spot
    kubernetes.io/os: linux
spec:
  nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
  requirements:
    - {key: node.kubernetes.io/instance-type, operator: In, values: [small-2x]}
status:
  capacity: {cpu: '2', memory: 4Gi, pods: '32'}
  allocatable: {cpu: 1900m, memory: 4Gi, pods: '32'}
";
    let file = tmp.write("cluster.yaml", &format!("{POOL}---\n{claim}---\n{}", pod("web", "1")));
    let args = [file.as_str(), "--instance-types", "examples/simulate/instance-types.json"];
    let doc = simulate_json(&args);
    let node = &doc["existingNodes"][0];
    assert_eq!(node["name"], "default-abcde", "{doc}");
    assert_eq!(node["inFlight"], true);
    assert_eq!(node["nodePool"], "default");
    assert_eq!(node["price"], 0.02);
    assert_eq!(node["pods"], serde_json::json!(["default/web"]));
    assert_eq!(doc["summary"]["newNodes"], 0);
    let table = simulate_ok(&args);
    let row = table.lines().find(|l| l.starts_with("default-abcde (in flight)")).expect("in-flight row");
    assert!(row.contains("small-2x") && row.contains("0.0200") && row.ends_with("web"), "{row}");
}

// ---- Simulated time (`--timeline`, `--scale`, `--for`) ----

const CONSOLIDATION: &str = "examples/consolidation/cluster.yaml";
const CONSOLIDATION_TIMELINE: &str = "examples/consolidation/timeline.yaml";

fn events_of<'a>(doc: &'a Value, kind: &str) -> Vec<&'a Value> {
    doc["events"].as_array().expect("events").iter().filter(|e| e["type"] == kind).collect()
}

#[test]
fn consolidation_timeline_table_snapshot_and_json() {
    check_snapshot("consolidation-timeline.txt", &simulate_ok(&[CONSOLIDATION, "--timeline", CONSOLIDATION_TIMELINE]));
    let doc = simulate_json(&[CONSOLIDATION, "--timeline", CONSOLIDATION_TIMELINE]);
    assert_eq!(doc["apiVersion"], "karpenter-rs.timeline/v1");
    assert_eq!(doc["start"], "2026-01-01T08:00:00Z");
    assert_eq!(doc["end"], "2026-01-01T10:00:00Z");
    let s = &doc["summary"];
    assert_eq!(s["commands"], 3, "{s}");
    assert_eq!(s["commandsByMethod"]["SingleNodeConsolidation"], 1, "{s}");
    assert_eq!(s["commandsByMethod"]["Drift"], 2, "{s}");
    let before = s["before"]["pricePerHour"].as_f64().expect("before");
    let after = s["after"]["pricePerHour"].as_f64().expect("after");
    assert!(after < before, "{s}");
    assert!((s["savingsPerHour"].as_f64().expect("savings") - (before - after)).abs() < 1e-6);
    // The consolidation waits consolidateAfter (5m) after the scale-down at 10m, then the 15 s validation.
    let disruptions = events_of(&doc, "Disruption");
    let first = disruptions.first().expect("a disruption");
    assert_eq!(first["offset"], "15m15s", "{first}");
    assert_eq!(first["decidedAt"], "2026-01-01T08:15:00Z", "{first}");
    assert_eq!(first["command"]["method"], "SingleNodeConsolidation");
    assert_eq!(first["command"]["decision"], "Replace");
    assert!(first["command"]["savingsPerHour"].as_f64().is_some_and(|v| v > 0.0), "{first}");
    // Drift commands run at once, one node at a time (10 % budget of 2 nodes = 1).
    for d in &disruptions[1..] {
        assert_eq!(d["offset"], "1h", "{d}");
        assert_eq!(d["command"]["reason"], "Drifted", "{d}");
        assert!(d.get("decidedAt").is_none(), "{d}");
    }
    // Each event's price is the cluster's after it; the last one is the end state.
    let events = doc["events"].as_array().expect("events");
    assert_eq!(events.last().map(|e| e["pricePerHourAfter"].clone()), Some(s["after"]["pricePerHour"].clone()));
    // Every node at the end has a verdict saying why it stays.
    let nodes = doc["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), s["after"]["nodes"].as_u64().expect("count") as usize);
    for n in nodes {
        assert!(n["verdict"].as_str().is_some_and(|v| !v.is_empty()), "{n}");
    }
    assert_eq!(doc["verdicts"].as_array().map(Vec::len), Some(nodes.len()));
}

/// The churn figures of a timeline summary, read back from its events: pods moved by the executed commands,
/// and the cluster's $/h weighted by how long each price lasted, from the start (the price before any event) to
/// the end (`length` seconds from the start).
fn churn_from_events(doc: &Value, length: u64) -> (u64, f64) {
    let events = doc["events"].as_array().expect("events");
    let moved = events_of(doc, "Disruption")
        .iter()
        .map(|e| e["command"]["displacedPods"].as_array().map_or(0, Vec::len) as u64)
        .sum();
    let mut price = doc["summary"]["before"]["pricePerHour"].as_f64().expect("before");
    let (mut weighted, mut since) = (0.0, 0);
    for e in events {
        let at = e["offsetSeconds"].as_u64().expect("offset");
        weighted += price * (at - since) as f64;
        (since, price) = (at, e["pricePerHourAfter"].as_f64().expect("price"));
    }
    (moved, (weighted + price * (length - since) as f64) / length as f64)
}

#[test]
fn the_summary_counts_the_pods_moved_and_averages_the_price_over_the_run() {
    let doc = simulate_json(&[CONSOLIDATION, "--timeline", CONSOLIDATION_TIMELINE, "--for", "24h"]);
    let s = &doc["summary"];
    let (moved, average) = churn_from_events(&doc, 24 * 3600);
    assert!(moved > 0, "the example's commands move pods: {s}");
    assert_eq!(s["podsMoved"], moved, "{s}");
    let reported = s["averagePricePerHour"].as_f64().expect("averagePricePerHour");
    assert!((reported - average).abs() < 1e-5, "{reported} vs {average} read from the events");
    // An average of the prices the cluster went through, strictly between the cheapest and the dearest (the
    // price changed during the run).
    let prices: Vec<f64> = std::iter::once(&s["before"]["pricePerHour"])
        .chain(doc["events"].as_array().expect("events").iter().map(|e| &e["pricePerHourAfter"]))
        .map(|p| p.as_f64().expect("price"))
        .collect();
    let (low, high) = prices.iter().fold((f64::MAX, 0.0f64), |(l, h), p| (l.min(*p), h.max(*p)));
    assert!(low < reported && reported < high, "{reported} not within ({low}, {high})");
    assert!(s.get("baseline").is_none(), "no threshold flag, no comparison: {s}");
    let table = simulate_ok(&[CONSOLIDATION, "--timeline", CONSOLIDATION_TIMELINE, "--for", "24h"]);
    let line = format!(
        "Churn over 24h: {} disruption commands moved {moved} pods; ${reported:.4}/h on average.",
        s["commands"]
    );
    assert!(table.contains(&line), "{line}\n{table}");
    assert!(!table.contains("Without --"), "{table}");
}

#[test]
fn a_threshold_run_is_compared_with_the_same_run_without_it() {
    let plain = simulate_json(&[CONSOLIDATION, "--timeline", CONSOLIDATION_TIMELINE, "--for", "24h"]);
    // The example's consolidation replaces a 16-CPU node by an 8-CPU one: it saves 50 %, below 60 %.
    let args =
        [CONSOLIDATION, "--timeline", CONSOLIDATION_TIMELINE, "--for", "24h", "--consolidation-min-savings", "60%"];
    let held = simulate_json(&args);
    let (p, h) = (&plain["summary"], &held["summary"]);
    let baseline = &h["baseline"];
    assert_eq!(baseline["without"], serde_json::json!(["--consolidation-min-savings 60%"]), "{h}");
    // The comparison is the run without the flag, figure for figure.
    assert_eq!(baseline["commands"], p["commands"], "{h}\n{p}");
    assert_eq!(baseline["podsMoved"], p["podsMoved"], "{h}\n{p}");
    assert_eq!(baseline["averagePricePerHour"], p["averagePricePerHour"], "{h}\n{p}");
    // The threshold holds the replacement: fewer commands, fewer pods moved, and the 16-CPU node kept costs more.
    let n = |v: &Value| v.as_u64().expect("count");
    let f = |v: &Value| v.as_f64().expect("price");
    assert!(n(&h["commands"]) < n(&p["commands"]), "{h}\n{p}");
    assert!(n(&h["podsMoved"]) < n(&p["podsMoved"]), "{h}\n{p}");
    assert!(f(&h["averagePricePerHour"]) > f(&p["averagePricePerHour"]), "{h}\n{p}");
    let held_events = events_of(&held, "Disruption");
    assert!(held_events.iter().all(|e| e["command"]["method"] != "SingleNodeConsolidation"), "{held_events:?}");
    let table = simulate_ok(&args);
    let line = format!(
        "Without --consolidation-min-savings 60%: {} disruption commands moved {} pods; ${:.4}/h on average",
        p["commands"],
        p["podsMoved"],
        f(&p["averagePricePerHour"])
    );
    assert!(table.contains(&line), "{line}\n{table}");
    // A non-default spot-to-spot floor is compared too; the default is no threshold.
    let doc = simulate_json(&[CONSOLIDATION, "--scale", "inflate=2", "--spot-to-spot-min-instance-types", "3"]);
    assert_eq!(doc["summary"]["baseline"]["without"], serde_json::json!(["--spot-to-spot-min-instance-types 3"]));
    let doc = simulate_json(&[CONSOLIDATION, "--scale", "inflate=2", "--spot-to-spot-min-instance-types", "15"]);
    assert!(doc["summary"].get("baseline").is_none(), "{}", doc["summary"]);
}

#[test]
fn scale_flag_runs_the_common_case() {
    let table = simulate_ok(&[CONSOLIDATION, "--scale", "inflate=2", "--for", "2h"]);
    check_snapshot("consolidation-scale.txt", &table);
    let doc = simulate_json(&[CONSOLIDATION, "--scale", "inflate=2", "--for", "2h"]);
    assert_eq!(doc["duration"], "2h");
    assert_eq!(doc["timeline"], Value::Null);
    let steps = events_of(&doc, "Step");
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0]["offset"], "0s");
    let disruptions = events_of(&doc, "Disruption");
    assert_eq!(disruptions.len(), 1, "{:#}", doc["events"]);
    assert_eq!(disruptions[0]["offset"], "5m15s");
    // Without --for the run lasts an hour.
    let doc = simulate_json(&[CONSOLIDATION, "--scale", "inflate=2"]);
    assert_eq!(doc["duration"], "1h");
    // Spot-to-spot is off by default: the bundled example's spot node stays, and the verdict says why.
    let doc = simulate_json(&["--scale", "inflate=2"]);
    assert_eq!(doc["summary"]["commands"], 0);
    assert_eq!(doc["nodes"][0]["verdict"], "SpotToSpotConsolidation is disabled, can't replace a spot node");
}

#[test]
fn timeline_steps_apply_delete_drift_and_emptiness() {
    let tmp = TempDir::new("timeline-steps");
    let cluster = tmp.write(
        "cluster.yaml",
        &format!(
            "{POOL}  disruption: {{consolidateAfter: 0s, budgets: [{{nodes: '100%'}}]}}\n---\n\
             apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: default}}\n\
             spec: {{replicas: 3, selector: {{matchLabels: {{app: web}}}}, template: {{metadata: {{labels: {{app: web}}}}, \
             spec: {{containers: [{{name: c, image: pause, resources: {{requests: {{cpu: '1'}}}}}}]}}}}}}\n"
        ),
    );
    tmp.write("more.yaml", &format!("{}---\n{}", pod("extra-a", "2"), pod("extra-b", "2")));
    let timeline = tmp.write(
        "timeline.yaml",
        "steps:
  - at: 1m
    apply: more.yaml
  - at: 2m
    delete: pod/extra-a
  - at: 3m
    drift: node/default-2
  - at: 4m
    scale: {deployment: web, replicas: 0}
  - at: 5m
    delete: pod/default/extra-b
  - advance: 10m
",
    );
    let doc = simulate_json(&[&cluster, "--timeline", &timeline]);
    let steps: Vec<&str> = events_of(&doc, "Step").iter().filter_map(|e| e["message"].as_str()).collect();
    assert_eq!(
        steps,
        [
            format!("apply {}: 2 new pods", tmp.0.join("more.yaml").display()).as_str(),
            "delete pod default/extra-a",
            "drift node default-2",
            "scale Deployment default/web from 3 to 0 pods (3 deleted)",
            "delete pod default/extra-b",
        ],
        "{:#}",
        doc["events"]
    );
    let methods: Vec<String> = events_of(&doc, "Disruption")
        .iter()
        .map(|e| format!("{} {}", e["offset"].as_str().unwrap_or("?"), e["command"]["method"].as_str().unwrap_or("?")))
        .collect();
    // The drifted node is replaced at once; the last pod's deletion empties the cluster and Emptiness removes
    // the node after the validation wait.
    assert!(methods.contains(&"3m Drift".to_owned()), "{methods:?}");
    assert_eq!(methods.last().map(String::as_str), Some("5m15s Emptiness"), "{methods:?}");
    assert_eq!(doc["summary"]["after"]["nodes"], 0, "{:#}", doc["summary"]);
    assert_eq!(doc["summary"]["after"]["pricePerHour"], 0.0);
}

/// A pod asking for `test.com/extended-slots`, which only the override copies of `override-capable`'s offerings
/// bring (4 a node).
fn slot_pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\n\
         spec: {{containers: [{{name: c, image: pause, resources: {{requests: {{test.com/extended-slots: '1'}}, \
         limits: {{test.com/extended-slots: '1'}}}}}}]}}\n"
    )
}

#[test]
fn a_node_launched_from_an_override_offering_has_its_slots_for_later_pods() {
    let tmp = TempDir::new("offering-overrides");
    let cluster = tmp.write(
        "cluster.yaml",
        &format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: default}}\nspec:\n  template:\n    \
             spec: {{nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}, requirements: []}}\n\
             ---\n{}",
            slot_pod("slot-a")
        ),
    );
    tmp.write("later.yaml", &slot_pod("slot-b"));
    let timeline = tmp.write("timeline.yaml", "steps:\n  - at: 1m\n    apply: later.yaml\n  - advance: 5m\n");
    let types =
        "bins/karpenter-controller/tests/fixtures/upstream-specs/scheduling/offering-overrides-instance-types.json";
    let doc = simulate_json(&[&cluster, "--instance-types", types, "--timeline", &timeline]);
    // The first pod's node came from a slot-bearing offering, so it has 4 slots and the pod applied later lands
    // on it: one node for both, none pending.
    let launched: Vec<&str> =
        doc["nodes"].as_array().into_iter().flatten().filter_map(|n| n["name"].as_str()).collect();
    assert_eq!(launched, ["default-1"], "{:#}", doc["events"]);
    assert_eq!(doc["summary"]["nodesLaunched"], 1, "{:#}", doc["summary"]);
    assert_eq!(doc["summary"]["after"]["pendingPods"], 0, "{:#}", doc["summary"]);
    assert_eq!(doc["nodes"][0]["pods"], 2, "{:#}", doc["nodes"]);
}

#[test]
fn bad_timelines_name_the_step_and_the_field() {
    let tmp = TempDir::new("timeline-errors");
    let bad = tmp.write(
        "bad.yaml",
        "steps:\n  - at: 5m\n    scale: {deployment: inflate, replicas: many}\n  - at: 6m\n    drift: cluster\n",
    );
    let (code, stdout, stderr) = run(&["simulate", "--timeline", &bad]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert_eq!(
        stderr,
        format!(
            "note: no input given and standard input is empty; simulating the bundled example \
             examples/simulate/default.yaml\n\
             {bad}: steps[0].scale.replicas: expected a non-negative integer, found \"many\"\n\
             {bad}: steps[1].drift: expected nodepool/NAME or node/NAME, found \"cluster\"\n\
             error: 2 problems in the input; nothing was simulated\n"
        )
    );
    // Problems found while running name the step too.
    let missing = tmp.write("missing.yaml", "steps:\n  - at: 1m\n    scale: {statefulset: nope, replicas: 1}\n");
    let (code, _, stderr) = run(&["simulate", "--timeline", &missing]);
    assert_eq!(code, 1);
    // After the note that the bundled example runs (no path given).
    let after_note =
        |s: &str| s.split_once("examples/simulate/default.yaml\n").map_or(s.to_owned(), |(_, r)| r.to_owned());
    assert!(
        after_note(&stderr)
            .starts_with(&format!("{missing}: steps[0].scale: StatefulSet default/nope is not in the input\n")),
        "{stderr}"
    );
    // Flags that do not parse are usage errors (exit status 2), as any other flag's bad value.
    let (code, _, stderr) = run(&["simulate", "--scale", "inflate"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("'--scale <WORKLOAD=N>': expected [KIND/][NAMESPACE/]NAME=REPLICAS such as inflate=2"),
        "{stderr}"
    );
    let (code, _, stderr) = run(&["simulate", "--for", "soon"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("invalid value 'soon' for '--for <DURATION>': invalid duration"), "{stderr}");
    let (code, _, stderr) = run(&["simulate", "--timeline", "no/such/file.yaml"]);
    assert_eq!(code, 1);
    assert!(after_note(&stderr).starts_with("no/such/file.yaml: reading the timeline: "), "{stderr}");
}

/// A pod annotated `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"` keeps its node, and the verdict names
/// the annotation; `--honor-autoscaler-annotations=false` (the controller's setting) turns that off.
#[test]
fn autoscaler_annotations_keep_a_node_unless_turned_off() {
    let example = std::fs::read_to_string(workspace_root().join("examples/consolidation/cluster.yaml")).unwrap();
    let labels = "    metadata:\n      labels:\n        app: inflate\n";
    assert!(example.contains(labels), "the example's inflate template changed");
    let annotated = example.replacen(
        labels,
        &format!("{labels}      annotations:\n        cluster-autoscaler.kubernetes.io/safe-to-evict: \"false\"\n"),
        1,
    );
    let dir = TempDir::new("autoscaler-annotations");
    let input = dir.write("cluster.yaml", &annotated);
    let verdicts = |extra: &[&str]| {
        let mut args = vec![input.as_str(), "--for", "20m"];
        args.extend_from_slice(extra);
        simulate_json(&args)["verdicts"].to_string()
    };
    let honoured = verdicts(&[]);
    assert!(honoured.contains("has cluster-autoscaler.kubernetes.io/safe-to-evict=false"), "{honoured}");
    let ignored = verdicts(&["--honor-autoscaler-annotations=false"]);
    assert!(!ignored.contains("safe-to-evict"), "{ignored}");
}

/// `--cluster-limits` (the controller's `CLUSTER_LIMITS`): the second 200-cpu pod gets no node, and its reason names
/// the cluster limit; the timeline honours it too; a typo in a resource name is a usage error naming the entry.
#[test]
fn cluster_limits_block_pods_with_the_limit_named() {
    let tmp = TempDir::new("cluster-limits");
    let input = tmp.write(
        "cluster.yaml",
        &format!(
            "{POOL}---\napiVersion: karpenter.kwok.sh/v1alpha1\nkind: KWOKNodeClass\nmetadata: {{name: default}}\nspec: {{}}\n---\n{}---\n{}",
            pod("a", "200"),
            pod("b", "200")
        ),
    );
    let unlimited = simulate_json(&[&input]);
    assert_eq!(unlimited["summary"]["unschedulablePods"], 0, "{unlimited}");
    let reasons = |doc: &Value| doc["unschedulable"].to_string();
    let doc = simulate_json(&[&input, "--cluster-limits", "nodes=1"]);
    assert_eq!(doc["summary"]["unschedulablePods"], 1, "{doc}");
    assert!(reasons(&doc).contains("NodePool default: cluster limit nodes 1 reached"), "{doc}");
    let doc = simulate_json(&[&input, "--cluster-limits=cpu=300"]);
    assert_eq!(doc["summary"]["unschedulablePods"], 1, "{doc}");
    assert!(reasons(&doc).contains("cluster limit cpu 300 would be exceeded (44 remaining)"), "{doc}");
    let table = simulate_ok(&[&input, "--cluster-limits=cpu=300"]);
    assert!(table.contains("cluster limit cpu 300 would be exceeded"), "{table}");

    let timeline = simulate_json(&[&input, "--for", "10m", "--cluster-limits", "nodes=1"]);
    let text = timeline.to_string();
    assert!(text.contains("cluster limit nodes 1 reached"), "{text}");
    let free = simulate_json(&[&input, "--for", "10m"]).to_string();
    assert!(!free.contains("cluster limit"), "{free}");

    let (code, _, stderr) = run(&["simulate", &input, "--cluster-limits=cpus=300"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("entry 1 (\"cpus=300\"): unknown resource \"cpus\""), "{stderr}");
}

/// A NodePool annotated `karpenter-rs.io/disruption-topology-key: topology.kubernetes.io/zone` with a 100% budget:
/// when both zones' nodes empty at once, Emptiness removes them zone by zone (one command per zone, the second
/// after the first's validation wait); without the annotation one command removes all four.
#[test]
fn a_zonal_pool_is_emptied_zone_by_zone() {
    let deployment = |name: &str, zone: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: default}}\n\
             spec: {{replicas: 2, selector: {{matchLabels: {{app: {name}}}}}, template: {{metadata: {{labels: {{app: {name}}}}}, \
             spec: {{nodeSelector: {{topology.kubernetes.io/zone: {zone}}}, affinity: {{podAntiAffinity: \
             {{requiredDuringSchedulingIgnoredDuringExecution: [{{topologyKey: kubernetes.io/hostname, \
             labelSelector: {{matchLabels: {{app: {name}}}}}}}]}}}}, \
             containers: [{{name: c, image: pause, resources: {{requests: {{cpu: '1'}}}}}}]}}}}}}\n"
        )
    };
    let workloads = format!("{}---\n{}", deployment("web-a", "test-zone-a"), deployment("web-b", "test-zone-b"));
    let disruption = "  disruption: {consolidateAfter: 0s, budgets: [{nodes: '100%'}]}\n";
    let keyed = POOL.replace(
        "metadata: {name: default}",
        "metadata: {name: default, annotations: {karpenter-rs.io/disruption-topology-key: topology.kubernetes.io/zone}}",
    );
    assert_ne!(keyed, POOL);
    let tmp = TempDir::new("zone-by-zone");
    let zonal = tmp.write("zonal.yaml", &format!("{keyed}{disruption}---\n{workloads}"));
    let plain = tmp.write("plain.yaml", &format!("{POOL}{disruption}---\n{workloads}"));
    let timeline = tmp.write(
        "timeline.yaml",
        "steps:
  - at: 1m
    scale: {deployment: web-a, replicas: 0}
  - at: 1m
    scale: {deployment: web-b, replicas: 0}
  - advance: 5m
",
    );
    let commands = |cluster: &str| -> Vec<(String, Vec<String>)> {
        let doc = simulate_json(&[cluster, "--timeline", &timeline]);
        events_of(&doc, "Disruption")
            .iter()
            .map(|e| {
                let zones: std::collections::BTreeSet<String> = e["command"]["candidates"]
                    .as_array()
                    .expect("candidates")
                    .iter()
                    .map(|c| c["zone"].as_str().unwrap_or("?").to_owned())
                    .collect();
                (e["offset"].as_str().unwrap_or("?").to_owned(), zones.into_iter().collect())
            })
            .collect()
    };
    let zone = |z: &str| vec![z.to_owned()];
    assert_eq!(
        commands(&zonal),
        [("1m15s".to_owned(), zone("test-zone-a")), ("1m30s".to_owned(), zone("test-zone-b"))],
        "one zone per command, the second after the first"
    );
    assert_eq!(
        commands(&plain),
        [("1m15s".to_owned(), vec!["test-zone-a".to_owned(), "test-zone-b".to_owned()])],
        "without the annotation, one command across zones"
    );
}

/// The disruption scenario of a zonal pool whose test-zone-a node is being disrupted (tainted
/// `karpenter.sh/disrupted`, which nothing in simulated time finishes): over simulated time the zone-a drifted
/// node and the unannotated pool's node are replaced, while the other zone's and the unlabelled node's verdicts
/// name the zone they wait for.
#[test]
fn a_zonal_pool_waits_for_the_zone_being_disrupted_and_the_verdicts_say_so() {
    let input = workspace_root()
        .join("crates/karpenter-disruption/tests/scenarios/topology-drift-waits-for-zone/input.yaml")
        .display()
        .to_string();
    let doc = simulate_json(&[&input, "--for", "5m"]);
    let removed: Vec<String> = events_of(&doc, "Disruption")
        .iter()
        .flat_map(|e| e["nodesRemoved"].as_array().cloned().unwrap_or_default())
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect();
    assert_eq!(removed, ["a1", "p1"], "{:#}", doc["events"]);
    for node in ["b1", "x1"] {
        let verdict = doc["verdicts"]
            .as_array()
            .expect("verdicts")
            .iter()
            .find(|v| v["node"] == node)
            .unwrap_or_else(|| panic!("{node}'s verdict: {:#}", doc["verdicts"]));
        assert_eq!(verdict["reason"]["code"], "TopologyDomainWaiting", "{verdict:#}");
        assert_eq!(verdict["reason"]["domain"], "test-zone-a", "{verdict:#}");
        let message = verdict["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("waiting: topology.kubernetes.io/zone=test-zone-a is being disrupted"),
            "{message}"
        );
    }
}

/// A NodePool annotated `karpenter-rs.io/min-nodes` and its unannotated twin, with no pods and `consolidateAfter:
/// 0s`; `floor_value` is the annotation's value.
fn floor_cluster(floor_value: &str) -> String {
    let pool = |name: &str, annotations: &str| {
        format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: {name}\n{annotations}spec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}\n      requirements:\n        - {{key: karpenter.sh/capacity-type, operator: In, values: [\"on-demand\"]}}\n  disruption:\n    consolidateAfter: 0s\n"
        )
    };
    let annotated = pool("floor", &format!("  annotations:\n    karpenter-rs.io/min-nodes: \"{floor_value}\"\n"));
    format!("{annotated}---\n{}", pool("plain", ""))
}

/// A floor obeys `--cluster-limits` as provisioning does: a floor of 3 under `nodes=2` launches two nodes, in the
/// plan and in the timeline, and a note says what the limit kept out.
#[test]
fn min_nodes_floors_obey_the_cluster_limits() {
    let dir = TempDir::new("min-nodes-limits");
    let input = dir.write("cluster.yaml", &floor_cluster("3"));
    let floor_nodes = |doc: &Value, key: &str| {
        doc[key].as_array().map_or(0, |nodes| nodes.iter().filter(|n| n["nodePool"] == "floor").count())
    };
    assert_eq!(floor_nodes(&simulate_json(&[input.as_str()]), "newNodes"), 3);
    let plan = simulate_json(&[input.as_str(), "--cluster-limits", "nodes=2"]);
    assert_eq!(floor_nodes(&plan, "newNodes"), 2, "{plan}");
    assert!(plan["notes"].to_string().contains("cluster limit nodes 2"), "{plan}");
    let timeline = simulate_json(&[input.as_str(), "--cluster-limits", "nodes=2", "--for", "5m"]);
    assert_eq!(floor_nodes(&timeline, "nodes"), 2, "{timeline}");
}

/// The floor's nodes are in the plan without pods, the timeline launches them and keeps them (the verdicts say the
/// pool is at its floor), and a value that is not an integer is a note naming the pool and the annotation.
#[test]
fn min_nodes_floors_launch_without_pods_and_keep_their_nodes() {
    let dir = TempDir::new("min-nodes");
    let input = dir.write("cluster.yaml", &floor_cluster("2"));
    let plan = simulate_json(&[input.as_str()]);
    let new: Vec<(&str, usize)> = plan["newNodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["nodePool"].as_str().unwrap(), n["pods"].as_array().unwrap().len()))
        .collect();
    assert_eq!(new, [("floor", 0), ("floor", 0)], "{plan}");

    let timeline = simulate_json(&[input.as_str(), "--for", "20m"]);
    let verdicts = timeline["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 2, "both floor nodes are kept past consolidateAfter: {timeline}");
    for v in verdicts {
        assert_eq!(v["nodePool"], "floor");
        assert_eq!(v["reason"]["code"], "AtMinNodes", "{v}");
    }
    assert!(timeline["events"].to_string().contains("karpenter-rs.io/min-nodes"), "{timeline}");

    let bad = dir.write("bad.yaml", &floor_cluster("two"));
    let plan = simulate_json(&[bad.as_str()]);
    assert_eq!(plan["newNodes"].as_array().map(Vec::len), Some(0), "no floor for a bad value: {plan}");
    let notes = plan["notes"].to_string();
    assert!(
        notes.contains(r#"NodePool floor: annotation karpenter-rs.io/min-nodes \"two\" is not a non-negative integer"#),
        "{notes}"
    );
}

/// An expiring node of a pool at its floor is replaced at the instant it expires, the replacement launched first.
#[test]
fn min_nodes_floors_replace_expired_nodes_first() {
    let dir = TempDir::new("min-nodes-expiry");
    let cluster = floor_cluster("1").replacen("      requirements:", "      expireAfter: 10m\n      requirements:", 1);
    let input = dir.write("cluster.yaml", &cluster);
    let timeline = simulate_json(&[input.as_str(), "--for", "25m"]);
    let events: Vec<(String, String)> = timeline["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["offset"].as_str().unwrap().to_owned(), e["type"].as_str().unwrap().to_owned()))
        .collect();
    let expected = [
        ("0s", "Provisioning"),
        ("10m", "Provisioning"),
        ("10m", "Expiration"),
        ("20m", "Provisioning"),
        ("20m", "Expiration"),
    ]
    .map(|(a, b)| (a.to_owned(), b.to_owned()));
    assert_eq!(events, expected, "{timeline}");
    assert_eq!(timeline["nodes"].as_array().map(Vec::len), Some(1), "{timeline}");
}

#[test]
fn scheduler_config_flag_spreads_pods_without_their_own_constraints() {
    let tmp = TempDir::new("scheduler-config");
    let input = tmp.write(
        "web.yaml",
        &format!(
            "{POOL}---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: default}}\n\
             spec: {{replicas: 3, selector: {{matchLabels: {{app: web}}}}, template: {{metadata: {{labels: {{app: web}}}}, \
             spec: {{containers: [{{name: c, image: pause, resources: {{requests: {{cpu: 100m}}}}}}]}}}}}}\n"
        ),
    );
    let nodes = |doc: &Value| doc["newNodes"].as_array().expect("newNodes").len();
    // Without a config the three small replicas share one node.
    assert_eq!(nodes(&simulate_json(&[&input])), 1);
    let config = "podTopologySpread:\n  defaultConstraints:\n  - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, \
                  whenUnsatisfiable: DoNotSchedule}\n";
    let doc = simulate_json(&[&input, "--scheduler-config", config]);
    assert_eq!(nodes(&doc), 3, "{doc}");
    assert_eq!(doc["summary"]["podsOnNewNodes"], 3);
    // A bad config is a usage error naming the field.
    let (code, _, stderr) =
        run(&["simulate", &input, "--scheduler-config", "podTopologySpread: {defaultConstraints: [{}]}"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("defaultConstraints[0]: maxSkew must be greater than zero"), "{stderr}");
}

/// minDomains on a ScheduleAnyway default is accepted, as upstream accepts it; it has no effect, and a note says so
/// naming the constraint.
#[test]
fn scheduler_config_min_domains_on_schedule_anyway_is_a_note() {
    let tmp = TempDir::new("scheduler-config-min-domains");
    let input = tmp.write("pod.yaml", &format!("{POOL}---\n{}", pod("p", "100m")));
    let config = "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, \
                  whenUnsatisfiable: ScheduleAnyway, minDomains: 3}]}";
    let (_, stderr) = simulate_with_notes(&[&input, "--scheduler-config", config]);
    let note = stderr.lines().find(|l| l.contains("minDomains")).unwrap_or_else(|| panic!("no note: {stderr}"));
    assert!(note.contains("defaultConstraints[0]") && note.contains("topology.kubernetes.io/zone"), "{note}");
}

/// `--feature-gates NodeRepair=true` over simulated time: a managed node that has been `Ready=False` past the
/// kwok provider's 10-minute toleration is replaced (its pod's new node first); without the gate it stays.
#[test]
fn node_repair_over_simulated_time_follows_the_gate() {
    let tmp = TempDir::new("node-repair");
    let labels = "{kubernetes.io/os: linux, kubernetes.io/arch: amd64, node.kubernetes.io/instance-type: c-4x-amd64-linux, \
                  topology.kubernetes.io/zone: test-zone-a, karpenter.sh/capacity-type: on-demand, \
                  karpenter.sh/nodepool: default, karpenter.sh/initialized: 'true', karpenter.sh/registered: 'true'}";
    let conditions = "[{type: Launched, status: 'True', lastTransitionTime: '2025-12-31T20:00:00Z', reason: Launched, message: ''}, \
                      {type: Registered, status: 'True', lastTransitionTime: '2025-12-31T20:00:00Z', reason: Registered, message: ''}, \
                      {type: Initialized, status: 'True', lastTransitionTime: '2025-12-31T20:00:00Z', reason: Initialized, message: ''}]";
    let file = tmp.write(
        "cluster.yaml",
        &[
            POOL.to_owned(),
            format!(
                "apiVersion: v1\nkind: Node\nmetadata: {{name: sick, labels: {labels}}}\n\
                 spec: {{providerID: 'kwok://sick'}}\n\
                 status:\n  allocatable: {{cpu: '4', memory: 8Gi, pods: '110'}}\n  capacity: {{cpu: '4', memory: 8Gi, pods: '110'}}\n\
                 \x20 conditions: [{{type: Ready, status: 'False', reason: KubeletNotReady, lastTransitionTime: '2025-12-31T23:00:00Z', lastHeartbeatTime: '2025-12-31T23:00:00Z'}}]\n"
            ),
            format!(
                "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {{name: sick-claim, creationTimestamp: '2025-12-31T20:00:00Z', labels: {labels}}}\n\
                 spec: {{nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}, requirements: []}}\n\
                 status: {{nodeName: sick, providerID: 'kwok://sick', capacity: {{cpu: '4', memory: 8Gi, pods: '110'}}, \
                 allocatable: {{cpu: '4', memory: 8Gi, pods: '110'}}, conditions: {conditions}}}\n"
            ),
            "apiVersion: v1\nkind: Pod\nmetadata: {name: db, namespace: default}\n\
             spec: {nodeName: sick, containers: [{name: c, image: x, resources: {requests: {cpu: '3'}}}]}\n\
             status: {phase: Running}\n"
                .to_owned(),
        ]
        .join("---\n"),
    );
    let methods = |doc: &Value| -> Vec<String> {
        events_of(doc, "Disruption")
            .iter()
            .map(|e| {
                format!(
                    "{} {} {}",
                    e["offset"].as_str().unwrap_or("?"),
                    e["command"]["method"].as_str().unwrap_or("?"),
                    e["command"]["decision"].as_str().unwrap_or("?")
                )
            })
            .collect()
    };
    let doc = simulate_json(&[&file, "--for", "30m", "--feature-gates", "NodeRepair=true"]);
    let repaired = methods(&doc);
    assert!(repaired.first().is_some_and(|m| m.starts_with("0s Repair Replace")), "{repaired:?} {:#}", doc["events"]);
    let doc = simulate_json(&[&file, "--for", "30m"]);
    assert!(methods(&doc).iter().all(|m| !m.contains("Repair")), "{:?}", methods(&doc));
}

fn node_overlay(name: &str, weight: u32, instance_type: &str, change: &str) -> String {
    format!(
        "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {{name: {name}}}\nspec:\n  weight: {weight}\n  \
         requirements: [{{key: node.kubernetes.io/instance-type, operator: In, values: [{instance_type}]}}]\n  {change}\n"
    )
}

#[test]
fn node_overlays_change_prices_and_capacity_and_conflicts_are_named() {
    let tmp = TempDir::new("overlays");
    let its = ["--instance-types", "examples/simulate/instance-types.json"];
    // Without overlays small-2x spot (0.02) is cheapest; an overlay pricing large-8x at 0.001 makes it the pick.
    let cheap = tmp.write(
        "cheap.yaml",
        &format!("{POOL}---\n{}---\n{}", node_overlay("cheap", 10, "large-8x", "price: '0.001'"), pod("web", "1")),
    );
    let doc = simulate_json(&[&cheap, its[0], its[1]]);
    assert_eq!(doc["newNodes"][0]["instanceType"], "large-8x", "{doc}");
    assert_eq!(doc["newNodes"][0]["price"], 0.001, "{doc}");
    let notes: Vec<&str> = doc["notes"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(
        notes.iter().any(|n| n.contains("NodePool default: NodeOverlays change 1 of its instance types")),
        "{notes:?}"
    );

    // Two overlays of equal weight pricing the same offerings conflict: both are named and neither applies.
    let conflict = tmp.write(
        "conflict.yaml",
        &format!(
            "{POOL}---\n{}---\n{}---\n{}",
            node_overlay("a", 10, "large-8x", "price: '0.001'"),
            node_overlay("b", 10, "large-8x", "priceAdjustment: '-99%'"),
            pod("web", "1")
        ),
    );
    let doc = simulate_json(&[&conflict, its[0], its[1]]);
    assert_eq!(doc["newNodes"][0]["instanceType"], "small-2x", "{doc}");
    let notes: Vec<&str> = doc["notes"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(
        notes.iter().any(|n| n.starts_with("NodeOverlay a is not applied: conflicts with NodeOverlay b")),
        "{notes:?}"
    );
    assert!(
        notes.iter().any(|n| n.starts_with("NodeOverlay b is not applied: conflicts with NodeOverlay a")),
        "{notes:?}"
    );

    // An overlay naming an instance type no pool has changes nothing, and a note says so.
    let typo = tmp.write(
        "typo.yaml",
        &format!("{POOL}---\n{}---\n{}", node_overlay("typo", 10, "large-9x", "price: '0.001'"), pod("web", "1")),
    );
    let doc = simulate_json(&[&typo, its[0], its[1]]);
    assert_eq!(doc["newNodes"][0]["instanceType"], "small-2x", "{doc}");
    let notes: Vec<&str> = doc["notes"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(
        notes.contains(&"NodeOverlay typo selects no instance type of any NodePool: it changes nothing"),
        "{notes:?}"
    );

    // An extended resource only an overlay provides makes a pod that asks for it schedulable.
    let license = "apiVersion: v1\nkind: Pod\nmetadata: {name: licensed, namespace: default}\n\
                   spec: {containers: [{name: c, image: pause, resources: {requests: {example.com/license: '1'}}}]}\n";
    let without = tmp.write("without.yaml", &format!("{POOL}---\n{license}"));
    assert_eq!(simulate_json(&[&without, its[0], its[1]])["summary"]["podsOnNewNodes"], 0);
    let with = tmp.write(
        "with.yaml",
        &format!(
            "{POOL}---\n{}---\n{license}",
            node_overlay("lic", 1, "large-8x", "capacity: {example.com/license: '2'}")
        ),
    );
    let doc = simulate_json(&[&with, its[0], its[1]]);
    assert_eq!(doc["summary"]["podsOnNewNodes"], 1, "{doc}");
    assert_eq!(doc["newNodes"][0]["instanceType"], "large-8x", "{doc}");
}

/// DRA (docs/dra.md): `examples/simulate/dra.yaml` with the catalogue whose `g-8x` type has GPU slice templates.
const DRA_ARGS: [&str; 4] = [
    "examples/simulate/dra.yaml",
    "--instance-types",
    "examples/simulate/dra-instance-types.json",
    "--ignore-dra-requests=false",
];

#[test]
fn dra_claims_use_published_slices_then_instance_type_templates() {
    let doc = simulate_json(&DRA_ARGS);
    // gpu-node-a published one A100: one trainer's claim is allocated there.
    let existing = doc["existingNodes"].as_array().expect("existingNodes");
    assert_eq!(existing.len(), 1, "{doc}");
    assert_eq!(existing[0]["name"], "gpu-node-a");
    assert_eq!(existing[0]["pods"].as_array().map(Vec::len), Some(1), "{doc}");
    // The other needs a new node; only g-8x's slice template offers GPUs (c-8x is cheaper but has none).
    let new = doc["newNodes"].as_array().expect("newNodes");
    assert_eq!(new.len(), 1, "{doc}");
    assert_eq!(new[0]["instanceType"], "g-8x-amd64-linux");
    assert_eq!(new[0]["instanceTypeOptions"], 1);
    assert_eq!(new[0]["requestedDraDrivers"], serde_json::json!(["gpu.example.com"]));
    assert_eq!(doc["summary"]["unschedulablePods"], 0, "{doc}");
    let table = simulate_ok(&DRA_ARGS);
    assert!(table.contains("gpu-1 waits for DRA drivers: gpu.example.com"), "{table}");
}

#[test]
fn dra_is_ignored_by_default_and_an_unsatisfiable_claim_is_explained() {
    // Default IGNORE_DRA_REQUESTS=true: pods with claims are left out, with the reason saying how to simulate.
    let doc = simulate_json(&DRA_ARGS[..3]);
    assert_eq!(doc["summary"]["unschedulablePods"], 2, "{doc}");
    assert_eq!(doc["unschedulable"][0]["code"], "Unsupported");
    assert!(
        doc["unschedulable"][0]["reason"].as_str().is_some_and(|m| m.contains("IGNORE_DRA_REQUESTS=true")),
        "{doc}"
    );

    // An H100 exists nowhere: neither published nor in any instance type's templates.
    let tmp = TempDir::new("dra");
    let input = std::fs::read_to_string(workspace_root().join(DRA_ARGS[0])).expect("example");
    let file = tmp.write("h100.yaml", &input.replace(r#"model == "A100""#, r#"model == "H100""#));
    let doc = simulate_json(&[&file, DRA_ARGS[1], DRA_ARGS[2], DRA_ARGS[3]]);
    assert_eq!(doc["summary"]["unschedulablePods"], 2, "{doc}");
    assert_eq!(doc["unschedulable"][0]["code"], "Incompatible");
    let reason = doc["unschedulable"][0]["reason"].as_str().expect("reason");
    assert!(
        reason.starts_with("NodePool gpu: no instance type offers the devices of claim gpu of pod default/trainer-")
            && reason.ends_with(
                r#"(request gpu: 1 device(s) of class gpu.example.com matching device.attributes["gpu.example.com"].model == "H100")"#
            ),
        "{reason}"
    );

    // A claim that does not exist: a per-pod reason naming it.
    let file = tmp
        .write("missing.yaml", &input.replace("resourceClaimTemplateName: one-a100", "resourceClaimName: shared-gpu"));
    let doc = simulate_json(&[&file, DRA_ARGS[1], DRA_ARGS[2], DRA_ARGS[3]]);
    assert_eq!(doc["unschedulable"][0]["code"], "ResourceClaims", "{doc}");
    assert_eq!(doc["unschedulable"][0]["reason"], "ResourceClaim default/shared-gpu not found");
}

/// CapacityBuffers and PodTemplates in the input (`--feature-gates CapacityBuffer=true`): the ready buffer's
/// virtual pods launch capacity with no pending pod, shown as the buffer's; a buffer whose template is missing is
/// named in a note; over simulated time the buffer's node is kept (it would otherwise be empty). Without the gate
/// the buffers are ignored, with a note.
#[test]
fn capacity_buffers_add_virtual_pods_when_the_gate_is_on() {
    let tmp = TempDir::new("buffers");
    let file = tmp.write(
        "buffer.yaml",
        &[
            POOL.to_owned(),
            "apiVersion: v1\nkind: PodTemplate\nmetadata: {name: chunk, namespace: default}\n\
             template:\n  metadata: {labels: {app: headroom}}\n  spec: {containers: [{name: c, image: pause, resources: {requests: {cpu: '1'}}}]}\n"
                .to_owned(),
            "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityBuffer\nmetadata: {name: headroom, namespace: default}\n\
             spec: {podTemplateRef: {name: chunk}, replicas: 3}\n"
                .to_owned(),
            "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityBuffer\nmetadata: {name: ghost, namespace: default}\n\
             spec: {podTemplateRef: {name: nothing}, replicas: 1}\n"
                .to_owned(),
        ]
        .join("---\n"),
    );
    let gate = ["--feature-gates", "CapacityBuffer=true"];

    let (table, notes) = simulate_with_notes(&[&file]);
    assert!(notes.contains("2 CapacityBuffer(s) ignored: the CapacityBuffer feature gate is off"), "{notes}");
    assert!(table.contains("Summary: 0 pending pods"), "{table}");

    let (table, notes) = simulate_with_notes(&[&file, gate[0], gate[1]]);
    assert!(table.contains("buffer default/headroom: 3 virtual pods"), "{table}");
    assert!(table.contains("3 are CapacityBuffer virtual pods"), "{table}");
    assert!(notes.contains("note: CapacityBuffer default/headroom: 3 virtual pods"), "{notes}");
    assert!(
        notes.contains("note: CapacityBuffer default/ghost is not ready (PodTemplateNotFound): PodTemplate default/nothing not found"),
        "{notes}"
    );
    let doc = simulate_json(&[&file, gate[0], gate[1]]);
    assert_eq!(doc["summary"]["bufferPods"], 3, "{:#}", doc["summary"]);
    assert_eq!(doc["summary"]["podsOnNewNodes"], 3, "{:#}", doc["summary"]);
    assert!(doc["summary"]["newNodes"].as_u64().is_some_and(|n| n >= 1), "{:#}", doc["summary"]);

    // Over an hour: the buffer's node is launched and kept; its verdict says why.
    let doc = simulate_json(&[&file, gate[0], gate[1], "--for", "1h"]);
    let after = doc["summary"]["after"]["nodes"].as_u64().unwrap_or(0);
    assert!(after >= 1, "{:#}", doc["summary"]);
    let verdicts: Vec<&str> = doc["nodes"].as_array().unwrap().iter().filter_map(|n| n["verdict"].as_str()).collect();
    assert!(verdicts.iter().any(|v| v.contains("keeps room for CapacityBuffer default/headroom")), "{verdicts:?}");
    assert_eq!(doc["summary"]["after"]["pendingPods"], 0, "virtual pods are not pending pods: {:#}", doc["summary"]);
    let doc = simulate_json(&[&file, "--for", "1h"]);
    assert_eq!(doc["summary"]["after"]["nodes"], 0, "{:#}", doc["summary"]);

    // A ResourceQuota in the input caps the buffer as the controller would: 2 of its 3 chunks fit.
    let quota = "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: team-cpu, namespace: default}\n\
                 spec: {hard: {requests.cpu: '4'}}\nstatus: {hard: {requests.cpu: '4'}, used: {requests.cpu: 1500m}}\n";
    let capped = tmp.write("capped.yaml", &format!("{}---\n{quota}", std::fs::read_to_string(&file).expect("input")));
    let (table, notes) = simulate_with_notes(&[&capped, gate[0], gate[1]]);
    assert!(
        notes.contains("note: CapacityBuffer default/headroom: 2 virtual pods (replicas limited from 3 to 2 by ResourceQuotas team-cpu)"),
        "{notes}"
    );
    assert!(table.contains("buffer default/headroom: 2 virtual pods"), "{table}");
}

/// An EC2NodeClass with `kubelet`, a NodePool of m5.large on-demand in one zone, and `pods` small pods.
fn cel_input(kubelet: &str, pods: usize) -> String {
    let mut text = format!(
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: default}}\nspec:\n  role: r\n  \
         amiSelectorTerms: [{{alias: al2023@latest}}]\n  subnetSelectorTerms: [{{tags: {{k: v}}}}]\n  \
         securityGroupSelectorTerms: [{{tags: {{k: v}}}}]\n  kubelet: {kubelet}\n---\n\
         apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: small}}\nspec:\n  template:\n    spec:\n      \
         nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      requirements:\n        \
         - {{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}}\n        \
         - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}\n        \
         - {{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a]}}\n"
    );
    for i in 0..pods {
        text.push_str(&format!("---\n{}", pod(&format!("p{i}"), "10m")));
    }
    text
}

#[test]
fn kubelet_expressions_shape_the_aws_catalogue_with_the_gate_on() {
    let tmp = TempDir::new("kubelet-cel");
    // m5.large: 29 pods by its ENIs, so 40 small pods need 2 nodes; capped at 10 by the expression, 4.
    let file = tmp.write("cel.yaml", &cel_input("{maxPods: \"min(max_pods, 10)\"}", 40));
    let nodes = |doc: &Value| doc["newNodes"].as_array().expect("newNodes").len();
    let on = simulate_json(&[&file, "--aws-feature-gates", "NodeClassCEL=true"]);
    assert_eq!(nodes(&on), 4, "{on}");
    assert_eq!(on["notes"], Value::Array(vec![]), "{on}");
    // The same from the environment, as the controller reads it.
    let (code, stdout, _) = {
        let Output { status, stdout, stderr } = Command::new(env!("CARGO_BIN_EXE_karpenter-controller"))
            .current_dir(workspace_root())
            .env("AWS_FEATURE_GATES", "NodeClassCEL=true")
            .args(["simulate", &file, "--output", "json"])
            .output()
            .expect("running karpenter-controller");
        (status.code(), String::from_utf8_lossy(&stdout).into_owned(), stderr)
    };
    assert_eq!(code, Some(0));
    assert_eq!(nodes(&serde_json::from_str(&stdout).expect("json")), 4);

    // Gate off: the expression is ignored (the family default) and a note says the controller would not launch.
    let (table, notes) = simulate_with_notes(&[&file]);
    assert!(
        notes.contains(
            "EC2NodeClass/default: the controller would not launch for it (ValidationSucceeded=False, \
                        KubeletExpressionsDisabled"
        ),
        "{notes}"
    );
    assert!(table.contains("New nodes: 2 "), "{table}");

    // Evaluation failures name the instance type and the expression.
    let failing = tmp.write("failing.yaml", &cel_input("{maxPods: \"max_pods - 100\"}", 1));
    let (_, notes) = simulate_with_notes(&[&failing, "--aws-feature-gates", "NodeClassCEL=true"]);
    assert!(notes.contains("KubeletExpressionEvaluationFailed") && notes.contains("max_pods - 100"), "{notes}");
}

#[test]
fn the_open_kubelet_map_is_checked_before_simulating_and_passthrough_fields_simulate() {
    let tmp = TempDir::new("kubelet-open");
    // Unknown to the kubelet: refused with its path, as `validate` and the controller's
    // InvalidKubeletConfiguration say (the API server would take it).
    let file = tmp.write("open.yaml", &cel_input("{maxPods: 10, fooBar: 1, serializeImagePulls: false}", 1));
    let (code, stdout, stderr) = run(&["simulate", &file]);
    assert_eq!(code, 1, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains("EC2NodeClass/default: spec.kubelet.fooBar: unknown field"), "{stderr}");
    // Fields passed through to the node do not change what is simulated.
    let valid = tmp.write("valid.yaml", &cel_input("{maxPods: 10, serializeImagePulls: false}", 1));
    let plain = tmp.write("plain.yaml", &cel_input("{maxPods: 10}", 1));
    assert_eq!(simulate_json(&[&valid])["newNodes"], simulate_json(&[&plain])["newNodes"]);
}

/// The KWOK node class, the `gpu` pool and the DeviceClass of `examples/simulate/dra.yaml`, then `node-a` publishing
/// `devices` (flow-style YAML items, `resource.k8s.io/v1`) with `counters`, then `rest`.
fn dra_input(devices: &[&str], counters: &str, rest: &str) -> String {
    format!(
        "{}\n---\napiVersion: v1\nkind: Node\nmetadata:\n  name: node-a\n  labels: {{kubernetes.io/hostname: node-a, kubernetes.io/os: linux, topology.kubernetes.io/zone: test-zone-a}}\n\
status: {{allocatable: {{cpu: '8', memory: 64Gi, pods: '110'}}}}\n---\n\
apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: node-a}}\nspec:\n  driver: gpu.example.com\n  nodeName: node-a\n  pool: {{name: node-a, generation: 1, resourceSliceCount: 1}}\n  sharedCounters: [{counters}]\n  devices: [{}]\n---\n{rest}",
        dra_head(),
        devices.join(", ")
    )
}

/// The KWOK node class, the `gpu` pool and the DeviceClass of `examples/simulate/dra.yaml`.
fn dra_head() -> String {
    let example = std::fs::read_to_string(workspace_root().join(DRA_ARGS[0])).expect("example");
    let head: Vec<&str> = example
        .split("\n---\n")
        .filter(|d| {
            d.contains("kind: KWOKNodeClass") || d.contains("kind: NodePool") || d.contains("kind: DeviceClass")
        })
        .collect();
    head.join("\n---\n")
}

/// Published shared slices (docs/dra.md): an `allNodes` slice's device serves a new node, once across the pass,
/// and the new node waits for no driver (the slice exists already).
#[test]
fn dra_all_nodes_slices_serve_new_nodes_once() {
    let tmp = TempDir::new("dra-shared");
    let shared = "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: fabric}\nspec:\n  driver: gpu.example.com\n  allNodes: true\n  pool: {name: fabric, generation: 1, resourceSliceCount: 1}\n  devices: [{name: acc-0, attributes: {model: {string: X1}}}]\n---\n";
    let request = "{name: g, exactly: {deviceClassName: gpu.example.com, selectors: [{cel: {expression: 'device.attributes[\"gpu.example.com\"].model == \"X1\"'}}]}}";
    let input = format!("{}\n---\n{shared}{}", dra_head(), dra_pods("remote", 2, request, ""));
    let doc = simulate_json(&[&tmp.write("shared.yaml", &input), DRA_ARGS[1], DRA_ARGS[2], DRA_ARGS[3]]);
    let new = doc["newNodes"].as_array().expect("newNodes");
    assert_eq!(new.len(), 1, "{doc}");
    assert_eq!(new[0]["instanceType"], "c-8x-amd64-linux", "the cheapest type: the device is not its own");
    assert!(new[0].get("requestedDraDrivers").is_none_or(|d| d == &serde_json::json!([])), "{doc}");
    assert_eq!(doc["summary"]["unschedulablePods"], 1, "the one device is taken: {doc}");
}

/// Pods `name-0`.. each with its own claim `name-i` asking (resource.k8s.io/v1) for `requests` under `constraints`.
fn dra_pods(name: &str, n: usize, requests: &str, constraints: &str) -> String {
    (0..n)
        .map(|i| {
            format!(
                "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: {name}-{i}, namespace: default}}\n\
spec: {{devices: {{requests: [{requests}], constraints: [{constraints}]}}}}\n---\n\
apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}-{i}, namespace: default}}\n\
spec: {{resourceClaims: [{{name: c, resourceClaimName: {name}-{i}}}], containers: [{{name: c, image: x, resources: {{requests: {{cpu: 100m}}}}}}]}}\n---\n"
            )
        })
        .collect()
}

/// The pods `simulate` placed on node-a.
fn on_node_a(doc: &Value) -> Vec<String> {
    let existing = doc["existingNodes"].as_array().cloned().unwrap_or_default();
    let node = existing.iter().find(|n| n["name"] == "node-a");
    let pods = node.and_then(|n| n["pods"].as_array().cloned()).unwrap_or_default();
    let mut out: Vec<String> = pods.iter().filter_map(|p| p.as_str().map(str::to_owned)).collect();
    out.sort();
    out
}

/// DRA depth (docs/dra.md): matchAttribute constraints, device taints, admin access and shared counters, each on
/// node-a's published slice (the catalogue's g-8x takes what node-a cannot).
#[test]
fn dra_constraints_taints_admin_access_and_counters() {
    let tmp = TempDir::new("dra-depth");
    let run =
        |name: &str, input: String| simulate_json(&[&tmp.write(name, &input), DRA_ARGS[1], DRA_ARGS[2], DRA_ARGS[3]]);
    let gpu = |n: &str, model: &str, numa: i64| {
        format!("{{name: {n}, attributes: {{model: {{string: {model}}}, numa: {{int: {numa}}}}}}}")
    };
    let model = |m: &str| format!("{{cel: {{expression: 'device.attributes[\"gpu.example.com\"].model == \"{m}\"'}}}}");

    // Two A100s on one NUMA node: gpu-0 is alone on numa 0, so only gpu-1 and gpu-2 qualify together.
    let devices = [gpu("gpu-0", "A100", 0), gpu("gpu-1", "A100", 1), gpu("gpu-2", "H100", 1)];
    let devices: Vec<&str> = devices.iter().map(String::as_str).collect();
    let requests = format!(
        "{{name: a, exactly: {{deviceClassName: gpu.example.com, selectors: [{}]}}}}, {{name: h, exactly: {{deviceClassName: gpu.example.com, selectors: [{}]}}}}",
        model("A100"),
        model("H100")
    );
    let doc = run(
        "numa.yaml",
        dra_input(&devices, "", &dra_pods("numa", 1, &requests, "{matchAttribute: gpu.example.com/numa}")),
    );
    assert_eq!(on_node_a(&doc), ["default/numa-0"], "{doc}");
    // distinctAttribute: two devices on different NUMA nodes exist (gpu-0 and one on numa 1), three do not.
    let two = "{name: a, exactly: {deviceClassName: gpu.example.com, count: 2}}";
    let spread =
        |n: &str| dra_input(&devices, "", &dra_pods("spread", 1, n, "{distinctAttribute: gpu.example.com/numa}"));
    assert_eq!(on_node_a(&run("distinct.yaml", spread(two))), ["default/spread-0"]);
    let doc = run("distinct3.yaml", spread(&two.replace("count: 2", "count: 3")));
    let reason = doc["unschedulable"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("a different gpu.example.com/numa for all requests"), "{doc}");
    let doc = run(
        "numa0.yaml",
        dra_input(&devices[..1], "", &dra_pods("numa", 1, &requests, "{matchAttribute: gpu.example.com/numa}")),
    );
    let reason = doc["unschedulable"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("the same gpu.example.com/numa for all requests"), "{doc}");

    // A tainted device: only the tolerating claim gets it; the other goes to a new g-8x node.
    let tainted = "{name: gpu-0, attributes: {model: {string: A100}}, taints: [{key: maintenance, value: planned, effect: NoExecute}]}";
    let pods = [
        dra_pods("plain", 1, "{name: g, exactly: {deviceClassName: gpu.example.com}}", ""),
        dra_pods(
            "tolerating",
            1,
            "{name: g, exactly: {deviceClassName: gpu.example.com, tolerations: [{key: maintenance, value: planned}]}}",
            "",
        ),
    ];
    let doc = run("taint.yaml", dra_input(&[tainted], "", &pods.concat()));
    assert_eq!(on_node_a(&doc), ["default/tolerating-0"], "{doc}");
    assert_eq!(doc["newNodes"][0]["pods"], serde_json::json!(["default/plain-0"]), "{doc}");

    // Admin access: two monitoring claims share the one GPU, which a plain claim takes as well.
    let pods = [
        dra_pods("monitor", 2, "{name: g, exactly: {deviceClassName: gpu.example.com, adminAccess: true}}", ""),
        dra_pods("train", 1, "{name: g, exactly: {deviceClassName: gpu.example.com}}", ""),
    ];
    let doc = run("admin.yaml", dra_input(&[&gpu("gpu-0", "A100", 0)], "", &pods.concat()));
    assert_eq!(on_node_a(&doc), ["default/monitor-0", "default/monitor-1", "default/train-0"], "{doc}");
    assert_eq!(doc["summary"]["podsOnNewNodes"], 0, "{doc}");

    // Partitions of one 80Gi GPU, 40Gi each: two of three claims fit; the third needs a new node.
    let parts: Vec<String> = (0..4)
        .map(|i| format!("{{name: part-{i}, attributes: {{model: {{string: A100}}}}, consumesCounters: [{{counterSet: gpu-0, counters: {{memory: {{value: 40Gi}}}}}}]}}"))
        .collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    let input = dra_input(
        &parts,
        "{name: gpu-0, counters: {memory: {value: 80Gi}}}",
        &dra_pods("slice", 3, "{name: g, exactly: {deviceClassName: gpu.example.com}}", ""),
    );
    let doc = run("counters.yaml", input);
    assert_eq!(on_node_a(&doc).len(), 2, "{doc}");
    assert_eq!(doc["summary"]["podsOnNewNodes"], 1, "{doc}");
}

/// An EC2NodeClass, a NodePool (on-demand, us-east-1a) and the DeviceClass `class` selecting driver `driver`,
/// then one pod whose claim template asks for `count` devices of it matching `selector` (CEL; may be empty).
fn aws_dra_input(class: &str, driver: &str, count: u32, selector: &str) -> String {
    let selectors = if selector.is_empty() {
        String::new()
    } else {
        format!(", selectors: [{{cel: {{expression: '{selector}'}}}}]")
    };
    format!(
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: default}}\nspec:\n  role: r\n  \
         amiSelectorTerms: [{{alias: al2023@latest}}]\n  subnetSelectorTerms: [{{tags: {{k: v}}}}]\n  \
         securityGroupSelectorTerms: [{{tags: {{k: v}}}}]\n---\n\
         apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: accel}}\nspec:\n  template:\n    spec:\n      \
         nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      requirements:\n        \
         - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}\n        \
         - {{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a]}}\n---\n\
         apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {{name: {class}}}\n\
         spec: {{selectors: [{{cel: {{expression: 'device.driver == \"{driver}\"'}}}}]}}\n---\n\
         apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {{name: want, namespace: default}}\n\
         spec: {{spec: {{devices: {{requests: [{{name: r, exactly: {{deviceClassName: {class}, count: {count}{selectors}}}}}]}}}}}}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {{name: worker, namespace: default}}\n\
         spec: {{resourceClaims: [{{name: c, resourceClaimTemplateName: want}}], containers: [{{name: c, image: x, resources: {{requests: {{cpu: 100m}}}}}}]}}\n"
    )
}

/// AWS gates DRANVIDIAGPU and DRAEFA (docs/dra.md): with a gate on, the AWS catalogue's GPU and EFA types carry
/// slice templates, so a pod whose claim asks for an NVIDIA GPU or EFA interfaces gets a node; off (the default),
/// nothing offers the devices.
#[test]
fn aws_dra_gates_publish_gpu_and_efa_slice_templates() {
    let tmp = TempDir::new("aws-dra");
    let gpu = tmp.write(
        "gpu.yaml",
        &aws_dra_input(
            "gpu.nvidia.com",
            "gpu.nvidia.com",
            1,
            r#"device.attributes["gpu.nvidia.com"].productName == "A10G""#,
        ),
    );
    let doc = simulate_json(&[&gpu, "--ignore-dra-requests=false", "--aws-feature-gates", "DRANVIDIAGPU=true"]);
    assert_eq!(doc["summary"]["unschedulablePods"], 0, "{doc}");
    let new = &doc["newNodes"][0];
    assert!(new["instanceType"].as_str().is_some_and(|t| t.starts_with("g5.")), "an A10G type: {new}");
    assert_eq!(new["requestedDraDrivers"], serde_json::json!(["gpu.nvidia.com"]), "{new}");
    let off = simulate_json(&[&gpu, "--ignore-dra-requests=false"]);
    assert_eq!(off["summary"]["unschedulablePods"], 1, "no AWS type offers the GPU without the gate: {off}");

    let efa = tmp.write("efa.yaml", &aws_dra_input("efa", "dra.networking.k8s.aws", 4, ""));
    let doc = simulate_json(&[&efa, "--ignore-dra-requests=false", "--aws-feature-gates", "DRAEFA=true"]);
    assert_eq!(doc["summary"]["unschedulablePods"], 0, "{doc}");
    assert_eq!(doc["newNodes"][0]["requestedDraDrivers"], serde_json::json!(["dra.networking.k8s.aws"]), "{doc}");

    // The gate without IGNORE_DRA_REQUESTS=false is noted: the templates are not used.
    let (_, notes) = simulate_with_notes(&[&efa, "--aws-feature-gates", "DRAEFA=true"]);
    assert!(
        notes.contains("AWS feature gate(s) DRAEFA publish DRA slice templates, but IGNORE_DRA_REQUESTS=true"),
        "{notes}"
    );
}

/// A kwok instance-type entry with `cpu` vCPUs and one offering in zone-a.
fn one_offering_type(name: &str, cpu: &str, capacity_type: &str, price: f64) -> String {
    format!(
        r#"{{"name": "{name}", "offerings": [{{"Price": {price}, "Available": true, "Requirements": [
             {{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["{capacity_type}"]}},
             {{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}}]}}],
           "architecture": "amd64", "operatingSystems": ["linux"],
           "resources": {{"cpu": "{cpu}", "memory": "16Gi", "pods": "110"}}}}"#
    )
}

/// A NodePool consolidating at once with a 100 % budget, allowing these capacity types.
fn consolidating_pool(capacity_types: &str) -> String {
    format!(
        "{POOL}        - {{key: karpenter.sh/capacity-type, operator: In, values: [{capacity_types}]}}\n  \
         disruption: {{consolidateAfter: 0s, budgets: [{{nodes: '100%'}}]}}\n"
    )
}

/// An initialized Node of the default pool with its NodeClaim, in zone-a.
fn managed_node(name: &str, instance_type: &str, capacity_type: &str, cpu: &str) -> String {
    let labels = format!(
        "{{kubernetes.io/hostname: {name}, kubernetes.io/os: linux, kubernetes.io/arch: amd64, \
         node.kubernetes.io/instance-type: {instance_type}, topology.kubernetes.io/zone: zone-a, \
         karpenter.sh/capacity-type: {capacity_type}, karpenter.sh/nodepool: default, \
         karpenter.sh/initialized: 'true', karpenter.sh/registered: 'true'}}"
    );
    let resources = format!("{{cpu: '{cpu}', memory: 16Gi, pods: '110'}}");
    let condition =
        |t: &str| format!("{{type: {t}, status: 'True', reason: {t}, lastTransitionTime: '2025-12-31T00:00:00Z'}}");
    format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {labels}}}\nspec: {{providerID: 'kwok://{name}'}}\n\
         status: {{allocatable: {resources}, capacity: {resources}}}\n---\n\
         apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {{name: {name}, labels: {labels}}}\n\
         spec: {{nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}, requirements: []}}\n\
         status: {{nodeName: {name}, providerID: 'kwok://{name}', capacity: {resources}, allocatable: {resources}, \
         conditions: [{}, {}, {}]}}\n",
        condition("Launched"),
        condition("Registered"),
        condition("Initialized")
    )
}

/// A running pod bound to `node`.
fn bound_pod(name: &str, node: &str, cpu: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\n\
         spec: {{nodeName: {node}, containers: [{{name: c, image: pause, resources: {{requests: {{cpu: '{cpu}'}}}}}}]}}\n\
         status: {{phase: Running}}\n"
    )
}

/// (offset, method, decision, nodes removed, nodes launched) of every disruption command.
fn disruption_commands(doc: &Value) -> Vec<(String, String, String, usize, usize)> {
    events_of(doc, "Disruption")
        .iter()
        .map(|e| {
            let count = |k: &str| e[k].as_array().map_or(0, Vec::len);
            let text = |v: &Value| v.as_str().unwrap_or("?").to_owned();
            (
                text(&e["offset"]),
                text(&e["command"]["method"]),
                text(&e["command"]["decision"]),
                count("nodesRemoved"),
                count("nodesLaunched"),
            )
        })
        .collect()
}

/// Two 1-vCPU on-demand nodes whose type has no spot offering, in a pool that may launch spot; the one spot type
/// costs what one node costs. Merging both onto it saves what deleting the emptier node saves, and moves every
/// pod: as upstream, the same-instance-type check sees the candidates' own type among the options and refuses the
/// merge, and single-node consolidation deletes a node.
#[test]
fn consolidating_on_demand_onto_spot_that_saves_no_more_than_a_delete_deletes() {
    let tmp = TempDir::new("od-to-spot");
    let types = tmp.write(
        "types.json",
        &format!(
            "[{}, {}]",
            one_offering_type("od-small", "1", "on-demand", 0.05),
            one_offering_type("spot-small", "1", "spot", 0.05)
        ),
    );
    let cluster = tmp.write(
        "cluster.yaml",
        &[
            consolidating_pool("on-demand, spot"),
            managed_node("n1", "od-small", "on-demand", "1"),
            bound_pod("n1-web", "n1", "300m"),
            managed_node("n2", "od-small", "on-demand", "1"),
            bound_pod("n2-web", "n2", "500m"),
        ]
        .join("---\n"),
    );
    let doc = simulate_json(&[&cluster, "--instance-types", &types, "--for", "1m"]);
    let commands = disruption_commands(&doc);
    assert_eq!(
        commands,
        [("15s".to_owned(), "SingleNodeConsolidation".to_owned(), "Delete".to_owned(), 1, 0)],
        "{:#}",
        doc["events"]
    );
    assert_eq!(doc["summary"]["after"]["nodes"], 1, "{:#}", doc["summary"]);
}

/// Four 4-vCPU nodes with a 1-vCPU pod each: multi-node consolidation decides to delete three. During the
/// validation wait a second pod lands on every node, and the command fails validation. As upstream's method loop,
/// single-node consolidation takes its turn in the same pass (and deletes one node); a new pass from the first
/// method would have had multi-node consolidation delete two.
#[test]
fn a_multi_node_command_rejected_by_validation_hands_over_to_single_node_consolidation() {
    let tmp = TempDir::new("multi-then-single");
    let types = tmp.write("types.json", &format!("[{}]", one_offering_type("c4", "4", "on-demand", 0.2)));
    let mut cluster = vec![consolidating_pool("on-demand")];
    let mut late = Vec::new();
    for n in ["a", "b", "c", "d"] {
        cluster.push(managed_node(n, "c4", "on-demand", "4"));
        cluster.push(bound_pod(&format!("{n}-web"), n, "1"));
        late.push(bound_pod(&format!("{n}-late"), n, "1"));
    }
    let cluster = tmp.write("cluster.yaml", &cluster.join("---\n"));
    tmp.write("late.yaml", &late.join("---\n"));
    let timeline = tmp.write("timeline.yaml", "steps:\n  - at: 10s\n    apply: late.yaml\n  - advance: 1m\n");
    let doc = simulate_json(&[&cluster, "--instance-types", &types, "--timeline", &timeline]);
    let rejected = events_of(&doc, "ValidationFailed");
    assert_eq!(rejected.len(), 1, "{:#}", doc["events"]);
    assert_eq!(rejected[0]["offset"], "15s");
    assert_eq!(rejected[0]["command"]["method"], "MultiNodeConsolidation");
    let commands = disruption_commands(&doc);
    assert_eq!(
        commands.first(),
        Some(&("30s".to_owned(), "SingleNodeConsolidation".to_owned(), "Delete".to_owned(), 1, 0)),
        "{:#}",
        doc["events"]
    );
    let first = events_of(&doc, "Disruption")[0];
    assert_eq!(first["decidedAt"], "2026-01-01T00:00:15Z", "decided in the pass that rejected the multi-node command");
}

/// The issue-33 fixtures (`tests/fixtures/simulate/`), by path from the workspace root.
fn fixture(name: &str) -> String {
    format!("bins/karpenter-controller/tests/fixtures/simulate/{name}")
}

fn notes_of(doc: &Value) -> Vec<String> {
    doc["notes"].as_array().expect("notes").iter().filter_map(Value::as_str).map(str::to_owned).collect()
}

/// The NodePools of the nodes a run launched (`newNodes` of a plain run, the launch events of a run over time).
fn launched_pools(doc: &Value) -> Vec<String> {
    let pool = |n: &Value| n["nodePool"].as_str().unwrap_or("?").to_owned();
    match doc["newNodes"].as_array() {
        Some(nodes) => nodes.iter().map(pool).collect(),
        None => doc["events"]
            .as_array()
            .expect("events")
            .iter()
            .flat_map(|e| e["nodesLaunched"].as_array().cloned().unwrap_or_default())
            .map(|n| pool(&n))
            .collect(),
    }
}

/// Provisioning launches from no NodePool that is not Ready or is being deleted (the controller's rule, shared),
/// in one pass and over time, even when such a pool weighs more; a note names each pool left out.
#[test]
fn node_pools_not_ready_or_being_deleted_launch_nothing() {
    let file = fixture("pools-not-ready-or-deleting.yaml");
    for args in [vec![file.as_str()], vec![file.as_str(), "--for", "10m"]] {
        let doc = simulate_json(&args);
        let pools = launched_pools(&doc);
        assert!(!pools.is_empty() && pools.iter().all(|p| p == "ready"), "{args:?}: {pools:?}");
        let notes = notes_of(&doc);
        for expected in [
            "NodePool broken left out of provisioning: it is not ready (Ready=False, ValidationFailed)",
            "NodePool leaving left out of provisioning: it is being deleted",
        ] {
            assert!(notes.iter().any(|n| n == expected), "{args:?}: {notes:?}");
        }
    }
}

/// The pods of nodes being deleted (a deletion timestamp, or the karpenter.sh/disrupted taint) are scheduled
/// again, as the controller's provisioner does: active pods and a StatefulSet's terminating one; not DaemonSet
/// pods, finished pods, do-not-disrupt pods or pods a PodDisruptionBudget never lets go. Over time the deleted
/// node whose pods all moved is drained and removed; the one still holding protected pods stays, and so does the
/// one that is only tainted (its disruption command is not in the input).
#[test]
fn pods_of_nodes_being_deleted_are_scheduled_again() {
    let file = fixture("nodes-being-deleted.yaml");
    let doc = simulate_json(&[&file]);
    let mut moved: Vec<String> = doc["newNodes"]
        .as_array()
        .expect("newNodes")
        .iter()
        .flat_map(|n| n["pods"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p.as_str().map(str::to_owned))
        .collect();
    moved.sort_unstable();
    assert_eq!(moved, ["default/db-0", "default/web-a", "default/web-b", "default/web-c"], "{doc:#}");
    assert_eq!(doc["summary"]["unschedulablePods"], 0, "{doc:#}");
    let notes = notes_of(&doc);
    assert!(
        notes.iter().any(|n| n
            == "4 pods of nodes being deleted scheduled again, as the controller does: \
                                   default/db-0, default/web-a, default/web-b, default/web-c"),
        "{notes:?}"
    );

    let doc = simulate_json(&[&file, "--for", "5m"]);
    let events = doc["events"].as_array().expect("events");
    let terminated: Vec<&Value> = events.iter().filter(|e| e["type"] == "Termination").collect();
    assert_eq!(terminated.len(), 1, "{:#}", doc["events"]);
    assert_eq!(terminated[0]["nodesRemoved"], serde_json::json!(["leaving-3"]), "{:#}", doc["events"]);
    let nodes: Vec<&str> = doc["nodes"].as_array().expect("nodes").iter().filter_map(|n| n["name"].as_str()).collect();
    assert!(nodes.contains(&"leaving-1") && nodes.contains(&"leaving-2") && !nodes.contains(&"leaving-3"), "{nodes:?}");
    let pods_on =
        |name: &str| doc["nodes"].as_array().unwrap().iter().find(|n| n["name"] == name).unwrap()["pods"].clone();
    assert_eq!(pods_on("leaving-1"), 3, "agent, pinned and guarded stay: {:#}", doc["nodes"]);
    assert_eq!(pods_on("leaving-2"), 0, "web-b moved: {:#}", doc["nodes"]);
}

/// A static NodePool gets its replicas from simulate as from the controller's static provisioning (gate
/// StaticCapacity), in one pass and over time; without the gate a note says why nothing is created.
#[test]
fn static_node_pools_get_their_replicas() {
    let gate = ["--feature-gates", "StaticCapacity=true"];
    // kOps: a static pool of an EC2NodeClass with amiFamily Custom.
    let kops = "examples/simulate/kops-static.yaml";
    let doc = simulate_json(&[kops, gate[0], gate[1]]);
    let nodes = doc["newNodes"].as_array().expect("newNodes");
    assert_eq!(nodes.len(), 2, "{doc:#}");
    for (i, n) in nodes.iter().enumerate() {
        assert_eq!(n["name"], format!("nodes-us-east-1a-static-{}", i + 1));
        assert_eq!(n["nodePool"], "nodes-us-east-1a");
        assert_eq!(n["instanceType"], "t3.medium");
        assert_eq!(n["zone"], "us-east-1a");
        assert_eq!(n["capacityType"], "on-demand");
        assert!(n["pods"].as_array().is_some_and(Vec::is_empty), "{n}");
    }
    let table = simulate_ok(&[kops, gate[0], gate[1]]);
    assert!(table.contains("nodes-us-east-1a-static-1"), "{table}");
    let doc = simulate_json(&[kops]);
    assert_eq!(doc["newNodes"], serde_json::json!([]), "{doc:#}");
    assert!(
        notes_of(&doc).iter().any(|n| n.starts_with("NodePool nodes-us-east-1a is static (spec.replicas: 2)")),
        "{:?}",
        notes_of(&doc)
    );

    // KWOK: one replica of three runs; two are created at once, and over an hour the expiring nodes are
    // replaced, so the pool ends with its three replicas.
    let file = fixture("static-pool-kwok.yaml");
    let doc = simulate_json(&[&file, gate[0], gate[1]]);
    assert_eq!(launched_pools(&doc), ["fixed", "fixed"], "{doc:#}");
    assert_eq!(doc["newNodes"][0]["instanceType"], "c-2x-amd64-linux");
    let doc = simulate_json(&[&file, "--for", "1h", gate[0], gate[1]]);
    let launched = launched_pools(&doc);
    assert!(launched.len() >= 4 && launched.iter().all(|p| p == "fixed"), "{launched:?} {:#}", doc["events"]);
    let expired = doc["events"].as_array().unwrap().iter().filter(|e| e["type"] == "Expiration").count();
    assert!(expired >= 1, "{:#}", doc["events"]);
    let final_nodes = doc["nodes"].as_array().expect("nodes");
    assert_eq!(final_nodes.len(), 3, "{final_nodes:#?}");
    let doc = simulate_json(&[&file, "--for", "1h"]);
    assert!(launched_pools(&doc).is_empty(), "no gate, no static nodes: {:#}", doc["events"]);
}

/// The new node (zone, or `None` when the pod is unschedulable) of `pod` in a one-pass JSON document.
fn new_node_zone_of(doc: &Value, pod: &str) -> Option<String> {
    doc["newNodes"]
        .as_array()
        .expect("newNodes")
        .iter()
        .find(|n| n["pods"].as_array().is_some_and(|p| p.iter().any(|p| p == pod)))
        .map(|n| n["zone"].as_str().unwrap_or_default().to_owned())
}

#[test]
fn preference_and_min_values_policies_change_provisioning_as_in_the_controller() {
    let fixture = "bins/karpenter-controller/tests/fixtures/simulate/policies.yaml";
    let default = simulate_json(&[fixture]);
    assert_eq!(new_node_zone_of(&default, "default/web").as_deref(), Some("test-zone-c"));
    assert_eq!(new_node_zone_of(&default, "default/batch"), None);
    let unschedulable = default["unschedulable"].to_string();
    assert!(unschedulable.contains("default/batch") && unschedulable.contains("minValues"), "{unschedulable}");

    let relaxed = simulate_json(&[fixture, "--preference-policy", "Ignore", "--min-values-policy", "BestEffort"]);
    assert_eq!(new_node_zone_of(&relaxed, "default/web").as_deref(), Some("test-zone-a"));
    assert!(new_node_zone_of(&relaxed, "default/batch").is_some(), "{relaxed}");
    assert_eq!(relaxed["summary"]["unschedulablePods"], 0);

    // Over simulated time the provisioner takes them too.
    let timeline = simulate_json(&[fixture, "--for", "1m", "--preference-policy=Ignore"]);
    let launched = events_of(&timeline, "Provisioning")[0]["nodesLaunched"].to_string();
    assert!(launched.contains("test-zone-a") && !launched.contains("test-zone-c"), "{launched}");

    // The controller's own parser: a bad value is a usage error naming the accepted ones.
    let (code, _, stderr) = run(&["simulate", fixture, "--preference-policy", "respect"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("use Respect or Ignore"), "{stderr}");
    let (code, _, stderr) = run(&["simulate", fixture, "--min-values-policy", "Lax"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("Strict") && stderr.contains("BestEffort"), "{stderr}");
}

#[test]
fn reports_show_taints_annotations_and_the_consolidatable_condition() {
    let fixture = "bins/karpenter-controller/tests/fixtures/simulate/node-details.yaml";
    let doc = simulate_json(&[fixture]);
    let node = |name: &str| -> &Value {
        doc["existingNodes"].as_array().expect("nodes").iter().find(|n| n["name"] == name).expect(name)
    };
    assert_eq!(node("old")["consolidatable"], serde_json::json!({"status": "True", "at": "2026-03-01T11:10:00Z"}));
    assert_eq!(node("fresh")["consolidatable"], serde_json::json!({"status": "False", "at": "2026-03-01T12:10:00Z"}));
    assert_eq!(node("gpu")["consolidatable"], serde_json::json!({"status": "False"}));
    assert_eq!(
        node("gpu")["taints"],
        serde_json::json!([
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            {"key": "example.com/draining", "effect": "PreferNoSchedule"}
        ])
    );
    assert_eq!(node("gpu")["annotations"]["team.example.com/owner"], "ml");
    assert!(node("old").get("taints").is_none() && node("old").get("annotations").is_none());

    let table = simulate_ok(&[fixture]);
    assert!(table.contains("CONSOLIDATABLE"), "{table}");
    let row = |name: &str| table.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_default().to_owned();
    assert!(row("old").contains(" True "), "{table}");
    assert!(row("fresh").contains("False (at 2026-03-01T12:10:00Z)"), "{table}");
    assert!(
        table.contains(
            "  gpu: taints: nvidia.com/gpu=present:NoSchedule, example.com/draining:PreferNoSchedule; \
             annotations: karpenter.sh/do-not-disrupt=true, karpenter.sh/nodepool-hash=4128310846, \
             team.example.com/owner=ml"
        ),
        "{table}"
    );

    // Over time: the final nodes carry the same details (the empty `old` and `fresh` are consolidated away).
    let timeline = simulate_json(&[fixture, "--for", "30m"]);
    let gpu = timeline["nodes"].as_array().expect("nodes").iter().find(|n| n["name"] == "gpu").expect("gpu stays");
    assert_eq!(gpu["taints"][0]["key"], "nvidia.com/gpu", "{timeline}");
    assert_eq!(gpu["consolidatable"], serde_json::json!({"status": "False"}));
    let table = simulate_ok(&[fixture, "--for", "30m"]);
    assert!(table.contains("  gpu: taints: nvidia.com/gpu=present:NoSchedule"), "{table}");
}

#[test]
fn delete_steps_drain_nodes_and_cascade_as_the_api_server_does() {
    let dir = "bins/karpenter-controller/tests/fixtures/simulate/deletes";
    let cluster = format!("{dir}/cluster.yaml");
    let timeline = format!("{dir}/timeline.yaml");
    let doc = simulate_json(&[&cluster, "--timeline", &timeline, "--for", "10m"]);
    let events: Vec<String> = doc["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            format!(
                "{} {} -{} +{}",
                e["offset"].as_str().unwrap_or("?"),
                e["type"].as_str().unwrap_or("?"),
                e["nodesRemoved"].as_array().map(|a| a.len()).unwrap_or(0),
                e["nodesLaunched"].as_array().map(|a| a.len()).unwrap_or(0)
            ) + ": "
                + e["message"].as_str().unwrap_or("?")
        })
        .collect();
    let find = |prefix: &str| {
        events.iter().find(|e| e.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix:?} in {events:#?}"))
    };
    assert!(find("1m Step").ends_with("delete node node-a: draining, then terminated"), "{events:#?}");
    // node-a waits for its PDB-held pod until the PDB goes; then the pod moves and node-a is terminated.
    assert!(!events.iter().any(|e| e.starts_with("1m Termination")), "{events:#?}");
    assert!(find("2m Termination -1").contains("node-a"), "{events:#?}");
    assert!(find("3m Step").ends_with("delete Deployment default/web: 2 pods deleted with it"), "{events:#?}");
    assert!(find("4m Step").ends_with("delete NodePool batch: 1 NodeClaim of it deleted (drained, then terminated)"));
    assert!(find("4m Termination -1").contains("node-b"), "{events:#?}");
    assert!(find("5m Step").ends_with("delete Namespace shop: 1 pod and 0 other objects in it deleted"));
    let nodes: Vec<&str> = doc["nodes"].as_array().expect("nodes").iter().filter_map(|n| n["name"].as_str()).collect();
    assert!(!nodes.contains(&"node-a") && !nodes.contains(&"node-b"), "{nodes:?}");
    // Only `solo` and `worker` are left, both bound, on the default pool's nodes.
    assert_eq!(doc["summary"]["after"]["pods"], 2, "{:#}", doc["summary"]);
    assert_eq!(doc["summary"]["after"]["pendingPods"], 0);

    // Bad deletions name the step and the field.
    let tmp = TempDir::new("bad-deletes");
    let bad = tmp.write("bad.yaml", "steps:\n  - {at: 1m, delete: nodepool/a/b}\n  - {at: 2m, delete: secret/x}\n");
    let (code, _, stderr) = run(&["simulate", &cluster, "--timeline", &bad]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("steps[0].delete: NodePool is cluster-scoped: expected nodepool/NAME"), "{stderr}");
    assert!(stderr.contains("steps[1].delete: expected KIND/NAME or KIND/NAMESPACE/NAME"), "{stderr}");
    let missing = tmp.write("missing.yaml", "steps:\n  - {at: 1m, delete: statefulset/data/db}\n");
    let (code, _, stderr) = run(&["simulate", &cluster, "--timeline", &missing]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("steps[0].delete: StatefulSet data/db does not exist at 1m"), "{stderr}");
}

#[test]
fn reserved_offerings_of_a_kwok_file_are_used_up_to_their_capacity() {
    let dir = "bins/karpenter-controller/tests/fixtures/simulate";
    let types = format!("{dir}/reserved-instance-types.json");
    let doc = simulate_json(&[&format!("{dir}/reserved.yaml"), "--instance-types", &types]);
    let launches: Vec<(String, f64)> = doc["newNodes"]
        .as_array()
        .expect("newNodes")
        .iter()
        .map(|n| (n["capacityType"].as_str().unwrap_or("?").to_owned(), n["price"].as_f64().unwrap_or(-1.0)))
        .collect();
    // One instance left in cr-0123: one node there, the other on-demand.
    assert_eq!(launches, [("reserved".to_owned(), 0.05), ("on-demand".to_owned(), 0.2)], "{doc}");

    // Bad reservations name the entry and the field.
    let tmp = TempDir::new("bad-reservations");
    let text = std::fs::read_to_string(workspace_root().join(&types)).expect("fixture");
    let no_id = tmp.write("no-id.json", &text.replace("karpenter.k8s.aws/capacity-reservation-id", "example.com/id"));
    let (code, _, stderr) = run(&["simulate", &format!("{dir}/reserved.yaml"), "--instance-types", &no_id]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("entry 0 (\"big-4x\"): offerings[1].Requirements: a reserved offering needs exactly one value of karpenter.k8s.aws/capacity-reservation-id"),
        "{stderr}"
    );
    let no_capacity = tmp.write("no-capacity.json", &text.replace("\"ReservationCapacity\": 1, ", ""));
    let (code, _, stderr) = run(&["simulate", &format!("{dir}/reserved.yaml"), "--instance-types", &no_capacity]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("offerings[1].ReservationCapacity: required for a reserved offering"), "{stderr}");
}

/// Two full 4-vCPU nodes (a 3-vCPU pod each, so a drifted one needs a replacement) in a pool whose budget allows
/// one disruption at a time; the timeline drifts the pool at the start and runs three minutes.
fn drifting_pair(tmp: &TempDir) -> (String, String, String) {
    let types = tmp.write("types.json", &format!("[{}]", one_offering_type("c4", "4", "on-demand", 0.2)));
    let pool = format!(
        "{POOL}  disruption: {{consolidationPolicy: WhenEmpty, consolidateAfter: 1h, budgets: [{{nodes: '1'}}]}}\n"
    );
    let mut cluster = vec![pool];
    for n in ["a", "b"] {
        cluster.push(managed_node(n, "c4", "on-demand", "4"));
        cluster.push(bound_pod(&format!("{n}-web"), n, "3"));
    }
    let cluster = tmp.write("cluster.yaml", &cluster.join("---\n"));
    let timeline = tmp.write("timeline.yaml", "steps:\n  - at: 0s\n    drift: nodepool/default\n  - advance: 3m\n");
    (types, cluster, timeline)
}

/// (offset, type, nodes named by the event) of the disruption and initialization events.
fn command_events(doc: &Value) -> Vec<(String, String, Vec<String>)> {
    let kinds = ["DisruptionStarted", "Initialized", "Disruption", "DisruptionFailed"];
    let names = |e: &Value| -> Vec<String> {
        let removed = e["nodesRemoved"].as_array().into_iter().flatten().filter_map(|n| n.as_str());
        let launched = e["nodesLaunched"].as_array().into_iter().flatten().filter_map(|n| n["name"].as_str());
        let candidates = e["command"]["candidates"].as_array().into_iter().flatten().filter_map(|c| c["node"].as_str());
        match e["type"].as_str() {
            Some("Disruption") => removed.map(str::to_owned).collect(),
            Some("Initialized") => vec![e["message"].as_str().unwrap_or("?").to_owned()],
            _ => candidates.chain(launched).map(str::to_owned).collect(),
        }
    };
    doc["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| kinds.iter().any(|k| e["type"] == *k))
        .map(|e| {
            (e["offset"].as_str().unwrap_or("?").to_owned(), e["type"].as_str().unwrap_or("?").to_owned(), names(e))
        })
        .collect()
}

/// Budget `nodes: "1"`, two drifted nodes, nodes taking 60 s to start: the first command stays in flight (its
/// candidate tainted and counted against the budget) until its replacement initializes, so the second node is
/// disrupted only after the first command completed. Without a startup delay both go at the start.
#[test]
fn a_command_in_flight_holds_the_budget_until_its_replacement_initializes() {
    let tmp = TempDir::new("in-flight-budget");
    let (types, cluster, timeline) = drifting_pair(&tmp);
    let doc = simulate_json(&[&cluster, "--instance-types", &types, "--timeline", &timeline, "--node-startup", "60s"]);
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<String>>();
    let initialized = |node: &str, at: &str| {
        format!("1 node initialized: {node} (launched at {at}); 0 pending pods nominated to them bound")
    };
    assert_eq!(
        command_events(&doc),
        [
            ("0s".to_owned(), "DisruptionStarted".to_owned(), s(&["a", "default-1"])),
            ("1m".to_owned(), "Initialized".to_owned(), vec![initialized("default-1", "0s")]),
            ("1m".to_owned(), "Disruption".to_owned(), s(&["a"])),
            ("1m".to_owned(), "DisruptionStarted".to_owned(), s(&["b", "default-2"])),
            ("2m".to_owned(), "Initialized".to_owned(), vec![initialized("default-2", "1m")]),
            ("2m".to_owned(), "Disruption".to_owned(), s(&["b"])),
        ],
        "{:#}",
        doc["events"]
    );
    // The completed command says when its replacement launched and initialized; its pod moved then.
    let first = events_of(&doc, "Disruption")[0];
    assert_eq!(first["launchedAt"], "2026-01-01T00:00:00Z", "{first}");
    assert_eq!(first["initializedAt"], "2026-01-01T00:01:00Z", "{first}");
    assert_eq!(first["podsPlaced"], 1, "{first}");
    let summary = &doc["summary"];
    assert_eq!((summary["commands"].as_u64(), summary["nodesLaunched"].as_u64()), (Some(2), Some(2)), "{summary}");
    assert_eq!(summary["after"]["nodes"], 2, "{summary}");
    assert!(summary.get("commandsInFlight").is_none(), "{summary}");

    // Today's behaviour without a startup delay: replacements initialize at once, the budget is free again in
    // the same instant, and both nodes go at the start.
    let doc = simulate_json(&[&cluster, "--instance-types", &types, "--timeline", &timeline]);
    let at: Vec<String> = disruption_commands(&doc).into_iter().map(|c| c.0).collect();
    assert_eq!(at, ["0s", "0s"], "{:#}", doc["events"]);
    assert!(events_of(&doc, "DisruptionStarted").is_empty() && events_of(&doc, "Initialized").is_empty());
}

/// Mid-flight: the candidate keeps its pod and the `karpenter.sh/disrupted:NoSchedule` taint, is taken by no
/// second command (its verdict says it is being deleted), and counts against the budget, so the other drifted
/// node waits; the report says a command is still in flight.
#[test]
fn a_command_in_flight_blocks_its_candidate_from_a_second_command() {
    let tmp = TempDir::new("in-flight-blocks");
    let (types, cluster, _) = drifting_pair(&tmp);
    let timeline = tmp.write("mid.yaml", "steps:\n  - at: 0s\n    drift: nodepool/default\n  - advance: 30s\n");
    let doc = simulate_json(&[&cluster, "--instance-types", &types, "--timeline", &timeline, "--node-startup", "60s"]);
    let started = events_of(&doc, "DisruptionStarted");
    assert_eq!(started.len(), 1, "{:#}", doc["events"]);
    assert!(events_of(&doc, "Disruption").is_empty(), "{:#}", doc["events"]);
    assert_eq!(doc["summary"]["commandsInFlight"], 1, "{:#}", doc["summary"]);
    let node =
        |name: &str| doc["nodes"].as_array().expect("nodes").iter().find(|n| n["name"] == name).cloned().expect("node");
    let a = node("a");
    assert_eq!(a["pods"], 1, "the candidate's pod stays until the command finishes: {a}");
    assert_eq!(a["taints"][0]["key"], "karpenter.sh/disrupted", "{a}");
    let verdict = |name: &str| {
        doc["verdicts"].as_array().expect("verdicts").iter().find(|v| v["node"] == name).cloned().expect("verdict")
    };
    assert_eq!(verdict("a")["reason"]["code"], "BeingDeleted", "{}", verdict("a"));
    let b = verdict("b");
    assert!(b["message"].as_str().is_some_and(|m| m.contains("1 already disrupting")), "{b}");
    // The replacement is still launching: not a node yet, and said so.
    assert!(doc["nodes"].as_array().expect("nodes").iter().all(|n| n["name"] != "default-1"));
    let notes = notes_of(&doc);
    assert!(notes.iter().any(|n| n.contains("still waiting for its replacements (default-1)")), "{notes:?}");
}

/// A replacement slower than the controller's replacement timeout (10 minutes for a few candidates): the command
/// is rolled back, the candidate untainted and the replacement deleted, and the next pass starts it again.
#[test]
fn a_replacement_that_does_not_initialize_in_time_rolls_the_command_back() {
    let tmp = TempDir::new("in-flight-timeout");
    let (types, cluster, _) = drifting_pair(&tmp);
    let timeline = tmp.write("long.yaml", "steps:\n  - at: 0s\n    drift: node/a\n  - advance: 11m\n");
    let doc = simulate_json(&[&cluster, "--instance-types", &types, "--timeline", &timeline, "--node-startup", "15m"]);
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<String>>();
    assert_eq!(
        command_events(&doc),
        [
            ("0s".to_owned(), "DisruptionStarted".to_owned(), s(&["a", "default-1"])),
            ("10m1s".to_owned(), "DisruptionFailed".to_owned(), s(&["a"])),
            ("10m1s".to_owned(), "DisruptionStarted".to_owned(), s(&["a", "default-2"])),
        ],
        "{:#}",
        doc["events"]
    );
    let failed = events_of(&doc, "DisruptionFailed")[0];
    assert!(
        failed["message"].as_str().is_some_and(|m| m.contains("replacements not initialized after 600s")),
        "{failed}"
    );
    assert_eq!(failed["nodesRemoved"][0], "default-1", "the launching replacement is deleted: {failed}");
    assert_eq!(doc["summary"]["commandsRolledBack"], 1, "{:#}", doc["summary"]);
}

/// New nodes for pending pods take the startup delay too: the pods wait, nominated, and bind when it is over.
#[test]
fn pending_pods_wait_for_their_new_node_to_initialize() {
    let doc = simulate_json(&["--node-startup", "90s", "--for", "5m"]);
    let provisioning = events_of(&doc, "Provisioning");
    assert_eq!(provisioning.len(), 1, "{:#}", doc["events"]);
    assert_eq!(provisioning[0]["podsPlaced"], 0, "{}", provisioning[0]);
    let initialized = events_of(&doc, "Initialized");
    assert_eq!(initialized.len(), 1, "{:#}", doc["events"]);
    assert_eq!(initialized[0]["offset"], "1m30s");
    assert_eq!(initialized[0]["podsPlaced"], 10, "{}", initialized[0]);
    assert_eq!(doc["summary"]["after"]["pendingPods"], 0, "{:#}", doc["summary"]);
}
