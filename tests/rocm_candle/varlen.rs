//! Varlen and paged layouts: ragged sequences (empty ones included) and shuffled K/V pages,
//! every varlen function and the LSE variants, GPU against CPU.

use candle::Tensor;

use crate::check::{check_gpu_vs_cpu, check_lse_variant, gpu_and_rng, out_only, with_lse, DTYPES, DTYPES_AND_DIMS};
use crate::common::batch::slopes;
use crate::common::calls::{self, Features, PagedKv, Seqlens, Window, CAUSAL, NONE};
use crate::common::expected::{expected, LseLayout};
use crate::common::ragged::{paginate, ragged};

/// Empty sequences on either side, lengths off and across the 128-row tiles.
const LENS: [(usize, usize); 6] = [(13, 40), (0, 7), (33, 20), (1, 0), (64, 64), (130, 261)];

#[derive(Debug, Clone, Copy)]
struct VarLenCase {
    heads: (usize, usize, usize),
    window: Window,
    alibi: bool,
    softcap: Option<f32>,
}

/// One row per varlen function (see `calls::varlen`), causal and two-sided windows included.
fn varlen_cases(d_a: usize, d_b: usize) -> [VarLenCase; 7] {
    let c = |heads, window, alibi, softcap| VarLenCase { heads, window, alibi, softcap };
    [
        c((4, 4, d_a), NONE, false, None),
        c((6, 2, d_b), CAUSAL, false, None),
        c((4, 1, d_a), (Some(9), Some(2)), false, None),
        c((8, 2, d_b), CAUSAL, true, None),
        c((4, 4, d_a), (Some(30), None), true, None),
        c((6, 2, d_b), (Some(9), Some(2)), false, Some(3.5)),
        c((4, 1, d_a), CAUSAL, false, Some(5.0)),
    ]
}

/// The lengths in `a`, the varlen arguments on one device: `[q, k, v, seqlens_q, seqlens_k]`
/// (then the slopes, if any) or the paged ones (see `paged_args`).
fn seqlens(a: &[Tensor], (max_q, max_k): (usize, usize)) -> Seqlens<'_> {
    Seqlens { q: &a[3], k: &a[4], max_q, max_k }
}

#[test]
fn varlen_functions_match_cpu() {
    check_varlen_functions()
}

/// The body of `varlen_functions_match_cpu`, public for tests/gpu_triton: its runner
/// (`harness = false`) does not compile `#[test]` functions.
pub fn check_varlen_functions() {
    let Some((dev, mut rng)) = gpu_and_rng("varlen_functions_match_cpu") else {
        return;
    };
    for (dtype, d_a, d_b) in DTYPES_AND_DIMS {
        for (n, c) in varlen_cases(d_a, d_b).into_iter().enumerate() {
            let x = ragged(&mut rng, &LENS, c.heads, dtype);
            let (h, _, d) = c.heads;
            let slopes = c.alibi.then(|| slopes(&mut rng, h));
            // max_seqlen_k above the longest sequence: windows resolve against it.
            let max = (130 + n % 3, 261 + n % 5);
            let f = Features { scale: 1.0 / (d as f32).sqrt(), window: c.window, alibi: slopes.as_ref(), softcap: c.softcap };
            let exp = expected(&x.seqs(), &vec![f.ref_opts(max.1); LENS.len()], c.heads, dtype, LseLayout::VarLen);
            let (sq, sk) = x.seqlens();
            // Plus the slopes when the case has ALiBi.
            let mut args = vec![&x.q, &x.k, &x.v, &sq, &sk];
            args.extend(slopes.as_ref());
            let what = format!("varlen {dtype:?} {c:?}");
            check_gpu_vs_cpu(&what, &dev, &args, &exp, |a| {
                out_only(calls::varlen(&a[0], &a[1], &a[2], &seqlens(a, max), f.with_alibi(a.get(5))))
            });
            check_lse_variant(&format!("{what} with_lse"), &dev, &args, &exp, false, |a| {
                with_lse(calls::varlen_with_lse(&a[0], &a[1], &a[2], &seqlens(a, max), f.with_alibi(a.get(5))))
            });
        }
    }
}

/// The paged K/V and the lengths in `a`, the paged arguments on one device:
/// `[q, k_pages, v_pages, seqlens_q, seqlens_k, block_table]` (then the mm prefix ranges, if any).
pub fn paged_args(a: &[Tensor], page: usize, max: (usize, usize)) -> (PagedKv<'_>, Seqlens<'_>) {
    (PagedKv { k: &a[1], v: &a[2], table: &a[5], page }, seqlens(a, max))
}

#[derive(Debug, Clone, Copy)]
struct PagedCase {
    page: usize,
    heads: (usize, usize, usize),
    window: Window,
    softcap: Option<f32>,
}

#[test]
fn paged_functions_match_cpu() {
    check_paged_functions()
}

/// The body of `paged_functions_match_cpu`, public for tests/gpu_triton: its runner
/// (`harness = false`) does not compile `#[test]` functions.
pub fn check_paged_functions() {
    let Some((dev, mut rng)) = gpu_and_rng("paged_functions_match_cpu") else {
        return;
    };
    // Sequences spanning several pages, an exact page, and empty on either side.
    let lens = [(5, 300), (0, 16), (40, 40), (1, 129), (17, 0), (64, 256)];
    let windows = [CAUSAL, (Some(12), Some(0)), NONE, (Some(50), Some(7))];
    let heads = [(4, 2, 64), (8, 1, 128), (4, 4, 128), (6, 2, 64)];
    let mut n = 0;
    for dtype in DTYPES {
        for page in [128, 256] {
            // Each dtype sees every window; head shapes rotate against the windows.
            for _ in 0..2 {
                let c = PagedCase {
                    page,
                    heads: heads[(n + n / 4) % 4],
                    window: windows[n % 4],
                    softcap: (n % 3 == 2).then_some(4.0),
                };
                n += 1;
                let x = ragged(&mut rng, &lens, c.heads, dtype);
                let p = paginate(&mut rng, &x, page, 3);
                let max = (64, 300);
                let f = Features { scale: 0.7 / (c.heads.2 as f32).sqrt(), window: c.window, alibi: None, softcap: c.softcap };
                let exp = expected(&x.seqs(), &vec![f.ref_opts(max.1); lens.len()], c.heads, dtype, LseLayout::VarLen);
                let (sq, sk) = x.seqlens();
                let args = [&x.q, &p.k_pages, &p.v_pages, &sq, &sk, &p.table];
                let what = format!("paged {dtype:?} {c:?}");
                check_gpu_vs_cpu(&what, &dev, &args, &exp, |a| {
                    let (kv, lens) = paged_args(a, c.page, max);
                    out_only(calls::paged(&a[0], &kv, None, &lens, f))
                });
                check_lse_variant(&format!("{what} with_lse"), &dev, &args, &exp, true, |a| {
                    let (kv, lens) = paged_args(a, c.page, max);
                    with_lse(calls::paged_with_lse(&a[0], &kv, None, &lens, f))
                });
            }
        }
    }
}
