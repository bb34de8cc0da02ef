// The clamping rules of the side-tensor guard (side_tensor_guard.cpp), as plain functions that
// compile for the device (hipcc) and for the host, where tests/cpp/side_tensor_clamp.cpp checks
// them on random inputs (.ci/rocm-check.sh builds and runs it with g++).
#pragma once

#include <cstdint>

#if defined(__HIPCC__) || defined(__HIP__)
#define FA_HOST_DEVICE __host__ __device__
#else
#define FA_HOST_DEVICE
#endif

namespace flash_attn_rocm {

// Copies the cumulative seqlens `in` (batch + 1 values) to `out`, replacing every value that
// would index out of range: the first must lie in [0, rows]; each next one must not step back,
// pass `rows` or add a sequence longer than `max_len`; a bad value repeats the previous one (an
// empty sequence). Returns whether anything was replaced.
FA_HOST_DEVICE inline bool
clamp_cumulative(const int32_t* in, int32_t* out, int32_t batch, int32_t rows, int32_t max_len)
{
    bool bad      = false;
    int32_t first = in[0];
    if(first < 0 || first > rows)
    {
        bad   = true;
        first = first < 0 ? 0 : rows;
    }
    out[0] = first;
    for(int32_t b = 0; b < batch; ++b)
    {
        const int32_t prev = out[b];
        int32_t next       = in[b + 1];
        // prev >= 0 and next <= rows are checked before the difference: no overflow.
        if(next < prev || next > rows || next - prev > max_len)
        {
            bad  = true;
            next = prev;
        }
        out[b + 1] = next;
    }
    return bad;
}

// The longest key sequence a paged call may have: max_seqlen_k, and no more than its block-table
// row holds (max_blocks x page_block_size).
FA_HOST_DEVICE inline int32_t
paged_max_len(int32_t max_seqlen_k, int32_t max_blocks, int32_t page_block_size)
{
    const int64_t capacity = int64_t(max_blocks) * page_block_size;
    return capacity < max_seqlen_k ? static_cast<int32_t>(capacity) : max_seqlen_k;
}

// A block-table entry as copied: `id` when it names one of `num_blocks` blocks, else block 0.
// `*bad` is set when the entry is out of range and read by its sequence (column < blocks needed
// for `len` keys in pages of `page_block_size`).
FA_HOST_DEVICE inline int32_t clamp_block_id(int32_t id,
                                             int32_t num_blocks,
                                             int32_t column,
                                             int32_t len,
                                             int32_t page_block_size,
                                             bool* bad)
{
    const bool in_range = id >= 0 && id < num_blocks;
    const int64_t needed = (int64_t(len) + page_block_size - 1) / page_block_size;
    if(!in_range && column < needed)
        *bad = true;
    return in_range ? id : 0;
}

} // namespace flash_attn_rocm
