//! The cost post-pass over new NodeClaims (a deliberate difference from upstream, on by default, off with
//! [`super::SchedulerOptions::upstream_packing`]).
//!
//! Upstream's order (largest pods first, each onto the in-flight claim with the fewest pods while *any*
//! instance type still fits) leaves claims full in one resource and half empty in another, or grown to the
//! largest (not the cheapest per resource) types. After the solve loop this pass re-packs the pods of
//! interchangeable claims and keeps the result only when it is strictly cheaper.
//!
//! **What may move.** A repack group is the set of new claims of one NodePool with equal requirements
//! (hostname aside) whose pods are all *plain*: no topology spread, pod (anti-)affinity or required
//! anti-affinity of others that selects them, no host ports, no volumes. Such a pod's placement depends only
//! on the claim's requirements, taints (the NodePool's) and resources, so it may go to any claim of its group.
//! Groups with minValues, NodePools offered reserved capacity, NodePools with an instance type whose offerings
//! carry capacity or overhead overrides (one room per offering group) and timed-out passes are left alone;
//! under NodePool limits the new claims must fit in what the group's claims held plus what was left.
//!
//! **How.** The LP of [`crate::bound`] over the group's demand and the instance types compatible with the
//! group's requirements gives unit prices per resource and the optimal fractional mix (at most three types).
//! Bins are opened one at a time: for every mix type a bin is filled greedily (the pod shape whose requests
//! best align with the bin's remaining room, normalised by the type's room: the dot-product heuristic of
//! vector bin packing), and the bin whose contents are worth most at the unit prices per dollar is kept.
//! Each kept bin becomes a claim whose instance-type options are every compatible type its pods fit into
//! (priced and ordered as any claim). Deterministic: shapes, types and ties are ordered.

use karpenter_api::labels;
use karpenter_requirements::{Format, OfferingsExt, Quantity, Requirement, Requirements, ResourceList};

use super::templates::Template;
use super::topology::PodTopology;
use super::{NewClaim, Solver};
use crate::bound::{LpType, ShapeDemand, ShapeType, solve_lp, solve_shape_lp};

/// Distinct pod shapes above which a group is left alone (the greedy is linear in shapes per pod).
const MAX_SHAPES: usize = 512;

/// How far the resource-LP packing may be above the resource LP before the shape LP is tried.
const SHAPE_LP_GAP: f64 = 1.02;

/// How close to its optimum the post-pass's shape LP must come (packing loses more than this anyway).
const SHAPE_LP_TOLERANCE: f64 = 0.002;

/// Column-generation rounds of the shape LP in the post-pass.
const SHAPE_LP_ROUNDS: usize = 200;

/// Worth per dollar at which a bin is kept at once (1 is the most any bin can reach).
const GOOD_ENOUGH: f64 = 0.999;

/// Instance types tried for every bin besides the LP's mix.
const BIN_TYPES: usize = 4;

/// What one bin takes: (shape, count) pairs and the summed requests.
type Fill = (Vec<(usize, usize)>, Vec<i128>);

/// Pods of one request shape.
struct Shape {
    /// Requests per resource of `names`, in nano units.
    req: Vec<i128>,
    /// The pods, in queue order.
    pods: Vec<usize>,
    /// Pods not yet packed (taken from the front of `pods`).
    next: usize,
}

impl Shape {
    fn left(&self) -> usize {
        self.pods.len() - self.next
    }
}

/// A compatible instance type of the group: template index, price, room per resource of `names`.
struct Cand {
    it: u32,
    price: f64,
    room: Vec<i128>,
}

impl Solver<'_> {
    /// Runs the post-pass over `self.claims` (see the module docs).
    pub(super) fn repack(&mut self) {
        // Groups: (template, requirements without hostname) -> claim indices, in creation order.
        let mut groups: Vec<((usize, Requirements), Vec<usize>)> = Vec::new();
        for (c, claim) in self.claims.iter().enumerate() {
            if claim.min_values_relaxed
                || claim.requirements.has_min_values()
                || !claim.pods.iter().all(|&p| self.plain(p))
            {
                continue;
            }
            let mut key = claim.requirements.clone();
            key.remove(labels::HOSTNAME);
            let k = (claim.template, key);
            match groups.iter_mut().find(|(g, _)| *g == k) {
                Some((_, members)) => members.push(c),
                None => groups.push((k, vec![c])),
            }
        }
        let mut replace: Vec<(Vec<usize>, Vec<NewClaim>)> = Vec::new();
        for ((t, reqs), members) in groups {
            let Some(template) = self.templates.get(t) else { continue };
            // Claims of a NodePool offered reserved capacity keep what the pass gave them: re-packing would
            // have to redo the reservations' bookkeeping for a price gain the reservations make moot.
            if !self.reservations.is_empty() && template.offers_reserved() {
                continue;
            }
            // An instance type with offering overrides has one room per offering group, where the packing
            // below knows one room per type: such NodePools keep the pass's claims (upstream's packing).
            if template.has_offering_overrides() {
                continue;
            }
            if let Some((bins, remaining, cluster)) = self.repack_group(template, t, &reqs, &members) {
                if let (Some(c), Some(rem)) = (self.cluster.as_mut(), cluster) {
                    c.remaining = rem;
                }
                let cluster = self.cluster.as_ref();
                if let Some(tp) = self.templates.get_mut(t) {
                    tp.remaining = remaining;
                }
                for tp in &mut self.templates {
                    tp.update_within_limits(cluster);
                }
                replace.push((members, bins));
            }
        }
        if replace.is_empty() {
            return;
        }
        // Rebuild the claim list: a group's new claims take the place of its first claim. Hostnames of the
        // group's claims are reused in order; extra claims get fresh names from the template's counter.
        let mut first: Vec<Option<usize>> = vec![None; self.claims.len()];
        let mut dropped = vec![false; self.claims.len()];
        for (g, (members, _)) in replace.iter().enumerate() {
            for (k, &c) in members.iter().enumerate() {
                if k == 0
                    && let Some(f) = first.get_mut(c)
                {
                    *f = Some(g);
                }
                if let Some(d) = dropped.get_mut(c) {
                    *d = true;
                }
            }
        }
        let mut new_groups: Vec<Option<Vec<NewClaim>>> = Vec::new();
        let mut names: Vec<Vec<String>> = Vec::new();
        for (members, bins) in replace {
            names.push(members.iter().filter_map(|&c| self.claims.get(c).map(|cl| cl.hostname.clone())).collect());
            new_groups.push(Some(bins));
        }
        let old = std::mem::take(&mut self.claims);
        for (c, claim) in old.into_iter().enumerate() {
            if let Some(g) = first.get(c).copied().flatten() {
                let bins = new_groups.get_mut(g).and_then(Option::take).unwrap_or_default();
                let group_names = names.get(g).cloned().unwrap_or_default();
                for (k, mut bin) in bins.into_iter().enumerate() {
                    bin.hostname = match group_names.get(k) {
                        Some(n) => n.clone(),
                        None => match self.templates.get_mut(bin.template) {
                            Some(tp) => {
                                tp.claims_created += 1;
                                format!("{}-{}", tp.name, tp.claims_created)
                            }
                            None => continue,
                        },
                    };
                    bin.requirements.add(Requirement::in_values(labels::HOSTNAME, [bin.hostname.as_str()]));
                    self.claims.push(bin);
                }
            } else if !dropped.get(c).copied().unwrap_or(false) {
                self.claims.push(claim);
            }
        }
    }

    /// Whether pod `p` may move between claims of equal requirements (see the module docs).
    fn plain(&self, p: usize) -> bool {
        let Some(pod) = self.pods.get(p) else { return false };
        pod.host_ports.is_empty()
            && pod.volumes.alternatives.is_empty()
            && pod.volumes.claims.is_empty()
            && !super::has_resource_claims(pod.pod)
            && self.topology.pods.get(p).and_then(Option::as_deref).is_none_or(PodTopology::is_empty)
    }

    /// New claims for the pods of `members` (without hostnames), the template's remaining limits and the
    /// cluster's after them, when strictly cheaper and within both, else `None`. Limits are counted as the
    /// checker and `Template::consume` count them: the largest capacity among each claim's options, one node each.
    ///
    /// Long because its stages (candidate types, pod shapes, the LP, bin filling, the shape-LP fallback, limits)
    /// share the candidates, shapes and unit prices; split, each would take most of them as arguments.
    fn repack_group(
        &self,
        template: &Template<'_>,
        t: usize,
        reqs: &Requirements,
        members: &[usize],
    ) -> Option<(Vec<NewClaim>, Option<ResourceList>, Option<ResourceList>)> {
        let pods: Vec<usize> =
            members.iter().filter_map(|&c| self.claims.get(c)).flat_map(|c| c.pods.iter().copied()).collect();
        if pods.is_empty() {
            return None;
        }
        // Resource names the pods request; cpu, memory and pods first (the LP's resources).
        let mut names: Vec<String> = crate::bound::RESOURCES.iter().map(|s| (*s).to_owned()).collect();
        for &p in &pods {
            for (name, _) in self.pods.get(p)?.requests.iter() {
                if !names.iter().any(|n| n == name) {
                    names.push(name.to_owned());
                }
            }
        }
        let vector = |r: &ResourceList| -> Vec<i128> { names.iter().map(|n| r.get_or_zero(n).as_nanos()).collect() };
        // Compatible instance types and their prices under the group's requirements.
        let mut cands: Vec<Cand> = Vec::new();
        for (i, (it, room)) in template.its.iter().zip(&template.room).enumerate() {
            if !it.requirements.intersects_ok(reqs) {
                continue;
            }
            let price = it
                .offerings
                .available()
                .filter(|o| o.is_compatible(reqs, self.provider))
                .map(|o| o.price)
                .min_by(f64::total_cmp);
            let Some(price) = price.filter(|p| p.is_finite() && *p >= 0.0) else { continue };
            cands.push(Cand { it: i as u32, price, room: vector(room) });
        }
        let name_of = |c: &Cand| template.its.get(c.it as usize).map(|it| it.name.as_str());
        cands.sort_by(|a, b| a.price.total_cmp(&b.price).then_with(|| name_of(a).cmp(&name_of(b))));
        let price_of = |its: &[u32]| -> Option<f64> { cands.iter().find(|c| its.contains(&c.it)).map(|c| c.price) };
        let mut old_cost = 0.0;
        for &c in members {
            old_cost += price_of(&self.claims.get(c)?.its)?;
        }
        // Shapes, ordered by requests descending (largest first among equal scores).
        let mut shapes: Vec<Shape> = Vec::new();
        let reqv: Vec<Vec<i128>> =
            pods.iter().map(|&p| self.pods.get(p).map(|d| vector(&d.requests))).collect::<Option<_>>()?;
        let mut order: Vec<usize> = (0..pods.len()).collect();
        order.sort_by(|&a, &b| reqv.get(b).cmp(&reqv.get(a)).then(a.cmp(&b)));
        for k in order {
            let (Some(&p), Some(r)) = (pods.get(k), reqv.get(k)) else { continue };
            match shapes.last_mut() {
                Some(s) if &s.req == r => s.pods.push(p),
                _ => shapes.push(Shape { req: r.clone(), pods: vec![p], next: 0 }),
            }
        }
        if shapes.len() > MAX_SHAPES {
            return None;
        }
        // The LP over the group: unit prices and the optimal mix.
        let demand: [f64; 3] = std::array::from_fn(|r| {
            shapes.iter().map(|s| s.req.get(r).copied().unwrap_or(0) as f64 / 1e9 * s.pods.len() as f64).sum()
        });
        let lp_types: Vec<LpType> = cands
            .iter()
            .map(|c| LpType {
                price: c.price,
                room: std::array::from_fn(|r| (c.room.get(r).copied().unwrap_or(0) as f64 / 1e9).max(0.0)),
            })
            .collect();
        let lp = solve_lp(demand, &lp_types).ok()?;
        let value = |req: &[i128]| -> f64 {
            (0..3).map(|r| lp.unit_prices[r] * req.get(r).copied().unwrap_or(0) as f64 / 1e9).sum()
        };
        // Bin types: the LP's mix and the BIN_TYPES types whose room is worth most per dollar at the unit
        // prices (ties: the larger, then by name), which include sizes the degenerate mix may leave out.
        let mut mix: Vec<usize> = lp.mix.iter().map(|&(i, _)| i).filter(|&i| i < cands.len()).collect();
        let worth: Vec<f64> =
            cands.iter().map(|c| if c.price > 0.0 { value(&c.room) / c.price } else { f64::INFINITY }).collect();
        let mut by_worth: Vec<usize> = (0..cands.len()).collect();
        by_worth.sort_by(|&a, &b| {
            let (wa, wb) = (worth.get(a).copied().unwrap_or(0.0), worth.get(b).copied().unwrap_or(0.0));
            let (pa, pb) = (cands.get(a).map_or(0.0, |c| c.price), cands.get(b).map_or(0.0, |c| c.price));
            wb.total_cmp(&wa).then(pb.total_cmp(&pa)).then(a.cmp(&b))
        });
        for i in by_worth.into_iter().take(BIN_TYPES) {
            if !mix.contains(&i) {
                mix.push(i);
            }
        }
        let mut bins: Vec<(Vec<usize>, Vec<i128>)> = Vec::new();
        let mut left: usize = shapes.iter().map(Shape::left).sum();
        while left > 0 {
            let mut best: Option<(f64, Fill)> = None;
            for (&m, proportional) in mix.iter().flat_map(|m| [(m, true), (m, false)]) {
                let cand = cands.get(m)?;
                let (takes, used) = fill(&shapes, &cand.room, proportional);
                let packed: f64 =
                    takes.iter().map(|&(s, n)| shapes.get(s).map_or(0.0, |sh| value(&sh.req) * n as f64)).sum();
                let count: usize = takes.iter().map(|&(_, n)| n).sum();
                if count == 0 {
                    continue;
                }
                let eff = if cand.price > 0.0 { packed / cand.price } else { f64::INFINITY };
                if best.as_ref().is_none_or(|(e, _)| eff > *e) {
                    best = Some((eff, (takes, used)));
                }
                // No bin is worth more than its price at the LP's unit prices (dual feasibility): a bin
                // within GOOD_ENOUGH of that is kept without trying the others.
                if eff >= GOOD_ENOUGH {
                    break;
                }
            }
            if best.is_none() {
                // No bin type holds the largest remaining pods: the cheapest type that does.
                let first = shapes.iter().find(|s| s.left() > 0)?;
                let cand = cands.get(cheapest_holding(cands.as_slice(), &first.req)?)?;
                let (takes, used) = fill(&shapes, &cand.room, false);
                best = Some((0.0, (takes, used)));
            }
            let (_, (takes, used)) = best?;
            if takes.is_empty() {
                return None;
            }
            left -= takes.iter().map(|&(_, n)| n).sum::<usize>();
            push_bin(&mut shapes, takes, used, &mut bins)?;
        }
        // Where the resource LP is far below what its mix packs (lopsided catalogues: it combines the cpu of
        // one type with the memory of another), pack by the shape LP instead and keep the cheaper packing.
        let bins_cost = |bins: &[(Vec<usize>, Vec<i128>)]| -> Option<f64> {
            let mut total = 0.0;
            for (_, used) in bins {
                total += cands.iter().find(|c| c.room.iter().zip(used).all(|(room, u)| u <= room))?.price;
            }
            Some(total)
        };
        let mut new_cost = bins_cost(&bins)?;
        if new_cost > lp.cost * SHAPE_LP_GAP
            && let Some(guided) = shape_guided_bins(&shapes, &cands)
            && let Some(guided_cost) = bins_cost(&guided)
            && guided_cost < new_cost
        {
            bins = guided;
            new_cost = guided_cost;
        }
        // Each bin on the cheapest type that fits its contents; options: the compatible types that fit.
        let mut out = Vec::new();
        for (bin, used) in bins {
            let fits = |c: &Cand| c.room.iter().zip(&used).all(|(room, u)| u <= room);
            // In price order, so the first MAX_INSTANCE_TYPES are the ones the claim's plan keeps.
            let options: Vec<u32> =
                cands.iter().filter(|c| fits(c)).map(|c| c.it).take(super::MAX_INSTANCE_TYPES).collect();
            let mut requests = ResourceList::new();
            for &p in &bin {
                requests = requests.add(&self.pods.get(p)?.requests);
            }
            let mut options = options;
            options.sort_unstable();
            out.push(NewClaim {
                template: t,
                hostname: String::new(),
                requirements: reqs.clone(),
                its: options,
                requests,
                pods: bin,
                ports: Default::default(),
                volumes: Default::default(),
                min_values_relaxed: false,
                held: Default::default(),
                id: usize::MAX,
                dra_claims: Vec::new(),
            });
        }
        if new_cost >= old_cost * (1.0 - 1e-9) {
            return None;
        }
        let largest = |its: &[u32]| -> ResourceList {
            its.iter()
                .filter_map(|&i| template.its.get(i as usize))
                .fold(ResourceList::new(), |m, it| m.max(it.capacity()))
        };
        let nodes = |n: usize| {
            ResourceList::new().with(
                karpenter_api::nodepool::NODES_LIMIT,
                Quantity::from_int(i64::try_from(n).unwrap_or(i64::MAX), Format::DecimalSI),
            )
        };
        // What the group's claims count against limits before and after the repack.
        let mut before = nodes(members.len());
        for &c in members {
            before = before.add(&largest(&self.claims.get(c)?.its));
        }
        let mut after_use = nodes(out.len());
        for bin in &out {
            after_use = after_use.add(&largest(&bin.its));
        }
        // `rem` after the swap; `None` when a limited resource would go negative (absent ones are unlimited).
        let after = |rem: &ResourceList| -> Option<ResourceList> {
            let after = rem.add(&before).sub(&after_use);
            if rem.iter().any(|(name, _)| after.get(name).is_some_and(|q| q.as_nanos() < 0)) {
                return None;
            }
            let mut kept = ResourceList::new();
            for (name, _) in rem.iter() {
                kept.insert(name, after.get_or_zero(name));
            }
            Some(kept)
        };
        let remaining = match &template.remaining {
            None => None,
            Some(rem) => Some(after(rem)?),
        };
        let cluster = match &self.cluster {
            None => None,
            Some(c) => Some(after(&c.remaining)?),
        };
        Some((out, remaining, cluster))
    }
}

/// Greedily fills one bin of room `room` from `shapes` (each shape's remaining pods): repeatedly the shape
/// that fits and maximises Σ_r req_r · remaining_r / room_r² (ties: the earlier, larger shape). Returns
/// (shape, count) taken and the summed requests.
///
/// With `proportional`, the bin first takes the same fraction of every shape's remaining pods, as large as
/// the room allows (so every bin gets the mix of what is left and the binding resource of the whole group
/// binds in every bin), and the greedy tops it up.
fn fill(shapes: &[Shape], room: &[i128], proportional: bool) -> Fill {
    let scale: Vec<f64> = room.iter().map(|&r| if r > 0 { 1.0 / (r as f64 * r as f64) } else { 0.0 }).collect();
    let mut rem: Vec<i128> = room.to_vec();
    let mut taken: Vec<usize> = vec![0; shapes.len()];
    if proportional {
        let mut f = f64::INFINITY;
        for (r, &room_r) in room.iter().enumerate() {
            let demand: f64 = shapes.iter().map(|s| s.req.get(r).copied().unwrap_or(0) as f64 * s.left() as f64).sum();
            if demand > 0.0 {
                f = f.min(room_r.max(0) as f64 / demand);
            }
        }
        let f = f.min(1.0);
        for (s, sh) in shapes.iter().enumerate() {
            // Floor, so Σ take·req ≤ f·demand ≤ room for every resource.
            let take = ((sh.left() as f64) * f).floor() as usize;
            let take = take.min(sh.left());
            if take == 0 {
                continue;
            }
            if let Some(t) = taken.get_mut(s) {
                *t = take;
            }
            for (r, &q) in rem.iter_mut().zip(&sh.req) {
                *r -= q * take as i128;
            }
        }
        if rem.iter().any(|&r| r < 0) {
            // Rounding: start over without the proportional part.
            rem = room.to_vec();
            taken.iter_mut().for_each(|t| *t = 0);
        }
    }
    loop {
        let mut best: Option<(f64, usize)> = None;
        for (s, sh) in shapes.iter().enumerate() {
            let avail = sh.left().saturating_sub(taken.get(s).copied().unwrap_or(0));
            if avail == 0 || !sh.req.iter().zip(&rem).all(|(q, r)| q <= r) {
                continue;
            }
            let score: f64 = sh.req.iter().zip(&rem).zip(&scale).map(|((&q, &r), &w)| q as f64 * r as f64 * w).sum();
            if best.is_none_or(|(b, _)| score > b) {
                best = Some((score, s));
            }
        }
        let Some((_, s)) = best else { break };
        let (Some(sh), Some(t)) = (shapes.get(s), taken.get_mut(s)) else { break };
        // Take a run of this shape while it stays the obvious choice: up to 1/64 of what still fits.
        let avail = sh.left() - *t;
        let mut n = avail;
        for (&q, &r) in sh.req.iter().zip(&rem) {
            if q > 0 {
                n = n.min(usize::try_from(r / q).unwrap_or(usize::MAX));
            }
        }
        let n = (n / 64).max(1).min(avail);
        *t += n;
        for (r, &q) in rem.iter_mut().zip(&sh.req) {
            *r -= q * n as i128;
        }
    }
    let used: Vec<i128> = room.iter().zip(&rem).map(|(a, b)| a - b).collect();
    let takes = taken.into_iter().enumerate().filter(|&(_, n)| n > 0).collect();
    (takes, used)
}

/// Index of the cheapest candidate (they are in price order) with room for one pod of requests `req`.
fn cheapest_holding(cands: &[Cand], req: &[i128]) -> Option<usize> {
    cands.iter().position(|c| req.iter().zip(&c.room).all(|(q, r)| q <= r))
}

/// Moves the pods `takes` names out of `shapes` into a new bin.
fn push_bin(
    shapes: &mut [Shape],
    takes: Vec<(usize, usize)>,
    used: Vec<i128>,
    bins: &mut Vec<(Vec<usize>, Vec<i128>)>,
) -> Option<()> {
    let mut bin = Vec::new();
    for (s, n) in takes {
        let sh = shapes.get_mut(s)?;
        bin.extend(sh.pods.get(sh.next..sh.next + n)?.iter().copied());
        sh.next += n;
    }
    bins.push((bin, used));
    Some(())
}

/// Bins packed as the shape LP ([`crate::bound::solve_shape_lp`]) assigns all the shapes' pods (whatever their
/// `next`) to instance types:
/// each shape's pods are split among types by the LP's (fractional) counts, largest remainders rounding, and
/// every type's share is packed greedily into nodes of that type. `None` when the LP fails or nothing moves.
fn shape_guided_bins(shapes: &[Shape], cands: &[Cand]) -> Option<Vec<(Vec<usize>, Vec<i128>)>> {
    let as_f64 = |v: &[i128], r: usize| v.get(r).copied().unwrap_or(0) as f64 / 1e9;
    let demands: Vec<ShapeDemand> = shapes
        .iter()
        .map(|s| ShapeDemand { req: std::array::from_fn(|r| as_f64(&s.req, r)), count: s.pods.len() as f64 })
        .collect();
    let types: Vec<ShapeType> = cands
        .iter()
        .map(|c| ShapeType {
            price: c.price,
            room: std::array::from_fn(|r| as_f64(&c.room, r).max(0.0)),
            fits: shapes.iter().map(|s| s.req.iter().zip(&c.room).all(|(q, r)| q <= r)).collect(),
        })
        .collect();
    let lp = solve_shape_lp(&demands, &types, SHAPE_LP_ROUNDS, SHAPE_LP_TOLERANCE).ok()?;
    // Pods not yet given to a node or a type's share, per shape (taken from the front).
    let mut next: Vec<usize> = vec![0; shapes.len()];
    let take = |s: usize, n: usize, next: &mut Vec<usize>| -> Vec<usize> {
        let (Some(shape), Some(from)) = (shapes.get(s), next.get(s).copied()) else { return Vec::new() };
        let n = n.min(shape.pods.len() - from);
        if let Some(f) = next.get_mut(s) {
            *f += n;
        }
        shape.pods.get(from..from + n).map(<[usize]>::to_vec).unwrap_or_default()
    };
    let mut bins = Vec::new();
    // Whole-pod patterns first (most nodes first): ⌈nodes⌉ nodes each; the last ones may come out short.
    let mut columns: Vec<&crate::bound::ShapeColumn> = lp.columns.iter().collect();
    columns.sort_by(|a, b| b.integral.cmp(&a.integral).then(b.nodes.total_cmp(&a.nodes)).then(a.ty.cmp(&b.ty)));
    // Fractional columns: each type's share of pods, packed greedily afterwards.
    let mut shares: Vec<(usize, Vec<Shape>)> = Vec::new();
    for col in columns {
        let cand = cands.get(col.ty)?;
        if col.integral {
            for _ in 0..(col.nodes - 1e-9).ceil().max(0.0) as usize {
                let mut bin = Vec::new();
                let mut used = vec![0i128; cand.room.len()];
                for (s, &k) in col.content.iter().enumerate() {
                    let pods = take(s, k.round().max(0.0) as usize, &mut next);
                    if let Some(shape) = shapes.get(s) {
                        for (u, q) in used.iter_mut().zip(&shape.req) {
                            *u += q * pods.len() as i128;
                        }
                    }
                    bin.extend(pods);
                }
                if bin.is_empty() {
                    break;
                }
                bins.push((bin, used));
            }
        } else {
            let idx = match shares.iter().position(|(t, _)| *t == col.ty) {
                Some(i) => i,
                None => {
                    let empty =
                        shapes.iter().map(|s| Shape { req: s.req.clone(), pods: Vec::new(), next: 0 }).collect();
                    shares.push((col.ty, empty));
                    shares.len() - 1
                }
            };
            let share = shares.get_mut(idx)?;
            for (s, &k) in col.content.iter().enumerate() {
                let pods = take(s, (k * col.nodes).round().max(0.0) as usize, &mut next);
                share.1.get_mut(s)?.pods.extend(pods);
            }
        }
    }
    // Rounding leftovers join the first share, or the cheapest type holding them.
    let leftovers: Vec<(usize, Vec<usize>)> =
        (0..shapes.len()).map(|s| (s, take(s, usize::MAX, &mut next))).filter(|(_, p)| !p.is_empty()).collect();
    if !leftovers.is_empty() {
        if shares.is_empty() {
            let largest = leftovers.iter().filter_map(|(s, _)| shapes.get(*s)).map(|s| &s.req).max()?;
            let t = cheapest_holding(cands, largest)?;
            let empty = shapes.iter().map(|s| Shape { req: s.req.clone(), pods: Vec::new(), next: 0 }).collect();
            shares.push((t, empty));
        }
        let share = shares.first_mut()?;
        for (s, pods) in leftovers {
            share.1.get_mut(s)?.pods.extend(pods);
        }
    }
    for (t, mut mine) in shares {
        let cand = cands.get(t)?;
        while mine.iter().any(|s| s.left() > 0) {
            let (takes, used) = fill(&mine, &cand.room, true);
            if takes.is_empty() {
                // Pods this type cannot hold (leftovers): the cheapest type that holds the largest of them.
                let largest = mine.iter().filter(|s| s.left() > 0).map(|s| &s.req).max()?;
                let other = cands.get(cheapest_holding(cands, largest)?)?;
                let (takes, used) = fill(&mine, &other.room, false);
                if takes.is_empty() {
                    return None;
                }
                push_bin(&mut mine, takes, used, &mut bins)?;
                continue;
            }
            push_bin(&mut mine, takes, used, &mut bins)?;
        }
    }
    // Every pod exactly once.
    let placed: usize = bins.iter().map(|(b, _)| b.len()).sum();
    (placed == shapes.iter().map(|s| s.pods.len()).sum::<usize>()).then_some(bins)
}

#[cfg(test)]
mod tests {
    use karpenter_api::IntoSharedPod;
    use karpenter_api::labels;
    use karpenter_requirements::{Format, InstanceType, Offering, Overhead, Quantity, Requirement, ResourceList};
    use karpenter_testing::{NodePoolOptions, PodOptions, node_pool, pod};

    use crate::check::check;
    use crate::scheduler::{PoolInput, SchedulerOptions, schedule};
    use crate::snapshot::ClusterSnapshot;

    /// Type k: k cpu, 2k GiB, 100 pods, $k/h (the same price per resource at every size).
    fn catalogue() -> Vec<InstanceType> {
        (1..=8i64)
            .map(|k| {
                let name = format!("t-{k}");
                let offering = Offering::new(
                    [
                        Requirement::in_values(labels::ZONE, ["z"]),
                        Requirement::in_values(labels::CAPACITY_TYPE, ["on-demand"]),
                    ]
                    .into_iter()
                    .collect(),
                    k as f64,
                );
                InstanceType::new(
                    name.clone(),
                    [Requirement::in_values(labels::INSTANCE_TYPE, [name.as_str()])].into_iter().collect(),
                    vec![offering],
                    ResourceList::new()
                        .with("cpu", Quantity::from_int(k, Format::DecimalSI))
                        .with("memory", Quantity::from_int(2 * k * (1 << 30), Format::BinarySI))
                        .with("pods", Quantity::from_int(100, Format::DecimalSI)),
                    Overhead::default(),
                )
            })
            .collect()
    }

    /// Four cpu-heavy pods (2 cpu, 1 GiB) sort first and fill one claim's cpu (type 8) while its memory
    /// stays mostly empty; the four memory-heavy pods (500m, 3.5 GiB) then need a type 7: $15/h upstream.
    /// Mixed, the same pods fit two type 5 (two cpu-heavy and two memory-heavy pods each: 5 cpu, 9 GiB):
    /// $10/h, the LP bound.
    fn snapshot(spread: bool) -> ClusterSnapshot {
        let mut s = ClusterSnapshot::new();
        s.node_pools.push(node_pool(NodePoolOptions { name: Some("default".into()), ..Default::default() }));
        for i in 0..8 {
            let (cpu, mem) = if i < 4 { ("2", "1Gi") } else { ("500m", "3584Mi") };
            let mut labels = std::collections::BTreeMap::new();
            labels.insert("app".to_owned(), "web".to_owned());
            let mut o = PodOptions {
                name: Some(format!("p{i}")),
                requests: [("cpu", cpu), ("memory", mem)].into(),
                labels,
                ..Default::default()
            };
            if spread {
                o.topology_spread = vec![k8s_openapi::api::core::v1::TopologySpreadConstraint {
                    max_skew: 8,
                    topology_key: labels::HOSTNAME.into(),
                    when_unsatisfiable: "DoNotSchedule".into(),
                    label_selector: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                        match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
                        match_expressions: None,
                    }),
                    ..Default::default()
                }];
            }
            s.pending_pods.push(pod(o).into_shared());
        }
        s
    }

    #[test]
    fn repack_is_cheaper_and_valid_and_can_be_turned_off() {
        let its = catalogue();
        let s = snapshot(false);
        let pools = [PoolInput { node_pool: &s.node_pools[0], instance_types: &its }];
        let provider = karpenter_testing::vocabulary::aws();
        let upstream = SchedulerOptions { upstream_packing: true, ..Default::default() };
        let d = schedule(&s, &pools, &provider, &upstream);
        assert_eq!(d.total_price(), 15.0, "{}", d.to_json());
        let d = schedule(&s, &pools, &provider, &SchedulerOptions::default());
        check(&s, &pools, &provider, &d).unwrap();
        assert!(d.unschedulable.is_empty());
        assert_eq!(d.total_price(), 10.0, "{}", d.to_json());
        assert_eq!(d.new_node_claims.len(), 2);
        assert_eq!(d.new_node_claims[0].name, "default-1", "hostnames of the group's claims are reused");
        for c in &d.new_node_claims {
            assert_eq!(c.instance_type_names().next(), Some("t-5"));
            assert_eq!(c.pods.len(), 4);
        }
        assert_eq!(d.new_node_claims[1].name, "default-2");
        let again = schedule(&s, &pools, &provider, &SchedulerOptions::default());
        assert_eq!(again.to_json(), d.to_json(), "deterministic");
    }

    fn priced(name: &str, milli_cpu: i64, mib: i64, pods: i64, price: f64) -> InstanceType {
        let offering = Offering::new(
            [Requirement::in_values(labels::ZONE, ["z"]), Requirement::in_values(labels::CAPACITY_TYPE, ["on-demand"])]
                .into_iter()
                .collect(),
            price,
        );
        InstanceType::new(
            name,
            [Requirement::in_values(labels::INSTANCE_TYPE, [name])].into_iter().collect(),
            vec![offering],
            ResourceList::new()
                .with("cpu", Quantity::from_milli(milli_cpu))
                .with("memory", Quantity::from_int(mib << 20, Format::BinarySI))
                .with("pods", Quantity::from_int(pods, Format::DecimalSI)),
            Overhead::default(),
        )
    }

    /// A lopsided catalogue: cheap cpu without memory and cheap memory without cpu (no pod fits either) make
    /// the resource LP price cpu at almost nothing, so its post-pass values cpu-heavy pods at almost nothing
    /// and strands them. Best real packing: cpu-heavy pods (2 cpu, 512Mi) four to a "c" node (8 cpu, 4 GiB,
    /// $0.25) and memory-heavy pods (250m, 3 GiB) five to an "r" node (2 cpu, 16 GiB, $0.20): 5 + 4 nodes,
    /// $2.05/h, which is also the shape bound.
    #[test]
    fn lopsided_catalogues_pack_by_the_shape_lp() {
        let its = vec![
            priced("cpu-only", 4000, 64, 4, 0.01),
            priced("mem-only", 100, 65536, 100, 0.2),
            priced("balanced", 4000, 8192, 20, 0.2),
            priced("c", 8000, 4096, 20, 0.25),
            priced("r", 2000, 16384, 20, 0.2),
            priced("big", 16000, 32768, 100, 1.0),
        ];
        let mut s = ClusterSnapshot::new();
        s.node_pools.push(node_pool(NodePoolOptions { name: Some("default".into()), ..Default::default() }));
        for i in 0..40 {
            let (cpu, mem) = if i % 2 == 0 { ("2", "512Mi") } else { ("250m", "3Gi") };
            s.pending_pods.push(
                pod(PodOptions {
                    name: Some(format!("p{i:02}")),
                    requests: [("cpu", cpu), ("memory", mem)].into(),
                    ..Default::default()
                })
                .into_shared(),
            );
        }
        let pools = [PoolInput { node_pool: &s.node_pools[0], instance_types: &its }];
        let provider = karpenter_testing::vocabulary::aws();
        let d = schedule(&s, &pools, &provider, &SchedulerOptions::default());
        check(&s, &pools, &provider, &d).unwrap();
        assert!(d.unschedulable.is_empty());
        let bound = crate::bound::decision_bound(&s, &pools, &provider, &d).unwrap();
        assert!(bound.mix.iter().all(|(_, it, _)| it == "c" || it == "r"), "{bound:?}");
        assert!((bound.cost - 2.05).abs() < 1e-6, "{bound:?}");
        assert!((d.total_price() - 2.05).abs() < 1e-9, "{}", d.to_json());
    }

    #[test]
    fn pods_with_topology_are_not_moved() {
        let its = catalogue();
        let s = snapshot(true);
        let pools = [PoolInput { node_pool: &s.node_pools[0], instance_types: &its }];
        let provider = karpenter_testing::vocabulary::aws();
        let upstream = SchedulerOptions { upstream_packing: true, ..Default::default() };
        let a = schedule(&s, &pools, &provider, &upstream);
        let b = schedule(&s, &pools, &provider, &SchedulerOptions::default());
        assert_eq!(a.to_json(), b.to_json());
    }
}
