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
/// Keys per tile in blocks of several k/v heads.
const PACKED_TILE_KEYS: usize = 32;

/// Which rows and keys a block covers: the query heads of k/v heads `hk0..hk0 + heads` at
/// positions `pos0..pos0 + positions`, against the keys `keys`. Each k/v head owns `head_cols`
/// rows (a multiple of 8, the vector width of the scores' product): its `head_rows` live rows
/// (position-major, then the heads of its GQA group), then dead padding rows that are computed
/// on zero queries and never written.
#[derive(Debug, Clone, Copy)]
pub struct BlockId {
    pub b: usize,
    pub hk0: usize,
    pub heads: usize,
    pub pos0: usize,
    pub positions: usize,
    /// The keys of this split, `[lo, hi)`; `(0, usize::MAX)` for all of them.
    pub keys: (usize, usize),
}

impl BlockId {
    /// Live rows per k/v head.
    pub fn head_rows(&self, call: &AttnCall) -> usize {
        self.positions * call.group_size()
    }

    pub fn head_cols(&self, call: &AttnCall) -> usize {
        self.head_rows(call).next_multiple_of(8)
    }

    /// All rows, dead ones included: the height of the block's output buffer.
    pub fn rows(&self, call: &AttnCall) -> usize {
        self.heads * self.head_cols(call)
    }

    /// Query position and head of row `r`; `None` for a dead row.
    pub fn row(&self, call: &AttnCall, r: usize) -> Option<(usize, usize)> {
        let g = call.group_size();
        let (head, local) = (r / self.head_cols(call), r % self.head_cols(call));
        (local < self.head_rows(call)).then(|| (self.pos0 + local / g, (self.hk0 + head) * g + local % g))
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

/// Where `kv_tiles` left a tile: row `r` of k/v head `hk0 + head` at
/// `ptr[head * head_stride + r * row_stride]`.
#[derive(Clone, Copy)]
struct KvTiles {
    ptr: *const f32,
    row_stride: usize,
    head_stride: usize,
}

impl KvTiles {
    fn head(&self, head: usize) -> (*const f32, usize) {
        (self.ptr.wrapping_add(head * self.head_stride), self.row_stride)
    }
}

impl<T: Element> Inputs<'_, T> {
    /// Keys `[j0, j1)` of k or v for the k/v heads `at.hk..at.hk + heads`, as f32 matrices:
    /// copied (widened if need be) into `scratch`, or, for one head of f32 input and
    /// `copy == false`, in place.
    ///
    /// # Safety
    /// The CPU must have `V`'s features.
    #[inline(always)]
    unsafe fn kv_tiles<V: Vector>(&self, which: Kv, scratch: &mut Vec<f32>, at: TileAt, heads: usize, copy: bool) -> KvTiles {
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
        let rows = &src[start..start + (n - 1) * view.row_stride + (heads - 1) * view.head_stride + d];
        let row = |r: usize, head: usize| &rows[r * view.row_stride + head * view.head_stride..][..d];
        if T::IS_F32 && !copy && heads == 1 {
            return KvTiles { ptr: rows.as_ptr().cast(), row_stride: view.row_stride, head_stride: 0 };
        }
        // Copied (and widened) even for f32: rows of a (b, s, h, d) tensor lie h·d elements
        // apart, often a multiple of 4 KiB, and reading them in place costs the products cache
        // set conflicts and a new page per row; the copy costs 1/rows of the products. Keys
        // outer, heads inner: one key's k/v heads are contiguous, so several heads read memory
        // in order.
        let stride = spread_stride(d);
        let head_stride = n * stride;
        // Every element read later is overwritten below: grow, never clear.
        if scratch.len() < heads * head_stride {
            scratch.resize(heads * head_stride, 0.0);
        }
        // The hardware prefetchers do not follow rows a page apart: the copy asks for the
        // rows PREFETCH_ROWS ahead itself.
        let prefetch_key = |r: usize| (0..heads).for_each(|head| prefetch(row(r, head)));
        (0..PREFETCH_ROWS.min(n)).for_each(prefetch_key);
        for r in 0..n {
            if r + PREFETCH_ROWS < n {
                prefetch_key(r + PREFETCH_ROWS);
            }
            for head in 0..heads {
                let dst = &mut scratch[head * head_stride + r * stride..][..d];
                // SAFETY: features per the caller.
                unsafe { widen::<T, V>(row(r, head), dst) };
            }
        }
        KvTiles { ptr: scratch.as_ptr(), row_stride: stride, head_stride }
    }
}

/// How far ahead (in rows) the K/V copy prefetches: enough bytes in flight to cover memory
/// latency at one core's share of the bandwidth.
const PREFETCH_ROWS: usize = 16;

/// Asks the CPU to bring `data` into L1 ahead of its use (no effect off x86-64).
#[inline(always)]
fn prefetch<T>(data: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        let (start, bytes) = (data.as_ptr().cast::<i8>(), std::mem::size_of_val(data));
        for offset in (0..bytes).step_by(64) {
            // SAFETY: a prefetch never faults, and the address lies inside `data`.
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(start.add(offset)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}

/// End (exclusive) of the key tile starting at `j0`: at most `max_keys` keys, never past `hi`,
/// never across a page boundary.
fn tile_end(call: &AttnCall, j0: usize, hi: usize, max_keys: usize) -> usize {
    let end = (j0 + max_keys).min(hi);
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
    let (head_rows, head_cols) = (id.head_rows(call), id.head_cols(call));
    // The transposed queries are the vector operand of the scores; a stride that keeps their
    // panels in L1.
    let ld = spread_stride(rows);

    // Qᵀ (d × ld), pre-multiplied by the softmax scale; dead rows stay 0. Dead rows borrow the
    // position and head of their k/v head's last live row, so they change no mask or span.
    reset(&mut s.q_t, d * ld, 0.0);
    let mut positions = Vec::with_capacity(rows);
    let mut heads = Vec::with_capacity(rows);
    for r in 0..rows {
        let (pos, h) = match id.row(call, r) {
            Some((pos, h)) => {
                let at = call.q.at(id.b, seq.q_start + pos, h);
                for (kk, x) in inp.q[at..at + d].iter().enumerate() {
                    s.q_t[kk * ld + r] = x.to_f32() * call.softmax_scale;
                }
                (pos, h)
            }
            None => id.row(call, r - r % head_cols + head_rows - 1).expect("a k/v head has a live row"),
        };
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

    // Few rows per k/v head (decode): each k/v row is used a few times only, and f32 rows are
    // read in place; their strides hurt only panels that many rows reuse, which a copy fixes.
    let copy = head_rows > 16;
    // Blocks of several k/v heads copy each tile for all of them: shorter tiles keep those
    // copies in L2.
    let tile_keys = if id.heads > 1 { PACKED_TILE_KEYS } else { BLOCK_N };
    let (span_lo, span_hi) = ranges.span();
    let (lo, hi) = (span_lo.max(id.keys.0), span_hi.min(id.keys.1));
    let mut j0 = lo;
    while j0 < hi {
        let j1 = tile_end(call, j0, hi, tile_keys);
        let n = j1 - j0;
        // SAFETY (whole loop body): features per the caller; the matrices passed to `matmul`
        // are the scratch buffers sized above (q_t d × ld, scores_t BLOCK_N × ld, acc rows × d,
        // each k/v head at its column or row offset `head * head_cols`) and the k/v tiles
        // `kv_tile` returns (n rows of d at their row stride).
        unsafe {
            // The heads of a block read slices of the same rows (one key's k/v heads are
            // contiguous), so a tile's pages are fetched once for all of them.
            let at = TileAt { b: id.b, hk: id.hk0, k_start: seq.k_start, j0, j1 };
            let k_tiles = inp.kv_tiles::<K::T>(Kv::K, &mut s.k_tile, at, id.heads, copy);
            for head in 0..id.heads {
                let (k_ptr, k_stride) = k_tiles.head(head);
                let col = head * head_cols;
                // Sᵀ (n × head_cols) = K (n × d) · Qᵀ (d × head_cols), this head's columns.
                matmul::<K>(
                    n,
                    head_cols,
                    d,
                    Strided { ptr: k_ptr, row_stride: k_stride, col_stride: 1 },
                    Rows { ptr: s.q_t.as_ptr().add(col), row_stride: ld },
                    Rows { ptr: s.scores_t.as_mut_ptr().add(col), row_stride: ld },
                    false,
                );
            }
            logits.apply_transposed(&mut s.scores_t, ld, rows, j0, n);
            softmax_tile::<K>(&mut s.scores_t, n, rows, ld, &mut s.row_max, &mut s.row_sum, &mut s.correction);
            for (r, &c) in s.correction[..rows].iter().enumerate() {
                if c != 1.0 {
                    s.acc[r * d..(r + 1) * d].iter_mut().for_each(|x| *x *= c);
                }
            }
            let v_tiles = inp.kv_tiles::<K::T>(Kv::V, &mut s.v_tile, at, id.heads, copy);
            for head in 0..id.heads {
                let (v_ptr, v_stride) = v_tiles.head(head);
                let row = head * head_cols;
                // O (head_rows × d) += P (head_rows × n) · V (n × d), P read from Pᵀ.
                matmul::<K>(
                    head_rows,
                    d,
                    n,
                    Strided { ptr: s.scores_t.as_ptr().add(row), row_stride: 1, col_stride: ld },
                    Rows { ptr: v_ptr, row_stride: v_stride },
                    Rows { ptr: s.acc.as_mut_ptr().add(row * d), row_stride: d },
                    true,
                );
            }
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
