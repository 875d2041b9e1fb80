//! Placing one pod under one relaxation ([`Solver::add`]), in upstream's order: an existing node (in-flight
//! NodeClaims of the cluster included), then a NodeClaim this pass has already opened, then a new NodeClaim from a
//! template in weight order. Each step is a search and a commit: the search only reads the solver, the commit
//! records the placement everywhere it counts (capacity, ports, volumes, devices, reservations, topology, limits).

use karpenter_api::labels;
use karpenter_requirements::{HostPortUsage, PreferencePolicy, Requirement, Requirements, ResourceList};

use super::dra::Commit;
use super::pods::Relaxation;
use super::reservations::Held;
use super::topology::{Place, Prepared, Topology};
use super::volumes::ClaimVolumes;
use super::{Candidate, DOMAIN_MULTI, DOMAIN_OPEN, EXISTING_MEMORY_MIN_PODS, NewClaim, Solver, add_volumes};
use crate::decision::{NodePoolRejection, RejectionKind, UnschedulableReason};

/// A pod's requirements under one relaxation, as every check takes them: with preferences (as the policy says),
/// without them, and what the topology narrowed them to.
type PodFit<'r> = (&'r Requirements, &'r Requirements, &'r Prepared);

/// The pod-affinity pre-check over domain ids: per affinity key of the pod, the key's index and the ids of the
/// domains it allows; `None` when a key is not indexed (then every claim gets the full check).
type AffinityIds = Option<Vec<(usize, Vec<u32>)>>;

impl Solver<'_> {
    /// Places pod `i` under `relax`, or says why no node, open claim or template takes it.
    pub(super) fn add(&mut self, i: usize, relax: &Relaxation) -> Result<(), UnschedulableReason> {
        let pod = &self.pods[i];
        let reqs = pod.requirements(relax, self.options.preference_policy);
        let strict = pod.requirements(relax, PreferencePolicy::Ignore);
        let prepared = self.topology.prepare(i, relax, &strict);
        let fit = (&reqs, &strict, &prepared);
        if self.add_to_existing_node(i, relax, fit) || self.add_to_open_claim(i, relax, fit) {
            return Ok(());
        }
        self.add_to_new_claim(i, relax, fit)
    }

    /// Step 1: the first existing node, in order, after those known not to take a pod like this one.
    fn add_to_existing_node(&mut self, i: usize, relax: &Relaxation, fit: PodFit<'_>) -> bool {
        // The memory pays off with many interchangeable pods (a provisioning pass's replicas); a disruption
        // simulation places one candidate's few pods, where hashing them costs more than the scan it saves.
        let remember = !self.existing.is_empty() && self.pods.len() >= EXISTING_MEMORY_MIN_PODS;
        let class = if remember { self.existing_class(i).map(|c| (c, *relax)) } else { None };
        let mut from = class.and_then(|c| self.existing_unfit.get(&c).copied()).unwrap_or(0);
        while let Some(n) = self.first_existing_fit(i, relax, fit, from) {
            // Devices last: the search is the costliest check, and only pods with claims make it.
            let devices = match self.dra.as_mut() {
                Some(d) if d.has_claims(i) => match d.check_existing(i, n, &self.existing[n]) {
                    Some(commit) => Some(commit),
                    None => {
                        from = n + 1;
                        continue;
                    }
                },
                _ => None,
            };
            self.commit_to_existing_node(i, relax, n, devices);
            if let Some(c) = class {
                self.existing_unfit.insert(c, n);
            }
            return true;
        }
        if let Some(c) = class {
            self.existing_unfit.insert(c, self.existing.len());
        }
        false
    }

    /// Records pod `i` on existing node `n` (with the devices the DRA check found there).
    fn commit_to_existing_node(&mut self, i: usize, relax: &Relaxation, n: usize, devices: Option<Commit>) {
        if let (Some(d), Some(commit)) = (self.dra.as_mut(), devices) {
            d.commit_existing(n, commit);
        }
        let pod = &self.pods[i];
        let node = &mut self.existing[n];
        node.available = node.available.sub(&pod.requests);
        node.ports.add(pod.host_ports.iter().cloned());
        node.volumes.add(&pod.volumes.claims);
        node.pods.push(i);
        let place = Place { requirements: &node.requirements, taints: &node.taints, provider: None };
        self.topology.record(i, relax, &place);
    }

    /// Step 2: the NodeClaims this pass has opened, fewest pods first.
    ///
    /// `claim_order` is kept sorted by (pods, creation) instead of sorting every claim per pod. When a hostname
    /// group of the pod is already full on every claim (hostname anti-affinity: one node per pod), the scan is
    /// skipped: `quick_reject` would turn each claim down. Pods of a class whose claims all have no room for it go
    /// straight to a new claim.
    fn add_to_open_claim(&mut self, i: usize, relax: &Relaxation, fit: PodFit<'_>) -> bool {
        let skip = self.topology.rejects_all_claims(i, relax, self.claims.len());
        debug_assert!(
            !skip || self.claims.iter().all(|c| self.topology.quick_reject(i, relax, &c.hostname)),
            "rejects_all_claims must imply quick_reject on every claim"
        );
        let room_class = self.room_classes.class(i);
        let all_full = room_class.is_some_and(|k| self.no_room.count(k) == self.claims.len());
        let scan = if skip || all_full { 0 } else { self.claim_order.len() };
        let affinity = self.affinity_domain_ids(fit.2);
        for o in 0..scan {
            let Some(&c) = self.claim_order.get(o) else { break };
            // First, before the claim itself is read: most claims a pod of a large workload meets are full.
            if room_class.is_some_and(|k| self.no_room.has(k, c)) {
                debug_assert!(
                    self.claims.get(c).is_none_or(|claim| self.templates.get(claim.template).is_none_or(|t| {
                        self.can_add_explained(t, claim, i, fit, relax, &claim.its, false, &mut false).is_err()
                    })),
                    "a claim with no room for a class must turn its pods down"
                );
                continue;
            }
            let claim = &self.claims[c];
            let Some(template) = self.templates.get(claim.template) else { continue };
            if self.open_claim_affinity_rejects(c, &affinity, i, relax, fit)
                || self.topology.quick_reject(i, relax, &claim.hostname)
            {
                continue;
            }
            let mut no_room = false;
            let added = self.can_add_explained(template, claim, i, fit, relax, &claim.its, false, &mut no_room);
            let held = added.as_ref().ok().map(|cand| {
                let mode = self.options.reserved_offering_mode;
                self.reservations.plan(template, &cand.its, &cand.requirements, self.provider, &claim.held, mode)
            });
            if let (Ok(cand), Some(Ok(held))) = (added, held) {
                self.commit_to_open_claim(i, relax, o, cand, held);
                return true;
            }
            if let (true, Some(k)) = (no_room, room_class) {
                self.no_room.insert(k, c);
            }
        }
        false
    }

    /// The pod's affinity domains as ids of `domain_ids`, for [`Self::open_claim_affinity_rejects`].
    fn affinity_domain_ids(&self, prepared: &Prepared) -> AffinityIds {
        prepared
            .affinity()
            .iter()
            .map(|(key, allowed)| {
                let k = self.affinity_keys.iter().position(|x| x == key)?;
                let ids = self.domain_ids.get(k)?;
                Some((k, allowed.iter().filter_map(|d| ids.get(d).copied()).collect()))
            })
            .collect()
    }

    /// Whether the pod's required affinity rules out open claim `c`: over domain ids when the claim has one known
    /// domain per key (no key lookups), else [`Topology::affinity_rejects`] on its requirements.
    fn open_claim_affinity_rejects(
        &self,
        c: usize,
        affinity: &AffinityIds,
        i: usize,
        relax: &Relaxation,
        fit: PodFit<'_>,
    ) -> bool {
        let claim = &self.claims[c];
        let prepared = fit.2;
        let rejects = match (affinity, self.claim_domains.get(c)) {
            (Some(aff), Some(doms)) if aff.iter().all(|(k, _)| doms.get(*k).is_some_and(|&d| d != DOMAIN_MULTI)) => {
                aff.iter().any(|(k, allowed)| doms.get(*k).is_some_and(|&d| d != DOMAIN_OPEN && !allowed.contains(&d)))
            }
            _ => Topology::affinity_rejects(prepared, &claim.requirements),
        };
        debug_assert_eq!(
            rejects,
            Topology::affinity_rejects(prepared, &claim.requirements),
            "domain ids must agree with affinity_rejects"
        );
        debug_assert!(
            !rejects
                || self.templates.get(claim.template).is_none_or(|t| {
                    self.can_add_explained(t, claim, i, fit, relax, &claim.its, false, &mut false).is_err()
                }),
            "affinity_rejects must imply that CanAdd fails"
        );
        rejects
    }

    /// Records pod `i` on the open claim at `o` in `claim_order`, narrowed to the candidate `cand`.
    fn commit_to_open_claim(&mut self, i: usize, relax: &Relaxation, o: usize, cand: Candidate, held: Held) {
        let c = self.claim_order[o];
        let pod = &self.pods[i];
        let claim = &mut self.claims[c];
        self.reservations.commit(&claim.held, &held);
        claim.held = held;
        claim.requirements = cand.requirements;
        claim.its = cand.its;
        claim.requests = cand.requests;
        claim.min_values_relaxed |= cand.min_values_relaxed;
        if let Some(d) = self.dra.as_mut() {
            d.commit_new(claim.id, &cand.dra_claims, cand.dra_devices);
        }
        claim.dra_claims.extend(cand.dra_claims);
        claim.ports.add(pod.host_ports.iter().cloned());
        add_volumes(&mut claim.volumes, &pod.volumes.claims);
        claim.pods.push(i);
        let place = Place {
            requirements: &claim.requirements,
            taints: &self.templates[claim.template].taints,
            provider: Some(self.provider),
        };
        self.topology.record(i, relax, &place);
        self.index_claim_domains(c);
        self.reorder_claim(o);
    }

    /// Step 3: a new NodeClaim from the first template, in weight order, that takes the pod; else every template's
    /// reason.
    fn add_to_new_claim(&mut self, i: usize, relax: &Relaxation, fit: PodFit<'_>) -> Result<(), UnschedulableReason> {
        if let Some(r) = &self.no_templates_reason {
            return Err(r.clone());
        }
        let mut reasons = Vec::new();
        for t in 0..self.templates.len() {
            match self.add_to_template(i, relax, fit, t) {
                Ok(()) => return Ok(()),
                Err(reason) => reasons.push(reason),
            }
        }
        Err(UnschedulableReason::NodePools(reasons))
    }

    /// Opens a NodeClaim from template `t` for pod `i`, or says why the template cannot take it.
    fn add_to_template(
        &mut self,
        i: usize,
        relax: &Relaxation,
        fit: PodFit<'_>,
        t: usize,
    ) -> Result<(), NodePoolRejection> {
        let template = &self.templates[t];
        if let Some(u) = &template.unusable {
            return Err(u.clone());
        }
        if let Some(b) = template.limit_block(self.cluster.as_ref()) {
            return Err(b);
        }
        let fresh = self.fresh_claim(t);
        if template.within_limits.is_empty() {
            return Err(match self.can_add_any_type(i, relax, fit, t, &fresh) {
                Ok(c) => template.limit_reason(&c.its, self.cluster.as_ref()),
                Err(e) => e,
            });
        }
        let added = self.can_add(template, &fresh, i, fit, relax, &template.within_limits).and_then(|cand| {
            let mode = self.options.reserved_offering_mode;
            match self.reservations.plan(template, &cand.its, &cand.requirements, self.provider, &fresh.held, mode) {
                Ok(held) => Ok((cand, held)),
                Err(refusal) => {
                    Err(NodePoolRejection::new(&template.name, RejectionKind::Offerings, refusal.to_string()))
                }
            }
        });
        match added {
            Ok((cand, held)) => {
                self.commit_new_claim(i, relax, fresh, cand, held);
                Ok(())
            }
            // If the only instance types that would fit are over the limits, say so.
            Err(e) if template.within_limits.len() < template.its.len() => {
                match self.can_add_any_type(i, relax, fit, t, &fresh) {
                    Ok(c) => Err(template.limit_reason(&c.its, self.cluster.as_ref())),
                    Err(_) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// The empty NodeClaim template `t` would open next (its hostname is the template's next).
    fn fresh_claim(&self, t: usize) -> NewClaim {
        let template = &self.templates[t];
        let hostname = format!("{}-{}", template.name, template.claims_created + 1);
        let mut requirements = template.requirements.clone();
        requirements.add(Requirement::in_values(labels::HOSTNAME, [hostname.as_str()]));
        NewClaim {
            template: t,
            hostname,
            requirements,
            its: Vec::new(),
            requests: ResourceList::new(),
            pods: Vec::new(),
            ports: HostPortUsage::new(),
            volumes: ClaimVolumes::new(),
            min_values_relaxed: false,
            held: Held::default(),
            id: self.claims.len(),
            dra_claims: Vec::new(),
        }
    }

    /// `can_add` over every instance type of template `t`, limits aside: tells a pod that only types over the
    /// limits would take apart from one no type takes.
    fn can_add_any_type(
        &self,
        i: usize,
        relax: &Relaxation,
        fit: PodFit<'_>,
        t: usize,
        fresh: &NewClaim,
    ) -> Result<Candidate, NodePoolRejection> {
        let template = &self.templates[t];
        let all: Vec<u32> = (0..template.its.len() as u32).collect();
        self.can_add(template, fresh, i, fit, relax, &all)
    }

    /// Opens `claim` for pod `i`, narrowed to the candidate `cand`: its reservations, devices and instance types
    /// counted against the template's and the cluster's limits.
    fn commit_new_claim(&mut self, i: usize, relax: &Relaxation, mut claim: NewClaim, cand: Candidate, held: Held) {
        let t = claim.template;
        self.reservations.commit(&claim.held, &held);
        claim.held = held;
        claim.requirements = cand.requirements;
        claim.its = cand.its;
        claim.requests = cand.requests;
        claim.min_values_relaxed = cand.min_values_relaxed;
        if let Some(d) = self.dra.as_mut() {
            d.commit_new(claim.id, &cand.dra_claims, cand.dra_devices);
        }
        claim.dra_claims = cand.dra_claims;
        let pod = &self.pods[i];
        claim.ports.add(pod.host_ports.iter().cloned());
        add_volumes(&mut claim.volumes, &pod.volumes.claims);
        claim.pods.push(i);
        if let Some(cluster) = self.cluster.as_mut() {
            let names = cluster.limits.iter().map(|(name, _)| name);
            cluster.consume(&self.templates[t].claim_usage(&claim.its, names));
            for other in &mut self.templates {
                other.retain_within_cluster(cluster);
            }
        }
        let template = &mut self.templates[t];
        template.claims_created += 1;
        template.consume(&claim.its);
        let place =
            Place { requirements: &claim.requirements, taints: &template.taints, provider: Some(self.provider) };
        self.topology.record(i, relax, &place);
        self.claims.push(claim);
        self.index_claim_domains(self.claims.len() - 1);
        self.claim_order.push(self.claims.len() - 1);
        self.reorder_claim(self.claim_order.len() - 1);
    }
}
