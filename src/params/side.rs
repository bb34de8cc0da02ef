//! Checks of the optional side tensors: ALiBi slopes and multimodal prefix ranges.

use candle::{DType, Layout, Result, Tensor};

/// Validated ALiBi slopes: one f32 per query head, contiguous (CK reads `h` consecutive floats;
/// a strided view is copied once here). The bias added to the logit of query row `i` and key
/// `j` is `-slope[h] * |i + s_k - s_q - j|`.
#[derive(Debug, Clone)]
pub struct AlibiSpec {
    /// The slopes: f32, shape `(num_heads,)`, contiguous, on the caller's device.
    pub slopes: Tensor,
}

impl AlibiSpec {
    pub(super) fn check(t: &Tensor, num_heads: usize) -> Result<Self> {
        if t.dtype() != DType::F32 {
            candle::bail!("flash-attn-rocm: alibi_slopes must be f32, got {:?}", t.dtype())
        }
        if t.dims() != [num_heads] {
            candle::bail!(
                "flash-attn-rocm: alibi_slopes must have shape ({num_heads},) (one slope per q head), got {:?}",
                t.dims()
            )
        }
        Ok(Self { slopes: t.contiguous()? })
    }
}

/// `table` (a checked `(b, max_blocks)` block table) itself when the ids of each row are
/// consecutive elements, as the GPU kernels read a row, else a contiguous copy on its device:
/// the CPU backend takes any strides, so a strided table is copied rather than refused.
pub fn block_table_for_kernels(table: &Tensor) -> Result<Tensor> {
    if rows_of_consecutive_ids(table.layout()) {
        return Ok(table.clone());
    }
    copy_ids(table)
}

/// Whether the ids of each row of a `(b, max_blocks)` block-table layout are consecutive
/// elements.
pub fn rows_of_consecutive_ids(layout: &Layout) -> bool {
    layout.dims()[1] <= 1 || layout.stride()[1] == 1
}

/// `spec`'s ranges as the GPU kernels read them, each sequence's pairs consecutive: the
/// caller's tensor, or a contiguous copy on its device where the pairs are apart (a view
/// narrowed out of a wider tensor, which the CPU backend takes).
pub fn prefix_ranges_for_kernels(spec: &MmPrefixSpec) -> Result<Tensor> {
    match pairs_of_each_sequence_consecutive(spec.ranges.layout()) {
        true => Ok(spec.ranges.clone()),
        false => copy_ids(&spec.ranges),
    }
}

/// Whether each sequence's `(start, end)` pairs of a checked `(b, max_ranges, 2)` layout are
/// consecutive elements.
pub fn pairs_of_each_sequence_consecutive(layout: &Layout) -> bool {
    layout.dims()[1] <= 1 || layout.stride()[1] == 2
}

/// A contiguous copy of the u32/i32 tensor `t` on its device: `affine(1, 0)`, exact for both
/// dtypes, because Candle devices have that kernel for both where they lack others. Candle
/// 0.11.1's CUDA device has no strided copy (`ucopy_i32`) and no cast for i32, so
/// `contiguous()` of an i32 table failed with "named symbol not found".
fn copy_ids(t: &Tensor) -> Result<Tensor> {
    t.affine(1.0, 0.0)
}

/// Validated `mm_prefix_ranges`: `(batch, max_ranges, 2)` i32 `[start, end)` key ranges inside
/// which queries see every key of the range, whatever the causal/window mask says.
#[derive(Debug, Clone)]
pub struct MmPrefixSpec {
    /// The caller's tensor, i32 `(batch, max_ranges, 2)` on the caller's device, of any
    /// strides but a contiguous last dim (the GPU path copies it where a sequence's pairs are
    /// apart: [`prefix_ranges_for_kernels`]). Values are key positions within the sequence; an
    /// empty range (`end <= start`) lifts nothing.
    pub ranges: Tensor,
    /// Sequences (dim 0), equal to the call's batch size.
    pub batch: usize,
    /// Ranges per sequence (dim 1).
    pub max_ranges: usize,
}

impl MmPrefixSpec {
    pub(super) fn check(t: &Tensor, batch: usize) -> Result<Self> {
        if t.dtype() != DType::I32 {
            candle::bail!("flash-attn-rocm: mm_prefix_ranges must be i32, got {:?}", t.dtype())
        }
        let max_ranges = match t.dims() {
            &[b, r, 2] if b == batch => r,
            dims => candle::bail!(
                "flash-attn-rocm: mm_prefix_ranges must have shape ({batch}, max_ranges, 2), got {dims:?}"
            ),
        };
        if t.stride().last() != Some(&1) {
            candle::bail!("flash-attn-rocm: the last dim of mm_prefix_ranges must be contiguous")
        }
        Ok(Self { ranges: t.clone(), batch, max_ranges })
    }

    /// The ranges of every sequence, read to the host: `ranges[b]` lists `(start, end)`.
    pub fn read(&self) -> Result<Vec<Vec<(i32, i32)>>> {
        let flat: Vec<i32> = self.ranges.flatten_all()?.to_vec1()?;
        let per_seq = 2 * self.max_ranges;
        Ok((0..self.batch)
            .map(|b| {
                let seq = &flat[b * per_seq..(b + 1) * per_seq];
                seq.chunks_exact(2).map(|r| (r[0], r[1])).collect()
            })
            .collect())
    }
}
