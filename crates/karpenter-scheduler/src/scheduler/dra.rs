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
//! Only complete pools of their newest generation are published devices. Per candidate: an initialized existing
//! node offers the devices published for it (node-name slices, slices whose node selector matches it, all-nodes
//! slices) minus the allocated ones; a node not initialized yet, an in-flight NodeClaim and a new NodeClaim offer
//! the slice templates of their instance type and the shared published devices they are certain to see (all-nodes
//! slices, node-selector slices their requirements imply), searched jointly for every claim placed on them (a new
//! NodeClaim keeps the instance types that hold all of its claims); the shared devices such a candidate holds are
//! replaced by each new joint search's. A
//! claim shared by several pods is allocated once and pins the others to its node; a claim allocated already
//! pins its pods to the nodes its allocation's node selector names. Published devices are taken from a
//! shared [`Allocator`] only when the pod is placed, so a candidate that turns the pod down holds nothing.
//!
//! Which devices satisfy a candidate's claims is [`search`]'s (`device_search.rs`): it takes match and distinct
//! attribute constraints, admin access and shared counters into account as it goes. Device taints are settled here, once per
//! request: a device with a taint the request does not tolerate is not among its matches.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::NodeSelector;
use karpenter_api::dra::{
    AllocationMode, ClaimSpec, DeviceClass, DeviceConstraint, DraObjects, PoolGenerations, RequestAlternative,
    ResourceClaim, ResourceClaimTemplate, ResourceSlice, SliceNodes,
};
use karpenter_api::{CompactPod, labels};
use karpenter_requirements::{Device, InstanceType, NoKeys, Operator, Requirement, Requirements, tolerates_all};
use rustc_hash::FxHashMap;

use super::device_cel::{CelValue, DeviceSelector, SelectorEnv};
use super::device_search::{
    Allocator, Alternative, Constraint, CounterIds, DeviceEntry, DeviceTable, Req, Taken, search, search_again,
};
use super::templates::ExistingNode;

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

    /// Whether a node launched with requirements `node` is certain to match: some term's every expression is
    /// implied by them. A node not launched yet has no name (a `matchFields` term is never certain) and its
    /// hostname label is a placeholder.
    fn implied_by(&self, node: &Requirements) -> bool {
        self.0.iter().any(|t| {
            t.names.is_none()
                && t.requirements.iter().all(|r| r.key() != labels::HOSTNAME && implied(r, node.get_ref(r.key())))
        })
    }
}

/// Whether every node allowed by `node` (its requirement on the selector's key, `None` when it has none) has a
/// label `selector` matches. Conservative: a label the requirements do not pin is never certain, and a node
/// requirement that allows the label to be absent only implies a selector that matches absence too (`NotIn`).
fn implied(selector: &Requirement, node: Option<&Requirement>) -> bool {
    let Some(node) = node else { return false };
    let not_in = selector.operator() == Operator::NotIn && selector.gte().is_none() && selector.lte().is_none();
    if node.complement() {
        // NotIn / Exists on the node: any value but the excluded ones, or none.
        return not_in && selector.values().as_slice().iter().all(|v| node.values().contains(v));
    }
    if node.values().is_empty() {
        // DoesNotExist: the label is absent.
        return not_in || selector.operator() == Operator::DoesNotExist;
    }
    node.values().as_slice().iter().all(|v| selector.has(v))
}

/// The DRA objects of a pass, indexed (independent of the pods; shared by a disruption pass's simulations).
#[derive(Debug)]
pub(crate) struct DraIndex<'a> {
    /// Every device, published or promised, and every shared counter.
    table: DeviceTable<'a>,
    /// Some device has a taint (else tolerations need no look).
    tainted: bool,
    /// Published devices local to one node, by node name.
    node_local: FxHashMap<&'a str, Vec<u32>>,
    /// Published devices of node-selector slices.
    selected: Vec<(NodeMatch, Vec<u32>)>,
    /// Published devices every node sees (sorted).
    all_nodes: Vec<u32>,
    /// Ids below are slice templates' devices, the rest published ones (templates come first so that a search
    /// over a candidate's own devices and shared published ones prefers its own).
    templates_end: u32,
    /// Devices of each instance type's slice templates, by instance-type name.
    instance_types: FxHashMap<&'a str, Vec<u32>>,
    /// Published devices claims' `status.allocation` holds.
    allocated: Vec<u32>,
    /// Pools left out because their newest generation's slices are not all there, described for reasons.
    incomplete: Vec<String>,
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
            table: DeviceTable::default(),
            tainted: false,
            node_local: FxHashMap::default(),
            selected: Vec::new(),
            all_nodes: Vec::new(),
            templates_end: 0,
            instance_types: FxHashMap::default(),
            allocated: Vec::new(),
            incomplete: Vec::new(),
            claims: dra.claims.iter().map(|c| ((c.namespace.as_str(), c.name.as_str()), c)).collect(),
            templates: dra.templates.iter().map(|t| ((t.namespace.as_str(), t.name.as_str()), t)).collect(),
            classes: dra.classes.iter().map(|c| (c.name.as_str(), c)).collect(),
            matched: Mutex::new(FxHashMap::default()),
        };
        for it in instance_types {
            if it.dynamic_resources.is_empty() || index.instance_types.contains_key(it.name.as_str()) {
                continue;
            }
            let mut ids = Vec::new();
            for template in it.dynamic_resources.iter() {
                // Each node of the type has its own counters; a search over template devices starts from none used.
                let mut sets = FxHashMap::default();
                index.table.add_counters(&mut sets, &template.shared_counters);
                for device in &template.devices {
                    ids.push(index.push(&template.driver, device, Some(&sets)));
                }
            }
            index.instance_types.insert(it.name.as_str(), ids);
        }
        index.templates_end = index.table.devices.len() as u32;
        let mut published: FxHashMap<(&str, &str, &str), u32> = FxHashMap::default();
        let (slices, incomplete) = complete_pools(&dra.slices);
        index.incomplete = incomplete;
        // Counter sets are the pool's (1.33 keeps them in the device's slice; later versions anywhere in its pool).
        let mut pool_counters: FxHashMap<(&str, &str), CounterIds<'a>> = FxHashMap::default();
        for slice in slices.iter().copied() {
            let sets = pool_counters.entry((slice.driver.as_str(), slice.pool.name.as_str())).or_default();
            index.table.add_counters(sets, &slice.shared_counters);
        }
        for slice in slices {
            let sets = pool_counters.get(&(slice.driver.as_str(), slice.pool.name.as_str()));
            let mut ids = Vec::with_capacity(slice.devices.len());
            for device in &slice.devices {
                let id = index.push(&slice.driver, device, sets);
                published.insert((slice.driver.as_str(), slice.pool.name.as_str(), device.name.as_str()), id);
                ids.push(id);
            }
            match &slice.nodes {
                SliceNodes::Node(n) => index.node_local.entry(n.as_str()).or_default().extend(ids),
                SliceNodes::Selector(s) => index.selected.push((NodeMatch::new(s), ids)),
                SliceNodes::All => index.all_nodes.extend(ids),
            }
        }
        index.all_nodes.sort_unstable();
        let held = dra.claims.iter().flat_map(|c| c.allocation.iter().flat_map(|a| &a.devices));
        index.allocated = held
            .filter_map(|d| published.get(&(d.driver.as_str(), d.pool.as_str(), d.device.as_str())).copied())
            .collect();
        index
    }

    fn push(&mut self, driver: &'a str, device: &'a Device, sets: Option<&CounterIds<'a>>) -> u32 {
        let consumes = self.table.consumption(sets, &device.consumes_counters);
        self.tainted |= !device.taints.is_empty();
        self.table.devices.push(DeviceEntry { driver, device, consumes });
        (self.table.devices.len() - 1) as u32
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
        let own = it.and_then(|it| self.instance_types.get(it.as_str())).map_or(&[][..], Vec::as_slice);
        NodeView::Template(self.with_shared(own, &node.requirements))
    }

    /// Whether some published devices are shared by several nodes (all-nodes and node-selector slices).
    fn has_shared(&self) -> bool {
        !self.all_nodes.is_empty() || !self.selected.is_empty()
    }

    /// `own` (a candidate's template devices, sorted) with the shared published devices a node launched with
    /// `requirements` is certain to see.
    fn with_shared(&self, own: &[u32], requirements: &Requirements) -> Vec<u32> {
        let mut ids = own.to_vec();
        ids.extend(&self.all_nodes);
        for (m, devices) in &self.selected {
            if m.implied_by(requirements) {
                ids.extend(devices);
            }
        }
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Whether device `id` is published (else a slice template's).
    fn is_published(&self, id: u32) -> bool {
        id >= self.templates_end
    }

    /// Drops from `matches` the devices with a taint `alt` does not tolerate; the first such taint, if any.
    fn untolerated(&self, matches: &mut Vec<u32>, alt: &RequestAlternative) -> Option<String> {
        if !self.tainted {
            return None;
        }
        let mut first = None;
        matches.retain(|&d| {
            let taints = self.table.devices.get(d as usize).map_or(&[][..], |e| e.device.taints.as_slice());
            match tolerates_all(&alt.tolerations, taints) {
                Ok(()) => true,
                Err(e) => {
                    first.get_or_insert(e.taint);
                    false
                }
            }
        });
        first
    }

    fn it_devices(&self, it: &str) -> &[u32] {
        self.instance_types.get(it).map_or(&[], Vec::as_slice)
    }
}

/// The slices whose devices are offered: those of their pool's newest generation when it is complete (a pool
/// being updated may be half old, half new); and the pools left out, described.
fn complete_pools(slices: &[ResourceSlice]) -> (Vec<&ResourceSlice>, Vec<String>) {
    let mut pools = PoolGenerations::default();
    for s in slices {
        pools.add(&s.driver, &s.pool.name, s.pool.generation, s.pool.resource_slice_count);
    }
    let usable = slices.iter().filter(|s| pools.usable(&s.driver, &s.pool.name, s.pool.generation)).collect();
    (usable, pools.incomplete())
}

/// What an existing node offers.
#[derive(Debug, Clone)]
enum NodeView {
    /// Published devices, shared with the pass's [`Allocator`].
    Published(Vec<u32>),
    /// Its instance type's template devices, its own, and the shared published devices it is certain to see.
    Template(Vec<u32>),
}

/// A claim a pod uses, resolved.
#[derive(Debug, Clone)]
struct PassClaim {
    /// `ResourceClaim namespace/name`, or the pod's claim entry and template for a claim not created yet.
    name: String,
    /// Per request, its alternatives in order.
    requests: Vec<Vec<Alternative>>,
    /// Its constraints (alternatives refer to them by index).
    constraints: Vec<DeviceConstraint>,
    /// Why a request can match no device (a class missing, a selector that errs on every device), for reasons.
    describe: Vec<String>,
    /// Allocated already (`status.allocation`): the nodes it is reachable from (`None`: every node).
    allocated: Option<Option<NodeMatch>>,
}

/// The node a pod's claims are checked for: an existing one (its name and requirements) or a new one.
#[derive(Debug, Clone, Copy)]
enum Target<'r> {
    Node(&'r str, &'r Requirements),
    New,
}

/// Where a claim was allocated during the solve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Where {
    Existing(usize),
    New(usize),
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
    /// Per candidate searched jointly for all its claims: the shared published devices its last search took.
    mine: FxHashMap<Where, Vec<u32>>,
}

/// What placing a pod on a candidate takes: published devices and the claims it allocates there.
#[derive(Debug, Default)]
pub(crate) struct Commit {
    devices: Vec<u32>,
    claims: Vec<u32>,
    /// `devices` replace what the candidate took before (a joint search), rather than add to it.
    replace: bool,
}

/// What a new NodeClaim can take for a pod: the instance types kept, the claims allocated and, when some are,
/// every shared published device the NodeClaim then holds.
#[derive(Debug, Default)]
pub(crate) struct NewDevices {
    pub(crate) its: Vec<u32>,
    pub(crate) claims: Vec<u32>,
    pub(crate) devices: Option<Vec<u32>>,
}

impl<'a> DraPass<'a> {
    /// Resolves the claims of `pods`; pods whose claims cannot be resolved get their reason in the result.
    pub(crate) fn new<'p>(
        index: Arc<DraIndex<'a>>,
        pods: impl Iterator<Item = (usize, &'p CompactPod)>,
    ) -> (Self, Vec<(usize, ResolveError)>) {
        let allocator = Allocator::new(&index.table, index.allocated.iter().copied());
        let mut pass = DraPass {
            index,
            claims: Vec::new(),
            pod_claims: FxHashMap::default(),
            placed: Vec::new(),
            allocator,
            views: FxHashMap::default(),
            node_claims: FxHashMap::default(),
            mine: FxHashMap::default(),
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
                // A constraint naming the request binds all its alternatives; one naming `request/sub`, that one.
                let constraints = spec
                    .constraints
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| {
                        c.requests.is_empty() || c.requests.iter().any(|r| *r == request.name || *r == alt.name)
                    })
                    .map(|(i, _)| i as u32)
                    .collect();
                alts.push(Alternative { mode: alt.mode, matches, admin: alt.admin_access, constraints });
            }
            requests.push(alts);
            describe.push(format!("request {}: {}", request.name, notes.join(", or ")));
        }
        for c in &spec.constraints {
            let over = if c.requests.is_empty() { "all requests".to_owned() } else { c.requests.join(", ") };
            let how = if c.distinct { "a different" } else { "the same" };
            describe.push(format!("{how} {} for {over}", c.attribute));
        }
        let constraints = spec.constraints.clone();
        let allocated = allocation.map(|a| a.node_selector.as_ref().map(NodeMatch::new));
        self.claims.push(PassClaim { name: name.clone(), requests, constraints, describe, allocated });
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

    /// The requests of `claims` and their constraints, for [`search`].
    fn requests_of<'s>(&'s self, claims: &[u32]) -> (Vec<Req<'s>>, Vec<Constraint<'s>>) {
        let mut requests = Vec::new();
        let mut constraints = Vec::new();
        for claim in claims.iter().filter_map(|&c| self.claim(c)) {
            let constraint_base = constraints.len() as u32;
            constraints.extend(claim.constraints.iter().map(|c| {
                if c.distinct { Constraint::Distinct(&c.attribute) } else { Constraint::Match(&c.attribute) }
            }));
            requests.extend(claim.requests.iter().map(|alts| Req { alts, constraint_base }));
        }
        (requests, constraints)
    }

    /// [`search`] for `claims` on the devices `view`, from `base` (`None`: a candidate's template devices).
    fn search(&self, claims: &[u32], view: &[u32], base: Option<&Allocator>) -> Option<Vec<Taken>> {
        let (requests, constraints) = self.requests_of(claims);
        search(&self.index.table, &requests, &constraints, view, base)
    }

    /// A joint search for every claim on candidate `at` over `view` (its template devices and shared published
    /// ones), the shared devices it holds counting as free.
    fn search_joint(&self, claims: &[u32], view: &[u32], at: Where) -> Option<Vec<Taken>> {
        let (requests, constraints) = self.requests_of(claims);
        let mine = self.mine.get(&at).map_or(&[][..], Vec::as_slice);
        search_again(&self.index.table, &requests, &constraints, view, Some(&self.allocator), mine)
    }

    /// The published devices of `taken` that are taken from others (sorted).
    fn shared_taken(&self, taken: &[Taken]) -> Vec<u32> {
        let mut out: Vec<u32> =
            taken.iter().filter(|t| !t.admin && self.index.is_published(t.id)).map(|t| t.id).collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Replaces the shared devices candidate `at` holds with `devices`.
    fn hold(&mut self, at: Where, devices: Vec<u32>) {
        if let Some(old) = self.mine.remove(&at) {
            self.allocator.release(&self.index.table, &old);
        }
        let committed = self.allocator.commit(&self.index.table, &devices);
        debug_assert!(committed, "a joint search only offers devices free apart from the candidate's own");
        if !devices.is_empty() {
            self.mine.insert(at, devices);
        }
    }

    /// The pod's claims still to allocate on `at`, or why `at` cannot take it (a claim allocated elsewhere).
    /// For a new node, claims allocated already to a node selector are pushed to `pinned`: whether the node is
    /// certain to match depends on the instance type.
    fn to_allocate(&self, i: usize, at: Where, node: Target<'_>, pinned: &mut Vec<u32>) -> Result<Vec<u32>, String> {
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
                (Some(Some(m)), Target::Node(name, reqs)) if m.matches(name, reqs) => {}
                (Some(Some(_)), Target::New) => pinned.push(c),
                (Some(Some(_)), _) => {
                    return Err(format!("{} is allocated to devices of another node", claim.name));
                }
            }
        }
        Ok(out)
    }

    /// Whether existing node `n` can hold pod `i`'s claims, and what placing it there takes.
    pub(crate) fn check_existing(&mut self, i: usize, n: usize, node: &ExistingNode) -> Option<Commit> {
        let claims = self
            .to_allocate(i, Where::Existing(n), Target::Node(&node.name, &node.requirements), &mut Vec::new())
            .ok()?;
        if claims.is_empty() {
            return Some(Commit::default());
        }
        let index = Arc::clone(&self.index);
        let view = self.views.entry(n).or_insert_with(|| index.node_view(node)).clone();
        match view {
            NodeView::Published(ids) => {
                let taken = self.search(&claims, &ids, Some(&self.allocator))?;
                // Admin access takes nothing from others.
                let devices = taken.iter().filter(|t| !t.admin).map(|t| t.id).collect();
                Some(Commit { devices, claims, replace: false })
            }
            NodeView::Template(ids) => {
                let mut all = self.node_claims.get(&n).cloned().unwrap_or_default();
                all.extend(&claims);
                let taken = self.search_joint(&all, &ids, Where::Existing(n))?;
                Some(Commit { devices: self.shared_taken(&taken), claims, replace: true })
            }
        }
    }

    /// Records pod `i` on existing node `n` (after [`DraPass::check_existing`] said yes).
    pub(crate) fn commit_existing(&mut self, n: usize, commit: Commit) {
        if commit.replace {
            self.hold(Where::Existing(n), commit.devices);
        } else {
            let committed = self.allocator.commit(&self.index.table, &commit.devices);
            debug_assert!(committed, "check_existing only offers free devices");
        }
        if matches!(self.views.get(&n), Some(NodeView::Template(_))) {
            self.node_claims.entry(n).or_default().extend(&commit.claims);
        }
        for c in commit.claims {
            if let Some(p) = self.placed.get_mut(c as usize) {
                *p = Some(Where::Existing(n));
            }
        }
    }

    /// Of the instance types `its` (with the new claim `c`'s claims `on_claim` and requirements `requirements`),
    /// those whose slice templates, with the shared published devices the node is certain to see, hold every
    /// claim of the claim and of pod `i`; `Err` with the reason when none does.
    ///
    /// The NodeClaim holds one set of shared devices whichever type it launches as: the first type that fits
    /// chooses them (its own devices first), and the other types are kept only if they fit with those.
    pub(crate) fn filter_new(
        &self,
        i: usize,
        c: usize,
        on_claim: &[u32],
        its: &[(u32, &InstanceType)],
        requirements: &Requirements,
    ) -> Result<NewDevices, String> {
        let mut pinned = Vec::new();
        let claims = self.to_allocate(i, Where::New(c), Target::New, &mut pinned)?;
        let pinned_its;
        let its = if pinned.is_empty() {
            its
        } else {
            pinned_its = self.pinned_its(&pinned, its, requirements)?;
            pinned_its.as_slice()
        };
        if claims.is_empty() {
            return Ok(NewDevices { its: its.iter().map(|(k, _)| *k).collect(), claims, devices: None });
        }
        let mut all = on_claim.to_vec();
        all.extend(&claims);
        let (kept, devices) = if self.index.has_shared() {
            self.fit_shared(&all, c, its, requirements)
        } else {
            let fits = |name: &str| self.search(&all, self.index.it_devices(name), None).is_some();
            (its.iter().filter(|(_, it)| fits(&it.name)).map(|(k, _)| *k).collect(), Vec::new())
        };
        if kept.is_empty() {
            let what: Vec<String> = claims
                .iter()
                .filter_map(|&c| self.claim(c))
                .map(|c| format!("{} ({})", c.name, c.describe.join("; ")))
                .collect();
            let mut reason = format!("no instance type offers the devices of {}", what.join(" and "));
            if !self.index.incomplete.is_empty() {
                reason.push_str(&format!(
                    "; published devices not offered while their pool is incomplete: {}",
                    self.index.incomplete.join(", ")
                ));
            }
            return Err(reason);
        }
        Ok(NewDevices { its: kept, claims, devices: Some(devices) })
    }

    /// Of `its`, the instance types whose nodes are certain to be among the nodes the allocations of `pinned`
    /// (claims allocated already) name.
    fn pinned_its<'i>(
        &self,
        pinned: &[u32],
        its: &[(u32, &'i InstanceType)],
        requirements: &Requirements,
    ) -> Result<Vec<(u32, &'i InstanceType)>, String> {
        let kept: Vec<(u32, &InstanceType)> = its
            .iter()
            .filter(|(_, it)| {
                let node = requirements.intersection(&it.requirements);
                pinned.iter().filter_map(|&c| self.claim(c)).all(|claim| match &claim.allocated {
                    Some(Some(m)) => m.implied_by(&node),
                    _ => true,
                })
            })
            .copied()
            .collect();
        if kept.is_empty() {
            let name = pinned.first().and_then(|&c| self.claim(c)).map_or("", |c| c.name.as_str());
            return Err(format!("{name} is allocated to devices of another node"));
        }
        Ok(kept)
    }

    /// [`DraPass::filter_new`]'s search when shared published devices exist: the types kept and the shared
    /// devices the NodeClaim holds.
    fn fit_shared(
        &self,
        all: &[u32],
        c: usize,
        its: &[(u32, &InstanceType)],
        requirements: &Requirements,
    ) -> (Vec<u32>, Vec<u32>) {
        let selectors = !self.index.selected.is_empty();
        let mut chosen: Option<Vec<u32>> = None;
        let mut kept = Vec::new();
        for (k, it) in its {
            let own = self.index.it_devices(&it.name);
            let mut view = if selectors {
                self.index.with_shared(own, &requirements.intersection(&it.requirements))
            } else {
                self.index.with_shared(own, &Requirements::new())
            };
            if let Some(held) = &chosen {
                view.retain(|d| !self.index.is_published(*d) || held.binary_search(d).is_ok());
            }
            if let Some(taken) = self.search_joint(all, &view, Where::New(c)) {
                chosen.get_or_insert_with(|| self.shared_taken(&taken));
                kept.push(*k);
            }
        }
        (kept, chosen.unwrap_or_default())
    }

    /// Records claims allocated on new claim `c`, and the shared devices it now holds (`None`: unchanged).
    pub(crate) fn commit_new(&mut self, c: usize, claims: &[u32], devices: Option<Vec<u32>>) {
        for &k in claims {
            if let Some(p) = self.placed.get_mut(k as usize) {
                *p = Some(Where::New(c));
            }
        }
        if let Some(devices) = devices {
            self.hold(Where::New(c), devices);
        }
    }

    /// The DRA drivers new claim `c` with `claims` waits for, over its instance types `its`: those of its own
    /// (slice-template) devices. Shared published devices are in their slices already: nothing to wait for.
    pub(crate) fn drivers(&self, c: usize, claims: &[u32], its: &[&str]) -> Vec<String> {
        let held = self.mine.get(&Where::New(c)).map_or(&[][..], Vec::as_slice);
        let mut drivers = BTreeSet::new();
        for it in its {
            let mut view = self.index.it_devices(it).to_vec();
            view.extend(held);
            view.sort_unstable();
            if let Some(taken) = self.search(claims, &view, None) {
                let own = taken.iter().filter(|t| !self.index.is_published(t.id));
                drivers.extend(own.filter_map(|t| self.index.table.devices.get(t.id as usize)).map(|e| e.driver));
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
        let (mut matches, first_error) = match cached {
            Some(m) => m?,
            None => {
                let m = self.evaluate(index, alt);
                if let Ok(mut cache) = index.matched.lock() {
                    cache.insert(key, m.clone());
                }
                m?
            }
        };
        let untolerated = index.untolerated(&mut matches, alt);
        let count = match alt.mode {
            AllocationMode::ExactCount(n) => format!("{n} device(s)"),
            AllocationMode::All => "all devices".to_owned(),
        };
        let mut note = format!("{count} of class {}", alt.device_class_name);
        if !alt.selectors.is_empty() {
            note.push_str(&format!(" matching {}", alt.selectors.join(" && ")));
        }
        if !alt.tolerations.is_empty() {
            note.push_str(&format!(" with {} toleration(s)", alt.tolerations.len()));
        }
        if alt.admin_access {
            note.push_str(" with admin access");
        }
        if matches.is_empty() {
            if let Some(taint) = untolerated {
                note.push_str(&format!(" (the matching devices have taints it does not tolerate: {taint})"));
            } else if let Some(e) = first_error {
                note.push_str(&format!(" ({e})"));
            }
        }
        Ok((matches, note))
    }

    /// Evaluates `alt`'s class and request selectors on every device: the matching ids and the first error.
    fn evaluate(&mut self, index: &DraIndex<'_>, alt: &RequestAlternative) -> Result<Matched, ResolveError> {
        let class = index
            .classes
            .get(alt.device_class_name.as_str())
            .ok_or_else(|| format!("DeviceClass {:?} not found", alt.device_class_name))?;
        let compile = |expr: &String, whose: &str| DeviceSelector::compile(expr).map_err(|e| format!("{whose}: {e}"));
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
        for (id, entry) in index.table.devices.iter().enumerate() {
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

    fn req(key: &str, op: Operator, values: &[&str]) -> Requirement {
        Requirement::new(key, op, values, None).expect("requirement")
    }

    #[test]
    fn a_selector_is_implied_only_by_requirements_that_pin_it() {
        use Operator::*;
        let sel_in = req("zone", In, &["a", "b"]);
        assert!(implied(&sel_in, Some(&req("zone", In, &["a"]))));
        assert!(implied(&sel_in, Some(&req("zone", In, &["a", "b"]))));
        assert!(!implied(&sel_in, Some(&req("zone", In, &["a", "c"]))), "c is possible");
        assert!(!implied(&sel_in, Some(&req("zone", Exists, &[]))));
        assert!(!implied(&sel_in, Some(&req("zone", DoesNotExist, &[]))));
        assert!(!implied(&sel_in, None), "an unconstrained label is never certain");
        let exists = req("zone", Exists, &[]);
        assert!(implied(&exists, Some(&req("zone", In, &["a"]))));
        assert!(!implied(&exists, Some(&req("zone", NotIn, &["a"]))), "NotIn allows the label to be absent");
        let not_in = req("zone", NotIn, &["a"]);
        assert!(implied(&not_in, Some(&req("zone", NotIn, &["a", "b"]))));
        assert!(!implied(&not_in, Some(&req("zone", NotIn, &["b"]))));
        assert!(implied(&not_in, Some(&req("zone", DoesNotExist, &[]))));
        assert!(implied(&not_in, Some(&req("zone", In, &["b"]))));
        assert!(implied(&req("zone", DoesNotExist, &[]), Some(&req("zone", DoesNotExist, &[]))));
        let gt = req("gen", Gt, &["4"]);
        assert!(implied(&gt, Some(&req("gen", In, &["5", "6"]))));
        assert!(!implied(&gt, Some(&req("gen", In, &["4", "6"]))));
        assert!(!implied(&gt, Some(&req("gen", Gt, &["5"]))), "a bounded node requirement is not pinned");
    }
}
