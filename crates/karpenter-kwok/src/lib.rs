//! The kwok cloud provider: Karpenter without a cloud. An "instance" is a Node object this provider creates
//! through the Kubernetes API, so provisioning, consolidation, drift and termination can be exercised at scale (or
//! end to end in tests) with no machines behind the Nodes. The controller binary chooses it with its provider flag (`kwok`).
//!
//! ```toml
//! [dependencies]
//! karpenter-kwok = { version = "0.1" }
//! # This crate leaves the Kubernetes version to the final binary (kube-rs's rule for libraries): the binary
//! # enables exactly one k8s-openapi version feature, the one karpenter-rs is built and tested with being v1_33.
//! k8s-openapi = { version = "0.29", features = ["v1_33"] }
//! ```
//!
//! # What a launch does ([`KwokCloudProvider`])
//!
//! * **Choice**: the cheapest available offering compatible with the NodeClaim's `spec.requirements` whose node
//!   holds its `spec.resources.requests` (an offering with a `CapacityOverride`/`OverheadOverride` judged by its
//!   own allocatable) ([`karpenter_cloudprovider::launch::cheapest_launch_holding`]; ties by instance-type name,
//!   zone, capacity type).
//!   Nothing left: `InsufficientCapacity`, naming the compatible offerings that are marked out of capacity.
//! * **The Node** is named after the NodeClaim, with `spec.providerID: kwok://<name>`, the single taint
//!   `karpenter.sh/unregistered:NoExecute` (the lifecycle controller removes it at registration and adds the
//!   claim's taints and startup taints, as it does for a kubelet-registered node), `status.capacity` and
//!   `status.allocatable` from the catalogue (the chosen offering's, with its overrides), phase `Pending`, `status.nodeInfo` with a boot id (`<node>-boot-0`,
//!   what node repair records before a reboot), the architecture and the operating system. Labels: the NodeClaim's labels, its single-valued
//!   `In` requirements (`karpenter.sh/nodepool`, ...), the instance type's single-valued requirements
//!   (`node.kubernetes.io/instance-type`, `kubernetes.io/arch`, `kubernetes.io/os`, `karpenter.kwok.sh/instance-*`)
//!   and the offering's (`topology.kubernetes.io/zone`, `karpenter.sh/capacity-type`), `kubernetes.io/hostname`,
//!   `eks-node-viewer/instance-price`, `kwok-partition` (upstream picks one of ten at random; here a hash of the
//!   name), `kwok.x-k8s.io/node: fake` (also as an annotation: a KWOK controller in the cluster takes such Nodes
//!   over) and [`MANAGED_LABEL`]` = "true"`. `karpenter.sh/registered` and `karpenter.sh/initialized` are never
//!   set: those are the lifecycle controller's. Annotations: the claim's, plus [`NODE_CLAIM_ANNOTATION`] (and
//!   [`NODE_CLAIM_UID_ANNOTATION`]) naming the NodeClaim.
//! * **Idempotent per NodeClaim**: a create first looks for the Node named after the claim; if it is ours and
//!   annotated with this claim (and uid), that Node is returned, so a repeated create (a restarted controller) or
//!   a concurrent one (the losing `POST` gets 409 and then finds the winner's Node) never launches twice. A Node of
//!   that name launched for something else fails with `Create { reason: "NodeNameInUse" }`; one still
//!   terminating with `Create { reason: "NodeTerminating" }` (retried by the lifecycle controller).
//!
//! # The other calls
//!
//! * **`get` / `list`** see only Nodes carrying [`MANAGED_LABEL`] with a `kwok://` provider id (real Nodes of the
//!   same cluster are never reported, so the garbage collector never touches them). The NodeClaim they report is
//!   named after the claim the Node was launched for and carries the Node's labels, provider id, node name,
//!   capacity and allocatable.
//! * **`delete`** deletes the Node (`Ok`: deletion under way). The Node *is* the instance, so a Node with a
//!   `deletionTimestamp` counts as terminated: `get` and `delete` answer `NodeClaimNotFound` and `list` leaves it
//!   out. That is what lets the node termination controller, which holds the Node with its
//!   `karpenter.sh/termination` finalizer until the instance is gone, finish (upstream's kwok `Get` does the same).
//! * **`instance_types`**: the whole catalogue, every offering marked out of capacity reported
//!   `available: false`. As upstream's kwok provider, NodePool requirements are not applied here (the scheduler
//!   intersects them with each instance type). With a [`NodeClassLookup`](karpenter_cloudprovider::NodeClassLookup)
//!   a missing or terminating KWOKNodeClass gives an empty list.
//! * **Node classes** (only with a lookup in [`KwokOptions::node_classes`]; without one every KWOKNodeClass counts
//!   as ready): a missing or terminating class fails create with `InsufficientCapacity`, `Ready=False` with
//!   `NodeClassNotReady`; an unknown readiness does not block a launch, as upstream. A claim referencing another
//!   kind fails with `Create { reason: "UnsupportedNodeClass" }`.
//! * **`is_drifted`**: `None`, unless the Node is annotated [`DRIFT_ANNOTATION`]` = <Reason>` (a test hook, see
//!   [`KwokCloudProvider::set_drifted`]); upstream's kwok provider has no provider-side drift.
//! * **`repair_policies`**: node `Ready` `False` or `Unknown` for 10 minutes (upstream's kwok values).
//! * **`reboot`** (node repair's `Reboot` action; upstream's kwok provider has none): the Node is the machine, so
//!   a reboot is played on it at once, before the call returns. Its `status.nodeInfo.bootID` changes
//!   (`<node>-boot-<n>`, counting from `<node>-boot-0` given at launch; any other value becomes
//!   `<node>-boot-1`) and its `Ready` condition is set True (transition time from [`KwokOptions::clock`] unless
//!   it was True already). Every other condition is left as it is: no hardware is behind a kwok Node, so whether
//!   a fault survives the reboot is the test's to say (clear the condition, or leave it to exercise the escalation
//!   to replace). Pods, labels, taints and the Lease are untouched; `list` still reports the one instance. A
//!   terminating, gone or foreign Node gives `NodeClaimNotFound`. The write is guarded by the Node's
//!   resourceVersion and retried on a conflict. With a KWOK controller in the cluster, that controller owns the
//!   Node's status and may write its own boot id.
//! * **`name`** `kwok`; **`supported_node_classes`** `KWOKNodeClass` (`karpenter.kwok.sh`); labels
//!   [`labels::provider_labels`] (the `karpenter.kwok.sh/*` keys, owned by this crate's [`labels`] module).
//! * **Out of capacity on demand** (tests, chaos runs): [`KwokCloudProvider::set_insufficient_capacity`],
//!   [`exhaust_capacity_for`](KwokCloudProvider::exhaust_capacity_for),
//!   [`clear_insufficient_capacity`](KwokCloudProvider::clear_insufficient_capacity). Clones share the marks.
//!
//! # Instance types: the built-in catalogue or a JSON file
//!
//! By default the provider launches from upstream's generic kwok catalogue
//! ([`catalogue::catalogue`]: 144 types `c|s|m-<cpu>x-<arch>-<os>`, zones `test-zone-a..d`, spot and on-demand).
//! To launch from your own list, write it in the format of upstream's kwok `instance_types.json` (a JSON list of
//! `{name, architecture, operatingSystems, resources, offerings: [{Price, Available, Requirements}]}`; see
//! [`catalogue`] for the fields and the two deliberate differences) and build the options from it:
//!
//! ```no_run
//! # fn run(client: kube::Client) -> Result<(), karpenter_kwok::KwokError> {
//! use karpenter_kwok::{KwokCloudProvider, KwokOptions};
//! let options = KwokOptions::from_instance_types_file("/etc/karpenter/instance_types.json")?;
//! let provider = KwokCloudProvider::new(client, options);
//! # Ok(()) }
//! ```
//!
//! A file that cannot be read, does not parse (the error names the entry and the field) or lists nothing is a
//! [`KwokError`] at startup, never a half-loaded catalogue.
//!
//! # Clusters without a KWOK controller: `--kwok-simulate-kubelet`
//!
//! Upstream's kwok setup relies on a [KWOK](https://kwok.sigs.k8s.io) controller in the cluster to play the
//! kubelet of every fake Node (make it Ready, keep its Lease fresh, run its pods). Without one, the Nodes never
//! turn Ready: Karpenter never initializes them and the kube-controller-manager would eventually consider them
//! dead. With `--kwok-simulate-kubelet` the controller runs the stand-in itself: [`simulate_kubelet`] (this crate's
//! [`Kubelet`] stand-in, which the end-to-end tests share) passes
//! over the Nodes labelled [`MANAGED_LABEL`]` = "true"` every [`DEFAULT_INTERVAL`] until shutdown and
//!
//! * sets their `Ready` condition True (the node lifecycle controller then lifts the `not-ready` taint);
//! * creates their Lease in `kube-node-lease` and renews it every 10 s (40 s duration), as a kubelet does;
//! * starts the pods bound to them (phase `Running`, `Ready`), and finally deletes pods whose graceful deletion
//!   has run out (what lets a drain finish).
//!
//! Nothing else in the cluster is touched: real Nodes and their pods are not selected. No container runs; pods
//! only look running. The service account needs, besides Karpenter's own RBAC, `patch` on `nodes/status` and
//! `pods/status`, `delete` on pods and `get/create/patch` on `leases` in `kube-node-lease`. Do not combine the
//! flag with a KWOK controller that also manages these Nodes: two writers would fight over their status.
//!
//! ```no_run
//! # async fn run(client: kube::Client) {
//! let shutdown = tokio_util::sync::CancellationToken::new();
//! tokio::spawn(karpenter_kwok::simulate_kubelet(client, shutdown.clone()));
//! // ... on SIGTERM:
//! shutdown.cancel();
//! # }
//! ```
//!
//! # Modules
//!
//! * [`catalogue`]: the built-in instance types ([`catalogue::catalogue`]), the loader and writer of upstream's
//!   kwok instance-type JSON ([`load_instance_types_json`], [`to_instance_types_json`]) and
//!   [`PROVIDER_ID_PREFIX`]. The controller's `simulate` and the tests use it too (tests through
//!   `karpenter_testing::kwok`, which also builds the in-memory fake provider over it).
//! * [`provider`]: [`KwokCloudProvider`], [`KwokOptions`], [`KwokError`], [`load_instance_types_file`],
//!   [`node_to_claim`] and the label/annotation keys.
//! * [`kubelet`]: [`simulate_kubelet`], [`simulate_kubelet_with`] ([`SimulateOptions`]), [`kwok_kubelet`] (one
//!   [`Kubelet`] for stepping in tests) and [`kubelet_options`].
//!
//! The crate depends on `kube` with the `client` feature only: the binary builds the (TLS) client and hands it
//! in, and tests hand in the in-process API server's client. Its tests run the CloudProvider conformance suite
//! (`karpenter_testing::conformance`) against it.

pub mod api;
pub mod catalogue;
pub mod kubelet;
pub mod labels;
pub mod provider;
pub mod testing;

pub use catalogue::{KwokCatalogueError, PROVIDER_ID_PREFIX, load_instance_types_json, to_instance_types_json};
pub use kubelet::{
    DEFAULT_INTERVAL, Kubelet, KubeletOptions, KubeletReport, SimulateOptions, kubelet_options, kwok_kubelet,
    simulate_kubelet, simulate_kubelet_with,
};
pub use provider::{
    DRIFT_ANNOTATION, KWOK_NODE_KEY, KWOK_NODE_VALUE, KwokCloudProvider, KwokError, KwokOptions, MANAGED_LABEL,
    NODE_CLAIM_ANNOTATION, NODE_CLAIM_UID_ANNOTATION, PARTITION_LABEL, PRICE_LABEL, UNREGISTERED_TAINT,
    load_instance_types_file, node_to_claim,
};
