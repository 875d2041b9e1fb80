//! An independent checker: verifies a [`Decisions`] document against its input.
//!
//! It re-derives every constraint from the raw objects (not from the solver's internal state):
//! * every pending pod appears exactly once (placed at most once), and nothing else appears;
//! * new NodeClaims: the NodePool exists and is dynamic; every instance-type option exists, intersects the
//!   claim's requirements, has an available offering compatible with them, and holds the pods' requests plus
//!   the DaemonSet overhead of that instance type; every pod tolerates the pool's taints (PreferNoSchedule
//!   taints may be relaxed away) and its nodeSelector plus one of its required node-affinity terms is
//!   compatible with the claim; host ports do not collide;
//! * existing nodes and in-flight claims: exist, are not marked for deletion, their labels satisfy the pods,
//!   their taints are tolerated (startup and ephemeral taints of uninitialized nodes excepted), bound pods plus
//!   placed pods fit the allocatable, host ports do not collide;
//! * limits: for every pool that got new claims, existing capacity plus the largest option of each new claim
//!   stays within `spec.limits` (and `nodes`).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Pod, Taint, Toleration};
use karpenter_api::{ProviderLabels, labels};
use karpenter_requirements::{
    HostPortUsage, InstanceType, NoKeys, OfferingsExt, Quantity, Requirement, Requirements, ResourceList,
    pod_host_ports, pod_requests, tolerates_all,
};

use crate::decision::{Decisions, RequirementJson};
use crate::scheduler::PoolInput;
use crate::snapshot::{ClusterSnapshot, api_taint, pod_key};

fn requests(pod: &Pod) -> ResourceList {
    let mut r = pod_requests(pod).unwrap_or_default();
    r.insert("pods", r.pods().saturating_add(&Quantity::from_int(1, karpenter_requirements::Format::DecimalSI)));
    r
}

/// The pod's alternatives: nodeSelector ∩ each required term (or the nodeSelector alone).
fn alternatives(pod: &Pod) -> Vec<Requirements> {
    let Some(spec) = pod.spec.as_ref() else { return vec![Requirements::new()] };
    let sel = spec.node_selector.as_ref().map(Requirements::from_labels).unwrap_or_default();
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or(&[]);
    if terms.is_empty() {
        return vec![sel];
    }
    terms.iter().filter_map(|t| Requirements::from_node_selector_term(t).ok()).map(|t| sel.intersection(&t)).collect()
}

fn tolerations(pod: &Pod) -> &[Toleration] {
    pod.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or(&[])
}

fn tolerates_relaxed(pod: &Pod, taints: &[Taint]) -> bool {
    tolerates_all(tolerations(pod), taints.iter().filter(|t| t.effect != "PreferNoSchedule")).is_ok()
}

/// DaemonSet overhead of (pool, instance type): DaemonSets tolerating the pool's taints (PreferNoSchedule
/// implicitly) with some term compatible with the pool and intersecting the instance type.
fn daemon_overhead(
    snapshot: &ClusterSnapshot,
    pool_reqs: &Requirements,
    taints: &[Taint],
    it: &InstanceType,
    provider: &ProviderLabels,
) -> ResourceList {
    let mut out = ResourceList::new();
    for ds in &snapshot.daemon_sets {
        let Some(spec) = ds.spec.as_ref().and_then(|s| s.template.spec.clone()) else { continue };
        let pod = Pod { spec: Some(spec), ..Default::default() };
        let hard: Vec<Taint> = taints.iter().filter(|t| t.effect != "PreferNoSchedule").cloned().collect();
        if tolerates_all(tolerations(&pod), &hard).is_err() {
            continue;
        }
        if alternatives(&pod)
            .iter()
            .any(|a| pool_reqs.compatible(a, provider).is_ok() && it.requirements.intersects(a).is_ok())
        {
            out = out.add(&requests(&pod));
        }
    }
    out
}

/// Checks `decisions` against the input; returns every violation found.
pub fn check(
    snapshot: &ClusterSnapshot,
    pools: &[PoolInput<'_>],
    provider: &ProviderLabels,
    decisions: &Decisions,
) -> Result<(), Vec<String>> {
    let mut v = Vec::new();
    let pending: BTreeMap<String, &Pod> = snapshot.pending_pods.iter().map(|p| (pod_key(p), p)).collect();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let placed = decisions
        .new_node_claims
        .iter()
        .flat_map(|c| c.pods.iter())
        .chain(decisions.existing_nodes.iter().flat_map(|n| n.pods.iter()));
    for p in placed.chain(decisions.unschedulable.iter().map(|u| &u.pod)) {
        *seen.entry(p.as_str()).or_default() += 1;
    }
    for (p, n) in &seen {
        if !pending.contains_key(*p) {
            v.push(format!("pod {p} is not a pending pod of the input"));
        } else if *n > 1 {
            v.push(format!("pod {p} appears {n} times"));
        }
    }
    for p in pending.keys() {
        if !seen.contains_key(p.as_str()) {
            v.push(format!("pod {p} is missing from the decisions"));
        }
    }

    // New claims.
    let mut new_capacity: BTreeMap<&str, (ResourceList, i64)> = BTreeMap::new();
    for claim in &decisions.new_node_claims {
        let ctx = format!("new claim {}", claim.name);
        let Some(pool) = pools.iter().find(|p| p.node_pool.metadata.name.as_deref() == Some(claim.node_pool.as_str()))
        else {
            v.push(format!("{ctx}: unknown NodePool {}", claim.node_pool));
            continue;
        };
        if pool.node_pool.is_static() {
            v.push(format!("{ctx}: NodePool {} is static", claim.node_pool));
        }
        let reqs = match RequirementJson::to_requirements(&claim.requirements) {
            Ok(r) => r,
            Err(e) => {
                v.push(format!("{ctx}: requirements do not parse: {e}"));
                continue;
            }
        };
        let pool_reqs = pool.node_pool.template_requirements().unwrap_or_default();
        if let Err(e) = pool_reqs.compatible(&reqs, provider) {
            v.push(format!("{ctx}: requirements incompatible with the NodePool: {e}"));
        }
        let taints: Vec<Taint> = pool.node_pool.spec.template.spec.taints.iter().map(api_taint).collect();
        let mut sum = ResourceList::new();
        let mut ports = HostPortUsage::new();
        for key in &claim.pods {
            let Some(pod) = pending.get(key) else { continue };
            sum = sum.add(&requests(pod));
            if !tolerates_relaxed(pod, &taints) {
                v.push(format!("{ctx}: pod {key} does not tolerate the NodePool's taints"));
            }
            if !alternatives(pod).iter().any(|a| reqs.compatible(a, provider).is_ok()) {
                v.push(format!("{ctx}: pod {key} node selector / affinity not satisfied by {reqs}"));
            }
            let hp = pod_host_ports(pod);
            if let Err(c) = ports.conflicts(&hp) {
                v.push(format!("{ctx}: pod {key}: {c}"));
            }
            ports.add(hp);
        }
        if claim.instance_types.is_empty() {
            v.push(format!("{ctx}: no instance-type options"));
        }
        if claim.instance_types.len() > crate::scheduler::MAX_INSTANCE_TYPES {
            v.push(format!("{ctx}: more than {} options", crate::scheduler::MAX_INSTANCE_TYPES));
        }
        let entry = new_capacity.entry(claim.node_pool.as_str()).or_default();
        let mut max = ResourceList::new();
        for name in &claim.instance_types {
            let Some(it) = pool.instance_types.iter().find(|it| &it.name == name) else {
                v.push(format!("{ctx}: unknown instance type {name}"));
                continue;
            };
            max = max.max(it.capacity());
            if let Err(e) = it.requirements.intersects(&reqs) {
                v.push(format!("{ctx}: instance type {name} does not match: {e}"));
            }
            if !it.offerings.available().any(|o| o.is_compatible(&reqs, provider)) {
                v.push(format!("{ctx}: instance type {name} has no compatible available offering"));
            }
            let overhead = daemon_overhead(snapshot, &pool_reqs, &taints, it, provider);
            if !sum.add(&overhead).fits(it.allocatable()) {
                v.push(format!(
                    "{ctx}: pods ({sum}) + DaemonSets ({overhead}) do not fit {name} ({})",
                    it.allocatable()
                ));
            }
        }
        entry.0 = entry.0.add(&max);
        entry.1 += 1;
    }

    // Limits.
    for (pool_name, (added, count)) in &new_capacity {
        let Some(pool) = pools.iter().find(|p| p.node_pool.metadata.name.as_deref() == Some(*pool_name)) else {
            continue;
        };
        let mut used = added.clone();
        let mut nodes = *count;
        for n in snapshot.nodes.iter().filter(|n| n.node_pool.as_deref() == Some(*pool_name)) {
            used = used.add(&n.capacity);
            nodes += 1;
        }
        for c in snapshot.in_flight_claims().filter(|c| c.node_pool.as_deref() == Some(*pool_name)) {
            used = used.add(&c.capacity);
            nodes += 1;
        }
        for (k, limit) in &pool.node_pool.spec.limits {
            let Ok(limit) = limit.parse() else { continue };
            let have = if k == karpenter_api::nodepool::NODES_LIMIT {
                Quantity::from_int(nodes, karpenter_requirements::Format::DecimalSI)
            } else {
                used.get_or_zero(k)
            };
            if have > limit {
                v.push(format!("NodePool {pool_name}: limit {k} {limit} exceeded ({have})"));
            }
        }
    }

    // Existing nodes and in-flight claims.
    for placement in &decisions.existing_nodes {
        let ctx = format!("node {}", placement.name);
        let (node_reqs, taints, allocatable, hostname) = if placement.in_flight {
            let Some(c) = snapshot.node_claims.iter().find(|c| c.name == placement.name) else {
                v.push(format!("{ctx}: unknown NodeClaim"));
                continue;
            };
            if c.marked_for_deletion {
                v.push(format!("{ctx}: marked for deletion"));
            }
            let mut r = c.claim.requirements().unwrap_or_default();
            r.add_all(&Requirements::from_labels(&c.labels));
            if let Some(np) = &c.node_pool {
                r.add(Requirement::in_values(labels::NODE_POOL, [np.as_str()]));
            }
            let host = c.node_name.clone().unwrap_or_else(|| c.name.clone());
            let taints: Vec<Taint> = c.claim.spec.taints.iter().map(api_taint).collect();
            (r, taints, c.allocatable.clone(), host)
        } else {
            let Some(n) = snapshot.nodes.iter().find(|n| n.name == placement.name) else {
                v.push(format!("{ctx}: unknown node"));
                continue;
            };
            if n.marked_for_deletion {
                v.push(format!("{ctx}: marked for deletion"));
            }
            let startup: BTreeSet<(&str, &str)> =
                n.startup_taints.iter().map(|t| (t.key.as_str(), t.effect.as_str())).collect();
            let taints: Vec<Taint> = n
                .taints
                .iter()
                .filter(|t| {
                    n.initialized
                        || !(startup.contains(&(t.key.as_str(), t.effect.as_str()))
                            || t.key.starts_with("node.kubernetes.io/")
                            || t.key.starts_with("node.cloudprovider.kubernetes.io/")
                            || t.key == labels::taints::UNREGISTERED
                            || t.key.starts_with(labels::taints::READINESS_PREFIX))
                })
                .cloned()
                .collect();
            (Requirements::from_labels(&n.labels), taints, n.allocatable.clone(), n.name.clone())
        };
        let mut sum = ResourceList::new();
        let mut ports = HostPortUsage::new();
        for p in snapshot.pods_on(&hostname) {
            sum = sum.add(&requests(p));
            ports.add(pod_host_ports(p));
        }
        for key in &placement.pods {
            let Some(pod) = pending.get(key) else { continue };
            sum = sum.add(&requests(pod));
            if !tolerates_relaxed(pod, &taints) {
                v.push(format!("{ctx}: pod {key} does not tolerate its taints"));
            }
            if !alternatives(pod).iter().any(|a| node_reqs.compatible(a, &NoKeys).is_ok()) {
                v.push(format!("{ctx}: pod {key} node selector / affinity not satisfied by its labels"));
            }
            let hp = pod_host_ports(pod);
            if let Err(c) = ports.conflicts(&hp) {
                v.push(format!("{ctx}: pod {key}: {c}"));
            }
            ports.add(hp);
        }
        if !sum.fits(&allocatable) {
            v.push(format!("{ctx}: pods ({sum}) exceed allocatable ({allocatable})"));
        }
    }
    if v.is_empty() { Ok(()) } else { Err(v) }
}

/// Whether `pod` would fit alone on an empty instance type of some dynamic NodePool it is compatible with
/// (taints, requirements with one of its required terms, an available compatible offering, requests plus that
/// instance type's DaemonSet overhead). Limits and existing nodes are not considered. Used to check that pods
/// reported unschedulable really had no place.
pub fn fits_some_empty_instance_type(
    snapshot: &ClusterSnapshot,
    pools: &[PoolInput<'_>],
    provider: &ProviderLabels,
    pod: &Pod,
) -> bool {
    let req = requests(pod);
    pools.iter().filter(|p| !p.node_pool.is_static()).any(|pool| {
        let Ok(pool_reqs) = pool.node_pool.simulation_requirements() else { return false };
        let taints: Vec<Taint> = pool.node_pool.spec.template.spec.taints.iter().map(api_taint).collect();
        if !tolerates_relaxed(pod, &taints) {
            return false;
        }
        alternatives(pod).iter().any(|alt| {
            if pool_reqs.compatible(alt, provider).is_err() {
                return false;
            }
            let reqs = pool_reqs.intersection(alt);
            pool.instance_types.iter().any(|it| {
                it.requirements.intersects(&reqs).is_ok()
                    && it.offerings.available().any(|o| o.is_compatible(&reqs, provider))
                    && req.add(&daemon_overhead(snapshot, &pool_reqs, &taints, it, provider)).fits(it.allocatable())
            })
        })
    })
}
