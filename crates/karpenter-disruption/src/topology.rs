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
//!   node is not in the snapshot counts in the domain of its own label. Forceful expiration and other
//!   involuntary deletions are not held back (as budgets do not hold them), but while their nodes go they count.
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
