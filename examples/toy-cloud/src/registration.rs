//! How the toy cloud plugs into the operator and a binary: its label vocabulary ([`labels`]), its node-class
//! kinds as the operator takes them ([`node_classes`]), its node-class APIs ([`node_class_apis`], with its CRDs
//! [`crds`]) and the controller manager built around it ([`manager`]). A binary's provider table calls these and
//! nothing else of the crate.

use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_api::node_class_api::NodeClassApis;
use karpenter_cloudprovider::{Clock, CloudProvider};
use karpenter_operator::CoreSettings;
use karpenter_operator::manager::Manager;
use karpenter_operator::node_classes::{KubeNodeClasses, NodeClassRegistration};
use tokio_util::sync::CancellationToken;

use crate::api::{TOY_NODE_CLASS_API, ToyNodeClass};
use crate::cloud::{Account, ToyCloud};

// The label vocabulary is defined with the API group it restricts (the API and the cloud use it too); a binary
// still takes it from here with the rest of the registration.
pub use crate::api::{NAME, labels};

/// The node-class kinds the operator takes from the toy cloud: ToyNodeClass, ready on sight (the cloud needs
/// nothing made for a class, so the operator marks each one Ready as soon as it exists).
pub fn node_classes() -> Vec<NodeClassRegistration> {
    vec![NodeClassRegistration::of::<ToyNodeClass>().ready_on_sight()]
}

/// The node-class APIs the toy cloud serves (ToyNodeClass): what a binary validates manifests and prints CRDs
/// with.
pub fn node_class_apis() -> NodeClassApis {
    NodeClassApis::none().with(&TOY_NODE_CLASS_API)
}

/// The CRDs the toy cloud adds to Karpenter's own: ToyNodeClass's.
pub fn crds() -> Vec<CustomResourceDefinition> {
    node_class_apis().crds(&labels())
}

/// Which toy cluster and account a manager launches in.
#[derive(Debug, Clone)]
pub struct ToyOptions {
    /// The cluster name in the instances' provider ids; another cluster on the same account sees none of them.
    pub cluster: String,
    /// The account the instances live in (keep a clone to look at it).
    pub account: Account,
}

impl Default for ToyOptions {
    /// Cluster `toy-cluster` on a fresh account.
    fn default() -> Self {
        Self { cluster: "toy-cluster".to_owned(), account: Account::new() }
    }
}

/// Why [`manager`] could not start the toy cloud.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The first list of ToyNodeClasses failed: the CRD is not installed, or the API server cannot be reached.
    #[error("listing ToyNodeClasses (is the toynodeclasses.karpenter.toy.example CRD installed?): {0}")]
    ListNodeClasses(#[source] kube::Error),
}

/// Starts the ToyNodeClass watch (listed once before this returns, so the first launch sees the classes), builds
/// the toy cloud over it and the controller manager around the cloud. The caller adds what every provider's
/// manager gets: [`node_classes`] (`Manager::with_node_class_registrations`), the leader client and the metrics
/// registry, as the binary's provider table does.
pub async fn manager(
    settings: CoreSettings,
    client: kube::Client,
    clock: Arc<dyn Clock>,
    shutdown: CancellationToken,
    options: ToyOptions,
) -> Result<Manager, StartError> {
    let lookup = KubeNodeClasses::new();
    lookup.start::<ToyNodeClass>(client.clone(), shutdown).await.map_err(StartError::ListNodeClasses)?;
    let lookup = Arc::new(lookup);
    let cloud: Arc<dyn CloudProvider> =
        Arc::new(ToyCloud::new(options.cluster, options.account, lookup.clone(), clock.clone()));
    Ok(Manager::new(settings, client, cloud, lookup, clock))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_is_registered_ready_on_sight_in_its_own_domain() {
        let registrations = node_classes();
        assert_eq!(registrations.len(), 1);
        let r = &registrations[0];
        assert_eq!(
            (r.api_resource.api_version.as_str(), r.api_resource.kind.as_str(), r.api_resource.plural.as_str()),
            ("karpenter.toy.example/v1alpha1", "ToyNodeClass", "toynodeclasses")
        );
        assert!(r.ready_on_sight && !r.status_metrics);
        assert!(labels().restricted_domains.contains(&r.api_resource.group));
        assert!(labels().is_restricted("karpenter.toy.example/anything"));
        assert_eq!(crds()[0].spec.names.plural, r.api_resource.plural);
    }
}
