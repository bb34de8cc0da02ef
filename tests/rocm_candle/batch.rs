//! Batch layout `(b, s, h, d)`: every batch function, `FlashAttn::forward_with_lse` and
//! `flash_attn_with_lse`, GPU against CPU.

use candle::DType;
use flash_attn_rocm as fa;

use crate::check::{check_gpu_vs_cpu, check_lse_variant, gpu_and_rng, out_only, with_lse, DTYPES_AND_DIMS};
use crate::common::batch::{batch_expected, batch_inputs, BatchCase};
use crate::common::calls::{self, is_causal, is_plain, CAUSAL, NONE};

/// Each row picks one batch function (see `calls::batch`): plain, causal with more queries than
/// keys (leading rows see no key), windows of each shape, ALiBi with and without a window,
/// softcap; GQA/MQA, transposed (strided) inputs and lengths off the 128-row tiles.
fn batch_cases(dtype: DType, d_a: usize, d_b: usize) -> [BatchCase; 10] {
    let c = |b, (s_q, s_k), (h, h_k), d, window, alibi, softcap, transposed| BatchCase {
        b, s_q, s_k, h, h_k, d, dtype, window, alibi, softcap, transposed,
    };
    let two_sided = (Some(17), Some(5));
    [
        c(2, (113, 203), (4, 4), d_a, NONE, false, None, true),
        c(1, (203, 113), (4, 1), d_b, CAUSAL, false, None, false),
        c(2, (130, 130), (6, 2), d_a, two_sided, false, None, false),
        c(1, (77, 150), (4, 2), d_b, (Some(40), None), false, None, true),
        c(2, (1, 147), (4, 4), d_a, (None, Some(3)), false, None, false),
        c(1, (150, 77), (6, 2), d_b, CAUSAL, true, None, true),
        c(2, (64, 257), (4, 1), d_a, NONE, true, None, false),
        c(1, (99, 99), (4, 4), d_b, two_sided, true, None, false),
        c(2, (77, 150), (4, 2), d_a, NONE, false, Some(5.0), true),
        c(1, (150, 150), (6, 2), d_b, CAUSAL, false, Some(3.5), false),
    ]
}

#[test]
fn batch_functions_match_cpu() {
    check_batch_functions()
}

/// The body of `batch_functions_match_cpu`, public for tests/gpu_triton: its runner
/// (`harness = false`) does not compile `#[test]` functions.
pub fn check_batch_functions() {
    let Some((dev, mut rng)) = gpu_and_rng("batch_functions_match_cpu") else {
        return;
    };
    for (dtype, d_a, d_b) in DTYPES_AND_DIMS {
        for c in batch_cases(dtype, d_a, d_b) {
            let x = batch_inputs(&c, &mut rng);
            let exp = batch_expected(&c, &x);
            let what = format!("{c:?}");
            let mut args = vec![&x.q, &x.k, &x.v];
            args.extend(x.slopes.as_ref());
            // `a` is `args` on one device: `[q, k, v]` or `[q, k, v, slopes]`.
            let f = x.features(&c);
            check_gpu_vs_cpu(&what, &dev, &args, &exp, |a| {
                out_only(calls::batch(&a[0], &a[1], &a[2], f.with_alibi(a.get(3))))
            });
            check_lse_variant(&format!("{what} forward_with_lse"), &dev, &args, &exp, false, |a| {
                with_lse(calls::batch_op(f.with_alibi(a.get(3))).forward_with_lse(&a[0], &a[1], &a[2]))
            });
            if is_plain(c.window) && !c.alibi && c.softcap.is_none() {
                let causal = is_causal(c.window);
                check_lse_variant(&format!("{what} flash_attn_with_lse"), &dev, &args, &exp, false, |a| {
                    with_lse(fa::flash_attn_with_lse(&a[0], &a[1], &a[2], x.scale, causal))
                });
            }
        }
    }
}
