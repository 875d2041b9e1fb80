//! The toy cloud's [`CloudProvider`]: instances held in memory by an [`Account`] that several clusters may share,
//! a two-type catalogue whose offerings sit in the zones of the NodePool's [`ToyNodeClass`], and termination in
//! two steps (the first delete marks the instance terminating, the next finds it gone).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use karpenter_cloudprovider::prelude::*;
use karpenter_cloudprovider::{NodeClassLookup, get_node_class};

use crate::api::{GROUP, KIND, ToyNodeClass, ToyNodeClassSpec, labels};

/// The instance types the toy cloud has: (name, vCPUs, on-demand $/hour). Memory is 4 GiB per vCPU; spot costs a
/// third of on-demand.
pub const CATALOGUE: [(&str, i64, f64); 2] = [("toy.small", 2, 0.05), ("toy.large", 8, 0.20)];

/// The reason [`ToyCloud::is_drifted`] gives for an instance outside its class's region.
pub const REGION_DRIFT: &str = "RegionDrift";

/// One instance of the account.
#[derive(Debug, Clone)]
struct Instance {
    cluster: String,
    /// The ToyNodeClass it was launched from.
    class: String,
    /// The NodeClaim as launched (with a deletion timestamp once terminating).
    claim: NodeClaim,
}

#[derive(Debug, Default)]
struct AccountState {
    next_id: u64,
    /// By provider id.
    instances: BTreeMap<String, Instance>,
    /// Offerings out of capacity: (instance type, zone, capacity type).
    exhausted: BTreeSet<(String, String, String)>,
}

/// A toy cloud account: its instances and its capacity. Clones share it; give the providers of two clusters the
/// same account to see that each finds only its own instances.
#[derive(Debug, Clone, Default)]
pub struct Account {
    state: Arc<Mutex<AccountState>>,
}

impl Account {
    /// An empty account with every offering available.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, AccountState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes `offering` unavailable (out of capacity) until [`Account::restore_capacity`].
    pub fn exhaust(&self, offering: &OfferingRef) {
        let key = (offering.instance_type.clone(), offering.zone.clone(), offering.capacity_type.clone());
        self.lock().exhausted.insert(key);
    }

    /// Makes every offering available again.
    pub fn restore_capacity(&self) {
        self.lock().exhausted.clear();
    }

    /// How many instances the account holds for `cluster`, terminating ones included.
    pub fn instance_count(&self, cluster: &str) -> usize {
        self.lock().instances.values().filter(|i| i.cluster == cluster).count()
    }
}

/// The toy cloud as one cluster's provider (see the module docs).
#[derive(Debug, Clone)]
pub struct ToyCloud {
    cluster: String,
    account: Account,
    node_classes: Arc<dyn NodeClassLookup>,
    clock: Arc<dyn Clock>,
    labels: ProviderLabels,
}

/// The provider id of an instance: `toy:///<cluster>/i-<n>`.
pub fn provider_id(cluster: &str, n: u64) -> String {
    format!("toy:///{cluster}/i-{n}")
}

/// What the cloud knows of a node class named by a reference.
enum ClassLookup {
    /// Not a ToyNodeClass reference, or no such class.
    Missing,
    /// It exists but the cloud cannot launch from it: each problem, field first.
    Invalid(String),
    /// Its spec, valid.
    Usable(ToyNodeClassSpec),
}

impl ToyCloud {
    /// The provider for `cluster` on `account`, reading ToyNodeClasses from `node_classes`.
    pub fn new(
        cluster: impl Into<String>,
        account: Account,
        node_classes: Arc<dyn NodeClassLookup>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self { cluster: cluster.into(), account, node_classes, clock, labels: labels() }
    }

    /// The cluster this provider launches for.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The account it launches in.
    pub fn account(&self) -> &Account {
        &self.account
    }

    fn class(&self, reference: &NodeClassReference) -> ClassLookup {
        if reference.group != GROUP || reference.kind != KIND {
            return ClassLookup::Missing;
        }
        match get_node_class::<ToyNodeClass>(self.node_classes.as_ref(), GROUP, KIND, &reference.name) {
            Ok(None) => ClassLookup::Missing,
            Ok(Some(class)) => {
                let problems = class.problems();
                if problems.is_empty() {
                    ClassLookup::Usable(class.spec)
                } else {
                    let problems: Vec<String> = problems.into_iter().map(|v| v.to_string()).collect();
                    ClassLookup::Invalid(problems.join("; "))
                }
            }
            Err(e) => ClassLookup::Invalid(e.to_string()),
        }
    }

    /// The catalogue in `class`'s zones, with the offerings the account has run out of marked unavailable.
    fn instance_types_for(&self, class: &ToyNodeClassSpec) -> Vec<InstanceType> {
        let account = self.account.lock();
        let zones = class.zones();
        CATALOGUE
            .iter()
            .map(|&(name, cpu, price)| {
                let mut builder = InstanceType::builder(name).cpu(cpu).memory_gib(4 * cpu).pods(110);
                for zone in &zones {
                    for offering in [Offering::on_demand(zone, price), Offering::spot(zone, price / 3.0)] {
                        let key =
                            (name.to_owned(), zone.clone(), offering.capacity_type().unwrap_or_default().to_owned());
                        let exhausted = account.exhausted.contains(&key);
                        builder = builder.offering(if exhausted { offering.unavailable() } else { offering });
                    }
                }
                builder.build()
            })
            .collect()
    }

    /// This cluster's instance with that provider id.
    fn find(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        match self.account.lock().instances.get(provider_id) {
            Some(instance) if instance.cluster == self.cluster => Ok(instance.claim.clone()),
            _ => Err(CloudProviderError::not_found(format!("no toy instance {provider_id} in {}", self.cluster))),
        }
    }
}

/// Offerings of `types` the claim could launch on, as `OfferingRef`s (for an insufficient-capacity error).
fn offering_refs(types: &[InstanceType], requirements: &Requirements, requests: &ResourceList) -> Vec<OfferingRef> {
    let mut out = Vec::new();
    for it in
        types.iter().filter(|it| requests.fits(it.allocatable()) && requirements.intersects(&it.requirements).is_ok())
    {
        for o in it.offerings.iter().filter(|o| requirements.intersects(&o.requirements).is_ok()) {
            out.push(OfferingRef::new(&it.name, o.zone().unwrap_or_default(), o.capacity_type().unwrap_or_default()));
        }
    }
    out
}

#[async_trait]
impl CloudProvider for ToyCloud {
    async fn create(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        let name = claim.metadata.name.clone().unwrap_or_default();
        let reference = &claim.spec.node_class_ref;
        let class = match self.class(reference) {
            ClassLookup::Usable(class) => class,
            ClassLookup::Missing => {
                return Err(CloudProviderError::node_class_not_ready(format!(
                    "{KIND} {:?} does not exist",
                    reference.name
                )));
            }
            ClassLookup::Invalid(problems) => {
                return Err(CloudProviderError::node_class_not_ready(format!(
                    "{KIND} {:?} is invalid: {problems}",
                    reference.name
                )));
            }
        };
        let invalid = |e: &dyn std::fmt::Display| CloudProviderError::create("InvalidNodeClaim", e.to_string());
        let requirements = claim.requirements().map_err(|e| invalid(&e))?;
        let requests = claim.spec.resources.iter().flat_map(|r| &r.requests);
        let requests = ResourceList::try_from_pairs(requests.map(|(n, q)| (n, q.as_str()))).map_err(|e| invalid(&e))?;
        let types = self.instance_types_for(&class);

        let mut account = self.account.lock();
        // Idempotent: a claim already launched in this cluster gets its instance back.
        let launched = account
            .instances
            .values()
            .find(|i| i.cluster == self.cluster && i.claim.metadata.name == claim.metadata.name);
        if let Some(instance) = launched {
            return Ok(instance.claim.clone());
        }
        if let Some(max) = class.max_nodes {
            let running = account.instances.values().filter(|i| i.cluster == self.cluster && i.class == reference.name);
            if running.count() >= max as usize {
                return Err(CloudProviderError::insufficient_capacity(
                    vec![],
                    format!("{KIND} {:?} runs its maxNodes ({max}) instances already", reference.name),
                ));
            }
        }
        let fitting = types.iter().filter(|it| requests.fits(it.allocatable()));
        let Some(choice) = cheapest_launch(fitting, &requirements) else {
            // Everything the claim could take is out of capacity (or nothing fits it at all).
            let offerings = offering_refs(&types, &requirements, &requests);
            return Err(CloudProviderError::insufficient_capacity(
                offerings,
                format!("no available toy offering fits NodeClaim {name}"),
            ));
        };
        let it = types.iter().find(|it| it.name == choice.instance_type);
        let it = it.ok_or_else(|| CloudProviderError::other("the chosen type is not in the catalogue"))?;

        // The launched claim carries its own labels and every single-valued label of the claim and the type.
        let mut labels = claim.metadata.labels.clone().unwrap_or_default();
        let single = |r: &Requirement| {
            (r.operator() == Operator::In && r.values().len() == 1).then(|| (r.key().to_owned(), r.any()))
        };
        labels.extend(requirements.iter().chain(it.requirements.iter()).filter_map(single));
        labels.insert(INSTANCE_TYPE.into(), it.name.clone());
        labels.insert(ZONE.into(), choice.zone.clone());
        labels.insert(CAPACITY_TYPE.into(), choice.capacity_type.clone());
        account.next_id += 1;
        let provider_id = provider_id(&self.cluster, account.next_id);
        let launched = NodeClaim {
            metadata: ObjectMeta {
                labels: Some(labels),
                creation_timestamp: k8s_time(self.clock.now()),
                ..claim.metadata.clone()
            },
            spec: claim.spec.clone(),
            status: Some(NodeClaimStatus {
                provider_id: Some(provider_id.clone()),
                capacity: resource_map(it.capacity()),
                allocatable: resource_map(it.allocatable()),
                ..NodeClaimStatus::default()
            }),
        };
        let instance =
            Instance { cluster: self.cluster.clone(), class: reference.name.clone(), claim: launched.clone() };
        account.instances.insert(provider_id, instance);
        Ok(launched)
    }

    /// The first call starts termination (the instance stays visible with a deletion timestamp); the next one
    /// finds it terminated and gone.
    async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudProviderError> {
        let provider_id = claim.provider_id().unwrap_or_default();
        self.find(provider_id)?;
        let mut account = self.account.lock();
        let Some(instance) = account.instances.get_mut(provider_id) else {
            return Err(CloudProviderError::not_found(provider_id));
        };
        if instance.claim.metadata.deletion_timestamp.is_some() {
            account.instances.remove(provider_id);
            return Err(CloudProviderError::not_found(format!("{provider_id} has terminated")));
        }
        instance.claim.metadata.deletion_timestamp = k8s_time(self.clock.now());
        Ok(())
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        self.find(provider_id)
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        let account = self.account.lock();
        Ok(account.instances.values().filter(|i| i.cluster == self.cluster).map(|i| i.claim.clone()).collect())
    }

    /// The catalogue in the zones of the pool's class; empty when the class is missing or invalid (its
    /// NodePool is not Ready then, and a launch names the problem).
    async fn instance_types(&self, pool: &NodePool) -> Result<Arc<[InstanceType]>, CloudProviderError> {
        Ok(match self.class(&pool.spec.template.spec.node_class_ref) {
            ClassLookup::Usable(class) => Arc::from(self.instance_types_for(&class)),
            ClassLookup::Missing | ClassLookup::Invalid(_) => Arc::from([]),
        })
    }

    /// Drifted when the instance's zone is no longer one of its class's zones (the class moved region).
    async fn is_drifted(&self, claim: &NodeClaim) -> Result<Option<DriftReason>, CloudProviderError> {
        let launched = self.find(claim.provider_id().unwrap_or_default())?;
        let ClassLookup::Usable(class) = self.class(&launched.spec.node_class_ref) else { return Ok(None) };
        let zone = launched.metadata.labels.as_ref().and_then(|l| l.get(ZONE)).cloned().unwrap_or_default();
        Ok((!class.zones().contains(&zone)).then(|| DriftReason::new(REGION_DRIFT)))
    }

    fn repair_policies(&self) -> Vec<RepairPolicy> {
        vec![]
    }

    async fn reboot(&self, _: &NodeClaim) -> Result<(), CloudProviderError> {
        Err(CloudProviderError::not_implemented("Reboot"))
    }

    fn name(&self) -> &str {
        &self.labels.name
    }

    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        vec![NodeClassKind::new(GROUP, KIND)]
    }

    fn labels(&self) -> &ProviderLabels {
        &self.labels
    }
}
