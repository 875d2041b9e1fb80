//! [`MockEc2`]: an in-memory EC2 implementing [`FleetApi`], [`LaunchTemplateApi`] and [`InstanceTypeApi`]
//! (tests, and other crates' tests through feature `test-util`).
//!
//! Behaviour: CreateFleet tries overrides in priority order (lowest first) and launches on the first one that is
//! not marked out of capacity, reporting an `InsufficientInstanceCapacity` error for each marked override it
//! passed; a missing launch template is an `InvalidLaunchTemplateName.NotFoundException` fleet error.
//! Instances are `running` at once; TerminateInstances makes them `shutting-down`, and the next
//! DescribeInstances sees them `terminated` (EC2 keeps terminated instances describable for a while; so does
//! the mock). DescribeInstances by an unknown id fails the whole call with `InvalidInstanceID.NotFound`, as EC2
//! does; so does RebootInstances, which counts a reboot of each live instance ([`MockEc2::reboots`]) and refuses
//! one shutting down or terminated with `IncorrectInstanceState`, as EC2 does. Failures can be injected per operation; every call is recorded.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use karpenter_cloudprovider::Clock;

use crate::api_error::AwsApiError;
use crate::ec2::{InstanceTypeInfo, InstanceTypeOffering};
use crate::instancetypes::InstanceTypeApi;
use crate::launch::fleet::{
    CreateFleetRequest, CreateFleetResponse, DescribeInstancesRequest, Ec2Instance, FleetApi, FleetError,
    FleetInstance, InstanceState, TargetCapacityType, TerminatingInstance,
};
use crate::launch::template::{CapacityReservationPreference, LaunchTemplate, LaunchTemplateApi, LaunchTemplateInfo};
use crate::status::{InstanceStatus, InstanceStatusApi};

/// A recorded call.
#[derive(Clone, Debug, PartialEq)]
pub enum MockCall {
    CreateFleet(CreateFleetRequest),
    DescribeInstances(DescribeInstancesRequest),
    TerminateInstances(Vec<String>),
    RebootInstances(Vec<String>),
    DescribeInstanceStatus,
    CreateTags(Vec<String>, BTreeMap<String, String>),
    CreateLaunchTemplate(String),
    DescribeLaunchTemplate(String),
    ListLaunchTemplates(String, String),
    DeleteLaunchTemplate(String),
    DescribeInstanceTypes,
    DescribeInstanceTypeOfferings,
}

#[derive(Default)]
struct State {
    instance_types: Vec<InstanceTypeInfo>,
    offerings: Vec<InstanceTypeOffering>,
    templates: BTreeMap<String, LaunchTemplate>,
    template_ids: BTreeMap<String, String>,
    instances: BTreeMap<String, Ec2Instance>,
    /// (capacity type, instance type, zone) out of capacity.
    exhausted: BTreeSet<(String, String, String)>,
    /// Subnets without free addresses.
    full_subnets: BTreeSet<String>,
    failures: BTreeMap<&'static str, VecDeque<AwsApiError>>,
    calls: Vec<MockCall>,
    next_id: u64,
    /// Reboots per instance id.
    reboots: BTreeMap<String, u32>,
    /// Health checks and events set by the test, per instance id (the rest are `ok` without events).
    statuses: BTreeMap<String, InstanceStatus>,
    /// The launch template each instance was launched from, as it was then (by instance id).
    launched_from: BTreeMap<String, LaunchTemplate>,
    /// Zone name → zone id, reported as launched instances' `Placement.AvailabilityZoneId` ([`MockEc2::set_zone_ids`]).
    zone_ids: BTreeMap<String, String>,
}

/// See the module docs. Clones share the state.
#[derive(Clone)]
pub struct MockEc2 {
    state: Arc<Mutex<State>>,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for MockEc2 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.lock();
        f.debug_struct("MockEc2").field("instances", &s.instances.len()).field("templates", &s.templates.len()).finish()
    }
}

/// Operation names for [`MockEc2::fail_next`].
pub mod ops {
    pub const CREATE_FLEET: &str = "CreateFleet";
    pub const DESCRIBE_INSTANCES: &str = "DescribeInstances";
    pub const TERMINATE_INSTANCES: &str = "TerminateInstances";
    pub const REBOOT_INSTANCES: &str = "RebootInstances";
    pub const DESCRIBE_INSTANCE_STATUS: &str = "DescribeInstanceStatus";
    pub const CREATE_TAGS: &str = "CreateTags";
    pub const CREATE_LAUNCH_TEMPLATE: &str = "CreateLaunchTemplate";
    pub const DESCRIBE_INSTANCE_TYPES: &str = "DescribeInstanceTypes";
}

impl MockEc2 {
    /// An empty EC2 on `clock` (launch times).
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self { state: Arc::default(), clock }
    }

    /// The provider's APIs (fleet, launch templates, instance types) all served by this EC2.
    pub fn apis(&self) -> crate::provider::AwsApis {
        crate::provider::AwsApis {
            fleet: Arc::new(self.clone()),
            launch_templates: Arc::new(self.clone()),
            instance_types: Arc::new(self.clone()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets the catalogue: instance types and the zones each is offered in.
    pub fn set_catalogue(&self, instance_types: Vec<InstanceTypeInfo>, zones: &[&str]) {
        let mut s = self.lock();
        s.offerings = instance_types
            .iter()
            .flat_map(|it| {
                zones.iter().map(|z| InstanceTypeOffering {
                    instance_type: it.instance_type.clone(),
                    location_type: Some("availability-zone".into()),
                    location: (*z).to_owned(),
                })
            })
            .collect();
        s.instance_types = instance_types;
    }

    /// The zone ids (zone name → id) instances launched from now on report; without one an instance has none.
    pub fn set_zone_ids(&self, zone_ids: &[(&str, &str)]) {
        self.lock().zone_ids = zone_ids.iter().map(|(z, id)| ((*z).to_owned(), (*id).to_owned())).collect();
    }

    /// Marks (capacity type, instance type, zone) out of capacity (`true`) or back (`false`).
    pub fn set_exhausted(&self, capacity_type: &str, instance_type: &str, zone: &str, exhausted: bool) {
        let key = (capacity_type.to_owned(), instance_type.to_owned(), zone.to_owned());
        let mut s = self.lock();
        if exhausted {
            s.exhausted.insert(key);
        } else {
            s.exhausted.remove(&key);
        }
    }

    /// Marks a subnet out of free addresses (`true`; launches into it fail with
    /// `InsufficientFreeAddressesInSubnet`) or back (`false`).
    pub fn set_subnet_full(&self, subnet_id: &str, full: bool) {
        let mut s = self.lock();
        if full {
            s.full_subnets.insert(subnet_id.to_owned());
        } else {
            s.full_subnets.remove(subnet_id);
        }
    }

    /// Every offering back in capacity.
    pub fn clear_exhausted(&self) {
        self.lock().exhausted.clear();
    }

    /// The next call of `operation` (see [`ops`]) fails with `error` (queued; several calls queue several).
    pub fn fail_next(&self, operation: &'static str, error: AwsApiError) {
        self.lock().failures.entry(operation).or_default().push_back(error);
    }

    fn injected(&self, operation: &'static str) -> Result<(), AwsApiError> {
        match self.lock().failures.get_mut(operation).and_then(VecDeque::pop_front) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Recorded calls.
    pub fn calls(&self) -> Vec<MockCall> {
        self.lock().calls.clone()
    }

    /// Forgets the recorded calls.
    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// The CreateFleet requests made.
    pub fn fleet_requests(&self) -> Vec<CreateFleetRequest> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                MockCall::CreateFleet(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    /// Every instance (any state).
    pub fn instances(&self) -> Vec<Ec2Instance> {
        self.lock().instances.values().cloned().collect()
    }

    /// One instance.
    pub fn instance(&self, id: &str) -> Option<Ec2Instance> {
        self.lock().instances.get(id).cloned()
    }

    /// How many times RebootInstances rebooted an instance.
    pub fn reboots(&self, id: &str) -> u32 {
        self.lock().reboots.get(id).copied().unwrap_or(0)
    }

    /// Sets the status checks and scheduled events DescribeInstanceStatus reports for instance `id` (the
    /// status's id and zone are taken from the instance).
    pub fn set_instance_status(&self, id: &str, status: InstanceStatus) {
        self.lock().statuses.insert(id.to_owned(), status);
    }

    /// Changes an instance (e.g. its image, to cause drift); returns whether it exists.
    pub fn update_instance(&self, id: &str, f: impl FnOnce(&mut Ec2Instance)) -> bool {
        self.lock().instances.get_mut(id).map(f).is_some()
    }

    /// Adds an instance as if launched by someone else.
    pub fn insert_instance(&self, instance: Ec2Instance) {
        self.lock().instances.insert(instance.instance_id.clone(), instance);
    }

    /// The launch template instance `id` was launched from, as it was at launch: what the instance booted with
    /// (its user data above all), even once the template is deleted.
    pub fn launch_template_of(&self, id: &str) -> Option<LaunchTemplate> {
        self.lock().launched_from.get(id).cloned()
    }

    /// The launch templates.
    pub fn launch_templates(&self) -> Vec<LaunchTemplate> {
        self.lock().templates.values().cloned().collect()
    }

    fn info(s: &State, name: &str) -> Option<LaunchTemplateInfo> {
        let t = s.templates.get(name)?;
        Some(LaunchTemplateInfo {
            name: name.to_owned(),
            id: s.template_ids.get(name).cloned().unwrap_or_default(),
            tags: t.tags.clone(),
        })
    }
}

fn not_found(operation: &str, code: &str, what: &str) -> AwsApiError {
    AwsApiError::new(operation, code, format!("{what} does not exist"))
}

fn matches_filter(i: &Ec2Instance, name: &str, values: &[String]) -> bool {
    if let Some(key) = name.strip_prefix("tag:") {
        return i.tags.get(key).is_some_and(|v| values.contains(v));
    }
    match name {
        "tag-key" => values.iter().any(|k| i.tags.contains_key(k)),
        "instance-state-name" => values.iter().any(|v| v == i.state.as_str()),
        "instance-id" => values.contains(&i.instance_id),
        "availability-zone" => values.contains(&i.availability_zone),
        _ => true,
    }
}

#[async_trait]
impl FleetApi for MockEc2 {
    async fn create_fleet(&self, request: &CreateFleetRequest) -> Result<CreateFleetResponse, AwsApiError> {
        self.lock().calls.push(MockCall::CreateFleet(request.clone()));
        self.injected(ops::CREATE_FLEET)?;
        let now = self.clock.now();
        let mut s = self.lock();
        let mut overrides: Vec<(&str, &crate::launch::fleet::FleetOverride)> = request
            .launch_template_configs
            .iter()
            .flat_map(|c| c.overrides.iter().map(move |o| (c.launch_template_name.as_str(), o)))
            .collect();
        overrides.sort_by(|a, b| a.1.priority.total_cmp(&b.1.priority));
        let mut response = CreateFleetResponse::default();
        let mut error_keys = BTreeSet::new();
        for _ in 0..request.total_target_capacity {
            let mut launched = false;
            for (lt_name, o) in &overrides {
                let Some(lt) = s.templates.get(*lt_name).cloned() else {
                    if error_keys.insert(("lt".to_owned(), (*lt_name).to_owned(), String::new())) {
                        response.errors.push(FleetError {
                            error_code: "InvalidLaunchTemplateName.NotFoundException".into(),
                            error_message: format!("launch template {lt_name} does not exist"),
                            instance_type: Some(o.instance_type.clone()),
                            availability_zone: Some(o.availability_zone.clone()),
                            subnet_id: o.subnet_id.clone(),
                        });
                    }
                    continue;
                };
                let capacity_type = match request.target_capacity_type {
                    TargetCapacityType::Spot => "spot",
                    TargetCapacityType::OnDemand if lt.data.capacity_reservation_id.is_some() => "reserved",
                    TargetCapacityType::OnDemand => "on-demand",
                    TargetCapacityType::CapacityBlock | TargetCapacityType::ReservedCapacity => "reserved",
                };
                let key = (capacity_type.to_owned(), o.instance_type.clone(), o.availability_zone.clone());
                if s.exhausted.contains(&key) {
                    if error_keys.insert(key) {
                        response.errors.push(FleetError {
                            error_code: "InsufficientInstanceCapacity".into(),
                            error_message: format!(
                                "We currently do not have sufficient {} capacity in the Availability Zone you requested ({}).",
                                o.instance_type, o.availability_zone
                            ),
                            instance_type: Some(o.instance_type.clone()),
                            availability_zone: Some(o.availability_zone.clone()),
                            subnet_id: o.subnet_id.clone(),
                        });
                    }
                    continue;
                }
                if let Some(subnet) = o.subnet_id.as_ref().filter(|id| s.full_subnets.contains(*id)) {
                    let key = ("subnet".to_owned(), subnet.clone(), o.instance_type.clone());
                    if error_keys.insert(key) {
                        response.errors.push(FleetError {
                            error_code: "InsufficientFreeAddressesInSubnet".into(),
                            error_message: format!("There are not enough free addresses in subnet '{subnet}'."),
                            instance_type: Some(o.instance_type.clone()),
                            availability_zone: Some(o.availability_zone.clone()),
                            subnet_id: Some(subnet.clone()),
                        });
                    }
                    continue;
                }
                s.next_id += 1;
                let id = format!("i-{:017x}", s.next_id);
                let image = o.image_id.clone().unwrap_or_else(|| lt.data.image_id.clone());
                let mut groups = lt.data.security_group_ids.clone();
                groups.extend(lt.data.network_interfaces.iter().flat_map(|n| n.security_group_ids.clone()));
                groups.sort();
                groups.dedup();
                let instance = Ec2Instance {
                    instance_id: id.clone(),
                    instance_type: o.instance_type.clone(),
                    availability_zone: o.availability_zone.clone(),
                    availability_zone_id: s.zone_ids.get(&o.availability_zone).cloned(),
                    subnet_id: o.subnet_id.clone(),
                    image_id: Some(image.clone()),
                    state: InstanceState::Running,
                    spot_instance_request_id: (capacity_type == "spot").then(|| format!("sir-{id}")),
                    capacity_reservation_id: lt.data.capacity_reservation_id.clone(),
                    // EC2 reports the template's preference, `open` when the template leaves it out.
                    capacity_reservation_preference: Some(
                        lt.data
                            .capacity_reservation_preference
                            .unwrap_or(CapacityReservationPreference::Open)
                            .as_str()
                            .to_owned(),
                    ),
                    security_group_ids: groups,
                    placement_group_id: None,
                    launch_time: Some(now),
                    tags: request.tags.clone(),
                };
                s.instances.insert(id.clone(), instance);
                s.launched_from.insert(id.clone(), lt);
                response.instances.push(FleetInstance {
                    instance_id: id,
                    instance_type: o.instance_type.clone(),
                    availability_zone: o.availability_zone.clone(),
                    subnet_id: o.subnet_id.clone(),
                    image_id: Some(image),
                    lifecycle: Some(if capacity_type == "spot" { "spot" } else { "on-demand" }.into()),
                });
                launched = true;
                break;
            }
            if !launched {
                break;
            }
        }
        Ok(response)
    }

    async fn describe_instances(&self, request: &DescribeInstancesRequest) -> Result<Vec<Ec2Instance>, AwsApiError> {
        self.lock().calls.push(MockCall::DescribeInstances(request.clone()));
        self.injected(ops::DESCRIBE_INSTANCES)?;
        let mut s = self.lock();
        // Instances terminated by an earlier call are gone now.
        for i in s.instances.values_mut() {
            if i.state == InstanceState::ShuttingDown {
                i.state = InstanceState::Terminated;
            }
        }
        if let Some(missing) = request.instance_ids.iter().find(|id| !s.instances.contains_key(*id)) {
            return Err(not_found(
                ops::DESCRIBE_INSTANCES,
                "InvalidInstanceID.NotFound",
                &format!("instance {missing}"),
            ));
        }
        Ok(s.instances
            .values()
            .filter(|i| request.instance_ids.is_empty() || request.instance_ids.contains(&i.instance_id))
            .filter(|i| request.filters.iter().all(|f| matches_filter(i, &f.name, &f.values)))
            .cloned()
            .collect())
    }

    async fn terminate_instances(&self, instance_ids: &[String]) -> Result<Vec<TerminatingInstance>, AwsApiError> {
        self.lock().calls.push(MockCall::TerminateInstances(instance_ids.to_vec()));
        self.injected(ops::TERMINATE_INSTANCES)?;
        let mut s = self.lock();
        if let Some(missing) = instance_ids.iter().find(|id| !s.instances.contains_key(*id)) {
            return Err(not_found(
                ops::TERMINATE_INSTANCES,
                "InvalidInstanceID.NotFound",
                &format!("instance {missing}"),
            ));
        }
        let mut out = Vec::new();
        for id in instance_ids {
            if let Some(i) = s.instances.get_mut(id) {
                if i.state != InstanceState::Terminated {
                    i.state = InstanceState::ShuttingDown;
                }
                out.push(TerminatingInstance { instance_id: id.clone(), current_state: i.state });
            }
        }
        Ok(out)
    }

    async fn reboot_instances(&self, instance_ids: &[String]) -> Result<(), AwsApiError> {
        self.lock().calls.push(MockCall::RebootInstances(instance_ids.to_vec()));
        self.injected(ops::REBOOT_INSTANCES)?;
        let mut s = self.lock();
        for id in instance_ids {
            let Some(i) = s.instances.get(id) else {
                return Err(not_found(ops::REBOOT_INSTANCES, "InvalidInstanceID.NotFound", &format!("instance {id}")));
            };
            if matches!(i.state, InstanceState::ShuttingDown | InstanceState::Terminated) {
                return Err(AwsApiError::new(
                    ops::REBOOT_INSTANCES,
                    "IncorrectInstanceState",
                    format!("instance {id} is {}", i.state.as_str()),
                ));
            }
        }
        for id in instance_ids {
            *s.reboots.entry(id.clone()).or_default() += 1;
        }
        Ok(())
    }

    async fn create_tags(&self, resource_ids: &[String], tags: &BTreeMap<String, String>) -> Result<(), AwsApiError> {
        self.lock().calls.push(MockCall::CreateTags(resource_ids.to_vec(), tags.clone()));
        self.injected(ops::CREATE_TAGS)?;
        let mut s = self.lock();
        for id in resource_ids {
            let Some(i) = s.instances.get_mut(id) else {
                return Err(not_found(ops::CREATE_TAGS, "InvalidInstanceID.NotFound", &format!("instance {id}")));
            };
            i.tags.extend(tags.clone());
        }
        Ok(())
    }
}

#[async_trait]
impl LaunchTemplateApi for MockEc2 {
    async fn create_launch_template(&self, template: &LaunchTemplate) -> Result<LaunchTemplateInfo, AwsApiError> {
        self.lock().calls.push(MockCall::CreateLaunchTemplate(template.name.clone()));
        self.injected(ops::CREATE_LAUNCH_TEMPLATE)?;
        let mut s = self.lock();
        if s.templates.contains_key(&template.name) {
            return Err(AwsApiError::new(
                ops::CREATE_LAUNCH_TEMPLATE,
                "InvalidLaunchTemplateName.AlreadyExistsException",
                format!("launch template {} already exists", template.name),
            ));
        }
        s.next_id += 1;
        let id = format!("lt-{:017x}", s.next_id);
        s.template_ids.insert(template.name.clone(), id);
        s.templates.insert(template.name.clone(), template.clone());
        Ok(Self::info(&s, &template.name).unwrap_or_else(|| LaunchTemplateInfo {
            name: template.name.clone(),
            id: String::new(),
            tags: template.tags.clone(),
        }))
    }

    async fn describe_launch_template(&self, name: &str) -> Result<Option<LaunchTemplateInfo>, AwsApiError> {
        let mut s = self.lock();
        s.calls.push(MockCall::DescribeLaunchTemplate(name.to_owned()));
        Ok(Self::info(&s, name))
    }

    async fn list_launch_templates(
        &self,
        tag_key: &str,
        tag_value: &str,
    ) -> Result<Vec<LaunchTemplateInfo>, AwsApiError> {
        let mut s = self.lock();
        s.calls.push(MockCall::ListLaunchTemplates(tag_key.to_owned(), tag_value.to_owned()));
        let names: Vec<String> = s
            .templates
            .iter()
            .filter(|(_, t)| t.tags.get(tag_key).is_some_and(|v| v == tag_value))
            .map(|(n, _)| n.clone())
            .collect();
        Ok(names.iter().filter_map(|n| Self::info(&s, n)).collect())
    }

    async fn delete_launch_template(&self, name: &str) -> Result<(), AwsApiError> {
        let mut s = self.lock();
        s.calls.push(MockCall::DeleteLaunchTemplate(name.to_owned()));
        s.templates.remove(name);
        s.template_ids.remove(name);
        Ok(())
    }
}

#[async_trait]
impl InstanceTypeApi for MockEc2 {
    async fn describe_instance_types(&self) -> Result<Vec<InstanceTypeInfo>, AwsApiError> {
        self.lock().calls.push(MockCall::DescribeInstanceTypes);
        self.injected(ops::DESCRIBE_INSTANCE_TYPES)?;
        Ok(self.lock().instance_types.clone())
    }

    async fn describe_instance_type_offerings(&self) -> Result<Vec<InstanceTypeOffering>, AwsApiError> {
        self.lock().calls.push(MockCall::DescribeInstanceTypeOfferings);
        Ok(self.lock().offerings.clone())
    }
}

/// A small instance type for tests: `vcpus` vCPUs, `memory_gib` GiB, 3 ENIs × 10 IPs, on-demand and spot, x86_64
/// (or arm64 when the name's family ends in `g`).
pub fn instance_type_info(name: &str, vcpus: i64, memory_gib: i64) -> InstanceTypeInfo {
    let family = name.split('.').next().unwrap_or("");
    let arch = if family.ends_with('g') { "arm64" } else { "x86_64" };
    let json = serde_json::json!({
        "InstanceType": name,
        "CurrentGeneration": true,
        "Hypervisor": "nitro",
        "SupportedUsageClasses": ["on-demand", "spot"],
        "SupportedVirtualizationTypes": ["hvm"],
        "ProcessorInfo": {"SupportedArchitectures": [arch], "Manufacturer": "Intel"},
        "VCpuInfo": {"DefaultVCpus": vcpus},
        "MemoryInfo": {"SizeInMiB": memory_gib * 1024},
        "NetworkInfo": {"MaximumNetworkInterfaces": 3, "Ipv4AddressesPerInterface": 10, "DefaultNetworkCardIndex": 0,
                        "NetworkCards": [{"NetworkCardIndex": 0, "MaximumNetworkInterfaces": 3}]}
    });
    serde_json::from_value(json).unwrap_or_default()
}

/// As EC2 without `IncludeAllInstances`: the running instances only, `ok` unless set with
/// [`MockEc2::set_instance_status`].
#[async_trait]
impl InstanceStatusApi for MockEc2 {
    async fn describe_instance_status(&self) -> Result<Vec<InstanceStatus>, AwsApiError> {
        self.lock().calls.push(MockCall::DescribeInstanceStatus);
        self.injected(ops::DESCRIBE_INSTANCE_STATUS)?;
        let s = self.lock();
        Ok(s.instances
            .values()
            .filter(|i| i.state == InstanceState::Running)
            .map(|i| {
                let set = s.statuses.get(&i.instance_id);
                InstanceStatus {
                    instance_id: i.instance_id.clone(),
                    availability_zone: Some(i.availability_zone.clone()),
                    instance_status: set.map_or_else(|| "ok".to_owned(), |x| x.instance_status.clone()),
                    system_status: set.map_or_else(|| "ok".to_owned(), |x| x.system_status.clone()),
                    events: set.map(|x| x.events.clone()).unwrap_or_default(),
                }
            })
            .collect())
    }
}
