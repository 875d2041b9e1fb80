//! Launching EC2 instances, SDK-free: user data per AMI family ([`userdata`]),
//! launch templates ([`template`]), CreateFleet requests and their outcome ([`fleet`]), the in-process batchers
//! of EC2 calls ([`batcher`]) and the offerings marked out of capacity ([`ice`]).
//!
//! Every EC2 call goes through a narrow trait ([`template::LaunchTemplateApi`], [`fleet::FleetApi`]) whose
//! requests and answers are this crate's own structs and whose error is [`crate::api_error::AwsApiError`]; the
//! `sdk` feature implements them with aws-sdk-ec2, and `mock` (tests and feature `test-util`) in memory.

pub mod batcher;
pub mod fleet;
pub mod ice;
pub mod instance;
pub mod kubelet_inputs;
#[cfg(any(test, feature = "test-util"))]
pub mod mock;
#[cfg(test)]
mod net_tests;
pub mod tags;
pub mod template;
#[cfg(test)]
mod upstream_expectations;
pub mod userdata;
