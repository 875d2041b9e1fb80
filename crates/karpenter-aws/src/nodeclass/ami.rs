//! AMI resolution: aliases through SSM parameters, selector terms through
//! `DescribeImages`, one best image per requirement set, and the requirements that match AMIs to instance types.
//!
//! * **Alias** (`family@version`): [`alias_parameters`] lists the SSM parameters of the family for the cluster's
//!   Kubernetes version, one per (architecture, variant); each parameter's image serves the requirement sets of
//!   its variant (architecture + GPU/accelerator presence, and OS/build for Windows). Missing parameters are
//!   skipped; the images found are described with one `image-id` query.
//! * **Terms**: every `id` term and every `ssmParameter` whose value is an `ami-...` id go into one `image-id`
//!   query (a missing parameter is skipped, any other SSM failure fails the resolution); every other term is a
//!   query of its own (`name`, tags, owner; owners default to `self,amazon` when a name is given without an
//!   owner). These images get only an architecture requirement.
//! * Every query adds `state = available`; deprecated images are described too. Per requirement set the best image
//!   wins: not deprecated over deprecated, then the newest `CreationDate`, then the name in descending order, then
//!   the id. Images of unknown architectures are ignored.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::api::{Alias, Ami, AmiFamily, AmiSelectorTerm, EC2NodeClassSpec, NodeSelectorRequirement};
use crate::labels as aws_labels;
use chrono::{DateTime, Utc};
use karpenter_api::labels as core_labels;
use karpenter_cloudprovider::Clock;

use super::api::{DescribeImagesRequest, Filter, ImageApi, ImageDescription, SsmApi};
use super::cache::TtlCache;
use crate::api_error::AwsApiError;

/// `kubernetes.io/arch`.
const ARCH: &str = core_labels::ARCH;
/// `kubernetes.io/os`.
const OS: &str = core_labels::OS;

/// An AMI variant of an EKS-optimized family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Variant {
    /// No GPU and no accelerator.
    Standard,
    /// NVIDIA GPUs.
    Nvidia,
    /// AWS Neuron accelerators (Inferentia, Trainium).
    Neuron,
}

impl Variant {
    /// The name used in AL2023 parameter paths.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Standard => "standard",
            Self::Nvidia => "nvidia",
            Self::Neuron => "neuron",
        }
    }

    /// The instance-type requirements of the variant: standard ⇒ no GPU and no accelerator; nvidia ⇒ a GPU count
    /// exists; neuron ⇒ an accelerator count exists.
    pub fn requirements(self) -> Vec<NodeSelectorRequirement> {
        match self {
            Self::Standard => vec![
                NodeSelectorRequirement::new(aws_labels::INSTANCE_ACCELERATOR_COUNT, "DoesNotExist", &[]),
                NodeSelectorRequirement::new(aws_labels::INSTANCE_GPU_COUNT, "DoesNotExist", &[]),
            ],
            Self::Nvidia => vec![NodeSelectorRequirement::new(aws_labels::INSTANCE_GPU_COUNT, "Exists", &[])],
            Self::Neuron => vec![NodeSelectorRequirement::new(aws_labels::INSTANCE_ACCELERATOR_COUNT, "Exists", &[])],
        }
    }
}

/// One SSM parameter an alias reads, with the requirement sets its image serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AliasParameter {
    /// The parameter path (`/aws/service/...`).
    pub path: String,
    /// Kubernetes architecture (`amd64`, `arm64`).
    pub arch: &'static str,
    /// The variants the image serves (AL2's GPU image and Bottlerocket's x86 standard image serve two).
    pub variants: Vec<Variant>,
    /// One requirement set per variant (architecture first, then the variant's, then OS/build for Windows).
    pub requirement_sets: Vec<Vec<NodeSelectorRequirement>>,
    /// `latest` parameters change over time (cached as mutable; the SSM invalidation controller checks them).
    pub mutable: bool,
}

/// Why an alias or a Kubernetes version cannot be resolved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AmiError {
    /// The alias's family does not support this Kubernetes version (AL2 on ≥ 1.33, Windows2025 on < 1.35).
    #[error("alias {alias} is not supported on Kubernetes {kubernetes_version}")]
    UnsupportedAlias { alias: String, kubernetes_version: String },
    /// The Kubernetes version is not `<major>.<minor>` (optionally followed by `.<patch>`).
    #[error("invalid Kubernetes version {0:?}")]
    InvalidKubernetesVersion(String),
    /// None of the alias's SSM parameters exists.
    #[error("no SSM parameter found for alias {0}")]
    NoParameters(String),
    /// An EC2 call failed.
    #[error(transparent)]
    Api(#[from] AwsApiError),
}

/// `1.31`, `1.31+` (EKS's minor) and `1.31.4` (a patch, ignored) → `(1, 31)`.
fn parse_minor(k8s_version: &str) -> Result<(u32, u32), AmiError> {
    let bad = || AmiError::InvalidKubernetesVersion(k8s_version.to_string());
    let (major, rest) = k8s_version.split_once('.').ok_or_else(bad)?;
    let minor = match rest.split_once('.') {
        Some((minor, patch)) if patch.starts_with(|c: char| c.is_ascii_digit()) => minor,
        Some(_) => return Err(bad()),
        None => rest.trim_end_matches('+'),
    };
    Ok((major.parse().map_err(|_| bad())?, minor.parse().map_err(|_| bad())?))
}

fn arch_requirement(arch: &str) -> NodeSelectorRequirement {
    NodeSelectorRequirement::new(ARCH, "In", &[arch])
}

/// The Windows build of a Windows family (`node.kubernetes.io/windows-build`).
pub fn windows_build(family: AmiFamily) -> Option<&'static str> {
    match family {
        AmiFamily::Windows2019 => Some("10.0.17763"),
        AmiFamily::Windows2022 => Some("10.0.20348"),
        AmiFamily::Windows2025 => Some("10.0.26100"),
        _ => None,
    }
}

fn parameter(path: String, arch: &'static str, variants: &[Variant], mutable: bool) -> AliasParameter {
    let requirement_sets = variants
        .iter()
        .map(|v| {
            let mut reqs = vec![arch_requirement(arch)];
            reqs.extend(v.requirements());
            reqs
        })
        .collect();
    AliasParameter { path, arch, variants: variants.to_vec(), requirement_sets, mutable }
}

/// The SSM parameters of an alias for Kubernetes `k8s_version` (`1.31`), in a fixed order.
pub fn alias_parameters(alias: &Alias, k8s_version: &str) -> Result<Vec<AliasParameter>, AmiError> {
    let (major, minor) = parse_minor(k8s_version)?;
    let k8s = format!("{major}.{minor}");
    let unsupported = || AmiError::UnsupportedAlias { alias: alias.to_string(), kubernetes_version: k8s.clone() };
    let latest = alias.is_latest();
    let version = alias.version.as_str();
    use Variant::*;
    let params = match alias.family {
        AmiFamily::Al2 => {
            if (major, minor) >= (1, 33) {
                return Err(unsupported());
            }
            let leaf = |infix: &str| {
                if latest { "recommended".to_string() } else { format!("amazon-eks-{infix}node-{k8s}-{version}") }
            };
            let base = format!("/aws/service/eks/optimized-ami/{k8s}");
            vec![
                parameter(format!("{base}/amazon-linux-2/{}/image_id", leaf("")), "amd64", &[Standard], latest),
                parameter(
                    format!("{base}/amazon-linux-2-arm64/{}/image_id", leaf("arm64-")),
                    "arm64",
                    &[Standard],
                    latest,
                ),
                parameter(
                    format!("{base}/amazon-linux-2-gpu/{}/image_id", leaf("gpu-")),
                    "amd64",
                    &[Nvidia, Neuron],
                    latest,
                ),
            ]
        }
        AmiFamily::Al2023 => {
            let mut out = Vec::new();
            for (ec2_arch, arch, variants) in
                [("x86_64", "amd64", &[Standard, Nvidia, Neuron][..]), ("arm64", "arm64", &[Standard, Nvidia][..])]
            {
                for v in variants {
                    let leaf = if latest {
                        "recommended".to_string()
                    } else {
                        format!("amazon-eks-node-al2023-{ec2_arch}-{}-{k8s}-{version}", v.as_str())
                    };
                    let path = format!(
                        "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{ec2_arch}/{}/{leaf}/image_id",
                        v.as_str()
                    );
                    out.push(parameter(path, arch, &[*v], latest));
                }
            }
            out
        }
        AmiFamily::Bottlerocket => {
            let leaf = if latest { "latest" } else { version.strip_prefix('v').unwrap_or(version) };
            vec![
                parameter(
                    format!("/aws/service/bottlerocket/aws-k8s-{k8s}/x86_64/{leaf}/image_id"),
                    "amd64",
                    &[Standard, Neuron],
                    latest,
                ),
                parameter(
                    format!("/aws/service/bottlerocket/aws-k8s-{k8s}/arm64/{leaf}/image_id"),
                    "arm64",
                    &[Standard],
                    latest,
                ),
                parameter(
                    format!("/aws/service/bottlerocket/aws-k8s-{k8s}-nvidia/x86_64/{leaf}/image_id"),
                    "amd64",
                    &[Nvidia],
                    latest,
                ),
                parameter(
                    format!("/aws/service/bottlerocket/aws-k8s-{k8s}-nvidia/arm64/{leaf}/image_id"),
                    "arm64",
                    &[Nvidia],
                    latest,
                ),
            ]
        }
        AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025 => {
            if alias.family == AmiFamily::Windows2025 && (major, minor) < (1, 35) {
                return Err(unsupported());
            }
            let year = match alias.family {
                AmiFamily::Windows2019 => "2019",
                AmiFamily::Windows2022 => "2022",
                _ => "2025",
            };
            let path = format!(
                "/aws/service/ami-windows-latest/Windows_Server-{year}-English-Core-EKS_Optimized-{k8s}/image_id"
            );
            let build = windows_build(alias.family).unwrap_or_default();
            vec![AliasParameter {
                path,
                arch: "amd64",
                variants: vec![Standard],
                requirement_sets: vec![vec![
                    arch_requirement("amd64"),
                    NodeSelectorRequirement::new(OS, "In", &["windows"]),
                    NodeSelectorRequirement::new(core_labels::WINDOWS_BUILD, "In", &[build]),
                ]],
                mutable: true,
            }]
        }
        AmiFamily::Custom => return Err(unsupported()),
    };
    Ok(params)
}

/// EC2's architecture name to Kubernetes' (`x86_64` → `amd64`); `None` for architectures nodes cannot run.
pub fn kube_arch(ec2_arch: &str) -> Option<&'static str> {
    match ec2_arch {
        "x86_64" => Some("amd64"),
        "arm64" => Some("arm64"),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------------------------
// SSM parameters.
// ---------------------------------------------------------------------------------------------------------------

/// How long SSM parameter values are cached (alias parameters, `latest` and pinned).
pub const SSM_CACHE_TTL: Duration = Duration::from_secs(24 * 3600);
/// How long values of `ssmParameter` selector terms are cached.
pub const SSM_TERM_CACHE_TTL: Duration = Duration::from_secs(300);
/// How often the SSM invalidation controller checks cached mutable parameters.
pub const SSM_INVALIDATION_INTERVAL: Duration = Duration::from_secs(30 * 60);

#[derive(Clone, Debug, PartialEq, Eq)]
struct SsmEntry {
    value: String,
    mutable: bool,
}

/// SSM `GetParameter` with a cache: alias parameters for 24 h, selector-term parameters for 5 min.
#[derive(Debug)]
pub struct SsmProvider {
    api: Arc<dyn SsmApi>,
    cache: TtlCache<String, SsmEntry>,
}

impl SsmProvider {
    pub fn new(api: Arc<dyn SsmApi>, clock: Arc<dyn Clock>) -> Self {
        Self { api, cache: TtlCache::new(clock, SSM_CACHE_TTL) }
    }

    /// The parameter's value; cached for `ttl`. `mutable` marks values that may change under the same name
    /// (`latest`), which the invalidation controller re-checks.
    pub async fn get(&self, name: &str, mutable: bool, ttl: Duration) -> Result<String, AwsApiError> {
        if let Some(hit) = self.cache.get(&name.to_string()) {
            return Ok(hit.value);
        }
        let value = self.api.get_parameter(name).await?;
        self.cache.insert_with_ttl(name.to_string(), SsmEntry { value: value.clone(), mutable }, ttl);
        Ok(value)
    }

    /// The cached mutable parameters and their values, by name.
    pub fn cached_mutable(&self) -> Vec<(String, String)> {
        self.cache.entries().into_iter().filter(|(_, e)| e.mutable).map(|(k, e)| (k, e.value)).collect()
    }

    /// Drops a cached parameter; returns whether it was cached.
    pub fn invalidate(&self, name: &str) -> bool {
        self.cache.remove(&name.to_string())
    }

    /// The invalidation pass (every 30 min upstream): describes the images of the cached mutable parameters and
    /// drops the parameters whose image is deprecated (or gone), so the next resolution reads the newer value.
    /// Returns the dropped parameter names.
    pub async fn invalidate_deprecated(
        &self,
        images: &dyn ImageApi,
        now: DateTime<Utc>,
    ) -> Result<Vec<String>, AwsApiError> {
        let cached = self.cached_mutable();
        let ids: Vec<String> = cached.iter().map(|(_, v)| v.clone()).filter(|v| v.starts_with("ami-")).collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut ids_sorted = ids.clone();
        ids_sorted.sort();
        ids_sorted.dedup();
        let found = images
            .describe_images(&DescribeImagesRequest {
                filters: vec![Filter::new("image-id", ids_sorted)],
                owners: vec![],
            })
            .await?;
        let live: BTreeMap<&str, bool> = found.iter().map(|i| (i.image_id.as_str(), is_deprecated(i, now))).collect();
        let mut dropped = Vec::new();
        for (name, value) in cached {
            if live.get(value.as_str()).is_none_or(|deprecated| *deprecated) {
                self.invalidate(&name);
                dropped.push(name);
            }
        }
        Ok(dropped)
    }
}

/// Whether an image's deprecation time has passed. An unparsable time counts as not deprecated.
pub fn is_deprecated(image: &ImageDescription, now: DateTime<Utc>) -> bool {
    image
        .deprecation_time
        .as_deref()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .is_some_and(|t| t.with_timezone(&Utc) <= now)
}

// ---------------------------------------------------------------------------------------------------------------
// Image queries and selection.
// ---------------------------------------------------------------------------------------------------------------

/// One `DescribeImages` query and the requirement sets already known for some of its images (alias images).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct ImageQuery {
    pub request: DescribeImagesRequest,
    /// Image id → requirement sets; images not listed get an architecture requirement.
    pub known_requirements: BTreeMap<String, Vec<Vec<NodeSelectorRequirement>>>,
}

fn available() -> Filter {
    Filter::new("state", ["available"])
}

/// A resolved AMI: the status entry plus its creation date.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolvedAmi {
    pub id: String,
    pub name: Option<String>,
    pub creation_date: String,
    pub deprecated: bool,
    pub requirements: Vec<NodeSelectorRequirement>,
}

impl ResolvedAmi {
    /// The status entry.
    pub fn to_status(&self) -> Ami {
        Ami {
            id: self.id.clone(),
            name: self.name.clone(),
            deprecated: self.deprecated,
            requirements: self.requirements.clone(),
        }
    }
}

fn creation_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s).ok().map(|t| t.with_timezone(&Utc))
}

/// Whether `a` beats `b` for the same requirement set.
fn better(a: &ResolvedAmi, b: &ResolvedAmi) -> bool {
    if a.deprecated != b.deprecated {
        return !a.deprecated;
    }
    let (ta, tb) = (creation_time(&a.creation_date), creation_time(&b.creation_date));
    if ta != tb {
        return ta > tb;
    }
    if a.name != b.name {
        return a.name > b.name;
    }
    a.id < b.id
}

/// Picks the best image per requirement set from the answers of `queries` and sorts the result: not deprecated
/// first, then newest, then by id.
pub fn select_images(answers: &[(ImageQuery, Vec<ImageDescription>)], now: DateTime<Utc>) -> Vec<ResolvedAmi> {
    let mut best: BTreeMap<Vec<NodeSelectorRequirement>, ResolvedAmi> = BTreeMap::new();
    for (query, images) in answers {
        for image in images {
            let Some(arch) = kube_arch(&image.architecture) else { continue };
            let sets = match query.known_requirements.get(&image.image_id) {
                Some(sets) if !sets.is_empty() => sets.clone(),
                _ => vec![vec![arch_requirement(arch)]],
            };
            for reqs in sets {
                let candidate = ResolvedAmi {
                    id: image.image_id.clone(),
                    name: image.name.clone(),
                    creation_date: image.creation_date.clone(),
                    deprecated: is_deprecated(image, now),
                    requirements: reqs.clone(),
                };
                match best.get(&reqs) {
                    Some(cur) if !better(&candidate, cur) => {}
                    _ => {
                        best.insert(reqs, candidate);
                    }
                }
            }
        }
    }
    let mut out: Vec<ResolvedAmi> = best.into_values().collect();
    out.sort_by(|a, b| {
        a.deprecated
            .cmp(&b.deprecated)
            .then_with(|| creation_time(&b.creation_date).cmp(&creation_time(&a.creation_date)))
            .then_with(|| a.id.cmp(&b.id))
            .then_with(|| a.requirements.cmp(&b.requirements))
    });
    out
}

/// AMI resolution with its caches: resolved AMIs per query for `AMI_REFRESH_INTERVAL`, SSM values as
/// [`SsmProvider`] says.
#[derive(Debug)]
pub struct AmiProvider {
    images: Arc<dyn ImageApi>,
    ssm: Arc<SsmProvider>,
    clock: Arc<dyn Clock>,
    cache: TtlCache<(Vec<ImageQuery>, String), Vec<ResolvedAmi>>,
}

impl AmiProvider {
    /// `refresh` is `AMI_REFRESH_INTERVAL` (default 1 min).
    pub fn new(images: Arc<dyn ImageApi>, ssm: Arc<SsmProvider>, clock: Arc<dyn Clock>, refresh: Duration) -> Self {
        Self { images, ssm, cache: TtlCache::new(clock.clone(), refresh), clock }
    }

    /// The SSM provider (shared with the invalidation controller).
    pub fn ssm(&self) -> &Arc<SsmProvider> {
        &self.ssm
    }

    /// The image API (the invalidation controller describes through it).
    pub fn image_api(&self) -> &Arc<dyn ImageApi> {
        &self.images
    }

    /// The `DescribeImages` queries of a node class's AMI terms (SSM parameters read through the cache).
    pub async fn queries(&self, spec: &EC2NodeClassSpec, k8s_version: &str) -> Result<Vec<ImageQuery>, AmiError> {
        if let Some(alias) = spec.alias() {
            let mut ids = Vec::new();
            let mut known: BTreeMap<String, Vec<Vec<NodeSelectorRequirement>>> = BTreeMap::new();
            for p in alias_parameters(&alias, k8s_version)? {
                match self.ssm.get(&p.path, p.mutable, SSM_CACHE_TTL).await {
                    Ok(id) => {
                        if !ids.contains(&id) {
                            ids.push(id.clone());
                        }
                        known.entry(id).or_default().extend(p.requirement_sets.iter().cloned());
                    }
                    Err(e) => tracing::debug!(parameter = %p.path, error = %e, "skipping AMI alias parameter"),
                }
            }
            if ids.is_empty() {
                return Err(AmiError::NoParameters(alias.to_string()));
            }
            ids.sort();
            return Ok(vec![ImageQuery {
                request: DescribeImagesRequest {
                    filters: vec![Filter::new("image-id", ids), available()],
                    owners: vec![],
                },
                known_requirements: known,
            }]);
        }
        let mut ids: Vec<String> = Vec::new();
        let mut queries = Vec::new();
        for term in &spec.ami_selector_terms {
            if let Some(id) = &term.id {
                ids.push(id.clone());
                continue;
            }
            if let Some(param) = &term.ssm_parameter {
                // A missing parameter is skipped; any other failure (throttling, access denied) fails the
                // resolution, so the AMIs it would have contributed are not silently dropped from the status.
                match self.ssm.get(param, true, SSM_TERM_CACHE_TTL).await {
                    Ok(v) if v.starts_with("ami-") => ids.push(v),
                    Ok(v) => tracing::debug!(parameter = %param, value = %v, "SSM parameter does not hold an AMI id"),
                    Err(e) if e.is_not_found() => {
                        tracing::debug!(parameter = %param, error = %e, "skipping missing SSM parameter")
                    }
                    Err(e) => return Err(e.into()),
                }
                continue;
            }
            if let Some(q) = term_query(term) {
                queries.push(q);
            }
        }
        if !ids.is_empty() {
            ids.sort();
            ids.dedup();
            queries.insert(
                0,
                ImageQuery {
                    request: DescribeImagesRequest {
                        filters: vec![Filter::new("image-id", ids), available()],
                        owners: vec![],
                    },
                    known_requirements: BTreeMap::new(),
                },
            );
        }
        Ok(queries)
    }

    /// The node class's AMIs for Kubernetes `k8s_version`, best per requirement set, sorted. Empty when nothing
    /// matches.
    pub async fn resolve(&self, spec: &EC2NodeClassSpec, k8s_version: &str) -> Result<Vec<ResolvedAmi>, AmiError> {
        let queries = self.queries(spec, k8s_version).await?;
        let key = (queries.clone(), k8s_version.to_string());
        if let Some(hit) = self.cache.get(&key) {
            return Ok(hit);
        }
        let mut answers = Vec::with_capacity(queries.len());
        for q in queries {
            let images = self.images.describe_images(&q.request).await?;
            answers.push((q, images));
        }
        let amis = select_images(&answers, self.clock.now());
        self.cache.insert(key, amis.clone());
        Ok(amis)
    }
}

/// The query of one name/tags/owner term.
fn term_query(term: &AmiSelectorTerm) -> Option<ImageQuery> {
    let mut filters = Vec::new();
    let mut owners = Vec::new();
    if let Some(name) = &term.name {
        filters.push(Filter::new("name", [name.as_str()]));
        owners = vec!["self".to_string(), "amazon".to_string()];
    }
    if let Some(owner) = &term.owner {
        owners = vec![owner.clone()];
    }
    if let Some(tags) = &term.tags {
        filters.extend(Filter::for_tags(tags));
    }
    if filters.is_empty() && owners.is_empty() {
        return None;
    }
    filters.push(available());
    Some(ImageQuery { request: DescribeImagesRequest { filters, owners }, known_requirements: BTreeMap::new() })
}

// ---------------------------------------------------------------------------------------------------------------
// Matching AMIs to instance types.
// ---------------------------------------------------------------------------------------------------------------

/// An AMI's requirements in the scheduling algebra. A requirement that does not parse (an unknown operator in
/// a hand-written status) makes the AMI match nothing.
pub fn ami_requirements(ami: &Ami) -> Option<karpenter_requirements::Requirements> {
    let mut out = karpenter_requirements::Requirements::new();
    for r in &ami.requirements {
        let op: karpenter_requirements::Operator = r.operator.parse().ok()?;
        out.add(karpenter_requirements::Requirement::new(&r.key, op, &r.values, None).ok()?);
    }
    Some(out)
}

/// The AMI an instance type launches with: the first AMI of `amis` (status order: newest, non-deprecated first)
/// whose requirements the instance type's requirements are compatible with (undefined well-known AWS labels
/// allowed).
pub fn ami_for_instance_type<'a>(
    amis: &'a [Ami],
    instance_type: &karpenter_requirements::Requirements,
) -> Option<&'a Ami> {
    let allow = crate::labels::provider_labels().all_well_known();
    amis.iter().find(|ami| ami_requirements(ami).is_some_and(|reqs| instance_type.compatible_ok(&reqs, &allow)))
}

/// Groups instance types by the AMI they launch with ([`ami_for_instance_type`]): AMI id → instance type names
/// (in input order). Instance types no AMI serves are left out.
pub fn map_to_instance_types<'a>(
    amis: &[Ami],
    instance_types: impl IntoIterator<Item = &'a karpenter_requirements::InstanceType>,
) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for it in instance_types {
        if let Some(ami) = ami_for_instance_type(amis, &it.requirements) {
            out.entry(ami.id.clone()).or_default().push(it.name.clone());
        }
    }
    out
}
