//! The build caches: the cache root (downloads, the Triton venv, compiled kernels) and
//! directories named by a hash of what their kernels depend on, so switching between
//! configurations keeps each one's compiled kernels.
//!
//! CK: the key covers the CK sources, toolchain, flags, archs and kernel selection. Inside a
//! directory, generated sources, csrc/ and the cxx bridge header are staged only when their
//! bytes change, so CMake recompiles just what changed: an unchanged rebuild takes seconds and a
//! shim edit does not recompile the instances. Triton: the key covers everything aot.py's output
//! depends on (see build/triton.rs).
#[cfg(feature = "rocm")]
use crate::selection::Selection;
#[cfg(feature = "rocm")]
use crate::sources::CkSources;
#[cfg(feature = "rocm")]
use crate::toolchain::Toolchain;
use crate::BuildResult;
use std::env;
use std::fs;
#[cfg(feature = "rocm")]
use std::path::Path;
use std::path::PathBuf;

pub const ENV_BUILD_DIR: &str = "FLASH_ATTN_ROCM_BUILD_DIR";
pub const ENV_CACHE: &str = "FLASH_ATTN_ROCM_CACHE";
pub const ENV_OFFLINE: &str = "FLASH_ATTN_ROCM_OFFLINE";
/// Files of this crate the native build reads, relative to the manifest directory (the build/
/// folder itself is watched by main.rs).
#[cfg(feature = "rocm")]
const CRATE_INPUTS: [&str; 2] = ["csrc", "src/rocm/ffi.rs"];

/// The cache root: FLASH_ATTN_ROCM_CACHE, else $XDG_CACHE_HOME or ~/.cache, /flash-attn-rocm.
pub fn cache_root() -> BuildResult<PathBuf> {
    for var in [ENV_CACHE, "XDG_CACHE_HOME", "HOME"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    if let Some(dir) = env::var_os(ENV_CACHE) {
        return Ok(PathBuf::from(dir));
    }
    let base = env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .ok_or_else(|| format!("no cache directory: set {ENV_CACHE} (or HOME)"))?;
    Ok(base.join("flash-attn-rocm"))
}

/// FLASH_ATTN_ROCM_OFFLINE set to anything but 0: no downloads (CK sources, the Triton wheel).
pub fn offline() -> bool {
    println!("cargo:rerun-if-env-changed={ENV_OFFLINE}");
    env::var_os(ENV_OFFLINE).is_some_and(|v| v != "0")
}

pub struct CacheKey(u64);

impl CacheKey {
    /// A key over `parts`, each hashed as one field.
    pub fn of<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> Self {
        let mut hasher = Fnv64::new();
        for part in parts {
            hasher.write(part);
        }
        CacheKey(hasher.finish())
    }

    /// The CK build's key.
    #[cfg(feature = "rocm")]
    pub fn new(ck: &CkSources, toolchain: &Toolchain, selection: &Selection) -> BuildResult<Self> {
        let manifest_dir = crate::manifest_dir()?;
        for input in CRATE_INPUTS {
            println!("cargo:rerun-if-changed={}", manifest_dir.join(input).display());
        }
        let mut hasher = Fnv64::new();
        hasher.write(ck.identity.as_bytes());
        hasher.write(toolchain.version_text.as_bytes());
        hasher.write(toolchain.device_flags().join(" ").as_bytes());
        hasher.write(selection.archs.join(",").as_bytes());
        hasher.write(selection.describe().as_bytes());
        Ok(CacheKey(hasher.finish()))
    }

    /// `$FLASH_ATTN_ROCM_BUILD_DIR/<prefix><key>`, by default under the cache root, outside
    /// `target/` so that `cargo clean` does not throw away kernels that take minutes to compile.
    /// CK uses no prefix, Triton `triton-`.
    pub fn directory(&self, prefix: &str) -> BuildResult<PathBuf> {
        println!("cargo:rerun-if-env-changed={ENV_BUILD_DIR}");
        let parent = match env::var_os(ENV_BUILD_DIR) {
            Some(dir) => PathBuf::from(dir),
            None => cache_root()?.join("build"),
        };
        let dir = parent.join(format!("{prefix}{:016x}", self.0));
        fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        Ok(dir)
    }
}

/// A content hash of files and directory trees (relative paths and bytes, in sorted order).
#[cfg(feature = "rocm")]
pub fn hash_tree(roots: &[PathBuf]) -> BuildResult<u64> {
    let mut hasher = Fnv64::new();
    for root in roots {
        hash_path(root, root, &mut hasher)?;
    }
    Ok(hasher.finish())
}

#[cfg(feature = "rocm")]
fn hash_path(root: &Path, path: &Path, hasher: &mut Fnv64) -> BuildResult<()> {
    let read_err = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
    hasher.write(path.strip_prefix(root).unwrap_or(path).to_string_lossy().as_bytes());
    if path.is_dir() {
        let mut entries: Vec<PathBuf> =
            fs::read_dir(path).map_err(read_err)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
        entries.sort();
        for entry in entries {
            hash_path(root, &entry, hasher)?;
        }
    } else {
        hasher.write(&fs::read(path).map_err(read_err)?);
    }
    Ok(())
}

/// FNV-1a, 64 bit: stable across Rust versions, unlike std's DefaultHasher.
struct Fnv64(u64);

impl Fnv64 {
    fn new() -> Self {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        // Separates fields so that ("ab", "c") and ("a", "bc") differ.
        self.0 = (self.0 ^ 0xff).wrapping_mul(0x0100_0000_01b3);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
