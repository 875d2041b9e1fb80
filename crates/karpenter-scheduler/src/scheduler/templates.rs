//! NodeClaim templates (one per dynamic NodePool), DaemonSet overhead, limits, and existing nodes.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{PodSpec, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_api::labels;
use karpenter_api::meta::DEFAULT_NAMESPACE;
use karpenter_api::{CompactPod, NodePool, ProviderLabels};
use karpenter_requirements::{
    HostPort, HostPortUsage, InstanceType, NoKeys, Offering, OfferingsExt, Quantity, Requirement, Requirements,
    ResourceList, spec_host_ports, tolerates_all,
};
use std::sync::Arc;

use super::pods::requests_with_pod_count;
use super::volumes::{VolumeIndex, VolumeUsage};
use crate::decision::NodePoolRejection;
use crate::decision::RejectionKind::{Limits, Unusable};
use crate::snapshot::{ClusterSnapshot, api_taint};

/// A DaemonSet as a new node would see it, parsed from its representative pod's spec
/// ([`ClusterSnapshot::daemon_set_pod_spec`]).
#[derive(Debug)]
pub(crate) struct Daemon {
    pub name: (String, String),
    pub requests: ResourceList,
    pub tolerations: Vec<Toleration>,
    /// nodeSelector ∩ each required term (ORed); at least one entry.
    pub alternatives: Vec<Requirements>,
    pub host_ports: Vec<HostPort>,
}

/// The DaemonSets of the snapshot whose template parses (others are left out of overhead). DaemonSets with DRA
/// resource claims count only when DRA is simulated (`with_claims`), and then for their resources only.
pub(crate) fn daemons(snapshot: &ClusterSnapshot, with_claims: bool) -> Vec<Daemon> {
    snapshot.daemon_sets.iter().filter_map(|ds| daemon(snapshot, ds, with_claims)).collect()
}

fn daemon(snapshot: &ClusterSnapshot, ds: &DaemonSet, with_claims: bool) -> Option<Daemon> {
    let spec: PodSpec = snapshot.daemon_set_pod_spec(ds)?;
    if !with_claims && spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()) {
        return None;
    }
    let pod = CompactPod { metadata: ObjectMeta::default(), spec: Arc::new(spec), status: None };
    let spec = &*pod.spec;
    let selector = spec.node_selector.as_ref().map(Requirements::from_labels).unwrap_or_default();
    let mut alternatives = Vec::new();
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or(&[]);
    for t in terms {
        let mut r = selector.clone();
        r.add_all(&Requirements::from_node_selector_term(t).ok()?);
        alternatives.push(r);
    }
    if alternatives.is_empty() {
        alternatives.push(selector);
    }
    Some(Daemon {
        // A manifest without a namespace is in `default` once applied; its pods are matched to it there.
        name: (
            ds.metadata.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE).to_owned(),
            ds.metadata.name.clone().unwrap_or_default(),
        ),
        requests: requests_with_pod_count(&pod).ok()?,
        tolerations: spec.tolerations.clone().unwrap_or_default(),
        host_ports: spec_host_ports(spec),
        alternatives,
    })
}

fn prefer_no_schedule_toleration() -> Toleration {
    Toleration {
        operator: Some("Exists".into()),
        effect: Some("PreferNoSchedule".into()),
        key: None,
        value: None,
        toleration_seconds: None,
    }
}

/// One [offering group](InstanceType::offering_groups) of an instance type with offering overrides, as a
/// template sees it: the group's allocatable less the type's DaemonSet overhead, and its available offerings.
#[derive(Debug, Clone)]
pub(crate) struct GroupRoom<'a> {
    /// The group's allocatable − DaemonSet overhead (may be negative: such a group never fits).
    pub room: ResourceList,
    pub offerings: Vec<&'a Offering>,
}

/// A dynamic NodePool prepared for simulation.
#[derive(Debug, Clone)]
pub(crate) struct Template<'a> {
    pub name: String,
    pub requirements: Requirements,
    pub taints: Vec<Taint>,
    /// Instance types compatible with the template and able to hold its DaemonSets.
    pub its: Vec<&'a InstanceType>,
    /// DaemonSet overhead per instance type (parallel to `its`).
    pub daemon: Vec<ResourceList>,
    /// allocatable − DaemonSet overhead per instance type (never negative: others are dropped). For a type with
    /// offering overrides, the base group's (the type's [`InstanceType::allocatable`]), which may be negative
    /// when only an override group holds the DaemonSets; its fit is decided by `groups`.
    pub room: Vec<ResourceList>,
    /// Per instance type (parallel to `its`): empty unless some offering of the type has overrides, else every
    /// offering group with its room (the base group first). A pod fits such a type when it fits a group's room
    /// and the group has an offering compatible with the claim, as upstream's `fits`.
    pub groups: Vec<Box<[GroupRoom<'a>]>>,
    /// DaemonSet host ports per instance type.
    pub daemon_ports: Vec<HostPortUsage>,
    /// Remaining limits (`limits − existing capacity`), `None` without limits.
    pub remaining: Option<ResourceList>,
    /// `spec.limits`, parsed.
    pub limits: ResourceList,
    /// Indices of `its` within the remaining limits (recomputed when `remaining` changes).
    pub within_limits: Vec<u32>,
    /// Why the template cannot produce any NodeClaim (then `its` is empty).
    pub unusable: Option<NodePoolRejection>,
    pub claims_created: usize,
    /// No instance type or offering of `its` has a hostname requirement, so the hostname of a claim never
    /// decides which of them are compatible (the solver's compatibility cache leaves it out of its key).
    pub hostname_free: bool,
    /// The largest capacity per resource over `its`, for the limit bookkeeping of each new claim.
    pub peaks: CapacityPeaks,
}

/// Per resource, the largest capacity over a template's instance types, as [`Template::claim_usage`] folds it
/// (from zero; on ties the first type in template order), and the index of the type it comes from.
///
/// Every new claim updates the limits: its usage is the largest capacity among its options, and the types
/// within the limits are filtered again. Scanning every option per resource for that cost more than the rest of
/// the pass in the preference benchmark (4,000 claims of ~400 options; issue 36). With the peaks, a claim whose
/// options include the peak's type uses the peak, and when every peak is within the remaining limits so is
/// every type; other cases take the scan, so results are the scan's.
#[derive(Debug, Clone, Default)]
pub(crate) struct CapacityPeaks {
    /// The peak per resource (at least zero, as the fold starts there).
    values: ResourceList,
    /// Per resource, the index in `its` of the type the peak is taken from.
    at: Vec<(String, u32)>,
}

impl CapacityPeaks {
    fn new(its: &[&InstanceType]) -> CapacityPeaks {
        let mut peaks = CapacityPeaks::default();
        for (i, it) in its.iter().enumerate() {
            for (name, q) in it.capacity().iter() {
                let raised = match peaks.values.get(name) {
                    None => Some(*Quantity::ZERO.max_of(q)),
                    Some(peak) if q > peak => Some(*q),
                    Some(_) => None,
                };
                if let Some(v) = raised {
                    peaks.values.insert(name, v);
                    // Raised only by a strictly larger value, so `at` is the first type holding the peak (or,
                    // while no capacity is above zero, the first type with the resource: the fold gives zero).
                    match peaks.at.iter_mut().find(|(n, _)| n == name) {
                        Some(slot) => slot.1 = i as u32,
                        None => peaks.at.push((name.to_owned(), i as u32)),
                    }
                }
            }
        }
        peaks
    }

    /// The fold's result over `its` when it is known without a scan: `its` ascending and holding the peak's type.
    fn usage_of(&self, its: &[u32], name: &str) -> Option<Quantity> {
        let (_, at) = self.at.iter().find(|(n, _)| n == name)?;
        if !its.is_sorted() || its.binary_search(at).is_err() {
            return None;
        }
        self.values.get(name).copied()
    }

    /// Every type is within `remaining` (a sufficient test: `false` says nothing).
    fn all_within(&self, remaining: &ResourceList) -> bool {
        within(&self.values, remaining)
    }
}

impl<'a> Template<'a> {
    /// Whether `requests` fit some room of instance type `i` (its room, or one of its groups'), offerings aside.
    pub fn has_room(&self, i: usize, requests: &ResourceList) -> bool {
        match self.groups.get(i) {
            Some(groups) if !groups.is_empty() => groups.iter().any(|g| requests.fits(&g.room)),
            _ => self.room.get(i).is_some_and(|room| requests.fits(room)),
        }
    }

    /// For instance type `i` with offering overrides, whether a group whose room holds `requests` has an offering
    /// compatible with `requirements` (upstream's `fits`, one group holding both); `true` for a type without
    /// overrides, whose one room and offerings are checked on their own.
    pub fn group_offers(
        &self,
        i: usize,
        requests: &ResourceList,
        requirements: &Requirements,
        provider: &ProviderLabels,
    ) -> bool {
        match self.groups.get(i) {
            Some(groups) if !groups.is_empty() => groups
                .iter()
                .any(|g| requests.fits(&g.room) && g.offerings.iter().any(|o| o.is_compatible(requirements, provider))),
            _ => true,
        }
    }

    /// Whether some instance type of the template has offering overrides.
    pub fn has_offering_overrides(&self) -> bool {
        self.groups.iter().any(|g| !g.is_empty())
    }

    /// Whether an instance type of the template has an available reserved offering.
    pub fn offers_reserved(&self) -> bool {
        self.its.iter().any(|it| {
            it.offerings
                .available()
                .any(|o| o.capacity_type() == Some(karpenter_requirements::labels::CAPACITY_TYPE_RESERVED))
        })
    }

    pub fn new(
        pool: &NodePool,
        instance_types: &'a [InstanceType],
        snapshot: &ClusterSnapshot,
        daemons: &[Daemon],
        provider: &ProviderLabels,
    ) -> Template<'a> {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let mut t = Template {
            taints: pool.spec.template.spec.taints.iter().map(api_taint).collect(),
            requirements: Requirements::new(),
            its: Vec::new(),
            daemon: Vec::new(),
            room: Vec::new(),
            groups: Vec::new(),
            daemon_ports: Vec::new(),
            remaining: None,
            limits: ResourceList::new(),
            within_limits: Vec::new(),
            unusable: None,
            claims_created: 0,
            hostname_free: true,
            peaks: CapacityPeaks::default(),
            name,
        };
        match pool.simulation_requirements() {
            Ok(r) => t.requirements = r,
            Err(e) => {
                t.unusable = Some(NodePoolRejection::new(&t.name, Unusable, format!("invalid requirements: {e}")));
                return t;
            }
        }
        match remaining_limits(pool, snapshot) {
            Ok(r) => {
                t.limits = r.as_ref().map(|(l, _)| l.clone()).unwrap_or_default();
                t.remaining = r.map(|(_, rem)| rem);
            }
            Err(e) => {
                t.unusable = Some(NodePoolRejection::new(&t.name, Unusable, e));
                return t;
            }
        }
        // DaemonSets that tolerate the template (with an implicit PreferNoSchedule toleration) and are
        // compatible with its requirements; per instance type the alternatives must also intersect.
        let mut candidates: Vec<(&Daemon, Vec<&Requirements>)> = Vec::new();
        for d in daemons {
            let mut tol = d.tolerations.clone();
            tol.push(prefer_no_schedule_toleration());
            if tolerates_all(&tol, &t.taints).is_err() {
                continue;
            }
            let alts: Vec<&Requirements> =
                d.alternatives.iter().filter(|a| t.requirements.compatible(a, provider).is_ok()).collect();
            if !alts.is_empty() {
                candidates.push((d, alts));
            }
        }
        let mut dropped = [0usize; 3];
        for it in instance_types {
            if it.requirements.intersects(&t.requirements).is_err() {
                dropped[0] += 1;
                continue;
            }
            let mut overhead = ResourceList::new();
            let mut ports = HostPortUsage::new();
            for (d, alts) in &candidates {
                if alts.iter().any(|a| it.requirements.intersects(a).is_ok()) {
                    overhead = overhead.add(&d.requests);
                    ports.add(d.host_ports.iter().cloned());
                }
            }
            // Only types with offering overrides pay for grouping (the common path is one allocatable).
            let groups: Box<[GroupRoom<'a>]> = if it.has_offering_overrides() {
                it.offering_groups()
                    .into_iter()
                    .map(|g| GroupRoom { room: g.allocatable.sub(&overhead), offerings: g.offerings })
                    .collect()
            } else {
                Box::default()
            };
            let holds_daemons = if groups.is_empty() {
                overhead.fits(it.allocatable())
            } else {
                groups.iter().any(|g| !g.offerings.is_empty() && !g.room.any_negative())
            };
            if !holds_daemons {
                dropped[1] += 1;
                continue;
            }
            if !it.offerings.available().any(|o| o.is_compatible(&t.requirements, provider)) {
                dropped[2] += 1;
                continue;
            }
            t.its.push(it);
            t.groups.push(groups);
            t.room.push(it.allocatable().sub(&overhead));
            t.daemon.push(overhead);
            t.daemon_ports.push(ports);
        }
        if t.its.is_empty() {
            let detail = format!(
                "no instance type is usable ({} given: {} do not match its requirements, {} cannot hold its DaemonSets, {} have no available offering)",
                instance_types.len(),
                dropped[0],
                dropped[1],
                dropped[2]
            );
            t.unusable = Some(NodePoolRejection::new(&t.name, Unusable, detail));
        }
        t.hostname_free = t.its.iter().all(|it| {
            !it.requirements.has(labels::HOSTNAME) && it.offerings.iter().all(|o| !o.requirements.has(labels::HOSTNAME))
        });
        t.peaks = CapacityPeaks::new(&t.its);
        t.update_within_limits(None);
        t
    }

    /// Recomputes which instance types fit the remaining limits (the NodePool's and the cluster's).
    pub fn update_within_limits(&mut self, cluster: Option<&ClusterBudget>) {
        let remaining = self.remaining.as_ref();
        self.within_limits = (0..self.its.len() as u32)
            .filter(|&i| {
                self.its.get(i as usize).is_some_and(|it| {
                    remaining.is_none_or(|r| within(it.capacity(), r))
                        && cluster.is_none_or(|c| within(it.capacity(), &c.remaining))
                })
            })
            .collect();
    }

    /// Drops the instance types over the cluster's remaining limits (which only shrink during a pass).
    pub fn retain_within_cluster(&mut self, cluster: &ClusterBudget) {
        if self.peaks.all_within(&cluster.remaining) {
            return;
        }
        let its = &self.its;
        self.within_limits.retain(|&i| its.get(i as usize).is_some_and(|it| within(it.capacity(), &cluster.remaining)));
    }

    /// `None` when a new claim may be created, else why not: the NodePool's node limit, then the cluster's.
    pub fn limit_block(&self, cluster: Option<&ClusterBudget>) -> Option<NodePoolRejection> {
        if self.remaining.as_ref().is_some_and(no_node_left) {
            return Some(NodePoolRejection::new(&self.name, Limits, "limit nodes reached"));
        }
        let c = cluster?;
        if no_node_left(&c.remaining) {
            let limit = plain(&c.limits.get_or_zero(karpenter_api::nodepool::NODES_LIMIT));
            return Some(NodePoolRejection::new(&self.name, Limits, format!("cluster limit nodes {limit} reached")));
        }
        None
    }

    /// What a new claim whose options are `its` counts against limits naming `names`: one node, and per
    /// resource the largest capacity among the options (if any option has it). Absent resources count nothing.
    pub fn claim_usage<'n>(&self, its: &[u32], names: impl Iterator<Item = &'n str>) -> ResourceList {
        let mut usage = ResourceList::new();
        for name in names {
            if name == karpenter_api::nodepool::NODES_LIMIT {
                usage.insert(name, Quantity::from_int(1, karpenter_requirements::Format::DecimalSI));
                continue;
            }
            if let Some(peak) = self.peaks.usage_of(its, name) {
                usage.insert(name, peak);
                continue;
            }
            let mut max: Option<Quantity> = None;
            for &i in its {
                if let Some(c) = self.its.get(i as usize).and_then(|it| it.capacity().get(name)) {
                    max = Some(*max.unwrap_or(Quantity::ZERO).max_of(c));
                }
            }
            if let Some(m) = max {
                usage.insert(name, m);
            }
        }
        usage
    }

    /// After creating a claim whose options are `its`: remaining −= max capacity over them, nodes −= 1.
    /// Remaining limits only shrink here, so the types within them are filtered in place.
    pub fn consume(&mut self, its: &[u32]) {
        let Some(r) = self.remaining.as_ref() else { return };
        let sub = self.claim_usage(its, r.iter().map(|(name, _)| name));
        let Some(r) = self.remaining.as_mut() else { return };
        *r = r.sub(&sub);
        if self.peaks.all_within(r) {
            return;
        }
        let (its, r) = (&self.its, &*r);
        self.within_limits.retain(|&i| its.get(i as usize).is_some_and(|it| within(it.capacity(), r)));
    }

    /// The remaining limits a pod's instance types exceed, as a reason (only asked when some instance types are
    /// over the limits, so when the template has limits).
    /// The NodePool's limits are named first; then the cluster's, as `cluster limit cpu 2000 would be exceeded`.
    pub fn limit_reason(&self, candidates: &[u32], cluster: Option<&ClusterBudget>) -> NodePoolRejection {
        if let Some(r) = self.remaining.as_ref()
            && let Some(name) = self.exceeded(candidates, r)
        {
            let (limit, rem) = (self.limits.get_or_zero(name), r.get_or_zero(name));
            let detail = format!("limit {name} {limit} would be exceeded ({rem} remaining)");
            return NodePoolRejection::new(&self.name, Limits, detail);
        }
        if let Some(c) = cluster
            && let Some(name) = self.exceeded(candidates, &c.remaining)
        {
            let (limit, rem) = (plain(&c.limits.get_or_zero(name)), plain(&c.remaining.get_or_zero(name)));
            let detail = format!("cluster limit {name} {limit} would be exceeded ({rem} remaining)");
            return NodePoolRejection::new(&self.name, Limits, detail);
        }
        NodePoolRejection::new(&self.name, Limits, "every instance type that fits would exceed the remaining limits")
    }

    /// The first resource of `remaining` (not `nodes`) that every candidate's capacity exceeds.
    fn exceeded<'r>(&self, candidates: &[u32], remaining: &'r ResourceList) -> Option<&'r str> {
        if candidates.is_empty() {
            return None;
        }
        remaining.iter().find_map(|(name, rem)| {
            let all_exceed = name != karpenter_api::nodepool::NODES_LIMIT
                && candidates
                    .iter()
                    .filter_map(|&i| self.its.get(i as usize))
                    .all(|it| it.capacity().get(name).is_some_and(|c| c > rem));
            all_exceed.then_some(name)
        })
    }
}

fn no_node_left(remaining: &ResourceList) -> bool {
    remaining.get(karpenter_api::nodepool::NODES_LIMIT).is_some_and(|n| n.as_nanos() < 1_000_000_000)
}

/// A quantity as an operator writes a limit: whole decimal numbers without a suffix (`2000`, not `2k`), the
/// rest in canonical form (`8Ti`, `500m`).
fn plain(q: &Quantity) -> String {
    let whole = q.as_nanos() % 1_000_000_000 == 0 && q.format() == karpenter_requirements::Format::DecimalSI;
    match q.value() {
        Some(v) if whole => v.to_string(),
        _ => q.to_string(),
    }
}

/// Cluster-wide limits (`CLUSTER_LIMITS`): one budget every NodePool's new claims draw on, counted like a
/// NodePool's limits but over the nodes and NodeClaims of every NodePool.
#[derive(Debug, Clone)]
pub(crate) struct ClusterBudget {
    /// The limits.
    pub limits: ResourceList,
    /// `limits − usage`, less what the pass's new claims take.
    pub remaining: ResourceList,
}

impl ClusterBudget {
    /// The budget left by the snapshot, `None` without limits.
    pub fn new(limits: &ResourceList, snapshot: &ClusterSnapshot) -> Option<ClusterBudget> {
        if limits.is_empty() {
            return None;
        }
        let used = cluster_usage(snapshot);
        let mut sub = ResourceList::new();
        for (k, _) in limits.iter() {
            sub.insert(k, used.get_or_zero(k));
        }
        Some(ClusterBudget { limits: limits.clone(), remaining: limits.sub(&sub) })
    }

    /// Takes a new claim's usage ([`Template::claim_usage`] over the limits' names).
    pub fn consume(&mut self, usage: &ResourceList) {
        self.remaining = self.remaining.sub(usage);
    }
}

/// What counts against cluster-wide limits: the capacity of every node of a NodePool (including nodes being
/// deleted, whose capacity is still paid for) and of every in-flight NodeClaim, with `nodes` counting one each.
/// Nodes no NodePool owns are not Karpenter's and count nothing.
pub fn cluster_usage(snapshot: &ClusterSnapshot) -> ResourceList {
    let mut used = ResourceList::new();
    let mut count = 0i64;
    for n in snapshot.nodes.iter().filter(|n| n.node_pool.is_some()) {
        used = used.add(&n.capacity);
        count += 1;
    }
    for c in snapshot.in_flight_claims() {
        used = used.add(&c.capacity);
        count += 1;
    }
    used.insert(
        karpenter_api::nodepool::NODES_LIMIT,
        Quantity::from_int(count, karpenter_requirements::Format::DecimalSI),
    );
    used
}

fn within(capacity: &ResourceList, remaining: &ResourceList) -> bool {
    remaining
        .iter()
        .all(|(name, rem)| name == karpenter_api::nodepool::NODES_LIMIT || capacity.get(name).is_none_or(|c| c <= rem))
}

/// A NodePool's `(spec.limits, spec.limits − Σ capacity(nodes and in-flight claims of the pool))`, with `nodes`
/// counting 1 each; `None` without limits, `Err` naming a limit that does not parse.
pub fn remaining_limits(
    pool: &NodePool,
    snapshot: &ClusterSnapshot,
) -> Result<Option<(ResourceList, ResourceList)>, String> {
    if pool.spec.limits.is_empty() {
        return Ok(None);
    }
    let mut limits = ResourceList::new();
    for (k, v) in &pool.spec.limits {
        let q = v.parse().map_err(|e| format!("invalid limit {k}: {e}"))?;
        limits.insert(k, q);
    }
    let name = pool.metadata.name.as_deref();
    let mut used = ResourceList::new();
    let mut count = 0i64;
    for n in snapshot.nodes.iter().filter(|n| n.node_pool.as_deref() == name) {
        used = used.add(&n.capacity);
        count += 1;
    }
    for c in snapshot.in_flight_claims().filter(|c| c.node_pool.as_deref() == name) {
        used = used.add(&c.capacity);
        count += 1;
    }
    used.insert(
        karpenter_api::nodepool::NODES_LIMIT,
        Quantity::from_int(count, karpenter_requirements::Format::DecimalSI),
    );
    let mut sub = ResourceList::new();
    for (k, _) in limits.iter() {
        sub.insert(k, used.get_or_zero(k));
    }
    let remaining = limits.sub(&sub);
    Ok(Some((limits, remaining)))
}

/// An existing node or in-flight NodeClaim, as a place for pods.
#[derive(Debug, Clone)]
///
/// What a solve never changes (requirements, taints, volume limits) is shared: a disruption pass clones the
/// offered nodes into each of its what-ifs, and copying those per clone was most of a clone's cost.
pub(crate) struct ExistingNode {
    pub name: String,
    pub in_flight: bool,
    pub initialized: bool,
    pub requirements: Arc<Requirements>,
    pub taints: Arc<[Taint]>,
    /// allocatable − bound pods − remaining DaemonSet overhead.
    pub available: ResourceList,
    pub ports: HostPortUsage,
    /// CSI volumes in use and the node's limits (empty for in-flight claims: no limit known).
    pub volumes: VolumeUsage,
    pub pods: Vec<usize>,
}

fn ephemeral_taint(t: &Taint) -> bool {
    [
        labels::taints::NOT_READY,
        labels::taints::UNREACHABLE,
        labels::taints::CLOUD_PROVIDER_UNINITIALIZED,
        labels::taints::UNREGISTERED,
    ]
    .contains(&t.key.as_str())
        || t.key.starts_with(labels::taints::READINESS_PREFIX)
}

fn daemon_overhead_for(
    daemons: &[Daemon],
    reqs: &Requirements,
    taints: &[Taint],
    bound: &[&CompactPod],
) -> ResourceList {
    let mut out = ResourceList::new();
    for d in daemons {
        if tolerates_all(&d.tolerations, taints).is_err() {
            continue;
        }
        if !d.alternatives.iter().any(|a| reqs.compatible(a, &NoKeys).is_ok()) {
            continue;
        }
        // A pod without a namespace is in `default`, as the DaemonSet without one is (`daemon`): compared raw, a
        // running DaemonSet pod written without a namespace went unseen and its overhead was counted twice.
        let running = bound.iter().any(|p| {
            p.metadata.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE) == d.name.0
                && karpenter_api::pod::daemon_set_owner(&p.metadata).is_some_and(|o| o.name == d.name.1)
        });
        if !running {
            out = out.add(&d.requests);
        }
    }
    out
}

/// Existing nodes (not marked for deletion) and in-flight claims, initialized first, then by name.
pub(crate) fn existing_nodes(
    snapshot: &ClusterSnapshot,
    daemons: &[Daemon],
    volume_index: &VolumeIndex<'_>,
) -> Vec<ExistingNode> {
    let mut out = Vec::new();
    // Bound pods by node name, built once (looking them up per node is quadratic on large clusters).
    let mut by_node: std::collections::BTreeMap<&str, Vec<&CompactPod>> = std::collections::BTreeMap::new();
    for p in &snapshot.bound_pods {
        if let Some(n) = p.node_name() {
            by_node.entry(n).or_default().push(p);
        }
    }
    let pods_on = |name: &str| -> Vec<&CompactPod> { by_node.get(name).cloned().unwrap_or_default() };
    for n in snapshot.nodes.iter().filter(|n| !n.marked_for_deletion) {
        let mut reqs = Requirements::from_labels(&n.labels);
        let hostname = n.labels.get(labels::HOSTNAME).cloned().unwrap_or_else(|| n.name.clone());
        reqs.add(Requirement::in_values(labels::HOSTNAME, [hostname.as_str()]));
        let mut taints: Vec<Taint> = n
            .taints
            .iter()
            .filter(|t| {
                n.initialized
                    || !(ephemeral_taint(t) || n.startup_taints.iter().any(|s| s.key == t.key && s.effect == t.effect))
            })
            .cloned()
            .collect();
        if n.unschedulable && !taints.iter().any(|t| t.key == "node.kubernetes.io/unschedulable") {
            taints.push(Taint {
                key: "node.kubernetes.io/unschedulable".into(),
                effect: "NoSchedule".into(),
                value: None,
                time_added: None,
            });
        }
        let bound: Vec<&CompactPod> = pods_on(&n.name);
        let mut used = ResourceList::new();
        let mut ports = HostPortUsage::new();
        let mut volumes = VolumeUsage {
            limits: Arc::new(snapshot.csi_limits.get(&n.name).cloned().unwrap_or_default()),
            ..Default::default()
        };
        for p in &bound {
            if let Ok(r) = requests_with_pod_count(p) {
                used = used.add(&r);
            }
            ports.add(spec_host_ports(&p.spec));
            if !volumes.limits.is_empty()
                && let Ok(v) = volume_index.pod(p)
            {
                volumes.add(&v.claims);
            }
        }
        let daemon = daemon_overhead_for(daemons, &reqs, &taints, &bound);
        out.push(ExistingNode {
            name: n.name.clone(),
            in_flight: false,
            initialized: n.initialized,
            available: n.allocatable.sub(&used).sub(&daemon),
            requirements: Arc::new(reqs),
            taints: taints.into(),
            ports,
            volumes,
            pods: Vec::new(),
        });
    }
    for c in snapshot.in_flight_claims().filter(|c| !c.marked_for_deletion) {
        let mut reqs = c.claim.requirements().unwrap_or_default();
        reqs.add_all(&Requirements::from_labels(c.labels()));
        if let Some(np) = &c.node_pool {
            reqs.add(Requirement::in_values(labels::NODE_POOL, [np.as_str()]));
        }
        let hostname = c.node_name.clone().unwrap_or_else(|| c.name.clone());
        reqs.add(Requirement::in_values(labels::HOSTNAME, [hostname.as_str()]));
        let taints: Vec<Taint> = c.claim.spec.taints.iter().map(api_taint).collect();
        let bound: Vec<&CompactPod> = pods_on(&hostname);
        let mut used = ResourceList::new();
        for p in &bound {
            if let Ok(r) = requests_with_pod_count(p) {
                used = used.add(&r);
            }
        }
        let daemon = daemon_overhead_for(daemons, &reqs, &taints, &bound);
        out.push(ExistingNode {
            name: c.name.clone(),
            in_flight: true,
            initialized: false,
            available: c.allocatable.sub(&used).sub(&daemon),
            requirements: Arc::new(reqs),
            taints: taints.into(),
            ports: HostPortUsage::new(),
            volumes: VolumeUsage::default(),
            pods: Vec::new(),
        });
    }
    out.sort_by(|a, b| b.initialized.cmp(&a.initialized).then_with(|| a.name.cmp(&b.name)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use karpenter_api::IntoSharedPod;
    use karpenter_testing::{DaemonSetOptions, NodeOptions, PodOptions, daemon_set, node, pod};

    /// A 4-CPU node holding one 1-CPU pod of a 1-CPU DaemonSet, the DaemonSet and its pod in the namespaces given
    /// (`None`: written without one); the CPU the existing node has left.
    fn free_cpu(ds_namespace: Option<&str>, pod_namespace: Option<&str>) -> String {
        let mut ds = daemon_set(DaemonSetOptions {
            name: Some("agent".into()),
            pod: PodOptions { requests: [("cpu", "1")].into(), ..Default::default() },
            ..Default::default()
        });
        ds.metadata.namespace = ds_namespace.map(str::to_owned);
        let mut ds_pod = pod(PodOptions {
            name: Some("agent-x".into()),
            node_name: Some("n".into()),
            requests: [("cpu", "1")].into(),
            ..Default::default()
        });
        ds_pod.metadata.namespace = pod_namespace.map(str::to_owned);
        ds_pod.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: "DaemonSet".into(),
            name: "agent".into(),
            uid: ds.metadata.uid.clone().unwrap_or_default(),
            controller: Some(true),
            ..Default::default()
        }]);
        let n = node(NodeOptions {
            name: Some("n".into()),
            allocatable: [("cpu", "4"), ("pods", "10")].into(),
            ..Default::default()
        });
        let mut b = ClusterSnapshot::builder();
        b.node(&n);
        b.daemon_set(ds);
        b.pod(ds_pod.into_shared());
        let snapshot = b.build().expect("snapshot");
        let daemons = daemons(&snapshot, false);
        let existing = existing_nodes(&snapshot, &daemons, &VolumeIndex::new(&snapshot));
        existing[0].available.cpu().to_string()
    }

    #[test]
    fn a_running_daemon_set_pod_is_matched_to_its_daemon_set_whichever_side_omits_the_default_namespace() {
        // 4 CPUs less the running DaemonSet pod's 1; no DaemonSet overhead is still to come.
        assert_eq!(free_cpu(Some("default"), Some("default")), "3");
        assert_eq!(free_cpu(Some("default"), None), "3", "a pod written without a namespace is in default");
        assert_eq!(free_cpu(None, Some("default")), "3", "a DaemonSet written without a namespace is in default");
        // A pod of a DaemonSet of the same name in another namespace is not this one's: its overhead is to come.
        assert_eq!(free_cpu(Some("kube-system"), None), "2");
    }

    /// What the limit bookkeeping scanned per claim before the peaks: from zero, the first strictly larger
    /// capacity among `its` in their order.
    fn scanned_usage(types: &[&InstanceType], its: &[u32], name: &str) -> Option<Quantity> {
        let mut max: Option<Quantity> = None;
        for &i in its {
            if let Some(c) = types.get(i as usize).and_then(|it| it.capacity().get(name)) {
                max = Some(*max.unwrap_or(Quantity::ZERO).max_of(c));
            }
        }
        max
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]
        /// The peaks' shortcuts agree with the scan: a usage they give is the scan's value in the scan's format
        /// (zero, negative and tied capacities, resources some types lack, options in any order), and when they
        /// call every type within a budget, each type is.
        #[test]
        fn peaks_agree_with_the_scan(
            caps in proptest::collection::vec(
                (proptest::option::of((-2i64..6, proptest::bool::ANY)), proptest::option::of(-1i64..3)), 1..8),
            picks in proptest::collection::vec(0usize..8, 0..8),
            sorted in proptest::bool::ANY,
            budget in (-1i64..7, -1i64..4),
        ) {
            let types: Vec<InstanceType> = caps
                .iter()
                .enumerate()
                .map(|(i, (cpu, gpu))| {
                    let mut capacity = ResourceList::new();
                    if let Some((cores, binary)) = cpu {
                        // Equal values in two formats: which type the usage comes from shows in its format.
                        let format = if *binary { karpenter_requirements::Format::BinarySI } else { Default::default() };
                        capacity.insert("cpu", Quantity::from_int(*cores, format));
                    }
                    if let Some(g) = gpu {
                        capacity.insert("example.com/gpu", Quantity::from_int(*g, Default::default()));
                    }
                    InstanceType::builder(format!("t{i}")).capacity(capacity).build()
                })
                .collect();
            let refs: Vec<&InstanceType> = types.iter().collect();
            let peaks = CapacityPeaks::new(&refs);
            let mut its: Vec<u32> = picks.iter().filter(|&&p| p < refs.len()).map(|&p| p as u32).collect();
            its.dedup();
            if sorted {
                its.sort_unstable();
                its.dedup();
            }
            for name in ["cpu", "example.com/gpu", "memory"] {
                if let Some(peak) = peaks.usage_of(&its, name) {
                    let scan = scanned_usage(&refs, &its, name);
                    proptest::prop_assert_eq!(Some(peak), scan);
                    proptest::prop_assert!(scan.is_some_and(|q| q.format() == peak.format()), "format of {}", name);
                }
            }
            let mut remaining = ResourceList::new();
            remaining.insert("cpu", Quantity::from_int(budget.0, Default::default()));
            remaining.insert("example.com/gpu", Quantity::from_int(budget.1, Default::default()));
            if peaks.all_within(&remaining) {
                proptest::prop_assert!(refs.iter().all(|it| within(it.capacity(), &remaining)));
            }
        }
    }
}
