//! CSV with a header line; labels are quoted so they may hold commas.

use std::io::Write;
use std::path::Path;

use super::BenchPoint;

pub const HEADER: &str = "label,seq_len,millis,peak_bytes";

pub fn write_csv(path: impl AsRef<Path>, points: &[BenchPoint]) -> std::io::Result<()> {
    let path = path.as_ref();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(out, "{HEADER}")?;
    for p in points {
        let label = p.label.replace('"', "\"\"");
        writeln!(out, "\"{label}\",{},{},{}", p.seq_len, p.millis, p.peak_bytes)?;
    }
    out.flush()
}
