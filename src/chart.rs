//! PNG chart of N*SIF and utilisation over time, one line per policy
//! (plotters, bitmap backend). Text needs a TrueType font: `COMPASS_FONT`, or
//! DejaVu Sans from Debian's `fonts-dejavu-core`. Without one the chart is
//! drawn without text and the caller puts the legend in the markdown.

use std::path::Path;
use std::sync::OnceLock;

use compass_core::sim::Sample;
use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::error::{CliError, Result};

const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

/// At most this many points per line.
const BUCKETS: usize = 1500;

const COLOURS: &[RGBColor] = &[
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(127, 127, 127),
];

/// One policy's line: `(hours since start, N*SIF, utilisation)` per bucket.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64, f64)>,
}

impl Series {
    /// Downsamples to [`BUCKETS`] time buckets: the largest N*SIF and the
    /// mean utilisation of the samples in each bucket (empty buckets repeat
    /// the previous values).
    pub fn from_samples(name: &str, samples: &[Sample]) -> Self {
        let mut points = Vec::new();
        if let (Some(first), Some(last)) = (samples.first(), samples.last()) {
            let (t0, span) = (first.t_s, (last.t_s - first.t_s).max(1.0));
            let mut acc: Vec<(f64, f64, usize)> = vec![(0.0, 0.0, 0); BUCKETS];
            for s in samples {
                let b = (((s.t_s - t0) / span) * (BUCKETS - 1) as f64) as usize;
                let a = &mut acc[b.min(BUCKETS - 1)];
                a.0 = a.0.max(s.n_sif as f64);
                a.1 += s.utilisation;
                a.2 += 1;
            }
            let mut prev = (0.0, 0.0);
            for (b, (sif, util, n)) in acc.into_iter().enumerate() {
                if n > 0 {
                    prev = (sif, util / n as f64);
                }
                let hours = span * b as f64 / (BUCKETS - 1) as f64 / 3600.0;
                points.push((hours, prev.0, prev.1));
            }
        }
        Self {
            name: name.to_string(),
            points,
        }
    }
}

/// Loads a font for text once; `false` when none is available.
fn font_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| {
        let candidates = std::env::var("COMPASS_FONT").into_iter().chain(FONT_PATHS.iter().map(|s| s.to_string()));
        for path in candidates {
            if let Ok(bytes) = std::fs::read(&path) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        tracing::warn!("no TrueType font found (install fonts-dejavu-core or set COMPASS_FONT): chart without text");
        false
    })
}

/// The legend as text, for charts drawn without a font.
pub fn legend_text(series: &[Series]) -> String {
    let names: Vec<String> = series
        .iter()
        .zip(COLOURS.iter().cycle())
        .map(|(s, c)| format!("{} = rgb({}, {}, {})", s.name, c.0, c.1, c.2))
        .collect();
    format!(
        "Chart without text (no font found). Top: N*SIF, bottom: utilisation, x: time. Lines: {}.",
        names.join(", ")
    )
}

/// Draws the chart; returns whether it has text (title, axes, legend).
pub fn draw(path: &Path, title: &str, series: &[Series]) -> Result<bool> {
    let text = font_ready();
    let err = |e: &dyn std::fmt::Display| CliError::Chart {
        path: path.display().to_string(),
        why: e.to_string(),
    };
    let root = BitMapBackend::new(path, (1400, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let x_max = series
        .iter()
        .flat_map(|s| s.points.last().map(|p| p.0))
        .fold(1e-9, f64::max);
    let sif_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(1.0, f64::max)
        * 1.1;
    let (top, bottom) = root.split_vertically(450);
    for (area, panel) in [(&top, 0), (&bottom, 1)] {
        let y_max = if panel == 0 { sif_max } else { 1.05 };
        let mut builder = ChartBuilder::on(area);
        builder.margin(12);
        if text {
            let caption = if panel == 0 {
                format!("{title}: N*SIF")
            } else {
                "GPU utilisation".to_string()
            };
            builder
                .caption(caption, ("sans-serif", 22))
                .x_label_area_size(35)
                .y_label_area_size(55);
        }
        let mut chart = builder
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)
            .map_err(|e| err(&e))?;
        if text {
            chart
                .configure_mesh()
                .x_desc("hours since first submission")
                .y_desc(if panel == 0 {
                    "N*SIF"
                } else {
                    "used / total GPUs"
                })
                .draw()
                .map_err(|e| err(&e))?;
        } else {
            let frame = Rectangle::new([(0.0, 0.0), (x_max, y_max)], BLACK.stroke_width(1));
            chart
                .draw_series(std::iter::once(frame))
                .map_err(|e| err(&e))?;
        }
        for (s, colour) in series.iter().zip(COLOURS.iter().cycle()) {
            let line = s
                .points
                .iter()
                .map(|p| (p.0, if panel == 0 { p.1 } else { p.2 }));
            let drawn = chart
                .draw_series(LineSeries::new(line, colour.stroke_width(1)))
                .map_err(|e| err(&e))?;
            if text {
                let c = *colour;
                drawn.label(s.name.clone()).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3))
                });
            }
        }
        if text {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 16))
                .draw()
                .map_err(|e| err(&e))?;
        }
    }
    root.present().map_err(|e| err(&e))?;
    Ok(text)
}
