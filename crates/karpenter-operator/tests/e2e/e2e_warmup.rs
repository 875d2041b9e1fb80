//! Controller warmup (`DISABLE_CONTROLLER_WARMUP=false`, upstream's `EnableWarmup`): a standby replica that has
//! not won the Lease already watches the cluster, so its state is synced when it takes over; without warmup
//! (the default) a standby lists nothing until it leads.

use crate::e2e_support;

use std::time::Duration;

use e2e_support::{Cluster, Timer, settings};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use karpenter_api::NodePool;
use karpenter_cloudprovider::Clock;
use karpenter_testing::NodePoolOptions;
use kube::api::{Api, PostParams};

#[tokio::test(start_paused = true)]
async fn a_warm_standby_is_synced_before_it_leads_and_a_cold_one_is_not() {
    let _t = Timer::start("controller warmup");
    let cluster = Cluster::new().await;
    cluster.node_pool(NodePoolOptions { name: Some("default".into()), ..Default::default() }).await;
    // Another replica holds the Lease for longer than the test runs: both replicas below stay standbys.
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "kube-system");
    let now = k8s_openapi::jiff::Timestamp::from_second(cluster.clock.now().timestamp()).unwrap();
    let held = Lease {
        metadata: ObjectMeta { name: Some("karpenter-leader-election".into()), ..Default::default() },
        spec: Some(LeaseSpec {
            holder_identity: Some("the-leader".into()),
            lease_duration_seconds: Some(3600),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            ..Default::default()
        }),
    };
    leases.create(&PostParams::default(), &held).await.unwrap();

    let warm = cluster.start_with(settings(&["--disable-controller-warmup=false"]), |m| m.with_identity("warm"));
    let cold = cluster.start_with(settings(&[]), |m| m.with_identity("cold"));
    cluster
        .eventually("the warm standby's state synced", Duration::from_secs(60), || async {
            warm.state.synced().then_some(())
        })
        .await;
    assert!(warm.state.kind_synced::<NodePool>(), "the warm standby listed the NodePools");
    // The cold standby had the same time and listed nothing.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(!cold.state.kind_synced::<NodePool>() && !cold.state.synced(), "a cold standby does not watch");
    // Neither leads: the Lease is still the other replica's, and no controller acted (the NodePool the
    // readiness controller would mark Ready has no status).
    let lease = leases.get("karpenter-leader-election").await.unwrap();
    assert_eq!(lease.spec.and_then(|s| s.holder_identity).as_deref(), Some("the-leader"));
    let pool = cluster.pools().get("default").await.unwrap();
    assert!(pool.status.is_none(), "no controller ran on a standby: {:?}", pool.status);

    // The other replica goes away: the warm standby takes over and its controllers run on the state it kept.
    cold.stop().await;
    leases.delete("karpenter-leader-election", &Default::default()).await.unwrap();
    cluster
        .eventually("the warm replica leads and marks the NodePool", Duration::from_secs(120), || async {
            let pool = cluster.pools().get("default").await.ok()?;
            pool.status.is_some().then_some(())
        })
        .await;
    let lease = leases.get("karpenter-leader-election").await.unwrap();
    assert_eq!(lease.spec.and_then(|s| s.holder_identity).map(|h| h.starts_with("warm")), Some(true));
    warm.stop().await;
}
