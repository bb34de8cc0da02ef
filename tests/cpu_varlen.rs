//! Parity of the varlen and paged functions against the f64 reference: ragged lengths (with
//! empty sequences), windows, ALiBi, softcap, shuffled block tables and mm prefix ranges.

mod common;

use candle::{DType, Device, IndexOp, Tensor};
use common::*;
use flash_attn_rocm as fa;
use rand::seq::SliceRandom;
use rand::Rng;

struct Ragged {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    lens: Vec<(usize, usize)>,
    cu_q: Vec<u32>,
    cu_k: Vec<u32>,
}

fn cumulative(lens: impl Iterator<Item = usize>) -> Vec<u32> {
    std::iter::once(0).chain(lens.scan(0u32, |acc, l| { *acc += l as u32; Some(*acc) })).collect()
}

fn ragged(rng: &mut rand::rngs::StdRng, lens: &[(usize, usize)], h: usize, h_k: usize, d: usize, dtype: DType) -> Ragged {
    let cu_q = cumulative(lens.iter().map(|l| l.0));
    let cu_k = cumulative(lens.iter().map(|l| l.1));
    let (tq, tk) = (*cu_q.last().unwrap() as usize, *cu_k.last().unwrap() as usize);
    Ragged {
        q: randn(rng, &[tq, h, d], dtype),
        k: randn(rng, &[tk, h_k, d], dtype),
        v: randn(rng, &[tk, h_k, d], dtype),
        lens: lens.to_vec(),
        cu_q,
        cu_k,
    }
}

fn seq_data(x: &Ragged, b: usize) -> SeqData {
    let (q0, k0) = (x.cu_q[b] as usize, x.cu_k[b] as usize);
    let (s_q, s_k) = x.lens[b];
    SeqData {
        q: values(&x.q.narrow(0, q0, s_q).unwrap()),
        k: values(&x.k.narrow(0, k0, s_k).unwrap()),
        v: values(&x.v.narrow(0, k0, s_k).unwrap()),
        s_q,
        s_k,
    }
}

/// Reference over all sequences: out `(total_q, h, d)` and lse `(h, total_q)`, flattened.
fn expected(seqs: &[SeqData], opts: &[RefOpts], h: usize, h_k: usize, d: usize, p: Precision) -> (Vec<f64>, Vec<f64>) {
    let total_q: usize = seqs.iter().map(|s| s.s_q).sum();
    let mut out = Vec::new();
    let mut lse = vec![0.0; h * total_q];
    let mut row0 = 0;
    for (seq, o) in seqs.iter().zip(opts) {
        let (so, sl) = reference(seq, h, h_k, d, o, p);
        out.extend(so);
        for head in 0..h {
            lse[head * total_q + row0..][..seq.s_q].copy_from_slice(&sl[head * seq.s_q..][..seq.s_q]);
        }
        row0 += seq.s_q;
    }
    (out, lse)
}

fn u32s(v: &[u32]) -> Tensor {
    Tensor::new(v, &Device::Cpu).unwrap()
}

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
            let x = ragged(&mut rng, &LENS, h, h_k, d, dtype);
            let (max_q, max_k) = (64 + n % 3, 64 + n % 5);
            let slopes = alibi.then(|| (randn(&mut rng, &[h], DType::F32).abs().unwrap() * 0.2).unwrap());
            let scale = 1.0 / (d as f32).sqrt();
            let opts = RefOpts {
                scale: scale as f64,
                softcap: softcap.map(f64::from),
                alibi: slopes.as_ref().map(values),
                window_left: left,
                window_right: right,
                max_seqlen_k: max_k,
                mm_prefix: vec![],
            };
            let (sq, sk) = (u32s(&x.cu_q), u32s(&x.cu_k));
            let causal = left.is_none() && right == Some(0);
            let plain = left.is_none() && (right.is_none() || causal);
            let out = match (&slopes, softcap) {
                (s, Some(c)) => fa::flash_attn_varlen_alibi_windowed_softcap(&x.q, &x.k, &x.v, s.as_ref(), &sq, &sk, max_q, max_k, scale, left, right, c),
                (Some(s), None) if plain => fa::flash_attn_varlen_alibi(&x.q, &x.k, &x.v, s, &sq, &sk, max_q, max_k, scale, causal),
                (Some(s), None) => fa::flash_attn_varlen_alibi_windowed(&x.q, &x.k, &x.v, s, &sq, &sk, max_q, max_k, scale, left, right),
                (None, None) if plain => fa::flash_attn_varlen(&x.q, &x.k, &x.v, &sq, &sk, max_q, max_k, scale, causal),
                (None, None) => fa::flash_attn_varlen_windowed(&x.q, &x.k, &x.v, &sq, &sk, max_q, max_k, scale, left, right),
            }
            .unwrap();
            let seqs: Vec<SeqData> = (0..LENS.len()).map(|b| seq_data(&x, b)).collect();
            let all_opts = vec![opts; LENS.len()];
            let (exact, exact_lse) = expected(&seqs, &all_opts, h, h_k, d, Precision::Exact);
            let (naive, _) = expected(&seqs, &all_opts, h, h_k, d, Precision::Naive(dtype));
            let what = format!("varlen {dtype:?} h={h} h_k={h_k} d={d} window=({left:?},{right:?}) alibi={alibi} softcap={softcap:?}");
            assert_eq!(out.dims(), x.q.dims());
            assert_close(&what, &values(&out), &exact, &naive, dtype);

            let (out2, lse) = fa::flash_attn_varlen_with_lse(&x.q, &x.k, &x.v, slopes.as_ref(), &sq, &sk, max_q, max_k, scale, left, right, softcap).unwrap();
            assert_eq!(values(&out2), values(&out), "{what}: with_lse output");
            assert_eq!(lse.dims(), &[h, x.q.dim(0).unwrap()]);
            assert_lse_close(&what, &values(&lse), &exact_lse, 1e-4);
        }
    }
}

/// Scatters each sequence's logical k/v rows into shuffled physical pages.
struct Paged {
    k_pages: Tensor,
    v_pages: Tensor,
    table: Tensor,
}

fn paginate(rng: &mut rand::rngs::StdRng, x: &Ragged, page: usize, spare_blocks: usize) -> Paged {
    let blocks_per_seq: Vec<usize> = x.lens.iter().map(|l| l.1.div_ceil(page)).collect();
    let max_blocks = blocks_per_seq.iter().copied().max().unwrap().max(1);
    let num_blocks = blocks_per_seq.iter().sum::<usize>() + spare_blocks;
    let mut ids: Vec<u32> = (0..num_blocks as u32).collect();
    ids.shuffle(rng);
    let (h_k, d) = (x.k.dim(1).unwrap(), x.k.dim(2).unwrap());
    let dtype = x.k.dtype();
    // Unused slots hold garbage that must never be read.
    let mut k_pages = randn(rng, &[num_blocks, page, h_k, d], dtype);
    let mut v_pages = randn(rng, &[num_blocks, page, h_k, d], dtype);
    let mut table = vec![0u32; x.lens.len() * max_blocks];
    let mut next = ids.into_iter();
    for (b, &nb) in blocks_per_seq.iter().enumerate() {
        for n in 0..max_blocks {
            table[b * max_blocks + n] = if n < nb { next.next().unwrap() } else { rng.gen_range(0..num_blocks as u32) };
        }
        let k0 = x.cu_k[b] as usize;
        for n in 0..nb {
            let rows = page.min(x.lens[b].1 - n * page);
            let block = table[b * max_blocks + n] as usize;
            let src_k = x.k.narrow(0, k0 + n * page, rows).unwrap().unsqueeze(0).unwrap();
            let src_v = x.v.narrow(0, k0 + n * page, rows).unwrap().unsqueeze(0).unwrap();
            k_pages = k_pages.slice_assign(&[block..block + 1, 0..rows, 0..h_k, 0..d], &src_k).unwrap();
            v_pages = v_pages.slice_assign(&[block..block + 1, 0..rows, 0..h_k, 0..d], &src_v).unwrap();
        }
    }
    let table = Tensor::from_vec(table, (x.lens.len(), max_blocks), &Device::Cpu).unwrap();
    Paged { k_pages, v_pages, table }
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
                let x = ragged(&mut rng, &lens, h, h_k, d, dtype);
                let p = paginate(&mut rng, &x, page, 3);
                let (left, right) = if n % 2 == 0 { (None, Some(0)) } else { (Some(12), Some(0)) };
                let softcap = (n % 3 == 0).then_some(4.0f32);
                let ranges: Vec<Vec<(i64, i64)>> = lens
                    .iter()
                    .map(|&(_, sk)| if with_prefix && sk > 8 { vec![(2, 2 + sk as i64 / 2), (0, 0)] } else { vec![(0, 0), (0, 0)] })
                    .collect();
                let mm = with_prefix.then(|| {
                    let flat: Vec<i32> = ranges.iter().flatten().flat_map(|&(a, b)| [a as i32, b as i32]).collect();
                    Tensor::from_vec(flat, (lens.len(), 2, 2), &Device::Cpu).unwrap()
                });
                let (max_q, max_k) = (40, 70);
                let scale = 0.7 / (d as f32).sqrt();
                let (sq, sk) = (u32s(&x.cu_q), u32s(&x.cu_k));
                let out = fa::flash_attn_varlen_paged_windowed(
                    &x.q, &p.k_pages, &p.v_pages, &sq, &sk, &p.table, mm.as_ref(), max_q, max_k, scale, left, right, page, softcap,
                )
                .unwrap();
                let seqs: Vec<SeqData> = (0..lens.len()).map(|b| seq_data(&x, b)).collect();
                let opts: Vec<RefOpts> = ranges
                    .iter()
                    .map(|r| RefOpts {
                        scale: scale as f64,
                        softcap: softcap.map(f64::from),
                        alibi: None,
                        window_left: left,
                        window_right: right,
                        max_seqlen_k: max_k,
                        mm_prefix: if with_prefix { r.clone() } else { vec![] },
                    })
                    .collect();
                let (exact, exact_lse) = expected(&seqs, &opts, h, h_k, d, Precision::Exact);
                let (naive, _) = expected(&seqs, &opts, h, h_k, d, Precision::Naive(dtype));
                let what = format!("paged {dtype:?} page={page} prefix={with_prefix} h={h}/{h_k} d={d} window=({left:?},{right:?}) softcap={softcap:?}");
                assert_close(&what, &values(&out), &exact, &naive, dtype);
                let (_, lse) = fa::flash_attn_varlen_paged_windowed_with_lse(
                    &x.q, &p.k_pages, &p.v_pages, &sq, &sk, &p.table, mm.as_ref(), max_q, max_k, scale, left, right, page, softcap,
                )
                .unwrap();
                assert_lse_close(&what, &values(&lse), &exact_lse, 1e-4);
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
