//! What CK cannot serve (head dims above 256, softcap with ALiBi, pages that are not multiples
//! of 128, `mm_prefix_ranges`): under `FLASH_ATTN_ROCM_KERNELS=ck` each such call is an `Err`
//! that names the reason; otherwise our Triton kernels serve it, and it must match the CPU. What
//! no GPU family serves (f32) is an `Err` either way.

use candle::{DType, Device, Tensor};
use flash_attn_rocm as fa;
use fa::plan::dispatch::KernelChoice;

use crate::check::{check_gpu_vs_cpu, check_refused, gpu_and_rng, out_only};
use crate::common::batch::{batch_expected, batch_inputs, BatchCase};
use crate::common::calls::{self, Features, CAUSAL};
use crate::common::expected::{expected, LseLayout};
use crate::common::ragged::{paginate, prefix_ranges, ragged};
use crate::common::{randn, RefOpts};
use crate::varlen::paged_args;

#[test]
fn calls_ck_cannot_serve_are_errors_or_triton() {
    let Some((dev, mut rng)) = gpu_and_rng("calls_ck_cannot_serve_are_errors_or_triton") else {
        return;
    };
    let plain = |a: &[Tensor]| out_only(fa::flash_attn(&a[0], &a[1], &a[2], 0.125, true));
    let f32_qkv = [0; 3].map(|_| randn(&mut rng, &[1, 16, 2, 64], DType::F32));
    check_refused("f32", &dev, &f32_qkv.each_ref(), "f16 or bf16", plain);

    let ck_only = KernelChoice::from_env().expect("FLASH_ATTN_ROCM_KERNELS") == KernelChoice::Ck;
    eprintln!("kernel choice: {}", if ck_only { "ck: CK's refusals" } else { "auto/triton: Triton serves them" });
    // Under `ck`, a build without CK (RDNA) refuses everything for that reason first.
    let reason = |needle: &'static str| if fa::rocm::CK_ARCHS.is_empty() { "CK was built for" } else { needle };
    let batch = |d, alibi, softcap| BatchCase {
        b: 1, s_q: 40, s_k: 70, h: 2, h_k: 1, d, dtype: DType::BF16, window: CAUSAL, alibi, softcap, transposed: false,
    };
    for (c, needle) in [(batch(512, false, None), "head dims up to 256"), (batch(64, true, Some(5.0)), "softcap with ALiBi")] {
        let x = batch_inputs(&c, &mut rng);
        let mut args = vec![&x.q, &x.k, &x.v];
        args.extend(x.slopes.as_ref());
        let f = x.features(&c);
        // `calls::batch` picks flash_attn_alibi_windowed_softcap for softcap with ALiBi.
        let call = |a: &[Tensor]| out_only(calls::batch(&a[0], &a[1], &a[2], f.with_alibi(a.get(3))));
        if ck_only {
            check_refused(&format!("{c:?}"), &dev, &args, reason(needle), call);
        } else {
            check_gpu_vs_cpu(&format!("{c:?}"), &dev, &args, &batch_expected(&c, &x), call);
            expect_triton(&format!("{c:?}"), &dev, &args, call);
        }
    }

    let lens = [(3, 200), (5, 40), (0, 9)];
    let heads = (2, 1, 64);
    let max = (5, 200);
    for (page, with_prefix, needle) in [(128, true, "mm_prefix_ranges"), (64, false, "multiple of 128")] {
        let x = ragged(&mut rng, &lens, heads, DType::F16);
        let p = paginate(&mut rng, &x, page, 1);
        let ranges = prefix_ranges(&mut rng, &lens);
        let flat: Vec<i32> = ranges.iter().flatten().flat_map(|&(a, b)| [a as i32, b as i32]).collect();
        let ranges_t = Tensor::from_vec(flat, (lens.len(), 2, 2), &Device::Cpu).unwrap();
        let (sq, sk) = x.seqlens();
        let mut args = vec![&x.q, &p.k_pages, &p.v_pages, &sq, &sk, &p.table];
        args.extend(with_prefix.then_some(&ranges_t));
        let f = Features { scale: 0.125, window: CAUSAL, alibi: None, softcap: None };
        let call = |a: &[Tensor]| {
            let (kv, lens) = paged_args(a, page, max);
            out_only(calls::paged(&a[0], &kv, a.get(6), &lens, f))
        };
        let what = format!("paged page={page} prefix={with_prefix}");
        if ck_only {
            check_refused(&what, &dev, &args, reason(needle), call);
        } else {
            let opts: Vec<RefOpts> = ranges
                .iter()
                .map(|r| RefOpts { mm_prefix: if with_prefix { r.clone() } else { vec![] }, ..f.ref_opts(max.1) })
                .collect();
            check_gpu_vs_cpu(&what, &dev, &args, &expected(&x.seqs(), &opts, heads, DType::F16, LseLayout::VarLen), call);
            expect_triton(&what, &dev, &args, call);
        }
    }
}

/// `explain` names our Triton kernels for `call` on copies of `args` on `dev`.
fn expect_triton(what: &str, dev: &Device, args: &[&Tensor], call: impl Fn(&[Tensor]) -> crate::check::Outcome) {
    let gpu_args: Vec<Tensor> = args.iter().map(|t| t.to_device(dev).unwrap()).collect();
    let dispatch = fa::explain(|| call(&gpu_args)).unwrap_or_else(|e| panic!("{what}: explain: {e}"));
    assert_eq!(dispatch.backend, fa::Backend::Triton, "{what}: {dispatch}");
}
