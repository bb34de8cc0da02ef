//! Runs with `--features rocm` on a machine with an AMD GPU; without one each test says why it
//! skips, and passes. Built (and linked) in CI inside the ROCm chroot, which proves the CK
//! library, the shim and the HIP runtime link into a Rust binary.
#![cfg(feature = "rocm")]

use flash_attn_rocm::rocm::{self, CkDtype, CkFwdParams};

fn gpu_available(test: &str) -> bool {
    match rocm::device_count() {
        Ok(n) if n > 0 => true,
        Ok(_) => {
            eprintln!("{test}: skipped, no AMD GPU visible to HIP");
            false
        }
        Err(e) => {
            eprintln!("{test}: skipped, HIP runtime unavailable: {e}");
            false
        }
    }
}

/// The head dims of this build's CK kernels, or `None` when CK was not built (RDNA-only
/// builds). `rocm::CK_HDIMS`, not `BUILD_INFO`: the latter also lists the Triton tiles (by
/// default 32,64,128,256), which say nothing about CK's.
fn ck_hdims() -> Option<Vec<u32>> {
    if rocm::CK_HDIMS.is_empty() {
        return None;
    }
    let parse = |d: &str| {
        d.parse()
            .unwrap_or_else(|_| panic!("CK_HDIMS `{}`", rocm::CK_HDIMS))
    };
    Some(rocm::CK_HDIMS.split(',').map(parse).collect())
}

/// A call no built CK kernel serves (head dim 256 is outside CK's default tiles and the CI set)
/// is refused before any memory is touched, with a message naming the rebuild variables.
#[test]
fn unbuilt_head_dim_is_a_clear_error() {
    let test = "unbuilt_head_dim_is_a_clear_error";
    let Some(hdims) = ck_hdims() else {
        eprintln!(
            "{test}: skipped, this build has no CK kernels ({})",
            rocm::BUILD_INFO
        );
        return;
    };
    if hdims.contains(&256) {
        eprintln!(
            "{test}: skipped, CK kernels for head dim 256 are built ({})",
            rocm::BUILD_INFO
        );
        return;
    }
    if !gpu_available(test) {
        return;
    }
    let params = CkFwdParams {
        dtype: CkDtype::Bf16,
        batch: 1,
        seqlen_q: 16,
        seqlen_k: 16,
        max_seqlen_q: 16,
        hdim_q: 256,
        hdim_v: 256,
        nhead_q: 1,
        nhead_k: 1,
        scale_s: 0.0625,
        // Non-null, as the parameter check requires before the dispatcher is asked; never
        // dereferenced (below).
        q_ptr: 0x1000,
        k_ptr: 0x2000,
        v_ptr: 0x3000,
        o_ptr: 0x4000,
        ..CkFwdParams::default()
    };
    // SAFETY: no kernel exists for hdim 256 in this build, so the dispatcher returns before
    // launching anything and the placeholder addresses are never dereferenced.
    let err = unsafe { rocm::fmha_fwd(&params) }.unwrap_err().to_string();
    assert!(err.contains("FLASH_ATTN_ROCM_HDIMS"), "{err}");
    assert!(err.contains("hdim_q 256"), "{err}");
}

#[test]
fn build_info_names_the_built_archs() {
    assert!(rocm::BUILD_INFO.starts_with("gfx"), "{}", rocm::BUILD_INFO);
    // build/main.rs writes `...; CK for <archs> (hdims ...)` or `...; no CK (...)`.
    let ck_in_info = rocm::BUILD_INFO.contains("; CK for ");
    assert_eq!(
        ck_in_info,
        ck_hdims().is_some(),
        "{} vs CK_HDIMS `{}`",
        rocm::BUILD_INFO,
        rocm::CK_HDIMS
    );
}

/// A build without CK (RDNA archs only) still has the low-level API; it refuses with the reason
/// and the variable to rebuild with. Needs no GPU.
#[test]
fn no_ck_build_says_so() {
    if ck_hdims().is_some() {
        eprintln!(
            "no_ck_build_says_so: skipped, this build has CK kernels ({})",
            rocm::BUILD_INFO
        );
        return;
    }
    // SAFETY: without CK, fmha_fwd returns an error before it reads anything.
    let err = unsafe { rocm::fmha_fwd(&CkFwdParams::default()) }
        .unwrap_err()
        .to_string();
    assert!(err.contains("Composable Kernel was not built"), "{err}");
    assert!(err.contains("FLASH_ATTN_ROCM_ARCHS"), "{err}");
}

/// Without a device, a launch reports the HIP error (hipErrorNoDevice), never a missing
/// instance: the dispatcher's own device query fails, and the shim reports the status of CK's
/// last HIP call (`hipExtGetLastError`) before concluding that no instance matched. Runs only
/// with the HIP runtime and no GPU (CI's chroot).
#[test]
fn without_a_device_the_hip_error_is_reported_not_a_missing_instance() {
    let test = "without_a_device_the_hip_error_is_reported_not_a_missing_instance";
    let Some(hdims) = ck_hdims() else {
        eprintln!("{test}: skipped, this build has no CK kernels ({})", rocm::BUILD_INFO);
        return;
    };
    match rocm::device_count() {
        Ok(0) => {}
        other => {
            eprintln!("{test}: skipped, needs the HIP runtime without a GPU (device count: {other:?})");
            return;
        }
    }
    let d = hdims[0] as i32;
    let params = CkFwdParams {
        dtype: CkDtype::Fp16,
        batch: 1,
        seqlen_q: 16,
        seqlen_k: 16,
        max_seqlen_q: 16,
        hdim_q: d,
        hdim_v: d,
        nhead_q: 1,
        nhead_k: 1,
        scale_s: 0.125,
        // Never dereferenced: without a device nothing is launched.
        q_ptr: 0x1000,
        k_ptr: 0x1000,
        v_ptr: 0x1000,
        o_ptr: 0x1000,
        ..CkFwdParams::default()
    };
    for attempt in 0..2 {
        // SAFETY: with no GPU the shim fails before any launch; the fake addresses are never read.
        let err = unsafe { rocm::fmha_fwd(&params) }.unwrap_err().to_string();
        assert!(err.contains("HIP error") && err.contains("hipErrorNoDevice"), "attempt {attempt}: {err}");
        assert!(!err.contains("no Composable Kernel instance"), "attempt {attempt}: {err}");
    }
}
