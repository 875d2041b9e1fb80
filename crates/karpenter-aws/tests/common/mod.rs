//! Shared helpers of karpenter-aws's integration tests.

#![allow(dead_code)]

pub mod moto;
