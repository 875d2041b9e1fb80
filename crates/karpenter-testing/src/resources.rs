//! Resource lists written the short way: `[("cpu", "1"), ("memory", "1Gi")].into()`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A Kubernetes resource list (`cpu`, `memory`, `pods`, extended resources) for option structs. Build it from
/// `(name, quantity)` pairs or from a `BTreeMap<String, Quantity>`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resources(pub BTreeMap<String, Quantity>);

impl Resources {
    /// Whether no resource is listed (an empty list is left out of the built object).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The list, or `None` when empty (how the API leaves absent resource lists).
    pub fn to_option(&self) -> Option<BTreeMap<String, Quantity>> {
        if self.0.is_empty() { None } else { Some(self.0.clone()) }
    }
}

/// Builds a resource list from pairs: `res(&[("cpu", "2"), ("memory", "4Gi")])`.
pub fn res(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs.iter().map(|(k, v)| ((*k).to_string(), Quantity((*v).to_string()))).collect()
}

impl<const N: usize> From<[(&str, &str); N]> for Resources {
    fn from(pairs: [(&str, &str); N]) -> Self {
        Resources(res(&pairs))
    }
}

impl From<&[(&str, &str)]> for Resources {
    fn from(pairs: &[(&str, &str)]) -> Self {
        Resources(res(pairs))
    }
}

impl From<Vec<(&str, &str)>> for Resources {
    fn from(pairs: Vec<(&str, &str)>) -> Self {
        Resources(res(&pairs))
    }
}

impl From<BTreeMap<String, Quantity>> for Resources {
    fn from(map: BTreeMap<String, Quantity>) -> Self {
        Resources(map)
    }
}

/// Builds a string map (labels, annotations, node selectors) from pairs.
pub fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_from_pairs_and_maps() {
        let r: Resources = [("cpu", "1"), ("memory", "1Gi")].into();
        assert_eq!(r.0["cpu"], Quantity("1".into()));
        assert_eq!(Resources::from(res(&[("pods", "3")])).0["pods"].0, "3");
        assert_eq!(Resources::default().to_option(), None);
        assert_eq!(map(&[("a", "b")])["a"], "b");
    }
}
