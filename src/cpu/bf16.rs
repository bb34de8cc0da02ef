//! bf16 inputs on CPUs with AVX512-BF16: both products on pairs of bf16 with `vdpbf16ps`,
//! which sums 32 bf16 products into 16 f32 lanes per instruction, twice the f32 FMA rate, and
//! reads K as it is (nothing to widen).
//!
//! - Q is packed unscaled (scaling it would round it a second time); the scores are scaled in
//!   f32 after the product.
//! - The probabilities are rounded to bf16 for the second product, as GPU flash attention does;
//!   the softmax state and the row sums stay f32.
//! - Layouts: an operand whose shared dimension is the vector one (Qᵀ, V) is stored as pairs
//!   along it (`[pair][column][2]`); one broadcast A element is a pair (two adjacent bf16 of a
//!   K row, or a packed pair of probabilities).

use super::block::{prefetch, reset, spread_stride, Inputs, Kv, Products, Scratch, Tile, PREFETCH_ROWS};
use super::gemm::{matmul, Blocking, Lane, Rows, Strided};
use super::simd::{F32x16, F32x8, Vector};
use half::bf16;
use std::arch::x86_64::*;

/// 16 f32 lanes fed by pairs of bf16 in a zmm register.
#[derive(Clone, Copy)]
pub struct PairsZmm;
/// 8 f32 lanes fed by pairs of bf16 in a ymm register (column tails).
#[derive(Clone, Copy)]
pub struct PairsYmm;

// SAFETY (every method of both impls): the entry point has AVX512-BF16/F/BW/VL (checked by
// `Isa::detect`); pointer validity is the caller's contract, stated on `Lane`.
impl Lane for PairsZmm {
    type Acc = F32x16;
    type AElem = u16;
    type BElem = u16;
    type Bv = __m512i;
    const B_PER_LANE: usize = 2;
    #[inline(always)]
    unsafe fn load_b(p: *const u16) -> __m512i {
        _mm512_loadu_si512(p.cast())
    }
    #[inline(always)]
    unsafe fn splat_a(p: *const u16) -> __m512i {
        _mm512_set1_epi32(p.cast::<i32>().read_unaligned())
    }
    #[inline(always)]
    unsafe fn fma(acc: F32x16, a: __m512i, b: __m512i) -> F32x16 {
        F32x16(_mm512_dpbf16_ps(acc.0, std::mem::transmute::<__m512i, __m512bh>(a), std::mem::transmute::<__m512i, __m512bh>(b)))
    }
}

impl Lane for PairsYmm {
    type Acc = F32x8;
    type AElem = u16;
    type BElem = u16;
    type Bv = __m256i;
    const B_PER_LANE: usize = 2;
    #[inline(always)]
    unsafe fn load_b(p: *const u16) -> __m256i {
        _mm256_loadu_si256(p.cast())
    }
    #[inline(always)]
    unsafe fn splat_a(p: *const u16) -> __m256i {
        _mm256_set1_epi32(p.cast::<i32>().read_unaligned())
    }
    #[inline(always)]
    unsafe fn fma(acc: F32x8, a: __m256i, b: __m256i) -> F32x8 {
        F32x8(_mm256_dpbf16_ps(acc.0, std::mem::transmute::<__m256i, __m256bh>(a), std::mem::transmute::<__m256i, __m256bh>(b)))
    }
}

/// The register tiles of the bf16 products: 12 rows × 2 zmm, as the f32 AVX-512 ones.
pub struct Avx512Bf16;

impl Blocking for Avx512Bf16 {
    type V = PairsZmm;
    type T = PairsYmm;
    const MR: usize = 12;
    const NV: usize = 2;
}

/// The bf16 products (see the module comment).
pub struct Bf16Products;

/// Row stride, in bf16 elements, for rows of `n` bf16: an odd number of 64-byte lines.
fn spread_stride_u16(n: usize) -> usize {
    spread_stride(n.div_ceil(2)) * 2
}

/// `lo` and `hi` rounded to bf16 (to nearest even) and packed as one pair: `lo` in the low half.
#[inline(always)]
fn pair_bits(lo: f32, hi: f32) -> u32 {
    let round = |x: f32| {
        let bits = x.to_bits();
        bits.wrapping_add(0x7fff + ((bits >> 16) & 1))
    };
    (round(hi) & 0xffff_0000) | (round(lo) >> 16)
}

/// [`pair_bits`] for 16 lanes.
#[inline(always)]
unsafe fn pair_bits_x16(lo: __m512i, hi: __m512i) -> __m512i {
    let round = |x: __m512i| {
        let odd = _mm512_and_si512(_mm512_srli_epi32::<16>(x), _mm512_set1_epi32(1));
        _mm512_add_epi32(x, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)))
    };
    let high = _mm512_and_si512(round(hi), _mm512_set1_epi32(0xffff_0000_u32 as i32));
    _mm512_or_si512(high, _mm512_srli_epi32::<16>(round(lo)))
}

/// `dst[2i] = a[i]`, `dst[2i + 1] = b[i]` for the `len` elements of two rows (`b` zeros when
/// `None`): two key rows of V as pairs.
#[inline(always)]
unsafe fn interleave(a: &[u16], b: Option<&[u16]>, dst: &mut [u16]) {
    let len = a.len();
    let mut c = 0;
    // SAFETY (whole body): every access is below `len` in `a`/`b` and `2 * len` in `dst`.
    unsafe {
        let first: [i16; 32] = std::array::from_fn(|i| if i % 2 == 0 { (i / 2) as i16 } else { (32 + i / 2) as i16 });
        let second: [i16; 32] = std::array::from_fn(|i| first[i] + 16);
        let (first, second) = (_mm512_loadu_si512(first.as_ptr().cast()), _mm512_loadu_si512(second.as_ptr().cast()));
        while c + 32 <= len {
            let x = _mm512_loadu_si512(a.as_ptr().add(c).cast());
            let y = match b {
                Some(b) => _mm512_loadu_si512(b.as_ptr().add(c).cast()),
                None => _mm512_setzero_si512(),
            };
            _mm512_storeu_si512(dst.as_mut_ptr().add(2 * c).cast(), _mm512_permutex2var_epi16(x, first, y));
            _mm512_storeu_si512(dst.as_mut_ptr().add(2 * c + 32).cast(), _mm512_permutex2var_epi16(x, second, y));
            c += 32;
        }
    }
    for i in c..len {
        dst[2 * i] = a[i];
        dst[2 * i + 1] = b.map_or(0, |b| b[i]);
    }
}

/// `rows` of bf16 as their raw bits.
fn bits(rows: &[bf16]) -> &[u16] {
    // SAFETY: bf16 is a transparent u16.
    unsafe { std::slice::from_raw_parts(rows.as_ptr().cast(), rows.len()) }
}

/// Multiplies `cols` columns (a multiple of 8) of `n` rows (stride `ld`) by `scale`.
#[inline(always)]
unsafe fn scale_scores(st: &mut [f32], n: usize, cols: usize, ld: usize, scale: f32) {
    assert!(st.len() >= n * ld && cols <= ld);
    // SAFETY (whole body): in bounds per the assertion; features per the caller.
    unsafe {
        let (wide, narrow) = (F32x16::splat(scale), F32x8::splat(scale));
        for j in 0..n {
            let row = st.as_mut_ptr().add(j * ld);
            let mut c = 0;
            while c + 16 <= cols {
                F32x16::load(row.add(c)).mul(wide).store(row.add(c));
                c += 16;
            }
            if c < cols {
                F32x8::load(row.add(c)).mul(narrow).store(row.add(c));
            }
        }
    }
}

impl Products<bf16> for Bf16Products {
    type K = Avx512Bf16;

    #[inline(always)]
    unsafe fn clear_queries(s: &mut Scratch, d: usize, ld: usize) {
        reset(&mut s.q_pairs, d * ld, 0);
    }

    #[inline(always)]
    unsafe fn pack_query(s: &mut Scratch, row: &[bf16], r: usize, ld: usize, _scale: f32) {
        for (kk, x) in row.iter().enumerate() {
            s.q_pairs[(kk / 2) * 2 * ld + 2 * r + kk % 2] = x.to_bits();
        }
    }

    #[inline(always)]
    unsafe fn scores(inp: &Inputs<'_, bf16>, s: &mut Scratch, tile: &Tile) {
        let (d, n, heads) = (inp.call.head_dim, tile.keys(), tile.heads);
        let (rows, row_stride, src_head_stride) = inp.source_rows(Kv::K, tile.at, heads);
        let rows = bits(rows);
        // K is read as pairs in place for one head; several heads are copied key by key (in
        // memory order), at strides that keep the tile's rows apart in L1.
        let (k_ptr, k_stride, k_head_stride) = if heads == 1 && !tile.copy {
            (rows.as_ptr(), row_stride, 0)
        } else {
            let stride = spread_stride_u16(d);
            if s.k_pairs.len() < heads * n * stride {
                s.k_pairs.resize(heads * n * stride, 0);
            }
            let row = |r: usize, head: usize| &rows[r * row_stride + head * src_head_stride..][..d];
            for r in 0..n {
                if r + PREFETCH_ROWS < n {
                    (0..heads).for_each(|head| prefetch(row(r + PREFETCH_ROWS, head)));
                }
                for head in 0..heads {
                    s.k_pairs[(head * n + r) * stride..][..d].copy_from_slice(row(r, head));
                }
            }
            (s.k_pairs.as_ptr(), stride, n * stride)
        };
        // SAFETY (whole body): features per the caller; q_pairs holds d/2 pair rows of ld
        // columns, scores_t keys × ld, the k rows d elements each.
        unsafe {
            for head in 0..heads {
                let col = head * tile.head_cols;
                matmul::<Avx512Bf16>(
                    n,
                    tile.head_cols,
                    d / 2,
                    Strided { ptr: k_ptr.add(head * k_head_stride), row_stride: k_stride, col_stride: 2 },
                    Rows { ptr: s.q_pairs.as_ptr().add(2 * col), row_stride: 2 * tile.ld },
                    Rows { ptr: s.scores_t.as_mut_ptr().add(col), row_stride: tile.ld },
                    false,
                );
            }
            scale_scores(&mut s.scores_t, n, heads * tile.head_cols, tile.ld, inp.call.softmax_scale);
        }
    }

    #[inline(always)]
    unsafe fn outputs(inp: &Inputs<'_, bf16>, s: &mut Scratch, tile: &Tile) {
        let (d, n, heads, ld) = (inp.call.head_dim, tile.keys(), tile.heads, tile.ld);
        let cols = heads * tile.head_cols;
        let pairs = n.div_ceil(2);
        // P as pairs of keys: p_pairs[q * ld + c] packs the probabilities of keys 2q and 2q + 1
        // (0 past the tile) of row c.
        reset(&mut s.p_pairs, pairs * ld, 0);
        for q in 0..pairs {
            let lo = &s.scores_t[2 * q * ld..][..cols];
            let hi = (2 * q + 1 < n).then(|| &s.scores_t[(2 * q + 1) * ld..][..cols]);
            let dst = &mut s.p_pairs[q * ld..][..cols];
            let mut c = 0;
            // SAFETY: 16 lanes inside `cols` of each row; features per the caller.
            unsafe {
                while c + 16 <= cols {
                    let x = _mm512_loadu_si512(lo.as_ptr().add(c).cast());
                    let y = hi.map_or(_mm512_setzero_si512(), |h| _mm512_loadu_si512(h.as_ptr().add(c).cast()));
                    _mm512_storeu_si512(dst.as_mut_ptr().add(c).cast(), pair_bits_x16(x, y));
                    c += 16;
                }
            }
            for c in c..cols {
                dst[c] = pair_bits(lo[c], hi.map_or(0.0, |h| h[c]));
            }
        }
        // V as pairs of keys, per head: v_pairs[head][q][2 * dim + {0, 1}].
        let (rows, row_stride, src_head_stride) = inp.source_rows(Kv::V, tile.at, heads);
        let rows = bits(rows);
        let row = |r: usize, head: usize| &rows[r * row_stride + head * src_head_stride..][..d];
        let stride = 2 * spread_stride(d);
        let head_stride = pairs * stride;
        if s.v_pairs.len() < heads * head_stride {
            s.v_pairs.resize(heads * head_stride, 0);
        }
        for q in 0..pairs {
            if 2 * q + PREFETCH_ROWS < n {
                (0..heads).for_each(|head| prefetch(row(2 * q + PREFETCH_ROWS, head)));
            }
            for head in 0..heads {
                let second = (2 * q + 1 < n).then(|| row(2 * q + 1, head));
                // SAFETY: features per the caller.
                unsafe { interleave(row(2 * q, head), second, &mut s.v_pairs[head * head_stride + q * stride..][..2 * d]) };
            }
        }
        // SAFETY (whole body): features per the caller; p_pairs holds pairs × ld pairs,
        // v_pairs each head's pairs rows of d columns, acc rows × d.
        unsafe {
            for head in 0..heads {
                let row = head * tile.head_cols;
                matmul::<Avx512Bf16>(
                    tile.head_rows,
                    d,
                    pairs,
                    Strided { ptr: s.p_pairs.as_ptr().add(row).cast::<u16>(), row_stride: 2, col_stride: 2 * ld },
                    Rows { ptr: s.v_pairs.as_ptr().add(head * head_stride), row_stride: stride },
                    Rows { ptr: s.acc.as_mut_ptr().add(row * d), row_stride: d },
                    true,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::pair_bits;
    use half::bf16;

    #[test]
    fn pairs_round_to_nearest_bf16() {
        for (lo, hi) in [(1.0f32, 0.333_333), (0.0, 1e-30), (0.999_999, 0.5), (3.141_592_7, 2.718_281_8)] {
            let p = pair_bits(lo, hi);
            assert_eq!(p as u16, bf16::from_f32(lo).to_bits(), "low half of ({lo}, {hi})");
            assert_eq!((p >> 16) as u16, bf16::from_f32(hi).to_bits(), "high half of ({lo}, {hi})");
        }
    }
}
