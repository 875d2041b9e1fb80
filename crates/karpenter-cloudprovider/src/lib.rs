//! The CloudProvider trait, its error enum, interruption events, an in-memory fake provider and the kwok catalogue
