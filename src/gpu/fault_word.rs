//! The fault word: one u32 of mapped host memory into which kernels `atomic_or` fault bits,
//! read by the host without a copy or a synchronization.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::PoisonError;

use super::{Driver, GpuResult, MappedHostMemory};

/// A u32 in page-locked host memory mapped into every device of one [`Driver`]: kernels write
/// it at [`FaultWord::device_addr`], the host reads it in place with [`FaultWord::take`].
///
/// The host's swap is atomic: a bit set before a `take` comes back from it or from a later one.
/// How a kernel still running interleaves with the host is the platform's: HIP allocates
/// fine-grained coherent memory, whose device atomics are atomic against the host where the bus
/// supports PCIe atomics; CUDA documents atomics on mapped pinned memory as atomic only among
/// the device's threads, so there a `take` racing a running kernel's `atomic_or` may lose that
/// bit. Once a kernel is known to have finished, the word holds every bit it set.
pub struct FaultWord {
    /// Never freed, so valid for the life of the process.
    host: &'static AtomicU32,
    device_addr: usize,
}

impl FaultWord {
    /// The address kernels write to.
    pub fn device_addr(&self) -> usize {
        self.device_addr
    }

    /// Returns the bits set since the last call and clears them (an atomic swap on the host word;
    /// no synchronization).
    pub fn take(&self) -> u32 {
        self.host.swap(0, Ordering::AcqRel)
    }

    /// Takes the first word of `memory` (at least 4 bytes, 4-aligned, never freed) and zeroes it.
    fn new(memory: MappedHostMemory) -> FaultWord {
        let word = memory.host.cast::<u32>();
        assert!(
            word.is_aligned(),
            "mapped host memory at {word:p} is not 4-aligned"
        );
        // SAFETY: the allocation is at least 4 bytes, aligned (checked), never freed, and from
        // now on only accessed atomically: by the host through this reference, by kernels with
        // their atomics.
        let host = unsafe { AtomicU32::from_ptr(word) };
        // The driver does not promise zeroed memory; a recycled page may hold anything.
        host.store(0, Ordering::Release);
        FaultWord {
            host,
            device_addr: memory.device_addr,
        }
    }
}

impl Driver {
    /// The process-wide fault word of this driver: one u32 of host memory mapped into every
    /// device (portable, coherent), allocated (and zeroed) on first use, never freed. Kernels
    /// `atomic_or` fault bits into [`FaultWord::device_addr`]; the host reads and clears them
    /// with [`FaultWord::take`], without copy or synchronization.
    ///
    /// HIP: `hipExtHostAlloc` (HIP 6.3 and later; else `hipHostMalloc`) with mapped, portable and
    /// coherent flags, then `hipHostGetDevicePointer`. CUDA: `cuMemHostAlloc` (portable, device
    /// map) then `cuMemHostGetDevicePointer_v2`, which need a current context: call
    /// [`Driver::set_device`] on this thread first. A failed allocation is returned, not kept;
    /// the next call tries again.
    pub fn fault_word(&self) -> GpuResult<&FaultWord> {
        if let Some(word) = self.fault_word.get() {
            return Ok(word);
        }
        // The guard only orders the allocations; a panic under it leaves nothing half done.
        let _allocating = self
            .fault_word_allocation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(word) = self.fault_word.get() {
            return Ok(word);
        }
        let memory = self.backend.alloc_mapped_host(std::mem::size_of::<u32>())?;
        Ok(self.fault_word.get_or_init(|| FaultWord::new(memory)))
    }
}
