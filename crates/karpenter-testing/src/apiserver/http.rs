//! HTTP: routing, query parameters, patches, discovery, and watch streams, as a tower service.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use karpenter_cloudprovider::time::tokio_now;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::registry::{Registry, ResourceKind};
use super::selector::{FieldSelector, LabelSelector};
use super::status::ApiError;
use super::store::{DeleteOpts, Deleted, Event, EventType, Store, Sub};

/// The response body type of the service.
pub type ResponseBody = UnsyncBoxBody<Bytes, Infallible>;

/// Settings fixed at construction.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub bookmark_interval: Duration,
}

/// Everything the service shares between requests.
#[derive(Debug)]
pub(crate) struct Shared {
    pub store: Mutex<Store>,
    pub registry: Registry,
    pub config: Config,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Store> {
        // A panic while holding the lock cannot leave the store half-written (each write is one `commit`), so a
        // poisoned lock is still usable.
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The API server as a tower service: give it to `kube::Client::new`, or to hyper to serve TCP.
#[derive(Debug, Clone)]
pub struct ApiService {
    pub(crate) shared: Arc<Shared>,
}

impl<B> tower::Service<Request<B>> for ApiService
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: std::fmt::Display,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let shared = self.shared.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let body = match body.collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(e) => return Ok(error_response(&ApiError::bad_request(format!("reading the request body: {e}")))),
            };
            Ok(match handle(&shared, &parts, &body) {
                Ok(Reply::Json(code, value)) => json_response(code, &value),
                Ok(Reply::Watch(stream)) => stream,
                Err(e) => error_response(&e),
            })
        })
    }
}

enum Reply {
    Json(StatusCode, Value),
    Watch(Response<ResponseBody>),
}

fn full(bytes: Vec<u8>) -> ResponseBody {
    Full::new(Bytes::from(bytes)).boxed_unsync()
}

fn json_response(code: StatusCode, value: &Value) -> Response<ResponseBody> {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    let mut resp = Response::new(full(bytes));
    *resp.status_mut() = code;
    resp.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    resp
}

fn error_response(e: &ApiError) -> Response<ResponseBody> {
    json_response(StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), &e.to_status())
}

/// Query parameters, percent-decoded.
fn parse_query(q: Option<&str>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for pair in q.unwrap_or_default().split('&').filter(|s| !s.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        out.insert(percent_decode(k), percent_decode(v));
    }
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes.get(i) {
            Some(b'+') => out.push(b' '),
            Some(b'%') => {
                let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            Some(&b) => out.push(b),
            None => {}
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A request for a resource.
struct Target {
    kind: ResourceKind,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

enum Route {
    Version,
    Api,
    Apis,
    Group(String),
    Resources(String, String),
    Resource(Box<Target>),
}

fn route(registry: &Registry, path: &str) -> Result<Route, ApiError> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    let not_found = || ApiError::no_route(format!("the server could not find the requested resource ({path})"));
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["version"] => return Ok(Route::Version),
        ["api"] => return Ok(Route::Api),
        ["apis"] => return Ok(Route::Apis),
        ["apis", g] => return Ok(Route::Group((*g).to_string())),
        ["api", v, rest @ ..] => ("", v, rest),
        ["apis", g, v, rest @ ..] => (g, v, rest),
        _ => return Err(not_found()),
    };
    if !registry.group_versions().iter().any(|(g, v)| g == group && v == version) {
        return Err(not_found());
    }
    if rest.is_empty() {
        return Ok(Route::Resources(group.to_string(), version.to_string()));
    }
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, tail @ ..]
            if registry.find(group, version, plural).is_some_and(|k| k.namespaced) =>
        {
            (Some((*ns).to_string()), std::iter::once(*plural).chain(tail.iter().copied()).collect::<Vec<_>>())
        }
        _ => (None, rest.to_vec()),
    };
    let (plural, name, sub) = match rest.as_slice() {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(*name), None),
        [plural, name, sub] => (*plural, Some(*name), Some(*sub)),
        _ => return Err(not_found()),
    };
    let kind = registry.find(group, version, plural).ok_or_else(not_found)?.clone();
    if kind.namespaced && namespace.is_none() && name.is_some() {
        return Err(not_found());
    }
    Ok(Route::Resource(Box::new(Target {
        kind,
        namespace,
        name: name.map(str::to_string),
        sub: sub.map(str::to_string),
    })))
}

fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

fn dry_run(q: &BTreeMap<String, String>) -> Result<bool, ApiError> {
    match q.get("dryRun").map(String::as_str) {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(ApiError::bad_request(format!("unsupported dryRun value {other:?} (only \"All\")"))),
    }
}

fn handle(shared: &Arc<Shared>, parts: &http::request::Parts, body: &[u8]) -> Result<Reply, ApiError> {
    let q = parse_query(parts.uri.query());
    match route(&shared.registry, parts.uri.path())? {
        Route::Version => Ok(Reply::Json(StatusCode::OK, version_info())),
        Route::Api => Ok(Reply::Json(
            StatusCode::OK,
            json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}]}),
        )),
        Route::Apis => Ok(Reply::Json(StatusCode::OK, api_group_list(&shared.registry))),
        Route::Group(g) => {
            let list = api_group_list(&shared.registry);
            let group = list["groups"]
                .as_array()
                .and_then(|a| a.iter().find(|x| x["name"] == g.as_str()))
                .cloned()
                .ok_or_else(|| {
                    ApiError::no_route(format!("the server could not find the requested resource (/apis/{g})"))
                })?;
            let mut group = group;
            if let Some(o) = group.as_object_mut() {
                o.insert("kind".into(), json!("APIGroup"));
                o.insert("apiVersion".into(), json!("v1"));
            }
            Ok(Reply::Json(StatusCode::OK, group))
        }
        Route::Resources(g, v) => Ok(Reply::Json(StatusCode::OK, resource_list(&shared.registry, &g, &v))),
        Route::Resource(t) => {
            resource(shared, &parts.method, parts.headers.get(http::header::CONTENT_TYPE), &q, *t, body)
        }
    }
}

fn version_info() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0+karpenter-testing",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "none",
        "compiler": "rustc",
        "platform": "linux/amd64",
    })
}

fn api_group_list(registry: &Registry) -> Value {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for (g, v) in registry.group_versions() {
        if g.is_empty() {
            continue;
        }
        match groups.iter_mut().find(|(name, _)| *name == g) {
            Some((_, versions)) => versions.push(v),
            None => groups.push((g, vec![v])),
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(g, versions)| {
            let vs: Vec<Value> =
                versions.iter().map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v})).collect();
            let preferred = vs.first().cloned().unwrap_or(Value::Null);
            json!({"name": g, "versions": vs, "preferredVersion": preferred})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn resource_list(registry: &Registry, group: &str, version: &str) -> Value {
    let mut resources = Vec::new();
    for k in registry.kinds().iter().filter(|k| k.group == group && k.version == version) {
        let verbs: Vec<&str> = if k.read_only {
            vec!["get", "list", "watch"]
        } else {
            vec!["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        };
        let mut r = json!({
            "name": k.plural, "singularName": k.singular, "namespaced": k.namespaced, "kind": k.kind, "verbs": verbs,
        });
        if !k.short_names.is_empty()
            && let Some(o) = r.as_object_mut()
        {
            o.insert("shortNames".into(), json!(k.short_names));
        }
        resources.push(r);
        if k.status_subresource && !k.read_only {
            resources.push(json!({
                "name": format!("{}/status", k.plural), "singularName": "", "namespaced": k.namespaced,
                "kind": k.kind, "verbs": ["get", "patch", "update"],
            }));
        }
        if k.group.is_empty() && k.plural == "pods" {
            resources.push(json!({
                "name": "pods/binding", "singularName": "", "namespaced": true, "kind": "Binding", "verbs": ["create"],
            }));
            resources.push(json!({
                "name": "pods/eviction", "singularName": "", "namespaced": true, "group": "policy", "version": "v1",
                "kind": "Eviction", "verbs": ["create"],
            }));
        }
        if k.scale_subresource.is_some() {
            resources.push(json!({
                "name": format!("{}/scale", k.plural), "singularName": "", "namespaced": k.namespaced,
                "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}

/// The message for server-side apply, which this server refuses on purpose.
pub const APPLY_REFUSED: &str = "server-side apply (application/apply-patch+yaml) is not supported by the \
karpenter-testing API server: karpenter-rs controllers must not use server-side apply; send a JSON merge patch, a \
JSON patch or an update with a resourceVersion instead";

fn apply_patch(kind: &ResourceKind, content_type: &str, body: &[u8], current: &Value) -> Result<Value, ApiError> {
    let mut doc = current.clone();
    match content_type {
        "application/merge-patch+json" => {
            let patch = parse_body(body)?;
            json_patch::merge(&mut doc, &patch);
        }
        "application/json-patch+json" => {
            let patch: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("the JSON patch is not valid: {e}")))?;
            json_patch::patch(&mut doc, &patch).map_err(|e| {
                ApiError::invalid(
                    &kind.group,
                    &kind.plural,
                    meta_name(current),
                    format!("the JSON patch could not be applied: {e}"),
                )
            })?;
        }
        "application/strategic-merge-patch+json" => {
            if kind.custom {
                return Err(ApiError::unsupported_media_type(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json (strategic merge patch is not supported for custom resources)",
                ));
            }
            let patch = parse_body(body)?;
            if let Some(why) = strategic_beyond_merge(&patch, "") {
                return Err(ApiError::unsupported_media_type(format!(
                    "the karpenter-testing API server supports strategic merge patches only where they equal a JSON merge patch (no lists, no $-directives); this patch has {why}: send a JSON merge patch or a JSON patch"
                )));
            }
            json_patch::merge(&mut doc, &patch);
        }
        "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
            return Err(ApiError::unsupported_media_type(APPLY_REFUSED));
        }
        other => {
            return Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format ({other:?}) - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json"
            )));
        }
    }
    Ok(doc)
}

/// Why a strategic merge patch would differ from a JSON merge patch (a list, whose merge depends on the
/// field's patch strategy, or a `$` directive), if it would.
fn strategic_beyond_merge(patch: &Value, at: &str) -> Option<String> {
    match patch {
        Value::Array(_) => Some(format!("a list at {}", if at.is_empty() { "/" } else { at })),
        Value::Object(m) => m.iter().find_map(|(k, v)| {
            if k.starts_with('$') {
                Some(format!("the directive {k} at {}", if at.is_empty() { "/" } else { at }))
            } else {
                strategic_beyond_merge(v, &format!("{at}/{k}"))
            }
        }),
        _ => None,
    }
}

fn meta_name(obj: &Value) -> &str {
    obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default()
}

/// JSON path `.spec.replicas` as a JSON pointer `/spec/replicas`.
fn json_path_pointer(path: &str) -> String {
    path.trim_start_matches('.').split('.').fold(String::new(), |acc, seg| format!("{acc}/{seg}"))
}

fn scale_of(kind: &ResourceKind, obj: &Value) -> Result<Value, ApiError> {
    let Some((spec_path, status_path)) = &kind.scale_subresource else {
        return Err(ApiError::no_route(format!("{} has no scale subresource", kind.plural)));
    };
    let spec_replicas = obj.pointer(&json_path_pointer(spec_path)).cloned().unwrap_or(json!(0));
    let status_replicas =
        status_path.as_deref().and_then(|p| obj.pointer(&json_path_pointer(p)).cloned()).unwrap_or(json!(0));
    let m = obj.get("metadata").cloned().unwrap_or(json!({}));
    let mut meta = serde_json::Map::new();
    for f in ["name", "namespace", "uid", "resourceVersion", "creationTimestamp"] {
        if let Some(v) = m.get(f) {
            meta.insert(f.into(), v.clone());
        }
    }
    Ok(json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": meta,
        "spec": {"replicas": spec_replicas}, "status": {"replicas": status_replicas},
    }))
}

/// Writes the replicas of a Scale back into the object (the main resource's spec path).
fn unscale(kind: &ResourceKind, current: &Value, scale: &Value) -> Result<Value, ApiError> {
    let Some((spec_path, _)) = &kind.scale_subresource else {
        return Err(ApiError::no_route(format!("{} has no scale subresource", kind.plural)));
    };
    let replicas = scale.pointer("/spec/replicas").filter(|v| v.is_i64() || v.is_u64()).cloned().ok_or_else(|| {
        ApiError::invalid(&kind.group, &kind.plural, meta_name(current), "spec.replicas: Required value")
    })?;
    let mut new = current.clone();
    let pointer = json_path_pointer(spec_path);
    let mut cursor = &mut new;
    let segs: Vec<&str> = pointer.split('/').filter(|s| !s.is_empty()).collect();
    for (i, seg) in segs.iter().enumerate() {
        let Some(obj) = cursor.as_object_mut() else {
            return Err(ApiError::internal("scale path crosses a non-object"));
        };
        if i + 1 == segs.len() {
            obj.insert((*seg).to_string(), replicas.clone());
            break;
        }
        cursor = obj.entry((*seg).to_string()).or_insert_with(|| json!({}));
    }
    if let Some(rv) = scale.pointer("/metadata/resourceVersion").and_then(Value::as_str)
        && let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut)
    {
        m.insert("resourceVersion".into(), json!(rv));
    }
    Ok(new)
}

fn delete_opts(q: &BTreeMap<String, String>, body: &[u8]) -> Result<DeleteOpts, ApiError> {
    let b: Value = if body.iter().all(u8::is_ascii_whitespace) { json!({}) } else { parse_body(body)? };
    delete_opts_from(q, &b)
}

/// DeleteOptions from the query and a body (a DELETE's, or an Eviction's `deleteOptions`).
pub(crate) fn delete_opts_from(q: &BTreeMap<String, String>, b: &Value) -> Result<DeleteOpts, ApiError> {
    let mut opts = DeleteOpts {
        grace_period_seconds: b.get("gracePeriodSeconds").and_then(Value::as_i64),
        precondition_uid: b.pointer("/preconditions/uid").and_then(Value::as_str).map(str::to_string),
        precondition_rv: b.pointer("/preconditions/resourceVersion").and_then(Value::as_str).map(str::to_string),
        dry_run: dry_run(q)? || b.get("dryRun").and_then(Value::as_array).is_some_and(|a| a.iter().any(|x| x == "All")),
        propagation: None,
    };
    if let Some(g) = q.get("gracePeriodSeconds") {
        opts.grace_period_seconds =
            Some(g.parse().map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds {g:?}")))?);
    }
    let policy =
        q.get("propagationPolicy").map(String::as_str).or_else(|| b.get("propagationPolicy").and_then(Value::as_str));
    if let Some(p) = policy
        && !matches!(p, "Orphan" | "Background" | "Foreground")
    {
        return Err(ApiError::bad_request(format!(
            "propagationPolicy: Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
        )));
    }
    opts.propagation = policy.map(str::to_string);
    Ok(opts)
}

/// The response to a DELETE: the object (202 while deletion is pending; 200 with the last state for pods and
/// custom resources), or a success Status (built-in kinds), as the real server answers.
fn deleted_reply(kind: &ResourceKind, d: Deleted) -> Reply {
    match d {
        Deleted::Pending(obj) => Reply::Json(StatusCode::ACCEPTED, obj),
        Deleted::Gone(obj) if kind.custom || (kind.group.is_empty() && kind.plural == "pods") => {
            Reply::Json(StatusCode::OK, obj)
        }
        Deleted::Gone(obj) => {
            let mut details = json!({"name": meta_name(&obj), "kind": kind.plural});
            if let Some(o) = details.as_object_mut() {
                if !kind.group.is_empty() {
                    o.insert("group".into(), json!(kind.group));
                }
                if let Some(uid) = obj.pointer("/metadata/uid") {
                    o.insert("uid".into(), uid.clone());
                }
            }
            Reply::Json(
                StatusCode::OK,
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}),
            )
        }
    }
}

struct Filter {
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn new(kind: &ResourceKind, namespace: Option<String>, q: &BTreeMap<String, String>) -> Result<Self, ApiError> {
        let labels = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or_default())
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let fields = FieldSelector::parse(
            q.get("fieldSelector").map(String::as_str).unwrap_or_default(),
            &kind.group,
            &kind.plural,
        )
        .map_err(ApiError::bad_request)?;
        Ok(Self { namespace, labels, fields })
    }

    fn matches(&self, obj: &Value) -> bool {
        let ns_ok = self
            .namespace
            .as_deref()
            .is_none_or(|ns| obj.pointer("/metadata/namespace").and_then(Value::as_str) == Some(ns));
        ns_ok && self.labels.matches(obj) && self.fields.matches(obj)
    }

    /// What a watcher with this filter sees of an event: selector transitions become ADDED/DELETED.
    fn view<'e>(&self, e: &'e Event) -> Option<(&'static str, &'e Value)> {
        let now = self.matches(&e.object);
        match e.etype {
            EventType::Added => now.then_some(("ADDED", &*e.object)),
            EventType::Deleted => now.then_some(("DELETED", &*e.object)),
            EventType::Modified => {
                let before = e.prev.as_ref().is_some_and(|p| self.matches(p));
                match (before, now) {
                    (true, true) => Some(("MODIFIED", &*e.object)),
                    (false, true) => Some(("ADDED", &*e.object)),
                    (true, false) => Some(("DELETED", &*e.object)),
                    (false, false) => None,
                }
            }
        }
    }
}

/// Long because it is the route table of one resource (collection and object, each verb and subresource), one match
/// arm per route as the API server's handler chain.
fn resource(
    shared: &Arc<Shared>,
    method: &Method,
    content_type: Option<&http::HeaderValue>,
    q: &BTreeMap<String, String>,
    t: Target,
    body: &[u8],
) -> Result<Reply, ApiError> {
    let kind = &t.kind;
    let ns = t.namespace.clone().unwrap_or_default();
    let writes = !matches!(*method, Method::GET | Method::HEAD);
    if writes && kind.read_only {
        return Err(ApiError::method_not_allowed(format!(
            "the karpenter-testing API server serves {} read-only (the Karpenter CRDs are installed at startup)",
            kind.plural
        )));
    }
    let content_type = content_type
        .and_then(|v| v.to_str().ok())
        .map(|s| s.split(';').next().unwrap_or_default().trim().to_ascii_lowercase())
        .unwrap_or_default();
    if matches!(*method, Method::POST | Method::PUT) && !content_type.is_empty() && content_type != "application/json" {
        return Err(ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format ({content_type:?}) - accepted media types include: application/json"
        )));
    }
    let dry = dry_run(q)?;
    match (t.name.as_deref(), t.sub.as_deref()) {
        (None, _) => match *method {
            Method::GET if matches!(q.get("watch").map(String::as_str), Some("true" | "1")) => {
                watch(shared, kind, t.namespace, q)
            }
            Method::GET => {
                let filter = Filter::new(kind, t.namespace.clone(), q)?;
                let limit = match q.get("limit") {
                    Some(l) => {
                        Some(l.parse::<usize>().map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?)
                    }
                    None => None,
                };
                let store = shared.lock();
                let page = store.list(
                    kind,
                    t.namespace.as_deref(),
                    &|o| filter.matches(o),
                    limit,
                    q.get("continue").map(String::as_str),
                )?;
                drop(store);
                let mut metadata = json!({"resourceVersion": page.rv.to_string()});
                if let (Some(c), Some(m)) = (page.continue_token, metadata.as_object_mut()) {
                    m.insert("continue".into(), json!(c));
                }
                let items: Vec<&Value> = page.items.iter().map(|a| &**a).collect();
                Ok(Reply::Json(
                    StatusCode::OK,
                    json!({"kind": format!("{}List", kind.kind), "apiVersion": kind.api_version(), "metadata": metadata, "items": items}),
                ))
            }
            Method::POST => {
                let obj = parse_body(body)?;
                let created = shared.lock().create(kind, t.namespace.as_deref(), obj, dry)?;
                Ok(Reply::Json(StatusCode::CREATED, created))
            }
            Method::DELETE => {
                let filter = Filter::new(kind, t.namespace.clone(), q)?;
                let opts = delete_opts(q, body)?;
                let mut store = shared.lock();
                let page = store.list(kind, t.namespace.as_deref(), &|o| filter.matches(o), None, None)?;
                let mut items = Vec::new();
                for obj in page.items {
                    let ns = obj.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
                    match store.delete(kind, ns, meta_name(&obj), &opts)? {
                        Deleted::Gone(o) | Deleted::Pending(o) => items.push(o),
                    }
                }
                let rv = store.resource_version();
                Ok(Reply::Json(
                    StatusCode::OK,
                    json!({"kind": format!("{}List", kind.kind), "apiVersion": kind.api_version(), "metadata": {"resourceVersion": rv.to_string()}, "items": items}),
                ))
            }
            _ => Err(ApiError::method_not_allowed(format!("{method} is not supported on a collection"))),
        },
        (Some(name), sub) => {
            let sub = match sub {
                None => Sub::Main,
                Some("status") if kind.status_subresource => Sub::Status,
                Some("scale") if kind.scale_subresource.is_some() => {
                    return scale(shared, method, &content_type, kind, &ns, name, body, dry);
                }
                Some(sub @ ("binding" | "eviction")) if kind.group.is_empty() && kind.plural == "pods" => {
                    if *method != Method::POST {
                        return Err(ApiError::method_not_allowed(format!("{method} is not supported on pods/{sub}")));
                    }
                    let obj = parse_body(body)?;
                    let mut store = shared.lock();
                    let status = if sub == "binding" {
                        store.bind(kind, &ns, name, &obj, dry)?
                    } else {
                        let opts = delete_opts_from(q, obj.get("deleteOptions").unwrap_or(&Value::Null))?;
                        store.evict(kind, &ns, name, &obj, opts)?
                    };
                    return Ok(Reply::Json(StatusCode::CREATED, status));
                }
                Some(other) => {
                    return Err(ApiError::no_route(format!(
                        "the server could not find the requested resource ({}/{other}); not served by the karpenter-testing API server",
                        kind.plural
                    )));
                }
            };
            match *method {
                Method::GET => Ok(Reply::Json(StatusCode::OK, (*shared.lock().get(kind, &ns, name)?).clone())),
                Method::PUT => {
                    let obj = parse_body(body)?;
                    Ok(Reply::Json(StatusCode::OK, shared.lock().update(kind, &ns, name, obj, sub, dry)?))
                }
                Method::PATCH => {
                    let apply = |current: &Value| apply_patch(kind, &content_type, body, current);
                    Ok(Reply::Json(StatusCode::OK, shared.lock().patch(kind, &ns, name, &apply, sub, dry)?))
                }
                Method::DELETE if sub == Sub::Main => {
                    let opts = delete_opts(q, body)?;
                    let d = shared.lock().delete(kind, &ns, name, &opts)?;
                    Ok(deleted_reply(kind, d))
                }
                _ => Err(ApiError::method_not_allowed(format!("{method} is not supported here"))),
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn scale(
    shared: &Arc<Shared>,
    method: &Method,
    content_type: &str,
    kind: &ResourceKind,
    ns: &str,
    name: &str,
    body: &[u8],
    dry: bool,
) -> Result<Reply, ApiError> {
    let mut store = shared.lock();
    let current = store.get(kind, ns, name)?;
    let new_scale = match *method {
        Method::GET => return Ok(Reply::Json(StatusCode::OK, scale_of(kind, &current)?)),
        Method::PUT => parse_body(body)?,
        Method::PATCH => apply_patch(kind, content_type, body, &scale_of(kind, &current)?)?,
        _ => return Err(ApiError::method_not_allowed(format!("{method} is not supported on scale"))),
    };
    let new = unscale(kind, &current, &new_scale)?;
    let written = store.write(kind, ns, name, &current, new, Sub::Main, dry)?;
    Ok(Reply::Json(StatusCode::OK, scale_of(kind, &written)?))
}

/// `t`, or (when it overflowed) a day from now, re-armed after it passes.
fn far_future_or(t: Option<Instant>) -> Instant {
    t.unwrap_or_else(|| tokio_now() + Duration::from_secs(86_400))
}

fn event_line(etype: &str, object: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": etype, "object": object})).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

struct WatchStream {
    shared: Arc<Shared>,
    initial: VecDeque<Arc<Event>>,
    rx: mpsc::UnboundedReceiver<Arc<Event>>,
    filter: Filter,
    last_rv: u64,
    bookmarks: bool,
    initial_end: bool,
    interval: Duration,
    next_bookmark: Instant,
    deadline: Option<Instant>,
    api_version: String,
    kind: String,
}

impl WatchStream {
    fn bookmark(&self, initial_end: bool) -> Bytes {
        let mut metadata = json!({"resourceVersion": self.last_rv.to_string()});
        if initial_end && let Some(m) = metadata.as_object_mut() {
            m.insert("annotations".into(), json!({"k8s.io/initial-events-end": "true"}));
        }
        event_line("BOOKMARK", &json!({"kind": self.kind, "apiVersion": self.api_version, "metadata": metadata}))
    }

    async fn next_line(&mut self) -> Option<Bytes> {
        loop {
            if let Some(e) = self.initial.pop_front() {
                self.last_rv = self.last_rv.max(e.rv);
                if let Some((t, obj)) = self.filter.view(&e) {
                    return Some(event_line(t, obj));
                }
                continue;
            }
            if self.initial_end {
                self.initial_end = false;
                return Some(self.bookmark(true));
            }
            let deadline = self.deadline;
            let next_bookmark = self.next_bookmark;
            tokio::select! {
                biased;
                e = self.rx.recv() => {
                    let e = e?;
                    self.last_rv = self.last_rv.max(e.rv);
                    if let Some((t, obj)) = self.filter.view(&e) {
                        return Some(event_line(t, obj));
                    }
                }
                () = async { if let Some(d) = deadline { tokio::time::sleep_until(d).await } else { futures::future::pending().await } } => {
                    return None;
                }
                () = tokio::time::sleep_until(next_bookmark), if self.bookmarks => {
                    self.next_bookmark = far_future_or(tokio_now().checked_add(self.interval));
                    // Every event up to the store's current resourceVersion was queued for this watch under the
                    // store's lock, so once the queue is empty the bookmark can carry that resourceVersion (as
                    // the real server's do): a watcher idle through other kinds' writes stays inside the window.
                    let current = self.shared.lock().resource_version();
                    match self.rx.try_recv() {
                        Ok(e) => self.initial.push_back(e),
                        Err(_) => {
                            self.last_rv = self.last_rv.max(current);
                            return Some(self.bookmark(false));
                        }
                    }
                }
            }
        }
    }
}

fn watch(
    shared: &Arc<Shared>,
    kind: &ResourceKind,
    namespace: Option<String>,
    q: &BTreeMap<String, String>,
) -> Result<Reply, ApiError> {
    let filter = Filter::new(kind, namespace, q)?;
    let timeout = match q.get("timeoutSeconds") {
        Some(t) => Some(t.parse::<u64>().map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {t:?}")))?),
        None => None,
    };
    let bookmarks = matches!(q.get("allowWatchBookmarks").map(String::as_str), Some("true" | "1"));
    let send_initial = matches!(q.get("sendInitialEvents").map(String::as_str), Some("true" | "1"));
    let rv = q.get("resourceVersion").map(String::as_str);
    let start = shared.lock().watch(kind, if send_initial { None } else { rv });
    let body: ResponseBody = match start {
        Err(e) if e.code == 410 => {
            // As the real server: a 200 response carrying one ERROR event with the 410 Status.
            let line = event_line("ERROR", &e.to_status());
            StreamBody::new(futures::stream::iter([Ok::<_, Infallible>(http_body::Frame::data(line))])).boxed_unsync()
        }
        Err(e) => return Err(e),
        Ok(start) => {
            // Bookmarks and timeoutSeconds are timers: on tokio's clock, so paused-time tests drive them.
            let now = tokio_now();
            let interval = shared.config.bookmark_interval;
            let state = WatchStream {
                shared: shared.clone(),
                initial: start.initial.into(),
                rx: start.rx,
                filter,
                last_rv: start.start_rv,
                bookmarks,
                initial_end: send_initial && bookmarks,
                interval,
                next_bookmark: far_future_or(now.checked_add(interval)),
                // A timeout too large to represent is no timeout.
                deadline: timeout.and_then(|t| now.checked_add(Duration::from_secs(t))),
                api_version: kind.api_version(),
                kind: kind.kind.clone(),
            };
            let stream = futures::stream::unfold(state, |mut st| async move {
                let line = st.next_line().await?;
                Some((Ok::<_, Infallible>(http_body::Frame::data(line)), st))
            });
            StreamBody::new(stream.boxed()).boxed_unsync()
        }
    };
    let mut resp = Response::new(body);
    resp.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    Ok(Reply::Watch(resp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_strings_are_percent_decoded() {
        let q = parse_query(Some("labelSelector=app%3Dweb%2Ctier+in+%28a%2Cb%29&watch=true&x"));
        assert_eq!(q.get("labelSelector").map(String::as_str), Some("app=web,tier in (a,b)"));
        assert_eq!(q.get("watch").map(String::as_str), Some("true"));
        assert_eq!(q.get("x").map(String::as_str), Some(""));
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }

    #[test]
    fn strategic_patches_are_accepted_only_where_they_equal_merge_patches() {
        assert!(strategic_beyond_merge(&json!({"metadata": {"labels": {"a": "b"}}}), "").is_none());
        assert_eq!(
            strategic_beyond_merge(&json!({"spec": {"taints": []}}), "").as_deref(),
            Some("a list at /spec/taints")
        );
        assert!(strategic_beyond_merge(&json!({"metadata": {"$patch": "replace"}}), "").is_some());
    }

    #[test]
    fn json_paths_become_pointers() {
        assert_eq!(json_path_pointer(".spec.replicas"), "/spec/replicas");
    }
}
