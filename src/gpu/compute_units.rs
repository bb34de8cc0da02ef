//! Compute units of an AMD device from what HIP reports.
//!
//! On gfx10 and later (RDNA) HIP runs in work-group processor (WGP) mode unless
//! `GPU_ENABLE_WGP_MODE` turns it off, and a WGP is two compute units. ROCm's clr then halves
//! both CU counts it reports: `hipDeviceAttributeMultiprocessorCount` (the CUs open to
//! cooperative launches) and `hipDeviceAttributePhysicalMultiProcessorCount` (all CUs): see
//! `rocclr/device/rocm/rocdevice.cpp` (`settings().enableWgpMode_ ? ... / 2`, clr of 2022-2025)
//! and `rocsettings.cpp` (WGP mode for `gfxipMajor >= 10`). An RX 7900 XTX (96 CUs) reports 48
//! for both; rocminfo, which reads the kernel driver, says 96.

/// The variable with which clr turns WGP mode off (`rocclr/utils/flags.hpp`; on by default).
const WGP_MODE_VARIABLE: &str = "GPU_ENABLE_WGP_MODE";
/// Compute units per work-group processor.
const CUS_PER_WGP: i32 = 2;

/// Compute units of a device of target `arch` (`gfx1100`, `gfx942`, ...), from HIP's
/// `multiprocessors` (`hipDeviceAttributeMultiprocessorCount`) and `physical`
/// (`hipDeviceAttributePhysicalMultiProcessorCount`, `None` when the query failed), with clr's
/// WGP mode `wgp_mode` ([`wgp_mode_from_environment`]).
///
/// The physical count wins when positive: it counts every CU, whereas the multiprocessor count
/// leaves out CUs reserved away from cooperative launches (`HSA_COOP_CU_COUNT=1` on gfx90a: 96
/// of 110), which ordinary launches like ours still use. The price: a `ROC_GLOBAL_CU_MASK` that
/// restricts the CUs lowers only the multiprocessor count, so it is not seen here. Either count
/// is doubled back from WGPs to CUs where clr halved it. A non-positive count is returned as
/// is, for the caller to refuse.
pub(super) fn compute_units(
    arch: &str,
    multiprocessors: i32,
    physical: Option<i32>,
    wgp_mode: bool,
) -> i32 {
    let reported = physical
        .filter(|&count| count > 0)
        .unwrap_or(multiprocessors);
    if reported > 0 && wgp_mode && runs_in_wgp_mode(arch) {
        reported.saturating_mul(CUS_PER_WGP)
    } else {
        reported
    }
}

/// Whether clr runs `arch` in WGP mode when the mode is on: gfx10 and later, its own test
/// (`gfxipMajor >= 10`). CDNA (gfx9) has no WGPs.
fn runs_in_wgp_mode(arch: &str) -> bool {
    gfxip_major(arch).is_some_and(|major| major >= 10)
}

/// The major version of a gfx target, whose last two characters are the minor version and the
/// stepping (one hex digit each): `gfx1201` -> 12, `gfx90a` -> 9.
fn gfxip_major(arch: &str) -> Option<u32> {
    let version = arch.strip_prefix("gfx")?;
    let major = version.get(..version.len().checked_sub(2)?)?;
    major.parse().ok()
}

/// Whether clr's WGP mode is on in this process, read from its variable as clr reads it.
pub(super) fn wgp_mode_from_environment() -> bool {
    let setting = std::env::var_os(WGP_MODE_VARIABLE);
    wgp_mode(
        setting
            .as_ref()
            .map(|value| value.to_string_lossy())
            .as_deref(),
    )
}

/// Whether WGP mode is on for a `GPU_ENABLE_WGP_MODE` of `setting`, as clr parses its bool flags
/// (`rocclr/utils/flags.cpp`, `Flag::setValue`): unset is on (the default); a value is on when
/// it is `true` or when C's `atoi` of it is not 0 (`1`, `-1`, `7x`), off otherwise (`0`,
/// `false`, `yes`, the empty string).
fn wgp_mode(setting: Option<&str>) -> bool {
    match setting {
        None => true,
        Some(value) => value == "true" || atoi_is_nonzero(value),
    }
}

/// Whether C's `atoi(text)` is not 0: it skips leading white space, takes one optional sign,
/// then the decimal digits up to the first other character.
fn atoi_is_nonzero(text: &str) -> bool {
    // C's isspace also counts the vertical tab, which Rust's ASCII white space does not.
    let unsigned = text.trim_start_matches(|c: char| c.is_ascii_whitespace() || c == '\x0b');
    let digits = unsigned.strip_prefix(['+', '-']).unwrap_or(unsigned);
    digits
        .chars()
        .take_while(char::is_ascii_digit)
        .any(|digit| digit != '0')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each card's target, HIP's count in WGP mode (both attributes) and its CUs.
    const RDNA_CARDS: [(&str, i32, i32); 5] = [
        ("gfx1100", 48, 96), // RX 7900 XTX: 48 WGPs
        ("gfx1201", 32, 64), // RX 9070 XT: 32 WGPs
        ("gfx1030", 30, 60), // RX 6800: 30 WGPs
        ("gfx1031", 20, 40), // RX 6700 XT: 20 WGPs
        ("gfx1032", 16, 32), // RX 6600 XT: 16 WGPs
    ];

    #[test]
    fn rdna_reports_wgps_in_wgp_mode_and_gets_its_cus() {
        for (arch, wgps, cus) in RDNA_CARDS {
            assert_eq!(compute_units(arch, wgps, Some(wgps), true), cus, "{arch}");
            // Physical count unavailable: the multiprocessor count, doubled all the same.
            assert_eq!(compute_units(arch, wgps, None, true), cus, "{arch}");
            assert_eq!(compute_units(arch, wgps, Some(0), true), cus, "{arch}");
        }
    }

    #[test]
    fn rdna_in_cu_mode_reports_cus_already() {
        for (arch, _, cus) in RDNA_CARDS {
            assert_eq!(compute_units(arch, cus, Some(cus), false), cus, "{arch}");
        }
    }

    #[test]
    fn cdna_reports_cus_whatever_the_wgp_setting() {
        for wgp_mode in [true, false] {
            // MI300X: 304 CUs.
            assert_eq!(compute_units("gfx942", 304, Some(304), wgp_mode), 304);
            // One MI250X die (GCD): 110 CUs.
            assert_eq!(compute_units("gfx90a", 110, Some(110), wgp_mode), 110);
            assert_eq!(compute_units("gfx950", 256, None, wgp_mode), 256);
        }
    }

    #[test]
    fn the_physical_count_wins_over_a_cooperative_reservation() {
        // gfx90a with HSA_COOP_CU_COUNT=1: floor(110 / 8) * 8 - 8 = 96 for cooperative launches.
        assert_eq!(compute_units("gfx90a", 96, Some(110), true), 110);
    }

    #[test]
    fn non_positive_counts_are_left_for_the_caller_to_refuse() {
        assert_eq!(compute_units("gfx1100", -1, None, true), -1);
        assert_eq!(compute_units("gfx1100", 0, Some(0), true), 0);
        assert_eq!(compute_units("gfx942", -1, Some(-5), true), -1);
    }

    #[test]
    fn gfxip_majors() {
        assert_eq!(gfxip_major("gfx1100"), Some(11));
        assert_eq!(gfxip_major("gfx1201"), Some(12));
        assert_eq!(gfxip_major("gfx1030"), Some(10));
        assert_eq!(gfxip_major("gfx90a"), Some(9));
        assert_eq!(gfxip_major("gfx942"), Some(9));
        for malformed in ["", "gfx", "gfx9", "sm_90", "gfxzz00"] {
            assert_eq!(gfxip_major(malformed), None, "{malformed}");
        }
    }

    #[test]
    fn wgp_mode_reads_the_variable_as_clr_does() {
        assert!(wgp_mode(None));
        for on in ["1", "true", "-1", " 2", "+1", "7x", "01"] {
            assert!(wgp_mode(Some(on)), "{on:?}");
        }
        for off in ["0", "false", "yes", "TRUE", "", " ", "0x1", "+-1", "00"] {
            assert!(!wgp_mode(Some(off)), "{off:?}");
        }
    }
}
