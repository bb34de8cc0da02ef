//! The crate's main job on the default device: causal GQA flash attention on the GPU of a GPU
//! build (feature `candle-cuda`: CUDA device 0; `candle-rocm`: ROCm device 0), else on the CPU.
//! Prints which kernel served the call, checks the result against Candle's plain
//! matmul-softmax attention and times it.
//!
//! ```sh
//! cargo run --example quickstart                                  # CPU
//! cargo run --example quickstart -- --seq 4096 --dtype f16        # other shapes
//! cargo run --example quickstart --features candle-cuda           # NVIDIA GPU, Candle CUDA
//! ```
//!
//! Flags: `--batch N --seq N --heads N --kv-heads N --head-dim N --dtype f32|f16|bf16`.

use flash_attn_rocm::candle::{self, DType, Device, Tensor};
use std::time::Instant;

/// The shape and dtype of the call, from the command line.
struct Args {
    batch: usize,
    seq: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    dtype: DType,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args { batch: 2, seq: 1024, heads: 8, kv_heads: 2, head_dim: 64, dtype: DType::BF16 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| anyhow::anyhow!("{flag} needs a value"))?;
        match flag.as_str() {
            "--batch" => args.batch = value.parse()?,
            "--seq" => args.seq = value.parse()?,
            "--heads" => args.heads = value.parse()?,
            "--kv-heads" => args.kv_heads = value.parse()?,
            "--head-dim" => args.head_dim = value.parse()?,
            "--dtype" => {
                args.dtype = match value.as_str() {
                    "f32" => DType::F32,
                    "f16" => DType::F16,
                    "bf16" => DType::BF16,
                    other => anyhow::bail!("--dtype {other}: expected f32, f16 or bf16"),
                }
            }
            other => anyhow::bail!("unknown flag {other} (see the example's header)"),
        }
    }
    Ok(args)
}

/// The first GPU of the build's Candle device, else the CPU (with the reason).
fn default_device() -> Device {
    #[cfg(feature = "candle-cuda")]
    match Device::new_cuda(0) {
        Ok(dev) => return dev,
        Err(e) => eprintln!("no CUDA device ({e}); using the CPU"),
    }
    #[cfg(feature = "candle-rocm")]
    match Device::new_rocm(0) {
        Ok(dev) => return dev,
        Err(e) => eprintln!("no ROCm device ({e}); using the CPU"),
    }
    Device::Cpu
}

/// Candle's plain attention computed in `dtype`: matmul, causal mask, softmax, matmul, the k/v
/// heads repeated for GQA. In f32 it is the reference the flash result is checked against; in
/// the inputs' dtype it shows how far plain attention strays at that precision.
fn naive_attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64, dtype: DType) -> candle::Result<Tensor> {
    let (b, s, h, d) = q.dims4()?;
    let group = h / k.dim(2)?;
    // (b, s, h, d) -> (b, h, s, d), k/v heads repeated to h.
    let heads_first = |t: &Tensor, repeat: usize| -> candle::Result<Tensor> {
        let t = t.to_dtype(dtype)?.transpose(1, 2)?.contiguous()?;
        let (b, hk, s, d) = t.dims4()?;
        t.unsqueeze(2)?.expand((b, hk, repeat, s, d))?.reshape((b, hk * repeat, s, d))
    };
    let (q, k, v) = (heads_first(q, 1)?, heads_first(k, group)?, heads_first(v, group)?);
    let logits = (q.matmul(&k.t()?)? * scale)?;
    let future: Vec<f32> = (0..s).flat_map(|i| (0..s).map(move |j| if j > i { f32::NEG_INFINITY } else { 0.0 })).collect();
    let mask = Tensor::from_vec(future, (s, s), q.device())?.to_dtype(dtype)?;
    let probs = candle_nn::ops::softmax_last_dim(&logits.broadcast_add(&mask)?)?;
    probs.matmul(&v)?.transpose(1, 2)?.reshape((b, s, h, d))
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let dev = default_device();
    let Args { batch, seq, heads, kv_heads, head_dim, dtype } = args;
    let randn = |h| Tensor::randn(0f32, 1.0, (batch, seq, h, head_dim), &dev)?.to_dtype(dtype);
    let (q, k, v) = (randn(heads)?, randn(kv_heads)?, randn(kv_heads)?);
    let scale = 1.0 / (head_dim as f32).sqrt();

    println!("causal GQA attention: batch {batch}, seq {seq}, {heads} query / {kv_heads} kv heads, head dim {head_dim}, {dtype:?}");
    // Which backend and kernel serve this call, without running it.
    println!("{}", flash_attn_rocm::explain(|| flash_attn_rocm::flash_attn(&q, &k, &v, scale, true))?);

    let out = flash_attn_rocm::flash_attn(&q, &k, &v, scale, true)?;
    // flash-attn's own test rule (and this crate's): the flash result may stray from the f32
    // reference by at most twice what plain attention computed in the inputs' dtype strays, plus
    // a small floor.
    let reference = naive_attention(&q, &k, &v, f64::from(scale), DType::F32)?;
    let max_diff = |t: &Tensor| -> candle::Result<f32> { (t.to_dtype(DType::F32)? - &reference)?.abs()?.max_all()?.to_scalar() };
    let max_err = max_diff(&out)?;
    let max_ref = reference.abs()?.max_all()?.to_scalar::<f32>()?;
    let floor = if dtype == DType::F32 { 1e-5 * max_ref.max(1.0) } else { 1e-4 };
    let plain = if dtype == DType::F32 { 0.0 } else { max_diff(&naive_attention(&q, &k, &v, f64::from(scale), dtype)?)? };
    let tolerance = 2.0 * plain + floor;
    let verdict = if max_err <= tolerance { "passed" } else { "FAILED" };
    println!(
        "out {:?} {:?}; max |flash - f32 reference| = {max_err:.2e} (max |out| {max_ref:.2}): {verdict}, tolerance {tolerance:.2e} \
         = 2 x {plain:.2e} (plain attention in {dtype:?}) + {floor:.0e}",
        out.dims(),
        out.dtype()
    );
    anyhow::ensure!(max_err <= tolerance, "the flash result is outside the tolerance");

    // Timing: the median of 5 calls, each waited for (a GPU queues work asynchronously).
    let mut times = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        let out = flash_attn_rocm::flash_attn(&q, &k, &v, scale, true)?;
        dev.synchronize()?;
        times.push(start.elapsed().as_secs_f64());
        drop(out);
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    // Causal: about half of the 4·b·h·s²·d multiply-adds of full attention are needed.
    let flops = 2.0 * (batch * heads * head_dim) as f64 * (seq * seq) as f64;
    println!("flash_attn: {:.3} ms (median of 5), {:.1} GFLOP/s", median * 1e3, flops / median / 1e9);
    Ok(())
}
