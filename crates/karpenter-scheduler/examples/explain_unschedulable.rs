//! Pods that fit nothing, and the reason the scheduler gives for each:
//! `cargo run -p karpenter-scheduler --example explain_unschedulable`.
//!
//! `Display` on the reason is the message to show a person (what to change); `code()` is a stable machine code
//! to branch on; a reason that names NodePools carries one rejection per NodePool with its own kind.

use karpenter_scheduler::decision::UnschedulableReason;
use karpenter_scheduler::prelude::*;

// `pub`: tests/examples.rs runs this program as a test.
pub fn main() {
    // The largest node this cloud has: 4 CPUs, 16 GiB, no GPU, in zone-a only.
    let catalogue = [InstanceType::builder("medium")
        .cpu(4)
        .memory_gib(16)
        .pods(110)
        .offering(Offering::on_demand("zone-a", 0.19))
        .build()];
    let pool = NodePool::builder("general", NodeClassReference::new("example.com", "ToyNodeClass", "default"))
        .taint(Taint::new("dedicated", Some("batch"), TaintEffect::NoSchedule))
        .build();
    let toleration = Toleration {
        key: Some("dedicated".into()),
        operator: Some("Equal".into()),
        value: Some("batch".into()),
        effect: Some("NoSchedule".into()),
        ..Toleration::default()
    };

    let small = ResourceList::try_from_pairs([(CPU, "1")]).expect("valid quantities");
    let huge = ResourceList::try_from_pairs([(CPU, "16")]).expect("valid quantities");
    let gpu = ResourceList::try_from_pairs([(CPU, "1"), (NVIDIA_GPU, "1")]).expect("valid quantities");
    let mut snapshot = ClusterSnapshot::builder();
    // Fits: tolerates the taint, asks for 1 CPU.
    snapshot.pod(PodBuilder::new("default", "fits").requests(&small).toleration(toleration.clone()).build());
    // More CPU than any instance type has.
    snapshot.pod(PodBuilder::new("default", "too-big").requests(&huge).toleration(toleration.clone()).build());
    // A resource no instance type offers.
    snapshot.pod(PodBuilder::new("default", "wants-gpu").requests(&gpu).toleration(toleration.clone()).build());
    // A zone the cloud does not sell in.
    snapshot.pod(
        PodBuilder::new("default", "zone-c")
            .requests(&small)
            .toleration(toleration)
            .node_selector(ZONE, "zone-c")
            .build(),
    );
    // Does not tolerate the NodePool's taint.
    snapshot.pod(PodBuilder::new("default", "intolerant").requests(&small).build());
    let snapshot = snapshot.build().expect("a consistent snapshot");

    let pools = [PoolInput { node_pool: &pool, instance_types: &catalogue }];
    let decisions = schedule(&snapshot, &pools, &ProviderLabels::core_only("toy"), &SchedulerOptions::default());

    for unschedulable in &decisions.unschedulable {
        println!("{} [{}]: {}", unschedulable.pod, unschedulable.reason.code(), unschedulable.reason);
        if let UnschedulableReason::NodePools(rejections) = &unschedulable.reason {
            for rejection in rejections {
                println!("    {} -> {}", rejection.node_pool, rejection.kind.code());
            }
        }
    }

    let placed: Vec<&PodKey> = decisions.new_node_claims.iter().flat_map(|c| &c.pods).collect();
    assert_eq!(placed, ["default/fits"]);
    assert_eq!(decisions.unschedulable.len(), 4);
}
