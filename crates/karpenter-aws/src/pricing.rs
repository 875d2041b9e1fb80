//! Prices of offerings, SDK-free: the in-memory [`PriceTable`] the instance-type
//! conversion reads, the operator-supplied price file of isolated VPCs ([`PriceFile`]), and the documented
//! [`estimate`] used when there is no price source at all.
//!
//! The price file is JSON; every price is USD per hour. `onDemand` maps region to instance type to price; the
//! optional `spot` maps region to instance type to zone to price. Other top-level keys (`description`, `unit`)
//! are ignored, and `regions` is accepted as an alias of `onDemand`, so the published on-demand snapshot
//! (`{"regions": {"us-east-1": {"m5.large": 0.096, ...}}}`) is a valid price file as it is:
//!
//! ```json
//! {
//!   "onDemand": {"us-east-1": {"m5.large": 0.096, "c6g.xlarge": 0.136}},
//!   "spot": {"us-east-1": {"m5.large": {"us-east-1a": 0.035, "us-east-1b": 0.037}}}
//! }
//! ```
//!
//! Prices must be finite and non-negative; anything else is an error naming the entry (a price file is operator
//! input: it is rejected whole rather than half-applied).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::ec2::InstanceTypeInfo;

/// Prices for one region: on-demand per instance type, spot per instance type and zone.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PriceTable {
    /// Instance type → USD/hour.
    #[serde(default)]
    pub on_demand: BTreeMap<String, f64>,
    /// Instance type → zone → USD/hour. A (type, zone) without an entry has no spot price: its spot offering is
    /// unavailable.
    #[serde(default)]
    pub spot: BTreeMap<String, BTreeMap<String, f64>>,
}

impl PriceTable {
    /// The on-demand price of an instance type.
    pub fn on_demand(&self, instance_type: &str) -> Option<f64> {
        self.on_demand.get(instance_type).copied()
    }

    /// The spot price of an instance type in a zone.
    pub fn spot(&self, instance_type: &str, zone: &str) -> Option<f64> {
        self.spot.get(instance_type)?.get(zone).copied()
    }
}

/// Where offering prices come from.
#[derive(Clone, Debug, PartialEq)]
pub enum PriceSource {
    /// Known prices; offerings without a price are unavailable.
    Table(PriceTable),
    /// No price source at all: every offering is priced by [`estimate`] (on-demand and spot alike) so offerings
    /// are still ordered sensibly. The caller must say so in its logs and in an event on the node class.
    Estimate,
}

impl Default for PriceSource {
    fn default() -> Self {
        PriceSource::Table(PriceTable::default())
    }
}

/// The documented estimate of an instance type's hourly price, for when no price is known:
///
/// `0.03 × vCPU + 0.0065 × memory GiB + 1.0 × GPUs (NVIDIA, AMD, Habana) + 0.35 × Neuron devices +
/// 0.0001 × local instance storage GB`, USD/hour.
///
/// The coefficients were fitted by hand to the published us-east-1 on-demand Linux prices of the 1,204
/// current-generation types in moto's catalogue (snapshot 2026-07-20): the median of estimate / price is 1.04 and
/// 80 % of the types fall within 0.68–1.39 (GPU types 0.55–1.73). It is meant to order offerings (bigger machines
/// cost more, accelerators a lot more), never to report costs.
pub fn estimate(info: &InstanceTypeInfo) -> f64 {
    let vcpu = info.vcpu_info.default_vcpus.unwrap_or(0).max(0) as f64;
    let mem_gib = info.memory_info.size_in_mib.unwrap_or(0).max(0) as f64 / 1024.0;
    let gpus: i64 =
        info.gpu_info.iter().flat_map(|g| &g.gpus).map(|g| g.count.unwrap_or(0).max(0)).fold(0, i64::saturating_add);
    let neuron: i64 = info
        .neuron_info
        .iter()
        .flat_map(|n| &n.neuron_devices)
        .map(|d| d.count.unwrap_or(0).max(0))
        .fold(0, i64::saturating_add);
    let storage_gb = info.instance_storage_info.as_ref().and_then(|s| s.total_size_in_gb).unwrap_or(0).max(0) as f64;
    VCPU_COEFFICIENT * vcpu
        + MEMORY_GIB_COEFFICIENT * mem_gib
        + GPU_COEFFICIENT * gpus as f64
        + NEURON_COEFFICIENT * neuron as f64
        + STORAGE_GB_COEFFICIENT * storage_gb
}

/// USD/hour per vCPU in [`estimate`].
pub const VCPU_COEFFICIENT: f64 = 0.03;
/// USD/hour per GiB of memory in [`estimate`].
pub const MEMORY_GIB_COEFFICIENT: f64 = 0.0065;
/// USD/hour per GPU in [`estimate`].
pub const GPU_COEFFICIENT: f64 = 1.0;
/// USD/hour per Neuron device in [`estimate`].
pub const NEURON_COEFFICIENT: f64 = 0.35;
/// USD/hour per GB of local instance storage in [`estimate`].
pub const STORAGE_GB_COEFFICIENT: f64 = 0.0001;

/// An operator-supplied price file (see the module docs for the format).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PriceFile {
    /// Region → instance type → USD/hour.
    #[serde(default, alias = "regions")]
    pub on_demand: BTreeMap<String, BTreeMap<String, f64>>,
    /// Region → instance type → zone → USD/hour.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub spot: BTreeMap<String, BTreeMap<String, BTreeMap<String, f64>>>,
}

/// A price file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PriceFileError {
    /// The file could not be read.
    #[error("reading price file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Not JSON of the expected shape.
    #[error("price file is not valid: {0}")]
    Json(#[from] serde_json::Error),
    /// A negative, infinite or NaN price.
    #[error("price file: {kind} price of {instance_type} in {location} is {price}, not a finite non-negative number")]
    InvalidPrice {
        /// `on-demand` or `spot`.
        kind: &'static str,
        /// The instance type.
        instance_type: String,
        /// The region (on-demand) or zone (spot).
        location: String,
        /// The value.
        price: f64,
    },
    /// The file has no on-demand price for the region the controller runs in.
    #[error(
        "price file has no on-demand prices for region {region} (it has {}); write one with \
         `karpenter-controller prices --region {region} --output FILE`",
        if regions.is_empty() { "none".to_owned() } else { regions.join(", ") }
    )]
    NoPricesForRegion {
        /// The region asked for.
        region: String,
        /// The regions the file has on-demand prices for.
        regions: Vec<String>,
    },
    /// A problem in a named file (every error of [`PriceFile::read`] and [`PriceFile::load_region`] but `Io`,
    /// which names its file itself).
    #[error("{path}: {source}")]
    InFile {
        /// The file.
        path: String,
        /// What is wrong with it.
        #[source]
        source: Box<PriceFileError>,
    },
}

impl PriceFile {
    /// Parses and checks a price file.
    pub fn parse(json: &[u8]) -> Result<PriceFile, PriceFileError> {
        let file: PriceFile = serde_json::from_slice(json)?;
        file.check()?;
        Ok(file)
    }

    /// Reads, parses and checks a price file; errors name the file.
    pub fn read(path: &Path) -> Result<PriceFile, PriceFileError> {
        let bytes =
            std::fs::read(path).map_err(|source| PriceFileError::Io { path: path.display().to_string(), source })?;
        Self::parse(&bytes).map_err(|e| e.in_file(path))
    }

    /// What the controller does with `PRICE_FILE` at start: reads and checks the file and returns the prices of
    /// `region`, which must have at least one on-demand price (a file without them would silently leave the
    /// controller on the estimate). Errors name the file.
    pub fn load_region(path: &Path, region: &str) -> Result<PriceTable, PriceFileError> {
        Self::read(path)?.checked_region(region).map_err(|e| e.in_file(path))
    }

    /// The prices of `region`, or [`PriceFileError::NoPricesForRegion`] when the file has no on-demand price
    /// for it.
    pub fn checked_region(&self, region: &str) -> Result<PriceTable, PriceFileError> {
        let table = self.region(region);
        if table.on_demand.is_empty() {
            return Err(PriceFileError::NoPricesForRegion {
                region: region.to_owned(),
                regions: self.on_demand.iter().filter(|(_, p)| !p.is_empty()).map(|(r, _)| r.clone()).collect(),
            });
        }
        Ok(table)
    }

    /// Sets the prices of `region` to `table` (replacing what the file had for it).
    pub fn set_region(&mut self, region: &str, table: PriceTable) {
        self.on_demand.insert(region.to_owned(), table.on_demand);
        if table.spot.is_empty() {
            self.spot.remove(region);
        } else {
            self.spot.insert(region.to_owned(), table.spot);
        }
    }

    fn check(&self) -> Result<(), PriceFileError> {
        let bad = |p: f64| !p.is_finite() || p < 0.0;
        for (region, prices) in &self.on_demand {
            if let Some((it, p)) = prices.iter().find(|(_, p)| bad(**p)) {
                return Err(PriceFileError::InvalidPrice {
                    kind: "on-demand",
                    instance_type: it.clone(),
                    location: region.clone(),
                    price: *p,
                });
            }
        }
        for zones in self.spot.values().flat_map(BTreeMap::iter) {
            let (it, zones) = zones;
            if let Some((zone, p)) = zones.iter().find(|(_, p)| bad(**p)) {
                return Err(PriceFileError::InvalidPrice {
                    kind: "spot",
                    instance_type: it.clone(),
                    location: zone.clone(),
                    price: *p,
                });
            }
        }
        Ok(())
    }

    /// The prices of one region (empty when the file has none for it).
    pub fn region(&self, region: &str) -> PriceTable {
        PriceTable {
            on_demand: self.on_demand.get(region).cloned().unwrap_or_default(),
            spot: self.spot.get(region).cloned().unwrap_or_default(),
        }
    }

    /// Serialises the file (pretty JSON, keys sorted, a final newline), as `karpenter-controller prices` writes
    /// it.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).map(|s| s + "\n").unwrap_or_default()
    }
}

impl PriceFileError {
    fn in_file(self, path: &Path) -> PriceFileError {
        match self {
            e @ (PriceFileError::Io { .. } | PriceFileError::InFile { .. }) => e,
            e => PriceFileError::InFile { path: path.display().to_string(), source: Box::new(e) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_sections_and_picks_a_region() {
        let f = PriceFile::parse(
            br#"{"onDemand": {"us-east-1": {"m5.large": 0.096}, "eu-west-1": {"m5.large": 0.107}},
                 "spot": {"us-east-1": {"m5.large": {"us-east-1a": 0.035}}}}"#,
        )
        .expect("valid");
        let t = f.region("us-east-1");
        assert_eq!(t.on_demand("m5.large"), Some(0.096));
        assert_eq!(t.spot("m5.large", "us-east-1a"), Some(0.035));
        assert_eq!(t.spot("m5.large", "us-east-1b"), None);
        assert_eq!(f.region("eu-west-1").on_demand("m5.large"), Some(0.107));
        assert_eq!(f.region("ap-south-1"), PriceTable::default());
        let again = PriceFile::parse(f.to_json().as_bytes()).expect("round trip");
        assert_eq!(again, f);
    }

    #[test]
    fn the_published_snapshot_shape_is_a_price_file() {
        let f = PriceFile::parse(
            br#"{"description": "snapshot", "unit": "USD/hour", "regions": {"us-east-1": {"a1.large": 0.051}}}"#,
        )
        .expect("valid");
        assert_eq!(f.region("us-east-1").on_demand("a1.large"), Some(0.051));
    }

    #[test]
    fn rejects_bad_prices_and_garbage() {
        let neg = PriceFile::parse(br#"{"onDemand": {"us-east-1": {"m5.large": -1}}}"#).unwrap_err();
        assert!(neg.to_string().contains("m5.large"), "{neg}");
        let spot = PriceFile::parse(br#"{"spot": {"r": {"m5.large": {"z": -0.5}}}}"#).unwrap_err();
        assert!(matches!(spot, PriceFileError::InvalidPrice { kind: "spot", .. }), "{spot}");
        assert!(matches!(PriceFile::parse(b"{\"onDemand\": [1]}"), Err(PriceFileError::Json(_))));
        assert!(matches!(PriceFile::parse(b"\xff\xfe"), Err(PriceFileError::Json(_))));
        let missing = PriceFile::read(Path::new("/nonexistent/prices.json")).unwrap_err();
        assert!(matches!(missing, PriceFileError::Io { .. }));
        assert!(missing.to_string().contains("/nonexistent/prices.json"), "{missing}");
    }

    /// A file under the system temp dir, removed on drop.
    struct TempFile(std::path::PathBuf);

    impl TempFile {
        fn new(name: &str, contents: &str) -> TempFile {
            let path = std::env::temp_dir().join(format!("karpenter-aws-pricing-{}-{name}.json", std::process::id()));
            std::fs::write(&path, contents).expect("writing a temp file");
            TempFile(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn load_region_names_the_file_and_what_is_wrong() {
        let good = TempFile::new(
            "good",
            r#"{"onDemand": {"us-west-2": {"m5.large": 0.096}, "eu-west-1": {"m5.large": 0.107}, "empty": {}},
                "spot": {"us-west-2": {"m5.large": {"us-west-2a": 0.03}}}}"#,
        );
        let t = PriceFile::load_region(&good.0, "us-west-2").expect("valid");
        assert_eq!(t.on_demand("m5.large"), Some(0.096));
        assert_eq!(t.spot("m5.large", "us-west-2a"), Some(0.03));
        let path = good.0.display().to_string();

        let other = PriceFile::load_region(&good.0, "ap-south-1").unwrap_err();
        let text = other.to_string();
        assert!(text.contains(&path), "{text}");
        assert!(text.contains("no on-demand prices for region ap-south-1 (it has eu-west-1, us-west-2)"), "{text}");
        assert!(text.contains("karpenter-controller prices --region ap-south-1"), "{text}");
        assert!(matches!(&other, PriceFileError::InFile { source, .. }
            if matches!(**source, PriceFileError::NoPricesForRegion { .. })));
        let empty = PriceFile::default().checked_region("us-west-2").unwrap_err();
        assert!(empty.to_string().contains("(it has none)"), "{empty}");

        let garbage = TempFile::new("garbage", "{\"onDemand\": {\"us-west-2\": {\"m5.large\": \"cheap\"}}}");
        let text = PriceFile::load_region(&garbage.0, "us-west-2").unwrap_err().to_string();
        assert!(text.starts_with(&format!("{}: price file is not valid: ", garbage.0.display())), "{text}");
        assert!(text.contains("line 1"), "serde names the place: {text}");

        let negative = TempFile::new("negative", r#"{"onDemand": {"us-west-2": {"m5.large": -0.1}}}"#);
        let text = PriceFile::read(&negative.0).unwrap_err().to_string();
        assert!(
            text.contains(&negative.0.display().to_string()) && text.contains("on-demand price of m5.large"),
            "{text}"
        );
    }

    #[test]
    fn set_region_replaces_one_region() {
        let mut f = PriceFile::parse(
            br#"{"onDemand": {"us-east-1": {"m5.large": 0.096}, "eu-west-1": {"m5.large": 0.107}},
                 "spot": {"us-east-1": {"m5.large": {"us-east-1a": 0.035}}}}"#,
        )
        .expect("valid");
        let mut t = PriceTable::default();
        t.on_demand.insert("c5.large".into(), 0.085);
        f.set_region("us-east-1", t.clone());
        assert_eq!(f.region("us-east-1"), t, "the old spot prices of the region are gone too");
        assert_eq!(f.region("eu-west-1").on_demand("m5.large"), Some(0.107));
        assert!(f.spot.is_empty());
        assert!(f.to_json().ends_with("}\n"));
    }

    #[test]
    fn estimate_orders_bigger_and_accelerated_types_higher() {
        let it = |vcpu: i64, mib: i64, gpus: i64| {
            let mut i = InstanceTypeInfo::default();
            i.vcpu_info.default_vcpus = Some(vcpu);
            i.memory_info.size_in_mib = Some(mib);
            if gpus > 0 {
                i.gpu_info = Some(crate::ec2::GpuInfo {
                    gpus: vec![crate::ec2::GpuDeviceInfo { count: Some(gpus), ..Default::default() }],
                    total_gpu_memory_in_mib: None,
                });
            }
            i
        };
        let small = estimate(&it(2, 8192, 0));
        // 2 × 0.03 + 8 × 0.0065 = 0.112
        assert!((small - 0.112).abs() < 1e-9, "{small}");
        assert!(estimate(&it(4, 16384, 0)) > small);
        assert!(estimate(&it(4, 16384, 1)) > estimate(&it(16, 65536, 0)));
        assert_eq!(estimate(&InstanceTypeInfo::default()), 0.0);
    }
}
