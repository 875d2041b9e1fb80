//! A lower bound on what new capacity for a set of pods must cost, to judge the scheduler's packing.
//!
//! # The bound
//!
//! Every new NodeClaim runs one instance type `t` whose pods (plus the DaemonSets it runs) fit into its
//! allocatable, and costs at least `price_t`, the cheapest available offering of `t` compatible with its
//! NodePool. Counting how many nodes of each type a decision launches as `x_t` gives, for each resource
//! `r` in {cpu, memory, pods},
//!
//! ```text
//! Σ_t room_{t,r} · x_t ≥ demand_r        room = allocatable − DaemonSet overhead,  demand = Σ pod requests
//! ```
//!
//! so the decision costs at least `Σ_t price_t · x_t` for an integer `x` meeting these constraints. Dropping
//! integrality gives the linear program
//!
//! ```text
//! minimise Σ_t price_t · x_t   subject to   Σ_t room_{t,r} · x_t ≥ demand_r (r = cpu, memory, pods),  x ≥ 0
//! ```
//!
//! whose optimum is a lower bound on the cost of **any** placement of those pods onto new nodes. With three
//! constraints an optimal vertex uses at most three instance types; [`solve_lp`] finds it with a small
//! simplex on the dual (three variables, one constraint per instance type):
//!
//! ```text
//! maximise Σ_r demand_r · y_r   subject to   Σ_r room_{t,r} · y_r ≤ price_t for every t,  y ≥ 0
//! ```
//!
//! `y_r` is a price per unit of resource `r` at which no instance type is cheaper than its contents. **The
//! reported bound is the dual objective of a `y` checked to be feasible** (scaled down if rounding left any
//! constraint violated), so by weak duality it is a valid lower bound whatever the floating-point path of
//! the simplex; at the optimum it equals the LP optimum.
//!
//! # Where it is loose
//!
//! The relaxation knows totals only. It ignores that a pod is indivisible and must fit on one node (many
//! large pods on small types leave fragments), that a pod may only use the NodePools and instance types
//! its requirements allow, and every placement constraint: hostname anti-affinity or hostname spread
//! forces a node per pod (or per few pods), zonal spread and affinity force nodes into particular zones.
//! For such workloads the ratio `decision cost / bound` measures those constraints as much as packing
//! quality; for unconstrained pods that are small against the largest instance type it is close to the
//! packing loss alone.
//!
//! It is also loose when the catalogue has lopsided types: the cpu of a cheap burstable type with almost no
//! memory and the memory of a memory-optimised type add up to a mix no pod can use. [`lower_bound`] therefore
//! also solves the tighter shape program of [`solve_shape_lp`] (pods grouped by requests, each shape only on
//! types it fits, every type's resources used together) and reports the larger bound.

mod shapes;

use std::collections::BTreeSet;

use karpenter_api::{CompactPod, ProviderLabels};
use karpenter_requirements::ResourceList;

use crate::decision::Decisions;
use crate::scheduler::PoolInput;
use crate::scheduler::pods::requests_with_pod_count;
use crate::scheduler::templates::{Template, daemons};
use crate::snapshot::{ClusterSnapshot, pod_key};

pub use shapes::{ShapeColumn, ShapeDemand, ShapeLp, ShapeType, solve_shape_lp};

/// The resources the bound counts, in the order of every `[f64; 3]` of this module.
pub const RESOURCES: [&str; 3] = ["cpu", "memory", "pods"];

/// Why no bound could be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BoundError {
    /// Pods demand a resource that no instance type has room for: no placement exists.
    #[error("no instance type has room for {resource}, which the pods request")]
    Uncoverable {
        /// The resource name.
        resource: &'static str,
    },
    /// A demand dimension of [`solve_covering`] that no column covers.
    #[error("no column covers demand dimension {index}")]
    UncoverableDemand {
        /// The dimension.
        index: usize,
    },
    /// A price or quantity is negative or not finite.
    #[error("instance type {index}: price and room must be finite and non-negative")]
    InvalidInput {
        /// Index of the offending entry of the catalogue passed to [`solve_lp`].
        index: usize,
    },
}

/// One instance type as the linear program sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct LpType {
    /// Hourly price (the cheapest offering that could be launched).
    pub price: f64,
    /// Room per node for [`RESOURCES`]: cores, bytes, pods.
    pub room: [f64; 3],
}

/// The solution of [`solve_lp`].
#[derive(Debug, Clone, PartialEq)]
pub struct LpSolution {
    /// The lower bound: the dual objective `Σ demand_r · y_r` of a feasible `y`.
    pub cost: f64,
    /// The dual prices `y` per unit of [`RESOURCES`] ($ per core, per byte, per pod).
    pub unit_prices: [f64; 3],
    /// The fractional instance-type mix attaining the optimum: (index into the catalogue, node count), at most
    /// three entries, largest count first.
    pub mix: Vec<(usize, f64)>,
    /// Simplex pivots taken.
    pub pivots: usize,
}

const EPS: f64 = 1e-12;

/// One column of [`solve_covering`]: a unit that costs `price` and covers `cover[d]` of every demand `d`.
#[derive(Debug, Clone, PartialEq)]
pub struct CoverColumn {
    /// Cost of one unit.
    pub price: f64,
    /// What one unit covers, per demand dimension (missing entries count as 0).
    pub cover: Vec<f64>,
}

/// The solution of [`solve_covering`].
#[derive(Debug, Clone, PartialEq)]
pub struct Covering {
    /// The dual objective `Σ demand_d · duals_d` of a feasible dual: a lower bound, equal to the optimum up to
    /// floating point.
    pub cost: f64,
    /// The dual prices per unit of each demand dimension (feasible: no column covers more than its price).
    pub duals: Vec<f64>,
    /// The primal solution: (column index, units), largest first; at most one entry per positive demand.
    pub mix: Vec<(usize, f64)>,
    /// Simplex pivots taken.
    pub pivots: usize,
}

/// Solves the covering program `min Σ_c price_c x_c  s.t.  Σ_c cover_{c,d} x_c ≥ demand_d, x ≥ 0` through its
/// dual `max Σ_d demand_d y_d  s.t.  Σ_d cover_{c,d} y_d ≤ price_c, y ≥ 0`, which the origin satisfies (prices are
/// non-negative), so a primal simplex on the dual needs no first phase. Dimensions with zero demand impose
/// nothing. Dantzig's rule picks the entering variable; after many pivots without progress Bland's rule takes
/// over, which cannot cycle.
pub fn solve_covering(demand: &[f64], columns: &[CoverColumn]) -> Result<Covering, BoundError> {
    for (index, c) in columns.iter().enumerate() {
        if !(c.price.is_finite() && c.price >= 0.0 && c.cover.iter().all(|r| r.is_finite() && *r >= 0.0)) {
            return Err(BoundError::InvalidInput { index });
        }
    }
    let cover = |c: &CoverColumn, d: usize| c.cover.get(d).copied().unwrap_or(0.0);
    // Nonbasic structural variables: the dimensions with positive demand. Scaling y_d by demand_d makes every
    // objective coefficient 1 and the constraint entries cover/demand (well scaled whatever the units).
    let dims: Vec<usize> = (0..demand.len()).filter(|&d| demand[d].is_finite() && demand[d] > 0.0).collect();
    for &d in &dims {
        if !columns.iter().any(|c| cover(c, d) > 0.0) {
            return Err(BoundError::UncoverableDemand { index: d });
        }
    }
    let k = dims.len();
    if k == 0 {
        return Ok(Covering { cost: 0.0, duals: vec![0.0; demand.len()], mix: Vec::new(), pivots: 0 });
    }
    let n = columns.len();
    // Dictionary: basic[t] = rhs[t] − Σ_j a[t][j] · nonbasic[j]; objective z = z0 + Σ_j obj[j] · nonbasic[j].
    // Variables 0..k are the scaled dual prices, k..k+n the slacks of the columns' constraints.
    let mut a: Vec<Vec<f64>> =
        columns.iter().map(|c| dims.iter().map(|&d| cover(c, d) / demand[d]).collect::<Vec<f64>>()).collect();
    let mut rhs: Vec<f64> = columns.iter().map(|c| c.price).collect();
    let mut basic: Vec<usize> = (k..k + n).collect();
    let mut nonbasic: Vec<usize> = (0..k).collect();
    let mut obj = vec![1.0; k];
    let mut pivots = 0usize;
    let max_pivots = 50 * (n + k) + 100;
    // Dantzig's rule until this many pivots, then Bland's (the cap only guards against rounding).
    let dantzig_pivots = 10 * (n + k) + 50;
    while pivots < max_pivots {
        let entering = if pivots < dantzig_pivots {
            (0..k)
                .filter(|&j| obj[j] > EPS)
                .max_by(|&x, &y| obj[x].total_cmp(&obj[y]).then(nonbasic[y].cmp(&nonbasic[x])))
        } else {
            (0..k).filter(|&j| obj[j] > EPS).min_by_key(|&j| nonbasic[j])
        };
        let Some(e) = entering else { break };
        let mut leave: Option<(usize, f64)> = None;
        for t in 0..n {
            let coef = a[t][e];
            if coef > EPS {
                let ratio = rhs[t].max(0.0) / coef;
                let better = match leave {
                    None => true,
                    Some((l, best)) => ratio < best - EPS || (ratio <= best + EPS && basic[t] < basic[l]),
                };
                if better {
                    leave = Some((t, ratio));
                }
            }
        }
        let Some((l, _)) = leave else { break };
        pivot(&mut a, &mut rhs, &mut obj, l, e);
        std::mem::swap(&mut basic[l], &mut nonbasic[e]);
        pivots += 1;
    }
    // The dual prices of this dictionary, then made feasible for certain (weak duality needs feasibility).
    let mut u = vec![0.0; k];
    for (t, &b) in basic.iter().enumerate() {
        if b < k {
            u[b] = rhs[t].max(0.0);
        }
    }
    let mut scale = 1.0f64;
    for c in columns {
        let lhs: f64 = dims.iter().zip(&u).map(|(&d, ui)| cover(c, d) / demand[d] * ui).sum();
        if lhs > c.price {
            scale = scale.min(if lhs > 0.0 { c.price / lhs } else { 0.0 });
        }
    }
    let mut duals = vec![0.0; demand.len()];
    let mut cost = 0.0;
    for (j, &d) in dims.iter().enumerate() {
        let ui = u[j] * scale;
        cost += ui;
        duals[d] = ui / demand[d];
    }
    // The primal solution: a nonbasic slack's reduced cost is its column's units.
    let mut mix: Vec<(usize, f64)> =
        nonbasic.iter().zip(&obj).filter(|&(&v, &o)| v >= k && -o > EPS).map(|(&v, &o)| (v - k, -o)).collect();
    mix.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
    Ok(Covering { cost, duals, mix, pivots })
}

/// Solves `min Σ price_t x_t  s.t.  Σ_t room_{t,r} x_t ≥ demand_r, x ≥ 0` (see the module docs) exactly up
/// to floating point, through the dual. `demand` is in the units of [`RESOURCES`]; resources with zero
/// demand impose nothing.
pub fn solve_lp(demand: [f64; 3], types: &[LpType]) -> Result<LpSolution, BoundError> {
    let columns: Vec<CoverColumn> =
        types.iter().map(|t| CoverColumn { price: t.price, cover: t.room.to_vec() }).collect();
    let c = solve_covering(&demand, &columns).map_err(|e| match e {
        BoundError::UncoverableDemand { index } => {
            BoundError::Uncoverable { resource: RESOURCES.get(index).copied().unwrap_or("unknown") }
        }
        other => other,
    })?;
    let mut unit_prices = [0.0; 3];
    for (p, d) in unit_prices.iter_mut().zip(&c.duals) {
        *p = *d;
    }
    Ok(LpSolution { cost: c.cost, unit_prices, mix: c.mix, pivots: c.pivots })
}

fn pivot(a: &mut [Vec<f64>], rhs: &mut [f64], obj: &mut [f64], l: usize, e: usize) {
    let k = obj.len();
    let ale = a[l][e];
    // Row l solved for the entering variable; the leaving variable takes column e.
    let mut row: Vec<f64> = a[l].iter().map(|v| v / ale).collect();
    row[e] = 1.0 / ale;
    let r_rhs = rhs[l] / ale;
    for (t, at) in a.iter_mut().enumerate() {
        if t == l {
            continue;
        }
        let f = at[e];
        if f == 0.0 {
            continue;
        }
        for j in 0..k {
            at[j] = if j == e { -f * row[e] } else { at[j] - f * row[j] };
        }
        rhs[t] -= f * r_rhs;
    }
    let f = obj[e];
    for j in 0..k {
        obj[j] = if j == e { -f * row[e] } else { obj[j] - f * row[j] };
    }
    a[l] = row;
    rhs[l] = r_rhs;
}

/// The bound for a set of pods against NodePools' catalogues, with what went into it.
#[derive(Debug, Clone, PartialEq)]
pub struct CostBound {
    /// Lower bound on the hourly cost of new nodes for the pods.
    pub cost: f64,
    /// Summed requests of the counted pods for [`RESOURCES`] (cores, bytes, pods).
    pub demand: [f64; 3],
    /// Pods counted.
    pub pods: usize,
    /// Pods left out because their requests do not parse (the scheduler rejects them too).
    pub skipped: usize,
    /// The optimal fractional mix: (NodePool, instance type, node count).
    pub mix: Vec<(String, String, f64)>,
    /// The shape bound's outcome, when it ran (see [`solve_shape_lp`]).
    pub shapes: Option<ShapeBound>,
}

impl CostBound {
    /// `cost / bound`: how far a decision costing `cost` is from the bound (`None` when the bound is 0).
    pub fn ratio(&self, cost: f64) -> Option<f64> {
        (self.cost > 0.0).then(|| cost / self.cost)
    }
}

/// The bound over `pods` (requests including the pod itself for `pods`) against every instance type of the
/// dynamic NodePools in `pools`, each with its room after instance overhead and the NodePool's DaemonSets
/// (as the scheduler computes it) and the price of its cheapest available offering compatible with the
/// NodePool's requirements. A type offered by several NodePools counts once per NodePool, which cannot
/// lower the bound below a valid one. Free capacity on existing nodes is **not** subtracted: pass the pods
/// that need new nodes (see [`decision_bound`]).
///
/// The result is the larger of the resource bound ([`solve_lp`]) and, for at most 512 distinct request
/// shapes, the shape bound ([`solve_shape_lp`]: whole pods on types they fit, resources kept together).
pub fn lower_bound<'p>(
    snapshot: &ClusterSnapshot,
    pools: &[PoolInput<'_>],
    provider: &ProviderLabels,
    pods: impl IntoIterator<Item = &'p CompactPod>,
) -> Result<CostBound, BoundError> {
    let mut demand = [0.0; 3];
    let (mut counted, mut skipped) = (0usize, 0usize);
    // Pods grouped by their requests, for the shape bound.
    let mut shapes: Vec<(ResourceList, usize)> = Vec::new();
    for pod in pods {
        match requests_with_pod_count(pod) {
            Ok(r) => {
                for (d, v) in demand.iter_mut().zip(resource_vector(&r)) {
                    *d += v;
                }
                counted += 1;
                if shapes.len() <= MAX_SHAPES {
                    match shapes.iter_mut().find(|(q, _)| *q == r) {
                        Some((_, n)) => *n += 1,
                        None => shapes.push((r, 1)),
                    }
                }
            }
            Err(_) => skipped += 1,
        }
    }
    let daemons = daemons(snapshot, false);
    let mut types = Vec::new();
    let mut rooms: Vec<ResourceList> = Vec::new();
    let mut names: Vec<(String, String)> = Vec::new();
    for pool in pools.iter().filter(|p| !p.node_pool.is_static()) {
        let template = Template::new(pool.node_pool, pool.instance_types, snapshot, &daemons, provider);
        if template.unusable.is_some() {
            continue;
        }
        for ((it, room), groups) in template.its.iter().zip(&template.room).zip(&template.groups) {
            // A type with offering overrides is one column per offering group: its room at the price of the
            // group's cheapest compatible offering.
            let columns: Vec<(f64, &ResourceList)> = if groups.is_empty() {
                vec![(it.min_compatible_price(&template.requirements, provider), room)]
            } else {
                groups
                    .iter()
                    .map(|g| {
                        let compatible =
                            g.offerings.iter().filter(|o| o.is_compatible(&template.requirements, provider));
                        (compatible.map(|o| o.price).min_by(f64::total_cmp).unwrap_or(f64::INFINITY), &g.room)
                    })
                    .collect()
            };
            for (price, room) in columns {
                if !price.is_finite() || room.any_negative() {
                    continue;
                }
                types.push(LpType { price, room: resource_vector(room).map(|v| v.max(0.0)) });
                rooms.push(room.clone());
                names.push((template.name.clone(), it.name.clone()));
            }
        }
    }
    let lp = solve_lp(demand, &types)?;
    let named = |i: usize, x: f64| names.get(i).map(|(pool, it)| (pool.clone(), it.clone(), x));
    let mut bound = CostBound {
        cost: lp.cost,
        demand,
        pods: counted,
        skipped,
        mix: lp.mix.iter().filter_map(|&(i, x)| named(i, x)).collect(),
        shapes: None,
    };
    // The shape bound is never below the resource bound at its optimum; it is kept only where it is higher
    // (it may stop short of its optimum) and only for a modest number of distinct shapes.
    if shapes.len() <= MAX_SHAPES {
        let demands: Vec<ShapeDemand> =
            shapes.iter().map(|(r, n)| ShapeDemand { req: resource_vector(r), count: *n as f64 }).collect();
        let shape_types: Vec<ShapeType> = types
            .iter()
            .zip(&rooms)
            .map(|(t, room)| ShapeType {
                price: t.price,
                room: t.room,
                fits: shapes.iter().map(|(r, _)| r.fits(room)).collect(),
            })
            .collect();
        if let Ok(sl) = solve_shape_lp(&demands, &shape_types, MAX_ROUNDS, 1e-6) {
            bound.shapes =
                Some(ShapeBound { cost: sl.cost, shapes: shapes.len(), rounds: sl.rounds, converged: sl.converged });
            if sl.cost > bound.cost {
                bound.cost = sl.cost;
                bound.mix = sl.assignment.iter().filter_map(|(i, x, _)| named(*i, *x)).collect();
            }
        }
    }
    Ok(bound)
}

/// Distinct request shapes above which [`lower_bound`] keeps to the resource bound.
const MAX_SHAPES: usize = 512;

/// Column-generation rounds of the shape bound in [`lower_bound`].
const MAX_ROUNDS: usize = 500;

/// What the shape bound of [`lower_bound`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct ShapeBound {
    /// Its lower bound (the reported bound is the larger of this and the resource bound).
    pub cost: f64,
    /// Distinct request shapes among the pods.
    pub shapes: usize,
    /// Column-generation rounds taken.
    pub rounds: usize,
    /// Whether it reached its optimum.
    pub converged: bool,
}

/// The bound over the pods a decision placed on new NodeClaims: comparable with
/// [`Decisions::total_price`], which prices exactly those NodeClaims.
pub fn decision_bound(
    snapshot: &ClusterSnapshot,
    pools: &[PoolInput<'_>],
    provider: &ProviderLabels,
    decisions: &Decisions,
) -> Result<CostBound, BoundError> {
    let placed: BTreeSet<&str> =
        decisions.new_node_claims.iter().flat_map(|c| c.pods.iter().map(crate::PodKey::as_str)).collect();
    let pods = snapshot.pending_pods.iter().map(|p| p.as_ref()).filter(|p| placed.contains(pod_key(p).as_str()));
    lower_bound(snapshot, pools, provider, pods)
}

/// cpu in cores, memory in bytes, pods in pods.
fn resource_vector(r: &ResourceList) -> [f64; 3] {
    [r.cpu(), r.memory(), r.pods()].map(|q| q.as_nanos() as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_api::IntoSharedPod;
    use karpenter_requirements::{Format, InstanceType, Offering, Overhead, Quantity, Requirement};
    use karpenter_testing::{NodePoolOptions, PodOptions, node_pool, pod};

    /// A seeded xorshift64 stream of floats in [0, 1) for the randomised comparisons.
    pub(crate) fn xorshift(mut seed: u64) -> impl FnMut() -> f64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    fn t(price: f64, cpu: f64, mem: f64, pods: f64) -> LpType {
        LpType { price, room: [cpu, mem, pods] }
    }

    #[test]
    fn hand_computed_two_type_mix() {
        // A: 4 cpu / 4 GiB for $1, B: 1 cpu / 8 GiB for $1; demand 10 cpu, 20 GiB.
        // Only A: 10/4 = 2.5 nodes ($2.5, 10 GiB, short); only B: 10 nodes ($10).
        // Both constraints tight: 4a + b = 10, 4a + 8b = 20  =>  b = 10/7, a = 15/7, cost 25/7 ≈ 3.57.
        let types = [t(1.0, 4.0, 4.0, 100.0), t(1.0, 1.0, 8.0, 100.0)];
        let lp = solve_lp([10.0, 20.0, 1.0], &types).unwrap();
        assert!((lp.cost - 25.0 / 7.0).abs() < 1e-9, "{lp:?}");
        assert_eq!(lp.mix.len(), 2);
        assert_eq!(lp.mix[0].0, 0);
        assert!((lp.mix[0].1 - 15.0 / 7.0).abs() < 1e-9);
        assert!((lp.mix[1].1 - 10.0 / 7.0).abs() < 1e-9);
        // Dual prices: 4y1 + 4y2 = 1 and y1 + 8y2 = 1  =>  y2 = 3/28, y1 = 1/7; 10/7 + 20·3/28 = 25/7.
        assert!((lp.unit_prices[0] - 1.0 / 7.0).abs() < 1e-12);
        assert!((lp.unit_prices[1] - 3.0 / 28.0).abs() < 1e-12);
        assert_eq!(lp.unit_prices[2], 0.0, "pods are not binding");
    }

    #[test]
    fn single_binding_resource_picks_the_cheapest_per_unit() {
        // Only cpu binds; $/cpu: 0.5, 0.25, 0.3 -> 16 cpu on the second type: 2 nodes of $2.
        let types = [t(1.0, 2.0, 100.0, 100.0), t(2.0, 8.0, 100.0, 100.0), t(3.0, 10.0, 100.0, 100.0)];
        let lp = solve_lp([16.0, 1.0, 1.0], &types).unwrap();
        assert!((lp.cost - 4.0).abs() < 1e-12, "{lp:?}");
        assert_eq!(lp.mix, vec![(1, 2.0)]);
    }

    #[test]
    fn zero_demand_is_free_and_missing_room_is_an_error() {
        assert_eq!(solve_lp([0.0; 3], &[t(1.0, 1.0, 1.0, 1.0)]).unwrap().cost, 0.0);
        assert_eq!(
            solve_lp([1.0, 0.0, 0.0], &[t(1.0, 0.0, 1.0, 1.0)]),
            Err(BoundError::Uncoverable { resource: "cpu" })
        );
        assert_eq!(
            solve_lp([1.0, 0.0, 0.0], &[t(f64::NAN, 1.0, 1.0, 1.0)]),
            Err(BoundError::InvalidInput { index: 0 })
        );
        assert_eq!(solve_lp([1.0, 0.0, 0.0], &[t(1.0, -1.0, 1.0, 1.0)]), Err(BoundError::InvalidInput { index: 0 }));
        // A free type makes the bound zero.
        assert_eq!(solve_lp([5.0, 5.0, 5.0], &[t(0.0, 1.0, 1.0, 1.0), t(1.0, 9.0, 9.0, 9.0)]).unwrap().cost, 0.0);
    }

    /// Brute force: the optimum is attained by a basic solution using at most three types, each set of
    /// binding constraints solved exactly (Cramer's rule); the simplex must match it.
    fn brute_force(demand: [f64; 3], types: &[LpType]) -> f64 {
        let mut best = f64::INFINITY;
        let n = types.len();
        let feasible = |x: &[(usize, f64)]| {
            (0..3).all(|r| x.iter().map(|&(i, v)| types[i].room[r] * v).sum::<f64>() >= demand[r] * (1.0 - 1e-9))
        };
        let cost = |x: &[(usize, f64)]| x.iter().map(|&(i, v)| types[i].price * v).sum::<f64>();
        for i in 0..n {
            // One type: enough nodes for its worst resource.
            let v = (0..3).map(|r| demand[r] / types[i].room[r]).fold(0.0, f64::max);
            best = best.min(cost(&[(i, v)]));
            for j in i + 1..n {
                for (r1, r2) in [(0, 1), (0, 2), (1, 2)] {
                    let (a, b, c, d) = (types[i].room[r1], types[j].room[r1], types[i].room[r2], types[j].room[r2]);
                    let det = a * d - b * c;
                    if det.abs() < 1e-12 {
                        continue;
                    }
                    let xi = (demand[r1] * d - b * demand[r2]) / det;
                    let xj = (a * demand[r2] - c * demand[r1]) / det;
                    let x = [(i, xi), (j, xj)];
                    if xi >= 0.0 && xj >= 0.0 && feasible(&x) {
                        best = best.min(cost(&x));
                    }
                }
                for k in j + 1..n {
                    let m = [types[i].room, types[j].room, types[k].room];
                    let det3 = |c: [[f64; 3]; 3]| {
                        c[0][0] * (c[1][1] * c[2][2] - c[1][2] * c[2][1])
                            - c[0][1] * (c[1][0] * c[2][2] - c[1][2] * c[2][0])
                            + c[0][2] * (c[1][0] * c[2][1] - c[1][1] * c[2][0])
                    };
                    // Rows: resources; columns: the three types.
                    let base = [[m[0][0], m[1][0], m[2][0]], [m[0][1], m[1][1], m[2][1]], [m[0][2], m[1][2], m[2][2]]];
                    let det = det3(base);
                    if det.abs() < 1e-12 {
                        continue;
                    }
                    let solve = |col: usize| {
                        let mut c = base;
                        for (r, row) in c.iter_mut().enumerate() {
                            row[col] = demand[r];
                        }
                        det3(c) / det
                    };
                    let x = [(i, solve(0)), (j, solve(1)), (k, solve(2))];
                    if x.iter().all(|&(_, v)| v >= 0.0) && feasible(&x) {
                        best = best.min(cost(&x));
                    }
                }
            }
        }
        best
    }

    #[test]
    fn matches_brute_force_on_random_catalogues() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1du64);
        for case in 0..200 {
            let n = 1 + (next() * 8.0) as usize;
            let types: Vec<LpType> = (0..n)
                .map(|_| t(0.1 + next() * 5.0, 0.5 + next() * 16.0, 1.0 + next() * 64.0, 5.0 + next() * 100.0))
                .collect();
            let demand = [next() * 100.0, next() * 400.0, next() * 300.0];
            let lp = solve_lp(demand, &types).unwrap();
            let exact = brute_force(demand, &types);
            assert!((lp.cost - exact).abs() <= 1e-7 * exact.max(1.0), "case {case}: simplex {} vs {exact}", lp.cost);
            // The mix is feasible and costs the bound (strong duality).
            let mix_cost: f64 = lp.mix.iter().map(|&(i, x)| types[i].price * x).sum();
            assert!((mix_cost - lp.cost).abs() <= 1e-7 * exact.max(1.0), "case {case}");
            for (r, d) in demand.iter().enumerate() {
                let covered: f64 = lp.mix.iter().map(|&(i, x)| types[i].room[r] * x).sum();
                assert!(covered >= d * (1.0 - 1e-9) - 1e-9, "case {case} resource {r}");
            }
        }
    }

    fn instance_type(name: &str, cpu: i64, gib: i64, price: f64) -> InstanceType {
        let offering = Offering::new(
            [
                Requirement::in_values("topology.kubernetes.io/zone", ["z"]),
                Requirement::in_values("karpenter.sh/capacity-type", ["on-demand"]),
            ]
            .into_iter()
            .collect(),
            price,
        );
        InstanceType::new(
            name,
            [Requirement::in_values("node.kubernetes.io/instance-type", [name])].into_iter().collect(),
            vec![offering],
            ResourceList::new()
                .with("cpu", Quantity::from_int(cpu, Format::DecimalSI))
                .with("memory", Quantity::from_int(gib << 30, Format::BinarySI))
                .with("pods", Quantity::from_int(110, Format::DecimalSI)),
            Overhead {
                kube_reserved: ResourceList::new().with("cpu", Quantity::from_milli(500)),
                ..Default::default()
            },
        )
    }

    #[test]
    fn snapshot_bound_uses_room_after_overhead_and_prices_decisions() {
        let mut s = ClusterSnapshot::new();
        s.node_pools.push(node_pool(NodePoolOptions { name: Some("default".into()), ..Default::default() }));
        for i in 0..6 {
            s.pending_pods.push(
                pod(PodOptions {
                    name: Some(format!("p{i}")),
                    requests: [("cpu", "1500m"), ("memory", "1Gi")].into(),
                    ..Default::default()
                })
                .into_shared(),
            );
        }
        // 4 cpu − 500m overhead = 3.5 cpu of room for $1 ($0.29 per cpu; "tiny" costs $0.60 per cpu of room):
        // 9 cpu of demand needs 9/3.5 nodes.
        let its = vec![instance_type("small", 4, 16, 1.0), instance_type("tiny", 2, 8, 0.9)];
        let pools = [PoolInput { node_pool: &s.node_pools[0], instance_types: &its }];
        let provider = karpenter_testing::vocabulary::aws();
        let b = lower_bound(&s, &pools, &provider, s.pending_pods.iter().map(|p| p.as_ref())).unwrap();
        assert_eq!(b.pods, 6);
        assert_eq!(b.demand[0], 9.0);
        assert_eq!(b.demand[2], 6.0);
        assert!((b.cost - 9.0 / 3.5).abs() < 1e-9, "{b:?}");
        assert_eq!(b.mix.len(), 1);
        assert_eq!((b.mix[0].0.as_str(), b.mix[0].1.as_str()), ("default", "small"));
        // The scheduler needs 3 small nodes (two 1.5 cpu pods each): $3 against a bound of $2.57.
        let d = crate::schedule(&s, &pools, &provider, &crate::SchedulerOptions::default());
        assert_eq!(d.total_price(), 3.0);
        let db = decision_bound(&s, &pools, &provider, &d).unwrap();
        assert_eq!(db, b);
        let ratio = db.ratio(d.total_price()).unwrap();
        assert!(ratio >= 1.0 && (ratio - 3.0 * 3.5 / 9.0).abs() < 1e-9);
        // Unparseable requests are skipped.
        let mut bad = CompactPod::clone(&s.pending_pods[0]);
        if let Some(r) = std::sync::Arc::make_mut(&mut bad.spec).containers[0].resources.as_mut() {
            r.requests
                .as_mut()
                .unwrap()
                .insert("cpu".into(), k8s_openapi::apimachinery::pkg::api::resource::Quantity("x".into()));
        }
        let b = lower_bound(&s, &pools, &provider, [&bad]).unwrap();
        assert_eq!((b.pods, b.skipped, b.cost), (0, 1, 0.0));
    }
}
