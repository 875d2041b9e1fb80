//! The manifest loader sits above the API types: no type module's production code names the loader (its tests
//! may, to read fixtures). A type that needs loaded objects gets them through a function in `loader/` instead
//! (as `loader::LoadedSources` and `DraObjects::add` do), so the loader can be left out (feature `loader`) and
//! the types never join its import circle. `python3 tools/import_circles.py crates/karpenter-api` shows the
//! import graph this guards.

use std::path::Path;

/// Files that stand above the loader and may name it.
const ABOVE_THE_LOADER: [&str; 2] = ["lib.rs", "fuzzing.rs"];

/// `text` without its `#[cfg(test)]` items (a test module is the last item of a file here, by convention).
fn production_part(text: &str) -> &str {
    text.find("#[cfg(test)]").map_or(text, |at| &text[..at])
}

fn type_module_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        if name == "loader" || name == "loader.rs" || ABOVE_THE_LOADER.contains(&name.as_str()) {
            continue;
        }
        if path.is_dir() {
            type_module_files(&path, out);
        } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_type_module_imports_the_loader() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    type_module_files(&src, &mut files);
    assert!(files.len() > 20, "found only {} type modules under {}", files.len(), src.display());
    let names_the_loader = ["crate::loader", "crate::lean", "crate::load_str", "crate::load_file", "crate::load_paths"];
    let offenders: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let text = std::fs::read_to_string(f).expect("readable");
            let hit = names_the_loader.iter().find(|n| production_part(&text).contains(**n))?;
            Some(format!("{} names {hit}", f.strip_prefix(&src).unwrap_or(f).display()))
        })
        .collect();
    assert!(offenders.is_empty(), "type modules that import the loader: {offenders:?}");
}
