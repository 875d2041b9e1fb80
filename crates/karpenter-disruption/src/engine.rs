//! A pass's prepared state (candidates' indexes, budgets, and one [`Simulator`] reused by every simulation) and the
//! computations the methods (`crate::methods`) and validation share: simulating a removal, consolidating a set of
//! candidates, pricing a replacement, Balanced approval, minimum savings and floors.

use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet};

use karpenter_api::labels;
use karpenter_api::nodepool::ConsolidationPolicy;
use karpenter_requirements::{
    InstanceType, OfferingsExt, Requirement, Requirements, order_by_price, satisfies_min_values,
};
use karpenter_scheduler::Decisions;
use karpenter_scheduler::decision::{NodeClaimPlan, UnschedulablePod};
use karpenter_scheduler::simulation::{SimulationView, Simulator};
use karpenter_scheduler::snapshot::pod_key;

use crate::budget::{Budgets, Remaining};
use crate::candidate::{
    BALANCED_THRESHOLD, Candidate, Cluster, PoolTotals, balanced_score, consolidatable, interleave_by_pool, node_set,
    pool_totals, sort_for_consolidation,
};
use crate::command::{Command, ConsolidationMove, Decision, Method, Reason};
use crate::floor::Floors;
use crate::savings::Thresholds;
use crate::topology::Topology;

/// Upstream's cap on multi-node consolidation candidates.
pub const MULTI_NODE_MAX_CANDIDATES: usize = 100;

const SPOT: &str = "spot";
const ON_DEMAND: &str = "on-demand";
/// New NodeClaims for the pending pods alone at which no consolidation of the pass can make do with one.
const PENDING_CLAIMS_ENOUGH: usize = 2;

/// Prepared per-pass state.
pub(crate) struct Engine<'a> {
    pub cluster: Cluster<'a>,
    pub sim: Simulator<'a>,
    pub budgets: Budgets,
    /// The pools' disruption-topology state at the start of the pass.
    pub topology: Topology<'a>,
    totals: BTreeMap<String, PoolTotals>,
    pending: BTreeSet<karpenter_scheduler::PodKey>,
    /// Managed nodes still inside their consolidateAfter window: consolidation simulations do not pack pods
    /// from elsewhere onto them.
    window: BTreeSet<String>,
    /// Instance types by name, per pool.
    catalogue: BTreeMap<&'a str, BTreeMap<&'a str, &'a InstanceType>>,
    /// New NodeClaims the pending pods alone need under consolidation's view ([`Engine::pending_claims`]).
    pending_claims: OnceCell<usize>,
    /// The pools' `karpenter-rs.io/min-nodes` floors.
    pub floors: Floors,
    /// Nodes that CapacityBuffer virtual pods (pending pods of the snapshot) land on with nothing removed, with
    /// the buffers (`namespace/name`): they keep room for the buffers and are not empty.
    pub buffer_hosts: BTreeMap<String, BTreeSet<String>>,
    /// The minimum savings of replacements and multi-node moves ([`crate::savings`]).
    pub min_savings: Thresholds,
}

/// Where the snapshot's CapacityBuffer virtual pods land when nothing is removed: node name → buffers. No
/// simulation runs when there are none.
fn buffer_hosts(cluster: &Cluster<'_>, sim: &Simulator<'_>) -> BTreeMap<String, BTreeSet<String>> {
    let buffers: BTreeMap<String, String> = cluster
        .snapshot
        .pending_pods
        .iter()
        .filter_map(|p| karpenter_api::capacitybuffer::buffer_of(p).map(|b| (pod_key(p), b)))
        .collect();
    if buffers.is_empty() {
        return BTreeMap::new();
    }
    // Uninitialized nodes count: a node launched for a buffer hosts it before it is ready.
    let view = SimulationView { allow_uninitialized: true, ..Default::default() };
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for placement in sim.simulate(&view).existing_nodes.iter().filter(|p| !p.in_flight) {
        for b in placement.pods.iter().filter_map(|p| buffers.get(p.as_str())) {
            out.entry(placement.name.clone()).or_default().insert(b.clone());
        }
    }
    out
}

impl std::fmt::Debug for Engine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("sim", &self.sim).finish()
    }
}

/// A successful consolidation computation before budgets and Balanced approval.
#[derive(Debug, Clone)]
pub(crate) struct Move {
    pub command: Command,
    /// A replace's instance types as the price filter left them, before a replacement held to spot dropped those
    /// without a spot offering: upstream keeps them in the options (it only adds the capacity-type requirement),
    /// so its same-instance-type check still finds the candidates' own type among them. Empty for a delete.
    pub priced_types: Vec<String>,
}

impl<'a> Engine<'a> {
    pub fn new(cluster: Cluster<'a>) -> Self {
        let sim = Simulator::new(
            cluster.snapshot,
            &cluster.pools.values().copied().collect::<Vec<_>>(),
            cluster.provider,
            &cluster.options.scheduler,
        );
        let budgets = Budgets::new(
            cluster.snapshot,
            cluster.pools.values().map(|p| p.node_pool),
            cluster.now,
            &cluster.options.not_ready_nodes,
            cluster.options.repair.enabled,
        );
        let topology = Topology::new(&cluster);
        let totals = pool_totals(&cluster);
        let pending = sim.pending_keys();
        let mut window = BTreeSet::new();
        for n in &cluster.snapshot.nodes {
            let (Some(claim), Some(pool)) = (
                n.node_claim.as_deref().and_then(|c| cluster.claims.get(c)),
                n.node_pool.as_deref().and_then(|p| cluster.pools.get(p)),
            ) else {
                continue;
            };
            if matches!(
                consolidatable(claim, pool.node_pool, cluster.now),
                Err(Reason::ConsolidateAfterNotElapsed { .. })
            ) {
                window.insert(n.name.clone());
            }
        }
        let catalogue = cluster
            .pools
            .iter()
            .map(|(name, p)| (*name, p.instance_types.iter().map(|it| (it.name.as_str(), it)).collect()))
            .collect();
        let floors = Floors::new(cluster.snapshot, cluster.pools.values().map(|p| p.node_pool), cluster.now);
        let buffer_hosts = buffer_hosts(&cluster, &sim);
        let min_savings =
            Thresholds::new(cluster.options.consolidation_min_savings, cluster.pools.values().map(|p| p.node_pool));
        Engine {
            cluster,
            sim,
            budgets,
            topology,
            totals,
            pending,
            window,
            catalogue,
            pending_claims: OnceCell::new(),
            floors,
            buffer_hosts,
            min_savings,
        }
    }

    /// How many new NodeClaims the pending pods need on their own (counted up to 2), with the nodes consolidation
    /// never packs onto left out: simulated once per pass, on first use. Every consolidation simulation places
    /// these pods too, on less capacity (its candidates removed) and with more pods (the candidates'), so it needs
    /// as many new nodes or more (short of a packing-order anomaly); at 2 or more no delete or single replacement
    /// can come of it. Without this, a pass during a large scale-out re-packed every pending pod once per
    /// candidate (tens of seconds at 40,000 pending pods) to reach the same verdict; and the count stops at 2
    /// because planning every node the pending pods need (thousands, during a large scale-out of small nodes)
    /// only to compare the number with 2 was the largest allocation of such a pass.
    fn pending_claims(&self) -> usize {
        *self.pending_claims.get_or_init(|| {
            if self.pending.is_empty() {
                return 0;
            }
            let view = SimulationView { removed: &self.window, fewest_new_nodes: true, ..Default::default() };
            self.sim.count_new_claims(&view, PENDING_CLAIMS_ENOUGH)
        })
    }

    /// Simulates removing `cands`; `Err` when a pod that is not already pending finds no place. Consolidation
    /// replaces with at most one node, so its simulations ask for the fewest new nodes (upstream's packing): the
    /// scheduler's cost post-pass may spread pods over several cheaper nodes where one holds them all. Drift
    /// keeps the cheapest packing for its replacements.
    pub fn simulate(&self, cands: &[&Candidate<'a>], consolidation: bool) -> Result<Decisions, Reason> {
        let mut removed = node_set(cands);
        if consolidation {
            removed.extend(self.window.iter().cloned());
        }
        let pods = cands.iter().flat_map(|c| c.reschedulable.iter().copied()).collect();
        let fewest_new_nodes = consolidation;
        let view = SimulationView { removed: &removed, pods, fewest_new_nodes, ..Default::default() };
        let d = self.sim.simulate(&view);
        let failed: Vec<UnschedulablePod> =
            d.unschedulable.iter().filter(|u| !self.pending.contains(&u.pod)).cloned().collect();
        if failed.is_empty() { Ok(d) } else { Err(Reason::PodsUnschedulable { pods: failed }) }
    }

    fn displaced(cands: &[&Candidate<'_>]) -> Vec<String> {
        let mut v: Vec<String> = cands.iter().flat_map(|c| c.reschedulable.iter().map(|p| pod_key(p))).collect();
        v.sort();
        v
    }

    fn describe(cands: &[&Candidate<'_>]) -> String {
        let parts: Vec<String> = cands
            .iter()
            .take(5)
            .map(|c| {
                format!(
                    "{} ({}, ${:.4}/h)",
                    c.node.name,
                    c.node.labels.get(labels::INSTANCE_TYPE).map_or("?", String::as_str),
                    c.price
                )
            })
            .collect();
        let more = if cands.len() > 5 { format!(" and {} more", cands.len() - 5) } else { String::new() };
        format!("{}{more}", parts.join(", "))
    }

    /// Builds a command.
    pub fn command(method: Method, cands: &[&Candidate<'a>], replacements: Vec<NodeClaimPlan>, what: &str) -> Command {
        let price: f64 = cands.iter().map(|c| c.price).sum();
        let new_price: f64 = replacements.iter().filter_map(|r| r.price).sum();
        // A replacement without a known price (a static pool's template claim) makes the savings unknown: 0.
        let savings = if replacements.iter().any(|r| r.price.is_none()) { 0.0 } else { price - new_price };
        let decision = if replacements.is_empty() { Decision::Delete } else { Decision::Replace };
        let pods = Self::displaced(cands);
        let action = match decision {
            Decision::Delete | Decision::Reboot => format!("delete {}", Self::describe(cands)),
            Decision::Replace => {
                let r: Vec<String> = replacements
                    .iter()
                    .map(|r| {
                        format!(
                            "one of [{}{}] (${:.4}/h)",
                            r.instance_type_names().take(3).collect::<Vec<_>>().join(", "),
                            if r.instance_types.len() > 3 { ", ..." } else { "" },
                            r.price.unwrap_or(0.0)
                        )
                    })
                    .collect();
                format!("replace {} with {}", Self::describe(cands), r.join(" + "))
            }
        };
        let explanation = format!("{action}: {what}; {} pod(s) move; saves ${savings:.4}/h", pods.len());
        Command {
            method,
            reason: method.reason(),
            decision,
            candidates: cands.iter().map(|c| c.reference()).collect(),
            replacements,
            displaced_pods: pods,
            savings_per_hour: savings,
            explanation,
            repair: None,
        }
    }

    /// Upstream's `computeConsolidation` for `cands`: a delete or a replace, or why not.
    pub fn consolidate(&self, cands: &[&Candidate<'a>], method: Method) -> Result<Move, Reason> {
        let count = self.pending_claims();
        if count >= PENDING_CLAIMS_ENOUGH {
            return Err(Reason::PendingPodsNeedNodes { count });
        }
        let d = self.simulate(cands, true)?;
        let (cmd, priced_types) = match d.new_node_claims.len() {
            0 => (Self::command(method, cands, Vec::new(), "the pods fit on existing nodes"), Vec::new()),
            1 => {
                let plan = d.new_node_claims.into_iter().next().ok_or(Reason::NothingToDo)?;
                let (plan, priced_types) = self.cheaper_replacement(cands, plan, method)?;
                (Self::command(method, cands, vec![plan], "a cheaper node holds their pods"), priced_types)
            }
            n => return Err(Reason::NeedsMultipleNodes { count: n }),
        };
        self.floor_allows(cands, &cmd.replacements)?;
        Ok(Move { command: cmd, priced_types })
    }

    /// Whether removing `cands` and creating `replacements` keeps every pool's `karpenter-rs.io/min-nodes` floor.
    pub fn floor_allows(&self, cands: &[&Candidate<'a>], replacements: &[NodeClaimPlan]) -> Result<(), Reason> {
        self.floors
            .allows(cands.iter().map(|c| (c.pool_name, c.claim)), replacements.iter().map(|r| r.node_pool.as_str()))
    }

    /// The consolidation price filter (spot-to-spot rules included) applied to the simulation's one new NodeClaim,
    /// with the instance types the price filter kept ([`Move::priced_types`]).
    fn cheaper_replacement(
        &self,
        cands: &[&Candidate<'a>],
        plan: NodeClaimPlan,
        method: Method,
    ) -> Result<(NodeClaimPlan, Vec<String>), Reason> {
        let provider = self.cluster.provider;
        let candidate_price: f64 = cands.iter().map(|c| c.price).sum();
        let Some(catalogue) = self.catalogue.get(plan.node_pool.as_str()) else {
            return Err(Reason::NoCheaperOption { price: candidate_price });
        };
        let mut reqs = plan.requirements.clone();
        let mut its: Vec<&InstanceType> =
            plan.instance_type_names().filter_map(|n| catalogue.get(n).copied()).collect();
        let all_spot = cands.iter().all(|c| c.capacity_type == Some(SPOT));
        let may_spot = reqs.get(labels::CAPACITY_TYPE).has(SPOT);
        let spot_to_spot = all_spot && may_spot;
        if spot_to_spot {
            if !self.cluster.options.spot_to_spot_consolidation {
                return Err(Reason::SpotToSpotDisabled);
            }
            reqs.add(Requirement::in_values(labels::CAPACITY_TYPE, [SPOT]));
        }
        its.retain(|it| it.offerings.available().any(|o| o.is_compatible(&reqs, provider)));
        order_by_price(&mut its, &reqs, provider);
        let its = cheaper_than(&its, &reqs, candidate_price, provider);
        let Some(mut its) = its.filter(|its| !its.is_empty()) else {
            return Err(Reason::NoCheaperOption { price: candidate_price });
        };
        let priced_types: Vec<String> = its.iter().map(|it| it.name.clone()).collect();
        if spot_to_spot && method == Method::SingleNodeConsolidation {
            // At least 1: keeping no type would leave the replacement nothing to launch.
            let min_types = self.cluster.options.spot_to_spot_min_instance_types.max(1);
            if its.len() < min_types {
                return Err(Reason::SpotToSpotTooFewOptions { count: its.len(), required: min_types });
            }
            let keep = satisfies_min_values(&its, &reqs).unwrap_or(0).max(min_types);
            its.truncate(keep);
        }
        if !spot_to_spot {
            let ct = reqs.get(labels::CAPACITY_TYPE);
            if ct.has(SPOT) && ct.has(ON_DEMAND) {
                // Prices were filtered assuming spot launches; don't fall back to a pricier on-demand node.
                reqs.add(Requirement::in_values(labels::CAPACITY_TYPE, [SPOT]));
                its.retain(|it| it.offerings.available().any(|o| o.is_compatible(&reqs, provider)));
                if its.is_empty() {
                    return Err(Reason::NoCheaperOption { price: candidate_price });
                }
            }
        }
        Ok((rewrite_plan(plan, reqs, &its, provider), priced_types))
    }

    /// Upstream's `filterOutSameInstanceType`: replacing several nodes with one of a type being removed
    /// is really a delete, so replacement types priced at or above the cheapest removed node of such a type
    /// are dropped. Which types are "being removed" is judged on `priced_types` (the options before a spot
    /// replacement dropped the types without spot offerings, as upstream still has them); the price filter, and
    /// the minValues re-check after it, on the replacement's own options. `None` when nothing remains or what
    /// remains breaks minValues.
    pub fn filter_out_same_instance_type(
        &self,
        cands: &[&Candidate<'a>],
        priced_types: &[String],
        mut cmd: Command,
    ) -> Option<Command> {
        let provider = self.cluster.provider;
        let plan = cmd.replacements.first_mut()?;
        let removed: BTreeMap<&str, f64> = cands.iter().fold(BTreeMap::new(), |mut m, c| {
            if let Some(it) = c.node.labels.get(labels::INSTANCE_TYPE) {
                let e = m.entry(it.as_str()).or_insert(f64::INFINITY);
                *e = e.min(c.price);
            }
            m
        });
        // Without a removed type among them, the filter still drops what cannot launch and re-checks minValues.
        let limit = priced_types
            .iter()
            .filter_map(|n| removed.get(n.as_str()).copied())
            .min_by(f64::total_cmp)
            .unwrap_or(f64::INFINITY);
        let catalogue = self.catalogue.get(plan.node_pool.as_str())?;
        let reqs = plan.requirements.clone();
        let options: Vec<&InstanceType> =
            plan.instance_type_names().filter_map(|n| catalogue.get(n).copied()).collect();
        let its = cheaper_than(&options, &reqs, limit, provider).filter(|its| !its.is_empty())?;
        let rewritten = rewrite_plan(plan.clone(), reqs, &its, provider);
        *plan = rewritten;
        let price: f64 = cands.iter().map(|c| c.price).sum();
        cmd.savings_per_hour = price - cmd.replacements.iter().filter_map(|r| r.price).sum::<f64>();
        Some(cmd)
    }

    /// Balanced approval (consolidation policy `Balanced`): every Balanced pool among the candidates must score at
    /// least 1/2.
    pub fn balanced(&self, cands: &[&Candidate<'a>], savings: f64) -> Result<(), Reason> {
        match self.balanced_scores(cands, savings).into_iter().find(|(_, score)| *score < BALANCED_THRESHOLD) {
            Some((pool, score)) => Err(Reason::BalancedRejected { node_pool: pool, score }),
            None => Ok(()),
        }
    }

    /// The score of every Balanced pool among `cands` for a move saving `savings` (upstream's
    /// `EvaluateBalancedMove`: the savings split over the pools by their share of the candidates' price), by pool
    /// name. Empty when no candidate's pool is Balanced.
    pub fn balanced_scores(&self, cands: &[&Candidate<'a>], savings: f64) -> Vec<(String, f64)> {
        let total_price: f64 = cands.iter().map(|c| c.price).sum();
        let mut pools: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
        for c in cands {
            if c.pool.node_pool.spec.disruption.consolidation_policy != ConsolidationPolicy::Balanced {
                continue;
            }
            let e = pools.entry(c.pool_name).or_default();
            e.0 += c.price;
            e.1 += c.reschedule_cost;
        }
        let mut scores = Vec::new();
        for (pool, (price, disruption)) in pools {
            let share = if total_price > 0.0 { price / total_price } else { 0.0 };
            let totals = self.totals.get(pool).copied().unwrap_or_default();
            scores.push((pool.to_owned(), balanced_score(savings * share, disruption, totals)));
        }
        scores
    }

    /// The records of a move of `cands` judged `approved` with these `scores` ([`Engine::balanced_scores`]): one per
    /// NodePool among the candidates, by name.
    pub fn consolidation_moves(
        method: Method,
        cands: &[&Candidate<'a>],
        approved: bool,
        scores: &[(String, f64)],
    ) -> Vec<ConsolidationMove> {
        let pools: BTreeMap<&str, ConsolidationPolicy> =
            cands.iter().map(|c| (c.pool_name, c.pool.node_pool.spec.disruption.consolidation_policy)).collect();
        pools
            .into_iter()
            .map(|(pool, policy)| ConsolidationMove {
                method,
                node_pool: pool.to_owned(),
                policy,
                approved,
                score: scores.iter().find(|(p, _)| p == pool).map(|(_, s)| *s),
            })
            .collect()
    }

    /// Whether `cmd`, a move of `cands`, saves at least what the pools' and the cluster's minimum savings require
    /// ([`crate::savings`]).
    pub fn pays_for_itself(&self, cands: &[&Candidate<'a>], cmd: &Command) -> Result<(), Reason> {
        self.min_savings.check(cands.iter().map(|c| (c.pool_name, c.price)), cmd.savings_per_hour)
    }

    /// Checks before any simulation for consolidation of a non-empty candidate.
    pub fn consolidation_precheck(&self, c: &Candidate<'a>) -> Result<(), Reason> {
        let pool = c.pool.node_pool;
        if pool.is_static() {
            return Err(Reason::StaticNodePool);
        }
        if pool.spec.disruption.consolidate_after.is_never() {
            return Err(Reason::ConsolidationDisabled);
        }
        if !c.policy_allows_underutilized() {
            return Err(Reason::WhenEmptyPolicy);
        }
        if let Some(r) = c.consolidation_block(self.cluster.now) {
            return Err(r);
        }
        if let Some(r) = c.pod_block_for(true) {
            return Err(r.clone());
        }
        Ok(())
    }

    pub fn budget_block(&self, c: &Candidate<'a>, method: Method, remaining: &Remaining) -> Option<Reason> {
        if remaining.left(c.pool_name) > 0 {
            return None;
        }
        let reason = method.reason();
        let detail =
            self.budgets.get(c.pool_name, reason).map_or_else(|| "unknown pool".to_owned(), |a| a.limiting.clone());
        Some(Reason::BudgetExhausted { node_pool: c.pool_name.to_owned(), reason, detail })
    }

    /// Consolidation-eligible candidates sorted for consolidation.
    pub fn sorted<'c>(cands: impl IntoIterator<Item = &'c Candidate<'a>>) -> Vec<Candidate<'a>>
    where
        'a: 'c,
    {
        let mut v: Vec<Candidate<'a>> = cands.into_iter().cloned().collect();
        sort_for_consolidation(&mut v);
        v
    }

    /// Interleaved single-node order.
    pub fn single_order<'c>(sorted: &'c [Candidate<'a>]) -> Vec<&'c Candidate<'a>> {
        interleave_by_pool(sorted)
    }
}

/// Upstream's `RemoveInstanceTypeOptionsByPriceAndMinValues`: the options (in their order) whose worst-case
/// launch price under `reqs` is below `max_price`; `None` when those break the requirements' minValues.
fn cheaper_than<'t>(
    its: &[&'t InstanceType],
    reqs: &Requirements,
    max_price: f64,
    provider: &karpenter_api::ProviderLabels,
) -> Option<Vec<&'t InstanceType>> {
    let kept: Vec<&InstanceType> = its
        .iter()
        .copied()
        .filter(|it| {
            let offerings: Vec<_> = it.offerings.available().cloned().collect();
            offerings.worst_launch_price(reqs, provider) < max_price
        })
        .collect();
    satisfies_min_values(&kept, reqs).ok().map(|_| kept)
}

/// The plan with its instance-type options replaced by `its` (cheapest first) and `reqs` as requirements.
pub(crate) fn rewrite_plan(
    mut plan: NodeClaimPlan,
    mut reqs: Requirements,
    its: &[&InstanceType],
    provider: &karpenter_api::ProviderLabels,
) -> NodeClaimPlan {
    let min_values = reqs.get_ref(labels::INSTANCE_TYPE).and_then(|r| r.min_values());
    reqs.remove(labels::INSTANCE_TYPE);
    reqs.add(
        Requirement::in_values(labels::INSTANCE_TYPE, its.iter().map(|it| it.name.as_str()))
            .with_min_values(min_values),
    );
    plan.requirements = reqs;
    plan.set_instance_types(its, provider);
    plan
}

#[cfg(test)]
pub(crate) mod tests {
    use karpenter_requirements::{InstanceType, Offering, Overhead, ResourceList};

    use super::*;

    fn it(name: &str, price_overlay: bool) -> InstanceType {
        let offering = Offering {
            price_overlay_applied: price_overlay,
            ..Offering::new([Requirement::in_values(labels::CAPACITY_TYPE, ["spot"])].into_iter().collect(), 1.0)
        };
        InstanceType::new(
            name,
            [Requirement::in_values(labels::INSTANCE_TYPE, [name])].into_iter().collect(),
            vec![offering],
            ResourceList::new(),
            Overhead::default(),
        )
    }

    /// A one-zone instance type with `cpu` vCPUs and one offering per `(capacity type, price)`.
    pub(crate) fn sized(name: &str, cpu: i64, prices: &[(&str, f64)]) -> InstanceType {
        use karpenter_requirements::{Format, Quantity};
        let zone = "test-zone-a";
        let offerings = prices
            .iter()
            .map(|(ct, price)| {
                let reqs = [
                    Requirement::in_values(labels::ZONE, [zone]),
                    Requirement::in_values(labels::CAPACITY_TYPE, [*ct]),
                ];
                Offering::new(reqs.into_iter().collect(), *price)
            })
            .collect();
        let reqs = [
            Requirement::in_values(labels::INSTANCE_TYPE, [name]),
            Requirement::in_values(labels::ARCH, ["amd64"]),
            Requirement::in_values(labels::OS, ["linux"]),
            Requirement::in_values(labels::ZONE, [zone]),
            Requirement::in_values(labels::CAPACITY_TYPE, prices.iter().map(|(ct, _)| *ct)),
        ];
        let capacity = ResourceList::new()
            .with("cpu", Quantity::from_int(cpu, Format::DecimalSI))
            .with("memory", Quantity::from_int(16 << 30, Format::BinarySI))
            .with("pods", Quantity::from_int(110, Format::DecimalSI));
        InstanceType::new(name, reqs.into_iter().collect(), offerings, capacity, Overhead::default())
    }

    /// Manifests of a pool with `requirements` (JSON) and initialized nodes `(name, type, capacity type,
    /// allocatable cpu, pods' cpu)`, one ReplicaSet's pods on each.
    pub(crate) fn manifests(requirements: &str, nodes: &[(&str, &str, &str, &str, &[&str])]) -> String {
        let mut docs = vec![format!(
            r#"{{"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {{"name": "default"}}, "spec": {{"template": {{"spec": {{"nodeClassRef": {{"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}, "requirements": {requirements}}}}}, "disruption": {{"budgets": [{{"nodes": "100%"}}]}}}}}}"#
        )];
        for (name, it, ct, cpu, pods) in nodes {
            let labels = format!(
                r#"{{"kubernetes.io/hostname": "{name}", "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "{it}", "topology.kubernetes.io/zone": "test-zone-a", "karpenter.sh/capacity-type": "{ct}", "karpenter.sh/nodepool": "default", "karpenter.sh/initialized": "true"}}"#
            );
            let resources = format!(r#"{{"cpu": "{cpu}", "memory": "16Gi", "pods": "110"}}"#);
            docs.push(format!(
                r#"{{"apiVersion": "v1", "kind": "Node", "metadata": {{"name": "{name}", "labels": {labels}}}, "status": {{"allocatable": {resources}, "capacity": {resources}}}}}"#
            ));
            let condition = |t: &str| {
                format!(
                    r#"{{"type": "{t}", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "{t}", "message": ""}}"#
                )
            };
            docs.push(format!(
                r#"{{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {{"name": "claim-{name}", "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {labels}}}, "spec": {{"nodeClassRef": {{"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}, "requirements": []}}, "status": {{"nodeName": "{name}", "providerID": "aws:///test-zone-a/i-{name}", "capacity": {resources}, "allocatable": {resources}, "conditions": [{}, {}, {}]}}}}"#,
                condition("Launched"),
                condition("Registered"),
                condition("Initialized")
            ));
            for (i, pod_cpu) in pods.iter().enumerate() {
                docs.push(format!(
                    r#"{{"apiVersion": "v1", "kind": "Pod", "metadata": {{"name": "{name}-{i}", "namespace": "default", "ownerReferences": [{{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u-rs"}}]}}, "spec": {{"containers": [{{"name": "c", "image": "x", "resources": {{"requests": {{"cpu": "{pod_cpu}"}}}}}}], "nodeName": "{name}"}}, "status": {{"phase": "Running", "startTime": "2026-01-01T00:00:00Z", "conditions": [{{"type": "Ready", "status": "True"}}]}}}}"#
                ));
            }
        }
        docs.join("\n---\n")
    }

    /// One pass over `manifests` with `catalogue` as every pool's instance types.
    pub(crate) fn pass_over(
        manifests: &str,
        catalogue: &[InstanceType],
        options: &crate::DisruptionOptions,
    ) -> crate::Pass {
        let objects = karpenter_api::load_str(manifests, "test.yaml").expect("manifests");
        let snapshot = karpenter_scheduler::ClusterSnapshot::from_objects(&objects).expect("snapshot");
        let pools: Vec<karpenter_scheduler::PoolInput<'_>> = snapshot
            .node_pools
            .iter()
            .map(|p| karpenter_scheduler::PoolInput { node_pool: p, instance_types: catalogue })
            .collect();
        let now = chrono::DateTime::parse_from_rfc3339("2026-01-01T12:00:00Z").expect("now").to_utc();
        crate::evaluate(&snapshot, &pools, &karpenter_testing::vocabulary::aws(), now, options)
    }

    pub(crate) fn summary(pass: &crate::Pass) -> Vec<String> {
        pass.commands
            .iter()
            .map(|c| {
                let nodes: Vec<&str> = c.candidates.iter().map(|r| r.node.as_str()).collect();
                let with: Vec<String> =
                    c.replacements.iter().map(|r| r.instance_type_names().collect::<Vec<_>>().join("|")).collect();
                format!("{:?} {:?} {} -> [{}]", c.method, c.decision, nodes.join(","), with.join(","))
            })
            .collect()
    }

    /// Two 1-vCPU on-demand nodes whose pods fit on one of them, in a pool that may launch spot: the only spot
    /// option costs what one of the nodes costs. Upstream's same-instance-type check still sees the candidates'
    /// own type among the replacement's options (adding the spot requirement narrows nothing there) and refuses
    /// the merge; single-node consolidation then deletes one node. Narrowing the options to spot before that check
    /// hid the type and replaced both nodes with the spot node, moving every pod for the saving a delete gives.
    #[test]
    fn a_merge_onto_spot_is_refused_when_a_candidates_own_type_would_do() {
        let catalogue = [sized("od-small", 1, &[("on-demand", 1.0)]), sized("spot-small", 1, &[("spot", 1.0)])];
        let manifests = manifests(
            r#"[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand", "spot"]}]"#,
            &[("n1", "od-small", "on-demand", "1", &["300m"]), ("n2", "od-small", "on-demand", "1", &["500m"])],
        );
        let options = crate::DisruptionOptions::default();
        let pass = pass_over(&manifests, &catalogue, &options);
        let summary = summary(&pass);
        assert_eq!(summary.len(), 1, "{summary:?}");
        assert!(summary[0].starts_with("SingleNodeConsolidation Delete "), "{summary:?}");
        assert!(summary[0].ends_with(" -> []"), "{summary:?}");
    }

    /// Upstream's "failing filterOutSameInstanceType when minValues isn't satisfied": three 4-vCPU nodes of
    /// `current` ($0.5/h; `other` costs $0.4/h), the pool asking for two instance types at least. Merging the two
    /// emptiest onto one new node leaves, once `current` itself is filtered out, `other` alone: minValues is broken
    /// and the merge refused, so single-node consolidation deletes one of them instead.
    #[test]
    fn a_merge_whose_options_break_min_values_after_the_same_type_filter_is_refused() {
        let catalogue = [sized("current", 5, &[("on-demand", 0.5)]), sized("other", 5, &[("on-demand", 0.4)])];
        let manifests = manifests(
            r#"[{"key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": 2},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]"#,
            &[
                ("n1", "current", "on-demand", "4", &["2"]),
                ("n2", "current", "on-demand", "4", &["2"]),
                ("n3", "current", "on-demand", "4", &["2", "2"]),
            ],
        );
        let pass = pass_over(&manifests, &catalogue, &crate::DisruptionOptions::default());
        let summary = summary(&pass);
        assert_eq!(summary.len(), 1, "{summary:?}");
        assert!(summary[0].starts_with("SingleNodeConsolidation Delete n"), "{summary:?}");
        assert!(summary[0].ends_with(" -> []"), "{summary:?}");
    }

    /// One 8-vCPU node ($1/h) in a pool annotated with `min_savings`, holding pods of `pods_cpu`: a 4-vCPU type
    /// costs $0.97/h (3 % less) and a 2-vCPU one $0.40/h (60 % less).
    fn replace_pass(pods_cpu: &[&str], annotation: Option<&str>, options: &crate::DisruptionOptions) -> crate::Pass {
        let catalogue = [
            sized("big", 8, &[("on-demand", 1.0)]),
            sized("mid", 4, &[("on-demand", 0.97)]),
            sized("small", 2, &[("on-demand", 0.4)]),
        ];
        let mut manifests = manifests(
            r#"[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]"#,
            &[("n1", "big", "on-demand", "8", pods_cpu)],
        );
        if let Some(v) = annotation {
            let annotated = format!(
                r#""metadata": {{"name": "default", "annotations": {{"{}": "{v}"}}}}"#,
                karpenter_api::labels::consolidation_min_savings::ANNOTATION
            );
            manifests = manifests.replacen(r#""metadata": {"name": "default"}"#, &annotated, 1);
        }
        pass_over(&manifests, &catalogue, options)
    }

    /// A replacement saving 3 % is held by a 5 % threshold from the pool's annotation or the setting (the verdict
    /// names the saving and the threshold), and made without one; a replacement saving 60 % goes ahead either way.
    #[test]
    fn a_replacement_must_save_the_minimum() {
        let plain = crate::DisruptionOptions::default();
        let marginal = replace_pass(&["3"], None, &plain);
        assert_eq!(summary(&marginal), ["SingleNodeConsolidation Replace n1 -> [mid]"]);

        let held = replace_pass(&["3"], Some("5%"), &plain);
        assert!(held.commands.is_empty(), "{:?}", summary(&held));
        let v = held.verdict("n1").unwrap();
        assert_eq!(v.reason.code(), "SavingsBelowThreshold");
        assert_eq!(
            v.message,
            "saves $0.0300/h (3.0%), NodePool default requires 5% (karpenter-rs.io/consolidation-min-savings)"
        );
        let setting =
            crate::DisruptionOptions { consolidation_min_savings: Some("5%".parse().unwrap()), ..Default::default() };
        let held = replace_pass(&["3"], None, &setting);
        assert!(held.commands.is_empty());
        assert_eq!(
            held.verdict("n1").unwrap().message,
            "saves $0.0300/h (3.0%), CONSOLIDATION_MIN_SAVINGS requires 5% (NodePool default)"
        );
        // The stricter applies: 2 % on the pool does not loosen the setting's 5 %.
        assert!(replace_pass(&["3"], Some("2%"), &setting).commands.is_empty());

        for (annotation, options) in [(Some("5%"), &plain), (None, &setting), (Some("$0.5/h"), &plain)] {
            let large = replace_pass(&["1500m"], annotation, options);
            assert_eq!(summary(&large), ["SingleNodeConsolidation Replace n1 -> [small|mid]"], "{annotation:?}");
        }
        let held = replace_pass(&["1500m"], Some("$0.7/h"), &plain);
        assert_eq!(held.verdict("n1").unwrap().reason.code(), "SavingsBelowThreshold");
    }

    /// Deletes are not held: a node whose pods fit elsewhere goes whatever the threshold asks.
    #[test]
    fn a_delete_is_not_held_by_the_minimum() {
        let catalogue = [sized("big", 8, &[("on-demand", 1.0)])];
        let manifests = manifests(
            r#"[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]"#,
            &[("n1", "big", "on-demand", "8", &["1"]), ("n2", "big", "on-demand", "8", &["6"])],
        )
        .replacen(
            r#""metadata": {"name": "default"}"#,
            r#""metadata": {"name": "default", "annotations": {"karpenter-rs.io/consolidation-min-savings": "$5/h"}}"#,
            1,
        );
        let pass = pass_over(&manifests, &catalogue, &crate::DisruptionOptions::default());
        assert_eq!(summary(&pass), ["SingleNodeConsolidation Delete n1 -> []"]);
    }

    /// A bad annotation holds the pool's replacements with a verdict naming the value.
    #[test]
    fn a_bad_annotation_holds_replacements() {
        let held = replace_pass(&["1500m"], Some("5"), &crate::DisruptionOptions::default());
        assert!(held.commands.is_empty());
        let v = held.verdict("n1").unwrap();
        assert_eq!((v.reason.code(), v.outcome), ("MinSavingsInvalid", crate::Outcome::Blocked));
        assert!(v.message.contains("\"5\" is not a minimum saving"), "{}", v.message);
    }

    /// A rewritten plan (spot-to-spot's cheaper options) says whether an overlay priced its options now, not
    /// before the rewrite.
    #[test]
    fn rewriting_a_plan_recomputes_its_overlay_flags() {
        let (overlaid, plain) = (it("overlaid", true), it("plain", false));
        let mut plan: NodeClaimPlan = serde_json::from_value(serde_json::json!({
            "name": "c", "nodePool": "default", "requirements": [], "instanceTypes": ["overlaid"], "price": 1.0,
            "pods": [], "requests": {}, "daemonSetOverhead": {}, "minValuesRelaxed": false,
            "priceOverlayApplied": true
        }))
        .unwrap();
        let provider = karpenter_testing::vocabulary::aws();
        plan = rewrite_plan(plan, Requirements::new(), &[&plain], &provider);
        assert!(!plan.price_overlay_applied && plan.instance_type_names().eq(["plain"]));
        plan = rewrite_plan(plan, Requirements::new(), &[&plain, &overlaid], &provider);
        assert!(plan.price_overlay_applied);
    }
}
