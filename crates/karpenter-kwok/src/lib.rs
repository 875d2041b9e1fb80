//! The kwok cloud provider (placeholder docs, expanded below).

pub mod kubelet;
pub mod provider;

pub use kubelet::{
    DEFAULT_INTERVAL, Kubelet, KubeletOptions, KubeletReport, SimulateOptions, kubelet_options, kwok_kubelet,
    simulate_kubelet, simulate_kubelet_with,
};
pub use provider::{
    DRIFT_ANNOTATION, KWOK_NODE_KEY, KWOK_NODE_VALUE, KwokCloudProvider, KwokError, KwokOptions, MANAGED_LABEL,
    NODE_CLAIM_ANNOTATION, NODE_CLAIM_UID_ANNOTATION, PARTITION_LABEL, PRICE_LABEL, UNREGISTERED_TAINT,
    load_instance_types_file, node_to_claim,
};
