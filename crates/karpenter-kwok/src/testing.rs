//! The KWOKNodeClass builder for tests (here and in other crates), beside the API it builds: the test kit
//! (`karpenter-testing`) builds the core kinds and depends on no provider.

use karpenter_api::condition::{Condition, ConditionStatus};

use crate::api::{KWOKNodeClass, KWOKNodeClassSpec, KWOKNodeClassStatus};

/// The time written into the built `Ready` condition: the test kit's fake clock's default start (its
/// `CONDITION_TIME`).
const CONDITION_TIME: &str = "2024-01-01T00:00:00Z";

/// A UID-shaped value that is the same for the same name in every run (64-bit FNV-1a of the name).
fn uid_of(name: &str) -> String {
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("6b776f6b-0000-4000-8000-{:012x}", h & 0xffff_ffff_ffff)
}

fn ready_condition(ready: bool) -> Condition {
    Condition {
        type_: "Ready".into(),
        status: if ready { ConditionStatus::True } else { ConditionStatus::False },
        observed_generation: None,
        last_transition_time: CONDITION_TIME.into(),
        reason: "Ready".into(),
        message: String::new(),
    }
}

/// A KWOKNodeClass (name default `default`), `Ready=True` unless `ready: Some(false)`.
#[derive(Clone, Debug, Default)]
pub struct KWOKNodeClassOptions {
    /// Default: `default`.
    pub name: Option<String>,
    /// `Some(false)`: status `Ready=False`; `None`/`Some(true)`: ready.
    pub ready: Option<bool>,
}

/// Builds a KWOKNodeClass from `o`.
pub fn kwok_node_class(o: KWOKNodeClassOptions) -> KWOKNodeClass {
    let name = o.name.unwrap_or_else(|| "default".to_string());
    let mut class = KWOKNodeClass::new(&name, KWOKNodeClassSpec {});
    class.metadata.uid = Some(uid_of(&name));
    class.status = Some(KWOKNodeClassStatus { conditions: vec![ready_condition(o.ready.unwrap_or(true))] });
    class
}

#[cfg(test)]
mod tests {
    use karpenter_api::{Validate, ValidationContext};
    use karpenter_testing::{NodePoolOptions, kwok_node_class_ref, node_pool};

    use super::*;

    fn assert_valid<T: Validate>(o: &T, ctx: &ValidationContext) {
        let v = o.validate(ctx);
        assert!(v.is_empty(), "{v:?}");
    }

    #[test]
    fn kwok_node_class_is_ready_and_valid() {
        let class = kwok_node_class(KWOKNodeClassOptions::default());
        assert!(class.is_ready());
        let ctx = ValidationContext { provider: crate::labels::provider_labels() };
        assert_valid(&class, &ctx);
        let pool =
            node_pool(NodePoolOptions { node_class_ref: Some(kwok_node_class_ref("default")), ..Default::default() });
        assert_valid(&pool, &ctx);
    }
}
