//! A llama-style decoder run twice from the same seeded random weights: once with attention
//! through `candle_flash_attn::flash_attn` (this compat crate, i.e. what an unchanged
//! candle-transformers model calls once `[patch.crates-io]` points here), once with Candle's own
//! matmul-softmax attention. Prints the largest logit difference, whether the greedy picks
//! agree, and tokens/s for the prefill and for a greedy decode loop with a KV cache.
//!
//! On the CPU by default; `--device cuda` runs both on Candle's CUDA device 0 (build with
//! `--features candle-cuda`: our Triton kernels on Candle CUDA tensors). `--config 1b` is
//! TinyLlama-1.1B's shape (22 layers, hidden 2048, 32/4 heads of 64) instead of the small one.
//!
//!   cargo run --release -p candle-flash-attn --example llama -- [--prompt N] [--decode N]
//!       [--dtype f32|f16|bf16] [--seed N] [--device cpu|cuda] [--config small|1b]

mod model;

use std::time::Instant;

use anyhow::{bail, Context, Result};
use candle::{DType, Device, Tensor, D};
use model::{AttentionImpl, Config, KvCache, Llama};
use rand::{rngs::StdRng, Rng, SeedableRng};

const SMALL: Config = Config {
    vocab_size: 2048,
    hidden_size: 512,
    intermediate_size: 1376,
    num_layers: 4,
    num_heads: 8,
    num_kv_heads: 2,
    rope_theta: 10_000.0,
    rms_norm_eps: 1e-5,
    max_positions: 4096,
};

/// TinyLlama-1.1B's shapes (random weights).
const ONE_B: Config = Config {
    vocab_size: 32000,
    hidden_size: 2048,
    intermediate_size: 5632,
    num_layers: 22,
    num_heads: 32,
    num_kv_heads: 4,
    rope_theta: 10_000.0,
    rms_norm_eps: 1e-5,
    max_positions: 4096,
};

struct Args {
    prompt_len: usize,
    decode_steps: usize,
    dtype: DType,
    seed: u64,
    device: Device,
    config: Config,
}

const USAGE: &str = "usage: llama [--prompt N] [--decode N] [--dtype f32|f16|bf16] [--seed N] [--device cpu|cuda] [--config small|1b]";

fn parse_args() -> Result<Args> {
    let mut args = Args {
        prompt_len: 256,
        decode_steps: 64,
        dtype: DType::F32,
        seed: 42,
        device: Device::Cpu,
        config: SMALL,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let value = it.next().with_context(|| format!("{flag} needs a value\n{USAGE}"))?;
        match flag.as_str() {
            "--prompt" => args.prompt_len = value.parse()?,
            "--decode" => args.decode_steps = value.parse()?,
            "--seed" => args.seed = value.parse()?,
            "--dtype" => {
                args.dtype = match value.as_str() {
                    "f32" => DType::F32,
                    "f16" => DType::F16,
                    "bf16" => DType::BF16,
                    other => bail!("unknown dtype {other}"),
                }
            }
            "--device" => {
                args.device = match value.as_str() {
                    "cpu" => Device::Cpu,
                    "cuda" => Device::new_cuda(0)?,
                    other => bail!("unknown device {other}\n{USAGE}"),
                }
            }
            "--config" => {
                args.config = match value.as_str() {
                    "small" => SMALL,
                    "1b" => ONE_B,
                    other => bail!("unknown config {other}\n{USAGE}"),
                }
            }
            other => bail!("unknown flag {other}\n{USAGE}"),
        }
    }
    if args.prompt_len == 0 || args.prompt_len + args.decode_steps > args.config.max_positions {
        bail!("need 0 < prompt + decode <= {}", args.config.max_positions);
    }
    Ok(args)
}

/// What one attention implementation produced: logits per step and timings.
struct Run {
    prefill_logits: Tensor,
    prefill_secs: f64,
    /// Logits of the last position after each decode step.
    decode_logits: Vec<Tensor>,
    decode_secs: f64,
    /// Greedy choice at each step (for the flash run these are also the tokens fed back).
    greedy: Vec<u32>,
}

/// Prefill `prompt`, then decode one token at a time with the cache. The fed-back tokens are
/// `forced` when given (so both models see identical inputs), else the model's own greedy picks.
/// Timings wait for the device: each step reads its greedy pick back, and the prefill
/// synchronizes before the clock stops.
fn run(model: &Llama, args: &Args, prompt: &[u32], steps: usize, forced: Option<&[u32]>) -> Result<Run> {
    let dev = &args.device;
    let mut cache = KvCache::new(&args.config);
    let tokens = Tensor::new(prompt, dev)?.unsqueeze(0)?;
    let start = Instant::now();
    let prefill_logits = model.forward(&tokens, &mut cache)?.squeeze(0)?;
    dev.synchronize()?;
    let prefill_secs = start.elapsed().as_secs_f64();

    let argmax =
        |logits: &Tensor| -> Result<u32> { Ok(logits.argmax(D::Minus1)?.to_scalar::<u32>()?) };
    let mut greedy = vec![argmax(&prefill_logits.get(prompt.len() - 1)?)?];
    let mut decode_logits = Vec::with_capacity(steps);
    let start = Instant::now();
    for step in 0..steps {
        let next = forced.map_or(greedy[step], |f| f[step]);
        let input = Tensor::new(&[next], dev)?.unsqueeze(0)?;
        let logits = model.forward(&input, &mut cache)?.squeeze(0)?.squeeze(0)?;
        greedy.push(argmax(&logits)?);
        decode_logits.push(logits);
    }
    let decode_secs = start.elapsed().as_secs_f64();
    anyhow::ensure!(
        cache.positions() == prompt.len() + steps,
        "the cache lost positions"
    );
    Ok(Run {
        prefill_logits,
        prefill_secs,
        decode_logits,
        decode_secs,
        greedy,
    })
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
    let diff = (a.to_dtype(DType::F32)? - b.to_dtype(DType::F32)?)?.abs()?;
    Ok(diff.flatten_all()?.max(0)?.to_scalar::<f32>()?)
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let c = &args.config;
    println!(
        "llama-style decoder: {} layers, hidden {}, {} query heads / {} kv heads (GQA), head dim {}, \
         vocab {}, {:?} on {:?}, seed {}",
        c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim(), c.vocab_size, args.dtype,
        args.device.location(), args.seed
    );
    let weights = model::random_weights(c, args.seed)?;
    let flash = Llama::from_weights(c, &weights, args.dtype, &args.device, AttentionImpl::Flash)?;
    let naive = Llama::from_weights(c, &weights, args.dtype, &args.device, AttentionImpl::Naive)?;
    drop(weights);
    let mut rng = StdRng::seed_from_u64(args.seed ^ 0x70ce);
    let prompt: Vec<u32> = (0..args.prompt_len)
        .map(|_| rng.gen_range(0..c.vocab_size as u32))
        .collect();

    // Warm up both paths (thread pool, allocator) so the timings compare steady states.
    run(&flash, &args, &prompt[..prompt.len().min(16)], 2, None)?;
    run(&naive, &args, &prompt[..prompt.len().min(16)], 2, None)?;

    let f = run(&flash, &args, &prompt, args.decode_steps, None)?;
    let n = run(&naive, &args, &prompt, args.decode_steps, Some(&f.greedy))?;

    let logit_scale = f
        .prefill_logits
        .abs()?
        .flatten_all()?
        .max(0)?
        .to_dtype(DType::F32)?
        .to_scalar::<f32>()?;
    println!(
        "prefill {:>4} tokens: flash {:>8.1} tok/s, naive {:>8.1} tok/s, max |logit diff| {:.2e} (max |logit| {:.2})",
        prompt.len(),
        prompt.len() as f64 / f.prefill_secs,
        prompt.len() as f64 / n.prefill_secs,
        max_abs_diff(&f.prefill_logits, &n.prefill_logits)?,
        logit_scale,
    );
    if args.decode_steps > 0 {
        let mut decode_diff = 0f32;
        for (a, b) in f.decode_logits.iter().zip(&n.decode_logits) {
            decode_diff = decode_diff.max(max_abs_diff(a, b)?);
        }
        let agree = f
            .greedy
            .iter()
            .zip(&n.greedy)
            .filter(|(a, b)| a == b)
            .count();
        println!(
            "decode  {:>4} steps:  flash {:>8.1} tok/s, naive {:>8.1} tok/s, max |logit diff| {:.2e}, \
             greedy picks agree {agree}/{}",
            args.decode_steps,
            args.decode_steps as f64 / f.decode_secs,
            args.decode_steps as f64 / n.decode_secs,
            decode_diff,
            f.greedy.len(),
        );
        // Where the picks differ, how close the naive model itself was to ours: the gap between
        // its logit of its own pick and of ours (a near-tie when within the logit difference).
        for (step, (&ours, &theirs)) in f.greedy.iter().zip(&n.greedy).enumerate() {
            if ours != theirs {
                let logits = match step {
                    0 => n.prefill_logits.get(prompt.len() - 1)?,
                    _ => n.decode_logits[step - 1].clone(),
                };
                let logits = logits.to_dtype(DType::F32)?.to_vec1::<f32>()?;
                let gap = logits[theirs as usize] - logits[ours as usize];
                println!("  step {step}: picks {ours} (ours) and {theirs} (naive); the naive model's own gap between them {gap:.2e}");
            }
        }
    }
    Ok(())
}
