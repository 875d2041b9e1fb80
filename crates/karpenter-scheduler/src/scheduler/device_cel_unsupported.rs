//! DRA's CEL device selectors when karpenter-scheduler is built without its `dra-cel` feature: the same
//! interface as `device_cel`, but no expression compiles. A device class or request with a selector is then an
//! explicit outcome (the pod is unschedulable, its reason naming the feature) and never a match, since a
//! selector that nobody evaluates would hand out devices the selector excludes.

use karpenter_requirements::Device;

/// What a device looks like to selectors: nothing, since none is ever evaluated.
pub(crate) type CelValue = ();

/// A compiled selector. None exists without the feature ([`DeviceSelector::compile`] always refuses).
#[derive(Debug)]
pub(crate) enum DeviceSelector {}

impl DeviceSelector {
    /// Refuses `expression`, naming the feature that evaluates it.
    pub(crate) fn compile(expression: &str) -> Result<Self, String> {
        Err(format!(
            "CEL selector {expression:?} is unsupported: karpenter-scheduler was built without its `dra-cel` feature"
        ))
    }
}

/// Evaluates no selector; exists so the allocator's code is the same with and without the feature.
#[derive(Debug, Default)]
pub(crate) struct SelectorEnv;

impl SelectorEnv {
    pub(crate) fn new() -> Self {
        SelectorEnv
    }

    pub(crate) fn device_value(&self, _driver: &str, _device: &Device) -> CelValue {}

    pub(crate) fn matches(&self, selector: &DeviceSelector, _device: &CelValue) -> Result<bool, String> {
        match *selector {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_expression_is_refused_naming_the_feature() {
        for expression in [r#"device.driver == "gpu.example.com""#, "true", "device.driver =="] {
            let message = DeviceSelector::compile(expression).expect_err("nothing compiles without dra-cel");
            assert!(message.contains("`dra-cel` feature") && message.contains(&format!("{expression:?}")), "{message}");
        }
    }
}
