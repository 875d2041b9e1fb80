//! The AWS CloudProvider for Karpenter.
//!
//! This crate is split in two halves:
//!
//! * **SDK-free (always built, no features)**: everything that is data in, data out.
//!   * [`ec2`] — serde types for EC2's `DescribeInstanceTypes` / `DescribeInstanceTypeOfferings` answers (EC2's
//!     JSON field names).
//!   * [`instancetype`] — their conversion into [`karpenter_requirements::InstanceType`]s: upstream's labels,
//!     extended resources, capacity and allocatable formulas (ENI-limited pods, kube-reserved, eviction
//!     thresholds, VM memory overhead), EC2NodeClass kubelet settings, offerings per zone × capacity type.
//!   * [`moto`] — a loader for the EC2 catalogue that ships inside the `moto` Python package (tests, benchmarks,
//!     offline use), found through `KARPENTER_MOTO_VENV`.
//!   * [`pricing`] — price tables, the operator-supplied price file of isolated VPCs, and the documented price
//!     estimate used when no price source exists.
//!   * [`interruption`] — parsing of the EventBridge messages the interruption queue (SQS) carries.
//! * **SDK (planned, behind an `sdk` feature)**: the `CloudProvider` implementation over aws-sdk-ec2/ssm/sqs/
//!   pricing/iam/eks — EC2NodeClass resolution, CreateFleet launches, launch templates, drift, pricing refresh,
//!   the SQS poller, capacity reservations and the AWS-side controllers. Compiling the SDK costs minutes and
//!   gigabytes, so nothing in the SDK-free half may depend on it, and consumers that only need the catalogue
//!   (the scheduler's benchmarks, `simulate`) never compile it.
//!
//! Everything here is deterministic (ordered maps, sorted output), does no IO except the explicit file loaders,
//! and never panics on malformed input.

pub mod api_error;
pub mod discovery;
pub mod drift;
pub mod ec2;
pub mod instancetype;
pub mod instancetypes;
pub mod interruption;
pub mod launch;
pub mod moto;
pub mod nodeclass;
pub mod pricing;
pub mod pricing_api;
pub mod provider;
pub mod queue;
pub mod runtime;
pub mod tagging;
#[cfg(feature = "sdk")]
pub mod sdk;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;

#[doc(hidden)]
pub mod fuzzing;
