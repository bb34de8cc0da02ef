//! A token loop over a paged K/V cache on Candle's CUDA device: several sequences of different
//! lengths, one query row each per step, the new key/value rows written into their pages, and
//! `flash_attn_varlen_paged_windowed` reading the cache through a shuffled block table.
//!
//! It shows two things:
//! - **No host synchronization in the attention calls.** Before the loop, the GPU is given a
//!   long matmul chain to chew on; the host then queues the steps. Had a call waited for the GPU
//!   (a seqlens read-back, a synchronize), queueing would have taken at least as long as that
//!   chain; the example prints the times of the whole loop, of its cache writes alone and of
//!   its attention calls alone, and fails if the attention calls were not queued sooner.
//! - **Correct results.** After the loop, every step is recomputed by the CPU backend from the
//!   final cache (a step reads only the keys that existed then) and compared.
//!
//!   cargo run --release --features candle-cuda --example paged_decode -- [--page N] [--seqs N] [--steps N]
use anyhow::{bail, ensure, Context, Result};
use candle::{DType, Device, IndexOp, Tensor};
use flash_attn_rocm::flash_attn_varlen_paged_windowed;
use rand::{rngs::StdRng, seq::SliceRandom, Rng, SeedableRng};
use std::time::Instant;

const USAGE: &str = "usage: paged_decode [--page N (16)] [--seqs N (8)] [--steps N (64)] [--max-len N (8192)] [--seed N]";
const HEADS: usize = 32;
const KV_HEADS: usize = 8;
const HEAD_DIM: usize = 128;
/// Matmuls of 4096² f32 in the busy chain: about half a second on an H100.
const CHAIN: usize = 200;

struct Args {
    page: usize,
    seqs: usize,
    steps: usize,
    max_len: usize,
    seed: u64,
}

fn parse_args() -> Result<Args> {
    let mut args = Args { page: 16, seqs: 8, steps: 64, max_len: 8192, seed: 7 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let value: u64 = it.next().with_context(|| format!("{flag} needs a value\n{USAGE}"))?.parse()?;
        match flag.as_str() {
            "--page" => args.page = value as usize,
            "--seqs" => args.seqs = value as usize,
            "--steps" => args.steps = value as usize,
            "--max-len" => args.max_len = value as usize,
            "--seed" => args.seed = value,
            other => bail!("unknown flag {other}\n{USAGE}"),
        }
    }
    ensure!(args.page > 0 && args.seqs > 0 && args.steps > 0 && args.max_len > 1, "{USAGE}");
    Ok(args)
}

/// The cumulative `[0, l0, l0 + l1, ...]` of `lens`.
fn cumulative(lens: impl Iterator<Item = usize>) -> Vec<u32> {
    std::iter::once(0).chain(lens.scan(0u32, |sum, l| { *sum += l as u32; Some(*sum) })).collect()
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let dev = Device::new_cuda(0)?;
    let mut rng = StdRng::seed_from_u64(args.seed);
    let (b, page, steps) = (args.seqs, args.page, args.steps);
    // Each sequence starts with its own prompt length; all grow by one key per step.
    let start_lens: Vec<usize> = (0..b).map(|_| rng.gen_range(1..args.max_len)).collect();
    let pages_per_seq: Vec<usize> = start_lens.iter().map(|l| (l + steps).div_ceil(page)).collect();
    let max_pages = *pages_per_seq.iter().max().unwrap();
    let num_blocks: usize = pages_per_seq.iter().sum::<usize>() + 3;
    // A shuffled block table: a sequence's pages lie anywhere in the cache.
    let mut ids: Vec<u32> = (0..num_blocks as u32).collect();
    ids.shuffle(&mut rng);
    let mut table = vec![0u32; b * max_pages];
    let mut next_id = ids.into_iter();
    for (i, &n) in pages_per_seq.iter().enumerate() {
        for p in 0..n {
            table[i * max_pages + p] = next_id.next().unwrap();
        }
    }
    println!(
        "{b} sequences of {}..{} keys (+{steps} steps), pages of {page}, {num_blocks} blocks, GQA {HEADS}/{KV_HEADS}, d={HEAD_DIM}, f16, {:?}",
        start_lens.iter().min().unwrap(),
        start_lens.iter().max().unwrap(),
        dev.location()
    );

    let dtype = DType::F16;
    let randn = |shape: &[usize]| -> Result<Tensor> { Ok(Tensor::randn(0f32, 1.0, shape, &dev)?.to_dtype(dtype)?) };
    // The cache as a flat list of rows, so a new key is one `slice_set` at its row.
    let rows = num_blocks * page;
    let k_rows = randn(&[rows, KV_HEADS, HEAD_DIM])?;
    let v_rows = randn(&[rows, KV_HEADS, HEAD_DIM])?;
    let k_cache = k_rows.reshape((num_blocks, page, KV_HEADS, HEAD_DIM))?;
    let v_cache = v_rows.reshape((num_blocks, page, KV_HEADS, HEAD_DIM))?;
    let block_table = Tensor::from_vec(table.clone(), (b, max_pages), &dev)?;
    // Everything the loop reads, uploaded before it: the queries and new rows of every step,
    // and every step's cumulative key counts (row t of a `(steps, b + 1)` tensor).
    let q_all = randn(&[steps, b, HEADS, HEAD_DIM])?;
    let k_new = randn(&[steps, b, KV_HEADS, HEAD_DIM])?;
    let v_new = randn(&[steps, b, KV_HEADS, HEAD_DIM])?;
    let seqlens_q = Tensor::new(cumulative(std::iter::repeat_n(1, b)).as_slice(), &dev)?;
    let all_k: Vec<u32> = (0..steps).flat_map(|t| cumulative(start_lens.iter().map(|l| l + t + 1))).collect();
    let seqlens_k = Tensor::from_vec(all_k, (steps, b + 1), &dev)?;
    let max_k = start_lens.iter().max().unwrap() + steps;
    let scale = 1.0 / (HEAD_DIM as f32).sqrt();

    // Step t: the sequences' new key/value rows into their pages, then attention.
    let write = |t: usize| -> Result<()> {
        for (i, len) in start_lens.iter().enumerate() {
            let pos = len + t;
            let row = table[i * max_pages + pos / page] as usize * page + pos % page;
            k_rows.slice_set(&k_new.i((t, i))?.unsqueeze(0)?, 0, row)?;
            v_rows.slice_set(&v_new.i((t, i))?.unsqueeze(0)?, 0, row)?;
        }
        Ok(())
    };
    let attend = |t: usize| -> Result<Tensor> {
        let seqlens_k_t = seqlens_k.i(t)?;
        Ok(flash_attn_varlen_paged_windowed(
            &q_all.i(t)?, &k_cache, &v_cache, &seqlens_q, &seqlens_k_t, &block_table, None, 1, max_k, scale, None, None,
            page, None,
        )?)
    };
    let step = |t: usize| -> Result<Tensor> {
        write(t)?;
        attend(t)
    };

    // A chain of matmuls that keeps the GPU busy for a while (cuBLAS warmed up first).
    let m = Tensor::randn(0f32, 1.0, (4096, 4096), &dev)?;
    let queue_chain = || -> Result<Tensor> {
        let mut chain = m.clone();
        for _ in 0..CHAIN {
            chain = chain.matmul(&m)?.affine(1e-2, 0.0)?;
        }
        Ok(chain)
    };
    // Warm up (kernel loading, cuBLAS), and time the chain alone.
    step(0)?;
    queue_chain()?;
    dev.synchronize()?;
    let alone = Instant::now();
    queue_chain()?;
    dev.synchronize()?;
    let chain_only = alone.elapsed();
    // The loop queued behind the chain, then each half of it alone behind the chain: the cache
    // writes and the attention calls. Time to queue a part shorter than the chain means none
    // of its calls waited for the GPU.
    let behind_chain = |part: &dyn Fn(usize) -> Result<Option<Tensor>>| -> Result<(f64, Vec<Tensor>)> {
        let chain_start = Instant::now();
        queue_chain()?;
        let outs = (0..steps).map(part).collect::<Result<Vec<_>>>()?;
        let queued = chain_start.elapsed().as_secs_f64() * 1e3;
        dev.synchronize()?;
        Ok((queued, outs.into_iter().flatten().collect()))
    };
    let (loop_ms, outs) = behind_chain(&|t| step(t).map(Some))?;
    let (writes_ms, _) = behind_chain(&|t| write(t).map(|()| None))?;
    let (attends_ms, _) = behind_chain(&|t| attend(t).map(|_| None))?;
    let chain_ms = chain_only.as_secs_f64() * 1e3;
    println!("the chain alone runs {chain_ms:.1} ms on the GPU; queued behind it, the host was done with (chain included):");
    println!("  {steps} steps (writes + attention): {loop_ms:.1} ms");
    println!("  their cache writes alone (candle's slice_set): {writes_ms:.1} ms");
    println!("  their attention calls alone: {attends_ms:.1} ms");
    ensure!(
        attends_ms < chain_ms,
        "the attention calls were queued only after the GPU finished the chain: one of them synchronized"
    );
    println!("the attention calls never wait for the GPU: all {steps} were queued while it was still on the chain");

    // Correctness: each step against the CPU backend on the final cache.
    let cpu = Device::Cpu;
    let (k_c, v_c, table_c) = (k_cache.to_device(&cpu)?, v_cache.to_device(&cpu)?, block_table.to_device(&cpu)?);
    let (q_c, sq_c, sk_c) = (q_all.to_device(&cpu)?, seqlens_q.to_device(&cpu)?, seqlens_k.to_device(&cpu)?);
    let mut worst = 0f32;
    for (t, out) in outs.iter().enumerate() {
        let expected = flash_attn_varlen_paged_windowed(
            &q_c.i(t)?, &k_c, &v_c, &sq_c, &sk_c.i(t)?, &table_c, None, 1, max_k, scale, None, None, page, None,
        )?;
        let diff = (out.to_device(&cpu)?.to_dtype(DType::F32)? - expected.to_dtype(DType::F32)?)?.abs()?;
        worst = worst.max(diff.flatten_all()?.max(0)?.to_scalar::<f32>()?);
    }
    println!("max |GPU - CPU| over {steps} steps: {worst:.2e}");
    ensure!(worst < 4e-3, "the GPU's steps differ from the CPU backend's by {worst}");
    Ok(())
}
