//! placeholder
pub use k8s_openapi;
pub use kube;
