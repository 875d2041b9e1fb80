//! A toy cloud implementing `CloudProvider`, checked by the conformance suite:
//! `cargo run -p karpenter-testing --example toy_provider`.
//!
//! The journey of a cloud author: describe instance types as data, launch the cheapest offering that fits a
//! NodeClaim, keep instances per cluster, terminate in two steps, and let `karpenter_testing::conformance` say
//! whether the contract on the trait holds. Everything a provider is written with comes from
//! `karpenter_cloudprovider::prelude`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use karpenter_cloudprovider::prelude::*;
use karpenter_testing::conformance::{Fixtures, run};

const GROUP: &str = "toy.example.com";
const KIND: &str = "ToyNodeClass";

/// One cloud account, shared by the providers of every cluster that uses it.
#[derive(Debug, Default)]
struct Account {
    next_id: u64,
    /// provider id -> (cluster, the NodeClaim as launched).
    instances: BTreeMap<String, (String, NodeClaim)>,
}

#[derive(Debug, Clone)]
struct ToyCloud {
    cluster: String,
    node_classes: Vec<String>,
    catalogue: Arc<[InstanceType]>,
    account: Arc<Mutex<Account>>,
    labels: ProviderLabels,
}

impl ToyCloud {
    fn new(cluster: &str, account: Arc<Mutex<Account>>) -> Self {
        let catalogue = [("toy.small", 2, 0.05), ("toy.large", 8, 0.20)].map(|(name, cpu, price)| {
            InstanceType::builder(name)
                .cpu(cpu)
                .memory_gib(4 * cpu)
                .pods(110)
                .offering(Offering::on_demand("toy-zone-1", price))
                .offering(Offering::spot("toy-zone-1", price / 3.0))
                .offering(Offering::on_demand("toy-zone-2", price))
                .build()
        });
        ToyCloud {
            cluster: cluster.to_owned(),
            node_classes: vec!["default".to_owned()],
            catalogue: Arc::from(catalogue),
            account,
            labels: ProviderLabels::core_only("toy"),
        }
    }

    fn knows(&self, class: &NodeClassReference) -> bool {
        class.group == GROUP && class.kind == KIND && self.node_classes.contains(&class.name)
    }

    fn account(&self) -> std::sync::MutexGuard<'_, Account> {
        self.account.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// This cluster's instance with that provider id.
    fn find(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        match self.account().instances.get(provider_id) {
            Some((cluster, claim)) if *cluster == self.cluster => Ok(claim.clone()),
            _ => Err(CloudProviderError::not_found(format!("no instance {provider_id}"))),
        }
    }
}

#[async_trait]
impl CloudProvider for ToyCloud {
    async fn create(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        let name = claim.metadata.name.clone().unwrap_or_default();
        if !self.knows(&claim.spec.node_class_ref) {
            return Err(CloudProviderError::insufficient_capacity(vec![], "no such ToyNodeClass"));
        }
        let mut account = self.account();
        // Idempotent: a claim already launched in this cluster gets its instance back.
        let launched =
            account.instances.values().find(|(c, l)| *c == self.cluster && l.metadata.name == Some(name.clone()));
        if let Some((_, launched)) = launched {
            return Ok(launched.clone());
        }
        let invalid = |e: &dyn std::fmt::Display| CloudProviderError::create("InvalidNodeClaim", e.to_string());
        let requirements = claim.requirements().map_err(|e| invalid(&e))?;
        let requests = claim.spec.resources.iter().flat_map(|r| &r.requests);
        let requests = ResourceList::try_from_pairs(requests.map(|(n, q)| (n, q.as_str()))).map_err(|e| invalid(&e))?;
        let fitting = self.catalogue.iter().filter(|it| requests.fits(it.allocatable()));
        let choice = cheapest_launch(fitting, &requirements)
            .ok_or_else(|| CloudProviderError::insufficient_capacity(vec![], "nothing fits the claim"))?;
        let it = self.catalogue.iter().find(|it| it.name == choice.instance_type);
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
        let provider_id = format!("toy:///{}/i-{}", self.cluster, account.next_id);
        let launched = NodeClaim {
            metadata: ObjectMeta {
                labels: Some(labels),
                creation_timestamp: k8s_time(SystemClock.now()),
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
        account.instances.insert(provider_id, (self.cluster.clone(), launched.clone()));
        Ok(launched)
    }

    /// The first call starts termination (the instance stays visible with a deletion timestamp); the next one
    /// finds it terminated and gone.
    async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudProviderError> {
        let provider_id = claim.provider_id().unwrap_or_default();
        self.find(provider_id)?;
        let mut account = self.account();
        let Some((_, instance)) = account.instances.get_mut(provider_id) else {
            return Err(CloudProviderError::not_found(provider_id));
        };
        if instance.metadata.deletion_timestamp.is_some() {
            account.instances.remove(provider_id);
            return Err(CloudProviderError::not_found(format!("{provider_id} has terminated")));
        }
        instance.metadata.deletion_timestamp = k8s_time(SystemClock.now());
        Ok(())
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        self.find(provider_id)
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        let account = self.account();
        Ok(account.instances.values().filter(|(c, _)| *c == self.cluster).map(|(_, claim)| claim.clone()).collect())
    }

    async fn instance_types(&self, pool: &NodePool) -> Result<Arc<[InstanceType]>, CloudProviderError> {
        let known = self.knows(&pool.spec.template.spec.node_class_ref);
        Ok(if known { self.catalogue.clone() } else { Arc::from([]) })
    }

    async fn is_drifted(&self, claim: &NodeClaim) -> Result<Option<DriftReason>, CloudProviderError> {
        self.find(claim.provider_id().unwrap_or_default()).map(|_| None)
    }

    fn repair_policies(&self) -> Vec<RepairPolicy> {
        vec![]
    }

    async fn reboot(&self, _: &NodeClaim) -> Result<(), CloudProviderError> {
        Err(CloudProviderError::not_implemented("Reboot"))
    }

    fn name(&self) -> &str {
        "toy"
    }

    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        vec![NodeClassKind::new(GROUP, KIND)]
    }

    fn labels(&self) -> &ProviderLabels {
        &self.labels
    }
}

// `pub`: tests/examples.rs runs this program as a test.
#[tokio::main(flavor = "current_thread")]
pub async fn main() {
    let account = Arc::new(Mutex::new(Account::default()));
    let fixtures = Fixtures {
        // The same account seen from another cluster: neither lists nor gets this cluster's instances.
        other_cluster: Some(Arc::new(ToyCloud::new("other-cluster", account.clone()))),
        // The toy terminates on the second delete, so polls need not wait long.
        delete_poll_interval: Duration::from_millis(1),
        ..Fixtures::new(NodeClassReference::new(GROUP, KIND, "default"))
    };
    let report = run(Arc::new(ToyCloud::new("toy-cluster", account)), &fixtures).await;
    println!("{report}");
    assert!(report.passed(), "the toy provider breaks the contract");
}
