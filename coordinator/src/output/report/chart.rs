//! A chart as data: what is plotted, in the result's own units, before any drawing. The
//! report draws it ([`super::draw`]) and prints the same points as its data table, so
//! what a reader sees is what the result files hold.

/// How a chart's series are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Lines through the points, with a dot on each.
    Line,
    /// Dots only, each with its label.
    Points,
    /// A histogram: each point is a bucket of the results' distributions, from the bound
    /// one step below its x up to its x.
    Histogram,
    /// One bar per category; a point's label names it, x is its index.
    Bars,
}

/// One plotted value.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub x: f64,
    pub y: f64,
    /// An error bar (the 95 % confidence interval).
    pub range: Option<(f64, f64)>,
    pub label: Option<String>,
}

impl Point {
    pub fn new(x: f64, y: f64) -> Self {
        Self { x, y, range: None, label: None }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<Point>,
}

/// A vertical line at `x` (a quantile, the knee).
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    pub x: f64,
    pub label: String,
    /// The series it belongs to (its colour).
    pub series: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// Unique in a report; the PNG's file name.
    pub id: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    pub kind: Kind,
    pub series: Vec<Series>,
    pub marks: Vec<Mark>,
}

impl Chart {
    pub fn new(id: &str, title: &str, x_label: &str, y_label: &str, kind: Kind) -> Self {
        Self {
            id: id.to_string(),
            title: title.to_string(),
            x_label: x_label.to_string(),
            y_label: y_label.to_string(),
            log_x: false,
            kind,
            series: Vec::new(),
            marks: Vec::new(),
        }
    }

    pub fn log_x(mut self) -> Self {
        self.log_x = true;
        self
    }

    /// Adds a series unless it has no point.
    pub fn with(mut self, name: &str, points: Vec<Point>) -> Self {
        if !points.is_empty() {
            self.series.push(Series { name: name.to_string(), points });
        }
        self
    }

    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }

    /// The smallest and largest x and y over every point, error bar and mark.
    pub fn bounds(&self) -> ((f64, f64), (f64, f64)) {
        let (mut x0, mut x1, mut y0, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY, f64::NEG_INFINITY);
        for p in self.series.iter().flat_map(|s| &s.points) {
            let (lo, hi) = p.range.unwrap_or((p.y, p.y));
            (x0, x1) = (x0.min(p.x), x1.max(p.x));
            (y0, y1) = (y0.min(p.y.min(lo)), y1.max(p.y.max(hi)));
        }
        for m in &self.marks {
            (x0, x1) = (x0.min(m.x), x1.max(m.x));
        }
        if !x0.is_finite() {
            return ((0.0, 1.0), (0.0, 1.0));
        }
        // No axis reaches past AXIS_MAX: plotters' log axis never ended its key points over
        // a hand-edited result's 1e308 (`surge report` hung).
        let c = |v: f64| v.clamp(-AXIS_MAX, AXIS_MAX);
        ((c(x0), c(x1)), (c(y0), c(y1)))
    }
}

/// The farthest an axis goes: 1e15 (ms: 30,000 years; requests; tokens). A value past it
/// is drawn at the edge.
const AXIS_MAX: f64 = 1e15;

#[cfg(test)]
mod tests {
    use super::*;

    /// A chart of absurd values is drawn, at the axis' edge, and drawing ends.
    #[test]
    fn values_past_any_axis_are_drawn_at_its_edge() {
        let point = |x: f64, y: f64| Point { x, y, range: None, label: None };
        let c = Chart {
            id: "x".into(),
            title: "t".into(),
            x_label: "ms".into(),
            y_label: "n".into(),
            log_x: true,
            kind: Kind::Histogram,
            series: vec![Series { name: "s".into(), points: vec![point(1.0, 1.0), point(1e308, f64::MAX)] }],
            marks: Vec::new(),
        };
        assert_eq!(c.bounds(), ((1.0, AXIS_MAX), (1.0, AXIS_MAX)));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(super::super::draw::svg(&c).map(|s| s.len())));
        let drawn = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("drawing ends");
        assert!(drawn.as_ref().is_ok_and(|n| *n > 0), "{drawn:?}");
    }
}
