//! Per-sequence lengths and offsets: uniform in batch mode, read from the cumulative seqlens in
//! varlen mode, plus the block table of a paged K/V cache.

use super::layout::Shapes;
use super::VarLenRequest;
use candle::{DType, Layout, Result, Tensor};

/// One sequence of the batch, in rows of the tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sequence {
    /// First row of this sequence in q (varlen: the global token index; batch: 0).
    pub q_start: usize,
    pub q_len: usize,
    /// First row in k/v (varlen: global token index; batch and paged: 0).
    pub k_start: usize,
    pub k_len: usize,
    /// First row of this sequence in the contiguous `(rows, h, d)` view of the output.
    pub out_row: usize,
}

/// A validated block table: logical block `n` of sequence `b` is physical block
/// `table[b * max_blocks + n]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paging {
    pub page_block_size: usize,
    pub num_blocks: usize,
    pub max_blocks: usize,
    pub table: Vec<u32>,
}

impl Paging {
    /// Physical block and slot holding key row `j` of sequence `b`.
    #[inline]
    pub fn locate(&self, b: usize, j: usize) -> (usize, usize) {
        let block = self.table[b * self.max_blocks + j / self.page_block_size] as usize;
        (block, j % self.page_block_size)
    }
}

#[derive(Debug, Clone)]
pub struct Sequences {
    list: Vec<Sequence>,
    pub paging: Option<Paging>,
}

impl Sequences {
    pub(super) fn uniform(batch: usize, seqlen_q: usize, seqlen_k: usize) -> Self {
        let list = (0..batch)
            .map(|b| Sequence {
                q_start: 0,
                q_len: seqlen_q,
                k_start: 0,
                k_len: seqlen_k,
                out_row: b * seqlen_q,
            })
            .collect();
        Self { list, paging: None }
    }

    pub(super) fn from_varlen(req: &VarLenRequest<'_>, shapes: &Shapes, k: &Layout) -> Result<Self> {
        let cu_q = read_seqlens("seqlens_q", req.seqlens_q)?;
        let cu_k = read_seqlens("seqlens_k", req.seqlens_k)?;
        if cu_q.len() != cu_k.len() {
            candle::bail!(
                "flash-attn: seqlens_q and seqlens_k must have the same length, got {} and {}",
                cu_q.len(),
                cu_k.len()
            )
        }
        let paged = req.block_table.is_some();
        check_cumulative("seqlens_q", &cu_q, shapes.rows_q, "q", req.max_seqlen_q, "max_seqlen_q")?;
        let k_rows = if paged { usize::MAX } else { shapes.rows_k };
        check_cumulative("seqlens_k", &cu_k, k_rows, "k", req.max_seqlen_k, "max_seqlen_k")?;
        let list: Vec<Sequence> = cu_q
            .windows(2)
            .zip(cu_k.windows(2))
            .map(|(q, kk)| Sequence {
                q_start: q[0] as usize,
                q_len: (q[1] - q[0]) as usize,
                k_start: if paged { 0 } else { kk[0] as usize },
                k_len: (kk[1] - kk[0]) as usize,
                out_row: q[0] as usize,
            })
            .collect();
        let paging = match req.block_table {
            Some(table) => Some(Paging::check(table, req.page_block_size, shapes, k, &list)?),
            None => None,
        };
        Ok(Self { list, paging })
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    #[inline]
    pub fn get(&self, b: usize) -> Sequence {
        self.list[b]
    }

    pub fn iter(&self) -> impl Iterator<Item = &Sequence> {
        self.list.iter()
    }
}

fn read_seqlens(name: &str, t: &Tensor) -> Result<Vec<u32>> {
    if t.dtype() != DType::U32 {
        candle::bail!("flash-attn: {name} must be u32, got {:?}", t.dtype())
    }
    if t.rank() != 1 {
        candle::bail!("flash-attn: {name} must be 1-D, got shape {:?}", t.dims())
    }
    if !t.is_contiguous() {
        candle::bail!("flash-attn: {name} must be contiguous")
    }
    if t.dim(0)? < 2 {
        candle::bail!(
            "flash-attn: {name} must hold batch_size + 1 >= 2 cumulative lengths, got {}",
            t.dim(0)?
        )
    }
    t.to_vec1::<u32>()
}

fn check_cumulative(
    name: &str,
    cu: &[u32],
    rows: usize,
    tensor: &str,
    max_len: usize,
    max_name: &str,
) -> Result<()> {
    for (b, w) in cu.windows(2).enumerate() {
        if w[1] < w[0] {
            candle::bail!(
                "flash-attn: {name} must be non-decreasing, got {} then {} at index {}",
                w[0],
                w[1],
                b + 1
            )
        }
        let len = (w[1] - w[0]) as usize;
        if len > max_len {
            candle::bail!(
                "flash-attn: sequence {b} has length {len} in {name}, longer than {max_name} = {max_len}"
            )
        }
    }
    let last = *cu.last().expect("checked len >= 2") as usize;
    if last > rows {
        candle::bail!(
            "flash-attn: {name} points past the end of {tensor}: last value {last} > {rows} rows"
        )
    }
    Ok(())
}

impl Paging {
    fn check(
        table: &Tensor,
        page_block_size: Option<usize>,
        shapes: &Shapes,
        k: &Layout,
        seqs: &[Sequence],
    ) -> Result<Self> {
        let page = shapes.page_block_size;
        match page_block_size {
            None => candle::bail!("flash-attn: paged k/v requires page_block_size"),
            Some(0) => candle::bail!("flash-attn: page_block_size must be > 0"),
            Some(p) if p != page => candle::bail!(
                "flash-attn: page_block_size {p} does not match k shape {:?} (dim 1 = {page})",
                k.dims()
            ),
            Some(_) => {}
        }
        // Read in its own dtype (a device-side cast would cost a launch on GPUs).
        let values: Vec<i64> = match table.dtype() {
            DType::U32 => table.flatten_all()?.to_vec1::<u32>()?.into_iter().map(i64::from).collect(),
            DType::I32 => table.flatten_all()?.to_vec1::<i32>()?.into_iter().map(i64::from).collect(),
            dt => candle::bail!("flash-attn: block_table must be u32 or i32, got {dt:?}"),
        };
        let (rows, max_blocks) = match table.dims() {
            &[r, c] => (r, c),
            dims => candle::bail!("flash-attn: block_table must be (batch, max_blocks), got {dims:?}"),
        };
        if rows != seqs.len() {
            candle::bail!(
                "flash-attn: block_table has {rows} rows, expected batch size {}",
                seqs.len()
            )
        }
        let num_blocks = shapes.rows_k;
        for (b, seq) in seqs.iter().enumerate() {
            let needed = seq.k_len.div_ceil(page);
            if needed > max_blocks {
                candle::bail!(
                    "flash-attn: sequence {b} has {} keys and needs {needed} blocks of {page}, block_table has {max_blocks} columns",
                    seq.k_len
                )
            }
            for (n, &id) in values[b * max_blocks..][..needed].iter().enumerate() {
                if id < 0 || id as usize >= num_blocks {
                    candle::bail!(
                        "flash-attn: block_table[{b}, {n}] = {id} is out of range for {num_blocks} k/v blocks"
                    )
                }
            }
        }
        // Entries past a sequence's last block are never read; keep them as given (clamped) so
        // the table stays rectangular.
        let table = values.iter().map(|&v| v.clamp(0, u32::MAX as i64) as u32).collect();
        Ok(Self { page_block_size: page, num_blocks, max_blocks, table })
    }
}
