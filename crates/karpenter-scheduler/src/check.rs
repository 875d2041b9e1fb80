//! An independent checker: verifies a [`Decisions`] document against its input.
//!
//! It re-derives every constraint from the raw objects (not from the solver's internal state):
//! * every pending pod appears exactly once (placed at most once), and nothing else appears;
//! * new NodeClaims: the NodePool exists and is dynamic; every instance-type option exists, intersects the
//!   claim's requirements, has an available offering compatible with them, and holds the pods' requests plus
//!   the DaemonSet overhead of that instance type (on an offering group compatible with them, when its
//!   offerings carry capacity or overhead overrides); every pod tolerates the pool's taints (PreferNoSchedule
//!   taints may be relaxed away) and its nodeSelector plus one of its required node-affinity terms is
//!   compatible with the claim; host ports do not collide;
//! * existing nodes and in-flight claims: exist, are not marked for deletion, their labels satisfy the pods,
//!   their taints are tolerated (startup and ephemeral taints of uninitialized nodes excepted), bound pods plus
//!   placed pods fit the allocatable, host ports do not collide;
//! * limits: for every pool that got new claims, existing capacity plus the largest option of each new claim
//!   stays within `spec.limits` (and `nodes`);
//! * required pod anti-affinity, in both directions (a placed pod's terms against every bound or placed pod,
//!   and every bound pod's terms against placed pods): the two places cannot share a domain of the key (a new
//!   claim's possible domains are its requirement's values, or those of its instance-type options);
//! * required pod affinity: a placed pod's possible domains all hold a matching pod, unless it selects
//!   itself and no matching pod is in a domain it allows (the first pod of a group); members of a
//!   self-affine group with different node constraints are only required to be in one domain (each may
//!   bootstrap within its own constraints, which the final state cannot order);
//! * `DoNotSchedule` topology spread: a placed pod is in exactly one domain and, counting bound and placed
//!   matching pods that pass the node filter, `count(domain) − min ≤ maxSkew` (min over the pools' and
//!   existing nodes' domains the pod allows; 0 for hostname or below `minDomains`). Verified for groups whose
//!   placed members all carry the same constraint and node constraints (the workload case), since the
//!   final state alone cannot tell in which order mixed groups were placed;
//! * `SCHEDULER_CONFIG`'s default spread constraints ([`check_with_defaults`]): as a pod's own, for the pods
//!   that get them;
//! * volumes: a placed pod's place is compatible with one of its volume-topology alternatives, and existing
//!   nodes stay within their CSI volume limits, and a new claim's every instance-type option within its
//!   volume attachment limits (claims are resolved with the scheduler's PVC lookup).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Taint, Toleration};
use karpenter_api::{CompactPod, ProviderLabels, labels};
use karpenter_requirements::{
    HostPortUsage, InstanceType, NoKeys, OfferingsExt, Quantity, Requirement, Requirements, ResourceList,
    spec_host_ports, spec_requests, tolerates_all,
};

use crate::decision::Decisions;
use crate::scheduler::PoolInput;
use crate::snapshot::{ClusterSnapshot, api_taint, pod_key};

fn requests(pod: &CompactPod) -> ResourceList {
    let mut r = spec_requests(&pod.spec).unwrap_or_default();
    r.insert("pods", r.pods().saturating_add(&Quantity::from_int(1, karpenter_requirements::Format::DecimalSI)));
    r
}

/// The pod's alternatives: nodeSelector ∩ each required term (or the nodeSelector alone).
fn alternatives(pod: &CompactPod) -> Vec<Requirements> {
    let spec = &*pod.spec;
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

fn tolerations(pod: &CompactPod) -> &[Toleration] {
    pod.spec.tolerations.as_deref().unwrap_or(&[])
}

fn tolerates_relaxed(pod: &CompactPod, taints: &[Taint]) -> bool {
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
        let Some(spec) = snapshot.daemon_set_pod_spec(ds) else { continue };
        let pod = CompactPod { spec: std::sync::Arc::new(spec), ..Default::default() };
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

/// [`check`] with `SCHEDULER_CONFIG`'s default topology spread constraints: every pending pod that declares no
/// spread constraint and whose derived selector is not empty is checked as if it carried the defaults (with the
/// selector kube-scheduler derives from its Services and controller, [`crate::default_spread::default_selector`]).
/// An empty config checks nothing more than [`check`].
pub fn check_with_defaults(
    snapshot: &ClusterSnapshot,
    pools: &[PoolInput<'_>],
    provider: &ProviderLabels,
    config: &crate::SchedulerConfig,
    decisions: &Decisions,
) -> Result<(), Vec<String>> {
    if config.is_empty() {
        return check(snapshot, pools, provider, decisions);
    }
    let mut with = snapshot.clone();
    for pod in &mut with.pending_pods {
        if pod.spec.topology_spread_constraints.as_ref().is_some_and(|c| !c.is_empty()) {
            continue;
        }
        let Some(selector) = crate::default_spread::default_selector(pod, snapshot) else { continue };
        let constraints = config
            .default_constraints
            .iter()
            .map(|c| k8s_openapi::api::core::v1::TopologySpreadConstraint {
                label_selector: Some(selector.clone()),
                ..c.clone()
            })
            .collect();
        let p = std::sync::Arc::make_mut(pod);
        std::sync::Arc::make_mut(&mut p.spec).topology_spread_constraints = Some(constraints);
    }
    check(&with, pools, provider, decisions)
}

/// Checks `decisions` against the input; returns every violation found.
///
/// Long because it is a list of independent checks (new claims, limits, existing nodes and in-flight claims, every
/// pending pod placed once) over the same indexes of the input; each block is one rule.
pub fn check(
    snapshot: &ClusterSnapshot,
    pools: &[PoolInput<'_>],
    provider: &ProviderLabels,
    decisions: &Decisions,
) -> Result<(), Vec<String>> {
    let mut v = Vec::new();
    let pending: BTreeMap<String, &CompactPod> =
        snapshot.pending_pods.iter().map(|p| (pod_key(p), p.as_ref())).collect();
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
        let reqs = &claim.requirements;
        let pool_reqs = pool.node_pool.template_requirements().unwrap_or_default();
        if let Err(e) = pool_reqs.compatible(reqs, provider) {
            v.push(format!("{ctx}: requirements incompatible with the NodePool: {e}"));
        }
        let taints: Vec<Taint> = pool.node_pool.spec.template.spec.taints.iter().map(api_taint).collect();
        let mut sum = ResourceList::new();
        let mut ports = HostPortUsage::new();
        for key in &claim.pods {
            let Some(pod) = pending.get(key.as_str()) else { continue };
            sum = sum.add(&requests(pod));
            if !tolerates_relaxed(pod, &taints) {
                v.push(format!("{ctx}: pod {key} does not tolerate the NodePool's taints"));
            }
            if !alternatives(pod).iter().any(|a| reqs.compatible(a, provider).is_ok()) {
                v.push(format!("{ctx}: pod {key} node selector / affinity not satisfied by {reqs}"));
            }
            let hp = spec_host_ports(&pod.spec);
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
        let mut zones: BTreeSet<&str> = BTreeSet::new();
        for option in claim.instance_types.iter() {
            let name = &option.name;
            let Some(it) = pool.instance_types.iter().find(|it| &it.name == name) else {
                v.push(format!("{ctx}: unknown instance type {name}"));
                continue;
            };
            max = max.max(it.capacity());
            if let Err(e) = it.requirements.intersects(reqs) {
                v.push(format!("{ctx}: instance type {name} does not match: {e}"));
            }
            let compatible: Vec<&karpenter_requirements::Offering> =
                it.offerings.available().filter(|o| o.is_compatible(reqs, provider)).collect();
            if compatible.is_empty() {
                v.push(format!("{ctx}: instance type {name} has no compatible available offering"));
            }
            zones.extend(compatible.iter().filter_map(|o| o.zone()));
            // The option's offering is one of those, and none of them is cheaper.
            let cheapest =
                compatible.iter().map(|o| o.price).fold(None, |m: Option<f64>, p| Some(m.map_or(p, |m| m.min(p))));
            let named = compatible.iter().any(|o| {
                Some(o.price) == option.price
                    && o.zone() == option.zone.as_deref()
                    && o.capacity_type() == option.capacity_type.as_deref()
            });
            if option.price != cheapest || (cheapest.is_some() && !named) {
                v.push(format!(
                    "{ctx}: option {name} names offering ({:?}, {:?}, {:?}), its cheapest compatible costs {cheapest:?}",
                    option.zone, option.capacity_type, option.price
                ));
            }
            let overhead = daemon_overhead(snapshot, &pool_reqs, &taints, it, provider);
            // With offering overrides, some offering group compatible with the claim must hold them.
            let need = sum.add(&overhead);
            let fits = if it.has_offering_overrides() {
                it.fits_an_offering(&need, reqs, provider)
            } else {
                need.fits(it.allocatable())
            };
            if !fits {
                v.push(format!(
                    "{ctx}: pods ({sum}) + DaemonSets ({overhead}) do not fit {name} ({})",
                    it.allocatable()
                ));
            }
        }
        if !claim.zones.iter().map(String::as_str).eq(zones.iter().copied()) {
            v.push(format!("{ctx}: zones {:?}, its options are offered in {zones:?}", claim.zones));
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
            r.add_all(&Requirements::from_labels(c.labels()));
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
            ports.add(spec_host_ports(&p.spec));
        }
        for key in &placement.pods {
            let Some(pod) = pending.get(key.as_str()) else { continue };
            sum = sum.add(&requests(pod));
            if !tolerates_relaxed(pod, &taints) {
                v.push(format!("{ctx}: pod {key} does not tolerate its taints"));
            }
            if !alternatives(pod).iter().any(|a| node_reqs.compatible(a, &NoKeys).is_ok()) {
                v.push(format!("{ctx}: pod {key} node selector / affinity not satisfied by its labels"));
            }
            let hp = spec_host_ports(&pod.spec);
            if let Err(c) = ports.conflicts(&hp) {
                v.push(format!("{ctx}: pod {key}: {c}"));
            }
            ports.add(hp);
        }
        if !sum.fits(&allocatable) {
            v.push(format!("{ctx}: pods ({sum}) exceed allocatable ({allocatable})"));
        }
    }
    check_topology(snapshot, pools, provider, decisions, &mut v);
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
    pod: &CompactPod,
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
                    && it.fits_an_offering(
                        &req.add(&daemon_overhead(snapshot, &pool_reqs, &taints, it, provider)),
                        &reqs,
                        provider,
                    )
            })
        })
    })
}

/// Where a pod is (bound or placed), per topology key: the possible domains.
#[derive(Debug, Clone)]
enum Where {
    /// An existing node or in-flight claim: its labels / requirements and taints.
    Node { labels: Requirements, taints: Vec<Taint>, host: String },
    /// A new NodeClaim: its requirements, the domains its instance-type options can land in, its pool's taints.
    Claim { reqs: Requirements, it_reqs: Vec<Requirements>, taints: Vec<Taint>, name: String },
}

impl Where {
    /// The domains of `key` this place can be in; `None`: unknown (anything).
    fn domains(&self, key: &str) -> Option<BTreeSet<String>> {
        match self {
            Where::Node { labels, host, .. } => {
                if key == labels::HOSTNAME {
                    return Some(BTreeSet::from([labels.get_ref(key).map_or_else(|| host.clone(), |r| r.any())]));
                }
                let r = labels.get_ref(key)?;
                if r.complement() {
                    return None;
                }
                Some(r.values().iter().map(|v| v.to_string()).collect())
            }
            Where::Claim { reqs, it_reqs, name, .. } => {
                if key == labels::HOSTNAME {
                    return Some(BTreeSet::from([name.clone()]));
                }
                let r = reqs.get(key);
                if !r.complement() {
                    return Some(r.values().iter().map(|v| v.to_string()).collect());
                }
                let mut out = BTreeSet::new();
                for ir in it_reqs {
                    let x = ir.get_ref(key)?;
                    if x.complement() {
                        return None;
                    }
                    out.extend(x.values().iter().filter(|v| r.has(v)).map(|v| v.to_string()));
                }
                Some(out)
            }
        }
    }

    fn single(&self, key: &str) -> Option<String> {
        let d = self.domains(key)?;
        if d.len() == 1 { d.into_iter().next() } else { None }
    }

    fn matches(&self, alts: &[Requirements], provider: &ProviderLabels) -> bool {
        match self {
            Where::Node { labels, .. } => alts.iter().any(|a| labels.compatible(a, &NoKeys).is_ok()),
            Where::Claim { reqs, .. } => alts.iter().any(|a| reqs.compatible(a, provider).is_ok()),
        }
    }

    fn taints(&self) -> &[Taint] {
        match self {
            Where::Node { taints, .. } | Where::Claim { taints, .. } => taints,
        }
    }
}

/// A pod's nodeSelector and node affinity.
type NodeConstraints<'p> =
    Option<(&'p Option<BTreeMap<String, String>>, Option<&'p Option<k8s_openapi::api::core::v1::NodeAffinity>>)>;

fn node_constraints(x: &CompactPod) -> NodeConstraints<'_> {
    Some((&x.spec.node_selector, x.spec.affinity.as_ref().map(|a| &a.node_affinity)))
}

fn pod_ns(p: &CompactPod) -> &str {
    p.metadata.namespace.as_deref().unwrap_or("default")
}

fn pod_labels(p: &CompactPod) -> BTreeMap<String, String> {
    p.metadata.labels.clone().unwrap_or_default()
}

fn term_selects(
    term: &k8s_openapi::api::core::v1::PodAffinityTerm,
    owner: &CompactPod,
    other: &CompactPod,
    snapshot: &ClusterSnapshot,
) -> bool {
    let ns = pod_ns(other);
    let ns_ok = match (&term.namespace_selector, term.namespaces.as_ref().filter(|n| !n.is_empty())) {
        (None, None) => ns == pod_ns(owner),
        (sel, list) => {
            list.is_some_and(|l| l.iter().any(|n| n == ns))
                || sel.as_ref().is_some_and(|s| {
                    let labels = snapshot.namespaces.get(ns).map(|n| n.labels.clone()).unwrap_or_default();
                    karpenter_api::selector::selector_matches(Some(s), &labels)
                })
        }
    };
    ns_ok && karpenter_api::selector::selector_matches(term.label_selector.as_ref(), &pod_labels(other))
}

fn required_terms(pod: &CompactPod, anti: bool) -> impl Iterator<Item = &k8s_openapi::api::core::v1::PodAffinityTerm> {
    let a = pod.spec.affinity.as_ref();
    let terms = if anti {
        a.and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|x| x.required_during_scheduling_ignored_during_execution.as_ref())
    } else {
        a.and_then(|a| a.pod_affinity.as_ref())
            .and_then(|x| x.required_during_scheduling_ignored_during_execution.as_ref())
    };
    terms.into_iter().flatten()
}

/// Pods grouped by (namespace, labels), with per-key domain indexes built on demand.
struct PodIndex<'p> {
    pods: &'p [(&'p CompactPod, usize, bool)],
    places: &'p [Where],
    classes: Vec<(&'p CompactPod, usize)>,
    members: Vec<Vec<usize>>,
    domains: std::cell::RefCell<BTreeMap<(usize, String), std::rc::Rc<ByDomain>>>,
}

#[derive(Default)]
struct ByDomain {
    single: BTreeMap<String, Vec<usize>>,
    multi: Vec<(usize, BTreeSet<String>)>,
    unknown: Vec<usize>,
}

impl<'p> PodIndex<'p> {
    fn new(pods: &'p [(&'p CompactPod, usize, bool)], places: &'p [Where]) -> Self {
        let mut ids: BTreeMap<(&str, BTreeMap<String, String>), usize> = BTreeMap::new();
        let mut classes = Vec::new();
        let mut members: Vec<Vec<usize>> = Vec::new();
        for (i, &(p, _, _)) in pods.iter().enumerate() {
            let k = (pod_ns(p), pod_labels(p));
            let c = *ids.entry(k).or_insert_with(|| {
                classes.push((p, i));
                members.push(Vec::new());
                classes.len() - 1
            });
            if let Some(m) = members.get_mut(c) {
                m.push(i);
            }
        }
        PodIndex { pods, places, classes, members, domains: Default::default() }
    }

    /// Classes selected by `term` of `owner` (cached by term and owner namespace).
    fn selected(
        &self,
        cache: &mut BTreeMap<String, Vec<usize>>,
        term: &k8s_openapi::api::core::v1::PodAffinityTerm,
        owner: &CompactPod,
        snapshot: &ClusterSnapshot,
    ) -> Vec<usize> {
        let k = format!("{}|{term:?}", pod_ns(owner));
        cache
            .entry(k)
            .or_insert_with(|| {
                (0..self.classes.len())
                    .filter(|&c| self.classes.get(c).is_some_and(|(rep, _)| term_selects(term, owner, rep, snapshot)))
                    .collect()
            })
            .clone()
    }

    fn by_domain(&self, class: usize, key: &str) -> Option<std::rc::Rc<ByDomain>> {
        let k = (class, key.to_owned());
        if let Some(b) = self.domains.borrow().get(&k) {
            return Some(b.clone());
        }
        let mut by = ByDomain::default();
        for &i in self.members.get(class)? {
            let (_, place, _) = self.pods.get(i)?;
            let w = self.places.get(*place)?;
            match w.domains(key) {
                Some(set) if set.len() == 1 => {
                    if let Some(d) = set.into_iter().next() {
                        by.single.entry(d).or_default().push(i);
                    }
                }
                Some(set) if set.is_empty() => {}
                Some(set) => by.multi.push((i, set)),
                None if matches!(w, Where::Claim { .. }) => by.unknown.push(i),
                None => {}
            }
        }
        let rc = std::rc::Rc::new(by);
        self.domains.borrow_mut().insert(k, rc.clone());
        Some(rc)
    }
}

/// Topology, affinity and volume checks over bound and placed pods (see the module docs).
/// Where a pod is (an index into the places) and whether this decision placed it there.
type PlacedPod<'s> = (&'s CompactPod, usize, bool);

fn check_topology(
    snapshot: &ClusterSnapshot,
    pools: &[PoolInput<'_>],
    provider: &ProviderLabels,
    decisions: &Decisions,
    v: &mut Vec<String>,
) {
    let pending: BTreeMap<String, &CompactPod> =
        snapshot.pending_pods.iter().map(|p| (pod_key(p), p.as_ref())).collect();
    let (places, pods) = places_and_pods(snapshot, pools, decisions, &pending);
    let idx = PodIndex::new(&pods, &places);
    let mut selected_cache: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    check_anti_affinity(snapshot, &pods, &places, &idx, &mut selected_cache, v);
    check_affinity(snapshot, &pods, &places, &idx, &mut selected_cache, v);
    // DoNotSchedule topology spread of placed pods.
    check_spread(pools, provider, &pods, &places, v);
    check_volumes(snapshot, provider, decisions, &pending, &pods, &places, v);
    check_new_claim_volume_limits(snapshot, pools, decisions, &pending, v);
}

/// A new claim's pods need at most each instance-type option's volume attachment limit of distinct volumes per
/// CSI driver (options without a limit for a driver are not limited).
fn check_new_claim_volume_limits(
    snapshot: &ClusterSnapshot,
    pools: &[PoolInput<'_>],
    decisions: &Decisions,
    pending: &BTreeMap<String, &CompactPod>,
    v: &mut Vec<String>,
) {
    let index = crate::scheduler::volumes::VolumeIndex::new(snapshot);
    for claim in &decisions.new_node_claims {
        let mut per_driver: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for k in &claim.pods {
            let Some(p) = pending.get(k.as_str()) else { continue };
            for (d, c) in index.pod(p).map(|x| x.claims).unwrap_or_default() {
                per_driver.entry(d).or_default().insert(c);
            }
        }
        if per_driver.is_empty() {
            continue;
        }
        let Some(pool) = pools.iter().find(|p| p.node_pool.metadata.name.as_deref() == Some(claim.node_pool.as_str()))
        else {
            continue;
        };
        for name in claim.instance_type_names() {
            let Some(it) = pool.instance_types.iter().find(|it| it.name == name) else { continue };
            for (driver, volumes) in &per_driver {
                if let Some(limit) = it.volume_attachment_limits.get(driver)
                    && volumes.len() > *limit as usize
                {
                    v.push(format!(
                        "new claim {}: option {name} attaches at most {limit} {driver} volumes, its pods use {}",
                        claim.name,
                        volumes.len()
                    ));
                }
            }
        }
    }
}

/// Every place a pod can be after the decision (existing nodes, in-flight claims, the decision's new claims) and
/// every pod on one of them: bound pods where they are, pending pods where the decision put them.
fn places_and_pods<'s>(
    snapshot: &'s ClusterSnapshot,
    pools: &[PoolInput<'_>],
    decisions: &Decisions,
    pending: &BTreeMap<String, &'s CompactPod>,
) -> (Vec<Where>, Vec<PlacedPod<'s>>) {
    let mut places: Vec<Where> = Vec::new();
    // (pod, place index, placed in this decision)
    let mut pods: Vec<PlacedPod<'s>> = Vec::new();
    let mut node_place: BTreeMap<&str, usize> = BTreeMap::new();
    for n in &snapshot.nodes {
        let mut labels = Requirements::from_labels(&n.labels);
        if !labels.has(labels::HOSTNAME) {
            labels.add(Requirement::in_values(labels::HOSTNAME, [n.name.as_str()]));
        }
        node_place.insert(n.name.as_str(), places.len());
        places.push(Where::Node { labels, taints: n.taints.clone(), host: n.name.clone() });
    }
    for c in snapshot.in_flight_claims() {
        let mut r = c.claim.requirements().unwrap_or_default();
        r.add_all(&Requirements::from_labels(c.labels()));
        let host = c.node_name.clone().unwrap_or_else(|| c.name.clone());
        r.add(Requirement::in_values(labels::HOSTNAME, [host.as_str()]));
        node_place.insert(c.name.as_str(), places.len());
        let taints = c.claim.spec.taints.iter().map(api_taint).collect();
        places.push(Where::Node { labels: r, taints, host });
    }
    for p in &snapshot.bound_pods {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(&i) = p.node_name().and_then(|n| node_place.get(n)) else {
            continue;
        };
        pods.push((p, i, false));
    }
    for e in &decisions.existing_nodes {
        let Some(&i) = node_place.get(e.name.as_str()) else { continue };
        for k in &e.pods {
            if let Some(p) = pending.get(k.as_str()) {
                pods.push((p, i, true));
            }
        }
    }
    for c in &decisions.new_node_claims {
        let reqs = c.requirements.clone();
        let pool = pools.iter().find(|p| p.node_pool.metadata.name.as_deref() == Some(c.node_pool.as_str()));
        let it_reqs = c
            .instance_type_names()
            .filter_map(|n| pool.and_then(|p| p.instance_types.iter().find(|it| it.name == n)))
            .map(|it| it.requirements.clone())
            .collect();
        let taints =
            pool.map(|p| p.node_pool.spec.template.spec.taints.iter().map(api_taint).collect()).unwrap_or_default();
        let i = places.len();
        places.push(Where::Claim { reqs, it_reqs, taints, name: c.name.clone() });
        for k in &c.pods {
            if let Some(p) = pending.get(k.as_str()) {
                pods.push((p, i, true));
            }
        }
    }

    (places, pods)
}

/// Required pod anti-affinity, both directions, where at least one of the two pods was placed by the decision.
fn check_anti_affinity(
    snapshot: &ClusterSnapshot,
    pods: &[PlacedPod<'_>],
    places: &[Where],
    idx: &PodIndex<'_>,
    selected_cache: &mut BTreeMap<String, Vec<usize>>,
    v: &mut Vec<String>,
) {
    for (ai, &(a, ap, a_placed)) in pods.iter().enumerate() {
        for term in required_terms(a, true) {
            let key = term.topology_key.as_str();
            let classes = idx.selected(selected_cache, term, a, snapshot);
            let da = places[ap].domains(key);
            let a_unknown = da.is_none() && matches!(places[ap], Where::Claim { .. });
            let mut hit: Option<usize> = None;
            for c in classes {
                let Some(by) = idx.by_domain(c, key) else { continue };
                let mut consider = |b: usize| {
                    if b != ai && (a_placed || pods[b].2) && hit.is_none() {
                        hit = Some(b);
                    }
                };
                match &da {
                    Some(set) => {
                        for d in set {
                            by.single.get(d).into_iter().flatten().for_each(|&b| consider(b));
                        }
                        for (b, ds) in &by.multi {
                            if ds.intersection(set).next().is_some() {
                                consider(*b);
                            }
                        }
                        if !set.is_empty() {
                            by.unknown.iter().for_each(|&b| consider(b));
                        }
                    }
                    None if a_unknown => {
                        by.single.values().flatten().for_each(|&b| consider(b));
                        by.multi.iter().for_each(|(b, _)| consider(*b));
                        by.unknown.iter().for_each(|&b| consider(b));
                    }
                    None => {}
                }
            }
            if let Some(b) = hit {
                v.push(format!(
                    "pod {} and pod {} may share {key} although the first's required anti-affinity selects the second",
                    pod_key(a),
                    pod_key(pods[b].0)
                ));
            }
        }
    }
}

/// Required pod affinity of the pods the decision placed.
fn check_affinity(
    snapshot: &ClusterSnapshot,
    pods: &[PlacedPod<'_>],
    places: &[Where],
    idx: &PodIndex<'_>,
    selected_cache: &mut BTreeMap<String, Vec<usize>>,
    v: &mut Vec<String>,
) {
    for (pi_, &(p, pi, placed)) in pods.iter().enumerate() {
        if !placed {
            continue;
        }
        for term in required_terms(p, false) {
            let key = term.topology_key.as_str();
            let Some(dp) = places[pi].domains(key) else {
                v.push(format!("pod {}: affinity on {key} but its place has no known {key}", pod_key(p)));
                continue;
            };
            let classes = idx.selected(selected_cache, term, p, snapshot);
            let mut occupied = BTreeSet::new();
            let mut mixed = false;
            for &c in &classes {
                if let Some(by) = idx.by_domain(c, key) {
                    for (d, list) in &by.single {
                        if list.iter().any(|&q| q != pi_) {
                            occupied.insert(d.clone());
                        }
                    }
                }
                mixed |= idx.members[c].iter().any(|&q| {
                    let (qp, _, qpl) = pods[q];
                    qpl && node_constraints(qp) != node_constraints(p)
                });
            }
            if dp.is_subset(&occupied) && !dp.is_empty() {
                continue;
            }
            let own = alternatives(p).into_iter().next().unwrap_or_default();
            let allowed = own.get(key);
            let self_selects = term_selects(term, p, p, snapshot);
            if self_selects && !occupied.iter().any(|d| allowed.has(d)) {
                continue;
            }
            // Members of a self-affine group with different node constraints bootstrap where their own
            // constraints allow, so the final state only shows that the pod is in one domain.
            if self_selects && mixed && dp.len() == 1 {
                continue;
            }
            v.push(format!(
                "pod {}: required affinity on {key} not satisfied ({:?} vs matching pods in {:?})",
                pod_key(p),
                dp,
                occupied
            ));
        }
    }
}

/// Checks `decisions` against cluster-wide limits (`limits`, empty for none): the capacity of every NodePool's
/// nodes and in-flight claims, plus the largest option of each new claim (one node each), stays within them.
pub fn check_cluster_limits(
    snapshot: &ClusterSnapshot,
    pools: &[PoolInput<'_>],
    limits: &ResourceList,
    decisions: &Decisions,
) -> Result<(), Vec<String>> {
    if limits.is_empty() {
        return Ok(());
    }
    let mut used = crate::cluster_usage(snapshot);
    let one = ResourceList::new()
        .with(karpenter_api::nodepool::NODES_LIMIT, Quantity::from_int(1, karpenter_requirements::Format::DecimalSI));
    for claim in &decisions.new_node_claims {
        let its = pools
            .iter()
            .find(|p| p.node_pool.metadata.name.as_deref() == Some(claim.node_pool.as_str()))
            .map_or(&[][..], |p| p.instance_types);
        let largest = claim
            .instance_type_names()
            .filter_map(|name| its.iter().find(|it| it.name == name))
            .fold(ResourceList::new(), |m, it| m.max(it.capacity()));
        used = used.add(&largest).add(&one);
    }
    let v: Vec<String> = limits
        .iter()
        .filter(|(k, limit)| used.get_or_zero(k) > **limit)
        .map(|(k, limit)| format!("cluster limit {k} {limit} exceeded ({})", used.get_or_zero(k)))
        .collect();
    if v.is_empty() { Ok(()) } else { Err(v) }
}

/// Capacity reservations: the new NodeClaims pinned to a reservation (`capacity-reservation-id In [...]`, each
/// counting on one instance of every id listed) number at most the capacity its offerings report.
pub fn check_reservations(pools: &[PoolInput<'_>], decisions: &Decisions) -> Result<(), Vec<String>> {
    let mut capacity: BTreeMap<&str, i32> = BTreeMap::new();
    for p in pools {
        for o in p.instance_types.iter().flat_map(|it| it.offerings.available()) {
            if let (Some(labels::CAPACITY_TYPE_RESERVED), Some(id)) = (o.capacity_type(), o.reservation_id()) {
                let n = o.reservation_capacity.max(0);
                capacity.entry(id).and_modify(|c| *c = (*c).min(n)).or_insert(n);
            }
        }
    }
    let mut used: BTreeMap<String, i32> = BTreeMap::new();
    for claim in &decisions.new_node_claims {
        let Some(r) = claim.requirements.get_ref(karpenter_requirements::labels::RESERVATION_ID) else { continue };
        for id in r.values().as_slice() {
            *used.entry(id.to_string()).or_default() += 1;
        }
    }
    let v: Vec<String> = used
        .iter()
        .filter(|(id, n)| **n > capacity.get(id.as_str()).copied().unwrap_or(0))
        .map(|(id, n)| {
            format!(
                "{n} NodeClaims count on reservation {id}, which has room for {}",
                capacity.get(id.as_str()).copied().unwrap_or(0)
            )
        })
        .collect();
    if v.is_empty() { Ok(()) } else { Err(v) }
}

/// Volume topology of the pods the decision placed, and the CSI volume limits of the existing nodes it used.
fn check_volumes(
    snapshot: &ClusterSnapshot,
    provider: &ProviderLabels,
    decisions: &Decisions,
    pending: &BTreeMap<String, &CompactPod>,
    pods: &[PlacedPod<'_>],
    places: &[Where],
    v: &mut Vec<String>,
) {
    let index = crate::scheduler::volumes::VolumeIndex::new(snapshot);
    for &(p, pi, placed) in pods {
        if !placed {
            continue;
        }
        let Ok(vols) = index.pod(p) else {
            v.push(format!("pod {}: placed although its volumes cannot be resolved", pod_key(p)));
            continue;
        };
        if !vols.alternatives.is_empty() && !places[pi].matches(&vols.alternatives, provider) {
            v.push(format!("pod {}: placed outside its volumes' topology", pod_key(p)));
        }
    }
    // CSI volume limits of existing nodes.
    for e in &decisions.existing_nodes {
        let Some(limits) = snapshot.csi_limits.get(&e.name) else { continue };
        let mut used: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut added: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for p in snapshot.pods_on(&e.name) {
            for (d, c) in index.pod(p).map(|x| x.claims).unwrap_or_default() {
                used.entry(d).or_default().insert(c);
            }
        }
        for k in &e.pods {
            let Some(p) = pending.get(k.as_str()) else { continue };
            for (d, c) in index.pod(p).map(|x| x.claims).unwrap_or_default() {
                if !used.get(&d).is_some_and(|s| s.contains(&c)) {
                    added.entry(d).or_default().insert(c);
                }
            }
        }
        for (d, new) in &added {
            let total = used.get(d).map_or(0, BTreeSet::len) + new.len();
            if limits.get(d).is_some_and(|l| total as i64 > i64::from(*l)) {
                v.push(format!("node {}: CSI driver {d} over its volume limit ({total})", e.name));
            }
        }
    }
}

fn spread_selector(
    c: &k8s_openapi::api::core::v1::TopologySpreadConstraint,
    pod: &CompactPod,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
    let mut s = c.label_selector.clone().unwrap_or_default();
    let labels = pod_labels(pod);
    for k in c.match_label_keys.iter().flatten() {
        if let Some(val) = labels.get(k) {
            s.match_expressions.get_or_insert_with(Vec::new).push(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: k.clone(),
                    operator: "In".into(),
                    values: Some(vec![val.clone()]),
                },
            );
        }
    }
    s
}

/// Long because skew is counted per constraint over eligible domains with upstream's node inclusion policies and
/// minDomains in one loop sharing the per-workload cache.
fn check_spread(
    pools: &[PoolInput<'_>],
    provider: &ProviderLabels,
    pods: &[(&CompactPod, usize, bool)],
    places: &[Where],
    v: &mut Vec<String>,
) {
    // Pods of one workload share the computation: (skip, counts, min) by constraint and node constraints.
    type Summary = Option<(BTreeMap<String, i64>, i64)>;
    let mut cache: BTreeMap<String, Summary> = BTreeMap::new();
    for &(p, pi, placed) in pods {
        if !placed {
            continue;
        }
        let spec = Some(&*p.spec);
        for c in spec.and_then(|s| s.topology_spread_constraints.as_ref()).into_iter().flatten() {
            if c.when_unsatisfiable != "DoNotSchedule" || c.label_selector.is_none() {
                continue;
            }
            let key = c.topology_key.as_str();
            let selector = spread_selector(c, p);
            let cache_key = format!(
                "{}|{c:?}|{selector:?}|{:?}|{:?}",
                pod_ns(p),
                node_constraints(p),
                spec.map(|s| &s.tolerations)
            );
            let Some(mine) = places[pi].single(key) else {
                v.push(format!("pod {}: spread on {key} but its place is not in exactly one domain", pod_key(p)));
                continue;
            };
            if let Some(summary) = cache.get(&cache_key) {
                if let Some((counts, min)) = summary {
                    let have = counts.get(&mine).copied().unwrap_or(0);
                    if have - min > i64::from(c.max_skew) {
                        v.push(format!(
                            "pod {}: spread on {key} violated: {mine} has {have} matching pods, min {min}, maxSkew {}",
                            pod_key(p),
                            c.max_skew
                        ));
                    }
                }
                continue;
            }
            let selects = |q: &CompactPod| {
                pod_ns(q) == pod_ns(p) && karpenter_api::selector::selector_matches(Some(&selector), &pod_labels(q))
            };
            // Only groups whose placed members all carry the same constraint and node constraints are verified.
            let same = |q: &CompactPod| {
                let qs = Some(&*q.spec);
                qs.and_then(|s| s.topology_spread_constraints.as_ref()).is_some_and(|l| l.contains(c))
                    && qs.map(|s| (&s.node_selector, s.affinity.as_ref().map(|a| &a.node_affinity)))
                        == spec.map(|s| (&s.node_selector, s.affinity.as_ref().map(|a| &a.node_affinity)))
                    && qs.map(|s| &s.tolerations) == spec.map(|s| &s.tolerations)
            };
            if pods.iter().any(|&(q, _, pl)| pl && selects(q) && !same(q)) {
                cache.insert(cache_key, None);
                continue;
            }
            let alts = alternatives(p);
            let honor_affinity = c.node_affinity_policy.as_deref().unwrap_or("Honor") == "Honor";
            let honor_taints = c.node_taints_policy.as_deref() == Some("Honor");
            let passes = |w: &Where| {
                (!honor_affinity || alts.iter().all(|a| a.is_empty()) || w.matches(&alts, provider))
                    && (!honor_taints || tolerates_all(tolerations(p), w.taints()).is_ok())
            };
            let mut counts: BTreeMap<String, i64> = BTreeMap::new();
            if key != labels::HOSTNAME {
                for pool in pools.iter().filter(|x| !x.node_pool.is_static()) {
                    let taints: Vec<Taint> = pool.node_pool.spec.template.spec.taints.iter().map(api_taint).collect();
                    if honor_taints && tolerates_all(tolerations(p), &taints).is_err() {
                        continue;
                    }
                    let Ok(pr) = pool.node_pool.simulation_requirements() else { continue };
                    let r = pr.get(key);
                    if !r.complement() {
                        counts.extend(r.values().iter().map(|x| (x.to_string(), 0)));
                    }
                    // Instance types the pool can launch (as the scheduler's domain universe).
                    let usable = pool.instance_types.iter().filter(|it| {
                        it.requirements.intersects(&pr).is_ok()
                            && it.offerings.available().any(|o| o.is_compatible(&pr, provider))
                    });
                    for it in usable {
                        if let Some(ir) = it.requirements.get_ref(key).filter(|x| !x.complement()) {
                            counts.extend(ir.values().iter().filter(|x| r.has(x)).map(|x| (x.to_string(), 0)));
                        }
                    }
                }
                for w in places.iter().filter(|w| matches!(w, Where::Node { .. })) {
                    if passes(w)
                        && let Some(d) = w.single(key)
                    {
                        counts.entry(d).or_insert(0);
                    }
                }
            }
            for &(q, qi, _) in pods {
                if selects(q)
                    && passes(&places[qi])
                    && let Some(d) = places[qi].single(key)
                {
                    *counts.entry(d).or_insert(0) += 1;
                }
            }
            let own = alts.first().cloned().unwrap_or_default();
            let allowed = own.get(key);
            let eligible: Vec<i64> = counts.iter().filter(|(d, _)| allowed.has(d)).map(|(_, n)| *n).collect();
            let min =
                if key == labels::HOSTNAME || c.min_domains.is_some_and(|m| (eligible.len() as i64) < i64::from(m)) {
                    0
                } else {
                    eligible.iter().copied().min().unwrap_or(0)
                };
            let have = counts.get(&mine).copied().unwrap_or(0);
            if have - min > i64::from(c.max_skew) {
                v.push(format!(
                    "pod {}: spread on {key} violated: {mine} has {have} matching pods, min {min}, maxSkew {}",
                    pod_key(p),
                    c.max_skew
                ));
            }
            cache.insert(cache_key, Some((counts, min)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SchedulerOptions, schedule};
    use karpenter_api::IntoSharedPod;
    use karpenter_requirements::{Format, InstanceType, Offering, Overhead};
    use karpenter_testing::{NodePoolOptions, PodOptions, node_pool, pod, pod_affinity_term, topology_spread};

    fn catalogue() -> Vec<InstanceType> {
        let offerings = ["a", "b", "c"]
            .iter()
            .map(|z| {
                Offering::new(
                    [
                        Requirement::in_values(labels::ZONE, [*z]),
                        Requirement::in_values(labels::CAPACITY_TYPE, ["on-demand"]),
                    ]
                    .into_iter()
                    .collect(),
                    1.0,
                )
            })
            .collect();
        vec![InstanceType::new(
            "big",
            [
                Requirement::in_values(labels::INSTANCE_TYPE, ["big"]),
                Requirement::in_values(labels::ZONE, ["a", "b", "c"]),
                Requirement::in_values(labels::CAPACITY_TYPE, ["on-demand"]),
            ]
            .into_iter()
            .collect(),
            offerings,
            ResourceList::new()
                .with("cpu", Quantity::from_int(16, Format::DecimalSI))
                .with("pods", Quantity::from_int(100, Format::DecimalSI)),
            Overhead::default(),
        )]
    }

    /// Decides for pods without constraints, then checks that decision against the constrained pods.
    fn violations(constrained: PodOptions) -> Vec<String> {
        let pool = node_pool(NodePoolOptions { name: Some("default".into()), ..Default::default() });
        let its = catalogue();
        let mut plain = ClusterSnapshot::new();
        plain.node_pools.push(pool);
        let mut strict = plain.clone();
        for i in 0..3 {
            let name = Some(format!("p{i}"));
            plain.pending_pods.push(
                pod(PodOptions {
                    name: name.clone(),
                    labels: constrained.labels.clone(),
                    requests: [("cpu", "1")].into(),
                    ..Default::default()
                })
                .into_shared(),
            );
            strict
                .pending_pods
                .push(pod(PodOptions { name, requests: [("cpu", "1")].into(), ..constrained.clone() }).into_shared());
        }
        let pools = [PoolInput { node_pool: &plain.node_pools[0], instance_types: &its }];
        let provider = karpenter_testing::vocabulary::aws();
        let d = schedule(&plain, &pools, &provider, &SchedulerOptions::default());
        assert_eq!(d.new_node_claims.len(), 1, "unconstrained pods share one claim");
        assert!(check(&plain, &pools, &provider, &d).is_ok());
        let ok = schedule(&strict, &pools, &provider, &SchedulerOptions::default());
        assert!(check(&strict, &pools, &provider, &ok).is_ok(), "the scheduler's own decision passes");
        check(&strict, &pools, &provider, &d).err().unwrap_or_default()
    }

    /// Three pods a Service selects, packed on one claim: fine without a scheduler config, a violation of the
    /// default hostname spread with one; the scheduler's own decision under the config passes.
    /// The plan's zones and each option's offering are checked against the catalogue: a claim said to land in a
    /// zone no option is offered in, or an option named at an offering it does not have, is a violation.
    #[test]
    fn checks_the_zones_and_offerings_a_plan_names() {
        let pool = node_pool(NodePoolOptions { name: Some("default".into()), ..Default::default() });
        let its = catalogue();
        let mut snap = ClusterSnapshot::new();
        snap.node_pools.push(pool);
        snap.pending_pods.push(
            pod(PodOptions { name: Some("p".into()), requests: [("cpu", "1")].into(), ..Default::default() })
                .into_shared(),
        );
        let pools = [PoolInput { node_pool: &snap.node_pools[0], instance_types: &its }];
        let provider = karpenter_testing::vocabulary::aws();
        let d = schedule(&snap, &pools, &provider, &SchedulerOptions::default());
        assert_eq!(d.new_node_claims[0].zones, ["a", "b", "c"]);
        assert!(check(&snap, &pools, &provider, &d).is_ok());

        let mut wrong_zones = d.clone();
        wrong_zones.new_node_claims[0].zones = vec!["a".into(), "d".into()];
        let v = check(&snap, &pools, &provider, &wrong_zones).unwrap_err();
        assert!(v.iter().any(|v| v.contains("zones [\"a\", \"d\"], its options are offered in")), "{v:?}");

        let mut wrong_offering = d;
        let option = &mut std::sync::Arc::make_mut(&mut wrong_offering.new_node_claims[0].instance_types)[0];
        option.price = Some(0.5);
        option.capacity_type = Some("spot".into());
        let v = check(&snap, &pools, &provider, &wrong_offering).unwrap_err();
        assert!(v.iter().any(|v| v.contains("option big names offering") && v.contains("costs Some(1.0)")), "{v:?}");
    }

    #[test]
    fn checks_default_spread_constraints() {
        let pool = node_pool(NodePoolOptions { name: Some("default".into()), ..Default::default() });
        let its = catalogue();
        let mut snap = ClusterSnapshot::new();
        snap.node_pools.push(pool);
        let app: std::collections::BTreeMap<String, String> = [("app".to_owned(), "web".to_owned())].into();
        snap.services.push(crate::default_spread::ServiceSelector {
            namespace: "default".into(),
            name: "web".into(),
            selector: Some(app.clone()),
        });
        for i in 0..3 {
            let p = pod(PodOptions {
                name: Some(format!("p{i}")),
                labels: app.clone(),
                requests: [("cpu", "1")].into(),
                ..Default::default()
            });
            snap.pending_pods.push(p.into_shared());
        }
        let pools = [PoolInput { node_pool: &snap.node_pools[0], instance_types: &its }];
        let provider = karpenter_testing::vocabulary::aws();
        let packed = schedule(&snap, &pools, &provider, &SchedulerOptions::default());
        assert_eq!(packed.new_node_claims.len(), 1);
        let config = crate::SchedulerConfig::parse(
            // JSON (YAML too): the config parser reads it with and without the `yaml` feature.
            r#"{"podTopologySpread": {"defaultConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}]}}"#,
        )
        .unwrap();
        assert!(check_with_defaults(&snap, &pools, &provider, &crate::SchedulerConfig::default(), &packed).is_ok());
        let v = check_with_defaults(&snap, &pools, &provider, &config, &packed).unwrap_err();
        assert!(v.iter().any(|v| v.contains("spread on kubernetes.io/hostname violated")), "{v:?}");
        let options = SchedulerOptions { scheduler_config: config.clone(), ..Default::default() };
        let spread = schedule(&snap, &pools, &provider, &options);
        assert_eq!(spread.new_node_claims.len(), 3);
        assert!(check_with_defaults(&snap, &pools, &provider, &config, &spread).is_ok());
    }

    #[test]
    fn detects_anti_affinity_and_spread_violations() {
        let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
        let anti = violations(PodOptions {
            labels: labels.clone(),
            pod_anti_requirements: vec![pod_affinity_term(labels::HOSTNAME, &labels)],
            ..Default::default()
        });
        assert!(anti.iter().any(|v| v.contains("anti-affinity")), "{anti:?}");
        let spread = violations(PodOptions {
            labels: labels.clone(),
            topology_spread: vec![topology_spread(labels::HOSTNAME, 1, &labels)],
            ..Default::default()
        });
        assert!(spread.iter().any(|v| v.contains("spread on kubernetes.io/hostname violated")), "{spread:?}");
        let zonal = violations(PodOptions {
            labels: labels.clone(),
            topology_spread: vec![topology_spread(labels::ZONE, 1, &labels)],
            ..Default::default()
        });
        assert!(zonal.iter().any(|v| v.contains("not in exactly one domain")), "{zonal:?}");
        let affinity = violations(PodOptions {
            labels: labels.clone(),
            pod_requirements: vec![pod_affinity_term(labels::ZONE, &BTreeMap::from([("app".into(), "db".into())]))],
            ..Default::default()
        });
        assert!(affinity.iter().any(|v| v.contains("required affinity")), "{affinity:?}");
    }
}
