//! sm_90's TMA kernel classes restated from its documented rule (docs/triton.md), independent of
//! `src/triton/tma.rs`, for the tests that check which class a call takes.

/// Keys up to which the one-warpgroup prefill class serves a call of head dim `d`, with or
/// without a diagonal (a right window no wider than the keys): 2048 or 4096 at d = 64 and 128,
/// any number at d = 256 and at the split head dims 80, 96 and 160.
pub fn prefill_keys(d: usize, diagonal: bool) -> usize {
    match (d, diagonal) {
        (80 | 96 | 160 | 256, _) => usize::MAX,
        (_, true) => 4096,
        (_, false) => 2048,
    }
}

/// Whether a call of head dim `d` with `s_k` keys takes the short class (at most 256 keys at
/// d = 128 where the walking class does not take them, 512 at d = 256 with a diagonal) and whether the warp-specialized one (at d = 128 and
/// 256 from 512 keys without a diagonal, from 2048 with one at d = 128 and past the short class
/// at d = 256; at d = 64 past the prefill class; at d = 160 from 1024 keys, at d = 96 from 4096
/// without a diagonal), where built.
pub fn short_and_ws(d: usize, diagonal: bool, s_k: usize) -> (bool, bool) {
    let short = match d {
        128 => s_k <= 256 && !walks(d, diagonal, s_k),
        256 => diagonal && s_k <= 512,
        _ => false,
    };
    let ws = match (d, diagonal) {
        (128 | 256, false) => s_k >= 512,
        (128, true) => s_k >= 2048,
        (256, true) => !short,
        (64, _) => s_k > prefill_keys(64, diagonal),
        (160, _) => s_k >= 1024,
        (96, false) => s_k >= 4096,
        _ => false,
    };
    (short, ws)
}

/// Whether a call of head dim `d` with `s_k` keys takes the walking class (one program per SM
/// walking the query blocks) where built: d = 128, 256 to 767 keys without a diagonal, 257 to
/// 2048 with one. It comes before the short and warp-specialized classes.
pub fn walks(d: usize, diagonal: bool, s_k: usize) -> bool {
    d == 128 && if diagonal { (257..=2048).contains(&s_k) } else { (256..768).contains(&s_k) }
}
