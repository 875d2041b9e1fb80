//! Dynamic Resource Allocation (`resource.k8s.io`) objects as the scheduling simulation reads them: lean, typed
//! copies of ResourceClaim, ResourceClaimTemplate, DeviceClass and ResourceSlice holding only what allocation
//! needs, built from `v1beta1` (what a v1.32 API server serves; the loader decodes it with k8s-openapi's types)
//! or from `v1beta2`/`v1` documents (same meaning, devices without the `basic` wrapper and requests with
//! `exactly`). CEL selectors are kept as text: the scheduler compiles them (this crate stays free of a CEL
//! engine, which the kwok provider must not pull in).
//!
//! What is not modelled (see docs/dra.md): per-device node selection, device configuration, DeviceTaintRules and
//! the admin-access namespace label (the API server enforces it when a claim is created).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelector, Taint, Toleration};
use k8s_openapi::api::resource::{v1beta1, v1beta2};
use karpenter_requirements::{CounterSet, Device, DeviceAttribute, Quantity};
use serde_json::Value as Json;

/// The API group of DRA objects.
pub const GROUP: &str = "resource.k8s.io";

/// How many devices a request wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocationMode {
    /// Exactly this many matching devices (the API's default is one).
    ExactCount(u32),
    /// Every matching device of the pool the node sees (at least one).
    All,
}

/// One way to satisfy a request: a device class, extra selectors and a count.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestAlternative {
    /// `request` or `request/subrequest` (for `firstAvailable`), as allocation results name it.
    pub name: String,
    /// The DeviceClass whose selectors the devices must also satisfy.
    pub device_class_name: String,
    /// CEL expressions, all of which must be true.
    pub selectors: Vec<String>,
    /// How many devices: an exact count, or all that match.
    pub mode: AllocationMode,
    /// Device taints this alternative tolerates (the request's `tolerations`, as core tolerations).
    pub tolerations: Vec<Toleration>,
    /// `adminAccess`: the devices may be in use and are not taken from others.
    pub admin_access: bool,
}

/// A device request of a claim: one alternative, or `firstAvailable` alternatives tried in order.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceRequest {
    /// The request's name, unique in its claim; pods' containers refer to it.
    pub name: String,
    /// The ways to satisfy it: one, or several tried in order (`firstAvailable`).
    pub alternatives: Vec<RequestAlternative>,
}

/// A claim's constraint on the devices of `requests` (every request when empty; a name is a request or a
/// `request/subrequest`): they all have the same value of the fully-qualified attribute (`matchAttribute`), or
/// pairwise different values (`distinctAttribute`, Kubernetes 1.34+).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceConstraint {
    /// The requests (or `request/subrequest`s) constrained; empty means every request of the claim.
    pub requests: Vec<String>,
    /// `domain/id`.
    pub attribute: String,
    /// `distinctAttribute` (else `matchAttribute`).
    pub distinct: bool,
}

/// What a claim (or a claim template) asks for.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClaimSpec {
    /// The device requests, each satisfied by its own devices.
    pub requests: Vec<DeviceRequest>,
    /// Constraints across the requests' devices.
    pub constraints: Vec<DeviceConstraint>,
}

/// A device as allocation results name it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeviceId {
    /// The DRA driver that published the device.
    pub driver: String,
    /// The resource pool (within the driver) the device belongs to.
    pub pool: String,
    /// The device's name, unique in its pool.
    pub device: String,
}

/// `status.allocation` of a claim.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Allocation {
    /// The devices the claim holds: results with admin access are left out (they do not hold their device).
    pub devices: Vec<DeviceId>,
    /// Nodes the allocated devices are reachable from (`None`: every node).
    pub node_selector: Option<NodeSelector>,
}

/// A ResourceClaim.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceClaim {
    /// The claim's namespace (pods use claims of their own namespace only).
    pub namespace: String,
    /// The claim's name.
    pub name: String,
    /// What the claim asks for.
    pub spec: ClaimSpec,
    /// `status.allocation`: the devices allocated to it, when allocated.
    pub allocation: Option<Allocation>,
    /// `status.reservedFor` consumers, by name.
    pub reserved_for: Vec<String>,
}

/// A ResourceClaimTemplate: the spec of the per-pod claims made from it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceClaimTemplate {
    /// The template's namespace.
    pub namespace: String,
    /// The template's name.
    pub name: String,
    /// The spec each claim made from the template gets.
    pub spec: ClaimSpec,
}

/// A DeviceClass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceClass {
    /// The class's name, as requests name it.
    pub name: String,
    /// CEL expressions, all of which must be true.
    pub selectors: Vec<String>,
}

/// Which nodes see the devices of a slice.
#[derive(Debug, Clone, PartialEq)]
pub enum SliceNodes {
    /// Local to one node.
    Node(String),
    /// Nodes matching a selector.
    Selector(NodeSelector),
    /// Every node.
    All,
}

/// A ResourceSlice's pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    /// The pool's name, unique per driver (often the node's name for node-local devices).
    pub name: String,
    /// The pool's generation: slices of an older generation are stale.
    pub generation: i64,
    /// How many slices the pool's current generation has in all.
    pub resource_slice_count: i64,
}

/// A ResourceSlice.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceSlice {
    /// The slice's object name.
    pub name: String,
    /// The DRA driver that published it.
    pub driver: String,
    /// The pool the slice is part of.
    pub pool: Pool,
    /// The nodes that can reach its devices.
    pub nodes: SliceNodes,
    /// The devices it lists.
    pub devices: Vec<Device>,
    /// `sharedCounters`: what the pool's partitionable devices consume from.
    pub shared_counters: Vec<CounterSet>,
}

/// The newest generation of each resource pool (driver, pool name) among a set of slices, and whether all its
/// slices are there: a driver updating a pool publishes the new generation's slices one by one, so a pool is
/// usable (complete) only once its newest generation has `resourceSliceCount` slices, and older slices are stale.
#[derive(Debug, Clone, Default)]
pub struct PoolGenerations<'a> {
    /// (driver, pool) -> (newest generation, its slices seen, the slice count they state).
    pools: BTreeMap<(&'a str, &'a str), (i64, i64, i64)>,
}

impl<'a> PoolGenerations<'a> {
    /// Counts a slice of pool `pool` of `driver`.
    pub fn add(&mut self, driver: &'a str, pool: &'a str, generation: i64, resource_slice_count: i64) {
        let e = self.pools.entry((driver, pool)).or_insert((generation, 0, 0));
        if generation > e.0 {
            *e = (generation, 0, 0);
        }
        if generation == e.0 {
            e.1 += 1;
            e.2 = e.2.max(resource_slice_count);
        }
    }

    /// Whether a slice of `generation` of the pool is of its newest generation, which is complete.
    pub fn usable(&self, driver: &str, pool: &str, generation: i64) -> bool {
        self.pools.get(&(driver, pool)).is_some_and(|&(newest, seen, count)| newest == generation && seen >= count)
    }

    /// Whether `driver` has a complete pool.
    pub fn has_complete(&self, driver: &str) -> bool {
        self.pools.iter().any(|((d, _), (_, seen, count))| *d == driver && seen >= count)
    }

    /// The incomplete pools, described (in driver and pool order).
    pub fn incomplete(&self) -> Vec<String> {
        self.pools
            .iter()
            .filter(|(_, (_, seen, count))| seen < count)
            .map(|((driver, pool), (generation, seen, count))| {
                format!("{driver} pool {pool} has {seen} of its {count} slices of generation {generation}")
            })
            .collect()
    }
}

/// The DRA objects of a cluster or an input.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DraObjects {
    /// ResourceClaims.
    pub claims: Vec<ResourceClaim>,
    /// ResourceClaimTemplates.
    pub templates: Vec<ResourceClaimTemplate>,
    /// DeviceClasses.
    pub classes: Vec<DeviceClass>,
    /// ResourceSlices.
    pub slices: Vec<ResourceSlice>,
}

/// A DRA object that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {name}: {message}")]
pub struct DraError {
    /// The object's kind, e.g. `ResourceClaim`.
    pub kind: String,
    /// The object's `metadata.name`.
    pub name: String,
    /// What is wrong with it.
    pub message: String,
}

impl DraObjects {
    /// True without any object.
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty() && self.templates.is_empty() && self.classes.is_empty() && self.slices.is_empty()
    }

    /// Adds a `v1beta1` ResourceClaim (as the controller watches them).
    pub fn add_claim(&mut self, c: &v1beta1::ResourceClaim) -> Result<(), DraError> {
        self.claims.push(claim_v1beta1(c, &[])?);
        Ok(())
    }

    /// Adds a `v1beta1` ResourceClaimTemplate.
    pub fn add_template(&mut self, t: &v1beta1::ResourceClaimTemplate) -> Result<(), DraError> {
        self.templates.push(template_v1beta1(t, &[])?);
        Ok(())
    }

    /// Adds a `v1beta1` DeviceClass.
    pub fn add_class(&mut self, c: &v1beta1::DeviceClass) {
        self.classes.push(class_v1beta1(c));
    }

    /// Adds a `v1beta1` ResourceSlice.
    pub fn add_slice(&mut self, s: &v1beta1::ResourceSlice) -> Result<(), DraError> {
        self.slices.push(slice_v1beta1(s)?);
        Ok(())
    }

    /// Adds a `resource.k8s.io/v1beta2` or `v1` document (`value`, the whole object as read) of `kind`: the
    /// loader keeps these as unknown objects, and both versions read as `v1beta2` (`v1` has its shape). Other
    /// kinds are ignored; see [`is_later_version`].
    pub fn add_later_version(&mut self, api_version: &str, kind: &str, value: &Json) -> Result<(), DraError> {
        fn decode<T: serde::de::DeserializeOwned>(api_version: &str, kind: &str, value: &Json) -> Result<T, DraError> {
            // k8s-openapi checks apiVersion; v1 has v1beta2's shape.
            let mut value = value.clone();
            if let Some(v) = value.get_mut("apiVersion") {
                *v = Json::String("resource.k8s.io/v1beta2".into());
            }
            let name = value.pointer("/metadata/name").and_then(Json::as_str).unwrap_or_default().to_owned();
            serde_json::from_value::<T>(value).map_err(|e| DraError {
                kind: kind.to_owned(),
                name,
                message: format!("cannot read {api_version}: {e}"),
            })
        }
        match kind {
            "ResourceClaim" => {
                let distinct = distinct_attributes(value, "/spec/devices/constraints");
                self.claims.push(claim_v1beta2(&decode(api_version, kind, value)?, &distinct)?);
            }
            "ResourceClaimTemplate" => {
                let distinct = distinct_attributes(value, "/spec/spec/devices/constraints");
                self.templates.push(template_v1beta2(&decode(api_version, kind, value)?, &distinct)?);
            }
            "DeviceClass" => self.classes.push(class_v1beta2(&decode(api_version, kind, value)?)),
            "ResourceSlice" => self.slices.push(slice_v1beta2(&decode(api_version, kind, value)?)?),
            _ => {}
        }
        Ok(())
    }
}

/// True for a DRA object at `resource.k8s.io/v1beta2` or `v1`, which the loader keeps unknown and
/// [`DraObjects::add_later_version`] reads.
pub fn is_later_version(api_version: &str, kind: &str) -> bool {
    matches!(api_version, "resource.k8s.io/v1beta2" | "resource.k8s.io/v1")
        && matches!(kind, "ResourceClaim" | "ResourceClaimTemplate" | "DeviceClass" | "ResourceSlice")
}

fn error(kind: &str, name: &str, message: impl Into<String>) -> DraError {
    DraError { kind: kind.to_owned(), name: name.to_owned(), message: message.into() }
}

fn cel_selectors<'s>(selectors: impl IntoIterator<Item = Option<&'s String>>) -> Vec<String> {
    selectors.into_iter().flatten().cloned().collect()
}

fn mode(kind: &str, name: &str, mode: Option<&str>, count: Option<i64>) -> Result<AllocationMode, DraError> {
    match mode.unwrap_or("ExactCount") {
        "All" => Ok(AllocationMode::All),
        "ExactCount" => {
            let n = count.unwrap_or(1);
            u32::try_from(n)
                .ok()
                .filter(|n| *n > 0)
                .map(AllocationMode::ExactCount)
                .ok_or_else(|| error(kind, name, format!("count {n} must be positive")))
        }
        other => Err(error(kind, name, format!("unknown allocationMode {other:?}"))),
    }
}

/// A request's device tolerations as core tolerations (every version's type has the same fields; one matching
/// rule, `karpenter_requirements::taints`, then serves pods and devices).
macro_rules! tolerations {
    ($list:expr) => {
        $list
            .iter()
            .flatten()
            .map(|t| Toleration {
                key: t.key.clone(),
                operator: t.operator.clone(),
                value: t.value.clone(),
                effect: t.effect.clone(),
                toleration_seconds: t.toleration_seconds,
            })
            .collect::<Vec<_>>()
    };
}

/// A claim's `constraints` (every version's type has the same fields; `$distinct` holds each constraint's
/// `distinctAttribute`, which the typed objects of k8s-openapi's 1.33 API lack).
macro_rules! constraints {
    ($kind:expr, $name:expr, $list:expr, $distinct:expr) => {
        $list
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, c)| {
                let distinct = $distinct.get(i).and_then(Option::as_ref);
                device_constraint(
                    $kind,
                    $name,
                    c.requests.clone().unwrap_or_default(),
                    c.match_attribute.as_ref(),
                    distinct,
                )
            })
            .collect::<Result<Vec<_>, DraError>>()
    };
}

fn device_constraint(
    kind: &str,
    name: &str,
    requests: Vec<String>,
    matching: Option<&String>,
    distinct: Option<&String>,
) -> Result<DeviceConstraint, DraError> {
    let (field, attribute) = match (matching, distinct) {
        (Some(a), None) => ("matchAttribute", a),
        (None, Some(a)) => ("distinctAttribute", a),
        (Some(_), Some(_)) => {
            return Err(error(kind, name, "a constraint with both matchAttribute and distinctAttribute"));
        }
        (None, None) => {
            return Err(error(
                kind,
                name,
                "a constraint without matchAttribute or distinctAttribute (distinctAttribute is read from \
                 resource.k8s.io/v1beta2 and v1 documents only)",
            ));
        }
    };
    match attribute.split_once('/') {
        Some((domain, id)) if !domain.is_empty() && !id.is_empty() => {
            Ok(DeviceConstraint { requests, attribute: attribute.clone(), distinct: distinct.is_some() })
        }
        _ => Err(error(kind, name, format!("{field} {attribute:?} must be fully qualified (domain/id)"))),
    }
}

/// Each constraint's `distinctAttribute` at `pointer` (the constraints list) in a raw document.
fn distinct_attributes(value: &Json, pointer: &str) -> Vec<Option<String>> {
    let list = value.pointer(pointer).and_then(Json::as_array);
    list.iter()
        .flat_map(|l| l.iter())
        .map(|c| c.get("distinctAttribute").and_then(Json::as_str).map(str::to_owned))
        .collect()
}

fn claim_spec_v1beta1(
    kind: &str,
    name: &str,
    spec: &v1beta1::ResourceClaimSpec,
    distinct: &[Option<String>],
) -> Result<ClaimSpec, DraError> {
    let mut requests = Vec::new();
    for r in spec.devices.iter().flat_map(|d| d.requests.iter().flatten()) {
        let alternatives = match &r.first_available {
            Some(subs) if !subs.is_empty() => subs
                .iter()
                .map(|s| {
                    Ok(RequestAlternative {
                        name: format!("{}/{}", r.name, s.name),
                        device_class_name: s.device_class_name.clone(),
                        selectors: cel_selectors(
                            s.selectors.iter().flatten().map(|s| s.cel.as_ref().map(|c| &c.expression)),
                        ),
                        mode: mode(kind, name, s.allocation_mode.as_deref(), s.count)?,
                        tolerations: tolerations!(s.tolerations),
                        // v1beta1 puts adminAccess on the request only.
                        admin_access: r.admin_access.unwrap_or(false),
                    })
                })
                .collect::<Result<_, DraError>>()?,
            _ => vec![RequestAlternative {
                name: r.name.clone(),
                device_class_name: r.device_class_name.clone().unwrap_or_default(),
                selectors: cel_selectors(r.selectors.iter().flatten().map(|s| s.cel.as_ref().map(|c| &c.expression))),
                mode: mode(kind, name, r.allocation_mode.as_deref(), r.count)?,
                tolerations: tolerations!(r.tolerations),
                admin_access: r.admin_access.unwrap_or(false),
            }],
        };
        requests.push(DeviceRequest { name: r.name.clone(), alternatives });
    }
    let constraints = constraints!(kind, name, spec.devices.as_ref().and_then(|d| d.constraints.clone()), distinct)?;
    Ok(ClaimSpec { requests, constraints })
}

fn claim_spec_v1beta2(
    kind: &str,
    name: &str,
    spec: &v1beta2::ResourceClaimSpec,
    distinct: &[Option<String>],
) -> Result<ClaimSpec, DraError> {
    let mut requests = Vec::new();
    for r in spec.devices.iter().flat_map(|d| d.requests.iter().flatten()) {
        let mut alternatives = Vec::new();
        if let Some(e) = &r.exactly {
            alternatives.push(RequestAlternative {
                name: r.name.clone(),
                device_class_name: e.device_class_name.clone(),
                selectors: cel_selectors(e.selectors.iter().flatten().map(|s| s.cel.as_ref().map(|c| &c.expression))),
                mode: mode(kind, name, e.allocation_mode.as_deref(), e.count)?,
                tolerations: tolerations!(e.tolerations),
                admin_access: e.admin_access.unwrap_or(false),
            });
        }
        for s in r.first_available.iter().flatten() {
            alternatives.push(RequestAlternative {
                name: format!("{}/{}", r.name, s.name),
                device_class_name: s.device_class_name.clone(),
                selectors: cel_selectors(s.selectors.iter().flatten().map(|s| s.cel.as_ref().map(|c| &c.expression))),
                mode: mode(kind, name, s.allocation_mode.as_deref(), s.count)?,
                tolerations: tolerations!(s.tolerations),
                admin_access: false,
            });
        }
        if alternatives.is_empty() {
            return Err(error(kind, name, format!("request {:?} has neither exactly nor firstAvailable", r.name)));
        }
        requests.push(DeviceRequest { name: r.name.clone(), alternatives });
    }
    let constraints = constraints!(kind, name, spec.devices.as_ref().and_then(|d| d.constraints.clone()), distinct)?;
    Ok(ClaimSpec { requests, constraints })
}

fn names(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (meta.namespace.clone().unwrap_or_else(|| "default".to_owned()), meta.name.clone().unwrap_or_default())
}

fn allocation_devices<'r>(results: impl Iterator<Item = (&'r str, &'r str, &'r str)>) -> Vec<DeviceId> {
    results
        .map(|(driver, pool, device)| DeviceId {
            driver: driver.to_owned(),
            pool: pool.to_owned(),
            device: device.to_owned(),
        })
        .collect()
}

/// The claim, template and class readers of one API version: the versions' types differ, their fields used here
/// do not, so one body serves each.
macro_rules! version_readers {
    ($version:ident, $claim:ident, $template:ident, $class:ident, $claim_spec:ident) => {
        fn $claim(c: &$version::ResourceClaim, distinct: &[Option<String>]) -> Result<ResourceClaim, DraError> {
            let (namespace, name) = names(&c.metadata);
            let spec = $claim_spec("ResourceClaim", &name, &c.spec, distinct)?;
            let status = c.status.as_ref();
            let allocation = status.and_then(|s| s.allocation.as_ref()).map(|a| Allocation {
                devices: allocation_devices(
                    a.devices
                        .iter()
                        .flat_map(|d| d.results.iter().flatten())
                        .filter(|r| r.admin_access != Some(true))
                        .map(|r| (r.driver.as_str(), r.pool.as_str(), r.device.as_str())),
                ),
                node_selector: a.node_selector.clone(),
            });
            let reserved_for =
                status.iter().flat_map(|s| s.reserved_for.iter().flatten()).map(|r| r.name.clone()).collect();
            Ok(ResourceClaim { namespace, name, spec, allocation, reserved_for })
        }

        fn $template(
            t: &$version::ResourceClaimTemplate,
            distinct: &[Option<String>],
        ) -> Result<ResourceClaimTemplate, DraError> {
            let (namespace, name) = names(&t.metadata);
            let spec = $claim_spec("ResourceClaimTemplate", &name, &t.spec.spec, distinct)?;
            Ok(ResourceClaimTemplate { namespace, name, spec })
        }

        fn $class(c: &$version::DeviceClass) -> DeviceClass {
            let selectors = c.spec.selectors.iter().flatten().map(|s| s.cel.as_ref().map(|c| &c.expression));
            DeviceClass { name: c.metadata.name.clone().unwrap_or_default(), selectors: cel_selectors(selectors) }
        }
    };
}

version_readers!(v1beta1, claim_v1beta1, template_v1beta1, class_v1beta1, claim_spec_v1beta1);
version_readers!(v1beta2, claim_v1beta2, template_v1beta2, class_v1beta2, claim_spec_v1beta2);

fn slice_nodes(
    name: &str,
    node_name: Option<&String>,
    node_selector: Option<&NodeSelector>,
    all_nodes: Option<bool>,
    per_device: Option<bool>,
) -> Result<SliceNodes, DraError> {
    match (node_name, node_selector, all_nodes.unwrap_or(false), per_device.unwrap_or(false)) {
        (Some(n), None, false, false) => Ok(SliceNodes::Node(n.clone())),
        (None, Some(s), false, false) => Ok(SliceNodes::Selector(s.clone())),
        (None, None, true, false) => Ok(SliceNodes::All),
        (None, None, false, true) => Err(error("ResourceSlice", name, "perDeviceNodeSelection is not simulated")),
        _ => Err(error("ResourceSlice", name, "exactly one of nodeName, nodeSelector and allNodes must be set")),
    }
}

fn attribute(a: (Option<bool>, Option<i64>, Option<&String>, Option<&String>)) -> Option<DeviceAttribute> {
    match a {
        (Some(b), None, None, None) => Some(DeviceAttribute::Bool(b)),
        (None, Some(i), None, None) => Some(DeviceAttribute::Int(i)),
        (None, None, Some(s), None) => Some(DeviceAttribute::String(s.clone())),
        (None, None, None, Some(v)) => Some(DeviceAttribute::Version(v.clone())),
        _ => None,
    }
}

/// A slice's device taints as core taints; an effect other than NoSchedule and NoExecute is an error.
macro_rules! taints {
    ($slice:expr, $device:expr, $list:expr) => {
        $list
            .iter()
            .flatten()
            .map(|t| {
                device_taint(
                    $slice,
                    $device,
                    Taint { key: t.key.clone(), value: t.value.clone(), effect: t.effect.clone(), time_added: None },
                )
            })
            .collect::<Result<Vec<_>, DraError>>()
    };
}

/// Counter sets (a slice's `sharedCounters` or a device's `consumesCounters`; `$name` is the field naming the
/// set).
macro_rules! counter_sets {
    ($slice:expr, $list:expr, $name:ident) => {
        $list
            .iter()
            .flatten()
            .map(|c| counter_set($slice, &c.$name, c.counters.iter().map(|(k, v)| (k, &v.value))))
            .collect::<Result<Vec<_>, DraError>>()
    };
}

fn device_taint(slice: &str, device: &str, taint: Taint) -> Result<Taint, DraError> {
    if karpenter_requirements::devices::DEVICE_TAINT_EFFECTS.contains(&taint.effect.as_str()) {
        return Ok(taint);
    }
    let message =
        format!("device {device} taint {}: effect {:?} is not NoSchedule or NoExecute", taint.key, taint.effect);
    Err(error("ResourceSlice", slice, message))
}

fn counter_set<'q>(
    slice: &str,
    name: &str,
    counters: impl Iterator<Item = (&'q String, &'q k8s_openapi::apimachinery::pkg::api::resource::Quantity)>,
) -> Result<CounterSet, DraError> {
    let mut out = BTreeMap::new();
    for (key, q) in counters {
        let value: Quantity = q.0.parse().map_err(|e| {
            error("ResourceSlice", slice, format!("counter set {name} counter {key}: invalid quantity {:?}: {e}", q.0))
        })?;
        out.insert(key.clone(), value);
    }
    Ok(CounterSet { name: name.to_owned(), counters: out })
}

type RawAttributes<'a> = Vec<(&'a String, (Option<bool>, Option<i64>, Option<&'a String>, Option<&'a String>))>;

fn device(
    slice: &str,
    name: &str,
    attributes: RawAttributes<'_>,
    capacity: Vec<(&String, &k8s_openapi::apimachinery::pkg::api::resource::Quantity)>,
) -> Result<Device, DraError> {
    let mut out = Device::named(name);
    for (key, raw) in attributes {
        let value = attribute(raw).ok_or_else(|| {
            error("ResourceSlice", slice, format!("device {name} attribute {key}: exactly one value"))
        })?;
        out.attributes.insert(key.clone(), value);
    }
    for (key, q) in capacity {
        let value: Quantity = q.0.parse().map_err(|e| {
            error("ResourceSlice", slice, format!("device {name} capacity {key}: invalid quantity {:?}: {e}", q.0))
        })?;
        out.capacity.insert(key.clone(), value);
    }
    Ok(out)
}

fn slice_v1beta1(s: &v1beta1::ResourceSlice) -> Result<ResourceSlice, DraError> {
    let name = s.metadata.name.clone().unwrap_or_default();
    let spec = &s.spec;
    let nodes = slice_nodes(
        &name,
        spec.node_name.as_ref(),
        spec.node_selector.as_ref(),
        spec.all_nodes,
        spec.per_device_node_selection,
    )?;
    let mut devices = Vec::new();
    for d in spec.devices.iter().flatten() {
        let basic = d.basic.as_ref();
        let attributes = basic
            .iter()
            .flat_map(|b| b.attributes.iter().flatten())
            .map(|(k, a)| (k, (a.bool, a.int, a.string.as_ref(), a.version.as_ref())))
            .collect();
        let capacity = basic.iter().flat_map(|b| b.capacity.iter().flatten()).map(|(k, c)| (k, &c.value)).collect();
        let mut device = device(&name, &d.name, attributes, capacity)?;
        // v1beta1 (1.33) keeps taints and counter consumption under `basic`.
        if let Some(b) = basic {
            device.taints = taints!(&name, &d.name, b.taints)?;
            device.consumes_counters = counter_sets!(&name, b.consumes_counters, counter_set)?;
        }
        devices.push(device);
    }
    let pool = Pool {
        name: spec.pool.name.clone(),
        generation: spec.pool.generation,
        resource_slice_count: spec.pool.resource_slice_count,
    };
    let shared_counters = counter_sets!(&name, spec.shared_counters, name)?;
    Ok(ResourceSlice { name, driver: spec.driver.clone(), pool, nodes, devices, shared_counters })
}

fn slice_v1beta2(s: &v1beta2::ResourceSlice) -> Result<ResourceSlice, DraError> {
    let name = s.metadata.name.clone().unwrap_or_default();
    let spec = &s.spec;
    let nodes = slice_nodes(
        &name,
        spec.node_name.as_ref(),
        spec.node_selector.as_ref(),
        spec.all_nodes,
        spec.per_device_node_selection,
    )?;
    let mut devices = Vec::new();
    for d in spec.devices.iter().flatten() {
        let attributes = d
            .attributes
            .iter()
            .flatten()
            .map(|(k, a)| (k, (a.bool, a.int, a.string.as_ref(), a.version.as_ref())))
            .collect();
        let capacity = d.capacity.iter().flatten().map(|(k, c)| (k, &c.value)).collect();
        let mut device = device(&name, &d.name, attributes, capacity)?;
        device.taints = taints!(&name, &d.name, d.taints)?;
        device.consumes_counters = counter_sets!(&name, d.consumes_counters, counter_set)?;
        devices.push(device);
    }
    let pool = Pool {
        name: spec.pool.name.clone(),
        generation: spec.pool.generation,
        resource_slice_count: spec.pool.resource_slice_count,
    };
    let shared_counters = counter_sets!(&name, spec.shared_counters, name)?;
    Ok(ResourceSlice { name, driver: spec.driver.clone(), pool, nodes, devices, shared_counters })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load_str;

    #[test]
    fn a_pool_is_usable_at_its_newest_generation_once_complete() {
        let mut pools = PoolGenerations::default();
        pools.add("d", "p", 1, 1);
        assert!(pools.usable("d", "p", 1));
        pools.add("d", "p", 2, 2);
        assert!(!pools.usable("d", "p", 1), "generation 1 is stale");
        assert!(!pools.usable("d", "p", 2), "one of two slices");
        assert!(!pools.has_complete("d"));
        assert_eq!(pools.incomplete(), ["d pool p has 1 of its 2 slices of generation 2"]);
        pools.add("d", "p", 2, 2);
        assert!(pools.usable("d", "p", 2) && pools.has_complete("d") && pools.incomplete().is_empty());
        assert!(!pools.usable("d", "other", 2) && !pools.has_complete("e"));
    }

    const OBJECTS: &str = r#"
apiVersion: resource.k8s.io/v1beta1
kind: DeviceClass
metadata: {name: gpu.example.com}
spec:
  selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}]
---
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaim
metadata: {name: two-gpus, namespace: ml}
spec:
  devices:
    requests:
    - name: gpus
      deviceClassName: gpu.example.com
      count: 2
      selectors: [{cel: {expression: 'device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0'}}]
status:
  allocation:
    devices:
      results: [{request: gpus, driver: gpu.example.com, pool: node-a, device: gpu-0}]
  reservedFor: [{resource: pods, name: trainer, uid: "1"}]
---
apiVersion: resource.k8s.io/v1beta1
kind: ResourceSlice
metadata: {name: node-a-gpu}
spec:
  driver: gpu.example.com
  nodeName: node-a
  pool: {name: node-a, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu-0
    basic:
      attributes: {model: {string: A100}, gpu.example.com/index: {int: 0}}
      capacity: {memory: {value: 80Gi}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: ml}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        firstAvailable:
        - {name: big, deviceClassName: gpu.example.com, selectors: [{cel: {expression: 'device.attributes["gpu.example.com"].model == "H100"'}}]}
        - {name: any, deviceClassName: gpu.example.com, allocationMode: All}
"#;

    fn objects() -> DraObjects {
        let mut dra = DraObjects::default();
        for l in load_str(OBJECTS, "dra.yaml").expect("loads") {
            assert!(dra.add(&l.object).expect("valid"), "{} is a DRA object", l.object.display_name());
        }
        dra
    }

    #[test]
    fn reads_v1beta1_and_v1_shapes() {
        let dra = objects();
        assert_eq!(dra.classes[0].selectors, [r#"device.driver == "gpu.example.com""#]);
        let claim = &dra.claims[0];
        assert_eq!((claim.namespace.as_str(), claim.name.as_str()), ("ml", "two-gpus"));
        assert_eq!(claim.spec.requests[0].alternatives[0].mode, AllocationMode::ExactCount(2));
        let alloc = claim.allocation.as_ref().expect("allocated");
        assert_eq!(alloc.devices[0].device, "gpu-0");
        assert_eq!(claim.reserved_for, ["trainer"]);
        let slice = &dra.slices[0];
        assert_eq!(slice.nodes, SliceNodes::Node("node-a".into()));
        assert_eq!(slice.devices[0].attributes.get("model"), Some(&DeviceAttribute::String("A100".into())));
        let template = &dra.templates[0];
        let alts = &template.spec.requests[0].alternatives;
        assert_eq!(alts.iter().map(|a| a.name.as_str()).collect::<Vec<_>>(), ["gpu/big", "gpu/any"]);
        assert_eq!(alts[1].mode, AllocationMode::All);
    }

    const DEPTH: &str = r#"
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaim
metadata: {name: pair, namespace: ml}
spec:
  devices:
    requests:
    - {name: a, deviceClassName: gpu, adminAccess: true, tolerations: [{key: maintenance, operator: Exists, effect: NoSchedule}]}
    - name: b
      firstAvailable: [{name: x, deviceClassName: gpu, tolerations: [{key: k, value: v}]}]
    constraints: [{requests: [a, b/x], matchAttribute: gpu.example.com/numa}, {matchAttribute: gpu.example.com/pcieRoot}]
status:
  allocation:
    devices:
      results:
      - {request: a, driver: gpu.example.com, pool: p, device: gpu-0, adminAccess: true}
      - {request: b, driver: gpu.example.com, pool: p, device: gpu-1}
---
apiVersion: resource.k8s.io/v1beta1
kind: ResourceSlice
metadata: {name: beta1}
spec:
  driver: gpu.example.com
  nodeName: n
  pool: {name: n, generation: 1, resourceSliceCount: 1}
  sharedCounters: [{name: gpu-0-counters, counters: {memory: {value: 80Gi}}}]
  devices:
  - name: gpu-0-mig-1
    basic:
      taints: [{key: maintenance, effect: NoSchedule}]
      consumesCounters: [{counterSet: gpu-0-counters, counters: {memory: {value: 10Gi}}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: v1}
spec:
  driver: gpu.example.com
  nodeName: n
  pool: {name: n2, generation: 1, resourceSliceCount: 1}
  sharedCounters: [{name: set, counters: {memory: {value: 40Gi}}}]
  devices:
  - name: part
    taints: [{key: broken, value: "yes", effect: NoExecute}]
    consumesCounters: [{counterSet: set, counters: {memory: {value: 20Gi}}}]
"#;

    #[test]
    fn reads_constraints_tolerations_admin_access_taints_and_counters() {
        let mut dra = DraObjects::default();
        for l in load_str(DEPTH, "depth.yaml").expect("loads") {
            dra.add(&l.object).expect("valid");
        }
        let claim = &dra.claims[0];
        let a = &claim.spec.requests[0].alternatives[0];
        assert!(a.admin_access);
        assert_eq!(a.tolerations[0].key.as_deref(), Some("maintenance"));
        assert_eq!(a.tolerations[0].operator.as_deref(), Some("Exists"));
        let x = &claim.spec.requests[1].alternatives[0];
        assert!(!x.admin_access);
        assert_eq!(x.tolerations[0].value.as_deref(), Some("v"));
        assert_eq!(
            claim.spec.constraints,
            [
                DeviceConstraint {
                    requests: vec!["a".into(), "b/x".into()],
                    attribute: "gpu.example.com/numa".into(),
                    distinct: false
                },
                DeviceConstraint { requests: vec![], attribute: "gpu.example.com/pcieRoot".into(), distinct: false },
            ]
        );
        let held: Vec<&str> = claim.allocation.iter().flat_map(|a| &a.devices).map(|d| d.device.as_str()).collect();
        assert_eq!(held, ["gpu-1"], "an admin-access result holds nothing");
        for (slice, set, taint, used) in
            [(&dra.slices[0], "gpu-0-counters", "maintenance", "10Gi"), (&dra.slices[1], "set", "broken", "20Gi")]
        {
            let device = &slice.devices[0];
            assert_eq!(device.taints[0].key, taint, "{}", slice.name);
            assert_eq!(device.consumes_counters[0].name, set);
            assert_eq!(device.consumes_counters[0].counters["memory"].to_string(), used);
            assert_eq!(slice.shared_counters[0].name, set);
        }
        assert_eq!(dra.slices[0].shared_counters[0].counters["memory"].to_string(), "80Gi");
    }

    #[test]
    fn reads_distinct_attribute_from_later_versions() {
        let yaml = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c}\n\
            spec: {devices: {requests: [{name: r, exactly: {deviceClassName: c, count: 2}}], \
            constraints: [{distinctAttribute: gpu.example.com/numa}, {requests: [r], matchAttribute: gpu.example.com/model}]}}\n\
            ---\napiVersion: resource.k8s.io/v1beta2\nkind: ResourceClaimTemplate\nmetadata: {name: t}\n\
            spec: {spec: {devices: {requests: [{name: r, exactly: {deviceClassName: c}}], \
            constraints: [{distinctAttribute: gpu.example.com/numa}]}}}\n";
        let mut dra = DraObjects::default();
        for l in load_str(yaml, "distinct.yaml").expect("loads") {
            dra.add(&l.object).expect("valid");
        }
        let numa = DeviceConstraint { requests: vec![], attribute: "gpu.example.com/numa".into(), distinct: true };
        let model =
            DeviceConstraint { requests: vec!["r".into()], attribute: "gpu.example.com/model".into(), distinct: false };
        assert_eq!(dra.claims[0].spec.constraints, [numa.clone(), model]);
        assert_eq!(dra.templates[0].spec.constraints, [numa]);
        let bad = |constraint: &str, version: &str| {
            let request = if version == "v1beta1" { "deviceClassName: c" } else { "exactly: {deviceClassName: c}" };
            let doc = format!(
                "apiVersion: resource.k8s.io/{version}\nkind: ResourceClaim\nmetadata: {{name: c}}\n\
                 spec: {{devices: {{requests: [{{name: r, {request}}}], constraints: [{constraint}]}}}}\n"
            );
            let loaded = load_str(&doc, "bad.yaml").expect("loads");
            DraObjects::default().add(&loaded[0].object).expect_err("bad constraint").to_string()
        };
        let both = "{matchAttribute: gpu.example.com/a, distinctAttribute: gpu.example.com/b}";
        assert_eq!(bad(both, "v1"), "ResourceClaim c: a constraint with both matchAttribute and distinctAttribute");
        assert_eq!(
            bad("{distinctAttribute: numa}", "v1"),
            r#"ResourceClaim c: distinctAttribute "numa" must be fully qualified (domain/id)"#
        );
        // k8s-openapi's v1beta1 types (1.33) have no such field: an input file is refused by the loader, and a
        // watched object (decoded leniently) is named, never used without its constraint.
        let file = "apiVersion: resource.k8s.io/v1beta1\nkind: ResourceClaim\nmetadata: {name: c}\n\
            spec: {devices: {requests: [{name: r, deviceClassName: c}], constraints: [{distinctAttribute: d/n}]}}\n";
        assert!(load_str(file, "bad.yaml").is_err_and(|e| e.to_string().contains("distinctAttribute")));
        let watched: v1beta1::ResourceClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaim", "metadata": {"name": "c"},
            "spec": {"devices": {"requests": [{"name": "r", "deviceClassName": "c"}],
                "constraints": [{"distinctAttribute": "d/n"}]}}
        }))
        .expect("lenient decode");
        let e = DraObjects::default().add_claim(&watched).expect_err("constraint unreadable");
        assert!(e.to_string().contains("read from resource.k8s.io/v1beta2 and v1 documents only"), "{e}");
    }

    #[test]
    fn bad_objects_are_named_errors() {
        let bad = r#"
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaim
metadata: {name: zero, namespace: ml}
spec: {devices: {requests: [{name: r, deviceClassName: c, count: 0}]}}
"#;
        let loaded = load_str(bad, "bad.yaml").expect("loads");
        let e = DraObjects::default().add(&loaded[0].object).expect_err("count 0");
        assert_eq!(e.to_string(), "ResourceClaim zero: count 0 must be positive");
        let both = r#"
apiVersion: resource.k8s.io/v1beta1
kind: ResourceSlice
metadata: {name: s}
spec: {driver: d, nodeName: n, allNodes: true, pool: {name: p, generation: 1, resourceSliceCount: 1}}
"#;
        let loaded = load_str(both, "bad.yaml").expect("loads");
        let e = DraObjects::default().add(&loaded[0].object).expect_err("two node fields");
        assert!(e.to_string().contains("exactly one of nodeName"), "{e}");
        let unqualified = "apiVersion: resource.k8s.io/v1beta1\nkind: ResourceClaim\nmetadata: {name: c}\n\
            spec: {devices: {requests: [{name: r, deviceClassName: c}], constraints: [{matchAttribute: numa}]}}\n";
        let loaded = load_str(unqualified, "bad.yaml").expect("loads");
        let e = DraObjects::default().add(&loaded[0].object).expect_err("unqualified attribute");
        assert_eq!(e.to_string(), r#"ResourceClaim c: matchAttribute "numa" must be fully qualified (domain/id)"#);
        let effect = "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: s}\n\
            spec: {driver: d, nodeName: n, pool: {name: p, generation: 1, resourceSliceCount: 1}, \
            devices: [{name: x, taints: [{key: k, effect: PreferNoSchedule}]}]}\n";
        let loaded = load_str(effect, "bad.yaml").expect("loads");
        let e = DraObjects::default().add(&loaded[0].object).expect_err("bad effect");
        assert!(
            e.to_string().contains(r#"device x taint k: effect "PreferNoSchedule" is not NoSchedule or NoExecute"#),
            "{e}"
        );
    }
}
