//! Per-pod data computed once per pass: requests, requirement terms, tolerations, host ports, and the
//! reasons a pod cannot be handled at all.

use std::ops::Deref;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PodSpec, Taint, Toleration, TopologySpreadConstraint};
use karpenter_api::labels;
use karpenter_api::{CompactPod, ProviderLabels};
use karpenter_requirements::{
    HostPort, Operator, PreferencePolicy, Quantity, Requirements, ResourceList, spec_host_ports, spec_requests,
    tolerates_all,
};
use rustc_hash::FxHashMap;

use super::volumes::{PodVolumes, VolumeIndex};
use crate::decision::{PodKey, UnschedulableReason};
use crate::default_spread::DefaultSpread;

/// The reason of a pod with DRA resource claims when `IGNORE_DRA_REQUESTS=true` (upstream's default).
pub const DRA_IGNORED: &str =
    "DRA resource claims are not simulated (IGNORE_DRA_REQUESTS=true; false simulates device allocation)";

/// Formerly the message for pods with topology spread constraints; topology is simulated now and this
/// message is no longer produced (kept for API stability).
pub const TOPOLOGY_NOT_SUPPORTED: &str = "topology spread constraints are not supported yet by this scheduler build";

/// One pending pod, parsed: what it is and what its spec says ([`PodFacts`], shared) and what a pass learns about
/// it.
///
/// The facts sit behind an `Arc` because disruption's simulations start each what-if from a copy of the pass's
/// pending pods: at 40,000 pending pods a copy of the parsed pods in place was ~18 MiB per simulation, on top of
/// the simulator's own copy; shared, a copy is a reference count and a few words per pod.
#[derive(Debug, Clone)]
pub(crate) struct PodData<'a> {
    facts: Arc<PodFacts<'a>>,
    /// Number of relaxable topology preferences (set by the topology builder).
    pub n_spread_anyway: usize,
    pub n_affinity_preferred: usize,
    pub n_anti_preferred: usize,
    /// Set when the pod cannot be scheduled by this pass at all.
    pub error: Option<UnschedulableReason>,
}

/// One pending pod: its identity and its parsed spec ([`SpecFacts`], shared by the pods of one spec).
#[derive(Debug)]
pub(crate) struct PodFacts<'a> {
    pub pod: &'a CompactPod,
    pub key: PodKey,
    /// `metadata.uid`; the key stands in when it is missing.
    uid: Option<&'a str>,
    spec: Arc<SpecFacts>,
    /// The default topology spread constraints the simulation gives this pod (it has none of its own).
    default_spread: Option<Arc<[TopologySpreadConstraint]>>,
    /// The pod's class for the solver's memory of existing nodes that turned such pods down, computed on first
    /// use and kept with the facts, so the many solves of a disruption pass that share the pending pods hash
    /// their labels once.
    pub existing_class: std::sync::OnceLock<Option<u64>>,
}

impl PodFacts<'_> {
    /// The topology spread constraints the simulation applies: the pod's own, or the configured defaults.
    pub fn spread_constraints(&self) -> &[TopologySpreadConstraint] {
        match &self.default_spread {
            Some(d) => d,
            None => self.pod.spec.topology_spread_constraints.as_deref().unwrap_or_default(),
        }
    }

    /// The pod's uid (the scheduler's last tie-breaker in its pod order), or its key when it has none.
    pub fn uid(&self) -> &str {
        self.uid.unwrap_or(self.key.as_str())
    }
}

/// What a pending pod's spec (in its namespace) says, parsed once per pass for all the pods that share the spec:
/// the cluster state gives equal specs one `Arc`, so the replicas of a workload share one parse. At 40,000
/// pending replicas a parse of each was ~17 MiB per pass.
#[derive(Debug, Default)]
pub(crate) struct SpecFacts {
    pub requests: ResourceList,
    pub node_selector: Requirements,
    /// Required node-affinity terms (ORed), each already intersected with nothing else.
    pub required_terms: Vec<Requirements>,
    /// Preferred node-affinity terms, heaviest first (stable among equal weights).
    pub preferred: Vec<Requirements>,
    /// The spec itself (shared with the pods), for its tolerations: borrowing nothing, a parse can outlive one
    /// solve's borrow of its pods (see [`PodMemory`]).
    pod_spec: Arc<PodSpec>,
    pub host_ports: Vec<HostPort>,
    /// Volume topology alternatives (empty: none) and (CSI driver, claim) pairs.
    pub volumes: PodVolumes,
}

impl<'a> Deref for PodData<'a> {
    type Target = PodFacts<'a>;
    fn deref(&self) -> &PodFacts<'a> {
        &self.facts
    }
}

impl Deref for PodFacts<'_> {
    type Target = SpecFacts;
    fn deref(&self) -> &SpecFacts {
        &self.spec
    }
}

impl SpecFacts {
    /// The spec's tolerations.
    pub fn tolerations(&self) -> &[Toleration] {
        self.pod_spec.tolerations.as_deref().unwrap_or(&[])
    }
}

/// How far a pod's preferences have been relaxed (upstream's preference relaxation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub(crate) struct Relaxation {
    pub dropped_terms: usize,
    pub dropped_pod_affinity: usize,
    pub dropped_pod_anti: usize,
    pub dropped_preferences: usize,
    pub dropped_spread: usize,
    pub tolerate_prefer_no_schedule: bool,
}

impl PodData<'_> {
    /// The requirements of the pod under `relax`: nodeSelector ∩ (heaviest remaining preference, if
    /// respected) ∩ the first remaining required term.
    pub fn requirements(&self, relax: &Relaxation, policy: PreferencePolicy) -> Requirements {
        let mut out = self.node_selector.clone();
        if policy == PreferencePolicy::Respect
            && let Some(p) = self.preferred.get(relax.dropped_preferences)
        {
            out.add_all(p);
        }
        if let Some(t) = self.required_terms.get(relax.dropped_terms) {
            out.add_all(t);
        }
        out
    }

    /// One relaxation step; `false` when nothing is left to relax.
    pub fn relax(&self, relax: &mut Relaxation, policy: PreferencePolicy, any_prefer_no_schedule: bool) -> bool {
        if self.required_terms.len() > relax.dropped_terms + 1 {
            relax.dropped_terms += 1;
            return true;
        }
        if relax.dropped_pod_affinity < self.n_affinity_preferred {
            relax.dropped_pod_affinity += 1;
            return true;
        }
        if relax.dropped_pod_anti < self.n_anti_preferred {
            relax.dropped_pod_anti += 1;
            return true;
        }
        if policy == PreferencePolicy::Respect && relax.dropped_preferences < self.preferred.len() {
            relax.dropped_preferences += 1;
            return true;
        }
        if relax.dropped_spread < self.n_spread_anyway {
            relax.dropped_spread += 1;
            return true;
        }
        if any_prefer_no_schedule && !relax.tolerate_prefer_no_schedule {
            relax.tolerate_prefer_no_schedule = true;
            return true;
        }
        false
    }

    /// Whether the pod tolerates `taints` (PreferNoSchedule ones too, unless relaxed away).
    pub fn tolerates<'t>(&self, relax: &Relaxation, taints: impl IntoIterator<Item = &'t Taint>) -> Result<(), String> {
        let skip_pns = relax.tolerate_prefer_no_schedule;
        tolerates_all(self.tolerations(), taints.into_iter().filter(|t| !(skip_pns && t.effect == "PreferNoSchedule")))
            .map_err(|e| e.taint)
    }
}

fn restricted(reqs: &Requirements, provider: &ProviderLabels) -> Option<UnschedulableReason> {
    reqs.keys().find(|k| provider.is_restricted(k)).map(|k| UnschedulableReason::RestrictedLabel { key: k.to_owned() })
}

/// Requests of a pod including `pods: 1`.
pub(crate) fn requests_with_pod_count(pod: &CompactPod) -> Result<ResourceList, String> {
    let mut r = spec_requests(&pod.spec).map_err(|e| format!("invalid resource request: {e}"))?;
    let pods = r.pods().saturating_add(&Quantity::from_int(1, karpenter_requirements::Format::DecimalSI));
    r.insert(karpenter_requirements::resources::PODS, pods);
    Ok(r)
}

/// A spec's parse in one namespace and why its pods cannot be handled, if they cannot.
type Parsed = (Arc<SpecFacts>, Option<UnschedulableReason>);

/// Parses pending pods, each distinct (spec, namespace) once, and gives them their default spread constraints.
/// Never fails: a pod's problems end up in its `error`.
pub(crate) fn pods_data<'a>(
    pods: impl IntoIterator<Item = &'a CompactPod>,
    provider: &ProviderLabels,
    volumes: &VolumeIndex<'_>,
    spread: &mut DefaultSpread<'_>,
) -> Vec<PodData<'a>> {
    let pods = pods.into_iter();
    let mut parsed: FxHashMap<(*const PodSpec, Option<&'a str>), Parsed> =
        FxHashMap::with_capacity_and_hasher(pods.size_hint().0, Default::default());
    pods.map(|pod| {
        let key = (Arc::as_ptr(&pod.spec), pod.metadata.namespace.as_deref());
        let (spec, error) = parsed.entry(key).or_insert_with(|| parse_spec(pod, provider, volumes));
        with_spec(pod, spec.clone(), error.clone(), spread.for_pod(pod))
    })
    .collect()
}

/// Parsed pods kept across solves (a [`crate::simulation::Simulator`]'s memory of the bound pods its views
/// place), keyed by the pod's address and, for the shared parse of a spec, the spec's address and the namespace.
/// Nothing here borrows the pods, so a simulator holding it stays covariant in its snapshot's lifetime; the
/// caller passes only pods that stay alive and in place while the memory lives, so an address names one pod.
#[derive(Debug, Default)]
pub(crate) struct PodMemory {
    pods: FxHashMap<usize, RememberedPod>,
    /// Per spec address, the parse in each namespace its pods were in.
    specs: FxHashMap<usize, Vec<(Option<String>, Parsed)>>,
}

/// What a pod's data holds beyond the pod itself.
#[derive(Debug)]
struct RememberedPod {
    key: PodKey,
    spec: Arc<SpecFacts>,
    error: Option<UnschedulableReason>,
    default_spread: Option<Arc<[TopologySpreadConstraint]>>,
}

impl PodMemory {
    /// `pod`'s data as [`pods_data`] gives it, parsed on the first call for the pod and remembered.
    pub(crate) fn data<'a>(
        &mut self,
        pod: &'a CompactPod,
        provider: &ProviderLabels,
        volumes: &VolumeIndex<'_>,
        spread: &mut DefaultSpread<'_>,
    ) -> PodData<'a> {
        let address = std::ptr::from_ref(pod) as usize;
        let specs = &mut self.specs;
        let known = self.pods.entry(address).or_insert_with(|| {
            let namespace = pod.metadata.namespace.as_deref();
            let shared = specs.entry(Arc::as_ptr(&pod.spec) as usize).or_default();
            let (spec, error) = match shared.iter().find(|(ns, _)| ns.as_deref() == namespace) {
                Some((_, parsed)) => parsed.clone(),
                None => {
                    let parsed = parse_spec(pod, provider, volumes);
                    shared.push((namespace.map(str::to_owned), parsed.clone()));
                    parsed
                }
            };
            RememberedPod { key: PodKey::of(pod), spec, error, default_spread: spread.for_pod(pod) }
        });
        assemble(pod, known.key.clone(), known.spec.clone(), known.error.clone(), known.default_spread.clone())
    }
}

fn with_spec<'a>(
    pod: &'a CompactPod,
    spec: Arc<SpecFacts>,
    error: Option<UnschedulableReason>,
    default_spread: Option<Arc<[TopologySpreadConstraint]>>,
) -> PodData<'a> {
    assemble(pod, PodKey::of(pod), spec, error, default_spread)
}

fn assemble<'a>(
    pod: &'a CompactPod,
    key: PodKey,
    spec: Arc<SpecFacts>,
    error: Option<UnschedulableReason>,
    default_spread: Option<Arc<[TopologySpreadConstraint]>>,
) -> PodData<'a> {
    let facts = PodFacts {
        pod,
        key,
        uid: pod.metadata.uid.as_deref(),
        spec,
        default_spread,
        existing_class: std::sync::OnceLock::new(),
    };
    PodData { facts: Arc::new(facts), n_spread_anyway: 0, n_affinity_preferred: 0, n_anti_preferred: 0, error }
}

/// Parses what `pod`'s spec says in its namespace (everything [`SpecFacts`] holds depends on nothing else).
fn parse_spec(
    pod: &CompactPod,
    provider: &ProviderLabels,
    volumes: &VolumeIndex<'_>,
) -> (Arc<SpecFacts>, Option<UnschedulableReason>) {
    let mut facts =
        SpecFacts { pod_spec: pod.spec.clone(), host_ports: spec_host_ports(&pod.spec), ..Default::default() };
    let error = fill(&mut facts, pod, provider, volumes).err();
    (Arc::new(facts), error)
}

fn fill(
    data: &mut SpecFacts,
    pod: &CompactPod,
    provider: &ProviderLabels,
    volumes: &VolumeIndex<'_>,
) -> Result<(), UnschedulableReason> {
    let invalid = |message: String| UnschedulableReason::InvalidPod { message };
    data.requests = requests_with_pod_count(pod).map_err(invalid)?;
    let spec = &*pod.spec;
    if let Some(sel) = &spec.node_selector {
        data.node_selector = Requirements::from_labels(sel);
    }
    if let Some(na) = spec.affinity.as_ref().and_then(|a| a.node_affinity.as_ref()) {
        for term in na.required_during_scheduling_ignored_during_execution.iter().flat_map(|r| &r.node_selector_terms) {
            if term.match_fields.as_ref().is_some_and(|f| !f.is_empty()) {
                return Err(UnschedulableReason::Unsupported {
                    message: "node affinity with matchFields is not supported (Karpenter ignores such pods)".into(),
                });
            }
            let reqs = Requirements::from_node_selector_term(term)
                .map_err(|e| invalid(format!("invalid node affinity: {e}")))?;
            if let Some(e) = restricted(&reqs, provider) {
                return Err(e);
            }
            data.required_terms.push(reqs);
        }
        let mut preferred = Vec::new();
        for p in na.preferred_during_scheduling_ignored_during_execution.iter().flatten() {
            let reqs = Requirements::from_node_selector_term(&p.preference)
                .map_err(|e| invalid(format!("invalid preferred node affinity: {e}")))?;
            preferred.push((p.weight, reqs));
        }
        preferred.sort_by_key(|p| std::cmp::Reverse(p.0));
        data.preferred = preferred.into_iter().map(|(_, r)| r).collect();
    }
    if let Some(e) = restricted(&data.node_selector, provider) {
        return Err(e);
    }
    let opted_out = std::iter::once(&data.node_selector)
        .chain(data.required_terms.first())
        .any(|r| r.get_ref(labels::NODE_POOL).is_some_and(|r| r.operator() == Operator::DoesNotExist));
    if opted_out {
        return Err(UnschedulableReason::OptedOut);
    }
    data.volumes = volumes.pod(pod).map_err(|message| UnschedulableReason::Volume { message })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::ClusterSnapshot;
    use karpenter_testing::{PodOptions, pod, requirement};
    use std::collections::BTreeMap;

    fn data(p: &k8s_openapi::api::core::v1::Pod, _policy: PreferencePolicy) -> PodData<'static> {
        let snap = ClusterSnapshot::new();
        // Leaked: the parsed data borrows the pod, and a test's pods live as long as the test anyway.
        let p: &'static CompactPod = Box::leak(Box::new(CompactPod::from(p)));
        pods_data(
            [p],
            &karpenter_testing::vocabulary::aws(),
            &VolumeIndex::new(&snap),
            &mut DefaultSpread::new(&Default::default(), &snap),
        )
        .remove(0)
    }

    #[test]
    fn replicas_of_one_spec_share_one_parse_per_namespace() {
        let snap = ClusterSnapshot::new();
        let template = CompactPod::from(pod(PodOptions { requests: [("cpu", "1")].into(), ..Default::default() }));
        let mut pods: Vec<CompactPod> = (0..3)
            .map(|i| {
                let mut p = template.clone();
                p.metadata.name = Some(format!("p{i}"));
                p
            })
            .collect();
        pods[2].metadata.namespace = Some("other".into());
        // Equal content but its own spec: parsed on its own (the cluster state is what shares equal specs).
        let mut own = CompactPod::from(pod(PodOptions { requests: [("cpu", "1")].into(), ..Default::default() }));
        own.metadata.name = Some("own".into());
        pods.push(own);
        let data = pods_data(
            pods.iter(),
            &karpenter_testing::vocabulary::aws(),
            &VolumeIndex::new(&snap),
            &mut DefaultSpread::new(&Default::default(), &snap),
        );
        assert!(Arc::ptr_eq(&data[0].spec, &data[1].spec), "same spec, same namespace: one parse");
        assert!(!Arc::ptr_eq(&data[0].spec, &data[2].spec), "volumes are looked up per namespace");
        assert!(!Arc::ptr_eq(&data[0].spec, &data[3].spec));
        assert_eq!(data.iter().map(|d| d.key.as_str()).collect::<Vec<_>>()[..2], ["default/p0", "default/p1"]);
        assert!(
            data.iter().all(|d| d.requests.cpu() == Quantity::from_int(1, karpenter_requirements::Format::DecimalSI))
        );
    }

    /// The simulator's memory (disruption's what-ifs place the same bound pods many times) gives, on the first
    /// call and on every later one, what a fresh parse of the pods gives: replicas of one spec in two namespaces,
    /// a pod with requirements and one whose input is an error.
    #[test]
    fn a_remembered_parse_is_the_fresh_parse() {
        let snap = ClusterSnapshot::new();
        let provider = karpenter_testing::vocabulary::aws();
        let template = CompactPod::from(pod(PodOptions { requests: [("cpu", "1")].into(), ..Default::default() }));
        let mut pods: Vec<CompactPod> = (0..3)
            .map(|i| {
                let mut p = template.clone();
                p.metadata.name = Some(format!("p{i}"));
                p
            })
            .collect();
        pods[2].metadata.namespace = Some("other".into());
        pods.push(CompactPod::from(pod(PodOptions {
            node_requirements: vec![requirement("kubernetes.io/arch", "In", &["arm64"])],
            requests: [("memory", "1Gi")].into(),
            ..Default::default()
        })));
        pods.push(CompactPod::from(pod(PodOptions {
            node_requirements: vec![requirement("a", "Like", &["x"])],
            ..Default::default()
        })));
        let volumes = VolumeIndex::new(&snap);
        let config = Default::default();
        let fresh = pods_data(pods.iter(), &provider, &volumes, &mut DefaultSpread::new(&config, &snap));
        let mut memory = PodMemory::default();
        for round in 0..2 {
            let mut spread = DefaultSpread::new(&config, &snap);
            let remembered: Vec<PodData<'_>> =
                pods.iter().map(|p| memory.data(p, &provider, &volumes, &mut spread)).collect();
            assert_eq!(format!("{remembered:?}"), format!("{fresh:?}"), "round {round}");
        }
        assert!(fresh[4].error.is_some(), "the invalid pod's error is part of what is compared");
    }

    #[test]
    fn bad_inputs_are_per_pod_errors() {
        let p = pod(PodOptions { node_requirements: vec![requirement("a", "Like", &["x"])], ..Default::default() });
        let e = data(&p, PreferencePolicy::Respect).error.unwrap();
        assert!(e.to_string().contains("invalid node affinity"), "{e}");
        assert_eq!(e.code(), "InvalidPod");
        let p = pod(PodOptions {
            node_selector: [("kubernetes.io/hostname".to_string(), "x".to_string())].into(),
            ..Default::default()
        });
        assert_eq!(
            data(&p, PreferencePolicy::Respect).error,
            Some(UnschedulableReason::RestrictedLabel { key: "kubernetes.io/hostname".into() })
        );
        let p = pod(PodOptions { pvcs: vec!["data".into()], ..Default::default() });
        assert_eq!(
            data(&p, PreferencePolicy::Ignore).error,
            Some(UnschedulableReason::Volume { message: "persistentvolumeclaim \"data\" not found".into() }),
            "a missing claim is a per-pod error"
        );
        let mut p = pod(PodOptions::default());
        if let Some(c) = p.spec.as_mut().and_then(|s| s.containers.first_mut()) {
            c.resources = Some(k8s_openapi::api::core::v1::ResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "cpu".to_string(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity("lots".into()),
                )])),
                ..Default::default()
            });
        }
        let e = data(&p, PreferencePolicy::Respect).error.unwrap();
        assert!(e.to_string().starts_with("invalid resource request"), "{e}");
        assert_eq!(e.code(), "InvalidPod");
    }

    #[test]
    fn relaxation_order_terms_then_preferences_then_prefer_no_schedule() {
        let mut p = pod(PodOptions { node_preferences: vec![requirement("zone", "In", &["a"])], ..Default::default() });
        let terms = vec![
            k8s_openapi::api::core::v1::NodeSelectorTerm {
                match_expressions: Some(vec![requirement("t", "In", &["1"])]),
                match_fields: None,
            },
            k8s_openapi::api::core::v1::NodeSelectorTerm {
                match_expressions: Some(vec![requirement("t", "In", &["2"])]),
                match_fields: None,
            },
        ];
        if let Some(na) = p.spec.as_mut().and_then(|s| s.affinity.as_mut()).and_then(|a| a.node_affinity.as_mut()) {
            na.required_during_scheduling_ignored_during_execution =
                Some(k8s_openapi::api::core::v1::NodeSelector { node_selector_terms: terms });
        }
        let d = data(&p, PreferencePolicy::Respect);
        assert!(d.error.is_none(), "{:?}", d.error);
        let mut r = Relaxation::default();
        let reqs = d.requirements(&r, PreferencePolicy::Respect);
        assert!(reqs.get("t").has("1") && reqs.get("zone").has("a") && !reqs.get("zone").has("b"));
        assert!(d.relax(&mut r, PreferencePolicy::Respect, true));
        assert!(d.requirements(&r, PreferencePolicy::Respect).get("t").has("2"));
        assert!(d.relax(&mut r, PreferencePolicy::Respect, true));
        assert!(!d.requirements(&r, PreferencePolicy::Respect).has("zone"));
        assert!(d.relax(&mut r, PreferencePolicy::Respect, true));
        assert!(r.tolerate_prefer_no_schedule);
        assert!(!d.relax(&mut r, PreferencePolicy::Respect, true));
        let ignore = d.requirements(&Relaxation::default(), PreferencePolicy::Ignore);
        assert!(!ignore.has("zone"), "Ignore drops preferences");
    }
}
