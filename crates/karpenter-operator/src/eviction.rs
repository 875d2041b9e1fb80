//! Pod eviction through the `pods/eviction` subresource (policy/v1), which honours PodDisruptionBudgets.
//!
//! The answer decides what the drain does next, so it is returned as an [`EvictionOutcome`] rather than folded
//! into an error: 201 → [`EvictionOutcome::Evicted`]; 429 TooManyRequests → [`EvictionOutcome::Blocked`] with
//! the server's message (a PDB allows no disruption now; the caller requeues, upstream retries the pod later);
//! 404 → [`EvictionOutcome::Gone`] (and 409 with a UID precondition: the pod was replaced by one of the same
//! name). Anything else (500 for a pod with several PDBs, 403, network) is an [`EvictionError`].
//!
//! **No retry inside the client.** kube's default client retries 429 up to 15 times with growing backoff,
//! which would hold one PDB-blocked eviction for many minutes. Send evictions through a client built by
//! [`crate::client`], whose retry policy never retries an eviction request: the 429 comes back at once.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta, Preconditions};
use kube::Client;
use kube::api::{Api, PostParams};

/// What an eviction request achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvictionOutcome {
    /// The pod is being deleted (gracefully, when it is bound).
    Evicted,
    /// A PodDisruptionBudget allows no disruption now (429); the server's message says which and why.
    Blocked { message: String },
    /// The pod does not exist any more (404), or a UID precondition failed (409: a new pod has the name).
    Gone,
}

impl EvictionOutcome {
    /// The HTTP code, as the `code` label of `karpenter_pods_eviction_requests_total`.
    pub fn code(&self) -> u16 {
        match self {
            Self::Evicted => 201,
            Self::Blocked { .. } => 429,
            Self::Gone => 404,
        }
    }
}

/// An eviction that failed for another reason than a budget or a missing pod.
#[derive(Debug, thiserror::Error)]
pub enum EvictionError {
    /// The API server refused it (e.g. 500 for a pod selected by several PDBs, 403 without RBAC).
    #[error("evicting pod {namespace}/{name}: {code} {reason}: {message}")]
    Api { namespace: String, name: String, code: u16, reason: String, message: String },
    /// The request did not get an answer (connection, timeout, decoding).
    #[error("evicting pod {namespace}/{name}: {source}")]
    Request {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl EvictionError {
    /// The HTTP code if the server answered, for the `code` metric label.
    pub fn code(&self) -> Option<u16> {
        match self {
            Self::Api { code, .. } => Some(*code),
            Self::Request { .. } => None,
        }
    }
}

/// Evicts `namespace/name` (see the module docs for the outcomes).
pub async fn evict(client: &Client, namespace: &str, name: &str) -> Result<EvictionOutcome, EvictionError> {
    evict_uid(client, namespace, name, None).await
}

/// Evicts `namespace/name` only if its UID is `uid` (when given), so a pod that was deleted and re-created under
/// the same name in between is not evicted by mistake; that case is [`EvictionOutcome::Gone`].
pub async fn evict_uid(
    client: &Client,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
) -> Result<EvictionOutcome, EvictionError> {
    let eviction = Eviction {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        },
        delete_options: uid.map(|uid| DeleteOptions {
            preconditions: Some(Preconditions { uid: Some(uid.to_string()), resource_version: None }),
            ..DeleteOptions::default()
        }),
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    match pods
        .create_subresource::<Eviction, serde_json::Value>("eviction", name, &PostParams::default(), &eviction)
        .await
    {
        Ok(_) => Ok(EvictionOutcome::Evicted),
        Err(kube::Error::Api(status)) => match status.code {
            429 => Ok(EvictionOutcome::Blocked { message: status.message.clone() }),
            404 => Ok(EvictionOutcome::Gone),
            409 if uid.is_some() => Ok(EvictionOutcome::Gone),
            code => Err(EvictionError::Api {
                namespace: namespace.into(),
                name: name.into(),
                code,
                reason: status.reason.clone(),
                message: status.message.clone(),
            }),
        },
        Err(source) => Err(EvictionError::Request { namespace: namespace.into(), name: name.into(), source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{ClientOptions, USER_AGENT, client_from_config};
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use karpenter_cloudprovider::time::Stopwatch;
    use karpenter_testing::apiserver::{ApiServer, create_with_status};
    use std::time::Duration;

    fn running_pod(name: &str, app: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap()
    }

    async fn setup(server: &ApiServer) {
        let pods: Api<Pod> = Api::namespaced(server.client(), "default");
        for (name, app) in [("web-1", "web"), ("web-2", "web"), ("batch-1", "batch")] {
            create_with_status(&pods, &running_pod(name, app)).await.unwrap();
        }
        // Both web pods must stay: no disruption allowed.
        let pdb: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}
        }))
        .unwrap();
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(server.client(), "default");
        pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    }

    #[tokio::test]
    async fn outcomes_against_the_api_server() {
        let server = ApiServer::new();
        setup(&server).await;
        let client = server.client();
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

        let blocked = evict(&client, "default", "web-1").await.unwrap();
        let EvictionOutcome::Blocked { message } = &blocked else { panic!("{blocked:?}") };
        assert!(message.contains("disruption budget"), "{message}");
        assert_eq!(blocked.code(), 429);
        assert!(pods.get("web-1").await.unwrap().metadata.deletion_timestamp.is_none(), "still running");

        assert_eq!(evict(&client, "default", "batch-1").await.unwrap(), EvictionOutcome::Evicted);
        let evicted = pods.get_opt("batch-1").await.unwrap();
        assert!(evicted.is_none_or(|p| p.metadata.deletion_timestamp.is_some()), "being deleted");

        assert_eq!(evict(&client, "default", "nope").await.unwrap(), EvictionOutcome::Gone);
        assert_eq!(evict(&client, "elsewhere", "web-1").await.unwrap(), EvictionOutcome::Gone);
    }

    #[tokio::test]
    async fn uid_precondition_spares_a_recreated_pod() {
        let server = ApiServer::new();
        let client = server.client();
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let pod = create_with_status(&pods, &running_pod("solo", "solo")).await.unwrap();
        let stale = evict_uid(&client, "default", "solo", Some("00000000-0000-0000-0000-000000000000")).await.unwrap();
        assert_eq!(stale, EvictionOutcome::Gone);
        assert!(pods.get("solo").await.unwrap().metadata.deletion_timestamp.is_none());
        let uid = pod.metadata.uid.unwrap();
        assert_eq!(evict_uid(&client, "default", "solo", Some(&uid)).await.unwrap(), EvictionOutcome::Evicted);
    }

    #[tokio::test]
    async fn several_budgets_are_an_error_with_the_servers_answer() {
        let server = ApiServer::new();
        setup(&server).await;
        let pdb: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web-too", "namespace": "default"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}
        }))
        .unwrap();
        Api::<PodDisruptionBudget>::namespaced(server.client(), "default")
            .create(&PostParams::default(), &pdb)
            .await
            .unwrap();
        let err = evict(&server.client(), "default", "web-2").await.unwrap_err();
        assert_eq!(err.code(), Some(500));
        assert!(err.to_string().contains("more than one PodDisruptionBudget"), "{err}");
    }

    /// Through the controller's real client stack (TCP, rate limit, retry layer): a blocked eviction comes back
    /// at once. kube's default retry policy would retry this 429 with backoff for minutes.
    #[tokio::test]
    async fn a_blocked_eviction_is_not_retried_by_the_controller_client() {
        let server = ApiServer::new();
        setup(&server).await;
        let (addr, _task) = server.serve_tcp("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let options =
            ClientOptions { qps: 200, burst: 300, user_agent: USER_AGENT.into(), kubeconfig: None, context: None };
        let client =
            client_from_config(kube::Config::new(format!("http://{addr}").parse().unwrap()), &options).unwrap();
        // Real time over real TCP (the test does not pause tokio's clock): kube's retries would back off for
        // seconds.
        let start = Stopwatch::start();
        for _ in 0..3 {
            let outcome = evict(&client, "default", "web-1").await.unwrap();
            assert!(matches!(outcome, EvictionOutcome::Blocked { .. }), "{outcome:?}");
        }
        assert!(start.elapsed() < Duration::from_secs(2), "{:?}", start.elapsed());
        assert_eq!(evict(&client, "default", "batch-1").await.unwrap(), EvictionOutcome::Evicted);
    }
}
