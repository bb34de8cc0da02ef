//! The products of a block in f32, for every dtype on every CPU: queries pre-scaled and
//! transposed, K/V tiles copied (and widened) into scratch or, for f32 rows few heads reuse,
//! read in place. Blocks of at most `STREAM_MAX_ROWS` rows per head (decode) go to `decode.rs`.

use super::ahead::Ahead;
use super::block::{prefetch, spread_stride, Inputs, Kv, Level, Products, Scratch, Tile, PREFETCH_ROWS};
use super::decode::{self, STREAM_MAX_ROWS};
use super::element::{widen, Element};
use super::lines::Lines;
use super::gemm::{matmul, tiles, Blocking, Rows, Strided, Visible};
use super::simd::Vector;
use std::marker::PhantomData;

/// f32 products with the register tiles of `K`.
pub struct F32<K>(PhantomData<K>);

/// Where `kv_tiles` left a tile: row `r` of the tile's head `head` at
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

/// The tile's k or v rows for every head as f32 matrices: copied (widened if need be) into
/// `scratch`, or, for one head of f32 input and `tile.copy == false`, in place.
///
/// # Safety
/// The CPU must have the features of `K::T`.
#[inline(always)]
unsafe fn kv_tiles<T: Element, K: Blocking>(inp: &Inputs<'_, T>, which: Kv, scratch: &mut Lines<f32>, tile: &Tile) -> KvTiles {
    let (heads, n, d) = (tile.heads, tile.keys(), inp.call.head_dim);
    let (rows, row_stride, src_head_stride) = inp.source_rows(which, tile.at, heads);
    let row = |r: usize, head: usize| &rows[r * row_stride + head * src_head_stride..][..d];
    if T::IS_F32 && !tile.copy && heads == 1 {
        return KvTiles { ptr: rows.as_ptr().cast(), row_stride, head_stride: 0 };
    }
    // Copied (and widened) even for f32: rows of a (b, s, h, d) tensor lie h·d elements apart,
    // often a multiple of 4 KiB, and reading them in place costs the products cache set
    // conflicts and a new page per row; the copy costs 1/rows of the products. Keys outer,
    // heads inner: one key's k/v heads are contiguous, so several heads read memory in order.
    let stride = spread_stride(d);
    let head_stride = n * stride;
    // Every element read later is overwritten below: grow, never clear.
    if scratch.len() < heads * head_stride {
        scratch.resize(heads * head_stride, 0.0);
    }
    // The hardware prefetchers do not follow rows a page apart: ask for rows ahead.
    let prefetch_key = |r: usize| (0..heads).for_each(|head| prefetch(row(r, head), Level::L1));
    (0..PREFETCH_ROWS.min(n)).for_each(prefetch_key);
    for r in 0..n {
        if r + PREFETCH_ROWS < n {
            prefetch_key(r + PREFETCH_ROWS);
        }
        for head in 0..heads {
            let dst = &mut scratch[head * head_stride + r * stride..][..d];
            // SAFETY: features per the caller.
            unsafe { widen::<T, K::T>(row(r, head), dst) };
        }
    }
    KvTiles { ptr: scratch.as_ptr(), row_stride: stride, head_stride }
}

impl<T: Element, K: Blocking> Products<T> for F32<K> {
    type K = K;

    #[inline(always)]
    unsafe fn clear_queries(s: &mut Scratch, d: usize, ld: usize, by_rows: bool) {
        if by_rows {
            decode::pair_slots::<T>(d, K::V::LANES, &mut s.q_slots);
        }
        s.q_rows.reset(d * ld, 0.0);
    }

    #[inline(always)]
    unsafe fn pack_query(s: &mut Scratch, row: &[f32], r: usize, scale: f32, by_rows: bool) {
        let d = row.len();
        let dst = &mut s.q_rows[r * d..][..d];
        if by_rows {
            row.iter().zip(&s.q_slots).for_each(|(x, &slot)| dst[slot] = x * scale);
        } else {
            row.iter().zip(dst).for_each(|(x, q)| *q = x * scale);
        }
    }

    #[inline(always)]
    unsafe fn finish_queries(s: &mut Scratch, d: usize, ld: usize, rows: usize, by_rows: bool) {
        if by_rows {
            return;
        }
        // 8 × 8 blocks in registers: each column of Qᵀ gets a run of consecutive stores, where a
        // row at a time would store to d lines per row (Qᵀ outgrows L1: 2% of a one-thread
        // causal prefill, s=1024, on an EPYC); element by element they cost 1% of one at s=2048.
        // Columns from `rows` on are never read.
        s.q_t.resize(d * ld, 0.0);
        assert!(rows % 8 == 0 && rows <= ld && s.q_rows.len() >= rows * d && s.q_t.len() >= d * ld);
        let whole = d / 8 * 8;
        for r0 in (0..rows).step_by(8) {
            let block = &s.q_rows[r0 * d..][..8 * d];
            for k0 in (0..whole).step_by(8) {
                // SAFETY: rows r0..r0 + 8 of q_rows hold d >= k0 + 8 elements each, and columns
                // r0..r0 + 8 <= ld of q_t's rows k0..k0 + 8 < d exist (asserted); features per
                // the caller.
                unsafe {
                    let rows8 = std::array::from_fn(|r| K::T::load(block.as_ptr().add(r * d + k0)));
                    for (kk, column) in K::T::transpose8(rows8).iter().enumerate() {
                        column.store(s.q_t.as_mut_ptr().add((k0 + kk) * ld + r0));
                    }
                }
            }
            for kk in whole..d {
                let column = &mut s.q_t[kk * ld + r0..][..8];
                column.iter_mut().enumerate().for_each(|(r, q)| *q = block[r * d + kk]);
            }
        }
    }

    #[inline(always)]
    unsafe fn scores(inp: &Inputs<'_, T>, s: &mut Scratch, tile: &Tile) {
        if tile.head_rows <= STREAM_MAX_ROWS {
            // SAFETY: features per the caller; the scratch is sized for the block.
            return unsafe { decode::scores::<T, K>(inp, s, tile) };
        }
        let d = inp.call.head_dim;
        // SAFETY (whole body): features per the caller; q_t is d × ld and scores_t at least
        // keys × ld, each head at its column offset; the k tiles hold keys rows of d.
        unsafe {
            let k_tiles = kv_tiles::<T, K>(inp, Kv::K, &mut s.k_tile, tile);
            // This tile's V rows, for `outputs`' copy.
            let mut ahead = Ahead::new(inp, Kv::V, Some(tile.at), tile.heads, tile.heads * tiles::<K>(tile.keys(), tile.head_cols));
            for head in 0..tile.heads {
                let (k_ptr, k_stride) = k_tiles.head(head);
                let col = head * tile.head_cols;
                // Sᵀ (keys × head_cols) = K (keys × d) · Qᵀ (d × head_cols), this head's columns.
                matmul::<K>(
                    tile.keys(),
                    tile.head_cols,
                    d,
                    Strided { ptr: k_ptr, row_stride: k_stride, col_stride: 1 },
                    Rows { ptr: s.q_t.as_ptr().add(col), row_stride: tile.ld },
                    Rows { ptr: s.scores_t.as_mut_ptr().add(col), row_stride: tile.ld },
                    false,
                    if tile.staircase { Visible::RowsBelow(&s.key_ends[col..]) } else { Visible::All },
                    &mut ahead,
                );
            }
        }
    }

    #[inline(always)]
    unsafe fn outputs(inp: &Inputs<'_, T>, s: &mut Scratch, tile: &Tile) {
        if tile.head_rows <= STREAM_MAX_ROWS {
            // SAFETY: as above.
            return unsafe { decode::outputs::<T, K>(inp, s, tile) };
        }
        let d = inp.call.head_dim;
        // SAFETY (whole body): as in `scores`; acc holds rows × d, each head at its row offset.
        unsafe {
            let v_tiles = kv_tiles::<T, K>(inp, Kv::V, &mut s.v_tile, tile);
            // The next tile's K rows, for the next `scores`' copy.
            let mut ahead = Ahead::new(inp, Kv::K, tile.next, tile.heads, tile.heads * tiles::<K>(tile.head_rows, d));
            for head in 0..tile.heads {
                let (v_ptr, v_stride) = v_tiles.head(head);
                let row = head * tile.head_cols;
                // O (head_rows × d) += P (head_rows × keys) · V (keys × d), P read from Pᵀ.
                matmul::<K>(
                    tile.head_rows,
                    d,
                    tile.keys(),
                    Strided { ptr: s.scores_t.as_ptr().add(row), row_stride: 1, col_stride: tile.ld },
                    Rows { ptr: v_ptr, row_stride: v_stride },
                    Rows { ptr: s.acc.as_mut_ptr().add(row * d), row_stride: d },
                    true,
                    if tile.staircase { Visible::SharedBelow(&s.key_ends[row..]) } else { Visible::All },
                    &mut ahead,
                );
            }
        }
    }
}
