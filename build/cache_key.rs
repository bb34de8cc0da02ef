//! The build cache: a directory named by a hash of what every kernel depends on (CK sources,
//! toolchain, flags, archs, kernel selection), so switching between configurations keeps each
//! one's compiled kernels. Inside a directory, generated sources, csrc/ and the cxx bridge
//! header are staged only when their bytes change, so CMake recompiles just what changed: an
//! unchanged rebuild takes seconds and a shim edit does not recompile the instances.
use crate::selection::Selection;
use crate::sources::{cache_root, CkSources};
use crate::toolchain::Toolchain;
use crate::BuildResult;
use std::env;
use std::fs;
use std::path::{Path, PathBuf};

pub const ENV_BUILD_DIR: &str = "FLASH_ATTN_ROCM_BUILD_DIR";
/// Files of this crate the native build reads, relative to the manifest directory (the build/
/// folder itself is watched by main.rs).
const CRATE_INPUTS: [&str; 2] = ["csrc", "src/rocm/ffi.rs"];

pub struct CacheKey(u64);

impl CacheKey {
    pub fn new(ck: &CkSources, toolchain: &Toolchain, selection: &Selection) -> BuildResult<Self> {
        let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").map_err(|e| e.to_string())?);
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

    /// `$FLASH_ATTN_ROCM_BUILD_DIR/<key>`, by default under the cache root, outside `target/`
    /// so that `cargo clean` does not throw away kernels that take minutes each to compile.
    pub fn directory(&self) -> BuildResult<PathBuf> {
        println!("cargo:rerun-if-env-changed={ENV_BUILD_DIR}");
        let parent = match env::var_os(ENV_BUILD_DIR) {
            Some(dir) => PathBuf::from(dir),
            None => cache_root()?.join("build"),
        };
        let dir = parent.join(format!("{:016x}", self.0));
        fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        Ok(dir)
    }
}

/// A content hash of files and directory trees (relative paths and bytes, in sorted order).
pub fn hash_tree(roots: &[PathBuf]) -> BuildResult<u64> {
    let mut hasher = Fnv64::new();
    for root in roots {
        hash_path(root, root, &mut hasher)?;
    }
    Ok(hasher.finish())
}

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
