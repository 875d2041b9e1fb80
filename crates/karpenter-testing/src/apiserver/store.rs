//! The object store: JSON objects keyed by (group, version, resource, namespace, name), one global
//! resourceVersion counter, a bounded event history for watches, and the write semantics of the real server
//! (generation, status subresource, finalizers, graceful pod deletion, optimistic concurrency).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::registry::ResourceKind;
use super::status::ApiError;
use crate::clock::Clock;

mod controllers;
mod subresources;

/// (group, version, plural, namespace (`""` for cluster-scoped), name)
pub(crate) type ObjKey = (String, String, String, String, String);

/// Watch event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    Added,
    Modified,
    Deleted,
}

/// One change, as stored in the history and sent to watchers.
#[derive(Debug)]
pub(crate) struct Event {
    pub rv: u64,
    pub etype: EventType,
    pub group: String,
    pub plural: String,
    /// The object after the change (for DELETED: its last state, carrying the deletion's resourceVersion).
    pub object: Arc<Value>,
    /// The object before the change (for MODIFIED), to turn selector transitions into ADDED/DELETED.
    pub prev: Option<Arc<Value>>,
}

#[derive(Debug)]
struct Watcher {
    group: String,
    plural: String,
    tx: mpsc::UnboundedSender<Arc<Event>>,
}

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sub {
    Main,
    Status,
}

/// Options of a DELETE.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeleteOpts {
    pub grace_period_seconds: Option<i64>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
    /// `propagationPolicy`: `Background` (the default), `Foreground` or `Orphan`.
    pub propagation: Option<String>,
}

/// What a DELETE did.
#[derive(Debug)]
pub(crate) enum Deleted {
    /// The object is gone; its last state.
    Gone(Value),
    /// The object is still there, being deleted (finalizers or graceful pod deletion).
    Pending(Value),
}

/// How a watch starts.
#[derive(Debug)]
pub(crate) struct WatchStart {
    /// Events to send first (synthetic ADDED for the current state, or replayed history).
    pub initial: Vec<Arc<Event>>,
    /// Live events from the registration on.
    pub rx: mpsc::UnboundedReceiver<Arc<Event>>,
    /// The resourceVersion the watch is consistent with after `initial`.
    pub start_rv: u64,
}

/// One page of a list.
#[derive(Debug)]
pub(crate) struct ListPage {
    pub items: Vec<Arc<Value>>,
    pub rv: u64,
    pub continue_token: Option<String>,
}

/// The mutable state behind the server's lock.
#[derive(Debug)]
pub(crate) struct Store {
    rv: u64,
    objects: BTreeMap<ObjKey, Arc<Value>>,
    history: VecDeque<Arc<Event>>,
    history_limit: usize,
    /// Every event with rv > floor is in `history`.
    floor: u64,
    watchers: Vec<Watcher>,
    uid_counter: u64,
    name_counter: u64,
    clock: Arc<dyn Clock>,
    /// The served kinds (the garbage collector and the PDB controller look kinds up here).
    kinds: Vec<ResourceKind>,
    /// uid -> key of every stored object.
    uids: BTreeMap<String, ObjKey>,
    /// owner uid -> keys of the objects whose ownerReferences name it.
    dependents: BTreeMap<String, BTreeSet<ObjKey>>,
    /// Work for the built-in controllers, queued by `commit` and run before the request returns.
    tasks: VecDeque<controllers::Task>,
    settling: bool,
    /// PodDisruptionBudget -> its pod counts, kept current on every pod write.
    budget_counts: BTreeMap<ObjKey, controllers::BudgetCounts>,
}

fn key(kind: &ResourceKind, namespace: &str, name: &str) -> ObjKey {
    (kind.group.clone(), kind.version.clone(), kind.plural.clone(), namespace.to_string(), name.to_string())
}

fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).and_then(|m| m.get(field)).and_then(Value::as_str)
}

fn meta_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    obj.get_mut("metadata").and_then(Value::as_object_mut)
}

fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

/// Everything but metadata and status: what `metadata.generation` tracks.
fn generation_part(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
        m.remove("kind");
        m.remove("apiVersion");
    }
    o
}

fn set_field(obj: &mut Value, field: &str, value: Option<Value>) {
    if let Some(m) = obj.as_object_mut() {
        match value {
            Some(v) => {
                m.insert(field.to_string(), v);
            }
            None => {
                m.remove(field);
            }
        }
    }
}

/// Rough QoS class of a pod spec, as the real server sets `status.qosClass` on create.
fn qos_class(spec: Option<&Value>) -> &'static str {
    let containers: Vec<&Value> = spec
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let res = |c: &Value, which: &str, r: &str| c.pointer(&format!("/resources/{which}/{r}")).cloned();
    let any = containers
        .iter()
        .any(|c| ["requests", "limits"].iter().any(|w| ["cpu", "memory"].iter().any(|r| res(c, w, r).is_some())));
    if !any {
        return "BestEffort";
    }
    let guaranteed = !containers.is_empty()
        && containers.iter().all(|c| {
            ["cpu", "memory"].iter().all(|r| {
                let limit = res(c, "limits", r);
                let request = res(c, "requests", r);
                limit.is_some() && (request.is_none() || request == limit)
            })
        });
    if guaranteed { "Guaranteed" } else { "Burstable" }
}

const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

impl Store {
    pub(crate) fn new(clock: Arc<dyn Clock>, history_limit: usize) -> Self {
        Self {
            rv: 0,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            floor: 0,
            watchers: Vec::new(),
            uid_counter: 0,
            name_counter: 0,
            clock,
            kinds: Vec::new(),
            uids: BTreeMap::new(),
            dependents: BTreeMap::new(),
            tasks: VecDeque::new(),
            settling: false,
            budget_counts: BTreeMap::new(),
        }
    }

    /// The served kinds, for the built-in controllers (garbage collector, disruption budgets).
    pub(crate) fn set_kinds(&mut self, kinds: Vec<ResourceKind>) {
        self.kinds = kinds;
    }

    fn kind_of(&self, group: &str, version: &str, plural: &str) -> Option<ResourceKind> {
        self.kinds.iter().find(|k| k.group == group && k.version == version && k.plural == plural).cloned()
    }

    /// The current (latest) resourceVersion.
    pub(crate) fn resource_version(&self) -> u64 {
        self.rv
    }

    fn now(&self) -> String {
        karpenter_api::time::rfc3339(self.clock.now())
    }

    fn next_uid(&mut self) -> String {
        self.uid_counter += 1;
        let n = self.uid_counter;
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            n.wrapping_mul(0x9e37_79b9) & 0xffff_ffff,
            n & 0xffff,
            (n >> 16) & 0xfff,
            (n >> 28) & 0xfff,
            n
        )
    }

    fn generated_suffix(&mut self) -> String {
        self.name_counter += 1;
        // A deterministic scramble of the counter, so generated names look like the real server's.
        let mut x = self.name_counter.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x5bd1_e995;
        let mut s = String::with_capacity(5);
        for _ in 0..5 {
            let i = (x % NAME_ALPHABET.len() as u64) as usize;
            s.push(char::from(NAME_ALPHABET.get(i).copied().unwrap_or(b'x')));
            x /= NAME_ALPHABET.len() as u64;
        }
        s
    }

    /// Records a change: bumps the resourceVersion, stores (or removes) the object, appends the event and
    /// fans it out. Returns the stored object.
    fn commit(&mut self, k: ObjKey, mut obj: Value, etype: EventType, prev: Option<Arc<Value>>) -> Arc<Value> {
        self.rv += 1;
        let rv = self.rv;
        if let Some(m) = meta_mut(&mut obj) {
            m.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let obj = Arc::new(obj);
        if etype == EventType::Deleted {
            self.objects.remove(&k);
        } else {
            self.objects.insert(k.clone(), obj.clone());
        }
        self.index_and_queue(&k, etype, &obj, prev.as_deref());
        let (group, _version, plural, _namespace, _name) = k;
        let event = Arc::new(Event { rv, etype, group, plural, object: obj.clone(), prev });
        self.watchers.retain(|w| {
            if w.group != event.group || w.plural != event.plural {
                return !w.tx.is_closed();
            }
            w.tx.send(event.clone()).is_ok()
        });
        self.history.push_back(event);
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.floor = old.rv;
            }
        }
        if !self.settling {
            self.settling = true;
            self.settle();
            self.settling = false;
        }
        obj
    }

    /// Inserts an object as-is at startup (namespaces, CRDs), through the normal create path.
    pub(crate) fn seed(&mut self, kind: &ResourceKind, obj: Value) -> Result<(), ApiError> {
        self.create(kind, None, obj, false).map(|_| ())
    }

    pub(crate) fn get(&self, kind: &ResourceKind, namespace: &str, name: &str) -> Result<Arc<Value>, ApiError> {
        self.objects
            .get(&key(kind, namespace, name))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&kind.group, &kind.plural, name))
    }

    fn check_namespace(&self, kind: &ResourceKind, namespace: &str) -> Result<(), ApiError> {
        if !kind.namespaced {
            return Ok(());
        }
        let ns_key: ObjKey = (String::new(), "v1".into(), "namespaces".into(), String::new(), namespace.to_string());
        match self.objects.get(&ns_key) {
            None => Err(ApiError::not_found("", "namespaces", namespace)),
            Some(ns) if meta(ns).is_some_and(|m| m.contains_key("deletionTimestamp")) => {
                Err(ApiError::forbidden(format!(
                    "{} is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                    kind.plural
                )))
            }
            Some(_) => Ok(()),
        }
    }

    /// POST: creates an object.
    pub(crate) fn create(
        &mut self,
        kind: &ResourceKind,
        url_namespace: Option<&str>,
        mut obj: Value,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let g = &kind.group;
        let p = &kind.plural;
        if !obj.is_object() {
            return Err(ApiError::bad_request("the request body must be a JSON object"));
        }
        check_type(kind, &obj)?;
        set_field(&mut obj, "apiVersion", Some(Value::String(kind.api_version())));
        set_field(&mut obj, "kind", Some(Value::String(kind.kind.clone())));
        if obj.get("metadata").is_none_or(Value::is_null) {
            set_field(&mut obj, "metadata", Some(json!({})));
        }
        let Some(m) = meta_mut(&mut obj) else {
            return Err(ApiError::bad_request("metadata must be an object"));
        };
        // Namespace: the URL's for namespaced kinds (the body may repeat it), none for cluster-scoped ones.
        let namespace = if kind.namespaced {
            let url_ns = url_namespace.unwrap_or_default();
            match m.get("namespace").and_then(Value::as_str) {
                Some(body_ns) if !body_ns.is_empty() && body_ns != url_ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {}
            }
            m.insert("namespace".into(), Value::String(url_ns.to_string()));
            url_ns.to_string()
        } else {
            m.remove("namespace");
            String::new()
        };
        let name = m.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
        let generate = m.get("generateName").and_then(Value::as_str).unwrap_or_default().to_string();
        if name.is_empty() && generate.is_empty() {
            return Err(ApiError::invalid(g, p, "", "metadata.name: Required value: name or generateName is required"));
        }
        if !name.is_empty() && m.get("resourceVersion").and_then(Value::as_str).is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::bad_request("resourceVersion should not be set on objects to be created"));
        }
        self.check_namespace(kind, &namespace)?;
        let name = if name.is_empty() {
            let mut candidate = format!("{generate}{}", self.generated_suffix());
            while self.objects.contains_key(&key(kind, &namespace, &candidate)) {
                candidate = format!("{generate}{}", self.generated_suffix());
            }
            candidate
        } else {
            name
        };
        if !super::meta::dns_subdomain_ok(&name) {
            return Err(ApiError::invalid(
                g,
                p,
                &name,
                format!(
                    "metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"
                ),
            ));
        }
        let k = key(kind, &namespace, &name);
        if self.objects.contains_key(&k) {
            return Err(ApiError::already_exists(g, p, &name));
        }
        let uid = self.next_uid();
        let now = self.now();
        let Some(m) = meta_mut(&mut obj) else {
            return Err(ApiError::bad_request("metadata must be an object"));
        };
        m.insert("name".into(), Value::String(name));
        m.insert("uid".into(), Value::String(uid));
        m.insert("creationTimestamp".into(), Value::String(now));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("managedFields");
        m.remove("selfLink");
        if kind.generation {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
        if kind.status_subresource {
            let status = match (kind.group.as_str(), kind.plural.as_str()) {
                ("", "nodes") => obj.get("status").cloned(),
                ("", "pods") => Some(json!({"phase": "Pending", "qosClass": qos_class(obj.get("spec"))})),
                ("", "persistentvolumes") | ("", "persistentvolumeclaims") => Some(json!({"phase": "Pending"})),
                ("", "namespaces") => Some(json!({"phase": "Active"})),
                _ => None,
            };
            set_field(&mut obj, "status", status);
        }
        if kind.group.is_empty() && kind.plural == "nodes" {
            controllers::admit_node(&mut obj);
        }
        if kind.group.is_empty() && kind.plural == "namespaces" && obj.pointer("/spec/finalizers").is_none() {
            set_field(&mut obj, "spec", Some(json!({"finalizers": ["kubernetes"]})));
        }
        let obj = decode(kind, obj, None)?;
        if dry_run {
            return Ok(obj);
        }
        Ok((*self.commit(k, obj, EventType::Added, None)).clone())
    }

    /// A page of the objects of a kind (all namespaces when `namespace` is `None`), filtered by `keep`, after
    /// the continue token's position.
    pub(crate) fn list(
        &self,
        kind: &ResourceKind,
        namespace: Option<&str>,
        keep: &dyn Fn(&Value) -> bool,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> Result<ListPage, ApiError> {
        let (rv, after) = match continue_token.filter(|t| !t.is_empty()) {
            Some(token) => {
                let mut parts = token.splitn(3, '|');
                let (Some(rv), Some(ns), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
                    return Err(ApiError::bad_request(format!("invalid continue token {token:?}")));
                };
                let rv: u64 =
                    rv.parse().map_err(|_| ApiError::bad_request(format!("invalid continue token {token:?}")))?;
                if rv < self.floor {
                    return Err(ApiError::expired(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                    ));
                }
                (rv, Some((ns.to_string(), name.to_string())))
            }
            None => (self.rv, None),
        };
        let lo: ObjKey = match &after {
            Some((ns, name)) => key(kind, ns, name),
            None => key(kind, namespace.unwrap_or_default(), ""),
        };
        let mut items = Vec::new();
        let mut continue_out = None;
        let range = self.objects.range(lo..);
        for (k, obj) in range {
            if k.0 != kind.group || k.1 != kind.version || k.2 != kind.plural {
                break;
            }
            if let Some(ns) = namespace
                && k.3 != ns
            {
                if k.3.as_str() > ns {
                    break;
                }
                continue;
            }
            if after.as_ref().is_some_and(|(ns, name)| (&k.3, &k.4) <= (ns, name)) {
                continue;
            }
            if !keep(obj) {
                continue;
            }
            if limit.is_some_and(|l| l > 0 && items.len() >= l) {
                if let Some(last) = items.last().and_then(|o: &Arc<Value>| {
                    Some((meta_str(o, "namespace").unwrap_or_default().to_string(), meta_str(o, "name")?.to_string()))
                }) {
                    continue_out = Some(format!("{rv}|{}|{}", last.0, last.1));
                }
                break;
            }
            items.push(obj.clone());
        }
        Ok(ListPage { items, rv, continue_token: continue_out })
    }

    /// PUT (main resource or status): `new` must carry the current resourceVersion.
    pub(crate) fn update(
        &mut self,
        kind: &ResourceKind,
        namespace: &str,
        name: &str,
        new: Value,
        sub: Sub,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let old = self.get(kind, namespace, name)?;
        match meta_str(&new, "resourceVersion") {
            None | Some("") => {
                return Err(ApiError::invalid(
                    &kind.group,
                    &kind.plural,
                    name,
                    "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
                ));
            }
            Some(_) => {}
        }
        self.write(kind, namespace, name, &old, new, sub, dry_run)
    }

    /// PATCH: `patch` turns the current object into the new one; the result is written like an update, with
    /// the resourceVersion precondition only when the patched object names a resourceVersion.
    pub(crate) fn patch(
        &mut self,
        kind: &ResourceKind,
        namespace: &str,
        name: &str,
        patch: &dyn Fn(&Value) -> Result<Value, ApiError>,
        sub: Sub,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let current = self.get(kind, namespace, name)?;
        let patched = patch(&current)?;
        self.write(kind, namespace, name, &current, patched, sub, dry_run)
    }

    /// Long because it applies the API server's write rules in their order (type, system metadata, resourceVersion,
    /// generation, finalizers, status split, no-op writes, events); each rule is a few lines.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write(
        &mut self,
        kind: &ResourceKind,
        namespace: &str,
        name: &str,
        old: &Arc<Value>,
        mut new: Value,
        sub: Sub,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let (g, p) = (&kind.group, &kind.plural);
        if !new.is_object() {
            return Err(ApiError::bad_request("the request body must be a JSON object"));
        }
        check_type(kind, &new)?;
        if new.get("metadata").is_none_or(Value::is_null) {
            set_field(&mut new, "metadata", Some(json!({})));
        }
        let Some(m) = meta(&new) else {
            return Err(ApiError::bad_request("metadata must be an object"));
        };
        if let Some(body_name) = m.get("name").and_then(Value::as_str)
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if kind.namespaced
            && let Some(body_ns) = m.get("namespace").and_then(Value::as_str)
            && !body_ns.is_empty()
            && body_ns != namespace
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        match m.get("resourceVersion").and_then(Value::as_str) {
            Some(rv) if !rv.is_empty() && Some(rv) != meta_str(old, "resourceVersion") => {
                return Err(ApiError::conflict(
                    g,
                    p,
                    name,
                    "the object has been modified; please apply your changes to the latest version and try again",
                ));
            }
            _ => {}
        }
        let mut result = match sub {
            Sub::Status => {
                let mut r = (**old).clone();
                set_field(&mut r, "status", new.get("status").cloned());
                r
            }
            Sub::Main => {
                let mut r = new;
                if kind.status_subresource {
                    set_field(&mut r, "status", old.get("status").cloned());
                }
                r
            }
        };
        set_field(&mut result, "apiVersion", Some(Value::String(kind.api_version())));
        set_field(&mut result, "kind", Some(Value::String(kind.kind.clone())));
        // System-owned metadata comes from the stored object.
        let old_meta = meta(old).cloned().unwrap_or_default();
        let Some(rm) = meta_mut(&mut result) else {
            return Err(ApiError::bad_request("metadata must be an object"));
        };
        for field in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "resourceVersion",
        ] {
            match old_meta.get(field) {
                Some(v) => {
                    rm.insert(field.into(), v.clone());
                }
                None => {
                    rm.remove(field);
                }
            }
        }
        rm.remove("managedFields");
        rm.remove("selfLink");
        let mut result = decode(kind, result, Some(old))?;
        if old_meta.contains_key("deletionTimestamp") {
            let before = finalizers(old);
            let added: Vec<String> = finalizers(&result).into_iter().filter(|f| !before.contains(f)).collect();
            if !added.is_empty() {
                return Err(ApiError::invalid(
                    g,
                    p,
                    name,
                    format!(
                        "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                    ),
                ));
            }
        }
        if kind.generation && generation_part(&result) != generation_part(old) {
            let generation = old_meta.get("generation").and_then(Value::as_i64).unwrap_or(0) + 1;
            if let Some(rm) = meta_mut(&mut result) {
                rm.insert("generation".into(), json!(generation));
            }
        }
        if result == **old {
            // A write that changes nothing is not a write: same resourceVersion, no event.
            return Ok(result);
        }
        let removable = old_meta.contains_key("deletionTimestamp")
            && finalizers(&result).is_empty()
            && old_meta.get("deletionGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(0) <= 0;
        if dry_run {
            return Ok(result);
        }
        let k = key(kind, namespace, name);
        if removable {
            let gone = self.commit(k, result, EventType::Deleted, Some(old.clone()));
            self.after_removal(kind, namespace);
            return Ok((*gone).clone());
        }
        Ok((*self.commit(k, result, EventType::Modified, Some(old.clone()))).clone())
    }

    /// DELETE.
    pub(crate) fn delete(
        &mut self,
        kind: &ResourceKind,
        namespace: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<Deleted, ApiError> {
        let (g, p) = (&kind.group, &kind.plural);
        let old = self.get(kind, namespace, name)?;
        if let Some(uid) = &opts.precondition_uid
            && Some(uid.as_str()) != meta_str(&old, "uid")
        {
            return Err(ApiError::conflict(
                g,
                p,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&old, "uid").unwrap_or_default()
                ),
            ));
        }
        if let Some(rv) = &opts.precondition_rv
            && Some(rv.as_str()) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::conflict(
                g,
                p,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(&old, "resourceVersion").unwrap_or_default()
                ),
            ));
        }
        let uid = meta_str(&old, "uid").unwrap_or_default().to_string();
        if opts.propagation.as_deref() == Some("Orphan") && !opts.dry_run {
            // The real server's orphan finalizer, run at once: the dependents lose their reference to this owner.
            self.orphan_dependents(&uid);
        }
        let is_pod = kind.group.is_empty() && kind.plural == "pods";
        let grace = if is_pod {
            let bound = old.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
            let terminal = matches!(old.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed"));
            if !bound || terminal {
                0
            } else {
                opts.grace_period_seconds
                    .or_else(|| old.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64))
                    .unwrap_or(30)
                    .max(0)
            }
        } else {
            0
        };
        let being_deleted = meta(&old).is_some_and(|m| m.contains_key("deletionTimestamp"));
        let current_grace = meta(&old).and_then(|m| m.get("deletionGracePeriodSeconds")).and_then(Value::as_i64);
        let has_finalizers = !finalizers(&old).is_empty();
        let foreground = opts.propagation.as_deref() == Some("Foreground")
            && !being_deleted
            && self.dependents.get(&uid).is_some_and(|d| !d.is_empty());
        if being_deleted && current_grace.is_none_or(|c| grace >= c) {
            // Already being deleted, and this request does not shorten the grace period.
            return Ok(Deleted::Pending((*old).clone()));
        }
        let k = key(kind, namespace, name);
        if grace > 0 || has_finalizers || foreground {
            let mut new = (*old).clone();
            if foreground && let Some(m) = meta_mut(&mut new) {
                let list = m.entry("finalizers").or_insert_with(|| json!([]));
                if let Some(a) = list.as_array_mut() {
                    a.push(json!(controllers::FOREGROUND_FINALIZER));
                }
            }
            let deadline = chrono::Duration::try_seconds(grace)
                .and_then(|d| self.clock.now().checked_add_signed(d))
                .ok_or_else(|| {
                    ApiError::invalid(g, p, name, format!("gracePeriodSeconds: Invalid value: {grace}: out of range"))
                })
                .map(karpenter_api::time::rfc3339)?;
            if let Some(m) = meta_mut(&mut new) {
                m.insert("deletionTimestamp".into(), Value::String(deadline));
                m.insert("deletionGracePeriodSeconds".into(), json!(grace));
            }
            if opts.dry_run {
                return Ok(Deleted::Pending(new));
            }
            let stored = self.commit(k, new, EventType::Modified, Some(old.clone()));
            if kind.group.is_empty() && kind.plural == "namespaces" {
                self.terminate_namespace(name);
            }
            return Ok(Deleted::Pending((*stored).clone()));
        }
        if opts.dry_run {
            return Ok(Deleted::Gone((*old).clone()));
        }
        if kind.group.is_empty() && kind.plural == "namespaces" {
            // Namespaces go through Terminating while their content is deleted.
            let mut new = (*old).clone();
            let now = self.now();
            if let Some(m) = meta_mut(&mut new) {
                m.insert("deletionTimestamp".into(), Value::String(now));
                m.insert("deletionGracePeriodSeconds".into(), json!(0));
            }
            set_field(&mut new, "status", Some(json!({"phase": "Terminating"})));
            let stored = self.commit(k, new, EventType::Modified, Some(old.clone()));
            self.terminate_namespace(name);
            return Ok(match self.objects.get(&key(kind, "", name)) {
                Some(still) => Deleted::Pending((**still).clone()),
                None => Deleted::Gone((*stored).clone()),
            });
        }
        let gone = self.commit(k, (*old).clone(), EventType::Deleted, Some(old));
        self.after_removal(kind, namespace);
        Ok(Deleted::Gone((*gone).clone()))
    }

    /// Deletes every object in a terminating namespace; removes the namespace once it is empty.
    fn terminate_namespace(&mut self, ns: &str) {
        let contained: Vec<ObjKey> = self.objects.keys().filter(|k| k.3 == ns).cloned().collect();
        for k in contained {
            let Some(obj) = self.objects.get(&k).cloned() else { continue };
            if meta(&obj).is_some_and(|m| m.contains_key("deletionTimestamp")) {
                continue;
            }
            if finalizers(&obj).is_empty() {
                self.commit(k, (*obj).clone(), EventType::Deleted, Some(obj));
            } else {
                let mut new = (*obj).clone();
                let now = self.now();
                if let Some(m) = meta_mut(&mut new) {
                    m.insert("deletionTimestamp".into(), Value::String(now));
                    m.insert("deletionGracePeriodSeconds".into(), json!(0));
                }
                self.commit(k, new, EventType::Modified, Some(obj));
            }
        }
        self.remove_namespace_if_done(ns);
    }

    fn after_removal(&mut self, kind: &ResourceKind, namespace: &str) {
        if kind.namespaced {
            self.remove_namespace_if_done(namespace);
        }
    }

    fn remove_namespace_if_done(&mut self, ns: &str) {
        let ns_key: ObjKey = (String::new(), "v1".into(), "namespaces".into(), String::new(), ns.to_string());
        let Some(ns_obj) = self.objects.get(&ns_key).cloned() else { return };
        let terminating = meta(&ns_obj).is_some_and(|m| m.contains_key("deletionTimestamp"));
        if terminating && finalizers(&ns_obj).is_empty() && !self.objects.keys().any(|k| k.3 == ns) {
            self.commit(ns_key, (*ns_obj).clone(), EventType::Deleted, Some(ns_obj));
        }
    }

    /// Registers a watcher. `from`: `None` (or `"0"`) starts with synthetic ADDED events for the current state;
    /// a resourceVersion replays the history after it, or fails with 410 Expired when it is too old.
    pub(crate) fn watch(&mut self, kind: &ResourceKind, from: Option<&str>) -> Result<WatchStart, ApiError> {
        let initial: Vec<Arc<Event>> = match from.filter(|s| !s.is_empty() && *s != "0") {
            None => self
                .objects
                .iter()
                .filter(|(k, _)| k.0 == kind.group && k.1 == kind.version && k.2 == kind.plural)
                .map(|(k, obj)| {
                    Arc::new(Event {
                        rv: meta_str(obj, "resourceVersion").and_then(|s| s.parse().ok()).unwrap_or(self.rv),
                        etype: EventType::Added,
                        group: k.0.clone(),
                        plural: k.2.clone(),
                        object: obj.clone(),
                        prev: None,
                    })
                })
                .collect(),
            Some(rv) => {
                let rv: u64 =
                    rv.parse().map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv:?}")))?;
                if rv < self.floor {
                    return Err(ApiError::expired(format!("too old resource version: {rv} ({})", self.floor + 1)));
                }
                self.history
                    .iter()
                    .filter(|e| e.rv > rv && e.group == kind.group && e.plural == kind.plural)
                    .cloned()
                    .collect()
            }
        };
        let (tx, rx) = mpsc::unbounded_channel();
        self.watchers.push(Watcher { group: kind.group.clone(), plural: kind.plural.clone(), tx });
        Ok(WatchStart { initial, rx, start_rv: self.rv })
    }

    /// Number of registered watchers (closed ones are pruned on the next write).
    pub(crate) fn watcher_count(&self) -> usize {
        self.watchers.iter().filter(|w| !w.tx.is_closed()).count()
    }
}

/// Decodes a built-in kind into its typed form (400 BadRequest when it cannot be), as the real server does.
/// Metadata is validated for every kind (422 Invalid). Custom resources go through their CRD schema (pruning, defaults, validation, CEL; 422 Invalid).
fn decode(kind: &ResourceKind, obj: Value, old: Option<&Value>) -> Result<Value, ApiError> {
    let obj = super::typed::normalize(&kind.group, &kind.plural, obj).map_err(|e| {
        ApiError::bad_request(format!(
            "{} in version {:?} cannot be handled as a {}: {e}",
            kind.kind, kind.version, kind.kind
        ))
    })?;
    let meta_errors = super::meta::validate(&obj, kind.group.is_empty() && kind.plural == "namespaces");
    if !meta_errors.is_empty() {
        let name = meta_str(&obj, "name").unwrap_or_default().to_string();
        let joined =
            if meta_errors.len() == 1 { meta_errors.join("") } else { format!("[{}]", meta_errors.join(", ")) };
        return Err(ApiError::invalid(&kind.group, &kind.plural, &name, joined));
    }
    match &kind.schema {
        None => Ok(obj),
        Some(schema) => {
            let name = meta_str(&obj, "name").unwrap_or_default().to_string();
            schema.admit(obj, old).map_err(|errors| {
                let joined = if errors.len() == 1 { errors.join("") } else { format!("[{}]", errors.join(", ")) };
                ApiError::invalid(&kind.group, &kind.plural, &name, joined)
            })
        }
    }
}

/// `kind`/`apiVersion` in a body, when present, must name the served kind.
fn check_type(kind: &ResourceKind, obj: &Value) -> Result<(), ApiError> {
    if let Some(k) = obj.get("kind").and_then(Value::as_str)
        && !k.is_empty()
        && k != kind.kind
    {
        return Err(ApiError::bad_request(format!(
            "the body kind {k:?} does not match the served kind {:?}",
            kind.kind
        )));
    }
    if let Some(av) = obj.get("apiVersion").and_then(Value::as_str)
        && !av.is_empty()
        && av != kind.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the body apiVersion {av:?} does not match the served version {:?}",
            kind.api_version()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qos_classes() {
        assert_eq!(qos_class(Some(&json!({"containers": [{}]}))), "BestEffort");
        assert_eq!(qos_class(Some(&json!({"containers": [{"resources": {"requests": {"cpu": "1"}}}]}))), "Burstable");
        let g = json!({"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]});
        assert_eq!(qos_class(Some(&g)), "Guaranteed");
    }
}
