//! [`PodKey`]: how the plan names a pod.

use std::borrow::Borrow;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A typed reference to a pod: its [`namespace`](PodKey::namespace) and [`name`](PodKey::name), written
/// `namespace/name` (its `Display`, its JSON form and its order).
///
/// The key keeps that one string and where the namespace ends, so comparing, ordering and hashing a `PodKey`
/// are those of the text: sorted keys list as the JSON document lists them (before keys were typed the plan
/// held the strings, and its documents stay byte for byte the same), and a map keyed by the snapshot's string
/// keys is looked up with [`PodKey::as_str`] (or a set of `PodKey`s with a `&str`, through `Borrow<str>`).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodKey {
    /// `namespace/name`.
    key: String,
    /// Byte offset of the `/` that ends the namespace.
    slash: usize,
}

/// Why a string is not a `namespace/name` pod key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pod key {key:?} is not namespace/name: {problem}")]
pub struct PodKeyError {
    key: String,
    problem: &'static str,
}

impl PodKey {
    /// The key of the pod `name` in `namespace`. Kubernetes names hold no `/`; a part that does (or an empty
    /// part) is an error.
    pub fn new(namespace: &str, name: &str) -> Result<PodKey, PodKeyError> {
        format!("{namespace}/{name}").parse()
    }

    /// The key of a pod as the scheduler reads it: a missing namespace is `default`, as the API server defaults
    /// it ([`karpenter_api::CompactPod::key`] gives the same text).
    pub fn of(pod: &karpenter_api::CompactPod) -> PodKey {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or(karpenter_api::meta::DEFAULT_NAMESPACE);
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        PodKey { key: format!("{namespace}/{name}"), slash: namespace.len() }
    }

    /// The pod's namespace.
    pub fn namespace(&self) -> &str {
        &self.key[..self.slash]
    }

    /// The pod's name.
    pub fn name(&self) -> &str {
        &self.key[self.slash + 1..]
    }

    /// `namespace/name`.
    pub fn as_str(&self) -> &str {
        &self.key
    }
}

impl FromStr for PodKey {
    type Err = PodKeyError;

    /// Parses `namespace/name`: exactly one `/`, with a non-empty namespace and name around it.
    fn from_str(key: &str) -> Result<PodKey, PodKeyError> {
        let error = |problem| PodKeyError { key: key.to_owned(), problem };
        let slash = key.find('/').ok_or_else(|| error("no '/'"))?;
        if key[slash + 1..].contains('/') {
            return Err(error("more than one '/'"));
        }
        if slash == 0 {
            return Err(error("empty namespace"));
        }
        if slash + 1 == key.len() {
            return Err(error("empty name"));
        }
        Ok(PodKey { key: key.to_owned(), slash })
    }
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key)
    }
}

/// As the string, so a failing assertion over a list of keys reads like the document.
impl fmt::Debug for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.key, f)
    }
}

/// A key is its text: it reads wherever a `&str` key is taken (the cluster state's lookups, event helpers), so
/// code that named pods by string keeps working on the typed key without a conversion at each call.
impl std::ops::Deref for PodKey {
    type Target = str;

    fn deref(&self) -> &str {
        &self.key
    }
}

impl Borrow<str> for PodKey {
    fn borrow(&self) -> &str {
        &self.key
    }
}

impl AsRef<str> for PodKey {
    fn as_ref(&self) -> &str {
        &self.key
    }
}

impl PartialEq<str> for PodKey {
    fn eq(&self, other: &str) -> bool {
        self.key == other
    }
}

impl PartialEq<&str> for PodKey {
    fn eq(&self, other: &&str) -> bool {
        self.key == *other
    }
}

impl PartialEq<String> for PodKey {
    fn eq(&self, other: &String) -> bool {
        &self.key == other
    }
}

impl PartialEq<PodKey> for str {
    fn eq(&self, other: &PodKey) -> bool {
        self == other.key
    }
}

impl PartialEq<PodKey> for &str {
    fn eq(&self, other: &PodKey) -> bool {
        *self == other.key
    }
}

impl PartialEq<PodKey> for String {
    fn eq(&self, other: &PodKey) -> bool {
        *self == other.key
    }
}

impl From<PodKey> for String {
    fn from(key: PodKey) -> String {
        key.key
    }
}

impl Serialize for PodKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.key)
    }
}

impl<'de> Deserialize<'de> for PodKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<PodKey, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_namespace_and_name_shown_as_ns_slash_name() {
        let key = PodKey::new("team-a", "web-0").expect("valid");
        assert_eq!((key.namespace(), key.name()), ("team-a", "web-0"));
        assert_eq!(key.to_string(), "team-a/web-0");
        assert_eq!(format!("{key:?}"), "\"team-a/web-0\"");
        assert_eq!(key, "team-a/web-0");
        assert_eq!("team-a/web-0".parse::<PodKey>(), Ok(key.clone()));
        assert_eq!(serde_json::to_string(&key).expect("serialises"), "\"team-a/web-0\"");
        assert_eq!(serde_json::from_str::<PodKey>("\"team-a/web-0\"").expect("parses"), key);
        let set: std::collections::BTreeSet<PodKey> = [key.clone()].into();
        assert!(set.contains("team-a/web-0"), "looked up by the text");
    }

    /// The text's order, not (namespace, name)'s: `a-b/c` sorts before `a/b` as the strings do, so the plan's
    /// sorted lists are what they were when the keys were strings.
    #[test]
    fn keys_order_as_their_text() {
        let mut keys: Vec<PodKey> = ["b/a", "a/z", "a-b/c", "a/b"].iter().map(|k| k.parse().expect("valid")).collect();
        keys.sort();
        assert_eq!(keys, ["a-b/c", "a/b", "a/z", "b/a"]);
    }

    #[test]
    fn a_pod_without_a_namespace_is_in_default() {
        let pod = karpenter_api::builder::PodBuilder::new("x", "p").build();
        let mut pod = karpenter_api::CompactPod::from(pod);
        pod.metadata.namespace = None;
        assert_eq!(PodKey::of(&pod), "default/p");
        assert_eq!(PodKey::of(&pod).as_str(), pod.key(), "the same text the snapshot uses");
    }

    #[test]
    fn malformed_keys_are_errors_saying_what_is_wrong() {
        for (bad, problem) in
            [("web-0", "no '/'"), ("a/b/c", "more than one '/'"), ("/web-0", "empty namespace"), ("a/", "empty name")]
        {
            let err = bad.parse::<PodKey>().unwrap_err().to_string();
            assert!(err.contains(problem) && err.contains(bad), "{bad}: {err}");
        }
        assert!(PodKey::new("a/b", "c").is_err());
        assert!(serde_json::from_str::<PodKey>("\"web-0\"").unwrap_err().to_string().contains("no '/'"));
    }
}
