//! `simulate --from-cluster`: a running cluster's objects as simulate's input, read with LIST calls only.
//!
//! The client is `run`'s (`karpenter_operator::client`): `--kubeconfig`, else `$KUBECONFIG` or `~/.kube/config`,
//! else the in-cluster service account; `--context` picks a kubeconfig context. Every kind of [`READS`] is listed
//! once, cluster-wide, in pages; nothing is written, watched or patched, so a ClusterRole with `get`, `list` and
//! `watch` on those resources ([`rbac_yaml`], printed in docs/simulate.md) is all it needs. A kind the cluster does
//! not serve (404: a node-class CRD that is not installed) is skipped with a note.
//!
//! The listed objects become the loader's [`Loaded`] objects, so the rest of simulate cannot tell them from
//! manifests, except for what a file cannot say but a live cluster does:
//! * pods that have finished (`Succeeded`, `Failed`) and unbound pods being deleted are left out: they will never
//!   need a node;
//! * finished and suspended Jobs are left out: their pods are gone or not wanted, and simulate would otherwise
//!   expand them into pending pods;
//! * the run starts at the current time (`now`), so `consolidateAfter` and expiry count from the real timestamps.
//!
//! Objects of files given with `--from-cluster` are added to the cluster's; one with the kind, namespace and name
//! of a cluster object replaces it (as `kubectl apply` would), with a note.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::path::PathBuf;

use anyhow::Context;
use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod, PodTemplate, ReplicationController, ResourceQuota, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1beta1::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use karpenter_api::loader::{Loaded, Object, Origin, UnknownObject};
use karpenter_api::{CapacityBuffer, NodeClaim, NodeOverlay, NodePool};
use karpenter_aws::api::EC2NodeClass;
use karpenter_cloudprovider::{Clock, SystemClock};
use karpenter_kwok::api::KWOKNodeClass;
use karpenter_operator::client::{ClientOptions, USER_AGENT, client_from_config};
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, Resource};
use serde::de::DeserializeOwned;

use super::{Options, Outcome};

/// Where the RBAC a live run needs is documented (errors point there).
pub const RBAC_DOC: &str = "docs/simulate.md, section \"A live dry run\"";

/// Objects per LIST page (the apiserver's own default chunk size for kubectl).
const PAGE: u32 = 500;

/// `simulate --from-cluster` and the flags that only make sense with it.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClusterArgs {
    /// Read the cluster (read-only LIST calls) instead of, or besides, manifest files; see docs/simulate.md,
    /// "A live dry run". PATHs given too are added to the cluster's objects (replacing same-named ones).
    #[arg(long)]
    pub from_cluster: bool,
    /// The kubeconfig to read the cluster with (default: $KUBECONFIG, ~/.kube/config, else in-cluster).
    #[arg(long, value_name = "FILE", requires = "from_cluster")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: its current context).
    #[arg(long, value_name = "NAME", requires = "from_cluster")]
    pub context: Option<String>,
}

/// A cluster's objects, ready for [`super::simulate_with`].
#[derive(Debug)]
pub struct ClusterInput {
    /// What the report names as the input: `cluster https://…`.
    pub source: String,
    /// The objects, in the order of [`READS`], each list in the server's order.
    pub objects: Vec<Loaded>,
    /// Objects that could not be decoded (each names the object); nothing is simulated when there are any.
    pub errors: Vec<String>,
    /// What was read and what was skipped.
    pub notes: Vec<String>,
    /// When the cluster was read: simulated time starts here.
    pub now: DateTime<Utc>,
}

/// `simulate`, from the cluster when `cluster.from_cluster`, else from the files alone.
pub fn run(options: &Options, cluster: &ClusterArgs) -> anyhow::Result<Outcome> {
    if !cluster.from_cluster {
        return super::simulate(options);
    }
    let input = read(cluster)?;
    super::simulate_with(options, Some(input))
}

/// Reads the cluster `args` name (on a runtime of its own: simulate is otherwise synchronous).
pub fn read(args: &ClusterArgs) -> anyhow::Result<ClusterInput> {
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the tokio runtime")?;
    runtime.block_on(async {
        let (config, kubeconfig) = load_config(args).await?;
        let server = config.cluster_url.to_string().trim_end_matches('/').to_owned();
        let options = ClientOptions {
            // A one-off read: gentle on the apiserver, a few seconds even for a large cluster.
            qps: 20,
            burst: 40,
            user_agent: format!("{USER_AGENT} (simulate)"),
            kubeconfig: None,
            context: None,
        };
        let client = client_from_config(config, &options).context("building the Kubernetes client")?;
        let connection = Connection { server, kubeconfig };
        read_with(client, &connection, &SystemClock).await
    })
}

/// The server and the credentials' origin, for error messages.
#[derive(Debug, Clone)]
pub struct Connection {
    /// The API server's URL.
    pub server: String,
    /// The kubeconfig used (`in-cluster service account` when none).
    pub kubeconfig: String,
}

/// The configuration `args` name, and where it came from.
async fn load_config(args: &ClusterArgs) -> anyhow::Result<(Config, String)> {
    let kc_options = KubeConfigOptions { context: args.context.clone(), ..KubeConfigOptions::default() };
    if let Some(path) = &args.kubeconfig {
        let kubeconfig =
            Kubeconfig::read_from(path).with_context(|| format!("reading kubeconfig {}", path.display()))?;
        let config = Config::from_custom_kubeconfig(kubeconfig, &kc_options)
            .await
            .with_context(|| format!("kubeconfig {}", path.display()))?;
        return Ok((config, path.display().to_string()));
    }
    let described = std::env::var_os("KUBECONFIG")
        .filter(|v| !v.is_empty())
        .map(|v| PathBuf::from(v).display().to_string())
        .or_else(|| {
            let home = std::env::var_os("HOME")?;
            let path = PathBuf::from(home).join(".kube/config");
            path.exists().then(|| path.display().to_string())
        });
    match described {
        Some(path) => {
            let config = Config::from_kubeconfig(&kc_options).await.with_context(|| format!("kubeconfig {path}"))?;
            Ok((config, path))
        }
        None if args.context.is_some() => {
            anyhow::bail!(
                "--context needs a kubeconfig: none given (--kubeconfig), none in $KUBECONFIG or ~/.kube/config"
            )
        }
        None => {
            let config = Config::incluster().context(
                "no Kubernetes configuration found: no --kubeconfig, no $KUBECONFIG, no ~/.kube/config, and not \
                 running in a pod with a service account",
            )?;
            Ok((config, "in-cluster service account".to_owned()))
        }
    }
}

/// One resource simulate lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadResource {
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// Plural resource name.
    pub resource: &'static str,
}

/// Every resource `--from-cluster` lists, in order: the documented ClusterRole grants exactly these.
pub const READS: &[ReadResource] = &[
    ReadResource { group: "karpenter.sh", resource: "nodepools" },
    ReadResource { group: "karpenter.sh", resource: "nodeclaims" },
    ReadResource { group: "karpenter.sh", resource: "nodeoverlays" },
    ReadResource { group: "karpenter.k8s.aws", resource: "ec2nodeclasses" },
    ReadResource { group: "karpenter.kwok.sh", resource: "kwoknodeclasses" },
    ReadResource { group: "", resource: "nodes" },
    ReadResource { group: "", resource: "pods" },
    ReadResource { group: "apps", resource: "deployments" },
    ReadResource { group: "apps", resource: "replicasets" },
    ReadResource { group: "apps", resource: "statefulsets" },
    ReadResource { group: "apps", resource: "daemonsets" },
    ReadResource { group: "batch", resource: "jobs" },
    ReadResource { group: "policy", resource: "poddisruptionbudgets" },
    // The selectors of SCHEDULER_CONFIG's default spread constraints, as kube-scheduler derives them.
    ReadResource { group: "", resource: "services" },
    ReadResource { group: "", resource: "replicationcontrollers" },
    // CapacityBuffers, the PodTemplates they name and the ResourceQuotas that cap them (`--feature-gates
    // CapacityBuffer=true`; buffers are skipped when the CRD is not installed).
    ReadResource { group: "", resource: "podtemplates" },
    ReadResource { group: "", resource: "resourcequotas" },
    ReadResource { group: "autoscaling.x-k8s.io", resource: "capacitybuffers" },
    // DRA (`--ignore-dra-requests=false`; `resource.k8s.io/v1beta1`, skipped where the cluster does not serve it).
    ReadResource { group: "resource.k8s.io", resource: "resourceclaims" },
    ReadResource { group: "resource.k8s.io", resource: "resourceclaimtemplates" },
    ReadResource { group: "resource.k8s.io", resource: "deviceclasses" },
    ReadResource { group: "resource.k8s.io", resource: "resourceslices" },
];

/// The read-only ClusterRole (and a binding to `subject`, a user) that `--from-cluster` needs: `get`, `list`,
/// `watch` on [`READS`], grouped by API group. docs/simulate.md shows it (this test-only function holds the two
/// equal, and the real-plane test runs simulate as a user bound by the documented role).
#[cfg(test)]
pub fn rbac_yaml(subject: &str) -> String {
    let mut groups: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for r in READS {
        groups.entry(r.group).or_default().push(r.resource);
    }
    let mut out = String::from(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: karpenter-simulate-reader\nrules:\n",
    );
    for (group, resources) in groups {
        out.push_str(&format!(
            "- apiGroups: [\"{group}\"]\n  resources: [{}]\n  verbs: [get, list, watch]\n",
            resources.join(", ")
        ));
    }
    out.push_str(&format!(
        "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: \
         karpenter-simulate-reader\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: \
         karpenter-simulate-reader\nsubjects:\n- apiGroup: rbac.authorization.k8s.io\n  kind: User\n  name: {subject}\n"
    ));
    out
}

/// Reads every resource of [`READS`] through `client` (any `kube::Client`: tests pass the in-process server's).
///
/// `clock` says when the cluster was read: simulated time starts there.
pub async fn read_with(client: Client, connection: &Connection, clock: &dyn Clock) -> anyhow::Result<ClusterInput> {
    let mut listing = Listing::default();
    list::<NodePool>(&client, connection, &mut listing, |o| Object::NodePool(Box::new(o))).await?;
    list::<NodeClaim>(&client, connection, &mut listing, |o| Object::NodeClaim(Box::new(o))).await?;
    list::<NodeOverlay>(&client, connection, &mut listing, |o| Object::NodeOverlay(Box::new(o))).await?;
    list::<EC2NodeClass>(&client, connection, &mut listing, node_class_object::<EC2NodeClass>).await?;
    list::<KWOKNodeClass>(&client, connection, &mut listing, node_class_object::<KWOKNodeClass>).await?;
    list::<Node>(&client, connection, &mut listing, |o| Object::Node(Box::new(o))).await?;
    list::<Pod>(&client, connection, &mut listing, |o| Object::Pod(Box::new(o))).await?;
    list::<Deployment>(&client, connection, &mut listing, |o| Object::Deployment(Box::new(o))).await?;
    list::<ReplicaSet>(&client, connection, &mut listing, |o| Object::ReplicaSet(Box::new(o))).await?;
    list::<StatefulSet>(&client, connection, &mut listing, |o| Object::StatefulSet(Box::new(o))).await?;
    list::<DaemonSet>(&client, connection, &mut listing, |o| Object::DaemonSet(Box::new(o))).await?;
    list::<Job>(&client, connection, &mut listing, |o| Object::Job(Box::new(o))).await?;
    list::<PodDisruptionBudget>(&client, connection, &mut listing, |o| Object::PodDisruptionBudget(Box::new(o)))
        .await?;
    list::<Service>(&client, connection, &mut listing, |o| Object::Service(Box::new(o))).await?;
    list::<ReplicationController>(&client, connection, &mut listing, |o| Object::ReplicationController(Box::new(o)))
        .await?;
    list::<PodTemplate>(&client, connection, &mut listing, |o| Object::PodTemplate(Box::new(o))).await?;
    list::<ResourceQuota>(&client, connection, &mut listing, |o| Object::ResourceQuota(Box::new(o))).await?;
    list::<CapacityBuffer>(&client, connection, &mut listing, |o| Object::CapacityBuffer(Box::new(o))).await?;
    list::<ResourceClaim>(&client, connection, &mut listing, |o| Object::ResourceClaim(Box::new(o))).await?;
    list::<ResourceClaimTemplate>(&client, connection, &mut listing, |o| Object::ResourceClaimTemplate(Box::new(o)))
        .await?;
    list::<DeviceClass>(&client, connection, &mut listing, |o| Object::DeviceClass(Box::new(o))).await?;
    list::<ResourceSlice>(&client, connection, &mut listing, |o| Object::ResourceSlice(Box::new(o))).await?;
    Ok(listing.finish(connection, clock.now()))
}

/// What the lists gave so far.
#[derive(Debug, Default)]
struct Listing {
    objects: Vec<Loaded>,
    errors: Vec<String>,
    /// Per resource (`pods`, `nodepools.karpenter.sh`): objects kept.
    counts: Vec<(String, usize)>,
    /// Resources the cluster does not serve.
    missing: Vec<String>,
    /// Objects left out, by why.
    left_out: BTreeMap<&'static str, usize>,
}

impl Listing {
    fn finish(self, connection: &Connection, now: DateTime<Utc>) -> ClusterInput {
        let mut notes = Vec::new();
        let counts: Vec<String> = self.counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
        notes.push(format!("read from the cluster at {}: {}", connection.server, counts.join(", ")));
        for resource in &self.missing {
            notes.push(format!("{resource}: not served by the cluster (404; a CRD not installed): skipped"));
        }
        for (why, n) in &self.left_out {
            notes.push(format!("{n} {why}: left out"));
        }
        ClusterInput {
            source: format!("cluster {}", connection.server),
            objects: self.objects,
            errors: self.errors,
            notes,
            now,
        }
    }
}

/// `resource.group`, or `resource` for the core group: how kubectl and RBAC errors name a resource.
fn resource_name(group: &str, plural: &str) -> String {
    if group.is_empty() { plural.to_owned() } else { format!("{plural}.{group}") }
}

/// Lists every object of `K` (pages of [`PAGE`]) and adds the ones simulate should see to `listing`.
///
/// Objects are listed untyped and decoded one by one, so one that does not decode is reported by name and the
/// rest still load.
async fn list<K>(
    client: &Client,
    connection: &Connection,
    listing: &mut Listing,
    wrap: fn(K) -> Object,
) -> anyhow::Result<()>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    let group = K::group(&()).into_owned();
    let plural = K::plural(&()).into_owned();
    let kind = K::kind(&()).into_owned();
    let name = resource_name(&group, &plural);
    debug_assert!(READS.iter().any(|r| r.group == group && r.resource == plural), "{name} is not in READS");
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::erase::<K>(&()));
    let mut params = ListParams::default().limit(PAGE);
    let mut index = 0;
    let mut kept = 0;
    loop {
        let page = match api.list(&params).await {
            Ok(page) => page,
            // A CRD that is not installed (a node class of another provider). Built-in kinds are always served.
            Err(kube::Error::Api(status)) if status.code == 404 => {
                listing.missing.push(name);
                return Ok(());
            }
            Err(e) => return Err(classify(e, &name, connection)),
        };
        for item in page.items {
            let origin = Origin { file: format!("cluster {name}"), document: index, item: None };
            index += 1;
            let label = match (item.metadata.namespace.as_deref(), item.metadata.name.as_deref()) {
                (Some(ns), Some(n)) => format!("{kind}/{ns}/{n}"),
                (None, Some(n)) => format!("{kind}/{n}"),
                _ => kind.clone(),
            };
            let decoded = serde_json::to_value(&item).and_then(serde_json::from_value::<K>);
            let object = match decoded {
                Ok(o) => wrap(o),
                Err(e) => {
                    listing.errors.push(format!("{origin}: {label}: cannot be read as {kind}: {e}"));
                    continue;
                }
            };
            if let Some(why) = left_out(&object) {
                *listing.left_out.entry(why).or_default() += 1;
                continue;
            }
            kept += 1;
            listing.objects.push(Loaded { origin, object });
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    listing.counts.push((name, kept));
    Ok(())
}

/// A listed node class as loaded manifests hold one: the provider's kind is foreign to the loader, so it is kept
/// as JSON with its apiVersion and kind ([`UnknownObject`]).
fn node_class_object<K: Resource<DynamicType = ()> + serde::Serialize>(class: K) -> Object {
    // Encoding a decoded API object cannot fail (its maps have string keys); `null` would only lose the status.
    let value = serde_json::to_value(&class).unwrap_or(serde_json::Value::Null);
    Object::Unknown(Box::new(UnknownObject {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        value,
    }))
}

/// Why a listed object is not simulate's business (see the module docs), if it is not.
fn left_out(object: &Object) -> Option<&'static str> {
    match object {
        Object::Pod(p) => {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            let bound = p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
            if matches!(phase, Some("Succeeded" | "Failed")) {
                Some("finished pods (Succeeded or Failed)")
            } else if !bound && p.metadata.deletion_timestamp.is_some() {
                Some("unbound pods being deleted")
            } else {
                None
            }
        }
        Object::Job(j) => {
            let status = j.status.as_ref();
            let finished = status.is_some_and(|s| {
                s.completion_time.is_some()
                    || s.conditions.iter().flatten().any(|c| {
                        matches!(c.type_.as_str(), "Complete" | "Failed" | "SuccessCriteriaMet" | "FailureTarget")
                            && c.status == "True"
                    })
            });
            let suspended = j.spec.as_ref().and_then(|s| s.suspend).unwrap_or(false);
            if finished {
                Some("finished Jobs")
            } else if suspended {
                Some("suspended Jobs")
            } else {
                None
            }
        }
        _ => None,
    }
}

/// A client error as the user should read it: the server and kubeconfig when the server cannot be reached or
/// refuses the credentials, the resource and verb and the documented RBAC when the user may not list it.
fn classify(e: kube::Error, resource: &str, connection: &Connection) -> anyhow::Error {
    let Connection { server, kubeconfig } = connection;
    match e {
        kube::Error::Api(status) if status.code == 403 => anyhow::anyhow!(
            "forbidden: verb \"list\" on {resource} at cluster scope (403: {}); simulate --from-cluster needs get, \
             list and watch on the resources of the read-only ClusterRole in {RBAC_DOC}",
            status.message
        ),
        kube::Error::Api(status) if status.code == 401 => anyhow::anyhow!(
            "the API server at {server} did not accept the credentials of {kubeconfig} (401 Unauthorized) while \
             listing {resource}"
        ),
        kube::Error::HyperError(_) | kube::Error::Service(_) => anyhow::anyhow!(
            "cannot reach the Kubernetes API server at {server} (kubeconfig: {kubeconfig}) while listing \
             {resource}: {}",
            error_chain(&e)
        ),
        e => anyhow::anyhow!("listing {resource} from {server}: {}", error_chain(&e)),
    }
}

/// An error and its sources on one line (`connection refused` is usually at the bottom).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

/// The cluster's objects with the files' added: a file object with the kind, namespace and name of a cluster
/// object replaces it (a note names them).
pub fn merge(cluster: Vec<Loaded>, files: Vec<Loaded>, notes: &mut Vec<String>) -> Vec<Loaded> {
    let key = |l: &Loaded| -> Option<(String, String, String, String)> {
        let group = l.object.api_version().rsplit_once('/').map_or("", |(g, _)| g).to_owned();
        let name = l.object.name()?.to_owned();
        Some((group, l.object.kind().to_owned(), l.object.namespace().unwrap_or_default().to_owned(), name))
    };
    let from_files: BTreeSet<_> = files.iter().filter_map(key).collect();
    let (replaced, mut kept): (Vec<Loaded>, Vec<Loaded>) =
        cluster.into_iter().partition(|l| key(l).is_some_and(|k| from_files.contains(&k)));
    if !replaced.is_empty() {
        let names: Vec<String> = replaced.iter().map(|l| l.object.display_name()).take(5).collect();
        let more = if replaced.len() > 5 { format!(", and {} more", replaced.len() - 5) } else { String::new() };
        notes.push(format!(
            "{} objects of the cluster replaced by the files' ({}{more})",
            replaced.len(),
            names.join(", ")
        ));
    }
    kept.extend(files);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::JobStatus;
    use karpenter_testing::FakeClock;
    use karpenter_testing::apiserver::ApiServer;
    use kube::api::PostParams;
    use serde_json::json;

    fn connection() -> Connection {
        Connection { server: "http://in-process".into(), kubeconfig: "test".into() }
    }

    async fn create<K>(api: Api<K>, value: serde_json::Value) -> K
    where
        K: Resource<DynamicType = ()> + Clone + Debug + serde::Serialize + DeserializeOwned,
    {
        let object: K = serde_json::from_value(value).expect("test object");
        api.create(&PostParams::default(), &object).await.expect("create")
    }

    fn pod(name: &str, node: Option<&str>) -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "pause",
                "resources": {"requests": {"cpu": "1"}}}]}
        })
    }

    #[tokio::test]
    async fn listed_objects_become_the_loaders_objects() {
        let server = ApiServer::new();
        let client = server.client();
        create(
            Api::<NodePool>::all(client.clone()),
            json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
                "spec": {"template": {"spec": {"requirements": [],
                    "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}}
            }),
        )
        .await;
        create(
            Api::<KWOKNodeClass>::all(client.clone()),
            json!({
                "apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": "default"}
            }),
        )
        .await;
        create(
            Api::<Node>::all(client.clone()),
            json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "node-a", "labels": {"node.kubernetes.io/instance-type": "c-4x-amd64-linux"}},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "64"}}
            }),
        )
        .await;
        for i in 0..3 {
            create(Api::<Pod>::namespaced(client.clone(), "default"), pod(&format!("pending-{i}"), None)).await;
        }
        create(Api::<Pod>::namespaced(client.clone(), "default"), pod("bound", Some("node-a"))).await;
        let mut finished = pod("finished", None);
        finished["status"] = json!({"phase": "Succeeded"});
        // The server drops a pod's status on create; write it through the status subresource.
        create(Api::<Pod>::namespaced(client.clone(), "default"), pod("finished", None)).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let mut current = pods.get("finished").await.expect("pod");
        current.status = Some(serde_json::from_value(finished["status"].clone()).expect("status"));
        pods.replace_status("finished", &PostParams::default(), &current).await.expect("status");
        create(
            Api::<PodDisruptionBudget>::namespaced(client.clone(), "default"),
            json!({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}
            }),
        )
        .await;

        let read_at = chrono::DateTime::parse_from_rfc3339("2026-05-01T10:00:00Z").expect("time").to_utc();
        let input = read_with(client, &connection(), &FakeClock::new(read_at)).await.expect("read");
        assert_eq!(input.now, read_at);
        assert!(input.errors.is_empty(), "{:?}", input.errors);
        let described: Vec<String> = input.objects.iter().map(Loaded::describe).collect();
        assert_eq!(
            described,
            [
                "cluster nodepools.karpenter.sh: document 0: NodePool/default",
                "cluster kwoknodeclasses.karpenter.kwok.sh: document 0: KWOKNodeClass/default",
                "cluster nodes: document 0: Node/node-a",
                "cluster pods: document 0: Pod/default/bound",
                "cluster pods: document 2: Pod/default/pending-0",
                "cluster pods: document 3: Pod/default/pending-1",
                "cluster pods: document 4: Pod/default/pending-2",
                "cluster poddisruptionbudgets.policy: document 0: PodDisruptionBudget/default/web",
            ]
        );
        // The in-process server serves no Jobs: skipped like a missing CRD.
        assert!(
            input
                .notes
                .iter()
                .any(|n| n == "jobs.batch: not served by the cluster (404; a CRD not installed): skipped"),
            "{:?}",
            input.notes
        );
        assert!(
            input.notes.iter().any(|n| n == "1 finished pods (Succeeded or Failed): left out"),
            "{:?}",
            input.notes
        );
        assert!(input.notes[0].contains("1 nodepools.karpenter.sh"), "{}", input.notes[0]);
        assert!(input.notes[0].contains("4 pods"), "{}", input.notes[0]);
        assert_eq!(input.source, "cluster http://in-process");

        // The same snapshot simulate builds from files: three pending pods, one bound.
        let snapshot = karpenter_scheduler::ClusterSnapshot::from_objects(&input.objects).expect("snapshot");
        assert_eq!(snapshot.pending_pods.len(), 3);
        assert_eq!(snapshot.bound_pods.len(), 1);
        assert_eq!(snapshot.nodes.len(), 1);
        assert_eq!(snapshot.node_pools.len(), 1);
        assert_eq!(snapshot.pdbs.len(), 1);
    }

    #[tokio::test]
    async fn lists_are_read_page_by_page() {
        let server = ApiServer::new();
        let client = server.client();
        let count = PAGE as usize * 2 + 3;
        for i in 0..count {
            create(Api::<Pod>::namespaced(client.clone(), "default"), pod(&format!("p-{i:04}"), None)).await;
        }
        let input =
            read_with(client, &connection(), &FakeClock::new(chrono::DateTime::UNIX_EPOCH)).await.expect("read");
        let names: BTreeSet<&str> = input.objects.iter().filter_map(|l| l.object.name()).collect();
        assert_eq!(names.len(), count, "every pod once, across three pages");
        let last = input.objects.last().expect("objects");
        assert_eq!(last.origin.document, count - 1);
    }

    #[test]
    fn finished_and_suspended_jobs_and_deleted_unbound_pods_are_left_out() {
        let mut job = Job::default();
        assert_eq!(left_out(&Object::Job(Box::new(job.clone()))), None);
        job.spec = Some(k8s_openapi::api::batch::v1::JobSpec { suspend: Some(true), ..Default::default() });
        assert_eq!(left_out(&Object::Job(Box::new(job.clone()))), Some("suspended Jobs"));
        job.status = Some(JobStatus {
            conditions: Some(vec![k8s_openapi::api::batch::v1::JobCondition {
                type_: "Complete".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert_eq!(left_out(&Object::Job(Box::new(job))), Some("finished Jobs"));

        let mut pod: Pod = serde_json::from_value(pod("p", None)).expect("pod");
        assert_eq!(left_out(&Object::Pod(Box::new(pod.clone()))), None);
        pod.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(left_out(&Object::Pod(Box::new(pod.clone()))), Some("unbound pods being deleted"));
        // Bound and being deleted: still on its node until it is gone.
        pod.spec.as_mut().expect("spec").node_name = Some("n".into());
        assert_eq!(left_out(&Object::Pod(Box::new(pod))), None);
    }

    #[test]
    fn forbidden_names_resource_and_verb_and_points_to_the_rbac() {
        let status = kube::core::Status::failure("pods is forbidden: User \"x\" cannot list resource", "Forbidden")
            .with_code(403);
        let e = classify(kube::Error::Api(Box::new(status)), "pods", &connection());
        let text = e.to_string();
        assert!(text.contains("verb \"list\" on pods"), "{text}");
        assert!(text.contains("docs/simulate.md"), "{text}");
    }

    #[test]
    fn an_unreachable_server_is_named_with_the_kubeconfig() {
        let dir = std::env::temp_dir().join(format!("karpenter-live-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        // A port nothing listens on: bind one, then free it.
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: http://127.0.0.1:{port}}}\n\
                 users:\n- name: u\n  user: {{token: t}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\n\
                 current-context: x\n"
            ),
        )
        .expect("write");
        let args = ClusterArgs { from_cluster: true, kubeconfig: Some(path.clone()), context: None };
        let err = read(&args).expect_err("nothing listens there");
        let _ = std::fs::remove_dir_all(&dir);
        let text = format!("{err:#}");
        assert!(text.contains(&format!("http://127.0.0.1:{port}")), "{text}");
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains("cannot reach"), "{text}");
    }

    #[test]
    fn files_replace_cluster_objects_of_the_same_name_and_add_the_rest() {
        let pod_yaml = |name: &str| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec: {{containers: []}}\n"
            )
        };
        let cluster =
            karpenter_api::load_str(&format!("{}---\n{}", pod_yaml("a"), pod_yaml("b")), "cluster").expect("valid");
        let files =
            karpenter_api::load_str(&format!("{}---\n{}", pod_yaml("b"), pod_yaml("c")), "new.yaml").expect("valid");
        let mut notes = Vec::new();
        let merged = merge(cluster, files, &mut notes);
        let described: Vec<String> = merged.iter().map(Loaded::describe).collect();
        assert_eq!(
            described,
            [
                "cluster: document 0: Pod/default/a",
                "new.yaml: document 0: Pod/default/b",
                "new.yaml: document 1: Pod/default/c"
            ]
        );
        assert_eq!(notes, ["1 objects of the cluster replaced by the files' (Pod/default/b)"]);
    }

    #[test]
    fn the_documented_rbac_is_the_one_simulate_needs() {
        let docs = include_str!("../../../../docs/simulate.md");
        let expected = rbac_yaml("jane@example.com");
        assert!(
            docs.contains(&expected),
            "docs/simulate.md must show this RBAC (section \"A live dry run\"), exactly:\n{expected}"
        );
    }
}
