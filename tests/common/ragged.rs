//! Varlen inputs: ragged sequences back to back, and the same K/V scattered into pages.

use candle::{DType, Device, Tensor};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;

use super::{randn, values, SeqData};

/// Ragged sequences back to back, `(total, h, d)`, and their cumulative lengths.
pub struct Ragged {
    pub q: Tensor,
    pub k: Tensor,
    pub v: Tensor,
    pub lens: Vec<(usize, usize)>,
    pub cu_q: Vec<u32>,
    pub cu_k: Vec<u32>,
}

pub fn cumulative(lens: impl Iterator<Item = usize>) -> Vec<u32> {
    std::iter::once(0).chain(lens.scan(0u32, |acc, l| { *acc += l as u32; Some(*acc) })).collect()
}

/// Random q, k, v for sequences of `(s_q, s_k)` lengths `lens`, heads `(h, h_k, d)`.
pub fn ragged(rng: &mut StdRng, lens: &[(usize, usize)], (h, h_k, d): (usize, usize, usize), dtype: DType) -> Ragged {
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

pub fn u32s(v: &[u32]) -> Tensor {
    Tensor::new(v, &Device::Cpu).unwrap()
}

impl Ragged {
    /// Each sequence's logical data, for the reference.
    pub fn seqs(&self) -> Vec<SeqData> {
        (0..self.lens.len())
            .map(|b| {
                let (q0, k0) = (self.cu_q[b] as usize, self.cu_k[b] as usize);
                let (s_q, s_k) = self.lens[b];
                SeqData {
                    q: values(&self.q.narrow(0, q0, s_q).unwrap()),
                    k: values(&self.k.narrow(0, k0, s_k).unwrap()),
                    v: values(&self.v.narrow(0, k0, s_k).unwrap()),
                    s_q,
                    s_k,
                }
            })
            .collect()
    }

    /// `(seqlens_q, seqlens_k)`: the cumulative lengths as the varlen functions take them.
    pub fn seqlens(&self) -> (Tensor, Tensor) {
        (u32s(&self.cu_q), u32s(&self.cu_k))
    }
}

/// Paged K/V `(num_blocks, page, h_k, d)` holding each sequence's rows in shuffled blocks,
/// unused rows and spare blocks filled with values that must never be read, and the block table.
pub struct Paged {
    pub k_pages: Tensor,
    pub v_pages: Tensor,
    pub table: Tensor,
}

pub fn paginate(rng: &mut StdRng, x: &Ragged, page: usize, spare_blocks: usize) -> Paged {
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
            // Slots past the sequence's blocks point anywhere: they must not be read either.
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

/// Two `mm_prefix_ranges` pairs per sequence of `lens` (q, k): one of 1 to 39 positions from a
/// random start below the sequence's key length (it may reach past it), and an empty one.
pub fn prefix_ranges(rng: &mut StdRng, lens: &[(usize, usize)]) -> Vec<Vec<(i64, i64)>> {
    lens.iter()
        .map(|&(_, s_k)| {
            let a = rng.gen_range(0..s_k.max(1)) as i64;
            vec![(a, a + rng.gen_range(1..40)), (5, 5)]
        })
        .collect()
}
