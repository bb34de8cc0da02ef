// Host test of the shim's HIP error checks (csrc/hip_check.h) against a model of the HIP
// runtime's last-error rules (tests/cpp/fake_hip), on ROCm 6 and ROCm 7 rules: an error that
// earlier work handled must not fail a call or be reported as its error, and every failure of
// the call's own HIP work must reach the caller. Built and run by .ci/rocm-check.sh:
//   g++ -std=c++17 -O1 -Itests/cpp/fake_hip -Icsrc tests/cpp/hip_last_error.cpp -o hip_last_error
#include "hip_check.h"
#include "check.h"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>

using flash_attn_rocm::call_ck;
using flash_attn_rocm::launch_kernel;


namespace {

// What `kernel<<<...>>>(...)` does: the compiler's launch stub calls hipLaunchKernel and drops
// its status, which only the last-error slots keep.
void chevron_launch()
{
    static int kernel;
    static_cast<void>(hipLaunchKernel(&kernel, dim3(1), dim3(64), nullptr, 0, nullptr));
}

// CK's launch_and_check (ck_tile/host/kernel_launch.hpp): after each launch it peeks at the
// last error; on one it stops, takes the error with hipGetLastError and throws.
template <typename... Launch>
void ck_launch_and_check(Launch... launch)
{
    if(!((launch(), hipPeekAtLastError() == hipSuccess) && ...))
    {
        const hipError_t status = hipGetLastError();
        if(status != hipSuccess)
            throw std::runtime_error(std::string("CK: HIP Function Failed ") + hipGetErrorName(status));
    }
}

// CK's generated fmha_fwd: a device query (for the CU count), -1 when it fails or when no
// instance fits, else one kernel.
float fmha_fwd_model(bool has_instance)
{
    int device = 0;
    if(hipGetDevice(&device) != hipSuccess || !has_instance)
        return -1;
    ck_launch_and_check(chevron_launch);
    return 0;
}

// CK's generated fmha_fwd_splitkv: no HIP query; the split kernel, then the combine kernel.
float splitkv_model(bool has_instance)
{
    if(!has_instance)
        return -1;
    ck_launch_and_check(chevron_launch, chevron_launch);
    return 0;
}

// Earlier work on the thread: a caller's hipMalloc fails and the caller handles it, by a smaller
// retry when `retried`, else the failed call stays the thread's most recent one.
void handled_out_of_memory(bool retried)
{
    void* ptr = nullptr;
    CHECK(hipMalloc(&ptr, std::size_t(4) << 30) == hipErrorOutOfMemory, "setup");
    if(retried)
        CHECK(hipMalloc(&ptr, 1 << 20) == hipSuccess, "setup");
}

// The message of what `f` throws ("" when it returns).
std::string thrown(const std::function<void()>& f)
{
    try
    {
        f();
    }
    catch(const std::runtime_error& e)
    {
        return e.what();
    }
    return "";
}

bool has(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

void reset(int rocm_major)
{
    fake_hip::state()            = fake_hip::State{};
    fake_hip::state().rocm_major = rocm_major;
}

void guard_launch()
{
    static int kernel;
    launch_kernel(&kernel, dim3(1), dim3(256), nullptr, 0, nullptr, "side-tensor guard launch");
}

void earlier_errors_are_not_ours(int v)
{
    const char* setups[] = {"none", "handled OOM, retried", "handled OOM, last call"};
    for(int setup = 0; setup < 3; ++setup)
    {
        const char* what = setups[setup];
        auto prepare     = [&] {
            reset(v);
            if(setup > 0)
                handled_out_of_memory(setup == 1);
        };
        prepare();
        float r = -2;
        std::string err = thrown([&] { r = call_ck("fmha_fwd", [] { return fmha_fwd_model(true); }); });
        CHECK(err.empty() && r == 0, "ROCm %d, %s: fmha_fwd failed: %s", v, what, err.c_str());
        CHECK(fake_hip::state().launches == 1, "ROCm %d, %s: %d launches", v, what, fake_hip::state().launches);

        prepare();
        err = thrown([&] { r = call_ck("fmha_fwd_splitkv", [] { return splitkv_model(true); }); });
        CHECK(err.empty() && r == 0, "ROCm %d, %s: split-KV failed: %s", v, what, err.c_str());
        // Both kernels queued: a stale error must not stop CK after the first.
        CHECK(fake_hip::state().launches == 2, "ROCm %d, %s: %d launches", v, what, fake_hip::state().launches);

        // No instance is reported as such (the dispatcher's -1), not as an earlier error.
        for(auto dispatcher : {fmha_fwd_model, splitkv_model})
        {
            prepare();
            err = thrown([&] { r = call_ck("dispatcher", [&] { return dispatcher(false); }); });
            CHECK(err.empty() && r < 0, "ROCm %d, %s: no instance reported as: %s", v, what, err.c_str());
        }

        // Our own kernel: launched, and an earlier error stays with its owner on ROCm 7 (on
        // ROCm 6 any later call overwrites it, ours or not).
        prepare();
        err = thrown(guard_launch);
        CHECK(err.empty(), "ROCm %d, %s: guard failed: %s", v, what, err.c_str());
        CHECK(fake_hip::state().launches == 1, "ROCm %d, %s: guard not launched", v, what);
        if(v >= 7 && setup > 0)
            CHECK(hipGetLastError() == hipErrorOutOfMemory, "ROCm %d, %s: the owner's error was taken", v, what);
    }
}

void own_failures_reach_the_caller(int v)
{
    // A launch CK checks itself: its exception comes through.
    reset(v);
    fake_hip::state().launch_status = hipErrorInvalidDeviceFunction;
    std::string err = thrown([] { call_ck("fmha_fwd", [] { return fmha_fwd_model(true); }); });
    CHECK(has(err, "hipErrorInvalidDeviceFunction"), "ROCm %d: failed CK launch: '%s'", v, err.c_str());

    // A launch nobody checked before us.
    reset(v);
    fake_hip::state().launch_status = hipErrorLaunchFailure;
    err = thrown([] { call_ck("fmha_fwd", [] { chevron_launch(); return 0.0f; }); });
    CHECK(has(err, "HIP error in fmha_fwd: hipErrorLaunchFailure"), "ROCm %d: unchecked launch: '%s'", v, err.c_str());
    // ... and the next call is not blamed for it.
    fake_hip::state().launch_status = hipSuccess;
    err = thrown([] { call_ck("fmha_fwd", [] { return fmha_fwd_model(true); }); });
    CHECK(err.empty(), "ROCm %d: call after a failed one: '%s'", v, err.c_str());

    // A dispatcher's failed device query is a HIP error, not "no instance".
    reset(v);
    fake_hip::state().device_query_status = hipErrorInvalidValue;
    err = thrown([] { call_ck("fmha_fwd", [] { return fmha_fwd_model(true); }); });
    CHECK(has(err, "HIP error in fmha_fwd: hipErrorInvalidValue"), "ROCm %d: failed query: '%s'", v, err.c_str());

    // Our own kernel's launch status.
    reset(v);
    fake_hip::state().launch_status = hipErrorLaunchFailure;
    err = thrown(guard_launch);
    CHECK(has(err, "HIP error in side-tensor guard launch: hipErrorLaunchFailure"), "ROCm %d: guard: '%s'", v, err.c_str());

    // No device: both report it.
    for(auto split : {false, true})
    {
        reset(v);
        fake_hip::state().has_device = false;
        err = thrown([&] { call_ck("fmha_fwd", [&] { return split ? splitkv_model(true) : fmha_fwd_model(true); }); });
        CHECK(has(err, "hipErrorNoDevice"), "ROCm %d, split %d: no device: '%s'", v, split, err.c_str());
    }
    reset(v);
    fake_hip::state().has_device = false;
    err = thrown(guard_launch);
    CHECK(has(err, "hipErrorNoDevice"), "ROCm %d: guard without a device: '%s'", v, err.c_str());
}

} // namespace

int main()
{
    for(int rocm_major : {6, 7})
    {
        earlier_errors_are_not_ours(rocm_major);
        own_failures_reach_the_caller(rocm_major);
    }
    std::printf("hip_last_error: ok (ROCm 6 and 7 last-error rules)\n");
    return 0;
}
