// Host test of the side-tensor guard's clamping rules (csrc/side_tensor_clamp.h), on random and
// corrupted inputs. Built and run by .ci/rocm-check.sh:
//   g++ -std=c++17 -O1 -Icsrc tests/cpp/side_tensor_clamp.cpp -o clamp && ./clamp
#include "side_tensor_clamp.h"
#include "check.h"

#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

using flash_attn_rocm::clamp_block_id;
using flash_attn_rocm::clamp_cumulative;
using flash_attn_rocm::paged_max_len;


// What the kernels may rely on, stated independently of the implementation.
bool in_bounds(const std::vector<int32_t>& cu, int32_t rows, int32_t max_len)
{
    if(cu[0] < 0 || cu[0] > rows)
        return false;
    for(size_t b = 1; b < cu.size(); ++b)
        if(cu[b] < cu[b - 1] || cu[b] > rows || int64_t(cu[b]) - cu[b - 1] > max_len)
            return false;
    return true;
}

int main()
{
    std::mt19937_64 rng(0x5eed'cafe'f00dULL);
    auto uniform = [&](int64_t lo, int64_t hi) {
        return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    int corrupted = 0;
    for(int round = 0; round < 20000; ++round)
    {
        const int32_t batch   = int32_t(uniform(1, 12));
        const int32_t max_len = int32_t(uniform(1, 300));
        std::vector<int32_t> cu(batch + 1);
        cu[0] = int32_t(uniform(0, 5));
        for(int32_t b = 0; b < batch; ++b)
            cu[b + 1] = cu[b] + int32_t(uniform(0, max_len));
        const int32_t rows = cu[batch] + int32_t(uniform(0, 7));
        std::vector<int32_t> out(batch + 1, -12345);

        // Valid input: copied unchanged, nothing reported.
        CHECK(!clamp_cumulative(cu.data(), out.data(), batch, rows, max_len), "round %d", round);
        CHECK(out == cu, "round %d: a valid input was changed", round);

        // Corrupt one value (a step back, past the rows, too long, negative, huge).
        std::vector<int32_t> bad = cu;
        const int32_t j          = int32_t(uniform(0, batch));
        switch(uniform(0, 4))
        {
        case 0: bad[j] = j > 0 ? bad[j - 1] - int32_t(uniform(1, 50)) : -1; break;
        case 1: bad[j] = rows + int32_t(uniform(1, 1000)); break;
        case 2: bad[j] = (j > 0 ? bad[j - 1] : 0) + max_len + int32_t(uniform(1, 100)); break;
        case 3: bad[j] = int32_t(uniform(INT32_MIN, -1)); break;
        default: bad[j] = int32_t(uniform(int64_t(rows) + 1, INT32_MAX)); break;
        }
        const bool reported = clamp_cumulative(bad.data(), out.data(), batch, rows, max_len);
        // Whatever the input, the copy indexes nothing out of range.
        CHECK(in_bounds(out, rows, max_len), "round %d: out of bounds after clamping", round);
        CHECK(reported == !in_bounds(bad, rows, max_len), "round %d: reported %d", round, reported);
        corrupted += reported;
        // Values before the first bad one are kept.
        for(int32_t b = 0; b < j; ++b)
            CHECK(out[b] == bad[b], "round %d: value %d changed before the bad one at %d", round, b, j);
    }
    CHECK(corrupted > 15000, "only %d corrupted inputs reported", corrupted);

    // Paged: a sequence may not outgrow its table row.
    CHECK(paged_max_len(1000, 3, 128) == 384, "capacity bound");
    CHECK(paged_max_len(100, 3, 128) == 100, "max_seqlen_k bound");
    CHECK(paged_max_len(INT32_MAX, 1 << 20, 1 << 12) == INT32_MAX, "no overflow");

    for(int round = 0; round < 20000; ++round)
    {
        const int32_t num_blocks = int32_t(uniform(1, 64));
        const int32_t page       = int32_t(128 * uniform(1, 4));
        const int32_t len        = int32_t(uniform(0, 4 * page));
        const int32_t column     = int32_t(uniform(0, 6));
        const int32_t id         = int32_t(uniform(-3, num_blocks + 3));
        bool bad                 = false;
        const int32_t copied     = clamp_block_id(id, num_blocks, column, len, page, &bad);
        const bool valid         = id >= 0 && id < num_blocks;
        const bool read          = int64_t(column) * page < len;
        CHECK(copied >= 0 && copied < num_blocks, "block %d copied as %d", id, copied);
        CHECK(copied == (valid ? id : 0), "block %d copied as %d", id, copied);
        CHECK(bad == (!valid && read), "block %d column %d len %d page %d: bad %d", id, column, len, page, bad);
    }
    std::printf("side_tensor_clamp: ok (%d corrupted seqlens inputs clamped and reported)\n", corrupted);
    return 0;
}
