// The device-side guard of the varlen / paged side tensors (src/rocm/guard.rs): one small
// kernel, queued on the caller's stream before CK's, copies the cumulative seqlens and the block
// table into scratch, replacing every value that would make CK read or write out of bounds with
// a safe one (a zero-length sequence, block 0), and records what it replaced in a flag that lives
// in mapped host memory. The host reads that flag at the next call (or in
// rocm::take_side_tensor_errors) without synchronizing: no device-to-host copy per call.
#include "flash-attn-rocm/src/rocm/ffi.rs.h"
#include "build_info.h"
#include "hip_check.h"
#include "side_tensor_clamp.h"

#include <hip/hip_runtime.h>

#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>

namespace flash_attn_rocm {
namespace {

constexpr int kGuardThreads = 256;
constexpr uint32_t kBadSeqlensQ   = static_cast<uint32_t>(SideTensorFault::SeqlensQ);
constexpr uint32_t kBadSeqlensK   = static_cast<uint32_t>(SideTensorFault::SeqlensK);
constexpr uint32_t kBadBlockTable = static_cast<uint32_t>(SideTensorFault::BlockTable);

__global__ void guard_side_tensors(CkSideTensorGuard g, uint32_t* flag)
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
        atomicOr_system(flag, bad);
}

// The process's flag word: mapped, coherent host memory the device writes and the host reads.
struct Flag
{
    uint32_t* host   = nullptr;
    uint32_t* device = nullptr;
};

Flag& flag_for_current_device()
{
    // One word per process (portable across devices), allocated on first use.
    static std::once_flag once;
    static Flag flag;
    static std::string error;
    std::call_once(once, [] {
        void* host = nullptr;
        hipError_t status = hipHostMalloc(&host,
                                          sizeof(uint32_t),
                                          hipHostMallocMapped | hipHostMallocCoherent |
                                              hipHostMallocPortable);
        if(status != hipSuccess)
        {
            error = std::string("hipHostMalloc: ") + hipGetErrorName(status);
            return;
        }
        *static_cast<volatile uint32_t*>(host) = 0;
        flag.host = static_cast<uint32_t*>(host);
    });
    if(flag.host == nullptr)
        throw std::runtime_error("flash-attn-rocm: cannot allocate the side-tensor error flag (" +
                                 error + ")");
    void* device = nullptr;
    check_hip(hipHostGetDevicePointer(&device, flag.host, 0), "hipHostGetDevicePointer");
    flag.device = static_cast<uint32_t*>(device);
    return flag;
}

} // namespace

void ck_guard_side_tensors(const CkSideTensorGuard& guard)
{
    Flag& flag = flag_for_current_device();
    // hipLaunchKernel returns the launch's own status, so no last-error slot is read (an error
    // of earlier work is not this launch's; hip_check.h). It copies the arguments at the call.
    CkSideTensorGuard guard_arg = guard;
    uint32_t* flag_arg          = flag.device;
    void* args[]                = {&guard_arg, &flag_arg};
    launch_kernel(reinterpret_cast<const void*>(&guard_side_tensors),
                  dim3(1),
                  dim3(kGuardThreads),
                  args,
                  0,
                  reinterpret_cast<hipStream_t>(guard.stream),
                  "side-tensor guard launch");
}

uint32_t ck_take_side_tensor_errors()
{
    Flag& flag = flag_for_current_device();
    return __atomic_exchange_n(flag.host, 0u, __ATOMIC_ACQ_REL);
}

} // namespace flash_attn_rocm
