//! Karpenter's own well-known label, annotation, taint and finalizer keys, and [`ProviderLabels`], the type of a
//! provider's label set.
//!
//! A provider's own well-known labels and restricted domains are a [`ProviderLabels`] value handed to validation
//! and to the scheduler, never a global, so a new cloud brings its own set; each provider's keys and set live in
//! its crate (`karpenter_aws::labels`, `karpenter_kwok::labels`), and this crate names none of them.

use std::collections::BTreeSet;

// The keys the algebra itself needs are defined once, in karpenter-requirements.
pub use karpenter_requirements::labels::{
    ARCH, CAPACITY_TYPE, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT, HOSTNAME, INSTANCE_TYPE,
    LABEL_ALIASES, NODE_POOL, OS, REGION, ZONE,
};

// Core well-known labels (karpenter.sh and Kubernetes).
/// The Windows build (e.g. `10.0.17763`) of a Windows node; well known so pods can select on it.
pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";

// Lifecycle labels Karpenter puts on nodes.
/// `"true"` once the NodeClaim's Node has registered with the cluster (the lifecycle controller sets it).
pub const NODE_REGISTERED: &str = "karpenter.sh/registered";
/// `"true"` once the Node is initialized: ready, startup taints gone, extended resources registered.
pub const NODE_INITIALIZED: &str = "karpenter.sh/initialized";
/// `"true"` on a Node whose kubelet was given its taints (every AWS AMI family but Custom), so registration does
/// not copy the NodeClaim's taints onto it again.
pub const DO_NOT_SYNC_TAINTS: &str = "karpenter.sh/do-not-sync-taints";
/// Standard Kubernetes label that takes a node out of external load balancers; Karpenter adds it (value
/// `karpenter`) when a node's termination starts, so traffic drains before the instance goes.
pub const EXCLUDE_FROM_EXTERNAL_LB: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// Values of `karpenter.sh/capacity-type`.
pub const CAPACITY_TYPES: [&str; 3] = [CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT, CAPACITY_TYPE_RESERVED];

/// The core restricted domain: keys in it (or a subdomain of it) are reserved for Karpenter.
pub const CORE_RESTRICTED_DOMAIN: &str = "karpenter.sh";
/// Labels in this domain are dropped from kubelet's `--node-labels` but still applied at registration.
pub const NODE_RESTRICTION_DOMAIN: &str = "node-restriction.kubernetes.io";

/// Rewrites a deprecated alias (`beta.kubernetes.io/arch`, ...) to its current key; other keys are unchanged.
pub use karpenter_requirements::labels::normalize_key as normalize_label_key;

/// Core well-known labels: usable in requirements and pod selectors even when a NodePool does not list them.
pub const CORE_WELL_KNOWN_LABELS: [&str; 8] =
    [NODE_POOL, ZONE, REGION, INSTANCE_TYPE, ARCH, OS, CAPACITY_TYPE, WINDOWS_BUILD];

/// Annotation keys Karpenter reads and writes on pods, nodes, NodeClaims and node classes.
pub mod annotations {
    /// On a Node, `"true"` keeps it out of voluntary disruption (consolidation, drift, expiration); on a pod, `"true"`
    /// protects its node for good and a positive duration (`"30m"`) until the pod's start time plus that duration.
    pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
    /// `"true"` on a Node or NodeClaim vetoes node repair (and only repair: `do-not-disrupt` does not block it).
    pub const DO_NOT_REPAIR: &str = "karpenter.sh/do-not-repair";
    /// On a NodeClaim being rebooted by repair: the Node's `bootID` before the reboot, so a restarted controller
    /// sees that the reboot happened and never issues it twice.
    pub const REBOOT_PRE_BOOT_ID: &str = "karpenter.sh/reboot-pre-boot-id";
    /// On a NodeClaim: the drain bound before a repair reboot (a Go duration; `"0"` drains forcefully).
    pub const REBOOT_TERMINATION_GRACE_PERIOD: &str = "karpenter.sh/reboot-termination-grace-period";
    /// On NodePools and NodeClaims: the NodePool template's hash, compared to detect static drift.
    pub const NODE_POOL_HASH: &str = "karpenter.sh/nodepool-hash";
    /// The hash scheme [`NODE_POOL_HASH`] was computed with; on a version change the hash is rewritten, not drifted.
    pub const NODE_POOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";
    /// On a NodeClaim being deleted: the RFC 3339 deadline (deletion time plus terminationGracePeriod) after which its
    /// pods are deleted regardless of PDBs.
    pub const NODE_CLAIM_TERMINATION_TIMESTAMP: &str = "karpenter.sh/nodeclaim-termination-timestamp";
    /// On a NodeClaim, `"true"` or `"false"`: whether its NodePool's `minValues` were relaxed (policy `BestEffort`)
    /// to find instance types for it.
    pub const NODE_CLAIM_MIN_VALUES_RELAXED: &str = "karpenter.sh/nodeclaim-min-values-relaxed";
    /// On a NodeClaim: the DRA drivers its pods' resource claims need, so the node is not ready before they publish.
    pub const REQUESTED_DRA_DRIVERS: &str = "karpenter.sh/requested-dra-drivers";
    /// `"true"` on a NodeClaim launched with a price that a NodeOverlay changed.
    pub const PRICE_OVERLAY_APPLIED: &str = "karpenter.sh/price-overlay-applied";
    /// `"true"` on a NodeClaim whose capacity a NodeOverlay changed.
    pub const CAPACITY_OVERLAY_APPLIED: &str = "karpenter.sh/capacity-overlay-applied";
    /// On a pod: the ReplicaSet controller's scale-down preference; Karpenter reads it as the pod's disruption cost, and
    /// writes it itself with the `PodDeletionCostManagement` gate.
    pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
    /// A pod's cost of disruption for consolidation (an int32, alpha). With the `PodDeletionCostManagement` gate
    /// on it is the only source of that cost, because Karpenter then writes `POD_DELETION_COST` itself.
    pub const DISRUPTION_COST: &str = "karpenter.sh/disruption-cost";
}

/// Other autoscalers' annotations that keep a node from voluntary disruption as `karpenter.sh/do-not-disrupt:
/// "true"` does, so that a workload annotated for cluster-autoscaler (or with the proposed vendor-neutral
/// `node-autoscaling.kubernetes.io/` keys, not final in Kubernetes) is protected under Karpenter too. Not part
/// of upstream Karpenter: on by default, off with `HONOR_AUTOSCALER_ANNOTATIONS=false`. Only the exact values
/// listed block; any other value (`safe-to-evict: "true"` included) changes nothing.
pub mod autoscaler {
    use std::collections::BTreeMap;
    use std::fmt;

    /// What an annotation of [`BLOCKING`] is read from.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Target {
        /// A pod: it blocks the voluntary disruption of the node it runs on while it is active.
        Pod,
        /// A node (or its NodeClaim).
        Node,
    }

    /// An annotation and the value with which it blocks voluntary disruption.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct BlockingAnnotation {
        /// What carries it.
        pub target: Target,
        /// The annotation key.
        pub key: &'static str,
        /// The one value that blocks.
        pub value: &'static str,
    }

    impl BlockingAnnotation {
        /// Whether `annotations` hold this key with the blocking value.
        pub fn is_set(&self, annotations: &BTreeMap<String, String>) -> bool {
            annotations.get(self.key).is_some_and(|v| v == self.value)
        }
    }

    impl fmt::Display for BlockingAnnotation {
        /// `key=value`, as events and verdicts name it.
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{}={}", self.key, self.value)
        }
    }

    /// cluster-autoscaler's pod annotation: `"false"` keeps the pod's node from being scaled down.
    pub const CLUSTER_AUTOSCALER_SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";
    /// cluster-autoscaler's node annotation: `"true"` keeps the node from being scaled down.
    pub const CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";
    /// The proposed vendor-neutral pod annotation (same meaning as cluster-autoscaler's).
    pub const NODE_AUTOSCALING_SAFE_TO_EVICT: &str = "node-autoscaling.kubernetes.io/safe-to-evict";
    /// The proposed vendor-neutral node annotation.
    pub const NODE_AUTOSCALING_DO_NOT_DISRUPT: &str = "node-autoscaling.kubernetes.io/do-not-disrupt";

    /// Every annotation honoured, pods' first; the first one set is the one a verdict names.
    pub const BLOCKING: [BlockingAnnotation; 4] = [
        BlockingAnnotation { target: Target::Pod, key: CLUSTER_AUTOSCALER_SAFE_TO_EVICT, value: "false" },
        BlockingAnnotation { target: Target::Pod, key: NODE_AUTOSCALING_SAFE_TO_EVICT, value: "false" },
        BlockingAnnotation { target: Target::Node, key: CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED, value: "true" },
        BlockingAnnotation { target: Target::Node, key: NODE_AUTOSCALING_DO_NOT_DISRUPT, value: "true" },
    ];

    /// The first annotation of [`BLOCKING`] for `target` that `annotations` set.
    pub fn blocking(target: Target, annotations: &BTreeMap<String, String>) -> Option<&'static BlockingAnnotation> {
        BLOCKING.iter().find(|a| a.target == target && a.is_set(annotations))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn map(key: &str, value: &str) -> BTreeMap<String, String> {
            BTreeMap::from([(key.to_owned(), value.to_owned())])
        }

        #[test]
        fn each_annotation_blocks_only_with_its_value_and_target() {
            for a in &BLOCKING {
                let other = if a.target == Target::Pod { Target::Node } else { Target::Pod };
                assert_eq!(blocking(a.target, &map(a.key, a.value)), Some(a), "{a}");
                assert_eq!(blocking(other, &map(a.key, a.value)), None, "{a} is read from its target only");
                let opposite = if a.value == "true" { "false" } else { "true" };
                assert_eq!(blocking(a.target, &map(a.key, opposite)), None, "{a}: {opposite} changes nothing");
                assert_eq!(blocking(a.target, &map(a.key, "False")), None, "{a}: only the exact value");
            }
            assert_eq!(blocking(Target::Pod, &BTreeMap::new()), None);
            assert_eq!(
                blocking(Target::Pod, &map(CLUSTER_AUTOSCALER_SAFE_TO_EVICT, "false")).unwrap().to_string(),
                "cluster-autoscaler.kubernetes.io/safe-to-evict=false"
            );
        }
    }
}

/// Voluntary disruption one topology domain at a time (not upstream Karpenter): a NodePool annotated
/// `karpenter-rs.io/disruption-topology-key: <label key>` has its nodes disrupted (drift, emptiness,
/// consolidation) in one domain of that key at a time. The annotation is read here, once; karpenter-disruption
/// decides with it and the NodePool validation controller reports a bad value.
pub mod disruption_topology {
    use std::collections::BTreeMap;

    /// The NodePool annotation naming the node label whose values are the domains.
    pub const ANNOTATION: &str = "karpenter-rs.io/disruption-topology-key";
    /// The NodePool status condition reporting whether the annotation's value is a label key (present only while
    /// the annotation is).
    pub const CONDITION: &str = "DisruptionTopologyKeyValid";
    /// Reason of the condition (and of the Warning event) when the value is no label key.
    pub const INVALID_REASON: &str = "InvalidDisruptionTopologyKey";

    /// The annotation's value is not a label key.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    #[error("annotation {ANNOTATION}: {value:?} is not a valid label key ({problems})")]
    pub struct InvalidKey {
        /// The value as written.
        pub value: String,
        /// What is wrong with it.
        pub problems: String,
    }

    /// The topology key of a NodePool with these annotations: `None` without the annotation, the key (a deprecated
    /// alias such as `failure-domain.beta.kubernetes.io/zone` rewritten to its current name, the one nodes carry)
    /// when its value is a label key, else why not. A key no node carries is no error: nodes without the label
    /// form one domain of their own.
    pub fn parse(annotations: &BTreeMap<String, String>) -> Result<Option<String>, InvalidKey> {
        let Some(value) = annotations.get(ANNOTATION) else { return Ok(None) };
        let problems = crate::validation::qualified_name_errors(value);
        if problems.is_empty() {
            Ok(Some(super::normalize_label_key(value).to_owned()))
        } else {
            Err(InvalidKey { value: value.clone(), problems: problems.join("; ") })
        }
    }

    /// [`parse`] on a NodePool's annotations.
    pub fn of(pool: &crate::NodePool) -> Result<Option<String>, InvalidKey> {
        match &pool.metadata.annotations {
            Some(a) => parse(a),
            None => Ok(None),
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn annotated(value: &str) -> BTreeMap<String, String> {
            BTreeMap::from([(ANNOTATION.to_owned(), value.to_owned())])
        }

        #[test]
        fn label_keys_parse_and_anything_else_is_an_error() {
            assert_eq!(parse(&BTreeMap::new()), Ok(None));
            assert_eq!(
                parse(&annotated("topology.kubernetes.io/zone")),
                Ok(Some("topology.kubernetes.io/zone".into()))
            );
            assert_eq!(parse(&annotated("rack")), Ok(Some("rack".into())), "a key without prefix");
            assert_eq!(
                parse(&annotated("failure-domain.beta.kubernetes.io/zone")),
                Ok(Some(super::super::ZONE.into())),
                "the deprecated alias means the key nodes carry"
            );
            for bad in ["", "zone/", "/zone", "a/b/c", "Topology.Kubernetes.io/zone", "zone name", "-zone"] {
                let e = parse(&annotated(bad)).expect_err(bad);
                assert_eq!(e.value, bad);
                let text = e.to_string();
                assert!(text.contains(ANNOTATION) && text.contains("not a valid label key"), "{text}");
            }
        }
    }
}

/// A floor for a dynamic NodePool, as cluster-autoscaler's node-group minimum (not part of upstream Karpenter;
/// not a CRD field, so nothing in the NodePool's drift hash changes): the pool keeps at least this many live
/// NodeClaims, launched without pending pods, and voluntary disruption does not take it below them.
pub mod min_nodes {
    /// The NodePool annotation: a non-negative decimal integer.
    pub const ANNOTATION: &str = "karpenter-rs.io/min-nodes";
    /// The NodePool condition type that reports whether the annotation is usable.
    pub const CONDITION: &str = "MinNodesValid";

    /// Why a `karpenter-rs.io/min-nodes` value is not a floor.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    pub enum MinNodesError {
        /// Not a decimal integer (or too large for one).
        #[error("annotation {ANNOTATION} {value:?} is not a non-negative integer")]
        NotAnInteger {
            /// The annotation's value as written.
            value: String,
        },
        /// Negative.
        #[error("annotation {ANNOTATION} {value:?} is negative")]
        Negative {
            /// The annotation's value as written.
            value: String,
        },
    }

    /// Parses the annotation's value: a decimal integer, surrounding blanks allowed, `0` meaning no floor.
    pub fn parse(value: &str) -> Result<u32, MinNodesError> {
        let t = value.trim();
        if let Some(rest) = t.strip_prefix('-')
            && !rest.is_empty()
            && rest.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(MinNodesError::Negative { value: value.to_owned() });
        }
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return Err(MinNodesError::NotAnInteger { value: value.to_owned() });
        }
        t.parse().map_err(|_| MinNodesError::NotAnInteger { value: value.to_owned() })
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn integers_parse_and_anything_else_is_named() {
            assert_eq!(parse("2"), Ok(2));
            assert_eq!(parse(" 0 "), Ok(0));
            assert_eq!(parse("4294967295"), Ok(u32::MAX));
            for bad in ["", "two", "1.5", "+1", "2n", "4294967296", "-"] {
                assert_eq!(parse(bad), Err(MinNodesError::NotAnInteger { value: bad.into() }), "{bad:?}");
            }
            assert_eq!(parse("-1"), Err(MinNodesError::Negative { value: "-1".into() }));
            assert_eq!(
                parse("two").unwrap_err().to_string(),
                "annotation karpenter-rs.io/min-nodes \"two\" is not a non-negative integer"
            );
        }
    }
}

/// A minimum saving before consolidation replaces nodes or merges several (not upstream Karpenter): per NodePool
/// (this annotation) and cluster-wide (the `CONSOLIDATION_MIN_SAVINGS` setting), both written in the one grammar
/// [`MinSavings`](consolidation_min_savings::MinSavings) parses. karpenter-disruption decides with it; the NodePool validation controller reports a bad
/// annotation.
pub mod consolidation_min_savings {
    use std::fmt;
    use std::str::FromStr;

    /// The NodePool annotation: a [`MinSavings`].
    pub const ANNOTATION: &str = "karpenter-rs.io/consolidation-min-savings";
    /// The NodePool status condition reporting whether the annotation parses (present only while it is set).
    pub const CONDITION: &str = "ConsolidationMinSavingsValid";
    /// Reason of the condition (and of the Warning event) when the value does not parse.
    pub const INVALID_REASON: &str = "InvalidConsolidationMinSavings";
    /// The cluster-wide setting's environment variable (its flag is `--consolidation-min-savings`).
    pub const SETTING: &str = "CONSOLIDATION_MIN_SAVINGS";

    /// How much a consolidation move must save, per hour, before it is worth moving pods: a percentage of the
    /// candidates' price (`5%`, `2.5%`, at most `100%`) or an absolute amount in dollars per hour (`$0.02/h`).
    /// The `%` or the `$`…`/h` is required, so a bare number is never read with the wrong unit.
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub enum MinSavings {
        /// Percent (0-100) of the candidates' hourly price.
        Percent(f64),
        /// Dollars per hour.
        PerHour(f64),
    }

    impl MinSavings {
        /// The saving per hour this threshold asks of candidates costing `price` per hour.
        pub fn required(self, price: f64) -> f64 {
            match self {
                MinSavings::Percent(p) => price * p / 100.0,
                MinSavings::PerHour(a) => a,
            }
        }

        /// Whether it asks for nothing (`0%`, `$0/h`).
        pub fn is_zero(self) -> bool {
            match self {
                MinSavings::Percent(v) | MinSavings::PerHour(v) => v == 0.0,
            }
        }
    }

    impl fmt::Display for MinSavings {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                MinSavings::Percent(p) => write!(f, "{p}%"),
                MinSavings::PerHour(a) => write!(f, "${a}/h"),
            }
        }
    }

    /// Why a value is not a [`MinSavings`].
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    pub enum MinSavingsError {
        /// Neither `N%` nor `$N/h`.
        #[error(
            "{value:?} is not a minimum saving: write a percentage of the candidates' price such as 5% or an amount per hour such as $0.02/h"
        )]
        Syntax {
            /// The value as written.
            value: String,
        },
        /// A percentage above 100.
        #[error("{value:?} is more than 100% (no move saves more than the candidates cost)")]
        OverHundredPercent {
            /// The value as written.
            value: String,
        },
    }

    /// A plain decimal: digits with at most one point, at least one digit, no sign or exponent.
    fn decimal(s: &str) -> Option<f64> {
        let digits = s.bytes().filter(u8::is_ascii_digit).count();
        let points = s.bytes().filter(|b| *b == b'.').count();
        if digits == 0 || points > 1 || digits + points != s.len() {
            return None;
        }
        s.parse().ok().filter(|v: &f64| v.is_finite())
    }

    impl FromStr for MinSavings {
        type Err = MinSavingsError;
        fn from_str(value: &str) -> Result<Self, MinSavingsError> {
            let syntax = || MinSavingsError::Syntax { value: value.to_owned() };
            let t = value.trim();
            if let Some(p) = t.strip_suffix('%') {
                let p = decimal(p.trim_end()).ok_or_else(syntax)?;
                if p > 100.0 {
                    return Err(MinSavingsError::OverHundredPercent { value: value.to_owned() });
                }
                return Ok(MinSavings::Percent(p));
            }
            let amount = t.strip_prefix('$').and_then(|r| r.strip_suffix("/h")).ok_or_else(syntax)?;
            decimal(amount.trim()).map(MinSavings::PerHour).ok_or_else(syntax)
        }
    }

    /// The setting's value: empty (or blank) means no cluster-wide threshold.
    pub fn parse_setting(value: &str) -> Result<Option<MinSavings>, MinSavingsError> {
        if value.trim().is_empty() { Ok(None) } else { value.parse().map(Some) }
    }

    /// The `CONSOLIDATION_MIN_SAVINGS` setting as the settings parser takes it ([`parse_setting`]): no threshold
    /// when empty.
    #[derive(Debug, Clone, Copy, PartialEq, Default)]
    pub struct Setting(pub Option<MinSavings>);

    impl FromStr for Setting {
        type Err = MinSavingsError;
        fn from_str(value: &str) -> Result<Self, MinSavingsError> {
            parse_setting(value).map(Setting)
        }
    }

    impl fmt::Display for Setting {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self.0 {
                Some(v) => v.fmt(f),
                None => Ok(()),
            }
        }
    }

    /// A NodePool's annotation: `None` without it, else its value parsed.
    pub fn of(pool: &crate::NodePool) -> Result<Option<MinSavings>, MinSavingsError> {
        match pool.metadata.annotations.as_ref().and_then(|a| a.get(ANNOTATION)) {
            Some(v) => v.parse().map(Some),
            None => Ok(None),
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn percentages_and_amounts_parse_and_anything_else_is_named() {
            assert_eq!("5%".parse(), Ok(MinSavings::Percent(5.0)));
            assert_eq!(" 2.5 % ".parse(), Ok(MinSavings::Percent(2.5)));
            assert_eq!("100%".parse(), Ok(MinSavings::Percent(100.0)));
            assert_eq!("0%".parse(), Ok(MinSavings::Percent(0.0)));
            assert_eq!("$0.02/h".parse(), Ok(MinSavings::PerHour(0.02)));
            assert_eq!("$ 1/h".parse(), Ok(MinSavings::PerHour(1.0)));
            assert_eq!(parse_setting(""), Ok(None));
            assert_eq!(parse_setting(" 10%"), Ok(Some(MinSavings::Percent(10.0))));
            for bad in
                ["", "5", "0.02", "five%", "-5%", "+5%", "1e2%", "5%%", "$0.02", "0.02/h", "$-1/h", "$.", "%", "1.2.3%"]
            {
                let e = bad.parse::<MinSavings>().expect_err(bad);
                assert_eq!(e, MinSavingsError::Syntax { value: bad.into() }, "{bad:?}");
                assert!(e.to_string().contains("such as 5%"), "{e}");
            }
            assert_eq!("150%".parse::<MinSavings>(), Err(MinSavingsError::OverHundredPercent { value: "150%".into() }));
        }

        #[test]
        fn the_required_saving_and_the_text_form() {
            assert!((MinSavings::Percent(5.0).required(2.0) - 0.1).abs() < 1e-12);
            assert_eq!(MinSavings::PerHour(0.02).required(100.0), 0.02);
            for text in ["5%", "2.5%", "$0.02/h", "$1/h"] {
                let v: MinSavings = text.parse().unwrap();
                assert_eq!(v.to_string(), text);
                assert_eq!(v.to_string().parse::<MinSavings>(), Ok(v), "round trip");
            }
            assert!(MinSavings::Percent(0.0).is_zero() && !MinSavings::PerHour(0.01).is_zero());
        }
    }
}

/// Taint keys Karpenter puts on nodes or waits for.
pub mod taints {
    use k8s_openapi::api::core::v1::{Node, Taint};

    /// Put on a node when a disruption command starts or termination begins.
    pub const DISRUPTED: &str = "karpenter.sh/disrupted";

    /// Whether `taint` is the disruption taint, `karpenter.sh/disrupted:NoSchedule`: key and effect compared, as
    /// upstream compares taints (its value is not part of it). The one rule every reader of the taint uses.
    pub fn is_disrupted(taint: &Taint) -> bool {
        taint.key == DISRUPTED && taint.effect == "NoSchedule"
    }

    /// Whether a Node carries the disruption taint ([`is_disrupted`]).
    pub fn node_is_disrupted(node: &Node) -> bool {
        node.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|ts| ts.iter().any(is_disrupted))
    }
    /// Injected into kubelet's registration taints; removed at registration.
    pub const UNREGISTERED: &str = "karpenter.sh/unregistered";
    /// Kubernetes' taint on a node whose `Ready` condition is not `True`.
    pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
    /// Kubernetes' taint on a node whose `Ready` condition is `Unknown` (the kubelet stopped reporting).
    pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
    /// The cloud controller manager's taint on a node it has not initialized yet.
    pub const CLOUD_PROVIDER_UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
    /// Any taint key with this prefix is ephemeral while a node initializes (v1.13+).
    pub const READINESS_PREFIX: &str = "readiness.k8s.io/";
}

/// Finalizer keys Karpenter adds so it can clean up before an object goes.
pub mod finalizers {
    /// On Nodes and NodeClaims.
    pub const TERMINATION: &str = "karpenter.sh/termination";
}

/// A provider's label vocabulary: which keys are well known (the scheduler may constrain them through instance
/// types, so pods may require them without the NodePool declaring them) and which domains are reserved.
///
/// Each provider crate builds its own set (`karpenter_aws::labels::provider_labels()`,
/// `karpenter_kwok::labels::provider_labels()`); this crate knows none of them. A new cloud writes its set in a
/// few lines:
///
/// ```
/// use karpenter_api::ProviderLabels;
///
/// let toy = ProviderLabels::new("toy")
///     .with_restricted_domain("toy.example.com")
///     .with_well_known(["toy.example.com/instance-family", "toy.example.com/instance-size"])
///     .with_known_values("toy.example.com/tenancy", ["shared", "dedicated"]);
///
/// assert!(toy.is_well_known("toy.example.com/instance-family"));
/// // Keys of the restricted domain that are not well known are reserved for the provider.
/// assert!(toy.is_restricted("toy.example.com/anything-else"));
/// assert!(!toy.is_restricted("example.com/team"));
/// assert_eq!(toy.known_values("toy.example.com/tenancy"), Some(vec!["shared", "dedicated"]));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderLabels {
    /// Provider name, e.g. `aws`, `kwok`.
    pub name: String,
    /// Provider well-known label keys (in addition to [`CORE_WELL_KNOWN_LABELS`]).
    pub well_known: BTreeSet<String>,
    /// Provider restricted domains (in addition to [`CORE_RESTRICTED_DOMAIN`]).
    pub restricted_domains: BTreeSet<String>,
    /// Label keys with a closed set of valid values (e.g. AWS instance tenancy).
    pub known_values: Vec<(String, Vec<String>)>,
}

impl ProviderLabels {
    /// A provider named `name` with no labels of its own yet: the core well-known keys and the `karpenter.sh`
    /// restricted domain only. Add the provider's own with the `with_*` methods.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            well_known: BTreeSet::new(),
            restricted_domains: BTreeSet::new(),
            known_values: Vec::new(),
        }
    }

    /// A provider with no labels of its own (core set only): [`ProviderLabels::new`] with nothing added, for
    /// callers that want to say so.
    pub fn core_only(name: &str) -> Self {
        Self::new(name)
    }

    /// Adds well-known keys: NodePools and pods may constrain them even when no NodePool sets them, and they
    /// are never restricted, even inside a restricted domain.
    pub fn with_well_known<I, K>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = K>,
        K: Into<String>,
    {
        self.well_known.extend(keys.into_iter().map(Into::into));
        self
    }

    /// Adds a restricted domain: NodePools may not set labels in it (or in a subdomain of it) except the
    /// well-known ones.
    pub fn with_restricted_domain(mut self, domain: impl Into<String>) -> Self {
        self.restricted_domains.insert(domain.into());
        self
    }

    /// Gives `key` a closed set of valid values (validation rejects any other value); a second call for the
    /// same key replaces its values.
    pub fn with_known_values<I, V>(mut self, key: impl Into<String>, values: I) -> Self
    where
        I: IntoIterator<Item = V>,
        V: Into<String>,
    {
        let key = key.into();
        let values: Vec<String> = values.into_iter().map(Into::into).collect();
        match self.known_values.iter_mut().find(|(k, _)| *k == key) {
            Some((_, existing)) => *existing = values,
            None => self.known_values.push((key, values)),
        }
        self
    }

    /// Core plus provider well-known keys: the `allow_undefined` set of requirement compatibility.
    pub fn all_well_known(&self) -> BTreeSet<String> {
        let mut all: BTreeSet<String> = CORE_WELL_KNOWN_LABELS.iter().map(|s| s.to_string()).collect();
        all.extend(self.well_known.iter().cloned());
        all
    }

    /// Whether `key` is a core or this provider's well-known label.
    pub fn is_well_known(&self, key: &str) -> bool {
        CORE_WELL_KNOWN_LABELS.contains(&key) || self.well_known.contains(key)
    }

    /// Restricted: `kubernetes.io/hostname`, or a key whose domain is (a subdomain of) a restricted domain and
    /// which is not well known.
    pub fn is_restricted(&self, key: &str) -> bool {
        if key == HOSTNAME {
            return true;
        }
        if self.is_well_known(key) {
            return false;
        }
        let Some((domain, _)) = key.split_once('/') else { return false };
        std::iter::once(CORE_RESTRICTED_DOMAIN)
            .chain(self.restricted_domains.iter().map(String::as_str))
            .any(|d| domain_matches(domain, d))
    }

    /// Valid values for keys with a closed value set (`karpenter.sh/capacity-type` and provider keys).
    pub fn known_values(&self, key: &str) -> Option<Vec<&str>> {
        if key == CAPACITY_TYPE {
            return Some(CAPACITY_TYPES.to_vec());
        }
        self.known_values.iter().find(|(k, _)| k == key).map(|(_, v)| v.iter().map(String::as_str).collect())
    }
}

/// True if `domain` equals `restricted` or is a subdomain of it (`x.karpenter.sh`).
pub fn domain_matches(domain: &str, restricted: &str) -> bool {
    domain == restricted || domain.strip_suffix(restricted).is_some_and(|p| p.ends_with('.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_vocabulary::{self, aws_keys};

    #[test]
    fn restricted_domains() {
        let aws = test_vocabulary::aws();
        assert!(aws.is_restricted("karpenter.sh/custom"));
        assert!(aws.is_restricted("sub.karpenter.sh/custom"));
        assert!(aws.is_restricted("karpenter.k8s.aws/custom"));
        assert!(aws.is_restricted(HOSTNAME));
        assert!(!aws.is_restricted("notkarpenter.sh/custom"));
        assert!(!aws.is_restricted(CAPACITY_TYPE));
        assert!(!aws.is_restricted(NODE_POOL), "well-known keys are not restricted (templates forbid it separately)");
        assert!(!aws.is_restricted(aws_keys::INSTANCE_FAMILY));
        assert!(!aws.is_restricted("example.com/team"));
        let kwok = test_vocabulary::kwok();
        assert!(!kwok.is_restricted("karpenter.k8s.aws/custom"));
        assert!(kwok.is_restricted("karpenter.kwok.sh/other"));
        let core = ProviderLabels::core_only("none");
        assert!(core.is_restricted("karpenter.sh/custom") && !core.is_restricted("karpenter.k8s.aws/custom"));
    }

    #[test]
    fn aliases_normalise() {
        assert_eq!(normalize_label_key("beta.kubernetes.io/arch"), ARCH);
        assert_eq!(normalize_label_key("example.com/x"), "example.com/x");
    }

    #[test]
    fn known_values() {
        let aws = test_vocabulary::aws();
        assert_eq!(aws.known_values(CAPACITY_TYPE).unwrap(), vec!["on-demand", "spot", "reserved"]);
        assert_eq!(aws.known_values(aws_keys::INSTANCE_TENANCY).unwrap(), vec!["default", "dedicated"]);
        assert!(aws.known_values(ZONE).is_none());
    }

    #[test]
    fn the_builder_adds_and_replaces() {
        let built = ProviderLabels::new("toy")
            .with_well_known(["toy.io/a"])
            .with_well_known(vec![String::from("toy.io/b")])
            .with_restricted_domain("toy.io")
            .with_known_values("toy.io/t", ["x"])
            .with_known_values("toy.io/t", ["y", "z"]);
        assert_eq!(built.well_known, BTreeSet::from(["toy.io/a".to_owned(), "toy.io/b".to_owned()]));
        assert_eq!(built.restricted_domains, BTreeSet::from(["toy.io".to_owned()]));
        assert_eq!(built.known_values, vec![("toy.io/t".to_owned(), vec!["y".to_owned(), "z".to_owned()])]);
        assert_eq!(ProviderLabels::core_only("toy"), ProviderLabels::new("toy"));
        assert!(built.is_restricted("sub.toy.io/c") && !built.is_restricted("toy.io/a"));
    }
}
