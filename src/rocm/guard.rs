//! The device-side guard of varlen/paged side tensors on the CK path: no host round trip per
//! call, and still no out-of-range index reaching CK.
//!
//! A call built with [`AttnCall::on_device`] leaves its cumulative seqlens and block table on
//! the GPU. Before CK's kernel, the guard kernel (csrc/side_tensor_guard.cpp) runs on the same
//! stream: it copies them into scratch ([`guard_scratch_len`]), replacing each value that would
//! make CK index out of bounds (a cumulative seqlen that steps back, passes the rows of q or k,
//! or makes a sequence longer than max_seqlen_q/k or than its block-table row holds: that
//! sequence becomes empty; a block id outside the cache: block 0, as the Triton kernels read it),
//! and sets a bit in the call's fault word (`DeviceBuffers::fault`, mapped host memory, shared
//! with the Triton kernels). CK reads the copies. The word is read without synchronizing by the
//! same thread's next call on that stream, which then fails with an `Err` naming the tensor (the
//! call that had the bad values has already returned `Ok`), or explicitly by
//! [`crate::take_gpu_faults`] after a synchronize.
use super::ffi::CkSideTensorGuard;
use crate::device::DeviceBuffers;
use crate::params::{AttnCall, Mode};
use candle::Result;

/// i32 elements of the guard's scratch for `call`: both seqstart copies (`batch + 1` each)
/// and, for paged calls, the contiguous table copy (`batch x max_blocks`).
pub fn guard_scratch_len(call: &AttnCall) -> usize {
    let table = call.seqs.paging.as_ref().map_or(0, |p| call.batch * p.max_blocks);
    2 * (call.batch + 1) + table
}

/// The guard's arguments for a varlen or paged `call` whose side tensors are at `buffers`
/// (`seqstart_q/k`, `block_table` with its row stride), writing to the i32 scratch at
/// `scratch` ([`guard_scratch_len`] elements); `None` for batch-mode calls (no side tensors).
pub fn guard_params(call: &AttnCall, buffers: &DeviceBuffers, scratch: usize) -> Result<Option<CkSideTensorGuard>> {
    if call.mode == Mode::Batch {
        return Ok(None);
    }
    if buffers.fault == 0 {
        candle::bail!("flash-attn-rocm: the side-tensor guard reports to a fault word: pass the one Driver::queue_with_fault_word gives the call")
    }
    let int = |what: &str, v: usize| {
        i32::try_from(v).map_err(|_| candle::Error::Msg(format!("flash-attn-rocm: {what} = {v} exceeds CK's 32-bit indexing")))
    };
    let elem = std::mem::size_of::<i32>();
    let rows_k = match call.seqs.unread() {
        Some(unread) => unread.rows_k,
        None => call.seqs.iter().map(|s| s.k_start + s.k_len).max().unwrap_or(0),
    };
    let paging = call.seqs.paging.as_ref();
    Ok(Some(CkSideTensorGuard {
        seqstart_q_in: buffers.seqstart_q,
        seqstart_k_in: buffers.seqstart_k,
        block_table_in: if paging.is_some() { buffers.block_table } else { 0 },
        block_table_row_stride: int("block table row stride", buffers.block_table_row_stride)?,
        seqstart_q_out: scratch,
        seqstart_k_out: scratch + (call.batch + 1) * elem,
        block_table_out: if paging.is_some() { scratch + 2 * (call.batch + 1) * elem } else { 0 },
        batch: int("batch", call.batch)?,
        rows_q: int("rows of q", call.total_q)?,
        // Paged seqlens count keys in pages, not rows of k.
        rows_k: if paging.is_some() { i32::MAX } else { int("rows of k", rows_k)? },
        max_seqlen_q: int("max_seqlen_q", call.max_seqlen_q)?,
        max_seqlen_k: int("max_seqlen_k", call.max_seqlen_k)?,
        num_blocks: int("k/v blocks", paging.map_or(0, |p| p.num_blocks))?,
        max_blocks: int("block table columns", paging.map_or(0, |p| p.max_blocks))?,
        page_block_size: int("page_block_size", paging.map_or(0, |p| p.page_block_size))?,
        stream: buffers.stream,
        fault: buffers.fault,
    }))
}

/// `buffers` pointing CK at the guard's copies instead of the caller's side tensors.
pub fn guarded_buffers(buffers: &DeviceBuffers, guard: &CkSideTensorGuard) -> DeviceBuffers {
    let paged = guard.block_table_in != 0;
    DeviceBuffers {
        seqstart_q: guard.seqstart_q_out,
        seqstart_k: guard.seqstart_k_out,
        block_table: if paged { guard.block_table_out } else { buffers.block_table },
        block_table_row_stride: if paged { guard.max_blocks as usize } else { buffers.block_table_row_stride },
        ..*buffers
    }
}

/// Queues the guard kernel for `guard` on its stream.
///
/// # Safety
/// As `ck_guard_side_tensors` in [`super::ffi`]: the input and scratch pointers are live
/// device arrays of the sizes `guard` names, on the current device, until the stream ran it.
#[cfg(flash_attn_rocm_ck)]
pub unsafe fn guard_side_tensors(guard: &CkSideTensorGuard) -> Result<()> {
    // SAFETY: the caller upholds the contract above, which is the shim's.
    unsafe { super::ffi::bridge::ck_guard_side_tensors(guard) }.map_err(|e| candle::Error::Msg(e.what().to_string()))
}

/// Queues the guard kernel: in a build without CK, always an `Err` (the shim was not built).
///
/// # Safety
/// As for the CK build's `guard_side_tensors`; this one touches nothing.
#[cfg(not(flash_attn_rocm_ck))]
pub unsafe fn guard_side_tensors(_guard: &CkSideTensorGuard) -> Result<()> {
    candle::bail!("flash-attn-rocm: the side-tensor guard is part of the CK shim, which this build does not have")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::{Request, VarLenRequest};
    use candle::{DType, Device, Tensor};

    fn varlen_call(lens: &[(u32, u32)], paged: Option<usize>, read: bool) -> AttnCall {
        let dev = &Device::Cpu;
        let cu = |f: fn(&(u32, u32)) -> u32| {
            let v: Vec<u32> = std::iter::once(0).chain(lens.iter().scan(0, |a, l| { *a += f(l); Some(*a) })).collect();
            Tensor::new(v, dev).unwrap()
        };
        let (sq, sk) = (cu(|l| l.0), cu(|l| l.1));
        let total_q = lens.iter().map(|l| l.0 as usize).sum::<usize>();
        let total_k = lens.iter().map(|l| l.1 as usize).sum::<usize>();
        let max_k = lens.iter().map(|l| l.1 as usize).max().unwrap();
        let page = paged.unwrap_or(1);
        let max_blocks = max_k.div_ceil(page) + 1;
        let table = Tensor::zeros((lens.len(), max_blocks), DType::I32, dev).unwrap();
        let varlen = VarLenRequest {
            seqlens_q: &sq,
            seqlens_k: &sk,
            max_seqlen_q: lens.iter().map(|l| l.0 as usize).max().unwrap(),
            max_seqlen_k: max_k,
            block_table: paged.map(|_| &table),
            page_block_size: paged,
            mm_prefix_ranges: None,
        };
        let req = Request { softmax_scale: 0.1, alibi_slopes: None, window_size_left: None, window_size_right: None, softcap: None, varlen: Some(varlen) };
        let q = Tensor::zeros((total_q, 4, 64), DType::F16, dev).unwrap();
        let kv = match paged {
            Some(p) => Tensor::zeros((7, p, 2, 64), DType::F16, dev).unwrap(),
            None => Tensor::zeros((total_k + 5, 2, 64), DType::F16, dev).unwrap(),
        };
        let build = if read { AttnCall::new } else { AttnCall::on_device };
        build(&req, [DType::F16; 3], q.layout(), kv.layout(), kv.layout()).unwrap()
    }

    const BUFFERS: DeviceBuffers = DeviceBuffers {
        q: 0x1000,
        k: 0x2000,
        v: 0x3000,
        out: 0x4000,
        lse: 0,
        alibi_slopes: 0,
        seqstart_q: 0x5000,
        seqstart_k: 0x6000,
        block_table: 0x7000,
        block_table_row_stride: 9,
        lse_acc: 0,
        o_acc: 0,
        mm_prefix: 0,
        mm_prefix_row_stride: 0,
        stream: 0x8000,
        fault: 0xa000,
    };

    #[test]
    fn varlen_guard_copies_seqstarts_and_bounds_them_by_the_shapes() {
        let mut seed = 0x853c49e6748fea9bu64;
        for _ in 0..200 {
            let mut next = |m: u32| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed % m as u64) as u32
            };
            let lens: Vec<(u32, u32)> = (0..1 + next(6)).map(|_| (1 + next(40), next(300))).collect();
            let lens = if lens.iter().all(|l| l.1 == 0) { vec![(1, 1)] } else { lens };
            let call = varlen_call(&lens, None, false);
            assert!(call.seqs.unread().is_some() && call.seqs.iter().next().is_none());
            let b = lens.len();
            assert_eq!(guard_scratch_len(&call), 2 * (b + 1));
            let g = guard_params(&call, &BUFFERS, 0x9000).unwrap().unwrap();
            let total_q: u32 = lens.iter().map(|l| l.0).sum();
            let total_k: u32 = lens.iter().map(|l| l.1).sum();
            assert_eq!((g.batch, g.rows_q, g.rows_k), (b as i32, total_q as i32, total_k as i32 + 5));
            assert_eq!((g.seqstart_q_in, g.seqstart_k_in, g.block_table_in), (0x5000, 0x6000, 0));
            assert_eq!((g.seqstart_q_out, g.seqstart_k_out), (0x9000, 0x9000 + 4 * (b + 1)));
            assert_eq!(g.fault, 0xa000, "the guard reports to the call's fault word");
            let guarded = guarded_buffers(&BUFFERS, &g);
            assert_eq!((guarded.seqstart_q, guarded.seqstart_k, guarded.q, guarded.stream), (0x9000, 0x9000 + 4 * (b + 1), 0x1000, 0x8000));
            // The same call read on the host bounds k by the last seqlen instead of k's rows.
            let read = guard_params(&varlen_call(&lens, None, true), &BUFFERS, 0x9000).unwrap().unwrap();
            assert_eq!(read.rows_k, total_k as i32);
        }
    }

    #[test]
    fn paged_guard_copies_the_table_contiguously() {
        let call = varlen_call(&[(1, 300), (2, 40)], Some(128), false);
        let g = guard_params(&call, &BUFFERS, 0x9000).unwrap().unwrap();
        let max_blocks = 300usize.div_ceil(128) + 1;
        assert_eq!(guard_scratch_len(&call), 2 * 3 + 2 * max_blocks);
        assert_eq!((g.block_table_in, g.block_table_row_stride, g.block_table_out), (0x7000, 9, 0x9000 + 4 * 6));
        assert_eq!((g.num_blocks, g.max_blocks, g.page_block_size, g.rows_k), (7, max_blocks as i32, 128, i32::MAX));
        let guarded = guarded_buffers(&BUFFERS, &g);
        assert_eq!((guarded.block_table, guarded.block_table_row_stride), (0x9000 + 24, max_blocks));
    }

    #[test]
    fn unread_calls_accept_values_that_read_calls_refuse() {
        // Out-of-range values are the guard's business on the device: the shape check passes.
        let dev = &Device::Cpu;
        let bad = Tensor::new(&[0u32, 50, 10], dev).unwrap();
        let varlen = VarLenRequest {
            seqlens_q: &bad,
            seqlens_k: &bad,
            max_seqlen_q: 8,
            max_seqlen_k: 8,
            block_table: None,
            page_block_size: None,
            mm_prefix_ranges: None,
        };
        let req = Request { softmax_scale: 0.1, alibi_slopes: None, window_size_left: None, window_size_right: None, softcap: None, varlen: Some(varlen) };
        let t = Tensor::zeros((12, 2, 64), DType::F16, dev).unwrap();
        assert!(AttnCall::new(&req, [DType::F16; 3], t.layout(), t.layout(), t.layout()).is_err());
        let call = AttnCall::on_device(&req, [DType::F16; 3], t.layout(), t.layout(), t.layout()).unwrap();
        assert_eq!(call.batch, 2);
        // Shapes are still checked.
        let short = Tensor::new(&[0u32, 4], dev).unwrap();
        let req = Request { varlen: Some(VarLenRequest { seqlens_k: &short, ..varlen }), ..req };
        assert!(AttnCall::on_device(&req, [DType::F16; 3], t.layout(), t.layout(), t.layout()).is_err());
    }

    /// The bits the guard sets are those the shared decoding names.
    #[test]
    fn the_guards_fault_bits_are_the_shared_ones() {
        use crate::params::faults;
        use crate::rocm::SideTensorFault;
        assert_eq!(
            [SideTensorFault::SeqlensQ.repr, SideTensorFault::SeqlensK.repr, SideTensorFault::BlockTable.repr],
            [faults::SEQLENS_Q, faults::SEQLENS_K, faults::BLOCK_TABLE]
        );
    }
}
