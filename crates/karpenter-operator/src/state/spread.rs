//! The kinds default topology spread constraints read: Services and the pod controllers (ReplicaSets,
//! StatefulSets, ReplicationControllers), whose selectors become a pod's default spread selector. Watched only
//! when defaults are configured; the CapacityBuffer gate reads the ReplicaSets and StatefulSets stored here too.

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ReplicationController, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use karpenter_scheduler::snapshot::SnapshotBuilder;
use kube::Client;
use kube::api::Api;
use tokio_util::sync::CancellationToken;

use super::{ClusterState, Store};

/// The stores of the spread kinds (a part of the state's objects).
#[derive(Debug, Default)]
pub(super) struct SpreadObjects {
    pub(super) services: Store<Service>,
    pub(super) replica_sets: Store<ReplicaSet>,
    pub(super) stateful_sets: Store<StatefulSet>,
    pub(super) replication_controllers: Store<ReplicationController>,
}

impl SpreadObjects {
    /// Gives the snapshot the Services and the controllers' selectors (what the defaults' selectors come from).
    pub(super) fn add_to(&self, builder: &mut SnapshotBuilder<'_>) {
        self.services.objects.values().for_each(|svc| builder.service(svc));
        for rs in self.replica_sets.objects.values() {
            let selector = rs.spec.as_ref().map(|s| s.selector.clone()).unwrap_or_default();
            builder.controller("ReplicaSet", &rs.metadata, selector);
        }
        for sts in self.stateful_sets.objects.values() {
            let selector = sts.spec.as_ref().map(|s| s.selector.clone()).unwrap_or_default();
            builder.controller("StatefulSet", &sts.metadata, selector);
        }
        for rc in self.replication_controllers.objects.values() {
            let match_labels = rc.spec.as_ref().and_then(|s| s.selector.clone());
            builder.controller(
                "ReplicationController",
                &rc.metadata,
                LabelSelector { match_labels, ..Default::default() },
            );
        }
    }
}

impl ClusterState {
    /// Runs the watchers of the kinds default topology spread constraints read (Services, ReplicaSets,
    /// StatefulSets, ReplicationControllers) until `shutdown` is cancelled. Started only when defaults are
    /// configured; provisioning does not wait for them to be listed: until they are, a pod's defaults get the
    /// selector of what is known (upstream likewise goes on with a partial selector after a lookup error).
    pub async fn run_spread_watchers(&self, client: Client, shutdown: CancellationToken) {
        let c = &client;
        let s = &shutdown;
        futures::join!(
            self.watch::<Service>(Api::all(c.clone()), s.clone()),
            self.watch::<ReplicaSet>(Api::all(c.clone()), s.clone()),
            self.watch::<StatefulSet>(Api::all(c.clone()), s.clone()),
            self.watch::<ReplicationController>(Api::all(c.clone()), s.clone()),
        );
    }
}
