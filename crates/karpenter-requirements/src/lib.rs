//! placeholder (crate docs written below once all modules exist)

pub mod host_ports;
pub mod instance_type;
pub mod labels;
pub mod offering;
pub mod quantity;
pub mod requirement;
pub mod requirements;
pub mod resources;
pub mod taints;

#[doc(hidden)]
pub mod fuzzing;

pub use host_ports::{HostPort, HostPortConflict, HostPortUsage, pod_host_ports};
pub use instance_type::{
    InstanceType, MinValuesError, MinValuesPolicy, Overhead, order_by_price, satisfies_min_values, truncate,
};
pub use offering::{Offering, OfferingsExt};
pub use quantity::{Format, Quantity, QuantityError};
pub use requirement::{Operator, Requirement, RequirementError, SerializedRequirement, UnknownOperator, Values};
pub use requirements::{CompatibilityError, KeySet, NoKeys, PreferencePolicy, Requirements};
pub use resources::{ResourceError, ResourceList, pod_requests};
pub use taints::{TaintError, tolerates_all};
