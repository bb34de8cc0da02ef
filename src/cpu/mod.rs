//! The CPU backend: a tiled flash-attention forward with the online softmax and f32
//! accumulation, on our own register-blocked products (AVX-512 or AVX2 chosen at run time, plain
//! Rust elsewhere; bf16 prefill on AMX tiles where the CPU has them; decode reading K/V in place,
//! `decode.rs`), parallel (rayon) over blocks of query rows and, for decode-like calls with few
//! rows, over splits of the keys. Blocks and splits depend on the shapes only, never on the
//! thread count, so results are bit-identical for any number of threads.

mod ahead;
#[cfg(target_arch = "x86_64")]
mod amx;
mod block;
mod decode;
mod element;
mod gemm;
mod lines;
mod mask;
mod plan;
mod products;
mod simd;
#[cfg(test)]
mod testing;

use crate::params::AttnCall;
use block::{Inputs, Scratch};
use candle::backend::BackendStorage;
use candle::{CpuStorage, Result};
use element::{Element, ZeroBits};
use plan::{Item, Plan};
use simd::Isa;

use rayon::prelude::*;
use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Runs `call` on host storages. Returns the output (q's dtype, contiguous in q's shape) and,
/// when asked, the f32 log-sum-exp laid out as [`AttnCall::lse_dims`].
pub fn forward(
    call: &AttnCall,
    q: &CpuStorage,
    k: &CpuStorage,
    v: &CpuStorage,
    want_lse: bool,
) -> Result<(CpuStorage, Option<Vec<f32>>)> {
    note_unoptimized_build();
    let alibi: Option<Vec<f32>> = match &call.alibi {
        Some(a) => Some(a.slopes.to_vec1()?),
        None => None,
    };
    let prefix = match &call.mm_prefix {
        Some(p) => Some(p.read()?),
        None => None,
    };
    macro_rules! run {
        ($variant:ident) => {{
            let (CpuStorage::$variant(q), CpuStorage::$variant(k), CpuStorage::$variant(v)) = (q, k, v) else {
                candle::bail!("flash-attn-rocm: q, k and v storages must share one dtype")
            };
            let inputs = Inputs {
                call,
                q,
                k,
                v,
                alibi_slopes: alibi.as_deref(),
                prefix_ranges: prefix.as_deref(),
            };
            let (out, lse) = run_all(&inputs, want_lse)?;
            (CpuStorage::$variant(out), lse)
        }};
    }
    Ok(match q {
        CpuStorage::F32(_) => run!(F32),
        CpuStorage::F16(_) => run!(F16),
        CpuStorage::BF16(_) => run!(BF16),
        other => candle::bail!("flash-attn-rocm: unsupported dtype {:?} on the cpu", other.dtype()),
    })
}

/// Says once per process, on stderr, that this library was compiled at opt-level 0 and how to
/// fix it (the build script sets the note then; build/main.rs says why it is needed at run time).
fn note_unoptimized_build() {
    if let Some(note) = option_env!("FLASH_ATTN_ROCM_UNOPTIMIZED_NOTE") {
        static NOTED: std::sync::Once = std::sync::Once::new();
        NOTED.call_once(|| eprintln!("flash-attn-rocm: {note}"));
    }
}

/// What [`forward`] will run `call` with: the instruction set and the work plan it computes
/// (the same functions, called once more: only under `explain` or `FLASH_ATTN_ROCM_LOG`).
pub(crate) fn dispatch(call: &AttnCall) -> Result<crate::Dispatch> {
    let isa = detect_isa()?;
    let plan = Plan::new(call);
    let splits = plan.items.iter().map(|item| item.splits).max().unwrap_or(1);
    // A small call runs on the calling thread (see `run_all`).
    let threads = if plan.is_small() { 1 } else { rayon::current_num_threads() };
    Ok(crate::Dispatch::cpu(call, isa.name(), plan.items.len(), splits, threads))
}

/// The name of the instruction set [`forward`] runs with (for tests of [`crate::explain`]).
#[cfg(test)]
pub(crate) fn dispatch_isa_name() -> Result<&'static str> {
    Ok(detect_isa()?.name())
}

/// This CPU's instruction set for the kernel, or the one `FLASH_ATTN_ROCM_CPU_ISA` forces.
fn detect_isa() -> Result<Isa> {
    Isa::detect().map_err(|e| candle::Error::Msg(format!("flash-attn-rocm: {e}")))
}

/// A raw output pointer shared by the blocks, each of which writes disjoint rows.
#[derive(Clone, Copy)]
struct SharedMut<T>(*mut T);
// SAFETY: blocks write pairwise disjoint elements (distinct (b, h, row) triples), so sending the
// pointer to other threads cannot create overlapping writes.
unsafe impl<T> Send for SharedMut<T> {}
// SAFETY: as above; the pointer is only written through at disjoint offsets.
unsafe impl<T> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    /// A method (not field access) so closures capture the whole `Sync` wrapper.
    fn ptr(&self) -> *mut T {
        self.0
    }
}

/// `len` zeros, or an `Err` as for [`filled`]; written by the pool's threads in chunks, where a
/// fill on the calling thread held every worker back (at 16 threads, bf16, s=1024, the Xeon's
/// workers spent only 56-70% of the call inside blocks). Xeon, 16 threads, non-causal, min of
/// 5-8 interleaved rounds: bf16 s=1024 2.89 -> 2.44 ms, f32 s=1024 7.54 -> 6.67, f32 s=4096
/// 117 -> 102; 2 threads unchanged within the box's noise.
fn zeros<T: ZeroBits + Send>(len: Option<usize>, what: &str) -> Result<Vec<T>> {
    /// Elements per chunk: 256 KiB of f32.
    const CHUNK: usize = 1 << 16;
    let (mut v, len) = reserved::<T>(len, what)?;
    let zero = |chunk: &mut [std::mem::MaybeUninit<T>]| {
        // SAFETY: the chunk is `chunk.len()` elements of spare capacity; all-zero bytes are a
        // valid T (`ZeroBits`).
        unsafe { std::ptr::write_bytes(chunk.as_mut_ptr(), 0, chunk.len()) }
    };
    let spare = &mut v.spare_capacity_mut()[..len];
    if len <= CHUNK {
        zero(spare);
    } else {
        spare.par_chunks_mut(CHUNK).for_each(zero);
    }
    // SAFETY: the first `len` elements were written above, within the reserved capacity.
    unsafe { v.set_len(len) };
    Ok(v)
}

/// An empty vector with room for `len` elements (`None`: the size overflowed), and `len`.
fn reserved<T>(len: Option<usize>, what: &str) -> Result<(Vec<T>, usize)> {
    let len = len.ok_or_else(|| candle::Error::Msg(format!("flash-attn-rocm: the {what} size overflows usize")))?;
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|e| candle::Error::Msg(format!("flash-attn-rocm: cannot allocate the {what} ({len} elements): {e}")))?;
    Ok((v, len))
}

/// `len` copies of `value`, or an `Err` when the memory cannot be had: an output too large to
/// allocate (a broadcast q of 2^37 rows, say) must not abort the process.
fn filled<T: Clone>(len: Option<usize>, value: T, what: &str) -> Result<Vec<T>> {
    let (mut v, len) = reserved::<T>(len, what)?;
    v.resize(len, value);
    Ok(v)
}

/// Register tiles per instruction set (see `gemm.rs`): rows × vectors of columns.
#[cfg(target_arch = "x86_64")]
struct Avx512;
#[cfg(target_arch = "x86_64")]
struct Avx2;
struct Portable;

#[cfg(target_arch = "x86_64")]
impl gemm::Blocking for Avx512 {
    type V = simd::F32x16;
    type T = simd::F32x8;
    const MR: usize = 12;
    const NV: usize = 2;
    const DOT_KEYS: usize = 4;
    const OUT_VECS: usize = 4;
}

#[cfg(target_arch = "x86_64")]
impl gemm::Blocking for Avx2 {
    type V = simd::F32x8;
    type T = simd::F32x8;
    const MR: usize = 6;
    const NV: usize = 2;
    const DOT_KEYS: usize = 2;
    const OUT_VECS: usize = 2;
}

impl gemm::Blocking for Portable {
    type V = simd::Portable8;
    type T = simd::Portable8;
    const MR: usize = 4;
    const NV: usize = 2;
    const DOT_KEYS: usize = 2;
    const OUT_VECS: usize = 2;
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn run_avx512<T: Element>(inp: &Inputs<'_, T>, item: &Item, s: &mut Scratch) {
    // SAFETY: the caller checked the features (Isa::Avx512).
    unsafe { block::run::<T, products::F32<Avx512>>(inp, item.block, s) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_avx2<T: Element>(inp: &Inputs<'_, T>, item: &Item, s: &mut Scratch) {
    // SAFETY: the caller checked the features (Isa::Avx2).
    unsafe { block::run::<T, products::F32<Avx2>>(inp, item.block, s) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16,avx2,fma,f16c")]
unsafe fn run_amx(inp: &Inputs<'_, half::bf16>, item: &Item, s: &mut Scratch) {
    // SAFETY: the caller checked the features and AMX (Isa::Avx512Amx).
    unsafe { amx::run(inp, item.block, s) }
}

/// AMX serves bf16 blocks of one k/v head with many rows (prefill); decode blocks are bound by
/// memory, and the f32 kernel streams them.
#[cfg(target_arch = "x86_64")]
fn amx_block<'a, 'b, T: Element>(inp: &'b Inputs<'a, T>, item: &Item) -> Option<&'b Inputs<'a, half::bf16>> {
    let many_rows = item.block.heads == 1 && item.block.head_rows(inp.call) > 16;
    T::as_bf16(inp).filter(|_| many_rows)
}

fn run_block<T: Element>(isa: Isa, inp: &Inputs<'_, T>, item: &Item, s: &mut Scratch) {
    match isa {
        // SAFETY: `Isa::detect` found the features this entry point is compiled for.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Amx => match amx_block(inp, item) {
            Some(inp) => unsafe { run_amx(inp, item, s) },
            // SAFETY: as above (Avx512Amx includes Avx512).
            None => unsafe { run_avx512(inp, item, s) },
        },
        // SAFETY: `Isa::detect` found the features these entry points are compiled for.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { run_avx512(inp, item, s) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { run_avx2(inp, item, s) },
        // SAFETY: plain Rust vectors need no CPU feature.
        _ => unsafe { block::run::<T, products::F32<Portable>>(inp, item.block, s) },
    }
}

thread_local! {
    /// Each worker's block memory, kept between blocks and calls.
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// The output rows of one block before normalization: only blocks that are one split of a
/// row set's keys keep them, to be merged in split order.
struct Partial {
    acc: Vec<f32>,
    row_max: Vec<f32>,
    row_sum: Vec<f32>,
}

fn run_all<T: Element>(inp: &Inputs<'_, T>, want_lse: bool) -> Result<(Vec<T>, Option<Vec<f32>>)> {
    let call = inp.call;
    let d = call.head_dim;
    let out_len = call.total_q.checked_mul(call.num_heads).and_then(|n| n.checked_mul(d));
    let mut out = zeros::<T>(out_len, "output")?;
    let mut lse = if want_lse {
        filled(call.lse_dims().iter().try_fold(1usize, |n, &x| n.checked_mul(x)), f32::NEG_INFINITY, "LSE")?
    } else {
        Vec::new()
    };
    let writer = Writer { call, out: SharedMut(out.as_mut_ptr()), out_len: out.len(), lse: SharedMut(lse.as_mut_ptr()), lse_len: lse.len(), want_lse };
    let plan = Plan::new(call);
    let isa = detect_isa()?;
    let work = |item: &Item| -> Option<Partial> {
        SCRATCH.with(|cell| {
            let mut s = cell.borrow_mut();
            run_block(isa, inp, item, &mut s);
            let rows = item.block.rows(call);
            if item.splits == 1 {
                writer.write(item, 0, &s.acc, &s.row_max[..rows], &s.row_sum[..rows]);
                None
            } else {
                Some(Partial { acc: s.acc.to_vec(), row_max: s.row_max[..rows].to_vec(), row_sum: s.row_sum[..rows].to_vec() })
            }
        })
    };
    // Small calls (decode over a short cache) run on the calling thread: waking the pool would
    // cost more than the work. The result is the same either way.
    let partials: Vec<Option<Partial>> = if plan.is_small() {
        plan.items.iter().map(work).collect()
    } else {
        costliest_first(&plan, work)
    };
    // Splits merge in parallel over row chunks too: a decode call of one sequence is one row
    // set, whose merge would otherwise run on one thread.
    let firsts = plan.items.iter().enumerate().filter(|(_, it)| it.splits > 1 && it.split == 0).map(|(i, _)| i);
    let tasks: Vec<(usize, usize)> =
        firsts.flat_map(|first| (0..plan.items[first].block.rows(call)).step_by(MERGE_ROWS).map(move |r0| (first, r0))).collect();
    let merge = |&(first, r0): &(usize, usize)| {
        let item = &plan.items[first];
        let rows = MERGE_ROWS.min(item.block.rows(call) - r0);
        let parts: Vec<&Partial> = partials[first..first + item.splits].iter().map(|p| p.as_ref().expect("a split keeps its partial")).collect();
        let merged = merge_splits(&parts, r0, rows, d);
        writer.write(item, r0, &merged.acc, &merged.row_max, &merged.row_sum);
    };
    if plan.is_small() {
        tasks.iter().for_each(merge);
    } else {
        tasks.par_iter().for_each(merge);
    }
    Ok((out, want_lse.then_some(lse)))
}

/// `work` on every item, on the pool's threads, each taking the costliest item left (greedy
/// longest-first); the results in item order. A causal call's blocks grow with their position,
/// and splitting the item list in halves, as `par_iter` does, left the costliest to the end
/// (at 16 threads, bf16, s=1024, causal, the workers spent 71-74% of the call inside blocks).
/// Against that, alternating in one process on the Xeon (min of 16 rounds): causal calls at 16
/// threads 6-14% faster (bf16, f32, f16; s=1024 and 4096), at 2 threads 1-4% by the median;
/// non-causal calls within 1.2% by the median of 24 rounds.
fn costliest_first<R: Send>(plan: &Plan, work: impl Fn(&Item) -> R + Sync) -> Vec<R> {
    let order = plan.costliest_first();
    let next = AtomicUsize::new(0);
    let ran: Vec<Vec<(usize, R)>> = (0..rayon::current_num_threads())
        .into_par_iter()
        .map(|_| {
            let mut mine = Vec::new();
            while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                mine.push((i, work(&plan.items[i])));
            }
            mine
        })
        .collect();
    let mut results: Vec<Option<R>> = std::iter::repeat_with(|| None).take(plan.items.len()).collect();
    for (i, r) in ran.into_iter().flatten() {
        results[i] = Some(r);
    }
    results.into_iter().map(|r| r.expect("every item ran once")).collect()
}

/// Rows per task of the split merge.
const MERGE_ROWS: usize = 8;

/// Combines the splits of rows `r0..r0 + rows` of one row set, in split order: every row's
/// output is the splits' outputs weighted by `e^(max_s - max)`, its sum likewise.
fn merge_splits(parts: &[&Partial], r0: usize, rows: usize, d: usize) -> Partial {
    let mut merged = Partial { acc: vec![0.0; rows * d], row_max: vec![f32::NEG_INFINITY; rows], row_sum: vec![0.0; rows] };
    for i in 0..rows {
        let r = r0 + i;
        let max = parts.iter().fold(f32::NEG_INFINITY, |m, p| m.max(p.row_max[r]));
        if max == f32::NEG_INFINITY {
            continue;
        }
        let out = &mut merged.acc[i * d..(i + 1) * d];
        for p in parts {
            let weight = (p.row_max[r] - max).exp();
            merged.row_sum[i] += p.row_sum[r] * weight;
            for (o, x) in out.iter_mut().zip(&p.acc[r * d..(r + 1) * d]) {
                *o += x * weight;
            }
        }
        merged.row_max[i] = max;
    }
    merged
}

/// Writes finished rows into the output (and LSE) buffers.
struct Writer<'a, T> {
    call: &'a AttnCall,
    out: SharedMut<T>,
    out_len: usize,
    lse: SharedMut<f32>,
    lse_len: usize,
    want_lse: bool,
}

impl<T: Element> Writer<'_, T> {
    /// Normalizes the rows `r0..r0 + row_max.len()` of `item` (`acc` those rows × d, with
    /// their max and sum) and stores them. Each (sequence, head, position) is written by exactly
    /// one item (and row chunk of its merge).
    fn write(&self, item: &Item, r0: usize, acc: &[f32], row_max: &[f32], row_sum: &[f32]) {
        let call = self.call;
        let d = call.head_dim;
        // One normalized row at a time, narrowed by a slice conversion (vectorized for f16).
        let mut row = vec![0.0f32; d];
        let out_at = |r: usize| item.block.row(call, r).map(|(pos, h)| (call.out_offset(item.block.b, h, pos), pos, h));
        // Output rows lie a page apart as the inputs' do: ask for them a few rows ahead.
        let ask = |r: usize| {
            if let Some((at, _, _)) = out_at(r).filter(|&(at, _, _)| at + d <= self.out_len) {
                // SAFETY: `at + d <= out_len` (checked): the row lies inside the output.
                block::prefetch(unsafe { std::slice::from_raw_parts(self.out.ptr().add(at).cast_const(), d) }, block::Level::L1);
            }
        };
        let end = r0 + row_max.len();
        (r0..(r0 + block::PREFETCH_ROWS).min(end)).for_each(ask);
        for (i, r) in (r0..end).enumerate() {
            if r + block::PREFETCH_ROWS < end {
                ask(r + block::PREFETCH_ROWS);
            }
            let Some((at, pos, h)) = out_at(r) else { continue };
            assert!(at + d <= self.out_len);
            // SAFETY: `at + d <= out_len` (checked), and no other item writes row (b, h, pos):
            // the plan partitions the (b, h, position) space (splits merge before writing).
            let dst = unsafe { std::slice::from_raw_parts_mut(self.out.ptr().add(at), d) };
            let inv = if row_sum[i] > 0.0 { 1.0 / row_sum[i] } else { 0.0 };
            for (o, x) in row.iter_mut().zip(&acc[i * d..(i + 1) * d]) {
                *o = *x * inv;
            }
            T::from_f32_slice(&row, dst);
            if self.want_lse {
                let li = call.lse_index(item.block.b, h, pos);
                assert!(li < self.lse_len);
                let value = if row_sum[i] > 0.0 { row_max[i] + row_sum[i].ln() } else { f32::NEG_INFINITY };
                // SAFETY: in bounds (checked) and written by this item only, as above.
                unsafe { *self.lse.ptr().add(li) = value };
            }
        }
    }
}
