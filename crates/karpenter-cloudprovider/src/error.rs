//! The errors a [`CloudProvider`](crate::CloudProvider) returns: a fixed set of kinds the controllers act on, each
//! with a message and an optional boxed source carrying the provider's own detail.

use std::fmt;

/// A provider's own error detail (an SDK error, a parse error, ...).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// One offering, named: what an [`InsufficientCapacity`](CloudProviderError::InsufficientCapacity) error says
/// could not be launched.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OfferingRef {
    /// Instance type name.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Capacity type (`on-demand`, `spot`, `reserved`).
    pub capacity_type: String,
}

impl OfferingRef {
    /// An offering reference.
    pub fn new(instance_type: &str, zone: &str, capacity_type: &str) -> Self {
        Self { instance_type: instance_type.into(), zone: zone.into(), capacity_type: capacity_type.into() }
    }
}

impl fmt::Display for OfferingRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.instance_type, self.zone, self.capacity_type)
    }
}

/// What went wrong, in the terms the controllers act on.
///
/// | Kind | Controller reaction |
/// |---|---|
/// | [`NodeClaimNotFound`](Self::NodeClaimNotFound) | the instance is gone: termination finishes, the lifecycle controller deletes the NodeClaim |
/// | [`InsufficientCapacity`](Self::InsufficientCapacity) | the NodeClaim is deleted (reason `insufficient_capacity`); the next provisioning pass re-plans with refreshed offerings |
/// | [`NodeClassNotReady`](Self::NodeClassNotReady) | the NodeClaim is deleted (reason `nodeclass_not_ready`) |
/// | [`Create`](Self::Create) | `Launched=Unknown(reason, message)`, retried with backoff until the launch timeout |
/// | [`UnevaluatedNodePool`](Self::UnevaluatedNodePool) | the NodePool is skipped this pass |
/// | [`Other`](Self::Other) | logged and retried (API errors, throttling, ...) |
///
/// The enum is `#[non_exhaustive]`: match with a wildcard arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CloudProviderError {
    /// The instance does not exist (never launched, or terminated and gone).
    #[error("nodeclaim not found: {message}")]
    NodeClaimNotFound {
        /// What was looked for.
        message: String,
        /// Provider detail.
        #[source]
        source: Option<BoxError>,
    },
    /// No capacity for any offering the NodeClaim allows.
    #[error("insufficient capacity: {message}{}", describe_offerings(.offerings))]
    InsufficientCapacity {
        /// The offerings that were tried and failed (may be empty when none was launchable at all).
        offerings: Vec<OfferingRef>,
        /// Details.
        message: String,
        /// Provider detail.
        #[source]
        source: Option<BoxError>,
    },
    /// The node class is not resolved (not ready, or its readiness is stale).
    #[error("node class not ready: {message}")]
    NodeClassNotReady {
        /// Which class and why.
        message: String,
        /// Provider detail.
        #[source]
        source: Option<BoxError>,
    },
    /// Any other launch failure; `reason` is a CamelCase word for the `Launched` condition.
    #[error("creating instance failed: {reason}: {message}")]
    Create {
        /// Condition reason, e.g. `NodeClassReadinessUnknown`.
        reason: String,
        /// Condition message.
        message: String,
        /// Provider detail.
        #[source]
        source: Option<BoxError>,
    },
    /// The provider cannot answer for this NodePool yet (e.g. overlays not computed); skip it this pass.
    #[error("node pool not evaluated yet: {message}")]
    UnevaluatedNodePool {
        /// Which pool and why.
        message: String,
        /// Provider detail.
        #[source]
        source: Option<BoxError>,
    },
    /// The provider does not offer this operation (e.g. an in-place reboot); callers fall back (repair replaces
    /// the node instead).
    #[error("not implemented by this provider: {method}")]
    NotImplemented {
        /// The operation, e.g. `Reboot`.
        method: String,
        /// Provider detail.
        #[source]
        source: Option<BoxError>,
    },
    /// Anything else (API errors, throttling, malformed input).
    #[error("{message}")]
    Other {
        /// What failed.
        message: String,
        /// Provider detail.
        #[source]
        source: Option<BoxError>,
    },
}

fn describe_offerings(offerings: &[OfferingRef]) -> String {
    if offerings.is_empty() {
        return String::new();
    }
    let names: Vec<String> = offerings.iter().map(ToString::to_string).collect();
    format!(" (offerings: {})", names.join(", "))
}

/// The kind of a [`CloudProviderError`], as a plain value (metrics labels, tests, retry decisions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// [`CloudProviderError::NodeClaimNotFound`]: the instance is gone.
    NodeClaimNotFound,
    /// [`CloudProviderError::InsufficientCapacity`]: no allowed offering could be launched.
    InsufficientCapacity,
    /// [`CloudProviderError::NodeClassNotReady`]: the node class is not resolved.
    NodeClassNotReady,
    /// [`CloudProviderError::Create`]: any other launch failure, retried until the launch timeout.
    Create,
    /// [`CloudProviderError::UnevaluatedNodePool`]: the provider cannot answer for the NodePool yet.
    UnevaluatedNodePool,
    /// [`CloudProviderError::NotImplemented`]: the provider does not offer the operation.
    NotImplemented,
    /// [`CloudProviderError::Other`]: API errors, throttling, malformed input.
    Other,
}

impl ErrorKind {
    /// The metrics label value (`error` label of `karpenter_cloudprovider_errors_total`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NodeClaimNotFound => "NodeClaimNotFoundError",
            ErrorKind::InsufficientCapacity => "InsufficientCapacityError",
            ErrorKind::NodeClassNotReady => "NodeClassNotReadyError",
            ErrorKind::Create => "CreateError",
            ErrorKind::UnevaluatedNodePool => "UnevaluatedNodePoolError",
            ErrorKind::NotImplemented => "NotImplementedError",
            ErrorKind::Other => "UnknownError",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl CloudProviderError {
    /// [`NodeClaimNotFound`](Self::NodeClaimNotFound) without a source.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::NodeClaimNotFound { message: message.into(), source: None }
    }

    /// [`InsufficientCapacity`](Self::InsufficientCapacity) without a source.
    pub fn insufficient_capacity(offerings: Vec<OfferingRef>, message: impl Into<String>) -> Self {
        Self::InsufficientCapacity { offerings, message: message.into(), source: None }
    }

    /// [`NodeClassNotReady`](Self::NodeClassNotReady) without a source.
    pub fn node_class_not_ready(message: impl Into<String>) -> Self {
        Self::NodeClassNotReady { message: message.into(), source: None }
    }

    /// [`Create`](Self::Create) without a source.
    pub fn create(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Create { reason: reason.into(), message: message.into(), source: None }
    }

    /// [`UnevaluatedNodePool`](Self::UnevaluatedNodePool) without a source.
    pub fn unevaluated_node_pool(message: impl Into<String>) -> Self {
        Self::UnevaluatedNodePool { message: message.into(), source: None }
    }

    /// [`NotImplemented`](Self::NotImplemented) without a source.
    pub fn not_implemented(method: impl Into<String>) -> Self {
        Self::NotImplemented { method: method.into(), source: None }
    }

    /// [`Other`](Self::Other) without a source.
    pub fn other(message: impl Into<String>) -> Self {
        Self::Other { message: message.into(), source: None }
    }

    /// The same error carrying `source` as its provider detail.
    pub fn with_source(mut self, error: impl Into<BoxError>) -> Self {
        let slot = match &mut self {
            Self::NodeClaimNotFound { source, .. }
            | Self::InsufficientCapacity { source, .. }
            | Self::NodeClassNotReady { source, .. }
            | Self::Create { source, .. }
            | Self::UnevaluatedNodePool { source, .. }
            | Self::NotImplemented { source, .. }
            | Self::Other { source, .. } => source,
        };
        *slot = Some(error.into());
        self
    }

    /// This error's kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::NodeClaimNotFound { .. } => ErrorKind::NodeClaimNotFound,
            Self::InsufficientCapacity { .. } => ErrorKind::InsufficientCapacity,
            Self::NodeClassNotReady { .. } => ErrorKind::NodeClassNotReady,
            Self::Create { .. } => ErrorKind::Create,
            Self::UnevaluatedNodePool { .. } => ErrorKind::UnevaluatedNodePool,
            Self::NotImplemented { .. } => ErrorKind::NotImplemented,
            Self::Other { .. } => ErrorKind::Other,
        }
    }

    /// True for [`NodeClaimNotFound`](Self::NodeClaimNotFound).
    pub fn is_not_found(&self) -> bool {
        self.kind() == ErrorKind::NodeClaimNotFound
    }

    /// The offerings an [`InsufficientCapacity`](Self::InsufficientCapacity) error names (empty otherwise).
    pub fn failed_offerings(&self) -> &[OfferingRef] {
        match self {
            Self::InsufficientCapacity { offerings, .. } => offerings,
            _ => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_kinds_and_sources() {
        let e = CloudProviderError::insufficient_capacity(
            vec![OfferingRef::new("m5.large", "zone-a", "spot"), OfferingRef::new("m5.large", "zone-b", "spot")],
            "no capacity",
        );
        assert_eq!(
            e.to_string(),
            "insufficient capacity: no capacity (offerings: m5.large/zone-a/spot, m5.large/zone-b/spot)"
        );
        assert_eq!(e.kind(), ErrorKind::InsufficientCapacity);
        assert_eq!(e.failed_offerings().len(), 2);
        let e = CloudProviderError::create("LaunchFailed", "boom").with_source(std::io::Error::other("sdk said no"));
        assert_eq!(e.to_string(), "creating instance failed: LaunchFailed: boom");
        assert_eq!(std::error::Error::source(&e).map(ToString::to_string).as_deref(), Some("sdk said no"));
        assert!(CloudProviderError::not_found("i-1").is_not_found());
        assert!(!CloudProviderError::other("x").is_not_found());
        assert!(CloudProviderError::other("x").failed_offerings().is_empty());
        assert_eq!(CloudProviderError::node_class_not_ready("x").kind().as_str(), "NodeClassNotReadyError");
        assert_eq!(CloudProviderError::unevaluated_node_pool("x").kind(), ErrorKind::UnevaluatedNodePool);
    }
}
