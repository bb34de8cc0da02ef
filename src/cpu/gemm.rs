//! The one matrix product of the kernel, `C (+)= A · B`, register-blocked: a tile of `R` rows of
//! C by `NV` vectors of columns lives in registers while the shared dimension streams through.
//! A is read one element at a time and broadcast (any strides, so no packing: K rows for the
//! scores, the transposed probabilities for the output); B is read as vectors along its rows
//! (contiguous: the transposed queries, V rows); C's columns are contiguous.
//!
//! Both products of a key tile use it (see `products.rs`):
//! - scores, transposed: `Sᵀ (keys × rows) = K (keys × d) · Qᵀ (d × rows)`;
//! - output: `O (rows × d) += P (rows × keys) · V (keys × d)` with `P` read from `Pᵀ`.

use super::simd::Vector;

/// A matrix read by element: `(i, p)` is at `ptr[i * row_stride + p * col_stride]`.
#[derive(Clone, Copy)]
pub struct Strided {
    pub ptr: *const f32,
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
/// 8-lane vector `T` for column tails (every width here is a multiple of 8).
pub trait Blocking {
    type V: Vector;
    type T: Vector;
    const MR: usize;
    const NV: usize;
    /// Keys per register tile of the decode scores (`decode.rs`: keys × 4 query rows of
    /// vector accumulators).
    const DOT_KEYS: usize;
    /// Vectors of output columns per register panel of the decode outputs (`decode.rs`: 4 rows
    /// × this many vectors of accumulators).
    const OUT_VECS: usize;
}

/// Work spread over a product's register tiles: one step before each (`ahead.rs`).
pub trait Alongside {
    fn step(&mut self);
}

/// Nothing alongside.
impl Alongside for () {
    fn step(&mut self) {}
}

/// How many register tiles `matmul::<K>` runs for an `m × n` output: the steps of its
/// [`Alongside`].
pub fn tiles<K: Blocking>(m: usize, n: usize) -> usize {
    let (lanes, wide) = (K::V::LANES, K::NV * K::V::LANES);
    let panels = n / wide + (n % wide) / lanes + (n % lanes).div_ceil(K::T::LANES);
    panels * m.div_ceil(K::MR)
}

/// The part of a product a mask leaves to compute (a causal diagonal tile: about half).
#[derive(Clone, Copy)]
pub enum Visible<'a> {
    All,
    /// Column `j` of C needs only its rows below `ends[j]`: register tiles below every column's
    /// end are skipped and left unwritten (the scores, `Sᵀ = K · Qᵀ`: column `j` is a query row,
    /// and the mask overwrites the keys it hides).
    RowsBelow(&'a [usize]),
    /// Row `i` of C needs only the shared elements below `ends[i]` (the output, `O += P · V`: P
    /// is 0 at the keys the mask hid).
    SharedBelow(&'a [usize]),
}

/// `C (m × n) = [C +] A (m × k) · B (k × n)`, where `visible` says; `n` must be a multiple of
/// 8. `alongside` steps once per register tile, skipped ones included.
///
/// # Safety
/// `a`, `b` and `c` must be valid for every element the shapes and strides reach, and `c` must
/// not overlap `a` or `b`. The entry point must have the CPU features of `K::V` and `K::T`.
#[inline(always)]
pub unsafe fn matmul<K: Blocking>(m: usize, n: usize, k: usize, a: Strided, b: Rows<*const f32>, c: Rows<*mut f32>, accumulate: bool, visible: Visible, alongside: &mut impl Alongside) {
    debug_assert_eq!(n % 8, 0);
    let lanes = K::V::LANES;
    let wide = K::NV * lanes;
    let mut j = 0;
    // SAFETY (whole body): every tile stays inside the m × n output and reads rows < m of A and
    // columns < n of B, which the caller guarantees valid.
    unsafe {
        while j + wide <= n {
            for_row_chunks::<K::V, K>(m, k, a, offset(b, j), offset_mut(c, j), accumulate, K::NV, visible.panel(j..j + wide), alongside);
            j += wide;
        }
        while j + lanes <= n {
            for_row_chunks::<K::V, K>(m, k, a, offset(b, j), offset_mut(c, j), accumulate, 1, visible.panel(j..j + lanes), alongside);
            j += lanes;
        }
        while j < n {
            for_row_chunks::<K::T, K>(m, k, a, offset(b, j), offset_mut(c, j), accumulate, 1, visible.panel(j..j + K::T::LANES), alongside);
            j += K::T::LANES;
        }
    }
}

impl Visible<'_> {
    /// For the column panel `cols`: the rows of C to compute (`m` at most) and, per row, the
    /// shared elements to run over (`k` at most).
    #[inline(always)]
    fn panel(&self, cols: std::ops::Range<usize>) -> Panel<'_> {
        match *self {
            Visible::All => Panel { rows_below: usize::MAX, shared_below: None },
            Visible::RowsBelow(ends) => Panel { rows_below: ends[cols].iter().copied().max().unwrap_or(0), shared_below: None },
            Visible::SharedBelow(ends) => Panel { rows_below: usize::MAX, shared_below: Some(ends) },
        }
    }
}

/// [`Visible`] for one column panel.
#[derive(Clone, Copy)]
struct Panel<'a> {
    rows_below: usize,
    shared_below: Option<&'a [usize]>,
}

fn offset(b: Rows<*const f32>, cols: usize) -> Rows<*const f32> {
    Rows { ptr: b.ptr.wrapping_add(cols), row_stride: b.row_stride }
}

fn offset_mut(c: Rows<*mut f32>, cols: usize) -> Rows<*mut f32> {
    Rows { ptr: c.ptr.wrapping_add(cols), row_stride: c.row_stride }
}

/// One column panel (`nv` vectors of `V`) of C, over all rows in chunks of `K::MR`.
#[inline(always)]
unsafe fn for_row_chunks<V: Vector, K: Blocking>(m: usize, k: usize, a: Strided, b: Rows<*const f32>, c: Rows<*mut f32>, accumulate: bool, nv: usize, panel: Panel, alongside: &mut impl Alongside) {
    let short = short_chunks(m, K::MR);
    let mut i = 0;
    while i < m {
        let rows = if i < short * (K::MR - 1) { K::MR - 1 } else { K::MR.min(m - i) };
        alongside.step();
        if i >= panel.rows_below {
            i += rows;
            continue;
        }
        let k = panel.shared_below.map_or(k, |ends| k.min(ends[i..i + rows].iter().copied().max().unwrap_or(0)));
        let a_i = Strided { ptr: a.ptr.wrapping_add(i * a.row_stride), ..a };
        let c_i = Rows { ptr: c.ptr.wrapping_add(i * c.row_stride), ..c };
        // SAFETY: rows i..i + rows of A and C exist (rows <= m - i); the panel's columns exist.
        unsafe {
            if nv == 1 {
                tile_rows::<V, 1>(rows, k, a_i, b, c_i, accumulate)
            } else {
                debug_assert_eq!(nv, K::NV);
                tile_rows::<V, 2>(rows, k, a_i, b, c_i, accumulate)
            }
        }
        i += rows;
    }
}

/// How many row chunks of `mr - 1` rows come first, so that the rest splits into chunks of
/// `mr`: a last chunk of a few rows would run its multiply-adds at a fraction of the peak (too
/// few accumulators to cover their latency). m = 128, mr = 6: 4 chunks of 5 and 18 of 6, where
/// 21 of 6 left one of 2. The chunk count stays `m.div_ceil(mr)`.
fn short_chunks(m: usize, mr: usize) -> usize {
    let short = (mr - m % mr) % mr;
    if short * (mr - 1) <= m {
        short
    } else {
        0
    }
}

/// Dispatches a run-time row count to the register tile of that many rows.
#[inline(always)]
unsafe fn tile_rows<V: Vector, const NV: usize>(rows: usize, k: usize, a: Strided, b: Rows<*const f32>, c: Rows<*mut f32>, accumulate: bool) {
    macro_rules! by_rows {
        ($($r:literal)*) => {
            match rows {
                // SAFETY: as the caller's: `rows` rows of A and C exist.
                $($r => unsafe { tile::<V, $r, NV>(k, a, b, c, accumulate) },)*
                _ => unreachable!("register tiles have at most 12 rows"),
            }
        };
    }
    by_rows!(1 2 3 4 5 6 7 8 9 10 11 12)
}

/// The register tile: `R` rows × `NV` vectors of C accumulated over the `k` shared elements.
#[inline(always)]
unsafe fn tile<V: Vector, const R: usize, const NV: usize>(k: usize, a: Strided, b: Rows<*const f32>, c: Rows<*mut f32>, accumulate: bool) {
    // SAFETY (whole body): the caller guarantees R rows of A and C, k rows of B and NV vectors of
    // columns in B and C.
    unsafe {
        let mut acc = [[V::splat(0.0); NV]; R];
        for p in 0..k {
            let b_row = b.ptr.add(p * b.row_stride);
            let bv: [V; NV] = std::array::from_fn(|v| V::load(b_row.add(v * V::LANES)));
            let a_col = a.ptr.add(p * a.col_stride);
            for (i, acc_row) in acc.iter_mut().enumerate() {
                let ai = V::splat(*a_col.add(i * a.row_stride));
                for (x, bx) in acc_row.iter_mut().zip(&bv) {
                    *x = ai.mul_add(*bx, *x);
                }
            }
        }
        for (i, acc_row) in acc.iter().enumerate() {
            let c_row = c.ptr.add(i * c.row_stride);
            for (v, x) in acc_row.iter().enumerate() {
                let at = c_row.add(v * V::LANES);
                let sum = if accumulate { V::load(at).add(*x) } else { *x };
                sum.store(at);
            }
        }
    }
}
