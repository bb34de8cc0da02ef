//! Running one public function on the GPU and on the CPU, and comparing both with the reference.

use candle::{DType, Device, Tensor};
use fa::plan::dispatch::KernelChoice;
use flash_attn_rocm as fa;
use rand::rngs::StdRng;

use crate::common::expected::Expected;
use crate::common::{assert_close, assert_lse_close, rng, values};

pub use crate::common::outcome::{out_only, with_lse, Outcome, DTYPES, DTYPES_AND_DIMS};
/// GPU LSE vs CPU LSE, relative to `1 + |lse|`. Both accumulate in f32 from the same inputs and
/// agree to about 1e-5; one key wrongly masked in or out moves an LSE by about `1 / s_k`, several
/// times this tolerance at the lengths used here.
const LSE_TOL: f64 = 2e-4;
/// CPU LSE vs the f64 reference, as in the CPU parity tests.
const CPU_LSE_TOL: f64 = 1e-4;

/// Device 0 and the test's seeded rng, or `None` after printing why this machine cannot run `test`.
pub fn gpu_and_rng(test: &str) -> Option<(Device, StdRng)> {
    gpu(test).map(|dev| (dev, rng(test)))
}

/// Device 0, or `None` after printing why this machine cannot run `test`.
fn gpu(test: &str) -> Option<Device> {
    let count = match fa::rocm::device_count() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("{test}: skipped, HIP cannot list devices: {e}");
            return None;
        }
    };
    if count == 0 {
        eprintln!("{test}: skipped, HIP reports no AMD GPU on this machine");
        return None;
    }
    eprintln!("{test}: {count} GPU(s); kernels built for {}", fa::rocm::BUILD_INFO);
    // HIP sees a GPU: failing to open it is a failure, not a reason to skip.
    Some(Device::new_rocm(0).unwrap_or_else(|e| panic!("{test}: Device::new_rocm(0) failed: {e}")))
}

/// Whether the library has LSE-writing kernels for this layout. Our Triton kernels always write
/// it, and serve what CK cannot unless `FLASH_ATTN_ROCM_KERNELS=ck`; CK's split-KV kernels
/// behind paged K/V always write it, its batch and varlen kernels unless built with
/// `FLASH_ATTN_ROCM_LSE=0`.
fn lse_kernels_built(paged: bool) -> bool {
    let ck_only = KernelChoice::from_env().expect("FLASH_ATTN_ROCM_KERNELS") == KernelChoice::Ck;
    paged || fa::rocm::LSE_KERNELS || !ck_only
}

fn to_cpu(t: &Tensor) -> Tensor {
    t.to_device(&Device::Cpu).unwrap()
}

/// Runs `f` on the CPU tensors `args` and on copies of them on `dev` (same layouts: strided
/// stays strided), then checks both outputs against `exp` and the GPU LSE against the CPU's.
pub fn check_gpu_vs_cpu(what: &str, dev: &Device, args: &[&Tensor], exp: &Expected, f: impl Fn(&[Tensor]) -> Outcome) {
    let dtype = args[0].dtype();
    let cpu_args: Vec<Tensor> = args.iter().map(|&t| t.clone()).collect();
    let gpu_args: Vec<Tensor> = args.iter().map(|t| t.to_device(dev).unwrap()).collect();
    let (cpu_out, cpu_lse) = f(&cpu_args).unwrap_or_else(|e| panic!("{what}: cpu: {e}"));
    let (gpu_out, gpu_lse) = f(&gpu_args).unwrap_or_else(|e| panic!("{what}: rocm: {e}"));
    assert!(gpu_out.device().is_rocm(), "{what}: output left the GPU");
    assert_eq!(gpu_out.dims(), args[0].dims(), "{what}: output dims");
    assert_eq!(gpu_out.dtype(), dtype, "{what}: output dtype");
    assert_close(&format!("{what} [cpu]"), &values(&cpu_out), &exp.exact, &exp.naive, dtype);
    assert_close(&format!("{what} [rocm]"), &values(&to_cpu(&gpu_out)), &exp.exact, &exp.naive, dtype);
    match (cpu_lse, gpu_lse) {
        (None, None) => {}
        (Some(cpu_lse), Some(gpu_lse)) => {
            assert_eq!(gpu_lse.dims(), cpu_lse.dims(), "{what}: lse dims");
            assert_eq!(gpu_lse.dtype(), DType::F32, "{what}: lse dtype");
            let cpu_lse = values(&cpu_lse);
            assert_lse_close(&format!("{what} [cpu lse]"), &cpu_lse, &exp.exact_lse, CPU_LSE_TOL);
            let gpu_lse = values(&to_cpu(&gpu_lse));
            assert_lse_close(&format!("{what} [rocm lse vs cpu]"), &gpu_lse, &cpu_lse, LSE_TOL);
        }
        _ => unreachable!("{what}: the same function returned an LSE on one device only"),
    }
}

/// Runs `f` on copies of `args` on `dev` and checks that it fails with a message containing
/// `needle`.
pub fn check_refused(what: &str, dev: &Device, args: &[&Tensor], needle: &str, f: impl Fn(&[Tensor]) -> Outcome) {
    let gpu_args: Vec<Tensor> = args.iter().map(|t| t.to_device(dev).unwrap()).collect();
    match f(&gpu_args) {
        Ok(_) => panic!("{what}: the ROCm backend accepted a call CK cannot serve"),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains(needle), "{what}: error `{msg}` does not mention `{needle}`");
        }
    }
}

/// An LSE variant: compared with the CPU when the kernels exist, else it must fail naming them.
pub fn check_lse_variant(
    what: &str,
    dev: &Device,
    args: &[&Tensor],
    exp: &Expected,
    paged: bool,
    f: impl Fn(&[Tensor]) -> Outcome,
) {
    if lse_kernels_built(paged) {
        check_gpu_vs_cpu(what, dev, args, exp, f);
    } else {
        eprintln!("{what}: CK's LSE kernels not built (FLASH_ATTN_ROCM_LSE=1) and only CK asked for: checking the refusal");
        check_refused(what, dev, args, "lse on", f);
    }
}
