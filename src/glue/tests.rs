//! The glue's choices on a mock driver (host memory as device memory): where the side tensors'
//! values are checked.

use crate::gpu::tests::mock::mock_driver;
use crate::gpu::Driver;
use crate::glue::offload::run_on_gpu;
use crate::device::DeviceLimits;
use candle::{DType, Device, Tensor};
use rand::Rng;

/// A paged call of `batch` one-row sequences whose block table names a block outside the cache
/// in a random place a sequence reads.
fn paged_call_with_a_bad_block_id() -> candle::Result<Tensor> {
    let mut rng = rand::thread_rng();
    let (batch, page, h, d) = (rng.gen_range(1..5), 16, 2, 64);
    let blocks = 2 * batch;
    let zeros = |dims: &[usize]| Tensor::zeros(dims, DType::F16, &Device::Cpu);
    let (q, cache) = (zeros(&[batch, h, d])?, zeros(&[blocks, page, h, d])?);
    let lens: Vec<u32> = (0..batch).map(|_| rng.gen_range(1..=2 * page as u32)).collect();
    let cu_k: Vec<u32> = std::iter::once(0).chain(lens.iter().scan(0, |total, len| { *total += len; Some(*total) })).collect();
    let cu_q: Vec<u32> = (0..=batch as u32).collect();
    let mut table: Vec<Vec<u32>> = (0..batch).map(|b| vec![2 * b as u32, 2 * b as u32 + 1]).collect();
    let bad = rng.gen_range(0..batch);
    table[bad][0] = blocks as u32 + rng.gen_range(0..100);
    let (cu_q, cu_k, table) = (Tensor::new(cu_q, &Device::Cpu)?, Tensor::new(cu_k, &Device::Cpu)?, Tensor::new(table, &Device::Cpu)?);
    let max_k = *lens.iter().max().unwrap() as usize;
    crate::flash_attn_varlen_paged_windowed(&q, &cache, &cache, &cu_q, &cu_k, &table, None, 1, max_k, 0.125, None, Some(0), page, None)
}

/// The call on a mock HIP device `ordinal` (the device cache is keyed by API and ordinal: each
/// test uses its own) with or without host-native atomics.
fn offloaded(ordinal: i32, host_native_atomics: bool) -> String {
    let (driver, state) = mock_driver();
    state.limits.set(DeviceLimits { host_native_atomics, ..state.limits.get() });
    state.multiprocessors.store(304, std::sync::atomic::Ordering::SeqCst);
    let driver: &'static Driver = Box::leak(Box::new(driver));
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                driver.set_device(ordinal).unwrap();
                run_on_gpu(driver, paged_call_with_a_bad_block_id).map(|_| ()).err().map(|e| e.to_string()).unwrap_or_default()
            })
            .join()
            .unwrap()
    })
}

/// Issue 35: on a HIP device without host-native atomics (no PCIe atomics), the kernels' fault
/// bits may never reach the host, and a bad block id went unreported. Such a device's calls
/// check the values on the host first: the call itself fails, as on the CPU.
#[test]
fn without_host_atomics_a_bad_block_id_fails_its_own_call() {
    let err = offloaded(4, false);
    assert!(err.contains("block_table[") && err.contains("out of range"), "{err}");
    // With host atomics the values stay on the device (the kernels check them): whatever else
    // the mock build refuses, it is not the host's check of the table.
    let err = offloaded(5, true);
    assert!(!err.contains("block_table["), "{err}");
}
