//! A counting global allocator for peak-memory measurements on the CPU. The bench declares
//! `#[global_allocator] static ALLOC: PeakAlloc = PeakAlloc::new();`, calls `reset_peak()`
//! before a call and reads `peak_since_reset()` after it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

pub struct PeakAlloc {
    live: AtomicUsize,
    peak: AtomicUsize,
    baseline: AtomicUsize,
}

impl PeakAlloc {
    pub const fn new() -> Self {
        PeakAlloc { live: AtomicUsize::new(0), peak: AtomicUsize::new(0), baseline: AtomicUsize::new(0) }
    }

    /// Starts a new measurement window at the bytes live now.
    pub fn reset_peak(&self) {
        let live = self.live.load(Relaxed);
        self.baseline.store(live, Relaxed);
        self.peak.store(live, Relaxed);
    }

    /// Highest live byte count since `reset_peak`, minus what was live at the reset.
    pub fn peak_since_reset(&self) -> u64 {
        self.peak.load(Relaxed).saturating_sub(self.baseline.load(Relaxed)) as u64
    }

    fn grew(&self, bytes: usize) {
        let live = self.live.fetch_add(bytes, Relaxed) + bytes;
        self.peak.fetch_max(live, Relaxed);
    }
}

impl Default for PeakAlloc {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// GlobalAlloc contract is System's; the counters are only bookkeeping on the side.
unsafe impl GlobalAlloc for PeakAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same layout the caller gave us, which the trait requires to be non-zero-sized.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            self.grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            self.grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller guarantees `ptr` came from this allocator (hence from System)
        // with this layout.
        unsafe { System.dealloc(ptr, layout) };
        self.live.fetch_sub(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `ptr`/`layout` describe a live block from System and
        // that `new_size` is valid for `layout.align()`.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            self.live.fetch_sub(layout.size(), Relaxed);
            self.grew(new_size);
        }
        new
    }
}
