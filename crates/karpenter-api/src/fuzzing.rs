//! Entry points for fuzz targets (`fuzz/fuzz_targets/`) and their corpus replay test. Not a stable API.

use crate::labels::ProviderLabels;
use crate::loader;
use crate::validation::ValidationContext;

/// Loads arbitrary bytes as a manifest (both as YAML and as JSON) and validates every Karpenter object for both
/// the AWS and the KWOK provider. Must never panic.
pub fn manifest(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let contexts =
        [ValidationContext { provider: ProviderLabels::aws() }, ValidationContext { provider: ProviderLabels::kwok() }];
    for origin in ["fuzz.yaml", "fuzz.json"] {
        let (loaded, errors) = loader::load_str_all(&text, origin);
        for e in &errors {
            let _ = e.to_string();
        }
        for l in &loaded {
            let _ = l.describe();
            for ctx in &contexts {
                if let Some(violations) = l.object.validate(ctx) {
                    for v in violations.iter() {
                        let _ = v.to_string();
                    }
                }
            }
        }
    }
}
