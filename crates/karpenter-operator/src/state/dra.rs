//! Dynamic resource allocation (`resource.k8s.io/v1beta1`): ResourceClaims, their templates, DeviceClasses and
//! ResourceSlices, watched only with `IGNORE_DRA_REQUESTS=false`, handed to the scheduler as [`DraObjects`].

use k8s_openapi::api::resource::v1beta1::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use karpenter_api::dra::DraObjects;
use kube::Client;
use kube::api::Api;
use tokio_util::sync::CancellationToken;

use super::{ClusterState, Store};

/// The stores of the DRA kinds (a part of the state's objects).
#[derive(Debug, Default)]
pub(super) struct DraStores {
    pub(super) resource_claims: Store<ResourceClaim>,
    pub(super) resource_claim_templates: Store<ResourceClaimTemplate>,
    pub(super) device_classes: Store<DeviceClass>,
    pub(super) resource_slices: Store<ResourceSlice>,
}

impl DraStores {
    /// The DRA objects, typed for the scheduler. An object that cannot be read (a negative count, a slice with
    /// two node fields: the API server's validation prevents both) is left out with a warning; pods that use it
    /// then wait with a reason naming it.
    pub(super) fn objects(&self) -> DraObjects {
        let mut dra = DraObjects::default();
        let mut errors = Vec::new();
        for c in self.resource_claims.objects.values() {
            errors.extend(dra.add_claim(c).err());
        }
        for t in self.resource_claim_templates.objects.values() {
            errors.extend(dra.add_template(t).err());
        }
        self.device_classes.objects.values().for_each(|c| dra.add_class(c));
        for s in self.resource_slices.objects.values() {
            errors.extend(dra.add_slice(s).err());
        }
        for error in errors {
            tracing::warn!(%error, "DRA object left out of scheduling");
        }
        dra
    }
}

impl ClusterState {
    /// Runs the watchers of the DRA kinds (`resource.k8s.io/v1beta1`) until `shutdown` is cancelled. Started only
    /// with `IGNORE_DRA_REQUESTS=false`; until they have listed, pods with claims wait with a "not found" reason.
    pub async fn run_dra_watchers(&self, client: Client, shutdown: CancellationToken) {
        let c = &client;
        let s = &shutdown;
        futures::join!(
            self.watch::<ResourceClaim>(Api::all(c.clone()), s.clone()),
            self.watch::<ResourceClaimTemplate>(Api::all(c.clone()), s.clone()),
            self.watch::<DeviceClass>(Api::all(c.clone()), s.clone()),
            self.watch::<ResourceSlice>(Api::all(c.clone()), s.clone()),
        );
    }

    /// The drivers among `drivers` that have not yet published a complete pool of ResourceSlices for Node `node`
    /// (see [`crate::lifecycle::unpublished_dra_drivers`]).
    pub fn unpublished_dra_drivers(&self, node: &str, drivers: &[&str]) -> Vec<String> {
        let slices = self.list_shared::<ResourceSlice>();
        crate::lifecycle::unpublished_dra_drivers(slices.iter().map(|s| &**s), node, drivers)
    }
}
