// HIP status checking shared by the shim's translation units (hipcc only).
#pragma once

#include "build_info.h"

#include <hip/hip_runtime.h>

#include <stdexcept>
#include <string>

namespace flash_attn_rocm {

// Throws (a Rust Err through cxx) naming the failed HIP call when `status` is not hipSuccess.
inline void check_hip(hipError_t status, const char* what)
{
    if(status != hipSuccess)
    {
        throw std::runtime_error(std::string("flash-attn-rocm: HIP error in ") + what + ": " +
                                 hipGetErrorName(status) + " (" + hipGetErrorString(status) +
                                 "); library built for " FLASH_ATTN_ROCM_BUILD_INFO);
    }
}

} // namespace flash_attn_rocm
