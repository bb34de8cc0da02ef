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
    /// Query rows of this sequence (`s_q` in batch mode).
    pub q_len: usize,
    /// First row in k/v (varlen: global token index; batch and paged: 0).
    pub k_start: usize,
    /// Keys of this sequence (`s_k` in batch mode); paged: logical rows `0..k_len`, found
    /// through [`Paging::locate`].
    pub k_len: usize,
    /// First row of this sequence in the contiguous `(rows, h, d)` view of the output.
    pub out_row: usize,
}

/// A validated block table: logical block `n` of sequence `b` is physical block
/// `table[b * max_blocks + n]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paging {
    /// Key rows per physical block (k's dim 1), > 0.
    pub page_block_size: usize,
    /// Physical blocks in k/v (k's dim 0); every table entry a sequence reads is below it.
    pub num_blocks: usize,
    /// Columns of the block table: logical blocks per sequence at most.
    pub max_blocks: usize,
    /// The table, row-major `(batch, max_blocks)`, read to the host. Entries a sequence reads
    /// are checked in range; the others are kept as given (negative i32 ones clamped to 0).
    /// Empty when the call was built by [`super::AttnCall::on_device`].
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

/// The sequences of a call: one [`Sequence`] per batch entry, in order, and the block table
/// of a paged call.
///
/// Batch mode: `b` sequences of `s_q` queries and `s_k` keys. Varlen and paged: read from the
/// cumulative seqlens, unless the call was built by [`super::AttnCall::on_device`], in which
/// case only the count is known ([`Sequences::unread`]) and [`Sequences::iter`] is empty.
#[derive(Debug, Clone)]
pub struct Sequences {
    list: Vec<Sequence>,
    /// The block table, for paged K/V (`Mode::Paged`); `None` otherwise.
    pub paging: Option<Paging>,
    /// Set when the varlen values were left on the device ([`super::AttnCall::on_device`]):
    /// `list` and `paging.table` are then empty, and only the shapes were checked.
    unread: Option<UnreadSequences>,
}

/// What is known of varlen sequences whose cumulative seqlens (and block table) were not read:
/// the batch size and the rows of k (varlen) or k/v blocks (paged), from the shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnreadSequences {
    /// Number of sequences: the seqlens' length - 1.
    pub batch: usize,
    /// Rows of k/v (varlen: `total_k`), or physical K/V blocks (paged: k's dim 0).
    pub rows_k: usize,
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
        Self { list, paging: None, unread: None }
    }

    /// Varlen sequences checked by shape only: dtypes, ranks, contiguity, the seqlens' equal
    /// lengths and the block table's shape. Nothing is read, so nothing is synchronized; the
    /// values must be validated where they are used (the ROCm backend's device-side guard).
    pub(super) fn from_varlen_unread(req: &VarLenRequest<'_>, shapes: &Shapes, k: &Layout) -> Result<Self> {
        let batch = check_seqlens_tensor("seqlens_q", req.seqlens_q)? - 1;
        if check_seqlens_tensor("seqlens_k", req.seqlens_k)? != batch + 1 {
            candle::bail!(
                "flash-attn-rocm: seqlens_q and seqlens_k must have the same length, got {} and {}",
                batch + 1,
                req.seqlens_k.dim(0)?
            )
        }
        let paging = match req.block_table {
            Some(table) => {
                let page = Paging::check_page_size(req.page_block_size, shapes, k)?;
                let max_blocks = Paging::check_table_shape(table, batch)?;
                Some(Paging { page_block_size: page, num_blocks: shapes.rows_k, max_blocks, table: Vec::new() })
            }
            None => None,
        };
        Ok(Self { list: Vec::new(), paging, unread: Some(UnreadSequences { batch, rows_k: shapes.rows_k }) })
    }

    /// `Some` when the per-sequence values were left on the device (see [`UnreadSequences`]).
    pub fn unread(&self) -> Option<UnreadSequences> {
        self.unread
    }

    pub(super) fn from_varlen(req: &VarLenRequest<'_>, shapes: &Shapes, k: &Layout) -> Result<Self> {
        let cu_q = read_seqlens("seqlens_q", req.seqlens_q)?;
        let cu_k = read_seqlens("seqlens_k", req.seqlens_k)?;
        if cu_q.len() != cu_k.len() {
            candle::bail!(
                "flash-attn-rocm: seqlens_q and seqlens_k must have the same length, got {} and {}",
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
        Ok(Self { list, paging, unread: None })
    }

    /// The batch size.
    pub fn len(&self) -> usize {
        self.unread.map_or(self.list.len(), |u| u.batch)
    }

    /// True for a batch of zero sequences.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sequence `b`.
    ///
    /// # Panics
    ///
    /// When `b` is out of range, or the sequences were left unread on the device.
    #[inline]
    pub fn get(&self, b: usize) -> Sequence {
        self.list[b]
    }

    /// The sequences (none when they were left unread on the device).
    pub fn iter(&self) -> impl Iterator<Item = &Sequence> {
        self.list.iter()
    }
}

fn read_seqlens(name: &str, t: &Tensor) -> Result<Vec<u32>> {
    check_seqlens_tensor(name, t)?;
    t.to_vec1::<u32>()
}

/// Checks a cumulative seqlens tensor's dtype and shape; returns its length (batch + 1).
fn check_seqlens_tensor(name: &str, t: &Tensor) -> Result<usize> {
    if t.dtype() != DType::U32 {
        candle::bail!("flash-attn-rocm: {name} must be u32, got {:?}", t.dtype())
    }
    if t.rank() != 1 {
        candle::bail!("flash-attn-rocm: {name} must be 1-D, got shape {:?}", t.dims())
    }
    if !t.is_contiguous() {
        candle::bail!("flash-attn-rocm: {name} must be contiguous")
    }
    if t.dim(0)? < 2 {
        candle::bail!(
            "flash-attn-rocm: {name} must hold batch_size + 1 >= 2 cumulative lengths, got {}",
            t.dim(0)?
        )
    }
    t.dim(0)
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
                "flash-attn-rocm: {name} must be non-decreasing, got {} then {} at index {}",
                w[0],
                w[1],
                b + 1
            )
        }
        let len = (w[1] - w[0]) as usize;
        if len > max_len {
            candle::bail!(
                "flash-attn-rocm: sequence {b} has length {len} in {name}, longer than {max_name} = {max_len}"
            )
        }
    }
    let last = *cu.last().expect("checked len >= 2") as usize;
    if last > rows {
        candle::bail!(
            "flash-attn-rocm: {name} points past the end of {tensor}: last value {last} > {rows} rows"
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
        let page = Self::check_page_size(page_block_size, shapes, k)?;
        let max_blocks = Self::check_table_shape(table, seqs.len())?;
        // Read in its own dtype (a device-side cast would cost a launch on GPUs).
        let values: Vec<i64> = match table.dtype() {
            DType::U32 => table.flatten_all()?.to_vec1::<u32>()?.into_iter().map(i64::from).collect(),
            _ => table.flatten_all()?.to_vec1::<i32>()?.into_iter().map(i64::from).collect(),
        };
        let num_blocks = shapes.rows_k;
        for (b, seq) in seqs.iter().enumerate() {
            let needed = seq.k_len.div_ceil(page);
            if needed > max_blocks {
                candle::bail!(
                    "flash-attn-rocm: sequence {b} has {} keys and needs {needed} blocks of {page}, block_table has {max_blocks} columns",
                    seq.k_len
                )
            }
            for (n, &id) in values[b * max_blocks..][..needed].iter().enumerate() {
                if id < 0 || id as usize >= num_blocks {
                    candle::bail!(
                        "flash-attn-rocm: block_table[{b}, {n}] = {id} is out of range for {num_blocks} k/v blocks"
                    )
                }
            }
        }
        // Entries past a sequence's last block are never read; keep them as given (clamped) so
        // the table stays rectangular.
        let table = values.iter().map(|&v| v.clamp(0, u32::MAX as i64) as u32).collect();
        Ok(Self { page_block_size: page, num_blocks, max_blocks, table })
    }

    /// The request's page size, which must match k's dim 1.
    fn check_page_size(page_block_size: Option<usize>, shapes: &Shapes, k: &Layout) -> Result<usize> {
        let page = shapes.page_block_size;
        match page_block_size {
            None => candle::bail!("flash-attn-rocm: paged k/v requires page_block_size"),
            Some(0) => candle::bail!("flash-attn-rocm: page_block_size must be > 0"),
            Some(p) if p != page => candle::bail!(
                "flash-attn-rocm: page_block_size {p} does not match k shape {:?} (dim 1 = {page})",
                k.dims()
            ),
            Some(_) => Ok(page),
        }
    }

    /// The table's dtype and `(batch, max_blocks)` shape; returns `max_blocks`.
    fn check_table_shape(table: &Tensor, batch: usize) -> Result<usize> {
        if !matches!(table.dtype(), DType::U32 | DType::I32) {
            candle::bail!("flash-attn-rocm: block_table must be u32 or i32, got {:?}", table.dtype())
        }
        let (rows, max_blocks) = match table.dims() {
            &[r, c] => (r, c),
            dims => candle::bail!("flash-attn-rocm: block_table must be (batch, max_blocks), got {dims:?}"),
        };
        if rows != batch {
            candle::bail!("flash-attn-rocm: block_table has {rows} rows, expected batch size {batch}")
        }
        Ok(max_blocks)
    }
}
