//! [`ControllerContext`]: what every controller shares, and the one argument every controller is built from.

use std::sync::Arc;

use karpenter_cloudprovider::{Clock, CloudProvider, Instrumented, MetricsSink};
use kube::Client;

use crate::events::Recorder;
use crate::metrics::Metrics;
use crate::state::ClusterState;

/// What every controller shares: the API server [`Client`], the [`ClusterState`] fed by the watchers, the
/// [`CloudProvider`], the event [`Recorder`], the [`Metrics`] registry and the [`Clock`].
///
/// It exists so there is one way to build any controller, `Controller::new(&ctx, <its own options>)`, instead
/// of each constructor taking its own subset of these in its own order: a controller takes the context even
/// when it uses only some of the parts, and adding a shared part touches this type, not every constructor and
/// call site. Cloning is cheap (the parts are handles onto shared data: clones share the state, the recorder's
/// dedupe cache and the registry).
///
/// The manager gives each controller [`ControllerContext::for_controller`], whose provider times every call
/// (and counts its errors) under that controller's name.
#[derive(Clone)]
pub struct ControllerContext {
    pub(crate) client: Client,
    pub(crate) state: ClusterState,
    /// The provider as given, never instrumented (what [`ControllerContext::for_controller`] wraps).
    pub(crate) provider: Arc<dyn CloudProvider>,
    /// What controllers call: `provider`, or `provider` instrumented for one controller.
    pub(crate) cloud: Arc<dyn CloudProvider>,
    pub(crate) recorder: Recorder,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for ControllerContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerContext")
            .field("cloud", &self.cloud.name())
            .field("recorder", &self.recorder)
            .finish_non_exhaustive()
    }
}

impl ControllerContext {
    /// A context whose controllers call `cloud` directly (see [`ControllerContext::for_controller`]).
    pub fn new(
        client: Client,
        state: ClusterState,
        cloud: Arc<dyn CloudProvider>,
        recorder: Recorder,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self { client, state, provider: cloud.clone(), cloud, recorder, metrics, clock }
    }

    /// The same context with the provider wrapped for `controller`: every call is timed on the context's clock
    /// and reported to its metrics registry under the controller's name (whatever the provider). Calling it
    /// again relabels; the wrappers do not nest.
    pub fn for_controller(&self, controller: &str) -> Self {
        let sink: Arc<dyn MetricsSink> = self.metrics.clone();
        let instrumented =
            Instrumented::new(self.provider.clone(), sink, self.clock.clone()).for_controller(controller);
        Self { cloud: Arc::new(instrumented), ..self.clone() }
    }

    /// The API server client controllers read and write through.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The cluster state the watchers keep.
    pub fn state(&self) -> &ClusterState {
        &self.state
    }

    /// The cloud provider (instrumented if the context came from [`ControllerContext::for_controller`]).
    pub fn cloud(&self) -> &Arc<dyn CloudProvider> {
        &self.cloud
    }

    /// The event recorder.
    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    /// The metrics registry.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The clock controllers tell time by.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The same context writing through `client` (the recorder keeps its own).
    pub fn with_client(self, client: Client) -> Self {
        Self { client, ..self }
    }

    /// The same context over `state`.
    pub fn with_state(self, state: ClusterState) -> Self {
        Self { state, ..self }
    }

    /// The same context on `clock` (the recorder keeps its own).
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        Self { clock, ..self }
    }

    /// The same context publishing through `recorder`.
    pub fn with_recorder(self, recorder: Recorder) -> Self {
        Self { recorder, ..self }
    }
}

#[cfg(test)]
impl ControllerContext {
    /// Test support: a context over `client`, `cloud` and `clock` with a cluster state marked listed (tests feed
    /// it by hand), a fresh registry and a recorder reporting as `test`.
    pub(crate) fn for_tests(client: Client, cloud: Arc<dyn CloudProvider>, clock: Arc<dyn Clock>) -> Self {
        let state = ClusterState::new(clock.clone(), std::time::Duration::from_secs(20));
        state.mark_all_synced();
        let metrics = Arc::new(Metrics::new(&crate::metrics::BuildInfo::current("test", "1.95")));
        let recorder = Recorder::new(client.clone(), clock.clone(), "test");
        Self::new(client, state, cloud, recorder, metrics, clock)
    }
}

#[cfg(test)]
mod tests {
    use karpenter_cloudprovider::CloudProvider;
    use karpenter_testing::FakeClock;
    use karpenter_testing::apiserver::ApiServer;

    use super::*;

    #[tokio::test]
    async fn for_controller_times_provider_calls_under_the_controller_name() {
        let server = ApiServer::new();
        let ctx = ControllerContext::for_tests(
            server.client(),
            Arc::new(karpenter_testing::kwok::fake()),
            Arc::new(FakeClock::default()),
        );
        let metric = "karpenter_cloudprovider_duration_seconds_count";
        ctx.cloud().list().await.unwrap();
        assert!(!ctx.metrics().render().contains(metric), "the plain context is not instrumented");
        let provisioner = ctx.for_controller("provisioner").for_controller("provisioner");
        provisioner.cloud().list().await.unwrap();
        let text = ctx.metrics().render();
        let line = text.lines().find(|l| l.starts_with(metric) && l.contains("controller=\"provisioner\""));
        assert!(line.is_some_and(|l| l.contains("method=\"List\"") && l.ends_with(" 1")), "{text}");
        assert_eq!(provisioner.cloud().name(), ctx.cloud().name());
    }
}
