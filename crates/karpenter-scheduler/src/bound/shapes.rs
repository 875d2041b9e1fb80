//! The shape-aware bound: pods go whole onto instance types they fit, resources stay together.
//!
//! [`super::solve_lp`] lets the cpu of one type serve the memory of another: on a catalogue with a tiny
//! burstable type (2 vCPU, half a GiB, a few cents) and a memory-heavy one it buys the cpu of the first and the
//! memory of the second, a mix no pod can use. Grouping the pods by their requests ("shapes") gives a much
//! tighter relaxation: a pod of shape `s` may only go to a type it fits, and the pods a type receives must fit
//! its room in every resource at once:
//!
//! ```text
//! minimise Σ_t price_t · x_t   s.t.   Σ_t z_{s,t} ≥ n_s                      (every pod placed)
//!                                     Σ_s req_{s,r} · z_{s,t} ≤ room_{t,r} · x_t   (for every t and r)
//!                                     z_{s,t} = 0 unless shape s fits type t,  x, z ≥ 0
//! ```
//!
//! Any placement of the pods onto new nodes gives a feasible point (count the nodes and pods per type), so the
//! optimum is a lower bound on what they must cost. It is solved by column generation: a column is one node of
//! type `t` with a fractional content `y` (pods per shape) that fits its room; the master program covers the
//! shape counts with columns ([`super::solve_covering`], whose duals `u_s` price a pod of each shape), and the
//! pricing problem asks each type for the content worth most at those prices, a three-constraint linear
//! program solved the same way. A type whose best content is worth more than its price yields a new column.
//!
//! **The reported bound is valid at every iteration**: if the best type is worth `ρ ≥ 1` times its price, the
//! duals divided by `ρ` are feasible for the full program (no type, whatever it holds, is worth more than its
//! price), so by weak duality `master / ρ` is a lower bound. At convergence `ρ = 1` and it is the optimum.

use super::{BoundError, CoverColumn, solve_covering};

/// Pods of one request shape, as the shape bound sees them.
#[derive(Debug, Clone, PartialEq)]
pub struct ShapeDemand {
    /// Requests of one pod for the resources of [`super::RESOURCES`] (cores, bytes, pods; pods is 1).
    pub req: [f64; 3],
    /// Number of pods of this shape.
    pub count: f64,
}

/// One instance type, as the shape bound sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ShapeType {
    /// Hourly price of one node.
    pub price: f64,
    /// Room per node for [`super::RESOURCES`].
    pub room: [f64; 3],
    /// Per shape: whether one pod of it fits a node of this type (in every resource it requests, extended
    /// resources included). A missing entry counts as `false`.
    pub fits: Vec<bool>,
}

/// The result of [`solve_shape_lp`].
#[derive(Debug, Clone, PartialEq)]
pub struct ShapeLp {
    /// A lower bound on the cost of placing the pods (valid whether or not the iteration converged).
    pub cost: f64,
    /// Cost of the fractional solution found (≥ `cost`; equal at convergence).
    pub upper: f64,
    /// The fractional solution per type: (type index, nodes, pods per shape), most nodes first.
    pub assignment: Vec<(usize, f64, Vec<f64>)>,
    /// The columns of the fractional solution: nodes of one type with one content each.
    pub columns: Vec<ShapeColumn>,
    /// Column-generation rounds taken.
    pub rounds: usize,
    /// Whether the solution is within the requested gap of the bound.
    pub converged: bool,
}

/// A column of the solution: `nodes` (fractional) nodes of type `ty`, each holding `content` pods per shape.
#[derive(Debug, Clone, PartialEq)]
pub struct ShapeColumn {
    /// Index of the type.
    pub ty: usize,
    /// How many such nodes (fractional).
    pub nodes: f64,
    /// Pods per shape on each node.
    pub content: Vec<f64>,
    /// Whether `content` is whole pods (a real node's pattern) rather than a fractional filling.
    pub integral: bool,
}

/// Columns added per round: the most profitable types' contents.
const COLUMNS_PER_ROUND: usize = 16;

/// Nodes with room for at most this many pods are priced in whole pods ([`best_pattern`]).
const SMALL_NODE_PODS: f64 = 32.0;

/// Search nodes allowed to [`best_pattern`] per type and round; beyond them the fractional content stands.
const PATTERN_SEARCH_NODES: usize = 20_000;

/// Solves the shape program of the module docs in at most `max_rounds` rounds of column generation, stopping
/// once the fractional solution costs at most `1 + gap` times the bound (`gap` 0 asks for the optimum).
///
/// Long because column generation is one loop over the master problem's tableau and its duals (start, price out,
/// add columns, stop); the pieces share the master's state.
pub fn solve_shape_lp(
    shapes: &[ShapeDemand],
    types: &[ShapeType],
    max_rounds: usize,
    gap: f64,
) -> Result<ShapeLp, BoundError> {
    for (index, t) in types.iter().enumerate() {
        if !(t.price.is_finite() && t.price >= 0.0 && t.room.iter().all(|r| r.is_finite() && *r >= 0.0)) {
            return Err(BoundError::InvalidInput { index });
        }
    }
    for (index, s) in shapes.iter().enumerate() {
        if !(s.count.is_finite() && s.count >= 0.0 && s.req.iter().all(|r| r.is_finite() && *r >= 0.0)) {
            return Err(BoundError::UncoverableDemand { index });
        }
    }
    let counts: Vec<f64> = shapes.iter().map(|s| s.count).collect();
    let fits = |t: &ShapeType, s: usize| t.fits.get(s).copied().unwrap_or(false);
    // Start: every shape alone on the type that holds it most cheaply (fractional pods per node).
    let mut columns: Vec<CoverColumn> = Vec::new();
    let mut column_type: Vec<usize> = Vec::new();
    let mut column_integral: Vec<bool> = Vec::new();
    for (s, shape) in shapes.iter().enumerate() {
        if shape.count <= 0.0 {
            continue;
        }
        let mut best: Option<(f64, usize, f64)> = None;
        for (t, ty) in types.iter().enumerate() {
            if !fits(ty, s) {
                continue;
            }
            let mut per_node = alone(&shape.req, &ty.room);
            if ty.room[2] <= SMALL_NODE_PODS {
                per_node = (per_node + 1e-9).floor();
            }
            if !(per_node > 0.0 && per_node.is_finite()) {
                continue;
            }
            let per_pod = ty.price / per_node;
            if best.is_none_or(|(b, _, _)| per_pod < b) {
                best = Some((per_pod, t, per_node));
            }
        }
        let Some((_, t, per_node)) = best else { return Err(BoundError::UncoverableDemand { index: s }) };
        let mut cover = vec![0.0; shapes.len()];
        if let Some(c) = cover.get_mut(s) {
            *c = per_node;
        }
        columns.push(CoverColumn { price: types.get(t).map_or(0.0, |ty| ty.price), cover });
        column_type.push(t);
        column_integral.push(types.get(t).is_some_and(|ty| ty.room[2] <= SMALL_NODE_PODS));
    }
    if columns.is_empty() {
        return Ok(ShapeLp {
            cost: 0.0,
            upper: 0.0,
            assignment: Vec::new(),
            columns: Vec::new(),
            rounds: 0,
            converged: true,
        });
    }
    let mut bound = 0.0f64;
    let mut rounds = 0;
    let mut converged = false;
    let mut master = solve_covering(&counts, &columns)?;
    while rounds < max_rounds {
        rounds += 1;
        // Pricing: each type's most valuable content at the master's prices per pod.
        let mut profitable: Vec<(f64, usize, Vec<f64>, bool)> = Vec::new();
        let mut rho = 1.0f64;
        for (t, ty) in types.iter().enumerate() {
            // A cheap upper bound first: most types cannot pay for themselves at these prices.
            let quick = quick_upper_bound(shapes, ty, &master.duals);
            if ty.price > 0.0 && quick <= ty.price * (1.0 + 1e-9) {
                rho = rho.max(quick / ty.price);
                continue;
            }
            let Some((mut value, mut content)) = best_content(shapes, ty, &master.duals) else { continue };
            let mut integral = false;
            // Small nodes hold few pods, so whole pods matter: their exact best pattern replaces the
            // fractional content (a relaxation still, as every real node holds some pattern).
            if ty.room[2] <= SMALL_NODE_PODS
                && value > ty.price * (1.0 + 1e-9)
                && let Some((v, c)) = best_pattern(shapes, ty, &master.duals, PATTERN_SEARCH_NODES)
            {
                value = v;
                content = c;
                integral = true;
            }
            if ty.price <= 0.0 {
                if value > 0.0 {
                    // A free type that holds some pod: the bound is 0.
                    rho = f64::INFINITY;
                }
                continue;
            }
            let ratio = value / ty.price;
            rho = rho.max(ratio);
            if ratio > 1.0 + 1e-9 {
                profitable.push((ratio, t, content, integral));
            }
        }
        // Pricing is exact up to rounding; the small margin keeps the bound on the safe side of it.
        let valid = master.cost / (rho * (1.0 + 1e-9));
        bound = bound.max(if valid.is_finite() { valid } else { 0.0 });
        if profitable.is_empty() || master.cost <= bound * (1.0 + gap.max(1e-9)) {
            converged = true;
            break;
        }
        profitable.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut added = 0;
        for (_, t, content, integral) in profitable.into_iter() {
            if added == COLUMNS_PER_ROUND {
                break;
            }
            let duplicate = columns.iter().zip(&column_type).any(|(c, &ct)| {
                ct == t && c.cover.iter().zip(&content).all(|(a, b)| (a - b).abs() <= 1e-9 * a.abs().max(1.0))
            });
            if duplicate {
                continue;
            }
            columns.push(CoverColumn { price: types.get(t).map_or(0.0, |ty| ty.price), cover: content });
            column_type.push(t);
            column_integral.push(integral);
            added += 1;
        }
        if added == 0 {
            break;
        }
        master = solve_covering(&counts, &columns)?;
    }
    // The master's primal solution, summed per type.
    let mut per_type: Vec<(usize, f64, Vec<f64>)> = Vec::new();
    let mut upper = 0.0;
    let mut used = Vec::new();
    for &(c, units) in &master.mix {
        let (Some(col), Some(&t)) = (columns.get(c), column_type.get(c)) else { continue };
        upper += col.price * units;
        used.push(ShapeColumn {
            ty: t,
            nodes: units,
            content: col.cover.clone(),
            integral: column_integral.get(c).copied().unwrap_or(false),
        });
        let entry = match per_type.iter_mut().find(|(ty, _, _)| *ty == t) {
            Some(e) => e,
            None => {
                per_type.push((t, 0.0, vec![0.0; shapes.len()]));
                per_type.last_mut().expect("just pushed")
            }
        };
        entry.1 += units;
        for (z, y) in entry.2.iter_mut().zip(&col.cover) {
            *z += units * y;
        }
    }
    per_type.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok(ShapeLp { cost: bound, upper, assignment: per_type, columns: used, rounds, converged })
}

/// An upper bound on what one node of `ty` can hold at `prices`: for every resource, its room times the best
/// price per unit of that resource among the shapes that fit (the content cannot beat it in any resource).
fn quick_upper_bound(shapes: &[ShapeDemand], ty: &ShapeType, prices: &[f64]) -> f64 {
    let mut density = [0.0f64; 3];
    for (s, shape) in shapes.iter().enumerate() {
        let p = prices.get(s).copied().unwrap_or(0.0);
        if p <= 0.0 || !ty.fits.get(s).copied().unwrap_or(false) {
            continue;
        }
        for (best, &q) in density.iter_mut().zip(&shape.req) {
            let d = if q > 0.0 { p / q } else { f64::INFINITY };
            *best = best.max(d);
        }
    }
    (0..3).map(|r| ty.room[r] * density[r]).filter(|v| !v.is_nan()).fold(f64::INFINITY, f64::min)
}

/// How many pods of request `req` fit (fractionally) into `room`.
fn alone(req: &[f64; 3], room: &[f64; 3]) -> f64 {
    req.iter().zip(room).filter(|(q, _)| **q > 0.0).map(|(q, r)| r / q).fold(f64::INFINITY, f64::min)
}

/// The content of one node of `ty` worth most at `prices` (per pod of each shape): `max Σ_s prices_s · y_s`
/// subject to `Σ_s req_{s,r} · y_s ≤ room_r` over the shapes that fit, solved as the dual of a covering
/// program with one column per resource. `None` when no priced shape fits.
fn best_content(shapes: &[ShapeDemand], ty: &ShapeType, prices: &[f64]) -> Option<(f64, Vec<f64>)> {
    let demand: Vec<f64> = shapes
        .iter()
        .enumerate()
        .map(|(s, _)| {
            let p = prices.get(s).copied().unwrap_or(0.0);
            if ty.fits.get(s).copied().unwrap_or(false) && p > 0.0 { p } else { 0.0 }
        })
        .collect();
    if demand.iter().all(|d| *d <= 0.0) {
        return None;
    }
    let columns: Vec<CoverColumn> = (0..3)
        .map(|r| CoverColumn {
            price: ty.room.get(r).copied().unwrap_or(0.0),
            cover: shapes.iter().map(|s| s.req.get(r).copied().unwrap_or(0.0)).collect(),
        })
        .collect();
    let solved = solve_covering(&demand, &columns).ok()?;
    Some((solved.cost, solved.duals))
}

/// The whole-pod pattern of one node of `ty` worth most at `prices`, by depth-first branch and bound (shapes
/// by price descending, counts from the largest that fits down, pruned with the best price per unit of each
/// remaining resource). `None` when no priced shape fits or the search exceeds `limit` nodes (its answer would
/// not be known to be the best, and the pricing must not under-estimate).
fn best_pattern(shapes: &[ShapeDemand], ty: &ShapeType, prices: &[f64], limit: usize) -> Option<(f64, Vec<f64>)> {
    let mut items: Vec<(usize, f64, [f64; 3])> = shapes
        .iter()
        .enumerate()
        .filter(|(s, _)| ty.fits.get(*s).copied().unwrap_or(false))
        .filter_map(|(s, sh)| prices.get(s).copied().filter(|p| *p > 0.0).map(|p| (s, p, sh.req)))
        .collect();
    if items.is_empty() {
        return None;
    }
    items.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    // suffix[i][r]: the best price per unit of resource r among items i.. (an item not using r is unbounded
    // in r, so it does not limit the bound through r).
    let mut suffix = vec![[0.0f64; 3]; items.len() + 1];
    for i in (0..items.len()).rev() {
        let (_, p, q) = items[i];
        for r in 0..3 {
            let density = if q[r] > 0.0 { p / q[r] } else { f64::INFINITY };
            suffix[i][r] = suffix[i + 1][r].max(density);
        }
    }
    struct Search<'a> {
        items: &'a [(usize, f64, [f64; 3])],
        suffix: &'a [[f64; 3]],
        counts: Vec<u32>,
        best: f64,
        best_counts: Vec<u32>,
        visited: usize,
        limit: usize,
    }
    impl Search<'_> {
        fn go(&mut self, i: usize, rem: [f64; 3], value: f64) -> bool {
            self.visited += 1;
            if self.visited > self.limit {
                return false;
            }
            if value > self.best {
                self.best = value;
                self.best_counts.clone_from(&self.counts);
            }
            let Some(&(_, price, req)) = self.items.get(i) else { return true };
            let Some(density) = self.suffix.get(i) else { return true };
            let bound = (0..3).map(|r| rem[r].max(0.0) * density[r]).fold(f64::INFINITY, f64::min);
            if value + bound <= self.best * (1.0 + 1e-12) {
                return true;
            }
            let most = (0..3)
                .filter(|&r| req[r] > 0.0)
                .map(|r| (rem[r] / req[r] + 1e-9).floor())
                .fold(f64::INFINITY, f64::min)
                .clamp(0.0, 1e6) as u32;
            for k in (0..=most).rev() {
                let left: [f64; 3] = std::array::from_fn(|r| rem[r] - f64::from(k) * req[r]);
                if let Some(c) = self.counts.get_mut(i) {
                    *c = k;
                }
                if !self.go(i + 1, left, value + f64::from(k) * price) {
                    return false;
                }
            }
            if let Some(c) = self.counts.get_mut(i) {
                *c = 0;
            }
            true
        }
    }
    let mut search = Search {
        items: &items,
        suffix: &suffix,
        counts: vec![0; items.len()],
        best: 0.0,
        best_counts: vec![0; items.len()],
        visited: 0,
        limit,
    };
    if !search.go(0, ty.room, 0.0) {
        return None;
    }
    let mut content = vec![0.0; shapes.len()];
    for (&(s, _, _), &k) in items.iter().zip(&search.best_counts) {
        if let Some(c) = content.get_mut(s) {
            *c = f64::from(k);
        }
    }
    Some((search.best, content))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(cpu: f64, mem: f64, count: f64) -> ShapeDemand {
        ShapeDemand { req: [cpu, mem, 1.0], count }
    }

    fn ty(price: f64, cpu: f64, mem: f64, pods: f64, shapes: &[ShapeDemand]) -> ShapeType {
        let room = [cpu, mem, pods];
        let fits = shapes.iter().map(|s| s.req.iter().zip(&room).all(|(q, r)| q <= r)).collect();
        ShapeType { price, room, fits }
    }

    #[test]
    fn cpu_and_memory_of_different_types_do_not_combine() {
        // A cpu-only type (no memory to speak of) and a memory-only type: the resource LP buys cpu from the
        // first and memory from the second; no pod fits either, so the only real option is the balanced type.
        let shapes = [shape(1.0, 1.0, 10.0)];
        let types =
            [ty(0.1, 8.0, 0.1, 100.0, &shapes), ty(0.1, 0.1, 8.0, 100.0, &shapes), ty(1.0, 4.0, 4.0, 100.0, &shapes)];
        let resource_lp = crate::bound::solve_lp(
            [10.0, 10.0, 10.0],
            &types.iter().map(|t| crate::bound::LpType { price: t.price, room: t.room }).collect::<Vec<_>>(),
        )
        .unwrap();
        assert!(resource_lp.cost < 0.5, "{resource_lp:?}");
        let lp = solve_shape_lp(&shapes, &types, 100, 1e-6).unwrap();
        assert!(lp.converged);
        assert!((lp.cost - 2.5).abs() < 1e-8, "{lp:?}");
        assert_eq!(lp.assignment.len(), 1);
        assert_eq!(lp.assignment[0].0, 2);
        assert!((lp.assignment[0].1 - 2.5).abs() < 1e-9);
    }

    #[test]
    fn complementary_shapes_share_a_node() {
        // cpu-heavy and memory-heavy pods are each lopsided alone but fill a balanced node together.
        let shapes = [shape(3.0, 1.0, 4.0), shape(1.0, 3.0, 4.0)];
        let types = [ty(1.0, 4.0, 4.0, 100.0, &shapes)];
        let lp = solve_shape_lp(&shapes, &types, 100, 1e-6).unwrap();
        assert!(lp.converged);
        // 16 cpu and 16 memory in total: four nodes.
        assert!((lp.cost - 4.0).abs() < 1e-8, "{lp:?}");
        assert!((lp.upper - 4.0).abs() < 1e-9);
        let z = &lp.assignment[0].2;
        assert!((z[0] - 4.0).abs() < 1e-9 && (z[1] - 4.0).abs() < 1e-9);
    }

    /// Brute force for one shape per type choice: with a single shape the program is "cheapest per pod".
    #[test]
    fn single_shapes_take_their_cheapest_type_per_pod() {
        let mut next = crate::bound::tests::xorshift(0x9e37_79b9_7f4a_7c15u64);
        for case in 0..100 {
            let s = [shape(0.1 + next() * 2.0, 0.1 + next() * 4.0, 1.0 + (next() * 50.0).floor())];
            let types: Vec<ShapeType> = (0..1 + (next() * 6.0) as usize)
                .map(|_| ty(0.1 + next() * 3.0, 1.0 + next() * 16.0, 1.0 + next() * 32.0, 4.0 + next() * 50.0, &s))
                .collect();
            let Ok(lp) = solve_shape_lp(&s, &types, 50, 1e-6) else {
                assert!(types.iter().all(|t| !t.fits[0]), "case {case}");
                continue;
            };
            // Small nodes hold whole pods.
            let per_node = |t: &ShapeType| {
                let x = alone(&s[0].req, &t.room);
                if t.room[2] <= SMALL_NODE_PODS { (x + 1e-9).floor() } else { x }
            };
            let exact = types
                .iter()
                .filter(|t| t.fits[0])
                .map(|t| t.price / per_node(t) * s[0].count)
                .fold(f64::INFINITY, f64::min);
            assert!((lp.cost - exact).abs() <= 1e-7 * exact, "case {case}: {} vs {exact}", lp.cost);
        }
    }

    #[test]
    fn the_bound_never_exceeds_a_real_packing_and_beats_the_resource_lp() {
        // Random catalogues and shapes: the shape bound lies between the resource LP and the cost of a simple
        // real packing (each shape alone on its cheapest type, whole pods per node).
        let mut next = crate::bound::tests::xorshift(0x2545_f491_4f6c_dd1du64);
        for case in 0..100 {
            let shapes: Vec<ShapeDemand> = (0..1 + (next() * 6.0) as usize)
                .map(|_| shape(0.1 + next() * 2.0, 0.1 + next() * 4.0, (next() * 40.0).floor()))
                .collect();
            let mut types: Vec<ShapeType> = (0..1 + (next() * 8.0) as usize)
                .map(|_| ty(0.1 + next() * 3.0, 1.0 + next() * 16.0, 1.0 + next() * 32.0, 4.0 + next() * 50.0, &shapes))
                .collect();
            types.push(ty(50.0, 64.0, 128.0, 500.0, &shapes));
            let lp = solve_shape_lp(&shapes, &types, 200, 1e-6).unwrap();
            assert!(lp.converged, "case {case}");
            let demand: [f64; 3] = std::array::from_fn(|r| shapes.iter().map(|s| s.req[r] * s.count).sum::<f64>());
            let resource = crate::bound::solve_lp(
                demand,
                &types.iter().map(|t| crate::bound::LpType { price: t.price, room: t.room }).collect::<Vec<_>>(),
            )
            .unwrap();
            assert!(lp.cost >= resource.cost * (1.0 - 1e-8), "case {case}: {} < {}", lp.cost, resource.cost);
            let packing: f64 = shapes
                .iter()
                .map(|s| {
                    types
                        .iter()
                        .filter(|t| s.req.iter().zip(&t.room).all(|(q, r)| q <= r))
                        .map(|t| {
                            let per_node = alone(&s.req, &t.room).floor();
                            (s.count / per_node).ceil() * t.price
                        })
                        .fold(f64::INFINITY, f64::min)
                })
                .sum();
            assert!(lp.cost <= packing * (1.0 + 1e-9), "case {case}: {} > {packing}", lp.cost);
            assert!((lp.upper - lp.cost).abs() <= 1e-6 * lp.cost.max(1.0), "case {case}");
        }
    }
}
