//! Unit tests of the normalization: window resolution, strides, offsets.

use super::*;
use candle::{Device, Tensor};

#[test]
fn windows_resolve_like_candle_flash_attn() {
    // (left, right, max_k, mm_prefix) -> (left, right)
    let cases = [
        ((None, None, 100, false), (-1, -1)),
        ((None, Some(0), 100, false), (100, 0)),
        ((Some(10), None, 100, false), (10, 100)),
        ((None, Some(3), 100, false), (100, 3)),
        ((Some(101), Some(0), 100, false), (100, 0)),
        ((Some(7), Some(500), 100, false), (7, 100)),
        ((None, Some(0), 100, true), (100, 0)),
    ];
    for ((l, r, k, mm), (el, er)) in cases {
        let w = Window::resolve(l, r, k, mm);
        assert_eq!((w.left, w.right), (el, er), "{l:?} {r:?} {k} {mm}");
    }
}

#[test]
fn key_ranges_are_bottom_right_aligned() {
    let causal = Window::resolve(None, Some(0), 8, false);
    // s_q = 3, s_k = 8: row 0 sits at key 5.
    assert_eq!(causal.key_range(0, 3, 8), (0, 6));
    assert_eq!(causal.key_range(2, 3, 8), (0, 8));
    // s_q > s_k: the first rows see nothing.
    assert_eq!(causal.key_range(0, 5, 2), (0, 0));
    assert_eq!(causal.key_range(4, 5, 2), (0, 2));
    let local = Window::resolve(Some(2), Some(1), 100, false);
    assert_eq!(local.key_range(4, 10, 10), (2, 6));
    assert!(Window::resolve(None, None, 4, false).is_unbounded());
}

fn zeros(dims: &[usize]) -> Tensor {
    Tensor::zeros(dims, candle::DType::F32, &Device::Cpu).unwrap()
}

fn request(varlen: Option<VarLenRequest<'_>>) -> Request<'_> {
    Request {
        softmax_scale: 0.5,
        alibi_slopes: None,
        window_size_left: None,
        window_size_right: Some(0),
        softcap: None,
        varlen,
    }
}

#[test]
fn batch_views_follow_strides_of_transposed_inputs() {
    // q stored as (b, h, s, d) and viewed as (b, s, h, d).
    let q = zeros(&[2, 4, 5, 16]).transpose(1, 2).unwrap();
    let k = zeros(&[2, 7, 2, 16]).narrow(1, 1, 6).unwrap();
    let call = AttnCall::new(&request(None), [candle::DType::F32; 3], q.layout(), k.layout(), k.layout()).unwrap();
    assert_eq!(call.mode, Mode::Batch);
    assert_eq!((call.batch, call.num_heads, call.num_heads_k, call.head_dim), (2, 4, 2, 16));
    assert_eq!(call.q, TensorView { offset: 0, batch_stride: 320, row_stride: 16, head_stride: 80 });
    assert_eq!(call.k, TensorView { offset: 32, batch_stride: 224, row_stride: 32, head_stride: 16 });
    assert_eq!((call.max_seqlen_q, call.max_seqlen_k, call.total_q), (5, 6, 10));
    assert_eq!(call.lse_dims(), vec![2, 4, 5]);
    assert_eq!(call.lse_index(1, 2, 3), (4 + 2) * 5 + 3);
    assert_eq!(call.out_offset(1, 2, 3), ((5 + 3) * 4 + 2) * 16);
    assert_eq!(call.group_size(), 2);
}

#[test]
fn varlen_sequences_and_offsets() {
    let q = zeros(&[9, 2, 8]);
    let k = zeros(&[12, 1, 8]);
    let cu_q = Tensor::new(&[0u32, 4, 4, 9], &Device::Cpu).unwrap();
    let cu_k = Tensor::new(&[0u32, 6, 7, 12], &Device::Cpu).unwrap();
    let varlen = VarLenRequest {
        seqlens_q: &cu_q,
        seqlens_k: &cu_k,
        max_seqlen_q: 5,
        max_seqlen_k: 6,
        block_table: None,
        page_block_size: None,
        mm_prefix_ranges: None,
    };
    let call = AttnCall::new(&request(Some(varlen)), [candle::DType::F32; 3], q.layout(), k.layout(), k.layout()).unwrap();
    assert_eq!(call.mode, Mode::VarLen);
    assert_eq!(call.batch, 3);
    assert_eq!(call.seqs.get(2), Sequence { q_start: 4, q_len: 5, k_start: 7, k_len: 5, out_row: 4 });
    assert_eq!(call.seqs.get(1).q_len, 0);
    assert_eq!(call.q.batch_stride, 0);
    assert_eq!(call.lse_dims(), vec![2, 9]);
    assert_eq!(call.lse_index(2, 1, 3), 9 + 4 + 3);
    assert_eq!(call.window, Window { left: 6, right: 0 });
}

/// Issue 35: with `max_seqlen_q = 0` no kernel runs, so a GPU call that left its seqlens on the
/// device returned zeros for sequences with query rows, where the CPU backend refuses the call.
/// Both constructors now refuse it alike, and accept it alike when no sequence has query rows.
#[test]
fn max_seqlen_q_zero_is_checked_on_the_host_for_the_device_too() {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    for _ in 0..20 {
        let batch = rng.gen_range(1..5);
        let lens_q: Vec<u32> = (0..batch).map(|_| rng.gen_range(0..3)).collect();
        let lens_k: Vec<u32> = (0..batch).map(|_| rng.gen_range(0..9)).collect();
        let cu_q = cumulative(&lens_q);
        let (on_host, on_device) = both_constructors(*cu_q.last().unwrap() as usize, &cu_q, &cumulative(&lens_k), (0, 8));
        let rows = lens_q.iter().any(|&l| l > 0);
        assert_eq!(on_host.is_err(), rows, "query lengths {lens_q:?}: {:?}", on_host.as_ref().err());
        match (on_host, on_device) {
            // The first line: the message (a backtrace may follow).
            (Err(host), Err(device)) => assert_eq!(host.to_string().lines().next(), device.to_string().lines().next()),
            (Ok(host), Ok(device)) => assert_eq!(host.seqs.iter().collect::<Vec<_>>(), device.seqs.iter().collect::<Vec<_>>()),
            (host, device) => panic!("query lengths {lens_q:?}: the host says {:?}, the device path {:?}", host.err(), device.err()),
        }
    }
}

/// Issue 56: a call with `max_seqlen_k == 0` (CK launched nothing and returned zeros where the
/// CPU refuses keys in `seqlens_k`) or with no rows of q (the Triton kernels never read the
/// seqlens) has no kernel to check its side tensors. The device constructor reads them for such
/// calls and answers as the host one: the same `Err`, or the same sequences.
#[test]
fn calls_no_kernel_checks_are_checked_on_the_host_for_the_device_too() {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    let mut refused = 0;
    for _ in 0..400 {
        let batch = rng.gen_range(1..5);
        let lens_q: Vec<u32> = (0..batch).map(|_| if rng.gen_bool(0.3) { 0 } else { rng.gen_range(0..4) }).collect();
        let lens_k: Vec<u32> = (0..batch).map(|_| if rng.gen_bool(0.3) { 0 } else { rng.gen_range(0..9) }).collect();
        let (mut cu_q, cu_k) = (cumulative(&lens_q), cumulative(&lens_k));
        // Sometimes q has no rows while the seqlens say otherwise.
        let rows_q = if rng.gen_bool(0.3) { 0 } else { *cu_q.last().unwrap() as usize };
        if rows_q == 0 && rng.gen_bool(0.5) {
            cu_q.iter_mut().for_each(|c| *c = 0);
        }
        let max_q = if rng.gen_bool(0.5) { 0 } else { rng.gen_range(1..4) };
        let max_k = if rng.gen_bool(0.5) { 0 } else { rng.gen_range(1..9) };
        let (on_host, on_device) = both_constructors(rows_q, &cu_q, &cu_k, (max_q, max_k));
        let what = format!("lens q {lens_q:?} k {lens_k:?}, {rows_q} rows of q, max ({max_q}, {max_k})");
        if !(max_q == 0 || max_k == 0 || rows_q == 0) {
            continue;
        }
        refused += usize::from(on_host.is_err());
        match (on_host, on_device) {
            (Err(host), Err(device)) => assert_eq!(host.to_string().lines().next(), device.to_string().lines().next(), "{what}"),
            (Ok(host), Ok(device)) => {
                assert!(device.seqs.unread().is_none(), "{what}: the device constructor left the values unread");
                assert_eq!(host.seqs.iter().collect::<Vec<_>>(), device.seqs.iter().collect::<Vec<_>>(), "{what}");
            }
            (host, device) => panic!("{what}: the host says {:?}, the device path {:?}", host.err(), device.err()),
        }
    }
    assert!(refused > 20, "the draw refuses some calls ({refused})");
}

/// Cumulative seqlens of `lens`, from 0.
fn cumulative(lens: &[u32]) -> Vec<u32> {
    std::iter::once(0).chain(lens.iter().scan(0, |total, len| { *total += len; Some(*total) })).collect()
}

/// A varlen f16 call (2 query heads, 1 k/v head of 8) with `rows_q` rows of q, k rows to the
/// last of `cu_k`, and `(max_seqlen_q, max_seqlen_k)`, built by [`AttnCall::new`] and by
/// [`AttnCall::on_device`].
fn both_constructors(rows_q: usize, cu_q: &[u32], cu_k: &[u32], (max_q, max_k): (usize, usize)) -> (Result<AttnCall>, Result<AttnCall>) {
    let q = zeros(&[rows_q, 2, 8]);
    let k = zeros(&[*cu_k.last().unwrap() as usize, 1, 8]);
    let (cu_q, cu_k) = (Tensor::new(cu_q, &Device::Cpu).unwrap(), Tensor::new(cu_k, &Device::Cpu).unwrap());
    let varlen = VarLenRequest {
        seqlens_q: &cu_q,
        seqlens_k: &cu_k,
        max_seqlen_q: max_q,
        max_seqlen_k: max_k,
        block_table: None,
        page_block_size: None,
        mm_prefix_ranges: None,
    };
    let req = request(Some(varlen));
    let dtypes = [candle::DType::F16; 3];
    (AttnCall::new(&req, dtypes, q.layout(), k.layout(), k.layout()), AttnCall::on_device(&req, dtypes, q.layout(), k.layout(), k.layout()))
}
