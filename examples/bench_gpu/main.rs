//! Times the Triton path on the current GPU (device 0 of HIP, or of the CUDA driver in a
//! `cuda-verify` build): one shape per run, the median of 7 timed repetitions, each a burst of
//! launches closed by one synchronize (`ms`), and the median launch-to-result latency of one call
//! followed by a synchronize (`latency_us`). Prints one line `key=value ...` for
//! scripts/bench_gpu.py, which interleaves it with PyTorch's SDPA. With `--serve` it times bursts
//! on request instead ([`serve`]), so that the script can alternate ours with PyTorch's burst by
//! burst.
//!
//! q, k and v hold standard normal values, as PyTorch's `randn` gives SDPA in
//! scripts/bench_gpu.py: under load the GPU's clock depends on the data (zeros draw less power
//! and run matrix work faster), so both sides time the same kind of input.
//! The paged and varlen modes' side tensors are real: a shuffled block table, every paged
//! sequence S_K keys long, the varlen sequences of the lengths given.
use candle::{DType, Device, Layout, Shape, Tensor};
use flash_attn_rocm::gpu::{DeviceBuffer, Driver};
use flash_attn_rocm::params::{AttnCall, Request, VarLenRequest};
use flash_attn_rocm::rocm::DeviceBuffers;
use flash_attn_rocm::triton::{launch, plan};
use std::time::Instant;

const USAGE: &str = "usage:
  bench_gpu prefill DTYPE B S H D CAUSAL [S_K]  (f16|bf16, causal 0|1; s_q = S, s_k = S_K or S)
  bench_gpu varlen DTYPE H D CAUSAL LEN,LEN,... (packed sequences of these lengths, s_q = s_k)
  bench_gpu decode DTYPE B S_K H H_K D [SPLITS] (one query row per sequence)
  bench_gpu paged DTYPE B S_K H H_K D PAGE [SPLITS]
                                               (decode over a paged cache of PAGE-key pages)
SPLITS forces the key split count, to tune the heuristic of src/triton/split.rs.
Decode and paged shapes take the extras after the numbers: --window LEFT (a sliding window of
LEFT keys before the query, causal), --softcap X, --alibi (slopes 2^-8h/H); kv_gbps then counts
the keys the window shows.
--serve (any mode): after one warm-up launch, print `ready`, then read a count N per line and
answer each with the seconds per launch of a burst of N launches closed by one synchronize.";

/// One benchmark shape.
struct BenchShape {
    b: usize,
    s_q: usize,
    s_k: usize,
    h: usize,
    h_k: usize,
    d: usize,
    causal: bool,
    page: Option<usize>,
    /// Varlen prefill: the sequence lengths (s_q = s_k each; `s_q`/`s_k` hold the longest).
    lens: Option<Vec<usize>>,
    splits: Option<usize>,
    extras: Extras,
}

/// The features a decode shape may add (`--window LEFT`, `--softcap X`, `--alibi`).
#[derive(Default)]
struct Extras {
    window_left: Option<usize>,
    softcap: Option<f32>,
    alibi: bool,
}

/// Splits `--flag [value]` options off the positional arguments.
fn extras(args: &[String]) -> anyhow::Result<(Vec<String>, Extras)> {
    let (mut positional, mut x, mut it) = (Vec::new(), Extras::default(), args.iter());
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| anyhow::anyhow!("{a} needs a value\n{USAGE}"));
        match a.as_str() {
            "--window" => x.window_left = Some(value()?.parse()?),
            "--softcap" => x.softcap = Some(value()?.parse()?),
            "--alibi" => x.alibi = true,
            flag if flag.starts_with("--") => anyhow::bail!("unknown option {flag}\n{USAGE}"),
            _ => positional.push(a.clone()),
        }
    }
    Ok((positional, x))
}

fn parse(args: &[String]) -> anyhow::Result<(DType, BenchShape)> {
    let (args, extras) = extras(args)?;
    if (extras.window_left.is_some() || extras.softcap.is_some() || extras.alibi) && args.first().is_some_and(|m| m == "prefill") {
        anyhow::bail!("the extras are options of the decode and paged shapes\n{USAGE}");
    }
    let n = |i: usize| -> anyhow::Result<usize> {
        Ok(args.get(i).ok_or_else(|| anyhow::anyhow!("missing argument {i}\n{USAGE}"))?.parse()?)
    };
    let opt = |i: usize| args.get(i).map(|a| a.parse::<usize>()).transpose();
    let dtype = match args.get(1).map(String::as_str) {
        Some("f16") => DType::F16,
        Some("bf16") => DType::BF16,
        other => anyhow::bail!("dtype f16 or bf16, got {other:?}\n{USAGE}"),
    };
    let mut shape = match args.first().map(String::as_str) {
        Some("prefill") => {
            let (s, h) = (n(3)?, n(4)?);
            // Cross-attention (Stable Diffusion's 77 text keys) has keys of its own length.
            let s_k = opt(7)?.unwrap_or(s);
            BenchShape { b: n(2)?, s_q: s, s_k, h, h_k: h, d: n(5)?, causal: n(6)? == 1, page: None, lens: None, splits: None, extras: Extras::default() }
        }
        Some("varlen") => {
            let lens = args.get(5).ok_or_else(|| anyhow::anyhow!("missing lengths\n{USAGE}"))?;
            let lens: Vec<usize> = lens.split(',').map(str::parse).collect::<Result<_, _>>()?;
            let longest = lens.iter().copied().max().unwrap_or(0);
            let (h, d, causal) = (n(2)?, n(3)?, n(4)? == 1);
            BenchShape { b: lens.len(), s_q: longest, s_k: longest, h, h_k: h, d, causal, page: None, lens: Some(lens), splits: None, extras: Extras::default() }
        }
        Some("decode") => BenchShape { b: n(2)?, s_q: 1, s_k: n(3)?, h: n(4)?, h_k: n(5)?, d: n(6)?, causal: false, page: None, lens: None, splits: opt(7)?, extras: Extras::default() },
        Some("paged") => {
            BenchShape { b: n(2)?, s_q: 1, s_k: n(3)?, h: n(4)?, h_k: n(5)?, d: n(6)?, causal: false, page: Some(n(7)?), lens: None, splits: opt(8)?, extras: Extras::default() }
        }
        other => anyhow::bail!("mode prefill, varlen, decode or paged, got {other:?}\n{USAGE}"),
    };
    shape.extras = extras;
    Ok((dtype, shape))
}

/// A shuffled table (a fixed permutation of the blocks), so pages are not read in order.
fn shuffled_table(b: usize, max_blocks: usize) -> Vec<u32> {
    let blocks = b * max_blocks;
    let mut table: Vec<u32> = (0..blocks as u32).collect();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..blocks).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        table.swap(i, (state % (i as u64 + 1)) as usize);
    }
    table
}

/// `elems` standard normal values of `dtype` (f16 or bf16) as bytes: a block of 2^20 drawn
/// values repeated (the values' kind, not their order, is what the timing sees).
fn normal_bytes(elems: usize, dtype: DType) -> anyhow::Result<Vec<u8>> {
    const BLOCK: usize = 1 << 20;
    let drawn = Tensor::randn(0f32, 1f32, BLOCK.min(elems).max(1), &Device::Cpu)?.to_dtype(dtype)?;
    let bits: Vec<u16> = match dtype {
        DType::F16 => drawn.to_vec1::<half::f16>()?.iter().map(|x| x.to_bits()).collect(),
        _ => drawn.to_vec1::<half::bf16>()?.iter().map(|x| x.to_bits()).collect(),
    };
    Ok(bits.iter().cycle().take(elems).flat_map(|b| b.to_ne_bytes()).collect())
}

fn bytes(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_ne_bytes()).collect()
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() || args[0] == "--help" || args[0] == "-h" {
        println!("{USAGE}");
        return Ok(());
    }
    let serving = args.iter().any(|a| a == "--serve");
    let args: Vec<String> = args.into_iter().filter(|a| a != "--serve").collect();
    let (dtype, x) = parse(&args)?;
    let driver = if cfg!(feature = "cuda-verify") { Driver::cuda()? } else { Driver::hip()? };
    driver.set_device(0)?;
    // Paged: b sequences of s_k keys in pages; varlen: the sequences packed one after another.
    // The side tensors' values go to the device below.
    let max_blocks = x.page.map_or(0, |p| x.s_k.div_ceil(p));
    let (cu_q, cu_k) = match &x.lens {
        Some(lens) => {
            let mut ends = vec![0u32];
            lens.iter().for_each(|&l| ends.push(ends[ends.len() - 1] + l as u32));
            (ends.clone(), ends)
        }
        None => ((0..=x.b as u32).collect(), (0..=x.b as u32).map(|i| i * x.s_k as u32).collect()),
    };
    let total = x.lens.as_ref().map_or(0, |lens| lens.iter().sum::<usize>());
    let table = shuffled_table(x.b, max_blocks);
    let host = |v: &[u32], shape: &[usize]| Tensor::from_vec(v.to_vec(), shape, &Device::Cpu);
    let (sq, sk, table_t) = (host(&cu_q, &[x.b + 1])?, host(&cu_k, &[x.b + 1])?, host(&table, &[x.b, max_blocks])?);
    // Paged and varlen calls pass cumulative seqlens (s_q is 1 for a paged decode shape).
    let packed = x.page.is_some() || x.lens.is_some();
    let varlen = packed.then(|| VarLenRequest {
        seqlens_q: &sq,
        seqlens_k: &sk,
        max_seqlen_q: x.s_q,
        max_seqlen_k: x.s_k,
        block_table: x.page.map(|_| &table_t),
        page_block_size: x.page,
        mm_prefix_ranges: None,
    });
    let slopes: Vec<f32> = (0..x.h).map(|i| (-8.0 * (i + 1) as f32 / x.h as f32).exp2()).collect();
    let slopes_t = Tensor::from_vec(slopes.clone(), x.h, &Device::Cpu)?;
    let windowed = x.extras.window_left.is_some();
    let req = Request {
        softmax_scale: 1.0 / (x.d as f32).sqrt(),
        alibi_slopes: x.extras.alibi.then_some(&slopes_t),
        window_size_left: x.extras.window_left,
        window_size_right: (x.causal || windowed).then_some(0),
        softcap: x.extras.softcap,
        varlen,
    };
    let (q_l, kv_l) = match (x.page, &x.lens) {
        (Some(page), _) => (Shape::from((x.b, x.h, x.d)), Shape::from((x.b * max_blocks, page, x.h_k, x.d))),
        (None, Some(_)) => (Shape::from((total, x.h, x.d)), Shape::from((total, x.h_k, x.d))),
        (None, None) => (Shape::from((x.b, x.s_q, x.h, x.d)), Shape::from((x.b, x.s_k, x.h_k, x.d))),
    };
    let (q_l, kv_l) = (Layout::contiguous(q_l), Layout::contiguous(kv_l));
    let call = AttnCall::on_device(&req, [dtype; 3], &q_l, &kv_l, &kv_l)?;
    let mut plan = plan(driver, &call)?;
    if let Some(splits) = x.splits {
        let tiles = x.s_k.div_ceil(plan.kernels.fwd.block_n as usize);
        let per_split = tiles.div_ceil(splits.clamp(1, tiles));
        plan.split_len = per_split * plan.kernels.fwd.block_n as usize;
        plan.num_splits = tiles.div_ceil(per_split);
        plan.grid[2] = plan.num_splits as u32;
    }
    let kv_elems = kv_l.shape().elem_count();
    let q_elems = q_l.shape().elem_count();
    let (l_len, o_len) = plan.scratch_lens(&call);
    let alloc = |bytes: usize| driver.malloc(bytes);
    let memory: Vec<DeviceBuffer> = [q_elems * 2, kv_elems * 2, kv_elems * 2, q_elems * 2, q_elems / x.d * 4, l_len * 4, o_len * 4]
        .into_iter()
        .map(alloc)
        .collect::<Result<_, _>>()?;
    for (buffer, elems) in memory.iter().zip([q_elems, kv_elems, kv_elems]) {
        driver.copy_to_device(buffer, &normal_bytes(elems, dtype)?)?;
    }
    let slope_bytes: Vec<u8> = slopes.iter().flat_map(|v| v.to_ne_bytes()).collect();
    let side: Vec<DeviceBuffer> = [bytes(&cu_q), bytes(&cu_k), bytes(&table), slope_bytes]
        .iter()
        .map(|data| {
            let buffer = driver.malloc(data.len())?;
            driver.copy_to_device(&buffer, data)?;
            Ok(buffer)
        })
        .collect::<anyhow::Result<_>>()?;
    let paged = x.page.is_some();
    let buffers = DeviceBuffers {
        q: memory[0].addr(),
        k: memory[1].addr(),
        v: memory[2].addr(),
        out: memory[3].addr(),
        lse: memory[4].addr(),
        lse_acc: memory[5].addr(),
        o_acc: memory[6].addr(),
        seqstart_q: if packed { side[0].addr() } else { 0 },
        seqstart_k: if packed { side[1].addr() } else { 0 },
        block_table: if paged { side[2].addr() } else { 0 },
        block_table_row_stride: max_blocks,
        alibi_slopes: if x.extras.alibi { side[3].addr() } else { 0 },
        ..DeviceBuffers::default()
    };
    // SAFETY: every buffer above is a live allocation of this device sized for `call` and the
    // plan's accumulators; stream 0; the synchronize calls below keep them alive until done.
    let run = || unsafe { launch(driver, &call, &plan, &buffers) };
    run()?;
    driver.synchronize()?;
    if serving {
        return serve(driver, run);
    }
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
    // Launch-to-result latency: one call, then wait for it (the token loop's view at b=1).
    let mut latencies: Vec<f64> = (0..51)
        .map(|_| {
            let t = Instant::now();
            run()?;
            driver.synchronize()?;
            Ok(t.elapsed().as_secs_f64())
        })
        .collect::<anyhow::Result<_>>()?;
    flash_attn_rocm::triton::take_faults(driver)?;
    times.sort_by(f64::total_cmp);
    latencies.sort_by(f64::total_cmp);
    let t = times[3];
    let (b, h, h_k, d) = (x.b, x.h, x.h_k, x.d);
    let pairs = x.lens.as_ref().map_or(b * x.s_q * x.s_k, |lens| lens.iter().map(|l| l * l).sum());
    let flops = 4.0 * (h * pairs * d) as f64 / if x.causal { 2.0 } else { 1.0 };
    // The keys each query row may see (a decode step's window: its last LEFT + 1).
    let keys = x.extras.window_left.map_or(x.s_k, |w| x.s_k.min(w + 1));
    let kv_bytes = 2.0 * (b * keys * h_k * d * 2) as f64;
    println!(
        "ms={:.4} latency_us={:.1} tflops={:.1} kv_gbps={:.1} splits={} tile={:?} block_m={} block_n={}",
        t * 1e3,
        latencies[25] * 1e6,
        flops / t / 1e12,
        kv_bytes / t / 1e9,
        plan.num_splits,
        plan.kernels.fwd.tile,
        plan.kernels.fwd.block_m,
        plan.kernels.fwd.block_n
    );
    Ok(())
}

/// `--serve`: the seconds per launch of a burst of N launches (closed by one synchronize) for each
/// line N read, until the input ends. scripts/bench_gpu.py alternates these bursts with PyTorch's
/// in one timeline: under sustained load the GPU's clock drifts with what ran before (an H200's
/// SM clock between 1,650 and 1,980 MHz), so bursts timed apart would compare different clocks.
fn serve(driver: &'static Driver, run: impl Fn() -> candle::Result<()>) -> anyhow::Result<()> {
    use std::io::BufRead;
    println!("ready");
    for line in std::io::stdin().lock().lines() {
        let n: usize = line?.trim().parse()?;
        let t = Instant::now();
        (0..n.max(1)).try_for_each(|_| run())?;
        driver.synchronize()?;
        println!("{}", t.elapsed().as_secs_f64() / n.max(1) as f64);
    }
    flash_attn_rocm::triton::take_faults(driver)?;
    Ok(())
}
