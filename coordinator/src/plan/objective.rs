//! An objective a load level must meet (`surge capacity --slo`, D62): a percentile of a
//! per-request latency at most a limit; also what `--precision` names.

/// A per-request latency an SLO bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    Ttft,
    Tpot,
    Itl,
    E2el,
    /// Time to the first answer token (D49): TTFT for a reply that did not reason.
    Ttfo,
}

impl Metric {
    pub const ALL: [Metric; 5] = [Metric::Ttft, Metric::Tpot, Metric::Itl, Metric::E2el, Metric::Ttfo];

    pub fn name(self) -> &'static str {
        match self {
            Metric::Ttft => "ttft",
            Metric::Tpot => "tpot",
            Metric::Itl => "itl",
            Metric::E2el => "e2el",
            Metric::Ttfo => "ttfo",
        }
    }

    pub fn parse(s: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.name() == s)
    }
}

/// `--slo ttft:p99<=2000`: the `pct` percentile of `metric` at most `limit_ms`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Slo {
    pub metric: Metric,
    pub pct: f64,
    pub limit_ms: f64,
}

impl Slo {
    /// `ttft:p99<=2000`.
    pub fn parse(s: &str) -> Result<Slo, String> {
        let bad =
            || format!("{s:?}: expected METRIC:PCT<=MS, e.g. ttft:p99<=2000 (METRIC ttft, tpot, itl, e2el or ttfo)");
        let (metric, rest) = s.split_once(':').ok_or_else(bad)?;
        let (pct, limit) = rest.split_once("<=").ok_or_else(bad)?;
        let metric = Metric::parse(metric.trim()).ok_or_else(bad)?;
        let pct: f64 = pct.trim().strip_prefix('p').ok_or_else(bad)?.parse().map_err(|_| bad())?;
        let limit_ms: f64 = limit.trim().parse().map_err(|_| bad())?;
        if !(50.0..=99.9).contains(&pct) {
            return Err(format!("{s:?}: the percentile is p50 to p99.9"));
        }
        if !(limit_ms.is_finite() && limit_ms > 0.0) {
            return Err(format!("{s:?}: the limit is a positive number of ms"));
        }
        Ok(Slo { metric, pct, limit_ms })
    }

    /// `ttft:p99<=2000`, as given.
    pub fn label(&self) -> String {
        format!("{}:p{}<={}", self.metric.name(), super::percentile_word(self.pct), self.limit_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slos_parse_and_refuse() {
        let s = Slo::parse("ttft:p99<=2000").unwrap();
        assert_eq!((s.metric, s.pct, s.limit_ms), (Metric::Ttft, 99.0, 2000.0));
        assert_eq!(Slo::parse("tpot:p99.9<=100").unwrap().label(), "tpot:p99.9<=100");
        for bad in ["ttft", "ttft:99<=3", "foo:p99<=3", "ttft:p99<3", "ttft:p10<=3", "ttft:p99<=-1"] {
            assert!(Slo::parse(bad).is_err(), "{bad}");
        }
    }
}
