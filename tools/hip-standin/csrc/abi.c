// HIP's structs, enums and names, written through AMD's own header (hip_runtime_api.h of the
// HIP the stand-in is built against): the device properties struct, the device attributes and
// the error codes. Nothing here hard-codes a layout or an enum value.
#include <string.h>
#include <hip/hip_runtime_api.h>
#include "abi.h"

// The error codes the Rust side returns, by their header names.
const int standin_hipSuccess = hipSuccess;
const int standin_hipErrorInvalidValue = hipErrorInvalidValue;
const int standin_hipErrorOutOfMemory = hipErrorOutOfMemory;
const int standin_hipErrorInvalidDevice = hipErrorInvalidDevice;
const int standin_hipErrorInvalidDevicePointer = hipErrorInvalidDevicePointer;
const int standin_hipErrorInvalidResourceHandle = hipErrorInvalidResourceHandle;
const int standin_hipErrorInvalidImage = hipErrorInvalidImage;
const int standin_hipErrorInvalidDeviceFunction = hipErrorInvalidDeviceFunction;
const int standin_hipErrorNotFound = hipErrorNotFound;
const int standin_hipErrorNoDevice = hipErrorNoDevice;
const int standin_hipErrorNoBinaryForGpu = hipErrorNoBinaryForGpu;
const int standin_hipErrorLaunchFailure = hipErrorLaunchFailure;
const int standin_hipErrorNotSupported = hipErrorNotSupported;
const int standin_hipErrorNotReady = hipErrorNotReady;
const int standin_hipErrorInvalidConfiguration = hipErrorInvalidConfiguration;
const int standin_hipErrorUnknown = hipErrorUnknown;
const int standin_hipErrorHostMemoryAlreadyRegistered = hipErrorHostMemoryAlreadyRegistered;
const int standin_hipErrorHostMemoryNotRegistered = hipErrorHostMemoryNotRegistered;

// The host allocation flags, for the Rust side's checks.
const unsigned standin_hipHostMallocMapped = hipHostMallocMapped;
const unsigned standin_hipHostMallocPortable = hipHostMallocPortable;
const unsigned standin_hipHostMallocCoherent = hipHostMallocCoherent;
const unsigned standin_hipHostMallocNonCoherent = hipHostMallocNonCoherent;
const unsigned standin_hipHostMallocWriteCombined = hipHostMallocWriteCombined;
const unsigned standin_hipHostMallocNumaUser = hipHostMallocNumaUser;
const unsigned standin_hipHostRegisterPortable = hipHostRegisterPortable;
const unsigned standin_hipHostRegisterMapped = hipHostRegisterMapped;
const unsigned standin_hipExtHostRegisterCoarseGrained = hipExtHostRegisterCoarseGrained;

// hipMemcpyKind, for hipMemcpy and hipMemcpyAsync.
const int standin_hipMemcpyHostToHost = hipMemcpyHostToHost;
const int standin_hipMemcpyDefault = hipMemcpyDefault;

const int standin_hip_version = HIP_VERSION;

#define NAME(code) case code: return #code;
const char* standin_error_name(int status) {
    switch ((hipError_t)status) {
        NAME(hipSuccess) NAME(hipErrorInvalidValue) NAME(hipErrorOutOfMemory)
        NAME(hipErrorNotInitialized) NAME(hipErrorDeinitialized) NAME(hipErrorInvalidConfiguration)
        NAME(hipErrorInvalidPitchValue) NAME(hipErrorInvalidSymbol) NAME(hipErrorInvalidDevicePointer)
        NAME(hipErrorInvalidMemcpyDirection) NAME(hipErrorInsufficientDriver)
        NAME(hipErrorInvalidDeviceFunction) NAME(hipErrorNoDevice) NAME(hipErrorInvalidDevice)
        NAME(hipErrorInvalidImage) NAME(hipErrorInvalidContext) NAME(hipErrorContextAlreadyCurrent)
        NAME(hipErrorMapFailed) NAME(hipErrorUnmapFailed) NAME(hipErrorNoBinaryForGpu)
        NAME(hipErrorInvalidKernelFile) NAME(hipErrorInvalidSource) NAME(hipErrorFileNotFound)
        NAME(hipErrorSharedObjectSymbolNotFound) NAME(hipErrorSharedObjectInitFailed)
        NAME(hipErrorOperatingSystem) NAME(hipErrorInvalidHandle) NAME(hipErrorIllegalState)
        NAME(hipErrorNotFound) NAME(hipErrorNotReady) NAME(hipErrorIllegalAddress)
        NAME(hipErrorLaunchOutOfResources) NAME(hipErrorLaunchTimeOut)
        NAME(hipErrorPeerAccessAlreadyEnabled) NAME(hipErrorPeerAccessNotEnabled)
        NAME(hipErrorSetOnActiveProcess) NAME(hipErrorContextIsDestroyed) NAME(hipErrorAssert)
        NAME(hipErrorHostMemoryAlreadyRegistered) NAME(hipErrorHostMemoryNotRegistered)
        NAME(hipErrorLaunchFailure) NAME(hipErrorCooperativeLaunchTooLarge)
        NAME(hipErrorNotSupported) NAME(hipErrorStreamCaptureUnsupported)
        NAME(hipErrorCapturedEvent) NAME(hipErrorUnknown) NAME(hipErrorRuntimeMemory)
        NAME(hipErrorRuntimeOther)
        default: return "hipErrorUnknown";
    }
}
#undef NAME

static void copy_name(char* out, size_t capacity, const char* text) {
    strncpy(out, text, capacity - 1);
    out[capacity - 1] = 0;
}

// hipGetDevicePropertiesR0600's struct, from `d`. Fields the crate, CK and Candle's ROCm device
// read are the part's; the texture and surface limits stay 0.
void standin_fill_properties(hipDeviceProp_tR0600* p, const StandinDevice* d) {
    memset(p, 0, sizeof *p);
    copy_name(p->name, sizeof p->name, d->marketing_name);
    copy_name(p->gcnArchName, sizeof p->gcnArchName, d->gcn_arch_name);
    p->totalGlobalMem = d->global_memory;
    p->sharedMemPerBlock = (size_t)d->lds_per_block;
    p->sharedMemPerBlockOptin = (size_t)d->lds_per_block;
    p->sharedMemPerMultiprocessor = (size_t)d->lds_per_cu;
    p->maxSharedMemoryPerMultiProcessor = (size_t)d->lds_per_cu;
    p->regsPerBlock = 512 * 1024 / 4;
    p->regsPerMultiprocessor = 512 * 1024 / 4;
    p->warpSize = d->wave_size;
    p->maxThreadsPerBlock = d->max_threads_per_block;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = p->maxThreadsDim[2] = 1024;
    p->maxGridSize[0] = 0x7fffffff;
    p->maxGridSize[1] = p->maxGridSize[2] = 65536;
    p->clockRate = d->clock_khz;
    p->clockInstructionRate = d->clock_khz;
    p->memoryClockRate = d->memory_clock_khz;
    p->memoryBusWidth = d->memory_bus_width;
    p->totalConstMem = d->global_memory;
    p->major = d->gfx_major;
    p->minor = d->gfx_minor;
    p->multiProcessorCount = d->reported_multiprocessors;
    p->l2CacheSize = d->l2_bytes;
    p->maxThreadsPerMultiProcessor = d->max_waves_per_cu * d->wave_size;
    p->maxBlocksPerMultiProcessor = d->max_waves_per_cu;
    p->canMapHostMemory = 1;
    p->concurrentKernels = 1;
    p->unifiedAddressing = 1;
    p->managedMemory = 1;
    p->cooperativeLaunch = 1;
    p->hostNativeAtomicSupported = d->host_native_atomics;
    p->pciBusID = d->pci_bus_id;
    p->asyncEngineCount = 2;
    p->isLargeBar = 1;
    p->arch.hasGlobalInt32Atomics = 1;
    p->arch.hasSharedInt32Atomics = 1;
    p->arch.hasFloatAtomicAdd = 1;
    p->arch.hasWarpShuffle = 1;
}

// hipDeviceGetAttribute from `d`: 0 and the value, or hipErrorInvalidValue for an attribute
// the stand-in does not model (the caller prints which).
int standin_device_attribute(int attribute, const StandinDevice* d, int* value) {
    switch ((hipDeviceAttribute_t)attribute) {
    case hipDeviceAttributeMultiprocessorCount:
    case hipDeviceAttributePhysicalMultiProcessorCount: *value = d->reported_multiprocessors; break;
    case hipDeviceAttributeMaxThreadsPerBlock: *value = d->max_threads_per_block; break;
    case hipDeviceAttributeMaxBlockDimX:
    case hipDeviceAttributeMaxBlockDimY:
    case hipDeviceAttributeMaxBlockDimZ: *value = 1024; break;
    case hipDeviceAttributeMaxGridDimX: *value = 0x7fffffff; break;
    case hipDeviceAttributeMaxGridDimY:
    case hipDeviceAttributeMaxGridDimZ: *value = 65536; break;
    case hipDeviceAttributeMaxSharedMemoryPerBlock:
    case hipDeviceAttributeSharedMemPerBlockOptin: *value = d->lds_per_block; break;
    case hipDeviceAttributeMaxSharedMemoryPerMultiprocessor: *value = d->lds_per_cu; break;
    case hipDeviceAttributeWarpSize: *value = d->wave_size; break;
    case hipDeviceAttributeHostNativeAtomicSupported: *value = d->host_native_atomics; break;
    case hipDeviceAttributeComputeCapabilityMajor: *value = d->gfx_major; break;
    case hipDeviceAttributeComputeCapabilityMinor: *value = d->gfx_minor; break;
    case hipDeviceAttributeClockRate: *value = d->clock_khz; break;
    case hipDeviceAttributeMemoryClockRate: *value = d->memory_clock_khz; break;
    case hipDeviceAttributeMemoryBusWidth: *value = d->memory_bus_width; break;
    case hipDeviceAttributeL2CacheSize: *value = d->l2_bytes; break;
    case hipDeviceAttributeMaxThreadsPerMultiProcessor: *value = d->max_waves_per_cu * d->wave_size; break;
    case hipDeviceAttributeMaxRegistersPerBlock: *value = 512 * 1024 / 4; break;
    case hipDeviceAttributePciBusId: *value = d->pci_bus_id; break;
    case hipDeviceAttributeCanMapHostMemory:
    case hipDeviceAttributeUnifiedAddressing:
    case hipDeviceAttributeConcurrentKernels: *value = 1; break;
    case hipDeviceAttributeIntegrated: *value = 0; break;
    default: return hipErrorInvalidValue;
    }
    return hipSuccess;
}
