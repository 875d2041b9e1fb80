//! Plans 50 pending pods onto new nodes and prints the plan: `cargo run -p karpenter-scheduler --example plan_pods`.
//!
//! The journey of an autoscaler that embeds the scheduler: describe a NodePool and the instance types a cloud
//! offers for it (as data), put the pending pods in a snapshot, call `schedule`, read the NodeClaims to create.

use karpenter_scheduler::prelude::*;

// `pub`: tests/examples.rs runs this program as a test.
pub fn main() {
    // What the cloud sells: three shapes, on-demand in two zones and spot (cheaper) in one.
    let catalogue: Vec<InstanceType> = [("small", 2, 8, 0.10), ("medium", 4, 16, 0.19), ("large", 8, 32, 0.36)]
        .into_iter()
        .map(|(name, cpu, memory_gib, price)| {
            InstanceType::builder(name)
                .cpu(cpu)
                .memory_gib(memory_gib)
                .pods(110)
                .offering(Offering::on_demand("zone-a", price))
                .offering(Offering::on_demand("zone-b", price))
                .offering(Offering::spot("zone-a", price * 0.35))
                .build()
        })
        .collect();

    // Where pods may go: any of those, on-demand only, at most 64 CPUs in total.
    let pool = NodePool::builder("general", NodeClassReference::new("example.com", "ToyNodeClass", "default"))
        .requirement(NodeSelectorRequirementWithMinValues::in_values(CAPACITY_TYPE, [CAPACITY_TYPE_ON_DEMAND]))
        .limit(CPU, "64")
        .build();

    // The pending pods: 40 web pods and 10 workers.
    let web = ResourceList::try_from_pairs([(CPU, "500m"), (MEMORY, "1Gi")]).expect("valid quantities");
    let worker = ResourceList::try_from_pairs([(CPU, "3"), (MEMORY, "6Gi")]).expect("valid quantities");
    let mut snapshot = ClusterSnapshot::builder();
    for i in 0..40 {
        snapshot.pod(PodBuilder::new("shop", format!("web-{i}")).requests(&web).build());
    }
    for i in 0..10 {
        snapshot.pod(PodBuilder::new("batch", format!("worker-{i}")).requests(&worker).build());
    }
    let snapshot = snapshot.build().expect("a consistent snapshot");

    let pools = [PoolInput { node_pool: &pool, instance_types: &catalogue }];
    let decisions = schedule(&snapshot, &pools, &ProviderLabels::core_only("toy"), &SchedulerOptions::default());

    let mut total = 0.0;
    println!("{} new NodeClaims:", decisions.new_node_claims.len());
    for claim in &decisions.new_node_claims {
        // Where it may land (every zone an option is offered in) and the offering it costs at the cheapest.
        let zones = claim.zones.join(",");
        let price = claim.price.unwrap_or(f64::NAN);
        total += price;
        let cheapest = claim.cheapest_offering().map_or_else(
            || "none".to_owned(),
            |o| {
                format!(
                    "{} {} in {}",
                    o.name,
                    o.capacity_type.as_deref().unwrap_or("?"),
                    o.zone.as_deref().unwrap_or("?")
                )
            },
        );
        println!(
            "  {:<12} ${price:.3}/h ({cheapest})  zones {:<15} {:>2} pods  requests {}  (options: {})",
            claim.name,
            zones,
            claim.pods.len(),
            claim.requests,
            claim.instance_type_names().collect::<Vec<_>>().join(", "),
        );
    }
    println!("total ${total:.3}/h; unschedulable: {}", decisions.unschedulable.len());

    let placed: usize = decisions.new_node_claims.iter().map(|c| c.pods.len()).sum();
    assert_eq!(placed, 50, "every pod has a node");
    assert!(decisions.unschedulable.is_empty());
}
