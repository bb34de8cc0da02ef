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

/// How far the log has been read.
static READ: Mutex<u64> = Mutex::new(0);

/// The launches logged since the last call, in order: the variant (`fwd_decode_fp16_d64_flat_b32`)
/// of an embedded Triton image, else what a CK kernel's name says it is (`ck_fwd`, ...), else
/// the kernel's name.
pub fn take_launches() -> Vec<&'static str> {
    let Some(path) = std::env::var_os(LOG_VAR).map(PathBuf::from) else { return Vec::new() };
    let mut read = READ.lock().unwrap_or_else(|e| e.into_inner());
    let mut text = String::new();
    if let Ok(mut file) = std::fs::File::open(&path) {
        file.seek(SeekFrom::Start(*read)).expect("seek in the launch log");
        *read += file.read_to_string(&mut text).expect("read the launch log") as u64;
    }
    text.lines().map(variant_of).collect()
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split(' ').find_map(|word| word.strip_prefix(key))
}

fn variant_of(line: &str) -> &'static str {
    let image = field(line, "image=").and_then(|a| usize::from_str_radix(a.trim_start_matches("0x"), 16).ok());
    if let Some(k) = KERNELS.iter().find(|k| Some(k.image.as_ptr() as usize) == image) {
        return k.variant;
    }
    let kernel = field(line, "kernel=").unwrap_or(line);
    crate::ck_cases::ck_kind(kernel).unwrap_or_else(|| Box::leak(kernel.to_owned().into_boxed_str()))
}
