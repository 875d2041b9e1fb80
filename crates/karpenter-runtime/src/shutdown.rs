//! Graceful shutdown: SIGTERM or SIGINT cancels one [`CancellationToken`] that every server and loop of the
//! process observes (directly or through a child token). Kubernetes sends SIGTERM when it stops the pod and
//! waits `terminationGracePeriodSeconds` before SIGKILL; within that time the servers stop accepting, the leader
//! Lease is released and the loops return.
//!
//! ```no_run
//! # async fn run() {
//! let shutdown = karpenter_runtime::shutdown::on_signals();
//! // hand shutdown.clone() / shutdown.child_token() to the servers and loops …
//! shutdown.cancelled().await;
//! # }
//! ```

use std::future::Future;

pub use tokio_util::sync::CancellationToken;

/// What ended the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM (Kubernetes stopping the pod).
    Terminate,
    /// SIGINT (Ctrl-C).
    Interrupt,
}

/// A token cancelled on the first SIGTERM or SIGINT. Spawns the listening task; needs a tokio runtime.
pub fn on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    tokio::spawn(cancel_on(token.clone(), wait_for_signal()));
    token
}

/// Cancels `token` when `trigger` completes (a signal, in production; anything, in tests) and returns what
/// triggered it. Returns `None` without waiting further if the token is cancelled by someone else first.
pub async fn cancel_on<T>(token: CancellationToken, trigger: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        _ = token.cancelled() => None,
        cause = trigger => {
            token.cancel();
            Some(cause)
        }
    }
}

/// Waits for SIGTERM or SIGINT (on non-Unix platforms: Ctrl-C). If the handlers cannot be installed the future
/// never completes (the process then ends only by SIGKILL, as without a handler), and the failure is logged.
pub async fn wait_for_signal() -> Signal {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
            (Ok(mut term), Ok(mut int)) => tokio::select! {
                _ = term.recv() => Signal::Terminate,
                _ = int.recv() => Signal::Interrupt,
            },
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!(error = %e, "installing the SIGTERM/SIGINT handlers failed");
                std::future::pending().await
            }
        }
    }
    #[cfg(not(unix))]
    {
        match tokio::signal::ctrl_c().await {
            Ok(()) => Signal::Interrupt,
            Err(e) => {
                tracing::error!(error = %e, "installing the Ctrl-C handler failed");
                std::future::pending().await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn trigger_cancels_the_token_and_its_children() {
        let token = CancellationToken::new();
        let server = token.child_token();
        let (tx, rx) = tokio::sync::oneshot::channel::<Signal>();
        let task = tokio::spawn(cancel_on(token.clone(), async move { rx.await.unwrap_or(Signal::Interrupt) }));
        tokio::task::yield_now().await;
        assert!(!token.is_cancelled() && !server.is_cancelled());
        tx.send(Signal::Terminate).unwrap();
        assert_eq!(task.await.unwrap(), Some(Signal::Terminate));
        assert!(token.is_cancelled());
        tokio::time::timeout(Duration::from_secs(1), server.cancelled()).await.expect("children see the cancel");
    }

    #[tokio::test]
    async fn an_earlier_cancel_ends_the_watch_without_a_signal() {
        let token = CancellationToken::new();
        let task = tokio::spawn(cancel_on(token.clone(), std::future::pending::<Signal>()));
        token.cancel();
        assert_eq!(tokio::time::timeout(Duration::from_secs(1), task).await.unwrap().unwrap(), None);
    }

    #[tokio::test]
    async fn on_signals_starts_uncancelled() {
        let token = on_signals();
        tokio::task::yield_now().await;
        assert!(!token.is_cancelled());
    }
}
