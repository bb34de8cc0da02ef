//! Fault slots: u32 words of mapped host memory into which kernels `atomic_or` fault bits, one
//! per (thread, stream) that launches, read by the host without a copy or a synchronization.
//!
//! A slot belongs to the thread that launched on a stream, so the faults of a call reach the
//! thread that made it (at its next call on that stream, or when it takes them explicitly),
//! never a call of another thread or of another stream.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::{Backend, Driver, GpuResult, MappedHostMemory};

/// Slots per mapped allocation: one page of u32 words.
const SLOTS_PER_ALLOCATION: usize = 1024;

/// One u32 in page-locked host memory mapped into every device of one [`Driver`]: kernels write
/// it at [`FaultSlot::device_addr`], the host reads it in place with [`FaultSlot::take`].
///
/// The host's swap is atomic: a bit set before a `take` comes back from it or from a later one.
/// How a kernel still running interleaves with the host is the platform's: HIP allocates
/// fine-grained coherent memory, whose device atomics are atomic against the host where the bus
/// supports PCIe atomics (the glue checks the values on the host where it does not:
/// `DeviceLimits::host_native_atomics`); CUDA documents atomics on mapped pinned memory as
/// atomic only among the device's threads, so there a `take` racing a running kernel's
/// `atomic_or` may see a bit twice, never lose it. Once a kernel is known to have finished, the
/// word holds every bit it set.
#[derive(Clone, Copy)]
pub struct FaultSlot {
    /// In an allocation that is never freed, so valid for the life of the process.
    host: &'static AtomicU32,
    device_addr: usize,
}

impl FaultSlot {
    /// The address kernels write to.
    pub fn device_addr(&self) -> usize {
        self.device_addr
    }

    /// Returns the bits set since the last call and clears them (an atomic swap on the host word;
    /// no synchronization).
    pub fn take(&self) -> u32 {
        self.host.swap(0, Ordering::AcqRel)
    }
}

/// The slots of one driver: those free for a new (thread, stream), in allocations that are
/// never freed.
#[derive(Default)]
pub(super) struct SlotPool {
    free: Mutex<Vec<FaultSlot>>,
}

impl SlotPool {
    /// A free slot, zeroed; a new mapped allocation of [`SLOTS_PER_ALLOCATION`] when none is
    /// left. A failed allocation is returned, not kept: CUDA fails on a thread without a current
    /// context, and a later call may succeed.
    fn acquire(&self, backend: &dyn Backend) -> GpuResult<FaultSlot> {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        if free.is_empty() {
            let memory = backend.alloc_mapped_host(SLOTS_PER_ALLOCATION * std::mem::size_of::<u32>())?;
            free.extend(slots_of(memory).rev());
        }
        let slot = free.pop().expect("a fresh allocation has slots");
        slot.take();
        Ok(slot)
    }

    /// Gives `slot` back when its thread ends. A bit a kernel of that thread sets after this
    /// (a call still running when the thread ended) is cleared by the slot's next owner on
    /// [`SlotPool::acquire`]; one set after that reaches the new owner: the only way a fault can
    /// reach another thread, and only when a thread ends with its kernels still running.
    fn release(&self, slot: FaultSlot) {
        self.free.lock().unwrap_or_else(PoisonError::into_inner).push(slot);
    }
}

/// The u32 words of a fresh mapped allocation, each zeroed.
fn slots_of(memory: MappedHostMemory) -> impl DoubleEndedIterator<Item = FaultSlot> {
    let words = memory.host.cast::<u32>();
    assert!(words.is_aligned(), "mapped host memory at {words:p} is not 4-aligned");
    (0..SLOTS_PER_ALLOCATION).map(move |i| {
        // SAFETY: the allocation holds SLOTS_PER_ALLOCATION aligned u32 words (checked above) and
        // is never freed; from now on each word is only accessed atomically: by the host through
        // this reference, by kernels with their atomics.
        let host = unsafe { AtomicU32::from_ptr(words.add(i)) };
        // The driver does not promise zeroed memory; a recycled page may hold anything.
        host.store(0, Ordering::Release);
        FaultSlot {
            host,
            device_addr: memory.device_addr + i * std::mem::size_of::<u32>(),
        }
    })
}

/// A slot this thread holds for one stream of one driver's pool, given back when the thread ends.
struct HeldSlot {
    pool: Arc<SlotPool>,
    stream: usize,
    slot: FaultSlot,
}

impl Drop for HeldSlot {
    fn drop(&mut self) {
        self.pool.release(self.slot);
    }
}

thread_local! {
    /// This thread's slots: one per (driver, stream) it launched on.
    static THREAD_SLOTS: RefCell<Vec<HeldSlot>> = const { RefCell::new(Vec::new()) };
}

impl Driver {
    /// The calling thread's fault slot for `stream` (a `hipStream_t` / `CUstream`, 0 for the null
    /// stream), taken from this driver's pool on first use and held until the thread ends.
    /// Kernels launched by this thread on `stream` `atomic_or` fault bits into
    /// [`FaultSlot::device_addr`]; [`Driver::take_stream_faults`] and
    /// [`Driver::take_thread_faults`] read and clear them, without copy or synchronization.
    ///
    /// HIP: `hipExtHostAlloc` (HIP 6.3 and later; else `hipHostMalloc`) with mapped, portable and
    /// coherent flags, then `hipHostGetDevicePointer`. CUDA: `cuMemHostAlloc` (portable, device
    /// map) then `cuMemHostGetDevicePointer_v2`, which need a current context: call
    /// [`Driver::set_device`] on this thread first.
    pub fn fault_slot(&self, stream: usize) -> GpuResult<FaultSlot> {
        if let Some(slot) = self.held_slots(|held| held.stream == stream).first() {
            return Ok(*slot);
        }
        let slot = self.fault_slots.acquire(self.backend.as_ref())?;
        let pool = Arc::clone(&self.fault_slots);
        THREAD_SLOTS.with(|slots| slots.borrow_mut().push(HeldSlot { pool, stream, slot }));
        Ok(slot)
    }

    /// The fault bits that kernels this thread launched on `stream` set since the last take, and
    /// clears them; 0 when the thread never launched on it.
    pub fn take_stream_faults(&self, stream: usize) -> u32 {
        self.held_slots(|held| held.stream == stream).iter().fold(0, |bits, slot| bits | slot.take())
    }

    /// The fault bits that kernels this thread launched on any stream of this driver set since
    /// the last take, and clears them.
    pub fn take_thread_faults(&self) -> u32 {
        self.held_slots(|_| true).iter().fold(0, |bits, slot| bits | slot.take())
    }

    /// This thread's slots of this driver's pool that `pick` selects.
    fn held_slots(&self, pick: impl Fn(&HeldSlot) -> bool) -> Vec<FaultSlot> {
        THREAD_SLOTS.with(|slots| {
            let slots = slots.borrow();
            let mine = slots.iter().filter(|held| Arc::ptr_eq(&held.pool, &self.fault_slots));
            mine.filter(|held| pick(held)).map(|held| held.slot).collect()
        })
    }
}
