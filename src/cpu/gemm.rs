//! The one matrix product of the kernel, `C (+)= A · B`, register-blocked: a tile of `R` rows of
//! C by `NV` vectors of columns lives in registers while the shared dimension streams through.
//! A is read one element at a time and broadcast (any strides, so no packing: K rows for the
//! scores, the transposed probabilities for the output); B is read as vectors along its rows
//! (contiguous: the transposed queries, V rows); C's columns are contiguous.
//!
//! Both products of a key tile use it (see `products.rs`; `bf16.rs` runs it on pairs of bf16):
//! - scores, transposed: `Sᵀ (keys × rows) = K (keys × d) · Qᵀ (d × rows)`;
//! - output: `O (rows × d) += P (rows × keys) · V (keys × d)` with `P` read from `Pᵀ`.

use super::simd::Vector;

/// What the register tile multiplies: the accumulators `Acc` (f32 lanes), the A elements it
/// broadcasts and the B vectors it loads. One B vector covers `Acc::LANES` columns and holds
/// `B_PER_LANE` elements per column: 1 for f32, 2 for pairs of bf16 (`bf16.rs`), where one
/// step of the shared dimension consumes two of its elements.
pub trait Lane {
    type Acc: Vector;
    type AElem: Copy;
    type BElem: Copy;
    type Bv: Copy;
    const B_PER_LANE: usize;
    /// One B vector (`Acc::LANES * B_PER_LANE` elements at `p`).
    unsafe fn load_b(p: *const Self::BElem) -> Self::Bv;
    /// The A element at `p` in every lane.
    unsafe fn splat_a(p: *const Self::AElem) -> Self::Bv;
    /// `acc + a · b`, lane by lane (summed over the pair for bf16).
    unsafe fn fma(acc: Self::Acc, a: Self::Bv, b: Self::Bv) -> Self::Acc;
}

impl<V: Vector> Lane for V {
    type Acc = V;
    type AElem = f32;
    type BElem = f32;
    type Bv = V;
    const B_PER_LANE: usize = 1;
    #[inline(always)]
    unsafe fn load_b(p: *const f32) -> V {
        // SAFETY: forwarded contract.
        unsafe { V::load(p) }
    }
    #[inline(always)]
    unsafe fn splat_a(p: *const f32) -> V {
        // SAFETY: forwarded contract.
        unsafe { V::splat(*p) }
    }
    #[inline(always)]
    unsafe fn fma(acc: V, a: V, b: V) -> V {
        // SAFETY: forwarded contract.
        unsafe { a.mul_add(b, acc) }
    }
}

/// A matrix read by element: `(i, p)` is at `ptr[i * row_stride + p * col_stride]`.
#[derive(Clone, Copy)]
pub struct Strided<E> {
    pub ptr: *const E,
    pub row_stride: usize,
    pub col_stride: usize,
}

/// A matrix with contiguous rows: row `p` starts at `ptr[p * row_stride]`.
#[derive(Clone, Copy)]
pub struct Rows<P> {
    pub ptr: P,
    pub row_stride: usize,
}

/// Register tile sizes of an instruction set: `MR` rows by `NV` vectors of `V`, and the
/// 8-column lane `T` for column tails (every width here is a multiple of 8).
pub trait Blocking {
    type V: Lane;
    type T: Lane<AElem = A<Self>, BElem = B<Self>>;
    const MR: usize;
    const NV: usize;
    /// Query rows per register tile of the decode scores (`products.rs`, by dot products).
    const DOT_ROWS: usize;
}

type A<K> = <<K as Blocking>::V as Lane>::AElem;
type B<K> = <<K as Blocking>::V as Lane>::BElem;

/// `C (m × n) = [C +] A (m × k) · B (k × n)`; `n` must be a multiple of 8. For pairs, `k`
/// counts pairs, A's elements are pairs (strides still in elements) and B's rows hold pairs.
///
/// # Safety
/// `a`, `b` and `c` must be valid for every element the shapes and strides reach, and `c` must
/// not overlap `a` or `b`. The entry point must have the CPU features of `K::V` and `K::T`.
#[inline(always)]
pub unsafe fn matmul<K: Blocking>(m: usize, n: usize, k: usize, a: Strided<A<K>>, b: Rows<*const B<K>>, c: Rows<*mut f32>, accumulate: bool) {
    debug_assert_eq!(n % 8, 0);
    let lanes = <K::V as Lane>::Acc::LANES;
    let wide = K::NV * lanes;
    let mut j = 0;
    // SAFETY (whole body): every tile stays inside the m × n output and reads rows < m of A and
    // columns < n of B, which the caller guarantees valid.
    unsafe {
        while j + wide <= n {
            for_row_chunks::<K::V, K>(m, k, a, offset::<K::V>(b, j), offset_mut(c, j), accumulate, K::NV);
            j += wide;
        }
        while j + lanes <= n {
            for_row_chunks::<K::V, K>(m, k, a, offset::<K::V>(b, j), offset_mut(c, j), accumulate, 1);
            j += lanes;
        }
        while j < n {
            for_row_chunks::<K::T, K>(m, k, a, offset::<K::T>(b, j), offset_mut(c, j), accumulate, 1);
            j += <K::T as Lane>::Acc::LANES;
        }
    }
}

fn offset<L: Lane>(b: Rows<*const L::BElem>, cols: usize) -> Rows<*const L::BElem> {
    Rows { ptr: b.ptr.wrapping_add(cols * L::B_PER_LANE), row_stride: b.row_stride }
}

fn offset_mut(c: Rows<*mut f32>, cols: usize) -> Rows<*mut f32> {
    Rows { ptr: c.ptr.wrapping_add(cols), row_stride: c.row_stride }
}

/// One column panel (`nv` vectors of `L`) of C, over all rows in chunks of `K::MR`.
#[inline(always)]
unsafe fn for_row_chunks<L: Lane, K: Blocking>(m: usize, k: usize, a: Strided<L::AElem>, b: Rows<*const L::BElem>, c: Rows<*mut f32>, accumulate: bool, nv: usize) {
    let mut i = 0;
    while i < m {
        let rows = K::MR.min(m - i);
        let a_i = Strided { ptr: a.ptr.wrapping_add(i * a.row_stride), ..a };
        let c_i = Rows { ptr: c.ptr.wrapping_add(i * c.row_stride), ..c };
        // SAFETY: rows i..i + rows of A and C exist (rows <= m - i); the panel's columns exist.
        unsafe {
            if nv == 1 {
                tile_rows::<L, 1>(rows, k, a_i, b, c_i, accumulate)
            } else {
                debug_assert_eq!(nv, K::NV);
                tile_rows::<L, 2>(rows, k, a_i, b, c_i, accumulate)
            }
        }
        i += rows;
    }
}

/// Dispatches a run-time row count to the register tile of that many rows.
#[inline(always)]
unsafe fn tile_rows<L: Lane, const NV: usize>(rows: usize, k: usize, a: Strided<L::AElem>, b: Rows<*const L::BElem>, c: Rows<*mut f32>, accumulate: bool) {
    macro_rules! by_rows {
        ($($r:literal)*) => {
            match rows {
                // SAFETY: as the caller's: `rows` rows of A and C exist.
                $($r => unsafe { tile::<L, $r, NV>(k, a, b, c, accumulate) },)*
                _ => unreachable!("register tiles have at most 12 rows"),
            }
        };
    }
    by_rows!(1 2 3 4 5 6 7 8 9 10 11 12)
}

/// The register tile: `R` rows × `NV` vectors of C accumulated over the `k` shared steps.
#[inline(always)]
unsafe fn tile<L: Lane, const R: usize, const NV: usize>(k: usize, a: Strided<L::AElem>, b: Rows<*const L::BElem>, c: Rows<*mut f32>, accumulate: bool) {
    let lanes = L::Acc::LANES;
    // SAFETY (whole body): the caller guarantees R rows of A and C, k rows of B and NV vectors
    // of columns in B and C.
    unsafe {
        let mut acc = [[L::Acc::splat(0.0); NV]; R];
        for p in 0..k {
            let b_row = b.ptr.add(p * b.row_stride);
            let bv: [L::Bv; NV] = std::array::from_fn(|v| L::load_b(b_row.add(v * lanes * L::B_PER_LANE)));
            let a_col = a.ptr.add(p * a.col_stride);
            for (i, acc_row) in acc.iter_mut().enumerate() {
                let ai = L::splat_a(a_col.add(i * a.row_stride));
                for (x, bx) in acc_row.iter_mut().zip(&bv) {
                    *x = L::fma(*x, ai, *bx);
                }
            }
        }
        for (i, acc_row) in acc.iter().enumerate() {
            let c_row = c.ptr.add(i * c.row_stride);
            for (v, x) in acc_row.iter().enumerate() {
                let at = c_row.add(v * lanes);
                let sum = if accumulate { L::Acc::load(at).add(*x) } else { *x };
                sum.store(at);
            }
        }
    }
}
