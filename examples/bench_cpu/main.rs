//! One CPU measurement per invocation, for `scripts/bench_cpu_vs_torch.py` (which interleaves it
//! with PyTorch, shape by shape) and for a quick look by hand. Threads: `RAYON_NUM_THREADS`.
//!
//! - `prefill --dtype f32 --seq 1024 --causal 1 [--heads 16 --dim 128 --runs 5 --layout 0]`: our
//!   median ms; `--layout 1` lays each head's rows out contiguously ((b, h, s, d) memory).
//! - `decode --dtype f32 --seq 32768 [--heads 32 --heads-k 8 --dim 128 --batch 1 --runs 5]`: our
//!   and naive attention's median ms (`--naive 0` skips it) (k/v heads repeated as models do), K/V GB/s of ours.
//! - `machine`: one thread's f32 FMA peak (GFLOP/s, the kernel's best instruction set) and the
//!   read bandwidth (GB/s) with the pool's threads.
//!
//! Each prints one line `key=value ...`.

#[path = "../bench/naive.rs"]
#[allow(dead_code)]
mod naive;
mod peak;

use candle::{DType, Device, Tensor};
use std::collections::HashMap;
use std::time::Instant;

fn median_ms(runs: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

const USAGE: &str = "usage:
  bench_cpu prefill [--dtype f32] [--seq 1024] [--causal 0] [--heads 16] [--dim 128] [--runs 5] [--layout 0]
  bench_cpu decode [--dtype f32] [--seq 32768] [--heads 32] [--heads-k 8] [--dim 128] [--batch 1] [--runs 5] [--naive 1]
  bench_cpu machine
One CPU measurement, printed as one line of key=value (the values shown are the defaults):
prefill: our median ms (--layout 1: (b, h, s, d) memory); decode: ours and naive attention's
median ms (--naive 0 skips naive) and our K/V GB/s; machine: one thread's f32 FMA peak and the
read bandwidth. dtype: f32, f16 or bf16. Threads: RAYON_NUM_THREADS.";

/// Prints `message` and the usage to stderr and exits with status 2.
fn usage_error(message: &str) -> ! {
    eprintln!("bench_cpu: {message}\n{USAGE}");
    std::process::exit(2)
}

/// The options of the modes (each mode reads its own and ignores the others).
const OPTIONS: [&str; 10] = ["dtype", "seq", "causal", "heads", "heads-k", "dim", "batch", "runs", "layout", "naive"];

struct Args(HashMap<String, String>);

impl Args {
    fn parse(argv: &[String]) -> Args {
        let mut map = HashMap::new();
        for pair in argv.chunks(2) {
            let Some(key) = pair[0].strip_prefix("--").filter(|k| OPTIONS.contains(k)) else {
                usage_error(&format!("unknown argument `{}`", pair[0]))
            };
            let Some(value) = pair.get(1) else { usage_error(&format!("{} needs a value", pair[0])) };
            map.insert(key.to_string(), value.clone());
        }
        Args(map)
    }
    fn get(&self, key: &str, default: usize) -> usize {
        self.0.get(key).map_or(default, |v| {
            v.parse().unwrap_or_else(|_| usage_error(&format!("--{key} takes a number, got `{v}`")))
        })
    }
    fn dtype(&self) -> DType {
        match self.0.get("dtype").map_or("f32", String::as_str) {
            "f32" => DType::F32,
            "bf16" => DType::BF16,
            "f16" => DType::F16,
            other => usage_error(&format!("--dtype: unknown dtype `{other}` (f32, f16 or bf16)")),
        }
    }
}

fn randn(dims: &[usize], dtype: DType) -> candle::Result<Tensor> {
    Tensor::randn(0f32, 1.0, dims, &Device::Cpu)?.to_dtype(dtype)
}

fn main() -> candle::Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.is_empty() || argv.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return Ok(());
    }
    let mode = argv[0].clone();
    if !["prefill", "decode", "machine"].contains(&mode.as_str()) {
        usage_error(&format!("unknown mode `{mode}`"));
    }
    let args = Args::parse(&argv[1..]);
    let (runs, dtype, d) = (args.get("runs", 5), args.dtype(), args.get("dim", 128));
    let threads = rayon::current_num_threads();
    match mode.as_str() {
        "prefill" => {
            let (s, h, causal) = (args.get("seq", 1024), args.get("heads", 16), args.get("causal", 0) == 1);
            // `--layout 1`: each head's rows contiguous, (b, h, s, d) memory seen as (b, s, h, d),
            // as PyTorch's benchmark lays them out.
            let by_head = args.get("layout", 0) == 1;
            let tensor = || -> candle::Result<Tensor> {
                if by_head {
                    randn(&[1, h, s, d], dtype)?.transpose(1, 2)
                } else {
                    randn(&[1, s, h, d], dtype)
                }
            };
            let (q, k, v) = (tensor()?, tensor()?, tensor()?);
            let scale = 1.0 / (d as f32).sqrt();
            let ms = median_ms(runs, || drop(flash_attn_rocm::flash_attn(&q, &k, &v, scale, causal).unwrap()));
            println!("mode=prefill threads={threads} dtype={dtype:?} seq={s} causal={causal} ours_ms={ms:.3}");
        }
        "decode" => {
            let (s_k, h, h_k, b) = (args.get("seq", 32768), args.get("heads", 32), args.get("heads-k", 8), args.get("batch", 1));
            let (q, k, v) = (randn(&[b, 1, h, d], dtype)?, randn(&[b, s_k, h_k, d], dtype)?, randn(&[b, s_k, h_k, d], dtype)?);
            let scale = 1.0 / (d as f32).sqrt();
            let ours = median_ms(runs, || drop(flash_attn_rocm::flash_attn(&q, &k, &v, scale, true).unwrap()));
            // Naive attention as models write it for GQA: k/v heads repeated to the query heads.
            let repeat = |t: &Tensor| -> candle::Result<Tensor> {
                t.unsqueeze(3)?.repeat((1, 1, 1, h / h_k, 1))?.reshape((b, s_k, h, d))
            };
            let naive = if args.get("naive", 1) == 0 { f64::NAN } else { median_ms(runs, || {
                let (k, v) = (repeat(&k).unwrap(), repeat(&v).unwrap());
                drop(naive::attention(&q, &k, &v, scale as f64, true).unwrap())
            }) };
            let kv_bytes = 2 * b * s_k * h_k * d * dtype.size_in_bytes();
            let gbs = kv_bytes as f64 / (ours * 1e-3) / 1e9;
            println!("mode=decode threads={threads} dtype={dtype:?} seq={s_k} batch={b} ours_ms={ours:.4} naive_ms={naive:.4} kv_gbs={gbs:.2}");
        }
        "machine" => {
            let (name, gflops) = peak::fma_peak_one_thread();
            let read = peak::read_bandwidth_gbs();
            println!("mode=machine threads={threads} isa={name} fma_peak_gflops_1t={gflops:.1} read_gbs={read:.2}");
        }
        _ => unreachable!("checked above"),
    }
    Ok(())
}
