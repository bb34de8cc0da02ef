//! Which embedded targets' code objects run on a device, in the order to try them. AMD: the
//! device's own arch. NVIDIA: its own target, then cubins of the same major and a lower minor
//! (an sm_86 cubin runs on sm_87), then the PTX of older targets, which the driver compiles at
//! load time. A target's code object runs only where it fits the device's [`DeviceLimits`]:
//! [`super::select()`] goes down the list until one does. Tests and comparisons can force a
//! target with `FLASH_ATTN_ROCM_TRITON_TARGET`. Pure Rust.
use super::registry::KernelImage;
use crate::device::DeviceLimits;

/// Forces the code-object target (`sm_80`, `gfx1100`, ...) whatever the device is; the driver
/// must be able to load it (PTX on an NVIDIA GPU of at least its compute capability). Read once
/// per process.
pub const ENV_TARGET: &str = "FLASH_ATTN_ROCM_TRITON_TARGET";

impl DeviceLimits {
    /// Whether `image` can be launched on the device: its dynamic shared memory and threads
    /// per block within the device's limits.
    pub fn fits(&self, image: &KernelImage) -> bool {
        image.shared <= self.max_shared_per_block && image.threads <= self.max_threads_per_block
    }
}

/// One embedded target: its name and whether its images are PTX.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Embedded<'a> {
    /// `gfx1100`, `sm_86`, ...
    pub target: &'a str,
    /// The images are PTX text (NVIDIA), not a binary for exactly this target.
    pub ptx: bool,
}

/// The distinct targets of `images`, each with whether its images are PTX.
pub fn embedded(images: &[KernelImage]) -> Vec<Embedded<'static>> {
    let mut out: Vec<Embedded<'static>> = Vec::new();
    for image in images {
        if !out.iter().any(|e| e.target == image.target) {
            out.push(Embedded { target: image.target, ptx: image.is_ptx() });
        }
    }
    out
}

/// The compute capability of an NVIDIA target name: `sm_86` -> (8, 6), `sm_120` -> (12, 0).
fn capability(target: &str) -> Option<(u32, u32)> {
    let digits = target.strip_prefix("sm_")?;
    if digits.len() < 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (major, minor) = digits.split_at(digits.len() - 1);
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The embedded targets that can serve a device of arch `device` (`gfx1100`, `sm_89`), best
/// first: `forced` alone when given (and embedded); else the device's own, then on NVIDIA the
/// cubins of the same major and a lower minor, then the PTX the device can compile; cubins
/// before PTX (no compile at load time), each newest first. Triton's sm_90 code uses sm_90a
/// instructions, so sm_90 serves only 9.0. Whether their code objects fit the device is for the
/// caller to weigh ([`DeviceLimits::fits`]). Empty when nothing serves.
pub fn candidates<'a>(device: &str, forced: Option<&str>, embedded: &[Embedded<'a>]) -> Vec<&'a str> {
    if let Some(forced) = forced {
        return embedded.iter().filter(|e| e.target == forced).map(|e| e.target).collect();
    }
    let own = embedded.iter().filter(|e| e.target == device);
    let Some((major, minor)) = capability(device) else {
        return own.map(|e| e.target).collect();
    };
    let usable = |e: &&Embedded<'a>| {
        let Some((m, n)) = capability(e.target) else { return false };
        let portable = e.ptx && (m, n) != (9, 0) && (m, n) <= (major, minor);
        let compatible = m == major && n <= minor;
        e.target != device && (portable || compatible)
    };
    let mut others: Vec<&Embedded<'a>> = embedded.iter().filter(usable).collect();
    others.sort_by_key(|e| std::cmp::Reverse((!e.ptx, capability(e.target))));
    own.chain(others).map(|e| e.target).collect()
}

/// The NVIDIA targets the build compiles (`CUDA_TARGETS` of `build/selection.rs`).
const BUILDABLE_CUDA_TARGETS: [&str; 4] = ["sm_80", "sm_86", "sm_89", "sm_90"];

/// The build settings that give a device of arch `device` code objects made for its limits: its
/// own arch on AMD; on NVIDIA the target whose cubins serve it, or for a GPU newer than every
/// target the PTX of the newest it can compile. `None` for an NVIDIA GPU older than every target.
pub fn build_for(device: &str) -> Option<String> {
    if capability(device).is_none() {
        return Some(format!("FLASH_ATTN_ROCM_ARCHS={device}"));
    }
    let buildable = |ptx| BUILDABLE_CUDA_TARGETS.map(|target| Embedded { target, ptx });
    if let Some(cubin) = candidates(device, None, &buildable(false)).first() {
        return Some(format!("FLASH_ATTN_ROCM_CUDA_ARCHS={cubin}"));
    }
    let ptx = *candidates(device, None, &buildable(true)).first()?;
    Some(format!("FLASH_ATTN_ROCM_CUDA_ARCHS={ptx} FLASH_ATTN_ROCM_CUDA_PTX=1"))
}

/// `FLASH_ATTN_ROCM_TRITON_TARGET`, read once per process (empty counts as unset).
pub fn forced_target() -> Option<&'static str> {
    static VALUE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    VALUE
        .get_or_init(|| std::env::var(ENV_TARGET).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty()))
        .as_deref()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cubin(target: &'static str) -> Embedded<'static> {
        Embedded { target, ptx: false }
    }

    fn ptx(target: &'static str) -> Embedded<'static> {
        Embedded { target, ptx: true }
    }

    #[test]
    fn capabilities_of_target_names() {
        assert_eq!(capability("sm_80"), Some((8, 0)));
        assert_eq!(capability("sm_89"), Some((8, 9)));
        assert_eq!(capability("sm_120"), Some((12, 0)));
        for not_nvidia in ["gfx1100", "sm_", "sm_9", "sm_90a", "sm90"] {
            assert_eq!(capability(not_nvidia), None, "{not_nvidia}");
        }
    }

    #[test]
    fn a_device_runs_its_own_target_first() {
        let all = [cubin("sm_80"), cubin("sm_86"), cubin("sm_89"), cubin("sm_90")];
        for own in ["sm_80", "sm_86", "sm_89", "sm_90"] {
            assert_eq!(candidates(own, None, &all).first(), Some(&own));
        }
        // Its own PTX too, before an older cubin.
        assert_eq!(candidates("sm_86", None, &[cubin("sm_80"), ptx("sm_86")]), ["sm_86", "sm_80"]);
        assert_eq!(candidates("gfx1100", None, &[cubin("gfx942"), cubin("gfx1100")]), ["gfx1100"]);
    }

    #[test]
    fn cubins_serve_higher_minors_of_their_major_only() {
        let all = [cubin("sm_80"), cubin("sm_86"), cubin("sm_89"), cubin("sm_90")];
        // Orin (8.7) runs sm_86's cubins, then sm_80's; not sm_89's.
        assert_eq!(candidates("sm_87", None, &all), ["sm_86", "sm_80"]);
        assert_eq!(candidates("sm_89", None, &all), ["sm_89", "sm_86", "sm_80"]);
        assert_eq!(candidates("sm_86", None, &[cubin("sm_80"), cubin("sm_90")]), ["sm_80"]);
        // No cubin crosses a major: Blackwell gets nothing from cubins, an A100 nothing from sm_86.
        assert!(candidates("sm_120", None, &all).is_empty());
        assert!(candidates("sm_80", None, &[cubin("sm_86"), cubin("sm_90")]).is_empty());
        // AMD archs are matched exactly.
        assert!(candidates("gfx1101", None, &[cubin("gfx1100")]).is_empty());
    }

    #[test]
    fn ptx_serves_newer_gpus_except_sm_90a() {
        let both = [ptx("sm_80"), ptx("sm_89"), ptx("sm_90")];
        assert_eq!(candidates("sm_120", None, &both), ["sm_89", "sm_80"]);
        assert_eq!(candidates("sm_100", None, &both), ["sm_89", "sm_80"]);
        assert_eq!(candidates("sm_86", None, &both), ["sm_80"]);
        // An older GPU cannot compile newer PTX.
        assert!(candidates("sm_75", None, &both).is_empty());
        // sm_90's PTX targets sm_90a: only a 9.0 device takes it.
        assert!(candidates("sm_120", None, &[ptx("sm_90")]).is_empty());
        // A cubin that loads comes before PTX that must be compiled, even newer PTX.
        assert_eq!(candidates("sm_87", None, &[ptx("sm_86"), cubin("sm_80")]), ["sm_80", "sm_86"]);
    }

    #[test]
    fn a_forced_target_is_the_only_one_when_embedded() {
        let all = [ptx("sm_80"), ptx("sm_86"), cubin("sm_90")];
        assert_eq!(candidates("sm_90", Some("sm_80"), &all), ["sm_80"]);
        assert_eq!(candidates("sm_90", Some("sm_86"), &all), ["sm_86"]);
        assert!(candidates("sm_90", Some("sm_89"), &all).is_empty());
    }

    fn image(shared: u32, threads: u32) -> KernelImage {
        use super::super::registry::{Family, KernelDtype, Tile};
        KernelImage {
            target: "sm_86",
            variant: "test",
            kernel: "attn_fwd",
            family: Family::Fwd,
            tile: Tile::Prefill,
            dtype: KernelDtype::F16,
            block_d: 128,
            even_d: true,
            paged: false,
            extras: false,
            ptr32: false,
            block_m: 128,
            block_n: 64,
            threads,
            shared,
            scratch_args: 2,
            image: b"\x7fELF",
        }
    }

    #[test]
    fn an_image_fits_up_to_both_limits_inclusive() {
        let rtx = DeviceLimits { max_shared_per_block: 101_376, max_threads_per_block: 1024, host_native_atomics: false };
        assert!(rtx.fits(&image(101_376, 1024)));
        assert!(!rtx.fits(&image(101_377, 128)));
        assert!(!rtx.fits(&image(0, 1025)));
    }

    #[test]
    fn the_build_to_make_serves_the_device_with_its_own_tiles() {
        let build = |device| build_for(device).unwrap();
        assert_eq!(build("sm_86"), "FLASH_ATTN_ROCM_CUDA_ARCHS=sm_86");
        assert_eq!(build("sm_87"), "FLASH_ATTN_ROCM_CUDA_ARCHS=sm_86");
        assert_eq!(build("sm_89"), "FLASH_ATTN_ROCM_CUDA_ARCHS=sm_89");
        assert_eq!(build("sm_120"), "FLASH_ATTN_ROCM_CUDA_ARCHS=sm_89 FLASH_ATTN_ROCM_CUDA_PTX=1");
        assert_eq!(build("sm_100"), "FLASH_ATTN_ROCM_CUDA_ARCHS=sm_89 FLASH_ATTN_ROCM_CUDA_PTX=1");
        assert_eq!(build("gfx1100"), "FLASH_ATTN_ROCM_ARCHS=gfx1100");
        assert_eq!(build_for("sm_75"), None);
    }

    #[test]
    fn the_buildable_targets_are_the_build_scripts() {
        let build_script = include_str!("../../build/selection.rs");
        let declared = format!("const CUDA_TARGETS: [&str; {}] = {BUILDABLE_CUDA_TARGETS:?};", BUILDABLE_CUDA_TARGETS.len());
        assert!(build_script.contains(&declared), "build/selection.rs no longer declares {declared}");
    }
}
