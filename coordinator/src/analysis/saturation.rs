//! Whether a level's queue keeps growing (D62, GuideLLM's over-saturation stop): TTFT
//! regressed on send time over the rows seen so far; the growth counts once the slope is
//! significant (one-sided z above 3.29, p < 0.0005) and large (TTFT rising by at least
//! half its mean over the rows' span). A closed loop above capacity has a long but steady
//! queue and never trips it; an open loop above capacity does within a fraction of its
//! requests.

/// `points`: (send time s, TTFT ms) of successes.
pub fn growing(points: &[(f64, f64)]) -> bool {
    let n = points.len();
    if n < 30 {
        return false;
    }
    let nf = n as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / nf;
    let my = points.iter().map(|p| p.1).sum::<f64>() / nf;
    let (mut sxx, mut sxy) = (0.0, 0.0);
    for &(x, y) in points {
        sxx += (x - mx) * (x - mx);
        sxy += (x - mx) * (y - my);
    }
    if sxx <= 0.0 || my <= 0.0 {
        return false;
    }
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let sse: f64 = points.iter().map(|&(x, y)| (y - intercept - slope * x).powi(2)).sum();
    let se = (sse / (nf - 2.0) / sxx).sqrt();
    let span = points.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max)
        - points.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let significant = if se > 0.0 { slope / se > 3.29 } else { slope > 0.0 };
    significant && slope * span >= 0.5 * my
}

#[cfg(test)]
mod tests {
    use super::*;

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
