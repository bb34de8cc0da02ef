//! Shape and stride checks of q/k/v, and the element-stride view the backends index with.

use super::{Mode, MAX_HEAD_DIM};
use candle::{Layout, Result};

/// Element strides of one of q/k/v, in the units the kernels use.
///
/// Element `(b, row, head, d)` lives at `offset + b * batch_stride + row * row_stride +
/// head * head_stride + d`. In varlen mode `row` is the global token index and `batch_stride`
/// is 0; for paged k/v, `b` is the physical block and `row` the slot inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorView {
    /// Element offset of the first element in the storage (the layout's start offset).
    pub offset: usize,
    /// Elements between sequences (batch mode) or K/V blocks (paged); 0 in varlen mode.
    pub batch_stride: usize,
    /// Elements between consecutive rows (tokens, or slots of a block).
    pub row_stride: usize,
    /// Elements between consecutive heads of one row.
    pub head_stride: usize,
}

impl TensorView {
    pub(super) fn of(mode: Mode, layout: &Layout, paged: bool) -> Self {
        let stride = layout.stride();
        let (batch_stride, rest) = match (mode, paged) {
            (Mode::Batch, _) | (_, true) => (stride[0], &stride[1..]),
            _ => (0, stride),
        };
        Self {
            offset: layout.start_offset(),
            batch_stride,
            row_stride: rest[0],
            head_stride: rest[1],
        }
    }

    /// Element offset of `(b, row, head)`, dimension 0.
    #[inline]
    pub fn at(&self, b: usize, row: usize, head: usize) -> usize {
        self.offset + b * self.batch_stride + row * self.row_stride + head * self.head_stride
    }
}

/// Dimensions read off q/k/v once they passed every check.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shapes {
    /// Batch size in batch mode (varlen: from the seqlens instead).
    pub batch: usize,
    pub seqlen_q: usize,
    pub seqlen_k: usize,
    /// Rows of q: `b * s_q` or `total_q`.
    pub rows_q: usize,
    /// Rows of k/v: `total_k` in varlen mode, `num_blocks` when paged.
    pub rows_k: usize,
    pub page_block_size: usize,
    pub num_heads: usize,
    pub num_heads_k: usize,
    pub head_dim: usize,
}

fn rank_of(name: &str, layout: &Layout, expected: usize, what: &str) -> Result<()> {
    let rank = layout.dims().len();
    if rank != expected {
        candle::bail!(
            "flash-attn-rocm: {name} must have rank {expected} {what}, got shape {:?}",
            layout.dims()
        )
    }
    if layout.stride()[rank - 1] != 1 {
        candle::bail!(
            "flash-attn-rocm: the last dim of {name} must be contiguous (stride 1), got strides {:?}",
            layout.stride()
        )
    }
    Ok(())
}

impl Shapes {
    pub(super) fn check(mode: Mode, q: &Layout, k: &Layout, v: &Layout) -> Result<Self> {
        let (q_rank, kv_rank, q_what, kv_what) = match mode {
            Mode::Batch => (4, 4, "(batch, seqlen_q, heads, head_dim)", "(batch, seqlen_k, heads_k, head_dim)"),
            Mode::VarLen => (3, 3, "(total_q, heads, head_dim)", "(total_k, heads_k, head_dim)"),
            Mode::Paged => (
                3,
                4,
                "(total_q, heads, head_dim)",
                "(num_blocks, page_block_size, heads_k, head_dim)",
            ),
        };
        rank_of("q", q, q_rank, q_what)?;
        rank_of("k", k, kv_rank, kv_what)?;
        rank_of("v", v, kv_rank, kv_what)?;
        if k.dims() != v.dims() {
            candle::bail!(
                "flash-attn-rocm: k and v must have the same shape, got k {:?} and v {:?}",
                k.dims(),
                v.dims()
            )
        }
        let qd = q.dims();
        let kd = k.dims();
        let (num_heads, head_dim) = (qd[q_rank - 2], qd[q_rank - 1]);
        let (num_heads_k, head_dim_k) = (kd[kv_rank - 2], kd[kv_rank - 1]);
        if head_dim != head_dim_k {
            candle::bail!(
                "flash-attn-rocm: q and k/v head dims differ: q {:?}, k {:?}",
                qd,
                kd
            )
        }
        if head_dim == 0 || head_dim > MAX_HEAD_DIM || head_dim % 8 != 0 {
            candle::bail!(
                "flash-attn-rocm: head_dim must be a multiple of 8 in 8..={MAX_HEAD_DIM}, got {head_dim}"
            )
        }
        // Zero q heads would pass the divisibility test and leave a GQA group of 0 (a division
        // by zero further on): a call needs at least one head on each side.
        if num_heads == 0 || num_heads_k == 0 || num_heads % num_heads_k != 0 {
            candle::bail!(
                "flash-attn-rocm: the number of k/v heads {num_heads_k} must divide the number of q heads {num_heads}"
            )
        }
        let mut shapes = Self {
            batch: 0,
            seqlen_q: 0,
            seqlen_k: 0,
            rows_q: qd[0],
            rows_k: kd[0],
            page_block_size: 0,
            num_heads,
            num_heads_k,
            head_dim,
        };
        match mode {
            Mode::Batch => {
                if qd[0] != kd[0] {
                    candle::bail!(
                        "flash-attn-rocm: q and k/v batch sizes differ: q {:?}, k {:?}",
                        qd,
                        kd
                    )
                }
                shapes.batch = qd[0];
                shapes.seqlen_q = qd[1];
                shapes.seqlen_k = kd[1];
                shapes.rows_q = qd[0] * qd[1];
            }
            Mode::VarLen => {}
            Mode::Paged => shapes.page_block_size = kd[1],
        }
        Ok(shapes)
    }
}
