//! One unit of parallel work: a block of query rows that share one k/v head (every query head of
//! its GQA group at a run of positions), swept over the keys it may see (or one split of them)
//! with the online softmax. K/V tiles are read, and widened when they are not f32, once for the
//! whole group. Memory per block is O(tile): nothing of size s_q × s_k exists.
//!
//! The scores are kept transposed (keys × rows): the queries are packed once per block as the
//! vector operand of both products, K and V rows are read in place, and the softmax runs along
//! vector lanes (one lane per row). See `gemm.rs`.

use super::decode::{restore_order, STREAM_MAX_ROWS, STREAM_TILE_KEYS};
use super::element::Element;
use super::gemm::Blocking;
use super::lines::Lines;
use super::mask::{Logits, RowRanges};
use super::simd::Vector;
use crate::params::AttnCall;

/// Rows a block aims for: query positions × the heads of a GQA group. Each K/V tile is copied
/// (or packed for AMX) once per block, and a block's queries once for all its tiles: more rows
/// spread both thinner. 256 against 128: a Zen 3 core (AVX2, 512 KiB L2), one thread, f32,
/// s=2048: 3% faster, its K/V copies 5.9% -> 3.8% of the time; the Xeon (AVX-512, AMX), 2 and
/// 16 threads: 14 of 16 cells as fast or faster (f32 0.83-1.02, bf16 0.73-1.23 of the time).
pub const BLOCK_ROWS: usize = 256;
/// Keys per tile.
pub const BLOCK_N: usize = 128;
/// Keys per tile in blocks of several k/v heads.
const PACKED_TILE_KEYS: usize = 32;

/// Which rows and keys a block covers: the query heads of k/v heads `hk0..hk0 + heads` at
/// positions `pos0..pos0 + positions`, against the keys `keys`. Each k/v head owns `head_cols`
/// rows: its `head_rows` live rows (position-major, then the heads of its GQA group), then, for
/// the broadcast products, dead padding rows up to a multiple of 8 (their vector width) that
/// are computed on zero queries and never written. Blocks of `decode.rs` (at most
/// `STREAM_MAX_ROWS` rows per head) pack their heads' rows densely and pad only at the end.
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
        let rows = self.head_rows(call);
        if rows <= STREAM_MAX_ROWS {
            rows
        } else {
            rows.next_multiple_of(8)
        }
    }

    /// All rows, dead ones included (a multiple of 8, the softmax's vector width): the height
    /// of the block's output buffer.
    pub fn rows(&self, call: &AttnCall) -> usize {
        (self.heads * self.head_cols(call)).next_multiple_of(8)
    }

    /// Query position and head of row `r`; `None` for a dead row.
    pub fn row(&self, call: &AttnCall, r: usize) -> Option<(usize, usize)> {
        let g = call.group_size();
        let (head, local) = (r / self.head_cols(call), r % self.head_cols(call));
        (head < self.heads && local < self.head_rows(call)).then(|| (self.pos0 + local / g, (self.hk0 + head) * g + local % g))
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
    pub q_t: Lines<f32>,
    /// The queries as rows (blocks of few rows per head: `decode.rs`), in its element order:
    /// element `e` at `q_slots[e]`.
    pub q_rows: Lines<f32>,
    pub q_slots: Vec<usize>,
    pub scores_t: Lines<f32>,
    pub acc: Lines<f32>,
    pub row_max: Lines<f32>,
    pub row_sum: Lines<f32>,
    correction: Lines<f32>,
    /// Per row, where the current tile's visible keys end (`RowRanges::key_ends`).
    pub key_ends: Vec<usize>,
    pub k_tile: Lines<f32>,
    pub v_tile: Lines<f32>,
    /// The AMX products' operands (`amx.rs`): Q rows, Kᵀ and V as pairs, P rows, all bf16,
    /// and the f32 output rows.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub q_pairs: Lines<u16>,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub k_pairs: Lines<u16>,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub v_pairs: Lines<u16>,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub p_rows: Lines<u16>,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub acc_rows: Lines<f32>,
}

/// A row stride of at least `n` f32s that is an odd number of 64-byte lines. Rows a multiple of
/// 512 bytes apart (d = 128, 128 query rows) all map to a few L1 sets, so a 16 KiB panel of
/// them would not stay in L1; an odd line count spreads them over every set.
pub fn spread_stride(n: usize) -> usize {
    let lines = n.div_ceil(16);
    (lines | 1) * 16
}

#[derive(Clone, Copy)]
pub enum Kv {
    K,
    V,
}

/// Where a key tile sits: sequence `b`, k/v head `hk`, keys `[j0, j1)` (never across a page).
#[derive(Clone, Copy)]
pub struct TileAt {
    pub b: usize,
    pub hk: usize,
    pub k_start: usize,
    pub j0: usize,
    pub j1: usize,
}

impl<T: Element> Inputs<'_, T> {
    /// The memory of keys `[j0, j1)` of k or v for the k/v heads `at.hk..at.hk + heads`: a
    /// slice and the strides of its rows and heads (row `r` of head `head` starts at
    /// `r * row_stride + head * head_stride`, `head_dim` elements long).
    pub fn source_rows(&self, which: Kv, at: TileAt, heads: usize) -> (&[T], usize, usize) {
        let call = self.call;
        let (src, view) = match which {
            Kv::K => (self.k, call.k),
            Kv::V => (self.v, call.v),
        };
        let start = match &call.seqs.paging {
            Some(paging) => {
                let (block, slot) = paging.locate(at.b, at.j0);
                view.at(block, slot, at.hk)
            }
            None => view.at(at.b, at.k_start + at.j0, at.hk),
        };
        let n = at.j1 - at.j0;
        let len = (n - 1) * view.row_stride + (heads - 1) * view.head_stride + call.head_dim;
        (&src[start..start + len], view.row_stride, view.head_stride)
    }
}

/// How far ahead (in rows) the K/V copy prefetches: enough bytes in flight to cover memory
/// latency at one core's share of the bandwidth.
pub const PREFETCH_ROWS: usize = 16;

/// The cache a prefetch fills.
#[derive(Clone, Copy)]
pub enum Level {
    L1,
    L2,
}

/// Asks the CPU to bring `data` into `level` ahead of its use (no effect off x86-64).
#[inline(always)]
pub fn prefetch<T>(data: &[T], level: Level) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        // From the line holding the first byte to the one holding the last: a row that does not
        // start on a line spans one line more than its length.
        let misalign = data.as_ptr() as usize % 64;
        let (start, bytes) = (data.as_ptr().cast::<i8>().wrapping_sub(misalign), misalign + std::mem::size_of_val(data));
        for offset in (0..bytes).step_by(64) {
            // SAFETY: a prefetch never faults, and the address lies in a line that holds `data`.
            unsafe {
                match level {
                    Level::L1 => _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(offset)),
                    Level::L2 => _mm_prefetch::<_MM_HINT_T1>(start.wrapping_add(offset)),
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (data, level);
}

/// End (exclusive) of the key tile starting at `j0`: at most `max_keys` keys, never past `hi`,
/// never across a page boundary.
pub fn tile_end(call: &AttnCall, j0: usize, hi: usize, max_keys: usize) -> usize {
    let end = (j0 + max_keys).min(hi);
    match &call.seqs.paging {
        Some(p) => end.min((j0 / p.page_block_size + 1) * p.page_block_size),
        None => end,
    }
}

/// Runs block `id` into `s` (see [`Scratch`]) with the products `P`.
///
/// # Safety
/// The CPU must have the features `P` is compiled for.
#[inline(always)]
pub unsafe fn run<T: Element, P: Products<T>>(inp: &Inputs<'_, T>, id: BlockId, s: &mut Scratch) {
    let call = inp.call;
    let d = call.head_dim;
    let seq = call.seqs.get(id.b);
    let rows = id.rows(call);
    let (head_rows, head_cols) = (id.head_rows(call), id.head_cols(call));
    // The transposed queries are the vector operand of the scores; a stride that keeps their
    // panels in L1.
    let ld = spread_stride(rows);

    // The queries in the products' layout (Qᵀ, d × ld, or rows for `decode.rs`); dead rows
    // are 0.
    let by_rows = head_rows <= STREAM_MAX_ROWS;
    P::clear_queries(s, d, ld, by_rows);
    let mut query = vec![0.0f32; d];
    let logits = prepare_rows(inp, id, |r, row| {
        T::to_f32_slice(row, &mut query);
        P::pack_query(s, &query, r, call.softmax_scale, by_rows)
    });
    P::finish_queries(s, d, ld, rows, by_rows);

    s.acc.reset(rows * d, 0.0);
    s.row_max.reset(ld, f32::NEG_INFINITY);
    s.row_sum.reset(ld, 0.0);
    s.correction.reset(ld, 1.0);
    s.scores_t.reset(BLOCK_N * ld, 0.0);

    // Few rows per k/v head: each k/v row is used a few times only, and f32 rows are read in
    // place; their strides hurt only panels that many rows reuse, which a copy fixes. (Blocks
    // of at most `STREAM_MAX_ROWS` never copy: `decode.rs`.)
    let copy = head_rows > 16;
    // Blocks of several k/v heads that copy do so for all of them: shorter tiles keep those
    // copies in L2.
    let tile_keys = if by_rows {
        STREAM_TILE_KEYS
    } else if id.heads > 1 {
        PACKED_TILE_KEYS
    } else {
        BLOCK_N
    };
    let (span_lo, span_hi) = logits.ranges.span();
    let (lo, hi) = (span_lo.max(id.keys.0), span_hi.min(id.keys.1));
    let mut j0 = lo;
    while j0 < hi {
        let j1 = tile_end(call, j0, hi, tile_keys);
        let at = TileAt { b: id.b, hk: id.hk0, k_start: seq.k_start, j0, j1 };
        let staircase = logits.ranges.key_ends(j0, j1 - j0, &mut s.key_ends);
        let tile = Tile {
            at,
            next: (j1 < hi).then(|| TileAt { j0: j1, j1: tile_end(call, j1, hi, tile_keys), ..at }),
            heads: id.heads,
            copy,
            staircase,
            head_rows,
            head_cols,
            ld,
        };
        // SAFETY: features per the caller; the scratch buffers are sized above for this block.
        unsafe {
            P::scores(inp, s, &tile);
            // A causal diagonal: the softmax hides the keys past each row's end itself (scalar
            // stores of -inf a row stride apart cost 1.1% of a one-thread causal prefill).
            let ends_masked = logits.apply(&mut s.scores_t, ld, 1, rows, j0, j1 - j0, staircase);
            let ends = ends_masked.then_some(s.key_ends.as_slice());
            softmax_tile::<P::K>(&mut s.scores_t, j1 - j0, rows, ld, ends, &mut s.row_max, &mut s.row_sum, &mut s.correction);
            for (r, &c) in s.correction[..rows].iter().enumerate() {
                if c != 1.0 {
                    s.acc[r * d..(r + 1) * d].iter_mut().for_each(|x| *x *= c);
                }
            }
            P::outputs(inp, s, &tile);
        }
        j0 = j1;
    }
    if by_rows {
        restore_order::<T>(&mut s.acc, rows, &s.q_slots);
    }
}

/// The masks and logit transforms of block `id`'s rows; hands each live row's query (its
/// `head_dim` elements) to `pack` with its row index. Dead rows borrow the position and head
/// of their (or the last) k/v head's last live row, so they change no mask or span.
pub fn prepare_rows<T: Element>(inp: &Inputs<'_, T>, id: BlockId, mut pack: impl FnMut(usize, &[T])) -> Logits {
    let call = inp.call;
    let (d, seq, rows) = (call.head_dim, call.seqs.get(id.b), id.rows(call));
    let (head_rows, head_cols) = (id.head_rows(call), id.head_cols(call));
    let mut positions = Vec::with_capacity(rows);
    let mut heads = Vec::with_capacity(rows);
    let query = |r: usize| id.row(call, r).map(|(pos, h)| &inp.q[call.q.at(id.b, seq.q_start + pos, h)..][..d]);
    // Query rows lie a page apart as K/V rows do: ask for them a few rows ahead.
    let ask = |r: usize| query(r).map(|q| prefetch(q, Level::L1));
    (0..PREFETCH_ROWS.min(rows)).for_each(|r| _ = ask(r));
    for r in 0..rows {
        _ = ask(r + PREFETCH_ROWS);
        let (pos, h) = match id.row(call, r) {
            Some((pos, h)) => {
                let at = call.q.at(id.b, seq.q_start + pos, h);
                pack(r, &inp.q[at..at + d]);
                (pos, h)
            }
            None => {
                let head = (r / head_cols).min(id.heads - 1);
                id.row(call, head * head_cols + head_rows - 1).expect("a k/v head has a live row")
            }
        };
        positions.push(pos);
        heads.push(h);
    }
    let no_prefix: &[(i32, i32)] = &[];
    let prefix = inp.prefix_ranges.map_or(no_prefix, |p| p[id.b].as_slice());
    let shift = seq.k_len as i64 - seq.q_len as i64;
    Logits {
        softcap: call.softcap,
        alibi_slopes: inp.alibi_slopes.map(|slopes| heads.iter().map(|&h| slopes[h]).collect()),
        ranges: RowRanges::new(call, &seq, prefix, &positions),
        key_pos: positions.iter().map(|&i| i as i64 + shift).collect(),
    }
}

/// One key tile of a block, for the products: keys `at.j0..at.j1` of k/v heads
/// `at.hk..at.hk + heads`. Head `head`'s rows sit at rows (and columns of the transposed
/// scores) `head * head_cols..`, `head_rows` of them live; `ld` is the row stride of the
/// transposed queries and scores.
pub struct Tile {
    pub at: TileAt,
    /// The block's next tile, if any (`decode.rs` prefetches its first K rows).
    pub next: Option<TileAt>,
    pub heads: usize,
    /// Copy K/V tiles rather than read f32 ones in place (see `run`).
    pub copy: bool,
    /// Some rows see only the first keys of the tile: `Scratch::key_ends` says which.
    pub staircase: bool,
    pub head_rows: usize,
    pub head_cols: usize,
    pub ld: usize,
}

impl Tile {
    pub fn keys(&self) -> usize {
        self.at.j1 - self.at.j0
    }
}

/// How a block's two products are computed (in f32 on any CPU and dtype: `products.rs`; bf16
/// prefill blocks on AMX have their own loop, `amx.rs`).
pub trait Products<T: Element> {
    /// The vectors of the softmax between the products.
    type K: Blocking;
    /// Zeroes the query rows of a block (`Scratch::q_rows`, `ld` rows of `d`).
    unsafe fn clear_queries(s: &mut Scratch, d: usize, ld: usize, by_rows: bool);
    /// Packs one query row, scaled, as row `r` of `q_rows` (in `decode.rs`' element order when
    /// `by_rows`, blocks of few rows per head).
    unsafe fn pack_query(s: &mut Scratch, row: &[f32], r: usize, scale: f32, by_rows: bool);
    /// Once every row is packed: unless `by_rows`, transposes the block's `rows` query rows into
    /// `Scratch::q_t` (d × ld).
    unsafe fn finish_queries(s: &mut Scratch, d: usize, ld: usize, rows: usize, by_rows: bool);
    /// `s.scores_t` (keys × ld) = K · Qᵀ · scale for every head of the tile.
    unsafe fn scores(inp: &Inputs<'_, T>, s: &mut Scratch, tile: &Tile);
    /// `s.acc += P · V` for every head, P being the probabilities left in `s.scores_t`.
    unsafe fn outputs(inp: &Inputs<'_, T>, s: &mut Scratch, tile: &Tile);
}

/// The online-softmax step of a tile of transposed scores (`n` keys × `cols` rows, row stride
/// `ld`): updates each row's running max and sum, replaces the scores by `e^(s - max)`, and
/// leaves in `correction` the factor the row's accumulated output must be scaled by. With
/// `ends`, row `r` sees only the tile's first `ends[r]` keys: the rest count as -inf, and the
/// keys past every end of a vector's rows are not computed but set to 0 (the output product
/// reads up to the end of its own rows, which may lie further).
///
/// # Safety
/// The CPU must have the features of `K`'s vectors.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn softmax_tile<K: Blocking>(st: &mut [f32], n: usize, cols: usize, ld: usize, ends: Option<&[usize]>, row_max: &mut [f32], row_sum: &mut [f32], correction: &mut [f32]) {
    let mut c = 0;
    // SAFETY: every column chunk lies inside `cols` (a multiple of 8, at most `ld`), and `st`
    // holds n × ld.
    unsafe {
        while c + K::V::LANES <= cols {
            softmax_lanes::<K::V>(st, n, ld, c, ends, row_max, row_sum, correction);
            c += K::V::LANES;
        }
        while c < cols {
            softmax_lanes::<K::T>(st, n, ld, c, ends, row_max, row_sum, correction);
            c += K::T::LANES;
        }
    }
}

/// [`softmax_tile`] for the rows `c..c + V::LANES`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn softmax_lanes<V: Vector>(st: &mut [f32], n: usize, ld: usize, c: usize, ends: Option<&[usize]>, row_max: &mut [f32], row_sum: &mut [f32], correction: &mut [f32]) {
    assert!(c + V::LANES <= ld && st.len() >= n * ld && row_max.len() >= ld && row_sum.len() >= ld && correction.len() >= ld);
    assert!(V::LANES <= 16 && ends.is_none_or(|e| e.len() >= c + V::LANES));
    // Keys below `all` are seen by every row here, keys from `any` on by none; between, each
    // lane hides the keys from its end on.
    let (all, any, lane_ends) = match ends {
        Some(ends) => {
            let mine = &ends[c..c + V::LANES];
            let mut lanes = [0.0f32; 16];
            lanes.iter_mut().zip(mine).for_each(|(x, &e)| *x = e as f32);
            (mine.iter().copied().min().unwrap_or(n).min(n), mine.iter().copied().max().unwrap_or(n).min(n), lanes)
        }
        None => (n, n, [0.0; 16]),
    };
    let base = st.as_mut_ptr();
    // SAFETY (whole body): in bounds per the assertions; features per the caller.
    unsafe {
        let lane_ends = V::load(lane_ends.as_ptr());
        let at = |j: usize| base.add(j * ld + c);
        let old_max = V::load(row_max.as_ptr().add(c));
        let mut tile_max = V::splat(f32::NEG_INFINITY);
        for j in 0..all {
            tile_max = tile_max.max(V::load(at(j)));
        }
        for j in all..any {
            tile_max = tile_max.max(V::load(at(j)).hide_from(j as f32, lane_ends));
        }
        let new_max = old_max.max(tile_max);
        // A row that has seen no key yet keeps max -inf; shifting by 0 then gives e^-inf = 0.
        let shift = new_max.neg_inf_to_zero();
        let mut sum = V::splat(0.0);
        for j in 0..all {
            let p = V::load(at(j)).sub(shift).exp();
            p.store(at(j));
            sum = sum.add(p);
        }
        for j in all..any {
            let p = V::load(at(j)).hide_from(j as f32, lane_ends).sub(shift).exp();
            p.store(at(j));
            sum = sum.add(p);
        }
        for j in any..n {
            V::splat(0.0).store(at(j));
        }
        let corr = old_max.sub(shift).exp();
        V::load(row_sum.as_ptr().add(c)).mul_add(corr, sum).store(row_sum.as_mut_ptr().add(c));
        new_max.store(row_max.as_mut_ptr().add(c));
        corr.store(correction.as_mut_ptr().add(c));
    }
}
