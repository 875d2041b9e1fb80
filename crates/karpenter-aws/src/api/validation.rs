//! Rust validation of EC2NodeClass: the rules the CRD's schema and CEL enforce, reported with field paths.

use std::collections::{BTreeMap, BTreeSet};

use super::kubelet_fields;
use super::{
    Alias, AmiFamily, AmiSelectorTerm, BlockDevice, BlockDeviceMapping, CapacityReservationSelectorTerm,
    ConnectionTracking, EC2NodeClass, EC2NodeClassSpec, InterfaceType, KubeletConfiguration, MAX_ALIAS_LEN, MaxPods,
    MetadataOptions, NetworkInterface, PlacementGroupSelector, ReservedValue, SecurityGroupSelectorTerm,
    SubnetSelectorTerm, interpreted_decode_error,
};
use karpenter_requirements::Quantity;

use karpenter_api::crd::QUANTITY_PATTERN;
use karpenter_api::validation::{Validate, ValidationContext, Violations, field, index, key};

/// Maximum number of subnet / security group / AMI / capacity reservation selector terms.
pub const MAX_SELECTOR_TERMS: usize = 30;
/// Maximum number of tags in one selector term.
pub const MAX_SELECTOR_TAGS: usize = 20;
/// Maximum number of block device mappings.
pub const MAX_BLOCK_DEVICE_MAPPINGS: usize = 50;
/// Maximum number of network interfaces.
pub const MAX_NETWORK_INTERFACES: usize = 150;
/// Tag keys `spec.tags` may not use (Karpenter sets them itself).
pub const FORBIDDEN_TAG_KEYS: [&str; 4] =
    ["eks:eks-cluster-name", "karpenter.sh/nodepool", "karpenter.sh/nodeclaim", "karpenter.k8s.aws/ec2nodeclass"];
/// Tag key prefix `spec.tags` may not use.
pub const FORBIDDEN_TAG_PREFIX: &str = "kubernetes.io/cluster";
/// Keys of `systemReserved` / `kubeReserved`.
pub const RESERVED_RESOURCES: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pid"];
/// Keys of `evictionHard` / `evictionSoft` / `evictionSoftGracePeriod`.
pub const EVICTION_SIGNALS: [&str; 6] = [
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];

const AMI_OWNER_ALIASES: [&str; 3] = ["self", "amazon", "aws-marketplace"];

/// Parses a block device size (`100Gi`, `64000G`, `58Ti`, `64T`) into bytes. Accepts exactly what the CRD's
/// pattern accepts: a positive integer without leading zeros, unit `Gi` (≤ 59000), `G` (≤ 64000), `Ti` (≤ 58) or
/// `T` (≤ 64).
pub fn parse_volume_size(s: &str) -> Option<u64> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let (num, unit) = s.split_at(digits);
    if num.is_empty() || num.starts_with('0') || num.len() > 5 {
        return None;
    }
    let n: u64 = num.parse().ok()?;
    let (max, bytes_per_unit) = match unit {
        "Gi" => (59_000, 1u64 << 30),
        "G" => (64_000, 1_000_000_000),
        "Ti" => (58, 1u64 << 40),
        "T" => (64, 1_000_000_000_000),
        _ => return None,
    };
    (n <= max).then(|| n * bytes_per_unit)
}

/// `^<prefix>[0-9a-z]+$`.
fn is_prefixed_id(s: &str, prefix: &str) -> bool {
    s.strip_prefix(prefix)
        .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_lowercase()))
}

fn is_account_id(s: &str) -> bool {
    s.len() == 12 && s.bytes().all(|b| b.is_ascii_digit())
}

fn check_id(id: Option<&str>, prefix: &str, path: &str, out: &mut Violations) {
    if let Some(id) = id
        && !is_prefixed_id(id, prefix)
    {
        out.push(path, format!("invalid id {id:?}: must match ^{prefix}[0-9a-z]+$"));
    }
}

/// Selector-term tags: at most 20, non-empty keys and values.
fn check_selector_tags(tags: Option<&BTreeMap<String, String>>, path: &str, out: &mut Violations) {
    let Some(tags) = tags else { return };
    if tags.len() > MAX_SELECTOR_TAGS {
        out.push(path, format!("must have at most {MAX_SELECTOR_TAGS} tags, found {}", tags.len()));
    }
    for (k, v) in tags {
        if k.is_empty() || v.is_empty() {
            out.push(key(path, k), "empty tag keys or values aren't supported");
        }
    }
}

fn check_term_count(len: usize, min: usize, path: &str, out: &mut Violations) {
    if len < min {
        out.push(path, format!("must have at least {min} item(s)"));
    }
    if len > MAX_SELECTOR_TERMS {
        out.push(path, format!("must have at most {MAX_SELECTOR_TERMS} items, found {len}"));
    }
}

fn validate_subnet_terms(terms: &[SubnetSelectorTerm], path: &str, out: &mut Violations) {
    check_term_count(terms.len(), 1, path, out);
    for (i, t) in terms.iter().enumerate() {
        let tp = index(path, i);
        if t.tags.is_none() && t.id.is_none() {
            out.push(&tp, "expected at least one, got none, ['tags', 'id']");
        }
        if t.id.is_some() && t.tags.is_some() {
            out.push(&tp, "'id' is mutually exclusive, cannot be set with a combination of other fields");
        }
        check_selector_tags(t.tags.as_ref(), &field(&tp, "tags"), out);
        check_id(t.id.as_deref(), "subnet-", &field(&tp, "id"), out);
    }
}

fn validate_security_group_terms(terms: &[SecurityGroupSelectorTerm], path: &str, out: &mut Violations) {
    check_term_count(terms.len(), 1, path, out);
    for (i, t) in terms.iter().enumerate() {
        let tp = index(path, i);
        let (tags, id, name) = (t.tags.is_some(), t.id.is_some(), t.name.is_some());
        if !tags && !id && !name {
            out.push(&tp, "expected at least one, got none, ['tags', 'id', 'name']");
        }
        if id && (tags || name) {
            out.push(&tp, "'id' is mutually exclusive, cannot be set with a combination of other fields");
        }
        if name && (tags || id) {
            out.push(&tp, "'name' is mutually exclusive, cannot be set with a combination of other fields");
        }
        check_selector_tags(t.tags.as_ref(), &field(&tp, "tags"), out);
        check_id(t.id.as_deref(), "sg-", &field(&tp, "id"), out);
    }
}

fn validate_capacity_reservation_terms(terms: &[CapacityReservationSelectorTerm], path: &str, out: &mut Violations) {
    check_term_count(terms.len(), 0, path, out);
    for (i, t) in terms.iter().enumerate() {
        let tp = index(path, i);
        let (tags, id, owner, criteria) =
            (t.tags.is_some(), t.id.is_some(), t.owner_id.is_some(), t.instance_match_criteria.is_some());
        if !tags && !id && !criteria {
            out.push(&tp, "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']");
        }
        if id && (tags || owner || criteria) {
            out.push(&tp, "'id' is mutually exclusive, cannot be set with a combination of other fields");
        }
        check_selector_tags(t.tags.as_ref(), &field(&tp, "tags"), out);
        check_id(t.id.as_deref(), "cr-", &field(&tp, "id"), out);
        if let Some(o) = &t.owner_id
            && !is_account_id(o)
        {
            out.push(field(&tp, "ownerID"), format!("invalid ownerID {o:?}: must be a 12-digit AWS account id"));
        }
    }
}

fn validate_placement_group(pg: &PlacementGroupSelector, path: &str, out: &mut Violations) {
    if pg.name.is_some() == pg.id.is_some() {
        out.push(path, "expected exactly one of ['name', 'id']");
    }
    if let Some(n) = &pg.name
        && (n.is_empty() || n.len() > 255)
    {
        out.push(field(path, "name"), "must be 1 to 255 characters");
    }
    check_id(pg.id.as_deref(), "pg-", &field(path, "id"), out);
}

fn validate_ami_terms(terms: &[AmiSelectorTerm], path: &str, out: &mut Violations) {
    check_term_count(terms.len(), 1, path, out);
    for (i, t) in terms.iter().enumerate() {
        let tp = index(path, i);
        let (alias, tags, id, name, owner, ssm) = (
            t.alias.is_some(),
            t.tags.is_some(),
            t.id.is_some(),
            t.name.is_some(),
            t.owner.is_some(),
            t.ssm_parameter.is_some(),
        );
        if !alias && !tags && !id && !name && !ssm {
            out.push(&tp, "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']");
        }
        if id && (alias || tags || name || owner) {
            out.push(&tp, "'id' is mutually exclusive, cannot be set with a combination of other fields");
        }
        if alias && (id || tags || name || owner || ssm) {
            out.push(&tp, "'alias' is mutually exclusive, cannot be set with a combination of other fields");
        }
        if let Some(a) = &t.alias {
            let ap = field(&tp, "alias");
            if a.len() > MAX_ALIAS_LEN {
                out.push(&ap, format!("may be at most {MAX_ALIAS_LEN} characters"));
            } else if let Err(e) = a.parse::<Alias>() {
                out.push(&ap, e.to_string());
            }
            if terms.len() > 1 {
                out.push(
                    &ap,
                    "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
                );
            }
        }
        check_selector_tags(t.tags.as_ref(), &field(&tp, "tags"), out);
        check_id(t.id.as_deref(), "ami-", &field(&tp, "id"), out);
        if let Some(o) = &t.owner
            && !is_account_id(o)
            && !AMI_OWNER_ALIASES.contains(&o.as_str())
        {
            out.push(
                field(&tp, "owner"),
                format!("invalid owner {o:?}: must be an AWS account id, 'self', 'amazon' or 'aws-marketplace'"),
            );
        }
        if let Some(p) = &t.ssm_parameter
            && (p.is_empty() || p.len() > 2048)
        {
            out.push(field(&tp, "ssmParameter"), "must be 1 to 2048 characters");
        }
    }
}

fn validate_ami_family(spec: &EC2NodeClassSpec, path: &str, out: &mut Violations) {
    // The family of an alias term, as written (even if the alias is otherwise invalid, the family may be fine).
    let alias_family = spec
        .ami_selector_terms
        .iter()
        .filter_map(|t| t.alias.as_deref())
        .map(|a| a.split_once('@').map_or(a, |(f, _)| f))
        .next();
    let fp = field(path, "amiFamily");
    match (spec.ami_family, alias_family) {
        (None, None) => out.push(fp, "amiFamily must be specified if amiSelectorTerms does not contain an alias"),
        (Some(AmiFamily::Custom), _) | (_, None) | (None, Some(_)) => {}
        (Some(f), Some(af)) => {
            if f.alias_name() != Some(af) {
                out.push(fp, format!("amiFamily {f} must be Custom or match the family of the alias ({af})"));
            }
        }
    }
}

fn validate_tags(tags: &BTreeMap<String, String>, path: &str, out: &mut Violations) {
    for k in tags.keys() {
        let kp = key(path, k);
        if k.is_empty() {
            out.push(kp, "empty tag keys aren't supported");
        } else if FORBIDDEN_TAG_KEYS.contains(&k.as_str()) {
            out.push(kp, format!("tag contains a restricted tag matching {k}"));
        } else if k.starts_with(FORBIDDEN_TAG_PREFIX) {
            out.push(kp, format!("tag contains a restricted tag matching {FORBIDDEN_TAG_PREFIX}/"));
        }
    }
}

/// Why `v` is not a non-negative quantity, if it is not.
fn non_negative_quantity_error(v: &str) -> Option<String> {
    match v.parse::<Quantity>() {
        Err(e) => Some(format!("invalid quantity {v:?}: {e} (must match {QUANTITY_PATTERN})")),
        // `-0` is zero but still written with a sign, which the schema pattern (and upstream's CEL) reject.
        Ok(q) if q.is_negative() || v.starts_with('-') => Some(format!("{v:?} cannot be a negative resource quantity")),
        Ok(_) => None,
    }
}

/// `^(100(\.0{1,2})?|[0-9]{1,2}(\.[0-9]{1,2})?)%$`.
fn is_percentage(v: &str) -> bool {
    let Some(num) = v.strip_suffix('%') else { return false };
    let (int, frac) = match num.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (num, None),
    };
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if let Some(f) = frac
        && (f.is_empty() || f.len() > 2 || !all_digits(f))
    {
        return false;
    }
    match int {
        "100" => frac.is_none_or(|f| f.bytes().all(|b| b == b'0')),
        _ => !int.is_empty() && int.len() <= 2 && all_digits(int),
    }
}

fn validate_reserved(map: &BTreeMap<String, String>, path: &str, out: &mut Violations) {
    for (k, v) in map {
        let kp = key(path, k);
        if !RESERVED_RESOURCES.contains(&k.as_str()) {
            out.push(&kp, format!("invalid key {k:?}, valid keys are {}", RESERVED_RESOURCES.join(", ")));
        }
        // A value that is not a quantity is a CEL expression: the AWS controller compiles and evaluates it.
        if let ReservedValue::Quantity(q) = ReservedValue::parse(v)
            && (q.is_negative() || v.starts_with('-'))
        {
            out.push(&kp, format!("{v:?} cannot be a negative resource quantity"));
        }
    }
}

fn validate_eviction_keys<V>(map: &BTreeMap<String, V>, path: &str, out: &mut Violations) {
    for k in map.keys() {
        if !EVICTION_SIGNALS.contains(&k.as_str()) {
            out.push(key(path, k), format!("invalid key {k:?}, valid keys are {}", EVICTION_SIGNALS.join(", ")));
        }
    }
}

fn validate_eviction_thresholds(map: &BTreeMap<String, String>, path: &str, out: &mut Violations) {
    validate_eviction_keys(map, path, out);
    for (k, v) in map {
        if v.ends_with('%') {
            if !is_percentage(v) {
                out.push(key(path, k), format!("invalid percentage {v:?}: must be between 0% and 100%"));
            }
        } else if let Some(e) = non_negative_quantity_error(v) {
            out.push(key(path, k), e);
        }
    }
}

/// Validates `spec.kubelet` (found at `path`) for a class of AMI `family` (`None` when the class has none, which
/// other rules report): each field against upstream's `KubeletConfiguration` field set (unknown fields and
/// wrong JSON shapes), the fields the family cannot carry, then the semantic rules the CRD enforced before the
/// map was opened (v1.15). The EC2NodeClass controller reports the result as `InvalidKubeletConfiguration`.
pub fn validate_kubelet_configuration(k: &KubeletConfiguration, family: Option<AmiFamily>, path: &str) -> Violations {
    let mut out = Violations::new();
    for (name, v) in &k.other {
        let fp = field(path, name);
        let before = out.len();
        kubelet_fields::check_field(name, v, &fp, &mut out);
        // An interpreted field is in `other` only because its typed decoding failed: say why when its JSON
        // shape alone did not (e.g. a maxPods beyond int32 or a grace period KDuration rejects).
        if out.len() == before
            && let Some(e) = interpreted_decode_error(name, v)
        {
            out.push(fp, e);
        }
    }
    validate_family_passthrough(k, family, path, &mut out);
    validate_kubelet(k, path, &mut out);
    out
}

/// Bottlerocket takes only the fields it has a setting for; the Windows bootstrap takes only command-line flags,
/// so no field beyond the interpreted ones. Custom gets no bootstrap from Karpenter: everything is accepted there.
fn validate_family_passthrough(k: &KubeletConfiguration, family: Option<AmiFamily>, path: &str, out: &mut Violations) {
    let Some(family) = family else { return };
    for (name, _) in k.passthrough() {
        if kubelet_fields::kubelet_field_kind(name).is_none() {
            continue;
        }
        if family == AmiFamily::Bottlerocket && kubelet_fields::bottlerocket_setting(name).is_none() {
            let supported: Vec<&str> = kubelet_fields::bottlerocket_fields().collect();
            out.push(
                field(path, name),
                format!(
                    "Bottlerocket has no setting for this field; beyond the interpreted fields it takes {}",
                    supported.join(", ")
                ),
            );
        } else if family.is_windows() {
            out.push(
                field(path, name),
                format!("not supported on {family}: its bootstrap takes only the fields Karpenter interprets"),
            );
        }
    }
}

fn validate_kubelet(k: &KubeletConfiguration, path: &str, out: &mut Violations) {
    if let Some(e) = k.max_pods.as_ref().and_then(MaxPods::as_expression)
        && e.starts_with('-')
    {
        out.push(field(path, "maxPods"), "a maxPods expression must not start with '-'");
    }
    let static_max_pods = k.max_pods.as_ref().and_then(MaxPods::as_static);
    for (name, v) in [("maxPods", static_max_pods), ("podsPerCore", k.pods_per_core)] {
        if let Some(v) = v
            && v < 0
        {
            out.push(field(path, name), "must be greater than or equal to 0");
        }
    }
    validate_reserved(&k.system_reserved, &field(path, "systemReserved"), out);
    validate_reserved(&k.kube_reserved, &field(path, "kubeReserved"), out);
    validate_eviction_thresholds(&k.eviction_hard, &field(path, "evictionHard"), out);
    let soft_path = field(path, "evictionSoft");
    let grace_path = field(path, "evictionSoftGracePeriod");
    validate_eviction_thresholds(&k.eviction_soft, &soft_path, out);
    validate_eviction_keys(&k.eviction_soft_grace_period, &grace_path, out);
    for s in k.eviction_soft.keys() {
        if !k.eviction_soft_grace_period.contains_key(s) {
            out.push(
                key(&soft_path, s),
                format!("evictionSoft key {s:?} does not have a matching evictionSoftGracePeriod"),
            );
        }
    }
    for g in k.eviction_soft_grace_period.keys() {
        if !k.eviction_soft.contains_key(g) {
            out.push(
                key(&grace_path, g),
                format!("evictionSoftGracePeriod key {g:?} does not have a matching evictionSoft"),
            );
        }
    }
    let high_path = field(path, "imageGCHighThresholdPercent");
    let low_path = field(path, "imageGCLowThresholdPercent");
    for (p, v) in [(&high_path, k.image_gc_high_threshold_percent), (&low_path, k.image_gc_low_threshold_percent)] {
        if let Some(v) = v
            && !(0..=100).contains(&v)
        {
            out.push(p.as_str(), "must be between 0 and 100");
        }
    }
    // The kubelet compares the two with its defaults in place of an unset one, and refuses to start when the
    // low threshold is not below the high one: `imageGCHighThresholdPercent: 50` alone fails against the
    // default low of 80.
    match (k.image_gc_high_threshold_percent, k.image_gc_low_threshold_percent) {
        (None, None) => {}
        (Some(high), Some(low)) if high <= low => {
            out.push(high_path, "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent");
        }
        (Some(high), None) if high <= KUBELET_DEFAULT_IMAGE_GC_LOW_PERCENT => out.push(
            high_path,
            format!(
                "must be greater than the kubelet's default imageGCLowThresholdPercent \
                 ({KUBELET_DEFAULT_IMAGE_GC_LOW_PERCENT}); set imageGCLowThresholdPercent too"
            ),
        ),
        (None, Some(low)) if low >= KUBELET_DEFAULT_IMAGE_GC_HIGH_PERCENT => out.push(
            low_path,
            format!(
                "must be less than the kubelet's default imageGCHighThresholdPercent \
                 ({KUBELET_DEFAULT_IMAGE_GC_HIGH_PERCENT}); set imageGCHighThresholdPercent too"
            ),
        ),
        _ => {}
    }
}

/// The kubelet's default `imageGCHighThresholdPercent`.
pub const KUBELET_DEFAULT_IMAGE_GC_HIGH_PERCENT: i32 = 85;
/// The kubelet's default `imageGCLowThresholdPercent`.
pub const KUBELET_DEFAULT_IMAGE_GC_LOW_PERCENT: i32 = 80;

fn validate_block_device(ebs: &BlockDevice, path: &str, out: &mut Violations) {
    if ebs.snapshot_id.is_none() && ebs.volume_size.is_none() {
        out.push(path, "snapshotID or volumeSize must be defined");
    }
    if let Some(rate) = ebs.volume_initialization_rate {
        let rp = field(path, "volumeInitializationRate");
        if ebs.snapshot_id.is_none() {
            out.push(&rp, "volumeInitializationRate must not be set when snapshotID is not set");
        }
        if !(100..=300).contains(&rate) {
            out.push(&rp, "must be between 100 and 300 MiB/s");
        }
    }
    if let Some(size) = &ebs.volume_size
        && parse_volume_size(size).is_none()
    {
        out.push(
            field(path, "volumeSize"),
            format!("invalid volumeSize {size:?}: must be a whole size up to 59000Gi, 64000G, 58Ti or 64T"),
        );
    }
}

fn validate_block_device_mappings(bdms: &[BlockDeviceMapping], path: &str, out: &mut Violations) {
    if bdms.len() > MAX_BLOCK_DEVICE_MAPPINGS {
        out.push(path, format!("must have at most {MAX_BLOCK_DEVICE_MAPPINGS} items, found {}", bdms.len()));
    }
    if bdms.iter().filter(|m| m.root_volume).count() > 1 {
        out.push(path, "must have only one blockDeviceMappings with rootVolume");
    }
    for (i, m) in bdms.iter().enumerate() {
        if let Some(ebs) = &m.ebs {
            validate_block_device(ebs, &field(&index(path, i), "ebs"), out);
        }
    }
}

fn validate_network_interfaces(nis: &[NetworkInterface], path: &str, out: &mut Violations) {
    if nis.is_empty() {
        return;
    }
    if nis.len() > MAX_NETWORK_INTERFACES {
        out.push(path, format!("must have at most {MAX_NETWORK_INTERFACES} items, found {}", nis.len()));
    }
    if !nis
        .iter()
        .any(|n| n.network_card_index == 0 && n.device_index == 0 && n.interface_type == InterfaceType::Interface)
    {
        out.push(path, "networkInterfaces must include the primary interface (networkCardIndex 0, deviceIndex 0, interfaceType interface)");
    }
    let mut pairs = BTreeSet::new();
    let mut efa_cards = BTreeSet::new();
    for (i, n) in nis.iter().enumerate() {
        let np = index(path, i);
        if n.network_card_index < 0 {
            out.push(field(&np, "networkCardIndex"), "must be greater than or equal to 0");
        }
        if n.device_index < 0 {
            out.push(field(&np, "deviceIndex"), "must be greater than or equal to 0");
        }
        if !pairs.insert((n.network_card_index, n.device_index)) {
            out.push(&np, "networkCardIndex and deviceIndex pairs must be unique");
        }
        if n.interface_type == InterfaceType::EfaOnly && !efa_cards.insert(n.network_card_index) {
            out.push(&np, format!("at most one efa-only interface per network card (card {})", n.network_card_index));
        }
    }
}

fn validate_metadata_options(m: &MetadataOptions, path: &str, out: &mut Violations) {
    if !(1..=64).contains(&m.http_put_response_hop_limit) {
        out.push(field(path, "httpPutResponseHopLimit"), "must be between 1 and 64");
    }
}

fn validate_connection_tracking(c: &ConnectionTracking, path: &str, out: &mut Violations) {
    if c.tcp_established_timeout.is_none() && c.udp_stream_timeout.is_none() && c.udp_timeout.is_none() {
        out.push(path, "expected at least one, got none, ['tcpEstablishedTimeout', 'udpStreamTimeout', 'udpTimeout']");
    }
    for (name, v, lo, hi) in [
        ("tcpEstablishedTimeout", c.tcp_established_timeout, 60, 432_000),
        ("udpStreamTimeout", c.udp_stream_timeout, 60, 180),
        ("udpTimeout", c.udp_timeout, 30, 60),
    ] {
        if let Some(v) = v
            && !(lo..=hi).contains(&v)
        {
            out.push(field(path, name), format!("must be between {lo} and {hi} seconds"));
        }
    }
}

impl EC2NodeClassSpec {
    /// Validates the spec found at `path` (normally `spec`).
    pub fn validate_at(&self, path: &str, out: &mut Violations) {
        validate_subnet_terms(&self.subnet_selector_terms, &field(path, "subnetSelectorTerms"), out);
        validate_security_group_terms(
            &self.security_group_selector_terms,
            &field(path, "securityGroupSelectorTerms"),
            out,
        );
        validate_capacity_reservation_terms(
            &self.capacity_reservation_selector_terms,
            &field(path, "capacityReservationSelectorTerms"),
            out,
        );
        if let Some(pg) = &self.placement_group_selector {
            validate_placement_group(pg, &field(path, "placementGroupSelector"), out);
        }
        validate_ami_terms(&self.ami_selector_terms, &field(path, "amiSelectorTerms"), out);
        validate_ami_family(self, path, out);
        match (&self.role, &self.instance_profile) {
            (Some(_), Some(_)) | (None, None) => {
                out.push(path, "must specify exactly one of ['role', 'instanceProfile']")
            }
            _ => {}
        }
        if self.role.as_deref() == Some("") {
            out.push(field(path, "role"), "role cannot be empty");
        }
        if self.instance_profile.as_deref() == Some("") {
            out.push(field(path, "instanceProfile"), "instanceProfile cannot be empty");
        }
        validate_tags(&self.tags, &field(path, "tags"), out);
        if let Some(k) = &self.kubelet {
            out.extend(validate_kubelet_configuration(k, self.effective_ami_family(), &field(path, "kubelet")));
        }
        validate_block_device_mappings(&self.block_device_mappings, &field(path, "blockDeviceMappings"), out);
        validate_network_interfaces(&self.network_interfaces, &field(path, "networkInterfaces"), out);
        if let Some(n) = self.ip_prefix_count
            && n < 0
        {
            out.push(field(path, "ipPrefixCount"), "must be greater than or equal to 0");
        }
        validate_metadata_options(&self.metadata_options, &field(path, "metadataOptions"), out);
        if let Some(c) = &self.connection_tracking {
            validate_connection_tracking(c, &field(path, "connectionTracking"), out);
        }
    }
}

impl Validate for EC2NodeClassSpec {
    fn validate(&self, _ctx: &ValidationContext) -> Violations {
        let mut out = Violations::new();
        self.validate_at("spec", &mut out);
        out
    }
}

impl Validate for EC2NodeClass {
    fn validate(&self, ctx: &ValidationContext) -> Violations {
        self.spec.validate(ctx)
    }
}

#[cfg(test)]
mod tests;
