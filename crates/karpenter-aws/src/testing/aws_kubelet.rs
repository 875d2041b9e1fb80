//! The AWS kubelet stand-in: it plays the EC2 instances of [`MockEc2`] booting and their kubelets registering,
//! for end-to-end tests on a real API server where no machine runs. A Node registers only when the real kubelet
//! (`karpenter_testing::kubelet_check`, kubelet v1.32.6 run as a judge) accepts what the instance's user data
//! would hand it.
//!
//! For each NodeClaim with a providerID (`aws:///<zone>/<instance-id>`) and no Node, a pass ([`AwsKubelet::step`]):
//!
//! 1. finds the instance in [`MockEc2`] and the launch template it was launched from
//!    ([`MockEc2::launch_template_of`]), whose user data the instance booted with;
//! 2. reads the kubelet's flags and configuration from that user data
//!    ([`kubelet_inputs`](crate::launch::kubelet_inputs::kubelet_inputs)) for the AMI family of the claim's
//!    EC2NodeClass;
//! 3. asks the kubelet whether it accepts them ([`KubeletCheck::check`]);
//! 4. when it does, creates the Node as a kubelet registers it ([`registered_node`]): named after the instance's
//!    private DNS name (the mock has none, so the claim's name), the providerID, the labels of `--node-labels`
//!    with the kubelet's own (`kubernetes.io/hostname`, `kubernetes.io/os`, `kubernetes.io/arch`), the taints of
//!    `--register-with-taints` (or of the configuration's `registerWithTaints`, where nodeadm puts them),
//!    capacity from the instance type (cpu, memory; pods from `maxPods`; ephemeral storage from the largest
//!    volume), allocatable as the kubelet computes it (capacity less `kubeReserved`, `systemReserved` and the
//!    hard eviction thresholds) and a Ready condition. Karpenter's registration then syncs the NodeClaim onto it;
//! 5. when it refuses, never registers the Node: the refusal, with the kubelet's message, is logged (WARN) and
//!    kept ([`AwsKubelet::refusals`]).
//!
//! Each instance is judged once. User data whose inputs cannot be read, and a judge that fails to run, are
//! [`AwsKubelet::failures`]. What the stand-in does not do: keep Nodes Ready, renew their Leases, run pods (the
//! kwok crate's kubelet stand-in does that for any Node).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::api::{AmiFamily, EC2NodeClass, GROUP};
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use karpenter_api::NodeClaim;
use karpenter_requirements::Quantity;
use karpenter_testing::kubelet_check::{KubeletCheck, Verdict};
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::Value;

use crate::ec2::InstanceTypeInfo;
use crate::instancetypes::InstanceTypeApi;
use crate::launch::fleet::{Ec2Instance, InstanceState};
use crate::launch::kubelet_inputs::{KubeletInputs, kubelet_inputs};
use crate::launch::mock::MockEc2;
use crate::launch::template::LaunchTemplate;
use crate::provider::instance_id;

/// The kubelet refused an instance's user data: its Node never registers.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    /// The NodeClaim of the instance.
    pub node_claim: String,
    /// The instance.
    pub instance_id: String,
    /// The AMI family the user data was read as.
    pub family: AmiFamily,
    /// The kubelet's message.
    pub message: String,
    /// What the kubelet was given.
    pub inputs: KubeletInputs,
}

/// The kubelet accepted an instance's user data and its Node was built.
#[derive(Clone, Debug, PartialEq)]
pub struct Registration {
    /// The NodeClaim of the instance.
    pub node_claim: String,
    /// The instance.
    pub instance_id: String,
    /// The AMI family the user data was read as.
    pub family: AmiFamily,
    /// The Node's name.
    pub node: String,
    /// What the kubelet was given.
    pub inputs: KubeletInputs,
}

/// What booting an instance came to.
#[derive(Clone, Debug)]
pub enum Boot {
    /// The kubelet accepted its inputs; the Node it registers.
    Accepted {
        /// The Node, to create.
        node: Box<Node>,
        /// What the kubelet was given.
        inputs: KubeletInputs,
    },
    /// The kubelet refused them.
    Refused {
        /// The kubelet's message.
        message: String,
        /// What the kubelet was given.
        inputs: KubeletInputs,
    },
}

/// Why an instance could not be booted at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BootError {
    /// The providerID is not an AWS one.
    #[error("providerID {0:?} names no instance")]
    ProviderId(String),
    /// The instance is not (or no longer) running in the mock.
    #[error("instance {0} is not running")]
    NotRunning(String),
    /// The mock knows no launch template for it.
    #[error("instance {0} has no launch template")]
    NoLaunchTemplate(String),
    /// The user data's kubelet inputs could not be read (the bootstrap would have failed).
    #[error("instance {instance}: {message}")]
    Inputs {
        /// The instance.
        instance: String,
        /// What went wrong.
        message: String,
    },
    /// The kubelet judge did not run as expected.
    #[error("instance {instance}: the kubelet judge failed: {message}")]
    Judge {
        /// The instance.
        instance: String,
        /// What went wrong.
        message: String,
    },
}

impl BootError {
    /// Whether a later pass may do better (the instance is not visible yet).
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::NotRunning(_))
    }
}

/// Boots the instance of `claim` (launched, so with a providerID) read as `family`: its user data, the kubelet's
/// verdict on the inputs read from it and, when accepted, the Node it registers. Never touches the API server.
///
/// # Errors
/// See [`BootError`].
pub async fn boot_instance(
    ec2: &MockEc2,
    judge: &KubeletCheck,
    claim: &NodeClaim,
    family: AmiFamily,
) -> Result<Boot, BootError> {
    let provider_id = claim.provider_id().unwrap_or_default().to_owned();
    let id = instance_id(&provider_id).ok_or_else(|| BootError::ProviderId(provider_id.clone()))?.to_owned();
    let instance = ec2
        .instance(&id)
        .filter(|i| i.state == InstanceState::Running)
        .ok_or_else(|| BootError::NotRunning(id.clone()))?;
    let template = ec2.launch_template_of(&id).ok_or_else(|| BootError::NoLaunchTemplate(id.clone()))?;
    let inputs = kubelet_inputs(family, &template.data.user_data)
        .map_err(|e| BootError::Inputs { instance: id.clone(), message: e.to_string() })?;
    let (judge, config, flags) = (judge.clone(), inputs.config.clone(), inputs.flags.clone());
    let verdict = tokio::task::spawn_blocking(move || judge.check(Some(&config), &flags))
        .await
        .map_err(|e| BootError::Judge { instance: id.clone(), message: e.to_string() })?
        .map_err(|message| BootError::Judge { instance: id.clone(), message })?;
    match verdict {
        Verdict::Refused(message) => Ok(Boot::Refused { message, inputs }),
        Verdict::Accepted => {
            let info = ec2
                .describe_instance_types()
                .await
                .ok()
                .and_then(|types| types.into_iter().find(|t| t.instance_type == instance.instance_type));
            let node =
                registered_node(&claim.name_any(), &provider_id, &instance, info.as_ref(), &template, family, &inputs);
            Ok(Boot::Accepted { node: Box::new(node), inputs })
        }
    }
}

/// The values of every `--<name>=...` flag (and `--<name> ...`), in order.
fn flag_values<'a>(flags: &'a [String], name: &str) -> Vec<&'a str> {
    let long = format!("--{name}");
    let mut out = Vec::new();
    let mut iter = flags.iter().peekable();
    while let Some(f) = iter.next() {
        if let Some(v) = f.strip_prefix(&long).and_then(|r| r.strip_prefix('=')) {
            out.push(v);
        } else if *f == long
            && let Some(v) = iter.next()
        {
            out.push(v.as_str());
        }
    }
    out
}

/// A `k=v,k2=v2` map flag (`--node-labels`, `--kube-reserved`), later occurrences merged over earlier ones.
fn map_flag(flags: &[String], name: &str) -> Option<BTreeMap<String, String>> {
    let values = flag_values(flags, name);
    (!values.is_empty()).then(|| {
        values
            .iter()
            .flat_map(|v| v.split(','))
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (k.trim().to_owned(), v.trim().to_owned())
            })
            .collect()
    })
}

/// `--register-with-taints=key=value:Effect,key:Effect`.
fn flag_taints(flags: &[String]) -> Option<Vec<Taint>> {
    let values = flag_values(flags, "register-with-taints");
    (!values.is_empty()).then(|| {
        values
            .iter()
            .flat_map(|v| v.split(','))
            .filter(|t| !t.is_empty())
            .map(|t| {
                let (kv, effect) = t.rsplit_once(':').unwrap_or((t, ""));
                let (key, value) = match kv.split_once('=') {
                    Some((k, v)) => (k, Some(v.to_owned()).filter(|v| !v.is_empty())),
                    None => (kv, None),
                };
                Taint { key: key.to_owned(), value, effect: effect.to_owned(), time_added: None }
            })
            .collect()
    })
}

/// The configuration's `registerWithTaints`.
fn config_taints(config: &Value) -> Vec<Taint> {
    config
        .get("registerWithTaints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|t| Taint {
            key: t.get("key").and_then(Value::as_str).unwrap_or_default().to_owned(),
            value: t.get("value").and_then(Value::as_str).map(str::to_owned).filter(|v| !v.is_empty()),
            effect: t.get("effect").and_then(Value::as_str).unwrap_or_default().to_owned(),
            time_added: None,
        })
        .collect()
}

/// A resource map from the flag `flag` (`cpu=100m,memory=1Gi`), else the configuration's `field`.
fn reserved(inputs: &KubeletInputs, flag: &str, field: &str) -> BTreeMap<String, String> {
    map_flag(&inputs.flags, flag).unwrap_or_else(|| {
        inputs.config.get(field).and_then(Value::as_object).map_or_else(BTreeMap::new, |m| {
            m.iter().map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), str::to_owned))).collect()
        })
    })
}

/// The hard eviction thresholds: `--eviction-hard=signal<value,...`, else the configuration's `evictionHard`.
fn eviction_hard(inputs: &KubeletInputs) -> BTreeMap<String, String> {
    let flags = flag_values(&inputs.flags, "eviction-hard");
    if flags.is_empty() {
        return reserved(inputs, "", "evictionHard");
    }
    flags
        .iter()
        .flat_map(|v| v.split(','))
        .filter_map(|p| p.split_once('<'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// `value` in nanos of the resource's unit: a quantity, or a percentage of `capacity`.
fn amount(value: &str, capacity: i128) -> i128 {
    match value.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map_or(0, |p| (capacity as f64 * p / 100.0) as i128),
        None => value.parse::<Quantity>().map_or(0, |q| q.as_nanos()),
    }
}

/// A quantity for the Node's status: whole units when whole, else milli-units.
fn quantity(nanos: i128) -> K8sQuantity {
    let nanos = nanos.max(0);
    if nanos % 1_000_000_000 == 0 {
        K8sQuantity(format!("{}", nanos / 1_000_000_000))
    } else {
        K8sQuantity(format!("{}m", nanos / 1_000_000))
    }
}

/// The Node a kubelet started with `inputs` on `instance` registers (see the module docs).
pub fn registered_node(
    claim_name: &str,
    provider_id: &str,
    instance: &Ec2Instance,
    info: Option<&InstanceTypeInfo>,
    template: &LaunchTemplate,
    family: AmiFamily,
    inputs: &KubeletInputs,
) -> Node {
    const NANO: i128 = 1_000_000_000;
    let name = claim_name.to_owned();
    let windows = matches!(family, AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025);
    let arch = info
        .and_then(|i| i.processor_info.supported_architectures.first())
        .map_or("amd64", |a| if a == "arm64" { "arm64" } else { "amd64" });
    let mut labels = map_flag(&inputs.flags, "node-labels").unwrap_or_default();
    labels.insert("kubernetes.io/hostname".into(), name.clone());
    labels.insert("kubernetes.io/os".into(), if windows { "windows" } else { "linux" }.into());
    labels.insert("kubernetes.io/arch".into(), arch.into());
    let taints = flag_taints(&inputs.flags).unwrap_or_else(|| config_taints(&inputs.config));

    let cpu = info.and_then(|i| i.vcpu_info.default_vcpus).unwrap_or(2) as i128 * NANO;
    let memory = info.and_then(|i| i.memory_info.size_in_mib).unwrap_or(4096) as i128 * 1024 * 1024 * NANO;
    let pods = inputs.config.get("maxPods").and_then(Value::as_i64).unwrap_or(110) as i128 * NANO;
    let volume_gib = template.data.block_device_mappings.iter().filter_map(|b| b.volume_size_gib).max().unwrap_or(20);
    let storage = i128::from(volume_gib) * 1024 * 1024 * 1024 * NANO;
    let capacity: BTreeMap<&str, i128> =
        [("cpu", cpu), ("memory", memory), ("pods", pods), ("ephemeral-storage", storage)].into();
    let mut allocatable = capacity.clone();
    for held in
        [reserved(inputs, "kube-reserved", "kubeReserved"), reserved(inputs, "system-reserved", "systemReserved")]
    {
        for (resource, value) in held {
            if let Some(a) = allocatable.get_mut(resource.as_str()) {
                *a -= amount(&value, capacity[resource.as_str()]);
            }
        }
    }
    for (signal, value) in eviction_hard(inputs) {
        let resource = match signal.as_str() {
            "memory.available" => "memory",
            "nodefs.available" => "ephemeral-storage",
            _ => continue,
        };
        if let Some(a) = allocatable.get_mut(resource) {
            *a -= amount(&value, capacity[resource]);
        }
    }
    let as_map = |m: &BTreeMap<&str, i128>| -> BTreeMap<String, K8sQuantity> {
        m.iter().map(|(k, v)| ((*k).to_owned(), quantity(*v))).collect()
    };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    Node {
        metadata: ObjectMeta { name: Some(name), labels: Some(labels), ..ObjectMeta::default() },
        spec: Some(NodeSpec {
            provider_id: Some(provider_id.to_owned()),
            taints: Some(taints).filter(|t| !t.is_empty()),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(as_map(&capacity)),
            allocatable: Some(as_map(&allocatable)),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: Some("KubeletReady".into()),
                message: Some(format!("kubelet is posting ready status ({} on {})", family, instance.instance_id)),
                last_heartbeat_time: Some(now.clone()),
                last_transition_time: Some(now),
            }]),
            ..NodeStatus::default()
        }),
    }
}

/// What the stand-in decided about an instance.
#[derive(Clone, Debug)]
enum Judged {
    /// Accepted: the Node to create (again, until it exists).
    Accepted(Box<Node>),
    /// Refused, or could not be booted: never registers.
    Never,
}

#[derive(Debug, Default)]
struct State {
    /// By instance id.
    judged: BTreeMap<String, Judged>,
    registrations: Vec<Registration>,
    refusals: Vec<Refusal>,
    failures: Vec<String>,
}

/// What one [`AwsKubelet::step`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AwsKubeletReport {
    /// Nodes created.
    pub registered: Vec<String>,
    /// NodeClaims whose instance's kubelet refused its user data.
    pub refused: Vec<String>,
}

/// The stand-in (see the module docs). Clones share what was judged.
#[derive(Clone)]
pub struct AwsKubelet {
    client: Client,
    ec2: MockEc2,
    judge: KubeletCheck,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for AwsKubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsKubelet").field("ec2", &self.ec2).finish_non_exhaustive()
    }
}

impl AwsKubelet {
    /// A stand-in for the instances of `ec2`, registering through `client` what `judge` accepts.
    pub fn new(client: Client, ec2: MockEc2, judge: KubeletCheck) -> Self {
        Self { client, ec2, judge, state: Arc::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every refusal so far, in order.
    pub fn refusals(&self) -> Vec<Refusal> {
        self.lock().refusals.clone()
    }

    /// Every accepted boot so far, in order.
    pub fn registrations(&self) -> Vec<Registration> {
        self.lock().registrations.clone()
    }

    /// Instances that could not be booted (unreadable user data, a judge that failed, no EC2NodeClass family).
    pub fn failures(&self) -> Vec<String> {
        self.lock().failures.clone()
    }

    /// The AMI family of the claim's EC2NodeClass.
    async fn family(&self, claim: &NodeClaim) -> Result<AmiFamily, String> {
        let r = &claim.spec.node_class_ref;
        if r.group != GROUP {
            return Err(format!("node class {}/{} is not an EC2NodeClass", r.group, r.name));
        }
        let classes: Api<EC2NodeClass> = Api::all(self.client.clone());
        let class = classes.get(&r.name).await.map_err(|e| format!("EC2NodeClass {}: {e}", r.name))?;
        class.effective_ami_family().ok_or_else(|| format!("EC2NodeClass {} has no AMI family", r.name))
    }

    /// One pass (see the module docs). List errors are returned; a Node that could not be created is tried again
    /// by the next pass.
    pub async fn step(&self) -> Result<AwsKubeletReport, kube::Error> {
        let claims_api: Api<NodeClaim> = Api::all(self.client.clone());
        let nodes_api: Api<Node> = Api::all(self.client.clone());
        let claims = claims_api.list(&ListParams::default()).await?.items;
        let nodes = nodes_api.list(&ListParams::default()).await?.items;
        let registered: BTreeSet<String> =
            nodes.iter().filter_map(|n| n.spec.as_ref().and_then(|s| s.provider_id.clone())).collect();
        let mut report = AwsKubeletReport::default();
        let pending: Vec<&NodeClaim> = claims
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter(|c| c.provider_id().is_some_and(|p| p.starts_with("aws://") && !registered.contains(p)))
            .collect();
        let mut to_judge = Vec::new();
        for claim in pending {
            let Some(id) = claim.provider_id().and_then(instance_id).map(str::to_owned) else { continue };
            let judged = self.lock().judged.get(&id).cloned();
            match judged {
                Some(Judged::Never) => {}
                Some(Judged::Accepted(node)) => {
                    if self.create(&node).await {
                        report.registered.push(node.name_any());
                    }
                }
                None => to_judge.push((claim, id)),
            }
        }
        let boots = futures::future::join_all(to_judge.into_iter().map(|(claim, id)| async move {
            let booted = match self.family(claim).await {
                Ok(family) => Some((family, boot_instance(&self.ec2, &self.judge, claim, family).await)),
                Err(e) => {
                    tracing::debug!(NodeClaim = %claim.name_any(), error = %e, "aws kubelet: no family yet");
                    None
                }
            };
            (claim, id, booted)
        }))
        .await;
        for (claim, id, booted) in boots {
            let Some((family, booted)) = booted else { continue };
            let claim_name = claim.name_any();
            match booted {
                Ok(Boot::Accepted { node, inputs }) => {
                    tracing::info!(NodeClaim = %claim_name, instance = %id, ?family, Node = %node.name_any(),
                        "aws kubelet: the kubelet accepts the user data; registering the node");
                    {
                        let mut s = self.lock();
                        s.judged.insert(id.clone(), Judged::Accepted(node.clone()));
                        s.registrations.push(Registration {
                            node_claim: claim_name,
                            instance_id: id,
                            family,
                            node: node.name_any(),
                            inputs,
                        });
                    }
                    if self.create(&node).await {
                        report.registered.push(node.name_any());
                    }
                }
                Ok(Boot::Refused { message, inputs }) => {
                    tracing::warn!(NodeClaim = %claim_name, instance = %id, ?family, kubelet = %message,
                        "aws kubelet: the kubelet refuses the user data; the node never registers");
                    report.refused.push(claim_name.clone());
                    let mut s = self.lock();
                    s.judged.insert(id.clone(), Judged::Never);
                    s.refusals.push(Refusal { node_claim: claim_name, instance_id: id, family, message, inputs });
                }
                Err(e) if e.is_transient() => {}
                Err(e) => {
                    tracing::warn!(NodeClaim = %claim_name, error = %e, "aws kubelet: the instance cannot boot");
                    let mut s = self.lock();
                    s.judged.insert(id, Judged::Never);
                    s.failures.push(format!("{claim_name}: {e}"));
                }
            }
        }
        Ok(report)
    }

    /// Creates the Node; whether it was created (or already existed).
    async fn create(&self, node: &Node) -> bool {
        let api: Api<Node> = Api::all(self.client.clone());
        match api.create(&PostParams::default(), node).await {
            Ok(_) => true,
            Err(kube::Error::Api(e)) if e.code == 409 => true,
            Err(e) => {
                tracing::warn!(Node = %node.name_any(), error = %e, "aws kubelet: creating the node failed");
                false
            }
        }
    }

    /// Runs [`step`](Self::step) every `every`, forever. Spawn it and abort the task to stop.
    pub async fn run(self, every: Duration) {
        let mut tick = tokio::time::interval(every.max(Duration::from_millis(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = self.step().await {
                tracing::debug!(error = %e, "aws kubelet: a pass failed");
            }
        }
    }
}

#[cfg(test)]
mod tests;
