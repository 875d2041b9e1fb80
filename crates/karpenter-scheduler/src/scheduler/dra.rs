//! Dynamic Resource Allocation in the simulation (upstream v1.14's, used when `IGNORE_DRA_REQUESTS=false`).
//!
//! [`DraIndex`] is built once per pass from the snapshot's DRA objects and the instance types: every device the
//! pass knows gets an id, published ones (ResourceSlices) and promised ones (instance types' slice templates),
//! with which nodes see the published ones and which devices claims' `status.allocation` already hold.
//! [`DraPass`] is per solve: it resolves each pending pod's claims once (a named claim, the claim generated
//! for the pod from a template, or the template itself standing for the claim not created yet), compiles the
//! device class's and the request's CEL selectors once and evaluates them once per device, and then tracks
//! where each claim is allocated during the solve.
//!
//! Per candidate: an initialized existing node offers the devices published for it (node-name slices, slices
//! whose node selector matches it, all-nodes slices) minus the allocated ones; a node not initialized yet, an
//! in-flight NodeClaim and a new NodeClaim offer the slice templates of their instance type, jointly for every
//! claim placed on them (a new NodeClaim keeps the instance types whose templates hold all of its claims). A
//! claim shared by several pods is allocated once and pins the others to its node; a claim allocated already
//! pins its pods to the nodes its allocation's node selector names. Published devices are taken from a
//! shared [`Allocator`] only when the pod is placed, so a candidate that turns the pod down holds nothing.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::NodeSelector;
use karpenter_api::dra::{
    AllocationMode, ClaimSpec, DeviceClass, DraObjects, RequestAlternative, ResourceClaim, ResourceClaimTemplate,
    SliceNodes,
};
use karpenter_api::{CompactPod, labels};
use karpenter_requirements::{Device, InstanceType, NoKeys, Requirements};
use rustc_hash::{FxHashMap, FxHashSet};

use super::device_cel::{CelValue, DeviceSelector, SelectorEnv};
use super::templates::ExistingNode;

/// Device-search steps after which a claim counts as not allocatable on a candidate (a bound on pathological
/// inputs: many identical devices and many requests).
const MAX_SEARCH_STEPS: usize = 20_000;

/// A device the pass knows.
#[derive(Debug)]
struct DeviceEntry<'a> {
    driver: &'a str,
    device: &'a Device,
}

/// One node-selector term: label requirements and, from `matchFields`, node names.
#[derive(Debug, Clone)]
struct NodeTerm {
    requirements: Requirements,
    names: Option<Vec<String>>,
}

/// Which nodes a node selector matches; a term that cannot be read matches nothing.
#[derive(Debug, Clone)]
struct NodeMatch(Vec<NodeTerm>);

impl NodeMatch {
    fn new(selector: &NodeSelector) -> Self {
        let terms = selector
            .node_selector_terms
            .iter()
            .filter_map(|t| {
                let requirements = Requirements::from_node_selector_term(t).ok()?;
                let mut names: Option<Vec<String>> = None;
                for f in t.match_fields.iter().flatten() {
                    if f.key != "metadata.name" || f.operator != "In" {
                        return None;
                    }
                    names.get_or_insert_with(Vec::new).extend(f.values.iter().flatten().cloned());
                }
                Some(NodeTerm { requirements, names })
            })
            .collect();
        NodeMatch(terms)
    }

    fn matches(&self, name: &str, node: &Requirements) -> bool {
        self.0.iter().any(|t| {
            t.names.as_ref().is_none_or(|n| n.iter().any(|x| x == name)) && node.compatible_ok(&t.requirements, &NoKeys)
        })
    }
}

/// The DRA objects of a pass, indexed (independent of the pods; shared by a disruption pass's simulations).
#[derive(Debug)]
pub(crate) struct DraIndex<'a> {
    devices: Vec<DeviceEntry<'a>>,
    /// Published devices local to one node, by node name.
    node_local: FxHashMap<&'a str, Vec<u32>>,
    /// Published devices of node-selector slices.
    selected: Vec<(NodeMatch, Vec<u32>)>,
    /// Published devices every node sees.
    all_nodes: Vec<u32>,
    /// Devices of each instance type's slice templates, by instance-type name.
    instance_types: FxHashMap<&'a str, Vec<u32>>,
    /// Published devices claims' `status.allocation` holds.
    allocated: Vec<u32>,
    claims: FxHashMap<(&'a str, &'a str), &'a ResourceClaim>,
    templates: FxHashMap<(&'a str, &'a str), &'a ResourceClaimTemplate>,
    classes: FxHashMap<&'a str, &'a DeviceClass>,
    /// Matching devices (and the first selector error) per (device class, request selectors), or why the
    /// selectors cannot be used: the replicas of a workload ask the same, and a disruption pass's many
    /// simulations share the index, so CEL runs once per pass.
    matched: Mutex<FxHashMap<SelectorKey, Result<Matched, ResolveError>>>,
}

impl<'a> DraIndex<'a> {
    pub(crate) fn new(dra: &'a DraObjects, instance_types: impl IntoIterator<Item = &'a InstanceType>) -> Self {
        let mut index = DraIndex {
            devices: Vec::new(),
            node_local: FxHashMap::default(),
            selected: Vec::new(),
            all_nodes: Vec::new(),
            instance_types: FxHashMap::default(),
            allocated: Vec::new(),
            claims: dra.claims.iter().map(|c| ((c.namespace.as_str(), c.name.as_str()), c)).collect(),
            templates: dra.templates.iter().map(|t| ((t.namespace.as_str(), t.name.as_str()), t)).collect(),
            classes: dra.classes.iter().map(|c| (c.name.as_str(), c)).collect(),
            matched: Mutex::new(FxHashMap::default()),
        };
        let mut published: FxHashMap<(&str, &str, &str), u32> = FxHashMap::default();
        for slice in &dra.slices {
            let mut ids = Vec::with_capacity(slice.devices.len());
            for device in &slice.devices {
                let id = index.push(&slice.driver, device);
                published.insert((slice.driver.as_str(), slice.pool.name.as_str(), device.name.as_str()), id);
                ids.push(id);
            }
            match &slice.nodes {
                SliceNodes::Node(n) => index.node_local.entry(n.as_str()).or_default().extend(ids),
                SliceNodes::Selector(s) => index.selected.push((NodeMatch::new(s), ids)),
                SliceNodes::All => index.all_nodes.extend(ids),
            }
        }
        for it in instance_types {
            if it.dynamic_resources.is_empty() || index.instance_types.contains_key(it.name.as_str()) {
                continue;
            }
            let mut ids = Vec::new();
            for template in it.dynamic_resources.iter() {
                for device in &template.devices {
                    ids.push(index.push(&template.driver, device));
                }
            }
            index.instance_types.insert(it.name.as_str(), ids);
        }
        let held = dra.claims.iter().flat_map(|c| c.allocation.iter().flat_map(|a| &a.devices));
        index.allocated = held
            .filter_map(|d| published.get(&(d.driver.as_str(), d.pool.as_str(), d.device.as_str())).copied())
            .collect();
        index
    }

    fn push(&mut self, driver: &'a str, device: &'a Device) -> u32 {
        self.devices.push(DeviceEntry { driver, device });
        (self.devices.len() - 1) as u32
    }

    /// The devices `node` offers (sorted ids): published ones once initialized, else its instance type's (none
    /// while the type is not known: an in-flight claim with several options may launch any of them).
    fn node_view(&self, node: &ExistingNode) -> NodeView {
        if node.initialized && !node.in_flight {
            let mut ids: Vec<u32> = self.node_local.get(node.name.as_str()).cloned().unwrap_or_default();
            for (m, devices) in &self.selected {
                if m.matches(&node.name, &node.requirements) {
                    ids.extend(devices);
                }
            }
            ids.extend(&self.all_nodes);
            ids.sort_unstable();
            ids.dedup();
            return NodeView::Published(ids);
        }
        let it = node
            .requirements
            .get_ref(labels::INSTANCE_TYPE)
            .filter(|r| !r.complement() && r.values().len() == 1)
            .and_then(|r| r.values().first().map(|v| v.to_string()));
        NodeView::Template(it.and_then(|it| self.instance_types.get(it.as_str()).cloned()).unwrap_or_default())
    }

    fn it_devices(&self, it: &str) -> &[u32] {
        self.instance_types.get(it).map_or(&[], Vec::as_slice)
    }
}

/// What an existing node offers.
#[derive(Debug, Clone)]
enum NodeView {
    /// Published devices, shared with the pass's [`Allocator`].
    Published(Vec<u32>),
    /// Its instance type's template devices, its own.
    Template(Vec<u32>),
}

/// One way to satisfy a request, with the devices that match its class and selectors.
#[derive(Debug, Clone)]
pub(crate) struct Alternative {
    mode: AllocationMode,
    /// Sorted ids of the matching devices.
    matches: Vec<u32>,
}

/// A claim a pod uses, resolved.
#[derive(Debug, Clone)]
struct PassClaim {
    /// `ResourceClaim namespace/name`, or the pod's claim entry and template for a claim not created yet.
    name: String,
    /// Per request, its alternatives in order.
    requests: Vec<Vec<Alternative>>,
    /// Why a request can match no device (a class missing, a selector that errs on every device), for reasons.
    describe: Vec<String>,
    /// Allocated already (`status.allocation`): the nodes it is reachable from (`None`: every node).
    allocated: Option<Option<NodeMatch>>,
}

/// Where a claim was allocated during the solve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Where {
    Existing(usize),
    New(usize),
}

/// Published devices in use: held by claims' status or allocated during the solve.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Allocator {
    used: FxHashSet<u32>,
}

impl Allocator {
    pub(crate) fn new(held: impl IntoIterator<Item = u32>) -> Self {
        Allocator { used: held.into_iter().collect() }
    }

    pub(crate) fn is_used(&self, id: u32) -> bool {
        self.used.contains(&id)
    }

    /// Takes `devices`; `false` (and nothing taken) if one is in use already.
    pub(crate) fn commit(&mut self, devices: &[u32]) -> bool {
        if devices.iter().any(|d| self.used.contains(d)) {
            return false;
        }
        self.used.extend(devices.iter().copied());
        true
    }

    /// Gives `devices` back (a rollback of [`Allocator::commit`]). The solver itself never needs it: it commits
    /// only once every other check of the candidate passed, so a candidate that turns a pod down holds nothing,
    /// and each simulation starts from the index's allocations; the property test proves the two are inverse.
    #[cfg(test)]
    pub(crate) fn release(&mut self, devices: &[u32]) {
        for d in devices {
            self.used.remove(d);
        }
    }
}

/// Devices for every request of `requests` out of `view` (sorted ids), none of them `used`, each device for one
/// request only; alternatives are tried in order and the search backtracks. `None` when there is no way.
pub(crate) fn search(requests: &[&[Alternative]], view: &[u32], used: &dyn Fn(u32) -> bool) -> Option<Vec<u32>> {
    let mut taken = Vec::new();
    let mut steps = 0usize;
    search_from(requests, view, used, &mut taken, &mut steps).then_some(taken)
}

fn in_view(view: &[u32], id: u32) -> bool {
    view.binary_search(&id).is_ok()
}

fn search_from(
    requests: &[&[Alternative]],
    view: &[u32],
    used: &dyn Fn(u32) -> bool,
    taken: &mut Vec<u32>,
    steps: &mut usize,
) -> bool {
    let Some((first, rest)) = requests.split_first() else { return true };
    for alt in first.iter() {
        *steps += 1;
        if *steps > MAX_SEARCH_STEPS {
            return false;
        }
        let mark = taken.len();
        let free: Vec<u32> =
            alt.matches.iter().copied().filter(|&d| in_view(view, d) && !used(d) && !taken.contains(&d)).collect();
        match alt.mode {
            AllocationMode::All => {
                let all = alt.matches.iter().filter(|&&d| in_view(view, d)).count();
                if all == 0 || free.len() < all {
                    continue;
                }
                taken.extend(&free);
                if search_from(rest, view, used, taken, steps) {
                    return true;
                }
                taken.truncate(mark);
            }
            AllocationMode::ExactCount(n) => {
                if pick(&free, n as usize, 0, rest, view, used, taken, steps) {
                    return true;
                }
                taken.truncate(mark);
            }
        }
    }
    false
}

/// Chooses `n` more devices of `free[from..]` (in increasing position, so each set is tried once), then the
/// remaining requests.
#[allow(clippy::too_many_arguments)]
fn pick(
    free: &[u32],
    n: usize,
    from: usize,
    rest: &[&[Alternative]],
    view: &[u32],
    used: &dyn Fn(u32) -> bool,
    taken: &mut Vec<u32>,
    steps: &mut usize,
) -> bool {
    if n == 0 {
        return search_from(rest, view, used, taken, steps);
    }
    let mut k = from;
    while k + n <= free.len() {
        *steps += 1;
        if *steps > MAX_SEARCH_STEPS {
            return false;
        }
        let Some(&d) = free.get(k) else { return false };
        taken.push(d);
        if pick(free, n - 1, k + 1, rest, view, used, taken, steps) {
            return true;
        }
        taken.pop();
        k += 1;
    }
    false
}

/// A pod's claims could not be resolved (a per-pod reason; the pod waits for a later pass).
pub(crate) type ResolveError = String;

/// The DRA state of one solve.
#[derive(Debug)]
pub(crate) struct DraPass<'a> {
    index: Arc<DraIndex<'a>>,
    claims: Vec<PassClaim>,
    /// Per pod with claims: its claims (indices into `claims`).
    pod_claims: FxHashMap<usize, Vec<u32>>,
    placed: Vec<Option<Where>>,
    allocator: Allocator,
    /// Per existing node: what it offers, computed on first use.
    views: FxHashMap<usize, NodeView>,
    /// Per existing node offering template devices: the claims allocated on it.
    node_claims: FxHashMap<usize, Vec<u32>>,
}

/// What placing a pod on a candidate takes: published devices and the claims it allocates there.
#[derive(Debug, Default)]
pub(crate) struct Commit {
    devices: Vec<u32>,
    claims: Vec<u32>,
}

impl<'a> DraPass<'a> {
    /// Resolves the claims of `pods`; pods whose claims cannot be resolved get their reason in the result.
    pub(crate) fn new<'p>(
        index: Arc<DraIndex<'a>>,
        pods: impl Iterator<Item = (usize, &'p CompactPod)>,
    ) -> (Self, Vec<(usize, ResolveError)>) {
        let allocator = Allocator::new(index.allocated.iter().copied());
        let mut pass = DraPass {
            index,
            claims: Vec::new(),
            pod_claims: FxHashMap::default(),
            placed: Vec::new(),
            allocator,
            views: FxHashMap::default(),
            node_claims: FxHashMap::default(),
        };
        let mut errors = Vec::new();
        let mut resolver = Resolver::default();
        for (i, pod) in pods {
            match pass.resolve_pod(pod, &mut resolver) {
                Ok(Some(claims)) => {
                    pass.pod_claims.insert(i, claims);
                }
                Ok(None) => {}
                Err(e) => errors.push((i, e)),
            }
        }
        pass.placed = vec![None; pass.claims.len()];
        (pass, errors)
    }

    /// Whether pod `i` has claims (the hot path's only DRA cost for pods without).
    pub(crate) fn has_claims(&self, i: usize) -> bool {
        !self.pod_claims.is_empty() && self.pod_claims.contains_key(&i)
    }

    fn resolve_pod(&mut self, pod: &CompactPod, resolver: &mut Resolver) -> Result<Option<Vec<u32>>, ResolveError> {
        let Some(refs) = pod.spec.resource_claims.as_ref().filter(|c| !c.is_empty()) else { return Ok(None) };
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let generated = pod.status.as_ref().and_then(|s| s.resource_claim_statuses.as_ref());
        let mut out = Vec::with_capacity(refs.len());
        for r in refs {
            let generated_name = generated
                .and_then(|g| g.iter().find(|s| s.name == r.name))
                .and_then(|s| s.resource_claim_name.as_deref());
            let named = r.resource_claim_name.as_deref().or(generated_name);
            let index = Arc::clone(&self.index);
            let id = match (named, r.resource_claim_template_name.as_deref()) {
                (Some(name), _) => match index.claims.get(&(ns, name)) {
                    Some(claim) => {
                        let name = format!("ResourceClaim {ns}/{name}");
                        self.claim_id(resolver, name, &claim.spec, claim.allocation.as_ref())?
                    }
                    None => return Err(format!("ResourceClaim {ns}/{name} not found")),
                },
                (None, Some(template)) => match index.templates.get(&(ns, template)) {
                    Some(t) => {
                        // The claim the API server will make for this pod: one per pod and entry.
                        let name =
                            format!("claim {} of pod {} (ResourceClaimTemplate {ns}/{template})", r.name, pod.key());
                        self.claim_id(resolver, name, &t.spec, None)?
                    }
                    None => return Err(format!("ResourceClaimTemplate {ns}/{template} not found")),
                },
                (None, None) => {
                    return Err(format!("resource claim {:?} names neither a claim nor a template", r.name));
                }
            };
            out.push(id);
        }
        Ok(Some(out))
    }

    fn claim_id(
        &mut self,
        resolver: &mut Resolver,
        name: String,
        spec: &ClaimSpec,
        allocation: Option<&karpenter_api::dra::Allocation>,
    ) -> Result<u32, ResolveError> {
        if let Some(&id) = resolver.by_name.get(&name) {
            return Ok(id);
        }
        let mut requests = Vec::with_capacity(spec.requests.len());
        let mut describe = Vec::with_capacity(spec.requests.len());
        for request in &spec.requests {
            let mut alts = Vec::with_capacity(request.alternatives.len());
            let mut notes = Vec::new();
            for alt in &request.alternatives {
                let (matches, note) = resolver.matches(&self.index, alt)?;
                notes.push(note);
                alts.push(Alternative { mode: alt.mode, matches });
            }
            requests.push(alts);
            describe.push(format!("request {}: {}", request.name, notes.join(", or ")));
        }
        let allocated = allocation.map(|a| a.node_selector.as_ref().map(NodeMatch::new));
        self.claims.push(PassClaim { name: name.clone(), requests, describe, allocated });
        let id = (self.claims.len() - 1) as u32;
        resolver.by_name.insert(name, id);
        Ok(id)
    }

    fn claims_of(&self, i: usize) -> &[u32] {
        self.pod_claims.get(&i).map_or(&[], Vec::as_slice)
    }

    fn claim(&self, c: u32) -> Option<&PassClaim> {
        self.claims.get(c as usize)
    }

    fn requests_of<'s>(&'s self, claims: &[u32]) -> Vec<&'s [Alternative]> {
        claims.iter().filter_map(|&c| self.claim(c)).flat_map(|c| c.requests.iter().map(Vec::as_slice)).collect()
    }

    /// The pod's claims still to allocate on `at`, or why `at` cannot take it (a claim allocated elsewhere).
    fn to_allocate(&self, i: usize, at: Where, node: Option<(&str, &Requirements)>) -> Result<Vec<u32>, String> {
        let mut out = Vec::new();
        for &c in self.claims_of(i) {
            let Some(claim) = self.claim(c) else { continue };
            match self.placed.get(c as usize).copied().flatten() {
                Some(w) if w == at => continue,
                Some(_) => {
                    return Err(format!("{} is allocated on another node in this pass", claim.name));
                }
                None => {}
            }
            match (&claim.allocated, node) {
                (None, _) => out.push(c),
                (Some(None), _) => {}
                (Some(Some(m)), Some((name, reqs))) if m.matches(name, reqs) => {}
                (Some(Some(_)), _) => {
                    return Err(format!("{} is allocated to devices of another node", claim.name));
                }
            }
        }
        Ok(out)
    }

    /// Whether existing node `n` can hold pod `i`'s claims, and what placing it there takes.
    pub(crate) fn check_existing(&mut self, i: usize, n: usize, node: &ExistingNode) -> Option<Commit> {
        let claims = self.to_allocate(i, Where::Existing(n), Some((&node.name, &node.requirements))).ok()?;
        if claims.is_empty() {
            return Some(Commit::default());
        }
        let index = Arc::clone(&self.index);
        let view = self.views.entry(n).or_insert_with(|| index.node_view(node)).clone();
        match view {
            NodeView::Published(ids) => {
                let requests = self.requests_of(&claims);
                let devices = search(&requests, &ids, &|d| self.allocator.is_used(d))?;
                Some(Commit { devices, claims })
            }
            NodeView::Template(ids) => {
                let mut all = self.node_claims.get(&n).cloned().unwrap_or_default();
                all.extend(&claims);
                search(&self.requests_of(&all), &ids, &|_| false)?;
                Some(Commit { devices: Vec::new(), claims })
            }
        }
    }

    /// Records pod `i` on existing node `n` (after [`DraPass::check_existing`] said yes).
    pub(crate) fn commit_existing(&mut self, n: usize, commit: Commit) {
        let committed = self.allocator.commit(&commit.devices);
        debug_assert!(committed, "check_existing only offers free devices");
        if matches!(self.views.get(&n), Some(NodeView::Template(_))) {
            self.node_claims.entry(n).or_default().extend(&commit.claims);
        }
        for c in commit.claims {
            if let Some(p) = self.placed.get_mut(c as usize) {
                *p = Some(Where::Existing(n));
            }
        }
    }

    /// Of the instance types `its` (with the new claim `c`'s claims `on_claim`), those whose slice templates hold
    /// every claim of the claim and of pod `i`; `Err` with the reason when none does.
    pub(crate) fn filter_new(
        &self,
        i: usize,
        c: usize,
        on_claim: &[u32],
        its: &[(u32, &str)],
    ) -> Result<(Vec<u32>, Vec<u32>), String> {
        let claims = self.to_allocate(i, Where::New(c), None)?;
        if claims.is_empty() {
            return Ok((its.iter().map(|(k, _)| *k).collect(), claims));
        }
        let mut all = on_claim.to_vec();
        all.extend(&claims);
        let requests = self.requests_of(&all);
        let kept: Vec<u32> = its
            .iter()
            .filter(|(_, name)| search(&requests, self.index.it_devices(name), &|_| false).is_some())
            .map(|(k, _)| *k)
            .collect();
        if kept.is_empty() {
            let what: Vec<String> = claims
                .iter()
                .filter_map(|&c| self.claim(c))
                .map(|c| format!("{} ({})", c.name, c.describe.join("; ")))
                .collect();
            return Err(format!("no instance type offers the devices of {}", what.join(" and ")));
        }
        Ok((kept, claims))
    }

    /// Records claims allocated on new claim `c`.
    pub(crate) fn commit_new(&mut self, c: usize, claims: &[u32]) {
        for &k in claims {
            if let Some(p) = self.placed.get_mut(k as usize) {
                *p = Some(Where::New(c));
            }
        }
    }

    /// The DRA drivers a new claim with `claims` relies on, over its instance types `its`.
    pub(crate) fn drivers(&self, claims: &[u32], its: &[&str]) -> Vec<String> {
        let requests = self.requests_of(claims);
        let mut drivers = BTreeSet::new();
        for it in its {
            if let Some(devices) = search(&requests, self.index.it_devices(it), &|_| false) {
                drivers.extend(devices.iter().filter_map(|&d| self.index.devices.get(d as usize)).map(|e| e.driver));
            }
        }
        drivers.into_iter().map(str::to_owned).collect()
    }
}

/// The devices matching a class and selectors, and the first selector error seen.
type Matched = (Vec<u32>, Option<String>);

/// A device class and a request's selectors.
type SelectorKey = (String, Vec<String>);

/// Compiles selectors and evaluates them on devices (results cached in the index).
#[derive(Default)]
struct Resolver {
    env: Option<SelectorEnv>,
    /// Each device's CEL value, built on first use.
    values: FxHashMap<u32, CelValue>,
    /// Claims resolved so far, by name.
    by_name: FxHashMap<String, u32>,
}

impl Resolver {
    /// The devices matching `alt` (class selectors and its own), and a description of what it asks for.
    fn matches(&mut self, index: &DraIndex<'_>, alt: &RequestAlternative) -> Result<(Vec<u32>, String), ResolveError> {
        let key = (alt.device_class_name.clone(), alt.selectors.clone());
        let cached = index.matched.lock().ok().and_then(|m| m.get(&key).cloned());
        let (matches, first_error) = match cached {
            Some(m) => m?,
            None => {
                let m = self.evaluate(index, alt);
                if let Ok(mut cache) = index.matched.lock() {
                    cache.insert(key, m.clone());
                }
                m?
            }
        };
        let count = match alt.mode {
            AllocationMode::ExactCount(n) => format!("{n} device(s)"),
            AllocationMode::All => "all devices".to_owned(),
        };
        let mut note = format!("{count} of class {}", alt.device_class_name);
        if !alt.selectors.is_empty() {
            note.push_str(&format!(" matching {}", alt.selectors.join(" && ")));
        }
        if matches.is_empty()
            && let Some(e) = first_error
        {
            note.push_str(&format!(" ({e})"));
        }
        Ok((matches, note))
    }

    /// Evaluates `alt`'s class and request selectors on every device: the matching ids and the first error.
    fn evaluate(&mut self, index: &DraIndex<'_>, alt: &RequestAlternative) -> Result<Matched, ResolveError> {
        let class = index
            .classes
            .get(alt.device_class_name.as_str())
            .ok_or_else(|| format!("DeviceClass {:?} not found", alt.device_class_name))?;
        let compile = |expr: &String, whose: &str| {
            DeviceSelector::compile(expr).map_err(|e| format!("{whose}: invalid CEL selector {expr:?}: {e}"))
        };
        let mut selectors = Vec::new();
        for s in &class.selectors {
            selectors.push(compile(s, &format!("DeviceClass {}", class.name))?);
        }
        for s in &alt.selectors {
            selectors.push(compile(s, &format!("request {}", alt.name))?);
        }
        let env = self.env.get_or_insert_with(SelectorEnv::new);
        let mut matches = Vec::new();
        let mut first_error = None;
        for (id, entry) in index.devices.iter().enumerate() {
            let id = id as u32;
            let value = self.values.entry(id).or_insert_with(|| env.device_value(entry.driver, entry.device));
            let mut ok = true;
            for s in &selectors {
                match env.matches(s, value) {
                    Ok(true) => {}
                    Ok(false) => ok = false,
                    Err(e) => {
                        first_error.get_or_insert(e);
                        ok = false;
                    }
                }
                if !ok {
                    break;
                }
            }
            if ok {
                matches.push(id);
            }
        }
        Ok((matches, first_error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn alt(mode: AllocationMode, matches: &[u32]) -> Alternative {
        let mut matches = matches.to_vec();
        matches.sort_unstable();
        matches.dedup();
        Alternative { mode, matches }
    }

    #[test]
    fn search_backtracks_and_tries_alternatives_in_order() {
        // Greedy would give device 0 to the first request and leave the second (only device 0) without.
        let a = [alt(AllocationMode::ExactCount(1), &[0, 1])];
        let b = [alt(AllocationMode::ExactCount(1), &[0])];
        assert_eq!(search(&[&a, &b], &[0, 1], &|_| false), Some(vec![1, 0]));
        assert_eq!(search(&[&a, &b], &[0, 1], &|d| d == 0), None, "device 0 is in use");
        // firstAvailable: the first alternative that fits wins.
        let first = [alt(AllocationMode::ExactCount(2), &[5, 6]), alt(AllocationMode::ExactCount(1), &[7])];
        assert_eq!(search(&[&first], &[5, 7], &|_| false), Some(vec![7]), "only one of 5, 6 is on the node");
        assert_eq!(search(&[&first], &[5, 6, 7], &|_| false), Some(vec![5, 6]));
        // All: every matching device on the node, and at least one; one in use means none.
        let all = [alt(AllocationMode::All, &[1, 2, 3])];
        assert_eq!(search(&[&all], &[1, 2, 9], &|_| false), Some(vec![1, 2]));
        assert_eq!(search(&[&all], &[1, 2, 9], &|d| d == 2), None);
        assert_eq!(search(&[&all], &[9], &|_| false), None);
        assert_eq!(search(&[], &[], &|_| false), Some(vec![]), "no requests: nothing to allocate");
    }

    fn requests() -> impl Strategy<Value = Vec<Vec<(bool, u32, Vec<u32>)>>> {
        let alt = (any::<bool>(), 1u32..3, proptest::collection::vec(0u32..12, 0..6));
        proptest::collection::vec(proptest::collection::vec(alt, 1..3), 0..4)
    }

    fn to_alts(raw: &[Vec<(bool, u32, Vec<u32>)>]) -> Vec<Vec<Alternative>> {
        raw.iter()
            .map(|r| {
                r.iter()
                    .map(|(all, n, m)| alt(if *all { AllocationMode::All } else { AllocationMode::ExactCount(*n) }, m))
                    .collect()
            })
            .collect()
    }

    proptest! {
        /// Whatever is asked, an allocation never hands out a device twice, never one in use, never one the
        /// node does not see, and gives each ExactCount request its count; committing it then releasing it
        /// restores the allocator exactly.
        #[test]
        fn allocations_are_disjoint_and_rollback_restores(
            batches in proptest::collection::vec(requests(), 1..5),
            view in proptest::collection::btree_set(0u32..12, 0..12),
            held in proptest::collection::btree_set(0u32..12, 0..4),
        ) {
            let view: Vec<u32> = view.into_iter().collect();
            let mut allocator = Allocator::new(held.iter().copied());
            let mut committed: Vec<Vec<u32>> = Vec::new();
            for raw in &batches {
                let alts = to_alts(raw);
                let reqs: Vec<&[Alternative]> = alts.iter().map(Vec::as_slice).collect();
                let before = allocator.clone();
                if let Some(devices) = search(&reqs, &view, &|d| allocator.is_used(d)) {
                    let distinct: BTreeSet<u32> = devices.iter().copied().collect();
                    prop_assert_eq!(distinct.len(), devices.len(), "a device twice in one allocation");
                    prop_assert!(devices.iter().all(|d| view.contains(d) && !allocator.is_used(*d)));
                    prop_assert!(devices.len() >= reqs.len(), "every request gets a device");
                    prop_assert!(allocator.commit(&devices));
                    let mut probe = allocator.clone();
                    probe.release(&devices);
                    prop_assert_eq!(&probe, &before, "release undoes commit");
                    committed.push(devices);
                } else {
                    prop_assert_eq!(&allocator, &before, "a failed search takes nothing");
                }
            }
            let all: Vec<u32> = committed.iter().flatten().copied().collect();
            let distinct: BTreeSet<u32> = all.iter().copied().collect();
            prop_assert_eq!(distinct.len(), all.len(), "no device allocated twice across pods");
            prop_assert!(all.iter().all(|d| !held.contains(d)), "devices held by claims' status are never reused");
            for devices in committed.iter().rev() {
                allocator.release(devices);
            }
            prop_assert_eq!(allocator, Allocator::new(held.iter().copied()), "rolling everything back restores");
        }
    }
}
