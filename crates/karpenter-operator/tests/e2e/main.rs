//! The controller end to end on the in-process API server: one test binary for every scenario file, so the
//! workspace links (and CI stores) one executable of this size instead of one per file.

mod e2e_disruption;
mod e2e_observability;
mod e2e_probes;
mod e2e_provisioning;
mod e2e_restart;
mod e2e_support;
mod e2e_termination;
mod e2e_warmup;
