//! What CK cannot serve: each such call must return an `Err` that names the reason.

use candle::{DType, Device, Tensor};
use flash_attn_rocm as fa;

use crate::check::{check_refused, gpu_and_rng, out_only};
use crate::common::batch::slopes;
use crate::common::calls::{self, Features, CAUSAL};
use crate::common::ragged::{paginate, ragged};
use crate::common::randn;
use crate::varlen::paged_args;

#[test]
fn calls_ck_cannot_serve_are_errors() {
    let Some((dev, mut rng)) = gpu_and_rng("calls_ck_cannot_serve_are_errors") else {
        return;
    };
    let plain = |a: &[Tensor]| out_only(fa::flash_attn(&a[0], &a[1], &a[2], 0.125, true));

    let f32_qkv = [0; 3].map(|_| randn(&mut rng, &[1, 16, 2, 64], DType::F32));
    check_refused("f32", &dev, &f32_qkv.each_ref(), "f16 or bf16", plain);

    let wide = [0; 3].map(|_| randn(&mut rng, &[1, 16, 2, 512], DType::F16));
    check_refused("head dim 512", &dev, &wide.each_ref(), "head dims up to 256", plain);

    let qkv = [0; 3].map(|_| randn(&mut rng, &[1, 16, 2, 64], DType::BF16));
    let mut args = qkv.each_ref().to_vec();
    let s = slopes(&mut rng, 2);
    args.push(&s);
    check_refused("softcap + alibi", &dev, &args, "softcap with ALiBi", |a| {
        // `calls::batch` picks flash_attn_alibi_windowed_softcap.
        let f = Features { scale: 0.125, window: CAUSAL, alibi: a.get(3), softcap: Some(5.0) };
        out_only(calls::batch(&a[0], &a[1], &a[2], f))
    });

    let lens = [(3, 200), (5, 40)];
    let x = ragged(&mut rng, &lens, (2, 1, 64), DType::F16);
    let (sq, sk) = x.seqlens();
    for (page, with_prefix, needle) in [(128, true, "mm_prefix_ranges"), (64, false, "multiple of 128")] {
        let p = paginate(&mut rng, &x, page, 1);
        let ranges = Tensor::from_vec(vec![0i32, 2, 1, 4], (2, 1, 2), &Device::Cpu).unwrap();
        let mut args = vec![&x.q, &p.k_pages, &p.v_pages, &sq, &sk, &p.table];
        args.extend(with_prefix.then_some(&ranges));
        check_refused(&format!("paged page={page} prefix={with_prefix}"), &dev, &args, needle, |a| {
            let (kv, lens) = paged_args(a, page, (5, 200));
            let f = Features { scale: 0.125, window: CAUSAL, alibi: None, softcap: None };
            out_only(calls::paged(&a[0], &kv, a.get(6), &lens, f))
        });
    }
}
