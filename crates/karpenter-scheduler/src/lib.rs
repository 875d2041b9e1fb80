//! Karpenter's provisioning simulation (upstream v1.14.1) as a pure function:
//! a [`ClusterSnapshot`] plus NodePools with their instance types (data, never a provider) plus the provider's
//! well-known labels plus [`SchedulerOptions`] give [`Decisions`]: NodeClaims to create, pods placed on
//! existing and in-flight nodes, and a reason for every pod that cannot be placed.
//!
//! ```toml
//! [dependencies]
//! karpenter-scheduler = { version = "0.1" }
//! # This crate leaves the Kubernetes version to the final binary (kube-rs's rule for libraries): the binary
//! # enables exactly one k8s-openapi version feature, the one karpenter-rs is built and tested with being v1_33.
//! k8s-openapi = { version = "0.29", features = ["v1_33"] }
//! ```
//!
//! Features, all on by default; `default-features = false` keeps the dependency tree lean (docs/benchmarks.md,
//! "A lean scheduler for library users"), and each one left out is an explicit outcome, never a silent
//! difference:
//!
//! * `dra-cel`: DRA device selectors written in CEL. Without it a pod whose claim needs one is unschedulable,
//!   its reason naming the feature (device classes without selectors still allocate).
//! * `yaml`: [`SchedulerConfig::parse`] reads YAML (JSON only without it, and YAML text is an error naming
//!   the feature), and the re-exported [`karpenter_api`] has its manifest loader (`load_str`, `load_file`,
//!   `load_paths`; without it inputs are built with the builders of [`prelude`] or decoded with serde_json).
//! * `time-zones`: budget `timeZone`s of the re-exported [`karpenter_api`] (without it a named zone is
//!   `BudgetError::TimeZonesUnsupported`, never UTC).
//!
//! The CRD derive (`kube`'s `CustomResource`, schemars) is not optional: it generates the API types
//! themselves (`NodePool`, `NodeClaim` are written as their specs plus the derive).
//!
//! **No IO, no async, no kube client, no clock.** The deadline is a pod-attempt budget
//! ([`SchedulerOptions::max_pod_attempts`]) or a caller-supplied check ([`schedule_until`]).
//! Output is deterministic: the same input gives the same JSON.
//!
//! # Entry points
//!
//! * [`prelude`]: one import for a program that plans pods: the inputs and their builders
//!   (`NodePool::builder`, `PodBuilder`, `InstanceType::builder`, `Offering::on_demand`/`spot`/`reserved`),
//!   typed requirements and quantities, well-known label and resource names, [`schedule`] and its output. This
//!   crate also re-exports [`karpenter_api`], [`karpenter_requirements`], [`kube`] and [`k8s_openapi`], so it is
//!   the only dependency a user adds (plus the k8s-openapi version feature above). Runnable examples:
//!   `cargo run -p karpenter-scheduler --example plan_pods` and `--example explain_unschedulable`.
//! * [`snapshot`]: [`ClusterSnapshot`] and [`ClusterSnapshot::from_objects`] (file-input rules in the module
//!   docs: pending pods, workload expansion without double counting).
//! * [`schedule`] / [`schedule_until`] with [`PoolInput`] and [`SchedulerOptions`].
//! * [`decision`]: the versioned JSON (`"apiVersion": "karpenter-rs.scheduler/v1"`), documented there.
//! * [`simulation`]: [`simulation::Simulator`], prepared once per pass for many what-if solves ("remove these
//!   nodes, where do their pods go?"), used by disruption.
//! * [`check`]: an independent checker of a decision against its input, used by the tests and benchmarks.
//! * [`provisioning`]: the rules around the solver the controller and `simulate` share (which NodePools
//!   provisioning launches from, how many NodeClaims a static NodePool gets).
//! * [`bound`]: a lower bound on the cost of new nodes for a set of pods (LP relaxation over cpu, memory
//!   and pods), to judge packing quality.
//!
//! # Example
//!
//! ```
//! use karpenter_api::{ProviderLabels, load_str};
//! use karpenter_requirements::{Format, InstanceType, Offering, Overhead, Quantity, Requirement, Requirements, ResourceList};
//! use karpenter_scheduler::{ClusterSnapshot, PoolInput, SchedulerOptions, schedule};
//!
//! let objects = load_str(r#"
//! apiVersion: karpenter.sh/v1
//! kind: NodePool
//! metadata: {name: default}
//! spec:
//!   template:
//!     spec:
//!       nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
//!       requirements: []
//! ---
//! apiVersion: v1
//! kind: Pod
//! metadata: {name: web, namespace: default}
//! spec: {containers: [{name: c, image: nginx, resources: {requests: {cpu: "1"}}}]}
//! "#, "example.yaml").unwrap();
//! let snapshot = ClusterSnapshot::from_objects(&objects).unwrap();
//!
//! let offering = Offering::new(
//!     [Requirement::in_values("topology.kubernetes.io/zone", ["zone-a"]),
//!      Requirement::in_values("karpenter.sh/capacity-type", ["on-demand"])].into_iter().collect(),
//!     0.1,
//! );
//! let it = InstanceType::new(
//!     "small",
//!     [Requirement::in_values("node.kubernetes.io/instance-type", ["small"])].into_iter().collect::<Requirements>(),
//!     vec![offering],
//!     ResourceList::new().with("cpu", Quantity::from_int(2, Format::DecimalSI))
//!         .with("pods", Quantity::from_int(10, Format::DecimalSI)),
//!     Overhead::default(),
//! );
//! let catalogue = vec![it];
//! let pools = [PoolInput { node_pool: &snapshot.node_pools[0], instance_types: &catalogue }];
//! let decisions = schedule(&snapshot, &pools, &karpenter_testing::vocabulary::aws(), &SchedulerOptions::default());
//! assert_eq!(decisions.new_node_claims.len(), 1);
//! let claim = &decisions.new_node_claims[0];
//! assert_eq!(claim.instance_type_names().collect::<Vec<_>>(), ["small"]);
//! // Where and at what price: the one zone its option is offered in, its cheapest compatible offering.
//! assert_eq!((claim.zone(), claim.price), (Some("zone-a"), Some(0.1)));
//! let offering = claim.cheapest_offering().unwrap();
//! assert_eq!(offering.capacity_type.as_deref(), Some("on-demand"));
//! println!("{}", decisions.to_json());
//! ```
//!
//! # What this build implements
//!
//! Queue order (CPU, memory, creation time, uid); placement existing nodes → in-flight NodeClaims (fewest
//! pods first) → a new NodeClaim per NodePool in weight order (ties by name, descending); NodeClaim.CanAdd with
//! resource fit against allocatable (instance overhead) plus per-instance-type DaemonSet overhead;
//! nodeSelector and required node affinity (first term, later terms through relaxation); preferred node
//! affinity under `Respect` / `Ignore`; taints and tolerations (startup taints ignored; ephemeral and startup
//! taints of uninitialized nodes ignored); host ports; NodePool limits counting existing nodes and in-flight
//! claims (`nodes` included), and cluster-wide limits (`SchedulerOptions::cluster_limits`, beyond upstream) counted
//! the same way over every NodePool, with one budget all NodePools' new claims draw on; minValues (`Strict` / `BestEffort`); instance-type options ordered by price and
//! truncated to 600; static NodePools left out; per-pod errors for bad input (unknown operator, malformed
//! quantity, restricted key, `matchFields`, invalid label selectors, missing or unusable PVCs).
//!
//! Topology: topology spread on any key (zone, hostname, capacity type, custom keys from
//! NodePool requirements and instance types) with maxSkew, minDomains, whenUnsatisfiable, labelSelector,
//! matchLabelKeys, nodeAffinityPolicy and nodeTaintsPolicy; pod affinity and anti-affinity, required and
//! preferred, with namespaces and namespaceSelector on any topology key; the required anti-affinity of pods
//! already running (and of pods placed earlier in the pass) against incoming pods; pods placed in the pass
//! count for later pods, and new NodeClaims are narrowed to the chosen domain. Counts are kept per
//! (group, domain) from bound pods onwards, groups are shared between pods, and each pod's groups are
//! precomputed. Relaxation follows upstream's order: required-term alternatives, preferred pod affinity,
//! preferred pod anti-affinity, preferred node affinity, `ScheduleAnyway` spread, PreferNoSchedule.
//!
//! Capacity reservations: a pass's claims hold instances of the reservations their reserved offerings name and
//! are pinned to them; once a reservation is used up, claims fall through to on-demand or spot, the next
//! NodePool or preference relaxation in the same pass (v1.15.1); [`ReservedOfferingMode::Strict`] keeps a claim
//! from losing the reservations it holds (see the `scheduler::reservations` module docs).
//!
//! Volumes: zonal requirements from bound PVs' node affinity (hostname dropped for local and
//! hostPath volumes), storage classes' allowedTopologies for unbound claims (ephemeral volumes included),
//! CSINode volume limits on existing nodes (drivers from the PV, in-tree plugins translated, or the class's
//! provisioner).
//!
//! DRA ([`SchedulerOptions::ignore_dra_requests`] `false`; docs/dra.md): each pod's resource claims are resolved
//! once per pass (named claims, claims made from templates, or the template itself), device classes' and
//! requests' CEL selectors are evaluated once per device, and ExactCount / All / firstAvailable requests are
//! allocated by a backtracking search: on initialized existing nodes from their published ResourceSlices (node
//! name, node selector, all nodes), on uninitialized nodes, in-flight and new NodeClaims from the instance
//! types' slice templates (a new claim keeps the types whose templates hold all of its claims). Devices held by
//! claims' `status.allocation` are never reused, a shared claim is allocated once and pins its pods, a DRA failure
//! relaxes no preference, and new NodeClaims list their drivers (`karpenter.sh/requested-dra-drivers`). With the
//! default `true`, pods with claims get a per-pod reason, as upstream.
//!
//! Deliberate differences: inverse anti-affinity is tracked for required terms only (a preferred term of one
//! pod would otherwise block pods that cannot relax it); a matching pod placed on a new NodeClaim whose key
//! is still open blocks every domain for anti-affinity (upstream records nothing there and relies on the
//! kube-scheduler to catch the conflict). Ties among equally good spread domains go to the first domain in
//! sorted order (upstream: map order).
//!
//! # Not supported yet
//!
//! * DRA: request constraints (`matchAttribute`), admin access, device taints, partitionable devices and
//!   `perDeviceNodeSelection` slices (see docs/dra.md).
//! * The `consolidateAfter` window for non-pending pods is not simulated, nor sizing of in-flight NodeClaims
//!   without `status.allocatable` (nothing fits on them).
//!   Existing nodes and in-flight claims are tried sequentially (upstream evaluates them in parallel with the
//!   same result).

pub mod bound;
pub mod check;
pub mod decision;
pub mod default_spread;
pub mod nodeclaim;
pub mod prelude;
pub mod provisioning;
pub mod scheduler;
pub mod simulation;
pub mod snapshot;

// The crates this one's inputs and outputs are made of, re-exported so that a user depends on this crate alone
// (plus the k8s-openapi version feature the final binary picks) and names the very versions it was built with.
pub use karpenter_api;
pub use karpenter_api::{k8s_openapi, kube};
pub use karpenter_requirements;

pub use decision::{
    API_VERSION, Decisions, ExistingNodePlacement, InstanceTypeOption, NodeClaimPlan, PodKey, PodKeyError,
    UnschedulablePod, UnschedulableReason,
};
pub use default_spread::{SchedulerConfig, SchedulerConfigError};
pub use nodeclaim::{BuildError, build_node_claim};
pub use scheduler::templates::{cluster_usage, remaining_limits};
pub use scheduler::{PoolInput, ReservedOfferingMode, SchedulerOptions, schedule, schedule_until, schedule_watching};
pub use snapshot::{ClusterSnapshot, NamespaceInfo, NodeClaimInfo, NodeInfo, SnapshotBuilder, SnapshotError};
