//! CPU benchmark: our flash-attention kernel vs Candle's naive attention.
//!
//! `cargo run --release --example bench [-- --seq 512,2048,4096 --heads 16 --dim 128 --runs 3
//! --dtype f32,bf16 --csv out.csv --plot docs/bench-cpu.svg]`
//!
//! For each shape, dtype and mask: median wall time of both, the speedup, our GFLOP/s (causal
//! counts only the visible half), the max error of both against an f64 reference on sampled
//! query rows, and the peak heap growth during one call.

mod alloc;
#[path = "../bench_plot/mod.rs"]
mod bench_plot;
mod naive;
#[cfg(feature = "candle-rocm")]
mod rocm;

use candle::{DType, Device, Tensor};
use std::time::Instant;

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

struct Args {
    seqs: Vec<usize>,
    heads: usize,
    dim: usize,
    runs: usize,
    dtypes: Vec<DType>,
    csv: Option<String>,
    plot: Option<String>,
}

const USAGE: &str = "usage: bench [--seq 512,2048,4096] [--heads 16] [--dim 128] [--runs 3]
             [--dtype f32,bf16] [--csv FILE] [--plot FILE.svg]
CPU benchmark, our flash attention against Candle's naive attention (the values shown are the
defaults; without arguments it runs them): median time, speedup, GFLOP/s, max error against an
f64 reference and peak heap growth for every sequence length, dtype (f32, f16, bf16) and mask.
--csv writes the table as CSV, --plot an SVG of time and memory against sequence length.
Run it optimized: cargo run --release --example bench -- --seq 1024 --dtype bf16";

/// Prints `message` and the usage to stderr and exits with status 2.
fn usage_error(message: &str) -> ! {
    eprintln!("bench: {message}\n{USAGE}");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args { seqs: vec![512, 2048, 4096], heads: 16, dim: 128, runs: 3, dtypes: vec![DType::F32, DType::BF16], csv: None, plot: None };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        std::process::exit(0);
    }
    let number = |flag: &str, v: &str| -> usize {
        v.parse().ok().filter(|&n| n > 0).unwrap_or_else(|| usage_error(&format!("{flag} takes a positive number, got `{v}`")))
    };
    for pair in argv.chunks(2) {
        let flag = pair[0].as_str();
        let Some(val) = pair.get(1).cloned() else { usage_error(&format!("{flag} needs a value")) };
        match flag {
            "--seq" => a.seqs = val.split(',').map(|s| number("--seq", s)).collect(),
            "--heads" => a.heads = number(flag, &val),
            "--dim" => a.dim = number(flag, &val),
            "--runs" => a.runs = number(flag, &val),
            "--csv" => a.csv = Some(val),
            "--plot" => a.plot = Some(val),
            "--dtype" => {
                a.dtypes = val
                    .split(',')
                    .map(|d| match d {
                        "f32" => DType::F32,
                        "bf16" => DType::BF16,
                        "f16" => DType::F16,
                        other => usage_error(&format!("--dtype: unknown dtype `{other}` (f32, f16 or bf16)")),
                    })
                    .collect()
            }
            other => usage_error(&format!("unknown argument `{other}`")),
        }
    }
    a
}

/// Median seconds of `runs` calls after one warm-up, and the peak heap growth of one call.
fn time<R>(runs: usize, mut f: impl FnMut() -> R) -> (f64, usize, R) {
    let (r, peak) = alloc::peak_during(&mut f);
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (times[times.len() / 2], peak, r)
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn main() -> candle::Result<()> {
    let args = parse_args();
    let (b, h, d) = (1, args.heads, args.dim);
    println!("threads: {} (rayon; candle's matmul uses the same pool)", rayon::current_num_threads());
    let header = "dtype,causal,seq,flash_ms,naive_ms,speedup,flash_gflops,flash_err,naive_err,flash_peak_mib,naive_peak_mib";
    println!(
        "| dtype | causal | seq | flash ms | naive ms | speedup | flash GFLOP/s | flash max err | naive max err | flash peak MiB | naive peak MiB |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    let mut csv = vec![header.to_string()];
    let mut points = Vec::new();
    for &dtype in &args.dtypes {
        for &causal in &[false, true] {
            for &s in &args.seqs {
                let q = Tensor::randn(0f32, 1.0, (b, s, h, d), &Device::Cpu)?.to_dtype(dtype)?;
                let k = Tensor::randn(0f32, 1.0, (b, s, h, d), &Device::Cpu)?.to_dtype(dtype)?;
                let v = Tensor::randn(0f32, 1.0, (b, s, h, d), &Device::Cpu)?.to_dtype(dtype)?;
                let scale = 1.0 / (d as f64).sqrt();
                let (t_flash, peak_flash, out) =
                    time(args.runs, || flash_attn_rocm::flash_attn(&q, &k, &v, scale as f32, causal).unwrap());
                let (t_naive, peak_naive, naive_out) =
                    time(args.runs, || naive::attention(&q, &k, &v, scale, causal).unwrap());
                let rows: Vec<usize> = (0..16).map(|i| (i * 7919) % s).chain([0, s - 1]).collect();
                let errs = naive::sampled_errors(&q, &k, &v, scale, causal, &[&out, &naive_out], &rows)?;
                let flops = 4.0 * (b * h * s * s * d) as f64 * if causal { 0.5 } else { 1.0 };
                let gflops = flops / t_flash / 1e9;
                let name = format!("{dtype:?}").to_lowercase();
                println!(
                    "| {name} | {causal} | {s} | {:.1} | {:.1} | {:.2}x | {gflops:.1} | {:.1e} | {:.1e} | {:.1} | {:.1} |",
                    t_flash * 1e3, t_naive * 1e3, t_naive / t_flash, errs[0], errs[1], mib(peak_flash), mib(peak_naive)
                );
                #[cfg(feature = "candle-rocm")]
                rocm::row(&q, &k, &v, scale, causal, t_flash, &rows)?;
                let suffix = if causal { " causal" } else { "" };
                for (kind, t, peak) in [("flash", t_flash, peak_flash), ("naive", t_naive, peak_naive)] {
                    let label = format!("{kind} {name}{suffix}");
                    points.push(bench_plot::BenchPoint { label, seq_len: s, millis: t * 1e3, peak_bytes: peak });
                }
                csv.push(format!(
                    "{name},{causal},{s},{:.3},{:.3},{:.3},{gflops:.2},{:.3e},{:.3e},{:.2},{:.2}",
                    t_flash * 1e3, t_naive * 1e3, t_naive / t_flash, errs[0], errs[1], mib(peak_flash), mib(peak_naive)
                ));
            }
        }
    }
    if let Some(path) = args.csv {
        std::fs::write(&path, csv.join("\n") + "\n")?;
        println!("wrote {path}");
    }
    if let Some(path) = args.plot {
        let title = format!("CPU attention, b=1 h={h} d={d}, {} threads", rayon::current_num_threads());
        bench_plot::plot_svg(&path, &title, &points).map_err(|e| candle::Error::Msg(e.to_string()))?;
        println!("wrote {path}");
    }
    Ok(())
}
