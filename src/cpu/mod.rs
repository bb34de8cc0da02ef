//! The CPU backend: a tiled flash-attention forward with the online softmax, f32 accumulation,
//! parallel (rayon) over batch × heads × query blocks.

mod block;
mod element;
mod exp;
mod mask;

use crate::params::AttnCall;
use block::{run_block, BlockId, Inputs, BLOCK_M};
use candle::backend::BackendStorage;
use candle::{CpuStorage, Result};
use element::Element;

use rayon::prelude::*;

pub use block::{BLOCK_M as QUERY_BLOCK, BLOCK_N as KEY_BLOCK};

/// Runs `call` on host storages. Returns the output (q's dtype, contiguous in q's shape) and,
/// when asked, the f32 log-sum-exp laid out as [`AttnCall::lse_dims`].
pub fn forward(
    call: &AttnCall,
    q: &CpuStorage,
    k: &CpuStorage,
    v: &CpuStorage,
    want_lse: bool,
) -> Result<(CpuStorage, Option<Vec<f32>>)> {
    let alibi: Option<Vec<f32>> = match &call.alibi {
        Some(a) => Some(a.slopes.to_vec1()?),
        None => None,
    };
    let prefix = match &call.mm_prefix {
        Some(p) => Some(p.read()?),
        None => None,
    };
    macro_rules! run {
        ($variant:ident) => {{
            let (CpuStorage::$variant(q), CpuStorage::$variant(k), CpuStorage::$variant(v)) = (q, k, v) else {
                candle::bail!("flash-attn: q, k and v storages must share one dtype")
            };
            let inputs = Inputs {
                call,
                q,
                k,
                v,
                alibi_slopes: alibi.as_deref(),
                prefix_ranges: prefix.as_deref(),
            };
            let (out, lse) = run_all(&inputs, want_lse)?;
            (CpuStorage::$variant(out), lse)
        }};
    }
    Ok(match q {
        CpuStorage::F32(_) => run!(F32),
        CpuStorage::F16(_) => run!(F16),
        CpuStorage::BF16(_) => run!(BF16),
        other => candle::bail!("flash-attn: unsupported dtype {:?} on the cpu", other.dtype()),
    })
}

fn blocks(call: &AttnCall) -> Vec<BlockId> {
    let mut ids = Vec::new();
    for (b, seq) in call.seqs.iter().enumerate() {
        for h in 0..call.num_heads {
            for i0 in (0..seq.q_len).step_by(BLOCK_M) {
                ids.push(BlockId { b, h, i0, rows: BLOCK_M.min(seq.q_len - i0) });
            }
        }
    }
    ids
}

/// A raw output pointer shared by the blocks, each of which writes disjoint rows.
#[derive(Clone, Copy)]
struct SharedMut<T>(*mut T);
// SAFETY: blocks write pairwise disjoint elements (distinct (b, h, row) triples), so sending the
// pointer to other threads cannot create overlapping writes.
unsafe impl<T> Send for SharedMut<T> {}
// SAFETY: as above; the pointer is only written through at disjoint offsets.
unsafe impl<T> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    /// A method (not field access) so closures capture the whole `Sync` wrapper.
    fn ptr(&self) -> *mut T {
        self.0
    }
}

/// `len` copies of `value`, or an `Err` when the memory cannot be had: an output too large to
/// allocate (a broadcast q of 2^37 rows, say) must not abort the process.
fn filled<T: Clone>(len: Option<usize>, value: T, what: &str) -> Result<Vec<T>> {
    let len = len.ok_or_else(|| candle::Error::Msg(format!("flash-attn: the {what} size overflows usize")))?;
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|e| candle::Error::Msg(format!("flash-attn: cannot allocate the {what} ({len} elements): {e}")))?;
    v.resize(len, value);
    Ok(v)
}

fn run_all<T: Element>(inp: &Inputs<'_, T>, want_lse: bool) -> Result<(Vec<T>, Option<Vec<f32>>)> {
    let call = inp.call;
    let d = call.head_dim;
    let out_len = call.total_q.checked_mul(call.num_heads).and_then(|n| n.checked_mul(d));
    let mut out = filled(out_len, T::from_f32(0.0), "output")?;
    let mut lse = if want_lse {
        filled(call.lse_dims().iter().try_fold(1usize, |n, &x| n.checked_mul(x)), f32::NEG_INFINITY, "LSE")?
    } else {
        Vec::new()
    };
    let out_ptr = SharedMut(out.as_mut_ptr());
    let lse_ptr = SharedMut(lse.as_mut_ptr());
    let (out_len, lse_len) = (out.len(), lse.len());
    blocks(call).into_par_iter().for_each(|id| {
        let res = run_block(inp, id);
        for r in 0..id.rows {
            let at = call.out_offset(id.b, id.h, id.i0 + r);
            assert!(at + d <= out_len);
            // SAFETY: `at + d <= out_len` (checked), and no other block writes row
            // (b, h, i0 + r): blocks partition the (b, h, row) space.
            let dst = unsafe { std::slice::from_raw_parts_mut(out_ptr.ptr().add(at), d) };
            for (o, x) in dst.iter_mut().zip(&res.out[r * d..(r + 1) * d]) {
                *o = T::from_f32(*x);
            }
            if want_lse {
                let li = call.lse_index(id.b, id.h, id.i0 + r);
                assert!(li < lse_len);
                // SAFETY: in bounds (checked) and written by this block only, as above.
                unsafe { *lse_ptr.ptr().add(li) = res.lse[r] };
            }
        }
    });
    Ok((out, want_lse.then_some(lse)))
}

