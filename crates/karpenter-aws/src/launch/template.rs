//! Launch templates: their contents built from an EC2NodeClass, a resolved AMI and
//! user data; their deterministic name (`karpenter.k8s.aws/<hash of the contents and tags>`); the narrow
//! [`LaunchTemplateApi`]; and [`LaunchTemplateProvider`], the cache that creates a template on first use,
//! deletes it from EC2 when unused for [`LAUNCH_TEMPLATE_TTL`], hydrates from EC2 at start and deletes a node
//! class's templates when the class goes.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::api::{
    Ami, BlockDeviceMapping, ConnectionTracking, EnabledDisabled, HttpTokens, InterfaceType, MetadataOptions,
    VolumeType,
};
use crate::api::{AmiFamily, EC2NodeClass};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use karpenter_api::hash::fnv1a64;
use karpenter_cloudprovider::Clock;
use serde::Serialize;

use crate::api_error::{AwsApiError, AwsErrorKind};
// The tags of a node class's launch templates live with every other launch tag (crate::launch::tags).
use crate::launch::fleet::{EKS_CLUSTER_NAME_TAG, NODE_CLASS_TAG};
pub use crate::launch::tags::launch_template_tags;

/// Prefix of every launch template name Karpenter creates.
pub const NAME_PREFIX: &str = "karpenter.k8s.aws/";
/// How long an unused launch template stays cached (and in EC2).
pub const LAUNCH_TEMPLATE_TTL: Duration = Duration::from_secs(60);

/// An EBS block device of a launch template.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LtBlockDevice {
    /// `DeviceName`.
    pub device_name: String,
    /// `Ebs.VolumeSize` in GiB (rounded up).
    pub volume_size_gib: Option<u64>,
    /// `Ebs.VolumeType`.
    pub volume_type: Option<String>,
    /// `Ebs.Iops`.
    pub iops: Option<i64>,
    /// `Ebs.Throughput`.
    pub throughput: Option<i64>,
    /// `Ebs.Encrypted`.
    pub encrypted: Option<bool>,
    /// `Ebs.KmsKeyId`.
    pub kms_key_id: Option<String>,
    /// `Ebs.SnapshotId`.
    pub snapshot_id: Option<String>,
    /// `Ebs.DeleteOnTermination`.
    pub delete_on_termination: Option<bool>,
    /// `Ebs.VolumeInitializationRate`.
    pub volume_initialization_rate: Option<i32>,
}

/// `MetadataOptions` of a launch template (`InstanceMetadataTags` is always `disabled`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LtMetadataOptions {
    /// `HttpEndpoint`.
    pub http_endpoint: String,
    /// `HttpProtocolIpv6`; `None` leaves it out (the ISO partitions, whose EC2 does not take it).
    pub http_protocol_ipv6: Option<String>,
    /// `HttpPutResponseHopLimit`.
    pub http_put_response_hop_limit: i64,
    /// `HttpTokens`.
    pub http_tokens: String,
    /// `InstanceMetadataTags`.
    pub instance_metadata_tags: String,
}

impl From<&MetadataOptions> for LtMetadataOptions {
    fn from(m: &MetadataOptions) -> Self {
        let ed = |v: EnabledDisabled| if v == EnabledDisabled::Enabled { "enabled" } else { "disabled" };
        Self {
            http_endpoint: ed(m.http_endpoint).into(),
            http_protocol_ipv6: Some(ed(m.http_protocol_ipv6).into()),
            http_put_response_hop_limit: m.http_put_response_hop_limit,
            http_tokens: if m.http_tokens == HttpTokens::Required { "required" } else { "optional" }.into(),
            instance_metadata_tags: "disabled".into(),
        }
    }
}

/// `ConnectionTrackingSpecification` of a network interface (idle timeouts in seconds).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct LtConnectionTracking {
    /// `TcpEstablishedTimeout`.
    pub tcp_established_timeout: Option<i32>,
    /// `UdpStreamTimeout`.
    pub udp_stream_timeout: Option<i32>,
    /// `UdpTimeout`.
    pub udp_timeout: Option<i32>,
}

impl From<&ConnectionTracking> for LtConnectionTracking {
    fn from(c: &ConnectionTracking) -> Self {
        Self {
            tcp_established_timeout: c.tcp_established_timeout,
            udp_stream_timeout: c.udp_stream_timeout,
            udp_timeout: c.udp_timeout,
        }
    }
}

/// A network interface of a launch template.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LtNetworkInterface {
    /// `NetworkCardIndex`.
    pub network_card_index: i32,
    /// `DeviceIndex`.
    pub device_index: i32,
    /// `InterfaceType`: `efa`, `efa-only`, or `None` for a plain interface.
    pub interface_type: Option<String>,
    /// `AssociatePublicIpAddress`.
    pub associate_public_ip_address: Option<bool>,
    /// `Ipv4PrefixCount` (IPv4 clusters).
    pub ipv4_prefix_count: Option<i32>,
    /// `Ipv6PrefixCount` (IPv6 clusters).
    pub ipv6_prefix_count: Option<i32>,
    /// `Ipv6AddressCount` (1 on the primary interface of IPv6 clusters).
    pub ipv6_address_count: Option<i32>,
    /// `PrimaryIpv6` (the primary interface of IPv6 clusters).
    pub primary_ipv6: Option<bool>,
    /// `ConnectionTrackingSpecification` (the primary interface, from the node class).
    pub connection_tracking: Option<LtConnectionTracking>,
    /// `Groups`.
    pub security_group_ids: Vec<String>,
    /// `DeleteOnTermination` (always true).
    pub delete_on_termination: bool,
}

/// `Placement` of a launch template: tenancy and the placement group (id, partition).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct LtPlacement {
    /// `GroupId` of the placement group.
    pub group_id: Option<String>,
    /// `PartitionNumber` (partition placement groups).
    pub partition_number: Option<i32>,
    /// `Tenancy` (`default` or `dedicated`).
    pub tenancy: Option<String>,
}

/// `CapacityReservationSpecification.CapacityReservationPreference` (EC2's values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CapacityReservationPreference {
    /// `open`: EC2's default; the instance runs in any open reservation with matching attributes.
    Open,
    /// `none`: the instance never runs in a capacity reservation.
    None,
    /// `capacity-reservations-only`: the instance runs only in a capacity reservation (the targeted one).
    CapacityReservationsOnly,
}

impl CapacityReservationPreference {
    /// EC2's name of the preference.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::None => "none",
            Self::CapacityReservationsOnly => "capacity-reservations-only",
        }
    }

    /// The preference EC2 names `s`; `None` for a value this crate does not know.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Open, Self::None, Self::CapacityReservationsOnly].into_iter().find(|p| p.as_str() == s)
    }

    /// The preference of a launch template: a reserved launch targets its reservation
    /// (`capacity-reservations-only`); with the `ReservedCapacity` gate on every other launch says `none`, so
    /// on-demand and spot instances never land in (and are never mistaken for) an open reservation of the
    /// account; with the gate off the template leaves EC2's default (`open`) alone.
    pub fn for_launch(capacity_reservation_id: Option<&str>, reserved_capacity_gate: bool) -> Option<Self> {
        if capacity_reservation_id.is_some() {
            Some(Self::CapacityReservationsOnly)
        } else if reserved_capacity_gate {
            Some(Self::None)
        } else {
            None
        }
    }
}

impl fmt::Display for CapacityReservationPreference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Default for LtMetadataOptions {
    fn default() -> Self {
        Self::from(&MetadataOptions::default())
    }
}

/// The contents of a launch template (`LaunchTemplateData`). User data is plain text; the SDK adapter
/// base64-encodes it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LaunchTemplateData {
    /// `ImageId`.
    pub image_id: String,
    /// `IamInstanceProfile.Name`.
    pub instance_profile: Option<String>,
    /// `SecurityGroupIds` (empty when network interfaces carry the groups).
    pub security_group_ids: Vec<String>,
    /// `UserData` (plain).
    pub user_data: String,
    /// `BlockDeviceMappings`.
    pub block_device_mappings: Vec<LtBlockDevice>,
    /// `MetadataOptions`.
    pub metadata_options: LtMetadataOptions,
    /// `NetworkInterfaces`.
    pub network_interfaces: Vec<LtNetworkInterface>,
    /// `Monitoring.Enabled`.
    pub detailed_monitoring: bool,
    /// `Placement`: tenancy, placement group id and partition.
    pub placement: Option<LtPlacement>,
    /// `CapacityReservationSpecification.CapacityReservationTarget`: `Some(id)` targets the reservation (with
    /// preference `capacity-reservations-only`).
    pub capacity_reservation_id: Option<String>,
    /// `CapacityReservationSpecification.CapacityReservationPreference`
    /// ([`CapacityReservationPreference::for_launch`]); `None` leaves the specification out (EC2's `open`). Left
    /// out of the name hash when `None`, so templates made with the `ReservedCapacity` gate off keep their names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_preference: Option<CapacityReservationPreference>,
    /// `InstanceMarketOptions.MarketType` (`capacity-block`, `interruptible-capacity-reservation`).
    pub market_type: Option<String>,
    /// `CpuOptions.NestedVirtualization` enabled.
    pub nested_virtualization: bool,
    /// `EnclaveOptions.Enabled`: the EC2NodeClass's `enclaveOptions.enabled`; `None` leaves the options out.
    /// Left out of the name hash when `None`, so templates made before the field existed keep their names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enclave_enabled: Option<bool>,
    /// `TagSpecifications` for `network-interface` (and `spot-instances-request` for spot).
    pub resource_tags: BTreeMap<String, String>,
    /// Spot launches: `resource_tags` also tag the spot instance request.
    pub tag_spot_requests: bool,
}

/// A launch template to create: name, contents and its own tags.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LaunchTemplate {
    /// `LaunchTemplateName`.
    pub name: String,
    /// `LaunchTemplateData`.
    pub data: LaunchTemplateData,
    /// Tags of the launch template.
    pub tags: BTreeMap<String, String>,
}

impl LaunchTemplate {
    /// A launch template named after the hash of its contents and tags.
    pub fn new(data: LaunchTemplateData, tags: BTreeMap<String, String>) -> Self {
        let name = launch_template_name(&data, &tags);
        Self { name, data, tags }
    }
}

/// `karpenter.k8s.aws/<FNV-1a of the contents and tags>`: equal inputs share a template.
pub fn launch_template_name(data: &LaunchTemplateData, tags: &BTreeMap<String, String>) -> String {
    let text = serde_json::to_string(&(data, tags)).unwrap_or_default();
    format!("{NAME_PREFIX}{}", fnv1a64(text.as_bytes()))
}

fn volume_type(v: VolumeType) -> &'static str {
    match v {
        VolumeType::Standard => "standard",
        VolumeType::Io1 => "io1",
        VolumeType::Io2 => "io2",
        VolumeType::Gp2 => "gp2",
        VolumeType::Sc1 => "sc1",
        VolumeType::St1 => "st1",
        VolumeType::Gp3 => "gp3",
    }
}

fn block_device(m: &BlockDeviceMapping) -> LtBlockDevice {
    let ebs = m.ebs.clone().unwrap_or_default();
    LtBlockDevice {
        device_name: m.device_name.clone().unwrap_or_default(),
        volume_size_gib: ebs.volume_size_gib(),
        volume_type: ebs.volume_type.map(|v| volume_type(v).to_owned()),
        iops: ebs.iops,
        throughput: ebs.throughput,
        encrypted: ebs.encrypted,
        kms_key_id: ebs.kms_key_id.clone(),
        snapshot_id: ebs.snapshot_id.clone(),
        delete_on_termination: ebs.delete_on_termination,
        volume_initialization_rate: ebs.volume_initialization_rate,
    }
}

fn default_device(name: &str, gib: u64) -> LtBlockDevice {
    LtBlockDevice {
        device_name: name.into(),
        volume_size_gib: Some(gib),
        volume_type: Some("gp3".into()),
        encrypted: Some(true),
        delete_on_termination: Some(true),
        ..Default::default()
    }
}

/// The family's default block devices (used when the node class has none).
pub fn default_block_devices(family: AmiFamily) -> Vec<LtBlockDevice> {
    match family {
        AmiFamily::Al2 | AmiFamily::Al2023 => vec![default_device("/dev/xvda", 20)],
        AmiFamily::Bottlerocket => vec![default_device("/dev/xvda", 4), default_device("/dev/xvdb", 20)],
        AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025 => {
            vec![default_device("/dev/sda1", 50)]
        }
        AmiFamily::Custom => Vec::new(),
    }
}

/// What a launch template needs besides the node class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchTemplateInputs<'a> {
    /// The AMI.
    pub ami: &'a Ami,
    /// The user data (plain).
    pub user_data: String,
    /// `default` or `dedicated` (the `Placement.Tenancy`, unless `placement` gives one).
    pub tenancy: &'a str,
    /// The placement group (id, partition) to launch into; its `tenancy`, when set, wins over `tenancy`.
    pub placement: Option<LtPlacement>,
    /// The capacity type of the launch (`spot` adds the spot-request tag specification).
    pub capacity_type: &'a str,
    /// A targeted capacity reservation.
    pub capacity_reservation_id: Option<&'a str>,
    /// The `ReservedCapacity` feature gate: when on, launches without a reservation get preference `none`.
    pub reserved_capacity: bool,
    /// `capacity-block` / `interruptible-capacity-reservation`.
    pub market_type: Option<&'a str>,
    /// Tags for the network interfaces (the instance's tags).
    pub resource_tags: BTreeMap<String, String>,
    /// The cluster is IPv6 (its kube-dns IP is IPv6): the primary interface gets an IPv6 address and
    /// `ipPrefixCount` means IPv6 prefixes.
    pub ipv6: bool,
    /// EFA interfaces to generate: the instance types' `vpc.amazonaws.com/efa` count when the claim requests
    /// EFA, else 0. Ignored when the node class lists its interfaces.
    pub efa_count: i64,
    /// The AWS region of the launch ([`takes_imds_ipv6_option`]).
    pub region: &'a str,
}

/// The regions of the ISO partitions (`aws-iso`, `aws-iso-b`, `aws-iso-f`), where EC2 does not take the
/// `HttpProtocolIpv6` metadata option: a launch template that sets it is refused there.
const ISO_REGION_PREFIXES: [&str; 3] = ["us-iso-", "us-isob-", "us-isof-"];

/// Whether a launch template in `region` may carry `MetadataOptions.HttpProtocolIpv6`.
pub fn takes_imds_ipv6_option(region: &str) -> bool {
    !ISO_REGION_PREFIXES.iter().any(|p| region.starts_with(p))
}

/// The node class's interface settings (public IP, prefixes, IPv6 address, connection tracking), which every
/// interface but an `efa-only` one carries, as upstream sets them: EC2 refuses prefixes or a public IP on an
/// `efa-only` interface.
fn with_interface_settings(mut n: LtNetworkInterface, node_class: &EC2NodeClass, ipv6: bool) -> LtNetworkInterface {
    let spec = &node_class.spec;
    n.associate_public_ip_address = spec.associate_public_ip_address;
    if ipv6 {
        n.ipv6_prefix_count = spec.ip_prefix_count;
        n.ipv6_address_count = Some(1);
        n.primary_ipv6 = Some(true);
    } else {
        n.ipv4_prefix_count = spec.ip_prefix_count;
    }
    n.connection_tracking = spec.connection_tracking.as_ref().map(LtConnectionTracking::from);
    n
}

/// `NetworkInterfaces`: the node class's explicit list; else one `efa` interface per EFA (card `i`, device 0
/// for the first and 1 for the others); else a single primary interface when something needs one (public IP,
/// prefixes, IPv6, connection tracking); else none (the security groups then go on the template itself). Every
/// interface but an `efa-only` one carries the node class's interface settings ([`with_interface_settings`]).
pub fn network_interfaces(
    node_class: &EC2NodeClass,
    groups: &[String],
    ipv6: bool,
    efa_count: i64,
) -> Vec<LtNetworkInterface> {
    let spec = &node_class.spec;
    let base = |card: i32, device: i32, interface_type: Option<&str>| LtNetworkInterface {
        network_card_index: card,
        device_index: device,
        interface_type: interface_type.map(str::to_owned),
        security_group_ids: groups.to_vec(),
        delete_on_termination: true,
        ..Default::default()
    };
    if !spec.network_interfaces.is_empty() {
        return spec
            .network_interfaces
            .iter()
            .map(|n| {
                let efa_only = n.interface_type == InterfaceType::EfaOnly;
                let i = base(n.network_card_index, n.device_index, efa_only.then_some("efa-only"));
                if efa_only { i } else { with_interface_settings(i, node_class, ipv6) }
            })
            .collect();
    }
    if efa_count > 0 {
        return (0..i32::try_from(efa_count).unwrap_or(i32::MAX))
            .map(|card| {
                with_interface_settings(base(card, if card == 0 { 0 } else { 1 }, Some("efa")), node_class, ipv6)
            })
            .collect();
    }
    if spec.associate_public_ip_address.is_some()
        || spec.ip_prefix_count.is_some()
        || spec.connection_tracking.is_some()
        || ipv6
    {
        return vec![with_interface_settings(base(0, 0, None), node_class, ipv6)];
    }
    Vec::new()
}

/// The launch-template contents for a node class (its status gives security groups and instance profile).
pub fn launch_template_data(node_class: &EC2NodeClass, inputs: LaunchTemplateInputs<'_>) -> LaunchTemplateData {
    let spec = &node_class.spec;
    let status = node_class.status.clone().unwrap_or_default();
    let family = spec.effective_ami_family().unwrap_or(AmiFamily::Al2023);
    let mut groups: Vec<String> = status.security_groups.iter().map(|g| g.id.clone()).collect();
    groups.sort();
    let block_device_mappings = if spec.block_device_mappings.is_empty() {
        default_block_devices(family)
    } else {
        spec.block_device_mappings.iter().map(block_device).collect()
    };
    let network_interfaces = network_interfaces(node_class, &groups, inputs.ipv6, inputs.efa_count);
    let mut resource_tags = inputs.resource_tags;
    resource_tags.retain(|k, _| k != crate::launch::fleet::NODE_CLAIM_TAG);
    LaunchTemplateData {
        image_id: inputs.ami.id.clone(),
        instance_profile: status.instance_profile.clone(),
        security_group_ids: if network_interfaces.is_empty() { groups } else { Vec::new() },
        user_data: inputs.user_data,
        block_device_mappings,
        metadata_options: {
            let mut m = LtMetadataOptions::from(&spec.metadata_options);
            if !takes_imds_ipv6_option(inputs.region) {
                m.http_protocol_ipv6 = None;
            }
            m
        },
        network_interfaces,
        detailed_monitoring: spec.detailed_monitoring.unwrap_or(false),
        placement: Some({
            let mut p = inputs.placement.unwrap_or_default();
            p.tenancy = p.tenancy.or_else(|| Some(inputs.tenancy.to_owned()));
            p
        }),
        capacity_reservation_id: inputs.capacity_reservation_id.map(str::to_owned),
        capacity_reservation_preference: CapacityReservationPreference::for_launch(
            inputs.capacity_reservation_id,
            inputs.reserved_capacity,
        ),
        market_type: inputs.market_type.map(str::to_owned),
        nested_virtualization: spec
            .cpu_options
            .as_ref()
            .and_then(|c| c.nested_virtualization)
            .is_some_and(|v| v == EnabledDisabled::Enabled),
        enclave_enabled: spec.enclave_options.as_ref().and_then(|e| e.enabled),
        tag_spot_requests: inputs.capacity_type == "spot",
        resource_tags,
    }
}

/// A launch template EC2 has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchTemplateInfo {
    /// `LaunchTemplateName`.
    pub name: String,
    /// `LaunchTemplateId`.
    pub id: String,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
}

/// The EC2 launch-template calls Karpenter makes.
///
/// `describe_launch_template` answers `Ok(None)` when the name does not exist (the adapter maps
/// `InvalidLaunchTemplateName.NotFoundException`); `create_launch_template` of an existing name fails with
/// `InvalidLaunchTemplateName.AlreadyExistsException`, which [`LaunchTemplateProvider`] resolves by describing.
#[async_trait]
pub trait LaunchTemplateApi: Send + Sync + fmt::Debug {
    /// `CreateLaunchTemplate`.
    async fn create_launch_template(&self, template: &LaunchTemplate) -> Result<LaunchTemplateInfo, AwsApiError>;
    /// `DescribeLaunchTemplates` by name.
    async fn describe_launch_template(&self, name: &str) -> Result<Option<LaunchTemplateInfo>, AwsApiError>;
    /// `DescribeLaunchTemplates` with filter `tag:<key>=<value>`, all pages.
    async fn list_launch_templates(
        &self,
        tag_key: &str,
        tag_value: &str,
    ) -> Result<Vec<LaunchTemplateInfo>, AwsApiError>;
    /// `DeleteLaunchTemplate` by name (`Ok` when already gone).
    async fn delete_launch_template(&self, name: &str) -> Result<(), AwsApiError>;
}

#[derive(Clone, Debug)]
struct Entry {
    info: LaunchTemplateInfo,
    last_used: DateTime<Utc>,
}

/// The launch-template cache (see the module docs). Clones share the cache.
#[derive(Clone)]
pub struct LaunchTemplateProvider {
    api: Arc<dyn LaunchTemplateApi>,
    clock: Arc<dyn Clock>,
    cluster_name: String,
    ttl: Duration,
    cache: Arc<Mutex<BTreeMap<String, Entry>>>,
}

impl fmt::Debug for LaunchTemplateProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaunchTemplateProvider").field("cluster_name", &self.cluster_name).finish()
    }
}

impl LaunchTemplateProvider {
    /// A provider for `cluster_name` with [`LAUNCH_TEMPLATE_TTL`].
    pub fn new(api: Arc<dyn LaunchTemplateApi>, clock: Arc<dyn Clock>, cluster_name: &str) -> Self {
        Self { api, clock, cluster_name: cluster_name.into(), ttl: LAUNCH_TEMPLATE_TTL, cache: Arc::default() }
    }

    /// The clock the cache runs on.
    pub fn clock(&self) -> Arc<dyn Clock> {
        self.clock.clone()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Entry>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The launch template in EC2, created when missing; refreshes its cache entry.
    pub async fn ensure(&self, template: &LaunchTemplate) -> Result<LaunchTemplateInfo, AwsApiError> {
        let now = self.clock.now();
        if let Some(e) = self.lock().get_mut(&template.name) {
            e.last_used = now;
            return Ok(e.info.clone());
        }
        let info = match self.api.describe_launch_template(&template.name).await? {
            Some(info) => info,
            None => match self.api.create_launch_template(template).await {
                Ok(info) => info,
                Err(e) if e.code.contains("AlreadyExists") => {
                    self.api.describe_launch_template(&template.name).await?.ok_or(e)?
                }
                Err(e) => return Err(e),
            },
        };
        self.lock().insert(template.name.clone(), Entry { info: info.clone(), last_used: now });
        Ok(info)
    }

    /// Forgets a cached template (CreateFleet said it is gone).
    pub fn invalidate(&self, name: &str) {
        self.lock().remove(name);
    }

    /// The cached template names.
    pub fn cached(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Fills the cache from the cluster's templates in EC2 (at start / leader election).
    pub async fn hydrate(&self) -> Result<usize, AwsApiError> {
        let found = self.api.list_launch_templates(EKS_CLUSTER_NAME_TAG, &self.cluster_name).await?;
        let now = self.clock.now();
        let mut cache = self.lock();
        let mut n = 0;
        for info in found.into_iter().filter(|i| i.name.starts_with(NAME_PREFIX)) {
            cache.entry(info.name.clone()).or_insert(Entry { info, last_used: now });
            n += 1;
        }
        Ok(n)
    }

    /// Deletes templates unused for the TTL from EC2 and the cache; returns their names. A controller calls this
    /// periodically (every few seconds).
    pub async fn delete_expired(&self) -> Vec<String> {
        let now = self.clock.now();
        let ttl = chrono::Duration::from_std(self.ttl).unwrap_or(chrono::Duration::MAX);
        let expired: Vec<String> =
            self.lock().iter().filter(|(_, e)| now - e.last_used >= ttl).map(|(n, _)| n.clone()).collect();
        let mut deleted = Vec::new();
        for name in expired {
            // Used again since we looked: keep.
            if self.lock().get(&name).is_none_or(|e| now - e.last_used < ttl) {
                continue;
            }
            match self.api.delete_launch_template(&name).await {
                Ok(()) => {
                    self.lock().remove(&name);
                    deleted.push(name);
                }
                Err(e) if e.kind == AwsErrorKind::NotFound => {
                    self.lock().remove(&name);
                    deleted.push(name);
                }
                Err(e) => tracing::warn!(launch_template = %name, error = %e, "deleting an expired launch template"),
            }
        }
        deleted
    }

    /// Deletes every template of a node class (its finalizer calls this); returns their names.
    pub async fn delete_for_node_class(&self, node_class: &str) -> Result<Vec<String>, AwsApiError> {
        let found = self.api.list_launch_templates(NODE_CLASS_TAG, node_class).await?;
        let mut deleted = Vec::new();
        for info in found.into_iter().filter(|i| i.tags.get(EKS_CLUSTER_NAME_TAG) == Some(&self.cluster_name)) {
            match self.api.delete_launch_template(&info.name).await {
                Ok(()) => {}
                Err(e) if e.kind == AwsErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            self.invalidate(&info.name);
            deleted.push(info.name);
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use karpenter_testing::FakeClock;
    use serde_json::json;

    use super::*;
    use crate::launch::mock::{MockCall, MockEc2};

    fn class(extra: serde_json::Value) -> EC2NodeClass {
        let mut v = json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {
                "subnetSelectorTerms": [{"id": "subnet-a"}], "securityGroupSelectorTerms": [{"id": "sg-1"}],
                "amiSelectorTerms": [{"alias": "bottlerocket@latest"}], "role": "R", "tags": {"team": "a"}
            },
            "status": {"securityGroups": [{"id": "sg-2"}, {"id": "sg-1"}], "instanceProfile": "p"}
        });
        if let (Some(spec), Some(extra)) = (v["spec"].as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        serde_json::from_value(v).unwrap()
    }

    fn inputs(ami: &Ami) -> LaunchTemplateInputs<'_> {
        LaunchTemplateInputs {
            ami,
            user_data: "ud".into(),
            tenancy: "default",
            placement: None,
            capacity_type: "spot",
            ipv6: false,
            efa_count: 0,
            capacity_reservation_id: None,
            reserved_capacity: true,
            market_type: None,
            resource_tags: BTreeMap::from([("karpenter.sh/nodeclaim".to_string(), "x".to_string())]),
            region: "us-west-2",
        }
    }

    #[test]
    fn iso_partitions_leave_the_imds_ipv6_option_out() {
        let ami = Ami { id: "ami-1".into(), name: None, deprecated: false, requirements: vec![] };
        let nc = class(json!({"metadataOptions": {"httpProtocolIPv6": "enabled"}}));
        for (region, expected) in [
            ("us-west-2", Some("enabled")),
            ("us-gov-west-1", Some("enabled")),
            ("cn-north-1", Some("enabled")),
            ("us-iso-east-1", None),
            ("us-iso-west-1", None),
            ("us-isob-east-1", None),
            ("us-isof-south-1", None),
        ] {
            let data = launch_template_data(&nc, LaunchTemplateInputs { region, ..inputs(&ami) });
            assert_eq!(data.metadata_options.http_protocol_ipv6.as_deref(), expected, "{region}");
            assert_eq!(data.metadata_options.http_tokens, "required", "{region}: the other options stay");
        }
    }

    #[test]
    fn contents_from_the_node_class_and_a_stable_name() {
        let ami = Ami { id: "ami-1".into(), name: None, deprecated: false, requirements: vec![] };
        let nc = class(json!({}));
        let data = launch_template_data(&nc, inputs(&ami));
        assert_eq!(data.security_group_ids, ["sg-1", "sg-2"]);
        assert_eq!(data.instance_profile.as_deref(), Some("p"));
        assert_eq!(data.block_device_mappings, default_block_devices(AmiFamily::Bottlerocket));
        assert_eq!(data.block_device_mappings.len(), 2, "Bottlerocket: root and data volume");
        assert_eq!(data.metadata_options.http_tokens, "required");
        assert_eq!(data.metadata_options.instance_metadata_tags, "disabled");
        assert!(data.resource_tags.is_empty(), "the NodeClaim tag stays off launch templates");
        let tags = launch_template_tags("c", &nc, "default");
        assert_eq!(tags.get("team").map(String::as_str), Some("a"));
        assert_eq!(tags.get(EKS_CLUSTER_NAME_TAG).map(String::as_str), Some("c"));
        let a = LaunchTemplate::new(data.clone(), tags.clone());
        let b = LaunchTemplate::new(data.clone(), tags.clone());
        assert_eq!(a.name, b.name);
        assert!(a.name.starts_with(NAME_PREFIX));
        let mut other = data;
        other.image_id = "ami-2".into();
        assert_ne!(LaunchTemplate::new(other, tags).name, a.name);

        let nc = class(json!({
            "associatePublicIPAddress": false,
            "blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": true,
                                     "ebs": {"volumeSize": "100Gi", "volumeType": "gp3", "encrypted": true}}]
        }));
        let data = launch_template_data(&nc, inputs(&ami));
        assert!(data.security_group_ids.is_empty(), "groups go on the interface");
        assert_eq!(data.network_interfaces[0].associate_public_ip_address, Some(false));
        assert_eq!(data.network_interfaces[0].security_group_ids, ["sg-1", "sg-2"]);
        assert_eq!(data.block_device_mappings[0].volume_size_gib, Some(100));
    }

    fn efa_inputs(ami: &Ami, efa_count: i64, ipv6: bool) -> LaunchTemplateInputs<'_> {
        LaunchTemplateInputs { efa_count, ipv6, ..inputs(ami) }
    }

    #[test]
    fn network_interfaces_explicit_efa_or_primary() {
        let ami = Ami { id: "ami-1".into(), name: None, deprecated: false, requirements: vec![] };
        let groups = ["sg-1", "sg-2"];
        // Nothing needs an interface: groups stay on the template.
        let data = launch_template_data(&class(json!({})), efa_inputs(&ami, 0, false));
        assert!(data.network_interfaces.is_empty());
        assert_eq!(data.security_group_ids, groups);

        // EFA requested (count 3): one `efa` interface per card, device 0 then 1; groups move onto them.
        let nc = class(json!({"associatePublicIPAddress": true, "ipPrefixCount": 2}));
        let data = launch_template_data(&nc, efa_inputs(&ami, 3, false));
        let cards: Vec<(i32, i32, Option<&str>)> = data
            .network_interfaces
            .iter()
            .map(|n| (n.network_card_index, n.device_index, n.interface_type.as_deref()))
            .collect();
        assert_eq!(cards, [(0, 0, Some("efa")), (1, 1, Some("efa")), (2, 1, Some("efa"))]);
        assert!(data.security_group_ids.is_empty());
        assert!(data.network_interfaces.iter().all(|n| n.security_group_ids == groups && n.delete_on_termination));
        // Each carries the interface settings, as upstream sets them (not only the primary).
        for n in &data.network_interfaces {
            assert_eq!((n.associate_public_ip_address, n.ipv4_prefix_count), (Some(true), Some(2)), "{n:?}");
        }

        // An explicit list wins over EFA generation; every interface but the efa-only one carries the settings.
        let nc = class(json!({
            "networkInterfaces": [
                {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
                {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"}
            ],
            "associatePublicIPAddress": false,
            "connectionTracking": {"tcpEstablishedTimeout": 600}
        }));
        let data = launch_template_data(&nc, efa_inputs(&ami, 8, false));
        assert_eq!(data.network_interfaces.len(), 2);
        assert_eq!(data.network_interfaces[0].interface_type, None);
        assert_eq!(data.network_interfaces[1].interface_type.as_deref(), Some("efa-only"));
        assert_eq!(data.network_interfaces[0].associate_public_ip_address, Some(false));
        let tracking = data.network_interfaces[0].connection_tracking.clone().unwrap();
        assert_eq!(tracking.tcp_established_timeout, Some(600));
        assert_eq!(tracking.udp_timeout, None);
        assert_eq!(data.network_interfaces[1].connection_tracking, None);

        // Connection tracking alone makes a primary interface.
        let nc = class(json!({"connectionTracking": {"udpTimeout": 30, "udpStreamTimeout": 60}}));
        let data = launch_template_data(&nc, efa_inputs(&ami, 0, false));
        assert_eq!(data.network_interfaces.len(), 1);
        assert_eq!(
            data.network_interfaces[0].connection_tracking,
            Some(LtConnectionTracking {
                tcp_established_timeout: None,
                udp_stream_timeout: Some(60),
                udp_timeout: Some(30)
            })
        );
        assert!(data.security_group_ids.is_empty());

        // IPv6 clusters: a primary interface with an IPv6 address; ipPrefixCount counts IPv6 prefixes.
        let data = launch_template_data(&class(json!({})), efa_inputs(&ami, 0, true));
        let p = &data.network_interfaces[0];
        assert_eq!((p.primary_ipv6, p.ipv6_address_count, p.ipv6_prefix_count), (Some(true), Some(1), None));
        let data = launch_template_data(&class(json!({"ipPrefixCount": 1})), efa_inputs(&ami, 0, true));
        let p = &data.network_interfaces[0];
        assert_eq!((p.ipv4_prefix_count, p.ipv6_prefix_count), (None, Some(1)));
    }

    #[test]
    fn placement_cpu_options_spot_tags_and_the_name_hash() {
        let ami = Ami { id: "ami-1".into(), name: None, deprecated: false, requirements: vec![] };
        let nc = class(json!({}));
        let tags = launch_template_tags("c", &nc, "default");
        let name = |i: LaunchTemplateInputs<'_>| LaunchTemplate::new(launch_template_data(&nc, i), tags.clone()).name;
        let base = launch_template_data(&nc, inputs(&ami));
        assert_eq!(base.placement, Some(LtPlacement { tenancy: Some("default".into()), ..Default::default() }));
        assert!(base.tag_spot_requests, "spot launches tag the spot request");
        assert!(!base.nested_virtualization);
        let dedicated = LaunchTemplateInputs { tenancy: "dedicated", ..inputs(&ami) };
        assert_eq!(
            launch_template_data(&nc, dedicated.clone()).placement.unwrap().tenancy.as_deref(),
            Some("dedicated")
        );
        let group = LtPlacement { group_id: Some("pg-1".into()), partition_number: Some(2), tenancy: None };
        let grouped = LaunchTemplateInputs { placement: Some(group.clone()), ..inputs(&ami) };
        assert_eq!(
            launch_template_data(&nc, grouped.clone()).placement,
            Some(LtPlacement { tenancy: Some("default".into()), ..group })
        );
        let on_demand = LaunchTemplateInputs { capacity_type: "on-demand", ..inputs(&ami) };
        assert!(!launch_template_data(&nc, on_demand.clone()).tag_spot_requests);
        // Every new parameter changes the template's name.
        let names = [
            name(inputs(&ami)),
            name(dedicated),
            name(grouped),
            name(on_demand),
            name(efa_inputs(&ami, 2, false)),
            name(efa_inputs(&ami, 0, true)),
        ];
        let distinct: std::collections::BTreeSet<&String> = names.iter().collect();
        assert_eq!(distinct.len(), names.len(), "{names:?}");
        let nested = class(json!({"cpuOptions": {"nestedVirtualization": "enabled"}}));
        assert!(launch_template_data(&nested, inputs(&ami)).nested_virtualization);
        let tracked = class(json!({"connectionTracking": {"udpTimeout": 30}}));
        let with = LaunchTemplate::new(launch_template_data(&tracked, inputs(&ami)), tags.clone()).name;
        assert_ne!(with, names[0]);
        // Enclave options: unset leaves them out (and the name as before the field existed); set, true or false,
        // passes the value and names another template.
        assert_eq!(base.enclave_enabled, None);
        assert!(!serde_json::to_string(&base).unwrap().contains("enclave"), "unset is not hashed");
        let enclave = |enabled: bool| class(json!({"enclaveOptions": {"enabled": enabled}}));
        let on = launch_template_data(&enclave(true), inputs(&ami));
        let off = launch_template_data(&enclave(false), inputs(&ami));
        assert_eq!((on.enclave_enabled, off.enclave_enabled), (Some(true), Some(false)));
        let named = |d: LaunchTemplateData| LaunchTemplate::new(d, tags.clone()).name;
        let (on, off) = (named(on), named(off));
        assert!(on != names[0] && off != names[0] && on != off, "{on} {off}");
        let empty = class(json!({"enclaveOptions": {}}));
        assert_eq!(named(launch_template_data(&empty, inputs(&ami))), names[0], "no value: no EnclaveOptions");
    }

    #[test]
    fn capacity_reservation_preference_per_capacity_type_and_gate() {
        use CapacityReservationPreference as P;
        let ami = Ami { id: "ami-1".into(), name: None, deprecated: false, requirements: vec![] };
        let nc = class(json!({}));
        let tags = launch_template_tags("c", &nc, "default");
        let data = |capacity_type: &'static str, reservation: Option<&'static str>, gate: bool| {
            let i = LaunchTemplateInputs {
                capacity_type,
                capacity_reservation_id: reservation,
                reserved_capacity: gate,
                ..inputs(&ami)
            };
            launch_template_data(&nc, i)
        };
        let spec = |d: &LaunchTemplateData| (d.capacity_reservation_preference, d.capacity_reservation_id.clone());
        let cr = Some("cr-1".to_owned());
        // Gate on: reserved targets its reservation only; on-demand and spot stay out of every reservation.
        assert_eq!(spec(&data("reserved", Some("cr-1"), true)), (Some(P::CapacityReservationsOnly), cr.clone()));
        assert_eq!(spec(&data("on-demand", None, true)), (Some(P::None), None));
        assert_eq!(spec(&data("spot", None, true)), (Some(P::None), None));
        // Gate off: no specification at all (EC2's `open`); a reservation id still targets (never happens: no
        // reserved offerings without the gate).
        assert_eq!(spec(&data("on-demand", None, false)), (None, None));
        assert_eq!(spec(&data("spot", None, false)), (None, None));
        assert_eq!(spec(&data("reserved", Some("cr-1"), false)), (Some(P::CapacityReservationsOnly), cr));

        // The preference is part of the name; left out of the hashed text when absent (gate-off names keep the
        // names they had before the field existed).
        let name = |d: LaunchTemplateData| LaunchTemplate::new(d, tags.clone()).name;
        assert_ne!(name(data("on-demand", None, true)), name(data("on-demand", None, false)));
        assert_ne!(name(data("spot", None, true)), name(data("spot", None, false)));
        assert_ne!(name(data("on-demand", None, true)), name(data("reserved", Some("cr-1"), true)));
        assert_eq!(name(data("reserved", Some("cr-1"), true)), name(data("reserved", Some("cr-1"), false)));
        let text = |d: LaunchTemplateData| serde_json::to_string(&d).unwrap();
        assert!(!text(data("on-demand", None, false)).contains("capacity_reservation_preference"));
        assert!(text(data("on-demand", None, true)).contains(r#""capacity_reservation_preference":"none""#));
        assert!(
            text(data("reserved", Some("cr-1"), true))
                .contains(r#""capacity_reservation_preference":"capacity-reservations-only""#)
        );

        // EC2's names round-trip; unknown ones are not guessed.
        for p in [P::Open, P::None, P::CapacityReservationsOnly] {
            assert_eq!(P::parse(p.as_str()), Some(p));
            assert_eq!(p.to_string(), p.as_str());
        }
        assert_eq!(P::parse("capacity-reservations-first"), None);
        assert_eq!(P::parse(""), None);
    }

    #[tokio::test]
    async fn cache_creates_once_deletes_when_unused_hydrates_and_cleans_up_a_class() {
        let clock = FakeClock::default();
        let ec2 = MockEc2::new(Arc::new(clock.clone()));
        let p = LaunchTemplateProvider::new(Arc::new(ec2.clone()), Arc::new(clock.clone()), "c");
        let ami = Ami { id: "ami-1".into(), name: None, deprecated: false, requirements: vec![] };
        let nc = class(json!({}));
        let lt =
            LaunchTemplate::new(launch_template_data(&nc, inputs(&ami)), launch_template_tags("c", &nc, "default"));
        p.ensure(&lt).await.unwrap();
        p.ensure(&lt).await.unwrap();
        let creates = || ec2.calls().iter().filter(|c| matches!(c, MockCall::CreateLaunchTemplate(_))).count();
        assert_eq!(creates(), 1);
        clock.step_secs(30);
        p.ensure(&lt).await.unwrap();
        clock.step_secs(45);
        assert!(p.delete_expired().await.is_empty(), "used 45 s ago");
        clock.step_secs(16);
        assert_eq!(p.delete_expired().await, vec![lt.name.clone()]);
        assert!(ec2.launch_templates().is_empty());
        // Another process's template is found, not recreated.
        let q = LaunchTemplateProvider::new(Arc::new(ec2.clone()), Arc::new(clock.clone()), "c");
        q.ensure(&lt).await.unwrap();
        let p2 = LaunchTemplateProvider::new(Arc::new(ec2.clone()), Arc::new(clock.clone()), "c");
        assert_eq!(p2.hydrate().await.unwrap(), 1);
        assert_eq!(p2.cached(), vec![lt.name.clone()]);
        assert_eq!(p2.delete_for_node_class("default").await.unwrap(), vec![lt.name.clone()]);
        assert!(ec2.launch_templates().is_empty());
        assert!(p2.cached().is_empty());
    }
}
