//! Parity of the varlen and paged functions against the f64 reference: ragged lengths (with
//! empty sequences), windows, ALiBi, softcap, shuffled block tables and mm prefix ranges.

mod common;

use candle::{DType, Device, IndexOp, Tensor};
use common::calls::{self, Features, PagedKv, Seqlens, CAUSAL};
use common::expected::{expected, LseLayout};
use common::ragged::{paginate, ragged, u32s};
use common::*;
use flash_attn_rocm as fa;

const LENS: [(usize, usize); 5] = [(13, 40), (0, 7), (33, 20), (1, 0), (64, 64)];

#[test]
fn varlen_functions_match_reference() {
    let mut rng = rng("varlen_functions_match_reference");
    let windows = [(None, None), (None, Some(0)), (Some(9), Some(2)), (Some(30), None)];
    let mut n = 0;
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        for (h, h_k, d) in [(4, 4, 64), (6, 2, 40), (4, 1, 128)] {
            let (left, right) = windows[n % 4];
            let alibi = n % 3 == 1;
            let softcap = (n % 4 == 2).then_some(3.5f32);
            n += 1;
            let x = ragged(&mut rng, &LENS, (h, h_k, d), dtype);
            let (max_q, max_k) = (64 + n % 3, 64 + n % 5);
            let slopes = alibi.then(|| (randn(&mut rng, &[h], DType::F32).abs().unwrap() * 0.2).unwrap());
            let f = Features { scale: 1.0 / (d as f32).sqrt(), window: (left, right), alibi: slopes.as_ref(), softcap };
            let (sq, sk) = x.seqlens();
            let lens = Seqlens { q: &sq, k: &sk, max_q, max_k };
            let out = calls::varlen(&x.q, &x.k, &x.v, &lens, f).unwrap();
            let exp = expected(&x.seqs(), &vec![f.ref_opts(max_k); LENS.len()], (h, h_k, d), dtype, LseLayout::VarLen);
            let what = format!("varlen {dtype:?} h={h} h_k={h_k} d={d} window=({left:?},{right:?}) alibi={alibi} softcap={softcap:?}");
            assert_eq!(out.dims(), x.q.dims());
            assert_close(&what, &values(&out), &exp.exact, &exp.naive, dtype);

            let (out2, lse) = calls::varlen_with_lse(&x.q, &x.k, &x.v, &lens, f).unwrap();
            assert_eq!(values(&out2), values(&out), "{what}: with_lse output");
            assert_eq!(lse.dims(), &[h, x.q.dim(0).unwrap()]);
            assert_lse_close(&what, &values(&lse), &exp.exact_lse, 1e-4);
        }
    }
}

#[test]
fn paged_kv_with_shuffled_blocks_and_prefix_ranges() {
    let mut rng = rng("paged_kv_with_shuffled_blocks_and_prefix_ranges");
    let lens = [(5, 70), (0, 16), (40, 40), (1, 33), (17, 0)];
    let mut n = 0;
    for dtype in [DType::F32, DType::BF16] {
        for page in [16, 32, 7] {
            for with_prefix in [false, true] {
                let (h, h_k, d) = [(4, 2, 64), (2, 2, 32), (8, 1, 128)][n % 3];
                n += 1;
                let x = ragged(&mut rng, &lens, (h, h_k, d), dtype);
                let p = paginate(&mut rng, &x, page, 3);
                let window = if n % 2 == 0 { CAUSAL } else { (Some(12), Some(0)) };
                let softcap = (n % 3 == 0).then_some(4.0f32);
                let ranges: Vec<Vec<(i64, i64)>> = lens
                    .iter()
                    .map(|&(_, sk)| if with_prefix && sk > 8 { vec![(2, 2 + sk as i64 / 2), (0, 0)] } else { vec![(0, 0), (0, 0)] })
                    .collect();
                let mm = with_prefix.then(|| {
                    let flat: Vec<i32> = ranges.iter().flatten().flat_map(|&(a, b)| [a as i32, b as i32]).collect();
                    Tensor::from_vec(flat, (lens.len(), 2, 2), &Device::Cpu).unwrap()
                });
                let f = Features { scale: 0.7 / (d as f32).sqrt(), window, alibi: None, softcap };
                let (sq, sk) = x.seqlens();
                let sizes = Seqlens { q: &sq, k: &sk, max_q: 40, max_k: 70 };
                let kv = PagedKv { k: &p.k_pages, v: &p.v_pages, table: &p.table, page };
                let out = calls::paged(&x.q, &kv, mm.as_ref(), &sizes, f).unwrap();
                let opts: Vec<RefOpts> = ranges
                    .iter()
                    .map(|r| RefOpts { mm_prefix: if with_prefix { r.clone() } else { vec![] }, ..f.ref_opts(sizes.max_k) })
                    .collect();
                let exp = expected(&x.seqs(), &opts, (h, h_k, d), dtype, LseLayout::VarLen);
                let what = format!("paged {dtype:?} page={page} prefix={with_prefix} h={h}/{h_k} d={d} window={window:?} softcap={softcap:?}");
                assert_close(&what, &values(&out), &exp.exact, &exp.naive, dtype);
                let (_, lse) = calls::paged_with_lse(&x.q, &kv, mm.as_ref(), &sizes, f).unwrap();
                assert_lse_close(&what, &values(&lse), &exp.exact_lse, 1e-4);
            }
        }
    }
}

#[test]
fn varlen_equals_batch_for_equal_lengths() {
    let mut rng = rng("varlen_equals_batch_for_equal_lengths");
    let (b, s, h, d) = (3, 37, 4, 64);
    let q = randn(&mut rng, &[b, s, h, d], DType::F32);
    let k = randn(&mut rng, &[b, s, 2, d], DType::F32);
    let v = randn(&mut rng, &[b, s, 2, d], DType::F32);
    let batch = fa::flash_attn(&q, &k, &v, 0.125, true).unwrap();
    let cu = u32s(&[0, 37, 74, 111]);
    let flat = |t: &Tensor| t.reshape((b * s, t.dim(2).unwrap(), d)).unwrap();
    let varlen = fa::flash_attn_varlen(&flat(&q), &flat(&k), &flat(&v), &cu, &cu, s, s, 0.125, true).unwrap();
    assert_eq!(values(&varlen), values(&batch.reshape((b * s, h, d)).unwrap()));
    let _ = batch.i(0).unwrap();
}
