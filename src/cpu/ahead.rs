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
    /// Keys of the tile, and the next row to request: key `key`, head `head` (no division per
    /// row: a step runs between register tiles).
    keys: usize,
    key: usize,
    head: usize,
    per_step: usize,
}

impl<'a, T: Element> Ahead<'a, T> {
    /// Nothing to bring.
    pub fn none() -> Self {
        Ahead { rows: &[], row_stride: 0, head_stride: 0, heads: 1, d: 0, keys: 0, key: 0, head: 0, per_step: 0 }
    }

    /// The `which` rows of the tile at `at` (if any) for `heads` k/v heads, spread over `steps`
    /// steps.
    pub fn new(inp: &'a Inputs<'_, T>, which: Kv, at: Option<TileAt>, heads: usize, steps: usize) -> Self {
        let Some(at) = at else { return Self::none() };
        let (rows, row_stride, head_stride) = inp.source_rows(which, at, heads);
        let keys = at.j1 - at.j0;
        let per_step = (keys * heads).div_ceil(steps.max(1));
        Ahead { rows, row_stride, head_stride, heads, d: inp.call.head_dim, keys, key: 0, head: 0, per_step }
    }
}

impl<T> Alongside for Ahead<'_, T> {
    #[inline(always)]
    fn step(&mut self) {
        for _ in 0..self.per_step {
            if self.key == self.keys {
                return;
            }
            prefetch(&self.rows[self.key * self.row_stride + self.head * self.head_stride..][..self.d], Level::L2);
            self.head += 1;
            if self.head == self.heads {
                self.head = 0;
                self.key += 1;
            }
        }
    }
}
