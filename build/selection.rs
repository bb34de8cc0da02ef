//! Which kernels to build, from the environment: GPU archs, head dims, dtypes, optional LSE and
//! paged-KV kernels, and an optional name filter.
use crate::toolchain::{run_capture, Toolchain};
use crate::BuildResult;
use std::env;
use std::process::Command;

/// CK's fmha forward pipelines here use MFMA; this CK version miscompiles gfx11/gfx12 (WMMA).
const SUPPORTED_ARCHS: [&str; 3] = ["gfx90a", "gfx942", "gfx950"];
const FALLBACK_ARCH: &str = "gfx942";
/// Head dims CK's receipt-2 forward tiles cover (hdim_q == hdim_v).
const SUPPORTED_HDIMS: [u32; 7] = [32, 64, 96, 128, 160, 192, 256];
const DEFAULT_HDIMS: &str = "64,128";
const SUPPORTED_DTYPES: [&str; 2] = ["fp16", "bf16"];
const DEFAULT_DTYPES: &str = "fp16,bf16";

pub const ENV_ARCHS: &str = "FLASH_ATTN_ROCM_ARCHS";
pub const ENV_HDIMS: &str = "FLASH_ATTN_ROCM_HDIMS";
pub const ENV_DTYPES: &str = "FLASH_ATTN_ROCM_DTYPES";
pub const ENV_LSE: &str = "FLASH_ATTN_ROCM_LSE";
pub const ENV_PAGED: &str = "FLASH_ATTN_ROCM_PAGED";
pub const ENV_FILTER: &str = "FLASH_ATTN_ROCM_FILTER";

pub struct Selection {
    pub archs: Vec<String>,
    pub hdims: Vec<u32>,
    pub dtypes: Vec<String>,
    /// Build the forward kernels that write the log-sum-exp instead of those that do not: every
    /// non-paged call then passes an LSE buffer (scratch when the caller wants none), so the
    /// `*_with_lse` functions work without doubling the instance count.
    pub lse: bool,
    /// Build the split-KV kernels behind the paged K/V (block table) path.
    pub paged: bool,
    /// Comma-separated fnmatch patterns on CK kernel names; empty keeps all.
    pub filter: String,
}

impl Selection {
    pub fn from_env(toolchain: &Toolchain) -> BuildResult<Self> {
        for var in [ENV_ARCHS, ENV_HDIMS, ENV_DTYPES, ENV_LSE, ENV_PAGED, ENV_FILTER] {
            println!("cargo:rerun-if-env-changed={var}");
        }
        let archs = match env::var(ENV_ARCHS) {
            Ok(list) if !list.trim().is_empty() => parse_archs(&list)?,
            _ => local_archs(toolchain)?,
        };
        let hdims = list_var(ENV_HDIMS, DEFAULT_HDIMS)
            .iter()
            .map(|h| parse_hdim(h))
            .collect::<BuildResult<Vec<_>>>()?;
        let dtypes = list_var(ENV_DTYPES, DEFAULT_DTYPES);
        if let Some(bad) = dtypes.iter().find(|d| !SUPPORTED_DTYPES.contains(&d.as_str())) {
            return Err(format!("{ENV_DTYPES}: `{bad}` is not one of {SUPPORTED_DTYPES:?}"));
        }
        Ok(Selection {
            archs,
            hdims,
            dtypes,
            lse: flag_var(ENV_LSE, true)?,
            paged: flag_var(ENV_PAGED, true)?,
            filter: env::var(ENV_FILTER).unwrap_or_default(),
        })
    }

    /// One line for the build log and the cache key.
    pub fn describe(&self) -> String {
        let hdims: Vec<String> = self.hdims.iter().map(u32::to_string).collect();
        format!(
            "hdims {}, dtypes {}, lse {}, paged {}, filter '{}'",
            hdims.join(","),
            self.dtypes.join(","),
            self.lse,
            self.paged,
            self.filter
        )
    }
}

fn list_var(var: &str, default: &str) -> Vec<String> {
    let value = env::var(var).ok().filter(|v| !v.trim().is_empty()).unwrap_or_else(|| default.to_string());
    value.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
}

fn flag_var(var: &str, default: bool) -> BuildResult<bool> {
    match env::var(var).as_deref() {
        Err(_) | Ok("") => Ok(default),
        Ok("1") | Ok("true") | Ok("on") => Ok(true),
        Ok("0") | Ok("false") | Ok("off") => Ok(false),
        Ok(other) => Err(format!("{var}: expected 0 or 1, got `{other}`")),
    }
}

fn parse_hdim(text: &str) -> BuildResult<u32> {
    match text.parse::<u32>() {
        Ok(h) if SUPPORTED_HDIMS.contains(&h) => Ok(h),
        _ => Err(format!(
            "{ENV_HDIMS}: `{text}` is not a CK forward tile; choose among {SUPPORTED_HDIMS:?} \
             (a head dim d runs on the smallest built tile >= d, d a multiple of 8)"
        )),
    }
}

fn parse_archs(list: &str) -> BuildResult<Vec<String>> {
    let archs: Vec<String> = list.split(',').map(|a| a.trim().to_string()).filter(|a| !a.is_empty()).collect();
    if let Some(bad) = archs.iter().find(|a| !SUPPORTED_ARCHS.contains(&a.as_str())) {
        return Err(unsupported_arch_message(bad));
    }
    Ok(archs)
}

fn unsupported_arch_message(arch: &str) -> String {
    format!(
        "GPU arch `{arch}` is not supported: CK's fmha forward kernels in this CK version use \
         MFMA instructions and build only for {SUPPORTED_ARCHS:?} (Instinct MI200/MI300/MI350); \
         gfx11/gfx12 (RDNA) would compile to wrong code. Set {ENV_ARCHS} to a subset of those."
    )
}

/// The GPUs of this machine (amdgpu-arch, else rocminfo), else gfx942 when none is visible.
fn local_archs(toolchain: &Toolchain) -> BuildResult<Vec<String>> {
    let found = detect_gpu_archs(toolchain);
    if found.is_empty() {
        println!("cargo:warning=flash-attn-rocm: no AMD GPU detected, building for {FALLBACK_ARCH} (set {ENV_ARCHS} to choose)");
        return Ok(vec![FALLBACK_ARCH.to_string()]);
    }
    let supported: Vec<String> = found.iter().filter(|a| SUPPORTED_ARCHS.contains(&a.as_str())).cloned().collect();
    if supported.is_empty() {
        return Err(unsupported_arch_message(&found[0]));
    }
    Ok(supported)
}

fn detect_gpu_archs(toolchain: &Toolchain) -> Vec<String> {
    let bin = toolchain.rocm_root.join("bin");
    let tools = [bin.join("amdgpu-arch"), "amdgpu-arch".into(), bin.join("rocminfo"), "rocminfo".into()];
    for tool in tools {
        if let Ok(out) = run_capture(&mut Command::new(&tool)) {
            let mut archs: Vec<String> = out
                .split_whitespace()
                .filter(|w| w.starts_with("gfx") && w.len() > 3)
                .map(|w| w.split(':').next().unwrap_or(w).to_string())
                .collect();
            archs.sort();
            archs.dedup();
            if !archs.is_empty() {
                return archs;
            }
        }
    }
    Vec::new()
}
