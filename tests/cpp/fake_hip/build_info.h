// Stand-in for the build_info.h that build/native.rs generates, for the host tests.
#pragma once
#define FLASH_ATTN_ROCM_BUILD_INFO "host test (fake HIP)"
#define FLASH_ATTN_ROCM_HAS_PAGED 1
