//! Candidates: which nodes a method may consider, their price and disruption cost, and what
//! blocks them.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use karpenter_api::CompactPod;
use karpenter_api::ProviderLabels;
use karpenter_api::condition::ConditionStatus;
use karpenter_api::labels::{self, annotations, autoscaler};
use karpenter_api::nodeclaim::conditions;
use karpenter_api::nodepool::ConsolidationPolicy;
use karpenter_requirements::InstanceType;
use karpenter_scheduler::snapshot::{NodeClaimInfo, NodeInfo, is_daemon_set_pod, pod_key};
use karpenter_scheduler::{ClusterSnapshot, PoolInput};

use crate::DisruptionOptions;
use crate::command::{CandidateRef, Reason};
// The bar `ConsolidationMove::pool_approved` applies, so it lives with that type; kept at this path too.
pub use crate::command::BALANCED_THRESHOLD;
use crate::pods::{PdbBlock, Pdbs, is_reschedulable, would_be_evicted};
use karpenter_api::DoNotDisrupt;
use karpenter_api::time::{from_k8s, parse_rfc3339, rfc3339};

/// The snapshot with the indexes disruption needs (built once per pass; the snapshot itself is not edited).
#[derive(Debug)]
pub struct Cluster<'a> {
    /// The snapshot.
    pub snapshot: &'a ClusterSnapshot,
    /// Pools by name.
    pub pools: BTreeMap<&'a str, PoolInput<'a>>,
    /// The provider's well-known labels.
    pub provider: &'a ProviderLabels,
    /// The time of the pass.
    pub now: DateTime<Utc>,
    /// Options.
    pub options: &'a DisruptionOptions,
    /// NodeClaims by name.
    pub claims: BTreeMap<&'a str, &'a NodeClaimInfo>,
    /// Bound pods by node name.
    pub pods_by_node: BTreeMap<&'a str, Vec<&'a CompactPod>>,
    /// PodDisruptionBudgets.
    pub pdbs: Pdbs<'a>,
}

impl<'a> Cluster<'a> {
    /// Indexes the snapshot.
    pub fn new(
        snapshot: &'a ClusterSnapshot,
        pools: &[PoolInput<'a>],
        provider: &'a ProviderLabels,
        now: DateTime<Utc>,
        options: &'a DisruptionOptions,
    ) -> Self {
        let mut pods_by_node: BTreeMap<&str, Vec<&CompactPod>> = BTreeMap::new();
        for p in &snapshot.bound_pods {
            if let Some(n) = p.node_name() {
                pods_by_node.entry(n).or_default().push(p);
            }
        }
        Cluster {
            snapshot,
            pools: pools.iter().filter_map(|p| Some((p.node_pool.metadata.name.as_deref()?, *p))).collect(),
            provider,
            now,
            options,
            claims: snapshot.node_claims.iter().map(|c| (c.name.as_str(), c)).collect(),
            pods_by_node,
            pdbs: Pdbs::new(&snapshot.pdbs),
        }
    }

    /// Pods bound to `node`.
    pub fn pods_on(&self, node: &str) -> &[&'a CompactPod] {
        self.pods_by_node.get(node).map_or(&[], Vec::as_slice)
    }
}

/// When the NodeClaim disruption-condition controller sets `Consolidatable=True` on `claim` (the operator's
/// `disruption::conditions`, and `simulate`'s report, read this one rule): `consolidateAfter` after the claim's
/// `status.lastPodEventTime`, else after its `Initialized` transition. `None` when the condition is never set: a
/// static NodePool, `consolidateAfter: Never`, a claim not `Initialized`, or no reference time.
pub fn consolidatable_at(claim: &karpenter_api::NodeClaim, pool: &karpenter_api::NodePool) -> Option<DateTime<Utc>> {
    let after = pool.spec.disruption.consolidate_after.duration()?;
    if pool.is_static() || !claim.is_initialized() {
        return None;
    }
    let reference =
        claim.status.as_ref().and_then(|s| s.last_pod_event_time.as_deref()).and_then(parse_rfc3339).or_else(|| {
            claim
                .conditions()
                .iter()
                .find(|c| c.type_ == conditions::INITIALIZED && c.status == ConditionStatus::True)
                .and_then(|c| parse_rfc3339(&c.last_transition_time))
        })?;
    let after = chrono::Duration::from_std(after).unwrap_or(chrono::Duration::MAX);
    Some(reference.checked_add_signed(after).unwrap_or(DateTime::<Utc>::MAX_UTC))
}

/// Whether a node can be consolidated at `now` with respect to `consolidateAfter`: the
/// reference time is `status.lastPodEventTime`, else the `Initialized` transition; the node is consolidatable
/// once `now ≥ reference + consolidateAfter`. Without any reference time the `Consolidatable` condition
/// decides, and without that the node counts as consolidatable.
pub fn consolidatable(claim: &NodeClaimInfo, pool: &karpenter_api::NodePool, now: DateTime<Utc>) -> Result<(), Reason> {
    let Some(after) = pool.spec.disruption.consolidate_after.duration() else {
        return Err(Reason::ConsolidationDisabled);
    };
    let status = claim.claim.status.as_ref();
    let reference = status.and_then(|s| s.last_pod_event_time.as_deref()).and_then(parse_rfc3339).or_else(|| {
        claim
            .claim
            .conditions()
            .iter()
            .find(|c| c.type_ == conditions::INITIALIZED && c.status == karpenter_api::ConditionStatus::True)
            .and_then(|c| parse_rfc3339(&c.last_transition_time))
    });
    match reference {
        Some(r) => {
            let after = chrono::Duration::from_std(after).unwrap_or(chrono::Duration::MAX);
            let due = r.checked_add_signed(after).unwrap_or(DateTime::<Utc>::MAX_UTC);
            if now >= due {
                Ok(())
            } else {
                Err(Reason::ConsolidateAfterNotElapsed { remaining_seconds: (due - now).num_seconds().max(1) })
            }
        }
        None => match claim.condition(conditions::CONSOLIDATABLE) {
            Some(ConditionStatus::True) | None => Ok(()),
            Some(_) => Err(Reason::ConsolidateAfterNotElapsed { remaining_seconds: 0 }),
        },
    }
}

/// A node that passed the node-level checks of [`candidate()`].
#[derive(Debug, Clone)]
pub struct Candidate<'a> {
    /// The node.
    pub node: &'a NodeInfo,
    /// Its NodeClaim.
    pub claim: &'a NodeClaimInfo,
    /// Its pool.
    pub pool: PoolInput<'a>,
    /// Pool name.
    pub pool_name: &'a str,
    /// Its instance type, when the label names one of the pool's.
    pub instance_type: Option<&'a InstanceType>,
    /// Zone label.
    pub zone: Option<&'a str>,
    /// Capacity-type label.
    pub capacity_type: Option<&'a str>,
    /// Price of the offering matching zone and capacity type (0 when unknown).
    pub price: f64,
    /// Every pod bound to the node.
    pub pods: Vec<&'a CompactPod>,
    /// Pods that must move (reschedulable and currently evictable).
    pub reschedulable: Vec<&'a CompactPod>,
    /// `Σ EvictionCost × LifetimeRemaining`.
    pub disruption_cost: f64,
    /// `1 + Σ max(0, EvictionCost(reschedulable pod))` (v1.14).
    pub reschedule_cost: f64,
    /// The first pod-level block (do-not-disrupt, PDB), ignoring terminationGracePeriod.
    pub pod_block: Option<Reason>,
    /// The NodeClaim has `terminationGracePeriod`.
    pub has_termination_grace_period: bool,
    /// `Drifted=True` and since when.
    pub drifted_since: Option<Option<DateTime<Utc>>>,
}

impl Candidate<'_> {
    /// v1.14's empty: no reschedulable pod with a positive eviction cost.
    pub fn is_empty(&self) -> bool {
        self.reschedule_cost <= 1.0
    }

    /// `Price / RescheduleDisruptionCost`.
    pub fn savings_ratio(&self) -> f64 {
        self.price / self.reschedule_cost
    }

    /// Pod blocks that apply to a method of the given class (eventual methods ignore them when the NodeClaim
    /// has a terminationGracePeriod).
    pub fn pod_block_for(&self, graceful: bool) -> Option<&Reason> {
        if !graceful && self.has_termination_grace_period {
            return None;
        }
        self.pod_block.as_ref()
    }

    /// The command form.
    pub fn reference(&self) -> CandidateRef {
        CandidateRef {
            node: self.node.name.clone(),
            node_claim: self.claim.name.clone(),
            node_pool: self.pool_name.to_owned(),
            instance_type: self.node.labels.get(labels::INSTANCE_TYPE).cloned(),
            zone: self.zone.map(str::to_owned),
            capacity_type: self.capacity_type.map(str::to_owned),
            price: self.price,
        }
    }

    /// The checks only consolidation makes (besides emptiness and budgets).
    pub fn consolidation_block(&self, now: DateTime<Utc>) -> Option<Reason> {
        let pool = self.pool.node_pool;
        if pool.is_static() {
            return Some(Reason::StaticNodePool);
        }
        if self.instance_type.is_none() {
            return Some(Reason::UnknownInstanceType {
                instance_type: self.node.labels.get(labels::INSTANCE_TYPE).cloned(),
            });
        }
        let mut missing = Vec::new();
        if self.zone.is_none() {
            missing.push(labels::ZONE.to_owned());
        }
        if self.capacity_type.is_none() {
            missing.push(labels::CAPACITY_TYPE.to_owned());
        }
        if !missing.is_empty() {
            return Some(Reason::MissingLabels { labels: missing });
        }
        consolidatable(self.claim, pool, now).err()
    }

    /// Whether the pool's policy allows consolidating non-empty nodes.
    pub fn policy_allows_underutilized(&self) -> bool {
        self.pool.node_pool.spec.disruption.consolidation_policy != ConsolidationPolicy::WhenEmpty
    }
}

fn annotated_do_not_disrupt(a: &BTreeMap<String, String>) -> bool {
    a.get(annotations::DO_NOT_DISRUPT).is_some_and(|v| v == "true")
}

/// Why the node itself may not be disrupted voluntarily: `karpenter.sh/do-not-disrupt: "true"` on the node or
/// its NodeClaim, or, when honoured, another autoscaler's node annotation.
fn node_do_not_disrupt(cluster: &Cluster<'_>, node: &NodeInfo, claim: &NodeClaimInfo) -> Option<Reason> {
    if annotated_do_not_disrupt(&node.annotations) || annotated_do_not_disrupt(claim.annotations()) {
        return Some(Reason::NodeDoNotDisrupt { annotation: None });
    }
    if !cluster.options.honor_autoscaler_annotations {
        return None;
    }
    [&node.annotations, claim.annotations()]
        .into_iter()
        .find_map(|a| autoscaler::blocking(autoscaler::Target::Node, a))
        .map(|a| Reason::NodeDoNotDisrupt { annotation: Some(a.to_string()) })
}

/// The do-not-disrupt protection of a pod now: its `karpenter.sh/do-not-disrupt` annotation, or, when honoured,
/// another autoscaler's pod annotation (which protects like `"true"`).
fn pod_do_not_disrupt(cluster: &Cluster<'_>, pod: &CompactPod) -> Option<Reason> {
    match pod.do_not_disrupt(cluster.now) {
        DoNotDisrupt::Permanent => {
            return Some(Reason::PodDoNotDisrupt { pod: pod_key(pod), until: None, annotation: None });
        }
        DoNotDisrupt::Until(t) => {
            return Some(Reason::PodDoNotDisrupt { pod: pod_key(pod), until: Some(rfc3339(t)), annotation: None });
        }
        DoNotDisrupt::No => {}
    }
    if !cluster.options.honor_autoscaler_annotations {
        return None;
    }
    let a = pod.autoscaler_do_not_disrupt()?;
    Some(Reason::PodDoNotDisrupt { pod: pod_key(pod), until: None, annotation: Some(a.to_string()) })
}

/// The node-level checks that make a node a disruption candidate; `Ok` with the candidate's data, or why the node
/// is not a candidate.
pub fn candidate<'a>(cluster: &Cluster<'a>, node: &'a NodeInfo) -> Result<Candidate<'a>, Reason> {
    build(cluster, node, Veto::DoNotDisrupt)
}

/// [`candidate()`] for node repair: `karpenter.sh/do-not-disrupt` (and other autoscalers' node annotations) do
/// not keep a broken node, `karpenter.sh/do-not-repair: "true"` on the node or its NodeClaim does.
pub fn repair_candidate<'a>(cluster: &Cluster<'a>, node: &'a NodeInfo) -> Result<Candidate<'a>, Reason> {
    build(cluster, node, Veto::DoNotRepair)
}

/// Which node-level annotation vetoes the method asking.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Veto {
    DoNotDisrupt,
    DoNotRepair,
}

fn build<'a>(cluster: &Cluster<'a>, node: &'a NodeInfo, veto: Veto) -> Result<Candidate<'a>, Reason> {
    let Some(claim_name) = node.node_claim.as_deref() else { return Err(Reason::NotManaged) };
    let Some(&claim) = cluster.claims.get(claim_name) else {
        return Err(Reason::NodeClaimNotFound { node_claim: claim_name.to_owned() });
    };
    // A NodeClaim whose instance is already being terminated (`InstanceTerminating=True`, the termination
    // controller's mark once the drain is done) is being deleted even before its deletion timestamp shows, as
    // upstream's state node counts it.
    if node.marked_for_deletion || claim.marked_for_deletion || claim.is_true(conditions::INSTANCE_TERMINATING) {
        return Err(Reason::BeingDeleted);
    }
    if !node.initialized {
        return Err(Reason::NotInitialized);
    }
    if node.nominated || claim.nominated {
        return Err(Reason::Nominated);
    }
    match veto {
        Veto::DoNotDisrupt => {
            if let Some(reason) = node_do_not_disrupt(cluster, node, claim) {
                return Err(reason);
            }
        }
        Veto::DoNotRepair => {
            let vetoes = |a: &BTreeMap<String, String>| a.get(annotations::DO_NOT_REPAIR).is_some_and(|v| v == "true");
            if vetoes(&node.annotations) || vetoes(claim.annotations()) {
                return Err(Reason::NodeDoNotRepair);
            }
        }
    }
    let Some(pool_name) = node.node_pool.as_deref() else { return Err(Reason::NoNodePoolLabel) };
    let Some((&pool_name, &pool)) = cluster.pools.get_key_value(pool_name) else {
        return Err(Reason::NodePoolNotFound { node_pool: pool_name.to_owned() });
    };
    if pool.instance_types.is_empty() {
        return Err(Reason::NoInstanceTypes { node_pool: pool_name.to_owned() });
    }
    let now = cluster.now;
    let instance_type =
        node.labels.get(labels::INSTANCE_TYPE).and_then(|name| pool.instance_types.iter().find(|it| &it.name == name));
    let zone = node.labels.get(labels::ZONE).map(String::as_str);
    let capacity_type = node.labels.get(labels::CAPACITY_TYPE).map(String::as_str);
    let price = instance_type
        .and_then(|it| it.offerings.iter().find(|o| o.zone() == zone && o.capacity_type() == capacity_type))
        .map_or(0.0, |o| o.price);
    let pods: Vec<&'a CompactPod> = cluster.pods_on(&node.name).to_vec();

    // Pod checks: the first blocking pod, in pod order.
    let mut pod_block = None;
    for p in &pods {
        if let Some(reason) = pod_do_not_disrupt(cluster, p) {
            pod_block = Some(reason);
            break;
        }
        if !would_be_evicted(p, now) {
            continue;
        }
        match cluster.pdbs.blocks(p) {
            None => {}
            Some(PdbBlock::Multiple(pdbs)) => {
                pod_block = Some(Reason::MultiplePdbs { pod: pod_key(p), pdbs });
                break;
            }
            Some(PdbBlock::ZeroAllowed(pdb)) => {
                pod_block = Some(Reason::PdbBlocked { pod: pod_key(p), pdb });
                break;
            }
        }
    }
    // Pods to simulate: reschedulable and currently evictable (no active do-not-disrupt, no blocking PDB).
    let reschedulable: Vec<&CompactPod> = pods
        .iter()
        .copied()
        .filter(|p| is_reschedulable(p))
        .filter(|p| pod_do_not_disrupt(cluster, p).is_none() && cluster.pdbs.blocks(p).is_none())
        .collect();
    let all_reschedulable = pods.iter().copied().filter(|p| is_reschedulable(p));
    let mut reschedule_cost = 1.0;
    let mut cost_sum = 0.0;
    for p in all_reschedulable {
        let c = cluster.options.cost_annotations().eviction_cost(p);
        reschedule_cost += c.max(0.0);
        cost_sum += c;
    }
    let lifetime_remaining = match (
        claim.claim.spec.expire_after.duration(),
        claim.claim.metadata.creation_timestamp.as_ref().and_then(from_k8s),
    ) {
        (Some(expire), Some(created)) if !expire.is_zero() => {
            let age = (now - created).num_milliseconds() as f64 / 1000.0;
            ((expire.as_secs_f64() - age) / expire.as_secs_f64()).clamp(0.0, 1.0)
        }
        _ => 1.0,
    };
    let drifted_since = claim.claim.conditions().iter().find(|c| c.type_ == conditions::DRIFTED).and_then(|c| {
        (c.status == karpenter_api::ConditionStatus::True).then(|| parse_rfc3339(&c.last_transition_time))
    });
    Ok(Candidate {
        node,
        claim,
        pool,
        pool_name,
        instance_type,
        zone,
        capacity_type,
        price,
        pods,
        reschedulable,
        disruption_cost: cost_sum * lifetime_remaining,
        reschedule_cost,
        pod_block,
        has_termination_grace_period: claim.claim.spec.termination_grace_period.is_some(),
        drifted_since,
    })
}

/// Sorts candidates for consolidation (v1.14): savings ratio descending, ties by node name.
pub fn sort_for_consolidation(c: &mut [Candidate<'_>]) {
    c.sort_by(|a, b| b.savings_ratio().total_cmp(&a.savings_ratio()).then_with(|| a.node.name.cmp(&b.node.name)));
}

/// Interleaves sorted candidates by NodePool, round-robin in order of each pool's first candidate.
pub fn interleave_by_pool<'c, 'a>(sorted: &'c [Candidate<'a>]) -> Vec<&'c Candidate<'a>> {
    let mut queues: Vec<(&str, std::collections::VecDeque<&Candidate<'a>>)> = Vec::new();
    for c in sorted {
        match queues.iter_mut().find(|(p, _)| *p == c.pool_name) {
            Some((_, q)) => q.push_back(c),
            None => queues.push((c.pool_name, std::collections::VecDeque::from([c]))),
        }
    }
    let mut out = Vec::with_capacity(sorted.len());
    loop {
        let mut any = false;
        for (_, q) in &mut queues {
            if let Some(c) = q.pop_front() {
                out.push(c);
                any = true;
            }
        }
        if !any {
            return out;
        }
    }
}

/// Balanced-policy totals of one pool (consolidation policy `Balanced`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PoolTotals {
    /// Σ price of the pool's nodes.
    pub cost: f64,
    /// Σ over the pool's nodes of `1 + Σ max(0, EvictionCost(non-DaemonSet pod))`.
    pub disruption: f64,
}

/// Balanced totals for every pool with nodes.
pub fn pool_totals(cluster: &Cluster<'_>) -> BTreeMap<String, PoolTotals> {
    let mut out: BTreeMap<String, PoolTotals> = BTreeMap::new();
    for n in &cluster.snapshot.nodes {
        let Some(pool_name) = n.node_pool.as_deref() else { continue };
        let Some(pool) = cluster.pools.get(pool_name) else { continue };
        let price = n
            .labels
            .get(labels::INSTANCE_TYPE)
            .and_then(|name| pool.instance_types.iter().find(|it| &it.name == name))
            .and_then(|it| {
                let zone = n.labels.get(labels::ZONE).map(String::as_str);
                let ct = n.labels.get(labels::CAPACITY_TYPE).map(String::as_str);
                it.offerings.iter().find(|o| o.zone() == zone && o.capacity_type() == ct)
            })
            .map_or(0.0, |o| o.price);
        let disruption = 1.0
            + cluster
                .pods_on(&n.name)
                .iter()
                .filter(|p| !is_daemon_set_pod(p))
                .map(|p| cluster.options.cost_annotations().eviction_cost(p).max(0.0))
                .sum::<f64>();
        let t = out.entry(pool_name.to_owned()).or_default();
        t.cost += price;
        t.disruption += disruption;
    }
    out
}

/// Balanced score of a move for one pool: `(savings / cost) / (disruption / total disruption)`.
pub fn balanced_score(savings: f64, move_disruption: f64, totals: PoolTotals) -> f64 {
    if savings <= 0.0 || totals.cost <= 0.0 {
        return 0.0;
    }
    if move_disruption <= 0.0 || totals.disruption <= 0.0 {
        return f64::INFINITY;
    }
    (savings / totals.cost) / (move_disruption / totals.disruption)
}

/// Names of a candidate set, for views.
pub fn node_set(c: &[&Candidate<'_>]) -> BTreeSet<String> {
    c.iter().map(|c| c.node.name.clone()).collect()
}
