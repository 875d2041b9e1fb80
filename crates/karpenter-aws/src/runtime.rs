//! The periodic loops of the AWS-side controllers: [`timed_pass`] records one pass under a controller's reconcile
//! series, [`every`] repeats a pass until shutdown (for the loops that have no controller type of their own).

use std::future::Future;
use std::time::Duration;

use karpenter_runtime::metrics::{ReconcileMetrics, ReconcileResult};
use tokio_util::sync::CancellationToken;

/// One pass of a periodic controller (a singleton controller upstream), recorded under its reconcile and
/// workqueue series when it has them: its one item queued and taken as the pass starts, the pass timed, its result
/// `requeue_after` (it runs again after its interval) or `error`.
pub async fn timed_pass<T, E>(
    metrics: Option<&ReconcileMetrics>,
    pass: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let guard = metrics.map(ReconcileMetrics::pass);
    let result = pass.await;
    if let Some(guard) = guard {
        guard.finish(ReconcileResult::of_pass(&result));
    }
    result
}

/// Runs `pass` now and then every `interval` until `shutdown` fires (a pass in progress finishes first).
pub async fn every<F, Fut>(interval: Duration, shutdown: CancellationToken, mut pass: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    loop {
        if shutdown.is_cancelled() {
            return;
        }
        pass().await;
        if shutdown.run_until_cancelled(tokio::time::sleep(interval)).await.is_none() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn a_timed_pass_counts_one_reconcile_with_its_result() {
        let metrics = karpenter_runtime::metrics::Metrics::new(&karpenter_runtime::metrics::BuildInfo::default());
        let series = metrics.reconciler("providers.ssm.invalidation", 1);
        let ok: Result<u8, String> = timed_pass(Some(&series), async { Ok(1) }).await;
        assert_eq!(ok, Ok(1));
        let failed: Result<u8, String> = timed_pass(Some(&series), async { Err("no".to_owned()) }).await;
        assert_eq!(failed, Err("no".to_owned()));
        // Without series the pass runs all the same.
        assert_eq!(timed_pass(None, async { Ok::<u8, String>(2) }).await, Ok(2));
        let text = metrics.render();
        let line = |prefix: &str| text.lines().find(|l| l.starts_with(prefix)).map(str::to_owned);
        let sample = |name: &str, result: &str| {
            line(&format!("{name}{{controller=\"providers.ssm.invalidation\",result=\"{result}\"}}"))
        };
        assert!(
            sample("controller_runtime_reconcile_total", "requeue_after").is_some_and(|l| l.ends_with(" 1")),
            "{text}"
        );
        assert!(sample("controller_runtime_reconcile_total", "error").is_some_and(|l| l.ends_with(" 1")), "{text}");
        let adds = text.lines().find(|l| {
            l.starts_with("workqueue_adds_total{") && l.contains("controller=\"providers.ssm.invalidation\"")
        });
        assert!(adds.is_some_and(|l| l.ends_with(" 2")), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn every_runs_at_start_and_each_interval_until_shutdown() {
        let runs = Arc::new(AtomicUsize::new(0));
        let token = CancellationToken::new();
        let r = runs.clone();
        let task = tokio::spawn(every(Duration::from_secs(10), token.clone(), move || {
            let r = r.clone();
            async move {
                r.fetch_add(1, Ordering::SeqCst);
            }
        }));
        tokio::time::sleep(Duration::from_secs(25)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        token.cancel();
        task.await.unwrap();
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 3);
    }
}
