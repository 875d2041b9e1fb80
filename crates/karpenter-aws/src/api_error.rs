//! The one error type every AWS API trait of this crate returns.
//!
//! The traits over EC2, SSM, SQS, IAM, EKS and Pricing (see [`crate::queue`], the node class and launch modules)
//! never expose SDK types. Their implementations (the `sdk` feature, or in-memory mocks in tests) report a failed
//! call as an [`AwsApiError`]: the operation, AWS's error code and message, and a [`AwsErrorKind`] classified from
//! the code so that callers branch on meaning (gone, throttled, out of capacity, ...) and never on strings.

/// A failed AWS API call.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{operation}: {code}: {message}")]
pub struct AwsApiError {
    /// The API operation, e.g. `CreateFleet`.
    pub operation: String,
    /// AWS's error code, e.g. `InsufficientInstanceCapacity` (empty or a synthetic code such as `DispatchFailure`
    /// when the call never got an answer).
    pub code: String,
    /// AWS's error message.
    pub message: String,
    /// What the code means for the caller.
    pub kind: AwsErrorKind,
}

/// What an AWS error code means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AwsErrorKind {
    /// The resource does not exist (any more): instance, launch template, instance profile, parameter, queue ...
    NotFound,
    /// The request rate was exceeded; retry with backoff.
    Throttled,
    /// EC2 could not satisfy the request with the capacity it has (per instance type, zone and capacity type).
    InsufficientCapacity,
    /// The credentials are missing, expired or lack the permission.
    Unauthorized,
    /// The request itself is wrong (bad parameter, unknown id format, dependency violation ...); retrying the same
    /// request will not help.
    InvalidRequest,
    /// A transient failure on AWS's side or on the way there (5xx, timeout, connection); retry.
    Transient,
    /// Anything else.
    Other,
}

impl AwsErrorKind {
    /// Classifies an AWS error code (EC2, SSM, SQS, IAM, EKS, Pricing, and the SDK's synthetic codes).
    pub fn classify(code: &str) -> Self {
        match code {
            // Throttling, across services.
            "RequestLimitExceeded" | "Throttling" | "ThrottlingException" | "ThrottledException"
            | "TooManyRequestsException" | "RequestThrottled" | "RequestThrottledException"
            | "ProvisionedThroughputExceededException" | "SlowDown" | "PriorRequestNotComplete"
            | "EC2ThrottledException" | "BandwidthLimitExceeded" => Self::Throttled,
            // Capacity: EC2 cannot place the request now; the offering is unavailable for a while.
            "InsufficientInstanceCapacity"
            | "InsufficientCapacity"
            | "InsufficientHostCapacity"
            | "InsufficientReservedInstanceCapacity"
            | "InsufficientCapacityOnOutpost"
            | "MaxSpotInstanceCountExceeded"
            | "MaxSpotFleetRequestCountExceeded"
            | "SpotMaxPriceTooLow"
            | "UnfulfillableCapacity"
            | "InsufficientFreeAddressesInSubnet"
            | "ReservationCapacityExceeded"
            | "MaxFleetCountExceeded"
            | "VcpuLimitExceeded"
            // EC2 does not offer the instance type in that zone: for a launch, the offering is unavailable.
            | "Unsupported"
            | "InstanceLimitExceeded" => Self::InsufficientCapacity,
            // Credentials and permissions.
            "UnauthorizedOperation"
            | "AccessDenied"
            | "AccessDeniedException"
            | "AuthFailure"
            | "UnrecognizedClientException"
            | "InvalidClientTokenId"
            | "ExpiredToken"
            | "ExpiredTokenException"
            | "SignatureDoesNotMatch"
            | "MissingAuthenticationToken"
            | "OptInRequired"
            | "Blocked" => Self::Unauthorized,
            // Not found codes that do not follow the *NotFound* pattern.
            "NoSuchEntity"
            | "ParameterNotFound"
            | "ParameterVersionNotFound"
            | "AWS.SimpleQueueService.NonExistentQueue"
            | "QueueDoesNotExist"
            | "ResourceNotFoundException" => Self::NotFound,
            // Transient service-side failures and the SDK's synthetic transport codes.
            "InternalError" | "InternalFailure" | "InternalServerError" | "InternalServerException"
            | "ServiceUnavailable" | "ServiceUnavailableException" | "Unavailable" | "RequestTimeout"
            | "RequestTimeoutException" | "DispatchFailure" | "TimeoutError" | "ResponseError"
            | "ServerException" => Self::Transient,
            // Request errors with explicit codes.
            "DryRunOperation" => Self::Other,
            "DependencyViolation"
            | "MissingParameter"
            | "ValidationError"
            | "ValidationException"
            | "InvalidAction"
            | "InvalidQueryParameter"
            | "MalformedQueryString"
            | "EntityAlreadyExists"
            | "LimitExceeded"
            | "IncorrectState"
            | "IncorrectInstanceState"
            | "InvalidRequestException"
            | "InvalidParameterException"
            | "InvalidParameterCombination"
            | "InvalidParameterValue"
            | "InvalidParameter"
            | "UnsupportedOperation" => Self::InvalidRequest,
            // EC2's `InvalidInstanceID.NotFound`, `InvalidLaunchTemplateName.NotFoundException`,
            // `InvalidSubnetID.NotFound`, `InvalidAMIID.NotFound`, EKS's `ResourceNotFoundException` ...
            _ if code.contains("NotFound") => Self::NotFound,
            // `InvalidInstanceID.Malformed`, `InvalidLaunchTemplateName.AlreadyExistsException`, ...
            _ if code.starts_with("Invalid") || code.ends_with(".Malformed") => Self::InvalidRequest,
            _ => Self::Other,
        }
    }

    /// Whether retrying the same request later may succeed.
    pub fn is_retryable(self) -> bool {
        matches!(self, Self::Throttled | Self::Transient)
    }
}

impl AwsApiError {
    /// An error of `operation` with AWS's `code` and `message`; the kind is classified from the code.
    pub fn new(operation: impl Into<String>, code: impl Into<String>, message: impl Into<String>) -> Self {
        let code = code.into();
        let kind = AwsErrorKind::classify(&code);
        Self { operation: operation.into(), code, message: message.into(), kind }
    }

    /// An error with an explicit kind (mocks, and transport failures that carry no code).
    pub fn with_kind(
        operation: impl Into<String>,
        code: impl Into<String>,
        message: impl Into<String>,
        kind: AwsErrorKind,
    ) -> Self {
        Self { operation: operation.into(), code: code.into(), message: message.into(), kind }
    }

    /// The resource is gone.
    pub fn is_not_found(&self) -> bool {
        self.kind == AwsErrorKind::NotFound
    }

    /// The call was throttled.
    pub fn is_throttled(&self) -> bool {
        self.kind == AwsErrorKind::Throttled
    }

    /// EC2 lacked the capacity.
    pub fn is_insufficient_capacity(&self) -> bool {
        self.kind == AwsErrorKind::InsufficientCapacity
    }

    /// Whether retrying the same request later may succeed (throttling, transient failures).
    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_not_found_codes() {
        for code in [
            "InvalidInstanceID.NotFound",
            "InvalidLaunchTemplateName.NotFoundException",
            "InvalidLaunchTemplateId.NotFound",
            "InvalidSubnetID.NotFound",
            "InvalidGroup.NotFound",
            "InvalidAMIID.NotFound",
            "NoSuchEntity",
            "ParameterNotFound",
            "AWS.SimpleQueueService.NonExistentQueue",
            "ResourceNotFoundException",
        ] {
            assert_eq!(AwsErrorKind::classify(code), AwsErrorKind::NotFound, "{code}");
        }
    }

    #[test]
    fn classifies_throttling_capacity_and_auth() {
        for code in ["RequestLimitExceeded", "Throttling", "ThrottlingException"] {
            assert_eq!(AwsErrorKind::classify(code), AwsErrorKind::Throttled, "{code}");
        }
        for code in [
            "InsufficientInstanceCapacity",
            "InsufficientCapacity",
            "MaxSpotInstanceCountExceeded",
            "UnfulfillableCapacity",
            "InsufficientFreeAddressesInSubnet",
            "VcpuLimitExceeded",
            "Unsupported",
            "MaxFleetCountExceeded",
            "ReservationCapacityExceeded",
        ] {
            assert_eq!(AwsErrorKind::classify(code), AwsErrorKind::InsufficientCapacity, "{code}");
        }
        for code in ["UnauthorizedOperation", "AccessDenied", "AccessDeniedException", "AuthFailure"] {
            assert_eq!(AwsErrorKind::classify(code), AwsErrorKind::Unauthorized, "{code}");
        }
    }

    #[test]
    fn classifies_invalid_transient_and_other() {
        for code in ["InvalidParameterValue", "InvalidInstanceID.Malformed", "DependencyViolation", "MissingParameter"]
        {
            assert_eq!(AwsErrorKind::classify(code), AwsErrorKind::InvalidRequest, "{code}");
        }
        for code in ["InternalError", "ServiceUnavailable", "DispatchFailure"] {
            assert_eq!(AwsErrorKind::classify(code), AwsErrorKind::Transient, "{code}");
        }
        assert_eq!(AwsErrorKind::classify("SomethingNew"), AwsErrorKind::Other);
        assert_eq!(AwsErrorKind::classify(""), AwsErrorKind::Other);
    }

    #[test]
    fn new_classifies_and_displays() {
        let err = AwsApiError::new("CreateFleet", "InsufficientInstanceCapacity", "no m5.large in us-west-2a");
        assert!(err.is_insufficient_capacity());
        assert!(!err.is_retryable());
        assert_eq!(err.to_string(), "CreateFleet: InsufficientInstanceCapacity: no m5.large in us-west-2a");
        let err = AwsApiError::new("DescribeInstances", "RequestLimitExceeded", "slow down");
        assert!(err.is_throttled() && err.is_retryable());
        assert!(AwsApiError::new("GetInstanceProfile", "NoSuchEntity", "").is_not_found());
        let err = AwsApiError::with_kind("X", "", "timeout", AwsErrorKind::Transient);
        assert!(err.is_retryable());
    }
}
