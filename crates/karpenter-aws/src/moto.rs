//! A loader for the EC2 instance-type catalogue inside the `moto` Python package (pin 5.2.5): 1,395 types in
//! EC2's JSON format and the offerings per region, zone and zone id for 30 regions. Tests and benchmarks use it
//! as a realistic catalogue without AWS; the SDK half uses moto's server instead.
//!
//! Layout under `site-packages/moto/ec2/resources/`:
//! * `instance_types.json.gz` — an object mapping each name to its `InstanceTypeInfo`;
//! * `instance_type_offerings/{region,availability-zone,availability-zone-id}/<region>.json.gz` — arrays of
//!   `{"InstanceType", "Location"}`.
//!
//! [`MotoCatalogue::discover`] finds the package in the virtualenv named by `KARPENTER_MOTO_VENV` (default
//! `<workspace>/target/moto-venv`, which `.ci/run` creates), searching `lib*/python*/site-packages` and, for a
//! `pip install --target` directory, the directory itself.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::ec2::{InstanceTypeInfo, InstanceTypeOffering};

/// The environment variable naming moto's virtualenv.
pub const VENV_ENV: &str = "KARPENTER_MOTO_VENV";
/// The virtualenv's default place, relative to the workspace root.
pub const DEFAULT_VENV: &str = "target/moto-venv";
/// The files are at most a few MB decompressed; refuse anything absurd (a corrupt or hostile file).
const MAX_DECOMPRESSED: u64 = 256 << 20;

/// The catalogue could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum MotoError {
    /// No moto package under the virtualenv.
    #[error("moto's EC2 catalogue was not found under {venv} (set {VENV_ENV}, or run .ci/run's moto step)")]
    NotInstalled {
        /// The virtualenv searched.
        venv: String,
    },
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A file is not the JSON expected.
    #[error("decoding {path}: {source}")]
    Json {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// A file decompresses to more than 256 MiB.
    #[error("{path} decompresses to more than 256 MiB")]
    TooLarge {
        /// The file.
        path: String,
    },
}

/// Decompresses and decodes a gzipped JSON file.
pub fn read_gz_json<T: DeserializeOwned>(path: &Path) -> Result<T, MotoError> {
    let p = || path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| MotoError::Io { path: p(), source })?;
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(file)
        .take(MAX_DECOMPRESSED + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| MotoError::Io { path: p(), source })?;
    if bytes.len() as u64 > MAX_DECOMPRESSED {
        return Err(MotoError::TooLarge { path: p() });
    }
    serde_json::from_slice(&bytes).map_err(|source| MotoError::Json { path: p(), source })
}

/// Where offerings are listed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocationType {
    /// Region.
    Region,
    /// Zone name (`us-east-1a`).
    AvailabilityZone,
    /// Zone id (`use1-az1`).
    AvailabilityZoneId,
}

impl LocationType {
    fn dir(self) -> &'static str {
        match self {
            LocationType::Region => "region",
            LocationType::AvailabilityZone => "availability-zone",
            LocationType::AvailabilityZoneId => "availability-zone-id",
        }
    }
}

/// moto's `ec2/resources` directory.
#[derive(Clone, Debug)]
pub struct MotoCatalogue {
    dir: PathBuf,
}

fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    v.sort();
    v
}

impl MotoCatalogue {
    /// The catalogue in a given `moto/ec2/resources` directory.
    pub fn at(dir: impl Into<PathBuf>) -> MotoCatalogue {
        MotoCatalogue { dir: dir.into() }
    }

    /// The resources directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Finds moto's resources in a virtualenv (`lib*/python*/site-packages/moto/ec2/resources`) or a
    /// `pip install --target` directory (`moto/ec2/resources`).
    pub fn find_in_venv(venv: &Path) -> Result<MotoCatalogue, MotoError> {
        let rel = Path::new("moto").join("ec2").join("resources");
        let mut candidates = vec![venv.join(&rel)];
        for lib in sorted_entries(venv) {
            let is_lib = lib.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("lib"));
            if !is_lib {
                continue;
            }
            for py in sorted_entries(&lib) {
                candidates.push(py.join("site-packages").join(&rel));
            }
        }
        candidates
            .into_iter()
            .find(|c| c.join("instance_types.json.gz").is_file())
            .map(MotoCatalogue::at)
            .ok_or_else(|| MotoError::NotInstalled { venv: venv.display().to_string() })
    }

    /// The virtualenv to search: `$KARPENTER_MOTO_VENV`, else `<workspace_root>/target/moto-venv`.
    pub fn venv_path(workspace_root: &Path) -> PathBuf {
        match std::env::var_os(VENV_ENV) {
            Some(v) if !v.is_empty() => PathBuf::from(v),
            _ => workspace_root.join(DEFAULT_VENV),
        }
    }

    /// [`Self::find_in_venv`] on [`Self::venv_path`].
    pub fn discover(workspace_root: &Path) -> Result<MotoCatalogue, MotoError> {
        Self::find_in_venv(&Self::venv_path(workspace_root))
    }

    /// Every instance type, sorted by name.
    pub fn instance_types(&self) -> Result<Vec<InstanceTypeInfo>, MotoError> {
        let map: BTreeMap<String, InstanceTypeInfo> = read_gz_json(&self.dir.join("instance_types.json.gz"))?;
        Ok(map.into_values().collect())
    }

    /// The regions with offerings files, sorted.
    pub fn regions(&self) -> Vec<String> {
        sorted_entries(&self.dir.join("instance_type_offerings").join(LocationType::Region.dir()))
            .iter()
            .filter_map(|p| p.file_name()?.to_str()?.strip_suffix(".json.gz").map(str::to_owned))
            .collect()
    }

    /// The raw offerings of a region by location type (an unknown region is an IO error).
    pub fn offerings(&self, region: &str, by: LocationType) -> Result<Vec<InstanceTypeOffering>, MotoError> {
        let path = self.dir.join("instance_type_offerings").join(by.dir()).join(format!("{region}.json.gz"));
        read_gz_json(&path)
    }

    /// Instance type → locations (zone names, zone ids, or the region) of a region.
    pub fn locations(&self, region: &str, by: LocationType) -> Result<BTreeMap<String, BTreeSet<String>>, MotoError> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for o in self.offerings(region, by)? {
            out.entry(o.instance_type).or_default().insert(o.location);
        }
        Ok(out)
    }

    /// The instance types offered in a region (by its region offerings file), sorted by name.
    pub fn instance_types_in(&self, region: &str) -> Result<Vec<InstanceTypeInfo>, MotoError> {
        let offered = self.locations(region, LocationType::Region)?;
        Ok(self.instance_types()?.into_iter().filter(|i| offered.contains_key(&i.instance_type)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("karpenter-aws-moto-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        d
    }

    fn write_gz(path: &Path, json: &str) {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dirs");
        let f = std::fs::File::create(path).expect("create");
        let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
        gz.write_all(json.as_bytes()).expect("write");
        gz.finish().expect("finish");
    }

    #[test]
    fn finds_a_venv_layout_and_reads_a_tiny_catalogue() {
        let venv = tmp("venv");
        let res = venv.join("lib/python3.11/site-packages/moto/ec2/resources");
        write_gz(
            &res.join("instance_types.json.gz"),
            r#"{"m5.large": {"InstanceType": "m5.large", "VCpuInfo": {"DefaultVCpus": 2}},
                "a1.large": {"InstanceType": "a1.large"}}"#,
        );
        write_gz(
            &res.join("instance_type_offerings/availability-zone/us-west-2.json.gz"),
            r#"[{"InstanceType": "m5.large", "Location": "us-west-2b"},
                {"InstanceType": "m5.large", "Location": "us-west-2a"}]"#,
        );
        write_gz(
            &res.join("instance_type_offerings/region/us-west-2.json.gz"),
            r#"[{"InstanceType": "m5.large", "Location": "us-west-2"}]"#,
        );
        let cat = MotoCatalogue::find_in_venv(&venv).expect("found");
        assert_eq!(cat.dir(), res);
        let names: Vec<String> = cat.instance_types().expect("types").into_iter().map(|i| i.instance_type).collect();
        assert_eq!(names, ["a1.large", "m5.large"]);
        assert_eq!(cat.regions(), ["us-west-2"]);
        let zones = cat.locations("us-west-2", LocationType::AvailabilityZone).expect("zones");
        assert_eq!(zones["m5.large"].iter().collect::<Vec<_>>(), ["us-west-2a", "us-west-2b"]);
        let in_region = cat.instance_types_in("us-west-2").expect("region");
        assert_eq!(in_region.len(), 1);
        assert!(matches!(cat.locations("eu-west-9", LocationType::Region), Err(MotoError::Io { .. })));
        let _ = std::fs::remove_dir_all(&venv);
    }

    #[test]
    fn pip_target_layout_and_missing_package() {
        let target = tmp("target");
        write_gz(&target.join("moto/ec2/resources/instance_types.json.gz"), "{}");
        assert!(MotoCatalogue::find_in_venv(&target).is_ok());
        let empty = tmp("empty");
        let err = MotoCatalogue::find_in_venv(&empty).unwrap_err();
        assert!(matches!(err, MotoError::NotInstalled { .. }));
        assert!(err.to_string().contains(VENV_ENV));
        let _ = std::fs::remove_dir_all(&target);
        let _ = std::fs::remove_dir_all(&empty);
    }

    #[test]
    fn garbage_files_are_errors() {
        let d = tmp("garbage");
        let not_gz = d.join("plain.json.gz");
        std::fs::write(&not_gz, b"{\"a\": 1}").expect("write");
        assert!(matches!(read_gz_json::<serde_json::Value>(&not_gz), Err(MotoError::Io { .. })));
        let bad_json = d.join("bad.json.gz");
        write_gz(&bad_json, "[1, 2");
        assert!(matches!(read_gz_json::<serde_json::Value>(&bad_json), Err(MotoError::Json { .. })));
        write_gz(&d.join("instance_types.json.gz"), r#"{"m5.large": 3}"#);
        assert!(matches!(MotoCatalogue::at(&d).instance_types(), Err(MotoError::Json { .. })));
        let _ = std::fs::remove_dir_all(&d);
    }
}
