//! A progress log for the slow build steps. Cargo shows a build script's output only once it
//! ends, so each step is also appended, with the time, to `<cache root>/build-progress.log`:
//! `tail -f ~/.cache/flash-attn-rocm/build-progress.log` follows a long build, and the lines
//! name the per-step logs that fill as they go (the Triton compile's `aot.log`, one line per
//! kernel). Failing to write the log never fails the build.
use crate::cache_key::cache_root;
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

pub const FILE: &str = "build-progress.log";

/// Appends `message` with the UTC time of day and this build script's process id.
pub fn step(message: &str) {
    let Ok(root) = cache_root() else { return };
    let _ = std::fs::create_dir_all(&root);
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (h, m, s) = (secs / 3600 % 24, secs / 60 % 60, secs % 60);
    let line = format!("{h:02}:{m:02}:{s:02} UTC [{}] {message}\n", std::process::id());
    if let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(root.join(FILE)) {
        let _ = file.write_all(line.as_bytes());
    }
}
