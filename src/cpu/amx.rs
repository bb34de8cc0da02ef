//! bf16 prefill blocks on CPUs with AMX (Intel Sapphire Rapids and later): both products on
//! AMX tiles (`tdpbf16ps`: a 16×16 f32 tile += 16×32 bf16 · 32×16 bf16 per instruction), the
//! softmax in AVX-512 f32 between them.
//!
//! - Layouts, all zero-padded to multiples of 32: Q as bf16 rows (unscaled: scaling would
//!   round it again; the softmax scales the f32 scores); Kᵀ and V as pairs along the shared
//!   dimension (`[pair][column][2]`, the layout the B tile wants); the scores and the output in
//!   f32 rows; P as bf16 rows, rounded to nearest even as GPU flash attention does, while the
//!   row sums stay f32.
//! - The kernel asks Linux for the tile-data permission once per process
//!   (`arch_prctl(ARCH_REQ_XCOMP_PERM)`); without it, or without AMX, the f32 kernel runs.
//! - The AMX instructions are written with `asm!` (their intrinsics are not stable Rust).

use super::ahead::Ahead;
use super::gemm::Alongside;
use super::block::{prepare_rows, tile_end, BlockId, Inputs, Kv, Scratch, TileAt};
use super::lines::{Lines, Plain};
use super::simd::{exp_scalar, F32x16, Vector};
use half::bf16;
use std::arch::asm;
use std::arch::x86_64::*;
use std::f32::consts::LOG2_E;
use std::sync::OnceLock;

/// True when this CPU has AMX-BF16 and the OS lets this process use the tile data.
pub fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        // CPUID leaf 7: EDX bit 22 is AMX-BF16, bit 24 AMX-TILE.
        let edx = __cpuid_count(7, 0).edx;
        edx & (1 << 22) != 0 && edx & (1 << 24) != 0 && request_tile_data()
    })
}

#[cfg(target_os = "linux")]
fn request_tile_data() -> bool {
    const SYS_ARCH_PRCTL: isize = 158;
    const ARCH_REQ_XCOMP_PERM: usize = 0x1023;
    const XFEATURE_XTILEDATA: usize = 18;
    let status: isize;
    // SAFETY: arch_prctl(ARCH_REQ_XCOMP_PERM) only grants this process the AMX tile state; the
    // syscall clobbers rcx and r11, declared.
    unsafe {
        asm!("syscall", inlateout("rax") SYS_ARCH_PRCTL => status, in("rdi") ARCH_REQ_XCOMP_PERM,
             in("rsi") XFEATURE_XTILEDATA, lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    status == 0
}

#[cfg(not(target_os = "linux"))]
fn request_tile_data() -> bool {
    false
}

/// Palette 1: tiles 0..8 of 16 rows × 64 bytes (the most a tile holds).
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    bytes_per_row: [u16; 16],
    rows: [u8; 16],
}

static TILES: TileConfig = TileConfig {
    palette: 1,
    start_row: 0,
    reserved: [0; 14],
    bytes_per_row: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
    rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
};

macro_rules! tile_load {
    ($tile:literal, $ptr:expr, $stride:expr) => {
        asm!(concat!("tileloadd tmm", $tile, ", [{p} + {s}*1]"), p = in(reg) $ptr, s = in(reg) $stride,
             options(nostack, readonly, preserves_flags))
    };
}

macro_rules! tile_store {
    ($tile:literal, $ptr:expr, $stride:expr) => {
        asm!(concat!("tilestored [{p} + {s}*1], tmm", $tile), p = in(reg) $ptr, s = in(reg) $stride,
             options(nostack, preserves_flags))
    };
}

macro_rules! tile_zero {
    ($tile:literal) => {
        asm!(concat!("tilezero tmm", $tile), options(nostack, nomem, preserves_flags))
    };
}

macro_rules! tile_dot {
    ($c:literal, $a:literal, $b:literal) => {
        asm!(concat!("tdpbf16ps tmm", $c, ", tmm", $a, ", tmm", $b), options(nostack, nomem, preserves_flags))
    };
}

/// What a mask leaves of a product, per row `i` of C (`RowRanges::key_ends`, a causal diagonal
/// tile): only its columns below `ends[i]` (the scores, whose columns are keys: the blocks beyond
/// are left unwritten for the mask to overwrite), or only its shared elements below `ends[i]`
/// (the output: P is 0 at the keys the mask hid).
#[derive(Clone, Copy)]
enum Below<'a> {
    All,
    Cols(&'a [usize]),
    Shared(&'a [usize]),
}

impl Below<'_> {
    /// For the 32 rows from `mi`: how many columns and shared elements to run over, at most
    /// `n` and `k`.
    fn block(&self, mi: usize, n: usize, k: usize) -> (usize, usize) {
        let end = |ends: &[usize]| ends[mi.min(ends.len())..(mi + 32).min(ends.len())].iter().copied().max().unwrap_or(0).next_multiple_of(32);
        match *self {
            Below::All => (n, k),
            Below::Cols(ends) => (n.min(end(ends)), k),
            Below::Shared(ends) => (n, k.min(end(ends))),
        }
    }
}

/// `C (m × n f32) [+]= A (m × k bf16 rows) · B (k/2 pair rows × n columns × 2 bf16)`, strides in
/// bytes; `m`, `n`, `k` multiples of 32; only what `below` leaves. 32×32 blocks of C in tiles
/// 0-3, A in 4-5, B in 6-7; `alongside` steps once per block, skipped ones included.
///
/// # Safety
/// The tile configuration must be loaded, and the buffers must hold what the shapes reach.
unsafe fn matmul(m: usize, n: usize, k: usize, a: (*const u16, usize), b: (*const u16, usize), c: (*mut f32, usize), accumulate: bool, below: Below, alongside: &mut impl Alongside) {
    let ((a, lda), (b, ldb), (c, ldc)) = (a, b, c);
    // SAFETY (whole body): every tile address lies inside the m × n, m × k and k/2 × n
    // matrices (16 rows of 64 bytes from each block corner), per the caller.
    unsafe {
        for mi in (0..m).step_by(32) {
            let (n_live, k_live) = below.block(mi, n, k);
            for nj in (0..n).step_by(32) {
                alongside.step();
                if nj >= n_live {
                    continue;
                }
                let c00 = c.byte_add(mi * ldc + nj * 4);
                let (c01, c10) = (c00.byte_add(64), c00.byte_add(16 * ldc));
                let c11 = c10.byte_add(64);
                if accumulate {
                    tile_load!("0", c00, ldc);
                    tile_load!("1", c01, ldc);
                    tile_load!("2", c10, ldc);
                    tile_load!("3", c11, ldc);
                } else {
                    tile_zero!("0");
                    tile_zero!("1");
                    tile_zero!("2");
                    tile_zero!("3");
                }
                for kk in (0..k_live).step_by(32) {
                    let a0 = a.byte_add(mi * lda + kk * 2);
                    let b0 = b.byte_add(kk / 2 * ldb + nj * 4);
                    tile_load!("4", a0, lda);
                    tile_load!("5", a0.byte_add(16 * lda), lda);
                    tile_load!("6", b0, ldb);
                    tile_load!("7", b0.byte_add(64), ldb);
                    tile_dot!("0", "4", "6");
                    tile_dot!("1", "4", "7");
                    tile_dot!("2", "5", "6");
                    tile_dot!("3", "5", "7");
                }
                tile_store!("0", c00, ldc);
                tile_store!("1", c01, ldc);
                tile_store!("2", c10, ldc);
                tile_store!("3", c11, ldc);
            }
        }
    }
}

/// `rows` of bf16 as their raw bits.
fn bits(rows: &[bf16]) -> &[u16] {
    // SAFETY: bf16 is a transparent u16.
    unsafe { std::slice::from_raw_parts(rows.as_ptr().cast(), rows.len()) }
}

/// `vpermt2w` indices that interleave elements 0..16 (`PAIRS_LOW`) or 16..32 (`PAIRS_HIGH`) of
/// two vectors: lane `2i` from the first (index `i`), lane `2i + 1` from the second (`32 + i`).
const PAIRS_LOW: [i16; 32] = pair_indices(0);
const PAIRS_HIGH: [i16; 32] = pair_indices(16);

const fn pair_indices(first: i16) -> [i16; 32] {
    let mut indices = [0i16; 32];
    let mut i = 0;
    while i < 16 {
        indices[2 * i] = first + i as i16;
        indices[2 * i + 1] = 32 + first + i as i16;
        i += 1;
    }
    indices
}

/// `dst[2i] = a[i]`, `dst[2i + 1] = b[i]` (0 when `b` is `None`): two rows as pairs.
#[inline(always)]
unsafe fn interleave(a: &[u16], b: Option<&[u16]>, dst: &mut [u16]) {
    let len = a.len();
    assert!(dst.len() >= 2 * len && b.is_none_or(|b| b.len() >= len));
    let mut c = 0;
    // SAFETY (whole body): every access is below `len` in `a`/`b` and `2 * len` in `dst`
    // (asserted); AVX512-BW per the caller.
    unsafe {
        let (first, second) = (_mm512_loadu_si512(PAIRS_LOW.as_ptr().cast()), _mm512_loadu_si512(PAIRS_HIGH.as_ptr().cast()));
        while c + 32 <= len {
            let x = _mm512_loadu_si512(a.as_ptr().add(c).cast());
            let y = b.map_or(_mm512_setzero_si512(), |b| _mm512_loadu_si512(b.as_ptr().add(c).cast()));
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

/// A 16 × 16 transpose of 32-bit elements: `out[c]` holds element `c` of every row, in row
/// order (unpacks within 128-bit lanes, then a 4 × 4 transpose of the lanes).
///
/// # Safety
/// The CPU must have AVX-512F.
#[inline(always)]
unsafe fn transpose_16x16(rows: &[__m512i; 16]) -> [__m512i; 16] {
    // SAFETY (whole body): AVX-512F per the caller.
    unsafe {
        // Per 128-bit lane: t[2m] = rows 2m, 2m+1 of elements 0, 1; t[2m+1] of elements 2, 3.
        let mut t = [_mm512_setzero_si512(); 16];
        for m in 0..8 {
            t[2 * m] = _mm512_unpacklo_epi32(rows[2 * m], rows[2 * m + 1]);
            t[2 * m + 1] = _mm512_unpackhi_epi32(rows[2 * m], rows[2 * m + 1]);
        }
        // Per lane k: u[4g + e] = rows 4g..4g + 4 of element 4k + e.
        let mut u = [_mm512_setzero_si512(); 16];
        for g in 0..4 {
            for half in 0..2 {
                let (a, b) = (t[4 * g + half], t[4 * g + 2 + half]);
                u[4 * g + 2 * half] = _mm512_unpacklo_epi64(a, b);
                u[4 * g + 2 * half + 1] = _mm512_unpackhi_epi64(a, b);
            }
        }
        // Element 4k + e: lane k of u[e], u[4 + e], u[8 + e], u[12 + e].
        let mut out = [_mm512_setzero_si512(); 16];
        for e in 0..4 {
            let low01 = _mm512_shuffle_i32x4::<0x44>(u[e], u[4 + e]);
            let low23 = _mm512_shuffle_i32x4::<0xee>(u[e], u[4 + e]);
            let high01 = _mm512_shuffle_i32x4::<0x44>(u[8 + e], u[12 + e]);
            let high23 = _mm512_shuffle_i32x4::<0xee>(u[8 + e], u[12 + e]);
            out[e] = _mm512_shuffle_i32x4::<0x88>(low01, high01);
            out[4 + e] = _mm512_shuffle_i32x4::<0xdd>(low01, high01);
            out[8 + e] = _mm512_shuffle_i32x4::<0x88>(low23, high23);
            out[12 + e] = _mm512_shuffle_i32x4::<0xdd>(low23, high23);
        }
        out
    }
}

/// Kᵀ as pairs along d: `dst[(p * n32 + j) * 2 + {0, 1}] = K[j][2p + {0, 1}]` for the `n`
/// keys (rows `stride` apart in `keys`): a transpose of 32-bit pairs, by 16 × 16 blocks in
/// registers where 16 keys and 16 pairs are left, else gathered 16 keys at a time.
#[inline(always)]
unsafe fn pack_keys(keys: &[u16], stride: usize, n: usize, d: usize, n32: usize, dst: &mut [u16]) {
    assert!(n >= 1 && keys.len() >= (n - 1) * stride + d && dst.len() >= d * n32 && n <= n32);
    // The gather's offsets are i32 bytes, up to 15 rows apart.
    if i32::try_from(15 * 2 * stride).is_err() {
        for j in 0..n {
            for p in 0..d / 2 {
                dst[(p * n32 + j) * 2..][..2].copy_from_slice(&keys[j * stride + 2 * p..][..2]);
            }
        }
        return;
    }
    let row_bytes = (2 * stride) as i32;
    // SAFETY (whole body): lane l of block j0 reads key j0 + l < n only (masked, or all 16
    // keys when n - j0 >= 16), at pairs p < d/2 of its row, inside `keys` (asserted), at an
    // offset below 15 rows that fits i32 (checked); the stores write pairs p < d/2, keys < n32.
    unsafe {
        let offsets = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(row_bytes));
        for j0 in (0..n).step_by(16) {
            let live: __mmask16 = if n - j0 >= 16 { 0xffff } else { (1u16 << (n - j0)) - 1 };
            let base = keys.as_ptr().add(j0 * stride).cast::<u8>();
            let transposed = if n - j0 >= 16 { (d / 2) / 16 * 16 } else { 0 };
            for p0 in (0..transposed).step_by(16) {
                let mut rows = [_mm512_setzero_si512(); 16];
                for (l, row) in rows.iter_mut().enumerate() {
                    *row = _mm512_loadu_si512(keys.as_ptr().add((j0 + l) * stride + 2 * p0).cast());
                }
                let pairs = transpose_16x16(&rows);
                for (c, column) in pairs.iter().enumerate() {
                    _mm512_storeu_si512(dst.as_mut_ptr().add(((p0 + c) * n32 + j0) * 2).cast(), *column);
                }
            }
            for p in transposed..d / 2 {
                let pairs = _mm512_mask_i32gather_epi32::<1>(_mm512_setzero_si512(), live, offsets, base.add(4 * p).cast());
                _mm512_storeu_si512(dst.as_mut_ptr().add((p * n32 + j0) * 2).cast(), pairs);
            }
        }
    }
}

/// Taylor coefficients of 2^f = e^(f·ln 2) to degree 4, highest first: within 6e-5 relative
/// for |f| <= 1/2, under a fiftieth of the bf16 rounding the probabilities then go through.
const EXP2_POLY: [f32; 5] = [
    0.009_618_129, // ln2^4 / 24
    0.055_504_11,  // ln2^3 / 6
    0.240_226_5,   // ln2^2 / 2
    std::f32::consts::LN_2,
    1.0,
];

/// `2^t` per lane for probabilities that are rounded to bf16 next: about half the work of
/// [`Vector::exp`], whose 2-ulp accuracy the rounding would throw away (`vscalefps` replaces the
/// exponent arithmetic). Exactly 0 for `t` below -150, -inf included.
///
/// # Safety
/// The CPU must have AVX-512F.
#[inline(always)]
unsafe fn exp2_for_bf16(t: __m512) -> __m512 {
    // SAFETY: AVX-512F per the caller.
    unsafe {
        // -inf would give an undefined fraction; 2^-150 is already below every f32.
        let t = _mm512_max_ps(t, _mm512_set1_ps(-150.0));
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(t);
        let f = _mm512_sub_ps(t, n);
        let p = EXP2_POLY[1..].iter().fold(_mm512_set1_ps(EXP2_POLY[0]), |p, &c| _mm512_fmadd_ps(p, f, _mm512_set1_ps(c)));
        _mm512_scalef_ps(p, n)
    }
}

/// The largest raw score of a row (-inf for an empty one).
///
/// # Safety
/// The CPU must have AVX-512F.
#[inline(always)]
unsafe fn raw_max(scores: &[f32]) -> f32 {
    let body = scores.len() - scores.len() % 16;
    // SAFETY: 16-lane loads below `body`; features per the caller.
    unsafe {
        let mut lanes = F32x16::splat(f32::NEG_INFINITY);
        for c in (0..body).step_by(16) {
            lanes = lanes.max(F32x16::load(scores.as_ptr().add(c)));
        }
        scores[body..].iter().fold(_mm512_reduce_max_ps(lanes.0), |m, &x| m.max(x))
    }
}

/// Writes `e^(s · scale - shift)` of a row's raw scores `s`, rounded to bf16 (nearest even), into
/// `p`; returns their f32 sum and the largest raw score (-inf for an empty row).
///
/// # Safety
/// The CPU must have AVX-512F and AVX512-BF16.
#[inline(always)]
unsafe fn exp_row(scores: &[f32], scale: f32, shift: f32, p: &mut [u16]) -> (f32, f32) {
    let n = scores.len();
    assert!(p.len() >= n);
    let body = n - n % 16;
    // SAFETY (whole body): 16-lane accesses below `body`; features per the caller.
    unsafe {
        // e^(s·scale - shift) = 2^(s·scale·log2 e - shift·log2 e): one FMA from the raw score.
        let (scale_lanes, shift_lanes) = (F32x16::splat(scale * LOG2_E), F32x16::splat(-shift * LOG2_E));
        let (mut total, mut max) = (F32x16::splat(0.0), F32x16::splat(f32::NEG_INFINITY));
        for c in (0..body).step_by(16) {
            let raw = F32x16::load(scores.as_ptr().add(c));
            max = max.max(raw);
            let e = F32x16(exp2_for_bf16(raw.mul_add(scale_lanes, shift_lanes).0));
            total = total.add(e);
            // Sixteen bf16 as 256 raw bits.
            let rounded: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(e.0));
            _mm256_storeu_si256(p.as_mut_ptr().add(c).cast(), rounded);
        }
        let (mut tail, mut tail_max) = (0.0, f32::NEG_INFINITY);
        for c in body..n {
            let e = exp_scalar(scores[c] * scale - shift);
            tail += e;
            tail_max = tail_max.max(scores[c]);
            p[c] = bf16::from_f32(e).to_bits();
        }
        (_mm512_reduce_add_ps(total.0) + tail, _mm512_reduce_max_ps(max.0).max(tail_max))
    }
}

/// How far a tile's logits may rise above a row's shift before the row takes a new one: its
/// probabilities then reach 256 at most (exact enough in bf16 and f32), and most tiles after
/// the first need one pass over the scores, not two (a max, then the exponentials), and no
/// rescaling of the row's output. Against a new shift on every tile, alternating in one process
/// (Xeon, bf16, 16 rounds): medians 2-18% faster in all 8 cells (1, 2 and 16 threads, s=1024
/// to 4096, causal and not), minima 3-7% faster in 5, within 1% in 2.
const LAZY_SHIFT: f32 = 8.0 * std::f32::consts::LN_2;

/// Keys per tile, twice the f32 kernel's `BLOCK_N`: the output product loads and stores its f32
/// accumulators once per 256 keys, and the softmax rescales them as rarely. Against 128, in
/// one process alternating both 16 times (Xeon, bf16, min): one thread 3-5% faster (s=1024,
/// 2048, 2048 causal), 2 and 16 threads within the box's noise (-3% to +3.6%).
const TILE_KEYS: usize = 256;

/// Sizes a buffer to `len` elements: zeroed when `padding` will be left unwritten (and must
/// read 0), else as it was, every element being written before it is read. Clearing them for
/// every tile (and the scores and output once per block) made a one-thread bf16 prefill 7-11%
/// slower on the Xeon (s=1024 and 2048, causal and not; min of 10 interleaved rounds).
fn sized<E: Plain + Default>(buf: &mut Lines<E>, len: usize, padding: bool) {
    if padding {
        buf.reset(len, E::default());
    } else {
        buf.resize(len, E::default());
    }
}

/// Runs block `id` (one k/v head, heads == 1) into `s` like `block::run`.
///
/// # Safety
/// The CPU must have AVX-512F/BW, AVX512-BF16, and [`available`] must be true.
#[inline(always)]
pub unsafe fn run(inp: &Inputs<'_, bf16>, id: BlockId, s: &mut Scratch) {
    let call = inp.call;
    assert_eq!(id.heads, 1, "AMX blocks hold one k/v head");
    let (d, seq, rows) = (call.head_dim, call.seqs.get(id.b), id.rows(call));
    let (rows32, d32) = (rows.next_multiple_of(32), d.next_multiple_of(32));

    s.q_pairs.reset(rows32 * d32, 0);
    let logits = prepare_rows(inp, id, |r, row| s.q_pairs[r * d32..][..d].copy_from_slice(bits(row)));
    // Neither is cleared: the first tile's output product stores rather than adds, and every
    // score the softmax reads is written by the product first.
    s.acc_rows.resize(rows32 * d32, 0.0);
    s.row_max.reset(rows32, f32::NEG_INFINITY);
    s.row_sum.reset(rows32, 0.0);
    s.scores_t.resize(rows32 * TILE_KEYS, 0.0);

    // SAFETY: loads the tile configuration (a valid palette-1 layout) for this thread.
    unsafe { asm!("ldtilecfg [{}]", in(reg) &TILES, options(nostack, readonly, preserves_flags)) };
    let (span_lo, span_hi) = logits.ranges.span();
    let (lo, hi) = (span_lo.max(id.keys.0), span_hi.min(id.keys.1));
    let mut j0 = lo;
    let mut first_tile = true;
    while j0 < hi {
        let j1 = tile_end(call, j0, hi, TILE_KEYS);
        let at = TileAt { b: id.b, hk: id.hk0, k_start: seq.k_start, j0, j1 };
        let (n, n32) = (j1 - j0, (j1 - j0).next_multiple_of(32));
        // Rows whose visible keys end inside the tile (a causal diagonal): the products and the
        // softmax skip what lies beyond.
        let staircase = logits.ranges.key_ends(j0, n, &mut s.key_ends);

        // Padding (keys past n, elements past d) must read 0; the rest is written below.
        let padded = n < n32 || d < d32;
        sized(&mut s.k_pairs, d32 * n32, padded);
        let (k_rows, k_stride, _) = inp.source_rows(Kv::K, at, 1);
        // SAFETY: AVX-512F per the caller.
        unsafe { pack_keys(bits(k_rows), k_stride, n, d, n32, &mut s.k_pairs) };
        // SAFETY: tiles configured above; q_pairs is rows32 × d32, k_pairs d32/2 × n32 pairs,
        // scores_t rows32 × TILE_KEYS (n32 <= TILE_KEYS).
        unsafe {
            matmul(rows32, n32, d32, (s.q_pairs.as_ptr(), d32 * 2), (s.k_pairs.as_ptr(), n32 * 4),
                   (s.scores_t.as_mut_ptr(), TILE_KEYS * 4), false, if staircase { Below::Cols(&s.key_ends) } else { Below::All }, &mut ());
        }
        // The softmax scales the scores as it reads them, unless a softcap or ALiBi must see
        // them scaled first (or a negative scale would reorder them).
        let fused_scale = !logits.transforms() && call.softmax_scale > 0.0;
        if !fused_scale {
            for r in 0..rows {
                s.scores_t[r * TILE_KEYS..][..n].iter_mut().for_each(|x| *x *= call.softmax_scale);
            }
        }
        let scale = if fused_scale { call.softmax_scale } else { 1.0 };
        // The softmax below reads each row only up to its end on a staircase tile, so it need
        // not know whether `apply` left those ends unmasked.
        logits.apply(&mut s.scores_t, 1, TILE_KEYS, rows, j0, n, staircase);

        // The output product reads P up to n32 in all rows32 rows; `exp_row` writes each row up
        // to its end (n, or its key end on a staircase) and the rest must read 0.
        sized(&mut s.p_rows, rows32 * n32, staircase || n < n32 || rows < rows32);
        // This tile's V rows, for the pairs below.
        let mut v_ahead = Ahead::new(inp, Kv::V, Some(at), 1, rows);
        // The online softmax, row by row (rows past `rows`, up to rows32, keep max -inf and sum
        // 0). A row's `row_max` is the shift of its output and sum: the largest logit it has
        // seen, or a value at most LAZY_SHIFT below that.
        let row_keys = |r: usize| r * TILE_KEYS..r * TILE_KEYS + if staircase { s.key_ends[r] } else { n };
        for r in 0..rows {
            v_ahead.step();
            let (scores, p) = (&s.scores_t[row_keys(r)], &mut s.p_rows[r * n32..][..n]);
            let old = s.row_max[r];
            // SAFETY: AVX-512F and AVX512-BF16 per the caller.
            let raw = unsafe {
                if old > f32::NEG_INFINITY {
                    // One pass with the old shift, kept unless this tile's logits pass it by more
                    // than LAZY_SHIFT (then the pass is redone below).
                    let (sum, raw) = exp_row(scores, scale, old, p);
                    if raw * scale <= old + LAZY_SHIFT {
                        s.row_sum[r] += sum;
                        continue;
                    }
                    raw
                } else {
                    raw_max(scores)
                }
            };
            let new = old.max(raw * scale);
            // A row that has seen no key yet keeps max -inf; shifting by 0 then gives e^-inf = 0.
            let shift = if new == f32::NEG_INFINITY { 0.0 } else { new };
            // SAFETY: as above.
            let (sum, _) = unsafe { exp_row(scores, scale, shift, p) };
            // e^(old - shift) rescales what the row has: nothing before its first key.
            let factor = if old == f32::NEG_INFINITY { 0.0 } else { exp_scalar(old - shift) };
            // (The first tile's output product overwrites acc_rows.)
            if factor != 1.0 && !first_tile {
                s.acc_rows[r * d32..][..d].iter_mut().for_each(|x| *x *= factor);
            }
            s.row_max[r] = new;
            s.row_sum[r] = s.row_sum[r] * factor + sum;
        }

        // V as pairs along the keys: v_pairs[(q * d32 + c) * 2 + {0, 1}] = V[2q + {0, 1}][c].
        sized(&mut s.v_pairs, n32 * d32, padded);
        let (v_rows, v_stride, _) = inp.source_rows(Kv::V, at, 1);
        let v_rows = bits(v_rows);
        for q in 0..n.div_ceil(2) {
            let second = (2 * q + 1 < n).then(|| &v_rows[(2 * q + 1) * v_stride..][..d]);
            // SAFETY: AVX-512BW per the caller.
            unsafe { interleave(&v_rows[2 * q * v_stride..][..d], second, &mut s.v_pairs[q * d32 * 2..][..2 * d]) };
        }
        // The next tile's K rows, for the next pack.
        let next = (j1 < hi).then(|| TileAt { j0: j1, j1: tile_end(call, j1, hi, TILE_KEYS), ..at });
        let mut k_ahead = Ahead::new(inp, Kv::K, next, 1, (rows32 / 32) * (d32 / 32));
        // SAFETY: tiles configured; p_rows is rows32 × n32, v_pairs n32/2 × d32 pairs, acc_rows
        // rows32 × d32.
        unsafe {
            matmul(rows32, d32, n32, (s.p_rows.as_ptr(), n32 * 2), (s.v_pairs.as_ptr(), d32 * 4),
                   (s.acc_rows.as_mut_ptr(), d32 * 4), !first_tile, if staircase { Below::Shared(&s.key_ends) } else { Below::All }, &mut k_ahead);
        }
        j0 = j1;
        first_tile = false;
    }
    // SAFETY: releases this thread's tile state (configured above).
    unsafe { asm!("tilerelease", options(nostack, nomem, preserves_flags)) };
    if first_tile {
        // No key to see: the output is 0.
        s.acc_rows.reset(rows32 * d32, 0.0);
    }
    // The output rows in the layout the writer reads (rows × d), every one copied.
    s.acc.resize(rows * d, 0.0);
    for r in 0..rows {
        s.acc[r * d..][..d].copy_from_slice(&s.acc_rows[r * d32..][..d]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    /// A seed and its generator where the CPU has AVX-512F (these tests run only there);
    /// `None`, saying so, elsewhere.
    fn avx512_rng() -> Option<(u64, rand::rngs::StdRng)> {
        if !std::is_x86_feature_detected!("avx512f") {
            eprintln!("skipped: this CPU has no AVX-512F");
            return None;
        }
        Some(crate::cpu::testing::seeded())
    }

    #[test]
    fn packed_keys_are_the_pairs_of_every_key() {
        let Some((seed, mut rng)) = avx512_rng() else { return };
        for _ in 0..200 {
            let n = rng.gen_range(1..=TILE_KEYS);
            let d = 8 * rng.gen_range(1..=40);
            let stride = d + 8 * rng.gen_range(0..4) + rng.gen_range(0..2) * 4096;
            let n32 = n.next_multiple_of(32);
            let keys: Vec<u16> = (0..(n - 1) * stride + d).map(|_| rng.gen()).collect();
            let mut dst = vec![0u16; d * n32];
            // SAFETY: AVX-512F checked (`avx512_rng`); the buffers hold what the shapes reach.
            unsafe { pack_keys(&keys, stride, n, d, n32, &mut dst) };
            for j in 0..n {
                for e in 0..d {
                    let (p, half) = (e / 2, e % 2);
                    assert_eq!(dst[(p * n32 + j) * 2 + half], keys[j * stride + e], "seed {seed}: n {n} d {d} stride {stride}, key {j} element {e}");
                }
            }
        }
    }

    #[test]
    fn exp2_for_bf16_stays_within_its_bound_and_vanishes_below_it() {
        let Some((seed, mut rng)) = avx512_rng() else { return };
        let mut inputs: Vec<f32> = (0..4096).map(|_| rng.gen_range(-120.0..40.0)).collect();
        inputs.extend([0.0, -0.5, 0.5, 1.0, -1.0, -126.0]);
        let vanishing = [f32::NEG_INFINITY, -150.0, -151.0, -1.0e9];
        let mut all = inputs.clone();
        all.extend(vanishing);
        all.resize(all.len().next_multiple_of(16), 0.0);
        let mut out = vec![0.0f32; all.len()];
        for (x, y) in all.chunks_exact(16).zip(out.chunks_exact_mut(16)) {
            // SAFETY: AVX-512F checked (`avx512_rng`); both chunks hold 16 f32s.
            unsafe { _mm512_storeu_ps(y.as_mut_ptr(), exp2_for_bf16(_mm512_loadu_ps(x.as_ptr()))) };
        }
        for (x, y) in all.iter().zip(&out).take(inputs.len()) {
            let want = (*x as f64).exp2();
            assert!(((*y as f64) - want).abs() <= want * 6e-5, "seed {seed}: 2^{x} = {y}, want {want}");
        }
        for (x, y) in all.iter().zip(&out).skip(inputs.len()).take(vanishing.len()) {
            assert_eq!(*y, 0.0, "2^{x}");
        }
    }
}
