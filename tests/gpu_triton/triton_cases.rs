//! What only the Triton path serves, on the GPU against the CPU: head dims off CK's tiles,
//! softcap together with ALiBi, pages of any size with `mm_prefix_ranges`, decode calls whose
//! keys are split (and merged), paged decode on every head-dim tile, decode grids of many programs
//! (the batched decode tile where built), prompts the TMA kernel serves (where built) and those it
//! leaves to the others, and the calls it refuses.

use candle::{DType, Device, Tensor};
use fa::triton::Tile;
use flash_attn_rocm as fa;
use rand::rngs::StdRng;
use rand::Rng;

use crate::check::{check_gpu_vs_cpu, check_lse_variant, check_refused, gpu_and_rng, out_only, with_lse, DTYPES};
use crate::common::batch::{batch_expected, batch_inputs, BatchCase};
use crate::common::calls::{self, Features, CAUSAL, NONE};
use crate::common::expected::{expected, LseLayout};
use crate::common::ragged::{paginate, prefix_ranges, ragged};
use crate::common::{randn, RefOpts};
use crate::varlen::paged_args;

pub fn odd_head_dims_and_softcap_with_alibi_match_cpu() {
    let Some((cpu, mut rng)) = gpu_and_rng("odd_head_dims_and_softcap_with_alibi_match_cpu") else {
        return;
    };
    for dtype in DTYPES {
        for (d, window, alibi, softcap) in [
            (16, CAUSAL, false, None),
            (40, NONE, false, None),
            (96, (Some(20), Some(3)), true, None),
            (160, CAUSAL, true, Some(6.0)),
            (256, NONE, false, Some(3.0)),
            (32, (None, Some(5)), true, Some(2.5)),
        ] {
            let c = BatchCase { b: 2, s_q: 97, s_k: 150, h: 6, h_k: 2, d, dtype, window, alibi, softcap, transposed: d % 32 == 0 };
            let x = batch_inputs(&c, &mut rng);
            let exp = batch_expected(&c, &x);
            let mut args = vec![&x.q, &x.k, &x.v];
            args.extend(x.slopes.as_ref());
            let f = x.features(&c);
            check_gpu_vs_cpu(&format!("{c:?}"), &cpu, &args, &exp, |a| {
                out_only(calls::batch(&a[0], &a[1], &a[2], f.with_alibi(a.get(3))))
            });
            check_lse_variant(&format!("{c:?} forward_with_lse"), &cpu, &args, &exp, false, |a| {
                with_lse(calls::batch_op(f.with_alibi(a.get(3))).forward_with_lse(&a[0], &a[1], &a[2]))
            });
        }
    }
}

pub fn any_page_size_with_prefix_ranges_matches_cpu() {
    let Some((cpu, mut rng)) = gpu_and_rng("any_page_size_with_prefix_ranges_matches_cpu") else {
        return;
    };
    let lens = [(5, 300), (0, 16), (40, 40), (1, 129), (17, 0), (33, 70)];
    for (n, (page, heads)) in [(1, (4, 2, 64)), (7, (8, 1, 96)), (16, (4, 4, 40)), (33, (6, 2, 128)), (100, (6, 3, 256))]
        .into_iter()
        .enumerate()
    {
        let f = Features { scale: 0.6 / (heads.2 as f32).sqrt(), window: CAUSAL, alibi: None, softcap: (n == 3).then_some(4.0) };
        check_paged_with_ranges(&cpu, &mut rng, &lens, (page, heads, DTYPES[n % 2]), (40, 300), f, n % 2 == 0);
    }
}

/// Paged sequences of `lens` (q, k) against the CPU, with two `mm_prefix_ranges` per sequence
/// (some holding query positions, one empty) when `with_prefix`.
fn check_paged_with_ranges(
    cpu: &Device,
    rng: &mut rand::rngs::StdRng,
    lens: &[(usize, usize)],
    (page, heads, dtype): (usize, (usize, usize, usize), DType),
    max: (usize, usize),
    f: Features,
    with_prefix: bool,
) {
    let x = ragged(rng, lens, heads, dtype);
    let p = paginate(rng, &x, page, 2);
    let ranges = prefix_ranges(rng, lens);
    let opts: Vec<RefOpts> = ranges
        .iter()
        .map(|r| RefOpts { mm_prefix: if with_prefix { r.clone() } else { vec![] }, ..f.ref_opts(max.1) })
        .collect();
    let exp = expected(&x.seqs(), &opts, heads, dtype, LseLayout::VarLen);
    // Half the time each sequence's pairs lie apart (narrowed out of triples), which the CPU
    // takes and the GPU path copies.
    let width = if rng.gen_bool(0.5) { 3 } else { 2 };
    let flat: Vec<i32> = ranges.iter().flatten().flat_map(|&(a, b)| [a as i32, b as i32, -7].into_iter().take(width)).collect();
    let ranges_t = Tensor::from_vec(flat, (lens.len(), 2, width), &Device::Cpu).unwrap().narrow(2, 0, 2).unwrap();
    let (sq, sk) = x.seqlens();
    let mut args = vec![&x.q, &p.k_pages, &p.v_pages, &sq, &sk, &p.table];
    args.extend(with_prefix.then_some(&ranges_t));
    let what = format!("paged {dtype:?} page {page} heads {heads:?} prefix {with_prefix} ranges strides {:?}", ranges_t.stride());
    check_gpu_vs_cpu(&what, cpu, &args, &exp, |a| {
        let (kv, lens) = paged_args(a, page, max);
        out_only(calls::paged(&a[0], &kv, a.get(6), &lens, f))
    });
    check_lse_variant(&format!("{what} with_lse"), cpu, &args, &exp, true, |a| {
        let (kv, lens) = paged_args(a, page, max);
        with_lse(calls::paged_with_lse(&a[0], &kv, a.get(6), &lens, f))
    });
}

pub fn split_decode_matches_cpu() {
    let Some((cpu, mut rng)) = gpu_and_rng("split_decode_matches_cpu") else {
        return;
    };
    // GQA 32/8 decode over long caches: few programs, so the plan splits the keys; with a
    // window, its keys (the splits count from the block's first key tile).
    let cases = [
        (DType::F16, 1, 5000, NONE),
        (DType::BF16, 3, 9001, CAUSAL),
        (DType::F16, 1, 3000, (Some(700), None)),
        (DType::BF16, 4, 9001, (Some(1000), Some(0))),
        (DType::F16, 2, 7000, (Some(260), Some(5))),
    ];
    for (dtype, s_q, s_k, window) in cases {
        let c = BatchCase { b: 2, s_q, s_k, h: 32, h_k: 8, d: 128, dtype, window, alibi: false, softcap: None, transposed: false };
        let x = batch_inputs(&c, &mut rng);
        let exp = batch_expected(&c, &x);
        let f = x.features(&c);
        check_lse_variant(&format!("{c:?}"), &cpu, &[&x.q, &x.k, &x.v], &exp, false, |a| {
            with_lse(calls::batch_op(f).forward_with_lse(&a[0], &a[1], &a[2]))
        });
        // The same cache paged, one query row per sequence.
        let lens = [(1, s_k), (1, s_k / 2 + 1)];
        let r = ragged(&mut rng, &lens, (32, 8, 128), dtype);
        let p = paginate(&mut rng, &r, 48, 1);
        let max = (1, s_k);
        let fp = Features { scale: 0.088, window, alibi: None, softcap: None };
        let exp = expected(&r.seqs(), &vec![fp.ref_opts(max.1); 2], (32, 8, 128), dtype, LseLayout::VarLen);
        let (sq, sk) = r.seqlens();
        check_lse_variant(&format!("paged decode {dtype:?} {s_k}"), &cpu, &[&r.q, &p.k_pages, &p.v_pages, &sq, &sk, &p.table], &exp, true, |a| {
            let (kv, lens) = paged_args(a, 48, max);
            with_lse(calls::paged_with_lse(&a[0], &kv, None, &lens, fp))
        });
    }
}

pub fn decode_with_extras_matches_cpu() {
    let Some((cpu, mut rng)) = gpu_and_rng("decode_with_extras_matches_cpu") else {
        return;
    };
    // One query row per sequence with softcap and ALiBi, split and merged: the decode tile's
    // extras variants where the build has them, the prefill_x tile where not; Gemma 2's d=256
    // softcap with a sliding window.
    for (dtype, d, s_k, window, alibi, softcap) in [
        (DType::BF16, 128, 6000, NONE, true, Some(30.0)),
        (DType::F16, 256, 5000, (Some(1024), Some(0)), false, Some(50.0)),
        (DType::F16, 64, 3000, CAUSAL, true, None),
        (DType::F16, 80, 3000, CAUSAL, false, Some(20.0)),
    ] {
        let c = BatchCase { b: 2, s_q: 1, s_k, h: 32, h_k: 8, d, dtype, window, alibi, softcap, transposed: false };
        check_batch_with_lse(&cpu, &mut rng, &c);
    }
    // Paged decode with prefix ranges and softcap (4 rows per k/v head: the decode tile).
    let f = Features { scale: 0.09, window: CAUSAL, alibi: None, softcap: Some(5.0) };
    let lens = [(1, 3000), (1, 1), (1, 700), (1, 0)];
    check_paged_with_ranges(&cpu, &mut rng, &lens, (16, (8, 2, 128), DType::BF16), (1, 3000), f, true);
}

pub fn paged_decode_of_every_head_dim_tile_matches_cpu() {
    let Some((cpu, mut rng)) = gpu_and_rng("paged_decode_of_every_head_dim_tile_matches_cpu") else {
        return;
    };
    // One query row per sequence, GQA 8/2 (4 rows: the decode tile), so each head-dim tile's
    // paged decode variant runs, with its own keys per tile and pipeline depth: caches from
    // empty to several thousand keys (split and merged), pages smaller and larger than a tile.
    let lens = [(1, 2500), (1, 0), (1, 33), (1, 700)];
    for (n, (d, page)) in [(32, 16), (64, 7), (96, 256), (128, 1), (200, 33), (256, 16)].into_iter().enumerate() {
        let dtype = DTYPES[n % 2];
        let window = if n % 3 == 2 { (Some(300), Some(0)) } else { NONE };
        let x = ragged(&mut rng, &lens, (8, 2, d), dtype);
        let p = paginate(&mut rng, &x, page, 3);
        let max = (1, 2500);
        // Softcap on every other tile: the paged decode extras variants.
        let f = Features { scale: 0.5 / (d as f32).sqrt(), window, alibi: None, softcap: (n % 2 == 1).then_some(5.0) };
        let exp = expected(&x.seqs(), &vec![f.ref_opts(max.1); lens.len()], (8, 2, d), dtype, LseLayout::VarLen);
        let (sq, sk) = x.seqlens();
        check_lse_variant(&format!("paged decode d {d} page {page} {dtype:?}"), &cpu, &[&x.q, &p.k_pages, &p.v_pages, &sq, &sk, &p.table], &exp, true, |a| {
            let (kv, lens) = paged_args(a, page, max);
            with_lse(calls::paged_with_lse(&a[0], &kv, None, &lens, f))
        });
    }
}

/// `c`'s batch call (with its ALiBi slopes where it has them) through
/// `FlashAttn::forward_with_lse` on the GPU path, output and LSE against the CPU's.
fn check_batch_with_lse(cpu: &Device, rng: &mut StdRng, c: &BatchCase) {
    let x = batch_inputs(c, rng);
    let exp = batch_expected(c, &x);
    let mut args = vec![&x.q, &x.k, &x.v];
    args.extend(x.slopes.as_ref());
    let f = x.features(c);
    check_lse_variant(&format!("{c:?}"), cpu, &args, &exp, false, |a| {
        with_lse(calls::batch_op(f.with_alibi(a.get(3))).forward_with_lse(&a[0], &a[1], &a[2]))
    });
}

/// Issue 57: head dims 264-512 (candle-flash-attn serves up to 512) were refused on GPUs. They
/// run on the 512 tile: prefill with every feature, decode split over a long cache and merged,
/// paged decode with pages smaller and larger than a key tile.
pub fn head_dims_above_256_match_cpu() {
    let Some((cpu, mut rng)) = gpu_and_rng("head_dims_above_256_match_cpu") else {
        return;
    };
    for (n, dtype) in DTYPES.into_iter().enumerate() {
        for (d, s_q, s_k, window, alibi, softcap) in [
            (264, 97, 150, CAUSAL, false, None),
            (384, 70, 300, (Some(40), Some(3)), true, Some(6.0)),
            (512, 130, 200, NONE, false, None),
            (512, 1, 4000, CAUSAL, false, None),
            (448, 1, 2100, NONE, true, Some(5.0)),
        ] {
            let c = BatchCase { b: 2, s_q, s_k, h: 4, h_k: 2, d, dtype, window, alibi, softcap, transposed: n == 1 };
            check_batch_with_lse(&cpu, &mut rng, &c);
        }
        let lens = [(1, 1500), (1, 0), (3, 40), (1, 300)];
        for (d, page) in [(512, 16), (320, 64)] {
            let x = ragged(&mut rng, &lens, (4, 2, d), dtype);
            let p = paginate(&mut rng, &x, page, 3);
            let max = (3, 1500);
            let f = Features { scale: 0.5 / (d as f32).sqrt(), window: CAUSAL, alibi: None, softcap: None };
            let exp = expected(&x.seqs(), &vec![f.ref_opts(max.1); lens.len()], (4, 2, d), dtype, LseLayout::VarLen);
            let (sq, sk) = x.seqlens();
            check_lse_variant(&format!("paged d {d} page {page} {dtype:?}"), &cpu, &[&x.q, &p.k_pages, &p.v_pages, &sq, &sk, &p.table], &exp, true, |a| {
                let (kv, lens) = paged_args(a, page, max);
                with_lse(calls::paged_with_lse(&a[0], &kv, None, &lens, f))
            });
        }
    }
}

pub fn calls_the_triton_path_cannot_serve_are_errors() {
    let Some((_, mut rng)) = gpu_and_rng("calls_the_triton_path_cannot_serve_are_errors") else {
        return;
    };
    let plain = |a: &[Tensor]| out_only(fa::flash_attn(&a[0], &a[1], &a[2], 0.125, true));
    let f32_qkv = [0; 3].map(|_| randn(&mut rng, &[1, 16, 2, 64], DType::F32));
    check_refused("f32", &f32_qkv.each_ref(), "f16 or bf16", plain);
    // A view one element into its storage: rows are not 16-byte aligned.
    let flat = randn(&mut rng, &[1 + 16 * 2 * 64], DType::BF16);
    let q = flat.narrow(0, 1, 16 * 2 * 64).unwrap().reshape((1, 16, 2, 64)).unwrap();
    check_refused("misaligned q", &[&q, &q, &q], "16-byte", plain);
}

/// Issue 35: a block table whose last dim is strided (here a transposed view of a column-major
/// table) ran on the CPU and through the offload, but Candle CUDA tensors refused it. Every way
/// now takes it (the GPU path copies such a table on its device) and matches the CPU. Issue 56:
/// an i32 table so strided failed on Candle CUDA with "named symbol not found" (its device has
/// no strided i32 copy); u32 and i32 tables, transposed or narrowed out of a wider table, all run.
pub fn strided_block_table_matches_cpu() {
    let Some((cpu, mut rng)) = gpu_and_rng("strided_block_table_matches_cpu") else {
        return;
    };
    let lens: Vec<(usize, usize)> = (0..3).map(|_| (rng.gen_range(1..6), rng.gen_range(20..150))).collect();
    let (page, heads, dtype) = (16, (4, 2, 64), DType::F16);
    let max = (lens.iter().map(|l| l.0).max().unwrap(), lens.iter().map(|l| l.1).max().unwrap());
    let x = ragged(&mut rng, &lens, heads, dtype);
    let p = paginate(&mut rng, &x, page, 2);
    let f = Features { scale: 0.125, window: CAUSAL, alibi: None, softcap: None };
    let exp = expected(&x.seqs(), &vec![f.ref_opts(max.1); lens.len()], heads, dtype, LseLayout::VarLen);
    let (sq, sk) = x.seqlens();
    for table_dtype in [DType::U32, DType::I32] {
        let table = p.table.to_dtype(table_dtype).unwrap();
        let column_major = table.t().unwrap().contiguous().unwrap();
        // The table as every other column of the left half of a table four times as wide:
        // (b, 2 * cols, 2) in storage, viewed without a copy (stride 2 in the last dim).
        let cols = table.dim(1).unwrap();
        let spread = Tensor::stack(&[&table, &table.zeros_like().unwrap()], 2).unwrap();
        let wide = Tensor::cat(&[&spread, &spread], 1).unwrap();
        let views: [(&str, &Tensor, Box<dyn Fn(&Tensor) -> candle::Result<Tensor>>); 2] = [
            ("transposed column-major", &column_major, Box::new(|t: &Tensor| t.t())),
            ("narrowed out of a wider table", &wide, Box::new(move |t: &Tensor| t.narrow(1, 0, cols)?.narrow(2, 0, 1)?.squeeze(2))),
        ];
        for (how, stored, view) in views {
            let args = [&x.q, &p.k_pages, &p.v_pages, &sq, &sk, stored];
            let what = format!("paged, {table_dtype:?} block table, {how}");
            check_lse_variant(&what, &cpu, &args, &exp, true, |a| {
                let mut strided = a.to_vec();
                strided[5] = view(&a[5])?;
                assert!(strided[5].stride()[1] != 1, "the table's last dim is strided");
                let (kv, lens) = paged_args(&strided, page, max);
                with_lse(calls::paged_with_lse(&strided[0], &kv, None, &lens, f))
            });
        }
    }
}

/// Short causal and windowed prompts: on targets with a short prefill tile (sm_90) these calls
/// run it (every key tile in one loop, the mask applied per tile), elsewhere the prefill tile;
/// every head-dim tile, exact and padded head dims, query and key lengths that are not whole
/// tiles, batch and varlen.
pub fn short_masked_prompts_match_cpu() {
    let Some((cpu, mut rng)) = gpu_and_rng("short_masked_prompts_match_cpu") else {
        return;
    };
    let driver = crate::check::driver().unwrap();
    for (n, (d, window)) in [(32, CAUSAL), (64, CAUSAL), (80, (Some(40), Some(0))), (128, CAUSAL), (256, (Some(100), Some(30)))]
        .into_iter()
        .enumerate()
    {
        let dtype = DTYPES[n % 2];
        let c = BatchCase { b: 3, s_q: 130, s_k: 200, h: 4, h_k: 4, d, dtype, window, alibi: false, softcap: None, transposed: false };
        let x = batch_inputs(&c, &mut rng);
        let exp = batch_expected(&c, &x);
        let f = x.features(&c);
        let chosen = fa::explain(|| fa::glue::offload::run_on_gpu(driver, || calls::batch(&x.q, &x.k, &x.v, f))).unwrap();
        let has_short = fa::triton::KERNELS.iter().any(|k| k.target == chosen.target && k.tile == Tile::PrefillShort);
        // Causal d = 64 and 128 prompts take the TMA kernel where built, if their grid fills the
        // device (not at this batch on an H100 or H200).
        let units = fa::gpu::current_device(driver).unwrap().1.units;
        let tile = match (has_tma(&chosen.target, d, Tile::Prefill), has_short) {
            (true, _) if window == CAUSAL && tma_programs(&c, 64) >= units => "fwd_tma_",
            (_, true) => "fwd_prefill_short_",
            _ => "fwd_prefill_",
        };
        assert!(chosen.variant.starts_with(tile), "{c:?} ran {} on {}", chosen.variant, chosen.target);
        check_lse_variant(&format!("{c:?}"), &cpu, &[&x.q, &x.k, &x.v], &exp, false, |a| {
            with_lse(calls::batch_op(f).forward_with_lse(&a[0], &a[1], &a[2]))
        });
    }
    // Varlen: prompts of mixed lengths, packed, causal (GQA 6/2: up to 3 x 150 rows).
    let lens = [(150, 150), (1, 1), (77, 120), (0, 9), (130, 130)];
    let r = ragged(&mut rng, &lens, (6, 2, 64), DType::BF16);
    let fv = Features { scale: 0.125, window: CAUSAL, alibi: None, softcap: None };
    let exp = expected(&r.seqs(), &vec![fv.ref_opts(150); lens.len()], (6, 2, 64), DType::BF16, LseLayout::VarLen);
    let (sq, sk) = r.seqlens();
    check_lse_variant("varlen short causal", &cpu, &[&r.q, &r.k, &r.v, &sq, &sk], &exp, false, |a| {
        let s = calls::Seqlens { q: &a[3], k: &a[4], max_q: 150, max_k: 150 };
        with_lse(calls::varlen_with_lse(&a[0], &a[1], &a[2], &s, fv))
    });
}

/// Decode grids of at least `BATCHED_DECODE_WAVES` programs per compute unit: on targets with a
/// batched decode tile (sm_90 at head-dim tiles 64 and 128) they run it, elsewhere the decode
/// tile (of the same head-dim tile: d = 32 and 256 keep it on sm_90); exact and
/// padded head dims, key lengths that are not whole tiles, GQA and MHA, causal and not.
pub fn batched_decode_matches_cpu() {
    let Some((cpu, mut rng)) = gpu_and_rng("batched_decode_matches_cpu") else {
        return;
    };
    let driver = crate::check::driver().unwrap();
    let units = fa::gpu::current_device(driver).unwrap().1.units;
    for (n, (d, h, h_k, window)) in [(128, 32, 8, NONE), (64, 16, 16, CAUSAL), (96, 8, 2, NONE), (32, 8, 4, CAUSAL), (256, 8, 8, NONE)]
        .into_iter()
        .enumerate()
    {
        let b = (fa::triton::BATCHED_DECODE_WAVES * units).div_ceil(h_k) + rng.gen_range(0..8);
        let s_k = rng.gen_range(130..400);
        let dtype = DTYPES[n % 2];
        let c = BatchCase { b, s_q: 1, s_k, h, h_k, d, dtype, window, alibi: false, softcap: None, transposed: false };
        let x = batch_inputs(&c, &mut rng);
        let exp = batch_expected(&c, &x);
        let f = x.features(&c);
        let chosen = fa::explain(|| fa::glue::offload::run_on_gpu(driver, || calls::batch(&x.q, &x.k, &x.v, f))).unwrap();
        let block_d = (d as u32).next_power_of_two().max(32);
        let has_batched = fa::triton::KERNELS
            .iter()
            .any(|k| k.target == chosen.target && k.tile == fa::triton::Tile::DecodeBatch && k.block_d == block_d);
        let batched = chosen.variant.starts_with("fwd_decode_batch_");
        assert!(chosen.variant.starts_with("fwd_decode_") && batched == has_batched, "{c:?} ran {} on {}", chosen.variant, chosen.target);
        assert_eq!(chosen.splits, 1, "{c:?}");
        check_lse_variant(&format!("{c:?}"), &cpu, &[&x.q, &x.k, &x.v], &exp, false, |a| {
            with_lse(calls::batch_op(f).forward_with_lse(&a[0], &a[1], &a[2]))
        });
    }
}

/// The TMA kernel's programs for `c` with query blocks of `rows` rows (64; 128 for d = 256's
/// prefill class and the warp-specialized ones, 192 for d = 64's).
fn tma_programs(c: &BatchCase, rows: usize) -> usize {
    c.s_q.div_ceil(rows) * c.b * c.h
}

/// Whether this build has the TMA kernel of class `tile` for `target` at head dim `d`.
fn has_tma(target: &str, d: usize, tile: Tile) -> bool {
    fa::triton::KERNELS
        .iter()
        .any(|k| k.target == target && k.family == fa::triton::Family::FwdTma && k.tile == tile && k.block_d as usize == d)
}

/// Runs each of `cases` (b, s_q, s_k, h, h_k, d, window, transposed, whether the TMA kernel
/// serves it) through the batch function on the GPU, checks that the kernel `explain` names is
/// the TMA class the rule gives (where built), and matches the CPU, output and LSE. k and v are
/// narrowed from caches whose unused rows hold NaN; batches are sized so that the grid fills the
/// device.
#[allow(clippy::type_complexity)]
fn check_tma_cases(
    cpu: &Device,
    rng: &mut rand::rngs::StdRng,
    driver: &'static fa::gpu::Driver,
    units: usize,
    cases: &[(usize, usize, usize, usize, usize, usize, (Option<usize>, Option<usize>), bool, bool)],
) {
    for (n, (b, s_q, s_k, h, h_k, d, window, transposed, serves)) in cases.iter().copied().enumerate() {
        let dtype = DTYPES[n % 2];
        let mut c = BatchCase { b, s_q, s_k, h, h_k, d, dtype, window, alibi: false, softcap: None, transposed };
        // Sized for the largest query block, so that the grid fills the device whichever runs.
        c.b = b.max(units.div_ceil(tma_programs(&c, 192) / b));
        let b = c.b;
        let mut x = batch_inputs(&c, rng);
        let exp = batch_expected(&c, &x);
        if !transposed {
            // The same values, read from the front of caches whose other rows are NaN.
            let nan_tail = |t: &Tensor| {
                let tail = Tensor::full(f32::NAN, (b, 37, h_k, d), &Device::Cpu).unwrap().to_dtype(dtype).unwrap();
                Tensor::cat(&[t, &tail], 1).unwrap().narrow(1, 0, s_k).unwrap()
            };
            x.k = nan_tail(&x.k);
            x.v = nan_tail(&x.v);
        }
        let f = x.features(&c);
        let chosen = fa::explain(|| fa::glue::offload::run_on_gpu(driver, || calls::batch(&x.q, &x.k, &x.v, f))).unwrap();
        let tma = chosen.variant.starts_with("fwd_tma_");
        assert_eq!(tma, serves && has_tma(&chosen.target, d, Tile::Prefill), "{c:?} ran {} on {}", chosen.variant, chosen.target);
        // Every right window here is within the keys: a diagonal.
        let (short, ws) = crate::common::tma_rule::short_and_ws(d, window.1.is_some(), s_k);
        let walks = crate::common::tma_rule::walks(d, window.1.is_some(), s_k) && has_tma(&chosen.target, d, Tile::PrefillWalk);
        assert_eq!(chosen.variant.starts_with("fwd_tma_walk_"), tma && walks, "{c:?} ran {}", chosen.variant);
        let (short, ws) = (short && !walks, ws && !walks);
        let short_built = has_tma(&chosen.target, d, Tile::PrefillShort);
        assert_eq!(chosen.variant.starts_with("fwd_tma_short_"), tma && short && short_built, "{c:?} ran {}", chosen.variant);
        let ws_built = has_tma(&chosen.target, d, Tile::PrefillWs);
        assert_eq!(chosen.variant.starts_with("fwd_tma_ws_"), tma && ws && ws_built, "{c:?} ran {}", chosen.variant);
        check_lse_variant(&format!("{c:?}"), &cpu, &[&x.q, &x.k, &x.v], &exp, false, |a| {
            with_lse(calls::batch_op(f).forward_with_lse(&a[0], &a[1], &a[2]))
        });
    }
}

/// The split head dims on the TMA kernel (sm_90: `attn_fwd_tma_split`, two descriptors per
/// tensor, the tail's in 16- or 32-column boxes with the 32- or 64-byte swizzle), on its prefill
/// class and, for long key ranges at 96 and 160 (`tma::ws_keys`), its warp-specialized one
/// (`attn_fwd_tma_ws_split`, 128-row blocks of two 64-row consumers): ragged key tiles and
/// query blocks (a block's second part past the queries), rows that see no key, a right window,
/// many key tiles, GQA, MQA and MHA, f16 and bf16 (alternating, so each head dim's ws cases have
/// both), and varlen batches of mixed lengths; heads strided across rows go to the other kernels.
/// Each runs the class the rule gives and matches the CPU, output and LSE.
pub fn tma_split_head_dims_match_cpu() {
    let Some((cpu, mut rng)) = gpu_and_rng("tma_split_head_dims_match_cpu") else {
        return;
    };
    let driver = crate::check::driver().unwrap();
    let units = fa::gpu::current_device(driver).unwrap().1.units;
    let cases = [
        (2, 130, 130, 4, 2, 96, CAUSAL, false, true),
        (2, 300, 517, 4, 2, 80, NONE, false, true),
        (2, 300, 100, 4, 1, 80, CAUSAL, false, true),
        (1, 200, 700, 4, 2, 96, (None, Some(5)), false, true),
        (2, 150, 300, 4, 2, 160, NONE, false, true),
        (1, 130, 2100, 4, 2, 160, CAUSAL, false, true),
        (1, 300, 4200, 4, 2, 80, NONE, false, true),
        (2, 100, 100, 4, 2, 80, NONE, true, false),
        // The warp-specialized class (dtypes alternate, f16 first): at its first key count
        // without a diagonal and with one, ragged key tiles (128 keys at 96, 64 at 160), a third
        // block with 44 of 128 rows (its second consumer's part past the queries).
        (1, 300, 4096, 4, 2, 96, NONE, false, true),
        (1, 300, 4200, 4, 2, 96, NONE, false, true),
        (1, 300, 1024, 4, 2, 160, NONE, false, true),
        (1, 300, 1100, 4, 1, 160, NONE, false, true),
        (1, 300, 1024, 4, 2, 160, CAUSAL, false, true),
        // Causal with more queries than keys: the first 150 rows see no key.
        (1, 2200, 2050, 4, 2, 160, CAUSAL, false, true),
        (1, 500, 3000, 4, 4, 160, CAUSAL, false, true),
        (1, 300, 2300, 4, 2, 160, NONE, false, true),
        (1, 300, 2100, 4, 2, 160, (None, Some(5)), false, true),
        (1, 300, 2100, 4, 2, 160, (None, Some(40)), false, true),
        // One key short of the class, and 96 with a diagonal: the prefill class.
        (1, 1000, 4095, 4, 2, 96, NONE, false, true),
        (1, 300, 1023, 4, 2, 160, CAUSAL, false, true),
        (1, 300, 4200, 4, 2, 96, CAUSAL, false, true),
    ];
    // A build for sm_90 has their TMA kernels: without them every case would pass on attn_fwd.
    if fa::triton::KERNELS.iter().any(|k| k.target == "sm_90") {
        for (d, tiles) in [(80, &[Tile::Prefill][..]), (96, &[Tile::Prefill, Tile::PrefillWs]), (160, &[Tile::Prefill, Tile::PrefillWs])] {
            for &tile in tiles {
                assert!(has_tma("sm_90", d, tile), "no sm_90 TMA kernel of class {tile:?} at d = {d}");
            }
        }
    }
    check_tma_cases(&cpu, &mut rng, driver, units, &cases);
    // Varlen batches (7 sequences, 8 heads, 2 KV heads: 168 programs of 128 rows, enough for an
    // H100 or H200) whose longest key range takes the warp-specialized class: empty sequences,
    // one query, rows that see no key (causal, fewer keys than queries), ragged lengths.
    let long = [(300, 4100), (1, 1), (77, 1050), (0, 9), (130, 700), (64, 0), (200, 4200)];
    let non_causal = [(300, 1100), (1, 1), (77, 1050), (0, 9), (130, 700), (64, 0), (200, 1200)];
    let causal = [(300, 2100), (1, 1), (77, 2050), (0, 9), (130, 700), (64, 0), (300, 129)];
    let heads = (8, 2);
    for (n, (d, window, lens)) in [(96, NONE, long), (160, CAUSAL, causal), (160, NONE, non_causal)]
        .into_iter()
        .enumerate()
    {
        let dtype = DTYPES[n % 2];
        let (max_q, max_k) = (lens.iter().map(|l| l.0).max().unwrap(), lens.iter().map(|l| l.1).max().unwrap());
        let r = ragged(&mut rng, &lens, (heads.0, heads.1, d), dtype);
        let fv = Features { scale: 0.3 / (d as f32).sqrt(), window, alibi: None, softcap: None };
        let exp = expected(&r.seqs(), &vec![fv.ref_opts(max_k); lens.len()], (heads.0, heads.1, d), dtype, LseLayout::VarLen);
        let (sq, sk) = r.seqlens();
        let s = calls::Seqlens { q: &sq, k: &sk, max_q, max_k };
        let chosen = fa::explain(|| fa::glue::offload::run_on_gpu(driver, || calls::varlen(&r.q, &r.k, &r.v, &s, fv))).unwrap();
        let (_, ws) = crate::common::tma_rule::short_and_ws(d, window.1.is_some(), max_k);
        assert!(ws, "d = {d}: {max_k} keys");
        let fills = max_q.div_ceil(128) * lens.len() * heads.0 >= units;
        let built = has_tma(&chosen.target, d, Tile::PrefillWs);
        assert_eq!(chosen.variant.starts_with("fwd_tma_ws_"), built && fills, "varlen d = {d} ran {}", chosen.variant);
        check_lse_variant(&format!("varlen d = {d} {window:?} up to {max_k} keys"), &cpu, &[&r.q, &r.k, &r.v, &sq, &sk], &exp, false, |a| {
            let s = calls::Seqlens { q: &a[3], k: &a[4], max_q, max_k };
            with_lse(calls::varlen_with_lse(&a[0], &a[1], &a[2], &s, fv))
        });
    }
}

/// Prompts the TMA kernel serves where built (sm_90, d = 64, 128 and 256, its split head dims in
/// [`tma_split_head_dims_match_cpu`]; its short class at 128
/// and 256, its warp-specialized class at all three, d = 256's 128-row tile; blocks whose second
/// half is past the queries): GQA and MHA, causal with fewer keys than queries (rows that
/// see no key), a right window, lengths off its tiles,
/// k and v narrowed from caches whose unused rows hold NaN (rows its tiles read past a sequence);
/// and prompts it leaves to the other kernels (left window, heads strided across rows). Batches are large enough for a grid that fills the device, which
/// the TMA kernel needs. Each runs the kernel `explain` names and matches the CPU, output and LSE;
/// varlen batches of mixed lengths, empty ones included, too.
pub fn tma_prompts_match_cpu() {
    let Some((cpu, mut rng)) = gpu_and_rng("tma_prompts_match_cpu") else {
        return;
    };
    let driver = crate::check::driver().unwrap();
    let units = fa::gpu::current_device(driver).unwrap().1.units;
    // (b, s_q, s_k, h, h_k, d, window, transposed, whether the TMA kernel serves it)
    let cases = [
        (3, 130, 200, 8, 2, 128, CAUSAL, false, true),
        (2, 64, 517, 4, 4, 64, NONE, false, true),
        (2, 300, 100, 4, 1, 64, CAUSAL, false, true),
        (1, 200, 200, 4, 2, 128, (None, Some(5)), false, true),
        (2, 1000, 1000, 2, 1, 128, CAUSAL, false, true),
        (2, 100, 100, 4, 2, 128, NONE, true, false),
        (2, 100, 2100, 4, 2, 64, NONE, false, true),
        // d = 64's three-consumer blocks (192 rows): a ragged third block whose last part is past
        // the queries.
        (1, 500, 2300, 4, 2, 64, NONE, false, true),
        (1, 130, 4200, 4, 2, 64, CAUSAL, false, true),
        (2, 200, 300, 4, 2, 256, CAUSAL, false, true),
        (2, 150, 300, 4, 2, 256, NONE, false, true),
        (1, 130, 2100, 4, 2, 256, CAUSAL, false, true),
        (2, 300, 517, 4, 2, 128, NONE, false, true),
        // The walking class (d = 128, no diagonal, 256 to 767 keys): one program per SM, each
        // walking two or three blocks, with a ragged last key tile; more queries than keys.
        (6, 700, 700, 8, 2, 128, NONE, false, true),
        (4, 900, 300, 8, 4, 128, NONE, false, true),
        // With a diagonal (257 to 2048 keys): rounds in alternate directions, parts that skip the
        // key tiles their rows do not see, rows that see no key, a right window.
        (2, 900, 300, 8, 2, 128, CAUSAL, false, true),
        (3, 500, 1500, 4, 2, 128, (None, Some(40)), false, true),
        // The warp-specialized class with a diagonal past 2048 keys (d = 128) and 4096 (d = 64:
        // the first block's first part sees 31 of its 32 key tiles).
        (1, 300, 4200, 4, 2, 64, CAUSAL, false, true),
        (1, 2200, 2200, 4, 1, 128, CAUSAL, false, true),
        (1, 130, 2100, 4, 2, 128, CAUSAL, false, true),
        (1, 300, 2100, 4, 2, 128, (None, Some(5)), false, true),
        (2, 150, 600, 2, 2, 256, NONE, false, true),
        (2, 150, 700, 2, 2, 256, CAUSAL, false, true),
        (2, 130, 130, 4, 2, 128, (Some(20), Some(0)), false, false),
    ];
    check_tma_cases(&cpu, &mut rng, driver, units, &cases);
    // 7 sequences of up to 200 queries, 6 heads: 168 programs, enough for an H100 or H200; then
    // up to 600 queries and 700 keys (the walking class at d = 128, with and without a diagonal:
    // 210 blocks for one program per SM).
    let short_lens = [(150, 150), (1, 1), (77, 120), (0, 9), (130, 130), (64, 0), (200, 129)];
    let long_lens = [(600, 600), (1, 1), (77, 520), (0, 9), (130, 700), (64, 0), (300, 129)];
    for (n, (d, window, lens, block_m)) in [(128, CAUSAL, short_lens, 64), (64, NONE, short_lens, 64), (128, NONE, long_lens, 128), (128, CAUSAL, long_lens, 128)]
        .into_iter()
        .enumerate()
    {
        let (max_q, max_k) = (lens.iter().map(|l| l.0).max().unwrap(), lens.iter().map(|l| l.1).max().unwrap());
        let r = ragged(&mut rng, &lens, (6, 2, d), DTYPES[n % 2]);
        let fv = Features { scale: 0.3 / (d as f32).sqrt(), window, alibi: None, softcap: None };
        let exp = expected(&r.seqs(), &vec![fv.ref_opts(max_k); lens.len()], (6, 2, d), DTYPES[n % 2], LseLayout::VarLen);
        let (sq, sk) = r.seqlens();
        let s = calls::Seqlens { q: &sq, k: &sk, max_q, max_k };
        let chosen = fa::explain(|| fa::glue::offload::run_on_gpu(driver, || calls::varlen(&r.q, &r.k, &r.v, &s, fv))).unwrap();
        let class = if block_m == 128 { Tile::PrefillWalk } else { Tile::Prefill };
        let fills = max_q.div_ceil(block_m) * lens.len() * 6 >= units;
        assert_eq!(chosen.variant.starts_with("fwd_tma_"), has_tma(&chosen.target, d, class) && fills, "varlen ran {}", chosen.variant);
        assert_eq!(chosen.variant.starts_with("fwd_tma_walk_"), class == Tile::PrefillWalk && has_tma(&chosen.target, d, class));
        check_lse_variant(&format!("varlen d = {d} {window:?} up to {max_k} keys"), &cpu, &[&r.q, &r.k, &r.v, &sq, &sk], &exp, false, |a| {
            let s = calls::Seqlens { q: &a[3], k: &a[4], max_q, max_k };
            with_lse(calls::varlen_with_lse(&a[0], &a[1], &a[2], &s, fv))
        });
    }
}
