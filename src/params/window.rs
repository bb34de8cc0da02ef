//! The attention window, resolved exactly as candle-flash-attn resolves it before launching.

/// Window sizes after flash-attn's normalization: `-1` means unbounded on that side.
///
/// Query row `i` of a sequence with `s_q` queries and `s_k` keys sits at key position
/// `i + s_k - s_q` (bottom-right alignment) and may attend to key `j` when
/// `j >= pos - left` (if `left >= 0`) and `j <= pos + right` (if `right >= 0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Keys visible before a query's position; `-1` is unbounded. At most `max_seqlen_k`.
    pub left: i32,
    /// Keys visible after a query's position; `-1` is unbounded, `0` (with `left` bounded by
    /// `max_seqlen_k`) is causal. At most `max_seqlen_k`.
    pub right: i32,
}

impl Window {
    /// Mirrors candle-flash-attn: sizes that are `None` or larger than `max_seqlen_k` become
    /// unbounded; then causal is detected and a one-sided window gets `max_seqlen_k` on the other
    /// side. With `mm_prefix_ranges`, a causal call is run as a local window so ranges can lift it.
    pub fn resolve(
        left: Option<usize>,
        right: Option<usize>,
        max_seqlen_k: usize,
        has_mm_prefix: bool,
    ) -> Self {
        let bound = |w: Option<usize>| match w {
            Some(w) if w <= max_seqlen_k => w.min(i32::MAX as usize) as i32,
            _ => -1,
        };
        let max_k = max_seqlen_k.min(i32::MAX as usize) as i32;
        let (mut left, mut right) = (bound(left), bound(right));
        if has_mm_prefix && left < 0 && right == 0 {
            left = max_k;
        }
        if left < 0 && right >= 0 {
            left = max_k;
        }
        if left >= 0 && right < 0 {
            right = max_k;
        }
        Self { left, right }
    }

    /// True when no key is ever masked by the window.
    pub fn is_unbounded(&self) -> bool {
        self.left < 0 && self.right < 0
    }

    /// The most keys `[lo, hi)` one block of query rows of a sequence may see together, for
    /// sequences of at most `max_seqlen_q` queries and `max_seqlen_k` keys: `max_seqlen_k` unless
    /// the window bounds the left side. With `left >= 0` the block's first row sits at position
    /// `pos >= s_k - s_q`, so `lo >= pos - left` and `hi <= s_k <= pos + s_q`: at most
    /// `max_seqlen_q + left` keys, whatever the right side says (a decode step of a sliding
    /// window reads `left + 1` keys of a cache of any length).
    pub fn key_span(&self, max_seqlen_q: usize, max_seqlen_k: usize) -> usize {
        match usize::try_from(self.left) {
            Ok(left) => max_seqlen_k.min(max_seqlen_q.saturating_add(left)),
            Err(_) => max_seqlen_k,
        }
    }

    /// Keys `[lo, hi)` that query row `i` may see, clipped to `[0, s_k)`; empty when `hi <= lo`.
    #[inline]
    pub fn key_range(&self, i: usize, s_q: usize, s_k: usize) -> (usize, usize) {
        let pos = i as i64 + s_k as i64 - s_q as i64;
        let lo = if self.left < 0 { 0 } else { (pos - self.left as i64).max(0) };
        let hi = if self.right < 0 {
            s_k as i64
        } else {
            (pos + self.right as i64 + 1).clamp(0, s_k as i64)
        };
        (lo.min(s_k as i64) as usize, hi.max(0) as usize)
    }
}
