//! The fault bits that the GPU kernels of both families set in a call's fault word for side
//! tensors they found out of range (the Triton kernels, kernels/attention.py; CK's side-tensor
//! guard, csrc/side_tensor_guard.cpp, whose bits cross the bridge as `rocm::SideTensorFault`),
//! and the error a later call makes of them.

use candle::Result;

/// Cumulative `seqlens_q` out of range.
pub const SEQLENS_Q: u32 = 1;
/// Cumulative `seqlens_k` out of range.
pub const SEQLENS_K: u32 = 2;
/// A block id outside the k/v cache.
pub const BLOCK_TABLE: u32 = 4;

/// `Ok` for no fault bits, else an `Err` naming the side tensors that an earlier call of this
/// thread (CK's guard or the Triton kernels) found out of range.
pub fn faults_to_result(bits: u32) -> Result<()> {
    if bits == 0 {
        return Ok(());
    }
    let names = [
        (SEQLENS_Q, "seqlens_q (steps back, passes the rows of q, or a sequence longer than max_seqlen_q)"),
        (SEQLENS_K, "seqlens_k (steps back, passes the rows of k, or a sequence longer than max_seqlen_k or its block-table row)"),
        (BLOCK_TABLE, "block_table (a block id outside the k/v cache)"),
    ];
    let found: Vec<&str> = names.iter().filter(|(bit, _)| bits & bit != 0).map(|(_, n)| *n).collect();
    let mut replaced = Vec::new();
    if bits & (SEQLENS_Q | SEQLENS_K) != 0 {
        replaced.push("a sequence whose bounds were out of range was computed as empty");
    }
    if bits & BLOCK_TABLE != 0 {
        replaced.push("a block id outside the cache read block 0");
    }
    candle::bail!(
        "flash-attn-rocm: an earlier call of this thread (not this one) had out-of-range values in {}; the kernels \
         replaced them ({}: discard that call's output) and this call was not run",
        found.join(" and "),
        replaced.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_bits_name_their_tensors() {
        faults_to_result(0).unwrap();
        let err = faults_to_result(SEQLENS_K | BLOCK_TABLE).unwrap_err().to_string();
        assert!(err.contains("seqlens_k") && err.contains("block_table") && !err.contains("seqlens_q"), "{err}");
        assert!(err.contains("earlier call"), "{err}");
        // A block-table fault alone names no seqlens (the GPU suite checks so).
        let err = faults_to_result(BLOCK_TABLE).unwrap_err().to_string();
        assert!(err.contains("block_table") && !err.contains("seqlens"), "{err}");
    }
}
