//! One unit of parallel work: a block of query rows that share one k/v head (every query head of
//! its GQA group at a run of positions), swept over the keys it may see (or one split of them)
//! with the online softmax. K/V tiles are read, and widened when they are not f32, once for the
//! whole group. Memory per block is O(tile): nothing of size s_q × s_k exists.
//!
//! The scores are kept transposed (keys × rows): the queries are packed once per block as the
//! vector operand of both products, K and V rows are read in place, and the softmax runs along
//! vector lanes (one lane per row). See `gemm.rs`.

use super::element::{widen, Element};
use super::gemm::{matmul, Blocking, Rows, Strided};
use super::mask::{Logits, RowRanges};
use super::simd::Vector;
use crate::params::AttnCall;

/// Rows a block aims for: query positions × the heads of a GQA group.
pub const BLOCK_ROWS: usize = 128;
/// Keys per tile.
pub const BLOCK_N: usize = 128;

/// Which rows and keys a block covers. Row `r` is query position `pos0 + r / group` of head
/// `hk * group + r % group`.
#[derive(Debug, Clone, Copy)]
pub struct BlockId {
    pub b: usize,
    pub hk: usize,
    pub pos0: usize,
    pub positions: usize,
    /// The keys of this split, `[lo, hi)`; `(0, usize::MAX)` for all of them.
    pub keys: (usize, usize),
}

impl BlockId {
    pub fn rows(&self, call: &AttnCall) -> usize {
        self.positions * call.group_size()
    }

    /// Query position and head of row `r`.
    pub fn row(&self, call: &AttnCall, r: usize) -> (usize, usize) {
        let g = call.group_size();
        (self.pos0 + r / g, self.hk * g + r % g)
    }
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

/// Per-thread working memory, reused from block to block. After [`run`]: `acc` holds the
/// unnormalized output rows (`rows × d`), `row_max` and `row_sum` the softmax state per row.
#[derive(Default)]
pub struct Scratch {
    q_t: Vec<f32>,
    scores_t: Vec<f32>,
    pub acc: Vec<f32>,
    pub row_max: Vec<f32>,
    pub row_sum: Vec<f32>,
    correction: Vec<f32>,
    k_tile: Vec<f32>,
    v_tile: Vec<f32>,
}

/// A row stride of at least `n` f32s that is an odd number of 64-byte lines. Rows a multiple of
/// 512 bytes apart (d = 128, 128 query rows) all map to a few L1 sets, so a 16 KiB panel of
/// them would not stay in L1; an odd line count spreads them over every set.
pub fn spread_stride(n: usize) -> usize {
    let lines = n.div_ceil(16);
    (lines | 1) * 16
}

fn reset(buf: &mut Vec<f32>, len: usize, value: f32) {
    buf.clear();
    buf.resize(len, value);
}

#[derive(Clone, Copy)]
enum Kv {
    K,
    V,
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
    /// Rows `[j0, j1)` of k or v as an f32 matrix: in place for f32 inputs, else widened into
    /// `scratch`. Returns the pointer and row stride.
    ///
    /// # Safety
    /// The CPU must have `V`'s features.
    #[inline(always)]
    unsafe fn kv_tile<V: Vector>(&self, which: Kv, scratch: &mut Vec<f32>, at: TileAt) -> (*const f32, usize) {
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
        let rows = &src[start..start + (n - 1) * view.row_stride + d];
        // Copied (and widened) even for f32: rows of a (b, s, h, d) tensor lie h·d elements
        // apart, often a multiple of 4 KiB, and reading them in place costs the products cache
        // set conflicts and a new page per row; the copy costs 1/rows of the products.
        let stride = spread_stride(d);
        // Every element read later is overwritten below: grow, never clear.
        if scratch.len() < n * stride {
            scratch.resize(n * stride, 0.0);
        }
        for (r, dst) in scratch[..n * stride].chunks_exact_mut(stride).enumerate() {
            // SAFETY: features per the caller.
            unsafe { widen::<T, V>(&rows[r * view.row_stride..][..d], &mut dst[..d]) };
        }
        (scratch.as_ptr(), stride)
    }
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

/// Runs block `id` into `s` (see [`Scratch`]).
///
/// # Safety
/// The CPU must have the features of `K`'s vectors.
#[inline(always)]
pub unsafe fn run<T: Element, K: Blocking>(inp: &Inputs<'_, T>, id: BlockId, s: &mut Scratch) {
    let call = inp.call;
    let d = call.head_dim;
    let seq = call.seqs.get(id.b);
    let rows = id.rows(call);
    // The transposed queries are the vector operand of the scores: whole 8-lane vectors, and
    // a stride that keeps panels in L1.
    let cols = rows.next_multiple_of(8);
    let ld = spread_stride(cols);

    // Qᵀ (d × ld), pre-multiplied by the softmax scale; padding columns stay 0.
    reset(&mut s.q_t, d * ld, 0.0);
    let mut positions = Vec::with_capacity(rows);
    let mut heads = Vec::with_capacity(rows);
    for r in 0..rows {
        let (pos, h) = id.row(call, r);
        let at = call.q.at(id.b, seq.q_start + pos, h);
        for (kk, x) in inp.q[at..at + d].iter().enumerate() {
            s.q_t[kk * ld + r] = x.to_f32() * call.softmax_scale;
        }
        positions.push(pos);
        heads.push(h);
    }

    let no_prefix: &[(i32, i32)] = &[];
    let prefix = inp.prefix_ranges.map_or(no_prefix, |p| p[id.b].as_slice());
    let ranges = RowRanges::new(call, &seq, prefix, &positions);
    let shift = seq.k_len as i64 - seq.q_len as i64;
    let logits = Logits {
        softcap: call.softcap,
        alibi_slopes: inp.alibi_slopes.map(|slopes| heads.iter().map(|&h| slopes[h]).collect()),
        ranges: &ranges,
        key_pos: positions.iter().map(|&i| i as i64 + shift).collect(),
    };

    reset(&mut s.acc, rows * d, 0.0);
    reset(&mut s.row_max, ld, f32::NEG_INFINITY);
    reset(&mut s.row_sum, ld, 0.0);
    reset(&mut s.correction, ld, 1.0);
    reset(&mut s.scores_t, BLOCK_N * ld, 0.0);

    let (span_lo, span_hi) = ranges.span();
    let (lo, hi) = (span_lo.max(id.keys.0), span_hi.min(id.keys.1));
    let mut j0 = lo;
    while j0 < hi {
        let j1 = tile_end(call, j0, hi);
        let n = j1 - j0;
        let at = TileAt { b: id.b, hk: id.hk, k_start: seq.k_start, j0, j1 };
        // SAFETY (whole loop body): features per the caller; the matrices passed to `matmul`
        // are the scratch buffers sized above (q_t d × ld, scores_t BLOCK_N × ld, acc rows × d)
        // and the k/v tiles `kv_tile` returns (n rows of d at their row stride).
        unsafe {
            let (k_ptr, k_stride) = inp.kv_tile::<K::T>(Kv::K, &mut s.k_tile, at);
            // Sᵀ (n × cols) = K (n × d) · Qᵀ (d × cols).
            matmul::<K>(
                n,
                cols,
                d,
                Strided { ptr: k_ptr, row_stride: k_stride, col_stride: 1 },
                Rows { ptr: s.q_t.as_ptr(), row_stride: ld },
                Rows { ptr: s.scores_t.as_mut_ptr(), row_stride: ld },
                false,
            );
            logits.apply_transposed(&mut s.scores_t, ld, rows, j0, n);
            softmax_tile::<K>(&mut s.scores_t, n, cols, ld, &mut s.row_max, &mut s.row_sum, &mut s.correction);
            for (r, &c) in s.correction[..rows].iter().enumerate() {
                if c != 1.0 {
                    s.acc[r * d..(r + 1) * d].iter_mut().for_each(|x| *x *= c);
                }
            }
            let (v_ptr, v_stride) = inp.kv_tile::<K::T>(Kv::V, &mut s.v_tile, at);
            // O (rows × d) += P (rows × n) · V (n × d), P read from Pᵀ.
            matmul::<K>(
                rows,
                d,
                n,
                Strided { ptr: s.scores_t.as_ptr(), row_stride: 1, col_stride: ld },
                Rows { ptr: v_ptr, row_stride: v_stride },
                Rows { ptr: s.acc.as_mut_ptr(), row_stride: d },
                true,
            );
        }
        j0 = j1;
    }
}

/// The online-softmax step of a tile of transposed scores (`n` keys × `cols` rows, row stride
/// `ld`): updates each
/// row's running max and sum, replaces the scores by `e^(s - max)`, and leaves in `correction`
/// the factor the row's accumulated output must be scaled by.
///
/// # Safety
/// The CPU must have the features of `K`'s vectors.
#[inline(always)]
unsafe fn softmax_tile<K: Blocking>(st: &mut [f32], n: usize, cols: usize, ld: usize, row_max: &mut [f32], row_sum: &mut [f32], correction: &mut [f32]) {
    let mut c = 0;
    // SAFETY: every column chunk lies inside `cols` (a multiple of 8, at most `ld`), and `st`
    // holds n × ld.
    unsafe {
        while c + K::V::LANES <= cols {
            softmax_lanes::<K::V>(st, n, ld, c, row_max, row_sum, correction);
            c += K::V::LANES;
        }
        while c < cols {
            softmax_lanes::<K::T>(st, n, ld, c, row_max, row_sum, correction);
            c += K::T::LANES;
        }
    }
}

/// [`softmax_tile`] for the rows `c..c + V::LANES`.
#[inline(always)]
unsafe fn softmax_lanes<V: Vector>(st: &mut [f32], n: usize, ld: usize, c: usize, row_max: &mut [f32], row_sum: &mut [f32], correction: &mut [f32]) {
    assert!(c + V::LANES <= ld && st.len() >= n * ld && row_max.len() >= ld && row_sum.len() >= ld && correction.len() >= ld);
    let base = st.as_mut_ptr();
    // SAFETY (whole body): in bounds per the assertion; features per the caller.
    unsafe {
        let old_max = V::load(row_max.as_ptr().add(c));
        let mut tile_max = V::splat(f32::NEG_INFINITY);
        for j in 0..n {
            tile_max = tile_max.max(V::load(base.add(j * ld + c)));
        }
        let new_max = old_max.max(tile_max);
        // A row that has seen no key yet keeps max -inf; shifting by 0 then gives e^-inf = 0.
        let shift = new_max.neg_inf_to_zero();
        let mut sum = V::splat(0.0);
        for j in 0..n {
            let at = base.add(j * ld + c);
            let p = V::load(at).sub(shift).exp();
            p.store(at);
            sum = sum.add(p);
        }
        let corr = old_max.sub(shift).exp();
        V::load(row_sum.as_ptr().add(c)).mul_add(corr, sum).store(row_sum.as_mut_ptr().add(c));
        new_max.store(row_max.as_mut_ptr().add(c));
        corr.store(correction.as_mut_ptr().add(c));
    }
}
