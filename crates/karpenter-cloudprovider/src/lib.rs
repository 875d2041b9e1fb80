//! The CloudProvider trait, its error enum, interruption events, an in-memory fake provider and the kwok catalogue.

pub mod kwok;

pub use kwok::{KwokCatalogueError, LaunchChoice, cheapest_launch, load_instance_types_json};
