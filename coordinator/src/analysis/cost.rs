//! Cost per million tokens (`--cost-per-hour`): the deployment's price per hour over the tokens it
//! serves in an hour at the measured throughput.

/// USD per million tokens at `tokens_per_s`, for a deployment costing `per_hour` USD an
/// hour; `None` when nothing was served.
pub fn per_million(per_hour: f64, tokens_per_s: f64) -> Option<f64> {
    (tokens_per_s > 0.0 && tokens_per_s.is_finite()).then(|| per_hour / (tokens_per_s * 3600.0) * 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn price_per_hour_over_tokens_per_hour() {
        // 10 USD/h at 1,000 tok/s = 3.6 M tokens an hour: 2.777... USD per million.
        let c = per_million(10.0, 1000.0).unwrap();
        assert!((c - 10.0 / 3.6).abs() < 1e-12, "{c}");
        assert_eq!(per_million(10.0, 0.0), None);
    }
}
