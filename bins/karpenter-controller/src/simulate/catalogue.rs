//! The instance types simulate evaluates each NodePool against, and the offering a launch would pick.
//!
//! Each NodePool gets the catalogue of its node class (`spec.template.spec.nodeClassRef.group`):
//! * `karpenter.kwok.sh` (and any other group): the kwok provider's (`karpenter_kwok::catalogue`: the built-in
//!   instance types, or `--instance-types FILE` in upstream's kwok instance-type JSON);
//! * `karpenter.k8s.aws`: the AWS catalogue (`karpenter_aws::catalogue`: built in, or `--instance-types FILE` in
//!   its format) for `--region`, converted by the controller's own conversion under the referenced
//!   EC2NodeClass's kubelet and block-device settings when the input has it, else under a default EC2NodeClass.
//!
//! `--provider` forces one kind for every pool. The offering is the one the kwok provider's create picks
//! (`karpenter_cloudprovider::launch::cheapest_launch_holding`: the cheapest available compatible offering whose
//! node holds the claim's requests).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, bail};
use karpenter_api::NodePool;
use karpenter_api::loader::{Loaded, Object};
use karpenter_api::nodeoverlay::NodeOverlay;
use karpenter_aws::catalogue::{self as aws, AwsCatalogue};
use karpenter_aws::dynamic_resources::DraTemplates;
use karpenter_aws::instancetype::NodeClassSettings;
use karpenter_aws::instancetypes::ExpressionCheck;
use karpenter_aws::settings::AwsFeatureGates;
use karpenter_cloudprovider::{launch, overlay};
use karpenter_kwok::catalogue as kwok;
use karpenter_requirements::labels::{CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT};
use karpenter_requirements::{InstanceType, Requirements, ResourceList};

/// The AWS node class API group.
pub const AWS_GROUP: &str = "karpenter.k8s.aws";
/// The region simulated without `--region`.
pub const DEFAULT_REGION: &str = "us-east-1";

/// Which provider's catalogue a NodePool is evaluated against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// The kwok catalogue.
    Kwok,
    /// The AWS catalogue.
    Aws,
}

impl Kind {
    /// The catalogue of a node class group: AWS for `karpenter.k8s.aws`, kwok for anything else.
    pub fn of_group(group: &str) -> Kind {
        if group == AWS_GROUP { Kind::Aws } else { Kind::Kwok }
    }

    /// The kind a NodePool gets: `force`, else its node class group's.
    pub fn of_pool(pool: &NodePool, force: Option<Kind>) -> Kind {
        force.unwrap_or_else(|| Kind::of_group(&pool.spec.template.spec.node_class_ref.group))
    }
}

/// How to choose the catalogues.
#[derive(Debug, Clone, Copy)]
pub struct Selection<'a> {
    /// `--provider`: one kind for every NodePool; `None`: by node class.
    pub force: Option<Kind>,
    /// `--instance-types FILE`.
    pub instance_types: Option<&'a Path>,
    /// `--region` (AWS catalogue).
    pub region: &'a str,
    /// `--aws-feature-gates`: `NodeClassCEL` evaluates EC2NodeClass kubelet expressions; `DRANVIDIAGPU` and
    /// `DRAEFA` give AWS instance types DRA slice templates.
    pub aws_feature_gates: AwsFeatureGates,
}

/// One set of instance types.
#[derive(Debug, Clone)]
struct Set {
    kind: Kind,
    instance_types: Vec<InstanceType>,
    /// On-demand prices that are another region's.
    on_demand_estimated: bool,
    /// Spot prices that are a share of on-demand.
    spot_estimated: bool,
}

/// The catalogues of a run and which NodePool uses which.
#[derive(Debug, Clone)]
pub struct Catalogue {
    /// Where the instance types came from: `kwok`, `aws <region>`, `file <path>` (kwok JSON) or
    /// `file <path> (aws <region>)`, joined by ` + ` when NodePools use both kinds.
    pub source: String,
    sets: Vec<Set>,
    /// NodePool name → set.
    by_pool: BTreeMap<String, usize>,
    /// NodePool name → (kind, EC2NodeClass whose settings apply): what its set was built for.
    keys: BTreeMap<String, SetKey>,
    /// The set of NodePools not known at build time, and of the catalogue summary when there are no NodePools.
    default_set: usize,
    /// How the catalogues were chosen, to build them again for NodePools added later.
    selection: OwnedSelection,
    /// Every reserved offering as the files state it, (set, instance type, offering) → (instances, available):
    /// what [`Catalogue::count_running_reservations`] draws the running instances down from.
    reservations_as_stated: BTreeMap<(usize, usize, usize), (i32, bool)>,
}

/// (kind, EC2NodeClass name whose settings apply).
type SetKey = (Kind, Option<String>);

/// A [`Selection`] kept by the catalogue.
#[derive(Debug, Clone, Default)]
struct OwnedSelection {
    force: Option<Kind>,
    instance_types: Option<std::path::PathBuf>,
    region: String,
    aws_feature_gates: AwsFeatureGates,
}

/// A file given with `--instance-types`.
enum File {
    Kwok(Vec<InstanceType>),
    Aws(Box<AwsCatalogue>),
}

fn read_file(path: &Path) -> anyhow::Result<File> {
    let bytes = std::fs::read(path).with_context(|| format!("{}: reading instance types", path.display()))?;
    if aws::looks_like_catalogue(&bytes) {
        let cat = AwsCatalogue::parse(&bytes).with_context(|| format!("{}: AWS catalogue", path.display()))?;
        return Ok(File::Aws(Box::new(cat)));
    }
    let text = String::from_utf8_lossy(&bytes);
    if !text.trim_start().starts_with('[') {
        bail!(
            "{}: neither upstream's kwok instance-type JSON (a list of instance types) nor an AWS catalogue \
             ({})",
            path.display(),
            aws::API_VERSION
        );
    }
    let types = kwok::load_instance_types_json(&text).with_context(|| path.display().to_string())?;
    Ok(File::Kwok(types))
}

/// The EC2NodeClass named `name` in the input (one that does not decode is a validation error, reported there).
fn ec2_node_class(objects: &[Loaded], name: &str) -> Option<karpenter_aws::api::EC2NodeClass> {
    objects.iter().find_map(|l| match &l.object {
        Object::Unknown(u) if l.object.name() == Some(name) => u.decode::<karpenter_aws::api::EC2NodeClass>()?.ok(),
        _ => None,
    })
}

impl Catalogue {
    /// The built-in kwok catalogue for every NodePool.
    #[cfg(test)]
    pub fn kwok() -> Self {
        let set = Set {
            kind: Kind::Kwok,
            instance_types: kwok::catalogue(),
            on_demand_estimated: false,
            spot_estimated: false,
        };
        Catalogue {
            source: "kwok".to_owned(),
            sets: vec![set],
            by_pool: BTreeMap::new(),
            keys: BTreeMap::new(),
            default_set: 0,
            selection: OwnedSelection {
                force: Some(Kind::Kwok),
                instance_types: None,
                region: DEFAULT_REGION.into(),
                aws_feature_gates: AwsFeatureGates::default(),
            },
            reservations_as_stated: BTreeMap::new(),
        }
    }

    /// The catalogues for `pools` (see the module docs); notes say when prices are another region's.
    ///
    /// Long because it resolves every distinct (provider kind, EC2NodeClass) set the pools use from its source
    /// (the kwok file, the AWS catalogue with a region's prices and the class's kubelet settings) with the notes
    /// each adds, reading the file and the region once for all sets.
    pub fn build(
        selection: &Selection<'_>,
        pools: &[NodePool],
        objects: &[Loaded],
        notes: &mut Vec<String>,
    ) -> anyhow::Result<Self> {
        let file = selection.instance_types.map(|p| read_file(p).map(|f| (p, f))).transpose()?;
        let default_kind = selection.force.unwrap_or(Kind::Kwok);
        // (kind, EC2NodeClass name whose settings apply) → set index.
        let mut keys: BTreeMap<SetKey, usize> = BTreeMap::new();
        let wanted: Vec<(String, SetKey)> = pools
            .iter()
            .map(|pool| (pool.metadata.name.clone().unwrap_or_default(), set_key(pool, selection.force, objects)))
            .collect();
        let mut distinct: BTreeSet<SetKey> = wanted.iter().map(|(_, k)| k.clone()).collect();
        if distinct.is_empty() {
            distinct.insert((default_kind, None));
        }

        let (kwok_file, aws_file) = match file {
            Some((p, File::Kwok(t))) => (Some((p, t)), None),
            Some((p, File::Aws(c))) => (None, Some((p, c))),
            None => (None, None),
        };
        let builtin;
        let (aws_cat, aws_source) = if distinct.iter().any(|(k, _)| *k == Kind::Aws) {
            match &aws_file {
                Some((p, c)) => (Some(&**c), format!("file {} (aws {})", p.display(), selection.region)),
                None => {
                    builtin = AwsCatalogue::builtin().context("the built-in AWS catalogue")?;
                    (Some(&builtin), format!("aws {}", selection.region))
                }
            }
        } else {
            (None, String::new())
        };
        let region = aws_cat
            .map(|c| c.region(selection.region).with_context(|| format!("--region {}", selection.region)))
            .transpose()?;
        if region.as_ref().is_some_and(|r| !r.has_prices()) {
            notes.push(format!(
                "the AWS catalogue has no prices for {}: no offering is available to launch",
                selection.region
            ));
        }
        if let Some(from) = region.as_ref().and_then(|r| r.borrowed_prices_from()) {
            notes.push(format!(
                "the AWS catalogue has no prices for {}: {from}'s on-demand prices are used (marked estimated)",
                selection.region
            ));
        }

        let mut sets = Vec::new();
        let mut sources: Vec<String> = Vec::new();
        for key in distinct {
            let set = match (&key, &region) {
                ((Kind::Aws, class), Some(region)) => {
                    let settings = match class {
                        Some(name) => {
                            let c = ec2_node_class(objects, name).context("EC2NodeClass vanished")?;
                            let cel = selection.aws_feature_gates.node_class_cel;
                            if let ExpressionCheck::Failed { reason, message } =
                                region.kubelet_expression_check(&c, cel)
                            {
                                notes.push(format!(
                                    "EC2NodeClass/{name}: the controller would not launch for it \
                                     (ValidationSucceeded=False, {reason}: {message}); simulated with {}",
                                    if cel {
                                        "the instance types it fails for left out"
                                    } else {
                                        "the expressions ignored"
                                    }
                                ));
                            }
                            NodeClassSettings::from_spec(&c.spec, cel)
                                .with_context(|| format!("EC2NodeClass/{name}: spec.kubelet"))?
                        }
                        None => NodeClassSettings::default(),
                    };
                    Set {
                        kind: Kind::Aws,
                        instance_types: region
                            .instance_types(&settings, DraTemplates::from_gates(&selection.aws_feature_gates)),
                        on_demand_estimated: region.borrowed_prices_from().is_some(),
                        spot_estimated: region.spot_estimated() || region.borrowed_prices_from().is_some(),
                    }
                }
                _ => {
                    let (source, types) = match &kwok_file {
                        Some((p, t)) => (format!("file {}", p.display()), t.clone()),
                        None => ("kwok".to_owned(), kwok::catalogue()),
                    };
                    if !sources.contains(&source) {
                        sources.insert(0, source);
                    }
                    Set { kind: Kind::Kwok, instance_types: types, on_demand_estimated: false, spot_estimated: false }
                }
            };
            if set.kind == Kind::Aws && !sources.contains(&aws_source) {
                sources.push(aws_source.clone());
            }
            keys.insert(key, sets.len());
            sets.push(set);
        }
        let by_pool = wanted.iter().map(|(pool, key)| (pool.clone(), keys[key])).collect();
        let default_set = keys
            .iter()
            .find(|((k, class), _)| *k == default_kind && class.is_none())
            .or_else(|| keys.iter().next())
            .map_or(0, |(_, i)| *i);
        let selection = OwnedSelection {
            force: selection.force,
            instance_types: selection.instance_types.map(Path::to_path_buf),
            region: selection.region.to_owned(),
            aws_feature_gates: selection.aws_feature_gates,
        };
        let mut catalogue = Catalogue {
            source: sources.join(" + "),
            sets,
            by_pool,
            keys: wanted.into_iter().collect(),
            default_set,
            selection,
            reservations_as_stated: BTreeMap::new(),
        };
        catalogue.apply_overlays(pools, objects, notes);
        catalogue.reservations_as_stated = catalogue
            .sets
            .iter()
            .enumerate()
            .flat_map(|(s, set)| set.instance_types.iter().enumerate().map(move |(i, it)| (s, i, it)))
            .flat_map(|(s, i, it)| it.offerings.iter().enumerate().map(move |(o, off)| ((s, i, o), off)))
            .filter(|(_, off)| off.reservation_id().is_some())
            .map(|(key, off)| (key, (off.reservation_capacity, off.available)))
            .collect();
        Ok(catalogue)
    }

    /// Applies the input's NodeOverlays as the controller does with the `NodeOverlay` gate on: invalid and
    /// conflicting ones are named in the notes and left out, and so are those that select nothing; a NodePool whose instance types the others change
    /// gets its own overlaid copy of its set. Validation uses the AWS label set when any pool is evaluated
    /// against the AWS catalogue, else kwok's.
    fn apply_overlays(&mut self, pools: &[NodePool], objects: &[Loaded], notes: &mut Vec<String>) {
        let overlays: Vec<NodeOverlay> = objects
            .iter()
            .filter_map(|l| match &l.object {
                Object::NodeOverlay(o) => Some((**o).clone()),
                _ => None,
            })
            .collect();
        if overlays.is_empty() {
            return;
        }
        let provider = if self.sets.iter().any(|s| s.kind == Kind::Aws) {
            karpenter_aws::labels::provider_labels()
        } else {
            karpenter_kwok::labels::provider_labels()
        };
        let views: Vec<(&NodePool, &[InstanceType])> =
            pools.iter().map(|p| (p, self.for_pool(p.metadata.name.as_deref().unwrap_or_default()))).collect();
        let problems = overlay::evaluate(&overlays, &views, &provider);
        for (name, problem) in &problems {
            notes.push(format!("NodeOverlay {name} is not applied: {problem}"));
        }
        let applicable: Vec<NodeOverlay> = overlays.into_iter().filter(|o| !problems.contains_key(o.name())).collect();
        for name in overlay::unmatched(&applicable, &views, &provider) {
            notes.push(format!("NodeOverlay {name} selects no instance type of any NodePool: it changes nothing"));
        }
        if applicable.is_empty() {
            return;
        }
        for pool in pools {
            let name = pool.metadata.name.clone().unwrap_or_default();
            let set = self.by_pool.get(&name).copied().unwrap_or(self.default_set);
            let overlaid = overlay::apply(pool, &self.sets[set].instance_types, &applicable, &provider);
            let changed = overlaid
                .iter()
                .filter(|it| it.capacity_overlay_applied || it.offerings.iter().any(|o| o.price_overlay_applied))
                .count();
            if changed == 0 {
                continue;
            }
            notes.push(format!("NodePool {name}: NodeOverlays change {changed} of its instance types"));
            let copy = Set { instance_types: overlaid, ..self.sets[set].clone() };
            self.by_pool.insert(name, self.sets.len());
            self.sets.push(copy);
        }
    }

    /// Whether `pools` (the NodePools in use after a timeline `apply`) need catalogues this one was not built
    /// for: a NodePool it does not know, one whose node class changed kind or EC2NodeClass, or an EC2NodeClass
    /// in `changed` (applied since) that a NodePool's set was converted under.
    pub fn is_stale(&self, pools: &[NodePool], objects: &[Loaded], changed: &[Loaded]) -> bool {
        let applied_class = |name: &str| {
            changed.iter().any(|l| l.object.kind() == karpenter_aws::api::KIND && l.object.name() == Some(name))
        };
        pools.iter().any(|pool| {
            let key = set_key(pool, self.selection.force, objects);
            let built = self.keys.get(pool.metadata.name.as_deref().unwrap_or(""));
            built != Some(&key) || key.1.as_deref().is_some_and(applied_class)
        })
    }

    /// The catalogues of the same selection for `pools` (the NodePools in use after a timeline `apply`), so a
    /// NodePool added or changed during a run gets the catalogue of its node class as one present at the start.
    /// Notes (prices of another region) are added only when the catalogues' sources changed, since the first
    /// build gave them for the sources it had.
    pub fn rebuilt(&self, pools: &[NodePool], objects: &[Loaded], notes: &mut Vec<String>) -> anyhow::Result<Self> {
        let selection = Selection {
            force: self.selection.force,
            instance_types: self.selection.instance_types.as_deref(),
            region: &self.selection.region,
            aws_feature_gates: self.selection.aws_feature_gates,
        };
        let mut new_notes = Vec::new();
        let rebuilt = Catalogue::build(&selection, pools, objects, &mut new_notes)?;
        if rebuilt.source != self.source {
            notes.extend(new_notes);
        }
        Ok(rebuilt)
    }

    /// Whether any catalogue of the run has reserved offerings.
    pub fn has_reservations(&self) -> bool {
        !self.reservations_as_stated.is_empty()
    }

    /// Counts the instances `snapshot` runs in each capacity reservation against the catalogue's reserved
    /// offerings: a file states a reservation's instances with none running, and every NodeClaim not being deleted
    /// (or Node without one) labelled with its id holds one (the kwok provider counts its Nodes the same way),
    /// whether the input brought it or an earlier pass launched it. Called before every pass, so a deleted node
    /// gives its instance back. Nothing to do without reserved offerings.
    pub fn count_running_reservations(&mut self, snapshot: &karpenter_scheduler::ClusterSnapshot) {
        if self.reservations_as_stated.is_empty() {
            return;
        }
        let claimed: BTreeSet<&str> = snapshot.node_claims.iter().filter_map(|c| c.node_name.as_deref()).collect();
        // A claim being deleted has given its instance back (as the providers count a terminating instance).
        let claim_labels = snapshot
            .node_claims
            .iter()
            .filter(|c| c.claim.metadata.deletion_timestamp.is_none())
            .filter_map(|c| c.claim.metadata.labels.as_ref());
        let unclaimed_nodes = snapshot
            .nodes
            .iter()
            .filter(|n| n.node_claim.is_none() && !claimed.contains(n.name.as_str()))
            .map(|n| &n.labels);
        let in_use = karpenter_cloudprovider::launch::reservations_in_use(claim_labels.chain(unclaimed_nodes));
        for (&(s, i, o), &(capacity, available)) in &self.reservations_as_stated {
            if let Some(off) = self.sets[s].instance_types.get_mut(i).and_then(|it| it.offerings.get_mut(o)) {
                (off.reservation_capacity, off.available) = (capacity, available);
            }
        }
        for set in &mut self.sets {
            karpenter_cloudprovider::launch::draw_down_reservations(&mut set.instance_types, &in_use);
        }
    }

    /// The instance types the NodePool named `pool` is evaluated against.
    pub fn for_pool(&self, pool: &str) -> &[InstanceType] {
        let set = self.by_pool.get(pool).copied().unwrap_or(self.default_set);
        &self.sets[set].instance_types
    }

    /// Every instance type of the run's catalogues.
    pub fn all_instance_types(&self) -> impl Iterator<Item = &InstanceType> {
        self.sets.iter().flat_map(|set| set.instance_types.iter())
    }

    /// The instance type named `name` (in any of the run's catalogues).
    pub fn get(&self, name: &str) -> Option<&InstanceType> {
        self.sets.iter().find_map(|s| s.instance_types.iter().find(|it| it.name == name))
    }

    /// Distinct instance types over the run's catalogues.
    pub fn len(&self) -> usize {
        let names: BTreeSet<&str> =
            self.sets.iter().flat_map(|s| s.instance_types.iter().map(|it| it.name.as_str())).collect();
        names.len()
    }

    /// Whether the price of `instance_type` as `capacity_type` is an estimate (AWS spot prices as a share of
    /// on-demand; another region's on-demand prices).
    pub fn price_estimated(&self, instance_type: &str, capacity_type: Option<&str>) -> bool {
        let Some(set) = self.sets.iter().find(|s| s.instance_types.iter().any(|it| it.name == instance_type)) else {
            return false;
        };
        match capacity_type {
            Some(CAPACITY_TYPE_SPOT) => set.spot_estimated,
            Some(CAPACITY_TYPE_ON_DEMAND) => set.on_demand_estimated,
            _ => false,
        }
    }
}

/// The set a NodePool gets: its kind, and for AWS the EC2NodeClass of the input it references (if any).
fn set_key(pool: &NodePool, force: Option<Kind>, objects: &[Loaded]) -> SetKey {
    let kind = Kind::of_pool(pool, force);
    let r = &pool.spec.template.spec.node_class_ref;
    let class = (kind == Kind::Aws && r.group == AWS_GROUP && ec2_node_class(objects, &r.name).is_some())
        .then(|| r.name.clone());
    (kind, class)
}

/// The catalogue source as the tables say it.
pub fn describe_source(source: &str) -> String {
    let parts: Vec<String> = source
        .split(" + ")
        .map(|p| match p {
            "kwok" => "the kwok catalogue".to_owned(),
            _ => match p.strip_prefix("aws ") {
                Some(region) => format!("the AWS catalogue ({region})"),
                None => p.to_owned(),
            },
        })
        .collect();
    parts.join(" and ")
}

/// The offering the kwok provider's create picks for a NodeClaim, and the resources of a node launched from it.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    /// Instance type name.
    pub instance_type: String,
    /// Zone of the offering.
    pub zone: Option<String>,
    /// Capacity type of the offering.
    pub capacity_type: Option<String>,
    /// Hourly price.
    pub price: f64,
    /// The node's capacity (the type's, with the offering's capacity override merged in).
    pub capacity: ResourceList,
    /// The node's allocatable (the type's, or the offering's group's when it carries overrides).
    pub allocatable: ResourceList,
}

/// The offering create would pick among `instance_types` for a claim with `requirements` and `requests` (its
/// pods' and DaemonSets'): [`launch::cheapest_launch_holding`], the cheapest available compatible offering whose
/// node holds the requests, ties by instance type, zone, capacity type. When no offering is known to hold them
/// (the scheduler already chose types that fit, so this is a safety net), the cheapest compatible one.
pub fn cheapest_launch<'a>(
    instance_types: impl IntoIterator<Item = &'a InstanceType> + Clone,
    requirements: &Requirements,
    requests: &ResourceList,
) -> Option<Launch> {
    let choice = launch::cheapest_launch_holding(instance_types.clone(), requirements, requests)
        .or_else(|| launch::cheapest_launch(instance_types, requirements))?;
    let non_empty = |s: String| if s.is_empty() { None } else { Some(s) };
    Some(Launch {
        instance_type: choice.instance_type,
        zone: non_empty(choice.zone),
        capacity_type: non_empty(choice.capacity_type),
        price: choice.price,
        capacity: choice.capacity,
        allocatable: choice.allocatable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_api::load_str;

    const INPUT: &str = "
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: on-kwok}
spec: {template: {spec: {nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}, requirements: []}}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: on-aws}
spec: {template: {spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: small}, requirements: []}}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: on-missing-aws}
spec: {template: {spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: absent}, requirements: []}}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: on-other}
spec: {template: {spec: {nodeClassRef: {group: example.com, kind: FooClass, name: x}, requirements: []}}}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: small}
spec:
  role: r
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {a: b}}]
  securityGroupSelectorTerms: [{tags: {a: b}}]
  kubelet: {maxPods: 7}
  blockDeviceMappings: [{deviceName: /dev/xvda, rootVolume: true, ebs: {volumeSize: 200Gi}}]
";

    fn build(force: Option<Kind>, region: &str) -> (Catalogue, Vec<String>) {
        let objects = load_str(INPUT, "input.yaml").expect("valid input");
        let pools: Vec<NodePool> = objects
            .iter()
            .filter_map(|l| match &l.object {
                Object::NodePool(p) => Some((**p).clone()),
                _ => None,
            })
            .collect();
        let mut notes = Vec::new();
        let selection = Selection { force, instance_types: None, region, aws_feature_gates: Default::default() };
        let c = Catalogue::build(&selection, &pools, &objects, &mut notes).expect("catalogue");
        (c, notes)
    }

    fn type_in<'a>(c: &'a Catalogue, pool: &str, name: &str) -> &'a InstanceType {
        c.for_pool(pool).iter().find(|it| it.name == name).unwrap_or_else(|| panic!("{name} for {pool}"))
    }

    #[test]
    fn a_reserved_node_holds_its_reservation_until_it_is_gone() {
        let input = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements: []
---
apiVersion: v1
kind: Node
metadata:
  name: running
  labels: {karpenter.sh/capacity-type: reserved, karpenter.k8s.aws/capacity-reservation-id: cr-0123}
";
        let objects = load_str(input, "input.yaml").expect("valid input");
        let mut snapshot = karpenter_scheduler::ClusterSnapshot::from_objects(&objects).expect("snapshot");
        let file = Path::new("tests/fixtures/simulate/reserved-instance-types.json");
        let selection = Selection {
            force: None,
            instance_types: Some(file),
            region: "us-east-1",
            aws_feature_gates: Default::default(),
        };
        let mut c = Catalogue::build(&selection, &snapshot.node_pools, &objects, &mut Vec::new()).expect("catalogue");
        let reserved = |c: &Catalogue| {
            let o = type_in(c, "default", "big-4x").offerings.iter().find(|o| o.reservation_id().is_some()).cloned();
            o.map(|o| (o.reservation_capacity, o.available)).expect("the reserved offering")
        };
        assert!(c.has_reservations());
        assert_eq!(reserved(&c), (1, true), "as the file states it");
        c.count_running_reservations(&snapshot);
        assert_eq!(reserved(&c), (0, false), "the running node holds the one instance");
        c.count_running_reservations(&snapshot);
        assert_eq!(reserved(&c), (0, false), "counted once, however often asked");
        snapshot.nodes.clear();
        c.count_running_reservations(&snapshot);
        assert_eq!(reserved(&c), (1, true), "the node is gone: its instance is free again");
    }

    #[test]
    fn each_pool_gets_its_node_class_s_catalogue() {
        let (c, notes) = build(None, "us-east-1");
        assert_eq!(c.source, "kwok + aws us-east-1");
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(c.for_pool("on-kwok").len(), 144);
        assert_eq!(c.for_pool("on-other").len(), 144, "other groups get the kwok catalogue");
        assert!(c.for_pool("on-aws").iter().any(|it| it.name == "m5.large"));
        assert!(c.for_pool("on-missing-aws").iter().any(|it| it.name == "m5.large"));
        assert!(!c.for_pool("on-kwok").iter().any(|it| it.name == "m5.large"));
        // A NodePool not known at build time (a timeline's apply) gets the default (kwok) catalogue.
        assert_eq!(c.for_pool("applied-later").len(), 144);
        assert!(c.len() > 144 + 700);
    }

    #[test]
    fn the_referenced_ec2_node_class_s_settings_apply_and_defaults_otherwise() {
        let (c, _) = build(None, "us-east-1");
        let pods = |pool: &str| type_in(&c, pool, "m5.large").capacity().pods().value();
        assert_eq!(pods("on-aws"), Some(7), "kubelet.maxPods of EC2NodeClass/small");
        assert_eq!(pods("on-missing-aws"), Some(29), "m5.large's ENI limit: 3 × (10 − 1) + 2");
        let storage = |pool: &str| type_in(&c, pool, "m5.large").capacity().ephemeral_storage().to_string();
        assert_eq!(storage("on-aws"), "200Gi");
        assert_eq!(storage("on-missing-aws"), "20Gi");
    }

    #[test]
    fn forcing_a_kind_applies_to_every_pool() {
        let (c, _) = build(Some(Kind::Aws), "us-east-1");
        assert_eq!(c.source, "aws us-east-1");
        assert!(c.for_pool("on-kwok").iter().any(|it| it.name == "m5.large"));
        assert!(c.for_pool("applied-later").iter().any(|it| it.name == "m5.large"));
        let (c, _) = build(Some(Kind::Kwok), "us-east-1");
        assert_eq!(c.source, "kwok");
        assert_eq!(c.for_pool("on-aws").len(), 144);
    }

    #[test]
    fn prices_outside_us_east_1_and_spot_are_estimates() {
        let (c, notes) = build(Some(Kind::Aws), "eu-west-1");
        assert_eq!(
            notes,
            ["the AWS catalogue has no prices for eu-west-1: us-east-1's on-demand prices are used (marked estimated)"]
        );
        assert!(c.price_estimated("m5.large", Some("on-demand")));
        let m5 = type_in(&c, "on-kwok", "m5.large");
        assert!(m5.offerings.iter().all(|o| o.zone().is_some_and(|z| z.starts_with("eu-west-1"))));
        let (c, _) = build(None, "us-east-1");
        assert!(!c.price_estimated("m5.large", Some("on-demand")));
        assert!(c.price_estimated("m5.large", Some("spot")));
        assert!(!c.price_estimated("c-4x-amd64-linux", Some("spot")), "kwok prices are the catalogue's own");
        let m5 = type_in(&c, "on-aws", "m5.large");
        let price = |ct: &str| m5.offerings.iter().find(|o| o.capacity_type() == Some(ct)).map(|o| o.price);
        assert_eq!(price("on-demand"), Some(0.096));
        assert_eq!(price("spot"), Some(0.096 * aws::SPOT_PRICE_FACTOR));
    }

    #[test]
    fn sources_read_well_in_the_table() {
        assert_eq!(describe_source("kwok"), "the kwok catalogue");
        assert_eq!(describe_source("kwok + aws us-west-2"), "the kwok catalogue and the AWS catalogue (us-west-2)");
        assert_eq!(describe_source("file x.json (aws us-east-1)"), "file x.json (aws us-east-1)");
    }
}
