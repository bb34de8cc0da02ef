//! One unit of parallel work: a block of query rows of one head, swept over the keys it may see
//! with the online softmax. Memory per block is O(tile): nothing of size s_q × s_k exists.

use super::element::{widen, Element};
use super::exp::{exp_shifted_sum, max};
use super::mask::{Logits, RowRanges};
use crate::params::AttnCall;
use gemm::Parallelism;

/// Query rows per block.
pub const BLOCK_M: usize = 128;
/// Keys per tile.
pub const BLOCK_N: usize = 128;

/// Which rows a block covers.
#[derive(Debug, Clone, Copy)]
pub struct BlockId {
    pub b: usize,
    pub h: usize,
    pub i0: usize,
    pub rows: usize,
}

/// The result of one block: normalized output rows (`rows × d`) and their log-sum-exp.
pub struct BlockOut {
    pub out: Vec<f32>,
    pub lse: Vec<f32>,
}

/// Inputs shared by every block of a call.
pub struct Inputs<'a, T> {
    pub call: &'a AttnCall,
    pub q: &'a [T],
    pub k: &'a [T],
    pub v: &'a [T],
    pub alibi_slopes: Option<&'a [f32]>,
    pub prefix_ranges: Option<&'a [Vec<(i32, i32)>]>,
}

/// A `rows × d` matrix of k or v rows: either in place in an f32 input or widened into scratch.
struct KvTile<'a> {
    ptr: *const f32,
    row_stride: usize,
    _src: std::marker::PhantomData<&'a [f32]>,
}

/// Where a key tile sits: sequence `b`, k/v head `hk`, keys `[j0, j1)` (never across a page).
#[derive(Clone, Copy)]
struct TileAt {
    b: usize,
    hk: usize,
    k_start: usize,
    j0: usize,
    j1: usize,
}

impl<T: Element> Inputs<'_, T> {
    /// Rows `[j0, j1)` of k or v: in place for f32 inputs, else widened into `scratch`.
    fn kv_tile<'s>(&'s self, which: Kv, scratch: &'s mut Vec<f32>, at: TileAt) -> KvTile<'s> {
        let call = self.call;
        let (src, view) = match which {
            Kv::K => (self.k, call.k),
            Kv::V => (self.v, call.v),
        };
        let d = call.head_dim;
        let start = match &call.seqs.paging {
            Some(paging) => {
                let (block, slot) = paging.locate(at.b, at.j0);
                view.at(block, slot, at.hk)
            }
            None => view.at(at.b, at.k_start + at.j0, at.hk),
        };
        let n = at.j1 - at.j0;
        let span = (n - 1) * view.row_stride + d;
        let rows = &src[start..start + span];
        if T::IS_F32 {
            // SAFETY: `T` is f32 (IS_F32), so the slice is a valid f32 slice of the same length.
            let f: &[f32] = unsafe { std::slice::from_raw_parts(rows.as_ptr().cast(), rows.len()) };
            return KvTile { ptr: f.as_ptr(), row_stride: view.row_stride, _src: Default::default() };
        }
        scratch.resize(n * d, 0.0);
        for r in 0..n {
            widen(&rows[r * view.row_stride..][..d], &mut scratch[r * d..(r + 1) * d]);
        }
        KvTile { ptr: scratch.as_ptr(), row_stride: d, _src: Default::default() }
    }
}

#[derive(Clone, Copy)]
enum Kv {
    K,
    V,
}

/// End (exclusive) of the key tile starting at `j0`: at most `BLOCK_N` keys, never past `hi`,
/// never across a page boundary.
fn tile_end(call: &AttnCall, j0: usize, hi: usize) -> usize {
    let end = (j0 + BLOCK_N).min(hi);
    match &call.seqs.paging {
        Some(p) => end.min((j0 / p.page_block_size + 1) * p.page_block_size),
        None => end,
    }
}

/// `dst (m × n, row stride ld_dst) = [dst +] lhs (m × k) · rhs (k × n)` with explicit strides.
#[allow(clippy::too_many_arguments)]
fn matmul(m: usize, n: usize, k: usize, dst: &mut [f32], ld_dst: usize, accumulate: bool, lhs: (*const f32, usize, usize), rhs: (*const f32, usize, usize)) {
    debug_assert!(dst.len() >= (m - 1) * ld_dst + n);
    // SAFETY: `dst` holds the m × n output at row stride `ld_dst` (asserted above); the callers
    // build `lhs`/`rhs` from slices that cover every (row, col) address the strides reach.
    unsafe {
        gemm::gemm::<f32>(
            m, n, k,
            dst.as_mut_ptr(), 1, ld_dst as isize,
            accumulate,
            lhs.0, lhs.2 as isize, lhs.1 as isize,
            rhs.0, rhs.2 as isize, rhs.1 as isize,
            1.0, 1.0,
            false, false, false,
            Parallelism::None,
        )
    }
}

pub fn run_block<T: Element>(inp: &Inputs<'_, T>, id: BlockId) -> BlockOut {
    let call = inp.call;
    let d = call.head_dim;
    let seq = call.seqs.get(id.b);
    let hk = id.h / call.group_size();
    let rows = id.rows;

    // Queries, pre-multiplied by the softmax scale.
    let mut q = vec![0.0f32; rows * d];
    for r in 0..rows {
        let at = call.q.at(id.b, seq.q_start + id.i0 + r, id.h);
        widen(&inp.q[at..at + d], &mut q[r * d..(r + 1) * d]);
    }
    q.iter_mut().for_each(|x| *x *= call.softmax_scale);

    let no_prefix: &[(i32, i32)] = &[];
    let prefix = inp.prefix_ranges.map_or(no_prefix, |p| p[id.b].as_slice());
    let ranges = RowRanges::new(call, &seq, prefix, id.i0, rows);
    let logits = Logits {
        softcap: call.softcap,
        alibi_slope: inp.alibi_slopes.map(|s| s[id.h]),
        ranges: &ranges,
        pos0: id.i0 as i64 + seq.k_len as i64 - seq.q_len as i64,
    };

    let mut acc = vec![0.0f32; rows * d];
    let mut row_max = vec![f32::NEG_INFINITY; rows];
    let mut row_sum = vec![0.0f32; rows];
    let mut scores = vec![0.0f32; rows * BLOCK_N];
    let (mut k_scratch, mut v_scratch) = (Vec::new(), Vec::new());

    let (lo, hi) = ranges.span();
    let mut j0 = lo;
    while j0 < hi {
        let j1 = tile_end(call, j0, hi);
        let n = j1 - j0;
        let at = TileAt { b: id.b, hk, k_start: seq.k_start, j0, j1 };
        let kt = inp.kv_tile(Kv::K, &mut k_scratch, at);
        // scores = q · kᵀ: rhs element (dim, key) sits at key * row_stride + dim.
        matmul(rows, n, d, &mut scores, BLOCK_N, false, (q.as_ptr(), d, 1), (kt.ptr, 1, kt.row_stride));
        logits.apply(&mut scores, BLOCK_N, rows, j0, n);
        for r in 0..rows {
            let row = &mut scores[r * BLOCK_N..r * BLOCK_N + n];
            let tile_max = max(row);
            let new_max = row_max[r].max(tile_max);
            if new_max == f32::NEG_INFINITY {
                // Nothing visible yet for this row: contribute zeros, keep the state.
                row.fill(0.0);
                continue;
            }
            let correction = (row_max[r] - new_max).exp();
            row_sum[r] = row_sum[r] * correction + exp_shifted_sum(row, new_max);
            if correction != 1.0 {
                acc[r * d..(r + 1) * d].iter_mut().for_each(|x| *x *= correction);
            }
            row_max[r] = new_max;
        }
        let vt = inp.kv_tile(Kv::V, &mut v_scratch, at);
        matmul(rows, d, n, &mut acc, d, true, (scores.as_ptr(), BLOCK_N, 1), (vt.ptr, vt.row_stride, 1));
        j0 = j1;
    }

    let mut lse = vec![f32::NEG_INFINITY; rows];
    for r in 0..rows {
        let out_row = &mut acc[r * d..(r + 1) * d];
        if row_sum[r] > 0.0 {
            let inv = 1.0 / row_sum[r];
            out_row.iter_mut().for_each(|x| *x *= inv);
            lse[r] = row_max[r] + row_sum[r].ln();
        } else {
            out_row.fill(0.0);
        }
    }
    BlockOut { out: acc, lse }
}
