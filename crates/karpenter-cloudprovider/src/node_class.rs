//! How node classes reach a provider: a read-only lookup handle, injected. The controller backs it with a
//! watcher-fed store, `simulate` and tests with [`InMemoryNodeClasses`]; the provider crate needs no kube client.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Finds node classes by `(group, kind, name)`. Objects are their JSON form (what a watcher store of dynamic
/// objects holds); [`get_node_class`] decodes one into the provider's type.
pub trait NodeClassLookup: Send + Sync + fmt::Debug {
    /// The node class, or `None` when it does not exist.
    fn get(&self, group: &str, kind: &str, name: &str) -> Option<Arc<Value>>;
}

/// Looks a node class up and decodes it as `T` (the provider's node-class type). `Ok(None)` when absent; `Err` when the
/// stored object does not decode.
pub fn get_node_class<T: DeserializeOwned>(
    lookup: &dyn NodeClassLookup,
    group: &str,
    kind: &str,
    name: &str,
) -> Result<Option<T>, serde_json::Error> {
    lookup.get(group, kind, name).map(|v| T::deserialize(&*v)).transpose()
}

type Key = (String, String, String);

/// An in-memory [`NodeClassLookup`]: a map shared by its clones (tests and `simulate` keep a handle and change
/// it while the provider reads it).
#[derive(Clone, Debug, Default)]
pub struct InMemoryNodeClasses {
    map: Arc<RwLock<BTreeMap<Key, Arc<Value>>>>,
}

impl InMemoryNodeClasses {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores a JSON object under `(group, kind, name)`, replacing any previous one.
    pub fn insert_value(&self, group: &str, kind: &str, name: &str, object: Value) {
        let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
        map.insert((group.into(), kind.into(), name.into()), Arc::new(object));
    }

    /// Stores a typed object (serialised to JSON) under `(group, kind, name)`.
    pub fn insert<T: Serialize>(
        &self,
        group: &str,
        kind: &str,
        name: &str,
        object: &T,
    ) -> Result<(), serde_json::Error> {
        self.insert_value(group, kind, name, serde_json::to_value(object)?);
        Ok(())
    }

    /// Stores a typed node class under its own group, kind and name.
    pub fn insert_resource<K>(&self, class: &K) -> Result<(), serde_json::Error>
    where
        K: karpenter_api::kube::Resource<DynamicType = ()> + Serialize,
    {
        let name = class.meta().name.clone().unwrap_or_default();
        self.insert(&K::group(&()), &K::kind(&()), &name, class)
    }

    /// Removes an object; returns whether it was there.
    pub fn remove(&self, group: &str, kind: &str, name: &str) -> bool {
        let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
        map.remove(&(group.to_owned(), kind.to_owned(), name.to_owned())).is_some()
    }
}

impl NodeClassLookup for InMemoryNodeClasses {
    fn get(&self, group: &str, kind: &str, name: &str) -> Option<Arc<Value>> {
        let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
        map.get(&(group.to_owned(), kind.to_owned(), name.to_owned())).cloned()
    }
}

#[cfg(test)]
mod tests {
    use karpenter_api::NodeOverlay;
    use karpenter_api::nodeoverlay::NodeOverlaySpec;

    use super::*;

    // A typed core kind stands in for a provider's node class: the lookup only needs a `kube::Resource`.
    const GROUP: &str = "karpenter.sh";
    const KIND: &str = "NodeOverlay";

    #[test]
    fn stores_and_decodes() {
        let classes = InMemoryNodeClasses::new();
        let lookup: Arc<dyn NodeClassLookup> = Arc::new(classes.clone());
        assert!(lookup.get(GROUP, KIND, "default").is_none());
        classes.insert_resource(&NodeOverlay::new("default", NodeOverlaySpec::default())).unwrap();
        let got: NodeOverlay = get_node_class(&*lookup, GROUP, KIND, "default").unwrap().unwrap();
        assert_eq!(got.metadata.name.as_deref(), Some("default"));
        assert!(get_node_class::<NodeOverlay>(&*lookup, GROUP, "Other", "default").unwrap().is_none());
        classes.insert_value(GROUP, KIND, "bad", serde_json::json!({"spec": 3}));
        assert!(get_node_class::<NodeOverlay>(&*lookup, GROUP, KIND, "bad").is_err());
        assert!(classes.remove(GROUP, KIND, "default"));
        assert!(!classes.remove(GROUP, KIND, "default"));
    }
}
