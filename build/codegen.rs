//! Runs CK's fmha code generator (through build/ck_codegen.py) for the selected kernels, and
//! syncs its output into the build cache, touching only files whose content changed so that an
//! unchanged rebuild recompiles nothing.
use crate::selection::Selection;
use crate::sources::CkSources;
use crate::toolchain::{run_capture, Toolchain};
use crate::BuildResult;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Forward head-dim tiles built with occupancy 1 when the device compiler is upstream LLVM.
const UPSTREAM_LLVM_OCCUPANCY_ONE_HDIMS: &str = "96,128";

pub struct Generated {
    /// The generated .cpp files, in the generator's order. Beside them, manifest.txt lists
    /// "<api> <kernel name>" lines: what scripts/check_code_objects.py expects in the library.
    pub sources: Vec<PathBuf>,
}

impl Generated {
    /// Kernel instances (the dispatchers excluded).
    pub fn instance_count(&self) -> usize {
        self.sources.iter().filter(|p| !is_dispatcher(p)).count()
    }
}

fn is_dispatcher(path: &Path) -> bool {
    path.file_stem().is_some_and(|s| s.to_string_lossy().ends_with("_api"))
}

pub fn generate(
    ck: &CkSources,
    toolchain: &Toolchain,
    selection: &Selection,
    build_dir: &Path,
) -> BuildResult<Generated> {
    let fresh = build_dir.join("gen.tmp");
    let gen = build_dir.join("gen");
    remove_dir(&fresh)?;
    let script = crate::manifest_dir()?.join("build/ck_codegen.py");
    let hdims: Vec<String> = selection.hdims.iter().map(u32::to_string).collect();
    let mut command = Command::new(&toolchain.python);
    command
        .arg(&script)
        .arg(ck.fmha_dir())
        .arg(&fresh)
        .args(["--dtypes", &selection.dtypes.join(","), "--hdims", &hdims.join(",")])
        .args(["--filter", &selection.filter]);
    if selection.lse {
        command.arg("--lse");
    }
    if selection.paged {
        command.arg("--paged");
    }
    if !toolchain.amd_clang {
        // Upstream LLVM spills CK's d128 forward tile at its default occupancy; with occupancy
        // 1 it does not (measured on gfx942 with LLVM 21; see ck_codegen.py and the README).
        command.args(["--occupancy-one-hdims", UPSTREAM_LLVM_OCCUPANCY_ONE_HDIMS]);
    }
    run_capture(&mut command).map_err(|e| format!("CK code generation failed: {e}"))?;
    let manifest_text = fs::read_to_string(fresh.join("manifest.txt")).map_err(|e| e.to_string())?;
    if !manifest_text.lines().any(|l| !l.starts_with("api ")) {
        return Err(format!(
            "the kernel selection is empty ({}): widen FLASH_ATTN_ROCM_FILTER/HDIMS/DTYPES",
            selection.describe()
        ));
    }
    // The split-KV tiles actually generated (ck_codegen.py skips those this CK cannot build):
    // the dispatch serves a paged call only on one of them.
    println!("cargo:rustc-env=FLASH_ATTN_ROCM_CK_SPLITKV_HDIMS={}", splitkv_hdims(&manifest_text).join(","));
    sync_dir(&fresh, &gen)?;
    remove_dir(&fresh)?;
    let sources = manifest_text
        .lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(_, name)| gen.join(format!("{name}.cpp")))
        .collect();
    Ok(Generated { sources })
}

/// Head dims of the `fwd_splitkv` kernels in a manifest (names `fmha_fwd_splitkv_d<hdim>_...`),
/// ascending and unique.
fn splitkv_hdims(manifest: &str) -> Vec<String> {
    let mut hdims: Vec<u32> = manifest
        .lines()
        .filter_map(|line| line.strip_prefix("fwd_splitkv fmha_fwd_splitkv_d"))
        .filter_map(|rest| rest.split('_').next()?.parse().ok())
        .collect();
    hdims.sort_unstable();
    hdims.dedup();
    hdims.iter().map(u32::to_string).collect()
}

/// Makes `to` hold exactly the files of `from`, rewriting only those whose bytes differ.
fn sync_dir(from: &Path, to: &Path) -> BuildResult<()> {
    fs::create_dir_all(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    let names = |dir: &Path| -> BuildResult<Vec<std::ffi::OsString>> {
        let entries = fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        Ok(entries.filter_map(|e| e.ok().map(|e| e.file_name())).collect())
    };
    for name in names(to)? {
        if !from.join(&name).exists() {
            fs::remove_file(to.join(&name)).map_err(|e| e.to_string())?;
        }
    }
    for name in names(from)? {
        let bytes = fs::read(from.join(&name)).map_err(|e| e.to_string())?;
        write_if_changed(&to.join(&name), &bytes)?;
    }
    Ok(())
}

pub fn write_if_changed(path: &Path, bytes: &[u8]) -> BuildResult<()> {
    if fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    fs::write(path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn remove_dir(dir: &Path) -> BuildResult<()> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!("cannot remove {}: {e}", dir.display())),
        _ => Ok(()),
    }
}
