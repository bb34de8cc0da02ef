//! K/V rows a block reads next, brought into L2 a few at a time while the current product
//! computes. A tile's rows lie a page or more apart in a (b, s, h, d) tensor, where the hardware
//! prefetchers do not follow them, and the copies of `products.rs` otherwise wait on memory row
//! after row: 12.8% of a one-thread f32 prefill on an EPYC (AVX2), 11-17% on a Xeon.

use super::block::{prefetch, Inputs, Kv, Level, TileAt};
use super::element::Element;
use super::gemm::Alongside;

/// The rows of one future tile (every head of it) and how many to request per step.
pub struct Ahead<'a, T> {
    rows: &'a [T],
    row_stride: usize,
    head_stride: usize,
    heads: usize,
    d: usize,
    /// Rows (key × head) to request, and the next one.
    count: usize,
    next: usize,
    per_step: usize,
}

impl<'a, T: Element> Ahead<'a, T> {
    /// Nothing to bring.
    pub fn none() -> Self {
        Ahead { rows: &[], row_stride: 0, head_stride: 0, heads: 1, d: 0, count: 0, next: 0, per_step: 0 }
    }

    /// The `which` rows of the tile at `at` (if any) for `heads` k/v heads, spread over `steps`
    /// steps.
    pub fn new(inp: &'a Inputs<'_, T>, which: Kv, at: Option<TileAt>, heads: usize, steps: usize) -> Self {
        let Some(at) = at else { return Self::none() };
        let (rows, row_stride, head_stride) = inp.source_rows(which, at, heads);
        let count = (at.j1 - at.j0) * heads;
        let per_step = count.div_ceil(steps.max(1));
        Ahead { rows, row_stride, head_stride, heads, d: inp.call.head_dim, count, next: 0, per_step }
    }
}

impl<T> Alongside for Ahead<'_, T> {
    #[inline(always)]
    fn step(&mut self) {
        let end = (self.next + self.per_step).min(self.count);
        for i in self.next..end {
            let (key, head) = (i / self.heads, i % self.heads);
            prefetch(&self.rows[key * self.row_stride + head * self.head_stride..][..self.d], Level::L2);
        }
        self.next = end;
    }
}
