// The C++ side of src/rocm/ffi.rs. This header is included by the cxx-generated bridge, which
// the host C++ compiler builds: it must not include ck_tile (hipcc-only headers).
#pragma once

#include <cstdint>

namespace flash_attn_rocm {

struct CkFwdParams;
struct CkSideTensorGuard;

// Launches CK's fmha forward (or split-KV, for paged K/V) on params.stream. Throws
// std::runtime_error (a Rust Err through cxx) when no kernel was built for the call, when the
// arguments are out of CK's range, or on any HIP error.
void ck_fmha_fwd(const CkFwdParams& params);

// Number of visible HIP devices; 0 for hipErrorNoDevice, throws on other HIP errors.
int hip_device_count();

// Queues the side-tensor guard kernel (csrc/side_tensor_guard.cpp) on guard.stream; it reports
// to the fault slot at guard.fault.
void ck_guard_side_tensors(const CkSideTensorGuard& guard);

} // namespace flash_attn_rocm
