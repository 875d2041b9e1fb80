//! End to end: the controller is stopped right after it created a NodeClaim (and, simulated, after the instance
//! was launched but before the claim's status recorded it), and a new replica takes over through the leader
//! Lease. Nothing is launched twice and nothing leaks.

use crate::e2e_support;

use std::collections::BTreeSet;
use std::time::Duration;

use e2e_support::{Cluster, Timer, is_true, settings};
use k8s_openapi::api::coordination::v1::Lease;
use karpenter_cloudprovider::CloudProvider;
use karpenter_testing::NodePoolOptions;
use kube::ResourceExt;
use kube::api::Api;

#[tokio::test(start_paused = true)]
async fn a_replica_restarted_mid_launch_neither_duplicates_nor_leaks() {
    let _t = Timer::start("restart mid-launch");
    let cluster = Cluster::new().await;
    cluster.node_pool(NodePoolOptions { name: Some("default".into()), ..Default::default() }).await;
    let first = cluster.start_with(settings(&[]), |m| m.with_identity("replica-1"));

    cluster.pending_pods("app", 3, "1", &[("app", "web")]).await;
    // Stop the first replica as soon as it has created a NodeClaim.
    let mut polls = 0;
    let created = loop {
        let claims = cluster.list_claims().await;
        if !claims.is_empty() {
            break claims;
        }
        polls += 1;
        assert!(polls < 20_000, "no NodeClaim created\n{}", cluster.describe().await);
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    first.stop().await;

    // The crash window: the instance was launched, the claim's status does not say so yet.
    let mut launched_by_hand = 0;
    for claim in &created {
        if claim.provider_id().is_none() {
            cluster.kwok.create(claim).await.expect("launching the instance of the first replica");
            launched_by_hand += 1;
        }
    }
    let before: BTreeSet<(String, String)> =
        created.iter().map(|c| (c.name_any(), c.uid().unwrap_or_default())).collect();
    let instances_before = cluster.instances().await.len();
    assert_eq!(instances_before, created.len(), "one instance per claim before the restart");

    let second = cluster.start_with(settings(&[]), |m| m.with_identity("replica-2"));
    let placements = cluster.all_pods_running(Duration::from_secs(300)).await;

    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "kube-system");
    let lease = leases.get("karpenter-leader-election").await.unwrap();
    assert_eq!(lease.spec.and_then(|s| s.holder_identity).as_deref().map(|h| h.starts_with("replica-2")), Some(true));

    // Let the garbage collector run a few times (10 s period at first) before counting.
    tokio::time::sleep(Duration::from_secs(120)).await;
    let claims = cluster.list_claims().await;
    let after: BTreeSet<(String, String)> =
        claims.iter().map(|c| (c.name_any(), c.uid().unwrap_or_default())).collect();
    assert!(before.is_subset(&after), "the claims of the first replica were kept (not replaced): {before:?} {after:?}");
    let provider_ids: BTreeSet<String> = claims.iter().filter_map(|c| c.provider_id().map(str::to_owned)).collect();
    assert_eq!(provider_ids.len(), claims.len(), "every claim launched exactly one instance");
    let instances: BTreeSet<String> =
        cluster.instances().await.iter().filter_map(|c| c.provider_id().map(str::to_owned)).collect();
    assert_eq!(instances, provider_ids, "no leaked instance, no instance without a claim");
    assert_eq!(cluster.list_nodes().await.len(), claims.len());
    for claim in &claims {
        assert!(is_true(claim, "Initialized"), "{} initialized", claim.name_any());
    }
    let used: BTreeSet<&String> = placements.values().collect();
    assert!(used.len() <= claims.len());
    eprintln!(
        "restart: {} claims created by the first replica, {launched_by_hand} launched in the crash window",
        created.len()
    );
    second.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_replica_that_loses_its_lease_stops_its_controllers_and_says_so() {
    let _t = Timer::start("lease lost");
    let cluster = Cluster::new().await;
    let running = cluster.start_with(settings(&[]), |m| m.with_identity("replica-1"));
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "kube-system");
    let held = cluster
        .eventually("the lease acquired", Duration::from_secs(30), || async {
            let lease = leases.get_opt("karpenter-leader-election").await.ok()??;
            let holder = lease.spec.as_ref()?.holder_identity.clone()?;
            holder.starts_with("replica-1").then_some(lease)
        })
        .await;
    // Another replica takes the Lease over (say, after a network partition).
    let mut stolen = held.clone();
    if let Some(spec) = stolen.spec.as_mut() {
        spec.holder_identity = Some("intruder".into());
    }
    leases.replace("karpenter-leader-election", &Default::default(), &stolen).await.unwrap();

    let result = tokio::time::timeout(Duration::from_secs(120), running.task).await.expect("run returns").unwrap();
    assert!(matches!(result, Err(karpenter_operator::manager::ManagerError::LeadershipLost)), "{result:?}");
    let lease = leases.get("karpenter-leader-election").await.unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("intruder"),
        "not released over the new holder"
    );
}
