// The one struct that crosses between the stand-in's Rust side and its C side (abi.c): what a
// device is. Rust fills it from its table of parts (src/devices.rs); C writes HIP's own structs
// and enums from it through AMD's header, so that their layouts and numbers are AMD's.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct StandinDevice {
    const char* marketing_name;  // "AMD Instinct MI300X"
    const char* gcn_arch_name;   // "gfx942:sramecc+:xnack-"
    int gfx_major, gfx_minor;    // 9, 4
    int compute_units;           // all CUs of the part
    int reported_multiprocessors;  // what clr reports: CUs, or WGPs in WGP mode (RDNA)
    int wave_size;
    int lds_per_block;
    int lds_per_cu;
    int max_threads_per_block;
    int max_waves_per_cu;
    int clock_khz;
    int memory_clock_khz;
    int memory_bus_width;
    int l2_bytes;
    int pci_bus_id;
    size_t global_memory;
    int host_native_atomics;
} StandinDevice;
