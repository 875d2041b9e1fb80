//! The controller's reconcile loops and their settings.
//!
//! This crate holds everything `karpenter-controller run` does that is not provider-specific, so the binary
//! stays a thin wiring layer. This build contains the [`settings`] (flags and environment variables with
//! upstream Karpenter's names and defaults); the controllers on kube-runtime come with issue 8.

pub mod client;
pub mod eviction;
pub mod events;
pub mod leader;
pub mod logging;
pub mod metrics;
pub mod server;
pub mod settings;
pub mod shutdown;

pub use settings::{
    AwsSettings, CoreSettings, FeatureGates, LogLevel, MinValuesPolicy, PreferencePolicy, SettingsError,
};
