//! Entry points for fuzz targets (`fuzz/fuzz_targets/`) and their corpus replay test. Not a stable API.
