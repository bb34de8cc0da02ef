//! Which keys each query row of a block may see, and the logit transforms (softcap, ALiBi,
//! mask) applied to a tile of transposed scores. A block's rows may come from several query
//! heads of one k/v head (GQA packing), so positions and ALiBi slopes are per row.

use crate::params::{AttnCall, Sequence};
use std::ops::Range;

/// The key intervals of the rows `[i0, i0 + rows)` of one sequence.
pub struct RowRanges {
    /// Window interval `[lo, hi)` per row, clipped to the sequence's keys.
    pub window: Vec<(usize, usize)>,
    /// Extra interval per row from `mm_prefix_ranges` (empty when `lo >= hi`).
    pub prefix: Vec<(usize, usize)>,
}

impl RowRanges {
    /// The ranges of query rows at sequence positions `positions` (one entry per block row).
    pub fn new(call: &AttnCall, seq: &Sequence, prefix_ranges: &[(i32, i32)], positions: &[usize]) -> Self {
        let (s_q, s_k) = (seq.q_len, seq.k_len);
        let window = positions.iter().map(|&i| call.window.key_range(i, s_q, s_k)).collect();
        let prefix = positions
            .iter()
            .map(|&i| {
                let pos = (i + s_k) as i64 - s_q as i64;
                prefix_ranges
                    .iter()
                    .filter(|&&(lo, hi)| lo < hi && (lo as i64..hi as i64).contains(&pos))
                    // Clipped to [0, s_k]: a negative end is an empty range, not "every key".
                    .map(|&(lo, hi)| (lo.max(0) as usize, (hi.max(0) as usize).min(s_k)))
                    .fold((0, 0), |acc, r| if acc.0 < acc.1 { (acc.0.min(r.0), acc.1.max(r.1)) } else { r })
            })
            .collect();
        Self { window, prefix }
    }

    /// Keys `[lo, hi)` that some row of the block may see; empty when `hi <= lo`.
    pub fn span(&self) -> (usize, usize) {
        self.window
            .iter()
            .chain(&self.prefix)
            .filter(|(lo, hi)| lo < hi)
            .fold((usize::MAX, 0), |(lo, hi), r| (lo.min(r.0), hi.max(r.1)))
    }

    /// True when every row sees every key of `[j0, j1)`, so the tile needs no mask.
    pub fn covers(&self, j0: usize, j1: usize) -> bool {
        self.window.iter().all(|&(lo, hi)| lo <= j0 && j1 <= hi)
    }

    /// Per row, where (tile-local, `n` at most) the keys of the tile `[j0, j0 + n)` that the row
    /// may see end: the keys from there on are hidden. True when some row's end falls inside the
    /// tile (a causal diagonal tile), so products may skip what lies beyond.
    pub fn key_ends(&self, j0: usize, n: usize, ends: &mut Vec<usize>) -> bool {
        ends.clear();
        ends.extend(self.window.iter().zip(&self.prefix).map(|(&(_, hi), &(plo, phi))| if plo < phi { n } else { hi.saturating_sub(j0).min(n) }));
        ends.iter().any(|&end| end < n)
    }

    /// True when, in the tile starting at key `j0`, each row hides exactly the keys from its
    /// [`RowRanges::key_ends`] end on (no window start after `j0`, no prefix range): a softmax
    /// that stops at the ends needs no mask written.
    fn ends_hide_all(&self, j0: usize) -> bool {
        self.window.iter().zip(&self.prefix).all(|(&(lo, _), &(plo, phi))| lo <= j0 && plo >= phi)
    }

    #[inline]
    fn allows(&self, r: usize, j: usize) -> bool {
        let (lo, hi) = self.window[r];
        let (plo, phi) = self.prefix[r];
        (lo <= j && j < hi) || (plo <= j && j < phi)
    }

    /// Runs of offsets `c < n` of the keys `j0 + c` row `r` may not see.
    fn hidden(&self, r: usize, j0: usize, n: usize) -> impl Iterator<Item = Range<usize>> + '_ {
        let (lo, hi) = self.window[r];
        let (plo, phi) = self.prefix[r];
        // Without a prefix range the hidden keys are those before the window and after it
        // (all of them for an empty window); with one, each key is tested.
        let simple = plo >= phi;
        let before = if simple { 0..lo.saturating_sub(j0).min(n) } else { 0..0 };
        let after = if simple { hi.max(lo).saturating_sub(j0).min(n).max(before.end)..n } else { 0..0 };
        let tested = if simple { 0..0 } else { 0..n };
        let singles = tested.filter(move |&c| !self.allows(r, j0 + c)).map(|c| c..c + 1);
        [before, after].into_iter().filter(|run| !run.is_empty()).chain(singles)
    }
}

/// Transforms of the raw `q·k·scale` scores of one tile, in flash-attn's order, and the mask.
pub struct Logits {
    pub softcap: Option<f32>,
    /// ALiBi slope of each row's head, if any.
    pub alibi_slopes: Option<Vec<f32>>,
    pub ranges: RowRanges,
    /// Key position of each row: `i + s_k - s_q` for its query position `i`.
    pub key_pos: Vec<i64>,
}

impl Logits {
    /// True when a softcap or ALiBi transforms the scaled scores (beyond the mask).
    pub fn transforms(&self) -> bool {
        self.softcap.is_some() || self.alibi_slopes.is_some()
    }

    /// Applies softcap, ALiBi and the mask to a tile of scores whose score of row `r` and key
    /// `j0 + c` sits at `scores[c * key_stride + r * row_stride]` (`n` keys, `rows` rows): the
    /// transposed layout of the f32 products, or the row layout of the AMX ones. `staircase`:
    /// some rows see only the tile's first keys ([`RowRanges::key_ends`]). Returns true when
    /// those ends are the whole mask ([`RowRanges::ends_hide_all`]): then no mask is written, and
    /// the caller's softmax must stop each row at its end.
    #[allow(clippy::too_many_arguments)]
    pub fn apply(&self, scores: &mut [f32], key_stride: usize, row_stride: usize, rows: usize, j0: usize, n: usize, staircase: bool) -> bool {
        let ends_masked = staircase && self.ranges.ends_hide_all(j0);
        let masked = !ends_masked && !self.ranges.covers(j0, j0 + n);
        let transformed = self.transforms();
        if !transformed && !masked {
            return ends_masked;
        }
        for r in 0..rows {
            let at = |c: usize| c * key_stride + r * row_stride;
            if transformed {
                for c in 0..n {
                    let s = &mut scores[at(c)];
                    if let Some(cap) = self.softcap {
                        // Divide, not multiply by 1 / cap: for a cap below ~2.9e-39 the
                        // reciprocal overflows to inf and a zero logit would become NaN.
                        *s = cap * (*s / cap).tanh();
                    }
                    if let Some(slopes) = &self.alibi_slopes {
                        *s -= slopes[r] * (self.key_pos[r] - (j0 + c) as i64).abs() as f32;
                    }
                }
            }
            if masked {
                // Only the keys the row may not see are written: a tile on the diagonal of a
                // causal mask is mostly visible, and most of its rows see all of it.
                for run in self.ranges.hidden(r, j0, n) {
                    if key_stride == 1 {
                        scores[at(run.start)..at(run.end)].fill(f32::NEG_INFINITY);
                    } else {
                        run.for_each(|c| scores[at(c)] = f32::NEG_INFINITY);
                    }
                }
            }
        }
        ends_masked
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testing::seeded;
    use rand::Rng;

    /// The runs `hidden` yields cover exactly the keys `allows` refuses, each once, for
    /// windows that start, end or lie inside a tile, empty windows and prefix ranges.
    #[test]
    fn hidden_runs_are_the_refused_keys() {
        let (seed, mut rng) = seeded();
        for _ in 0..2000 {
            let mut interval = |empty_odds: f64| {
                if rng.gen_bool(empty_odds) {
                    let at: usize = rng.gen_range(0..300);
                    (at, at.saturating_sub(rng.gen_range(0..3)))
                } else {
                    let lo = rng.gen_range(0..300);
                    (lo, lo + rng.gen_range(1..300))
                }
            };
            let ranges = RowRanges { window: vec![interval(0.1)], prefix: vec![interval(0.7)] };
            let (j0, n) = (rng.gen_range(0..300), rng.gen_range(1..160));
            let mut seen = vec![0u32; n];
            for run in ranges.hidden(0, j0, n) {
                run.for_each(|c| seen[c] += 1);
            }
            for (c, &times) in seen.iter().enumerate() {
                let refused = !ranges.allows(0, j0 + c);
                assert_eq!(times, refused as u32, "seed {seed}: key {} of window {:?}, prefix {:?}", j0 + c, ranges.window[0], ranges.prefix[0]);
            }
        }
    }
}
