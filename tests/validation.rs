//! Every bad input gets a clear error that names the argument: never a panic or a bad read.

mod common;

use candle::{DType, Device, Tensor};
use common::{randn, rng};
use flash_attn_rocm as fa;

fn err_of(r: candle::Result<Tensor>) -> String {
    match r {
        Ok(t) => panic!("expected an error, got a tensor of shape {:?}", t.dims()),
        Err(e) => e.to_string(),
    }
}

fn expect_err(r: candle::Result<Tensor>, needles: &[&str]) {
    let msg = err_of(r);
    // One prefix for every error of the crate, whichever layer refused the call.
    assert!(msg.starts_with("flash-attn-rocm: "), "error {msg:?} should start with `flash-attn-rocm: `");
    for n in needles {
        assert!(msg.contains(n), "error {msg:?} should mention {n:?}");
    }
}

fn u32s(v: &[u32]) -> Tensor {
    Tensor::new(v, &Device::Cpu).unwrap()
}

#[test]
fn batch_layout_errors() {
    let mut r = rng("batch_layout_errors");
    let q = randn(&mut r, &[1, 8, 4, 32], DType::F32);
    let k = randn(&mut r, &[1, 9, 2, 32], DType::F32);
    let v = randn(&mut r, &[1, 9, 2, 32], DType::F32);
    // Wrong rank.
    let q3 = randn(&mut r, &[8, 4, 32], DType::F32);
    expect_err(fa::flash_attn(&q3, &k, &v, 1.0, false), &["q", "rank 4"]);
    // dtype mismatch and unsupported dtype.
    let kb = k.to_dtype(DType::BF16).unwrap();
    expect_err(fa::flash_attn(&q, &kb, &v, 1.0, false), &["dtype", "BF16"]);
    let qi = Tensor::zeros((1, 8, 4, 32), DType::U32, &Device::Cpu).unwrap();
    let ki = Tensor::zeros((1, 9, 2, 32), DType::U32, &Device::Cpu).unwrap();
    expect_err(fa::flash_attn(&qi, &ki, &ki, 1.0, false), &["unsupported dtype", "U32"]);
    // Head dims that differ, or unsupported.
    let k40 = randn(&mut r, &[1, 9, 2, 40], DType::F32);
    expect_err(fa::flash_attn(&q, &k40, &k40, 1.0, false), &["head dims differ"]);
    let q12 = randn(&mut r, &[1, 8, 4, 12], DType::F32);
    let k12 = randn(&mut r, &[1, 9, 2, 12], DType::F32);
    expect_err(fa::flash_attn(&q12, &k12, &k12, 1.0, false), &["head_dim", "multiple of 8", "12"]);
    let q520 = randn(&mut r, &[1, 2, 1, 520], DType::F32);
    expect_err(fa::flash_attn(&q520, &q520, &q520, 1.0, false), &["head_dim", "520"]);
    // k/v heads not dividing q heads.
    let k3 = randn(&mut r, &[1, 9, 3, 32], DType::F32);
    expect_err(fa::flash_attn(&q, &k3, &k3, 1.0, false), &["k/v heads 3", "q heads 4"]);
    // Shape mismatches: k vs v, batch.
    let v10 = randn(&mut r, &[1, 10, 2, 32], DType::F32);
    expect_err(fa::flash_attn(&q, &k, &v10, 1.0, false), &["k and v", "same shape"]);
    let k2 = randn(&mut r, &[2, 9, 2, 32], DType::F32);
    expect_err(fa::flash_attn(&q, &k2, &k2, 1.0, false), &["batch sizes differ"]);
    // Non-contiguous last dim.
    let qt = randn(&mut r, &[1, 8, 32, 4], DType::F32).transpose(2, 3).unwrap();
    expect_err(fa::flash_attn(&qt, &k, &v, 1.0, false), &["last dim of q", "contiguous"]);
    // Alibi of the wrong dtype or shape.
    let slopes_f16 = Tensor::ones(4, DType::F16, &Device::Cpu).unwrap();
    expect_err(fa::flash_attn_alibi(&q, &k, &v, &slopes_f16, 1.0, false), &["alibi_slopes", "f32"]);
    let slopes3 = Tensor::ones(3, DType::F32, &Device::Cpu).unwrap();
    expect_err(fa::flash_attn_alibi(&q, &k, &v, &slopes3, 1.0, false), &["alibi_slopes", "(4,)"]);
    // Softcap <= 0 or not finite.
    for cap in [0.0, -1.0, f32::NAN, f32::INFINITY] {
        expect_err(
            fa::flash_attn_alibi_windowed_softcap(&q, &k, &v, None, 1.0, None, None, cap),
            &["softcap"],
        );
    }
}

/// Valid varlen inputs: 3 sequences over 10 q rows and 12 k rows.
struct VarLen {
    q: Tensor,
    k: Tensor,
    v: Tensor,
}

fn varlen(r: &mut rand::rngs::StdRng) -> VarLen {
    VarLen {
        q: randn(r, &[10, 4, 32], DType::F32),
        k: randn(r, &[12, 2, 32], DType::F32),
        v: randn(r, &[12, 2, 32], DType::F32),
    }
}

fn run_varlen(x: &VarLen, sq: &Tensor, sk: &Tensor, max_q: usize, max_k: usize) -> candle::Result<Tensor> {
    fa::flash_attn_varlen(&x.q, &x.k, &x.v, sq, sk, max_q, max_k, 1.0, true)
}

#[test]
fn varlen_seqlens_errors() {
    let mut r = rng("varlen_seqlens_errors");
    let x = varlen(&mut r);
    let (sq, sk) = (u32s(&[0, 3, 3, 10]), u32s(&[0, 5, 6, 12]));
    assert!(run_varlen(&x, &sq, &sk, 7, 6).is_ok());
    // Wrong dtype, not 1-D, shorter than 2, lengths differing.
    let sq_i64 = Tensor::new(&[0i64, 3, 3, 10], &Device::Cpu).unwrap();
    expect_err(run_varlen(&x, &sq_i64, &sk, 7, 6), &["seqlens_q", "u32"]);
    let sq_2d = u32s(&[0, 3, 3, 10]).reshape((2, 2)).unwrap();
    expect_err(run_varlen(&x, &sq_2d, &sk, 7, 6), &["seqlens_q", "1-D"]);
    expect_err(run_varlen(&x, &u32s(&[0]), &u32s(&[0]), 7, 6), &["seqlens_q", ">= 2"]);
    expect_err(run_varlen(&x, &sq, &u32s(&[0, 5, 12]), 7, 6), &["same length", "4", "3"]);
    // Decreasing, pointing past the tensor, longer than max_seqlen.
    expect_err(run_varlen(&x, &u32s(&[0, 3, 2, 10]), &sk, 7, 6), &["seqlens_q", "non-decreasing"]);
    expect_err(run_varlen(&x, &u32s(&[0, 3, 3, 11]), &sk, 8, 6), &["seqlens_q", "past the end of q"]);
    expect_err(run_varlen(&x, &sq, &u32s(&[0, 5, 6, 13]), 7, 7), &["seqlens_k", "past the end of k"]);
    expect_err(run_varlen(&x, &sq, &sk, 6, 6), &["sequence 2", "max_seqlen_q = 6"]);
    expect_err(run_varlen(&x, &sq, &sk, 7, 5), &["sequence 2", "length 6 in seqlens_k", "max_seqlen_k = 5"]);
    // Wrong rank for varlen.
    let q4 = x.q.reshape((1, 10, 4, 32)).unwrap();
    expect_err(fa::flash_attn_varlen(&q4, &x.k, &x.v, &sq, &sk, 7, 6, 1.0, false), &["q", "rank 3"]);
}

/// Paged inputs: 2 sequences, pages of 4 slots, 5 physical blocks.
fn paged_call(
    r: &mut rand::rngs::StdRng,
    table: &Tensor,
    page: usize,
    k_dims: [usize; 4],
    mm: Option<&Tensor>,
) -> candle::Result<Tensor> {
    let q = randn(r, &[6, 4, 32], DType::F32);
    let k = randn(r, &k_dims, DType::F32);
    let (sq, sk) = (u32s(&[0, 2, 6]), u32s(&[0, 7, 10]));
    fa::flash_attn_varlen_paged_windowed(&q, &k, &k, &sq, &sk, table, mm, 4, 7, 1.0, None, Some(0), page, None)
}

#[test]
fn paged_errors() {
    let mut r = rng("paged_errors");
    let dims = [5, 4, 2, 32];
    let good = u32s(&[4, 0, 2, 3]).reshape((2, 2)).unwrap();
    assert!(paged_call(&mut r, &good, 4, dims, None).is_ok());
    let f = Tensor::zeros((2, 2), DType::F32, &Device::Cpu).unwrap();
    expect_err(paged_call(&mut r, &f, 4, dims, None), &["block_table", "u32 or i32"]);
    let out_of_range = u32s(&[4, 5, 2, 3]).reshape((2, 2)).unwrap();
    expect_err(paged_call(&mut r, &out_of_range, 4, dims, None), &["block_table[0, 1] = 5", "out of range"]);
    let negative = Tensor::new(&[[4i32, 0], [-1, 3]], &Device::Cpu).unwrap();
    expect_err(paged_call(&mut r, &negative, 4, dims, None), &["block_table[1, 0] = -1"]);
    let too_few = u32s(&[4, 0]).reshape((2, 1)).unwrap();
    expect_err(paged_call(&mut r, &too_few, 4, dims, None), &["needs 2 blocks"]);
    expect_err(paged_call(&mut r, &good, 0, dims, None), &["page_block_size must be > 0"]);
    expect_err(paged_call(&mut r, &good, 8, dims, None), &["page_block_size 8", "does not match"]);
    let k3 = [5, 4, 2];
    let q = randn(&mut r, &[6, 4, 32], DType::F32);
    let k = randn(&mut r, &k3, DType::F32);
    let (sq, sk) = (u32s(&[0, 2, 6]), u32s(&[0, 7, 10]));
    let e = fa::flash_attn_varlen_paged_windowed(&q, &k, &k, &sq, &sk, &good, None, 4, 7, 1.0, None, None, 4, None);
    expect_err(e, &["k", "rank 4"]);
    // mm_prefix_ranges of the wrong dtype or shape.
    let mm_u32 = Tensor::zeros((2, 1, 2), DType::U32, &Device::Cpu).unwrap();
    expect_err(paged_call(&mut r, &good, 4, dims, Some(&mm_u32)), &["mm_prefix_ranges", "i32"]);
    let mm_bad = Tensor::zeros((2, 1, 3), DType::I32, &Device::Cpu).unwrap();
    expect_err(paged_call(&mut r, &good, 4, dims, Some(&mm_bad)), &["mm_prefix_ranges", "(2, max_ranges, 2)"]);
}
