//! Why a pod could not be placed: [`UnschedulableReason`], its message (`Display`, the JSON `reason`) and its
//! stable machine code ([`UnschedulableReason::code`], the JSON `code`).

use std::fmt;

const NO_NODE_POOLS: &str = "no NodePools given";
const ALL_STATIC: &str = "no dynamic NodePools found (all are static)";
const OPTED_OUT: &str = "pod requires karpenter.sh/nodepool DoesNotExist: it opts out of Karpenter nodes";
const TIMED_OUT: &str = "scheduling timed out";
const NOT_SCHEDULED: &str = "not scheduled";
/// The message of [`UnschedulableReason::UninitializedNode`], given to a pod that would only fit on capacity
/// that is not ready yet (disruption never relies on it).
pub const UNINITIALIZED_NODE: &str = "would schedule against uninitialized nodeclaim";
const RESTRICTED_PREFIX: &str = "label ";
const RESTRICTED_SUFFIX: &str = " is restricted and cannot be required";
const MIN_VALUES_INFIX: &str = " couldn't meet minValues requirements: ";

/// Why a pod could not be placed.
///
/// `Display` gives the message (for events and logs: what to change), [`code`](Self::code) a stable code an
/// embedder can branch on. New variants (and codes) may be added.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnschedulableReason {
    /// No dynamic NodePool to create a NodeClaim from: none given, or (`all_static`) all of them static.
    /// Code `NoNodePool`.
    NoNodePool {
        /// There were NodePools, all static.
        all_static: bool,
    },
    /// Every NodePool turned the pod down (existing nodes and NodeClaims of the pass too): one entry per dynamic
    /// NodePool, in the order they were tried (weight). The message joins theirs with `"; "`. Code
    /// `NodePoolLimits` when one of them would take the pod but for its limits, else `Incompatible`; each entry
    /// has its own finer [`RejectionKind`].
    NodePools(Vec<NodePoolRejection>),
    /// The pod was packed onto a NodeClaim that, once its options were cut to the cheapest 600, no longer met
    /// its NodePool's minValues, and the claim was dropped. Code `MinValues`.
    MinValues {
        /// The NodePool.
        node_pool: String,
        /// Which minValues are not met.
        detail: String,
    },
    /// The pod's spec cannot be simulated: a request or a node affinity that does not parse. Code `InvalidPod`.
    InvalidPod {
        /// The problem.
        message: String,
    },
    /// The pod requires a label key the provider restricts. Code `RestrictedLabel`.
    RestrictedLabel {
        /// The key.
        key: String,
    },
    /// The pod requires `karpenter.sh/nodepool DoesNotExist`: it is not Karpenter's to place. Code `OptedOut`.
    OptedOut,
    /// The pod uses something the scheduler does not simulate (node affinity `matchFields`, DRA resource
    /// claims). Code `Unsupported`.
    Unsupported {
        /// What.
        message: String,
    },
    /// The pod's DRA resource claims cannot be used in this pass (simulated with `IGNORE_DRA_REQUESTS=false`): a
    /// claim, claim template or device class missing, or a CEL selector that does not compile. The pod waits for
    /// a later pass. Code `ResourceClaims`.
    ResourceClaims {
        /// The problem.
        message: String,
    },
    /// A volume of the pod cannot be used: a claim, volume or storage class missing, being deleted or lost, or
    /// a node's volume limit reached. Code `Volume`.
    Volume {
        /// The problem.
        message: String,
    },
    /// The pass's deadline fired before the pod was tried. Code `Timeout`.
    Timeout,
    /// Disruption's simulations: the pod would only fit on a node or NodeClaim that is not initialized (message
    /// [`UNINITIALIZED_NODE`]). Code `UninitializedNode`.
    UninitializedNode,
    /// Left over without a recorded reason (not expected). Code `NotScheduled`.
    NotScheduled,
}

impl UnschedulableReason {
    /// Every code [`code`](Self::code) can return.
    pub const CODES: [&'static str; 13] = [
        "NoNodePool",
        "NodePoolLimits",
        "Incompatible",
        "MinValues",
        "InvalidPod",
        "RestrictedLabel",
        "OptedOut",
        "Unsupported",
        "ResourceClaims",
        "Volume",
        "Timeout",
        "UninitializedNode",
        "NotScheduled",
    ];

    /// The stable machine code (one of [`CODES`](Self::CODES)).
    pub fn code(&self) -> &'static str {
        match self {
            UnschedulableReason::NoNodePool { .. } => "NoNodePool",
            UnschedulableReason::NodePools(rejections) => {
                if rejections.iter().any(|r| r.kind == RejectionKind::Limits) {
                    "NodePoolLimits"
                } else {
                    "Incompatible"
                }
            }
            UnschedulableReason::MinValues { .. } => "MinValues",
            UnschedulableReason::InvalidPod { .. } => "InvalidPod",
            UnschedulableReason::RestrictedLabel { .. } => "RestrictedLabel",
            UnschedulableReason::OptedOut => "OptedOut",
            UnschedulableReason::Unsupported { .. } => "Unsupported",
            UnschedulableReason::ResourceClaims { .. } => "ResourceClaims",
            UnschedulableReason::Volume { .. } => "Volume",
            UnschedulableReason::Timeout => "Timeout",
            UnschedulableReason::UninitializedNode => "UninitializedNode",
            UnschedulableReason::NotScheduled => "NotScheduled",
        }
    }

    /// The NodePools' rejections (empty for the other variants).
    pub fn rejections(&self) -> &[NodePoolRejection] {
        match self {
            UnschedulableReason::NodePools(r) => r,
            _ => &[],
        }
    }

    /// The reason back from its JSON form (`code` and message). Exact for every variant but
    /// [`NodePools`](Self::NodePools), which comes back as one entry holding the whole message under the first
    /// NodePool's name, of kind [`RejectionKind::Limits`] (code `NodePoolLimits`) or [`RejectionKind::Other`]:
    /// message and code are kept, the per-NodePool split is not. `None` for an unknown code or a message that
    /// does not have its code's form.
    pub fn from_code_and_message(code: &str, message: &str) -> Option<UnschedulableReason> {
        let owned = || message.to_owned();
        Some(match code {
            "NoNodePool" => match message {
                NO_NODE_POOLS => UnschedulableReason::NoNodePool { all_static: false },
                ALL_STATIC => UnschedulableReason::NoNodePool { all_static: true },
                _ => return None,
            },
            "NodePoolLimits" | "Incompatible" => {
                let rest = message.strip_prefix("NodePool ")?;
                let (node_pool, detail) = rest.split_once(": ")?;
                let kind = if code == "NodePoolLimits" { RejectionKind::Limits } else { RejectionKind::Other };
                UnschedulableReason::NodePools(vec![NodePoolRejection::new(node_pool, kind, detail)])
            }
            "MinValues" => {
                let (node_pool, detail) = message.strip_prefix("NodePool ")?.split_once(MIN_VALUES_INFIX)?;
                UnschedulableReason::MinValues { node_pool: node_pool.to_owned(), detail: detail.to_owned() }
            }
            "InvalidPod" => UnschedulableReason::InvalidPod { message: owned() },
            "RestrictedLabel" => UnschedulableReason::RestrictedLabel {
                key: message.strip_prefix(RESTRICTED_PREFIX)?.strip_suffix(RESTRICTED_SUFFIX)?.to_owned(),
            },
            "OptedOut" if message == OPTED_OUT => UnschedulableReason::OptedOut,
            "Unsupported" => UnschedulableReason::Unsupported { message: owned() },
            "ResourceClaims" => UnschedulableReason::ResourceClaims { message: owned() },
            "Volume" => UnschedulableReason::Volume { message: owned() },
            "Timeout" if message == TIMED_OUT => UnschedulableReason::Timeout,
            "UninitializedNode" if message == UNINITIALIZED_NODE => UnschedulableReason::UninitializedNode,
            "NotScheduled" if message == NOT_SCHEDULED => UnschedulableReason::NotScheduled,
            _ => return None,
        })
    }
}

impl fmt::Display for UnschedulableReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnschedulableReason::NoNodePool { all_static: false } => f.write_str(NO_NODE_POOLS),
            UnschedulableReason::NoNodePool { all_static: true } => f.write_str(ALL_STATIC),
            UnschedulableReason::NodePools(rejections) => {
                for (i, r) in rejections.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{r}")?;
                }
                Ok(())
            }
            UnschedulableReason::MinValues { node_pool, detail } => {
                write!(f, "NodePool {node_pool}{MIN_VALUES_INFIX}{detail}")
            }
            UnschedulableReason::InvalidPod { message }
            | UnschedulableReason::Unsupported { message }
            | UnschedulableReason::ResourceClaims { message }
            | UnschedulableReason::Volume { message } => f.write_str(message),
            UnschedulableReason::RestrictedLabel { key } => write!(f, "{RESTRICTED_PREFIX}{key}{RESTRICTED_SUFFIX}"),
            UnschedulableReason::OptedOut => f.write_str(OPTED_OUT),
            UnschedulableReason::Timeout => f.write_str(TIMED_OUT),
            UnschedulableReason::UninitializedNode => f.write_str(UNINITIALIZED_NODE),
            UnschedulableReason::NotScheduled => f.write_str(NOT_SCHEDULED),
        }
    }
}

/// Why one NodePool cannot take a pod. Message: `NodePool <name>: <detail>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePoolRejection {
    /// The NodePool.
    pub node_pool: String,
    /// What kind of problem.
    pub kind: RejectionKind,
    /// The problem, for people.
    pub detail: String,
}

impl NodePoolRejection {
    /// A rejection.
    pub fn new(node_pool: impl Into<String>, kind: RejectionKind, detail: impl Into<String>) -> Self {
        NodePoolRejection { node_pool: node_pool.into(), kind, detail: detail.into() }
    }
}

impl fmt::Display for NodePoolRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodePool {}: {}", self.node_pool, self.detail)
    }
}

/// The kinds of [`NodePoolRejection`], each with a stable code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectionKind {
    /// The NodePool cannot make any NodeClaim: its requirements or limits do not parse, or no instance type is
    /// usable at all. Code `NodePoolUnusable`.
    Unusable,
    /// Its limits: `nodes` reached, or every instance type that fits would exceed a remaining limit. Code
    /// `NodePoolLimits`.
    Limits,
    /// The pod does not tolerate one of its taints. Code `Taints`.
    Taints,
    /// The pod's requirements are incompatible with the NodePool's, or no instance type matches them. Code
    /// `Requirements`.
    Requirements,
    /// Instance types match, but no available offering (zone, capacity type) does. Code `Offerings`.
    Offerings,
    /// No instance type holds the pod's requests (with the NodeClaim's other pods and DaemonSets). Code
    /// `Resources`.
    Resources,
    /// A host port conflict (with the NodeClaim's other pods or the DaemonSets). Code `HostPorts`.
    HostPorts,
    /// No instance type's DRA slice templates hold the pod's resource claims (with the NodeClaim's other claims).
    /// Code `Devices`.
    Devices,
    /// The pod's volumes' topology rules the NodePool out. Code `Volumes`.
    Volumes,
    /// Topology spread or pod (anti-)affinity. Code `Topology`.
    Topology,
    /// minValues cannot be met. Code `MinValues`.
    MinValues,
    /// Read back from JSON, which does not record the kind (see
    /// [`UnschedulableReason::from_code_and_message`]). Code `Other`.
    Other,
}

impl RejectionKind {
    /// The stable machine code.
    pub fn code(self) -> &'static str {
        match self {
            RejectionKind::Unusable => "NodePoolUnusable",
            RejectionKind::Limits => "NodePoolLimits",
            RejectionKind::Taints => "Taints",
            RejectionKind::Requirements => "Requirements",
            RejectionKind::Offerings => "Offerings",
            RejectionKind::Resources => "Resources",
            RejectionKind::HostPorts => "HostPorts",
            RejectionKind::Devices => "Devices",
            RejectionKind::Volumes => "Volumes",
            RejectionKind::Topology => "Topology",
            RejectionKind::MinValues => "MinValues",
            RejectionKind::Other => "Other",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejection(pool: &str, kind: RejectionKind, detail: &str) -> NodePoolRejection {
        NodePoolRejection::new(pool, kind, detail)
    }

    /// Every variant: its code, its message (today's text, unchanged), and the way back from JSON.
    #[test]
    fn codes_and_messages() {
        use UnschedulableReason as R;
        let cases: Vec<(R, &str, &str)> = vec![
            (R::NoNodePool { all_static: false }, "NoNodePool", "no NodePools given"),
            (R::NoNodePool { all_static: true }, "NoNodePool", "no dynamic NodePools found (all are static)"),
            (
                R::NodePools(vec![rejection("a", RejectionKind::Taints, "taint x=y:NoSchedule not tolerated")]),
                "Incompatible",
                "NodePool a: taint x=y:NoSchedule not tolerated",
            ),
            (
                R::NodePools(vec![rejection("a", RejectionKind::Limits, "limit nodes reached")]),
                "NodePoolLimits",
                "NodePool a: limit nodes reached",
            ),
            (
                R::MinValues { node_pool: "a".into(), detail: "minValues of k not met (2 < 3)".into() },
                "MinValues",
                "NodePool a couldn't meet minValues requirements: minValues of k not met (2 < 3)",
            ),
            (R::InvalidPod { message: "invalid node affinity: x".into() }, "InvalidPod", "invalid node affinity: x"),
            (
                R::RestrictedLabel { key: "kubernetes.io/hostname".into() },
                "RestrictedLabel",
                "label kubernetes.io/hostname is restricted and cannot be required",
            ),
            (
                R::OptedOut,
                "OptedOut",
                "pod requires karpenter.sh/nodepool DoesNotExist: it opts out of Karpenter nodes",
            ),
            (
                R::Unsupported { message: "DRA resource claims are not simulated (IGNORE_DRA_REQUESTS=true; false simulates device allocation)".into() },
                "Unsupported",
                "DRA resource claims are not simulated (IGNORE_DRA_REQUESTS=true; false simulates device allocation)",
            ),
            (
                R::ResourceClaims { message: "ResourceClaim ml/gpu not found".into() },
                "ResourceClaims",
                "ResourceClaim ml/gpu not found",
            ),
            (
                R::Volume { message: "persistentvolumeclaim \"d\" not found".into() },
                "Volume",
                "persistentvolumeclaim \"d\" not found",
            ),
            (R::Timeout, "Timeout", "scheduling timed out"),
            (R::UninitializedNode, "UninitializedNode", "would schedule against uninitialized nodeclaim"),
            (R::NotScheduled, "NotScheduled", "not scheduled"),
        ];
        for (reason, code, message) in &cases {
            assert_eq!((reason.code(), reason.to_string().as_str()), (*code, *message), "{reason:?}");
            assert!(UnschedulableReason::CODES.contains(code));
            let back = UnschedulableReason::from_code_and_message(code, message).expect("decodes");
            if reason.rejections().iter().all(|r| r.kind == RejectionKind::Limits) {
                assert_eq!(&back, reason);
            } else {
                // The kind of a NodePool's rejection is not in the JSON.
                assert_eq!((back.code(), back.to_string()), (reason.code(), reason.to_string()));
                assert_eq!(back.rejections()[0].kind, RejectionKind::Other);
            }
        }
        let seen: std::collections::BTreeSet<&str> = cases.iter().map(|c| c.1).collect();
        assert_eq!(seen.len(), UnschedulableReason::CODES.len(), "every code has a case");
        assert_eq!(UnschedulableReason::from_code_and_message("Timeout", "something else"), None);
        assert_eq!(UnschedulableReason::from_code_and_message("Nope", "x"), None);
    }

    /// The compound case: messages joined by "; " in NodePool order; the code says whether raising a limit would
    /// help; each entry keeps its own kind.
    #[test]
    fn several_node_pools() {
        let reason = UnschedulableReason::NodePools(vec![
            rejection("a", RejectionKind::Resources, "no instance type has 64 cpu after DaemonSet overhead"),
            rejection("b", RejectionKind::Limits, "limit cpu 100 would be exceeded (2 remaining)"),
        ]);
        assert_eq!(
            reason.to_string(),
            "NodePool a: no instance type has 64 cpu after DaemonSet overhead; \
             NodePool b: limit cpu 100 would be exceeded (2 remaining)"
        );
        assert_eq!(reason.code(), "NodePoolLimits");
        let kinds: Vec<&str> = reason.rejections().iter().map(|r| r.kind.code()).collect();
        assert_eq!(kinds, ["Resources", "NodePoolLimits"]);
        let without_limits = UnschedulableReason::NodePools(reason.rejections()[..1].to_vec());
        assert_eq!(without_limits.code(), "Incompatible");

        // Back from JSON: message and code kept, one entry.
        let back = UnschedulableReason::from_code_and_message(reason.code(), &reason.to_string()).expect("decodes");
        assert_eq!((back.code(), back.to_string()), (reason.code(), reason.to_string()));
        assert_eq!(back.rejections().len(), 1);
        assert_eq!(back.rejections()[0].node_pool, "a");
        assert!(UnschedulableReason::Timeout.rejections().is_empty());
    }
}
