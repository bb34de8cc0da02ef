//! The normalized description of one attention call.
//!
//! Every public entry point turns its arguments into a [`Request`] (what the caller asked for) and
//! then, given the layouts of q/k/v, into an [`AttnCall`]: validated shapes, element strides and
//! offsets, per-sequence lengths, the resolved mask window, paging. Both backends consume this one
//! description: the CPU kernel walks it directly, the ROCm backend marshals it into CK's arguments.
//! Nothing here touches device memory except reading the small integer side tensors (seqlens and
//! block table) to the host for validation.

pub mod faults;
mod layout;
mod sequences;
mod side;
mod window;

#[cfg(test)]
mod tests;

use candle::{DType, Layout, Result, Tensor};

pub use layout::TensorView;
pub use sequences::{Paging, Sequence, Sequences, UnreadSequences};
pub use side::{
    block_table_for_kernels, pairs_of_each_sequence_consecutive, prefix_ranges_for_kernels, rows_of_consecutive_ids, AlibiSpec,
    MmPrefixSpec,
};
pub use window::Window;

/// Largest head dimension accepted, as candle-flash-attn.
pub const MAX_HEAD_DIM: usize = 512;

/// What the caller asked for, before looking at q/k/v: the public functions' arguments other
/// than the three tensors, unchecked. [`AttnCall::new`] validates it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// Multiplies the logits `q · k` (usually `1 / sqrt(head_dim)`); must be finite.
    pub softmax_scale: f32,
    /// f32 ALiBi slopes of shape `(num_heads,)`, one per query head (checked into an
    /// [`AlibiSpec`]).
    pub alibi_slopes: Option<&'a Tensor>,
    /// Keys visible to the left of a query's position; `None` is unbounded (see [`Window`]).
    pub window_size_left: Option<usize>,
    /// Keys visible to the right of a query's position; `None` is unbounded, `Some(0)` with an
    /// unbounded left side is causal (see [`Window`]).
    pub window_size_right: Option<usize>,
    /// Logit softcap `c`: a scaled logit `x` becomes `c * tanh(x / c)`; must be finite and
    /// `> 0`.
    pub softcap: Option<f32>,
    /// `None` for the batch layout `(b, s, h, d)`.
    pub varlen: Option<VarLenRequest<'a>>,
}

/// The variable-length (and optionally paged) part of a request.
#[derive(Debug, Clone, Copy)]
pub struct VarLenRequest<'a> {
    /// Cumulative query lengths: u32 `(b + 1,)`, contiguous, non-decreasing from 0; sequence
    /// `i` owns rows `seqlens_q[i]..seqlens_q[i + 1]` of q.
    pub seqlens_q: &'a Tensor,
    /// Cumulative key lengths, as `seqlens_q` for the rows of k/v. When paged, the values
    /// only count each sequence's keys (the rows come from `block_table`).
    pub seqlens_k: &'a Tensor,
    /// At least the longest query sequence (an `Err` otherwise, when the seqlens are read).
    pub max_seqlen_q: usize,
    /// At least the longest key sequence; also the bound past which a window size counts as
    /// unbounded.
    pub max_seqlen_k: usize,
    /// `Some` for paged K/V: u32 or i32 `(b, max_blocks)`; logical block `n` of sequence `b`
    /// is physical block `block_table[b, n]` of k/v.
    pub block_table: Option<&'a Tensor>,
    /// Rows per K/V block; required with `block_table` and equal to k's dim 1.
    pub page_block_size: Option<usize>,
    /// i32 `(b, max_ranges, 2)` `[start, end)` key ranges inside which queries see every key
    /// of the range, whatever the window says (checked into an [`MmPrefixSpec`]).
    pub mm_prefix_ranges: Option<&'a Tensor>,
}

/// How q/k/v are laid out in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `(b, s, h, d)` tensors, every sequence of the same length.
    Batch,
    /// `(total, h, d)` tensors holding ragged sequences back to back.
    VarLen,
    /// q as `VarLen`; k/v as `(num_blocks, page_block_size, h_k, d)` pages.
    Paged,
}

/// A validated, normalized attention call.
///
/// Built only by [`AttnCall::new`] or [`AttnCall::on_device`], which guarantee: q, k and v
/// share one dtype (f32, f16 or bf16); `head_dim` is a multiple of 8 in `8..=`[`MAX_HEAD_DIM`];
/// `num_heads_k` divides `num_heads` (both > 0); every last dim is contiguous; the scale is
/// finite and a softcap finite and > 0; and, unless the seqlens were left unread, every
/// sequence's rows (and pages) lie inside q and k/v.
#[derive(Debug, Clone)]
pub struct AttnCall {
    /// How q/k/v are laid out: batch, varlen or paged.
    pub mode: Mode,
    /// The element type of q, k, v and the output.
    pub dtype: DType,
    /// Number of sequences `b` (batch mode: q's dim 0; varlen: `seqlens_q`'s length - 1).
    pub batch: usize,
    /// Query heads `h`.
    pub num_heads: usize,
    /// Key/value heads `h_k`; divides `num_heads` (each serves [`AttnCall::group_size`]
    /// consecutive query heads).
    pub num_heads_k: usize,
    /// Elements per head `d`, the same for q, k and v.
    pub head_dim: usize,
    /// Multiplies the logits `q · k`.
    pub softmax_scale: f32,
    /// Logit softcap `c` (`x` becomes `c * tanh(x / c)` before the bias and softmax).
    pub softcap: Option<f32>,
    /// The resolved mask window (causal is a window with `right == 0`).
    pub window: Window,
    /// Validated ALiBi slopes, one per query head.
    pub alibi: Option<AlibiSpec>,
    /// Validated multimodal prefix ranges (varlen and paged calls only).
    pub mm_prefix: Option<MmPrefixSpec>,
    /// Element offset and strides of q.
    pub q: TensorView,
    /// Element offset and strides of k (paged: `batch_stride` is the block stride).
    pub k: TensorView,
    /// Element offset and strides of v (paged: `batch_stride` is the block stride).
    pub v: TensorView,
    /// Per-sequence rows and lengths, and the block table when paged.
    pub seqs: Sequences,
    /// The flash-attn `seqlen_q` (batch mode) or `max_seqlen_q` (varlen): the longest query
    /// sequence, or a bound on it.
    pub max_seqlen_q: usize,
    /// The flash-attn `seqlen_k` (batch mode) or `max_seqlen_k` (varlen): the longest key
    /// sequence, or a bound on it.
    pub max_seqlen_k: usize,
    /// Rows of q (`b * s_q` or `total_q`).
    pub total_q: usize,
}

impl AttnCall {
    /// Validates a request against the q/k/v dtypes and layouts and normalizes it, reading the
    /// varlen seqlens and block table (a device-to-host copy when they live on a GPU).
    ///
    /// # Errors
    ///
    /// A [`candle::Error`] naming the argument for anything the type's invariants exclude:
    /// mixed or unsupported dtypes, wrong ranks, mismatched shapes or head dims, a non-contiguous
    /// last dim, malformed seqlens or block table, a page size that is not k's dim 1, bad
    /// ALiBi slopes or prefix ranges, a non-finite scale or a bad softcap.
    pub fn new(
        req: &Request<'_>,
        dtypes: [DType; 3],
        q: &Layout,
        k: &Layout,
        v: &Layout,
    ) -> Result<Self> {
        Self::build(req, dtypes, q, k, v, true)
    }

    /// As [`AttnCall::new`], but the varlen seqlens and block table are checked by shape only
    /// and left unread (`seqs.unread()` is `Some`): no device-to-host copy. Whoever launches
    /// the call must then keep out-of-range values from reaching a kernel (the ROCm CK path
    /// does so on the device: `rocm::guard`; the Triton kernels check them themselves).
    ///
    /// Except where no kernel would check them: with `max_seqlen_q == 0`, `max_seqlen_k == 0`
    /// or no rows of q, no kernel runs (or none reads the seqlens) for such a call, so none
    /// could find a sequence longer than the maxima allow or past the rows; its values are read
    /// and checked as [`AttnCall::new`] does, and the call is refused or accepted as on the CPU
    /// (issue 56: CK returned zeros for `max_seqlen_k == 0` with keys in `seqlens_k`).
    pub fn on_device(
        req: &Request<'_>,
        dtypes: [DType; 3],
        q: &Layout,
        k: &Layout,
        v: &Layout,
    ) -> Result<Self> {
        Self::build(req, dtypes, q, k, v, false)
    }

    fn build(
        req: &Request<'_>,
        dtypes: [DType; 3],
        q: &Layout,
        k: &Layout,
        v: &Layout,
        read_values: bool,
    ) -> Result<Self> {
        let [q_dtype, k_dtype, v_dtype] = dtypes;
        if q_dtype != k_dtype || q_dtype != v_dtype {
            candle::bail!(
                "flash-attn-rocm: q, k and v must share one dtype, got q {q_dtype:?}, k {k_dtype:?}, v {v_dtype:?}"
            )
        }
        if !matches!(q_dtype, DType::F32 | DType::F16 | DType::BF16) {
            candle::bail!("flash-attn-rocm: unsupported dtype {q_dtype:?}, expected f32, f16 or bf16")
        }
        let mode = match req.varlen {
            None => Mode::Batch,
            Some(VarLenRequest { block_table: None, .. }) => Mode::VarLen,
            Some(_) => Mode::Paged,
        };
        let shapes = layout::Shapes::check(mode, q, k, v)?;
        let num_heads = shapes.num_heads;
        // Every check of shapes and scalars before any of values, in one order for both
        // constructors: a call with a bad shape and a bad value gets the same error on every
        // backend.
        let softcap = match req.softcap {
            Some(c) if !(c.is_finite() && c > 0.0) => {
                candle::bail!("flash-attn-rocm: softcap must be finite and > 0, got {c}")
            }
            other => other,
        };
        if !req.softmax_scale.is_finite() {
            candle::bail!("flash-attn-rocm: softmax_scale must be finite, got {}", req.softmax_scale)
        }
        let alibi = req.alibi_slopes.map(|t| AlibiSpec::check(t, num_heads)).transpose()?;
        let (seqs, max_seqlen_q, max_seqlen_k, mm_prefix) = match &req.varlen {
            None => {
                let seqs = Sequences::uniform(shapes.batch, shapes.seqlen_q, shapes.seqlen_k);
                (seqs, shapes.seqlen_q, shapes.seqlen_k, None)
            }
            Some(varlen) => {
                let unread = Sequences::from_varlen_unread(varlen, &shapes, k)?;
                let mm_prefix = varlen.mm_prefix_ranges.map(|t| MmPrefixSpec::check(t, unread.len())).transpose()?;
                let no_kernel_reads = varlen.max_seqlen_q == 0 || varlen.max_seqlen_k == 0 || shapes.rows_q == 0;
                let seqs = if read_values || no_kernel_reads { Sequences::from_varlen(varlen, &shapes, k)? } else { unread };
                (seqs, varlen.max_seqlen_q, varlen.max_seqlen_k, mm_prefix)
            }
        };
        let batch = seqs.len();
        let window = Window::resolve(
            req.window_size_left,
            req.window_size_right,
            max_seqlen_k,
            mm_prefix.is_some(),
        );
        Ok(Self {
            mode,
            dtype: q_dtype,
            batch,
            num_heads,
            num_heads_k: shapes.num_heads_k,
            head_dim: shapes.head_dim,
            softmax_scale: req.softmax_scale,
            softcap,
            window,
            alibi,
            mm_prefix,
            q: TensorView::of(mode, q, false),
            k: TensorView::of(mode, k, mode == Mode::Paged),
            v: TensorView::of(mode, v, mode == Mode::Paged),
            seqs,
            max_seqlen_q,
            max_seqlen_k,
            total_q: shapes.rows_q,
        })
    }

    /// Query heads per k/v head (1 for MHA).
    pub fn group_size(&self) -> usize {
        self.num_heads / self.num_heads_k
    }

    /// Shape of the log-sum-exp output: `(b, h, s_q)` in batch mode, `(h, total_q)` otherwise.
    pub fn lse_dims(&self) -> Vec<usize> {
        match self.mode {
            Mode::Batch => vec![self.batch, self.num_heads, self.max_seqlen_q],
            Mode::VarLen | Mode::Paged => vec![self.num_heads, self.total_q],
        }
    }

    /// Index in the LSE buffer of query row `i` of sequence `b`, head `h`.
    pub fn lse_index(&self, b: usize, h: usize, i: usize) -> usize {
        match self.mode {
            Mode::Batch => (b * self.num_heads + h) * self.max_seqlen_q + i,
            Mode::VarLen | Mode::Paged => h * self.total_q + self.seqs.get(b).out_row + i,
        }
    }

    /// Element offset of query row `i` of sequence `b`, head `h`, in the contiguous output.
    pub fn out_offset(&self, b: usize, h: usize, i: usize) -> usize {
        let row = self.seqs.get(b).out_row + i;
        (row * self.num_heads + h) * self.head_dim
    }
}
