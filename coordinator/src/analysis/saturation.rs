//! Whether a level's queue keeps growing (D62, GuideLLM's over-saturation stop): TTFT
//! regressed on send time over the rows seen so far; the growth counts once the slope is
//! significant (one-sided z above 3.29, p < 0.0005) and large (TTFT rising by at least
//! half its mean over the rows' span). A closed loop above capacity has a long but steady
//! queue and never trips it; an open loop above capacity does within a fraction of its
//! requests.

/// TTFT against send time over a run's successes, as running sums (Welford's, centred):
/// constant memory whatever the run's length.
#[derive(Debug, Clone, Default)]
pub struct Trend {
    n: u64,
    mean_x: f64,
    mean_y: f64,
    sxx: f64,
    syy: f64,
    sxy: f64,
    min_x: f64,
    max_x: f64,
}

impl Trend {
    /// One success: its send time (s) and TTFT (ms).
    pub fn add(&mut self, x: f64, y: f64) {
        if self.n == 0 {
            (self.min_x, self.max_x) = (x, x);
        }
        self.n += 1;
        let n = self.n as f64;
        let (dx, dy) = (x - self.mean_x, y - self.mean_y);
        self.mean_x += dx / n;
        self.mean_y += dy / n;
        self.sxx += dx * (x - self.mean_x);
        self.syy += dy * (y - self.mean_y);
        self.sxy += dx * (y - self.mean_y);
        self.min_x = self.min_x.min(x);
        self.max_x = self.max_x.max(x);
    }

    /// Whether the TTFT grows with the send time, significantly and by at least half its
    /// mean over the span (never before 30 successes).
    pub fn growing(&self) -> bool {
        if self.n < 30 || self.sxx <= 0.0 || self.mean_y <= 0.0 {
            return false;
        }
        let slope = self.sxy / self.sxx;
        // The residuals' sum of squares: syy less what the line explains.
        let sse = (self.syy - slope * self.sxy).max(0.0);
        let se = (sse / (self.n as f64 - 2.0) / self.sxx).sqrt();
        let significant = if se > 0.0 { slope / se > 3.29 } else { slope > 0.0 };
        significant && slope * (self.max_x - self.min_x) >= 0.5 * self.mean_y
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn growing(points: &[(f64, f64)]) -> bool {
        let mut t = Trend::default();
        for &(x, y) in points {
            t.add(x, y);
        }
        t.growing()
    }

    /// The two-pass regression the running sums replace.
    fn two_pass(points: &[(f64, f64)]) -> (f64, f64) {
        let nf = points.len() as f64;
        let mx = points.iter().map(|p| p.0).sum::<f64>() / nf;
        let my = points.iter().map(|p| p.1).sum::<f64>() / nf;
        let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let slope = sxy / sxx;
        let sse = points.iter().map(|p| (p.1 - (my - slope * mx) - slope * p.0).powi(2)).sum();
        (slope, sse)
    }

    #[test]
    fn the_running_sums_give_the_two_pass_regression() {
        // Send times far from 0 (a run's later seconds), TTFTs noisy.
        let points: Vec<(f64, f64)> = (0..5000)
            .map(|i| (3600.0 + f64::from(i) * 0.002, 40.0 + f64::from(i) * 0.01 + f64::from(i * 31 % 17)))
            .collect();
        let mut t = Trend::default();
        for &(x, y) in &points {
            t.add(x, y);
        }
        let (slope, sse) = two_pass(&points);
        let got = t.sxy / t.sxx;
        assert!((got - slope).abs() <= 1e-9 * slope.abs(), "{got} against {slope}");
        let got_sse = t.syy - got * t.sxy;
        assert!((got_sse - sse).abs() <= 1e-6 * sse, "{got_sse} against {sse}");
    }

    #[test]
    fn a_growing_queue_is_seen_and_a_steady_one_is_not() {
        // Open loop at twice the capacity: TTFT grows with the send time.
        let growing_q: Vec<(f64, f64)> =
            (0..200).map(|i| (f64::from(i) * 0.005, 20.0 + f64::from(i) * 2.0 + f64::from(i % 7))).collect();
        assert!(growing(&growing_q));
        // A steady queue: noisy, flat.
        let steady: Vec<(f64, f64)> =
            (0..2000).map(|i| (f64::from(i) * 0.005, 70.0 + f64::from(i * 37 % 50))).collect();
        assert!(!growing(&steady));
        // A slight significant drift is not growth.
        let drift: Vec<(f64, f64)> = (0..2000).map(|i| (f64::from(i) * 0.005, 20.0 + f64::from(i) * 0.001)).collect();
        assert!(!growing(&drift));
        assert!(!growing(&growing_q[..20]), "too few rows");
    }
}
