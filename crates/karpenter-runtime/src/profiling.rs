//! Profiles on the metrics server with `ENABLE_PROFILING`, at the paths of upstream's (Go's `net/http/pprof`):
//!
//! - `/debug/pprof/`: the index, linking the profiles below;
//! - `/debug/pprof/profile?seconds=N`: a CPU profile of the next N seconds (default 30, at most
//!   [`MAX_CPU_SECONDS`]), sampled 100 times a second by SIGPROF (the `pprof` crate), in the pprof protobuf format
//!   `go tool pprof` and `pprof` read. One at a time: a second request while one runs gets 409;
//! - `/debug/pprof/heap`: the allocator's heap profile in the same format, when the binary gives the server one
//!   ([`HeapProfiler`]; `karpenter-controller` built with the `jemalloc-profiling` feature and started with
//!   `_RJEM_MALLOC_CONF=prof:true`), else 501 saying what is missing. A library cannot know the process's
//!   allocator, so the binary supplies the reader.
//!
//! With profiling off these paths answer 404, as upstream's.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use pprof::protos::Message;

/// Reads the heap profile of the process, pprof protobuf (gzip-compressed or not: pprof reads both), or says why
/// it cannot. Asynchronous: the allocator's profile may be behind a lock or written to a file first.
pub type HeapProfiler = Arc<dyn Fn() -> BoxFuture<'static, Result<Vec<u8>, String>> + Send + Sync>;

/// The longest CPU profile served (Go's server refuses profiles longer than its write timeout).
pub const MAX_CPU_SECONDS: u64 = 600;
/// The CPU profile's length when `seconds` is not given (Go's default).
pub const DEFAULT_CPU_SECONDS: u64 = 30;
/// Samples per second of a CPU profile (Go's rate).
const CPU_SAMPLE_HZ: i32 = 100;

/// The profiling endpoints of the metrics server.
#[derive(Clone, Default)]
pub struct Profiling {
    heap: Option<HeapProfiler>,
}

impl std::fmt::Debug for Profiling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profiling").field("heap", &self.heap.is_some()).finish()
    }
}

/// A request the profiling endpoints refuse or could not serve: the status and a line saying why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// A bad `seconds` (400).
    #[error("{0}")]
    BadRequest(String),
    /// A CPU profile is already being taken (409).
    #[error("a CPU profile is already running; try again when it ends")]
    Busy,
    /// The heap profile is not available in this process (501).
    #[error("{0}")]
    Unavailable(String),
    /// Profiling failed (500).
    #[error("{0}")]
    Failed(String),
}

impl Profiling {
    /// CPU profiles only; `/debug/pprof/heap` answers 501.
    pub fn new() -> Self {
        Self::default()
    }

    /// With a heap profile reader.
    pub fn with_heap(mut self, heap: HeapProfiler) -> Self {
        self.heap = Some(heap);
        self
    }

    /// The index page, listing the profiles.
    pub fn index(&self) -> String {
        let heap = if self.heap.is_some() {
            "<a href=\"heap\">heap</a>: the sampled live heap"
        } else {
            "heap: not available (needs a build with the jemalloc-profiling feature, run with \
             _RJEM_MALLOC_CONF=prof:true)"
        };
        format!(
            "<html><head><title>/debug/pprof/</title></head><body>\n<p>Profiles (pprof protobuf; \
             <code>go tool pprof http://HOST:PORT/debug/pprof/profile</code>):</p>\n<ul>\n\
             <li><a href=\"profile?seconds={DEFAULT_CPU_SECONDS}\">profile</a>: CPU, over ?seconds=N \
             (default {DEFAULT_CPU_SECONDS}, at most {MAX_CPU_SECONDS})</li>\n<li>{heap}</li>\n</ul>\n</body></html>\n"
        )
    }

    /// The heap profile.
    pub async fn heap(&self) -> Result<Vec<u8>, ProfileError> {
        let Some(heap) = &self.heap else {
            return Err(ProfileError::Unavailable(
                "heap profiles need karpenter-controller built with the jemalloc-profiling feature and started \
                 with _RJEM_MALLOC_CONF=prof:true"
                    .into(),
            ));
        };
        heap().await.map_err(ProfileError::Failed)
    }
}

/// The length `query` asks for (`seconds=N`), else the default.
pub fn cpu_seconds(query: Option<&str>) -> Result<u64, ProfileError> {
    let Some(value) = query.into_iter().flat_map(|q| q.split('&')).find_map(|p| p.strip_prefix("seconds=")) else {
        return Ok(DEFAULT_CPU_SECONDS);
    };
    match value.parse::<u64>() {
        Ok(s) if (1..=MAX_CPU_SECONDS).contains(&s) => Ok(s),
        _ => Err(ProfileError::BadRequest(format!(
            "seconds={value:?} is not a whole number of seconds from 1 to {MAX_CPU_SECONDS}"
        ))),
    }
}

/// A CPU profile of the next `length`, encoded as pprof protobuf. Waits on tokio's clock while the process runs
/// (the sampling is signal-driven and covers every thread).
pub async fn cpu_profile(length: Duration) -> Result<Vec<u8>, ProfileError> {
    let guard = pprof::ProfilerGuardBuilder::default()
        .frequency(CPU_SAMPLE_HZ)
        // Unwinding through these from a signal handler can deadlock (pprof's advice).
        .blocklist(&["libc", "libgcc", "pthread", "vdso"])
        .build()
        .map_err(|e| match e {
            pprof::Error::Running => ProfileError::Busy,
            other => ProfileError::Failed(format!("starting the CPU profiler: {other}")),
        })?;
    tokio::time::sleep(length).await;
    let report = guard.report().build().map_err(|e| ProfileError::Failed(format!("building the report: {e}")))?;
    drop(guard);
    let profile = report.pprof().map_err(|e| ProfileError::Failed(format!("encoding the profile: {e}")))?;
    Ok(profile.encode_to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_default_to_thirty_and_must_be_in_range() {
        assert_eq!(cpu_seconds(None), Ok(30));
        assert_eq!(cpu_seconds(Some("debug=1")), Ok(30));
        assert_eq!(cpu_seconds(Some("seconds=5")), Ok(5));
        assert_eq!(cpu_seconds(Some("debug=0&seconds=600")), Ok(600));
        for bad in ["seconds=0", "seconds=601", "seconds=-1", "seconds=1.5", "seconds="] {
            let err = cpu_seconds(Some(bad)).unwrap_err();
            assert!(matches!(&err, ProfileError::BadRequest(m) if m.contains("from 1 to 600")), "{bad}: {err}");
        }
    }

    #[tokio::test]
    async fn heap_without_a_reader_says_what_is_needed() {
        let err = Profiling::new().heap().await.unwrap_err();
        assert!(matches!(&err, ProfileError::Unavailable(m) if m.contains("jemalloc-profiling")), "{err}");
        let served = Profiling::new().with_heap(Arc::new(|| Box::pin(async { Ok(vec![1, 2, 3]) })));
        assert_eq!(served.heap().await, Ok(vec![1, 2, 3]));
        assert!(served.index().contains("href=\"heap\""));
    }
}
