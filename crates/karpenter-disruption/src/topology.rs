//! Disruption one topology domain at a time (not upstream Karpenter).
//!
//! A NodePool annotated `karpenter-rs.io/disruption-topology-key: <label key>`
//! ([`karpenter_api::labels::disruption_topology`]) has its nodes disrupted voluntarily (emptiness, drift, static
//! drift, consolidation) in one domain of that key at a time; budgets still apply, within the domain.
//!
//! * A domain is a value of the key on the pool's nodes; the nodes without the label form one domain of their
//!   own (so a key no node carries makes the whole pool one domain, and changes nothing).
//! * A domain is **being disrupted** while a node of the pool in it is marked for deletion: deleting, its
//!   NodeClaim deleting, tainted `karpenter.sh/disrupted`, or part of a command in flight (the snapshot's
//!   `marked_for_deletion`, which the controller sets for its commands' candidates). A deleting NodeClaim whose
//!   node is not in the snapshot counts in the domain of its own label. Involuntary deletions are not held
//!   back here (as budgets do not hold them), but while their nodes go they count; the controller's expiration
//!   holds an expired NodeClaim of a keyed pool while another domain is going.
//! * A candidate may start only when no node of another domain of its pool is being disrupted; otherwise it
//!   waits ([`Reason::TopologyDomainWaiting`], naming the domain). When none is, any domain may start: the one of
//!   the first candidate the method takes in its own order (emptiness and consolidation: the consolidation sort;
//!   drift: oldest drift first, empty nodes first; multi-node consolidation: the best-ranked candidate). A
//!   command never holds candidates of two domains of one keyed pool.
//! * An annotation whose value is not a label key holds all voluntary disruption of the pool
//!   ([`Reason::TopologyKeyInvalid`]): the owner asked for a limit that cannot be read, and disrupting as if
//!   unannotated could take several domains at once. The NodePool validation controller reports it as a status
//!   condition and a Warning event.

use std::collections::{BTreeMap, BTreeSet};

use karpenter_api::labels::disruption_topology;

use crate::candidate::{Candidate, Cluster};
use crate::command::Reason;

/// A keyed pool: its key and the domains being disrupted (or taken by a command of this pass).
#[derive(Debug, Clone)]
struct Keyed<'a> {
    key: String,
    busy: BTreeSet<Option<&'a str>>,
}

/// The per-pass topology state of every pool: what blocks a candidate, and (as a method's own copy) the domains
/// its command has taken.
#[derive(Debug, Clone, Default)]
pub(crate) struct Topology<'a> {
    keyed: BTreeMap<&'a str, Keyed<'a>>,
    /// Pools whose annotation is no label key, with why.
    invalid: BTreeMap<&'a str, String>,
}

impl<'a> Topology<'a> {
    /// Reads every pool's annotation and the domains being disrupted now.
    pub fn new(cluster: &Cluster<'a>) -> Self {
        let mut keyed: BTreeMap<&'a str, Keyed<'a>> = BTreeMap::new();
        let mut invalid = BTreeMap::new();
        for (&name, pool) in &cluster.pools {
            match disruption_topology::of(pool.node_pool) {
                Ok(None) => {}
                Ok(Some(key)) => {
                    keyed.insert(name, Keyed { key, busy: BTreeSet::new() });
                }
                Err(e) => {
                    invalid.insert(name, e.to_string());
                }
            }
        }
        if !keyed.is_empty() {
            let snapshot = cluster.snapshot;
            for n in snapshot.nodes.iter().filter(|n| n.marked_for_deletion) {
                if let Some(k) = n.node_pool.as_deref().and_then(|p| keyed.get_mut(p)) {
                    k.busy.insert(n.labels.get(&k.key).map(String::as_str));
                }
            }
            for c in snapshot.node_claims.iter().filter(|c| c.marked_for_deletion && c.in_flight) {
                if let Some(k) = c.node_pool.as_deref().and_then(|p| keyed.get_mut(p)) {
                    k.busy.insert(c.labels().get(&k.key).map(String::as_str));
                }
            }
        }
        Topology { keyed, invalid }
    }

    /// Why `c` may not be disrupted now: its pool's annotation is invalid, or another domain of its pool is
    /// being disrupted (the first, by value, when several are). `None` for a pool without the annotation.
    pub fn block(&self, c: &Candidate<'a>) -> Option<Reason> {
        if let Some(detail) = self.invalid.get(c.pool_name) {
            return Some(Reason::TopologyKeyInvalid { node_pool: c.pool_name.to_owned(), detail: detail.clone() });
        }
        let k = self.keyed.get(c.pool_name)?;
        let own = c.node.labels.get(&k.key).map(String::as_str);
        let other = k.busy.iter().find(|d| **d != own)?;
        Some(Reason::TopologyDomainWaiting {
            node_pool: c.pool_name.to_owned(),
            key: k.key.clone(),
            domain: other.map(str::to_owned),
        })
    }

    /// Takes `c`'s domain for this copy's command: from now on, candidates of the pool's other domains are blocked.
    pub fn take(&mut self, c: &Candidate<'a>) {
        if let Some(k) = self.keyed.get_mut(c.pool_name) {
            let own = c.node.labels.get(&k.key).map(String::as_str);
            k.busy.insert(own);
        }
    }

    /// [`Self::block`], else [`Self::take`]: whether `c` may join this copy's command.
    pub fn admit(&mut self, c: &Candidate<'a>) -> Result<(), Reason> {
        match self.block(c) {
            Some(r) => Err(r),
            None => {
                self.take(c);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};
    use karpenter_api::labels::ZONE;
    use karpenter_scheduler::{ClusterSnapshot, PoolInput};
    use serde_json::{Value, json};

    use super::*;
    use crate::DisruptionOptions;

    const KEY: &str = disruption_topology::ANNOTATION;

    fn pool(name: &str, key: Option<&str>) -> Value {
        let annotations = key.map_or(json!({}), |k| json!({ KEY: k }));
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
               "metadata": {"name": name, "annotations": annotations},
               "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                        "name": "default"}, "requirements": []}}}})
    }

    /// A node of `pool` (zone label when given) with its NodeClaim; `disrupting`: tainted karpenter.sh/disrupted.
    fn node(name: &str, pool: &str, zone: Option<&str>, disrupting: bool) -> Vec<Value> {
        let mut labels = json!({"karpenter.sh/nodepool": pool, "karpenter.sh/initialized": "true"});
        if let Some(z) = zone {
            labels[ZONE] = json!(z);
        }
        let taints =
            if disrupting { json!([{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]) } else { json!([]) };
        vec![
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                   "spec": {"taints": taints}}),
            claim(&format!("claim-{name}"), labels, Some(name), false),
        ]
    }

    fn claim(name: &str, labels: Value, node: Option<&str>, deleting: bool) -> Value {
        let mut metadata = json!({"name": name, "labels": labels});
        if deleting {
            metadata["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            metadata["finalizers"] = json!(["karpenter.sh/termination"]);
        }
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": metadata,
               "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                        "requirements": []},
               "status": {"nodeName": node}})
    }

    fn snapshot(docs: Vec<Value>) -> ClusterSnapshot {
        let text = docs.iter().map(Value::to_string).collect::<Vec<_>>().join("\n---\n");
        let objects = karpenter_api::load_str(&text, "test.yaml").expect("objects");
        ClusterSnapshot::from_objects(&objects).expect("snapshot")
    }

    /// What `check` says of each node not being disrupted, in name order, all against one [`Topology`] (so a
    /// check that takes domains sees the earlier nodes' takes).
    fn verdicts(
        snapshot: &ClusterSnapshot,
        check: impl for<'t> Fn(&mut Topology<'t>, &Candidate<'t>) -> Option<Reason>,
    ) -> Vec<(String, String)> {
        let pools: Vec<PoolInput<'_>> =
            snapshot.node_pools.iter().map(|p| PoolInput { node_pool: p, instance_types: &[] }).collect();
        let provider = karpenter_testing::vocabulary::aws();
        let options = DisruptionOptions::default();
        let now: DateTime<Utc> = DateTime::parse_from_rfc3339("2026-01-01T12:00:00Z").unwrap().with_timezone(&Utc);
        let cluster = Cluster::new(snapshot, &pools, &provider, now, &options);
        let mut topology = Topology::new(&cluster);
        let mut out = Vec::new();
        for n in snapshot.nodes.iter().filter(|n| !n.marked_for_deletion) {
            let claim = cluster.claims[n.node_claim.as_deref().unwrap()];
            let pool_name = n.node_pool.as_deref().unwrap();
            let (&pool_name, &pool) = cluster.pools.get_key_value(pool_name).unwrap();
            let c = Candidate {
                node: n,
                claim,
                pool,
                pool_name,
                instance_type: None,
                zone: None,
                capacity_type: None,
                price: 0.0,
                pods: Vec::new(),
                reschedulable: Vec::new(),
                disruption_cost: 0.0,
                reschedule_cost: 1.0,
                pod_block: None,
                has_termination_grace_period: false,
                drifted_since: None,
            };
            let shown = match check(&mut topology, &c) {
                None => "may start".to_owned(),
                Some(Reason::TopologyDomainWaiting { domain, .. }) => format!("waits for {domain:?}"),
                Some(Reason::TopologyKeyInvalid { .. }) => "invalid".to_owned(),
                Some(r) => format!("{r:?}"),
            };
            out.push((n.name.clone(), shown));
        }
        out
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
    }

    #[test]
    fn a_domain_being_disrupted_holds_the_others_and_unlabelled_nodes_are_one_domain() {
        let mut docs = vec![pool("zonal", Some(ZONE)), pool("plain", None)];
        docs.extend(node("a1", "zonal", Some("zone-a"), false));
        docs.extend(node("a2", "zonal", Some("zone-a"), true));
        docs.extend(node("b1", "zonal", Some("zone-b"), false));
        docs.extend(node("u1", "zonal", None, false));
        docs.extend(node("p1", "plain", Some("zone-b"), false));
        docs.extend(node("p2", "plain", Some("zone-a"), true));
        let s = snapshot(docs);
        assert_eq!(
            verdicts(&s, |t, c| t.block(c)),
            pairs(&[
                ("a1", "may start"),
                ("b1", "waits for Some(\"zone-a\")"),
                ("p1", "may start"),
                ("u1", "waits for Some(\"zone-a\")"),
            ]),
            "an unannotated pool is never held"
        );
    }

    #[test]
    fn a_deleting_claim_without_a_node_counts_in_the_domain_of_its_label() {
        let mut docs = vec![pool("zonal", Some(ZONE))];
        docs.extend(node("a1", "zonal", Some("zone-a"), false));
        docs.extend(node("u1", "zonal", None, false));
        docs.push(claim("gone", json!({"karpenter.sh/nodepool": "zonal", ZONE: "zone-b"}), None, true));
        let s = snapshot(docs);
        assert_eq!(
            verdicts(&s, |t, c| t.block(c)),
            pairs(&[("a1", "waits for Some(\"zone-b\")"), ("u1", "waits for Some(\"zone-b\")")])
        );
    }

    #[test]
    fn two_domains_being_disrupted_hold_every_domain() {
        let mut docs = vec![pool("zonal", Some(ZONE))];
        docs.extend(node("a1", "zonal", Some("zone-a"), false));
        docs.extend(node("a2", "zonal", Some("zone-a"), true));
        docs.extend(node("b1", "zonal", Some("zone-b"), false));
        docs.extend(node("u2", "zonal", None, true));
        let s = snapshot(docs);
        assert_eq!(
            verdicts(&s, |t, c| t.block(c)),
            pairs(&[("a1", "waits for None"), ("b1", "waits for None")]),
            "the first other domain by value: the unlabelled one"
        );
    }

    #[test]
    fn the_first_candidate_taken_chooses_the_domain_and_a_bad_key_holds_the_pool() {
        let mut docs = vec![pool("zonal", Some(ZONE)), pool("bad", Some("Zone Name"))];
        docs.extend(node("a1", "zonal", Some("zone-a"), false));
        docs.extend(node("b1", "zonal", Some("zone-b"), false));
        docs.extend(node("b2", "zonal", Some("zone-b"), false));
        docs.extend(node("x1", "bad", Some("zone-a"), false));
        let s = snapshot(docs);
        assert_eq!(
            verdicts(&s, |t, c| t.block(c)),
            pairs(&[("a1", "may start"), ("b1", "may start"), ("b2", "may start"), ("x1", "invalid")])
        );
        // As a method takes them in order: a1, the first admitted, takes zone-a for the command.
        assert_eq!(
            verdicts(&s, |t, c| t.admit(c).err()),
            pairs(&[
                ("a1", "may start"),
                ("b1", "waits for Some(\"zone-a\")"),
                ("b2", "waits for Some(\"zone-a\")"),
                ("x1", "invalid")
            ])
        );
    }
}
