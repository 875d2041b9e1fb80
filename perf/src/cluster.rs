//! What the cases create and count on the cluster: the CRDs, the KWOKNodeClass and NodePool, the workloads, and
//! the counts the waits poll (Running pods, Karpenter's Nodes and NodeClaims).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_testing::Stopwatch;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// The namespace every workload lives in.
pub const NAMESPACE: &str = "default";
/// The label every node Karpenter launched carries.
const NODEPOOL_LABEL: &str = "karpenter.sh/nodepool";

fn nodepool_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool"))
}

fn nodeclaim_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim"))
}

fn nodeclass_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("karpenter.kwok.sh", "v1alpha1", "KWOKNodeClass"))
}

/// Installs the CRDs `<controller> crds --provider kwok` prints and waits until each is Established.
pub async fn install_crds(client: &Client, controller: &Path) -> anyhow::Result<()> {
    let out = tokio::process::Command::new(controller)
        .args(["crds", "--provider", "kwok"])
        .output()
        .await
        .with_context(|| format!("running {} crds", controller.display()))?;
    if !out.status.success() {
        bail!("{} crds --provider kwok: {}", controller.display(), String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8(out.stdout).context("CRD YAML is not UTF-8")?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).context("parsing the CRD YAML")?;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        let crd: CustomResourceDefinition = serde_json::from_value(doc).context("decoding a CRD")?;
        names.push(crd.name_any());
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e).with_context(|| format!("creating CRD {}", crd.name_any())),
        }
    }
    let waited = Stopwatch::start();
    for name in names {
        loop {
            let crd = api.get(&name).await.with_context(|| format!("reading CRD {name}"))?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Established" && c.status == "True"));
            if established {
                break;
            }
            if waited.elapsed() > Duration::from_secs(60) {
                bail!("CRD {name} not Established after 60 s");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

/// The KWOKNodeClass `default` and the NodePool `default`: kwok types of at most 16 CPUs
/// (`karpenter.kwok.sh/instance-cpu Lt 17`), linux, no limits, upstream's perf disruption settings
/// (WhenEmptyOrUnderutilized after 30 s, a 100 % budget).
pub async fn create_nodepool(client: &Client) -> anyhow::Result<()> {
    let class: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
        "metadata": {"name": "default"}, "spec": {}
    }))?;
    Api::<DynamicObject>::all_with(client.clone(), &nodeclass_resource())
        .create(&PostParams::default(), &class)
        .await
        .context("creating KWOKNodeClass default")?;
    let pool: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                "requirements": [
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                    {"key": "karpenter.kwok.sh/instance-cpu", "operator": "Lt", "values": ["17"]}
                ]
            }},
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": "30s",
                "budgets": [{"nodes": "100%"}]
            }
        }
    }))?;
    Api::<DynamicObject>::all_with(client.clone(), &nodepool_resource())
        .create(&PostParams::default(), &pool)
        .await
        .context("creating NodePool default")?;
    Ok(())
}

/// Drifts every node of the NodePool: a new annotation on its template (what upstream's drift case does).
pub async fn drift_nodepool(client: &Client) -> anyhow::Result<()> {
    let patch = json!({"spec": {"template": {"metadata": {"annotations": {"perf.karpenter.sh/drift": "1"}}}}});
    Api::<DynamicObject>::all_with(client.clone(), &nodepool_resource())
        .patch("default", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .context("patching NodePool default")?;
    Ok(())
}

/// The shape of one case's pods.
#[derive(Clone, Debug)]
pub struct PodShape {
    pub app: String,
    pub cpu: String,
    pub memory: String,
    /// A hostname topology spread constraint (maxSkew 1, DoNotSchedule).
    pub hostname_spread: bool,
    /// A required hostname anti-affinity among the app's pods (one pod per node).
    pub hostname_anti_affinity: bool,
}

impl PodShape {
    pub fn pause(app: &str) -> Self {
        Self {
            app: app.to_string(),
            cpu: "500m".into(),
            memory: "256Mi".into(),
            hostname_spread: false,
            hostname_anti_affinity: false,
        }
    }

    fn pod_spec(&self) -> Value {
        let selector = json!({"matchLabels": {"app": self.app}});
        let mut spec = json!({
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "pause", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": self.cpu, "memory": self.memory}}
            }]
        });
        if self.hostname_spread {
            spec["topologySpreadConstraints"] = json!([{
                "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector
            }]);
        }
        if self.hostname_anti_affinity {
            spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": selector}
            ]}});
        }
        spec
    }

    pub fn selector(&self) -> String {
        format!("app={}", self.app)
    }
}

/// Creates a Deployment of `replicas` pods of `shape`.
pub async fn create_deployment(client: &Client, shape: &PodShape, replicas: u32) -> anyhow::Result<()> {
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": shape.app, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": shape.app}},
            "template": {"metadata": {"labels": {"app": shape.app}}, "spec": shape.pod_spec()}
        }
    }))?;
    Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &deployment)
        .await
        .with_context(|| format!("creating Deployment {}", shape.app))?;
    Ok(())
}

/// Sets a Deployment's replicas.
pub async fn scale_deployment(client: &Client, app: &str, replicas: u32) -> anyhow::Result<()> {
    let patch = json!({"spec": {"replicas": replicas}});
    Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .patch(app, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("scaling Deployment {app} to {replicas}"))?;
    Ok(())
}

/// Creates `count` bare pods of `shape` (no ReplicaSet controller involved), `concurrency` creates at a time.
pub async fn create_pods(client: &Client, shape: &PodShape, count: u32, concurrency: usize) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let spec = shape.pod_spec();
    let started = Stopwatch::start();
    let created = futures::stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            let pod = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{}-{i}", shape.app), "namespace": NAMESPACE,
                             "labels": {"app": shape.app}},
                "spec": spec
            });
            async move {
                let pod: Pod = serde_json::from_value(pod)?;
                match api.create(&PostParams::default(), &pod).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                    Err(e) => Err(anyhow::Error::new(e).context(format!("creating pod {}", pod.name_any()))),
                }
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_fold(0u32, |n, ()| async move {
            if (n + 1) % 5000 == 0 {
                eprintln!("  created {} pods", n + 1);
            }
            Ok(n + 1)
        })
        .await?;
    eprintln!("  created {created} pods in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Deletes every pod of `selector` (for bare pods; Deployments are scaled instead).
pub async fn delete_pods(client: &Client, selector: &str) -> anyhow::Result<()> {
    Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .delete_collection(&DeleteParams::default(), &ListParams::default().labels(selector))
        .await
        .context("deleting pods")?;
    Ok(())
}

/// Pod counts of one selector.
#[derive(Clone, Copy, Debug, Default)]
pub struct PodCounts {
    pub total: u32,
    pub running: u32,
}

/// Counts the pods of `selector`: all of them, and those Running and not terminating.
pub async fn count_pods(client: &Client, selector: &str) -> anyhow::Result<PodCounts> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let mut counts = PodCounts::default();
    let mut params = ListParams::default().labels(selector).limit(2000);
    loop {
        let page = api.list(&params).await.context("listing pods")?;
        for pod in &page.items {
            counts.total += 1;
            let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            if running && pod.metadata.deletion_timestamp.is_none() {
                counts.running += 1;
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(counts),
        }
    }
}

/// The names of the Nodes Karpenter launched.
pub async fn karpenter_nodes(client: &Client) -> anyhow::Result<BTreeSet<String>> {
    let api: Api<Node> = Api::all(client.clone());
    let list = api.list_metadata(&ListParams::default().labels(NODEPOOL_LABEL)).await.context("listing nodes")?;
    Ok(list.items.into_iter().map(|n| n.name_any()).collect())
}

/// How many NodeClaims exist.
pub async fn count_nodeclaims(client: &Client) -> anyhow::Result<usize> {
    let api = Api::<DynamicObject>::all_with(client.clone(), &nodeclaim_resource());
    Ok(api.list_metadata(&ListParams::default()).await.context("listing nodeclaims")?.items.len())
}
