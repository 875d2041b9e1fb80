//! Karpenter's disruption decisions (emptiness, drift, consolidation, expiration, budgets) as pure functions over a ClusterSnapshot
