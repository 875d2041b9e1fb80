//! `karpenter-controller simulate [PATH...]`: what Karpenter would do for the pending pods of a set of manifests,
//! without a cluster or a cloud account.
//!
//! 1. Load the manifests (files, directories, `kubectl get -o yaml` List output) with the API crate's loader and
//!    validate the Karpenter objects; any load error or violation stops the run with errors naming file,
//!    document index, object and field.
//! 2. Build the [`ClusterSnapshot`] with the scheduler's file-input rules (unbound pods are pending; workloads
//!    are expanded only when their pods are absent; DaemonSets count as overhead; NodeClaims without a node are
//!    in flight).
//! 3. Evaluate every NodePool against one catalogue (the fake provider's kwok catalogue, or `--instance-types
//!    FILE` in upstream's kwok JSON format) whatever its `nodeClassRef` kind. A referenced node class that is not
//!    in the input is treated as ready (and a note says so); one in the input whose `Ready` condition is not
//!    `True` leaves its NodePools out.
//! 4. Schedule, then report: per new node the offering the fake provider's create would pick, the pods, the
//!    placements on existing nodes, prices, and why each unplaced pod cannot be placed ([`Report`]).
//!
//! With no path, the bundled example `examples/simulate/default.yaml` runs (compiled into the binary).

mod catalogue;
mod pods;
mod report;
mod table;

use std::collections::BTreeMap;
use std::path::PathBuf;

use karpenter_api::loader::{self, Loaded, Object};
use karpenter_api::{Conditions, NodePool, ProviderLabels, ValidationContext};
use karpenter_scheduler::{ClusterSnapshot, PoolInput, SchedulerOptions, schedule};
use serde_json::Value;

pub use catalogue::Catalogue;
pub use report::Report;
pub use table::render;

/// The name the bundled example is reported under.
pub const BUNDLED_NAME: &str = "examples/simulate/default.yaml";
/// The bundled example: a NodePool restricted to Linux and an `inflate` Deployment of 10 pods of 1 CPU.
pub const BUNDLED: &str = include_str!("../../../../examples/simulate/default.yaml");

/// What to simulate.
#[derive(Debug)]
pub struct Options {
    /// Manifest files or directories; empty for the bundled example.
    pub paths: Vec<PathBuf>,
    /// A kwok-format instance-type file replacing the built-in catalogue.
    pub instance_types: Option<PathBuf>,
    /// Whose well-known labels and restricted domains apply.
    pub provider: ProviderLabels,
}

/// The result of a run.
#[derive(Debug)]
pub enum Outcome {
    /// The simulation ran.
    Report(Box<Report>),
    /// The input has problems (each line names file, document, object and field); nothing was simulated.
    InputErrors(Vec<String>),
}

/// Runs one simulation. `Err` for problems outside the manifests (an unreadable instance-type file).
pub fn simulate(options: &Options) -> anyhow::Result<Outcome> {
    let bundled = options.paths.is_empty();
    let (objects, load_errors) =
        if bundled { loader::load_str_all(BUNDLED, BUNDLED_NAME) } else { load_parallel(&options.paths) };

    let mut errors: Vec<String> = load_errors.iter().map(ToString::to_string).collect();
    let ctx = ValidationContext { provider: options.provider.clone() };
    for loaded in &objects {
        let Some(violations) = loaded.object.validate(&ctx) else { continue };
        for v in violations.iter() {
            errors.push(format!("{}: {}: {}: {}", loaded.origin, loaded.object.display_name(), v.path, v.message));
        }
    }
    if !errors.is_empty() {
        return Ok(Outcome::InputErrors(errors));
    }

    let catalogue = match &options.instance_types {
        Some(path) => Catalogue::from_file(path)?,
        None => Catalogue::kwok(),
    };
    let snapshot = match ClusterSnapshot::from_objects(&objects) {
        Ok(s) => s,
        Err(e) => return Ok(Outcome::InputErrors(vec![e.to_string()])),
    };

    let mut notes = Vec::new();
    if objects.is_empty() {
        notes.push("no objects found in the input".to_owned());
    }
    duplicate_notes(&objects, &mut notes);
    let ready = ready_node_pools(&snapshot.node_pools, &objects, &mut notes);
    let pools: Vec<PoolInput<'_>> =
        ready.iter().map(|p| PoolInput { node_pool: p, instance_types: &catalogue.instance_types }).collect();
    let decisions = schedule(&snapshot, &pools, &options.provider, &SchedulerOptions::default());

    let inputs = if bundled {
        vec![BUNDLED_NAME.to_owned()]
    } else {
        options.paths.iter().map(|p| p.display().to_string()).collect()
    };
    let report = Report::build(
        report::Inputs {
            inputs,
            bundled_example: bundled,
            provider: options.provider.name.clone(),
            notes,
            objects: &objects,
            snapshot: &snapshot,
            catalogue: &catalogue,
        },
        decisions,
    );
    Ok(Outcome::Report(Box::new(report)))
}

/// Objects and load errors, as [`loader::load_paths`] returns them.
type Load = (Vec<Loaded>, Vec<loader::LoadError>);

/// [`loader::load_paths`] with the files spread over the available cores (parsing dominates a large input).
/// Objects and errors come out in the same order as from `load_paths`, file by file.
fn load_parallel(paths: &[PathBuf]) -> Load {
    let (files, mut errors) = loader::manifest_files(paths);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, files.len().max(1));
    let mut per_file: Vec<(usize, Load)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let files = &files;
                scope.spawn(move || {
                    files
                        .iter()
                        .enumerate()
                        .skip(t)
                        .step_by(threads)
                        .map(|(i, f)| (i, loader::load_paths([f])))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|payload| std::panic::resume_unwind(payload)))
            .collect()
    });
    per_file.sort_by_key(|(i, _)| *i);
    let mut objects = Vec::new();
    for (_, (loaded, errs)) in per_file {
        objects.extend(loaded);
        errors.extend(errs);
    }
    (objects, errors)
}

/// Duplicate notes shown before `and N more`.
const MAX_DUPLICATE_NOTES: usize = 5;

/// Notes for objects that appear more than once (same kind, namespace and name): a cluster cannot hold both, yet
/// every copy is simulated (two copies of a pod are two pods), so the user should know.
fn duplicate_notes(objects: &[Loaded], notes: &mut Vec<String>) {
    let mut seen: BTreeMap<(String, &str), Vec<&loader::Origin>> = BTreeMap::new();
    for loaded in objects {
        if loaded.object.name().is_some() {
            seen.entry((loaded.object.display_name(), loaded.object.api_version())).or_default().push(&loaded.origin);
        }
    }
    let duplicates: Vec<_> = seen.into_iter().filter(|(_, origins)| origins.len() > 1).collect();
    for ((name, _), origins) in duplicates.iter().take(MAX_DUPLICATE_NOTES) {
        let places: Vec<String> = origins.iter().map(ToString::to_string).collect();
        notes.push(format!(
            "{name} is in the input {} times ({}); every copy is simulated",
            origins.len(),
            places.join(", ")
        ));
    }
    if duplicates.len() > MAX_DUPLICATE_NOTES {
        notes.push(format!(
            "... and {} more objects in the input more than once",
            duplicates.len() - MAX_DUPLICATE_NOTES
        ));
    }
}

/// Readiness of a NodePool's node class as simulate sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ClassState {
    Ready,
    Missing,
    NotReady(String),
}

/// The NodePools whose node class counts as ready; notes for missing classes (treated as ready) and for pools
/// left out.
fn ready_node_pools<'a>(pools: &'a [NodePool], objects: &[Loaded], notes: &mut Vec<String>) -> Vec<&'a NodePool> {
    let mut missing: BTreeMap<(String, String, String), Vec<String>> = BTreeMap::new();
    let mut ready = Vec::new();
    for pool in pools {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let r = &pool.spec.template.spec.node_class_ref;
        match class_state(objects, &r.group, &r.kind, &r.name) {
            ClassState::Ready => ready.push(pool),
            ClassState::Missing => {
                missing.entry((r.kind.clone(), r.name.clone(), r.group.clone())).or_default().push(name);
                ready.push(pool);
            }
            ClassState::NotReady(why) => {
                notes.push(format!("NodePool {name} left out: its {}/{} is not ready ({why})", r.kind, r.name));
            }
        }
    }
    for ((kind, name, group), pools) in missing {
        let label = if pools.len() == 1 { "NodePool" } else { "NodePools" };
        notes.push(format!(
            "{kind}/{name} ({group}) is not in the input: treated as ready ({label} {})",
            pools.join(", ")
        ));
    }
    ready
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

fn class_state(objects: &[Loaded], group: &str, kind: &str, name: &str) -> ClassState {
    let found = objects.iter().find(|l| {
        group_of(l.object.api_version()) == group && l.object.kind() == kind && l.object.name() == Some(name)
    });
    let Some(found) = found else { return ClassState::Missing };
    // (status, reason) of the Ready condition, if the object has one.
    let ready: Option<(String, String)> = match &found.object {
        Object::EC2NodeClass(c) => {
            c.conditions().condition("Ready").map(|c| (format!("{:?}", c.status), c.reason.clone()))
        }
        Object::KWOKNodeClass(c) => {
            c.status.as_ref().and_then(|s| s.condition("Ready")).map(|c| (format!("{:?}", c.status), c.reason.clone()))
        }
        Object::Unknown(u) => unknown_ready(&u.value),
        _ => None,
    };
    match ready {
        // A hand-written node class has no status: nothing says it is not ready.
        None => ClassState::Ready,
        Some((status, _)) if status == "True" => ClassState::Ready,
        Some((status, reason)) if reason.is_empty() => ClassState::NotReady(format!("Ready={status}")),
        Some((status, reason)) => ClassState::NotReady(format!("Ready={status}, {reason}")),
    }
}

fn unknown_ready(value: &Value) -> Option<(String, String)> {
    let conditions = value.get("status")?.get("conditions")?.as_array()?;
    let ready = conditions.iter().find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))?;
    let field = |k: &str| ready.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
    Some((field("status"), field("reason")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_api::load_str;

    const POOLS: &str = "
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: a}
spec: {template: {spec: {nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: missing}, requirements: []}}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: b}
spec: {template: {spec: {nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: missing}, requirements: []}}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: c}
spec: {template: {spec: {nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: broken}, requirements: []}}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: d}
spec: {template: {spec: {nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: plain}, requirements: []}}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: e}
spec: {template: {spec: {nodeClassRef: {group: example.com, kind: FooClass, name: x}, requirements: []}}}
---
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: broken}
spec: {}
status:
  conditions: [{type: Ready, status: 'False', reason: Broken, lastTransitionTime: '2026-01-01T00:00:00Z'}]
---
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: plain}
spec: {}
---
apiVersion: example.com/v1
kind: FooClass
metadata: {name: x}
status:
  conditions: [{type: Ready, status: Unknown}]
";

    #[test]
    fn parallel_loading_keeps_load_paths_order() {
        let dir = std::env::temp_dir().join(format!("karpenter-simulate-load-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).expect("temp dir");
        let pod =
            |name: &str| format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec: {{containers: []}}\n");
        for i in 0..7 {
            let text = format!("{}---\n{}", pod(&format!("a{i}")), pod(&format!("b{i}")));
            let name = if i % 2 == 0 { format!("f{i}.yaml") } else { format!("sub/f{i}.yaml") };
            std::fs::write(dir.join(name), text).expect("write");
        }
        std::fs::write(dir.join("bad.yaml"), "kind: [").expect("write");
        let paths = vec![dir.clone(), dir.join("missing.yaml")];
        let (objects, errors) = load_parallel(&paths);
        let (expected_objects, expected_errors) = loader::load_paths(&paths);
        let _ = std::fs::remove_dir_all(&dir);
        let describe = |o: &[Loaded]| o.iter().map(Loaded::describe).collect::<Vec<_>>();
        assert_eq!(objects.len(), 14);
        assert_eq!(describe(&objects), describe(&expected_objects));
        let messages = |e: &[loader::LoadError]| {
            let mut m: Vec<String> = e.iter().map(ToString::to_string).collect();
            m.sort();
            m
        };
        assert_eq!(errors.len(), 2);
        assert_eq!(messages(&errors), messages(&expected_errors));
    }

    #[test]
    fn duplicates_are_noted_once_per_object() {
        let pod =
            "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\nspec: {containers: [{name: c}]}\n";
        let mut objects = load_str(&format!("{pod}---\n{pod}"), "a.yaml").expect("valid");
        objects.extend(load_str(pod, "b.yaml").expect("valid"));
        objects.extend(load_str(&pod.replace("web", "api"), "b.yaml").expect("valid"));
        let mut notes = Vec::new();
        duplicate_notes(&objects, &mut notes);
        assert_eq!(
            notes,
            ["Pod/default/web is in the input 3 times (a.yaml: document 0, a.yaml: document 1, b.yaml: document 0); \
              every copy is simulated"]
        );
    }

    #[test]
    fn node_classes_missing_are_ready_with_a_note_and_not_ready_ones_leave_pools_out() {
        let objects = load_str(POOLS, "pools.yaml").expect("valid input");
        let snapshot = ClusterSnapshot::from_objects(&objects).expect("snapshot");
        let mut notes = Vec::new();
        duplicate_notes(&objects, &mut notes);
        let ready = ready_node_pools(&snapshot.node_pools, &objects, &mut notes);
        let names: Vec<&str> = ready.iter().filter_map(|p| p.metadata.name.as_deref()).collect();
        assert_eq!(names, ["a", "b", "d"]);
        assert_eq!(
            notes,
            [
                "NodePool c left out: its KWOKNodeClass/broken is not ready (Ready=False, Broken)",
                "NodePool e left out: its FooClass/x is not ready (Ready=Unknown)",
                "KWOKNodeClass/missing (karpenter.kwok.sh) is not in the input: treated as ready (NodePools a, b)",
            ]
        );
    }
}
