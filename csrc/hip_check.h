// HIP status checking shared by the shim's translation units. Compiled by hipcc, and by g++
// against tests/cpp/fake_hip, a model of the HIP runtime's last-error rules on ROCm 6 and 7
// that tests/cpp/hip_last_error.cpp runs these functions on.
//
// Those rules changed in ROCm 7 ("HIP API 7.0 changes"; clr hipamd/src/hip_error.cpp):
//  - up to ROCm 6.x, hipGetLastError and hipExtGetLastError both return and reset one slot, the
//    status of the thread's most recent HIP call;
//  - since ROCm 7, hipGetLastError (and hipPeekAtLastError) return the thread's last *error*,
//    kept through later successful calls until read, whether or not the caller of the failed
//    call handled it (as CUDA's cudaGetLastError); hipExtGetLastError (since ROCm 6.0) keeps the
//    old meaning in a slot of its own.
// So nothing here asks hipGetLastError whether something of ours failed: on ROCm 7 it would
// answer with any earlier handled error, such as the out-of-memory of an allocator's retried
// hipMalloc, and every call would fail with it.
#pragma once

#include "build_info.h"

#include <hip/hip_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

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

// Empties both last-error slots of the thread before a call into CK.
//
// Needed since ROCm 7: CK's launch_and_check (ck_tile/host/kernel_launch.hpp) asks
// hipPeekAtLastError after each kernel it launches and throws on any error. An error left by
// earlier work would make it throw after queuing its first kernel (skipping the split-KV
// combine kernel) and report that old error as the launch's. Emptying the other slot makes
// check_last_call below see only the calls CK makes.
//
// The statuses taken here are deliberately not checked: they are not ours, and the HIP call
// that failed has already returned its status to its caller. Failing on them would make every
// call after a handled error fail (this file's old entry check did exactly that on ROCm 7).
// What is lost: the error of an earlier `kernel<<<...>>>` launch whose owner reads
// hipGetLastError only after calling us; CK's own check would have consumed it just the same.
inline void forget_earlier_errors()
{
    static_cast<void>(hipGetLastError());
    static_cast<void>(hipExtGetLastError());
}

// Throws when the thread's most recent HIP call failed (and resets its status): after
// forget_earlier_errors, a failure of CK's own calls (a launch, its dispatcher's device query),
// never an older error, on ROCm 6 and 7 alike.
inline void check_last_call(const char* what) { check_hip(hipExtGetLastError(), what); }

// Runs `call`, a call into CK, with the thread's earlier errors forgotten, then checks the last
// HIP call it made; returns what `call` returned. CK launches with `kernel<<<...>>>`, whose
// status only the last-error slots hold, and its generated dispatchers return -1 both for "no
// instance" and for a failed device query: the check tells the second apart, so that a
// negative result that reaches the caller means "no instance".
template <typename Call>
auto call_ck(const char* what, Call&& call) -> decltype(std::forward<Call>(call)())
{
    forget_earlier_errors();
    auto result = std::forward<Call>(call)();
    check_last_call(what);
    return result;
}

// Launches one of our own kernels (the address of its __global__ function, one pointer per
// argument in `args`) and throws when hipLaunchKernel fails. Its status is returned directly:
// no last-error slot is read, so an error of earlier work neither fails this launch nor is
// taken from its owner.
inline void launch_kernel(const void* kernel,
                          dim3 grid,
                          dim3 block,
                          void** args,
                          std::size_t shared_bytes,
                          hipStream_t stream,
                          const char* what)
{
    check_hip(hipLaunchKernel(kernel, grid, block, args, shared_bytes, stream), what);
}

} // namespace flash_attn_rocm
