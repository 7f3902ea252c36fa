//! Draws a [`Chart`] with `plotters`: as SVG text for the page, or as a PNG file. Text in
//! PNGs is set in the embedded DejaVu Sans (no system font is needed or read).

use super::chart::{Chart, Kind};
use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

/// Width and height of every chart, pixels.
pub const SIZE: (u32, u32) = (960, 440);

/// Series colours (Tableau 10), in order.
const COLOURS: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];

/// DejaVu Sans (its licence: `coordinator/assets/DejaVuSans.LICENSE`).
static FONT: &[u8] = include_bytes!("../../../assets/DejaVuSans.ttf");

fn colour(i: usize) -> RGBColor {
    let (r, g, b) = COLOURS[i % COLOURS.len()];
    RGBColor(r, g, b)
}

/// Registers the embedded font once; plotters lays out text with it for every backend.
fn font() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
            .map_err(|_| "the embedded font cannot be read".to_string())
    })
    .clone()
}

/// The chart as an SVG document.
pub fn svg(c: &Chart) -> Result<String, String> {
    font()?;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        draw(&root, c)?;
        root.present().map_err(|e| format!("chart {}: {e}", c.id))?;
    }
    Ok(out)
}

/// The chart as a PNG file at `path`.
pub fn png(c: &Chart, path: &Path) -> Result<(), String> {
    font()?;
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    draw(&root, c)?;
    root.present().map_err(|e| format!("{}: {e}", path.display()))
}

/// Whether the x axis is drawn on a log scale: asked for, and the values span more than
/// a factor of 20 (a narrower log axis would have no labelled tick).
fn log_scale(c: &Chart) -> bool {
    let ((x0, x1), _) = c.bounds();
    c.log_x && x0 > 0.0 && x1 > 20.0 * x0
}

/// The lower bound of the histogram bucket whose upper bound is `x0`.
fn first_bucket(x0: f64) -> f64 {
    x0 / super::runs::BUCKET_BASE
}

/// An axis value, short: no trailing zeros, thousands without decimals.
fn tick(v: &f64) -> String {
    let a = v.abs();
    let s = if a >= 1000.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 0.1 {
        format!("{v:.3}")
    } else {
        format!("{v:.4}")
    };
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s }
}

/// Padded axis ranges.
fn ranges(c: &Chart) -> (Range<f64>, Range<f64>) {
    let ((x0, x1), (y0, y1)) = c.bounds();
    let x0 = if c.kind == Kind::Histogram { first_bucket(x0) } else { x0 };
    let x = match c.kind {
        Kind::Bars => -0.5..(x1 + 0.5),
        _ if log_scale(c) => (x0 / 1.15)..(x1 * 1.15),
        _ if x1 > x0 => {
            let pad = (x1 - x0) * 0.04;
            (x0 - pad)..(x1 + pad)
        }
        _ => (x0 - x0.abs().max(1.0) * 0.5)..(x1 + x1.abs().max(1.0) * 0.5),
    };
    let lo = y0.min(0.0);
    let hi = if y1 > lo { y1 + (y1 - lo) * 0.1 } else { lo + 1.0 };
    (x, lo..hi)
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &Chart) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (x, y) = ranges(c);
    if log_scale(c) { plot(root, c, x.log_scale(), y, true) } else { plot(root, c, x, y, false) }
}

fn plot<DB, X>(root: &DrawingArea<DB, Shift>, c: &Chart, x: X, y: Range<f64>, log: bool) -> Result<(), String>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    let err = |e: &dyn std::fmt::Display| format!("chart {}: {e}", c.id);
    let (y0, y1) = (y.start, y.end);
    let mut ch = ChartBuilder::on(root)
        .caption(&c.title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(72)
        .build_cartesian_2d(x, y)
        .map_err(|e| err(&e))?;
    let categories: Vec<String> = c
        .series
        .first()
        .map_or_else(Vec::new, |s| s.points.iter().map(|p| p.label.clone().unwrap_or_default()).collect());
    let category = |v: &f64| {
        let i = v.round();
        if (v - i).abs() < 1e-9 && i >= 0.0 {
            categories.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    let x_desc = if log { format!("{}, log scale", c.x_label) } else { c.x_label.clone() };
    let mut mesh = ch.configure_mesh();
    mesh.x_desc(&x_desc)
        .y_desc(&c.y_label)
        .light_line_style(RGBColor(240, 240, 240))
        .label_style(("sans-serif", 13))
        .y_label_formatter(&tick);
    if c.kind == Kind::Bars {
        mesh.x_labels(categories.len().max(1) * 2 + 1).x_label_formatter(&category);
    } else {
        mesh.x_label_formatter(&tick);
    }
    mesh.draw().map_err(|e| err(&e))?;
    let n = c.series.len().max(1) as f64;
    for (i, s) in c.series.iter().enumerate() {
        let col = colour(i);
        let pts: Vec<(f64, f64)> = s.points.iter().map(|p| (p.x, p.y)).collect();
        let legend = move |(x, y): (i32, i32)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], col.filled());
        match c.kind {
            Kind::Line => {
                ch.draw_series(LineSeries::new(pts.clone(), col.stroke_width(2)))
                    .map_err(|e| err(&e))?
                    .label(&s.name)
                    .legend(legend);
                ch.draw_series(pts.iter().map(|&p| Circle::new(p, 3, col.filled()))).map_err(|e| err(&e))?;
            }
            Kind::Points => {
                ch.draw_series(pts.iter().map(|&p| Circle::new(p, 5, col.filled())))
                    .map_err(|e| err(&e))?
                    .label(&s.name)
                    .legend(legend);
                ch.draw_series(pts.windows(2).map(|w| PathElement::new(vec![w[0], w[1]], col.mix(0.5))))
                    .map_err(|e| err(&e))?;
                let labelled = s.points.iter().filter_map(|p| Some((p.x, p.y, p.label.clone()?)));
                ch.draw_series(labelled.map(|(x, y, l)| {
                    EmptyElement::at((x, y)) + Text::new(l, (7, -16), ("sans-serif", 13).into_font().color(&col))
                }))
                .map_err(|e| err(&e))?;
            }
            Kind::Histogram => {
                let bars: Vec<Rectangle<(f64, f64)>> = pts
                    .iter()
                    .map(|&(le, count)| Rectangle::new([(first_bucket(le), 0.0), (le, count)], col.mix(0.55).filled()))
                    .collect();
                ch.draw_series(bars).map_err(|e| err(&e))?.label(&s.name).legend(legend);
            }
            Kind::Bars => {
                let w = 0.8 / n;
                let bars = pts.iter().map(|&(x, v)| {
                    let left = x - 0.4 + w * i as f64;
                    Rectangle::new([(left, 0.0), (left + w, v)], col.filled())
                });
                ch.draw_series(bars).map_err(|e| err(&e))?.label(&s.name).legend(legend);
            }
        }
        let ranged = s.points.iter().filter_map(|p| Some((p.x, p.y, p.range?)));
        ch.draw_series(ranged.map(|(x, y, (lo, hi))| ErrorBar::new_vertical(x, lo, y, hi, col.stroke_width(1), 8)))
            .map_err(|e| err(&e))?;
    }
    for (k, m) in c.marks.iter().enumerate() {
        let col = colour(m.series);
        let top = y1 - (y1 - y0) * (0.04 + 0.07 * (k % 4) as f64);
        ch.draw_series(std::iter::once(PathElement::new(vec![(m.x, y0), (m.x, y1)], col.mix(0.7).stroke_width(1))))
            .map_err(|e| err(&e))?;
        ch.draw_series(std::iter::once(
            EmptyElement::at((m.x, top))
                + Text::new(m.label.clone(), (4, 0), ("sans-serif", 12).into_font().color(&col)),
        ))
        .map_err(|e| err(&e))?;
    }
    if c.series.len() > 1 {
        ch.configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(200, 200, 200))
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(|e| err(&e))?;
    }
    Ok(())
}
