// Torch-free shim over CK's fmha_fwd / fmha_fwd_splitkv, following flash-attention's
// csrc/flash_attn_ck (mha_fwd.cpp, mha_varlen_fwd.cpp): the Rust side has already resolved
// strides, seqstarts and the mask encoding into CkFwdParams; this file copies them into CK's
// traits/args, runs the dispatcher on the caller's stream and turns failures into exceptions.
// Compiled by hipcc with -DCK_TILE_FMHA_FWD_FAST_EXP2=1 like every CK translation unit.
#include "flash-attn-rocm/src/rocm/ffi.rs.h"
#include "build_info.h"
#include "hip_check.h"
#include "fmha_fwd.hpp"

#include <hip/hip_runtime.h>

#include <sstream>
#include <stdexcept>
#include <string>

namespace flash_attn_rocm {
namespace {

std::string data_type(CkDtype dtype)
{
    switch(dtype)
    {
    case CkDtype::Fp16: return "fp16";
    case CkDtype::Bf16: return "bf16";
    }
    throw std::runtime_error("flash-attn-rocm: unknown CkDtype " +
                             std::to_string(static_cast<int>(dtype)));
}

mask_enum mask_type(CkMask mask) { return static_cast<mask_enum>(static_cast<int>(mask)); }

bias_enum bias_type(CkBias bias) { return static_cast<bias_enum>(static_cast<int>(bias)); }

bool is_paged(const CkFwdParams& p) { return p.block_table_ptr != 0; }

// For a dispatcher's negative result that call_ck let through: a failed HIP query of the
// dispatcher (its CU count) has already been reported there, so this is a missing instance.
[[noreturn]] void throw_no_kernel(const CkFwdParams& p, const char* api)
{
    std::ostringstream msg;
    msg << "flash-attn-rocm: " << api << " has no Composable Kernel instance for: dtype "
        << data_type(p.dtype) << ", hdim_q " << p.hdim_q << ", hdim_v " << p.hdim_v << ", "
        << (p.is_group_mode ? "group (varlen)" : "batch") << " mode"
        << (is_paged(p) ? ", paged K/V" : "") << ", mask " << static_cast<int>(p.mask_type)
        << " (window " << p.window_size_left << "," << p.window_size_right << "), bias "
        << (p.bias_type == CkBias::Alibi ? "alibi" : "none") << ", softcap "
        << (p.has_logits_soft_cap ? "on" : "off") << ", lse " << (p.has_lse ? "on" : "off")
        << ". This library was built for " FLASH_ATTN_ROCM_BUILD_INFO
           ". Rebuild with the kernels this call needs: FLASH_ATTN_ROCM_HDIMS (head-dim tiles), "
           "FLASH_ATTN_ROCM_DTYPES (fp16,bf16), FLASH_ATTN_ROCM_LSE (1, the default: kernels that "
           "write the LSE; 0: kernels that do not; a call's lse on/off must match), "
           "FLASH_ATTN_ROCM_PAGED=1 (paged K/V), and clear FLASH_ATTN_ROCM_FILTER. "
           "(Softcap together with ALiBi has no CK kernel.)";
    throw std::runtime_error(msg.str());
}

// Fields shared by fmha_fwd_args and fmha_fwd_splitkv_args.
template <typename Args>
void fill_common(Args& a, const CkFwdParams& p)
{
    a.q_ptr          = reinterpret_cast<const void*>(p.q_ptr);
    a.k_ptr          = reinterpret_cast<const void*>(p.k_ptr);
    a.v_ptr          = reinterpret_cast<const void*>(p.v_ptr);
    a.bias_ptr       = reinterpret_cast<const void*>(p.alibi_slopes_ptr);
    a.lse_ptr        = reinterpret_cast<void*>(p.lse_ptr);
    a.o_ptr          = reinterpret_cast<void*>(p.o_ptr);
    a.seqstart_q_ptr = reinterpret_cast<const void*>(p.seqstart_q_ptr);
    a.seqstart_k_ptr = reinterpret_cast<const void*>(p.seqstart_k_ptr);
    a.seqlen_k_ptr   = nullptr;

    a.seqlen_q     = p.seqlen_q;
    a.seqlen_k     = p.seqlen_k;
    a.batch        = p.batch;
    a.max_seqlen_q = p.max_seqlen_q;
    a.hdim_q       = p.hdim_q;
    a.hdim_v       = p.hdim_v;
    a.nhead_q      = p.nhead_q;
    a.nhead_k      = p.nhead_k;

    a.scale_s         = p.scale_s;
    a.scale_p         = 1.0f;
    a.scale_o         = 1.0f;
    a.logits_soft_cap = p.has_logits_soft_cap ? p.logits_soft_cap : 0.0f;

    a.stride_q          = p.stride_q;
    a.stride_k          = p.stride_k;
    a.stride_v          = p.stride_v;
    a.stride_bias       = p.stride_alibi_slopes;
    a.stride_o          = p.stride_o;
    a.nhead_stride_q    = p.nhead_stride_q;
    a.nhead_stride_k    = p.nhead_stride_k;
    a.nhead_stride_v    = p.nhead_stride_v;
    a.nhead_stride_bias = 0; // alibi slopes are indexed batch_stride * b + head
    a.nhead_stride_lse  = p.nhead_stride_lse;
    a.nhead_stride_o    = p.nhead_stride_o;
    a.batch_stride_q    = p.batch_stride_q;
    a.batch_stride_k    = p.batch_stride_k;
    a.batch_stride_v    = p.batch_stride_v;
    a.batch_stride_bias = 0;
    a.batch_stride_lse  = p.batch_stride_lse;
    a.batch_stride_o    = p.batch_stride_o;

    a.window_size_left  = p.window_size_left;
    a.window_size_right = p.window_size_right;
    a.mask_type         = static_cast<ck_tile::index_t>(p.mask_type);
}

void run_fwd(const CkFwdParams& p, const ck_tile::stream_config& stream)
{
    fmha_fwd_traits traits{p.hdim_q,
                           p.hdim_v,
                           data_type(p.dtype),
                           p.is_group_mode,
                           true, // is_v_rowmajor: v is (.., s_k, h_k, d) like k
                           p.has_logits_soft_cap,
                           mask_type(p.mask_type),
                           bias_type(p.bias_type),
                           p.has_lse,
                           false,  // has_dropout
                           false,  // do_fp8_static_quant
                           false}; // skip_min_seqlen_q
    fmha_fwd_args args{};
    fill_common(args, p);
    args.rand_val_ptr         = nullptr;
    args.stride_randval       = 0;
    args.nhead_stride_randval = 0;
    args.batch_stride_randval = 0;
    args.min_seqlen_q         = 0;
    args.p_drop               = 0.0f;
    args.s_randval            = false;
    args.drop_seed_offset     = std::make_pair(uint64_t{0}, uint64_t{0});
    if(call_ck("fmha_fwd", [&] { return fmha_fwd(traits, args, stream); }) < 0)
        throw_no_kernel(p, "fmha_fwd");
}

#if FLASH_ATTN_ROCM_HAS_PAGED
// Paged K/V, after mha_varlen_fwd.cpp's block-table path (group mode, not gappy).
void run_splitkv(const CkFwdParams& p, const ck_tile::stream_config& stream)
{
    if(!p.is_group_mode)
        throw std::runtime_error("flash-attn-rocm: paged K/V needs group (varlen) mode");
    fmha_fwd_splitkv_traits traits{p.hdim_q,
                                   p.hdim_v,
                                   data_type(p.dtype),
                                   true, // is_group_mode
                                   true, // is_v_rowmajor
                                   p.has_logits_soft_cap,
                                   mask_type(p.mask_type),
                                   bias_type(p.bias_type),
                                   p.has_lse,
                                   false}; // do_fp8_static_quant
    // The caller allocates the accumulators (rocm::split_kv_scratch_lens): no allocation here,
    // so no allocator of ours competes with the caller's on its stream.
    if(p.lse_acc_ptr == 0 || p.o_acc_ptr == 0)
        throw std::runtime_error("flash-attn-rocm: paged K/V needs the split-KV accumulators "
                                 "lse_acc_ptr and o_acc_ptr (see rocm::split_kv_scratch_lens)");

    fmha_fwd_splitkv_args args{};
    fill_common(args, p);
    args.lse_acc_ptr              = reinterpret_cast<void*>(p.lse_acc_ptr);
    args.o_acc_ptr                = reinterpret_cast<void*>(p.o_acc_ptr);
    args.block_table_ptr          = reinterpret_cast<void*>(p.block_table_ptr);
    args.batch_stride_block_table = p.batch_stride_block_table;
    args.page_block_size          = p.page_block_size;
    args.is_gappy                 = false;
    args.cache_batch_idx          = nullptr;
    // The split count and the accumulators' (h, splits, total_q[, d]) strides come from Rust
    // (rocm::plan_split_kv, rocm::AccumulatorStrides); group mode has no batch stride.
    args.num_splits           = p.num_splits;
    args.nhead_stride_lse_acc = p.nhead_stride_lse_acc;
    args.split_stride_lse_acc = p.split_stride_lse_acc;
    args.batch_stride_lse_acc = 0;
    args.stride_o_acc         = p.stride_o_acc;
    args.split_stride_o_acc   = p.split_stride_o_acc;
    args.nhead_stride_o_acc   = p.nhead_stride_o_acc;
    args.batch_stride_o_acc   = 0;
    if(call_ck("fmha_fwd_splitkv", [&] { return fmha_fwd_splitkv(traits, args, stream); }) < 0)
        throw_no_kernel(p, "fmha_fwd_splitkv");
}
#else
// Built with FLASH_ATTN_ROCM_PAGED=0: the split-KV kernels and their dispatcher do not exist.
void run_splitkv(const CkFwdParams&, const ck_tile::stream_config&)
{
    throw std::runtime_error("flash-attn-rocm: paged K/V needs the split-KV kernels; this "
                             "library was built with FLASH_ATTN_ROCM_PAGED=0. Rebuild with "
                             "FLASH_ATTN_ROCM_PAGED=1 (the default).");
}
#endif

} // namespace

void ck_fmha_fwd(const CkFwdParams& params)
{
    // No entry check of the thread's last error: an error of earlier work is not this call's
    // (call_ck forgets it before CK runs; hip_check.h says why).
    // Nothing to compute: CK would launch an empty grid, which HIP rejects. (Empty key
    // sequences are fine: CK writes zeros for them, as flash-attention expects.)
    if(params.batch == 0 || params.max_seqlen_q == 0 || params.nhead_q == 0)
        return;
    const ck_tile::stream_config stream{reinterpret_cast<hipStream_t>(params.stream)};
    if(is_paged(params))
        run_splitkv(params, stream);
    else
        run_fwd(params, stream);
}

int hip_device_count()
{
    int count               = 0;
    const hipError_t status = hipGetDeviceCount(&count);
    // "No device" is an answer here, not a failure. There is no last error to clear after it:
    // no call of ours reads one as its own (hip_check.h), and without a device hipGetLastError
    // could not clear it anyway: it returns hipErrorNoDevice before looking at the slot.
    if(status == hipErrorNoDevice)
        return 0;
    check_hip(status, "hipGetDeviceCount");
    return count;
}

} // namespace flash_attn_rocm
