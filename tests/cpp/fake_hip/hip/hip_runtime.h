// A host-only model of the HIP runtime's per-thread error state, for tests/cpp/hip_last_error.cpp
// (csrc/hip_check.h compiled with g++). It follows clr's hipamd/src: hip_error.cpp and the
// HIP_INIT_API / HIP_RETURN macros of hip_internal.hpp, in their ROCm 6.x and 7.x forms, selected
// at run time by fake_hip::state().rocm_major. Only the calls the shim and the tests make exist.
#pragma once

#include <cstddef>
#include <cstdint>

enum hipError_t
{
    hipSuccess                    = 0,
    hipErrorInvalidValue          = 1,
    hipErrorOutOfMemory           = 2,
    hipErrorInvalidDeviceFunction = 98,
    hipErrorNoDevice              = 100,
    hipErrorNotReady              = 600,
    hipErrorLaunchFailure         = 719,
};

struct dim3
{
    uint32_t x, y, z;
    constexpr dim3(uint32_t x_ = 1, uint32_t y_ = 1, uint32_t z_ = 1) : x(x_), y(y_), z(z_) {}
};

typedef struct ihipStream_t* hipStream_t;

namespace fake_hip {

struct State
{
    int rocm_major  = 7;
    bool has_device = true;
    // hip::tls.last_error_: on ROCm 6 the status of the last call; on ROCm 7 the last error.
    hipError_t last_error = hipSuccess;
    // hip::tls.last_command_error_ (ROCm 7): the status of the last call.
    hipError_t last_command_error = hipSuccess;
    // What the next hipLaunchKernel / hipGetDevice return (with a device).
    hipError_t launch_status = hipSuccess;
    hipError_t device_query_status = hipSuccess;
    int launches = 0;
};

inline State& state()
{
    static thread_local State s;
    return s;
}

// HIP_RETURN: every API call records its status on its way out.
inline hipError_t api_return(hipError_t status)
{
    State& s = state();
    if(s.rocm_major < 7)
    {
        s.last_error = status;
        return status;
    }
    s.last_command_error = status;
    if(status != hipSuccess && status != hipErrorNotReady)
        s.last_error = status;
    return status;
}

// Takes one slot, as hipGetLastError / hipExtGetLastError do: read, reset, no HIP_RETURN.
inline hipError_t take(hipError_t& slot)
{
    const hipError_t status = slot;
    slot                    = hipSuccess;
    return status;
}

} // namespace fake_hip

// HIP_INIT_API: without a device every API call fails, through HIP_RETURN, before its own work.
#define FAKE_HIP_INIT_API()                                \
    if(!fake_hip::state().has_device)                      \
    {                                                      \
        return fake_hip::api_return(hipErrorNoDevice);     \
    }

inline hipError_t hipGetLastError()
{
    FAKE_HIP_INIT_API();
    return fake_hip::take(fake_hip::state().last_error);
}

inline hipError_t hipExtGetLastError()
{
    FAKE_HIP_INIT_API();
    fake_hip::State& s = fake_hip::state();
    return fake_hip::take(s.rocm_major < 7 ? s.last_error : s.last_command_error);
}

inline hipError_t hipPeekAtLastError()
{
    FAKE_HIP_INIT_API();
    return fake_hip::api_return(fake_hip::state().last_error);
}

// Fails with hipErrorOutOfMemory above 1 GiB: the caller's allocator retries smaller.
inline hipError_t hipMalloc(void** ptr, std::size_t bytes)
{
    FAKE_HIP_INIT_API();
    if(bytes > (std::size_t(1) << 30))
        return fake_hip::api_return(hipErrorOutOfMemory);
    *ptr = reinterpret_cast<void*>(std::uintptr_t(0x1000));
    return fake_hip::api_return(hipSuccess);
}

inline hipError_t hipGetDevice(int* device)
{
    FAKE_HIP_INIT_API();
    *device = 0;
    return fake_hip::api_return(fake_hip::state().device_query_status);
}

inline hipError_t hipLaunchKernel(const void* kernel,
                                  dim3 grid,
                                  dim3 block,
                                  void** args,
                                  std::size_t shared_bytes,
                                  hipStream_t stream)
{
    static_cast<void>(kernel), static_cast<void>(block), static_cast<void>(args);
    static_cast<void>(shared_bytes), static_cast<void>(stream);
    FAKE_HIP_INIT_API();
    if(grid.x == 0 || grid.y == 0 || grid.z == 0)
        return fake_hip::api_return(hipErrorInvalidValue);
    fake_hip::State& s = fake_hip::state();
    if(s.launch_status == hipSuccess)
        ++s.launches;
    return fake_hip::api_return(s.launch_status);
}

inline const char* hipGetErrorName(hipError_t status)
{
    switch(status)
    {
    case hipSuccess: return "hipSuccess";
    case hipErrorInvalidValue: return "hipErrorInvalidValue";
    case hipErrorOutOfMemory: return "hipErrorOutOfMemory";
    case hipErrorInvalidDeviceFunction: return "hipErrorInvalidDeviceFunction";
    case hipErrorNoDevice: return "hipErrorNoDevice";
    case hipErrorNotReady: return "hipErrorNotReady";
    case hipErrorLaunchFailure: return "hipErrorLaunchFailure";
    }
    return "hipErrorUnknown";
}

inline const char* hipGetErrorString(hipError_t status) { return hipGetErrorName(status); }
