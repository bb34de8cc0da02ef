//! Streams and events. Work runs on the calling thread before the call returns, so a stream
//! only has to exist: synchronizing finds it finished, and an event is recorded when reached.
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use crate::errors::{code, fail, ok};
use crate::Handle;

/// Live streams (handle -> device ordinal and creation flags) and events (handle -> when recorded).
#[derive(Default)]
struct Objects {
    streams: HashMap<usize, (usize, u32)>,
    events: HashMap<usize, Option<Instant>>,
    next: usize,
}

fn objects() -> MutexGuard<'static, Objects> {
    static OBJECTS: OnceLock<Mutex<Objects>> = OnceLock::new();
    OBJECTS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// A fresh handle value: never 0 (the null stream), never reused.
fn fresh(objects: &mut Objects) -> usize {
    objects.next += 1;
    0x5700_0000 + 16 * objects.next
}

/// Whether `stream` is the null stream or a live one; `Err` recorded for `call` otherwise.
pub fn check_stream(call: &str, stream: Handle) -> Result<(), i32> {
    if stream.is_null() || objects().streams.contains_key(&(stream as usize)) {
        Ok(())
    } else {
        Err(fail(code::invalid_handle(), call, format!("stream {stream:?} does not exist")))
    }
}

/// The device a live stream belongs to; `None` for the null stream (the current device's).
pub fn device_of(stream: Handle) -> Option<usize> {
    objects().streams.get(&(stream as usize)).map(|&(device, _)| device)
}

fn create_stream(call: &str, out: *mut Handle, flags: u32) -> i32 {
    if out.is_null() {
        return fail(code::invalid_value(), call, "null stream pointer");
    }
    let device = match crate::devices::current() {
        Ok((ordinal, _)) => ordinal,
        Err(status) => return fail(status, call, "no device"),
    };
    let mut objects = objects();
    let handle = fresh(&mut objects);
    objects.streams.insert(handle, (device, flags));
    // SAFETY: non-null, the caller's writable stream variable.
    unsafe { *out = handle as Handle };
    ok()
}

#[no_mangle]
pub unsafe extern "C" fn hipStreamCreate(out: *mut Handle) -> i32 {
    create_stream("hipStreamCreate", out, 0)
}

#[no_mangle]
pub unsafe extern "C" fn hipStreamCreateWithFlags(out: *mut Handle, flags: u32) -> i32 {
    create_stream("hipStreamCreateWithFlags", out, flags)
}

#[no_mangle]
pub unsafe extern "C" fn hipStreamCreateWithPriority(out: *mut Handle, flags: u32, _priority: i32) -> i32 {
    create_stream("hipStreamCreateWithPriority", out, flags)
}

#[no_mangle]
pub unsafe extern "C" fn hipStreamDestroy(stream: Handle) -> i32 {
    match objects().streams.remove(&(stream as usize)) {
        Some(_) => ok(),
        None => fail(code::invalid_handle(), "hipStreamDestroy", format!("stream {stream:?}")),
    }
}

#[no_mangle]
pub unsafe extern "C" fn hipStreamSynchronize(stream: Handle) -> i32 {
    match check_stream("hipStreamSynchronize", stream) {
        Ok(()) => ok(),
        Err(status) => status,
    }
}

#[no_mangle]
pub unsafe extern "C" fn hipStreamQuery(stream: Handle) -> i32 {
    match check_stream("hipStreamQuery", stream) {
        Ok(()) => ok(),
        Err(status) => status,
    }
}

/// The flags a stream was created with; the null stream has none (`hipStreamDefault`).
#[no_mangle]
pub unsafe extern "C" fn hipStreamGetFlags(stream: Handle, flags: *mut u32) -> i32 {
    if flags.is_null() {
        return fail(code::invalid_value(), "hipStreamGetFlags", "null flags pointer");
    }
    let value = match stream.is_null() {
        true => 0,
        false => match objects().streams.get(&(stream as usize)) {
            Some(&(_, flags)) => flags,
            None => return fail(code::invalid_handle(), "hipStreamGetFlags", format!("stream {stream:?}")),
        },
    };
    // SAFETY: non-null, the caller's writable flags variable.
    unsafe { *flags = value };
    ok()
}

/// The device ordinal of a stream (the current device's for the null stream); -1 for a stream
/// that does not exist, as HIP answers.
#[no_mangle]
pub unsafe extern "C" fn hipGetStreamDeviceId(stream: Handle) -> i32 {
    match (stream.is_null(), device_of(stream)) {
        (false, Some(device)) => device as i32,
        (true, _) => crate::devices::current().map_or(-1, |(ordinal, _)| ordinal as i32),
        (false, None) => -1,
    }
}

/// Streams are never captured into graphs here: `hipStreamCaptureStatusNone`.
#[no_mangle]
pub unsafe extern "C" fn hipStreamIsCapturing(stream: Handle, status: *mut i32) -> i32 {
    if let Err(e) = check_stream("hipStreamIsCapturing", stream) {
        return e;
    }
    if status.is_null() {
        return fail(code::invalid_value(), "hipStreamIsCapturing", "null status pointer");
    }
    // SAFETY: non-null, the caller's writable status variable.
    unsafe { *status = 0 };
    ok()
}

#[no_mangle]
pub unsafe extern "C" fn hipStreamWaitEvent(stream: Handle, event: Handle, _flags: u32) -> i32 {
    if let Err(status) = check_stream("hipStreamWaitEvent", stream) {
        return status;
    }
    match objects().events.contains_key(&(event as usize)) {
        true => ok(),
        false => fail(code::invalid_handle(), "hipStreamWaitEvent", format!("event {event:?}")),
    }
}

fn create_event(call: &str, out: *mut Handle) -> i32 {
    if out.is_null() {
        return fail(code::invalid_value(), call, "null event pointer");
    }
    let mut objects = objects();
    let handle = fresh(&mut objects);
    objects.events.insert(handle, None);
    // SAFETY: non-null, the caller's writable event variable.
    unsafe { *out = handle as Handle };
    ok()
}

#[no_mangle]
pub unsafe extern "C" fn hipEventCreate(out: *mut Handle) -> i32 {
    create_event("hipEventCreate", out)
}

#[no_mangle]
pub unsafe extern "C" fn hipEventCreateWithFlags(out: *mut Handle, _flags: u32) -> i32 {
    create_event("hipEventCreateWithFlags", out)
}

#[no_mangle]
pub unsafe extern "C" fn hipEventDestroy(event: Handle) -> i32 {
    match objects().events.remove(&(event as usize)) {
        Some(_) => ok(),
        None => fail(code::invalid_handle(), "hipEventDestroy", format!("event {event:?}")),
    }
}

#[no_mangle]
pub unsafe extern "C" fn hipEventRecord(event: Handle, stream: Handle) -> i32 {
    if let Err(status) = check_stream("hipEventRecord", stream) {
        return status;
    }
    match objects().events.get_mut(&(event as usize)) {
        Some(recorded) => {
            *recorded = Some(Instant::now());
            ok()
        }
        None => fail(code::invalid_handle(), "hipEventRecord", format!("event {event:?}")),
    }
}

#[no_mangle]
pub unsafe extern "C" fn hipEventSynchronize(event: Handle) -> i32 {
    match objects().events.contains_key(&(event as usize)) {
        true => ok(),
        false => fail(code::invalid_handle(), "hipEventSynchronize", format!("event {event:?}")),
    }
}

#[no_mangle]
pub unsafe extern "C" fn hipEventQuery(event: Handle) -> i32 {
    // SAFETY: same contract.
    unsafe { hipEventSynchronize(event) }
}

/// Emulated time between two recorded events: the host's wall clock, which says nothing of a
/// GPU's speed.
#[no_mangle]
pub unsafe extern "C" fn hipEventElapsedTime(ms: *mut f32, start: Handle, stop: Handle) -> i32 {
    let objects = objects();
    let (Some(Some(a)), Some(Some(b))) = (objects.events.get(&(start as usize)), objects.events.get(&(stop as usize))) else {
        return fail(code::invalid_handle(), "hipEventElapsedTime", "an event not recorded");
    };
    if ms.is_null() {
        return fail(code::invalid_value(), "hipEventElapsedTime", "null result");
    }
    // SAFETY: non-null, the caller's writable float.
    unsafe { *ms = b.saturating_duration_since(*a).as_secs_f32() * 1e3 };
    ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_keep_their_flags_and_device() {
        let mut stream: Handle = std::ptr::null_mut();
        let (mut flags, mut capturing) = (7u32, 7i32);
        // SAFETY (this test's calls): the stand-in's own functions on its own handles.
        unsafe {
            assert_eq!(hipStreamCreateWithFlags(&mut stream, 1), code::success());
            assert_eq!(hipStreamGetFlags(stream, &mut flags), code::success());
            assert_eq!(flags, 1, "hipStreamNonBlocking");
            assert_eq!(hipStreamGetFlags(std::ptr::null_mut(), &mut flags), code::success());
            assert_eq!(flags, 0, "the null stream");
            assert_eq!(hipGetStreamDeviceId(stream), 0);
            assert_eq!(hipStreamIsCapturing(stream, &mut capturing), code::success());
            assert_eq!(capturing, 0);
            assert_eq!(hipStreamDestroy(stream), code::success());
            assert_eq!(hipStreamGetFlags(stream, &mut flags), code::invalid_handle(), "a destroyed stream");
            assert_eq!(hipGetStreamDeviceId(stream), -1);
        }
    }
}
