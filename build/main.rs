//! Build script entry. The default build compiles nothing native; the `rocm` feature fetches
//! Composable Kernel (CK), generates the selected fmha forward instances, and compiles them with
//! the C++ shim into a static library (see the modules of this folder, one job each).
use std::env;

#[cfg(feature = "rocm")]
mod cache_key;
#[cfg(feature = "rocm")]
mod codegen;
#[cfg(feature = "rocm")]
mod native;
#[cfg(feature = "rocm")]
mod selection;
#[cfg(feature = "rocm")]
mod sources;
#[cfg(feature = "rocm")]
mod toolchain;

/// Errors of the native build are messages for the person building: what is missing and what
/// to install or set.
pub type BuildResult<T> = Result<T, String>;

fn main() {
    println!("cargo:rerun-if-changed=build");
    println!("cargo:rerun-if-env-changed=DOCS_RS");
    // Set by build/native.rs when the forward kernels write the LSE (FLASH_ATTN_ROCM_LSE).
    println!("cargo:rustc-check-cfg=cfg(flash_attn_rocm_lse_kernels)");
    if env::var_os("CARGO_FEATURE_ROCM").is_none() {
        return;
    }
    // docs.rs has no ROCm: the Rust items still document, nothing native is built or linked;
    // `rocm::BUILD_INFO` says so.
    if env::var_os("DOCS_RS").is_some() {
        println!("cargo:rustc-env=FLASH_ATTN_ROCM_BUILD_INFO=docs build: no native library");
    } else {
        build_native();
    }
}

#[cfg(feature = "rocm")]
fn build_native() {
    if let Err(message) = build_rocm() {
        eprintln!("\nflash-attn-rocm: the ROCm build failed:\n{message}\n");
        std::process::exit(1);
    }
}

/// Unreachable without the feature (checked above); keeps `main` free of cfg branches.
#[cfg(not(feature = "rocm"))]
fn build_native() {}

#[cfg(feature = "rocm")]
fn build_rocm() -> BuildResult<()> {
    let start = std::time::Instant::now();
    let toolchain = toolchain::Toolchain::find()?;
    let selection = selection::Selection::from_env(&toolchain)?;
    let ck = sources::CkSources::locate(&toolchain)?;
    let bridge_headers = native::compile_bridge()?;
    let key = cache_key::CacheKey::new(&ck, &toolchain, &selection)?;
    let build_dir = key.directory()?;
    let generated = codegen::generate(&ck, &toolchain, &selection, &build_dir)?;
    println!(
        "cargo:warning=flash-attn-rocm: {} CK instances for {} ({}; build cache {})",
        generated.instance_count(),
        selection.archs.join(","),
        selection.describe(),
        build_dir.display()
    );
    native::compile_kernels(&ck, &toolchain, &selection, &generated, &bridge_headers, &build_dir)?;
    native::link(&toolchain, &build_dir);
    println!(
        "cargo:warning=flash-attn-rocm: native build took {:.0} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
