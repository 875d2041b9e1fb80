//! Keys of namespaced objects: [`namespaced_key`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The namespace the API server gives a namespaced object created without one.
pub const DEFAULT_NAMESPACE: &str = "default";

/// `"{namespace}/{name}"`: the key a namespaced object (a pod, a PodDisruptionBudget) is named by in decisions,
/// reports and logs. A missing namespace reads as [`DEFAULT_NAMESPACE`], as the API server would have set it, so
/// an object built in memory (a simulation's pods, a test's) gets the key it will have once created; a missing
/// name reads as empty.
pub fn namespaced_key(meta: &ObjectMeta) -> String {
    let namespace = meta.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
    format!("{namespace}/{}", meta.name.as_deref().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_namespace_slash_name_with_the_default_namespace() {
        let meta = |ns: Option<&str>, name: Option<&str>| ObjectMeta {
            namespace: ns.map(str::to_owned),
            name: name.map(str::to_owned),
            ..ObjectMeta::default()
        };
        assert_eq!(namespaced_key(&meta(Some("team-a"), Some("web-0"))), "team-a/web-0");
        assert_eq!(namespaced_key(&meta(None, Some("web-0"))), "default/web-0");
        assert_eq!(namespaced_key(&meta(Some("kube-system"), None)), "kube-system/");
        assert_eq!(namespaced_key(&meta(None, None)), "default/");
    }
}
