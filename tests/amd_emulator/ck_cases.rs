//! CK's kernels on the emulated gfx942, through CK's own launcher and the crate's CK path (the
//! shim, the side-tensor guard kernel, the split-KV plan), run with `FLASH_ATTN_ROCM_KERNELS=ck`
//! so that a call CK cannot serve fails instead of taking Triton. Head dim 128 (CK's tile of
//! scripts/hip-emu-tests.sh's CK build) and 80 (padded on that tile); f16 and bf16.
use candle::{DType, Tensor};
use flash_attn_rocm as fa;
use flash_attn_rocm::gpu::Driver;
use flash_attn_rocm::glue::offload::run_on_gpu;
use flash_attn_rocm::triton::take_faults;

use crate::cases::{batch_inputs, launched_must_include, paged_call, rng, scale, DTYPES};
use crate::common::ragged::{paginate, ragged, u32s};
use crate::common::values;
use crate::compare::check;
use crate::launches::take_launches;
use crate::runner::ClassTest;

pub const CK_CLASSES: &[ClassTest] = &[
    ("ck_batch", ck_batch),
    ("ck_softcap", ck_softcap),
    ("ck_varlen_alibi", ck_varlen_alibi),
    ("ck_paged_split_kv", ck_paged_split_kv),
    ("ck_guard_faults", ck_guard_faults),
];

/// What a CK kernel's (mangled) name says it is, for the table.
pub fn ck_kind(kernel: &str) -> Option<&'static str> {
    [("SplitKVCombine", "ck_splitkv_combine"), ("SplitKV", "ck_splitkv"), ("FmhaFwd", "ck_fwd"), ("guard", "ck_guard")]
        .into_iter()
        .find(|(needle, _)| kernel.contains(needle))
        .map(|(_, kind)| kind)
}

/// Batch mode with a mask: causal, a window (20, 3), GQA 2/1, with the LSE; d = 128 and 80.
fn ck_batch(driver: &'static Driver) {
    let mut rng = rng();
    take_launches();
    for dtype in DTYPES {
        for d in [128, 80] {
            let [q, k, v] = batch_inputs(&mut rng, (2, 40, 56, 2, 1, d), dtype);
            let s = scale(d);
            check(&format!("ck batch {dtype:?} d{d} causal"), driver, || Ok((fa::flash_attn(&q, &k, &v, s, true)?, None)));
            check(&format!("ck batch {dtype:?} d{d} window (20, 3) with lse"), driver, || {
                let op = fa::FlashAttn { softmax_scale: s, alibi_slopes: None, window_size_left: Some(20), window_size_right: Some(3), softcap: None };
                let (out, lse) = op.forward_with_lse(&q, &k, &v)?;
                Ok((out, Some(lse)))
            });
        }
    }
    launched_must_include("ck_batch", &["ck_fwd"]);
}

/// Softcap without a mask (CK's logits instance).
fn ck_softcap(driver: &'static Driver) {
    let mut rng = rng();
    take_launches();
    for dtype in DTYPES {
        let [q, k, v] = batch_inputs(&mut rng, (1, 33, 70, 2, 2, 128), dtype);
        check(&format!("ck batch {dtype:?} d128 softcap 5"), driver, || {
            Ok((fa::flash_attn_alibi_windowed_softcap(&q, &k, &v, None, scale(128), None, None, 5.0)?, None))
        });
    }
    launched_must_include("ck_softcap", &["ck_fwd"]);
}

/// Group mode (varlen) with ALiBi: sequences with no query rows and no keys, with the LSE.
fn ck_varlen_alibi(driver: &'static Driver) {
    let mut rng = rng();
    take_launches();
    for dtype in DTYPES {
        let r = ragged(&mut rng, &[(17, 30), (0, 16), (5, 0), (24, 40)], (2, 1, 128), dtype);
        let slopes = Tensor::new(&[0.25f32, 0.0625], &candle::Device::Cpu).unwrap();
        let (cu_q, cu_k) = (u32s(&r.cu_q), u32s(&r.cu_k));
        check(&format!("ck varlen {dtype:?} d128 alibi"), driver, || {
            let (out, lse) = fa::flash_attn_varlen_with_lse(&r.q, &r.k, &r.v, Some(&slopes), &cu_q, &cu_k, 24, 40, scale(128), None, None, None)?;
            Ok((out, Some(lse)))
        });
    }
    launched_must_include("ck_varlen_alibi", &["ck_fwd"]);
}

/// Paged K/V (pages of 128 rows, the multiple CK's paged kernels need; its split-KV kernels and
/// their combine): causal decode rows, then prefill rows, GQA 2/1.
fn ck_paged_split_kv(driver: &'static Driver) {
    let mut rng = rng();
    take_launches();
    for dtype in DTYPES {
        let r = ragged(&mut rng, &[(1, 45), (1, 300), (1, 16)], (2, 1, 128), dtype);
        check(&format!("ck paged decode {dtype:?} d128 page 128 causal"), driver, paged_call(&r, 128, &mut rng, true));
        let r = ragged(&mut rng, &[(20, 200), (3, 130)], (2, 1, 128), dtype);
        check(&format!("ck paged prefill {dtype:?} d128 page 128 causal"), driver, paged_call(&r, 128, &mut rng, true));
    }
    launched_must_include("ck_paged_split_kv", &["ck_splitkv"]);
}

/// The side-tensor guard: a block id outside the cache on CK's paged path. The call runs, and
/// the guard's fault bits are what the next check reports.
fn ck_guard_faults(driver: &'static Driver) {
    let mut rng = rng();
    take_launches();
    take_faults(driver).expect("no fault before this test");
    let r = ragged(&mut rng, &[(2, 40), (1, 30)], (2, 1, 128), DType::F16);
    let p = paginate(&mut rng, &r, 128, 1);
    let mut table: Vec<Vec<u32>> = p.table.to_vec2().unwrap();
    table[1][0] = p.k_pages.dim(0).unwrap() as u32 + 5;
    let table = Tensor::new(table, &candle::Device::Cpu).unwrap();
    let (sq, sk) = r.seqlens();
    let out = run_on_gpu(driver, || {
        fa::flash_attn_varlen_paged_windowed(&r.q, &p.k_pages, &p.v_pages, &sq, &sk, &table, None, 2, 40, scale(128), None, Some(0), 128, None)
    })
    .expect("bad block ids are the kernels' business");
    assert!(values(&out).iter().all(|x| x.is_finite()), "non-finite output");
    let err = take_faults(driver).expect_err("the guard reports the bad block id").to_string();
    assert!(err.contains("block_table"), "{err}");
    take_faults(driver).expect("cleared");
    launched_must_include("ck_guard_faults", &["ck_guard", "ck_splitkv"]);
}
