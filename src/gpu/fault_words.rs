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

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::{Backend, Driver, GpuError, GpuResult, MappedHostMemory};

/// Words per mapped allocation: one page of u32 words.
const WORDS_PER_ALLOCATION: usize = 1024;

/// One u32 in page-locked host memory mapped into every device of one [`Driver`]: kernels and
/// stream fills write it at [`FaultWord::device_addr`], the host reads it in place.
///
/// How a kernel still running interleaves with the host is the platform's: HIP allocates
/// fine-grained coherent memory, whose device atomics are atomic against the host where the bus
/// supports PCIe atomics (the glue checks the values on the host where it does not:
/// `DeviceLimits::host_native_atomics`); CUDA documents atomics on mapped pinned memory as
/// atomic only among the device's threads, which is enough here: the host only reads a word
/// while kernels may write it, and zeroes it only once they have finished.
#[derive(Clone, Copy)]
pub struct FaultWord {
    /// In an allocation that is never freed, so valid for the life of the process.
    host: &'static AtomicU32,
    device_addr: usize,
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

/// What one thread has in flight on one (device, stream) of one driver.
struct StreamRecord {
    pool: Arc<WordPool>,
    device: i32,
    stream: usize,
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
    /// A free word, zeroed; a new mapped allocation of [`WORDS_PER_ALLOCATION`] when none is
    /// left. A failed allocation is returned, not kept: CUDA fails on a thread without a current
    /// context, and a later call may succeed.
    fn acquire(&self, backend: &dyn Backend) -> GpuResult<FaultWord> {
        self.reclaim_orphans();
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        if free.is_empty() {
            let memory = backend.alloc_mapped_host(WORDS_PER_ALLOCATION * std::mem::size_of::<u32>())?;
            free.extend(words_of(memory).rev());
        }
        let word = free.pop().expect("a fresh allocation has words");
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

/// The u32 words of a fresh mapped allocation, each zeroed.
fn words_of(memory: MappedHostMemory) -> impl DoubleEndedIterator<Item = FaultWord> {
    let words = memory.host.cast::<u32>();
    assert!(words.is_aligned(), "mapped host memory at {words:p} is not 4-aligned");
    (0..WORDS_PER_ALLOCATION).map(move |i| {
        // SAFETY: the allocation holds WORDS_PER_ALLOCATION aligned u32 words (checked above) and
        // is never freed; from now on each word is only accessed atomically: by the host through
        // this reference, by kernels with their atomics and by the stream's fills.
        let host = unsafe { AtomicU32::from_ptr(words.add(i)) };
        // The driver does not promise zeroed memory; a recycled page may hold anything.
        host.store(0, Ordering::Release);
        FaultWord {
            host,
            device_addr: memory.device_addr + i * std::mem::size_of::<u32>(),
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
    /// HIP: the words are `hipExtHostAlloc` memory (HIP 6.3 and later; else `hipHostMalloc`)
    /// with mapped, portable and coherent flags; CUDA: `cuMemHostAlloc` (portable, device map),
    /// which needs a current context.
    pub fn queue_with_fault_word<R, E: From<GpuError>>(
        &self,
        device: i32,
        stream: usize,
        queue: impl FnOnce(usize) -> Result<R, E>,
    ) -> Result<R, E> {
        let word = self.fault_words.acquire(self.backend.as_ref())?;
        let number = self.with_record(device, stream, |record| {
            record.last = record.last.wrapping_add(1);
            record.calls.push_back(InFlight { word, number: record.last, reported: false });
            Ok((record.last, record.done))
        });
        let (number, done) = match number {
            Ok(numbered) => numbered,
            Err(error) => {
                self.fault_words.release(word);
                return Err(error.into());
            }
        };
        let queued = queue(word.device_addr());
        // SAFETY: `done` is a word of a mapped allocation that is never freed, mapped into every
        // device; the stream belongs to the current device (the caller's contract).
        let marked = unsafe { self.backend.fill_u32_async(done.device_addr(), number, 1, stream) };
        let value = queued?;
        marked?;
        Ok(value)
    }

    /// The fault bits of this thread's calls on `stream` of device `device` that no take has
    /// reported yet (0 if none); each call's bits are reported once.
    pub fn take_stream_faults(&self, device: i32, stream: usize) -> u32 {
        self.take_records(|record| record.device == device && record.stream == stream)
    }

    /// The fault bits of this thread's calls on any stream and device of this driver that no take
    /// has reported yet; each call's bits are reported once.
    pub fn take_thread_faults(&self) -> u32 {
        self.take_records(|_| true)
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

    /// Runs `f` on this thread's record for (`device`, `stream`), made (with a fresh `done`
    /// word) if there is none.
    fn with_record<R>(&self, device: i32, stream: usize, f: impl FnOnce(&mut StreamRecord) -> GpuResult<R>) -> GpuResult<R> {
        THREAD_RECORDS.with(|records| {
            let mut records = records.borrow_mut();
            let mine = |r: &StreamRecord| Arc::ptr_eq(&r.pool, &self.fault_words) && r.device == device && r.stream == stream;
            let index = match records.iter().position(mine) {
                Some(index) => index,
                None => {
                    let done = self.fault_words.acquire(self.backend.as_ref())?;
                    let pool = Arc::clone(&self.fault_words);
                    records.push(StreamRecord { pool, device, stream, done, last: 0, calls: VecDeque::new() });
                    records.len() - 1
                }
            };
            f(&mut records[index])
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
