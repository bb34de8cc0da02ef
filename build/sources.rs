//! Where Composable Kernel comes from: FLASH_ATTN_ROCM_CK_DIR, or the pinned flash-attn sdist
//! (see third_party/README.md), downloaded once through pip's index into a cache outside the
//! source tree.
use crate::cache_key::{cache_root, hash_tree, offline, ENV_OFFLINE};
use crate::toolchain::{run_capture, Toolchain};
use crate::BuildResult;
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const SDIST_PACKAGE: &str = "flash-attn";
const SDIST_VERSION: &str = "2.8.3.post2";
const SDIST_FILE: &str = "flash_attn-2.8.3.post2.tar.gz";
const SDIST_SIZE: u64 = 8_453_127;
const SDIST_SHA256: &str = "d0f9f0b08a986cdeadbffcf5ec8b3a8f514366c68ad1853d3ab061bc83cc340b";
/// Composable Kernel inside the unpacked sdist.
const SDIST_CK_SUBDIR: &str = "csrc/composable_kernel";

pub const ENV_CK_DIR: &str = "FLASH_ATTN_ROCM_CK_DIR";

pub struct CkSources {
    /// The composable_kernel root: include/ck_tile and example/ck_tile/01_fmha.
    pub root: PathBuf,
    /// Identifies the sources in the build cache key: the sdist sha256, or a content hash of a
    /// user tree's include/ and 01_fmha/.
    pub identity: String,
}

impl CkSources {
    pub fn include_dir(&self) -> PathBuf {
        self.root.join("include")
    }

    pub fn fmha_dir(&self) -> PathBuf {
        self.root.join("example/ck_tile/01_fmha")
    }

    pub fn locate(toolchain: &Toolchain) -> BuildResult<Self> {
        for var in [ENV_CK_DIR, "PIP_INDEX_URL"] {
            println!("cargo:rerun-if-env-changed={var}");
        }
        let sources = match env::var_os(ENV_CK_DIR) {
            Some(dir) => from_user_tree(PathBuf::from(dir))?,
            None => from_sdist(toolchain)?,
        };
        let missing = [sources.include_dir().join("ck_tile/core.hpp"), sources.fmha_dir().join("fmha_fwd.hpp")]
            .into_iter()
            .find(|p| !p.is_file());
        match missing {
            Some(path) => Err(format!("not a composable_kernel tree: {} is missing", path.display())),
            None => Ok(sources),
        }
    }
}

fn from_user_tree(root: PathBuf) -> BuildResult<CkSources> {
    let root = root.canonicalize().map_err(|e| format!("{ENV_CK_DIR}={}: {e}", root.display()))?;
    let fmha = root.join("example/ck_tile/01_fmha");
    // A user tree may change between builds: rebuild when its content does.
    println!("cargo:rerun-if-changed={}", root.join("include").display());
    println!("cargo:rerun-if-changed={}", fmha.display());
    let identity = format!("tree:{:016x}", hash_tree(&[root.join("include"), fmha])?);
    Ok(CkSources { root, identity })
}

fn from_sdist(toolchain: &Toolchain) -> BuildResult<CkSources> {
    let dest = cache_root()?.join("sources").join(format!("flash_attn-{SDIST_VERSION}-{}", &SDIST_SHA256[..16]));
    let root = dest.join(format!("flash_attn-{SDIST_VERSION}")).join(SDIST_CK_SUBDIR);
    if !is_complete(&dest) {
        if offline() {
            return Err(format!(
                "{ENV_OFFLINE} is set and the CK sources are not cached at {}. Either unset it so \
                 the build downloads {SDIST_FILE} ({SDIST_SIZE} bytes, sha256 {SDIST_SHA256}) \
                 through pip's index, unpack that file there yourself, or set {ENV_CK_DIR} to a \
                 composable_kernel tree.",
                dest.display()
            ));
        }
        download(toolchain, &dest)?;
    }
    Ok(CkSources { root, identity: format!("sdist:{SDIST_SHA256}") })
}

fn is_complete(dest: &Path) -> bool {
    fs::read_to_string(dest.join(".complete")).is_ok_and(|s| s.trim() == SDIST_SHA256)
}

fn download(toolchain: &Toolchain, dest: &Path) -> BuildResult<()> {
    let script = crate::manifest_dir()?.join("build/fetch_sdist.py");
    run_capture(
        Command::new(&toolchain.python)
            .arg(&script)
            .args([SDIST_PACKAGE, SDIST_FILE, SDIST_SHA256, &SDIST_SIZE.to_string()])
            .arg(dest),
    )
    .map_err(|e| {
        format!(
            "downloading the CK sources ({SDIST_PACKAGE} {SDIST_VERSION} sdist) failed: {e}\n\
             Offline? Set {ENV_CK_DIR} to a composable_kernel tree instead."
        )
    })?;
    if is_complete(dest) {
        Ok(())
    } else {
        Err(format!("{} ran but {} is not complete", script.display(), dest.display()))
    }
}
