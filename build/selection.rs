//! Which kernels to build, from the environment: the GPU archs (Triton kernels for all of them,
//! CK for those CK serves), and per kernel set its head dims, dtypes, options and name filter.
use crate::BuildResult;
use std::env;
#[cfg(feature = "rocm")]
use std::path::PathBuf;
#[cfg(feature = "rocm")]
use std::process::Command;

/// AMD archs the Triton kernels are built for (each checked to compile with triton 3.6's AMD
/// backend): CDNA (wave64, MFMA), RDNA 2 (wave32, no matrix cores: tl.dot lowers to v_dot2 /
/// v_fma) and RDNA 3 / 3.5 / 4 (wave32, WMMA). Each arch gets code objects of its own: the HSA
/// loader runs a code object only on the arch its ELF header names, even where LLVM emits the
/// same instructions (gfx1030-gfx1036), and triton 3.6 does not take the `gfx10-3-generic`
/// target. (A gfx1031/gfx1032 run with HSA_OVERRIDE_GFX_VERSION=10.3.0 reports gfx1030 and
/// uses gfx1030's.)
#[cfg(feature = "rocm")]
const TRITON_ARCHS: [&str; 19] = [
    "gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036",
    "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1200", "gfx1201",
];
/// CK's fmha forward pipelines here use MFMA; this CK version miscompiles gfx11/gfx12 (WMMA).
#[cfg(feature = "rocm")]
pub const CK_ARCHS: [&str; 3] = ["gfx90a", "gfx942", "gfx950"];
#[cfg(feature = "rocm")]
const FALLBACK_ARCH: &str = "gfx942";
/// Head dims CK's receipt-2 forward tiles cover (hdim_q == hdim_v).
#[cfg(feature = "rocm")]
const SUPPORTED_HDIMS: [u32; 7] = [32, 64, 96, 128, 160, 192, 256];
#[cfg(feature = "rocm")]
const DEFAULT_HDIMS: &str = "64,128";
/// Head-dim tiles of the Triton kernels (aot.py's BLOCK_DIMS): powers of two up to 512 (the
/// largest head dim candle-flash-attn serves), and the split tiles (a power of two and a tail:
/// 48 = 32 + 16, 80, 96, 160, 192) that compute head dims between them at their own width
/// (aot.py builds 48 for RDNA only). The default leaves out 192 (few models, 25% of padding on
/// 256).
const TRITON_DIMS: [u32; 10] = [32, 48, 64, 80, 96, 128, 160, 192, 256, 512];
const DEFAULT_TRITON_DIMS: &str = "32,48,64,80,96,128,160,256,512";
const SUPPORTED_DTYPES: [&str; 2] = ["fp16", "bf16"];
const DEFAULT_DTYPES: &str = "fp16,bf16";

#[cfg(feature = "rocm")]
pub const ENV_ARCHS: &str = "FLASH_ATTN_ROCM_ARCHS";
#[cfg(feature = "rocm")]
pub const ENV_HDIMS: &str = "FLASH_ATTN_ROCM_HDIMS";
pub const ENV_DTYPES: &str = "FLASH_ATTN_ROCM_DTYPES";
#[cfg(feature = "rocm")]
pub const ENV_LSE: &str = "FLASH_ATTN_ROCM_LSE";
#[cfg(feature = "rocm")]
pub const ENV_PAGED: &str = "FLASH_ATTN_ROCM_PAGED";
#[cfg(feature = "rocm")]
pub const ENV_FILTER: &str = "FLASH_ATTN_ROCM_FILTER";
pub const ENV_TRITON_DIMS: &str = "FLASH_ATTN_ROCM_TRITON_DIMS";
#[cfg(feature = "cuda-verify")]
pub const ENV_CUDA_ARCHS: &str = "FLASH_ATTN_ROCM_CUDA_ARCHS";
#[cfg(feature = "cuda-verify")]
pub const ENV_CUDA_PTX: &str = "FLASH_ATTN_ROCM_CUDA_PTX";

/// NVIDIA targets of the Triton kernels (`cuda-verify`): A100 (sm_80); RTX 30, A10, A40 (sm_86,
/// whose cubins also run on sm_87); RTX 40, L4, L40 (sm_89); H100/H200 (sm_90).
#[cfg(feature = "cuda-verify")]
const CUDA_TARGETS: [&str; 4] = ["sm_80", "sm_86", "sm_89", "sm_90"];
pub const ENV_TRITON_FILTER: &str = "FLASH_ATTN_ROCM_TRITON_FILTER";

/// The CK kernel set.
#[cfg(feature = "rocm")]
pub struct Selection {
    /// The requested archs CK serves (never empty: CK is skipped otherwise).
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

#[cfg(feature = "rocm")]
impl Selection {
    /// The CK selection for the CK archs among `archs`, or `None` when there are none.
    pub fn from_env(archs: &[String]) -> BuildResult<Option<Self>> {
        for var in [ENV_HDIMS, ENV_LSE, ENV_PAGED, ENV_FILTER] {
            println!("cargo:rerun-if-env-changed={var}");
        }
        let archs: Vec<String> = archs.iter().filter(|a| CK_ARCHS.contains(&a.as_str())).cloned().collect();
        let hdims = list_var(ENV_HDIMS, DEFAULT_HDIMS)
            .iter()
            .map(|h| parse_dim(h, ENV_HDIMS, &SUPPORTED_HDIMS, "a CK forward tile"))
            .collect::<BuildResult<Vec<_>>>()?;
        let selection = Selection {
            archs,
            hdims,
            dtypes: dtypes()?,
            lse: flag_var(ENV_LSE, true)?,
            paged: flag_var(ENV_PAGED, true)?,
            filter: env::var(ENV_FILTER).unwrap_or_default(),
        };
        Ok(Some(selection).filter(|s| !s.archs.is_empty()))
    }

    /// One line for the build log and the cache key.
    pub fn describe(&self) -> String {
        format!(
            "hdims {}, dtypes {}, lse {}, paged {}, filter '{}'",
            join(&self.hdims),
            self.dtypes.join(","),
            self.lse,
            self.paged,
            self.filter
        )
    }
}

/// The Triton kernel set: every variant of kernels/aot.py for these targets, tiles and dtypes
/// whose name matches the filter (the merge kernels always).
pub struct TritonSelection {
    /// AMD archs, then the NVIDIA targets with `cuda-verify`.
    pub targets: Vec<String>,
    pub block_dims: Vec<u32>,
    pub dtypes: Vec<String>,
    /// Comma-separated globs on variant names (aot.py --filter); empty keeps all.
    pub filter: String,
    /// Embed the NVIDIA kernels as PTX instead of cubins (aot.py writes both).
    pub cuda_ptx: bool,
}

impl TritonSelection {
    pub fn from_env(targets: Vec<String>) -> BuildResult<Self> {
        for var in [ENV_TRITON_DIMS, ENV_TRITON_FILTER] {
            println!("cargo:rerun-if-env-changed={var}");
        }
        let block_dims = list_var(ENV_TRITON_DIMS, DEFAULT_TRITON_DIMS)
            .iter()
            .map(|d| parse_dim(d, ENV_TRITON_DIMS, &TRITON_DIMS, "a Triton head-dim tile"))
            .collect::<BuildResult<Vec<_>>>()?;
        let filter = env::var(ENV_TRITON_FILTER).unwrap_or_default().trim().to_string();
        #[cfg(feature = "cuda-verify")]
        let cuda_ptx = cuda_ptx()?;
        #[cfg(not(feature = "cuda-verify"))]
        let cuda_ptx = false;
        Ok(TritonSelection { targets, block_dims, dtypes: dtypes()?, filter, cuda_ptx })
    }

    /// One line for the build log, `BUILD_INFO` and the cache key.
    pub fn describe(&self) -> String {
        format!("tiles {}, dtypes {}, filter '{}'", join(&self.block_dims), self.dtypes.join(","), self.filter)
    }
}

/// FLASH_ATTN_ROCM_DTYPES, shared by both kernel sets.
fn dtypes() -> BuildResult<Vec<String>> {
    println!("cargo:rerun-if-env-changed={ENV_DTYPES}");
    let dtypes = list_var(ENV_DTYPES, DEFAULT_DTYPES);
    match dtypes.iter().find(|d| !SUPPORTED_DTYPES.contains(&d.as_str())) {
        Some(bad) => Err(format!("{ENV_DTYPES}: `{bad}` is not one of {SUPPORTED_DTYPES:?}")),
        None => Ok(dtypes),
    }
}

fn join(values: &[u32]) -> String {
    values.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

fn list_var(var: &str, default: &str) -> Vec<String> {
    let value = env::var(var).ok().filter(|v| !v.trim().is_empty()).unwrap_or_else(|| default.to_string());
    value.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
}

#[cfg(any(feature = "rocm", feature = "cuda-verify"))]
fn flag_var(var: &str, default: bool) -> BuildResult<bool> {
    match env::var(var).as_deref() {
        Err(_) | Ok("") => Ok(default),
        Ok("1") | Ok("true") | Ok("on") => Ok(true),
        Ok("0") | Ok("false") | Ok("off") => Ok(false),
        Ok(other) => Err(format!("{var}: expected 0 or 1, got `{other}`")),
    }
}

fn parse_dim(text: &str, var: &str, supported: &[u32], what: &str) -> BuildResult<u32> {
    match text.parse::<u32>() {
        Ok(d) if supported.contains(&d) => Ok(d),
        _ => Err(format!(
            "{var}: `{text}` is not {what}; choose among {supported:?} \
             (a head dim d runs on the smallest built tile >= d)"
        )),
    }
}

/// FLASH_ATTN_ROCM_CUDA_ARCHS, else the targets that serve the NVIDIA GPUs of this machine
/// (`nvidia-smi`), else every NVIDIA target.
#[cfg(feature = "cuda-verify")]
pub fn cuda_targets() -> BuildResult<Vec<String>> {
    println!("cargo:rerun-if-env-changed={ENV_CUDA_ARCHS}");
    if let Ok(list) = env::var(ENV_CUDA_ARCHS) {
        if !list.trim().is_empty() {
            return parse_cuda_targets(&list);
        }
    }
    let capabilities = local_compute_capabilities();
    let mut targets: Vec<String> = Vec::new();
    for capability in &capabilities {
        match cuda_target_for(capability) {
            Some(t) if !targets.iter().any(|x| x == t) => targets.push(t.to_string()),
            Some(_) => {}
            None => println!(
                "cargo:warning=flash-attn-rocm: no cubin target serves compute capability {capability} \
                 ({CUDA_TARGETS:?}); set {ENV_CUDA_ARCHS}=sm_89 {ENV_CUDA_PTX}=1 to embed PTX that the driver \
                 compiles for it"
            ),
        }
    }
    if targets.is_empty() {
        println!(
            "cargo:warning=flash-attn-rocm: no NVIDIA GPU detected, building for {} (set {ENV_CUDA_ARCHS} to choose)",
            CUDA_TARGETS.join(",")
        );
        targets = CUDA_TARGETS.iter().map(|t| t.to_string()).collect();
    }
    Ok(targets)
}

/// The comma-separated NVIDIA targets of `list`, each one of [`CUDA_TARGETS`], without repeats.
#[cfg(feature = "cuda-verify")]
fn parse_cuda_targets(list: &str) -> BuildResult<Vec<String>> {
    let mut targets: Vec<String> = Vec::new();
    for target in list.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        if !CUDA_TARGETS.contains(&target) {
            return Err(format!("{ENV_CUDA_ARCHS}: `{target}` is not one of {CUDA_TARGETS:?}"));
        }
        if !targets.iter().any(|t| t == target) {
            targets.push(target.to_string());
        }
    }
    Ok(targets)
}

/// The target whose cubins run on compute capability `major.minor` (`8.7` -> `sm_86`): the same
/// major and the highest minor up to the device's.
#[cfg(feature = "cuda-verify")]
fn cuda_target_for(capability: &str) -> Option<&'static str> {
    let (major, minor) = capability.trim().split_once('.')?;
    let (major, minor): (u32, u32) = (major.parse().ok()?, minor.parse().ok()?);
    CUDA_TARGETS
        .iter()
        .filter(|t| {
            let (m, n) = t["sm_".len()..].split_at(1);
            m.parse() == Ok(major) && n.parse::<u32>().is_ok_and(|n| n <= minor)
        })
        .max()
        .copied()
}

/// The compute capabilities `nvidia-smi` reports (`9.0`), none when it is absent.
#[cfg(feature = "cuda-verify")]
fn local_compute_capabilities() -> Vec<String> {
    println!("cargo:rerun-if-env-changed=PATH");
    let Ok(out) = std::process::Command::new("nvidia-smi").args(["--query-gpu=compute_cap", "--format=csv,noheader"]).output()
    else {
        return Vec::new();
    };
    if !out.status.success() {
        return Vec::new();
    }
    String::from_utf8_lossy(&out.stdout).lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect()
}

/// `FLASH_ATTN_ROCM_CUDA_PTX=1`: embed the NVIDIA kernels as PTX, which the driver compiles for
/// the GPU at first use (newer GPUs than the targets; one target's code on another GPU).
#[cfg(feature = "cuda-verify")]
pub fn cuda_ptx() -> BuildResult<bool> {
    println!("cargo:rerun-if-env-changed={ENV_CUDA_PTX}");
    flag_var(ENV_CUDA_PTX, false)
}

/// FLASH_ATTN_ROCM_ARCHS, else the GPUs of this machine, else gfx942.
#[cfg(feature = "rocm")]
pub fn amd_archs() -> BuildResult<Vec<String>> {
    for var in [ENV_ARCHS, "ROCM_PATH", "HIP_PATH", "PATH"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    match env::var(ENV_ARCHS) {
        Ok(list) if !list.trim().is_empty() => parse_archs(&list),
        _ => local_archs(),
    }
}

#[cfg(feature = "rocm")]
fn parse_archs(list: &str) -> BuildResult<Vec<String>> {
    let mut archs: Vec<String> = Vec::new();
    for arch in list.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        if !TRITON_ARCHS.contains(&arch) {
            return Err(unsupported_arch_message(arch));
        }
        if !archs.iter().any(|a| a == arch) {
            archs.push(arch.to_string());
        }
    }
    Ok(archs)
}

#[cfg(feature = "rocm")]
fn unsupported_arch_message(arch: &str) -> String {
    format!(
        "GPU arch `{arch}` is not supported: the Triton kernels build for {TRITON_ARCHS:?}, and \
         CK's fmha kernels (MFMA only) additionally for the Instinct archs among them, \
         {CK_ARCHS:?}. Set {ENV_ARCHS} to a subset of those."
    )
}

/// The GPUs of this machine (amdgpu-arch, else rocminfo) that we build for, else gfx942 when
/// none is visible.
#[cfg(feature = "rocm")]
fn local_archs() -> BuildResult<Vec<String>> {
    let found = detect_gpu_archs();
    if found.is_empty() {
        println!("cargo:warning=flash-attn-rocm: no AMD GPU detected, building for {FALLBACK_ARCH} (set {ENV_ARCHS} to choose)");
        return Ok(vec![FALLBACK_ARCH.to_string()]);
    }
    let supported: Vec<String> = found.iter().filter(|a| TRITON_ARCHS.contains(&a.as_str())).cloned().collect();
    if supported.is_empty() {
        return Err(unsupported_arch_message(&found[0]));
    }
    Ok(supported)
}

/// Looks for the tools under $ROCM_PATH, $HIP_PATH and /opt/rocm, then on PATH; no ROCm
/// install is required (an RDNA-only build needs none).
#[cfg(feature = "rocm")]
fn detect_gpu_archs() -> Vec<String> {
    let mut roots: Vec<PathBuf> = ["ROCM_PATH", "HIP_PATH"].iter().filter_map(env::var_os).map(PathBuf::from).collect();
    roots.push(PathBuf::from("/opt/rocm"));
    let mut tools: Vec<PathBuf> = Vec::new();
    for name in ["amdgpu-arch", "rocminfo"] {
        tools.extend(roots.iter().map(|root| root.join("bin").join(name)));
        tools.push(PathBuf::from(name));
    }
    for tool in tools {
        let Ok(out) = Command::new(&tool).output() else { continue };
        let text = String::from_utf8_lossy(&out.stdout);
        let mut archs: Vec<String> = text
            .split_whitespace()
            .filter(|w| w.starts_with("gfx") && w.len() > 3)
            .map(|w| w.split(':').next().unwrap_or(w).to_string())
            .collect();
        archs.sort();
        archs.dedup();
        if out.status.success() && !archs.is_empty() {
            return archs;
        }
    }
    Vec::new()
}
