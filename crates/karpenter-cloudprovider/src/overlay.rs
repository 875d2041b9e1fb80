//! NodeOverlays applied to a NodePool's instance types, and the [`Overlaid`] decorator that applies them to every
//! `instance_types` answer.
//!
//! An overlay selects, per instance type, the offerings its requirements are compatible with. The instance type's
//! side of that test is its own requirements plus the pool's `karpenter.sh/nodepool` and the template's labels
//! (every key the overlay names must be defined there, negative operators aside); each offering's requirements
//! then narrow it to offerings (capacity type, zone, reservation).
//! - **Price**: per offering, the first overlay in precedence order (higher weight first, equal weights by name
//!   descending) that sets a price and selects the offering wins: `price` replaces the price, `priceAdjustment`
//!   changes it (`PriceChange::apply`, never below zero).
//! - **Capacity**: per extended resource, the first overlay in precedence order that sets it and selects any
//!   offering of the type wins; the value is set on the type's capacity (added when absent, replacing the
//!   provider's value when present), so allocatable follows.
//!
//! [`evaluate`] finds overlays that cannot be applied: ones failing validation, and **conflicts**: two overlays of
//! equal weight that both set a price for a common offering, or the same capacity resource for a common instance
//! type, of any pool. Both sides of a conflict are reported, each naming the others. [`apply`] takes the overlays
//! left. Overlaid copies keep everything else of the instance type (requirements, overhead, volume attachment
//! limits); offerings and types an overlay changed carry `price_overlay_applied` / `capacity_overlay_applied`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, PoisonError, RwLock};

use async_trait::async_trait;
use karpenter_api::labels;
use karpenter_api::nodeclaim::ResourceQuantity;
use karpenter_api::nodeoverlay::{NodeOverlay, PriceChange, conditions, order_by_weight};
use karpenter_api::{NodeClaim, NodePool, ProviderLabels, Validate, ValidationContext};
use karpenter_requirements::{InstanceType, NoKeys, Quantity, Requirement, Requirements};

use crate::error::CloudProviderError;
use crate::provider::{CloudProvider, DriftReason, NodeClassKind, RepairPolicy};

/// Why an overlay is not applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OverlayProblem {
    /// It fails validation (the message lists the violations).
    Invalid(String),
    /// It conflicts with these overlays of the same weight.
    Conflict(BTreeSet<String>),
}

impl OverlayProblem {
    /// The condition reason for this problem (`RuntimeValidation` or `Conflict`).
    pub fn reason(&self) -> &'static str {
        match self {
            OverlayProblem::Invalid(_) => conditions::REASON_RUNTIME_VALIDATION,
            OverlayProblem::Conflict(_) => conditions::REASON_CONFLICT,
        }
    }
}

impl std::fmt::Display for OverlayProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OverlayProblem::Invalid(m) => write!(f, "invalid: {m}"),
            OverlayProblem::Conflict(with) => write!(
                f,
                "conflicts with NodeOverlay {} of the same weight (both set the price of a common offering or the same capacity resource of a common instance type)",
                with.iter().map(String::as_str).collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

/// An overlay in the form applying it needs: its requirements in the algebra and its parsed changes.
#[derive(Clone, Debug)]
struct Prepared {
    name: String,
    weight: i32,
    requirements: Requirements,
    price: Option<PriceChange>,
    capacity: Vec<(String, Quantity)>,
}

/// Prepares an overlay, or says why it cannot be applied.
fn prepare(overlay: &NodeOverlay, provider: &ProviderLabels) -> Result<Prepared, OverlayProblem> {
    let ctx = ValidationContext { provider: provider.clone() };
    let violations = overlay.validate(&ctx);
    if !violations.is_empty() {
        let text: Vec<String> = violations.iter().map(ToString::to_string).collect();
        return Err(OverlayProblem::Invalid(text.join("; ")));
    }
    let mut requirements = Requirements::new();
    for r in &overlay.spec.requirements {
        requirements.add(r.with_min_values().to_requirement().map_err(|e| OverlayProblem::Invalid(e.to_string()))?);
    }
    let mut capacity = Vec::new();
    for (name, q) in &overlay.spec.capacity {
        let q = q.parse().map_err(|e| OverlayProblem::Invalid(format!("spec.capacity[{name}]: {e}")))?;
        capacity.push((name.clone(), q));
    }
    Ok(Prepared {
        name: overlay.name().to_owned(),
        weight: overlay.spec.weight(),
        requirements,
        price: overlay.spec.price_change(),
        capacity,
    })
}

/// The labels a pool adds to each of its instance types for overlay matching: `karpenter.sh/nodepool` and the
/// template's labels.
fn pool_requirements(pool: &NodePool) -> Requirements {
    let mut reqs = Requirements::from_labels(pool.spec.template.metadata.labels.iter());
    if let Some(name) = pool.metadata.name.as_deref() {
        reqs.add(Requirement::in_values(labels::NODE_POOL, [name]));
    }
    reqs
}

/// The offerings (indices) of `it` the overlay applies to; empty when it does not apply to the type.
fn selected(p: &Prepared, it: &InstanceType, pool_reqs: &Requirements, well_known: &BTreeSet<String>) -> Vec<usize> {
    let mut type_reqs = it.requirements.clone();
    type_reqs.add_all(pool_reqs);
    if !type_reqs.compatible_ok(&p.requirements, &NoKeys) {
        return Vec::new();
    }
    it.offerings
        .iter()
        .enumerate()
        .filter(|(_, o)| o.is_compatible(&p.requirements, well_known))
        .map(|(i, _)| i)
        .collect()
}

/// Finds the overlays that cannot be applied, by name: invalid ones, and both sides of every conflict over the
/// given pools and their instance types.
pub fn evaluate(
    overlays: &[NodeOverlay],
    pools: &[(&NodePool, &[InstanceType])],
    provider: &ProviderLabels,
) -> BTreeMap<String, OverlayProblem> {
    let mut problems = BTreeMap::new();
    let mut prepared = Vec::new();
    for o in overlays {
        match prepare(o, provider) {
            Ok(p) => prepared.push(p),
            Err(e) => {
                problems.insert(o.name().to_owned(), e);
            }
        }
    }
    let well_known = provider.all_well_known();
    let mut conflicts: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (pool, its) in pools {
        let pool_reqs = pool_requirements(pool);
        for it in its.iter() {
            let sel: Vec<Vec<usize>> = prepared.iter().map(|p| selected(p, it, &pool_reqs, &well_known)).collect();
            for a in 0..prepared.len() {
                for b in a + 1..prepared.len() {
                    let (pa, pb) = (&prepared[a], &prepared[b]);
                    if pa.weight != pb.weight || sel[a].is_empty() || sel[b].is_empty() {
                        continue;
                    }
                    let price = pa.price.is_some() && pb.price.is_some() && sel[a].iter().any(|i| sel[b].contains(i));
                    let capacity = pa.capacity.iter().any(|(n, _)| pb.capacity.iter().any(|(m, _)| m == n));
                    if price || capacity {
                        conflicts.entry(pa.name.clone()).or_default().insert(pb.name.clone());
                        conflicts.entry(pb.name.clone()).or_default().insert(pa.name.clone());
                    }
                }
            }
        }
    }
    for (name, with) in conflicts {
        problems.insert(name, OverlayProblem::Conflict(with));
    }
    problems
}

/// The valid overlays that select no offering of any of the given pools' instance types, by name: they change
/// nothing (a misspelt instance type, a pool label no pool has), which their status says.
pub fn unmatched(
    overlays: &[NodeOverlay],
    pools: &[(&NodePool, &[InstanceType])],
    provider: &ProviderLabels,
) -> BTreeSet<String> {
    let well_known = provider.all_well_known();
    let pool_reqs: Vec<Requirements> = pools.iter().map(|(p, _)| pool_requirements(p)).collect();
    overlays
        .iter()
        .filter_map(|o| prepare(o, provider).ok())
        .filter(|p| {
            !pools
                .iter()
                .zip(&pool_reqs)
                .any(|((_, its), reqs)| its.iter().any(|it| !selected(p, it, reqs, &well_known).is_empty()))
        })
        .map(|p| p.name)
        .collect()
}

/// The pool's instance types with the overlays applied (see the module docs). Overlays that fail validation are
/// skipped; callers pass the ones [`evaluate`] left.
pub fn apply(
    pool: &NodePool,
    its: &[InstanceType],
    overlays: &[NodeOverlay],
    provider: &ProviderLabels,
) -> Vec<InstanceType> {
    let mut ordered: Vec<&NodeOverlay> = overlays.iter().collect();
    order_by_weight(&mut ordered);
    let prepared: Vec<Prepared> = ordered.into_iter().filter_map(|o| prepare(o, provider).ok()).collect();
    if prepared.is_empty() {
        return its.to_vec();
    }
    let well_known = provider.all_well_known();
    let pool_reqs = pool_requirements(pool);
    its.iter()
        .map(|it| {
            let mut out = it.clone();
            let mut priced = vec![false; it.offerings.len()];
            let mut set_resources: BTreeSet<&str> = BTreeSet::new();
            let mut capacity = it.capacity().clone();
            for p in &prepared {
                let sel = selected(p, it, &pool_reqs, &well_known);
                if sel.is_empty() {
                    continue;
                }
                if let Some(change) = p.price {
                    for i in sel {
                        if !priced[i] {
                            priced[i] = true;
                            let o = &mut out.offerings[i];
                            o.price = change.apply(o.price);
                            o.price_overlay_applied = true;
                        }
                    }
                }
                for (name, q) in &p.capacity {
                    if set_resources.insert(name.as_str()) {
                        capacity.insert(name, *q);
                    }
                }
            }
            if !set_resources.is_empty() {
                out.set_capacity(capacity);
                out.capacity_overlay_applied = true;
            }
            out
        })
        .collect()
}

/// One evaluation of the NodeOverlay controller: the applicable overlays and the NodePools they were checked
/// against.
#[derive(Clone, Debug, Default)]
pub struct Evaluated {
    /// Overlays that passed validation and conflict with none.
    pub overlays: Vec<NodeOverlay>,
    /// NodePools whose instance types the evaluation saw, by name (their requirements and template labels
    /// select overlays again when a launched NodeClaim's capacity is completed).
    pub node_pools: BTreeMap<String, Arc<NodePool>>,
}

/// The NodeOverlay controller's latest [`Evaluated`], shared with [`Overlaid`]. A pool not in it (before the
/// first evaluation, or created since the last) gets `UnevaluatedNodePool`, so no NodeClaim is launched from
/// prices overlays were meant to change.
#[derive(Clone, Debug, Default)]
pub struct OverlayStore {
    inner: Arc<RwLock<Arc<Evaluated>>>,
}

impl OverlayStore {
    /// A store holding no evaluation yet: every NodePool is unevaluated until the overlay controller sets one.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces the evaluation.
    pub fn set(&self, evaluated: Evaluated) {
        *self.inner.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(evaluated);
    }

    /// The latest evaluation.
    pub fn get(&self) -> Arc<Evaluated> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// A [`CloudProvider`] whose `instance_types` answers carry the store's overlays; every other call goes to the
/// inner provider unchanged.
#[derive(Clone, Debug)]
pub struct Overlaid {
    inner: Arc<dyn CloudProvider>,
    store: OverlayStore,
}

impl Overlaid {
    /// Wraps `inner`, applying whatever evaluation `store` holds at the time of each `instance_types` call.
    pub fn new(inner: Arc<dyn CloudProvider>, store: OverlayStore) -> Self {
        Self { inner, store }
    }

    /// The instance types the inner provider answers, without overlays (what the overlay controller evaluates).
    pub fn inner(&self) -> &Arc<dyn CloudProvider> {
        &self.inner
    }

    /// The claim without requests for resources some applicable overlay sets, or `None` when it has none.
    fn without_overlaid_requests(&self, node_claim: &NodeClaim) -> Option<NodeClaim> {
        let evaluated = self.store.get();
        let overlaid = |name: &str| evaluated.overlays.iter().any(|o| o.spec.capacity.contains_key(name));
        let requests = &node_claim.spec.resources.as_ref()?.requests;
        if !requests.keys().any(|name| overlaid(name)) {
            return None;
        }
        let mut claim = node_claim.clone();
        if let Some(resources) = claim.spec.resources.as_mut() {
            resources.requests.retain(|name, _| !overlaid(name));
        }
        Some(claim)
    }

    /// Adds to a launched claim's capacity and allocatable what the overlays change in its instance type's
    /// capacity. The instance exists by now, so nothing here fails the launch: a catalogue that cannot be read
    /// leaves the claim as launched (the Node's own capacity replaces it at registration anyway).
    async fn add_overlaid_capacity(&self, launched: &mut NodeClaim) {
        let evaluated = self.store.get();
        if evaluated.overlays.iter().all(|o| o.spec.capacity.is_empty()) {
            return;
        }
        let label = |key: &str| launched.metadata.labels.as_ref().and_then(|l| l.get(key)).cloned();
        let (Some(pool_name), Some(it_name)) = (label(labels::NODE_POOL), label(labels::INSTANCE_TYPE)) else {
            return;
        };
        let Some(pool) = evaluated.node_pools.get(&pool_name) else { return };
        let its = match self.inner.instance_types(pool).await {
            Ok(its) => its,
            Err(e) => {
                tracing::warn!(NodePool = %pool_name, instance_type = %it_name, error = %e,
                    "reading instance types to add overlaid capacity to a launched nodeclaim");
                return;
            }
        };
        let Some(base) = its.iter().find(|it| it.name == it_name) else { return };
        let overlaid = apply(pool, std::slice::from_ref(base), &evaluated.overlays, self.inner.labels());
        let Some(overlaid) = overlaid.into_iter().next().filter(|it| it.capacity_overlay_applied) else { return };
        let status = launched.status.get_or_insert_with(Default::default);
        for (name, q) in overlaid.capacity().iter() {
            if base.capacity().get(name) != Some(q) {
                let allocatable = overlaid.allocatable().get(name).copied().unwrap_or(*q);
                status.capacity.insert(name.to_owned(), ResourceQuantity::new(q.to_string()));
                status.allocatable.insert(name.to_owned(), ResourceQuantity::new(allocatable.to_string()));
            }
        }
    }
}

#[async_trait]
impl CloudProvider for Overlaid {
    /// The inner provider launches from its own catalogue (as upstream: overlaid prices rank instance types in the
    /// simulation, the provider still picks by its own prices). Requests for resources that only overlays provide
    /// are left out of what it checks (the claim's instance-type options were chosen with them already), and the
    /// launched claim gets the capacity overlays add to its instance type, so the in-flight node offers the
    /// extended resources the pods were planned for.
    async fn create(&self, node_claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        let stripped = self.without_overlaid_requests(node_claim);
        let mut launched = self.inner.create(stripped.as_ref().unwrap_or(node_claim)).await?;
        self.add_overlaid_capacity(&mut launched).await;
        Ok(launched)
    }
    async fn delete(&self, node_claim: &NodeClaim) -> Result<(), CloudProviderError> {
        self.inner.delete(node_claim).await
    }
    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        self.inner.get(provider_id).await
    }
    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        self.inner.list().await
    }
    async fn instance_types(&self, node_pool: &NodePool) -> Result<Arc<[InstanceType]>, CloudProviderError> {
        let its = self.inner.instance_types(node_pool).await?;
        let evaluated = self.store.get();
        let name = node_pool.metadata.name.as_deref().unwrap_or_default();
        if !evaluated.node_pools.contains_key(name) {
            return Err(CloudProviderError::unevaluated_node_pool(format!(
                "NodeOverlays have not been evaluated for NodePool {name} yet"
            )));
        }
        if evaluated.overlays.is_empty() {
            return Ok(its);
        }
        Ok(apply(node_pool, &its, &evaluated.overlays, self.inner.labels()).into())
    }
    async fn is_drifted(&self, node_claim: &NodeClaim) -> Result<Option<DriftReason>, CloudProviderError> {
        self.inner.is_drifted(node_claim).await
    }
    fn repair_policies(&self) -> Vec<RepairPolicy> {
        self.inner.repair_policies()
    }
    async fn reboot(&self, node_claim: &NodeClaim) -> Result<(), CloudProviderError> {
        self.inner.reboot(node_claim).await
    }
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        self.inner.supported_node_classes()
    }
    fn labels(&self) -> &ProviderLabels {
        self.inner.labels()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_types::{instance_type, offering};
    use crate::{FakeCloudProvider, FakeOptions};
    use karpenter_api::nodeoverlay::{NodeOverlayRequirement, NodeOverlaySpec};
    use karpenter_api::nodepool::NodePoolSpec;
    use proptest::prelude::*;

    fn pool(name: &str, labels: &[(&str, &str)]) -> NodePool {
        let mut spec: NodePoolSpec = serde_json::from_value(serde_json::json!({
            "template": {"spec": {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                                   "requirements": []}}
        }))
        .unwrap();
        spec.template.metadata.labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut p = NodePool::new(name, spec);
        p.metadata.name = Some(name.into());
        p
    }

    fn overlay(name: &str, weight: Option<i32>, reqs: &[(&str, &str, &[&str])]) -> NodeOverlay {
        let spec = NodeOverlaySpec {
            requirements: reqs.iter().map(|(k, op, vs)| NodeOverlayRequirement::new(*k, op, vs)).collect(),
            weight,
            ..Default::default()
        };
        NodeOverlay::new(name, spec)
    }

    fn priced(mut o: NodeOverlay, adjustment: &str) -> NodeOverlay {
        if adjustment.starts_with(['+', '-']) {
            o.spec.price_adjustment = Some(adjustment.into());
        } else {
            o.spec.price = Some(adjustment.into());
        }
        o
    }

    fn with_capacity(mut o: NodeOverlay, name: &str, q: &str) -> NodeOverlay {
        o.spec.capacity.insert(name.into(), q.into());
        o
    }

    fn catalogue() -> Vec<InstanceType> {
        vec![
            instance_type(
                "small",
                "amd64",
                "linux",
                2,
                vec![offering("z1", "on-demand", 1.0, true), offering("z1", "spot", 0.4, true)],
            ),
            instance_type("large", "amd64", "linux", 8, vec![offering("z1", "on-demand", 4.0, true)]),
        ]
    }

    fn prices(its: &[InstanceType], name: &str) -> Vec<f64> {
        its.iter().find(|it| it.name == name).unwrap().offerings.iter().map(|o| o.price).collect()
    }

    const IT: &str = labels::INSTANCE_TYPE;
    const CT: &str = labels::CAPACITY_TYPE;

    #[test]
    fn higher_weight_wins_per_offering_and_marks_what_it_changed() {
        let p = pool("default", &[]);
        let overlays = vec![
            priced(overlay("all", Some(1), &[]), "+50%"),
            priced(overlay("spot", Some(10), &[(CT, "In", &["spot"])]), "0.1"),
        ];
        let out = apply(&p, &catalogue(), &overlays, &crate::fake::stand_in_labels());
        assert_eq!(prices(&out, "small"), [1.5, 0.1]);
        assert_eq!(prices(&out, "large"), [6.0]);
        assert!(out.iter().all(|it| it.offerings.iter().all(|o| o.price_overlay_applied)));
        assert!(out.iter().all(|it| !it.capacity_overlay_applied));
        // Untouched offerings stay unmarked.
        let only_spot = apply(&p, &catalogue(), &overlays[1..], &crate::fake::stand_in_labels());
        assert_eq!(prices(&only_spot, "small"), [1.0, 0.1]);
        assert!(!only_spot[0].offerings[0].price_overlay_applied);
        assert!(only_spot[0].offerings[1].price_overlay_applied);
        assert!(!only_spot[1].offerings[0].price_overlay_applied);
    }

    #[test]
    fn deltas_and_percentages_never_go_below_zero() {
        let p = pool("default", &[]);
        for (adj, want) in [("-5", 0.0), ("-2", 2.0), ("-100%", 0.0), ("+0.5", 4.5), ("-25%", 3.0)] {
            let out = apply(
                &p,
                &catalogue(),
                &[priced(overlay("o", None, &[(IT, "In", &["large"])]), adj)],
                &crate::fake::stand_in_labels(),
            );
            assert_eq!(prices(&out, "large"), [want], "{adj}");
            assert_eq!(prices(&out, "small"), [1.0, 0.4], "{adj}");
        }
    }

    #[test]
    fn pool_name_and_template_labels_select_pools() {
        let a = pool("a", &[("team", "x")]);
        let b = pool("b", &[]);
        let by_pool = priced(overlay("pool", None, &[(labels::NODE_POOL, "In", &["a"])]), "9");
        let by_label = priced(overlay("label", None, &[("team", "In", &["x"])]), "7");
        let k = crate::fake::stand_in_labels();
        assert_eq!(prices(&apply(&a, &catalogue(), std::slice::from_ref(&by_pool), &k), "large"), [9.0]);
        assert_eq!(prices(&apply(&b, &catalogue(), std::slice::from_ref(&by_pool), &k), "large"), [4.0]);
        assert_eq!(prices(&apply(&a, &catalogue(), std::slice::from_ref(&by_label), &k), "large"), [7.0]);
        // A key the pool's types do not define does not match (negative operators aside).
        assert_eq!(prices(&apply(&b, &catalogue(), std::slice::from_ref(&by_label), &k), "large"), [4.0]);
        let not_in = priced(overlay("n", None, &[("team", "NotIn", &["x"])]), "3");
        assert_eq!(prices(&apply(&b, &catalogue(), std::slice::from_ref(&not_in), &k), "large"), [3.0]);
        assert_eq!(prices(&apply(&a, &catalogue(), &[not_in], &k), "large"), [4.0]);
    }

    #[test]
    fn capacity_adds_extended_resources_and_keeps_the_rest() {
        let p = pool("default", &[]);
        let mut its = catalogue();
        its[1] = its[1].clone().with_volume_attachment_limits([("ebs.csi.aws.com".to_string(), 25)].into());
        let overlays = vec![
            with_capacity(overlay("low", Some(1), &[]), "example.com/gpu", "1"),
            with_capacity(overlay("high", Some(5), &[(IT, "In", &["large"])]), "example.com/gpu", "4"),
        ];
        let out = apply(&p, &its, &overlays, &crate::fake::stand_in_labels());
        let gpu = |it: &InstanceType| it.allocatable().get("example.com/gpu").map(|q| q.to_string());
        assert_eq!(gpu(&out[0]).as_deref(), Some("1"));
        assert_eq!(gpu(&out[1]).as_deref(), Some("4"));
        assert!(out.iter().all(|it| it.capacity_overlay_applied));
        assert_eq!(out[1].capacity().cpu(), its[1].capacity().cpu());
        assert_eq!(out[1].volume_attachment_limits, its[1].volume_attachment_limits);
        assert!(out.iter().all(|it| it.offerings.iter().all(|o| !o.price_overlay_applied)));
    }

    #[test]
    fn equal_weight_overlapping_changes_conflict_on_both_sides() {
        let p = pool("default", &[]);
        let its = catalogue();
        let pools = [(&p, its.as_slice())];
        let k = crate::fake::stand_in_labels();
        let a = priced(overlay("a", Some(3), &[(IT, "In", &["small"])]), "1");
        let b = priced(overlay("b", Some(3), &[(CT, "In", &["spot"])]), "2");
        let problems = evaluate(&[a.clone(), b.clone()], &pools, &k);
        assert_eq!(problems.get("a"), Some(&OverlayProblem::Conflict(["b".to_string()].into())));
        assert_eq!(problems.get("b"), Some(&OverlayProblem::Conflict(["a".to_string()].into())));
        assert!(problems["a"].to_string().contains('b'));
        // Different weights, or no common offering, do not conflict.
        let mut b2 = b.clone();
        b2.spec.weight = Some(4);
        assert!(evaluate(&[a.clone(), b2], &pools, &k).is_empty());
        let c = priced(overlay("c", Some(3), &[(IT, "In", &["large"])]), "2");
        assert!(evaluate(&[a.clone(), c], &pools, &k).is_empty());
        // Capacity conflicts on a common resource of a common type, not on different resources.
        let g1 = with_capacity(overlay("g1", None, &[]), "example.com/gpu", "1");
        let g2 = with_capacity(overlay("g2", None, &[(IT, "In", &["large"])]), "example.com/gpu", "2");
        let f = with_capacity(overlay("f", None, &[]), "example.com/fpga", "2");
        let problems = evaluate(&[g1, g2, f], &pools, &k);
        assert_eq!(problems.keys().collect::<Vec<_>>(), ["g1", "g2"]);
        // A price overlay and a capacity overlay of the same weight do not conflict.
        assert!(
            evaluate(&[a, with_capacity(overlay("g", Some(3), &[]), "example.com/gpu", "1")], &pools, &k).is_empty()
        );
    }

    #[test]
    fn overlays_selecting_nothing_are_named() {
        let p = pool("default", &[("team", "x")]);
        let its = catalogue();
        let views = [(&p, &its[..])];
        let k = crate::fake::stand_in_labels();
        let overlays = [
            priced(overlay("typo", None, &[(IT, "In", &["larg"])]), "1"),
            priced(overlay("other-team", None, &[("team", "In", &["y"])]), "1"),
            priced(overlay("spot-large", None, &[(IT, "In", &["large"]), (CT, "In", &["spot"])]), "1"),
            priced(overlay("large", None, &[(IT, "In", &["large"])]), "1"),
            priced(overlay("invalid", None, &[(IT, "In", &[])]), "1"),
        ];
        // `large` has no spot offering; an invalid overlay is reported as invalid, not here.
        let names: Vec<String> = unmatched(&overlays, &views, &k).into_iter().collect();
        assert_eq!(names, ["other-team", "spot-large", "typo"]);
        assert_eq!(unmatched(&overlays[3..4], &[], &k).len(), 1, "no pool: nothing is selected");
    }

    #[test]
    fn invalid_overlays_are_reported_and_skipped() {
        let p = pool("default", &[]);
        let its = catalogue();
        let bad = with_capacity(priced(overlay("bad", None, &[]), "-200%"), "cpu", "1");
        let problems = evaluate(std::slice::from_ref(&bad), &[(&p, its.as_slice())], &crate::fake::stand_in_labels());
        let OverlayProblem::Invalid(m) = &problems["bad"] else { panic!("{problems:?}") };
        assert!(m.contains("spec.priceAdjustment") && m.contains("spec.capacity[cpu]"), "{m}");
        assert_eq!(problems["bad"].reason(), "RuntimeValidation");
        let out = apply(&p, &its, &[bad], &crate::fake::stand_in_labels());
        assert_eq!(prices(&out, "small"), [1.0, 0.4]);
    }

    #[tokio::test]
    async fn the_decorator_waits_for_an_evaluation_then_applies_it() {
        let store = OverlayStore::new();
        let fake: Arc<dyn CloudProvider> = Arc::new(FakeCloudProvider::new(FakeOptions::new(catalogue())));
        let provider = Overlaid::new(fake, store.clone());
        let p = pool("default", &[]);
        let err = provider.instance_types(&p).await.unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::UnevaluatedNodePool);
        store
            .set(Evaluated { overlays: Vec::new(), node_pools: [("default".to_string(), Arc::new(p.clone()))].into() });
        assert_eq!(prices(&provider.instance_types(&p).await.unwrap(), "large"), [4.0]);
        store.set(Evaluated {
            overlays: vec![priced(overlay("o", None, &[(IT, "In", &["large"])]), "0.5")],
            node_pools: [("default".to_string(), Arc::new(p.clone()))].into(),
        });
        assert_eq!(prices(&provider.instance_types(&p).await.unwrap(), "large"), [0.5]);
    }

    #[tokio::test]
    async fn a_launched_claim_gets_the_capacity_overlays_add_to_its_instance_type() {
        let store = OverlayStore::new();
        let fake: Arc<dyn CloudProvider> = Arc::new(FakeCloudProvider::new(FakeOptions::new(catalogue())));
        let provider = Overlaid::new(fake, store.clone());
        let p = pool("default", &[]);
        let gpu = with_capacity(overlay("gpu", None, &[(IT, "In", &["large"])]), "example.com/gpu", "2");
        let evaluated = |overlays: Vec<NodeOverlay>| Evaluated {
            overlays,
            node_pools: [("default".to_string(), Arc::new(p.clone()))].into(),
        };
        let claim = |name: &str, it: &str| -> NodeClaim {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
                "spec": {"requirements": [{"key": IT, "operator": "In", "values": [it]}],
                         "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}
            }))
            .unwrap()
        };
        let gpus = |c: &NodeClaim| {
            let s = c.status.clone().unwrap();
            let get = |l: &karpenter_api::nodeclaim::ResourceQuantities| l.get("example.com/gpu").map(|q| q.0.clone());
            (get(&s.capacity), get(&s.allocatable))
        };
        store.set(evaluated(vec![gpu.clone()]));
        let large = provider.create(&claim("a", "large")).await.unwrap();
        assert_eq!(gpus(&large), (Some("2".into()), Some("2".into())));
        assert!(large.status.unwrap().capacity.contains_key("cpu"), "the provider's own capacity stays");
        // An instance type the overlay does not select, and a pool the store has not seen, are left alone.
        let small = provider.create(&claim("b", "small")).await.unwrap();
        assert_eq!(gpus(&small), (None, None));
        store.set(Evaluated { overlays: vec![gpu], node_pools: BTreeMap::new() });
        assert_eq!(gpus(&provider.create(&claim("c", "large")).await.unwrap()), (None, None));
    }

    #[tokio::test]
    async fn requests_only_overlays_provide_do_not_fail_the_launch() {
        let store = OverlayStore::new();
        let fake: Arc<dyn CloudProvider> = Arc::new(FakeCloudProvider::new(FakeOptions::new(catalogue())));
        let provider = Overlaid::new(fake.clone(), store.clone());
        let p = pool("default", &[]);
        let gpu = with_capacity(overlay("gpu", None, &[(IT, "In", &["large"])]), "example.com/gpu", "2");
        store.set(Evaluated { overlays: vec![gpu], node_pools: [("default".to_string(), Arc::new(p))].into() });
        let claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "a", "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"requirements": [{"key": IT, "operator": "In", "values": ["large"]}],
                     "resources": {"requests": {"cpu": "1", "example.com/gpu": "1"}},
                     "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}
        }))
        .unwrap();
        let err = fake.create(&claim).await.unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InsufficientCapacity, "the bare provider knows no such resource");
        let launched = provider.create(&claim).await.unwrap();
        let status = launched.status.unwrap();
        assert_eq!(status.capacity.get("example.com/gpu").map(|q| q.0.as_str()), Some("2"));
    }

    proptest! {
        /// Whatever the input order, the same overlays give the same prices; every price stays non-negative,
        /// and an offering is marked exactly when some overlay selecting it sets a price.
        #[test]
        fn order_independent_and_non_negative(
            specs in proptest::collection::vec((0..3i32, 0..3usize, -150i32..150, any::<bool>()), 0..6),
            rotate in 0usize..6,
        ) {
            let p = pool("default", &[]);
            let selectors: [&[(&str, &str, &[&str])]; 3] = [&[], &[(CT, "In", &["spot"])], &[(IT, "In", &["large"])]];
            let overlays: Vec<NodeOverlay> = specs
                .iter()
                .enumerate()
                .map(|(i, (w, sel, amount, percent))| {
                    let adj = if *percent { format!("{:+}%", amount.max(&-100)) } else { format!("{:+}", amount) };
                    priced(overlay(&format!("o{i}"), (*w > 0).then_some(*w), selectors[*sel]), &adj)
                })
                .collect();
            let k = crate::fake::stand_in_labels();
            let base = apply(&p, &catalogue(), &overlays, &k);
            let mut rotated = overlays.clone();
            if !rotated.is_empty() {
                let n = rotated.len();
                rotated.rotate_left(rotate % n);
            }
            let other = apply(&p, &catalogue(), &rotated, &k);
            for (a, b) in base.iter().zip(&other) {
                for (oa, ob) in a.offerings.iter().zip(&b.offerings) {
                    prop_assert_eq!(oa.price, ob.price);
                    prop_assert!(oa.price >= 0.0);
                }
            }
            let any_selects_spot_or_all = specs.iter().any(|(_, sel, _, _)| *sel != 2);
            prop_assert_eq!(base[0].offerings[1].price_overlay_applied, any_selects_spot_or_all);
        }
    }
}
