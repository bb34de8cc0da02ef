//! Fault words: u32 words of mapped host memory into which kernels `atomic_or` fault bits, read
//! by the host without a copy or a synchronization. Each call gets a word of its own, so that a
//! bad call is recognised as one fault however long its kernels run and however many of their
//! programs report it.
//!
//! A thread keeps a record per (device, stream) it queues calls on: each call in flight with its
//! word and its sequence number on that record, and a `done` word that the stream itself sets to
//! the number of each call once its kernels have run (a fill queued behind them). At the thread's
//! next call on that stream (or an explicit take), a word that holds bits fails that call, once:
//! the word is then marked reported, and bits its launch sets later fail nothing. A word goes back
//! to the pool only when `done` shows that its launch has finished, so no kernel writes into a
//! word after it was handed to another call. A record with nothing in flight is dropped, and a
//! thread that ends leaves its calls in flight to the pool, which reclaims their words once done.
//! A stream is known by its handle and, where the driver has it, its identity
//! ([`Backend::stream_id`]): a stream made where a destroyed one's handle was inherits nothing.
//!
//! The words are pages of this process's own memory, never freed, that the driver registers:
//! a device reset (`hipDeviceReset`, `cuDevicePrimaryCtxReset`) undoes the registration but
//! leaves the host's reads valid, and every call first checks that its words are still mapped
//! where their kernels will write, refusing to run once they are not.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::{Backend, Driver, GpuError, GpuResult};

/// Words per registered page.
const WORDS_PER_ALLOCATION: usize = 1024;
/// The bytes of one page of words, and their alignment (a host page).
const PAGE_BYTES: usize = WORDS_PER_ALLOCATION * std::mem::size_of::<u32>();

/// One registered page of words: where the host has it and where the driver mapped it.
struct Page {
    host: *mut u32,
    device_addr: usize,
}

// SAFETY: the page is never freed; its words are only accessed atomically (see `words_of`).
unsafe impl Sync for Page {}
// SAFETY: as above.
unsafe impl Send for Page {}

impl Page {
    /// `Ok` while the driver still maps the page where its words' kernels write: a device reset
    /// undoes the registration, and a kernel would then write to an address of nothing.
    fn check_mapped(&self, backend: &dyn Backend) -> GpuResult<()> {
        let mapped = backend.mapped_device_addr(self.host.cast());
        if mapped.as_ref().is_ok_and(|&addr| addr == self.device_addr) {
            return Ok(());
        }
        let now = match mapped {
            Ok(addr) => format!("it is mapped at {addr:#x} now, not at {:#x}", self.device_addr),
            Err(error) => format!("the driver no longer maps it ({error})"),
        };
        let message = format!(
            "the host memory of flash-attn-rocm's fault words is not mapped into the device any more: {now}. \
             A device reset (hipDeviceReset, cudaDeviceReset, cuDevicePrimaryCtxReset) undoes it and unloads the \
             kernels: the crate does not run on the GPU again in this process"
        );
        Err(GpuError::local(backend.api(), "fault words", message))
    }
}

/// One u32 in page-locked host memory mapped into every device of one [`Driver`]: kernels and
/// stream fills write it at [`FaultWord::device_addr`], the host reads it in place.
///
/// How a kernel still running interleaves with the host is the platform's: HIP registers
/// fine-grained memory (not coarse-grained), whose device atomics are atomic against the host where the bus
/// supports PCIe atomics (the glue checks the values on the host where it does not:
/// `DeviceLimits::host_native_atomics`); CUDA documents atomics on mapped pinned memory as
/// atomic only among the device's threads, which is enough here: the host only reads a word
/// while kernels may write it, and zeroes it only once they have finished.
#[derive(Clone, Copy)]
pub struct FaultWord {
    /// In a page that is never freed, so valid for the life of the process.
    host: &'static AtomicU32,
    device_addr: usize,
    page: &'static Page,
}

impl FaultWord {
    /// The address kernels write to.
    pub fn device_addr(&self) -> usize {
        self.device_addr
    }

    /// The word's value now (no synchronization).
    pub fn read(&self) -> u32 {
        self.host.load(Ordering::Acquire)
    }

    fn clear(&self) {
        self.host.store(0, Ordering::Release);
    }
}

/// One call queued on a record's stream: its word and its number.
struct InFlight {
    word: FaultWord,
    number: u32,
    /// Its bits already failed a call (or a take): later ones are the same fault.
    reported: bool,
}

/// Whether the stream has finished call `number`, `done` being the number its last fill wrote.
/// Numbers wrap; a record never has 2^31 calls in flight.
fn finished(number: u32, done: u32) -> bool {
    done.wrapping_sub(number) < 1 << 31
}

/// A stream of a device: its handle (0: the device's null stream) and, where the driver has
/// one, its identity, which a stream made later with the same handle does not share.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct StreamKey {
    device: i32,
    stream: usize,
    id: Option<u64>,
}

/// What one thread has in flight on one (device, stream) of one driver.
struct StreamRecord {
    pool: Arc<WordPool>,
    key: StreamKey,
    /// Set by the stream to the number of each call whose kernels it has run.
    done: FaultWord,
    /// The number of the last call queued; `done` starts at it.
    last: u32,
    calls: VecDeque<InFlight>,
}

impl StreamRecord {
    /// The bits of calls not reported yet, which are reported from now on; gives the words of
    /// finished calls back to the pool. `done` is read first: a call it shows finished wrote
    /// all its bits before it, so the call's word is final when read after it.
    fn take(&mut self) -> u32 {
        let done = self.done.read();
        let mut bits = 0;
        for call in &mut self.calls {
            let value = call.word.read();
            if value != 0 && !call.reported {
                bits |= value;
                call.reported = true;
            }
        }
        while let Some(call) = self.calls.front() {
            if !finished(call.number, done) {
                break;
            }
            self.pool.release(call.word);
            self.calls.pop_front();
        }
        bits
    }

    fn idle(&self) -> bool {
        self.calls.is_empty()
    }
}

impl Drop for StreamRecord {
    /// An idle record gives its `done` word back; one with calls in flight (its thread ended)
    /// goes to the pool, which reclaims its words once they finish.
    fn drop(&mut self) {
        let record = Orphan { done: self.done, last: self.last, words: self.calls.drain(..).map(|c| c.word).collect() };
        if record.words.is_empty() {
            self.pool.release(record.done);
        } else {
            self.pool.orphans.lock().unwrap_or_else(PoisonError::into_inner).push(record);
        }
    }
}

/// The calls in flight of a record whose thread ended: nobody reads their bits any more.
struct Orphan {
    done: FaultWord,
    last: u32,
    words: Vec<FaultWord>,
}

/// The words of one driver: those free, in allocations that are never freed, and those of
/// ended threads' calls still in flight.
#[derive(Default)]
pub(super) struct WordPool {
    free: Mutex<Vec<FaultWord>>,
    orphans: Mutex<Vec<Orphan>>,
}

impl WordPool {
    /// A free word, zeroed; a new registered page of [`WORDS_PER_ALLOCATION`] when none is
    /// left. A failed registration is returned, not kept: CUDA fails on a thread without a
    /// current context, and a later call may succeed.
    fn acquire(&self, backend: &dyn Backend) -> GpuResult<FaultWord> {
        self.reclaim_orphans();
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        if free.is_empty() {
            free.extend(words_of(register_page(backend)?).rev());
        }
        let word = free.pop().expect("a fresh page has words");
        word.clear();
        Ok(word)
    }

    /// Gives back a word that no kernel or fill will write any more.
    fn release(&self, word: FaultWord) {
        self.free.lock().unwrap_or_else(PoisonError::into_inner).push(word);
    }

    /// Gives back the words of ended threads' calls that have finished.
    fn reclaim_orphans(&self) {
        let mut orphans = self.orphans.lock().unwrap_or_else(PoisonError::into_inner);
        orphans.retain(|orphan| {
            if !finished(orphan.last, orphan.done.read()) {
                return true;
            }
            orphan.words.iter().chain([&orphan.done]).for_each(|&word| self.release(word));
            false
        });
    }

    /// Words free now, for the tests.
    #[cfg(test)]
    pub(super) fn free_words(&self) -> usize {
        self.free.lock().unwrap().len()
    }
}

/// A fresh page of this process's memory (zeroed, page-aligned, never freed), registered with
/// the driver.
fn register_page(backend: &dyn Backend) -> GpuResult<&'static Page> {
    let layout = std::alloc::Layout::from_size_align(PAGE_BYTES, PAGE_BYTES).expect("a page is a valid layout");
    // SAFETY: the layout has a non-zero size.
    let host = unsafe { std::alloc::alloc_zeroed(layout) };
    if host.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    // SAFETY: the page was just allocated and is never freed, even when the registration fails
    // (a later attempt may register it after all: it is leaked then, one page).
    let device_addr = unsafe { backend.register_mapped_host(host.cast(), PAGE_BYTES) }?;
    Ok(Box::leak(Box::new(Page { host: host.cast(), device_addr })))
}

/// The u32 words of a fresh page, each zeroed.
fn words_of(page: &'static Page) -> impl DoubleEndedIterator<Item = FaultWord> {
    (0..WORDS_PER_ALLOCATION).map(move |i| {
        // SAFETY: the page holds WORDS_PER_ALLOCATION page-aligned u32 words and is never
        // freed; from now on each word is only accessed atomically: by the host through this
        // reference, by kernels with their atomics and by the stream's fills.
        let host = unsafe { AtomicU32::from_ptr(page.host.add(i)) };
        host.store(0, Ordering::Release);
        FaultWord {
            host,
            device_addr: page.device_addr + i * std::mem::size_of::<u32>(),
            page,
        }
    })
}

thread_local! {
    /// This thread's records: one per (driver, device, stream) with calls in flight.
    static THREAD_RECORDS: RefCell<Vec<StreamRecord>> = const { RefCell::new(Vec::new()) };
}

impl Driver {
    /// Queues one call on `stream` (a `hipStream_t` / `CUstream`, 0 for the null stream) of
    /// device `device`, which is current: `queue` gets the address of a fault word of its own
    /// (zeroed), into which the call's kernels `atomic_or` fault bits, and queues them. Then a
    /// fill queued behind them tells the host when they have run, so that the word is reused
    /// only after that. [`Driver::take_stream_faults`] and [`Driver::take_thread_faults`]
    /// report the bits once.
    ///
    /// The fill is queued whether `queue` succeeds or not (it may have queued some kernels).
    /// The words are pages of this process's memory registered with `hipHostRegister` (mapped,
    /// portable) or `cuMemHostRegister` (portable, device map), which needs a current context;
    /// after a device reset undid that, this is an `Err` and `queue` is not called.
    pub fn queue_with_fault_word<R, E: From<GpuError>>(
        &self,
        device: i32,
        stream: usize,
        queue: impl FnOnce(usize) -> Result<R, E>,
    ) -> Result<R, E> {
        let key = self.stream_key(device, stream)?;
        let word = self.fault_words.acquire(self.backend.as_ref())?;
        let numbered = self.with_record(key, |record| {
            word.page.check_mapped(self.backend.as_ref())?;
            if !std::ptr::eq(record.done.page, word.page) {
                record.done.page.check_mapped(self.backend.as_ref())?;
            }
            record.last = record.last.wrapping_add(1);
            record.calls.push_back(InFlight { word, number: record.last, reported: false });
            Ok((record.last, record.done))
        });
        let (number, done) = match numbered {
            Ok(numbered) => numbered,
            Err(error) => {
                self.fault_words.release(word);
                return Err(error.into());
            }
        };
        let queued = queue(word.device_addr());
        // SAFETY: `done` is a word of a registered page that is never freed, mapped into every
        // device (checked above); the stream belongs to the current device (the caller's
        // contract).
        let marked = unsafe { self.backend.fill_u32_async(done.device_addr(), number, 1, stream) };
        let value = queued?;
        marked?;
        Ok(value)
    }

    /// The fault bits of this thread's calls on `stream` of device `device` (current) that no
    /// take has reported yet (0 if none); each call's bits are reported once. An `Err` only
    /// where the driver fails to say which stream `stream` is.
    pub fn take_stream_faults(&self, device: i32, stream: usize) -> GpuResult<u32> {
        let key = self.stream_key(device, stream)?;
        Ok(self.take_records(|record| record.key == key))
    }

    /// The fault bits of this thread's calls on any stream and device of this driver that no take
    /// has reported yet; each call's bits are reported once.
    pub fn take_thread_faults(&self) -> u32 {
        self.take_records(|_| true)
    }

    /// Which stream `stream` of device `device` (current) is. A device's null stream is never
    /// destroyed, so its handle is enough.
    fn stream_key(&self, device: i32, stream: usize) -> GpuResult<StreamKey> {
        let id = if stream == 0 { None } else { self.backend.stream_id(stream)? };
        Ok(StreamKey { device, stream, id })
    }

    /// Takes the records `pick` selects of this thread and this driver, dropping those left idle.
    fn take_records(&self, pick: impl Fn(&StreamRecord) -> bool) -> u32 {
        THREAD_RECORDS.with(|records| {
            let mut records = records.borrow_mut();
            let mut bits = 0;
            records.retain_mut(|record| {
                if !Arc::ptr_eq(&record.pool, &self.fault_words) || !pick(record) {
                    return true;
                }
                bits |= record.take();
                !record.idle()
            });
            bits
        })
    }

    /// Runs `f` on this thread's record for `key`, made (with a fresh `done` word) if there is
    /// none; a record left idle by a failing `f` is dropped.
    fn with_record<R>(&self, key: StreamKey, f: impl FnOnce(&mut StreamRecord) -> GpuResult<R>) -> GpuResult<R> {
        THREAD_RECORDS.with(|records| {
            let mut records = records.borrow_mut();
            let mine = |r: &StreamRecord| Arc::ptr_eq(&r.pool, &self.fault_words) && r.key == key;
            let index = match records.iter().position(mine) {
                Some(index) => index,
                None => {
                    let done = self.fault_words.acquire(self.backend.as_ref())?;
                    let pool = Arc::clone(&self.fault_words);
                    records.push(StreamRecord { pool, key, done, last: 0, calls: VecDeque::new() });
                    records.len() - 1
                }
            };
            let result = f(&mut records[index]);
            if result.is_err() && records[index].idle() {
                records.swap_remove(index);
            }
            result
        })
    }

    /// Calls of this thread in flight on this driver (not yet seen finished), for the tests.
    #[cfg(test)]
    pub(super) fn calls_in_flight(&self) -> usize {
        THREAD_RECORDS.with(|records| {
            let records = records.borrow();
            records.iter().filter(|r| Arc::ptr_eq(&r.pool, &self.fault_words)).map(|r| r.calls.len()).sum()
        })
    }
}
