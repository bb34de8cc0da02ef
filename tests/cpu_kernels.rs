//! Every instruction set of the CPU kernel (AMX for bf16 prefill, AVX-512, AVX2, portable;
//! chosen through `FLASH_ATTN_ROCM_CPU_ISA`) against the f64 reference, on the shapes that
//! reach its special paths: decode split over the keys and packed over k/v heads (batch and
//! paged), GQA-packed prefill blocks, head dims that leave 8-lane column tails or pad AMX tiles.
//! One test only: it sets a process-wide variable.

mod common;

use candle::DType;
use common::batch::{batch_expected, batch_inputs, BatchCase};
use common::calls::{self, Features, PagedKv, Seqlens, CAUSAL, NONE};
use common::expected::{expected, LseLayout};
use common::ragged::{paginate, ragged};
use common::*;

fn batch_cases() -> Vec<BatchCase> {
    let case = |s_q, s_k, h, h_k, d, dtype, window, alibi, softcap| BatchCase {
        b: 2,
        s_q,
        s_k,
        h,
        h_k,
        d,
        dtype,
        window,
        alibi,
        softcap,
        transposed: false,
    };
    vec![
        // Decode: 4 rows per k/v head, all 8 k/v heads in one block, keys split 18 ways.
        case(1, 4500, 32, 8, 128, DType::F32, NONE, true, None),
        // Decode with all 5 k/v heads in one block, widened from f16, a sliding window that
        // the splits follow (20 of them).
        case(1, 8192, 10, 5, 64, DType::F16, (Some(5000), Some(0)), false, None),
        // bf16 decode (pairs of vectors loaded split by parity): 8 rows per k/v head in two
        // register tiles and a head dim whose last 24 columns are no whole pair; 6 rows
        // (2 positions × 3 heads) as 4 + 2, d = 72, ALiBi.
        case(1, 2500, 16, 2, 88, DType::BF16, NONE, false, None),
        case(2, 700, 6, 2, 72, DType::BF16, CAUSAL, true, None),
        // 20 rows per k/v head (AMX where the CPU has it, padded to 32) split over the keys.
        case(5, 3000, 32, 8, 64, DType::BF16, CAUSAL, false, None),
        case(1, 3001, 8, 2, 64, DType::BF16, CAUSAL, false, Some(5.0)),
        case(2, 2600, 4, 4, 40, DType::F16, (Some(1800), Some(0)), false, None),
        // Prefill: GQA-packed blocks, a tail of 8 columns (d = 40, 88), windows, softcap.
        case(300, 300, 8, 2, 40, DType::F32, (Some(17), Some(5)), true, Some(3.0)),
        case(129, 257, 6, 3, 88, DType::BF16, CAUSAL, false, None),
        case(200, 150, 4, 1, 128, DType::F16, NONE, false, None),
        // bf16 prefill (AMX where the CPU has it): every logit transform, a key count that is
        // not a multiple of 32, a head dim padded to 96.
        case(200, 333, 4, 2, 72, DType::BF16, (Some(50), Some(10)), true, Some(4.0)),
    ]
}

fn check_batch(c: &BatchCase, isa: &str, rng: &mut rand::rngs::StdRng) {
    let x = batch_inputs(c, rng);
    let (out, lse) = calls::batch_op(x.features(c)).forward_with_lse(&x.q, &x.k, &x.v).unwrap();
    let exp = batch_expected(c, &x);
    let what = format!("{isa}: {c:?}");
    assert_close(&what, &values(&out), &exp.exact, &exp.naive, c.dtype);
    assert_lse_close(&what, &values(&lse), &exp.exact_lse, 1e-4);
}

/// Paged decode: four sequences (one k/v head per block), or one long one whose block takes
/// all 8 k/v heads (`packed`).
fn check_paged_decode(dtype: DType, packed: bool, isa: &str, rng: &mut rand::rngs::StdRng) {
    let lens: &[(usize, usize)] = if packed { &[(1, 33000)] } else { &[(1, 3000), (1, 2100), (1, 0), (1, 5)] };
    let (h, h_k, d) = if packed { (16, 8, 64) } else { (16, 4, 64) };
    let x = ragged(rng, lens, (h, h_k, d), dtype);
    // Large pages keep the test's own paging cheap for the long sequence.
    let page = if packed { 1024 } else { 16 };
    let p = paginate(rng, &x, page, 2);
    let f = Features { scale: 1.0 / (d as f32).sqrt(), window: CAUSAL, alibi: None, softcap: None };
    let (sq, sk) = x.seqlens();
    let max_k = lens.iter().map(|l| l.1).max().unwrap();
    let sizes = Seqlens { q: &sq, k: &sk, max_q: 1, max_k };
    let kv = PagedKv { k: &p.k_pages, v: &p.v_pages, table: &p.table, page };
    let (out, lse) = calls::paged_with_lse(&x.q, &kv, None, &sizes, f).unwrap();
    let exp = expected(&x.seqs(), &vec![f.ref_opts(sizes.max_k); lens.len()], (h, h_k, d), dtype, LseLayout::VarLen);
    let what = format!("{isa}: paged decode {dtype:?} packed={packed}");
    assert_close(&what, &values(&out), &exp.exact, &exp.naive, dtype);
    assert_lse_close(&what, &values(&lse), &exp.exact_lse, 1e-4);
}

#[test]
fn every_instruction_set_matches_the_reference() {
    let mut rng = rng("every_instruction_set_matches_the_reference");
    let mut ran = Vec::new();
    for isa in ["amx", "avx512", "avx2", "portable"] {
        std::env::set_var("FLASH_ATTN_ROCM_CPU_ISA", isa);
        let probe = randn(&mut rng, &[1, 1, 1, 8], DType::F32);
        if let Err(e) = flash_attn_rocm::flash_attn(&probe, &probe, &probe, 1.0, false) {
            assert!(e.to_string().contains("this CPU's best is"), "{isa}: {e}");
            println!("skip {isa}: {e}");
            continue;
        }
        for c in batch_cases() {
            check_batch(&c, isa, &mut rng);
        }
        for (dtype, packed) in [(DType::F32, false), (DType::BF16, false), (DType::BF16, true)] {
            check_paged_decode(dtype, packed, isa, &mut rng);
        }
        ran.push(isa);
    }
    std::env::set_var("FLASH_ATTN_ROCM_CPU_ISA", "sse9");
    let probe = randn(&mut rng, &[1, 1, 1, 8], DType::F32);
    let err = flash_attn_rocm::flash_attn(&probe, &probe, &probe, 1.0, false).unwrap_err();
    assert!(err.to_string().contains("expected amx, avx512, avx2 or portable"), "{err}");
    std::env::remove_var("FLASH_ATTN_ROCM_CPU_ISA");
    println!("instruction sets checked: {ran:?}");
    assert!(ran.contains(&"portable"), "the portable kernel runs everywhere");
}
