//! Plots runs of scenario S (or dump) side by side as an SVG: completions per second
//! and pickup p99 (log scale) against time, the held phase shaded.
//!
//! ```sh
//! cargo run --release --example bench -- --only S --hold-secs 600 > before.txt
//! # (another build)
//! cargo run --release --example bench -- --only S --hold-secs 600 > ring.txt
//! cargo run --release --example bench -- --plot-s before=before.txt --plot-s ring=ring.txt \
//!     --plot-out docs/held-snapshot.svg
//! ```
//!
//! Each file is the benchmark's standard output: the JSON line of S's
//! "after" phase carries every sample of the run.

use plotters::prelude::*;
use serde_json::Value;

use crate::support::Result;

/// One sample: (t in s, phase, completed/s, pickup p99 in ms).
type Point = (f64, String, f64, f64);

/// The samples of the S run in a captured benchmark output.
fn samples(path: &str) -> Result<Vec<Point>> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let line = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| {
            (v["scenario"] == "S" || v["scenario"] == "dump") && v["extra"]["samples"].is_array()
        })
        .ok_or_else(|| format!("{path}: no S or dump run with samples"))?;
    let points = line["extra"]["samples"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["t"].as_f64().unwrap_or(f64::NAN),
                s["phase"].as_str().unwrap_or_default().to_string(),
                s["completed_per_sec"].as_f64().unwrap_or(f64::NAN),
                s["pickup_p99_ms"].as_f64().unwrap_or(f64::NAN),
            )
        })
        .collect();
    Ok(points)
}

/// Draws `runs` (label = path of a captured output) into the SVG `out`.
pub fn held_snapshot(runs: &[String], out: &str) -> Result<()> {
    let mut series = Vec::new();
    for run in runs {
        let (label, path) = run
            .split_once('=')
            .ok_or_else(|| format!("--plot-s {run}: expected LABEL=PATH"))?;
        series.push((label.to_string(), samples(path)?));
    }
    let all = || series.iter().flat_map(|(_, s)| s.iter());
    let t_max = all().map(|p| p.0).fold(10.0, f64::max);
    // Up to twice the offered rate (the steady phase's): the drain after
    // the release would flatten everything else.
    let mut steady: Vec<f64> = all().filter(|p| p.1 == "steady").map(|p| p.2).collect();
    steady.sort_by(f64::total_cmp);
    let offered = steady.get(steady.len() / 2).copied().unwrap_or(1_000.0);
    let rate_max = 2.0 * offered;
    let p99_max = all().map(|p| p.3).fold(100.0, f64::max) * 2.0;
    let held: Vec<f64> = all().filter(|p| p.1 == "held").map(|p| p.0).collect();
    let held = (
        held.iter().copied().fold(f64::INFINITY, f64::min) - 10.0,
        held.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    );

    let root = SVGBackend::new(out, (900, 640)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(320);
    let colours = [RED, BLUE, GREEN, MAGENTA];

    let mut rate = ChartBuilder::on(&top)
        .caption(
            "Held snapshot: completed jobs/s (clipped at twice the offered rate)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..t_max, 0.0..rate_max)?;
    rate.configure_mesh()
        .x_desc("seconds")
        .y_desc("completed/s")
        .draw()?;
    rate.draw_series(std::iter::once(Rectangle::new(
        [(held.0, 0.0), (held.1, rate_max)],
        RGBColor(230, 230, 230).filled(),
    )))?;
    for ((label, points), colour) in series.iter().zip(colours) {
        rate.draw_series(LineSeries::new(
            points.iter().map(|p| (p.0, p.2.min(rate_max))),
            colour.stroke_width(2),
        ))?
        .label(label.as_str())
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(2)));
    }
    rate.configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;

    let mut p99 = ChartBuilder::on(&bottom)
        .caption(
            "Pickup p99, ms (log scale; grey: snapshot held)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..t_max, (1.0..p99_max).log_scale())?;
    p99.configure_mesh().x_desc("seconds").y_desc("ms").draw()?;
    p99.draw_series(std::iter::once(Rectangle::new(
        [(held.0, 1.0), (held.1, p99_max)],
        RGBColor(230, 230, 230).filled(),
    )))?;
    p99.draw_series(LineSeries::new(
        [(0.0, 100.0), (t_max, 100.0)],
        BLACK.stroke_width(1),
    ))?;
    for ((_, points), colour) in series.iter().zip(colours) {
        p99.draw_series(LineSeries::new(
            points.iter().map(|p| (p.0, p.3.max(1.0))),
            colour.stroke_width(2),
        ))?;
    }
    root.present()?;
    Ok(())
}
