//! Topology: topology spread, pod affinity, pod anti-affinity and the required
//! anti-affinity of pods already running.
//!
//! Groups are built once per pass from every pending pod (identical groups are shared) and count matching
//! pods per domain; counts start from the bound pods of the snapshot and grow as pods are placed. Every
//! pending pod knows, precomputed, which groups it owns, which groups count it and which inverse
//! (existing pods') anti-affinity groups select it, so placing a pod never rescans the other pods.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::{PodAffinityTerm, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use karpenter_api::{CompactPod, ProviderLabels, labels};
use karpenter_requirements::{NoKeys, PreferencePolicy, Requirement, Requirements, tolerates_all};

use super::pods::{PodData, Relaxation};
use super::templates::{ExistingNode, Template};
use crate::snapshot::{ClusterSnapshot, NodeInfo, pod_key};
use karpenter_api::selector::selector_matches;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Spread,
    Affinity,
    AntiAffinity,
    /// A pod's required (or, under `Respect`, preferred) anti-affinity seen from the pods it selects: the
    /// owners' domains are closed to them.
    Inverse,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Namespaces {
    All,
    Set(BTreeSet<String>),
}

impl Namespaces {
    fn contains(&self, ns: &str) -> bool {
        match self {
            Namespaces::All => true,
            Namespaces::Set(s) => s.contains(ns),
        }
    }
}

/// The node filter of a spread constraint (nodeAffinityPolicy / nodeTaintsPolicy, both Honor).
#[derive(Debug, Clone, Default)]
pub(crate) struct NodeFilter {
    /// nodeSelector ∩ each required term (ORed); empty: affinity not honored or nothing required.
    pub terms: Vec<Requirements>,
    /// `Some` when taints are honored.
    pub tolerations: Option<Vec<Toleration>>,
}

impl NodeFilter {
    fn matches(&self, reqs: &Requirements, taints: &[Taint], provider: Option<&ProviderLabels>) -> bool {
        let affinity = self.terms.is_empty()
            || self.terms.iter().any(|t| match provider {
                Some(p) => reqs.compatible_ok(t, p),
                None => reqs.compatible_ok(t, &NoKeys),
            });
        affinity && self.tolerations.as_ref().is_none_or(|tol| tolerates_all(tol, taints).is_ok())
    }
}

#[derive(Debug)]
pub(crate) struct Group {
    pub kind: Kind,
    pub key: String,
    /// `key` is the hostname label (checked per candidate node, so kept as a flag).
    pub hostname: bool,
    pub namespaces: Namespaces,
    pub selector: LabelSelector,
    pub max_skew: i32,
    pub min_domains: Option<i32>,
    pub filter: Option<NodeFilter>,
    /// Matching pods per domain; every known domain is present (count 0 included).
    pub counts: BTreeMap<String, u32>,
    /// Inverse groups: one owner, named in reasons.
    pub owner: Option<String>,
    /// Hostname groups: how many new NodeClaims of this pass have a count of at least 1 (`[0]`), at least
    /// `max_skew` (`[1]`) and at least `max_skew + 1` (`[2]`) in their hostname domain. Counts only grow
    /// during a pass and a claim's hostname is its own, so each claim is counted once per threshold; an
    /// existing node sharing a claim's hostname can only make these undercount, which is safe for
    /// [`Topology::rejects_all_claims`].
    pub claims_over: [usize; 3],
}

impl Group {
    fn selects(&self, ns: &str, labels: &BTreeMap<String, String>) -> bool {
        self.namespaces.contains(ns) && selector_matches(Some(&self.selector), labels)
    }

    fn count(&self, domain: &str) -> u32 {
        self.counts.get(domain).copied().unwrap_or(0)
    }

    /// The domains a node requirement allows: its values (In) or the known domains it allows.
    fn possible<'r>(&'r self, req: &'r Requirement) -> Vec<&'r str> {
        if !req.complement() {
            req.values().iter().map(|v| &**v).collect()
        } else {
            self.counts.keys().filter(|d| req.has(d)).map(String::as_str).collect()
        }
    }

    fn describe_counts(&self, pod_domains: &Requirement) -> String {
        let shown: Vec<String> =
            self.counts.iter().filter(|(d, _)| pod_domains.has(d)).take(8).map(|(d, c)| format!("{d}={c}")).collect();
        if shown.is_empty() { "no known domain".into() } else { shown.join(", ") }
    }
}

/// The topology of one pending pod.
#[derive(Debug, Default, Clone)]
pub(crate) struct PodTopology {
    pub spread: Vec<u32>,
    /// `ScheduleAnyway` constraints (dropped one by one by relaxation).
    pub spread_anyway: Vec<u32>,
    pub affinity: Vec<u32>,
    /// Heaviest first.
    pub affinity_preferred: Vec<u32>,
    pub anti: Vec<u32>,
    /// Heaviest first.
    pub anti_preferred: Vec<u32>,
    /// Inverse groups this pod owns: (group, index into `anti_preferred` for preferred terms).
    pub inverse_owned: Vec<(u32, Option<usize>)>,
    /// Non-inverse groups whose selector selects this pod.
    pub counted_by: Vec<u32>,
    /// Inverse groups whose selector selects this pod.
    pub blocked_by: Vec<u32>,
}

impl PodTopology {
    pub fn is_empty(&self) -> bool {
        self.spread.is_empty()
            && self.spread_anyway.is_empty()
            && self.affinity.is_empty()
            && self.affinity_preferred.is_empty()
            && self.anti.is_empty()
            && self.anti_preferred.is_empty()
            && self.inverse_owned.is_empty()
            && self.counted_by.is_empty()
            && self.blocked_by.is_empty()
    }

    /// Groups the pod owns under `relax`.
    fn active<'s>(&'s self, relax: &Relaxation) -> impl Iterator<Item = u32> + 's {
        let (sa, ap, np) = (relax.dropped_spread, relax.dropped_pod_affinity, relax.dropped_pod_anti);
        self.spread
            .iter()
            .chain(self.spread_anyway.get(sa..).unwrap_or(&[]))
            .chain(&self.affinity)
            .chain(self.affinity_preferred.get(ap..).unwrap_or(&[]))
            .chain(&self.anti)
            .chain(self.anti_preferred.get(np..).unwrap_or(&[]))
            .copied()
    }
}

/// Per-attempt values, see [`Topology::prepare`].
#[derive(Debug, Default)]
pub(crate) struct Prepared {
    mins: Vec<(u32, i64)>,
    /// Active pod-affinity groups on keys other than the hostname whose first pod cannot bootstrap a
    /// domain here: (key, the domains holding a matching pod that the pod allows). A node whose
    /// requirement on the key lists values, none of them in the set, fails the group.
    affinity: Vec<(String, Vec<String>)>,
}

impl Prepared {
    /// The pod-affinity pre-check sets: (key, allowed domains), see [`Topology::affinity_rejects`].
    pub fn affinity(&self) -> &[(String, Vec<String>)] {
        &self.affinity
    }
}

/// A rejected place: the group and the domains involved.
#[derive(Debug, Clone)]
pub(crate) struct TopologyError {
    group: u32,
    node_dom: Requirement,
    pod_dom: Requirement,
    min: i64,
}

/// Where a pod is being placed, for node filters.
pub(crate) struct Place<'p> {
    pub requirements: &'p Requirements,
    pub taints: &'p [Taint],
    /// `Some` for new NodeClaims (well-known labels may be undefined), `None` for existing nodes.
    pub provider: Option<&'p ProviderLabels>,
}

#[derive(Debug, Default)]
pub(crate) struct Topology {
    pub groups: Vec<Group>,
    /// Per pending pod, its topology; `None` when it has none (most pods: boxed, so the ones without cost a word
    /// each instead of nine empty lists, 8 MiB at 40,000 pending pods).
    pub pods: Vec<Option<Box<PodTopology>>>,
}

fn labels_of(pod: &CompactPod) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    pod.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

fn namespace_of(pod: &CompactPod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

fn validate_selector(s: &LabelSelector) -> Result<(), String> {
    for e in s.match_expressions.iter().flatten() {
        let n = e.values.as_ref().map_or(0, Vec::len);
        match e.operator.as_str() {
            "In" | "NotIn" if n == 0 => {
                return Err(format!("invalid label selector: {} {} needs values", e.key, e.operator));
            }
            "In" | "NotIn" => {}
            "Exists" | "DoesNotExist" if n > 0 => {
                return Err(format!("invalid label selector: {} {} takes no values", e.key, e.operator));
            }
            "Exists" | "DoesNotExist" => {}
            other => return Err(format!("invalid label selector: unknown operator {other}")),
        }
    }
    Ok(())
}

fn term_namespaces(term: &PodAffinityTerm, own_ns: &str, snapshot: &ClusterSnapshot) -> Result<Namespaces, String> {
    let mut set: BTreeSet<String> = term.namespaces.iter().flatten().cloned().collect();
    if let Some(sel) = &term.namespace_selector {
        validate_selector(sel).map_err(|e| format!("namespaceSelector: {e}"))?;
        let empty = sel.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
            && sel.match_expressions.as_ref().is_none_or(Vec::is_empty);
        if empty {
            return Ok(Namespaces::All);
        }
        for ns in snapshot.namespaces.values() {
            if selector_matches(Some(sel), &ns.labels) {
                set.insert(ns.name.clone());
            }
        }
    } else if set.is_empty() {
        set.insert(own_ns.to_owned());
    }
    Ok(Namespaces::Set(set))
}

fn node_domain<'n>(node: &'n NodeInfo, key: &str) -> Option<&'n str> {
    match node.labels.get(key) {
        Some(v) => Some(v.as_str()),
        None if key == labels::HOSTNAME => Some(node.name.as_str()),
        None => None,
    }
}

struct Builder<'s> {
    snapshot: &'s ClusterSnapshot,
    topo: Topology,
    index: HashMap<String, u32>,
}

impl Builder<'_> {
    #[allow(clippy::too_many_arguments)]
    fn group(
        &mut self,
        kind: Kind,
        key: &str,
        namespaces: Namespaces,
        selector: LabelSelector,
        max_skew: i32,
        min_domains: Option<i32>,
        filter: Option<NodeFilter>,
    ) -> u32 {
        let id = format!("{kind:?}|{key}|{namespaces:?}|{selector:?}|{max_skew}|{min_domains:?}|{filter:?}");
        if let Some(&g) = self.index.get(&id) {
            return g;
        }
        let g = self.topo.groups.len() as u32;
        self.topo.groups.push(Group {
            kind,
            key: key.to_owned(),
            hostname: key == labels::HOSTNAME,
            namespaces,
            selector,
            max_skew,
            min_domains,
            filter,
            counts: BTreeMap::new(),
            owner: None,
            claims_over: [0; 3],
        });
        self.index.insert(id, g);
        g
    }

    /// The groups of one pending pod; an error makes the pod unschedulable for this pass.
    ///
    /// Long because a pod's groups come from four sources (spread constraints, affinity, anti-affinity, both
    /// preferred and required) each with upstream's own selector and policy rules, added to one result.
    fn pod(&mut self, pod: &CompactPod, data: &PodData<'_>, policy: PreferencePolicy) -> Result<PodTopology, String> {
        let mut out = PodTopology::default();
        let spec = &*pod.spec;
        let ns = namespace_of(pod);
        let own_labels = labels_of(pod);
        for c in data.spread_constraints() {
            let anyway = c.when_unsatisfiable == "ScheduleAnyway";
            if anyway && policy == PreferencePolicy::Ignore {
                continue;
            }
            if c.when_unsatisfiable != "ScheduleAnyway" && c.when_unsatisfiable != "DoNotSchedule" {
                return Err(format!("topology spread: unknown whenUnsatisfiable {}", c.when_unsatisfiable));
            }
            if c.topology_key.is_empty() {
                return Err("topology spread: empty topologyKey".into());
            }
            if c.max_skew < 1 {
                return Err(format!("topology spread on {}: maxSkew must be at least 1", c.topology_key));
            }
            if c.min_domains.is_some_and(|m| m < 1) {
                return Err(format!("topology spread on {}: minDomains must be at least 1", c.topology_key));
            }
            let mut selector = c.label_selector.clone().unwrap_or_else(|| LabelSelector {
                // A missing selector matches no pod.
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "karpenter-rs.internal/never".into(),
                    operator: "In".into(),
                    values: Some(vec!["never".into()]),
                }]),
                match_labels: None,
            });
            validate_selector(&selector).map_err(|e| format!("topology spread on {}: {e}", c.topology_key))?;
            for k in c.match_label_keys.iter().flatten() {
                if let Some(v) = own_labels.get(k) {
                    selector.match_expressions.get_or_insert_with(Vec::new).push(LabelSelectorRequirement {
                        key: k.clone(),
                        operator: "In".into(),
                        values: Some(vec![v.clone()]),
                    });
                }
            }
            let mut filter = NodeFilter::default();
            if c.node_affinity_policy.as_deref().unwrap_or("Honor") == "Honor" {
                if data.required_terms.is_empty() {
                    if !data.node_selector.is_empty() {
                        filter.terms.push(data.node_selector.clone());
                    }
                } else {
                    filter.terms = data.required_terms.iter().map(|t| data.node_selector.intersection(t)).collect();
                }
            }
            if c.node_taints_policy.as_deref() == Some("Honor") {
                filter.tolerations = Some(data.tolerations().to_vec());
            }
            let filter = (!filter.terms.is_empty() || filter.tolerations.is_some()).then_some(filter);
            let g = self.group(
                Kind::Spread,
                &c.topology_key,
                Namespaces::Set(BTreeSet::from([ns.to_owned()])),
                selector,
                c.max_skew,
                c.min_domains,
                filter,
            );
            if anyway { out.spread_anyway.push(g) } else { out.spread.push(g) }
        }
        let affinity = spec.affinity.as_ref();
        let respect = policy == PreferencePolicy::Respect;
        let pa = affinity.and_then(|a| a.pod_affinity.as_ref());
        let paa = affinity.and_then(|a| a.pod_anti_affinity.as_ref());
        for (kind, required, preferred) in [
            (
                Kind::Affinity,
                pa.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref()),
                pa.and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref()),
            ),
            (
                Kind::AntiAffinity,
                paa.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref()),
                paa.and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref()),
            ),
        ] {
            let mut terms: Vec<(Option<i32>, &PodAffinityTerm)> =
                required.into_iter().flatten().map(|t| (None, t)).collect();
            if respect {
                let mut pref: Vec<(Option<i32>, &PodAffinityTerm)> =
                    preferred.into_iter().flatten().map(|w| (Some(w.weight), &w.pod_affinity_term)).collect();
                pref.sort_by_key(|p| std::cmp::Reverse(p.0));
                terms.extend(pref);
            }
            let name = if kind == Kind::Affinity { "pod affinity" } else { "pod anti-affinity" };
            for (weight, term) in terms {
                if term.topology_key.is_empty() {
                    return Err(format!("{name}: empty topologyKey"));
                }
                let selector = match &term.label_selector {
                    Some(s) => s.clone(),
                    // A missing selector matches nothing.
                    None => continue,
                };
                validate_selector(&selector).map_err(|e| format!("{name} on {}: {e}", term.topology_key))?;
                let nss = term_namespaces(term, ns, self.snapshot).map_err(|e| format!("{name}: {e}"))?;
                let g = self.group(kind, &term.topology_key, nss.clone(), selector.clone(), i32::MAX, None, None);
                match (kind, weight) {
                    (Kind::Affinity, None) => out.affinity.push(g),
                    (Kind::Affinity, Some(_)) => out.affinity_preferred.push(g),
                    (_, None) => out.anti.push(g),
                    (_, Some(_)) => out.anti_preferred.push(g),
                }
                // Inverse groups for required terms only: a preferred term of one pod must not block
                // another pod that cannot relax it (upstream does not track inverse preferences either).
                if kind == Kind::AntiAffinity && weight.is_none() {
                    let inv = self.group(Kind::Inverse, &term.topology_key, nss, selector, i32::MAX, None, None);
                    if let Some(gr) = self.topo.groups.get_mut(inv as usize) {
                        gr.owner.get_or_insert_with(|| pod_key(pod));
                    }
                    out.inverse_owned.push((inv, None));
                }
            }
        }
        Ok(out)
    }
}

impl Topology {
    /// Builds the groups of every pending pod (a pod whose topology is invalid gets `data.error`), the
    /// inverse groups of bound pods' required anti-affinity, the domains and the initial counts.
    ///
    /// Long because groups, inverse groups, domains and initial counts are built in one walk over the same builder
    /// state, in the order the counts depend on.
    pub fn new(
        snapshot: &ClusterSnapshot,
        data: &mut [PodData<'_>],
        templates: &[Template<'_>],
        existing: &[ExistingNode],
        policy: PreferencePolicy,
    ) -> Topology {
        let mut b = Builder { snapshot, topo: Topology::default(), index: HashMap::new() };
        let mut per_pod = Vec::with_capacity(data.len());
        for d in data.iter_mut() {
            let pod = d.pod;
            if d.error.is_some() {
                per_pod.push(None);
                continue;
            }
            match b.pod(pod, d, policy) {
                Ok(t) => {
                    d.n_spread_anyway = t.spread_anyway.len();
                    d.n_affinity_preferred = t.affinity_preferred.len();
                    d.n_anti_preferred = t.anti_preferred.len();
                    per_pod.push((!t.is_empty()).then(|| Box::new(t)));
                }
                Err(message) => {
                    // Label selectors and spread constraints that do not parse.
                    d.error = Some(crate::decision::UnschedulableReason::InvalidPod { message });
                    per_pod.push(None);
                }
            }
        }
        // Pods being placed are not counted where they are bound (disruption simulations move bound pods).
        let placing: BTreeSet<&str> = data.iter().map(|d| d.key.as_str()).collect();
        let skip = |p: &CompactPod| p.metadata.deletion_timestamp.is_some() || placing.contains(pod_key(p).as_str());
        // Existing pods' required anti-affinity.
        let mut existing_inverse: Vec<(u32, &str)> = Vec::new();
        for p in &snapshot.bound_pods {
            // Cheap test first: this loop runs once per disruption simulation over every bound pod.
            let anti = p.spec.affinity.as_ref().and_then(|a| a.pod_anti_affinity.as_ref());
            if anti.is_none() || skip(p) {
                continue;
            }
            let Some(node) = p.node_name() else { continue };
            for t in
                anti.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref()).into_iter().flatten()
            {
                let (Some(sel), false) = (t.label_selector.as_ref(), t.topology_key.is_empty()) else { continue };
                if validate_selector(sel).is_err() {
                    continue;
                }
                let Ok(nss) = term_namespaces(t, namespace_of(p), snapshot) else { continue };
                let g = b.group(Kind::Inverse, &t.topology_key, nss, sel.clone(), i32::MAX, None, None);
                if let Some(gr) = b.topo.groups.get_mut(g as usize) {
                    gr.owner.get_or_insert_with(|| pod_key(p));
                }
                existing_inverse.push((g, node));
            }
        }
        let mut topo = b.topo;
        if topo.groups.is_empty() {
            topo.pods = per_pod;
            return topo;
        }
        let nodes: HashMap<&str, &NodeInfo> = snapshot.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        // Domains: instance types × templates, template In values, existing nodes.
        let keys: BTreeSet<String> = topo.groups.iter().map(|g| g.key.clone()).collect();
        let mut universe: BTreeMap<&str, BTreeMap<String, Vec<usize>>> = BTreeMap::new();
        for key in &keys {
            let mut domains: BTreeMap<String, Vec<usize>> = BTreeMap::new();
            for (ti, t) in templates.iter().enumerate() {
                let tr = t.requirements.get(key);
                if !tr.complement() {
                    for v in tr.values().iter() {
                        domains.entry(v.to_string()).or_default().push(ti);
                    }
                }
                for it in &t.its {
                    let Some(r) = it.requirements.get_ref(key) else { continue };
                    if r.complement() {
                        continue;
                    }
                    for v in r.values().iter() {
                        if tr.has(v) {
                            let e = domains.entry(v.to_string()).or_default();
                            if e.last() != Some(&ti) {
                                e.push(ti);
                            }
                        }
                    }
                }
            }
            universe.insert(key.as_str(), domains);
        }
        for g in &mut topo.groups {
            let Some(domains) = universe.get(g.key.as_str()) else { continue };
            for (d, producers) in domains {
                let reachable = match (&g.kind, g.filter.as_ref().and_then(|f| f.tolerations.as_ref())) {
                    (Kind::Spread, Some(tol)) => producers
                        .iter()
                        .any(|&t| templates.get(t).is_some_and(|t| tolerates_all(tol, &t.taints).is_ok())),
                    _ => true,
                };
                if reachable {
                    g.counts.insert(d.clone(), 0);
                }
            }
            for n in existing {
                let Some(r) = n.requirements.get_ref(&g.key) else { continue };
                if r.complement() {
                    continue;
                }
                let passes = g.kind != Kind::Spread
                    || g.filter.as_ref().is_none_or(|f| f.matches(&n.requirements, &n.taints, None));
                if passes {
                    for v in r.values().iter() {
                        g.counts.entry(v.to_string()).or_insert(0);
                    }
                }
            }
        }
        for (g, node) in existing_inverse {
            let (Some(gr), Some(n)) = (topo.groups.get_mut(g as usize), nodes.get(node)) else { continue };
            if let Some(d) = node_domain(n, &gr.key) {
                *gr.counts.entry(d.to_owned()).or_insert(0) += 1;
            }
        }
        // Initial counts from bound pods (inverse groups count owners, done above).
        let counting: Vec<u32> =
            (0..topo.groups.len() as u32).filter(|&g| topo.groups[g as usize].kind != Kind::Inverse).collect();
        for p in &snapshot.bound_pods {
            if skip(p) {
                continue;
            }
            let Some(node) = p.node_name().and_then(|n| nodes.get(n)) else {
                continue;
            };
            let (ns, pl) = (namespace_of(p), labels_of(p));
            for &g in &counting {
                let gr = &mut topo.groups[g as usize];
                if !gr.selects(ns, pl) {
                    continue;
                }
                let Some(d) = node_domain(node, &gr.key) else { continue };
                if gr.kind == Kind::Spread
                    && let Some(f) = &gr.filter
                {
                    let reqs = Requirements::from_labels(&node.labels);
                    if !f.matches(&reqs, &node.taints, None) {
                        continue;
                    }
                }
                *gr.counts.entry(d.to_owned()).or_insert(0) += 1;
            }
        }
        // Which groups count / block each pending pod.
        for (d, t) in data.iter().zip(per_pod.iter_mut()) {
            if d.error.is_some() {
                continue;
            }
            let (ns, pl) = (namespace_of(d.pod), labels_of(d.pod));
            for (g, gr) in topo.groups.iter().enumerate() {
                if gr.selects(ns, pl) {
                    let t = t.get_or_insert_with(Box::default);
                    if gr.kind == Kind::Inverse { t.blocked_by.push(g as u32) } else { t.counted_by.push(g as u32) }
                }
            }
        }
        topo.pods = per_pod;
        topo
    }

    fn pod(&self, i: usize) -> Option<&PodTopology> {
        self.pods.get(i).and_then(Option::as_deref).filter(|t| !t.is_empty())
    }

    /// A cheap pre-check for a node whose hostname is `host`: hostname-keyed anti-affinity and spread.
    pub fn quick_reject(&self, i: usize, relax: &Relaxation, host: &str) -> bool {
        let Some(t) = self.pod(i) else { return false };
        for g in t.active(relax).chain(t.blocked_by.iter().copied()) {
            let Some(gr) = self.groups.get(g as usize) else { continue };
            if !gr.hostname {
                continue;
            }
            match gr.kind {
                Kind::AntiAffinity | Kind::Inverse if gr.count(host) > 0 => return true,
                Kind::Spread => {
                    let own = u32::from(t.counted_by.contains(&g));
                    if i64::from(gr.count(host) + own) > i64::from(gr.max_skew) {
                        return true;
                    }
                }
                _ => {}
            }
        }
        false
    }

    /// Whether [`Topology::quick_reject`] rejects every one of the `claims` new NodeClaims of this pass, from
    /// the per-group claim counters alone (no per-claim lookups): some hostname group of the pod already
    /// holds enough matching pods on every claim.
    pub fn rejects_all_claims(&self, i: usize, relax: &Relaxation, claims: usize) -> bool {
        let Some(t) = self.pod(i) else { return false };
        if claims == 0 {
            return false;
        }
        t.active(relax).chain(t.blocked_by.iter().copied()).any(|g| {
            let Some(gr) = self.groups.get(g as usize) else { return false };
            if !gr.hostname {
                return false;
            }
            match gr.kind {
                Kind::AntiAffinity | Kind::Inverse => gr.claims_over[0] >= claims,
                // quick_reject: count + own > max_skew, i.e. count >= max_skew + 1 - own.
                Kind::Spread if gr.max_skew >= 1 => {
                    let own = t.counted_by.contains(&g);
                    gr.claims_over[if own { 1 } else { 2 }] >= claims
                }
                _ => false,
            }
        })
    }

    /// Per-attempt values that do not depend on the candidate node: the spread minimum of every active
    /// spread group (computed once per attempt instead of once per candidate).
    pub fn prepare(&self, i: usize, relax: &Relaxation, pod_strict: &Requirements) -> Prepared {
        let Some(t) = self.pod(i) else { return Prepared::default() };
        let mut mins = Vec::new();
        for g in t.active(relax) {
            let Some(gr) = self.groups.get(g as usize) else { continue };
            if gr.kind != Kind::Spread || gr.key == labels::HOSTNAME {
                continue;
            }
            let pod_dom = pod_strict.get(&gr.key);
            let mut eligible = 0i64;
            let mut min: Option<u32> = None;
            for (d, c) in &gr.counts {
                if pod_dom.has(d) {
                    eligible += 1;
                    min = Some(min.map_or(*c, |m| m.min(*c)));
                }
            }
            let too_few = gr.min_domains.is_some_and(|m| eligible < i64::from(m));
            mins.push((g, if too_few { 0 } else { i64::from(min.unwrap_or(0)) }));
        }
        let mut affinity = Vec::new();
        for g in t.active(relax) {
            let Some(gr) = self.groups.get(g as usize) else { continue };
            if gr.kind != Kind::Affinity || gr.hostname {
                continue;
            }
            let pod_dom = pod_strict.get(&gr.key);
            let allowed: Vec<String> =
                gr.counts.iter().filter(|(d, c)| **c > 0 && pod_dom.has(d)).map(|(d, _)| d.clone()).collect();
            // An empty set lets the group's first pod pick a domain (see `add_requirements`).
            if allowed.is_empty() && t.counted_by.contains(&g) {
                continue;
            }
            affinity.push((gr.key.clone(), allowed));
        }
        Prepared { mins, affinity }
    }

    /// The distinct keys (other than the hostname) of pod-affinity groups, sorted: the keys
    /// [`Prepared::affinity`] can name.
    pub fn affinity_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> =
            self.groups.iter().filter(|g| g.kind == Kind::Affinity && !g.hostname).map(|g| g.key.clone()).collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// A cheap pre-check of a new claim (its requirements) against the pod's pod-affinity groups, from
    /// [`Topology::prepare`]: true when [`Topology::add_requirements`] would fail on one of them because
    /// the claim is already narrowed to domains without a matching pod (the candidate's domains for the key
    /// are a subset of the claim's values, so none of them can qualify).
    pub fn affinity_rejects(prepared: &Prepared, claim: &Requirements) -> bool {
        prepared.affinity.iter().any(|(key, allowed)| {
            claim.get_ref(key).is_some_and(|r| {
                !r.complement() && r.values().iter().all(|v| !allowed.iter().any(|a| a.as_str() == &**v))
            })
        })
    }

    /// Narrows `node` (the candidate's requirements, already intersected with the pod's) by the pod's
    /// topology (upstream's `AddRequirements`). `pod_strict` is the pod's nodeSelector ∩ required term.
    /// `Ok(None)`: unchanged. Errors are cheap; [`Topology::explain`] turns one into a reason.
    pub fn add_requirements(
        &self,
        i: usize,
        relax: &Relaxation,
        pod_strict: &Requirements,
        node: &Requirements,
        prepared: &Prepared,
    ) -> Result<Option<Requirements>, Box<TopologyError>> {
        let Some(t) = self.pod(i) else { return Ok(None) };
        let mut out: Option<Requirements> = None;
        for g in t.active(relax).chain(t.blocked_by.iter().copied()) {
            let Some(gr) = self.groups.get(g as usize) else { continue };
            let current = out.as_ref().unwrap_or(node);
            let node_dom = current.get(&gr.key);
            let pod_dom = pod_strict.get(&gr.key);
            let fail = |min: i64| {
                Box::new(TopologyError { group: g, node_dom: node_dom.clone(), pod_dom: pod_dom.clone(), min })
            };
            let chosen: Vec<String> = match gr.kind {
                Kind::Spread => {
                    let own = i64::from(t.counted_by.contains(&g));
                    let min = prepared.mins.iter().find(|(x, _)| *x == g).map_or(0, |(_, m)| *m);
                    let mut best: Option<(&str, u32)> = None;
                    for d in gr.possible(&node_dom) {
                        if !pod_dom.has(d) {
                            continue;
                        }
                        let c = gr.count(d);
                        if i64::from(c) + own - min <= i64::from(gr.max_skew) && best.is_none_or(|(_, bc)| c < bc) {
                            best = Some((d, c));
                        }
                    }
                    match best {
                        Some((d, _)) => vec![d.to_owned()],
                        None => return Err(fail(min)),
                    }
                }
                Kind::Affinity => {
                    let mut opts: Vec<String> = gr
                        .possible(&node_dom)
                        .into_iter()
                        .filter(|d| pod_dom.has(d) && gr.count(d) > 0)
                        .map(str::to_owned)
                        .collect();
                    if opts.is_empty() && t.counted_by.contains(&g) {
                        let pod_has_pods = gr.counts.iter().any(|(d, c)| *c > 0 && pod_dom.has(d));
                        if !pod_has_pods {
                            // Bootstrap: the first pod of a self-affine group picks a domain.
                            let both = gr.possible(&node_dom).into_iter().find(|d| pod_dom.has(d));
                            let any = || gr.possible(&pod_dom).into_iter().next();
                            if let Some(d) = both.or_else(any) {
                                opts.push(d.to_owned());
                            }
                        }
                    }
                    if opts.is_empty() {
                        return Err(fail(0));
                    }
                    opts
                }
                Kind::AntiAffinity | Kind::Inverse => {
                    let opts: Vec<String> = gr
                        .possible(&node_dom)
                        .into_iter()
                        .filter(|d| pod_dom.has(d) && gr.count(d) == 0)
                        .map(str::to_owned)
                        .collect();
                    if opts.is_empty() {
                        return Err(fail(0));
                    }
                    opts
                }
            };
            let narrowed = node_dom.complement() || node_dom.values().len() != chosen.len();
            if narrowed {
                let mut next = current.clone();
                next.add(Requirement::in_values(&gr.key, chosen.iter().map(String::as_str)));
                if next.get(&gr.key).is_empty() {
                    return Err(fail(0));
                }
                out = Some(next);
            }
        }
        Ok(out)
    }

    /// A reason for a topology error.
    pub fn explain(&self, e: &TopologyError) -> String {
        let Some(gr) = self.groups.get(e.group as usize) else { return "topology cannot be satisfied".into() };
        let occupied = || -> String {
            let list: Vec<&str> = gr.counts.iter().filter(|(_, c)| **c > 0).take(8).map(|(d, _)| d.as_str()).collect();
            list.join(", ")
        };
        match gr.kind {
            Kind::Spread => format!(
                "topology spread on {} (maxSkew {}) cannot be satisfied: {} (min {}){}",
                gr.key,
                gr.max_skew,
                describe_candidates(gr, &e.node_dom, &e.pod_dom),
                e.min,
                if gr.min_domains.is_some() { ", minDomains not reached" } else { "" }
            ),
            Kind::Affinity => format!(
                "pod affinity on {} cannot be satisfied: no allowed domain has a matching pod ({})",
                gr.key,
                gr.describe_counts(&e.pod_dom)
            ),
            Kind::AntiAffinity => format!(
                "pod anti-affinity on {} cannot be satisfied: every allowed domain already has a matching pod ({})",
                gr.key,
                occupied()
            ),
            Kind::Inverse => format!(
                "the pod anti-affinity of pod {} (and pods like it) keeps this pod out of {} {}",
                gr.owner.as_deref().unwrap_or("?"),
                gr.key,
                occupied()
            ),
        }
    }

    /// Records pod `i` placed at `place`.
    pub fn record(&mut self, i: usize, relax: &Relaxation, place: &Place<'_>) {
        let Some(t) = self.pods.get(i).and_then(Option::as_deref) else { return };
        if t.is_empty() {
            return;
        }
        let counted: Vec<u32> = t.counted_by.clone();
        // The hostname of a new claim (one value); `None` for existing nodes.
        let claim_host_req = place.provider.and_then(|_| place.requirements.get_ref(labels::HOSTNAME));
        let claim_host: Option<&str> = claim_host_req
            .filter(|r| !r.complement() && r.values().len() == 1)
            .and_then(|r| r.values().first().map(|v| &**v));
        let owned: Vec<u32> = t
            .inverse_owned
            .iter()
            .filter(|(_, pref)| pref.is_none_or(|p| p >= relax.dropped_pod_anti))
            .map(|(g, _)| *g)
            .collect();
        for g in counted {
            let Some(gr) = self.groups.get_mut(g as usize) else { continue };
            // An existing node without the label is in no domain. A new claim that does not constrain the key
            // may still land in any domain: anti-affinity blocks them all (stricter than upstream, which
            // records nothing and lets the kube-scheduler catch the conflict later).
            let req = match place.requirements.get_ref(&gr.key) {
                Some(r) => r.clone(),
                None if place.provider.is_some() && gr.kind == Kind::AntiAffinity => Requirement::exists(&gr.key),
                None => continue,
            };
            match gr.kind {
                Kind::Spread | Kind::Affinity => {
                    if req.complement() || req.values().len() != 1 {
                        continue;
                    }
                    if gr.kind == Kind::Spread
                        && let Some(f) = &gr.filter
                        && !f.matches(place.requirements, place.taints, place.provider)
                    {
                        continue;
                    }
                    if let Some(d) = req.values().first() {
                        bump(gr, d, claim_host);
                    }
                }
                Kind::AntiAffinity => record_all(gr, &req, claim_host),
                Kind::Inverse => {}
            }
        }
        for g in owned {
            if let Some(gr) = self.groups.get_mut(g as usize)
                && let Some(req) = place.requirements.get_ref(&gr.key).cloned()
            {
                record_all(gr, &req, claim_host);
            }
        }
    }
}

fn record_all(gr: &mut Group, req: &Requirement, claim_host: Option<&str>) {
    let domains: Vec<String> = gr.possible(req).into_iter().map(str::to_owned).collect();
    for d in domains {
        bump(gr, &d, claim_host);
    }
}

/// Adds one pod to `domain`; when `domain` is the hostname of the new claim the pod is placed on
/// (`claim_host`), keeps [`Group::claims_over`].
fn bump(gr: &mut Group, domain: &str, claim_host: Option<&str>) {
    let new_claim = claim_host == Some(domain);
    let c = match gr.counts.get_mut(domain) {
        Some(c) => c,
        None => gr.counts.entry(domain.to_owned()).or_insert(0),
    };
    let before = i64::from(*c);
    *c += 1;
    if new_claim && gr.hostname {
        let skew = i64::from(gr.max_skew);
        for (k, threshold) in [1, skew, skew + 1].into_iter().enumerate() {
            if before < threshold
                && before + 1 >= threshold
                && let Some(n) = gr.claims_over.get_mut(k)
            {
                *n += 1;
            }
        }
    }
}

fn describe_candidates(gr: &Group, node_dom: &Requirement, pod_dom: &Requirement) -> String {
    let cands: Vec<String> = gr
        .possible(node_dom)
        .into_iter()
        .filter(|d| pod_dom.has(d))
        .take(8)
        .map(|d| format!("{d}={}", gr.count(d)))
        .collect();
    if cands.is_empty() {
        format!("no domain is allowed (known: {})", gr.describe_counts(pod_dom))
    } else {
        format!("matching pods per allowed domain {} would exceed the skew", cands.join(", "))
    }
}
