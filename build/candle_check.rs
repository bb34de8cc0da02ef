//! `candle-rocm` needs a candle-core with a ROCm device (candle PR #3801, in no released candle)
//! and that candle's own `rocm` feature. Without them the glue fails to compile with a screen of
//! rustc errors, and on a ROCm machine only after the long native build. This check runs first in
//! the build script and reads the build's Cargo.lock, which cargo writes before building anything:
//! a candle-core whose `rocm` feature is on depends on `rocm-rs` there (a lockfile lists the
//! optional dependencies that some feature set of the workspace turns on). It errs on the side
//! of letting a build through: a workspace where another member turns on `candle-core/rocm`
//! passes it even when this build does not (rustc's errors then follow), and a lockfile it
//! cannot find skips it. `FLASH_ATTN_ROCM_SKIP_CANDLE_CHECK=1` skips it too.
//!
//! Included by `tests/build_candle_check.rs` as well, so it depends on std only.
use std::path::{Path, PathBuf};

/// The commit of candle PR #3801 the glue was compiled against.
pub const CANDLE_PR_COMMIT: &str = "8a17ca0a4c66b43d933b7e192db6860ee68f9c71";

/// One `[[package]]` entry of a Cargo.lock, reduced to what the check reads.
#[derive(Debug, Default, PartialEq)]
pub struct LockedPackage {
    pub name: String,
    pub version: String,
    /// `None` for a path dependency (a local checkout).
    pub source: Option<String>,
    /// Dependency names, without the version suffix a lockfile adds when a name is ambiguous.
    pub dependencies: Vec<String>,
}

/// The packages of a Cargo.lock (versions 1 to 4 share the `[[package]]` layout read here).
pub fn parse_lock(text: &str) -> Vec<LockedPackage> {
    let mut packages = Vec::new();
    let mut current: Option<LockedPackage> = None;
    let mut in_dependencies = false;
    for line in text.lines().map(str::trim) {
        if in_dependencies {
            if line.starts_with(']') {
                in_dependencies = false;
            } else if let (Some(package), Some(dep)) = (current.as_mut(), quoted(line)) {
                package.dependencies.push(dependency_name(dep));
            }
            continue;
        }
        if line.starts_with('[') {
            packages.extend(current.take());
            current = (line == "[[package]]").then(LockedPackage::default);
            continue;
        }
        let Some(package) = current.as_mut() else { continue };
        match line.split_once(" = ") {
            Some(("name", value)) => package.name = quoted(value).unwrap_or_default().to_string(),
            Some(("version", value)) => package.version = quoted(value).unwrap_or_default().to_string(),
            Some(("source", value)) => package.source = quoted(value).map(str::to_string),
            Some(("dependencies", value)) if value.contains(']') => {
                package.dependencies.extend(value.split(',').filter_map(quoted).map(dependency_name));
            }
            Some(("dependencies", _)) => in_dependencies = true,
            _ => {}
        }
    }
    packages.extend(current);
    packages
}

/// `"serde 1.0.200"` names `serde`: the version is added when two versions are locked.
fn dependency_name(entry: &str) -> String {
    entry.split(' ').next().unwrap_or(entry).to_string()
}

fn quoted(text: &str) -> Option<&str> {
    let start = text.find('"')? + 1;
    let end = start + text[start..].find('"')?;
    Some(&text[start..end])
}

/// What the lockfile says of the candle-core this build uses.
#[derive(Debug, PartialEq)]
pub enum CandleVerdict {
    /// A candle-core with its `rocm` feature on (it pulls in rocm-rs).
    HasRocm,
    /// The lockfile names no candle-core at all (it is not the lockfile of this build).
    NotFound,
    /// Every candle-core in the lockfile lacks rocm-rs: the released candle, or a patched one
    /// without its `rocm` feature. Carries `name version (source)` of each.
    NoRocm(Vec<String>),
}

pub fn judge(packages: &[LockedPackage]) -> CandleVerdict {
    let candles: Vec<&LockedPackage> = packages.iter().filter(|p| p.name == "candle-core").collect();
    if candles.is_empty() {
        return CandleVerdict::NotFound;
    }
    if candles.iter().any(|p| p.dependencies.iter().any(|d| d == "rocm-rs")) {
        return CandleVerdict::HasRocm;
    }
    CandleVerdict::NoRocm(
        candles
            .iter()
            .map(|p| format!("candle-core {} ({})", p.version, describe_source(p.source.as_deref())))
            .collect(),
    )
}

fn describe_source(source: Option<&str>) -> &str {
    match source {
        None => "a local path",
        Some(s) if s.starts_with("registry+") => "a registry release",
        Some(s) => s,
    }
}

/// The error for a build without a ROCm candle: what is wrong and the recipe that fixes it.
pub fn no_rocm_message(lockfile: &Path, found: &[String]) -> String {
    format!(
        "the `candle-rocm` feature needs a candle-core with a ROCm device and its `rocm` feature on.\n\
         This build uses {} (per {}), which has no ROCm device: the ROCm backend is candle PR #3801,\n\
         not in any released candle. Either drop `candle-rocm` (the `rocm` feature alone gives the\n\
         low-level API over device pointers), or patch candle to that PR in your Cargo.toml:\n\n\
         \x20   [dependencies]\n\
         \x20   flash-attn-rocm = {{ git = \"…\", features = [\"candle-rocm\"] }}  # or path = \"…\": it is on no registry\n\
         \x20   candle-core = {{ version = \"0.11\", features = [\"rocm\"] }}\n\n\
         \x20   [patch.crates-io]\n\
         \x20   candle-core = {{ git = \"https://github.com/huggingface/candle\", rev = \"{CANDLE_PR_COMMIT}\" }}\n\
         \x20   candle-nn = {{ git = \"https://github.com/huggingface/candle\", rev = \"{CANDLE_PR_COMMIT}\" }}\n\n\
         (if cargo cannot fetch that commit, clone candle, `git fetch origin pull/3801/head`, check\n\
         out the commit and use `path = \"…/candle-core\"` and `path = \"…/candle-nn\"` instead.)\n\
         docs/building.md, section \"candle-rocm and the candle check\", has the details.",
        found.join(", "),
        lockfile.display(),
    )
}

/// The Cargo.lock of the build that runs this script: the first one above `OUT_DIR` (inside the
/// target directory, which sits in the workspace by default) that lists `package`. `None` when
/// there is none (a target directory outside the workspace): the check is skipped then. Only
/// `OUT_DIR`'s ancestors are searched: the package's own folder holds the lockfile it was
/// published or committed with, which pins the released candle whatever the user patched.
pub fn find_lockfile(out_dir: &Path, package: &str) -> Option<(PathBuf, String)> {
    let listed = format!("name = \"{package}\"");
    out_dir.ancestors().find_map(|dir| {
        let path = dir.join("Cargo.lock");
        let text = std::fs::read_to_string(&path).ok()?;
        text.contains(&listed).then_some((path, text))
    })
}
