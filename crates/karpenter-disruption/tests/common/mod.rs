//! Shared test helpers: a small instance-type catalogue and the invariants every pass must satisfy.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use karpenter_api::labels::{self, autoscaler};
use karpenter_api::{CompactPod, DoNotDisrupt};
use karpenter_disruption::pods::{Pdbs, is_reschedulable, would_be_evicted};
use karpenter_disruption::{Decision, DisruptionOptions, Method, Pass, validation};
use karpenter_requirements::{
    Format, InstanceType, Offering, Overhead, Quantity, Requirement, Requirements, ResourceList,
};
use karpenter_scheduler::snapshot::pod_key;
use karpenter_scheduler::{ClusterSnapshot, PoolInput};

pub const ZONES: [&str; 3] = ["test-zone-a", "test-zone-b", "test-zone-c"];
pub const FAMILY: &str = "karpenter.k8s.aws/instance-family";

/// On-demand price of `family-<cpu>x`: 0.04/vCPU + 0.005/GiB; spot is 60 % of it.
pub fn price(gib_per_cpu: i64, cpu: i64) -> f64 {
    let p = 0.04 * cpu as f64 + 0.005 * (cpu * gib_per_cpu) as f64;
    (p * 10000.0).round() / 10000.0
}

/// Families c (2 GiB/vCPU), m (4 GiB/vCPU), r (8 GiB/vCPU), sizes 1..64 vCPU, 110 pods, no overhead; spot and
/// on-demand in three zones.
pub fn catalogue() -> Vec<InstanceType> {
    let mut out = Vec::new();
    for (family, gib) in [("c", 2i64), ("m", 4), ("r", 8)] {
        for cpu in [1i64, 2, 4, 8, 16, 32, 64] {
            let name = format!("{family}-{cpu}x");
            let od = price(gib, cpu);
            let spot = (od * 0.6 * 10000.0).round() / 10000.0;
            let mut offerings = Vec::new();
            for z in ZONES {
                for (ct, p) in [("on-demand", od), ("spot", spot)] {
                    let r: Requirements = [
                        Requirement::in_values(labels::ZONE, [z]),
                        Requirement::in_values(labels::CAPACITY_TYPE, [ct]),
                    ]
                    .into_iter()
                    .collect();
                    offerings.push(Offering::new(r, p));
                }
            }
            let reqs: Requirements = [
                Requirement::in_values(labels::INSTANCE_TYPE, [name.as_str()]),
                Requirement::in_values(labels::ARCH, ["amd64"]),
                Requirement::in_values(labels::OS, ["linux"]),
                Requirement::in_values(FAMILY, [family]),
                Requirement::in_values(labels::ZONE, ZONES),
                Requirement::in_values(labels::CAPACITY_TYPE, ["on-demand", "spot"]),
            ]
            .into_iter()
            .collect();
            let cap = ResourceList::new()
                .with("cpu", Quantity::from_int(cpu, Format::DecimalSI))
                .with("memory", Quantity::from_int(cpu * gib * 1024 * 1024 * 1024, Format::BinarySI))
                .with("pods", Quantity::from_int(110, Format::DecimalSI));
            out.push(InstanceType::new(name, reqs, offerings, cap, Overhead::default()));
        }
    }
    out
}

pub fn pools<'a>(snapshot: &'a ClusterSnapshot, catalogue: &'a [InstanceType]) -> Vec<PoolInput<'a>> {
    snapshot.node_pools.iter().map(|p| PoolInput { node_pool: p, instance_types: catalogue }).collect()
}

/// The invariants of a pass: no command disrupts a node blocked by a PDB, a do-not-disrupt pod or node (for
/// graceful methods, or eventual ones without terminationGracePeriod), no pool exceeds its budget, every
/// displaced pod has a place in the simulation (re-validated against the same snapshot), every node has
/// exactly one verdict, and a pool disrupted one topology domain at a time is so ([`check_topology`]).
pub fn check_pass(
    snapshot: &ClusterSnapshot,
    pools: &[PoolInput<'_>],
    now: DateTime<Utc>,
    options: &DisruptionOptions,
    pass: &Pass,
) -> Result<(), String> {
    let names: BTreeSet<&str> = snapshot.nodes.iter().map(|n| n.name.as_str()).collect();
    let verdicts: Vec<&str> = pass.verdicts.iter().map(|v| v.node.as_str()).collect();
    if verdicts.len() != names.len() || verdicts.iter().any(|v| !names.contains(v)) {
        return Err(format!("verdicts {verdicts:?} do not cover nodes {names:?}"));
    }
    let pdbs = Pdbs::new(&snapshot.pdbs);
    let mut per_pool: BTreeMap<&str, u32> = BTreeMap::new();
    let provider = karpenter_testing::vocabulary::aws();
    let autoscaler_protected =
        |p: &CompactPod| options.honor_autoscaler_annotations && p.autoscaler_do_not_disrupt().is_some();
    for cmd in &pass.commands {
        for c in &cmd.candidates {
            let node = snapshot.nodes.iter().find(|n| n.name == c.node).ok_or("unknown node")?;
            if node.annotations.get("karpenter.sh/do-not-disrupt").is_some_and(|v| v == "true") {
                return Err(format!("{} has do-not-disrupt", c.node));
            }
            if options.honor_autoscaler_annotations
                && let Some(a) = autoscaler::blocking(autoscaler::Target::Node, &node.annotations)
            {
                return Err(format!("{} has {a}", c.node));
            }
            let claim = snapshot.node_claims.iter().find(|x| x.name == c.node_claim).ok_or("unknown claim")?;
            let relaxed = !cmd.method_is_graceful() && claim.claim.spec.termination_grace_period.is_some();
            if !relaxed {
                for p in snapshot.pods_on(&c.node) {
                    if p.do_not_disrupt(now) != DoNotDisrupt::No || autoscaler_protected(p) {
                        return Err(format!("{} disrupts do-not-disrupt pod {}", c.node, pod_key(p)));
                    }
                    if would_be_evicted(p, now) && pdbs.blocks(p).is_some() {
                        return Err(format!("{} violates a PDB of pod {}", c.node, pod_key(p)));
                    }
                }
            }
            *per_pool.entry(c.node_pool.as_str()).or_default() += 1;
        }
        let expected: BTreeSet<String> = cmd
            .candidates
            .iter()
            .flat_map(|c| {
                snapshot
                    .pods_on(&c.node)
                    .filter(|p| is_reschedulable(p) && p.do_not_disrupt(now) == DoNotDisrupt::No)
                    .filter(|p| !autoscaler_protected(p))
                    .filter(|p| pdbs.blocks(p).is_none())
                    .map(pod_key)
            })
            .collect();
        let displaced: BTreeSet<String> = cmd.displaced_pods.iter().cloned().collect();
        if expected != displaced {
            return Err(format!("displaced pods {displaced:?} != reschedulable pods {expected:?}"));
        }
        if cmd.method == Method::Emptiness && !cmd.displaced_pods.is_empty() {
            return Err("emptiness displaced pods".into());
        }
        if cmd.decision == Decision::Delete && !cmd.replacements.is_empty() {
            return Err("delete with replacements".into());
        }
        if cmd.method != Method::StaticDrift {
            validation::validate(cmd, snapshot, pools, &provider, now, options)
                .map_err(|e| format!("command does not validate against its own snapshot: {e}\n{cmd:#?}"))?;
        }
    }
    check_topology(snapshot, pass)?;
    for b in pass.budgets.iter() {
        let method_reasons: Vec<_> = pass.commands.iter().map(|c| c.reason).collect();
        if !method_reasons.contains(&b.reason) {
            continue;
        }
        let used = per_pool.get(b.node_pool.as_str()).copied().unwrap_or(0);
        if used > b.allowed {
            return Err(format!("pool {} disrupts {used} nodes, budget allows {}", b.node_pool, b.allowed));
        }
    }
    Ok(())
}

trait GracefulExt {
    fn method_is_graceful(&self) -> bool;
}

impl GracefulExt for karpenter_disruption::Command {
    fn method_is_graceful(&self) -> bool {
        self.method.is_graceful()
    }
}

/// In a NodePool annotated `karpenter-rs.io/disruption-topology-key`, the nodes being disrupted and the pass's
/// command candidates lie in one domain of the key (nodes without the label being one domain); a pool whose
/// annotation is no label key has no candidate in a command.
pub fn check_topology(snapshot: &ClusterSnapshot, pass: &Pass) -> Result<(), String> {
    use karpenter_api::labels::disruption_topology;
    for pool in &snapshot.node_pools {
        let name = pool.metadata.name.as_deref().unwrap_or_default();
        let key = match disruption_topology::of(pool) {
            Ok(Some(key)) => key,
            Ok(None) => continue,
            Err(e) => {
                if pass.commands.iter().flat_map(|c| &c.candidates).any(|c| c.node_pool == name) {
                    return Err(format!("pool {name} is disrupted despite its invalid annotation ({e})"));
                }
                continue;
            }
        };
        let in_command: BTreeSet<&str> =
            pass.commands.iter().flat_map(|c| &c.candidates).map(|c| c.node.as_str()).collect();
        let domains: BTreeSet<Option<&str>> = snapshot
            .nodes
            .iter()
            .filter(|n| n.node_pool.as_deref() == Some(name))
            .filter(|n| n.marked_for_deletion || in_command.contains(n.name.as_str()))
            .map(|n| n.labels.get(&key).map(String::as_str))
            .collect();
        if domains.len() > 1 && pass.commands.iter().any(|c| c.candidates.iter().any(|r| r.node_pool == name)) {
            return Err(format!("pool {name} is disrupted in several {key} domains at once: {domains:?}"));
        }
    }
    Ok(())
}
