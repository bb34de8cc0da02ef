//! Results of `examples/bench.rs` as CSV and as an SVG plot (time and peak memory against
//! sequence length, one line per implementation). Lives beside the bench so the bench only
//! collects numbers; `plot` needs the `plotters` dev-dependency (SVG backend only: pure Rust,
//! no font or image system libraries).
//!
//! Use from the bench:
//! ```ignore
//! mod bench_plot;
//! use bench_plot::{BenchPoint, write_csv, plot_svg};
//! write_csv("docs/bench-cpu.csv", &points)?;
//! plot_svg("docs/bench-cpu.svg", "CPU, f32, b=1 h=8 d=64, causal", &points)?;
//! ```
#![allow(dead_code)] // a bench may use only part of it

mod csv;
pub mod peak_alloc;
mod plot;

pub use csv::write_csv;
pub use plot::plot_svg;

/// One measurement: `label` names the series ("flash", "naive", "flash bf16", ...).
#[derive(Clone, Debug, PartialEq)]
pub struct BenchPoint {
    pub label: String,
    pub seq_len: usize,
    /// Wall time of one forward call, in milliseconds (median or mean: the bench decides).
    pub millis: f64,
    /// Peak bytes allocated during the call, above what was live before it.
    pub peak_bytes: u64,
}
