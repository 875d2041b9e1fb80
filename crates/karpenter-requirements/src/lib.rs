//! placeholder (crate docs written below once all modules exist)

pub mod labels;
pub mod quantity;
pub mod requirement;
pub mod requirements;

#[doc(hidden)]
pub mod fuzzing;

pub use quantity::{Format, Quantity, QuantityError};
pub use requirement::{Operator, Requirement, RequirementError, SerializedRequirement, UnknownOperator, Values};
pub use requirements::{CompatibilityError, KeySet, NoKeys, PreferencePolicy, Requirements};
