//! Property tests over random small clusters: no command violates a PDB, a budget or do-not-disrupt, every
//! displaced pod has a place (the command re-validates against the same snapshot), every node gets one verdict;
//! and a reference implementation of upstream's multi-node search (binary search over the sorted prefix,
//! without its timeout) never finds a command that saves more than ours.

mod common;

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use karpenter_api::load_str;
use karpenter_disruption::{Decision, DisruptionOptions, Method, evaluate};
use karpenter_requirements::{InstanceType, OfferingsExt, Requirements};
use karpenter_scheduler::simulation::{SimulationView, Simulator};
use karpenter_scheduler::{ClusterSnapshot, SchedulerOptions};
use proptest::prelude::*;
use serde_json::{Value, json};

const T0: &str = "2026-01-01T00:00:00Z";
const TYPES: [&str; 5] = ["c-2x", "c-4x", "m-4x", "m-8x", "r-4x"];
const CPUS: [&str; 4] = ["250m", "500m", "1", "2"];

#[derive(Debug, Clone)]
struct PodSpec {
    cpu: usize,
    app: usize,
    do_not_disrupt: bool,
}

#[derive(Debug, Clone)]
struct NodeSpec {
    it: usize,
    spot: bool,
    zone: usize,
    drifted: bool,
    tgp: bool,
    do_not_disrupt: bool,
    pods: Vec<PodSpec>,
}

#[derive(Debug, Clone)]
struct ClusterSpec {
    nodes: Vec<NodeSpec>,
    budget: usize,
    on_demand_only: bool,
    pdb_allowed: Option<i32>,
    spot_to_spot: bool,
}

fn node_spec(rare: bool) -> impl Strategy<Value = NodeSpec> {
    let flag = move |p: f64| if rare { proptest::bool::weighted(p).boxed() } else { Just(false).boxed() };
    (
        0..TYPES.len(),
        flag(0.3),
        0..3usize,
        flag(0.2),
        flag(0.5),
        flag(0.1),
        proptest::collection::vec(
            (0..CPUS.len(), 0..3usize, flag(0.1)).prop_map(|(cpu, app, d)| PodSpec { cpu, app, do_not_disrupt: d }),
            if rare { 0..5usize } else { 1..5usize },
        ),
    )
        .prop_map(|(it, spot, zone, drifted, tgp, dnd, pods)| NodeSpec {
            it,
            spot,
            zone,
            drifted,
            tgp,
            do_not_disrupt: dnd,
            pods,
        })
}

fn cluster_spec() -> impl Strategy<Value = ClusterSpec> {
    (
        proptest::collection::vec(node_spec(true), 1..8),
        0..4usize,
        any::<bool>(),
        proptest::option::of(0..2i32),
        any::<bool>(),
    )
        .prop_map(|(nodes, budget, on_demand_only, pdb_allowed, spot_to_spot)| ClusterSpec {
            nodes,
            budget,
            on_demand_only,
            pdb_allowed,
            spot_to_spot,
        })
}

fn yaml(spec: &ClusterSpec) -> String {
    let budget = ["0", "1", "50%", "100%"][spec.budget % 4];
    let reqs = if spec.on_demand_only {
        json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}])
    } else {
        json!([])
    };
    let mut docs: Vec<Value> = vec![json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "requirements": reqs}},
                 "disruption": {"budgets": [{"nodes": budget}]}}
    })];
    if let Some(allowed) = spec.pdb_allowed {
        docs.push(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "a", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "app-0"}}}, "status": {"disruptionsAllowed": allowed,
            "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}}));
    }
    for (i, n) in spec.nodes.iter().enumerate() {
        let name = format!("n{i}");
        let it = TYPES[n.it % TYPES.len()];
        let (fam, size) = it.split_once('-').unwrap_or(("m", "4x"));
        let cpu: i64 = size.trim_end_matches('x').parse().unwrap_or(4);
        let gib = match fam {
            "c" => 2,
            "m" => 4,
            _ => 8,
        };
        let res = json!({"cpu": cpu.to_string(), "memory": format!("{}Gi", cpu * gib), "pods": "110"});
        let ct = if n.spot && !spec.on_demand_only { "spot" } else { "on-demand" };
        let zone = common::ZONES[n.zone % 3];
        let labels = json!({"kubernetes.io/hostname": name, "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": it, "topology.kubernetes.io/zone": zone,
            "karpenter.sh/capacity-type": ct, "karpenter.sh/nodepool": "default", "karpenter.sh/initialized": "true",
            "karpenter.k8s.aws/instance-family": fam});
        let mut node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": res, "capacity": res}});
        if n.do_not_disrupt {
            node["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
        }
        docs.push(node);
        let mut conds = vec![
            json!({"type": "Initialized", "status": "True", "lastTransitionTime": T0, "reason": "Initialized", "message": ""}),
        ];
        if n.drifted {
            conds.push(json!({"type": "Drifted", "status": "True", "lastTransitionTime": T0, "reason": "NodePoolDrifted", "message": ""}));
        }
        let mut claim_spec = json!({"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []});
        if n.tgp {
            claim_spec["terminationGracePeriod"] = json!("1h");
        }
        docs.push(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": format!("claim-{name}"), "creationTimestamp": T0, "labels": labels},
            "spec": claim_spec, "status": {"nodeName": name, "capacity": res, "allocatable": res, "conditions": conds}}));
        for (j, p) in n.pods.iter().enumerate() {
            let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("p{i}-{j}"), "namespace": "default", "labels": {"app": format!("app-{}", p.app)},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u"}]},
                "spec": {"nodeName": name, "containers": [{"name": "c", "image": "x",
                    "resources": {"requests": {"cpu": CPUS[p.cpu % CPUS.len()], "memory": "256Mi"}}}]},
                "status": {"phase": "Running", "startTime": T0, "conditions": [{"type": "Ready", "status": "True"}]}});
            if p.do_not_disrupt {
                pod["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
            }
            docs.push(pod);
        }
    }
    docs.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("\n---\n")
}

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T12:00:00Z").map(|t| t.with_timezone(&Utc)).unwrap_or_default()
}

fn snapshot(spec: &ClusterSpec) -> ClusterSnapshot {
    let objects = load_str(&yaml(spec), "generated.yaml").expect("generated manifests load");
    ClusterSnapshot::from_objects(&objects).expect("snapshot")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn commands_respect_pdbs_budgets_and_do_not_disrupt(spec in cluster_spec()) {
        let snapshot = snapshot(&spec);
        let catalogue = common::catalogue();
        let pools = common::pools(&snapshot, &catalogue);
        let options = DisruptionOptions { spot_to_spot_consolidation: spec.spot_to_spot, ..Default::default() };
        let pass = evaluate(&snapshot, &pools, &karpenter_testing::vocabulary::aws(), now(), &options);
        if let Err(e) = common::check_pass(&snapshot, &pools, now(), &options, &pass) {
            prop_assert!(false, "{e}\n{}", pass.to_json());
        }
        for c in &pass.commands {
            prop_assert!(c.savings_per_hour >= 0.0 || c.method == Method::Drift, "{c:#?}");
            if c.decision == Decision::Replace && c.method != Method::Drift && c.method != Method::StaticDrift {
                prop_assert_eq!(c.replacements.len(), 1);
                prop_assert!(c.savings_per_hour > 0.0, "consolidation replaces only with a strictly cheaper node");
            }
        }
    }
}

// ---- Reference: upstream's multi-node search, written independently over the scheduler's Simulator. ----

fn price_of(catalogue: &[InstanceType], it: &str, zone: &str, ct: &str) -> f64 {
    catalogue
        .iter()
        .find(|t| t.name == it)
        .and_then(|t| t.offerings.iter().find(|o| o.zone() == Some(zone) && o.capacity_type() == Some(ct)))
        .map_or(0.0, |o| o.price)
}

/// Savings of upstream's multi-node consolidation on a cluster of busy, on-demand, unblocked nodes.
fn reference_multi_node(snapshot: &ClusterSnapshot, catalogue: &[InstanceType]) -> f64 {
    let provider = karpenter_testing::vocabulary::aws();
    let options = SchedulerOptions::default();
    let pools = common::pools(snapshot, catalogue);
    let sim = Simulator::new(snapshot, &pools, &provider, &options);
    // Candidates: price / (1 + pods), descending; ties by name.
    let mut cands: Vec<(String, f64, String, usize)> = snapshot
        .nodes
        .iter()
        .map(|n| {
            let l = |k: &str| n.labels.get(k).cloned().unwrap_or_default();
            let price = price_of(
                catalogue,
                &l("node.kubernetes.io/instance-type"),
                &l("topology.kubernetes.io/zone"),
                &l("karpenter.sh/capacity-type"),
            );
            (n.name.clone(), price, l("node.kubernetes.io/instance-type"), snapshot.pods_on(&n.name).count())
        })
        .collect();
    cands.sort_by(|a, b| (b.1 / (1.0 + b.3 as f64)).total_cmp(&(a.1 / (1.0 + a.3 as f64))).then(a.0.cmp(&b.0)));
    cands.truncate(100);
    if cands.len() < 2 {
        return 0.0;
    }
    let attempt = |k: usize| -> Option<f64> {
        let prefix = &cands[..=k];
        let removed: BTreeSet<String> = prefix.iter().map(|c| c.0.clone()).collect();
        let pods = prefix.iter().flat_map(|c| snapshot.pods_on(&c.0)).collect();
        let d = sim.simulate(&SimulationView { removed: &removed, pods, fewest_new_nodes: true, ..Default::default() });
        if !d.unschedulable.is_empty() {
            return None;
        }
        let total: f64 = prefix.iter().map(|c| c.1).sum();
        match d.new_node_claims.as_slice() {
            [] => Some(total),
            [claim] => {
                let reqs: &Requirements = &claim.requirements;
                let same_type_limit = prefix
                    .iter()
                    .filter(|c| claim.instance_type_names().any(|n| n == c.2))
                    .map(|c| c.1)
                    .fold(f64::INFINITY, f64::min);
                let best = claim
                    .instance_type_names()
                    .filter_map(|n| catalogue.iter().find(|t| t.name == n))
                    .filter(|t| {
                        let offerings: Vec<_> = t.offerings.available().cloned().collect();
                        offerings.worst_launch_price(reqs, &provider) < total
                    })
                    .map(|t| t.min_compatible_price(reqs, &provider))
                    .filter(|p| *p < same_type_limit)
                    .fold(f64::INFINITY, f64::min);
                best.is_finite().then_some(total - best)
            }
            _ => None,
        }
    };
    let (mut lo, mut hi) = (1usize, cands.len() - 1);
    let mut found = 0.0;
    while lo <= hi {
        let mid = (lo + hi) / 2;
        match attempt(mid) {
            Some(s) if s > 0.0 => {
                found = s;
                lo = mid + 1;
            }
            _ => hi = mid - 1,
        }
    }
    found
}

fn busy_cluster() -> impl Strategy<Value = ClusterSpec> {
    proptest::collection::vec(node_spec(false), 2..7).prop_map(|nodes| ClusterSpec {
        nodes,
        budget: 3,
        on_demand_only: true,
        pdb_allowed: None,
        spot_to_spot: false,
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn multi_node_saves_at_least_as_much_as_upstreams_search(spec in busy_cluster()) {
        let snapshot = snapshot(&spec);
        let catalogue = common::catalogue();
        let reference = reference_multi_node(&snapshot, &catalogue);
        let pools = common::pools(&snapshot, &catalogue);
        let pass = evaluate(&snapshot, &pools, &karpenter_testing::vocabulary::aws(), now(), &DisruptionOptions::default());
        let ours = pass
            .commands
            .iter()
            .filter(|c| c.method == Method::MultiNodeConsolidation)
            .map(|c| c.savings_per_hour)
            .sum::<f64>();
        prop_assert!(ours + 1e-9 >= reference, "ours {ours} < reference {reference}\n{}", pass.to_json());
    }
}
