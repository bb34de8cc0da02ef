// The device-side guard of the varlen / paged side tensors (src/rocm/guard.rs): one small
// kernel, queued on the caller's stream before CK's, copies the cumulative seqlens and the block
// table into scratch, replacing every value that would make CK read or write out of bounds with
// a safe one (a zero-length sequence, block 0), and records what it replaced in the calling
// thread's fault slot for the stream (mapped host memory, gpu::Driver::fault_slot), which the
// Triton kernels report to too. The host reads it at that thread's next call on the stream (or
// in take_gpu_faults) without synchronizing: no device-to-host copy per call.
#include "flash-attn-rocm/src/rocm/ffi.rs.h"
#include "build_info.h"
#include "hip_check.h"
#include "side_tensor_clamp.h"

#include <hip/hip_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace flash_attn_rocm {
namespace {

constexpr int kGuardThreads = 256;
constexpr uint32_t kBadSeqlensQ   = static_cast<uint32_t>(SideTensorFault::SeqlensQ);
constexpr uint32_t kBadSeqlensK   = static_cast<uint32_t>(SideTensorFault::SeqlensK);
constexpr uint32_t kBadBlockTable = static_cast<uint32_t>(SideTensorFault::BlockTable);

__global__ void guard_side_tensors(CkSideTensorGuard g)
{
    __shared__ uint32_t seq_bad;
    auto seqstart_q = reinterpret_cast<const int32_t*>(g.seqstart_q_in);
    auto seqstart_k = reinterpret_cast<const int32_t*>(g.seqstart_k_in);
    auto q_out      = reinterpret_cast<int32_t*>(g.seqstart_q_out);
    auto k_out      = reinterpret_cast<int32_t*>(g.seqstart_k_out);
    if(threadIdx.x == 0)
    {
        const bool paged        = g.block_table_in != 0;
        const int32_t max_len_k = paged ? paged_max_len(g.max_seqlen_k, g.max_blocks, g.page_block_size)
                                        : g.max_seqlen_k;
        const bool bad_q = clamp_cumulative(seqstart_q, q_out, g.batch, g.rows_q, g.max_seqlen_q);
        const bool bad_k = clamp_cumulative(seqstart_k, k_out, g.batch, g.rows_k, max_len_k);
        seq_bad          = (bad_q ? kBadSeqlensQ : 0u) | (bad_k ? kBadSeqlensK : 0u);
    }
    __syncthreads();
    uint32_t bad = threadIdx.x == 0 ? seq_bad : 0;
    if(g.block_table_in != 0)
    {
        // Every entry is copied; entries a sequence reads must name an existing block.
        auto table_in  = reinterpret_cast<const int32_t*>(g.block_table_in);
        auto table_out = reinterpret_cast<int32_t*>(g.block_table_out);
        bool bad_table = false;
        for(int32_t i = threadIdx.x; i < g.batch * g.max_blocks; i += blockDim.x)
        {
            const int32_t b = i / g.max_blocks, n = i % g.max_blocks;
            const int32_t id = table_in[b * g.block_table_row_stride + n];
            table_out[i]     = clamp_block_id(
                id, g.num_blocks, n, k_out[b + 1] - k_out[b], g.page_block_size, &bad_table);
        }
        if(bad_table)
            bad |= kBadBlockTable;
    }
    if(bad != 0)
        atomicOr_system(reinterpret_cast<uint32_t*>(g.fault), bad);
}

} // namespace

void ck_guard_side_tensors(const CkSideTensorGuard& guard)
{
    if(guard.fault == 0)
        throw std::invalid_argument("flash-attn-rocm: the side-tensor guard needs a fault slot");
    // hipLaunchKernel returns the launch's own status, so no last-error slot is read (an error
    // of earlier work is not this launch's; hip_check.h). It copies the arguments at the call.
    CkSideTensorGuard guard_arg = guard;
    void* args[]                = {&guard_arg};
    launch_kernel(reinterpret_cast<const void*>(&guard_side_tensors),
                  dim3(1),
                  dim3(kGuardThreads),
                  args,
                  0,
                  reinterpret_cast<hipStream_t>(guard.stream),
                  "side-tensor guard launch");
}

} // namespace flash_attn_rocm
