//! From a validated [`AttnCall`] and device addresses to the Triton kernels' launch: grid, key
//! splits and the exact argument structs. Pure Rust, tested in every build.
use super::args::{ArgValue, FwdArgs, MergeArgs};
use super::registry::{Family, KernelImage, Tile};
use super::select::Kernels;
use super::split;
use super::tma;
use crate::device::{DeviceBuffers, TensorMap, TiledView};
use crate::params::{AttnCall, Mode};
use candle::Result;

/// Bytes per element of the f16/bf16 tensors the kernels read.
pub(super) const ELEM: usize = 2;
/// The kernels load head-dim rows as 16-byte vectors: addresses and strides must allow it.
const ALIGN_BYTES: usize = 16;
/// CUDA and HIP cap grid dimensions y and z at 65535.
const MAX_GRID_YZ: usize = 65535;

/// Programs per compute unit from which a decode grid runs the batched decode tile
/// ([`Kernels::batched`]): on sm_90 at d = 128 the decode tile's program holds an SM alone (136
/// KiB of shared memory: two 128-key K/V tiles in flight), so every further wave starts with an
/// empty pipeline, where the batched tile's 5-6 programs per SM cover each other's starts. H200,
/// GQA 32/8, d = 128, f16 (JIT; kernels/aot.py has the figures): from 2.4 programs per SM on,
/// 2-11% faster than the decode tile at 512 to 2k keys (one shape of eight, 96 x 1k at 5.8 per
/// SM, 0.7% slower); at 1.9 per SM 0.8% slower (32 x 2k). A grid this large is never split
/// ([`split::choose`] finds the device full with it as it is).
pub const BATCHED_DECODE_WAVES: usize = 2;

/// One call's launch: the kernels, the attention grid and how the keys are split.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// The code objects that serve the call (attention kernel and merge).
    pub kernels: Kernels,
    /// `(query blocks, batch x k/v heads, splits)`.
    pub grid: [u32; 3],
    /// Programs along the keys of each (query block, sequence, k/v head); above 1 the
    /// programs write split accumulators that `attn_merge` combines.
    pub num_splits: usize,
    /// Keys per split (a multiple of the tile's BLOCK_N).
    pub split_len: usize,
    /// `attn_merge`'s grid, used when `num_splits > 1`: `attn_fwd`'s query blocks re-cut to
    /// the merge's rows per program, over the same sequences and k/v heads.
    pub merge_grid: [u32; 3],
}

impl Plan {
    /// Grid and splits for `call` on a device with `units` compute units (CUs / SMs).
    pub fn new(call: &AttnCall, kernels: Kernels, units: usize) -> Result<Self> {
        // No query rows at all (a varlen q of zero rows, whatever max_seqlen_q says): nothing to
        // launch, so nothing to split either.
        let rows = if call.total_q == 0 { 0 } else { call.max_seqlen_q * call.group_size() };
        let heads = call.batch * call.num_heads_k;
        let programs_of = |fwd: &KernelImage| rows.div_ceil(fwd.block_m as usize) * heads;
        // The TMA kernel, one program per (query block of its tile, sequence, query head), where it
        // serves the call and its grid fills the device: it never splits the keys, so a smaller
        // grid is left to the kernel that does.
        if let Some(tma) = kernels.tma() {
            let blocks_m = if call.total_q == 0 { 0 } else { call.max_seqlen_q.div_ceil(tma.fwd.block_m as usize) };
            let heads = call.batch * call.num_heads;
            if blocks_m * heads >= units {
                let grid = match tma.fwd.tile {
                    // One program per SM, walking the blocks (kernels/attention_ws.py).
                    Tile::PrefillWalk => [u32_of("programs", units)?, 1, 1],
                    _ => [u32_of("query blocks", blocks_m)?, u32_of("batch x heads", heads)?, 1],
                };
                return Ok(Self {
                    kernels: tma,
                    grid,
                    num_splits: 1,
                    split_len: call.max_seqlen_k.max(1).next_multiple_of(tma.fwd.block_n as usize),
                    merge_grid: [0, 0, 1],
                });
            }
        }
        let kernels = match kernels.batched() {
            Some(batched) if programs_of(kernels.fwd) >= BATCHED_DECODE_WAVES * units.max(1) => batched,
            _ => kernels,
        };
        let fwd: &KernelImage = kernels.fwd;
        let blocks_m = rows.div_ceil(fwd.block_m as usize);
        let (num_splits, split_len) = match blocks_m {
            0 => (1, call.max_seqlen_k.max(1).next_multiple_of(fwd.block_n as usize)),
            _ => {
                let block_n = fwd.block_n as usize;
                split::choose(programs_of(fwd), fwd.threads as usize, resident(fwd), split_keys(call, block_n), block_n, units)
            }
        };
        if heads > MAX_GRID_YZ {
            candle::bail!(
                "flash-attn-rocm: batch x k/v heads = {heads} exceeds the grid limit {MAX_GRID_YZ} of the Triton path"
            )
        }
        let merge_blocks = rows.div_ceil(kernels.merge.block_m as usize);
        Ok(Self {
            kernels,
            grid: [u32_of("query blocks", blocks_m)?, heads as u32, num_splits as u32],
            num_splits,
            split_len,
            merge_grid: [u32_of("merge blocks", merge_blocks)?, heads as u32, 1],
        })
    }

    /// f32 elements of the split accumulators `(l_acc, o_acc)`: `(splits, rows, h)` and
    /// `(splits, rows, h, d)`; `(0, 0)` when the keys are not split.
    pub fn scratch_lens(&self, call: &AttnCall) -> (usize, usize) {
        if self.num_splits <= 1 {
            return (0, 0);
        }
        let l = self.num_splits * call.total_q * call.num_heads;
        (l, l * call.head_dim)
    }

    /// Whether the grid has any program (calls without query rows launch nothing).
    pub fn is_empty(&self) -> bool {
        self.grid.contains(&0)
    }
}

/// Keys the splits of one query block must cover: `attn_fwd` counts them from the block's first
/// key tile, so a window's span (`Window::key_span`) plus that tile's alignment, at most the
/// longest sequence. `mm_prefix_ranges` can lift the window anywhere: the whole sequence.
fn split_keys(call: &AttnCall, block_n: usize) -> usize {
    match call.mm_prefix {
        Some(_) => call.max_seqlen_k,
        None => call.max_seqlen_k.min(call.window.key_span(call.max_seqlen_q, call.max_seqlen_k) + block_n - 1),
    }
}

/// Programs of `fwd` the split may count on per compute unit: paged decode programs as many as
/// their shared memory lets in (each keeps one K/V tile in flight: the table load takes a
/// pipeline stage), every other kernel one. Flat decode on sm_90 keeps two tiles in flight; a
/// second resident flat program was mixed on an H200 (d=32 and 256 faster, d=64 up to 6%
/// slower), so it is not counted on.
fn resident(fwd: &KernelImage) -> usize {
    match (fwd.tile, fwd.paged) {
        (Tile::Decode, true) => split::decode_resident(fwd.shared as usize, fwd.target),
        _ => 1,
    }
}

/// `attn_fwd`'s arguments for `call` on `buffers`, after checking what the kernels assume:
/// 16-byte aligned rows, 32-bit offsets, an LSE buffer, accumulators for split calls.
pub fn fwd_args(call: &AttnCall, buffers: &DeviceBuffers, plan: &Plan) -> Result<FwdArgs> {
    let group = call.mode != Mode::Batch;
    let (h, d) = (call.num_heads, call.head_dim);
    if buffers.lse == 0 {
        candle::bail!("flash-attn-rocm: the Triton kernels always write the LSE: pass an f32 buffer of lse_dims()")
    }
    if buffers.fault == 0 {
        candle::bail!("flash-attn-rocm: the Triton kernels report bad side tensors to a fault word: pass the one Driver::queue_with_fault_word gives the call")
    }
    if plan.num_splits > 1 {
        if buffers.lse_acc == 0 || buffers.o_acc == 0 {
            candle::bail!("flash-attn-rocm: a split call needs the accumulators of Plan::scratch_lens")
        }
        // The merge reads o_acc rows (head_dim f32, a multiple of 4) as 16-byte vectors.
        aligned_f32("o_acc", buffers.o_acc)?;
        aligned_f32("lse_acc", buffers.lse_acc)?;
    }
    let q = aligned("q", buffers.q + call.q.offset * ELEM, &[call.q.batch_stride, call.q.row_stride, call.q.head_stride])?;
    let k = aligned("k", buffers.k + call.k.offset * ELEM, &[call.k.batch_stride, call.k.row_stride, call.k.head_stride])?;
    let v = aligned("v", buffers.v + call.v.offset * ELEM, &[call.v.batch_stride, call.v.row_stride, call.v.head_stride])?;
    aligned("out", buffers.out, &[])?;
    // Offsets the kernels form in 32 bits (the sequence/batch bases are 64-bit).
    // Rows of the last query block past the sequence still form addresses (masked loads).
    let q_rows = call.max_seqlen_q + plan.kernels.fwd.block_m as usize;
    int("q rows x q row stride", q_rows * call.q.row_stride)?;
    int("q heads x q head stride", h * call.q.head_stride)?;
    let k_rows = match &call.seqs.paging {
        Some(p) => p.page_block_size,
        None => call.max_seqlen_k,
    };
    for (name, view) in [("k", &call.k), ("v", &call.v)] {
        int(&format!("{name} rows x row stride"), (k_rows + plan.kernels.fwd.block_n as usize) * view.row_stride)?;
        int(&format!("{name} heads x head stride"), call.num_heads_k * view.head_stride)?;
    }
    int("heads x rows (LSE)", h * call.total_q)?;
    // Window arithmetic on positions stays far from i32 overflow.
    if call.max_seqlen_k.max(call.max_seqlen_q) >= 1 << 30 {
        candle::bail!("flash-attn-rocm: sequences of 2^30 or more tokens are not supported by the Triton path")
    }
    let (stride_lb, stride_lh) = if group { (0, call.total_q) } else { (h * call.max_seqlen_q, call.max_seqlen_q) };
    let paging = call.seqs.paging.as_ref();
    // Bounds the kernels check each sequence's cumulative seqlens against (varlen modes).
    let kv_rows = match (paging, call.seqs.unread()) {
        (Some(_), _) => i32::MAX as usize,
        (None, Some(unread)) => unread.rows_k,
        (None, None) => call.seqs.iter().map(|s| s.k_start + s.k_len).max().unwrap_or(0),
    };
    let kv_len_cap = match paging {
        Some(p) => call.max_seqlen_k.min(p.max_blocks.saturating_mul(p.page_block_size)),
        None => call.max_seqlen_k,
    };
    let mm = call.mm_prefix.as_ref();
    Ok(FwdArgs {
        q,
        k,
        v,
        out: buffers.out as u64,
        lse: buffers.lse as u64,
        o_acc: buffers.o_acc as u64,
        l_acc: buffers.lse_acc as u64,
        cu_seqlens_q: if group { buffers.seqstart_q as u64 } else { 0 },
        cu_seqlens_k: if group { buffers.seqstart_k as u64 } else { 0 },
        block_table: if paging.is_some() { buffers.block_table as u64 } else { 0 },
        alibi_slopes: if call.alibi.is_some() { buffers.alibi_slopes as u64 } else { 0 },
        mm_prefix: if mm.is_some() { buffers.mm_prefix as u64 } else { 0 },
        fault: buffers.fault as u64,
        sm_scale: call.softmax_scale,
        softcap: call.softcap.unwrap_or(0.0),
        stride_qb: call.q.batch_stride as i64,
        stride_qm: int("q row stride", call.q.row_stride)?,
        stride_qh: int("q head stride", call.q.head_stride)?,
        stride_kb: call.k.batch_stride as i64,
        stride_kn: int("k row stride", call.k.row_stride)?,
        stride_kh: int("k head stride", call.k.head_stride)?,
        stride_vb: call.v.batch_stride as i64,
        stride_vn: int("v row stride", call.v.row_stride)?,
        stride_vh: int("v head stride", call.v.head_stride)?,
        stride_om: int("out row stride", h * d)?,
        stride_oh: int("out head stride", d)?,
        stride_lb: int("lse batch stride", stride_lb)?,
        stride_lh: int("lse head stride", stride_lh)?,
        stride_bt: int("block table row stride", if paging.is_some() { buffers.block_table_row_stride } else { 0 })?,
        stride_mmb: int("mm_prefix_ranges row stride", if mm.is_some() { buffers.mm_prefix_row_stride } else { 0 })?,
        is_varlen: group as i32,
        seqlen_q: int("seqlen_q", call.max_seqlen_q)?,
        seqlen_k: int("seqlen_k", call.max_seqlen_k)?,
        rows_per_batch: if group { 0 } else { int("seqlen_q", call.max_seqlen_q)? },
        total_rows: int("rows", call.total_q)?,
        kv_rows: int("rows of k", kv_rows.min(i32::MAX as usize))?,
        kv_len_cap: int("keys per sequence", kv_len_cap)?,
        num_heads: int("heads", h)?,
        num_heads_k: int("k/v heads", call.num_heads_k)?,
        head_dim: int("head dim", d)?,
        window_left: call.window.left,
        window_right: call.window.right,
        page_size: int("page_block_size", paging.map_or(1, |p| p.page_block_size))?,
        page_magic: page_magic(paging.map_or(1, |p| p.page_block_size)),
        num_blocks: int("k/v blocks", paging.map_or(0, |p| p.num_blocks))?,
        has_softcap: call.softcap.is_some() as i32,
        has_alibi: call.alibi.is_some() as i32,
        num_mm_ranges: int("mm_prefix ranges", mm.map_or(0, |m| m.max_ranges))?,
        num_splits: plan.num_splits as i32,
        split_len: int("split length", plan.split_len)?,
    })
}

/// The kernels a launch of `plan` runs and the arguments they get.
#[derive(Debug)]
pub struct KernelArgs {
    /// The forward image the launch takes ([`super::Kernels::fwd_for`]).
    pub fwd: &'static KernelImage,
    /// Its argument values, in its parameters' order.
    pub fwd_values: Vec<ArgValue>,
    /// The merge's arguments when the keys are split.
    pub merge: Option<MergeArgs>,
}

/// The arguments a launch of `plan` for `call` on `buffers` passes, checked as the launch
/// checks them; `encode` makes the TMA kernel's descriptors (the driver's, or any stand-in
/// where nothing is launched). Pure but for `encode`: the launch and
/// [`crate::plan::work::dry_run`] build their arguments here.
pub fn kernel_args(
    call: &AttnCall,
    plan: &Plan,
    buffers: &DeviceBuffers,
    mut encode: impl FnMut(&TiledView) -> Result<TensorMap>,
) -> Result<KernelArgs> {
    let fwd = fwd_args(call, buffers, plan)?;
    let image = plan.kernels.fwd_for(call, plan.num_splits, buffers);
    let fwd_values = match image.family {
        Family::FwdTma => {
            let views = tma::views(call, &fwd, image);
            let mut maps = [TensorMap::default(); 6];
            for i in 0..6 {
                // A power of two's second views are its first ones, and its kernel has no
                // parameters for them ([`TmaFwdArgs::values_for`]): no second encode.
                maps[i] = match i >= 3 && views[i] == views[i - 3] {
                    true => maps[i - 3],
                    false => encode(&views[i])?,
                };
            }
            tma::tma_args(call, &fwd, &views, maps)?.values_for(tma::head_parts(image.block_d).1 > 0)
        }
        _ => fwd.values(),
    };
    let merge = (plan.num_splits > 1).then(|| merge_args(&fwd));
    Ok(KernelArgs { fwd: image, fwd_values, merge })
}

/// `attn_merge`'s arguments, from the same call's `attn_fwd` arguments.
pub fn merge_args(fwd: &FwdArgs) -> MergeArgs {
    MergeArgs {
        out: fwd.out,
        lse: fwd.lse,
        o_acc: fwd.o_acc,
        l_acc: fwd.l_acc,
        cu_seqlens_q: fwd.cu_seqlens_q,
        cu_seqlens_k: fwd.cu_seqlens_k,
        stride_om: fwd.stride_om,
        stride_oh: fwd.stride_oh,
        stride_lb: fwd.stride_lb,
        stride_lh: fwd.stride_lh,
        is_varlen: fwd.is_varlen,
        seqlen_q: fwd.seqlen_q,
        seqlen_k: fwd.seqlen_k,
        rows_per_batch: fwd.rows_per_batch,
        total_rows: fwd.total_rows,
        kv_rows: fwd.kv_rows,
        kv_len_cap: fwd.kv_len_cap,
        num_heads: fwd.num_heads,
        num_heads_k: fwd.num_heads_k,
        head_dim: fwd.head_dim,
        num_splits: fwd.num_splits,
    }
}

/// `floor((2^32 - 1) / page_size)` as the i32 with its bits: `_divmod` in the kernels divides
/// key indices by the page size with it. `page_size` is at least 1 (validated).
pub fn page_magic(page_size: usize) -> i32 {
    (u32::MAX / page_size.max(1) as u32) as i32
}

/// Checks that an f32 accumulator starts on a 16-byte boundary.
fn aligned_f32(name: &str, addr: usize) -> Result<()> {
    if addr % ALIGN_BYTES != 0 {
        candle::bail!("flash-attn-rocm: the split accumulator {name} (address {addr:#x}) must be 16-byte aligned")
    }
    Ok(())
}

/// `addr` as a kernel pointer after checking it and the element `strides` allow 16-byte rows.
fn aligned(name: &str, addr: usize, strides: &[usize]) -> Result<u64> {
    if addr % ALIGN_BYTES != 0 || strides.iter().any(|s| (s * ELEM) % ALIGN_BYTES != 0) {
        candle::bail!(
            "flash-attn-rocm: the Triton kernels read {name} in 16-byte rows: its start (address {addr:#x}) and \
             strides {strides:?} (elements) must be multiples of 16 bytes; make {name} contiguous"
        )
    }
    Ok(addr as u64)
}

fn int(what: &str, value: usize) -> Result<i32> {
    i32::try_from(value).map_err(|_| {
        candle::Error::Msg(format!(
            "flash-attn-rocm: {what} = {value} exceeds the Triton kernels' 32-bit offsets (max {})",
            i32::MAX
        ))
    })
}

fn u32_of(what: &str, value: usize) -> Result<u32> {
    u32::try_from(value).map_err(|_| candle::Error::Msg(format!("flash-attn-rocm: {what} = {value} exceeds u32")))
}
