//! From a validated [`AttnCall`] and device addresses to the exact [`CkFwdParams`] handed to CK,
//! following flash-attention's csrc/flash_attn_ck (mha_fwd.cpp, mha_varlen_fwd.cpp). Pure Rust:
//! compiled and tested in every build, whether or not ROCm is present.
use super::ffi::{CkBias, CkDtype, CkFwdParams, CkMask};
use super::splitkv::{AccumulatorStrides, SplitKv, CK_MAX_SPLITS};
use crate::device::DeviceBuffers;
use crate::params::{AttnCall, Mode};
use candle::{DType, Result};

/// CK's receipt-2 forward tiles stop at head dim 256.
pub const CK_MAX_HEAD_DIM: usize = 256;
/// `fmha_fwd`'s ALiBi uses `__builtin_amdgcn_sad_u16`: query/key positions must fit 16 bits
/// (the split-KV kernels use 32-bit operands).
pub const CK_ALIBI_MAX_DISTANCE: usize = 65536;
/// flash-attention's CK path requires paged K/V blocks of a multiple of 128 rows
/// (mha_varlen_fwd.cpp), the K/V tile length of the split-KV kernels.
pub const CK_PAGE_BLOCK_MULTIPLE: usize = 128;

/// The CK arguments for `call` on `buffers`, or an error naming what CK cannot serve. Paged
/// calls run on the split-KV kernels and need their `split` plan ([`super::plan_split_kv`]),
/// which sized the accumulators in `buffers`; other calls take `None`.
pub fn ck_fwd_params(call: &AttnCall, buffers: &DeviceBuffers, split: Option<&SplitKv>) -> Result<CkFwdParams> {
    check_supported(call)?;
    match (call.mode == Mode::Paged, split) {
        (true, None) => candle::bail!("flash-attn-rocm: a paged call needs its split-KV plan (rocm::plan_split_kv)"),
        (false, Some(_)) => candle::bail!("flash-attn-rocm: only paged calls run on CK's split-KV kernels"),
        _ => {}
    }
    let elem = 2; // fp16 and bf16
    let group = call.mode != Mode::Batch;
    let (h, d) = (call.num_heads, call.head_dim);
    let out_rows_per_batch = if group { 0 } else { call.max_seqlen_q };
    let window = call.window;
    let mask = if window.is_unbounded() { CkMask::NoMask } else { CkMask::BottomRight };
    let mut p = CkFwdParams {
        dtype: if call.dtype == DType::F16 { CkDtype::Fp16 } else { CkDtype::Bf16 },
        is_group_mode: group,
        has_logits_soft_cap: call.softcap.is_some(),
        mask_type: mask,
        bias_type: if call.alibi.is_some() { CkBias::Alibi } else { CkBias::NoBias },
        has_lse: buffers.lse != 0,
        q_ptr: buffers.q + call.q.offset * elem,
        k_ptr: buffers.k + call.k.offset * elem,
        v_ptr: buffers.v + call.v.offset * elem,
        o_ptr: buffers.out,
        lse_ptr: buffers.lse,
        alibi_slopes_ptr: if call.alibi.is_some() { buffers.alibi_slopes } else { 0 },
        seqstart_q_ptr: if group { buffers.seqstart_q } else { 0 },
        seqstart_k_ptr: if group { buffers.seqstart_k } else { 0 },
        block_table_ptr: if call.mode == Mode::Paged { buffers.block_table } else { 0 },
        stream: buffers.stream,
        batch: int("batch", call.batch)?,
        // Group mode: the totals (CK reads per-sequence lengths from the seqstarts).
        seqlen_q: int("seqlen_q", if group { call.total_q } else { call.max_seqlen_q })?,
        seqlen_k: int("seqlen_k", if group { total_k(call) } else { call.max_seqlen_k })?,
        max_seqlen_q: int("max_seqlen_q", call.max_seqlen_q)?,
        hdim_q: int("head_dim", d)?,
        hdim_v: int("head_dim", d)?,
        nhead_q: int("num_heads", h)?,
        nhead_k: int("num_heads_k", call.num_heads_k)?,
        scale_s: call.softmax_scale,
        logits_soft_cap: call.softcap.unwrap_or(0.0),
        window_size_left: if mask == CkMask::NoMask { -1 } else { window.left },
        window_size_right: if mask == CkMask::NoMask { -1 } else { window.right },
        stride_q: int("q row stride", call.q.row_stride)?,
        stride_k: int("k row stride", call.k.row_stride)?,
        stride_v: int("v row stride", call.v.row_stride)?,
        stride_o: int("out row stride", h * d)?,
        nhead_stride_q: int("q head stride", call.q.head_stride)?,
        nhead_stride_k: int("k head stride", call.k.head_stride)?,
        nhead_stride_v: int("v head stride", call.v.head_stride)?,
        nhead_stride_o: int("out head stride", d)?,
        batch_stride_q: int("q batch stride", call.q.batch_stride)?,
        batch_stride_k: int("k batch stride", call.k.batch_stride)?,
        batch_stride_v: int("v batch stride", call.v.batch_stride)?,
        batch_stride_o: int("out batch stride", out_rows_per_batch * h * d)?,
        // Slopes are (h,), shared by every sequence.
        stride_alibi_slopes: 0,
        ..CkFwdParams::default()
    };
    if p.has_lse {
        let lse_dims = call.lse_dims();
        // (b, h, s_q) in batch mode, (h, total_q) in group mode.
        p.nhead_stride_lse = int("lse head stride", *lse_dims.last().unwrap_or(&0))?;
        p.batch_stride_lse = if group { 0 } else { int("lse batch stride", h * call.max_seqlen_q)? };
    }
    if let (Some(paging), Some(split)) = (&call.seqs.paging, split) {
        p.page_block_size = int("page_block_size", paging.page_block_size)?;
        p.batch_stride_block_table = int("block table row stride", buffers.block_table_row_stride)?;
        p.lse_acc_ptr = buffers.lse_acc;
        p.o_acc_ptr = buffers.o_acc;
        let acc = AccumulatorStrides::of(call, split);
        p.num_splits = int("num_splits", split.num_splits)?;
        p.nhead_stride_lse_acc = int("split-KV LSE accumulator head stride", acc.nhead_lse)?;
        p.split_stride_lse_acc = int("split-KV LSE accumulator split stride", acc.split_lse)?;
        p.stride_o_acc = int("split-KV output accumulator row stride", acc.row_o)?;
        p.split_stride_o_acc = int("split-KV output accumulator split stride", acc.split_o)?;
        p.nhead_stride_o_acc = int("split-KV output accumulator head stride", acc.nhead_o)?;
    }
    Ok(p)
}

/// True when the forward (non-paged) kernels were built in their LSE-writing variant
/// (`FLASH_ATTN_ROCM_LSE=1`, the default): such a build serves only calls that pass an LSE
/// buffer, and one built with `FLASH_ATTN_ROCM_LSE=0` only calls that do not. (False in builds
/// without the `rocm` feature.)
pub const LSE_KERNELS: bool = cfg!(flash_attn_rocm_lse_kernels);

/// Whether `call` must pass an LSE buffer (scratch when the caller wants none) to find a
/// kernel: non-paged calls on an LSE-kernel build. The split-KV path has both variants.
pub fn lse_buffer_required(call: &AttnCall) -> bool {
    LSE_KERNELS && call.mode != Mode::Paged
}

/// Rows of k/v (group mode without paging), from the last cumulative seqlen, or k's rows when
/// the seqlens were left on the device (CK reads the per-sequence lengths from the seqstarts).
fn total_k(call: &AttnCall) -> usize {
    match call.seqs.unread() {
        Some(unread) => unread.rows_k,
        None => call.seqs.iter().map(|s| s.k_start + s.k_len).max().unwrap_or(0),
    }
}

/// Refuses what the built CK kernels cannot serve, naming the limit (before anything is
/// allocated; [`ck_fwd_params`] runs it too).
pub fn check_supported(call: &AttnCall) -> Result<()> {
    // Not an argument of CK, but the windows derive from it and CK's mask math is i32.
    int("max_seqlen_k", call.max_seqlen_k)?;
    let longest = call.max_seqlen_q.max(call.max_seqlen_k);
    if call.alibi.is_some() && call.mode != Mode::Paged && longest > CK_ALIBI_MAX_DISTANCE {
        candle::bail!(
            "flash-attn-rocm: CK's fmha_fwd ALiBi computes distances with 16-bit operands; \
             sequences longer than {CK_ALIBI_MAX_DISTANCE} (got {longest}) would get wrong biases"
        )
    }
    if !matches!(call.dtype, DType::F16 | DType::BF16) {
        candle::bail!("flash-attn-rocm: CK kernels take f16 or bf16, got {:?}", call.dtype)
    }
    // CK multiplies the raw scale into its exp2 arguments while the running max starts at
    // -inf: a scale <= 0, or one that flushes to zero once multiplied by log2(e), gives NaN.
    let scale_log2 = call.softmax_scale * std::f32::consts::LOG2_E;
    if !(scale_log2 > 0.0 && scale_log2.is_normal()) {
        candle::bail!(
            "flash-attn-rocm: CK's kernels need softmax_scale > 0 and not denormal after x log2(e), got {} \
             (the Triton kernels and the CPU backend take any finite scale)",
            call.softmax_scale
        )
    }
    for (name, view) in [("q", &call.q), ("k", &call.k), ("v", &call.v)] {
        let parts = [view.offset, view.batch_stride, view.row_stride, view.head_stride];
        if parts.iter().any(|x| x % CK_ALIGN_ELEMS != 0) {
            candle::bail!(
                "flash-attn-rocm: CK loads {name} 16 bytes at a time: its element offset {} and strides \
                 (batch {}, row {}, head {}) must be multiples of {CK_ALIGN_ELEMS}; make {name} contiguous",
                view.offset,
                view.batch_stride,
                view.row_stride,
                view.head_stride
            )
        }
    }
    if call.head_dim > CK_MAX_HEAD_DIM {
        candle::bail!(
            "flash-attn-rocm: CK supports head dims up to {CK_MAX_HEAD_DIM}, got {}",
            call.head_dim
        )
    }
    if call.mm_prefix.is_some() {
        candle::bail!("flash-attn-rocm: mm_prefix_ranges are not supported by the CK kernels")
    }
    if call.softcap.is_some() && call.alibi.is_some() {
        candle::bail!("flash-attn-rocm: CK has no kernel combining softcap with ALiBi")
    }
    if let Some(paging) = &call.seqs.paging {
        if paging.page_block_size % CK_PAGE_BLOCK_MULTIPLE != 0 {
            candle::bail!(
                "flash-attn-rocm: CK's paged K/V kernels need page_block_size to be a multiple of \
                 {CK_PAGE_BLOCK_MULTIPLE}, got {}",
                paging.page_block_size
            )
        }
    }
    Ok(())
}

/// CK's kernels load q/k/v rows 16 bytes (8 elements) at a time.
const CK_ALIGN_ELEMS: usize = 8;

/// Refuses what the shim cannot check itself, for callers filling [`CkFwdParams`] by hand (the
/// low-level API): CK divides by `nhead_k` on the host, reads the seqstarts in group mode and
/// the block table when paged, and writes the LSE and split-KV accumulators when asked to.
/// `crate::rocm::fmha_fwd` (feature `rocm`) runs it before every launch.
pub fn check_ck_params(p: &CkFwdParams) -> Result<()> {
    let fail = |what: &str| Err(candle::Error::Msg(format!("flash-attn-rocm: CkFwdParams: {what}")));
    if p.batch <= 0 || p.nhead_q <= 0 || p.nhead_k <= 0 || p.hdim_q <= 0 || p.hdim_v <= 0 {
        return fail(&format!(
            "batch {}, nhead_q {}, nhead_k {}, hdim_q {}, hdim_v {} must all be > 0",
            p.batch, p.nhead_q, p.nhead_k, p.hdim_q, p.hdim_v
        ));
    }
    if p.nhead_q % p.nhead_k != 0 {
        return fail(&format!("nhead_k {} must divide nhead_q {}", p.nhead_k, p.nhead_q));
    }
    if [p.q_ptr, p.k_ptr, p.v_ptr, p.o_ptr].contains(&0) {
        return fail("q_ptr, k_ptr, v_ptr and o_ptr must be device addresses, got 0");
    }
    if p.has_lse && p.lse_ptr == 0 {
        return fail("has_lse needs lse_ptr");
    }
    if p.bias_type == CkBias::Alibi && p.alibi_slopes_ptr == 0 {
        return fail("ALiBi needs alibi_slopes_ptr");
    }
    if p.is_group_mode && (p.seqstart_q_ptr == 0 || p.seqstart_k_ptr == 0) {
        return fail("group mode needs seqstart_q_ptr and seqstart_k_ptr");
    }
    let paged = p.page_block_size != 0 || p.block_table_ptr != 0;
    if paged && (p.block_table_ptr == 0 || p.page_block_size <= 0 || !p.is_group_mode) {
        return fail(&format!(
            "paged K/V needs block_table_ptr, page_block_size > 0 and group mode; got block table {:#x}, page {}, group mode {}",
            p.block_table_ptr, p.page_block_size, p.is_group_mode
        ));
    }
    if paged && (p.lse_acc_ptr == 0 || p.o_acc_ptr == 0) {
        return fail("paged K/V needs lse_acc_ptr and o_acc_ptr (split_kv_scratch_lens)");
    }
    if paged && !(1..=CK_MAX_SPLITS as i32).contains(&p.num_splits) {
        return fail(&format!(
            "paged K/V needs 1 <= num_splits <= {CK_MAX_SPLITS} (CK's combine kernel), got {} (plan_split_kv)",
            p.num_splits
        ));
    }
    let acc_strides = [p.nhead_stride_lse_acc, p.split_stride_lse_acc, p.stride_o_acc, p.split_stride_o_acc, p.nhead_stride_o_acc];
    if paged && acc_strides.iter().any(|&s| s <= 0) {
        return fail(&format!("paged K/V needs the accumulator strides (AccumulatorStrides), got {acc_strides:?}"));
    }
    Ok(())
}

/// CK indexes with i32: a size or stride past i32::MAX cannot be expressed.
fn int(what: &str, value: usize) -> Result<i32> {
    i32::try_from(value).map_err(|_| {
        candle::Error::Msg(format!(
            "flash-attn-rocm: {what} = {value} exceeds CK's 32-bit indexing (max {})",
            i32::MAX
        ))
    })
}
