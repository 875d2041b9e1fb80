//! When the provisioner first saw each pending pod, first decided about it, and first thought it could schedule
//! it: upstream's cluster-state pod acks and scheduling decisions, which the pod metrics measure from.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};

use crate::metrics::Metrics;

#[derive(Debug, Default, Clone, Copy)]
struct Times {
    acked: Option<DateTime<Utc>>,
    decided: Option<DateTime<Utc>>,
    schedulable: Option<DateTime<Utc>>,
}

/// Per pod (`namespace/name`) times, shared by the provisioner (which records them) and `metrics.pod` (which reads
/// them and forgets a pod once it has started, ended or gone). Cheap to clone: clones share the map.
#[derive(Debug, Default, Clone)]
pub struct SchedulingTimes {
    pods: Arc<Mutex<HashMap<String, Times>>>,
}

impl SchedulingTimes {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Times>> {
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The provisioner has seen these pods as provisionable at `now` (only the first time counts).
    pub fn ack<'a>(&self, pods: impl IntoIterator<Item = &'a str>, now: DateTime<Utc>) {
        let mut map = self.lock();
        for pod in pods {
            map.entry(pod.to_string()).or_default().acked.get_or_insert(now);
        }
    }

    /// A scheduling pass decided about these pods at `now`: `failed` could not be placed (they lose any
    /// schedulable time), `placed` were placed (unbound ones keep the first time they were). The first decision
    /// about a pod observes `karpenter_pods_scheduling_decision_duration_seconds` from its ack.
    pub fn record_decisions<'a>(
        &self,
        metrics: &Metrics,
        failed: impl IntoIterator<Item = &'a str>,
        placed: impl IntoIterator<Item = (&'a str, bool)>,
        now: DateTime<Utc>,
    ) {
        let mut map = self.lock();
        let decide = |t: &mut Times| {
            if t.decided.is_none() {
                t.decided = Some(now);
                if let Some(acked) = t.acked {
                    metrics.pods_scheduling_decision_duration_seconds().observe(seconds(now - acked));
                }
            }
        };
        for pod in failed {
            let t = map.entry(pod.to_string()).or_default();
            t.schedulable = None;
            decide(t);
        }
        for (pod, bound) in placed {
            // A bound pod (one of a deleting node's, simulated for capacity) has no schedulable time to measure.
            if bound {
                continue;
            }
            let t = map.entry(pod.to_string()).or_default();
            t.schedulable.get_or_insert(now);
            decide(t);
        }
    }

    pub fn ack_time(&self, pod: &str) -> Option<DateTime<Utc>> {
        self.lock().get(pod).and_then(|t| t.acked)
    }

    pub fn decision_time(&self, pod: &str) -> Option<DateTime<Utc>> {
        self.lock().get(pod).and_then(|t| t.decided)
    }

    pub fn schedulable_time(&self, pod: &str) -> Option<DateTime<Utc>> {
        self.lock().get(pod).and_then(|t| t.schedulable)
    }

    /// Forgets a pod (started, ended or deleted).
    pub fn forget(&self, pod: &str) {
        self.lock().remove(pod);
    }

    /// Keeps only the pods `keep` says yes to.
    pub fn retain(&self, mut keep: impl FnMut(&str) -> bool) {
        self.lock().retain(|k, _| keep(k));
    }

    /// Pods with times.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A chrono duration in seconds (negative when clocks disagree, as upstream's would be).
pub(crate) fn seconds(d: chrono::Duration) -> f64 {
    d.num_milliseconds() as f64 / 1000.0
}

/// Records a provisioning pass's decisions (upstream's `MarkPodSchedulingDecisions`): the pods it rejected before
/// scheduling and those left unschedulable failed; the pods placed on existing nodes or new NodeClaims were
/// placed. Only pods in the cluster state count (a CapacityBuffer's virtual pods are not pods): `bound` answers,
/// for a pod the state holds, whether it is bound to a node, and `None` for any other key. A lookup rather than
/// the state itself, because the state holds these times: the times know nothing of the state.
pub fn record_pass(
    times: &SchedulingTimes,
    metrics: &Metrics,
    rejected: &[String],
    decisions: &karpenter_scheduler::decision::Decisions,
    now: DateTime<Utc>,
    bound: impl Fn(&str) -> Option<bool>,
) {
    let failed: Vec<&str> = rejected
        .iter()
        .map(String::as_str)
        .chain(decisions.unschedulable.iter().map(|u| u.pod.as_str()))
        .filter(|k| bound(k).is_some())
        .collect();
    let placed: Vec<(&str, bool)> = decisions
        .existing_nodes
        .iter()
        .flat_map(|p| p.pods.iter())
        .chain(decisions.new_node_claims.iter().flat_map(|p| p.pods.iter()))
        .filter_map(|k| bound(k.as_str()).map(|bound| (k.as_str(), bound)))
        .collect();
    times.record_decisions(metrics, failed, placed, now);
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use karpenter_scheduler::decision::{
        Decisions, ExistingNodePlacement, PodKey, UnschedulablePod, UnschedulableReason,
    };

    use super::*;
    use crate::metrics::BuildInfo;

    fn key(k: &str) -> PodKey {
        let (ns, name) = k.split_once('/').unwrap();
        PodKey::new(ns, name).unwrap()
    }

    /// A pass's decisions reach the times only for pods the lookup knows: a failed pod loses its schedulable
    /// time, a placed pending pod gains one, a placed bound pod and a key the state does not hold (a
    /// CapacityBuffer's virtual pod) leave no trace; each known pod is decided once.
    #[test]
    fn a_pass_records_only_the_pods_the_lookup_knows() {
        let t = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let times = SchedulingTimes::default();
        let metrics = Metrics::new(&BuildInfo::default());
        times.ack(["default/placed", "default/failed", "default/bound"], t);
        times.record_decisions(&metrics, [], [("default/failed", false)], t);
        let mut decisions = Decisions::default();
        decisions.existing_nodes.push(ExistingNodePlacement::new(
            "n1",
            false,
            vec![key("default/placed"), key("default/bound"), key("buffers/virtual")],
        ));
        decisions.unschedulable.push(UnschedulablePod::new(key("default/unschedulable"), UnschedulableReason::Timeout));
        let later = t + chrono::Duration::seconds(3);
        let bound = |k: &str| match k {
            "default/placed" | "default/failed" | "default/unschedulable" => Some(false),
            "default/bound" => Some(true),
            _ => None,
        };
        record_pass(&times, &metrics, &["default/failed".to_owned()], &decisions, later, bound);

        assert_eq!(times.schedulable_time("default/placed"), Some(later));
        assert_eq!(times.decision_time("default/placed"), Some(later));
        assert_eq!(times.schedulable_time("default/failed"), None, "a failed pod loses its schedulable time");
        assert_eq!(times.decision_time("default/failed"), Some(t), "only the first decision counts");
        assert_eq!(times.decision_time("default/unschedulable"), Some(later));
        assert_eq!(times.decision_time("default/bound"), None, "a bound pod has nothing to measure");
        assert_eq!(times.decision_time("buffers/virtual"), None, "a key the state does not hold is no pod");
    }
}
