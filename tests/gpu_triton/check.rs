//! The same checks as tests/rocm_candle/check.rs, with "on the GPU" meaning "inside
//! `run_on_gpu`" on CPU tensors: the case files shared with that suite run unchanged.

use candle::{Device, Tensor};
use flash_attn_rocm::gpu::Driver;
use flash_attn_rocm::triton::{embedded_targets, offload::run_on_gpu};
use rand::rngs::StdRng;

use crate::common::expected::Expected;
use crate::common::{assert_close, assert_lse_close, rng, values};

pub use crate::common::outcome::{out_only, with_lse, Outcome, DTYPES, DTYPES_AND_DIMS};
/// GPU LSE vs CPU LSE, relative to `1 + |lse|` (see tests/rocm_candle/check.rs).
const LSE_TOL: f64 = 2e-4;
const CPU_LSE_TOL: f64 = 1e-4;

/// The driver whose device 0 the tests use, or why there is none.
pub fn driver() -> std::result::Result<&'static Driver, String> {
    let driver = if cfg!(feature = "cuda-verify") { Driver::cuda() } else { Driver::hip() };
    let driver = driver.map_err(|e| format!("no GPU driver: {e}"))?;
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
    eprintln!("{test}: {:?} device 0 ({arch}); kernels embedded for {:?}", d.api(), embedded_targets());
    Some((Device::Cpu, rng(test)))
}

/// Runs `f` on the CPU backend and offloaded to the GPU, then checks both outputs against `exp`
/// and the GPU LSE against the CPU's.
pub fn check_gpu_vs_cpu(what: &str, _cpu: &Device, args: &[&Tensor], exp: &Expected, f: impl Fn(&[Tensor]) -> Outcome) {
    let dtype = args[0].dtype();
    let args: Vec<Tensor> = args.iter().map(|&t| t.clone()).collect();
    let (cpu_out, cpu_lse) = f(&args).unwrap_or_else(|e| panic!("{what}: cpu: {e}"));
    let driver = driver().expect("checked by gpu_and_rng");
    let (gpu_out, gpu_lse) = run_on_gpu(driver, || f(&args)).unwrap_or_else(|e| panic!("{what}: gpu: {e}"));
    assert_eq!(gpu_out.dims(), args[0].dims(), "{what}: output dims");
    assert_eq!(gpu_out.dtype(), dtype, "{what}: output dtype");
    assert_close(&format!("{what} [cpu]"), &values(&cpu_out), &exp.exact, &exp.naive, dtype);
    let gpu_values = values(&gpu_out);
    report_error(what, &gpu_values, exp);
    assert_close(&format!("{what} [gpu]"), &gpu_values, &exp.exact, &exp.naive, dtype);
    match (cpu_lse, gpu_lse) {
        (None, None) => {}
        (Some(cpu_lse), Some(gpu_lse)) => {
            assert_eq!(gpu_lse.dims(), cpu_lse.dims(), "{what}: lse dims");
            let cpu_lse = values(&cpu_lse);
            assert_lse_close(&format!("{what} [cpu lse]"), &cpu_lse, &exp.exact_lse, CPU_LSE_TOL);
            assert_lse_close(&format!("{what} [gpu lse vs cpu]"), &values(&gpu_lse), &cpu_lse, LSE_TOL);
        }
        _ => unreachable!("{what}: the same function returned an LSE on one side only"),
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

/// Offloads `f` and checks that it fails with a message containing `needle`.
pub fn check_refused(what: &str, args: &[&Tensor], needle: &str, f: impl Fn(&[Tensor]) -> Outcome) {
    let args: Vec<Tensor> = args.iter().map(|&t| t.clone()).collect();
    let driver = driver().expect("checked by gpu_and_rng");
    match run_on_gpu(driver, || f(&args)) {
        Ok(_) => panic!("{what}: the Triton path accepted a call it cannot serve"),
        Err(e) => assert!(e.to_string().contains(needle), "{what}: error `{e}` does not mention `{needle}`"),
    }
}

/// Prints the GPU output's worst error against the f64 reference beside the naive low-precision
/// error that bounds it, for the record of a GPU run (`grep '^gpu-error'`).
fn report_error(what: &str, gpu: &[f64], exp: &Expected) {
    let max_diff = |a: &[f64]| a.iter().zip(&exp.exact).map(|(x, r)| (x - r).abs()).fold(0.0, f64::max);
    let (err, naive) = (max_diff(gpu), max_diff(&exp.naive));
    eprintln!("gpu-error {err:.3e} naive {naive:.3e} ratio {:.3} {what}", err / naive.max(f64::MIN_POSITIVE));
}
