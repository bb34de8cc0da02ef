//! Host-side checks of what reaches CK: for the call each public function makes, the exact
//! traits, sizes, strides, seqstarts, mask encoding and pointers in `CkFwdParams`. Runs in plain
//! `cargo test` (no ROCm): shapes and strides are random per run, expectations are derived from
//! the tensor layouts by the rules of flash-attention's CK wrapper (mha_fwd.cpp,
//! mha_varlen_fwd.cpp), not read back from the implementation.

mod common;

use candle::{DType, Device, Tensor};
use common::rng;
use flash_attn_rocm::params::{AttnCall, Request, VarLenRequest};
use flash_attn_rocm::rocm::{
    check_ck_params, check_supported, ck_fwd_params, plan_split_kv, split_kv_scratch_lens, CkBias, CkDtype, CkFwdParams, CkMask,
    DeviceBuffers, CK_MAX_SPLITS,
};
use rand::Rng;

const BUFFERS: DeviceBuffers = common::outcome::FAKE_BUFFERS;

fn zeros(dims: &[usize], dtype: DType) -> Tensor {
    Tensor::zeros(dims, dtype, &Device::Cpu).unwrap()
}

/// What the batch-layout public functions pass: window and extras.
struct BatchCall {
    left: Option<usize>,
    right: Option<usize>,
    alibi: bool,
    softcap: Option<f32>,
}

/// Random (b, s_q, s_k, h, h_k, d) with q stored head-major (transposed view) and k/v narrowed
/// out of a longer buffer, so every stride and offset differs from the contiguous case.
fn batch_params(rng: &mut rand::rngs::StdRng, c: &BatchCall, dtype: DType) -> (CkFwdParams, [usize; 6], Tensor, Tensor) {
    let (b, s_q, s_k) = (rng.gen_range(1..4), rng.gen_range(1..300), rng.gen_range(1..300));
    let h_k = rng.gen_range(1..4);
    let h = h_k * rng.gen_range(1..4);
    let d = [64, 128][rng.gen_range(0..2)];
    let q = zeros(&[b, h, s_q, d], dtype).transpose(1, 2).unwrap();
    let kv = zeros(&[b, s_k + 3, h_k, d], dtype).narrow(1, 3, s_k).unwrap();
    let slopes = zeros(&[h], DType::F32);
    let req = Request {
        softmax_scale: 0.125,
        alibi_slopes: c.alibi.then_some(&slopes),
        window_size_left: c.left,
        window_size_right: c.right,
        softcap: c.softcap,
        varlen: None,
    };
    let call = AttnCall::new(&req, [dtype; 3], q.layout(), kv.layout(), kv.layout()).unwrap();
    (ck_fwd_params(&call, &BUFFERS, None).unwrap(), [b, s_q, s_k, h, h_k, d], q, kv)
}

fn check_batch_layout(p: &CkFwdParams, [b, s_q, s_k, h, h_k, d]: [usize; 6]) {
    let i = |x: usize| x as i32;
    assert!(!p.is_group_mode);
    assert_eq!((p.batch, p.seqlen_q, p.seqlen_k, p.max_seqlen_q), (i(b), i(s_q), i(s_k), i(s_q)));
    assert_eq!((p.hdim_q, p.hdim_v, p.nhead_q, p.nhead_k), (i(d), i(d), i(h), i(h_k)));
    // q is (b, h, s, d) in memory: row stride d, head stride s_q * d, batch stride h * s_q * d.
    assert_eq!((p.stride_q, p.nhead_stride_q, p.batch_stride_q), (i(d), i(s_q * d), i(h * s_q * d)));
    // k/v rows are h_k * d apart inside a (s_k + 3)-row buffer, starting 3 rows in.
    for (stride, nhead, batch) in [(p.stride_k, p.nhead_stride_k, p.batch_stride_k), (p.stride_v, p.nhead_stride_v, p.batch_stride_v)] {
        assert_eq!((stride, nhead, batch), (i(h_k * d), i(d), i((s_k + 3) * h_k * d)));
    }
    assert_eq!((p.q_ptr, p.k_ptr, p.v_ptr), (BUFFERS.q, BUFFERS.k + 3 * h_k * d * 2, BUFFERS.v + 3 * h_k * d * 2));
    // The output is contiguous (b, s_q, h, d); the LSE (b, h, s_q).
    assert_eq!((p.stride_o, p.nhead_stride_o, p.batch_stride_o), (i(h * d), i(d), i(s_q * h * d)));
    assert_eq!((p.o_ptr, p.lse_ptr, p.has_lse), (BUFFERS.out, BUFFERS.lse, true));
    assert_eq!((p.nhead_stride_lse, p.batch_stride_lse), (i(s_q), i(h * s_q)));
    assert_eq!((p.seqstart_q_ptr, p.seqstart_k_ptr, p.block_table_ptr), (0, 0, 0));
    assert_eq!((p.scale_s, p.stream), (0.125, BUFFERS.stream));
}

/// The mask flash-attention's CK wrapper builds: none when unbounded, else bottom-right with
/// (left, right) where an absent side is clamped to seqlen_k as candle-flash-attn does.
fn expected_mask(left: Option<usize>, right: Option<usize>, s_k: usize) -> (CkMask, i32, i32) {
    let fit = |w: Option<usize>| w.filter(|&w| w <= s_k).map(|w| w as i32);
    match (fit(left), fit(right)) {
        (None, None) => (CkMask::NoMask, -1, -1),
        (l, r) => (CkMask::BottomRight, l.unwrap_or(s_k as i32), r.unwrap_or(s_k as i32)),
    }
}

#[test]
fn batch_functions_marshal_layout_mask_and_traits() {
    let mut rng = rng("batch_functions_marshal_layout_mask_and_traits");
    let w = |rng: &mut rand::rngs::StdRng| rng.gen_range(0..64usize);
    for dtype in [DType::F16, DType::BF16] {
        let windowed = (Some(w(&mut rng)), Some(w(&mut rng)));
        // (public function, its call)
        let cases = [
            ("flash_attn", BatchCall { left: None, right: None, alibi: false, softcap: None }),
            ("flash_attn causal", BatchCall { left: None, right: Some(0), alibi: false, softcap: None }),
            ("flash_attn_windowed", BatchCall { left: windowed.0, right: windowed.1, alibi: false, softcap: None }),
            ("flash_attn_windowed left only", BatchCall { left: windowed.0, right: None, alibi: false, softcap: None }),
            ("flash_attn_alibi", BatchCall { left: None, right: Some(0), alibi: true, softcap: None }),
            ("flash_attn_alibi_windowed", BatchCall { left: windowed.0, right: windowed.1, alibi: true, softcap: None }),
            ("flash_attn_alibi_windowed_softcap", BatchCall { left: windowed.0, right: None, alibi: false, softcap: Some(30.0) }),
        ];
        for (name, c) in &cases {
            let (p, dims, _, _) = batch_params(&mut rng, c, dtype);
            check_batch_layout(&p, dims);
            let (mask, left, right) = expected_mask(c.left, c.right, dims[2]);
            assert_eq!((p.mask_type, p.window_size_left, p.window_size_right), (mask, left, right), "{name}");
            assert_eq!(p.dtype, if dtype == DType::F16 { CkDtype::Fp16 } else { CkDtype::Bf16 }, "{name}");
            assert_eq!(p.bias_type, if c.alibi { CkBias::Alibi } else { CkBias::NoBias }, "{name}");
            assert_eq!(p.alibi_slopes_ptr, if c.alibi { BUFFERS.alibi_slopes } else { 0 }, "{name}");
            assert_eq!(p.stride_alibi_slopes, 0, "{name}: slopes (h,) are shared by the batch");
            assert_eq!((p.has_logits_soft_cap, p.logits_soft_cap), (c.softcap.is_some(), c.softcap.unwrap_or(0.0)), "{name}");
        }
    }
}

fn u32s(v: &[u32]) -> Tensor {
    Tensor::new(v, &Device::Cpu).unwrap()
}

#[test]
fn varlen_functions_marshal_group_mode() {
    let mut rng = rng("varlen_functions_marshal_group_mode");
    let lens: Vec<(u32, u32)> = (0..rng.gen_range(1..6)).map(|_| (rng.gen_range(0..50), rng.gen_range(0..70))).collect();
    let cu = |f: fn(&(u32, u32)) -> u32| -> Vec<u32> {
        std::iter::once(0).chain(lens.iter().scan(0, |a, l| { *a += f(l); Some(*a) })).collect()
    };
    let (cu_q, cu_k) = (cu(|l| l.0), cu(|l| l.1));
    let (tq, tk) = (*cu_q.last().unwrap() as usize, *cu_k.last().unwrap() as usize);
    let (h, h_k, d) = (8, 2, 128);
    // q rows padded to 2 * h * d: a strided (total, h, d) view.
    let q = zeros(&[tq, 2 * h, d], DType::BF16).narrow(1, 0, h).unwrap();
    let k = zeros(&[tk, h_k, d], DType::BF16);
    let (sq, sk) = (u32s(&cu_q), u32s(&cu_k));
    let max_q = lens.iter().map(|l| l.0).max().unwrap() as usize;
    let max_k = lens.iter().map(|l| l.1).max().unwrap() as usize + 1;
    let slopes = zeros(&[h], DType::F32);
    for (name, alibi, left, right, softcap) in [
        ("flash_attn_varlen causal", false, None, Some(0), None),
        ("flash_attn_varlen_windowed", false, Some(5), Some(1), None),
        ("flash_attn_varlen_alibi", true, None, None, None),
        ("flash_attn_varlen_alibi_windowed", true, Some(7), Some(0), None),
        ("flash_attn_varlen_alibi_windowed_softcap", false, None, Some(0), Some(50.0f32)),
    ] {
        let varlen = VarLenRequest {
            seqlens_q: &sq,
            seqlens_k: &sk,
            max_seqlen_q: max_q,
            max_seqlen_k: max_k,
            block_table: None,
            page_block_size: None,
            mm_prefix_ranges: None,
        };
        let req = Request {
            softmax_scale: 0.3,
            alibi_slopes: alibi.then_some(&slopes),
            window_size_left: left,
            window_size_right: right,
            softcap,
            varlen: Some(varlen),
        };
        let call = AttnCall::new(&req, [DType::BF16; 3], q.layout(), k.layout(), k.layout()).unwrap();
        let p = ck_fwd_params(&call, &BUFFERS, None).unwrap();
        let i = |x: usize| x as i32;
        assert!(p.is_group_mode, "{name}");
        assert_eq!((p.batch, p.seqlen_q, p.seqlen_k, p.max_seqlen_q), (i(lens.len()), i(tq), i(tk), i(max_q)), "{name}");
        assert_eq!((p.seqstart_q_ptr, p.seqstart_k_ptr), (BUFFERS.seqstart_q, BUFFERS.seqstart_k), "{name}");
        assert_eq!((p.stride_q, p.nhead_stride_q, p.batch_stride_q), (i(2 * h * d), i(d), 0), "{name}");
        assert_eq!((p.stride_k, p.nhead_stride_k, p.batch_stride_k), (i(h_k * d), i(d), 0), "{name}");
        assert_eq!((p.stride_o, p.nhead_stride_o, p.batch_stride_o), (i(h * d), i(d), 0), "{name}");
        assert_eq!((p.nhead_stride_lse, p.batch_stride_lse), (i(tq), 0), "{name}: lse is (h, total_q)");
        let (mask, l, r) = expected_mask(left, right, max_k);
        assert_eq!((p.mask_type, p.window_size_left, p.window_size_right), (mask, l, r), "{name}");
        assert_eq!(p.bias_type == CkBias::Alibi, alibi, "{name}");
        assert_eq!(p.has_logits_soft_cap, softcap.is_some(), "{name}");
    }
}

#[test]
fn what_ck_cannot_serve_is_a_clear_error() {
    let mut rng = rng("what_ck_cannot_serve_is_a_clear_error");
    let s = rng.gen_range(1..50);
    let err = |dtype: DType, d: usize, alibi: bool, softcap: Option<f32>| {
        let q = zeros(&[1, s, 2, d], dtype);
        let slopes = zeros(&[2], DType::F32);
        let req = Request { softmax_scale: 1.0, alibi_slopes: alibi.then_some(&slopes), window_size_left: None, window_size_right: None, softcap, varlen: None };
        let call = AttnCall::new(&req, [dtype; 3], q.layout(), q.layout(), q.layout()).unwrap();
        ck_fwd_params(&call, &BUFFERS, None).unwrap_err().to_string()
    };
    assert!(err(DType::F32, 64, false, None).contains("f16 or bf16"));
    assert!(err(DType::F16, 512, false, None).contains("head dims up to 256"));
    assert!(err(DType::BF16, 64, true, Some(5.0)).contains("softcap with ALiBi"));

    // ALiBi distances past 16 bits in fmha_fwd (batch mode), whatever the other lengths.
    let long = rng.gen_range(65537..70000);
    let q = zeros(&[1, rng.gen_range(1..8), 1, 64], DType::F16);
    let kv = zeros(&[1, long, 1, 64], DType::F16);
    let slopes = zeros(&[1], DType::F32);
    let req = Request { softmax_scale: 1.0, alibi_slopes: Some(&slopes), window_size_left: None, window_size_right: None, softcap: None, varlen: None };
    let call = AttnCall::new(&req, [DType::F16; 3], q.layout(), kv.layout(), kv.layout()).unwrap();
    let msg = ck_fwd_params(&call, &BUFFERS, None).unwrap_err().to_string();
    assert!(msg.contains("16-bit") && msg.contains(&long.to_string()), "{msg}");
    // Without ALiBi the same lengths are fine.
    let req = Request { alibi_slopes: None, ..req };
    let call = AttnCall::new(&req, [DType::F16; 3], q.layout(), kv.layout(), kv.layout()).unwrap();
    assert_eq!(ck_fwd_params(&call, &BUFFERS, None).unwrap().seqlen_k, long as i32);
}

#[test]
fn strided_alibi_slopes_reach_ck_contiguous() {
    let mut rng = rng("strided_alibi_slopes_reach_ck_contiguous");
    let h = rng.gen_range(2..9);
    // Column 1 of an (h, 2) tensor: stride 2, so CK (which reads h consecutive floats) would
    // see the wrong slopes if the view were passed through.
    let table = Tensor::new((0..2 * h).map(|i| i as f32).collect::<Vec<_>>(), &Device::Cpu).unwrap().reshape((h, 2)).unwrap();
    let slopes = table.narrow(1, 1, 1).unwrap().squeeze(1).unwrap();
    assert!(!slopes.is_contiguous());
    let q = zeros(&[1, 4, h, 64], DType::BF16);
    let req = Request { softmax_scale: 1.0, alibi_slopes: Some(&slopes), window_size_left: None, window_size_right: None, softcap: None, varlen: None };
    let call = AttnCall::new(&req, [DType::BF16; 3], q.layout(), q.layout(), q.layout()).unwrap();
    let spec = call.alibi.as_ref().unwrap();
    assert!(spec.slopes.is_contiguous());
    let expected: Vec<f32> = (0..h).map(|i| (2 * i + 1) as f32).collect();
    assert_eq!(spec.slopes.to_vec1::<f32>().unwrap(), expected);
}

#[test]
fn paged_function_marshals_block_table_and_split_kv_scratch() {
    let mut rng = rng("paged_function_marshals_block_table_and_split_kv_scratch");
    let page = 128 * rng.gen_range(1..3);
    let (h, h_k, d) = (8, 2, 128);
    // The first sequence has a query row: a call without any is never launched (the glue skips
    // calls with no query row that sees a key), and its accumulators would have no extent.
    let lens: Vec<(u32, u32)> =
        (0..rng.gen_range(1..5)).map(|i| (rng.gen_range(u32::from(i == 0)..20), rng.gen_range(0..600))).collect();
    let cu = |f: fn(&(u32, u32)) -> u32| -> Vec<u32> {
        std::iter::once(0).chain(lens.iter().scan(0, |a, l| { *a += f(l); Some(*a) })).collect()
    };
    let (cu_q, cu_k) = (cu(|l| l.0), cu(|l| l.1));
    let total_q = *cu_q.last().unwrap() as usize;
    let max_blocks = lens.iter().map(|l| (l.1 as usize).div_ceil(page)).max().unwrap().max(1);
    let num_blocks = lens.len() * max_blocks + 1;
    // Block table rows padded to max_blocks + 3 columns: a strided (b, max_blocks) view.
    let ids: Vec<u32> = (0..lens.len() * (max_blocks + 3)).map(|i| (i % num_blocks) as u32).collect();
    let table = Tensor::new(ids, &Device::Cpu).unwrap().reshape((lens.len(), max_blocks + 3)).unwrap().narrow(1, 0, max_blocks).unwrap();
    let q = zeros(&[total_q, h, d], DType::F16);
    let kv = zeros(&[num_blocks, page, h_k, d], DType::F16);
    let (sq, sk) = (u32s(&cu_q), u32s(&cu_k));
    let max_q = lens.iter().map(|l| l.0).max().unwrap() as usize;
    let max_k = lens.iter().map(|l| l.1).max().unwrap() as usize;
    let varlen = VarLenRequest {
        seqlens_q: &sq,
        seqlens_k: &sk,
        max_seqlen_q: max_q,
        max_seqlen_k: max_k,
        block_table: Some(&table),
        page_block_size: Some(page),
        mm_prefix_ranges: None,
    };
    let req = Request { softmax_scale: 0.1, alibi_slopes: None, window_size_left: None, window_size_right: Some(0), softcap: None, varlen: Some(varlen) };
    let call = AttnCall::new(&req, [DType::F16; 3], q.layout(), kv.layout(), kv.layout()).unwrap();
    let buffers = DeviceBuffers { block_table_row_stride: table.stride()[0], ..BUFFERS };
    // A paged call needs its split plan; an MI300X-sized device (304 CUs) or a small one.
    assert!(ck_fwd_params(&call, &buffers, None).unwrap_err().to_string().contains("split-KV plan"));
    let units = [304, 228, 104, 1][rng.gen_range(0..4)];
    let split = plan_split_kv(&call, "64,128", units).unwrap();
    let p = ck_fwd_params(&call, &buffers, Some(&split)).unwrap();
    let i = |x: usize| x as i32;
    assert!(p.is_group_mode);
    assert_eq!((p.block_table_ptr, p.page_block_size, p.batch_stride_block_table), (BUFFERS.block_table, i(page), i(max_blocks + 3)));
    // k/v: batch stride = one block, row stride inside a block, head stride d.
    assert_eq!((p.batch_stride_k, p.stride_k, p.nhead_stride_k), (i(page * h_k * d), i(h_k * d), i(d)));
    assert_eq!((p.batch_stride_v, p.stride_v, p.nhead_stride_v), (i(page * h_k * d), i(h_k * d), i(d)));
    // What the low-level check demands of a paged call, on what marshalling produced.
    check_ck_params(&p).unwrap();
    let no_table = CkFwdParams { block_table_ptr: 0, ..p };
    assert!(check_ck_params(&no_table).unwrap_err().to_string().contains("block_table_ptr"));
    let no_scratch = CkFwdParams { o_acc_ptr: 0, ..p };
    assert!(check_ck_params(&no_scratch).unwrap_err().to_string().contains("o_acc_ptr"));
    assert_eq!((p.seqstart_q_ptr, p.seqstart_k_ptr), (BUFFERS.seqstart_q, BUFFERS.seqstart_k));
    assert_eq!((p.batch, p.seqlen_q, p.max_seqlen_q), (i(lens.len()), i(total_q), i(max_q)));
    assert_eq!((p.mask_type, p.window_size_left, p.window_size_right), (CkMask::BottomRight, i(max_k), 0));
    assert_eq!((p.lse_acc_ptr, p.o_acc_ptr), (BUFFERS.lse_acc, BUFFERS.o_acc));
    // Accumulators (h, splits, total_q[, d]) as mha_varlen_fwd.cpp lays them out.
    let n = split.num_splits;
    assert!((1..=CK_MAX_SPLITS).contains(&n) && n <= units && n <= max_k.div_ceil(128).max(1), "{n} splits");
    assert_eq!(p.num_splits, i(n));
    assert_eq!((p.nhead_stride_lse_acc, p.split_stride_lse_acc), (i(n * total_q), i(total_q)));
    assert_eq!((p.nhead_stride_o_acc, p.split_stride_o_acc, p.stride_o_acc), (i(n * total_q * d), i(total_q * d), i(d)));
    assert_eq!(split_kv_scratch_lens(&call, &split), (h * n * total_q, h * n * total_q * d));
    assert!(check_ck_params(&CkFwdParams { num_splits: 0, ..p }).unwrap_err().to_string().contains("num_splits"));
    assert!(check_ck_params(&CkFwdParams { num_splits: 129, ..p }).unwrap_err().to_string().contains("num_splits"));
    // Batch-layout calls never carry paging or scratch.
    let b = zeros(&[1, 3, h, d], DType::F16);
    let req = Request { varlen: None, ..req };
    let call = AttnCall::new(&req, [DType::F16; 3], b.layout(), b.layout(), b.layout()).unwrap();
    let p = ck_fwd_params(&call, &BUFFERS, None).unwrap();
    assert_eq!((p.block_table_ptr, p.page_block_size, p.lse_acc_ptr, p.o_acc_ptr), (0, 0, 0, 0));
    // Page sizes CK's split-KV kernels cannot take.
    let small = zeros(&[num_blocks * 2, 64, h_k, d], DType::F16);
    let table64 = Tensor::zeros((lens.len(), max_k.div_ceil(64).max(1)), DType::U32, &Device::Cpu).unwrap();
    let varlen = VarLenRequest { block_table: Some(&table64), page_block_size: Some(64), ..varlen };
    let req = Request { varlen: Some(varlen), ..req };
    let call = AttnCall::new(&req, [DType::F16; 3], q.layout(), small.layout(), small.layout()).unwrap();
    assert!(ck_fwd_params(&call, &BUFFERS, None).unwrap_err().to_string().contains("multiple of 128"));
}

/// Issue 8 item 2: CK multiplies the raw scale into exp2 with a running max starting at -inf,
/// so a scale <= 0 (or one that x log2(e) flushes to zero) would give NaN: refused.
#[test]
fn ck_refuses_scales_that_would_give_nan() {
    let mut rng = rng("ck_refuses_scales_that_would_give_nan");
    let q = zeros(&[1, rng.gen_range(1..50), 2, 64], DType::F16);
    let call = |scale: f32| {
        let req = Request { softmax_scale: scale, alibi_slopes: None, window_size_left: None, window_size_right: None, softcap: None, varlen: None };
        AttnCall::new(&req, [DType::F16; 3], q.layout(), q.layout(), q.layout()).unwrap()
    };
    for scale in [0.0, -0.125, -rng.gen_range(1e-3..10.0f32), 1e-39, f32::MIN_POSITIVE / 2.0] {
        let err = check_supported(&call(scale)).unwrap_err().to_string();
        assert!(err.contains("softmax_scale > 0"), "scale {scale}: {err}");
    }
    for scale in [1e-30, 0.125, rng.gen_range(1e-3..10.0f32)] {
        check_supported(&call(scale)).unwrap();
    }
}

/// Issue 8 item 7: CK loads 16 bytes at a time, so a view whose element offset or strides are
/// not multiples of 8 is refused rather than read misaligned.
#[test]
fn ck_refuses_views_not_16_byte_aligned() {
    let mut rng = rng("ck_refuses_views_not_16_byte_aligned");
    let (s, h, d) = (rng.gen_range(1..40), 2, 64);
    let shift = rng.gen_range(1..8);
    let flat = zeros(&[s * h * d + shift], DType::BF16);
    let q = flat.narrow(0, shift, s * h * d).unwrap().reshape((1, s, h, d)).unwrap();
    let req = Request { softmax_scale: 0.1, alibi_slopes: None, window_size_left: None, window_size_right: None, softcap: None, varlen: None };
    let kv = zeros(&[1, s, h, d], DType::BF16);
    let call = AttnCall::new(&req, [DType::BF16; 3], q.layout(), kv.layout(), kv.layout()).unwrap();
    let err = ck_fwd_params(&call, &BUFFERS, None).unwrap_err().to_string();
    assert!(err.contains("16 bytes") && err.contains(&format!("offset {shift}")), "{err}");
    // The same data 8 elements in is fine.
    let q = zeros(&[s * h * d + 8], DType::BF16).narrow(0, 8, s * h * d).unwrap().reshape((1, s, h, d)).unwrap();
    let call = AttnCall::new(&req, [DType::BF16; 3], q.layout(), kv.layout(), kv.layout()).unwrap();
    ck_fwd_params(&call, &BUFFERS, None).unwrap();
}

/// Issue 8 item 5: the low-level API's parameters are checked before they reach the shim:
/// `CkFwdParams::default()` (nhead_k = 0, which CK divides by), group mode without seqstarts,
/// an LSE or ALiBi without its buffer.
#[test]
fn low_level_params_are_checked_before_the_shim() {
    let err = check_ck_params(&CkFwdParams::default()).unwrap_err().to_string();
    assert!(err.contains("nhead_k 0"), "{err}");
    let mut rng = rng("low_level_params_are_checked_before_the_shim");
    let c = BatchCall { left: None, right: Some(0), alibi: true, softcap: None };
    let (p, _, _, _) = batch_params(&mut rng, &c, DType::F16);
    check_ck_params(&p).unwrap();
    let bad = [
        (CkFwdParams { nhead_k: p.nhead_q + 1, ..p }, "must divide"),
        (CkFwdParams { q_ptr: 0, ..p }, "q_ptr"),
        (CkFwdParams { alibi_slopes_ptr: 0, ..p }, "alibi_slopes_ptr"),
        (CkFwdParams { has_lse: true, lse_ptr: 0, ..p }, "lse_ptr"),
        (CkFwdParams { is_group_mode: true, seqstart_q_ptr: 0, ..p }, "seqstart"),
        (CkFwdParams { page_block_size: 128, ..p }, "paged K/V"),
    ];
    for (params, needle) in bad {
        let err = check_ck_params(&params).unwrap_err().to_string();
        assert!(err.contains(needle), "expected `{needle}` in `{err}`");
    }
}

/// Issue 8 item 3: paged decode splits its keys to fill the device (CK's split-KV path ran one
/// split before); GQA decode on the 128 tile counts k/v heads, as CK merges the query heads of
/// one k/v head into its query rows there.
#[test]
fn paged_decode_splits_keys_over_the_compute_units() {
    let mut rng = rng("paged_decode_splits_keys_over_the_compute_units");
    let (batch, page) = (rng.gen_range(1..3), 128);
    let keys = rng.gen_range(16_384..65_536usize);
    let (h_k, group) = (rng.gen_range(1..5), 4);
    let blocks = keys.div_ceil(page);
    let table = Tensor::new((0..(batch * blocks) as u32).collect::<Vec<_>>(), &Device::Cpu).unwrap().reshape((batch, blocks)).unwrap();
    let cu_q = u32s(&(0..=batch as u32).collect::<Vec<_>>());
    let cu_k = u32s(&(0..=batch).map(|b| (b * keys) as u32).collect::<Vec<_>>());
    let plan = |d: usize, units: usize| {
        let q = zeros(&[batch, h_k * group, d], DType::BF16);
        let kv = zeros(&[batch * blocks, page, h_k, d], DType::BF16);
        let varlen = VarLenRequest {
            seqlens_q: &cu_q,
            seqlens_k: &cu_k,
            max_seqlen_q: 1,
            max_seqlen_k: keys,
            block_table: Some(&table),
            page_block_size: Some(page),
            mm_prefix_ranges: None,
        };
        let req = Request { softmax_scale: 0.1, alibi_slopes: None, window_size_left: None, window_size_right: None, softcap: None, varlen: Some(varlen) };
        let call = AttnCall::new(&req, [DType::BF16; 3], q.layout(), kv.layout(), kv.layout()).unwrap();
        plan_split_kv(&call, "64,128", units).unwrap()
    };
    for units in [304, 256, 228, 104] {
        // d = 128, merged: batch * h_k blocks per split.
        let merged = plan(128, units);
        let work = batch * h_k;
        assert_eq!(merged.tile.hdim, 128);
        assert!(merged.num_splits > 1 && work * merged.num_splits <= units, "{units} CUs: {merged:?}");
        // At least 70% of the splits the device (or CK's split limit) can take at once, counting
        // only split counts that give each split fewer key tiles: `num_splits` skips the others,
        // as flash-attention's heuristic does (173 key tiles under a cap of 128 make 87 splits
        // of at most 2 tiles, not 128 of 1 or 2).
        let key_tiles = keys.div_ceil(merged.tile.block_n);
        let cap = (units / work).min(CK_MAX_SPLITS).max(1);
        let useful = key_tiles.div_ceil(key_tiles.div_ceil(cap));
        assert!(100 * merged.num_splits >= 70 * useful, "{units} CUs, {key_tiles} key tiles: {merged:?}");
        // d = 64: one block per query head.
        let per_head = plan(64, units);
        let work = batch * h_k * group;
        assert!(work * per_head.num_splits <= units.max(work), "{units} CUs: {per_head:?}");
        assert!(per_head.num_splits <= merged.num_splits);
    }
    // A device already full of query blocks does not split.
    assert_eq!(plan(64, 1).num_splits, 1);
}
