//! Samples a process's resident memory (`VmRSS` of `/proc/<pid>/status`) and CPU time (`utime + stime` of
//! `/proc/<pid>/stat`) once a second, with named phase marks so figures can be cut per phase.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use karpenter_testing::Stopwatch;
use tokio::task::JoinHandle;

/// One reading.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Seconds since the sampler started.
    pub t: f64,
    /// Resident set size, KiB.
    pub rss_kib: u64,
    /// utime + stime, seconds.
    pub cpu_s: f64,
}

/// Readings so far, shared with the sampling task.
#[derive(Clone, Debug, Default)]
pub struct Samples(Arc<Mutex<Vec<Sample>>>);

impl Samples {
    pub fn snapshot(&self) -> Vec<Sample> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn push(&self, s: Sample) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push(s);
    }
}

/// A running sampler; stops when dropped.
#[derive(Debug)]
pub struct Sampler {
    pub samples: Samples,
    /// The samples' time base: real time, as the process's CPU time it is compared with.
    start: Stopwatch,
    task: JoinHandle<()>,
    ticks_per_second: f64,
    pid: u32,
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Sampler {
    /// Starts sampling `pid` every `every`.
    pub fn start(pid: u32, every: Duration) -> Self {
        let samples = Samples::default();
        let start = Stopwatch::start();
        let ticks_per_second = clock_ticks();
        let task = {
            let samples = samples.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                loop {
                    tick.tick().await;
                    let Some(s) = read(pid, ticks_per_second, start) else { return };
                    samples.push(s);
                }
            })
        };
        Self { samples, start, task, ticks_per_second, pid }
    }

    /// Seconds since the start (the time base of the samples).
    pub fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// A reading taken right now (None once the process is gone).
    pub fn read_now(&self) -> Option<Sample> {
        read(self.pid, self.ticks_per_second, self.start)
    }
}

fn read(pid: u32, ticks_per_second: f64, start: Stopwatch) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces and parentheses): state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Sample { t: start.elapsed().as_secs_f64(), rss_kib, cpu_s: (utime + stime) as f64 / ticks_per_second })
}

/// `getconf CLK_TCK` (100 on every Linux this runs on; asked once rather than assumed).
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// Figures over the samples in `[from, to]` seconds.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Window {
    pub seconds: f64,
    pub peak_rss_mib: f64,
    pub p95_rss_mib: f64,
    pub cpu_seconds: f64,
    pub avg_cores: f64,
}

pub fn window(samples: &[Sample], from: f64, to: f64) -> Window {
    let inside: Vec<&Sample> = samples.iter().filter(|s| s.t >= from && s.t <= to).collect();
    let (Some(first), Some(last)) = (inside.first(), inside.last()) else { return Window::default() };
    let mut rss: Vec<u64> = inside.iter().map(|s| s.rss_kib).collect();
    rss.sort_unstable();
    let p95 = rss[((rss.len() as f64 * 0.95).ceil() as usize).saturating_sub(1).min(rss.len() - 1)];
    let peak = rss[rss.len() - 1];
    let cpu = last.cpu_s - first.cpu_s;
    let seconds = last.t - first.t;
    Window {
        seconds,
        peak_rss_mib: mib(peak),
        p95_rss_mib: mib(p95),
        cpu_seconds: cpu,
        avg_cores: if seconds > 0.0 { cpu / seconds } else { 0.0 },
    }
}

pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}
