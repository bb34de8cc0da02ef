//! The same checks as tests/rocm_candle/check.rs, with "on the GPU" meaning each way this build
//! reaches the GPU: inside `run_on_gpu` on CPU tensors (the offload), and with `candle-cuda` on
//! copies of the tensors on Candle's CUDA device 0 (same layouts: strided stays strided), through
//! the ops' `cuda_fwd`. The case files shared with that suite run unchanged.

use candle::{Device, Tensor};
use flash_attn_rocm::gpu::Driver;
use flash_attn_rocm::triton::targets::{candidates, embedded, forced_target};
use flash_attn_rocm::glue::offload::run_on_gpu;
use flash_attn_rocm::triton::{embedded_targets, KERNELS};
use rand::rngs::StdRng;

use crate::common::expected::Expected;
use crate::common::{assert_close, assert_lse_close, rng, values};

pub use crate::common::outcome::{out_only, with_lse, Outcome, DTYPES, DTYPES_AND_DIMS};
/// GPU LSE vs CPU LSE, relative to `1 + |lse|` (see tests/rocm_candle/check.rs).
const LSE_TOL: f64 = 2e-4;
const CPU_LSE_TOL: f64 = 1e-4;

/// The driver of the build's GPU API (CUDA with `cuda-verify`, else HIP), without choosing a
/// device for the calling thread.
fn api_driver() -> std::result::Result<&'static Driver, String> {
    let driver = if cfg!(feature = "cuda-verify") { Driver::cuda() } else { Driver::hip() };
    driver.map_err(|e| format!("no GPU driver: {e}"))
}

/// The driver whose device 0 the tests use, made current on the calling thread, or why there is
/// none.
pub fn driver() -> std::result::Result<&'static Driver, String> {
    let driver = api_driver()?;
    match driver.device_count() {
        Ok(0) => Err(format!("the {:?} driver reports no GPU", driver.api())),
        Ok(_) => {
            driver.set_device(0).map_err(|e| e.to_string())?;
            Ok(driver)
        }
        Err(e) => Err(format!("cannot list devices: {e}")),
    }
}

/// `Device::Cpu` (the tensors stay on the host; the driver runs the kernels) and the test's
/// rng. Always `Some`: the runner (runner.rs) calls a test only where `driver()` found a GPU,
/// and reports the test ignored elsewhere; a test that got here without a GPU fails instead of
/// passing unrun. (An `Option` for the case files shared with tests/rocm_candle.)
pub fn gpu_and_rng(test: &str) -> Option<(Device, StdRng)> {
    let d = driver().unwrap_or_else(|why| panic!("{test}: no GPU, yet the runner ran the test: {why}"));
    let arch = d.arch_name(0).unwrap();
    let served_by = candidates(&arch, forced_target(), &embedded(KERNELS));
    let limits = d.device_limits(0).unwrap();
    eprintln!(
        "{test}: {:?} device 0 ({arch}, {limits:?}); kernels embedded for {:?}; targets that may serve it, best first, \
         where their code objects fit: {served_by:?}",
        d.api(),
        embedded_targets()
    );
    Some((Device::Cpu, rng(test)))
}

/// Candle's CUDA device 0, created once for the whole binary (a device owns a cuBLAS handle).
#[cfg(feature = "candle-cuda")]
pub fn candle_cuda() -> Device {
    static DEVICE: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    DEVICE.get_or_init(|| Device::new_cuda(0).expect("Candle's CUDA device 0")).clone()
}

/// `f` run on the GPU in each way this build has, named, with the results back on the CPU.
/// The calling thread's device is not chosen here: a thread that never chose one runs on device
/// 0 (tests/gpu_triton/threads.rs calls from such threads).
fn on_gpu(args: &[Tensor], f: &impl Fn(&[Tensor]) -> Outcome) -> Vec<(&'static str, Outcome)> {
    let driver = api_driver().expect("checked by gpu_and_rng");
    #[allow(unused_mut)]
    let mut runs = vec![("offload", run_on_gpu(driver, || f(args)))];
    #[cfg(feature = "candle-cuda")]
    {
        let dev = candle_cuda();
        let on_dev: Vec<Tensor> = args.iter().map(|t| t.to_device(&dev).unwrap()).collect();
        let outcome = f(&on_dev).map(|(out, lse)| {
            assert!(out.device().is_cuda(), "the output left the CUDA device");
            (out.to_device(&Device::Cpu).unwrap(), lse.map(|l| l.to_device(&Device::Cpu).unwrap()))
        });
        runs.push(("candle-cuda", outcome));
    }
    runs
}

/// Runs `f` on the CPU backend and on the GPU (each way of [`on_gpu`]), then checks every output
/// against `exp` and every GPU LSE against the CPU's.
pub fn check_gpu_vs_cpu(what: &str, _cpu: &Device, args: &[&Tensor], exp: &Expected, f: impl Fn(&[Tensor]) -> Outcome) {
    let dtype = args[0].dtype();
    let args: Vec<Tensor> = args.iter().map(|&t| t.clone()).collect();
    let (cpu_out, cpu_lse) = f(&args).unwrap_or_else(|e| panic!("{what}: cpu: {e}"));
    assert_close(&format!("{what} [cpu]"), &values(&cpu_out), &exp.exact, &exp.naive, dtype);
    let cpu_lse = cpu_lse.map(|lse| (lse.dims().to_vec(), values(&lse)));
    if let Some((_, cpu_lse)) = &cpu_lse {
        assert_lse_close(&format!("{what} [cpu lse]"), cpu_lse, &exp.exact_lse, CPU_LSE_TOL);
    }
    for (way, outcome) in on_gpu(&args, &f) {
        let (gpu_out, gpu_lse) = outcome.unwrap_or_else(|e| panic!("{what}: gpu ({way}): {e}"));
        assert_eq!(gpu_out.dims(), args[0].dims(), "{what}: output dims ({way})");
        assert_eq!(gpu_out.dtype(), dtype, "{what}: output dtype ({way})");
        let gpu_values = values(&gpu_out);
        report_error(&format!("{what} ({way})"), &gpu_values, exp);
        assert_close(&format!("{what} [gpu, {way}]"), &gpu_values, &exp.exact, &exp.naive, dtype);
        match (&cpu_lse, gpu_lse) {
            (None, None) => {}
            (Some((cpu_dims, cpu_lse)), Some(gpu_lse)) => {
                assert_eq!(gpu_lse.dims(), cpu_dims.as_slice(), "{what}: lse dims ({way})");
                assert_lse_close(&format!("{what} [gpu lse vs cpu, {way}]"), &values(&gpu_lse), cpu_lse, LSE_TOL);
            }
            _ => unreachable!("{what}: the same function returned an LSE on one side only ({way})"),
        }
    }
}

/// The Triton path writes the LSE for every layout: LSE variants are plain comparisons.
pub fn check_lse_variant(
    what: &str,
    cpu: &Device,
    args: &[&Tensor],
    exp: &Expected,
    _paged: bool,
    f: impl Fn(&[Tensor]) -> Outcome,
) {
    check_gpu_vs_cpu(what, cpu, args, exp, f);
}

/// Runs `f` on the GPU (each way of [`on_gpu`]) and checks that it fails with a message
/// containing `needle`.
pub fn check_refused(what: &str, args: &[&Tensor], needle: &str, f: impl Fn(&[Tensor]) -> Outcome) {
    let args: Vec<Tensor> = args.iter().map(|&t| t.clone()).collect();
    for (way, outcome) in on_gpu(&args, &f) {
        match outcome {
            Ok(_) => panic!("{what}: the Triton path accepted a call it cannot serve ({way})"),
            Err(e) => assert!(e.to_string().contains(needle), "{what}: error `{e}` does not mention `{needle}` ({way})"),
        }
    }
}

/// Prints the GPU output's worst error against the f64 reference beside the naive low-precision
/// error that bounds it, for the record of a GPU run (`grep '^gpu-error'`).
fn report_error(what: &str, gpu: &[f64], exp: &Expected) {
    let max_diff = |a: &[f64]| a.iter().zip(&exp.exact).map(|(x, r)| (x - r).abs()).fold(0.0, f64::max);
    let (err, naive) = (max_diff(gpu), max_diff(&exp.naive));
    eprintln!("gpu-error {err:.3e} naive {naive:.3e} ratio {:.3} {what}", err / naive.max(f64::MIN_POSITIVE));
}
