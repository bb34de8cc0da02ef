//! Which embedded target's code objects run on a device. AMD: the device's own arch. NVIDIA:
//! its own target, else a cubin of the same major and a lower minor (an sm_86 cubin runs on
//! sm_87), else the PTX of an older target, which the driver compiles at load time. Tests and
//! comparisons can force a target with `FLASH_ATTN_ROCM_TRITON_TARGET`. Pure Rust.
use super::registry::KernelImage;

/// Forces the code-object target (`sm_80`, `gfx1100`, ...) whatever the device is; the driver
/// must be able to load it (PTX on an NVIDIA GPU of at least its compute capability). Read once
/// per process.
pub const ENV_TARGET: &str = "FLASH_ATTN_ROCM_TRITON_TARGET";

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

/// The embedded target that serves a device of arch `device` (`gfx1100`, `sm_89`): `forced` when
/// given (and embedded), else the device's own, else on NVIDIA a cubin of the same major and the
/// highest minor below the device's, else the newest PTX the device can compile. Triton's sm_90
/// code uses sm_90a instructions, so sm_90 serves only 9.0. `None` when nothing does.
pub fn resolve<'a>(device: &str, forced: Option<&str>, embedded: &[Embedded<'a>]) -> Option<&'a str> {
    if let Some(forced) = forced {
        return embedded.iter().find(|e| e.target == forced).map(|e| e.target);
    }
    if let Some(own) = embedded.iter().find(|e| e.target == device) {
        return Some(own.target);
    }
    let (major, minor) = capability(device)?;
    let usable = |e: &&Embedded<'a>| {
        let Some((m, n)) = capability(e.target) else { return false };
        let portable = e.ptx && (m, n) != (9, 0) && (m, n) <= (major, minor);
        let compatible = m == major && n <= minor;
        portable || compatible
    };
    // Among the usable: a cubin before PTX (no compile at load time), then the newest.
    embedded.iter().filter(usable).max_by_key(|e| (!e.ptx, capability(e.target))).map(|e| e.target)
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
            assert_eq!(resolve(own, None, &all), Some(own));
        }
        assert_eq!(resolve("gfx1100", None, &[cubin("gfx942"), cubin("gfx1100")]), Some("gfx1100"));
    }

    #[test]
    fn cubins_serve_higher_minors_of_their_major_only() {
        let all = [cubin("sm_80"), cubin("sm_86"), cubin("sm_89"), cubin("sm_90")];
        // Orin (8.7) runs sm_86's cubins, not sm_89's.
        assert_eq!(resolve("sm_87", None, &all), Some("sm_86"));
        assert_eq!(resolve("sm_86", None, &[cubin("sm_80"), cubin("sm_90")]), Some("sm_80"));
        // No cubin crosses a major: Blackwell gets nothing from cubins, an A100 nothing from sm_86.
        assert_eq!(resolve("sm_120", None, &all), None);
        assert_eq!(resolve("sm_80", None, &[cubin("sm_86"), cubin("sm_90")]), None);
        // AMD archs are matched exactly.
        assert_eq!(resolve("gfx1101", None, &[cubin("gfx1100")]), None);
    }

    #[test]
    fn ptx_serves_newer_gpus_except_sm_90a() {
        let both = [ptx("sm_80"), ptx("sm_89"), ptx("sm_90")];
        assert_eq!(resolve("sm_120", None, &both), Some("sm_89"));
        assert_eq!(resolve("sm_100", None, &both), Some("sm_89"));
        assert_eq!(resolve("sm_86", None, &both), Some("sm_80"));
        // An older GPU cannot compile newer PTX.
        assert_eq!(resolve("sm_75", None, &both), None);
        // sm_90's PTX targets sm_90a: only a 9.0 device takes it.
        assert_eq!(resolve("sm_120", None, &[ptx("sm_90")]), None);
        // A cubin that loads beats PTX that must be compiled.
        assert_eq!(resolve("sm_87", None, &[cubin("sm_86"), ptx("sm_80")]), Some("sm_86"));
    }

    #[test]
    fn a_forced_target_wins_when_embedded() {
        let all = [ptx("sm_80"), ptx("sm_86"), cubin("sm_90")];
        assert_eq!(resolve("sm_90", Some("sm_80"), &all), Some("sm_80"));
        assert_eq!(resolve("sm_90", Some("sm_86"), &all), Some("sm_86"));
        assert_eq!(resolve("sm_90", Some("sm_89"), &all), None);
    }
}
