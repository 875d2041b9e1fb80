//! The kwok provider's pieces for tests (feature `kwok`): [`fake`], the in-memory [`FakeCloudProvider`] over the
//! kwok catalogue (what most controller tests run against), and the kwok crate's [`catalogue`] and [`kubelet`]
//! (the kubelet stand-in) re-exported.
//!
//! The re-exports are the kwok crate's own modules, not copies: a test that also names `karpenter_kwok` gets the
//! same items. The fake lives in `karpenter-cloudprovider`, which karpenter-kwok depends on, so it cannot default
//! to the kwok catalogue itself; this module is where the two meet.
//!
//! ```
//! use karpenter_cloudprovider::CloudProvider;
//! use karpenter_testing::kwok;
//!
//! let fake = kwok::fake();
//! assert_eq!(fake.options().instance_types.len(), kwok::catalogue::catalogue().len());
//! assert_eq!(fake.name(), "kwok");
//! ```

use karpenter_cloudprovider::{FakeCloudProvider, FakeOptions};
pub use karpenter_kwok::{catalogue, kubelet};

/// The fake cloud over the kwok catalogue, everything else at [`FakeOptions::new`]'s defaults.
pub fn fake() -> FakeCloudProvider {
    FakeCloudProvider::new(fake_options())
}

/// Options over the kwok catalogue, for a fake that sets more: `FakeOptions { clock, ..kwok::fake_options() }`.
pub fn fake_options() -> FakeOptions {
    FakeOptions::new(catalogue::catalogue())
}
