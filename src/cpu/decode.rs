//! The products of blocks with few query rows per k/v head ([`STREAM_MAX_ROWS`] or fewer:
//! decode). Each K and V element serves a handful of rows, so the work is reading memory: K and
//! V are read in place, key by key across the block's k/v heads (memory order for a
//! (b, s, h, d) cache), converted to f32 in registers and never copied.
//!
//! - scores: one dot product along d per key and query row, `DOT_KEYS` keys × [`ROWS`] rows of
//!   vector accumulators summed across lanes at the end (the broadcast product of `gemm.rs`
//!   would cost one broadcast and one FMA per K element whatever the row count);
//! - outputs: [`ROWS`] rows × `OUT_VECS` vectors of output in registers over [`OUT_KEYS`] keys.
//!
//! bf16 rows load two vectors at a time split by parity, one bit operation each
//! ([`Element::load_pair`]); the queries and the outputs of such blocks sit in that order
//! ([`pair_slots`]) until `block::run` puts the outputs back ([`restore_order`]).

use super::block::{prefetch, Inputs, Kv, Level, Scratch, Tile};
use super::element::Element;
use super::gemm::Blocking;
use super::simd::Vector;

/// Blocks with at most this many live rows per k/v head take these products.
pub const STREAM_MAX_ROWS: usize = 8;
/// Keys per tile: the scores of a tile (keys × rows) stay in L1 between the products.
pub const STREAM_TILE_KEYS: usize = 64;
/// Query rows per register tile of both products: a GQA group of 4 (or 8, in two) takes each
/// K and V element into a register once.
const ROWS: usize = 4;
/// How many keys ahead the scores ask for K rows of 2-byte elements in L1. Measured at 32k
/// keys, 2 threads: 9.5-11.8 GB/s of bf16 K/V without, 12.0-12.5 with (Xeon); f32 rows,
/// twice as long, lost 9-28% with it (4-16 keys ahead), and the hardware prefetchers serve
/// them alone.
const K_AHEAD: usize = 16;

/// `s.scores_t` (keys × ld) = K · Qᵀ for every head of the tile, from `s.q_rows` (the scaled
/// queries, one row of d per block row), and V of the tile brought to L2 for [`outputs`].
/// Dead rows' scores are left alone.
///
/// # Safety
/// The CPU must have the features of `K`'s vectors; `s` is sized for the tile's block.
#[inline(always)]
pub unsafe fn scores<T: Element, K: Blocking>(inp: &Inputs<'_, T>, s: &mut Scratch, tile: &Tile) {
    let (d, n, ld) = (inp.call.head_dim, tile.keys(), tile.ld);
    let (src, row_stride, head_stride) = inp.source_rows(Kv::K, tile.at, tile.heads);
    let (v_src, v_row_stride, v_head_stride) = inp.source_rows(Kv::V, tile.at, tile.heads);
    // f32 V rows that lie one after another (every k/v head of a (b, s, h, d) cache) are one
    // run of memory the hardware prefetchers stream alone: asking for them too made a 32k-key
    // decode 13-24% slower (EPYC, 1 and 2 threads; Xeon, 2 and 16 threads). bf16 and f16 runs
    // keep the requests: without them the Xeon took 18-30% longer at 2 threads.
    let ask_v = !(T::IS_F32 && in_one_run(v_row_stride, v_head_stride, tile.heads, d));
    // K rows `K_AHEAD` keys on, in this tile or the next: (rows, row stride, head stride, key).
    let next_k = tile.next.filter(|_| !T::IS_F32).map(|next| (inp.source_rows(Kv::K, next, tile.heads), next.j1 - next.j0));
    let k_ahead = |key: usize| {
        let ahead = key + K_AHEAD;
        if ahead < n {
            Some((src, row_stride, head_stride, ahead))
        } else {
            next_k.filter(|&(_, keys)| ahead - n < keys).map(|((rows, rs, hs), _)| (rows, rs, hs, ahead - n))
        }
    };
    assert!(s.q_rows.len() >= tile.heads * tile.head_cols * d && s.scores_t.len() >= n * ld);
    let (q, out) = (s.q_rows.as_ptr(), s.scores_t.as_mut_ptr());
    let mut j = 0;
    // SAFETY (whole body): `source_rows` covers keys < n of every head; rows r < head_rows of
    // each head lie inside q_rows and the scores (asserted); features per the caller.
    unsafe {
        while j < n {
            let keys = if n - j >= K::DOT_KEYS { K::DOT_KEYS } else { 1 };
            // `outputs` reads V head by head, a key row apart: too far apart for the hardware
            // prefetchers unless the rows are one run of f32 (`ask_v`). Bring other V to L2 in
            // memory order, and K rows of reduced precision ahead of the dot products into L1.
            for key in j..j + keys {
                if ask_v {
                    (0..tile.heads).for_each(|head| prefetch(&v_src[key * v_row_stride + head * v_head_stride..][..d], Level::L2));
                }
                if let Some((rows, rs, hs, ahead)) = k_ahead(key).filter(|_| !T::IS_F32) {
                    (0..tile.heads).for_each(|head| prefetch(&rows[ahead * rs + head * hs..][..d], Level::L1));
                }
            }
            for (head, row, take) in row_tiles(tile) {
                let k = Rows { ptr: src.as_ptr().add(j * row_stride + head * head_stride), stride: row_stride };
                let (q, out) = (q.add(row * d), out.add(j * ld + row));
                macro_rules! dots {
                    ($($keys:literal)*) => {
                        match keys {
                            $($keys => match take {
                                1 => dot_tile::<T, K, $keys, 1>(d, k, q, out, ld),
                                2 => dot_tile::<T, K, $keys, 2>(d, k, q, out, ld),
                                3 => dot_tile::<T, K, $keys, 3>(d, k, q, out, ld),
                                _ => dot_tile::<T, K, $keys, 4>(d, k, q, out, ld),
                            },)*
                            _ => unreachable!("DOT_KEYS is 1, 2 or 4"),
                        }
                    };
                }
                dots!(1 2 4);
            }
            j += keys;
        }
    }
}

/// Whether rows of `heads` heads of `d` elements, with these strides, fill one run of memory.
fn in_one_run(row_stride: usize, head_stride: usize, heads: usize, d: usize) -> bool {
    row_stride == heads * d && (heads == 1 || head_stride == d)
}

/// The register tiles of both products, for every head of the tile: `(head, row, rows)`, the
/// tile's first row in the block and its [`ROWS`] rows (fewer at the end of a head's rows).
fn row_tiles(tile: &Tile) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
    (0..tile.heads).flat_map(move |head| {
        (0..tile.head_rows).step_by(ROWS).map(move |r| (head, head * tile.head_cols + r, ROWS.min(tile.head_rows - r)))
    })
}

/// Rows of K or V in place: row `i` at `ptr + i * stride`.
#[derive(Clone, Copy)]
struct Rows<T> {
    ptr: *const T,
    stride: usize,
}

/// `N` keys against `R` query rows (`q`, d apart): `N × R` vector accumulators; score (key i,
/// row r) goes to `out[i * ld + r]`.
#[inline(always)]
unsafe fn dot_tile<T: Element, K: Blocking, const N: usize, const R: usize>(d: usize, k: Rows<T>, q: *const f32, out: *mut f32, ld: usize) {
    // SAFETY (whole body): per `scores`; chunks stay below d (a multiple of 8).
    unsafe {
        let mut sums = [[0.0f32; R]; N];
        let c = dot_chunks::<T, K::V, N, R>(0, d, k, q, &mut sums);
        dot_chunks::<T, K::T, N, R>(c, d, k, q, &mut sums);
        for (i, row) in sums.iter().enumerate() {
            for (r, &x) in row.iter().enumerate() {
                *out.add(i * ld + r) = x;
            }
        }
    }
}

/// Adds the dot products over the elements `c..` (whole vectors of `V` only) to `sums`; returns
/// where it stopped. Pairs of vectors first, in the layout of [`pair_slots`], then single ones.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // acc is [key][row]; the loops run rows outer, keys inner.
unsafe fn dot_chunks<T: Element, V: Vector, const N: usize, const R: usize>(
    mut c: usize,
    d: usize,
    k: Rows<T>,
    q: *const f32,
    sums: &mut [[f32; R]; N],
) -> usize {
    if c + V::LANES > d {
        return c;
    }
    // SAFETY (whole body): per `scores`.
    unsafe {
        let mut acc = [[V::splat(0.0); R]; N];
        while c + 2 * V::LANES <= d {
            let kv: [(V, V); N] = std::array::from_fn(|i| T::load_pair::<V>(k.ptr.add(i * k.stride + c)));
            for r in 0..R {
                let (q0, q1) = (V::load(q.add(r * d + c)), V::load(q.add(r * d + c + V::LANES)));
                for i in 0..N {
                    acc[i][r] = kv[i].1.mul_add(q1, kv[i].0.mul_add(q0, acc[i][r]));
                }
            }
            c += 2 * V::LANES;
        }
        while c + V::LANES <= d {
            let kv: [V; N] = std::array::from_fn(|i| T::load::<V>(k.ptr.add(i * k.stride + c)));
            for r in 0..R {
                let qv = V::load(q.add(r * d + c));
                for i in 0..N {
                    acc[i][r] = kv[i].mul_add(qv, acc[i][r]);
                }
            }
            c += V::LANES;
        }
        for (sums_i, acc_i) in sums.iter_mut().zip(&acc) {
            // Padded to 4 vectors for the four-way lane sum; the padding's sums are dropped.
            let four = V::sum_lanes4(std::array::from_fn(|r| if r < R { acc_i[r] } else { V::splat(0.0) }));
            for (x, add) in sums_i.iter_mut().zip(four) {
                *x += add;
            }
        }
    }
    c
}

/// Where each element of a `d`-long query or output row sits in these products' layout, for
/// vectors of `lanes`, into `slots`: inputs whose pairs of vectors load split by parity (bf16,
/// [`Element::load_pair`]) keep each whole group of `2 × lanes` elements as its even-indexed
/// elements, then its odd ones; the rest, and every other input, in order.
pub fn pair_slots<T: Element>(d: usize, lanes: usize, slots: &mut Vec<usize>) {
    slots.clear();
    let group = 2 * lanes;
    let whole = if T::PAIRS_BY_PARITY { d / group * group } else { 0 };
    for base in (0..whole).step_by(group) {
        slots.extend((0..group).map(|within| base + within / 2 + (within % 2) * lanes));
    }
    slots.extend(whole..d);
}

/// Puts the first `rows` output rows of `acc` (d apart) back in order from the layout of
/// [`pair_slots`] (`slots`).
pub fn restore_order<T: Element>(acc: &mut [f32], rows: usize, slots: &[usize]) {
    if !T::PAIRS_BY_PARITY {
        return;
    }
    let d = slots.len();
    let mut row = vec![0.0f32; d];
    for r in 0..rows {
        let out = &mut acc[r * d..(r + 1) * d];
        for (x, &slot) in row.iter_mut().zip(slots) {
            *x = out[slot];
        }
        out.copy_from_slice(&row);
    }
}

/// `s.acc += P · V` for every head of the tile, P being the probabilities left in `s.scores_t`;
/// only live rows are touched. Per head, [`ROWS`] rows by `OUT_VECS` vectors of their output
/// stay in registers over [`OUT_KEYS`] keys, so each probability is broadcast once per such
/// panel and each V element converted once per [`ROWS`] rows.
///
/// # Safety
/// As for [`scores`].
#[inline(always)]
pub unsafe fn outputs<T: Element, K: Blocking>(inp: &Inputs<'_, T>, s: &mut Scratch, tile: &Tile) {
    let (d, n, ld) = (inp.call.head_dim, tile.keys(), tile.ld);
    let (src, row_stride, head_stride) = inp.source_rows(Kv::V, tile.at, tile.heads);
    assert!(s.acc.len() >= tile.heads * tile.head_cols * d && s.scores_t.len() >= n * ld);
    let (p, acc) = (s.scores_t.as_ptr(), s.acc.as_mut_ptr());
    // SAFETY (whole body): as in `scores`, with acc for q_rows.
    unsafe {
        for j in (0..n).step_by(OUT_KEYS) {
            let keys = OUT_KEYS.min(n - j);
            for (head, row, take) in row_tiles(tile) {
                let v = Rows { ptr: src.as_ptr().add(j * row_stride + head * head_stride), stride: row_stride };
                let panel = Panel { n: keys, d, v, p: p.add(j * ld + row), ld, acc: acc.add(row * d) };
                match take {
                    1 => panel.add_rows::<K, 1>(),
                    2 => panel.add_rows::<K, 2>(),
                    3 => panel.add_rows::<K, 3>(),
                    _ => panel.add_rows::<K, 4>(),
                }
            }
        }
    }
}

/// Keys per pass of [`outputs`] over a head's columns: V rows of one head lie a whole key row
/// apart (often a multiple of 4 KiB), so they share L1 sets; this many stay within the
/// associativity while the passes over the columns reread them.
const OUT_KEYS: usize = 8;

/// `R` output rows of one head against the tile's `n` V rows:
/// `acc[r] += Σ_j p[j * ld + r] · v[j]`.
struct Panel<T> {
    n: usize,
    d: usize,
    v: Rows<T>,
    p: *const f32,
    ld: usize,
    acc: *mut f32,
}

impl<T: Element> Panel<T> {
    #[inline(always)]
    unsafe fn add_rows<K: Blocking, const R: usize>(&self) {
        // SAFETY: per `outputs`; column panels stay below d.
        unsafe {
            // Whole pairs of vectors first (`OUT_VECS` is even), as `pair_slots` lays them out.
            let wide = K::OUT_VECS * K::V::LANES;
            let mut c = 0;
            while c + wide <= self.d {
                c = match K::OUT_VECS {
                    2 => self.add_columns::<K::V, R, 2>(c),
                    _ => self.add_columns::<K::V, R, 4>(c),
                };
            }
            while c + 2 * K::V::LANES <= self.d {
                c = self.add_columns::<K::V, R, 2>(c);
            }
            while c + K::V::LANES <= self.d {
                c = self.add_columns::<K::V, R, 1>(c);
            }
            while c < self.d {
                c = self.add_columns::<K::T, R, 1>(c);
            }
        }
    }

    /// The columns `c..c + G * V::LANES`, loaded as pairs of vectors when `G` is even; returns
    /// where they end.
    #[inline(always)]
    unsafe fn add_columns<V: Vector, const R: usize, const G: usize>(&self, c: usize) -> usize {
        // SAFETY (whole body): per `outputs`.
        unsafe {
            let at = |r: usize, g: usize| self.acc.add(r * self.d + c + g * V::LANES);
            let mut a: [[V; G]; R] = std::array::from_fn(|r| std::array::from_fn(|g| V::load(at(r, g))));
            for j in 0..self.n {
                let row = self.v.ptr.add(j * self.v.stride + c);
                let mut vs = [V::splat(0.0); G];
                if G.is_multiple_of(2) {
                    for pair in 0..G / 2 {
                        (vs[2 * pair], vs[2 * pair + 1]) = T::load_pair::<V>(row.add(2 * pair * V::LANES));
                    }
                } else {
                    vs.iter_mut().enumerate().for_each(|(g, x)| *x = T::load::<V>(row.add(g * V::LANES)));
                }
                for (r, a_r) in a.iter_mut().enumerate() {
                    let p = V::splat(*self.p.add(j * self.ld + r));
                    for (x, v) in a_r.iter_mut().zip(&vs) {
                        *x = v.mul_add(p, *x);
                    }
                }
            }
            for (r, a_r) in a.iter().enumerate() {
                for (g, x) in a_r.iter().enumerate() {
                    x.store(at(r, g));
                }
            }
        }
        c + G * V::LANES
    }
}

#[cfg(test)]
mod tests {
    use super::in_one_run;
    use crate::cpu::testing::seeded;
    use rand::Rng;

    /// A (b, s, h, d) cache: a tile of every k/v head is one run, a tile of some of them is
    /// not; (b, h, s, d) memory of one head is one run, of two heads is not.
    #[test]
    fn one_run_means_every_head_of_a_key_back_to_back() {
        let (seed, mut rng) = seeded();
        for _ in 0..200 {
            let (d, heads_k) = (8 * rng.gen_range(1..33), rng.gen_range(1..17));
            let heads = rng.gen_range(1..=heads_k);
            // (b, s, h, d): keys heads_k * d apart, heads d apart.
            assert_eq!(in_one_run(heads_k * d, d, heads, d), heads == heads_k, "seed {seed}, d {d}, {heads} of {heads_k}");
            // (b, h, s, d): keys d apart, heads a whole sequence apart.
            let seq = rng.gen_range(2..5000);
            assert_eq!(in_one_run(d, seq * d, heads, d), heads == 1, "seed {seed}, d {d}, {heads} heads");
        }
    }
}
