//! placeholder (crate docs written below once all modules exist)

pub mod quantity;

#[doc(hidden)]
pub mod fuzzing;

pub use quantity::{Format, Quantity, QuantityError};
