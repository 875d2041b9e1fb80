//! Forceful deadlines as pure functions of `now`: NodeClaim expiry
//! (`expireAfter`, not budgeted) and the terminationGracePeriod deadline of a deleting NodeClaim (which pods the
//! drain must force-delete now, and when to look again).

use chrono::{DateTime, Duration, Utc};
use karpenter_api::CompactPod;
use karpenter_api::labels::annotations;
use karpenter_scheduler::ClusterSnapshot;
use karpenter_scheduler::snapshot::{NodeClaimInfo, pod_key};
use serde::{Deserialize, Serialize};

use crate::pods::{is_static, tolerates_disrupted_taint};
use karpenter_api::time::{from_k8s, parse_rfc3339, rfc3339};

/// Kubernetes' default pod `terminationGracePeriodSeconds`.
pub const DEFAULT_POD_GRACE_SECONDS: i64 = 30;
/// A terminating pod this long past its deletion timestamp is stuck and no longer waited for.
pub const STUCK_AFTER_SECONDS: i64 = 60;

/// When a NodeClaim expires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Expiry {
    /// The NodeClaim.
    pub node_claim: String,
    /// Its node, if registered.
    pub node: Option<String>,
    /// `creationTimestamp + expireAfter` (RFC 3339).
    pub expires_at: String,
    /// `now ≥ expires_at`: delete it now (forceful, no budget, metric reason `expired`).
    pub expired: bool,
}

/// The expiry time of a NodeClaim (`None`: `expireAfter: Never` or no creation timestamp).
pub fn expires_at(claim: &NodeClaimInfo) -> Option<DateTime<Utc>> {
    let after = claim.claim.spec.expire_after.duration()?;
    let created = claim.claim.metadata.creation_timestamp.as_ref().and_then(from_k8s)?;
    created.checked_add_signed(Duration::from_std(after).ok()?)
}

/// Every non-deleting NodeClaim with an expiry, soonest first (ties by name).
pub fn expirations(snapshot: &ClusterSnapshot, now: DateTime<Utc>) -> Vec<Expiry> {
    let mut out: Vec<(DateTime<Utc>, Expiry)> = snapshot
        .node_claims
        .iter()
        .filter(|c| !c.marked_for_deletion)
        .filter_map(|c| {
            let at = expires_at(c)?;
            Some((
                at,
                Expiry {
                    node_claim: c.name.clone(),
                    node: c.node_name.clone(),
                    expires_at: rfc3339(at),
                    expired: now >= at,
                },
            ))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.node_claim.cmp(&b.1.node_claim)));
    out.into_iter().map(|(_, e)| e).collect()
}

/// The NodeClaims to delete at `now` because they expired.
pub fn expired(snapshot: &ClusterSnapshot, now: DateTime<Utc>) -> Vec<Expiry> {
    expirations(snapshot, now).into_iter().filter(|e| e.expired).collect()
}

/// A pod the drain must delete directly (bypassing PDBs and do-not-disrupt) because it would not finish
/// before the deadline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForcedDeletion {
    /// `namespace/name`.
    pub pod: String,
    /// Grace period to delete with: `max(seconds until the deadline, 1)`.
    pub grace_seconds: i64,
}

/// What the termination of a deleting NodeClaim must do at `now` because of its terminationGracePeriod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TerminationDeadline {
    /// The NodeClaim.
    pub node_claim: String,
    /// The deadline (RFC 3339): the termination-timestamp annotation, or `deletionTimestamp + TGP`.
    pub deadline: String,
    /// The annotation value to set when it is not set yet (`karpenter.sh/nodeclaim-termination-timestamp`).
    pub annotate: Option<String>,
    /// Pods to force-delete now.
    pub force_delete: Vec<ForcedDeletion>,
    /// The deadline passed: stop waiting for volume detachment, delete the instance.
    pub deadline_passed: bool,
    /// When a further pod becomes due (RFC 3339), if any.
    pub next_check: Option<String>,
}

/// The deadline of a deleting NodeClaim and what it forces at `now`; `None` when the claim is not deleting or
/// has neither the annotation nor a terminationGracePeriod.
pub fn termination_deadline(
    snapshot: &ClusterSnapshot,
    claim: &NodeClaimInfo,
    now: DateTime<Utc>,
) -> Option<TerminationDeadline> {
    let annotated =
        claim.annotations().get(annotations::NODE_CLAIM_TERMINATION_TIMESTAMP).and_then(|v| parse_rfc3339(v));
    let computed = || {
        let deleted = claim.claim.metadata.deletion_timestamp.as_ref().and_then(from_k8s)?;
        let tgp = claim.claim.spec.termination_grace_period.as_ref()?.duration();
        deleted.checked_add_signed(Duration::from_std(tgp).ok()?)
    };
    let (deadline, annotate) = match annotated {
        Some(d) => (d, None),
        None => {
            let d = computed()?;
            (d, Some(rfc3339(d)))
        }
    };
    let mut force_delete = Vec::new();
    let mut next: Option<DateTime<Utc>> = None;
    let until = (deadline - now).num_seconds().max(1);
    let pods: Vec<&CompactPod> = claim.node_name.as_deref().map(|n| snapshot.pods_on(n).collect()).unwrap_or_default();
    for p in pods {
        if p.is_terminal() || tolerates_disrupted_taint(p) || is_static(p) {
            continue;
        }
        let deleting = p.metadata.deletion_timestamp.as_ref().and_then(from_k8s);
        if let Some(d) = deleting {
            if now > d + Duration::seconds(STUCK_AFTER_SECONDS) {
                continue;
            }
            if d > deadline {
                force_delete.push(ForcedDeletion { pod: pod_key(p), grace_seconds: until });
            }
            continue;
        }
        let grace = p.spec.termination_grace_period_seconds.unwrap_or(DEFAULT_POD_GRACE_SECONDS);
        let due = deadline - Duration::seconds(grace);
        if now > due {
            force_delete.push(ForcedDeletion { pod: pod_key(p), grace_seconds: until });
        } else {
            next = Some(next.map_or(due, |n: DateTime<Utc>| n.min(due)));
        }
    }
    let deadline_passed = now >= deadline;
    if !deadline_passed {
        next = Some(next.map_or(deadline, |n| n.min(deadline)));
    }
    force_delete.sort_by(|a, b| a.pod.cmp(&b.pod));
    Some(TerminationDeadline {
        node_claim: claim.name.clone(),
        deadline: rfc3339(deadline),
        annotate,
        force_delete,
        deadline_passed,
        next_check: next.map(rfc3339),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_api::load_str;

    fn at(s: &str) -> DateTime<Utc> {
        parse_rfc3339(s).expect("time")
    }

    const INPUT: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {name: old, creationTimestamp: "2026-01-01T00:00:00Z", labels: {karpenter.sh/nodepool: default}}
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements: []
  expireAfter: 24h
status: {nodeName: n-old}
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {name: forever, creationTimestamp: "2025-01-01T00:00:00Z", labels: {karpenter.sh/nodepool: default}}
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements: []
  expireAfter: Never
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: going
  creationTimestamp: "2026-01-01T00:00:00Z"
  deletionTimestamp: "2026-01-02T00:00:00Z"
  finalizers: [karpenter.sh/termination]
  labels: {karpenter.sh/nodepool: default}
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements: []
  terminationGracePeriod: 1h
status: {nodeName: n-going}
---
apiVersion: v1
kind: Node
metadata: {name: n-going, labels: {karpenter.sh/nodepool: default}}
---
apiVersion: v1
kind: Pod
metadata: {name: slow, namespace: default}
spec: {nodeName: n-going, terminationGracePeriodSeconds: 600, containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: Pod
metadata: {name: quick, namespace: default}
spec: {nodeName: n-going, containers: [{name: c, image: x}]}
"#;

    fn snapshot() -> ClusterSnapshot {
        ClusterSnapshot::from_objects(&load_str(INPUT, "t.yaml").expect("loads")).expect("snapshot")
    }

    #[test]
    fn expiry_is_creation_plus_expire_after() {
        let s = snapshot();
        let before = expirations(&s, at("2026-01-01T23:59:59Z"));
        assert_eq!(before.len(), 1, "Never and deleting claims are left out: {before:?}");
        assert_eq!(before[0].expires_at, "2026-01-02T00:00:00Z");
        assert!(!before[0].expired);
        assert!(expired(&s, at("2026-01-01T23:59:59Z")).is_empty());
        assert_eq!(expired(&s, at("2026-01-02T00:00:00Z"))[0].node_claim, "old");
    }

    #[test]
    fn termination_grace_period_forces_pods_that_would_not_finish() {
        let s = snapshot();
        let claim = s.node_claims.iter().find(|c| c.name == "going").expect("claim");
        // Deadline 01:00. At 00:40 the 600 s pod is due (00:50 > ... no: due at 00:50).
        let t = termination_deadline(&s, claim, at("2026-01-02T00:40:00Z")).expect("deadline");
        assert_eq!(t.deadline, "2026-01-02T01:00:00Z");
        assert_eq!(t.annotate.as_deref(), Some("2026-01-02T01:00:00Z"));
        assert!(t.force_delete.is_empty());
        assert_eq!(t.next_check.as_deref(), Some("2026-01-02T00:50:00Z"));
        let t = termination_deadline(&s, claim, at("2026-01-02T00:50:01Z")).expect("deadline");
        assert_eq!(t.force_delete, [ForcedDeletion { pod: "default/slow".into(), grace_seconds: 599 }]);
        let t = termination_deadline(&s, claim, at("2026-01-02T01:00:00Z")).expect("deadline");
        assert_eq!(t.force_delete.len(), 2);
        assert!(t.deadline_passed);
        assert!(t.force_delete.iter().all(|f| f.grace_seconds == 1), "at least 1 s");
        let old = s.node_claims.iter().find(|c| c.name == "old").expect("claim");
        assert!(termination_deadline(&s, old, at("2026-01-02T00:00:00Z")).is_none(), "not deleting");
    }
}
