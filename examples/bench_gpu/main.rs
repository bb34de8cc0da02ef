//! Times the Triton path on the current GPU (device 0 of HIP, or of the CUDA driver in a
//! `cuda-verify` build): one shape per run, the median of 7 timed repetitions, each a burst of
//! launches closed by one synchronize. Prints one line `key=value ...` for
//! scripts/bench_gpu.py, which interleaves it with PyTorch's SDPA.
//!
//!   bench_gpu prefill DTYPE B S H D CAUSAL     (f16|bf16, causal 0|1; s_q = s_k = S)
//!   bench_gpu decode DTYPE B S_K H H_K D       (one query row per sequence)
//!   bench_gpu decode DTYPE B S_K H H_K D SPLITS   (the same with a forced split count, to tune
//!                                              the heuristic of src/triton/split.rs)
//!
//! Inputs are left as allocated: timing does not depend on the values.
use candle::{DType, Layout, Shape};
use flash_attn_rocm::gpu::Driver;
use flash_attn_rocm::params::{AttnCall, Request};
use flash_attn_rocm::rocm::DeviceBuffers;
use flash_attn_rocm::triton::{launch, plan};
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = |i: usize| -> anyhow::Result<usize> { Ok(args.get(i).ok_or_else(|| anyhow::anyhow!("missing argument {i}"))?.parse()?) };
    let dtype = match args.get(1).map(String::as_str) {
        Some("f16") => DType::F16,
        Some("bf16") => DType::BF16,
        other => anyhow::bail!("dtype f16 or bf16, got {other:?}"),
    };
    let (b, s_q, s_k, h, h_k, d, causal) = match args.first().map(String::as_str) {
        Some("prefill") => (n(2)?, n(3)?, n(3)?, n(4)?, n(4)?, n(5)?, n(6)? == 1),
        Some("decode") => (n(2)?, 1, n(3)?, n(4)?, n(5)?, n(6)?, false),
        other => anyhow::bail!("mode prefill or decode, got {other:?}"),
    };
    let driver = if cfg!(feature = "cuda-verify") { Driver::cuda()? } else { Driver::hip()? };
    driver.set_device(0)?;
    let req = Request {
        softmax_scale: 1.0 / (d as f32).sqrt(),
        alibi_slopes: None,
        window_size_left: None,
        window_size_right: causal.then_some(0),
        softcap: None,
        varlen: None,
    };
    let q_l = Layout::contiguous(Shape::from((b, s_q, h, d)));
    let kv_l = Layout::contiguous(Shape::from((b, s_k, h_k, d)));
    let call = AttnCall::new(&req, [dtype; 3], &q_l, &kv_l, &kv_l)?;
    let mut plan = plan(driver, &call)?;
    if let Some(splits) = args.get(7).filter(|_| args[0] == "decode") {
        let tiles = s_k.div_ceil(plan.kernels.fwd.block_n as usize);
        let per_split = tiles.div_ceil(splits.parse::<usize>()?.clamp(1, tiles));
        plan.split_len = per_split * plan.kernels.fwd.block_n as usize;
        plan.num_splits = tiles.div_ceil(per_split);
        plan.grid[2] = plan.num_splits as u32;
    }
    let (q, k, v) = (driver.malloc(b * s_q * h * d * 2)?, driver.malloc(b * s_k * h_k * d * 2)?, driver.malloc(b * s_k * h_k * d * 2)?);
    let out = driver.malloc(b * s_q * h * d * 2)?;
    let lse = driver.malloc(b * h * s_q * 4)?;
    let (l_len, o_len) = plan.scratch_lens(&call);
    let (l_acc, o_acc) = (driver.malloc(l_len * 4)?, driver.malloc(o_len * 4)?);
    let buffers = DeviceBuffers {
        q: q.addr(),
        k: k.addr(),
        v: v.addr(),
        out: out.addr(),
        lse: lse.addr(),
        lse_acc: l_acc.addr(),
        o_acc: o_acc.addr(),
        ..DeviceBuffers::default()
    };
    // SAFETY: every buffer above is a live allocation of this device sized for `call` and the
    // plan's accumulators; stream 0; the synchronize calls below keep them alive until done.
    let run = || unsafe { launch(driver, &call, &plan, &buffers) };
    run()?;
    driver.synchronize()?;
    let once = Instant::now();
    run()?;
    driver.synchronize()?;
    let iters = ((0.02 / once.elapsed().as_secs_f64()).ceil() as usize).clamp(1, 1000);
    let mut times: Vec<f64> = (0..7)
        .map(|_| {
            let t = Instant::now();
            (0..iters).try_for_each(|_| run())?;
            driver.synchronize()?;
            Ok(t.elapsed().as_secs_f64() / iters as f64)
        })
        .collect::<anyhow::Result<_>>()?;
    times.sort_by(f64::total_cmp);
    let t = times[3];
    let flops = 4.0 * (b * h * s_q * s_k * d) as f64 / if causal { 2.0 } else { 1.0 };
    let kv_bytes = 2.0 * (b * s_k * h_k * d * 2) as f64;
    println!(
        "ms={:.4} tflops={:.1} kv_gbps={:.1} splits={} tile={:?} block_m={} block_n={}",
        t * 1e3,
        flops / t / 1e12,
        kv_bytes / t / 1e9,
        plan.num_splits,
        plan.kernels.fwd.tile,
        plan.kernels.fwd.block_m,
        plan.kernels.fwd.block_n
    );
    Ok(())
}
