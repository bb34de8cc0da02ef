//! The kernel classes, each on small shapes that still take its variants' code paths: one
//! work-group or a few per launch, so that a launch takes seconds on the emulator. Every call
//! is checked against the CPU backend (compare.rs), and each class asserts which variants it
//! launched (the HIP stand-in's launch log), so that the report says what ran.
use candle::{DType, Tensor};
use flash_attn_rocm as fa;
use flash_attn_rocm::gpu::Driver;
use flash_attn_rocm::glue::offload::run_on_gpu;
use flash_attn_rocm::triton::take_faults;
use rand::rngs::StdRng;

use crate::common::ragged::{paginate, ragged, u32s, Ragged};
use crate::common::{randn, values};
use crate::compare::check;
use crate::launches::take_launches;
use crate::runner::ClassTest;

pub const CLASSES: &[ClassTest] = &[
    ("prefill", prefill),
    ("prefill_head_dim_tiles", prefill_head_dim_tiles),
    ("prefill_d256", prefill_d256),
    ("head_dims_above_256", head_dims_above_256),
    ("split_head_dims", split_head_dims),
    ("split_head_dims_b64", split_head_dims_b64),
    ("paged_prefill_d160", paged_prefill_d160),
    ("decode", decode),
    ("decode_d128", decode_d128),
    ("split_keys_merge", split_keys_merge),
    ("paged", paged),
    ("varlen", varlen),
    ("extras", extras),
    ("decode_extras", decode_extras),
    ("b64_variants", b64_variants),
    ("faults", faults),
];

pub const DTYPES: [DType; 2] = [DType::F16, DType::BF16];

/// A fresh seed per trial, printed for a replay (FLASH_ATTN_TEST_SEED).
pub fn rng() -> StdRng {
    crate::common::rng("amd_emulator")
}

pub fn scale(d: usize) -> f32 {
    1.0 / (d as f32).sqrt()
}

/// Runs the class body, then asserts that some launched variant contains each of `expected`
/// (e.g. `_b32`, `merge_`) and prints them all: what the arch x class table reports.
pub fn launched_must_include(what: &str, expected: &[&str]) {
    let mut launched = take_launches();
    launched.sort();
    launched.dedup();
    crate::compare::LAST.with(|l| *l.borrow_mut() = launched.clone());
    eprintln!("emu-launched {what}: {}", launched.join(" "));
    for needle in expected {
        assert!(launched.iter().any(|v| v.contains(needle)), "{what}: no variant with {needle:?} ran: {launched:?}");
    }
}

pub fn batch_inputs(rng: &mut StdRng, (b, s_q, s_k, h, h_k, d): (usize, usize, usize, usize, usize, usize), dtype: DType) -> [Tensor; 3] {
    [randn(rng, &[b, s_q, h, d], dtype), randn(rng, &[b, s_k, h_k, d], dtype), randn(rng, &[b, s_k, h_k, d], dtype)]
}

/// Batch prefill at d = 64: causal, a window, none; GQA 2/1; f16 and bf16; with the LSE.
fn prefill(driver: &'static Driver) {
    let mut rng = rng();
    take_launches();
    for dtype in DTYPES {
        let [q, k, v] = batch_inputs(&mut rng, (1, 40, 56, 2, 1, 64), dtype);
        let s = scale(64);
        check(&format!("prefill {dtype:?} d64 causal"), driver, || Ok((fa::flash_attn(&q, &k, &v, s, true)?, None)));
        check(&format!("prefill {dtype:?} d64 window (20, 3)"), driver, || {
            Ok((fa::flash_attn_windowed(&q, &k, &v, s, Some(20), Some(3))?, None))
        });
        check(&format!("prefill {dtype:?} d64 with lse"), driver, || {
            let op = fa::FlashAttn { softmax_scale: s, alibi_slopes: None, window_size_left: None, window_size_right: None, softcap: None };
            let (out, lse) = op.forward_with_lse(&q, &k, &v)?;
            Ok((out, Some(lse)))
        });
    }
    launched_must_include("prefill", &["fwd_prefill_fp16_d64_flat", "fwd_prefill_bf16_d64_flat"]);
}

fn prefill_tiles(driver: &'static Driver, cases: &[(usize, DType)]) {
    let mut rng = rng();
    for &(d, dtype) in cases {
        let [q, k, v] = batch_inputs(&mut rng, (1, 24, 40, 1, 1, d), dtype);
        let s = scale(d);
        check(&format!("prefill {dtype:?} d{d} causal"), driver, || Ok((fa::flash_attn(&q, &k, &v, s, true)?, None)));
    }
}

/// The head-dim tiles 32 and 128 and a head dim below its tile (56 on the 64 tile: the
/// masked-d variant), f16 causal; bf16 at 128.
fn prefill_head_dim_tiles(driver: &'static Driver) {
    take_launches();
    prefill_tiles(driver, &[(32, DType::F16), (56, DType::F16), (128, DType::F16), (128, DType::BF16)]);
    launched_must_include("prefill_head_dim_tiles", &["_d32_", "_d64p_", "fwd_prefill_fp16_d128_", "fwd_prefill_bf16_d128_"]);
}

/// The split head-dim tiles (a power of two and a tail in operands of their own): Stable
/// Diffusion's 40 (on 48 = 32 + 16, masked; CDNA builds have no 48 tile and pad it to 64), 80 and
/// 160 and Phi-3's 96 at their own tiles, 72 on
/// the 80 tile (masked tail); 80, 96 and 160 without a mask (unmasked key tiles); flat decode at
/// 80 and 160, paged decode at 80 and 96 and paged prefill at 80 and 96 (pages of 16), keys split
/// at 80, merged by the 128 tile's merge, the extras variants (flat at 80, paged at 80 and 160),
/// f16 flat prefill at 160 over 150 keys and 152 on the 160 tile.
fn split_head_dims(driver: &'static Driver) {
    let mut rng = rng();
    take_launches();
    prefill_tiles(driver, &[(40, DType::F16), (80, DType::BF16), (72, DType::F16), (96, DType::F16), (160, DType::BF16)]);
    // Unmasked key tiles: 24 queries against 200 keys without a mask (with the LSE): on gfx12 the
    // flat prefill at 80, 96 and 160 runs KEY_HALVES' loops (kernels/aot.py; 64-key tiles, the
    // keys split in two by the plan: [0, 128) two unmasked tiles, [128, 200) one unmasked tile
    // and a masked 32-key one).
    for (d, dtype) in [(160, DType::F16), (160, DType::BF16), (80, DType::F16), (96, DType::BF16)] {
        let [q, k, v] = batch_inputs(&mut rng, (1, 24, 200, 1, 1, d), dtype);
        let s = scale(d);
        check(&format!("prefill {dtype:?} d{d} s_k 200 with lse"), driver, || {
            let op = fa::FlashAttn { softmax_scale: s, alibi_slopes: None, window_size_left: None, window_size_right: None, softcap: None };
            let (out, lse) = op.forward_with_lse(&q, &k, &v)?;
            Ok((out, Some(lse)))
        });
    }
    for dtype in DTYPES {
        flat_decode(driver, &mut rng, dtype, 80);
    }
    flat_decode(driver, &mut rng, DType::F16, 160);
    let r = ragged(&mut rng, &[(1, 45), (1, 90)], (4, 1, 96), DType::BF16);
    check("paged decode BF16 d96 page 16", driver, paged_call(&r, 16, &mut rng, false));
    // Paged prefill at 80 and 96: CDNA gives them launch tiles and compile options of their own
    // (kernels/aot.py SPLIT_TILES, SPLIT_OPTIONS).
    for (d, dtype) in [(80, DType::F16), (96, DType::BF16)] {
        let r = ragged(&mut rng, &[(20, 45), (3, 70)], (2, 1, d), dtype);
        check(&format!("paged prefill {dtype:?} d{d} page 16 causal"), driver, paged_call(&r, 16, &mut rng, true));
    }
    split_decode(driver, &mut rng, 80);
    // Paged decode at 80 and the extras variants at 80 and 160 (kernels/aot.py SPLIT_TILES gives
    // gfx1103's paged decode at 80 and gfx12's extras at 160 launch tiles of their own).
    let r = ragged(&mut rng, &[(1, 45), (1, 90)], (4, 1, 80), DType::F16);
    check("paged decode F16 d80 page 16", driver, paged_call(&r, 16, &mut rng, false));
    let [q, k, v] = batch_inputs(&mut rng, (1, 30, 50, 2, 1, 80), DType::F16);
    let slopes = Tensor::new(&[0.25f32, 0.0625], &candle::Device::Cpu).unwrap();
    check("prefill_x F16 d80 alibi softcap 5 window (12, 0)", driver, || {
        Ok((fa::flash_attn_alibi_windowed_softcap(&q, &k, &v, Some(&slopes), scale(80), Some(12), Some(0), 5.0)?, None))
    });
    let r = ragged(&mut rng, &[(20, 40), (6, 33)], (2, 2, 160), DType::BF16);
    let p = paginate(&mut rng, &r, 16, 1);
    let (sq, sk) = r.seqlens();
    let ranges = Tensor::new(&[[[0i32, 5], [9, 12]], [[2, 4], [5, 5]]], &candle::Device::Cpu).unwrap();
    check("paged prefill_x BF16 d160 mm_prefix_ranges softcap 3", driver, || {
        let (out, lse) = fa::flash_attn_varlen_paged_windowed_with_lse(
            &r.q, &p.k_pages, &p.v_pages, &sq, &sk, &p.table, Some(&ranges), 20, 40, scale(160), None, Some(0), 16, Some(3.0),
        )?;
        Ok((out, Some(lse)))
    });
    // Issue 57's tiles with unmasked key tiles: gfx942's f16 flat prefill at 160 (128x64, kpack
    // 2; 150 keys, non-causal: two whole 64-key tiles and a masked one) and gfx11's paged
    // extras at 80 (128x16 over 8 waves, 3 stages; causal with softcap, keys 50 past the queries).
    let [q, k, v] = batch_inputs(&mut rng, (1, 24, 150, 1, 1, 160), DType::F16);
    check("prefill F16 d160 150 keys", driver, || Ok((fa::flash_attn(&q, &k, &v, scale(160), false)?, None)));
    // A head dim of 152 on the 160 tile (the tail's last 8 columns masked), non-causal over 150
    // keys, both dtypes: gfx11's padded `_b32` flat prefill loads the V tail two columns a thread
    // (kernels/aot.py TAIL_VEC).
    for dtype in DTYPES {
        let [q, k, v] = batch_inputs(&mut rng, (1, 24, 150, 1, 1, 152), dtype);
        check(&format!("prefill {dtype:?} d152 150 keys"), driver, || Ok((fa::flash_attn(&q, &k, &v, scale(152), false)?, None)));
    }
    let r = ragged(&mut rng, &[(20, 70), (6, 45)], (2, 1, 80), DType::F16);
    let p = paginate(&mut rng, &r, 16, 1);
    let (sq, sk) = r.seqlens();
    check("paged prefill_x F16 d80 softcap 5 causal", driver, || {
        let (out, lse) = fa::flash_attn_varlen_paged_windowed_with_lse(
            &r.q, &p.k_pages, &p.v_pages, &sq, &sk, &p.table, None, 20, 70, scale(80), None, Some(0), 16, Some(5.0),
        )?;
        Ok((out, Some(lse)))
    });
    let cdna = driver.arch_name(0).is_ok_and(|arch| arch.starts_with("gfx9"));
    launched_must_include(
        "split_head_dims",
        &[if cdna { "fwd_prefill_fp16_d64p_" } else { "fwd_prefill_fp16_d48p_" }, "fwd_prefill_bf16_d80_", "fwd_prefill_fp16_d80p_", "fwd_prefill_fp16_d96_", "fwd_prefill_bf16_d160_",
          "fwd_prefill_fp16_d160_", "fwd_prefill_fp16_d80_", "fwd_prefill_bf16_d96_",
          "fwd_decode_fp16_d80_flat", "fwd_decode_bf16_d80_flat", "fwd_decode_fp16_d160_flat", "fwd_decode_bf16_d96_paged",
          "fwd_prefill_fp16_d80_paged", "fwd_prefill_bf16_d96_paged", "merge_fp16_d128",
          "fwd_decode_fp16_d80_paged", "fwd_prefill_fp16_d80_flat_x", "fwd_prefill_bf16_d160_paged_x",
          "fwd_prefill_fp16_d160_flat", "fwd_prefill_fp16_d80_paged_x", "fwd_prefill_fp16_d160p_flat",
          "fwd_prefill_bf16_d160p_flat"],
    );
}

/// The 64-bit images of the split-tile decode variants that have a `_b32` twin, which small
/// calls always take (twins.rs): flat decode at 160, both dtypes, GQA 4/1 over 70 keys (gfx12 runs
/// KEY_HALVES' loops there, kernels/aot.py: four unmasked 16-key tiles from the scalar tile pointer
/// and a masked one); against the CPU backend's output and LSE.
fn split_head_dims_b64(driver: &'static Driver) {
    let mut rng = rng();
    take_launches();
    for dtype in DTYPES {
        let x = batch_inputs(&mut rng, (2, 1, 70, 4, 1, 160), dtype);
        let op = fa::FlashAttn { softmax_scale: scale(160), alibi_slopes: None, window_size_left: None, window_size_right: None, softcap: None };
        let (cpu_out, cpu_lse) = op.forward_with_lse(&x[0], &x[1], &x[2]).unwrap();
        let (out, lse, splits) = crate::twins::batch_without_twin(driver, &x, scale(160), false);
        crate::compare::agree(&format!("decode {dtype:?} d160 b2 s_k 70, 64-bit image, {splits} splits"), (&out, Some(&lse)), (&cpu_out, Some(&cpu_lse)));
    }
    launched_only_64_bit("split_head_dims_b64", &["fwd_decode_fp16_d160_flat", "fwd_decode_bf16_d160_flat"]);
}

/// launched_must_include for the calls run through twins.rs' raw launch paths, which must have
/// launched no `_b32` twin.
fn launched_only_64_bit(what: &str, expected: &[&str]) {
    launched_must_include(what, expected);
    let launched = crate::compare::last_launched();
    assert!(launched.iter().all(|v| !v.contains("_b32")), "{what}: a twin ran: {launched:?}");
}

/// Paged prefill at 160 with unmasked key tiles, both dtypes, pages of 16: 20 and 6 queries (GQA
/// 2/1) against 70 and 45 keys without a mask, so that 32-key tiles run unmasked (gfx11 loads
/// the tail of V there two columns a thread: kernels/aot.py's TAIL_VEC): the `_b32` twins, which
/// small calls take, then the 64-bit images through the raw launch path (twins.rs).
fn paged_prefill_d160(driver: &'static Driver) {
    let mut rng = rng();
    take_launches();
    for dtype in DTYPES {
        let r = ragged(&mut rng, &[(20, 70), (6, 45)], (2, 1, 160), dtype);
        check(&format!("paged prefill {dtype:?} d160 page 16 non-causal"), driver, paged_call(&r, 16, &mut rng, false));
    }
    launched_must_include("paged_prefill_d160", &["fwd_prefill_fp16_d160_paged_b32", "fwd_prefill_bf16_d160_paged_b32"]);
    // The 64-bit images (twins.rs), against the CPU backend's output and LSE.
    for dtype in DTYPES {
        let r = ragged(&mut rng, &[(20, 70), (6, 45)], (2, 1, 160), dtype);
        let p = paginate(&mut rng, &r, 16, 1);
        let (sq, sk) = r.seqlens();
        let (cpu_out, cpu_lse) = fa::flash_attn_varlen_paged_windowed_with_lse(
            &r.q, &p.k_pages, &p.v_pages, &sq, &sk, &p.table, None, 20, 70, scale(160), None, None, 16, None,
        )
        .unwrap();
        let x = [r.q.clone(), p.k_pages.clone(), p.v_pages.clone()];
        let (out, lse, splits) = crate::twins::paged_without_twin(driver, &x, (&sq, &sk, &p.table), (20, 70, 16), scale(160));
        let what = format!("paged prefill {dtype:?} d160 page 16 non-causal, 64-bit image, {splits} splits");
        crate::compare::agree(&what, (&out, Some(&lse)), (&cpu_out, Some(&cpu_lse)));
    }
    launched_only_64_bit("paged_prefill_d160 64-bit", &["fwd_prefill_fp16_d160_paged", "fwd_prefill_bf16_d160_paged"]);
}

/// The 256 tile (its own class: on RDNA it spills heavily to scratch). Causal 24 x 40 has no
/// unmasked key tile; 24 queries against 100 keys without a mask (with the LSE) and causal 160 x
/// 160 (a second block of rows) have unmasked tiles and a masked one after them, which on gfx12
/// run KEY_HALVES' loops (kernels/aot.py: 32-key tiles loaded in halves).
fn prefill_d256(driver: &'static Driver) {
    let mut rng = rng();
    take_launches();
    prefill_tiles(driver, &[(256, DType::F16), (256, DType::BF16)]);
    let s = scale(256);
    for dtype in DTYPES {
        let [q, k, v] = batch_inputs(&mut rng, (1, 24, 100, 1, 1, 256), dtype);
        check(&format!("prefill {dtype:?} d256 s_k 100 with lse"), driver, || {
            let op = fa::FlashAttn { softmax_scale: s, alibi_slopes: None, window_size_left: None, window_size_right: None, softcap: None };
            let (out, lse) = op.forward_with_lse(&q, &k, &v)?;
            Ok((out, Some(lse)))
        });
        let [q, k, v] = batch_inputs(&mut rng, (1, 160, 160, 1, 1, 256), dtype);
        check(&format!("prefill {dtype:?} d256 160 x 160 causal"), driver, || Ok((fa::flash_attn(&q, &k, &v, s, true)?, None)));
    }
    launched_must_include("prefill_d256", &["fwd_prefill_fp16_d256_", "fwd_prefill_bf16_d256_"]);
}

/// The 512 tile, which serves head dims 264-512 (issue 57): prefill at 512 (f16, bf16) and 264
/// (masked head dim), flat decode at 512, decode keys split over 600 keys and merged by the 512
/// tile's merge, paged decode at 384 (pages of 16).
fn head_dims_above_256(driver: &'static Driver) {
    let mut rng = rng();
    take_launches();
    prefill_tiles(driver, &[(512, DType::F16), (512, DType::BF16), (264, DType::F16)]);
    flat_decode(driver, &mut rng, DType::BF16, 512);
    split_decode(driver, &mut rng, 512);
    let r = ragged(&mut rng, &[(1, 45), (1, 90)], (4, 1, 384), DType::F16);
    check("paged decode F16 d384 page 16", driver, paged_call(&r, 16, &mut rng, false));
    launched_must_include(
        "head_dims_above_256",
        &["fwd_prefill_fp16_d512_", "fwd_prefill_bf16_d512_", "fwd_prefill_fp16_d512p_", "fwd_decode_bf16_d512_flat",
          "fwd_decode_fp16_d512p_paged", "merge_fp16_d512"],
    );
}

/// One f16 query row (GQA 2/1) against 600 keys at head dim `d`, with the LSE: the plan splits
/// the keys and a merge combines them.
fn split_decode(driver: &'static Driver, rng: &mut StdRng, d: usize) {
    let [q, k, v] = batch_inputs(rng, (1, 1, 600, 2, 1, d), DType::F16);
    check(&format!("decode F16 d{d} s_k 600 (split)"), driver, || {
        let op = fa::FlashAttn { softmax_scale: scale(d), alibi_slopes: None, window_size_left: None, window_size_right: None, softcap: None };
        let (out, lse) = op.forward_with_lse(&q, &k, &v)?;
        Ok((out, Some(lse)))
    });
}

/// Decode (one query row per sequence), GQA 4/1: the decode tile.
fn decode(driver: &'static Driver) {
    let mut rng = rng();
    take_launches();
    for dtype in DTYPES {
        flat_decode(driver, &mut rng, dtype, 64);
    }
    launched_must_include("decode", &["fwd_decode_fp16_d64_flat", "fwd_decode_bf16_d64_flat"]);
}

/// One query row per sequence against 70 keys, GQA 4/1, batch of 2, head dim `d`.
fn flat_decode(driver: &'static Driver, rng: &mut StdRng, dtype: DType, d: usize) {
    let [q, k, v] = batch_inputs(rng, (2, 1, 70, 4, 1, d), dtype);
    check(&format!("decode {dtype:?} d{d} b2 s_k 70"), driver, || Ok((fa::flash_attn(&q, &k, &v, scale(d), false)?, None)));
}

/// Decode at d = 128, flat and paged (pages of 16), GQA 4/1: the d = 128 decode tiles, which
/// differ by register file (gfx1103's paged one is 32x16 over 2 waves; gfx11's flat one runs at
/// waves_per_eu 5 on gfx1100/gfx1151, 4 on gfx1103).
fn decode_d128(driver: &'static Driver) {
    let mut rng = rng();
    take_launches();
    for dtype in DTYPES {
        flat_decode(driver, &mut rng, dtype, 128);
        let r = ragged(&mut rng, &[(1, 45), (1, 90)], (4, 1, 128), dtype);
        check(&format!("paged decode {dtype:?} d128 page 16"), driver, paged_call(&r, 16, &mut rng, false));
    }
    launched_must_include("decode_d128", &["fwd_decode_fp16_d128_flat", "fwd_decode_bf16_d128_flat", "fwd_decode_fp16_d128_paged", "fwd_decode_bf16_d128_paged"]);
}

/// Keys split across programs (the plan on the arch's CU count) and merged by attn_merge.
fn split_keys_merge(driver: &'static Driver) {
    let mut rng = rng();
    take_launches();
    for dtype in DTYPES {
        let [q, k, v] = batch_inputs(&mut rng, (1, 1, 600, 2, 1, 64), dtype);
        check(&format!("decode {dtype:?} d64 s_k 600 (split)"), driver, || {
            let op = fa::FlashAttn { softmax_scale: scale(64), alibi_slopes: None, window_size_left: None, window_size_right: None, softcap: None };
            let (out, lse) = op.forward_with_lse(&q, &k, &v)?;
            Ok((out, Some(lse)))
        });
    }
    launched_must_include("split_keys_merge", &["merge_fp16_d64", "merge_bf16_d64"]);
}

pub fn paged_call<'a>(r: &'a Ragged, page: usize, rng: &mut StdRng, causal: bool) -> impl Fn() -> crate::compare::Outcome + 'a {
    let p = paginate(rng, r, page, 1);
    let (sq, sk) = r.seqlens();
    let max_q = r.lens.iter().map(|l| l.0).max().unwrap();
    let max_k = r.lens.iter().map(|l| l.1).max().unwrap();
    let d = r.q.dim(2).unwrap();
    move || {
        let (out, lse) = fa::flash_attn_varlen_paged_windowed_with_lse(
            &r.q.clone(), &p.k_pages, &p.v_pages, &sq, &sk, &p.table, None, max_q, max_k, scale(d), None,
            causal.then_some(0), page, None,
        )?;
        Ok((out, Some(lse)))
    }
}

/// Paged K/V with odd page sizes (7, 33) and a page of 16: prefill rows and decode rows.
fn paged(driver: &'static Driver) {
    let mut rng = rng();
    take_launches();
    for (n, dtype) in DTYPES.into_iter().enumerate() {
        for page in [7, 16, 33] {
            let r = ragged(&mut rng, &[(20, 45), (3, 70)], (2, 1, 64), dtype);
            check(&format!("paged prefill {dtype:?} d64 page {page} causal"), driver, paged_call(&r, page, &mut rng, true));
        }
        let r = ragged(&mut rng, &[(1, 45), (1, 90), (1, 7 + n)], (4, 2, 64), dtype);
        check(&format!("paged decode {dtype:?} d64 page 7"), driver, paged_call(&r, 7, &mut rng, false));
    }
    launched_must_include("paged", &["fwd_prefill_fp16_d64_paged", "fwd_decode_fp16_d64_paged", "fwd_prefill_bf16_d64_paged"]);
}

/// Varlen (cumulative seqlens), sequences of zero query rows and zero keys, and query rows
/// before the first and after the last sequence (output 0, LSE -inf on both backends).
fn varlen(driver: &'static Driver) {
    let mut rng = rng();
    take_launches();
    for dtype in DTYPES {
        let lens = [(17, 30), (0, 16), (5, 0), (24, 40)];
        let r = ragged(&mut rng, &lens, (2, 1, 64), dtype);
        let (before, after) = (2, 3);
        let q = Tensor::cat(&[&randn(&mut rng, &[before, 2, 64], dtype), &r.q, &randn(&mut rng, &[after, 2, 64], dtype)], 0).unwrap();
        let cu_q = u32s(&r.cu_q.iter().map(|&x| x + before as u32).collect::<Vec<_>>());
        let cu_k = u32s(&r.cu_k);
        check(&format!("varlen {dtype:?} d64 causal, {before} rows before and {after} after"), driver, || {
            let (out, lse) = fa::flash_attn_varlen_with_lse(&q, &r.k, &r.v, None, &cu_q, &cu_k, 24, 40, scale(64), None, Some(0), None)?;
            Ok((out, Some(lse)))
        });
    }
    launched_must_include("varlen", &["fwd_prefill_fp16_d64_flat", "fwd_prefill_bf16_d64_flat"]);
}

/// ALiBi + softcap + window (the prefill `_x` variants), mm_prefix_ranges on paged K/V, and
/// softcap + window on paged K/V at d = 128.
fn extras(driver: &'static Driver) {
    let mut rng = rng();
    take_launches();
    for dtype in DTYPES {
        let [q, k, v] = batch_inputs(&mut rng, (1, 30, 50, 2, 1, 64), dtype);
        let slopes = Tensor::new(&[0.25f32, 0.0625], &candle::Device::Cpu).unwrap();
        check(&format!("prefill_x {dtype:?} d64 alibi softcap 5 window (12, 0)"), driver, || {
            Ok((fa::flash_attn_alibi_windowed_softcap(&q, &k, &v, Some(&slopes), scale(64), Some(12), Some(0), 5.0)?, None))
        });
        let r = ragged(&mut rng, &[(20, 40), (6, 33)], (2, 2, 64), dtype);
        let p = paginate(&mut rng, &r, 16, 1);
        let (sq, sk) = r.seqlens();
        let ranges = Tensor::new(&[[[0i32, 5], [9, 12]], [[2, 4], [5, 5]]], &candle::Device::Cpu).unwrap();
        check(&format!("paged prefill_x {dtype:?} d64 mm_prefix_ranges softcap 3"), driver, || {
            let (out, lse) = fa::flash_attn_varlen_paged_windowed_with_lse(
                &r.q, &p.k_pages, &p.v_pages, &sq, &sk, &p.table, Some(&ranges), 20, 40, scale(64), None, Some(0), 16, Some(3.0),
            )?;
            Ok((out, Some(lse)))
        });
        // d = 128 paged with softcap and a window whose blocks take all three key loops (masked,
        // unmasked, masked): the window's offsets from each row's position (attention.py's
        // _mask_scores) on the tile whose masked loops came nearest to scratch (gfx1201).
        let r = ragged(&mut rng, &[(40, 200), (7, 50)], (2, 1, 128), dtype);
        let p = paginate(&mut rng, &r, 16, 1);
        let (sq, sk) = r.seqlens();
        check(&format!("paged prefill_x {dtype:?} d128 window (90, 0) softcap 3"), driver, || {
            let (out, lse) = fa::flash_attn_varlen_paged_windowed_with_lse(
                &r.q, &p.k_pages, &p.v_pages, &sq, &sk, &p.table, None, 40, 200, scale(128), Some(90), Some(0), 16, Some(3.0),
            )?;
            Ok((out, Some(lse)))
        });
    }
    launched_must_include(
        "extras",
        &["fwd_prefill_fp16_d64_flat_x", "fwd_prefill_fp16_d64_paged_x", "fwd_prefill_bf16_d64_flat_x", "fwd_prefill_fp16_d128_paged_x", "fwd_prefill_bf16_d128_paged_x"],
    );
}

/// Decode with softcap and ALiBi: the decode `_x` variants.
fn decode_extras(driver: &'static Driver) {
    let mut rng = rng();
    take_launches();
    for dtype in DTYPES {
        let [q, k, v] = batch_inputs(&mut rng, (2, 1, 60, 2, 1, 64), dtype);
        let slopes = Tensor::new(&[0.5f32, 0.125], &candle::Device::Cpu).unwrap();
        check(&format!("decode_x {dtype:?} d64 alibi softcap 4"), driver, || {
            Ok((fa::flash_attn_alibi_windowed_softcap(&q, &k, &v, Some(&slopes), scale(64), None, None, 4.0)?, None))
        });
    }
    launched_must_include("decode_extras", &["fwd_decode_fp16_d64_flat_x", "fwd_decode_bf16_d64_flat_x"]);
}

/// The 64-bit images of variants that have a `_b32` twin (twins.rs): decode, decode with split
/// keys (and the merge), and the masked-d prefill (head dim 56 on the 64 tile, on every arch: 40
/// takes the 48 tile where RDNA builds it); against the CPU backend's output and LSE.
fn b64_variants(driver: &'static Driver) {
    let mut rng = rng();
    take_launches();
    for dtype in DTYPES {
        for (shape, causal) in [((2, 1, 70, 4, 1, 64), false), ((1, 1, 600, 2, 1, 64), false), ((1, 24, 40, 1, 1, 56), true)] {
            let x = batch_inputs(&mut rng, shape, dtype);
            let d = shape.5;
            let what = format!("{dtype:?} {shape:?} causal {causal}, 64-bit image");
            let op = fa::FlashAttn { softmax_scale: scale(d), alibi_slopes: None, window_size_left: None, window_size_right: causal.then_some(0), softcap: None };
            let (cpu_out, cpu_lse) = op.forward_with_lse(&x[0], &x[1], &x[2]).unwrap();
            let (out, lse, splits) = crate::twins::batch_without_twin(driver, &x, scale(d), causal);
            crate::compare::agree(&format!("{what}, {splits} splits"), (&out, Some(&lse)), (&cpu_out, Some(&cpu_lse)));
        }
    }
    launched_must_include("b64_variants", &["fwd_decode_fp16_d64_flat", "fwd_decode_bf16_d64_flat", "fwd_prefill_fp16_d64p_flat", "merge_"]);
    let launched = crate::compare::last_launched();
    assert!(launched.iter().all(|v| !v.contains("_b32")), "a twin ran: {launched:?}");
}

/// Bad side tensors: seqlens that step back, and a block id outside the cache. The call runs
/// (the kernels clamp), and the fault bits it set are what the next check reports.
fn faults(driver: &'static Driver) {
    let mut rng = rng();
    take_launches();
    take_faults(driver).expect("no fault before this test");
    let (h, h_k, d) = (2, 1, 64);
    let q = randn(&mut rng, &[6, h, d], DType::F16);
    let kv = randn(&mut rng, &[90, h_k, d], DType::F16);
    for (cu_k, name) in [([0u32, 30, 20, 90], "seqlens_k"), ([0, 30, 60, 91], "seqlens_k")] {
        let cu_q = u32s(&[0, 2, 4, 6]);
        let cu_k_t = u32s(&cu_k);
        let out = run_on_gpu(driver, || fa::flash_attn_varlen(&q, &kv, &kv, &cu_q, &cu_k_t, 2, 60, scale(d), false)).unwrap();
        assert!(values(&out).iter().all(|x| x.is_finite()), "cu_k {cu_k:?}: non-finite output");
        let err = take_faults(driver).expect_err("the kernels report bad seqlens").to_string();
        assert!(err.contains(name), "cu_k {cu_k:?}: {err}");
        take_faults(driver).expect("taking the faults clears them");
    }
    let r = ragged(&mut rng, &[(2, 40), (1, 30)], (h, h_k, d), DType::F16);
    let p = paginate(&mut rng, &r, 16, 1);
    let mut table: Vec<Vec<u32>> = p.table.to_vec2().unwrap();
    table[1][0] = p.k_pages.dim(0).unwrap() as u32 + 5;
    let table = Tensor::new(table, &candle::Device::Cpu).unwrap();
    let (sq, sk) = r.seqlens();
    run_on_gpu(driver, || {
        fa::flash_attn_varlen_paged_windowed(&r.q, &p.k_pages, &p.v_pages, &sq, &sk, &table, None, 2, 40, scale(d), None, None, 16, None)
    })
    .expect("bad block ids are the kernels' business");
    let err = take_faults(driver).expect_err("the kernels report the bad block id").to_string();
    assert!(err.contains("block_table"), "{err}");
    take_faults(driver).expect("cleared");
    launched_must_include("faults", &["fwd_", "_paged"]);
}
