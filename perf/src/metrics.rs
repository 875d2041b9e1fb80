//! The controller's own latency figures, read from its `/metrics` at the end of a case: how long pods waited for
//! their NodeClaim, and how long a provisioning pass and a disruption pass took (the histograms time the whole
//! pass, building the cluster snapshot included).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Time from a pod's first Unschedulable trigger to the NodeClaim-create answer, per pod.
pub const POD_TO_NODECLAIM: &str = "karpenter_provisioner_pod_to_nodeclaim_created_duration_seconds";
/// One provisioning pass.
pub const SCHEDULING_PASS: &str = "karpenter_scheduler_scheduling_duration_seconds";
/// One disruption evaluation pass.
pub const DISRUPTION_PASS: &str = "karpenter_voluntary_disruption_decision_evaluation_duration_seconds";

/// One histogram summed over its label sets.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Summary {
    pub count: u64,
    /// The upper bound of the bucket holding the 99th percentile (`None`: beyond the last finite bucket).
    pub p99_le_s: Option<f64>,
    /// The upper bound of the highest non-empty bucket: the slowest observation is at most this.
    pub max_le_s: Option<f64>,
    /// Mean (sum / count).
    pub mean_s: f64,
}

/// The latency figures of a case.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    pub pod_to_nodeclaim: Option<Summary>,
    pub scheduling_pass: Option<Summary>,
    pub disruption_pass: Option<Summary>,
}

impl Latency {
    pub fn from_exposition(text: &str) -> Self {
        Self {
            pod_to_nodeclaim: summarize(text, POD_TO_NODECLAIM),
            scheduling_pass: summarize(text, SCHEDULING_PASS),
            disruption_pass: summarize(text, DISRUPTION_PASS),
        }
    }
}

/// GET `http://127.0.0.1:<port>/metrics` (plain HTTP/1.0: the response ends when the server closes).
pub async fn scrape(port: u16) -> anyhow::Result<String> {
    let fetch = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
        stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").await?;
        let mut body = Vec::new();
        stream.read_to_end(&mut body).await?;
        anyhow::Ok(String::from_utf8_lossy(&body).into_owned())
    };
    let response = tokio::time::timeout(Duration::from_secs(10), fetch)
        .await
        .context("the metrics endpoint did not answer within 10 s")??;
    let Some((head, body)) = response.split_once("\r\n\r\n") else { bail!("not an HTTP response: {response:.80}") };
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!("metrics endpoint answered {}", head.lines().next().unwrap_or_default());
    }
    Ok(body.to_owned())
}

/// The histogram `name` in a Prometheus text exposition, its buckets summed over every label set.
pub fn summarize(text: &str, name: &str) -> Option<Summary> {
    let bucket_prefix = format!("{name}_bucket{{");
    let mut buckets: BTreeMap<u64, (f64, u64)> = BTreeMap::new();
    let mut infinite = 0u64;
    let mut sum = 0.0;
    let mut count = 0u64;
    let mut seen = false;
    for line in text.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        if let Some(labels) = series.strip_prefix(&bucket_prefix) {
            seen = true;
            let Some(le) = labels.split("le=\"").nth(1).and_then(|rest| rest.split('"').next()) else { continue };
            let n = value.parse::<f64>().unwrap_or(0.0) as u64;
            if le == "+Inf" {
                infinite += n;
            } else if let Ok(bound) = le.parse::<f64>() {
                let entry = buckets.entry(bound.to_bits()).or_insert((bound, 0));
                entry.1 += n;
            }
        } else if series == format!("{name}_sum") || series.starts_with(&format!("{name}_sum{{")) {
            sum += value.parse::<f64>().unwrap_or(0.0);
        } else if series == format!("{name}_count") || series.starts_with(&format!("{name}_count{{")) {
            count += value.parse::<f64>().unwrap_or(0.0) as u64;
        }
    }
    if !seen {
        return None;
    }
    // Cumulative counts by bound (f64 bits of positive numbers sort as the numbers do).
    let cumulative: Vec<(f64, u64)> = buckets.into_values().collect();
    let total = infinite.max(count);
    let p99_rank = (total as f64 * 0.99).ceil() as u64;
    let p99_le_s = cumulative.iter().find(|(_, n)| total > 0 && *n >= p99_rank).map(|(b, _)| *b);
    let max_le_s = match cumulative.last() {
        _ if total == 0 => None,
        Some((_, n)) if *n < total => None,
        _ => cumulative.iter().find(|(_, n)| *n >= total).map(|(b, _)| *b),
    };
    Some(Summary { count: total, p99_le_s, max_le_s, mean_s: if total > 0 { sum / total as f64 } else { 0.0 } })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# TYPE karpenter_scheduler_scheduling_duration_seconds histogram
karpenter_scheduler_scheduling_duration_seconds_bucket{controller=\"provisioner\",le=\"0.1\"} 90
karpenter_scheduler_scheduling_duration_seconds_bucket{controller=\"provisioner\",le=\"0.5\"} 99
karpenter_scheduler_scheduling_duration_seconds_bucket{controller=\"provisioner\",le=\"1.0\"} 100
karpenter_scheduler_scheduling_duration_seconds_bucket{controller=\"provisioner\",le=\"+Inf\"} 100
karpenter_scheduler_scheduling_duration_seconds_sum{controller=\"provisioner\"} 12.5
karpenter_scheduler_scheduling_duration_seconds_count{controller=\"provisioner\"} 100
karpenter_provisioner_pod_to_nodeclaim_created_duration_seconds_bucket{nodepool=\"a\",le=\"0.5\"} 0
karpenter_provisioner_pod_to_nodeclaim_created_duration_seconds_bucket{nodepool=\"a\",le=\"1.0\"} 10
karpenter_provisioner_pod_to_nodeclaim_created_duration_seconds_bucket{nodepool=\"a\",le=\"+Inf\"} 12
karpenter_provisioner_pod_to_nodeclaim_created_duration_seconds_bucket{nodepool=\"b\",le=\"0.5\"} 88
karpenter_provisioner_pod_to_nodeclaim_created_duration_seconds_bucket{nodepool=\"b\",le=\"1.0\"} 88
karpenter_provisioner_pod_to_nodeclaim_created_duration_seconds_bucket{nodepool=\"b\",le=\"+Inf\"} 88
karpenter_provisioner_pod_to_nodeclaim_created_duration_seconds_count{nodepool=\"a\"} 12
karpenter_provisioner_pod_to_nodeclaim_created_duration_seconds_count{nodepool=\"b\"} 88
";

    #[test]
    fn percentiles_come_from_the_cumulative_buckets() {
        let s = summarize(TEXT, SCHEDULING_PASS).unwrap();
        assert_eq!(s, Summary { count: 100, p99_le_s: Some(0.5), max_le_s: Some(1.0), mean_s: 0.125 });
    }

    #[test]
    fn label_sets_are_summed_and_overflow_has_no_bound() {
        // 100 pods: 88 within 0.5 s, 98 within 1 s, 2 beyond the last finite bucket.
        let s = summarize(TEXT, POD_TO_NODECLAIM).unwrap();
        assert_eq!(s.count, 100);
        assert_eq!(s.p99_le_s, None, "the 99th pod is beyond 1 s");
        assert_eq!(s.max_le_s, None);
    }

    #[test]
    fn an_absent_histogram_is_none() {
        assert_eq!(summarize(TEXT, DISRUPTION_PASS), None);
    }
}
