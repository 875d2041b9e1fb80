//! VerticalPodAutoscaler awareness (upstream v1.15): the controller watches `autoscaling.k8s.io`
//! VerticalPodAutoscalers and keeps which one governs each workload. As in upstream v1.15 nothing reads the store
//! yet (provisioning and disruption size pods by their requests); what a user sees is the watch itself and the
//! RBAC it needs (`list`/`watch` on `verticalpodautoscalers`).
//!
//! A cluster without the VPA CRD is normal: the watch then waits and looks again every [`CRD_RETRY`], logging
//! once at info level. When two VPAs target the same workload, the one created first governs it, then the one
//! with the smaller name (upstream's rule).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

/// How soon a missing VPA CRD is looked for again.
pub const CRD_RETRY: Duration = Duration::from_secs(5 * 60);

/// A workload a VPA targets: namespace, kind and name of its `spec.targetRef`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target {
    pub namespace: String,
    pub kind: String,
    pub name: String,
}

/// One VPA as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vpa {
    pub name: String,
    /// RFC 3339 creation time (the API server's format sorts chronologically).
    pub created: String,
    pub target: Target,
}

impl Vpa {
    /// The VPA's identity and target from its JSON; `None` without a `spec.targetRef`.
    pub fn from_object(o: &DynamicObject) -> Option<Vpa> {
        let target = o.data.get("spec")?.get("targetRef")?;
        Some(Vpa {
            name: o.metadata.name.clone()?,
            created: o
                .metadata
                .creation_timestamp
                .as_ref()
                .and_then(karpenter_api::time::from_k8s)
                .map(karpenter_api::time::rfc3339)
                .unwrap_or_default(),
            target: Target {
                namespace: o.metadata.namespace.clone().unwrap_or_default(),
                kind: target.get("kind")?.as_str()?.to_owned(),
                name: target.get("name")?.as_str()?.to_owned(),
            },
        })
    }
}

/// Which VPA governs each workload.
#[derive(Debug, Clone, Default)]
pub struct VpaStore {
    inner: Arc<RwLock<BTreeMap<(String, String), Vpa>>>,
}

impl VpaStore {
    /// Replaces the store's content with `vpas`.
    pub fn replace(&self, vpas: impl IntoIterator<Item = Vpa>) {
        let map = vpas.into_iter().map(|v| ((v.target.namespace.clone(), v.name.clone()), v)).collect();
        *self.inner.write().unwrap_or_else(std::sync::PoisonError::into_inner) = map;
    }

    /// Adds or updates one VPA.
    pub fn apply(&self, vpa: Vpa) {
        let key = (vpa.target.namespace.clone(), vpa.name.clone());
        self.inner.write().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key, vpa);
    }

    /// Removes one VPA.
    pub fn remove(&self, namespace: &str, name: &str) {
        let key = (namespace.to_owned(), name.to_owned());
        self.inner.write().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&key);
    }

    /// The VPA governing `target`: the first created, then the smaller name.
    pub fn governing(&self, target: &Target) -> Option<Vpa> {
        let map = self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        map.values()
            .filter(|v| &v.target == target)
            .min_by(|a, b| (&a.created, &a.name).cmp(&(&b.created, &b.name)))
            .cloned()
    }

    /// VPAs known.
    pub fn len(&self) -> usize {
        self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    /// Whether no VPA is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The VPA API resource (`autoscaling.k8s.io/v1`, `verticalpodautoscalers`).
pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("autoscaling.k8s.io", "v1", "VerticalPodAutoscaler"),
        "verticalpodautoscalers",
    )
}

/// Keeps `store` equal to the cluster's VPAs until `shutdown`; waits [`CRD_RETRY`] between attempts while the
/// cluster does not serve the resource.
pub async fn run(client: kube::Client, store: VpaStore, shutdown: CancellationToken) {
    let api: Api<DynamicObject> = Api::all_with(client, &api_resource());
    let mut said_missing = false;
    loop {
        // Served? A list of one answers it (404 without the CRD).
        match api.list(&kube::api::ListParams::default().limit(1)).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {
                if !said_missing {
                    tracing::info!(
                        controller = "vpa",
                        "the cluster serves no VerticalPodAutoscalers; looking again every 5 minutes"
                    );
                    said_missing = true;
                }
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(CRD_RETRY) => continue,
                }
            }
            Err(e) => {
                tracing::warn!(controller = "vpa", error = %e, "listing VerticalPodAutoscalers failed; retrying");
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_secs(30)) => continue,
                }
            }
        }
        let mut stream = watcher(api.clone(), watcher::Config::default()).boxed();
        let mut initial: Vec<Vpa> = Vec::new();
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => return,
                e = stream.next() => e,
            };
            match event {
                Some(Ok(watcher::Event::Init)) => initial.clear(),
                Some(Ok(watcher::Event::InitApply(o))) => initial.extend(Vpa::from_object(&o)),
                Some(Ok(watcher::Event::InitDone)) => store.replace(std::mem::take(&mut initial)),
                Some(Ok(watcher::Event::Apply(o))) => {
                    if let Some(v) = Vpa::from_object(&o) {
                        store.apply(v);
                    }
                }
                Some(Ok(watcher::Event::Delete(o))) => {
                    store.remove(
                        o.metadata.namespace.as_deref().unwrap_or_default(),
                        o.metadata.name.as_deref().unwrap_or_default(),
                    );
                }
                // The watcher backs off and resumes by itself; a CRD removed later ends here as errors.
                Some(Err(e)) => tracing::debug!(controller = "vpa", error = %e, "VerticalPodAutoscaler watch"),
                None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vpa(name: &str, created: &str, kind: &str, target: &str) -> Vpa {
        Vpa {
            name: name.into(),
            created: created.into(),
            target: Target { namespace: "default".into(), kind: kind.into(), name: target.into() },
        }
    }

    #[test]
    fn the_first_created_then_the_smaller_name_governs() {
        let store = VpaStore::default();
        store.replace([
            vpa("b", "2026-01-01T00:00:00Z", "Deployment", "web"),
            vpa("a", "2026-01-02T00:00:00Z", "Deployment", "web"),
            vpa("c", "2026-01-01T00:00:00Z", "Deployment", "api"),
        ]);
        let web = Target { namespace: "default".into(), kind: "Deployment".into(), name: "web".into() };
        assert_eq!(store.governing(&web).unwrap().name, "b", "created first");
        store.apply(vpa("a0", "2026-01-01T00:00:00Z", "Deployment", "web"));
        assert_eq!(store.governing(&web).unwrap().name, "a0", "same time: the smaller name");
        store.remove("default", "a0");
        store.remove("default", "b");
        assert_eq!(store.governing(&web).unwrap().name, "a");
        let other = Target { kind: "StatefulSet".into(), ..web };
        assert_eq!(store.governing(&other), None);
        assert_eq!(store.len(), 2);
    }

    #[test]
    fn a_vpa_reads_from_its_json() {
        let o: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "shop", "creationTimestamp": "2026-03-01T12:00:00Z"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}
        }))
        .unwrap();
        let v = Vpa::from_object(&o).unwrap();
        assert_eq!(v.target, Target { namespace: "shop".into(), kind: "Deployment".into(), name: "web".into() });
        assert_eq!(v.created, "2026-03-01T12:00:00Z");
        let untargeted: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler", "metadata": {"name": "x"}, "spec": {}
        }))
        .unwrap();
        assert_eq!(Vpa::from_object(&untargeted), None);
    }

    /// The in-process API server serves no VPAs: the loop waits (no error) and stops on shutdown.
    #[tokio::test]
    async fn a_cluster_without_the_crd_is_waited_for_quietly() {
        let server = karpenter_testing::apiserver::ApiServer::builder().build();
        let store = VpaStore::default();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run(server.client(), store.clone(), shutdown.clone()));
        tokio::time::sleep(Duration::from_millis(100)).await;
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), task).await.expect("stops on shutdown").unwrap();
        assert!(store.is_empty());
    }
}
