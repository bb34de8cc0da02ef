//! What ran: the HIP stand-in's launch log (`HIP_STANDIN_LAUNCH_LOG`, one line per launch),
//! each launch's code object named by the embedded variant whose image it is.
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Mutex;

use flash_attn_rocm::triton::KERNELS;

pub const LOG_VAR: &str = "HIP_STANDIN_LAUNCH_LOG";

/// Points the stand-in's log at a fresh file of this process; before any HIP call.
pub fn start_log() {
    let path = std::env::temp_dir().join(format!("hip-standin-launches-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&path);
    std::env::set_var(LOG_VAR, &path);
}

/// How far the log has been read, and what was read since the last [`take_launches`].
static LOG: Mutex<(u64, Vec<&'static str>)> = Mutex::new((0, Vec::new()));

/// The launches logged since the last [`new_launches`] or [`take_launches`], in order: the
/// variant (`fwd_decode_fp16_d64_flat_b32`) of an embedded Triton image, else what a CK kernel's
/// name says it is (`ck_fwd`, ...), else the kernel's name.
pub fn new_launches() -> Vec<&'static str> {
    let Some(path) = std::env::var_os(LOG_VAR).map(PathBuf::from) else { return Vec::new() };
    let mut log = LOG.lock().unwrap_or_else(|e| e.into_inner());
    let mut text = String::new();
    if let Ok(mut file) = std::fs::File::open(&path) {
        file.seek(SeekFrom::Start(log.0)).expect("seek in the launch log");
        log.0 += file.read_to_string(&mut text).expect("read the launch log") as u64;
    }
    let new: Vec<&'static str> = text.lines().map(variant_of).collect();
    log.1.extend(&new);
    new
}

/// Every launch since the last call (a class's record), in order.
pub fn take_launches() -> Vec<&'static str> {
    new_launches();
    std::mem::take(&mut LOG.lock().unwrap_or_else(|e| e.into_inner()).1)
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split(' ').find_map(|word| word.strip_prefix(key))
}

/// The variant a launch line's code object belongs to. Variants whose code objects are
/// byte-identical (gfx11's d = 512 prefill and decode tiles are one tile) share one embedded
/// copy, so one address can name several: then all of them, joined by `|`.
fn variant_of(line: &str) -> &'static str {
    let image = field(line, "image=").and_then(|a| usize::from_str_radix(a.trim_start_matches("0x"), 16).ok());
    let names: Vec<&'static str> = KERNELS.iter().filter(|k| Some(k.image.as_ptr() as usize) == image).map(|k| k.variant).collect();
    match names.as_slice() {
        [] => {}
        [one] => return one,
        many => return Box::leak(many.join("|").into_boxed_str()),
    }
    let kernel = field(line, "kernel=").unwrap_or(line);
    crate::ck_cases::ck_kind(kernel).unwrap_or_else(|| Box::leak(kernel.to_owned().into_boxed_str()))
}
