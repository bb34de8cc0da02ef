//! Finds ROCm, hipcc, cmake and python3, and picks the device-compiler flags for the clang
//! behind hipcc (AMD's fork or upstream LLVM, as shipped by Debian/Ubuntu/Fedora).
use crate::BuildResult;
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Toolchain {
    /// The directory holding libamdhip64.so.
    pub hip_lib_dir: PathBuf,
    pub hipcc: PathBuf,
    pub python: PathBuf,
    /// `hipcc --version`, verbatim: part of the build cache key.
    pub version_text: String,
    /// True for AMD's clang (ROCm releases), false for upstream LLVM (distro packages).
    pub amd_clang: bool,
    /// HIP version as (major, minor, patch), e.g. (6, 4, 43484).
    pub hip_version: (u32, u32, u32),
}

const ROCM_VARS: [&str; 2] = ["ROCM_PATH", "HIP_PATH"];
/// flash-attention 2.8.3's CK backend (the sources built here) supports ROCm 6.0 and above
/// (its README).
const MIN_HIP: (u32, u32) = (6, 0);
/// Where to get a HIP that builds CK, per platform; quoted by every toolchain error.
const INSTALL_HINTS: &str = "  - AMD's ROCm packages (ROCm >= 6.0; installed under /opt/rocm, found there without ROCM_PATH);
  - Debian sid (HIP 6.4): apt install hipcc libamdhip64-dev rocm-device-libs-21 cmake;
  - Debian 12 ships hipcc 5.2 (HIP 5.2), older than 6.0: use AMD's packages there; on Ubuntu,
    `apt policy hipcc` tells the HIP version offered (6.0 or newer is needed).
  Only CDNA archs (gfx90a, gfx942, gfx950) build CK: FLASH_ATTN_ROCM_ARCHS with RDNA archs only
  needs no ROCm at build time.";

impl Toolchain {
    pub fn find() -> BuildResult<Self> {
        for var in ROCM_VARS.iter().chain(&["FLASH_ATTN_ROCM_PYTHON", "CMAKE", "PATH"]) {
            println!("cargo:rerun-if-env-changed={var}");
        }
        let rocm_root = find_rocm_root()?;
        let hip_lib_dir = find_hip_lib_dir(&rocm_root)?;
        let hipcc = find_tool(&[rocm_root.join("bin/hipcc")], "hipcc", "hipcc (Debian/Ubuntu: apt install hipcc; or set ROCM_PATH)")?;
        // The cmake crate runs $CMAKE or `cmake` from PATH; checked here for a clear message.
        if env::var_os("CMAKE").is_none() {
            find_tool(&[], "cmake", "cmake (apt install cmake)")?;
        }
        let python = env::var_os("FLASH_ATTN_ROCM_PYTHON").map(PathBuf::from).map_or_else(
            || find_tool(&[], "python3", "python3 (or set FLASH_ATTN_ROCM_PYTHON)"),
            Ok,
        )?;
        let version_text = run_capture(Command::new(&hipcc).arg("--version"))?;
        let amd_clang = is_amd_clang(&version_text);
        let hip_version = parse_hip_version(&version_text).ok_or_else(|| {
            format!("cannot read the HIP version from `{} --version`:\n{version_text}", hipcc.display())
        })?;
        if (hip_version.0, hip_version.1) < MIN_HIP {
            return Err(format!(
                "{} is HIP {}.{}.{} (ROCm root {}); CK needs HIP {}.{} or newer. Install one of:\n{INSTALL_HINTS}",
                hipcc.display(),
                hip_version.0,
                hip_version.1,
                hip_version.2,
                rocm_root.display(),
                MIN_HIP.0,
                MIN_HIP.1
            ));
        }
        Ok(Toolchain { hip_lib_dir, hipcc, python, version_text, amd_clang, hip_version })
    }

    /// Device-compiler flags for every translation unit, after flash-attention's setup.py.
    pub fn device_flags(&self) -> Vec<String> {
        let mut flags: Vec<String> = [
            "-O3",
            "-std=c++17",
            // Every file: the softcap kernels static_assert on it, and the dispatcher and shim
            // must see the same kernel types as the instances.
            "-DCK_TILE_FMHA_FWD_FAST_EXP2=1",
            "-fgpu-flush-denormals-to-zero",
            "-DCK_ENABLE_BF16",
            "-DCK_ENABLE_FP16",
            "-DCK_USE_XDL",
            "-DCK_TILE_FLOAT_TO_BFLOAT16_DEFAULT=3",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let v = self.hip_version;
        let mut mllvm = |flag: &str| flags.extend(["-mllvm".to_string(), flag.to_string()]);
        if v > (5, 5, 0) {
            mllvm("--lsr-drop-solution=1");
        }
        if v > (6, 1, 40090) {
            mllvm("-enable-post-misched=0");
        }
        // flash-attention adds this pair for HIP > 6.2 with AMD's clang. On upstream LLVM 21
        // (Debian's HIP 6.4) the pair makes one instance spend > 22 CPU-minutes in LICM, while
        // neither takes ~20 s and still yields MFMA code with no calls: keep it AMD-only.
        if self.amd_clang && v > (6, 2, 41132) {
            mllvm("-amdgpu-early-inline-all=true");
            mllvm("-amdgpu-function-calls=false");
        }
        if self.amd_clang && v > (6, 2, 41133) && v < (6, 3, 0) {
            mllvm("-amdgpu-coerce-illegal-types=1");
        }
        if v > (5, 7, 23302) {
            flags.push("-fno-offload-uniform-block".into());
        }
        flags
    }
}

fn find_rocm_root() -> BuildResult<PathBuf> {
    let mut candidates: Vec<PathBuf> = ROCM_VARS.iter().filter_map(env::var_os).map(PathBuf::from).collect();
    if let Ok(out) = run_capture(Command::new("hipconfig").arg("--rocmpath")) {
        candidates.push(PathBuf::from(out.trim()));
    }
    candidates.extend(["/opt/rocm", "/usr"].map(PathBuf::from));
    candidates.iter().find(|root| root.join("include/hip/hip_runtime.h").is_file()).cloned().ok_or_else(|| {
        let tried: Vec<String> = candidates.iter().map(|c| format!("  {}", c.display())).collect();
        let vars: Vec<String> =
            ROCM_VARS.iter().map(|v| format!("{v}={}", env::var(v).unwrap_or_else(|_| "(unset)".into()))).collect();
        format!(
            "ROCm not found: no include/hip/hip_runtime.h under any of\n{}\n({}; `hipconfig --rocmpath` \
             is tried too). Set ROCM_PATH to your ROCm root, or install one of:\n{INSTALL_HINTS}",
            tried.join("\n"),
            vars.join(", ")
        )
    })
}

fn find_hip_lib_dir(root: &Path) -> BuildResult<PathBuf> {
    let multiarch = format!("lib/{}-linux-gnu", env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default());
    ["lib", "lib64", multiarch.as_str()]
        .iter()
        .map(|dir| root.join(dir))
        .find(|dir| dir.join("libamdhip64.so").exists())
        .ok_or_else(|| {
            format!(
                "libamdhip64.so not found under {}/lib, lib64 or {multiarch}: install the HIP \
                 runtime development files (Debian/Ubuntu: libamdhip64-dev)",
                root.display()
            )
        })
}

/// The first existing path among `preferred`, else `name` looked up on PATH.
fn find_tool(preferred: &[PathBuf], name: &str, what: &str) -> BuildResult<PathBuf> {
    if let Some(path) = preferred.iter().find(|p| p.is_file()) {
        return Ok(path.clone());
    }
    env::var_os("PATH")
        .iter()
        .flat_map(env::split_paths)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("`{name}` not found on PATH: install {what}"))
}

/// AMD's clang names itself "AMD clang" and its source "roc-x.y.z"; upstream builds do not.
fn is_amd_clang(version_text: &str) -> bool {
    version_text.contains("AMD clang") || version_text.contains("roc-")
}

/// "HIP version: 6.4.43484-9999" -> (6, 4, 43484).
fn parse_hip_version(version_text: &str) -> Option<(u32, u32, u32)> {
    let line = version_text.lines().find_map(|l| l.trim().strip_prefix("HIP version:"))?;
    let mut parts = line.trim().split(|c: char| !c.is_ascii_digit()).map(|p| p.parse::<u32>());
    Some((parts.next()?.ok()?, parts.next()?.ok()?, parts.next()?.ok()?))
}

/// Runs a command and returns its stdout; a failure names the command and its stderr.
pub fn run_capture(command: &mut Command) -> BuildResult<String> {
    let output = command.output().map_err(|e| format!("cannot run {command:?}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{command:?} failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
