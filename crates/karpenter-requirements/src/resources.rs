//! Resource lists (resource name → [`Quantity`]) and pod effective requests.
//!
//! # Layout
//!
//! The scheduler calls [`ResourceList::fits`] millions of times per pass, so the four resources every pod and
//! node has — `cpu`, `ephemeral-storage`, `memory`, `pods` — live in fixed slots (no lookup, no allocation), and
//! every other (extended) resource lives in a small vector sorted by name. Iteration merges both in name order.
//! A resource that is absent differs from one present with value zero only in iteration and conversion back to
//! Kubernetes; arithmetic treats absent as zero.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KQuantity;

use crate::quantity::{Quantity, QuantityError};

/// `cpu`.
pub const CPU: &str = "cpu";
/// `memory`.
pub const MEMORY: &str = "memory";
/// `pods`.
pub const PODS: &str = "pods";
/// `ephemeral-storage`.
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// `nvidia.com/gpu`, the NVIDIA device plugin's extended resource.
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";

/// Fixed slots, in name order.
const FIXED: [&str; 4] = [CPU, EPHEMERAL_STORAGE, MEMORY, PODS];

fn fixed_index(name: &str) -> Option<usize> {
    match name {
        CPU => Some(0),
        EPHEMERAL_STORAGE => Some(1),
        MEMORY => Some(2),
        PODS => Some(3),
        _ => None,
    }
}

/// A resource quantity could not be converted or computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    /// A quantity in a Kubernetes resource list does not parse.
    #[error("resource {resource}: {source}")]
    Quantity {
        /// The resource name.
        resource: String,
        /// Why the quantity was rejected.
        source: QuantityError,
    },
    /// A sum or difference left the representable range.
    #[error("resource {resource}: arithmetic overflow")]
    Overflow {
        /// The resource name.
        resource: String,
    },
}

/// Resource name → quantity. See the module docs for the layout.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct ResourceList {
    fixed: [Option<Quantity>; 4],
    extended: Vec<(Arc<str>, Quantity)>,
}

/// Iterator over a [`ResourceList`] in name order.
#[derive(Debug)]
pub struct Iter<'a> {
    list: &'a ResourceList,
    fixed: usize,
    extended: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a Quantity);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let fixed = FIXED.get(self.fixed).map(|name| (*name, self.list.fixed.get(self.fixed)));
            let ext = self.list.extended.get(self.extended);
            match (fixed, ext) {
                (None, None) => return None,
                (Some((name, slot)), e) if e.is_none_or(|(en, _)| name < en.as_ref()) => {
                    self.fixed += 1;
                    if let Some(Some(q)) = slot {
                        return Some((name, q));
                    }
                }
                (_, Some((name, q))) => {
                    self.extended += 1;
                    return Some((name.as_ref(), q));
                }
                (Some(_), None) => return None, // unreachable: covered by the guard above
            }
        }
    }
}

impl ResourceList {
    /// The empty list.
    pub fn new() -> Self {
        ResourceList::default()
    }

    /// The quantity for `name`, if present.
    pub fn get(&self, name: &str) -> Option<&Quantity> {
        match fixed_index(name) {
            Some(i) => self.fixed.get(i).and_then(Option::as_ref),
            None => self
                .extended
                .binary_search_by(|(n, _)| n.as_ref().cmp(name))
                .ok()
                .and_then(|i| self.extended.get(i))
                .map(|(_, q)| q),
        }
    }

    /// The quantity for `name`, zero if absent.
    pub fn get_or_zero(&self, name: &str) -> Quantity {
        self.get(name).copied().unwrap_or(Quantity::ZERO)
    }

    /// `cpu`, zero if absent.
    pub fn cpu(&self) -> Quantity {
        self.fixed[0].unwrap_or(Quantity::ZERO)
    }

    /// `memory`, zero if absent.
    pub fn memory(&self) -> Quantity {
        self.fixed[2].unwrap_or(Quantity::ZERO)
    }

    /// `pods`, zero if absent.
    pub fn pods(&self) -> Quantity {
        self.fixed[3].unwrap_or(Quantity::ZERO)
    }

    /// `ephemeral-storage`, zero if absent.
    pub fn ephemeral_storage(&self) -> Quantity {
        self.fixed[1].unwrap_or(Quantity::ZERO)
    }

    /// Sets `name` to `quantity` (replacing any previous value).
    pub fn insert(&mut self, name: &str, quantity: Quantity) {
        match fixed_index(name) {
            Some(i) => {
                if let Some(slot) = self.fixed.get_mut(i) {
                    *slot = Some(quantity);
                }
            }
            None => match self.extended.binary_search_by(|(n, _)| n.as_ref().cmp(name)) {
                Ok(i) => {
                    if let Some(e) = self.extended.get_mut(i) {
                        e.1 = quantity;
                    }
                }
                Err(i) => self.extended.insert(i, (Arc::from(name), quantity)),
            },
        }
    }

    /// Builder form of [`ResourceList::insert`].
    pub fn with(mut self, name: &str, quantity: Quantity) -> Self {
        self.insert(name, quantity);
        self
    }

    /// Removes `name`.
    pub fn remove(&mut self, name: &str) -> Option<Quantity> {
        match fixed_index(name) {
            Some(i) => self.fixed.get_mut(i).and_then(Option::take),
            None => match self.extended.binary_search_by(|(n, _)| n.as_ref().cmp(name)) {
                Ok(i) => Some(self.extended.remove(i).1),
                Err(_) => None,
            },
        }
    }

    /// Entries in name order.
    pub fn iter(&self) -> Iter<'_> {
        Iter { list: self, fixed: 0, extended: 0 }
    }

    /// Number of present resources.
    pub fn len(&self) -> usize {
        self.fixed.iter().flatten().count() + self.extended.len()
    }

    /// True when no resource is present.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when every present quantity is zero (or nothing is present).
    pub fn is_zero(&self) -> bool {
        self.iter().all(|(_, q)| q.is_zero())
    }

    /// True when any present quantity is negative.
    pub fn any_negative(&self) -> bool {
        self.fixed.iter().flatten().any(Quantity::is_negative) || self.extended.iter().any(|(_, q)| q.is_negative())
    }

    /// Combines two lists resource by resource over the union of names.
    fn combine(
        &self,
        other: &ResourceList,
        f: impl Fn(&Quantity, &Quantity) -> Option<Quantity>,
    ) -> Result<ResourceList, ResourceError> {
        let overflow = |name: &str| ResourceError::Overflow { resource: name.to_owned() };
        let mut out = ResourceList::new();
        for (i, name) in FIXED.iter().enumerate() {
            out.fixed[i] = match (self.fixed[i], other.fixed[i]) {
                (None, None) => None,
                (a, b) => {
                    Some(f(&a.unwrap_or(Quantity::ZERO), &b.unwrap_or(Quantity::ZERO)).ok_or_else(|| overflow(name))?)
                }
            };
        }
        let (a, b) = (&self.extended, &other.extended);
        out.extended.reserve(a.len().max(b.len()));
        let (mut i, mut j) = (0, 0);
        loop {
            let (name, x, y) = match (a.get(i), b.get(j)) {
                (None, None) => break,
                (Some((n, x)), None) => {
                    i += 1;
                    (n, *x, Quantity::ZERO)
                }
                (None, Some((n, y))) => {
                    j += 1;
                    (n, Quantity::ZERO, *y)
                }
                (Some((n, x)), Some((m, y))) => match n.cmp(m) {
                    Ordering::Less => {
                        i += 1;
                        (n, *x, Quantity::ZERO)
                    }
                    Ordering::Greater => {
                        j += 1;
                        (m, Quantity::ZERO, *y)
                    }
                    Ordering::Equal => {
                        i += 1;
                        j += 1;
                        (n, *x, *y)
                    }
                },
            };
            out.extended.push((name.clone(), f(&x, &y).ok_or_else(|| overflow(name))?));
        }
        Ok(out)
    }

    /// `self + other` per resource (union of names), or the first resource whose sum overflows.
    pub fn checked_add(&self, other: &ResourceList) -> Result<ResourceList, ResourceError> {
        self.combine(other, |a, b| a.checked_add(b))
    }

    /// `self - other` per resource (union of names; absent counts as zero, so results may be negative), or the
    /// first resource whose difference overflows.
    pub fn checked_sub(&self, other: &ResourceList) -> Result<ResourceList, ResourceError> {
        self.combine(other, |a, b| a.checked_sub(b))
    }

    /// `self + other`, saturating at the representable range (≈ ±9.2·10¹⁸ units) instead of failing.
    pub fn add(&self, other: &ResourceList) -> ResourceList {
        self.combine(other, |a, b| Some(a.saturating_add(b))).unwrap_or_default()
    }

    /// `self - other`, saturating at the representable range instead of failing.
    pub fn sub(&self, other: &ResourceList) -> ResourceList {
        self.combine(other, |a, b| Some(a.saturating_add(&b.neg()))).unwrap_or_default()
    }

    /// Per-resource maximum over the union of names (absent counts as zero).
    pub fn max(&self, other: &ResourceList) -> ResourceList {
        self.combine(other, |a, b| Some(*a.max_of(b))).unwrap_or_default()
    }

    /// Whether requests `self` fit into `available`: false if any available quantity is negative, or any request
    /// exceeds what is available (an absent available resource counts as zero). Never allocates.
    pub fn fits(&self, available: &ResourceList) -> bool {
        if available.any_negative() {
            return false;
        }
        for i in 0..FIXED.len() {
            if let Some(req) = &self.fixed[i]
                && *req > available.fixed[i].unwrap_or(Quantity::ZERO)
            {
                return false;
            }
        }
        // Merge walk: both extended lists are sorted.
        let mut avail = available.extended.iter().peekable();
        for (name, req) in &self.extended {
            while avail.next_if(|(n, _)| n < name).is_some() {}
            let have = match avail.peek() {
                Some((n, q)) if n == name => *q,
                _ => Quantity::ZERO,
            };
            if *req > have {
                return false;
            }
        }
        true
    }

    /// A list from `(resource name, quantity text)` pairs, e.g. `[(CPU, "500m"), (MEMORY, "1Gi")]`; the error names
    /// the first resource whose quantity does not parse.
    ///
    /// ```
    /// use karpenter_requirements::ResourceList;
    /// use karpenter_requirements::resources::{CPU, MEMORY};
    ///
    /// let requests = ResourceList::try_from_pairs([(CPU, "500m"), (MEMORY, "1Gi")]).unwrap();
    /// assert_eq!(requests.cpu().milli_value(), Some(500));
    /// let err = ResourceList::try_from_pairs([(CPU, "lots")]).unwrap_err();
    /// assert!(err.to_string().starts_with("resource cpu:"), "{err}");
    /// ```
    pub fn try_from_pairs<I, N, Q>(pairs: I) -> Result<ResourceList, ResourceError>
    where
        I: IntoIterator<Item = (N, Q)>,
        N: AsRef<str>,
        Q: AsRef<str>,
    {
        let mut out = ResourceList::new();
        for (name, text) in pairs {
            let name = name.as_ref();
            let q: Quantity = text
                .as_ref()
                .parse()
                .map_err(|source| ResourceError::Quantity { resource: name.to_owned(), source })?;
            out.insert(name, q);
        }
        Ok(out)
    }

    /// Parses a Kubernetes resource list; the error names the resource with a bad quantity.
    pub fn from_k8s(list: &BTreeMap<String, KQuantity>) -> Result<ResourceList, ResourceError> {
        let mut out = ResourceList::new();
        for (name, q) in list {
            let q =
                Quantity::try_from(q).map_err(|source| ResourceError::Quantity { resource: name.clone(), source })?;
            out.insert(name, q);
        }
        Ok(out)
    }

    /// As a Kubernetes resource list (canonical quantity strings).
    pub fn to_k8s(&self) -> BTreeMap<String, KQuantity> {
        self.iter().map(|(n, q)| (n.to_owned(), KQuantity::from(q))).collect()
    }
}

impl TryFrom<&BTreeMap<String, KQuantity>> for ResourceList {
    type Error = ResourceError;
    fn try_from(list: &BTreeMap<String, KQuantity>) -> Result<Self, Self::Error> {
        ResourceList::from_k8s(list)
    }
}

impl From<&ResourceList> for BTreeMap<String, KQuantity> {
    fn from(list: &ResourceList) -> Self {
        list.to_k8s()
    }
}

impl<'a> FromIterator<(&'a str, Quantity)> for ResourceList {
    fn from_iter<T: IntoIterator<Item = (&'a str, Quantity)>>(iter: T) -> Self {
        let mut out = ResourceList::new();
        for (n, q) in iter {
            out.insert(n, q);
        }
        out
    }
}

impl<'a> IntoIterator for &'a ResourceList {
    type Item = (&'a str, &'a Quantity);
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl fmt::Debug for ResourceList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter().map(|(n, q)| (n, q.to_string()))).finish()
    }
}

impl fmt::Display for ResourceList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (n, q)) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{n}: {q}")?;
        }
        f.write_str("}")
    }
}

/// A container's requests with limits filling in resources that have no request (Kubernetes defaults a
/// missing request to the limit).
fn container_requests(c: &Container) -> Result<ResourceList, ResourceError> {
    let Some(res) = &c.resources else { return Ok(ResourceList::new()) };
    let mut out = match &res.limits {
        Some(limits) => ResourceList::from_k8s(limits)?,
        None => ResourceList::new(),
    };
    if let Some(requests) = &res.requests {
        for (name, q) in ResourceList::from_k8s(requests)?.iter() {
            out.insert(name, *q);
        }
    }
    Ok(out)
}

/// The effective requests of a pod, as Kubernetes' scheduler computes them (sidecar-aware):
///
/// * per container, requests with limits used for resources that have no request;
/// * `app` = sum over `containers`;
/// * init containers in order, tracking `sidecars` = running sum of restartable init containers
///   (`restartPolicy: Always`): a sidecar adds its requests to `app` and to `sidecars`, and its own "init-time
///   peak" is the new `sidecars`; a regular init container's peak is its requests + `sidecars` so far;
///   `init` = per-resource max over those peaks;
/// * result = per-resource `max(app, init)` + `spec.overhead`.
///
/// Not implemented: pod-level `spec.resources` (Kubernetes 1.32+ alpha/beta) and in-place resize status
/// (allocated resources); the spec's container requests are used.
pub fn pod_requests(pod: &Pod) -> Result<ResourceList, ResourceError> {
    pod.spec.as_ref().map_or_else(|| Ok(ResourceList::new()), spec_requests)
}

/// [`pod_requests`] of a pod with this spec.
pub fn spec_requests(spec: &PodSpec) -> Result<ResourceList, ResourceError> {
    let mut app = ResourceList::new();
    for c in &spec.containers {
        app = app.checked_add(&container_requests(c)?)?;
    }
    let mut sidecars = ResourceList::new();
    let mut init = ResourceList::new();
    for c in spec.init_containers.iter().flatten() {
        let reqs = container_requests(c)?;
        let peak = if c.restart_policy.as_deref() == Some("Always") {
            app = app.checked_add(&reqs)?;
            sidecars = sidecars.checked_add(&reqs)?;
            sidecars.clone()
        } else {
            reqs.checked_add(&sidecars)?
        };
        init = init.max(&peak);
    }
    let mut out = app.max(&init);
    if let Some(overhead) = &spec.overhead {
        out = out.checked_add(&ResourceList::from_k8s(overhead)?)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};

    fn q(s: &str) -> Quantity {
        s.parse().unwrap()
    }

    fn rl(entries: &[(&str, &str)]) -> ResourceList {
        entries.iter().map(|(n, v)| (*n, q(v))).collect()
    }

    fn k8s(entries: &[(&str, &str)]) -> BTreeMap<String, KQuantity> {
        entries.iter().map(|(n, v)| (n.to_string(), KQuantity(v.to_string()))).collect()
    }

    #[test]
    fn iteration_is_name_ordered() {
        let l = rl(&[
            ("pods", "1"),
            ("nvidia.com/gpu", "1"),
            ("cpu", "1"),
            ("aws.amazon.com/neuron", "2"),
            ("memory", "1Gi"),
            ("hugepages-2Mi", "0"),
        ]);
        let names: Vec<&str> = l.iter().map(|(n, _)| n).collect();
        assert_eq!(names, vec!["aws.amazon.com/neuron", "cpu", "hugepages-2Mi", "memory", "nvidia.com/gpu", "pods"]);
        assert_eq!(l.len(), 6);
        assert_eq!(
            l.to_string(),
            "{aws.amazon.com/neuron: 2, cpu: 1, hugepages-2Mi: 0, memory: 1Gi, nvidia.com/gpu: 1, pods: 1}"
        );
    }

    #[test]
    fn arithmetic_over_union() {
        let a = rl(&[("cpu", "1"), ("nvidia.com/gpu", "1")]);
        let b = rl(&[("cpu", "500m"), ("memory", "1Gi"), ("a.com/x", "3")]);
        assert_eq!(a.add(&b), rl(&[("cpu", "1500m"), ("memory", "1Gi"), ("a.com/x", "3"), ("nvidia.com/gpu", "1")]));
        let d = a.sub(&b);
        assert_eq!(d, rl(&[("cpu", "500m"), ("memory", "-1Gi"), ("a.com/x", "-3"), ("nvidia.com/gpu", "1")]));
        assert!(d.any_negative());
        assert_eq!(a.max(&b), rl(&[("cpu", "1"), ("memory", "1Gi"), ("a.com/x", "3"), ("nvidia.com/gpu", "1")]));
        let big = rl(&[("x.com/y", "9223372036854775807")]);
        assert_eq!(
            big.checked_add(&rl(&[("x.com/y", "1")])),
            Err(ResourceError::Overflow { resource: "x.com/y".into() })
        );
        assert_eq!(big.add(&big).get("x.com/y"), big.get("x.com/y"));
        assert!(ResourceList::new().is_zero() && rl(&[("cpu", "0")]).is_zero() && !a.is_zero());
    }

    #[test]
    fn fits_rules() {
        let avail = rl(&[("cpu", "2"), ("memory", "4Gi"), ("nvidia.com/gpu", "1")]);
        assert!(rl(&[("cpu", "2"), ("memory", "1Gi")]).fits(&avail));
        assert!(!rl(&[("cpu", "2001m")]).fits(&avail));
        assert!(rl(&[("nvidia.com/gpu", "1")]).fits(&avail));
        assert!(!rl(&[("nvidia.com/gpu", "2")]).fits(&avail));
        assert!(!rl(&[("a.com/other", "1")]).fits(&avail), "missing available resource counts as zero");
        assert!(rl(&[("a.com/other", "0")]).fits(&avail));
        assert!(!rl(&[("pods", "1")]).fits(&avail));
        let negative = avail.sub(&rl(&[("b.com/z", "1")]));
        assert!(!ResourceList::new().fits(&negative), "negative available never fits");
    }

    #[test]
    fn k8s_round_trip_and_errors() {
        let m = k8s(&[("cpu", "1000m"), ("memory", "1.5Gi"), ("nvidia.com/gpu", "1")]);
        let l = ResourceList::from_k8s(&m).unwrap();
        let back = l.to_k8s();
        assert_eq!(back.get("cpu").map(|q| q.0.as_str()), Some("1"));
        assert_eq!(back.get("memory").map(|q| q.0.as_str()), Some("1536Mi"));
        let err = ResourceList::from_k8s(&k8s(&[("memory", "lots")])).unwrap_err();
        assert!(err.to_string().starts_with("resource memory:"), "{err}");
    }

    fn container(requests: &[(&str, &str)], limits: &[(&str, &str)], restart: Option<&str>) -> Container {
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: (!requests.is_empty()).then(|| k8s(requests)),
                limits: (!limits.is_empty()).then(|| k8s(limits)),
                ..Default::default()
            }),
            restart_policy: restart.map(str::to_owned),
            ..Default::default()
        }
    }

    #[test]
    fn pod_requests_rules() {
        let pod = |containers, init, overhead: Option<&[(&str, &str)]>| Pod {
            spec: Some(PodSpec {
                containers,
                init_containers: Some(init),
                overhead: overhead.map(k8s),
                ..Default::default()
            }),
            ..Default::default()
        };
        // sum of app containers; limits used where requests are absent
        let p = pod(
            vec![
                container(&[("cpu", "1")], &[("cpu", "2"), ("memory", "1Gi")], None),
                container(&[("cpu", "500m")], &[], None),
            ],
            vec![],
            None,
        );
        assert_eq!(pod_requests(&p).unwrap(), rl(&[("cpu", "1500m"), ("memory", "1Gi")]));
        // a big regular init container dominates
        let p = pod(vec![container(&[("cpu", "1")], &[], None)], vec![container(&[("cpu", "3")], &[], None)], None);
        assert_eq!(pod_requests(&p).unwrap(), rl(&[("cpu", "3")]));
        // sidecars add to app and to later init containers
        let p = pod(
            vec![container(&[("cpu", "1")], &[], None)],
            vec![
                container(&[("cpu", "500m"), ("memory", "100Mi")], &[], Some("Always")),
                container(&[("cpu", "2")], &[], None),
                container(&[("cpu", "200m")], &[], Some("Always")),
            ],
            Some(&[("cpu", "100m")]),
        );
        // app = 1 + 0.5 + 0.2 = 1.7; init peaks = 0.5, 2.5, 0.7 ⇒ 2.5; + overhead 0.1
        assert_eq!(pod_requests(&p).unwrap(), rl(&[("cpu", "2600m"), ("memory", "100Mi")]));
        assert!(pod_requests(&Pod::default()).unwrap().is_empty());
        let bad = pod(vec![container(&[("cpu", "x")], &[], None)], vec![], None);
        assert!(pod_requests(&bad).is_err());
    }
}
