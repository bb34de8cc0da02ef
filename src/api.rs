//! The public functions: every function of `candle-flash-attn` 0.11.1 with the same names,
//! argument order and types, plus variants that also return the log-sum-exp.
//!
//! Layouts: q `(batch, seq_len_q, heads, head_dim)`, k/v `(batch, seq_len_k, heads_k, head_dim)`;
//! varlen q `(total_q, heads, head_dim)`, k/v `(total_k, heads_k, head_dim)` with cumulative u32
//! `seqlens` of length `batch + 1`. `heads_k` must divide `heads` (MQA/GQA). `causal` is
//! bottom-right aligned, as flash-attn: query `i` sees keys `j <= i + seq_len_k - seq_len_q`.

use crate::op::{forward_with_lse, FlashAttn, FlashAttnVarLen};
use candle::{Result, Tensor};

/// Window sizes meaning "causal" or "no mask", as candle-flash-attn builds them.
fn causal_window(causal: bool) -> (Option<usize>, Option<usize>) {
    (None, if causal { Some(0) } else { None })
}

fn batch_op(
    softmax_scale: f32,
    alibi_slopes: Option<&Tensor>,
    (window_size_left, window_size_right): (Option<usize>, Option<usize>),
    softcap: Option<f32>,
) -> FlashAttn {
    FlashAttn {
        softmax_scale,
        alibi_slopes: alibi_slopes.cloned(),
        window_size_left,
        window_size_right,
        softcap,
    }
}

/// The varlen arguments shared by every `flash_attn_varlen*` function.
struct VarLen<'a> {
    seqlens_q: &'a Tensor,
    seqlens_k: &'a Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
}

fn varlen_op(
    lens: VarLen<'_>,
    softmax_scale: f32,
    alibi_slopes: Option<&Tensor>,
    window: (Option<usize>, Option<usize>),
    softcap: Option<f32>,
) -> FlashAttnVarLen {
    FlashAttnVarLen {
        base: batch_op(softmax_scale, alibi_slopes, window, softcap),
        max_seqlen_q: lens.max_seqlen_q,
        max_seqlen_k: lens.max_seqlen_k,
        seqlens_q: lens.seqlens_q.clone(),
        seqlens_k: lens.seqlens_k.clone(),
        block_table: None,
        mm_prefix_ranges: None,
        page_block_size: None,
    }
}

/// Scaled dot-product attention `softmax(q kᵀ · softmax_scale) v`, optionally causal.
pub fn flash_attn(q: &Tensor, k: &Tensor, v: &Tensor, softmax_scale: f32, causal: bool) -> Result<Tensor> {
    q.apply_op3(k, v, batch_op(softmax_scale, None, causal_window(causal), None))
}

/// Attention with a local window: query `i` sees keys in
/// `[i + s_k - s_q - window_size_left, i + s_k - s_q + window_size_right]`; `None` is unbounded.
/// `(None, Some(0))` is causal.
pub fn flash_attn_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let window = (window_size_left, window_size_right);
    q.apply_op3(k, v, batch_op(softmax_scale, None, window, None))
}

/// Attention with ALiBi: `alibi_slopes` is f32 of shape `(heads,)`.
pub fn flash_attn_alibi(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let op = batch_op(softmax_scale, Some(alibi_slopes), causal_window(causal), None);
    q.apply_op3(k, v, op)
}

/// ALiBi and a local window.
pub fn flash_attn_alibi_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let window = (window_size_left, window_size_right);
    q.apply_op3(k, v, batch_op(softmax_scale, Some(alibi_slopes), window, None))
}

/// Optional ALiBi, a local window and a Gemma-style softcap: logits become
/// `softcap * tanh(logit / softcap)` before the softmax (`softcap` must be finite and > 0).
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_alibi_windowed_softcap(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: Option<&Tensor>,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    softcap: f32,
) -> Result<Tensor> {
    let window = (window_size_left, window_size_right);
    q.apply_op3(k, v, batch_op(softmax_scale, alibi_slopes, window, Some(softcap)))
}

/// Variable-length attention over `(total, heads, head_dim)` tensors.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let lens = VarLen { seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k };
    q.apply_op3(k, v, varlen_op(lens, softmax_scale, None, causal_window(causal), None))
}

/// Variable-length attention with a local window.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let lens = VarLen { seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k };
    let window = (window_size_left, window_size_right);
    q.apply_op3(k, v, varlen_op(lens, softmax_scale, None, window, None))
}

/// Variable-length attention over a paged K/V cache `(num_blocks, page_block_size, heads_k,
/// head_dim)`: key `j` of sequence `b` lives in block `block_table[b, j / page_block_size]`.
/// `mm_prefix_ranges` (i32 `(batch, max_ranges, 2)`) lifts the causal/window mask inside each
/// `[start, end)` range.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_paged_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    block_table: &Tensor,
    mm_prefix_ranges: Option<&Tensor>,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    page_block_size: usize,
    softcap: Option<f32>,
) -> Result<Tensor> {
    let op = paged_op(
        VarLen { seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k },
        block_table,
        mm_prefix_ranges,
        page_block_size,
        softmax_scale,
        (window_size_left, window_size_right),
        softcap,
    );
    q.apply_op3(k, v, op)
}

fn paged_op(
    lens: VarLen<'_>,
    block_table: &Tensor,
    mm_prefix_ranges: Option<&Tensor>,
    page_block_size: usize,
    softmax_scale: f32,
    window: (Option<usize>, Option<usize>),
    softcap: Option<f32>,
) -> FlashAttnVarLen {
    FlashAttnVarLen {
        block_table: Some(block_table.clone()),
        mm_prefix_ranges: mm_prefix_ranges.cloned(),
        page_block_size: Some(page_block_size),
        ..varlen_op(lens, softmax_scale, None, window, softcap)
    }
}

/// Variable-length attention with ALiBi.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_alibi(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let lens = VarLen { seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k };
    let op = varlen_op(lens, softmax_scale, Some(alibi_slopes), causal_window(causal), None);
    q.apply_op3(k, v, op)
}

/// Variable-length attention with ALiBi and a local window.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_alibi_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let lens = VarLen { seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k };
    let window = (window_size_left, window_size_right);
    q.apply_op3(k, v, varlen_op(lens, softmax_scale, Some(alibi_slopes), window, None))
}

/// Variable-length attention with optional ALiBi, a local window and a softcap.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_alibi_windowed_softcap(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: Option<&Tensor>,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    softcap: f32,
) -> Result<Tensor> {
    let lens = VarLen { seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k };
    let window = (window_size_left, window_size_right);
    q.apply_op3(k, v, varlen_op(lens, softmax_scale, alibi_slopes, window, Some(softcap)))
}

/// [`flash_attn`] that also returns the log-sum-exp (f32, `(batch, heads, seq_len_q)`), so
/// partial results over disjoint key sets can be merged (split-KV, ring attention).
pub fn flash_attn_with_lse(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<(Tensor, Tensor)> {
    batch_op(softmax_scale, None, causal_window(causal), None).forward_with_lse(q, k, v)
}

/// [`flash_attn_varlen_alibi_windowed_softcap`] with an optional softcap, also returning the
/// log-sum-exp (f32, `(heads, total_q)`).
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_with_lse(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: Option<&Tensor>,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    softcap: Option<f32>,
) -> Result<(Tensor, Tensor)> {
    let lens = VarLen { seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k };
    let window = (window_size_left, window_size_right);
    let op = varlen_op(lens, softmax_scale, alibi_slopes, window, softcap);
    forward_with_lse(&op.request(), q, k, v)
}

/// [`flash_attn_varlen_paged_windowed`] that also returns the log-sum-exp (f32,
/// `(heads, total_q)`).
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_paged_windowed_with_lse(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    block_table: &Tensor,
    mm_prefix_ranges: Option<&Tensor>,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    page_block_size: usize,
    softcap: Option<f32>,
) -> Result<(Tensor, Tensor)> {
    let op = paged_op(
        VarLen { seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k },
        block_table,
        mm_prefix_ranges,
        page_block_size,
        softmax_scale,
        (window_size_left, window_size_right),
        softcap,
    );
    forward_with_lse(&op.request(), q, k, v)
}
