//! The instance types simulate evaluates every NodePool against, and the offering a launch would pick.
//!
//! The catalogue is the kwok provider's (`karpenter_kwok::catalogue`: the built-in instance types or its loader for
//! upstream's kwok instance-type JSON) and the offering is the one the kwok provider's create picks
//! (`karpenter_cloudprovider::launch::cheapest_launch`), so simulate shows what that provider would do.

use std::path::Path;

use anyhow::Context;
use karpenter_cloudprovider::launch;
use karpenter_kwok::catalogue as kwok;
use karpenter_requirements::{InstanceType, Requirements};

/// A catalogue and where it came from.
#[derive(Debug)]
pub struct Catalogue {
    /// `kwok` (built in) or `file <path>`.
    pub source: String,
    /// The instance types.
    pub instance_types: Vec<InstanceType>,
}

impl Catalogue {
    /// The built-in kwok catalogue.
    pub fn kwok() -> Self {
        Catalogue { source: "kwok".to_owned(), instance_types: kwok::catalogue() }
    }

    /// A file in upstream's kwok instance-type JSON format.
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("{}: reading instance types", path.display()))?;
        let instance_types = kwok::load_instance_types_json(&text).with_context(|| path.display().to_string())?;
        Ok(Catalogue { source: format!("file {}", path.display()), instance_types })
    }

    /// The instance type named `name`.
    pub fn get(&self, name: &str) -> Option<&InstanceType> {
        self.instance_types.iter().find(|it| it.name == name)
    }
}

/// The offering the kwok provider's create picks for a NodeClaim.
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
}

/// The offering create would pick among `instance_types` for a claim with `requirements`
/// ([`launch::cheapest_launch`]: cheapest available compatible offering, ties by instance type, zone, capacity type).
pub fn cheapest_launch<'a>(
    instance_types: impl IntoIterator<Item = &'a InstanceType>,
    requirements: &Requirements,
) -> Option<Launch> {
    let choice = launch::cheapest_launch(instance_types, requirements)?;
    let non_empty = |s: String| if s.is_empty() { None } else { Some(s) };
    Some(Launch {
        instance_type: choice.instance_type,
        zone: non_empty(choice.zone),
        capacity_type: non_empty(choice.capacity_type),
        price: choice.price,
    })
}
