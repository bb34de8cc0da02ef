//! Build script entry. Every build writes `$OUT_DIR/triton_kernels.rs`, the table of embedded
//! Triton code objects (empty without the `triton` feature). `triton` (enabled by `rocm` and
//! `cuda-verify`) compiles kernels/attention.py ahead of time for the requested AMD archs and/or
//! NVIDIA targets (sm_80, sm_86, sm_89, sm_90); `rocm` also fetches Composable Kernel (CK), generates the selected fmha forward
//! instances and compiles them with the C++ shim into a static library, for the requested archs
//! CK serves (none: CK is skipped entirely). The modules of this folder do one job each.
use std::env;
use std::fs;
use std::path::PathBuf;

#[cfg(feature = "triton")]
mod cache_key;
#[cfg(feature = "candle-rocm")]
mod candle_check;
#[cfg(feature = "rocm")]
mod codegen;
#[cfg(feature = "rocm")]
mod native;
#[cfg(feature = "triton")]
mod progress;
#[cfg(feature = "triton")]
mod python_env;
#[cfg(feature = "triton")]
mod selection;
#[cfg(feature = "rocm")]
mod sources;
#[cfg(feature = "rocm")]
mod toolchain;
#[cfg(feature = "triton")]
mod triton;

/// Errors of the build are messages for the person building: what is missing and what to
/// install or set.
pub type BuildResult<T> = Result<T, String>;

/// The crate's own directory, read when the script runs. Not `env!("CARGO_MANIFEST_DIR")`:
/// cargo hashes a path package's build script by its place in the workspace, not by its
/// absolute path, so two checkouts sharing a target directory share one compiled script, and a
/// path compiled into it would be the other checkout's (its kernels, its scripts).
#[allow(dead_code)] // used by the feature-gated steps only
pub fn manifest_dir() -> BuildResult<PathBuf> {
    env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from).ok_or_else(|| "CARGO_MANIFEST_DIR is not set: run the build through cargo".to_owned())
}

fn main() {
    println!("cargo:rerun-if-changed=build");
    println!("cargo:rerun-if-env-changed=DOCS_RS");
    // Set by build/native.rs when the forward kernels write the LSE (FLASH_ATTN_ROCM_LSE).
    println!("cargo:rustc-check-cfg=cfg(flash_attn_rocm_lse_kernels)");
    // Set when the CK library and its shim were built (a `rocm` build with a CK arch).
    println!("cargo:rustc-check-cfg=cfg(flash_attn_rocm_ck)");
    note_unoptimized_build();
    let result = if env::var_os("DOCS_RS").is_some() { docs_build() } else { check_candle().and_then(|()| build()) };
    if let Err(message) = result {
        eprintln!("\nflash-attn-rocm: the build failed:\n{message}\n");
        std::process::exit(1);
    }
}

/// Cargo compiles a dependency in the dependent crate's profile, and its `dev` profile does not
/// optimize: there the CPU kernel runs hundreds of times slower than in a release build. Only the
/// dependent crate's manifest can change that (a dependency's `[profile]` is ignored), so the
/// build says how, and hands the same line to the library, which prints it once at its first CPU
/// call: cargo shows a build script's warnings for path dependencies only, not for git ones.
fn note_unoptimized_build() {
    if env::var("OPT_LEVEL").is_ok_and(|level| level == "0") {
        let note = "compiled without optimization (opt-level 0, the dev profile of a crate that depends on \
                    it): the CPU kernel runs about 200x slower than optimized. Add to your Cargo.toml: \
                    [profile.dev.package.flash-attn-rocm] opt-level = 3";
        println!("cargo:warning=flash-attn-rocm: {note}");
        println!("cargo:rustc-env=FLASH_ATTN_ROCM_UNOPTIMIZED_NOTE={note}");
    }
}

/// With `candle-rocm`: fails before any native step unless candle-core has a ROCm device.
#[cfg(feature = "candle-rocm")]
fn check_candle() -> BuildResult<()> {
    println!("cargo:rerun-if-env-changed=FLASH_ATTN_ROCM_SKIP_CANDLE_CHECK");
    if env::var_os("FLASH_ATTN_ROCM_SKIP_CANDLE_CHECK").is_some_and(|v| v == "1") {
        return Ok(());
    }
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_default());
    let package = env::var("CARGO_PKG_NAME").unwrap_or_default();
    let Some((lockfile, text)) = candle_check::find_lockfile(&out_dir, &package) else {
        println!("cargo:warning=flash-attn-rocm: no Cargo.lock found above OUT_DIR; the candle ROCm check is skipped");
        return Ok(());
    };
    println!("cargo:rerun-if-changed={}", lockfile.display());
    match candle_check::judge(&candle_check::parse_lock(&text)) {
        candle_check::CandleVerdict::NoRocm(found) => Err(candle_check::no_rocm_message(&lockfile, &found)),
        candle_check::CandleVerdict::HasRocm | candle_check::CandleVerdict::NotFound => Ok(()),
    }
}

#[cfg(not(feature = "candle-rocm"))]
fn check_candle() -> BuildResult<()> {
    Ok(())
}

/// docs.rs has no GPU toolchain: the Rust items still document, nothing is compiled or linked;
/// `rocm::BUILD_INFO` says so.
fn docs_build() -> BuildResult<()> {
    if cfg!(feature = "rocm") {
        println!("cargo:rustc-env=FLASH_ATTN_ROCM_BUILD_INFO=docs build: no native library");
    }
    write_empty_table()
}

fn write_empty_table() -> BuildResult<()> {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    let path = out_dir.join("triton_kernels.rs");
    fs::write(&path, "pub static KERNELS: &[KernelImage] = &[];\n")
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(not(feature = "triton"))]
fn build() -> BuildResult<()> {
    write_empty_table()
}

#[cfg(feature = "triton")]
fn build() -> BuildResult<()> {
    #[cfg(feature = "rocm")]
    let amd_archs = selection::amd_archs()?;
    #[cfg(not(feature = "rocm"))]
    let amd_archs: Vec<String> = Vec::new();
    #[cfg(feature = "cuda-verify")]
    let cuda_targets = selection::cuda_targets()?;
    #[cfg(not(feature = "cuda-verify"))]
    let cuda_targets: Vec<String> = Vec::new();
    let targets = amd_archs.iter().cloned().chain(cuda_targets).collect();
    let triton_selection = selection::TritonSelection::from_env(targets)?;
    progress::step(&format!(
        "build started for {} ({})",
        triton_selection.targets.join(","),
        env::var("CARGO_PKG_VERSION").unwrap_or_default()
    ));
    // The CK selection and toolchain are checked before the Triton compile, so that a bad
    // variable or a missing ROCm fails in seconds.
    #[cfg(feature = "rocm")]
    let ck_plan = plan_ck(&amd_archs)?;
    triton::build(&triton_selection)?;
    #[cfg(feature = "rocm")]
    finish_rocm(&amd_archs, &triton_selection, ck_plan)?;
    progress::step("build finished");
    Ok(())
}

/// What the CK half of a `rocm` build compiles, and with what.
#[cfg(feature = "rocm")]
struct CkPlan {
    selection: selection::Selection,
    toolchain: toolchain::Toolchain,
}

/// `None` when no requested arch is a CK arch: then no ROCm is needed at build time.
#[cfg(feature = "rocm")]
fn plan_ck(archs: &[String]) -> BuildResult<Option<CkPlan>> {
    match selection::Selection::from_env(archs)? {
        Some(selection) => Ok(Some(CkPlan { toolchain: toolchain::Toolchain::find()?, selection })),
        None => Ok(None),
    }
}

/// Builds CK when planned, then sets `rocm::BUILD_INFO`.
#[cfg(feature = "rocm")]
fn finish_rocm(archs: &[String], triton: &selection::TritonSelection, ck: Option<CkPlan>) -> BuildResult<()> {
    let ck_info = match ck {
        Some(plan) => {
            build_ck(&plan)?;
            format!("CK for {} ({})", plan.selection.archs.join(","), plan.selection.describe())
        }
        None => {
            let ck_archs = selection::CK_ARCHS.join(",");
            println!(
                "cargo:warning=flash-attn-rocm: CK skipped: none of {} is a CK arch ({ck_archs}); Triton kernels only",
                archs.join(",")
            );
            format!("no CK (it serves {ck_archs})")
        }
    };
    let amd: Vec<&str> = triton.targets.iter().map(String::as_str).filter(|t| t.starts_with("gfx")).collect();
    println!(
        "cargo:rustc-env=FLASH_ATTN_ROCM_BUILD_INFO={}: Triton for {} ({}); {ck_info}",
        archs.join(","),
        amd.join(","),
        triton.describe()
    );
    Ok(())
}

#[cfg(feature = "rocm")]
fn build_ck(plan: &CkPlan) -> BuildResult<()> {
    let start = std::time::Instant::now();
    let (toolchain, selection) = (&plan.toolchain, &plan.selection);
    let ck = sources::CkSources::locate(toolchain)?;
    let bridge_headers = native::compile_bridge()?;
    let key = cache_key::CacheKey::new(&ck, toolchain, selection)?;
    let build_dir = key.directory("")?;
    let generated = codegen::generate(&ck, toolchain, selection, &build_dir)?;
    println!(
        "cargo:warning=flash-attn-rocm: {} CK instances for {} ({}; build cache {})",
        generated.instance_count(),
        selection.archs.join(","),
        selection.describe(),
        build_dir.display()
    );
    progress::step(&format!(
        "CK: compiling {} instances for {} with cmake + hipcc (about 30-40 s each per core); object \
         files appear under {} as they finish",
        generated.instance_count(),
        selection.archs.join(","),
        build_dir.display()
    ));
    native::compile_kernels(&ck, toolchain, selection, &generated, &bridge_headers, &build_dir)?;
    progress::step(&format!("CK: built in {:.0} s", start.elapsed().as_secs_f64()));
    native::link(toolchain, &build_dir);
    println!("cargo:rustc-cfg=flash_attn_rocm_ck");
    // What the run-time dispatch needs to know of the CK instances (src/rocm/dispatch.rs).
    println!("cargo:rustc-env=FLASH_ATTN_ROCM_CK_ARCHS={}", selection.archs.join(","));
    let hdims: Vec<String> = selection.hdims.iter().map(u32::to_string).collect();
    println!("cargo:rustc-env=FLASH_ATTN_ROCM_CK_HDIMS={}", hdims.join(","));
    println!("cargo:warning=flash-attn-rocm: CK build took {:.0} s", start.elapsed().as_secs_f64());
    Ok(())
}
