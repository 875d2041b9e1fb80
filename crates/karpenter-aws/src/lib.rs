//! The AWS CloudProvider for Karpenter.
//!
//! ```toml
//! [dependencies]
//! karpenter-aws = { version = "0.1" }
//! # `features = ["sdk"]` for the AWS SDK adapters (the launching provider); without it, the SDK-free half.
//! # This crate leaves the Kubernetes version to the final binary (kube-rs's rule for libraries): the binary
//! # enables exactly one k8s-openapi version feature, the one karpenter-rs is built and tested with being v1_33.
//! k8s-openapi = { version = "0.29", features = ["v1_33"] }
//! ```
//!
//! This crate is split in two halves:
//!
//! * **SDK-free (always built, no features)**: everything that is data in, data out.
//!   * [`ec2`] — serde types for EC2's `DescribeInstanceTypes` / `DescribeInstanceTypeOfferings` answers (EC2's
//!     JSON field names).
//!   * [`instancetype`] — their conversion into [`karpenter_requirements::InstanceType`]s: upstream's labels,
//!     extended resources, capacity and allocatable formulas (ENI-limited pods, kube-reserved, eviction
//!     thresholds, VM memory overhead), EC2NodeClass kubelet settings, offerings per zone × capacity type.
//!   * [`kubelet_cel`] — EC2NodeClass kubelet CEL expressions (`maxPods`, `kubeReserved`, `systemReserved`; AWS gate
//!     `NodeClassCEL`): compiled once, evaluated per instance type with the variables `vcpus`, `memory_mib`,
//!     `default_enis`, `ips_per_eni`, `max_pods` and `instance_type`, results read in each key's unit and rounded
//!     (cpu to 10m, memory to 16Mi). [`instancetype`] applies them to capacity and overhead, [`launch`] to the
//!     user data, and the status controller reports them on `ValidationSucceeded`
//!     ([`instancetypes::kubelet_expression_check`]). Documented in `docs/ec2nodeclass-kubelet.md`.
//!   * [`moto`] — a loader for the EC2 catalogue that ships inside the `moto` Python package (tests, benchmarks,
//!     offline use), found through `KARPENTER_MOTO_VENV`.
//!   * [`pricing`] — price tables, the operator-supplied price file of isolated VPCs, and the documented price
//!     estimate used when no price source exists.
//!   * [`interruption`] — parsing of the EventBridge messages the interruption queue (SQS) carries.
//!   * The provider's logic, written against narrow per-concern async traits (our own request/response structs,
//!     [`api_error::AwsApiError`] as the error) so it is unit-tested with in-memory mocks and never needs the SDK:
//!     [`nodeclass`] (EC2NodeClass resolution: subnets, security groups, AMIs through aliases/SSM and selector
//!     terms, instance profiles, capacity reservations, placement groups; the status/finalizer/hash controller,
//!     SSM invalidation, instance-profile GC, capacity-block expiration, reserved→on-demand demotion), [`drift`],
//!     [`launch`] (user data per AMI family, launch templates, CreateFleet, batchers, the unavailable-offerings
//!     cache), [`instancetypes`], [`provider`] (`AwsCloudProvider`), [`queue`] (the SQS `InterruptionSource`),
//!     [`status`] (instance status checks through DescribeInstanceStatus, an `InterruptionSource` too),
//!     [`pricing_api`], [`discovery`] (EKS DescribeCluster), [`tagging`] (post-registration instance tags),
//!     [`zonalshift`] (ARC zonal shifts, `ENABLE_ZONAL_SHIFT`) and [`runtime`].
//!   * [`settings`] — `AwsSettings`, the provider's flags and environment variables (`clap::Args`).
//! * **SDK (feature `sdk`)**: the `sdk` module — `AwsClients` from the default credential chain (rustls over ring) and one
//!   adapter per trait over aws-sdk-ec2/ssm/sqs/iam/eks/pricing/arczonalshift, and `assembly::start`, which turns the settings
//!   into the CloudProvider, its controllers and its interruption source; integration-tested against moto. Compiling the
//!   SDK costs minutes and gigabytes, so nothing else depends on it, and consumers that only need the catalogue
//!   (the scheduler's benchmarks, `simulate`) never compile it.
//!
//! Deferred, or simpler than upstream (each is a known gap, not a silent one):
//! * the open `spec.kubelet` map of v1.15 (every KubeletConfiguration field, validated by the controller) is not
//!   implemented; kubelet CEL programs are cached by count, not for 12 h (a program never goes stale);
//! * capacity reservations: remaining counts live in memory only (re-seeded by every describe of the status
//!   controller, so at most a minute stale, and lost on restart until the next describe);
//! * placement groups: a spread group's per-zone instance limit is recognised from the fleet error's message
//!   (EC2 gives it no code of its own); unscoped capacity marks (no group) also apply inside groups;
//! * subnet IP accounting (`nodeclass::network::SubnetIps`) lives in the process: predictions in flight and
//!   subnets out of addresses are lost on restart (the next DescribeSubnets, within the refresh interval,
//!   restores the counts); when a zone loses its last subnet only the offerings the fleet errors named are marked;
//! * there is no price table built into the binary: without the Pricing API (isolated VPCs, GovCloud) on-demand
//!   prices come from the operator's price file (`PRICE_FILE`, written by `karpenter-controller prices`), and
//!   with no price source at all offerings are ordered by [`pricing::estimate`], which the controller says in a
//!   warning log and a `PricesEstimated` event on each EC2NodeClass.
//!
//! Isolated VPCs (`ISOLATED_VPC=true`, no internet access). The operator provides:
//! * a price file for the region (`PRICE_FILE`; see [`pricing`] for the format, [`pricing_api::fetch_price_file`]
//!   for what `karpenter-controller prices --region R --output FILE` writes); it is checked at start and the
//!   controller refuses to start on a malformed file or one without on-demand prices for the region;
//! * VPC interface endpoints for EC2 (instances, launch templates, spot price history), SSM (AMI aliases), STS
//!   (IRSA / Pod Identity credentials) and, with an interruption queue, SQS;
//! * `spec.instanceProfile` on every EC2NodeClass instead of `spec.role` (IAM has no VPC endpoint, so managed
//!   instance profiles cannot be created; their garbage collector does not run);
//! * `CLUSTER_ENDPOINT` and `CLUSTER_CA_BUNDLE` unless the VPC has an EKS endpoint (discovery otherwise calls
//!   `eks:DescribeCluster`; with an endpoint configured its failure is logged and the service CIDR stays
//!   unknown).
//!
//! Everything here is deterministic (ordered maps, sorted output), does no IO except the explicit file loaders,
//! and never panics on malformed input.

pub mod api;
pub mod api_error;
#[cfg(feature = "sdk")]
pub mod assembly;
pub mod catalogue;
pub mod discovery;
pub mod drift;
pub mod dynamic_resources;
pub mod ec2;
pub mod instancetype;
pub mod instancetypes;
pub mod interruption;
pub mod kubelet_cel;
pub mod labels;
pub mod launch;
pub mod metrics;
pub mod moto;
pub mod nodeclass;
pub mod pricing;
pub mod pricing_api;
pub mod provider;
pub mod queue;
pub mod runtime;
#[cfg(feature = "sdk")]
pub mod sdk;
pub mod settings;
pub mod status;
pub mod tagging;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
pub mod zonalshift;

#[doc(hidden)]
pub mod fuzzing;
