//! The bench's results as an SVG plot: time and peak memory against sequence length, one line
//! per series ("flash f32", "naive f32 causal", ...). Kept apart from `examples/bench` so the
//! bench only measures. Needs the dev-dependency
//! `plotters = { version = "0.3.7", default-features = false, features = ["svg_backend", "line_series"] }`
//! (pure Rust: no font, image or system libraries; builds in seconds).
//!
//! From `examples/bench/main.rs`:
//! ```ignore
//! #[path = "../bench_plot/mod.rs"]
//! mod bench_plot;
//! points.push(bench_plot::BenchPoint { label: "flash f32".into(), seq_len: s, millis, peak_bytes });
//! bench_plot::plot_svg("docs/bench-cpu.svg", "CPU, b=1 h=16 d=128", &points)?;
//! ```

mod plot;

pub use plot::plot_svg;

/// One measurement of one series.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchPoint {
    /// Series name; series are colored in order of first appearance.
    pub label: String,
    pub seq_len: usize,
    /// Wall time of one call in milliseconds.
    pub millis: f64,
    /// Peak heap growth during one call, in bytes.
    pub peak_bytes: usize,
}
