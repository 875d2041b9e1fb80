//! The controller manager: assembles every controller of `karpenter-controller run` for one cloud provider and
//! runs them on the leader until shutdown.
//!
//! [`Manager::run`]:
//!
//! 1. starts the metrics server (`METRICS_PORT`) and the probes (`HEALTH_PROBE_PORT`): `/readyz` passes once the
//!    manager has started and the CRDs ([`Manager::required_crds`]) are installed. "Started" is set before the
//!    leader election, so a standby replica is Ready too (a rolling update of a two-replica Deployment would
//!    otherwise stall);
//! 2. acquires the leader-election Lease ([`crate::leader`], with the leader client if one was given) unless
//!    `DISABLE_LEADER_ELECTION`; every controller runs only on the leader;
//! 3. starts the cluster-state watchers and waits until every tracked kind has been listed once (a provisioning
//!    or lifecycle pass on a half-filled state would decide on missing objects). With controller warmup
//!    (`DISABLE_CONTROLLER_WARMUP=false`, leader election on; upstream's `EnableWarmup`) the watchers start
//!    before step 2 instead, so a standby keeps its state synced while it waits for the Lease and its controllers
//!    start on a full state as soon as it wins; only the controllers wait for leadership;
//! 4. runs, until the shutdown token is cancelled or the leadership is lost: the provisioner, the NodeClaim
//!    lifecycle, node/NodeClaim termination, expiration, garbage collection, interruption (with a source),
//!    the NodePool controllers, the disruption controllers, the node-class controllers of the provider's
//!    registered kinds ([`Manager::with_node_class_registrations`]), and the extra (provider) controllers handed
//!    in with [`Manager::with_controller`];
//! 5. on shutdown waits for the controllers to return (at most [`SHUTDOWN_GRACE`]), then releases the Lease (so
//!    the next leader never runs alongside them) and stops the servers.
//!
//! A lost Lease ends `run` with [`ManagerError::LeadershipLost`]: the process must exit (upstream does), so two
//! replicas never run controllers at once.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use karpenter_api::{CompactPod, NodeClaim, NodePool};
use karpenter_cloudprovider::time::tokio_now;
use karpenter_cloudprovider::{Clock, CloudProvider, InterruptionSource, NodeClassLookup};
use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::consistency::Consistency;
use crate::context::ControllerContext;
use crate::disruption::{Disruption, DisruptionSettings, NodeClaimDisruption, PodEvents};
use crate::events::Recorder;
use crate::expiration::Expiration;
use crate::garbage_collection::GarbageCollection;
use crate::interruption::Interruption;
use crate::leader::{LeaderElector, LeaderError};
use crate::lifecycle::LifecycleContext;
use crate::metrics::Metrics;
use crate::nodepool::{
    self, Counter, HashController, MinNodes, NodeClassRegistration, NodeClassResolver, Readiness, ReadyOnSight,
    RegistrationHealth, RegistrationTracker, StaticDeprovisioning, StaticProvisioning, Validation,
};
use crate::profiling::{HeapProfiler, Profiling};
use crate::provisioner::{Provisioner, ProvisionerOptions};
use crate::server::{self, Probes, RunningServer};
use crate::settings::CoreSettings;
use crate::state::ClusterState;
use crate::termination::Termination;

/// How long shutdown waits for the controllers to return before it goes on without them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// How often the manager checks whether the cluster state has listed every kind.
const SYNC_POLL: Duration = Duration::from_millis(100);
/// How often a manager still waiting for the cluster state says so.
const SYNC_WARNING: Duration = Duration::from_secs(30);

/// Why the manager stopped other than by shutdown.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error("starting the {server} server on {addr}: {source}")]
    Server { server: &'static str, addr: SocketAddr, source: std::io::Error },
    #[error("leader election: {0}")]
    Leader(#[from] LeaderError),
    /// The Lease could not be renewed: the process must exit so two leaders never run at once.
    #[error("lost the leader-election lease")]
    LeadershipLost,
}

/// A controller the manager runs on the leader, by name (for logs).
type NamedController = (String, BoxFuture<'static, ()>);

/// Builds the controllers; call [`Manager::run`] (see the module docs).
pub struct Manager {
    settings: CoreSettings,
    client: Client,
    leader_client: Option<Client>,
    cloud: Arc<dyn CloudProvider>,
    node_classes: Arc<dyn NodeClassLookup>,
    node_class_registrations: Vec<NodeClassRegistration>,
    interruption: Vec<Arc<dyn InterruptionSource>>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    probes: Probes,
    identity: String,
    bind_ip: IpAddr,
    extra: Vec<NamedController>,
    crds: Vec<String>,
    state: Option<ClusterState>,
    disruption: Option<DisruptionSettings>,
    heap_profiler: Option<HeapProfiler>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("cloud", &self.cloud.name())
            .field("identity", &self.identity)
            .field("extra", &self.extra.iter().map(|(n, _)| n).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The CRD name of a node-class kind: lower-case kind, plural (`ToyNodeClass` → `toynodeclasses.<group>`).
fn crd_name(group: &str, kind: &str) -> String {
    let lower = kind.to_lowercase();
    let plural = if lower.ends_with('s') { format!("{lower}es") } else { format!("{lower}s") };
    format!("{plural}.{group}")
}

/// The CRD of each registered kind among `crds` (what `/readyz` requires), named by its registered plural: it
/// replaces the name [`crd_name`] guessed for a kind the provider supports, so a kind with an irregular plural
/// is looked for under its real name.
fn require_registered_crds(crds: &mut Vec<String>, registrations: &[NodeClassRegistration]) {
    for registration in registrations {
        let resource = &registration.api_resource;
        let exact = format!("{}.{}", resource.plural, resource.group);
        let guessed = crd_name(&resource.group, &resource.kind);
        crds.retain(|c| *c != guessed && *c != exact);
        crds.push(exact);
    }
}

/// What [`Manager::run`] started, for callers that want to talk to it (tests bind port 0).
#[derive(Debug, Clone)]
pub struct Started {
    pub metrics_addr: SocketAddr,
    pub probes_addr: SocketAddr,
}

impl Manager {
    /// A manager for `cloud` writing through `client` (build it with [`crate::client`]: evictions must not be
    /// retried inside the client). Metrics are a fresh registry, the identity `<pod name>_<random>`.
    pub fn new(
        settings: CoreSettings,
        client: Client,
        cloud: Arc<dyn CloudProvider>,
        node_classes: Arc<dyn NodeClassLookup>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let mut crds = vec!["nodepools.karpenter.sh".to_string(), "nodeclaims.karpenter.sh".to_string()];
        if settings.decisions.feature_gates.node_overlay {
            crds.push("nodeoverlays.karpenter.sh".to_string());
        }
        // Not ours to install (docs/capacity-buffer.md), but the gate cannot work without it: /readyz says so.
        if settings.decisions.feature_gates.capacity_buffer {
            crds.push("capacitybuffers.autoscaling.x-k8s.io".to_string());
        }
        crds.extend(cloud.supported_node_classes().iter().map(|k| crd_name(&k.group, &k.kind)));
        Self {
            settings: settings.normalized(),
            client,
            leader_client: None,
            cloud,
            node_classes,
            node_class_registrations: Vec::new(),
            interruption: Vec::new(),
            clock,
            metrics: Arc::new(Metrics::new(&crate::metrics::BuildInfo::current("", ""))),
            probes: Probes::new(),
            identity: crate::leader::identity(&crate::leader::pod_name_from_env()),
            bind_ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            extra: Vec::new(),
            crds,
            state: None,
            disruption: None,
            heap_profiler: None,
        }
    }

    /// The provider's node-class kinds (none by default): the NodePool controllers read the node classes of
    /// these kinds only, a kind registered ready on sight gets its `<kind>.status` controller, and one with
    /// status metrics its `operatorpkg.<kind>.status` recorder. The binary builds the list for the provider it
    /// runs.
    pub fn with_node_class_registrations(
        mut self,
        registrations: impl IntoIterator<Item = NodeClassRegistration>,
    ) -> Self {
        let start = self.node_class_registrations.len();
        self.node_class_registrations.extend(registrations);
        require_registered_crds(&mut self.crds, &self.node_class_registrations[start..]);
        self
    }

    /// An interruption source to consume (the queue, status checks); each added source gets its own loop.
    pub fn with_interruption(mut self, source: Arc<dyn InterruptionSource>) -> Self {
        self.interruption.push(source);
        self
    }

    /// A separate client for the leader election (renewals must not wait behind the controllers' requests).
    pub fn with_leader_client(mut self, client: Client) -> Self {
        self.leader_client = Some(client);
        self
    }

    /// The metrics registry (to share it with provider code).
    /// The heap profile reader `/debug/pprof/heap` serves with `ENABLE_PROFILING` (the binary knows its
    /// allocator; without one that path answers 501).
    pub fn with_heap_profiler(mut self, heap: HeapProfiler) -> Self {
        self.heap_profiler = Some(heap);
        self
    }

    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The probes (to add provider liveness checks); the CRD readiness check is added by `run`.
    pub fn with_probes(mut self, probes: Probes) -> Self {
        self.probes = probes;
        self
    }

    /// The leader-election identity (default `<pod name>_<random>`).
    pub fn with_identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = identity.into();
        self
    }

    /// The address the servers bind (default all interfaces; tests use 127.0.0.1 with ports 0).
    pub fn with_bind_ip(mut self, ip: IpAddr) -> Self {
        self.bind_ip = ip;
        self
    }

    /// The cluster state to use (tests keep a handle to look at it); default a fresh one.
    pub fn with_state(mut self, state: ClusterState) -> Self {
        self.state = Some(state);
        self
    }

    /// The disruption loop's timings (default: upstream's); the rest of the loop's settings always come from the
    /// controller settings ([`DisruptionSettings::from_settings`]).
    pub fn with_disruption_settings(mut self, settings: DisruptionSettings) -> Self {
        self.disruption = Some(settings);
        self
    }

    /// An extra controller run on the leader (provider controllers, the kwok kubelet stand-in). It should return
    /// when the shutdown token passed to [`Manager::run`] is cancelled; if the leadership is lost it is dropped.
    pub fn with_controller(mut self, name: impl Into<String>, controller: BoxFuture<'static, ()>) -> Self {
        self.extra.push((name.into(), controller));
        self
    }

    /// The CRDs `/readyz` requires: NodePools, NodeClaims and the provider's node classes.
    pub fn required_crds(&self) -> &[String] {
        &self.crds
    }

    /// The probes (clones share the started flag).
    pub fn probes(&self) -> Probes {
        self.probes.clone()
    }

    /// The node-class lookup the manager was built with (the provider's; the NodePool controllers read node
    /// classes from the API server themselves).
    pub fn node_classes(&self) -> Arc<dyn NodeClassLookup> {
        self.node_classes.clone()
    }

    /// The metrics registry.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// Runs until `shutdown` (see the module docs). `on_started` is called with the bound server addresses.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), ManagerError> {
        self.run_with(shutdown, |_| {}).await
    }

    /// [`Manager::run`], telling `on_started` where the servers listen.
    pub async fn run_with(
        self,
        shutdown: CancellationToken,
        on_started: impl FnOnce(Started),
    ) -> Result<(), ManagerError> {
        let Manager {
            settings,
            client,
            leader_client,
            cloud,
            node_classes: _,
            node_class_registrations,
            interruption,
            clock,
            metrics,
            probes,
            identity,
            bind_ip,
            extra,
            crds,
            state,
            disruption,
            heap_profiler,
        } = self;

        // 1. Servers.
        let servers_token = CancellationToken::new();
        let probes = probes.with_readiness_check("crd", server::crds_present(client.clone(), crds));
        let metrics_addr = SocketAddr::new(bind_ip, settings.metrics_port);
        let probes_addr = SocketAddr::new(bind_ip, settings.health_probe_port);
        // ENABLE_PROFILING: the profiles of `crate::profiling` on the metrics server; 404 there otherwise.
        let profiling = settings.enable_profiling.then(|| match heap_profiler {
            Some(heap) => Profiling::new().with_heap(heap),
            None => Profiling::new(),
        });
        let metrics_server =
            server::start_metrics_with(metrics_addr, metrics.clone(), profiling, servers_token.clone())
                .await
                .map_err(|source| ManagerError::Server { server: "metrics", addr: metrics_addr, source })?;
        let probes_server = match server::start_probes(probes_addr, probes.clone(), servers_token.clone()).await {
            Ok(s) => s,
            Err(source) => {
                servers_token.cancel();
                return Err(ManagerError::Server { server: "health probe", addr: probes_addr, source });
            }
        };
        probes.set_started();
        on_started(Started { metrics_addr: metrics_server.local_addr, probes_addr: probes_server.local_addr });
        tracing::info!(metrics = %metrics_server.local_addr, probes = %probes_server.local_addr, "starting manager");
        if !settings.decisions.scheduler_config.is_empty() {
            let constraints: Vec<String> = settings
                .decisions
                .scheduler_config
                .default_constraints
                .iter()
                .map(|c| format!("{}:{}:maxSkew={}", c.topology_key, c.when_unsatisfiable, c.max_skew))
                .collect();
            tracing::info!(?constraints, "default topology spread constraints configured");
            for warning in settings.decisions.scheduler_config.warnings.iter() {
                tracing::warn!("{warning}");
            }
        }

        let result = run_leader(
            LeaderParts {
                settings,
                client,
                leader_client,
                cloud,
                node_class_registrations,
                interruption,
                clock,
                metrics,
                identity,
                extra,
                state,
                disruption,
            },
            shutdown,
        )
        .await;

        servers_token.cancel();
        stop_server(metrics_server).await;
        stop_server(probes_server).await;
        result
    }
}

async fn stop_server(server: RunningServer) {
    if tokio::time::timeout(Duration::from_secs(5), server.task).await.is_err() {
        tracing::warn!(addr = %server.local_addr, "server did not stop within 5s");
    }
}

struct LeaderParts {
    settings: CoreSettings,
    client: Client,
    leader_client: Option<Client>,
    cloud: Arc<dyn CloudProvider>,
    node_class_registrations: Vec<NodeClassRegistration>,
    interruption: Vec<Arc<dyn InterruptionSource>>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    identity: String,
    extra: Vec<NamedController>,
    state: Option<ClusterState>,
    disruption: Option<DisruptionSettings>,
}

/// Steps 2-5 of the module docs.
async fn run_leader(mut parts: LeaderParts, shutdown: CancellationToken) -> Result<(), ManagerError> {
    // 2. Leadership. `leader` is cancelled on shutdown and when the Lease is lost. The Lease is released only
    // after the controllers have stopped (`release`), so the next leader never overlaps with them.
    let release = CancellationToken::new();
    // The cluster state exists before the election, so a warm standby can fill it; the controllers use it too.
    let state =
        parts.state.get_or_insert_with(|| ClusterState::from_settings(&parts.settings, parts.clock.clone())).clone();
    // Warmup: the watchers run from now until shutdown or the loss of the Lease (linked below, once won); the
    // guard stops them if the election itself ends this function.
    let warm = warmup(&parts.settings).then(|| {
        let token = shutdown.child_token();
        tracing::info!("controller warmup: starting the cluster-state watchers before the leader election");
        (start_watchers(&parts, &state, &token), token.clone().drop_guard(), token)
    });
    let (leader, leadership) = if parts.settings.disable_leader_election {
        (shutdown.child_token(), None)
    } else {
        let config = parts.settings.leader_election(parts.identity.clone());
        let client = parts.leader_client.clone().unwrap_or_else(|| parts.client.clone());
        let elector = LeaderElector::new(client, config, parts.clock.clone())?;
        tracing::info!(identity = %parts.identity, "attempting to acquire the leader-election lease");
        let leadership = tokio::select! {
            result = elector.run(release.clone()) => match result {
                Ok(l) => l,
                Err(LeaderError::Cancelled) => return Ok(()),
                Err(e) => return Err(e.into()),
            },
            () = shutdown.cancelled() => return Ok(()),
        };
        tracing::info!(identity = %parts.identity, "acquired the leader-election lease");
        let leader = CancellationToken::new();
        let lost = leadership.lost();
        tokio::spawn({
            let (leader, shutdown) = (leader.clone(), shutdown.clone());
            async move {
                tokio::select! {
                    () = shutdown.cancelled() => {}
                    () = lost.cancelled() => {}
                }
                leader.cancel();
            }
        });
        (leader, Some(leadership))
    };

    let mut controllers = controllers(&parts, &leader);
    controllers.list.append(&mut parts.extra);

    // 3. Cluster state: list every kind before the controllers start (already watching when warm).
    let (watchers, _warm_guard) = match warm {
        Some((watchers, guard, token)) => {
            let leader = leader.clone();
            tokio::spawn(async move {
                leader.cancelled().await;
                token.cancel();
            });
            (watchers, Some(guard))
        }
        None => (start_watchers(&parts, &state, &leader), None),
    };
    let mut next_warning = tokio_now() + SYNC_WARNING;
    while !all_kinds_listed(&state) || state.unlisted_reason().is_some() {
        tokio::select! {
            () = leader.cancelled() => break,
            () = tokio::time::sleep(SYNC_POLL) => {}
        }
        if tokio_now() >= next_warning {
            tracing::warn!(reason = state.unsynced_reason().as_deref(), "waiting for the cluster state to sync");
            next_warning += SYNC_WARNING;
        }
    }

    // 4. Controllers.
    let mut tasks = tokio::task::JoinSet::new();
    if !leader.is_cancelled() {
        tracing::info!(controllers = controllers.list.len(), "starting controllers");
        for (name, controller) in controllers.list {
            let leader = leader.clone();
            tasks.spawn(async move {
                tokio::select! {
                    () = controller => tracing::debug!(controller = %name, "controller returned"),
                    () = leader.cancelled() => {}
                }
            });
        }
    }
    leader.cancelled().await;
    let lost = !shutdown.is_cancelled();
    if lost {
        tracing::error!("leader-election lease lost, stopping the controllers");
    } else {
        tracing::info!("shutting down");
    }

    // 5. Stop.
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while tasks.join_next().await.is_some() {}
        for w in watchers {
            let _ = w.await;
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!("controllers did not stop within {SHUTDOWN_GRACE:?}; aborting them");
        tasks.abort_all();
    }
    release.cancel();
    if let Some(leadership) = leadership {
        leadership.finished().await;
    }
    if lost { Err(ManagerError::LeadershipLost) } else { Ok(()) }
}

/// Upstream's `EnableWarmup`: watchers before the election, when there is one and `DISABLE_CONTROLLER_WARMUP` is
/// false.
fn warmup(settings: &CoreSettings) -> bool {
    !settings.disable_leader_election && !settings.disable_controller_warmup
}

/// Starts the cluster-state watchers the settings call for, until `token` is cancelled.
fn start_watchers(
    parts: &LeaderParts,
    state: &ClusterState,
    token: &CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    let spawn = |run: fn(ClusterState, Client, CancellationToken) -> BoxFuture<'static, ()>| {
        tokio::spawn(run(state.clone(), parts.client.clone(), token.clone()))
    };
    let mut watchers = vec![spawn(|s, c, t| Box::pin(async move { s.run_watchers(c, t).await }))];
    // Default topology spread constraints read Services and pod controllers: watched only when configured.
    let spread = !parts.settings.decisions.scheduler_config.is_empty();
    if spread {
        watchers.push(spawn(|s, c, t| Box::pin(async move { s.run_spread_watchers(c, t).await })));
    }
    // DRA objects are read only when DRA is simulated.
    if !parts.settings.decisions.ignore_dra_requests {
        watchers.push(spawn(|s, c, t| Box::pin(async move { s.run_dra_watchers(c, t).await })));
    }
    // CapacityBuffers and what they refer to: watched only with the gate (the workloads' watchers are shared
    // with the spread watchers when those run).
    if parts.settings.decisions.feature_gates.capacity_buffer {
        state.require_buffer_kinds();
        let (state, client, token) = (state.clone(), parts.client.clone(), token.clone());
        watchers.push(tokio::spawn(async move { state.run_buffer_watchers(client, token, spread).await }));
    }
    watchers
}

fn all_kinds_listed(state: &ClusterState) -> bool {
    state.kind_synced::<Node>()
        && state.kind_synced::<NodeClaim>()
        && state.kind_synced::<CompactPod>()
        && state.kind_synced::<NodePool>()
        && state.kind_synced::<DaemonSet>()
        && state.kind_synced::<PodDisruptionBudget>()
        && state.kind_synced::<Namespace>()
        && state.kind_synced::<PersistentVolumeClaim>()
        && state.kind_synced::<PersistentVolume>()
        && state.kind_synced::<StorageClass>()
        && state.kind_synced::<CSINode>()
}

struct Controllers {
    list: Vec<NamedController>,
}

/// Every controller, not started yet (futures do nothing until polled).
///
/// Long because it is the list of every controller the leader runs, each a few lines of wiring; the list is read in
/// one place.
fn controllers(parts: &LeaderParts, leader: &CancellationToken) -> Controllers {
    let settings = &parts.settings;
    let clock = parts.clock.clone();
    let metrics = parts.metrics.clone();
    let cloud = &parts.cloud;
    // Write conflicts of controllers that hold no registry are counted here.
    crate::kube_util::set_fallback_metrics(metrics.clone());
    let state = parts.state.clone().unwrap_or_else(|| ClusterState::from_settings(settings, clock.clone()));
    let recorder = Recorder::new(parts.client.clone(), clock.clone(), parts.identity.clone());
    // NodeOverlay (gate): every controller reads instance types through the overlay decorator; the NodeOverlay
    // controller evaluates the overlays against the undecorated provider and fills the decorator's store.
    let overlay_store = settings.decisions.feature_gates.node_overlay.then(karpenter_cloudprovider::OverlayStore::new);
    let decorated: Arc<dyn CloudProvider> = match &overlay_store {
        Some(store) => Arc::new(karpenter_cloudprovider::Overlaid::new(cloud.clone(), store.clone())),
        None => cloud.clone(),
    };
    let ctx = ControllerContext::new(parts.client.clone(), state.clone(), decorated, recorder, metrics, clock);
    // Every controller talks to the provider through its own metrics decorator, so each call is timed (and its
    // error counted) under the calling controller's name, whatever the provider.
    let ctx_for = |controller: &str| ctx.for_controller(controller);
    let mut list: Vec<NamedController> = Vec::new();

    let registrations = &parts.node_class_registrations;
    let resolver = NodeClassResolver::new(registrations);
    if let Some(store) = overlay_store {
        let overlays = crate::nodeoverlay::NodeOverlayController::new(&ctx, cloud.clone(), store);
        let overlays = Arc::new(overlays.with_node_classes(resolver.clone()));
        list.push((crate::nodeoverlay::CONTROLLER.into(), Box::pin(overlays.run(leader.clone()))));
    }

    if settings.decisions.feature_gates.capacity_buffer {
        let buffers = crate::capacitybuffer::CapacityBufferController::new(&ctx);
        list.push((crate::capacitybuffer::CONTROLLER.into(), Box::pin(buffers.run(leader.clone()))));
    }

    let provisioner = Provisioner::new(&ctx_for("provisioner"), ProvisionerOptions::from_settings(settings));
    list.push(("provisioner".into(), Box::pin(provisioner.run(leader.clone()))));

    let lifecycle = Arc::new(LifecycleContext::new(&ctx_for("nodeclaim.lifecycle")));
    list.push(("nodeclaim.lifecycle".into(), Box::pin(crate::lifecycle::run(lifecycle, leader.clone()))));

    let termination = Arc::new(Termination::new(&ctx_for("node.termination")));
    list.push(("node.termination".into(), Box::pin(termination.run(state.clone(), leader.clone()))));

    let expiration = Arc::new(Expiration::new(&ctx));
    list.push(("nodeclaim.expiration".into(), Box::pin(expiration.run(state.clone(), leader.clone()))));

    // Node repair: with the gate on, a disruption method (the disruption loop's); with LEGACY_NODE_REPAIR too,
    // upstream v1.14's standalone controller.
    if settings.decisions.feature_gates.node_repair
        && settings.legacy_node_repair
        && let Some(policies) = crate::repair::policies(&ctx)
    {
        let legacy = Arc::new(crate::repair::LegacyRepair::new(&ctx_for("node.health"), policies));
        list.push(("node.health".into(), Box::pin(legacy.run(leader.clone()))));
    }

    // VerticalPodAutoscalers: watched and kept (upstream v1.15), read by nothing yet.
    let vpas = crate::vpa::VpaStore::default();
    list.push(("vpa".into(), Box::pin(crate::vpa::run(parts.client.clone(), vpas, leader.clone()))));

    let gc = Arc::new(GarbageCollection::new(&ctx_for(crate::garbage_collection::CONTROLLER)));
    list.push((crate::garbage_collection::CONTROLLER.into(), Box::pin(gc.run(leader.clone()))));
    // What the provider offers, as gauges (upstream's AWS cloudprovider.metrics, for every provider).
    let offerings = Arc::new(crate::cloudprovider_metrics::CloudProviderMetrics::new(&ctx_for(
        crate::cloudprovider_metrics::CONTROLLER,
    )));
    list.push((crate::cloudprovider_metrics::CONTROLLER.into(), Box::pin(offerings.run(leader.clone()))));

    // NodePools: readiness, validation, registration health, counter, hash, static capacity.
    let readiness = Arc::new(Readiness::new(&ctx_for("nodepool.readiness"), resolver.clone()));
    list.push(("nodepool.readiness".into(), Box::pin(readiness.run(leader.clone()))));
    let validation = Arc::new(Validation::new(&ctx));
    list.push(("nodepool.validation".into(), Box::pin(validation.run(state.clone(), leader.clone()))));
    let registration = Arc::new(RegistrationHealth::new(&ctx, Arc::new(RegistrationTracker::new()), resolver));
    list.push(("nodepool.registrationhealth".into(), Box::pin(registration.run(state.clone(), leader.clone()))));
    let counter = Arc::new(Counter::new(&ctx).with_cluster_limits(settings.decisions.cluster_limits.clone()));
    list.push(("nodepool.counter".into(), Box::pin(counter.run(leader.clone()))));
    let hash = Arc::new(HashController::new(&ctx));
    list.push(("nodepool.hash".into(), Box::pin(hash.run(state.clone(), leader.clone()))));
    let static_capacity = settings.decisions.feature_gates.static_capacity;
    let static_up = Arc::new(
        StaticProvisioning::new(&ctx, static_capacity).with_cluster_limits(&settings.decisions.cluster_limits),
    );
    list.push(("static.provisioning".into(), Box::pin(static_up.run(leader.clone()))));
    let static_down = Arc::new(
        StaticDeprovisioning::new(&ctx, static_capacity)
            .with_deletion_cost_management(settings.decisions.feature_gates.pod_deletion_cost_management),
    );
    list.push(("static.deprovisioning".into(), Box::pin(static_down.run(leader.clone()))));
    let min_nodes = Arc::new(
        MinNodes::new(&ctx_for(nodepool::min_nodes::CONTROLLER))
            .with_scheduler_options(ProvisionerOptions::from_settings(settings).scheduler_options()),
    );
    list.push((nodepool::min_nodes::CONTROLLER.into(), Box::pin(min_nodes.run(leader.clone()))));
    for registration in registrations.iter().filter(|r| r.ready_on_sight) {
        let status = Arc::new(ReadyOnSight::new(&ctx, registration));
        list.push((status.name().to_owned(), Box::pin(status.run(leader.clone()))));
    }
    let consistency = Arc::new(Consistency::new(&ctx));
    list.push(("nodeclaim.consistency".into(), Box::pin(consistency.run(leader.clone()))));

    // Disruption: the NodeClaim conditions, pod events and the disruption loop.
    let conditions = Arc::new(NodeClaimDisruption::new(&ctx_for("nodeclaim.disruption")));
    list.push(("nodeclaim.disruption".into(), Box::pin(conditions.run(leader.clone()))));
    let pod_events = Arc::new(PodEvents::new(&ctx));
    list.push(("nodeclaim.podevents".into(), Box::pin(pod_events.run(leader.clone()))));
    // Timings may be overridden (tests); what the settings decide (gates, limits, the scheduler config) is
    // always theirs.
    let from_settings = DisruptionSettings::from_settings(settings);
    let disruption_settings = match &parts.disruption {
        Some(custom) => from_settings.with_timings_of(custom),
        None => from_settings,
    };
    let disruption = Arc::new(Disruption::new(&ctx_for("disruption"), disruption_settings));
    list.push(("disruption".into(), Box::pin(disruption.run(leader.clone()))));

    // Pod deletion costs: registered only with the gate on (read once at start, as upstream).
    if settings.decisions.feature_gates.pod_deletion_cost_management {
        let ctx = ctx_for(crate::deletion_cost::CONTROLLER);
        let deletion_cost =
            Arc::new(crate::deletion_cost::DeletionCost::new(&ctx, settings.decisions.honor_autoscaler_annotations));
        list.push((crate::deletion_cost::CONTROLLER.into(), Box::pin(deletion_cost.run(leader.clone()))));
    }

    // Cluster-state observability: metrics.pod, metrics.nodepool and metrics.node unless
    // DISABLE_CLUSTER_STATE_OBSERVABILITY (as upstream); the state's own gauges always.
    list.extend(crate::observability::controllers(&ctx, settings, registrations, leader));

    for (i, source) in parts.interruption.iter().enumerate() {
        let interruption = Arc::new(Interruption::new(&ctx, source.clone()));
        let name = if i == 0 { "interruption".to_owned() } else { format!("interruption.{i}") };
        list.push((name, Box::pin(interruption.run(leader.clone()))));
    }

    Controllers { list }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_class_crd_names() {
        assert_eq!(crd_name("karpenter.kwok.sh", "KWOKNodeClass"), "kwoknodeclasses.karpenter.kwok.sh");
        assert_eq!(crd_name("karpenter.k8s.aws", "EC2NodeClass"), "ec2nodeclasses.karpenter.k8s.aws");
        assert_eq!(crd_name("example.com", "Widget"), "widgets.example.com");
    }

    #[test]
    fn a_registered_kind_is_required_under_its_plural() {
        let mut toy = crate::node_classes::toy::registration();
        toy.api_resource.plural = "toynodeclassen".into();
        let mut crds = vec!["nodepools.karpenter.sh".to_string(), crd_name("example.dev", "ToyNodeClass")];
        require_registered_crds(&mut crds, &[toy.clone()]);
        assert_eq!(crds, ["nodepools.karpenter.sh", "toynodeclassen.example.dev"]);
        require_registered_crds(&mut crds, &[toy]);
        assert_eq!(crds, ["nodepools.karpenter.sh", "toynodeclassen.example.dev"], "once");
    }
}
