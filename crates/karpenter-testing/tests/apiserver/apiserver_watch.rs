//! Watches through the real kube client and kube-runtime: replay from a resourceVersion, bookmarks, 410 Gone
//! and the watcher's recovery, selector transitions, reflector stores in sync, and 1,000 objects × 10 watchers.
#![cfg(feature = "apiserver")]

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use karpenter_testing::apiserver::ApiServer;
use karpenter_testing::{PodOptions, Stopwatch, pod, tokio_now};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::time::timeout;

fn cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name.into());
    c.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    c
}

fn lease(name: &str) -> Lease {
    let mut l = Lease::default();
    l.metadata.name = Some(name.into());
    l
}

const WAIT: Duration = Duration::from_secs(10);

/// Event type and object name of a watch event.
fn describe<K: kube::Resource>(e: &WatchEvent<K>) -> (String, String) {
    match e {
        WatchEvent::Added(o) => ("ADDED".into(), o.meta().name.clone().unwrap_or_default()),
        WatchEvent::Modified(o) => ("MODIFIED".into(), o.meta().name.clone().unwrap_or_default()),
        WatchEvent::Deleted(o) => ("DELETED".into(), o.meta().name.clone().unwrap_or_default()),
        WatchEvent::Bookmark(b) => ("BOOKMARK".into(), b.metadata.resource_version.clone()),
        WatchEvent::Error(e) => ("ERROR".into(), e.code.to_string()),
    }
}

#[tokio::test]
async fn watch_replays_history_after_a_resource_version() {
    let server = ApiServer::new();
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let a = cms.create(&PostParams::default(), &cm("a", &[])).await.expect("a");
    let from = a.resource_version().expect("rv");
    cms.create(&PostParams::default(), &cm("b", &[])).await.expect("b");
    cms.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"x": "1"}}))).await.expect("patch");
    cms.delete("b", &DeleteParams::default()).await.expect("delete");
    // Writes to other kinds are not seen.
    let leases: Api<Lease> = Api::namespaced(server.client(), "default");
    leases.create(&PostParams::default(), &lease("l")).await.expect("lease");

    let mut stream = cms.watch(&WatchParams::default(), &from).await.expect("watch").boxed();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let e = timeout(WAIT, stream.try_next()).await.expect("in time").expect("ok").expect("event");
        seen.push(describe(&e));
    }
    let want = [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")].map(|(t, n)| (t.to_string(), n.to_string()));
    assert_eq!(seen, want);

    // Live events follow the replay.
    cms.create(&PostParams::default(), &cm("c", &[])).await.expect("c");
    let e = timeout(WAIT, stream.try_next()).await.expect("in time").expect("ok").expect("event");
    assert_eq!(describe(&e), ("ADDED".to_string(), "c".to_string()));

    // Without a resourceVersion ("0"), a watch starts with the current state.
    let mut fresh = cms.watch(&WatchParams::default(), "0").await.expect("watch").boxed();
    let mut names = Vec::new();
    for _ in 0..2 {
        let e = timeout(WAIT, fresh.try_next()).await.expect("in time").expect("ok").expect("event");
        names.push(describe(&e));
    }
    assert_eq!(names, [("ADDED".to_string(), "a".to_string()), ("ADDED".to_string(), "c".to_string())]);
}

#[tokio::test]
async fn bookmarks_arrive_periodically_and_timeout_ends_the_stream() {
    let server = ApiServer::builder().bookmark_interval(Duration::from_millis(50)).build();
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let a = cms.create(&PostParams::default(), &cm("a", &[])).await.expect("a");
    let rv = a.resource_version().expect("rv");
    let mut stream =
        cms.watch(&WatchParams { bookmarks: true, ..Default::default() }, &rv).await.expect("watch").boxed();
    cms.create(&PostParams::default(), &cm("b", &[])).await.expect("b");
    let e = timeout(WAIT, stream.try_next()).await.expect("in time").expect("ok").expect("event");
    assert_eq!(describe(&e), ("ADDED".to_string(), "b".to_string()));
    let e = timeout(WAIT, stream.try_next()).await.expect("in time").expect("ok").expect("event");
    let WatchEvent::Bookmark(b) = e else { panic!("expected a bookmark, got {:?}", describe(&e)) };
    assert_eq!(b.metadata.resource_version, server.resource_version().to_string());
    // Writes to other kinds move the bookmarks on, so an idle watcher resumes inside the history window.
    let leases: Api<Lease> = Api::namespaced(server.client(), "default");
    for i in 0..3 {
        leases.create(&PostParams::default(), &lease(&format!("l-{i}"))).await.expect("lease");
    }
    let target = server.resource_version().to_string();
    let deadline = tokio_now() + WAIT;
    loop {
        let e = timeout(WAIT, stream.try_next()).await.expect("in time").expect("ok").expect("event");
        let WatchEvent::Bookmark(b) = e else { panic!("only bookmarks expected, got {:?}", describe(&e)) };
        if b.metadata.resource_version == target {
            break;
        }
        assert!(tokio_now() < deadline, "no bookmark at {target}");
    }

    // Without allowWatchBookmarks there are none; timeoutSeconds closes the stream (a timer, on tokio's clock).
    let started = tokio_now();
    let mut quiet = cms
        .watch(&WatchParams::default().disable_bookmarks().timeout(1), &server.resource_version().to_string())
        .await
        .expect("watch")
        .boxed();
    let end = timeout(WAIT, quiet.try_next()).await.expect("in time").expect("ok");
    assert!(end.is_none(), "the stream ends at the timeout without events");
    assert!(started.elapsed() >= Duration::from_millis(900));
}

#[tokio::test]
async fn too_old_resource_version_is_410_gone_as_an_error_event() {
    let server = ApiServer::builder().history_limit(5).build();
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let first = cms.create(&PostParams::default(), &cm("first", &[])).await.expect("create");
    for i in 0..10 {
        cms.create(&PostParams::default(), &cm(&format!("cm-{i}"), &[])).await.expect("create");
    }
    let mut stream =
        cms.watch(&WatchParams::default(), &first.resource_version().expect("rv")).await.expect("watch").boxed();
    let e = timeout(WAIT, stream.try_next()).await.expect("in time").expect("ok").expect("event");
    let WatchEvent::Error(status) = e else { panic!("expected ERROR, got {:?}", describe(&e)) };
    assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
    assert!(status.message.starts_with("too old resource version"), "{}", status.message);
    assert!(timeout(WAIT, stream.try_next()).await.expect("in time").expect("ok").is_none(), "then the stream ends");

    // A list's continue token older than the history is 410 as well.
    let page = cms.list(&ListParams::default().limit(2)).await.expect("page");
    for i in 0..10 {
        cms.create(&PostParams::default(), &cm(&format!("more-{i}"), &[])).await.expect("create");
    }
    let token = page.metadata.continue_.expect("token");
    let err = cms.list(&ListParams::default().limit(2).continue_token(&token)).await.expect_err("expired");
    assert!(matches!(err, kube::Error::Api(s) if s.code == 410));
}

#[tokio::test]
async fn kube_runtime_watcher_recovers_from_410_by_relisting() {
    // A tiny history window. kube-runtime's watcher starts its watch only when polled after the list is
    // applied, so a burst of writes (to another kind) in between makes the watch ask for a resourceVersion
    // the server no longer has: it gets the 410 ERROR event, re-lists, and carries on.
    let server = ApiServer::builder().history_limit(8).build();
    let client = server.client();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let (reader, writer) = reflector::store::<ConfigMap>();
    let mut stream = reflector(writer, watcher(cms.clone(), watcher::Config::default())).boxed();
    let has = |name: &str| reader.get(&reflector::ObjectRef::new(name).within("default")).is_some();
    let mut gone = 0usize;

    cms.create(&PostParams::default(), &cm("before", &[])).await.expect("before");
    drive_until(&mut stream, &mut gone, || has("before")).await;
    assert_eq!(gone, 0);
    for i in 0..20 {
        leases.create(&PostParams::default(), &lease(&format!("l-{i}"))).await.expect("lease");
    }
    cms.create(&PostParams::default(), &cm("after", &[])).await.expect("after");
    drive_until(&mut stream, &mut gone, || has("after")).await;
    assert_eq!(gone, 1, "the watch from the listed resourceVersion got 410 Gone, and the re-list found \"after\"");

    for i in 20..40 {
        leases.create(&PostParams::default(), &lease(&format!("l-{i}"))).await.expect("lease");
    }
    cms.delete("before", &DeleteParams::default()).await.expect("delete");
    cms.create(&PostParams::default(), &cm("recovered", &[])).await.expect("recovered");
    drive_until(&mut stream, &mut gone, || has("recovered") && !has("before")).await;
    assert_eq!(gone, 2);
    let mut names: Vec<String> = reader.state().iter().map(|c| c.name_any()).collect();
    names.sort();
    assert_eq!(names, ["after", "recovered"]);

    // And the watch after that re-list is live: a new object arrives without another 410.
    cms.create(&PostParams::default(), &cm("live", &[])).await.expect("live");
    drive_until(&mut stream, &mut gone, || has("live")).await;
    assert_eq!(gone, 2);
}

/// Polls the watcher until `done`; counts 410 Gone errors, fails on any other error.
async fn drive_until<S, T>(stream: &mut S, gone: &mut usize, done: impl Fn() -> bool)
where
    S: futures::Stream<Item = Result<T, watcher::Error>> + Unpin,
{
    let deadline = tokio_now() + WAIT;
    while !done() {
        assert!(tokio_now() < deadline, "timed out driving the watcher");
        match timeout(Duration::from_millis(100), stream.next()).await {
            Ok(Some(Err(watcher::Error::WatchError(s)))) if s.code == 410 => *gone += 1,
            Ok(Some(Err(other))) => panic!("unexpected watcher error {other}"),
            Ok(None) => panic!("watcher stream ended"),
            _ => {}
        }
    }
}

#[tokio::test]
async fn selector_transitions_are_seen_as_added_and_deleted() {
    let server = ApiServer::new();
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let rv = server.resource_version().to_string();
    let mut stream = pods.watch(&WatchParams::default().labels("app=web"), &rv).await.expect("watch").boxed();
    let p = pod(PodOptions {
        name: Some("p".into()),
        labels: BTreeMap::from([("app".into(), "db".into())]),
        ..Default::default()
    });
    pods.create(&PostParams::default(), &p).await.expect("create");
    let relabel = |app: &str| Patch::Merge(json!({"metadata": {"labels": {"app": app}}}));
    pods.patch("p", &PatchParams::default(), &relabel("web")).await.expect("in");
    pods.patch("p", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"a": "b"}}})))
        .await
        .expect("touch");
    pods.patch("p", &PatchParams::default(), &relabel("db")).await.expect("out");
    pods.patch("p", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"a": "c"}}})))
        .await
        .expect("unseen");
    let mut seen = Vec::new();
    for _ in 0..3 {
        let e = timeout(WAIT, stream.try_next()).await.expect("in time").expect("ok").expect("event");
        seen.push(describe(&e).0);
    }
    assert_eq!(seen, ["ADDED", "MODIFIED", "DELETED"]);
    // Field selectors filter watches too.
    let mut bound = pods
        .watch(&WatchParams::default().fields("spec.nodeName=n1"), &server.resource_version().to_string())
        .await
        .expect("watch")
        .boxed();
    pods.create(&PostParams::default(), &pod(PodOptions { name: Some("free".into()), ..Default::default() }))
        .await
        .expect("free");
    pods.create(
        &PostParams::default(),
        &pod(PodOptions { name: Some("on-n1".into()), node_name: Some("n1".into()), ..Default::default() }),
    )
    .await
    .expect("bound");
    let e = timeout(WAIT, bound.try_next()).await.expect("in time").expect("ok").expect("event");
    assert_eq!(describe(&e), ("ADDED".to_string(), "on-n1".to_string()));
    let err = pods.watch(&WatchParams::default().fields("spec.priority=1"), "0").await;
    assert!(matches!(err, Err(kube::Error::Api(s)) if s.code == 400));
}

#[tokio::test]
async fn reflector_store_stays_in_sync() {
    let server = ApiServer::builder().bookmark_interval(Duration::from_millis(100)).build();
    let client: Client = server.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for i in 0..10 {
        pods.create(
            &PostParams::default(),
            &pod(PodOptions { name: Some(format!("early-{i}")), ..Default::default() }),
        )
        .await
        .expect("early");
    }
    let (reader, writer) = reflector::store::<Pod>();
    let stream = reflector(writer, watcher(Api::<Pod>::all(client.clone()), watcher::Config::default().page_size(3)))
        .applied_objects()
        .for_each(|_| async {});
    let task = tokio::spawn(stream);
    for i in 0..20 {
        pods.create(&PostParams::default(), &pod(PodOptions { name: Some(format!("late-{i}")), ..Default::default() }))
            .await
            .expect("late");
    }
    for i in 0..20 {
        pods.patch(
            &format!("late-{i}"),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"i": i.to_string()}}})),
        )
        .await
        .expect("label");
    }
    for i in 0..5 {
        pods.delete(&format!("early-{i}"), &DeleteParams::default()).await.expect("delete");
    }
    let want = |reader: &reflector::Store<Pod>| {
        let mut state: Vec<(String, String)> =
            reader.state().iter().map(|p| (p.name_any(), p.resource_version().unwrap_or_default())).collect();
        state.sort();
        state
    };
    let deadline = tokio_now() + WAIT;
    loop {
        let mut truth: Vec<(String, String)> = pods
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .iter()
            .map(|p| (p.name_any(), p.resource_version().unwrap_or_default()))
            .collect();
        truth.sort();
        if want(&reader) == truth {
            assert_eq!(truth.len(), 25);
            break;
        }
        assert!(tokio_now() < deadline, "reflector out of sync: {:?} vs {:?}", want(&reader), truth);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    task.abort();
}

#[tokio::test]
async fn streaming_lists_end_with_the_initial_events_bookmark() {
    let server = ApiServer::new();
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    for n in ["a", "b"] {
        cms.create(&PostParams::default(), &cm(n, &[])).await.expect("create");
    }
    let mut events = watcher(cms.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut init = Vec::new();
    loop {
        match timeout(WAIT, events.try_next()).await.expect("in time").expect("ok").expect("event") {
            watcher::Event::Init => {}
            watcher::Event::InitApply(o) => init.push(o.name_any()),
            watcher::Event::InitDone => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(init, ["a", "b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_objects_and_ten_watchers() {
    const OBJECTS: usize = 1_000;
    const WATCHERS: usize = 10;
    let server = ApiServer::new();
    let client = server.client();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut handles = Vec::new();
    for _ in 0..WATCHERS {
        let api = cms.clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        handles.push((
            tokio::spawn(async move {
                let mut stream = watcher(api, watcher::Config::default()).boxed();
                let mut seen = std::collections::BTreeSet::new();
                let mut ready = Some(tx);
                while seen.len() < OBJECTS {
                    match stream.try_next().await {
                        Ok(Some(watcher::Event::InitDone)) => {
                            if let Some(tx) = ready.take() {
                                let _ = tx.send(());
                            }
                        }
                        Ok(Some(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) => {
                            seen.insert(o.name_any());
                        }
                        Ok(Some(_)) => {}
                        Ok(None) | Err(_) => break,
                    }
                }
                seen.len()
            }),
            rx,
        ));
    }
    let mut done = Vec::new();
    for (h, rx) in handles {
        rx.await.expect("watcher initialised");
        done.push(h);
    }
    // Throughput: real time.
    let start = Stopwatch::start();
    let creators: Vec<_> = (0..4)
        .map(|w| {
            let api = cms.clone();
            tokio::spawn(async move {
                for i in (w..OBJECTS).step_by(4) {
                    api.create(&PostParams::default(), &cm(&format!("cm-{i:04}"), &[("i", &i.to_string())]))
                        .await
                        .expect("create");
                }
            })
        })
        .collect();
    for c in creators {
        c.await.expect("creator");
    }
    let created = start.elapsed();
    for h in done {
        let seen = timeout(Duration::from_secs(60), h).await.expect("in time").expect("join");
        assert_eq!(seen, OBJECTS);
    }
    let delivered = start.elapsed();
    println!(
        "apiserver: created {OBJECTS} objects in {created:?}; all {} events delivered to {WATCHERS} watchers after {delivered:?}",
        OBJECTS * WATCHERS
    );
    assert!(delivered < Duration::from_secs(60));
}
