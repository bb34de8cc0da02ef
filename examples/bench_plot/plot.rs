//! Two log-log panels side by side: milliseconds and peak MiB against sequence length, one
//! colored line with markers per label, in the order labels first appear. Writes the file's
//! folder if missing; errors (empty input, I/O) come back as `Err`.

use std::error::Error;
use std::ops::Range;
use std::path::Path;

use plotters::prelude::*;

use super::BenchPoint;

const PALETTE: [RGBColor; 8] = [
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x17, 0xbe, 0xcf),
];

pub fn plot_svg(
    path: impl AsRef<Path>,
    title: &str,
    points: &[BenchPoint],
) -> Result<(), Box<dyn Error>> {
    if points.is_empty() {
        return Err("no bench points to plot".into());
    }
    let path = path.as_ref();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let root = SVGBackend::new(path, (1100, 460)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    let (left, right) = root.split_horizontally(550);
    panel(&left, "time per call", "ms", points, |p| p.millis)?;
    panel(&right, "peak memory", "MiB", points, |p| {
        p.peak_bytes as f64 / (1024.0 * 1024.0)
    })?;
    root.present()?;
    Ok(())
}

fn panel(
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    caption: &str,
    unit: &str,
    points: &[BenchPoint],
    value: impl Fn(&BenchPoint) -> f64,
) -> Result<(), Box<dyn Error>> {
    // x is plotted as log2(seq_len) on a linear axis: one labelled tick per power of two,
    // which plotters' log axis does not give for ranges like 128..4096.
    let log2_lens = points.iter().map(|p| (p.seq_len.max(1) as f64).log2());
    let (x_lo, x_hi) = log2_lens.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    });
    let xs = (x_lo - 0.25)..(x_hi + 0.25);
    let ys = log_range(points.iter().map(&value));
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(xs, ys.log_scale())?;
    chart
        .configure_mesh()
        .x_desc("sequence length")
        .y_desc(unit)
        .x_labels((x_hi - x_lo).round() as usize + 1)
        .x_label_formatter(&|x| format!("{:.0}", x.exp2()))
        .y_label_formatter(&|y| short_number(*y))
        .draw()?;
    for (i, label) in labels(points).into_iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let mut series: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| p.label == label)
            .map(|p| {
                (
                    (p.seq_len.max(1) as f64).log2(),
                    value(p).max(f64::MIN_POSITIVE),
                )
            })
            .collect();
        series.sort_by(|a, b| a.0.total_cmp(&b.0));
        chart
            .draw_series(LineSeries::new(series.clone(), color.stroke_width(2)))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(
            series
                .into_iter()
                .map(|xy| Circle::new(xy, 3, color.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// Distinct labels in order of first appearance (the bench's order decides the colors).
fn labels(points: &[BenchPoint]) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for p in points {
        if !seen.contains(&p.label) {
            seen.push(p.label.clone());
        }
    }
    seen
}

/// A positive range around the values with some headroom, as a log axis needs.
fn log_range(values: impl Iterator<Item = f64>) -> Range<f64> {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if !lo.is_finite() {
        return 0.1..1.0;
    }
    let (lo, hi) = if hi / lo < 1.5 {
        (lo / 1.5, hi * 1.5)
    } else {
        (lo, hi)
    };
    lo / 1.25..hi * 1.25
}

fn short_number(y: f64) -> String {
    if y >= 100.0 {
        format!("{y:.0}")
    } else if y >= 1.0 {
        format!("{y:.1}")
    } else {
        format!("{y:.2}")
    }
}
