//! Label selectors (`metav1.LabelSelector`) as PodDisruptionBudgets, topology spreads and pod affinities use
//! them.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether a label selector matches `labels`. A missing selector matches nothing and an empty one everything, as
/// the API server reads a PodDisruptionBudget's selector; an unknown operator matches nothing.
pub fn selector_matches(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    let Some(s) = selector else { return false };
    let labels_ok = s.match_labels.iter().flatten().all(|(k, v)| labels.get(k) == Some(v));
    labels_ok
        && s.match_expressions.iter().flatten().all(|e| {
            let have = labels.get(&e.key);
            let values = e.values.as_deref().unwrap_or(&[]);
            match e.operator.as_str() {
                "In" => have.is_some_and(|h| values.contains(h)),
                "NotIn" => have.is_none_or(|h| !values.contains(h)),
                "Exists" => have.is_some(),
                "DoesNotExist" => have.is_none(),
                _ => false,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn expression(operator: &str, values: &[&str]) -> LabelSelector {
        LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "app".into(),
                operator: operator.into(),
                values: Some(values.iter().map(|v| v.to_string()).collect()),
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn selector_semantics() {
        let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
        assert!(!selector_matches(None, &labels));
        assert!(selector_matches(Some(&LabelSelector::default()), &labels));
        let s = LabelSelector { match_labels: Some(labels.clone()), ..Default::default() };
        assert!(selector_matches(Some(&s), &labels));
        assert!(!selector_matches(Some(&s), &BTreeMap::new()));
        let check = |op: &str, values: &[&str], want: bool| {
            assert_eq!(selector_matches(Some(&expression(op, values)), &labels), want, "{op} {values:?}");
        };
        check("In", &["web", "db"], true);
        check("In", &["db"], false);
        check("NotIn", &["db"], true);
        check("NotIn", &["web"], false);
        check("Exists", &[], true);
        check("DoesNotExist", &[], false);
        check("Bogus", &[], false);
        assert!(
            selector_matches(Some(&expression("NotIn", &["web"])), &BTreeMap::new()),
            "NotIn holds without the key"
        );
    }
}
