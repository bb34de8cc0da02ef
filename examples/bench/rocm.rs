//! The ROCm rows of the bench (feature `candle-rocm`): the same shape on `Device::new_rocm(0)`,
//! printed in the same table right under the CPU row.
//!
//! Timing is device-side: HIP events (rocm-rs, re-exported by candle's ROCm backend) recorded on
//! the device's stream around `ITERS` back-to-back calls, so host-side launch cost overlaps
//! with the kernels; the median over `BATCHES` such batches, after one warm-up call. A call also
//! allocates its output from candle's caching allocator (no device malloc once warm).

use candle::rocm::rocm_rs::hip::Event;
use candle::{DType, Device, Result, Tensor};
use std::sync::OnceLock;

/// Calls between two events; one call of a small shape is shorter than its host-side launch.
const ITERS: usize = 10;
/// Event-timed batches per shape (the GPU is fast enough that `--runs` is not needed here).
const BATCHES: usize = 5;

/// ROCm device 0, opened once; `None` (said once) without an AMD GPU.
fn device() -> Option<&'static Device> {
    static DEVICE: OnceLock<Option<Device>> = OnceLock::new();
    DEVICE
        .get_or_init(|| match Device::new_rocm(0) {
            Ok(dev) => Some(dev),
            Err(e) => {
                // The first line: candle appends a backtrace when RUST_BACKTRACE is set.
                let e = e.to_string();
                println!(
                    "(rocm rows skipped: no ROCm device 0: {})",
                    e.lines().next().unwrap_or("")
                );
                None
            }
        })
        .as_ref()
}

/// Times flash_attn on the GPU for this shape and prints its row: median ms, speedup over the
/// CPU kernel's `cpu_secs`, GFLOP/s and TFLOP/s, and the max error against the f64 reference
/// on the sampled query `rows` (the CPU row's error column is measured on the same rows).
pub fn row(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    causal: bool,
    cpu_secs: f64,
    rows: &[usize],
) -> Result<()> {
    let Some(dev) = device() else { return Ok(()) };
    let name = format!("{:?} rocm", q.dtype()).to_lowercase();
    let s = q.dim(1)?;
    if !matches!(q.dtype(), DType::F16 | DType::BF16) {
        println!("| {name} | {causal} | {s} | - | - | - | - | CK takes f16/bf16 | - | - | - |");
        return Ok(());
    }
    let (gq, gk, gv) = (q.to_device(dev)?, k.to_device(dev)?, v.to_device(dev)?);
    let call = || flash_attn_rocm::flash_attn(&gq, &gk, &gv, scale as f32, causal);
    let secs = median_secs(dev, call)?;
    let out = call()?.to_device(&Device::Cpu)?;
    let err = crate::naive::sampled_errors(q, k, v, scale, causal, &[&out], rows)?[0];
    let (b, _, h, d) = q.dims4()?;
    let flops = 4.0 * (b * h * s * s * d) as f64 * if causal { 0.5 } else { 1.0 };
    let gflops = flops / secs / 1e9;
    println!(
        "| {name} | {causal} | {s} | {:.3} | - | {:.1}x cpu | {gflops:.1} ({:.1} TFLOP/s) | {err:.1e} | - | - | - |",
        secs * 1e3,
        cpu_secs / secs,
        gflops / 1e3
    );
    Ok(())
}

/// Median seconds per call of `f` on `dev`'s stream, over `BATCHES` event-timed batches.
fn median_secs(dev: &Device, f: impl Fn() -> Result<Tensor>) -> Result<f64> {
    let rocm = dev.as_rocm_device()?;
    let stream = rocm.stream();
    let hip = |e: candle::rocm::rocm_rs::hip::Error| candle::Error::Msg(format!("HIP event: {e}"));
    drop(f()?);
    rocm.synchronize()?;
    let (start, stop) = (Event::new().map_err(hip)?, Event::new().map_err(hip)?);
    let mut times = Vec::with_capacity(BATCHES);
    for _ in 0..BATCHES {
        start.record(stream).map_err(hip)?;
        for _ in 0..ITERS {
            drop(f()?);
        }
        stop.record(stream).map_err(hip)?;
        stop.synchronize().map_err(hip)?;
        let ms = start.elapsed_time(&stop).map_err(hip)?;
        times.push(f64::from(ms) / 1e3 / ITERS as f64);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}
