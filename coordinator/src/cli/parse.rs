//! Parsers for flag values: durations (`10s`, `1m30s`), request rates (`inf`, `20`),
//! goodput SLOs (`ttft:200`), metadata (`k=v`) and percentile lists (`50,90,99`). Each
//! returns a message clap attaches to the flag's name.

use crate::plan::{METRICS, QUEUE_METRICS, Slo};
use std::time::Duration;

/// The longest time any flag may give: a year (366 days, so that humantime's `1y` of
/// 365.25 days is one), as long as an agent's longest wait. Longer values would overflow
/// the clocks they are added to (and no benchmark runs or waits that long).
pub const LONGEST: Duration = surge_core::data::turns::LONGEST_WAIT;

fn too_long(s: &str) -> String {
    format!("{s:?} is longer than a year")
}

/// A length in tokens of something synthesized: at most
/// [`surge_core::data::dataset::MAX_INPUT_TOKENS`].
pub fn tokens(s: &str) -> Result<u32, String> {
    let max = surge_core::data::dataset::MAX_INPUT_TOKENS;
    match s.parse::<u32>() {
        Ok(n) if n <= max => Ok(n),
        Ok(_) => Err(format!("{s:?}: at most {max} tokens")),
        Err(_) => Err(format!("{s:?} is not a number of tokens")),
    }
}

/// `10s`, `500ms`, `1m30s`; a bare number means seconds. At most [`LONGEST`].
pub fn duration(s: &str) -> Result<Duration, String> {
    let d = match s.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX),
        Ok(_) => return Err(format!("{s:?} is not a duration (e.g. 10s, 500ms, 2m)")),
        Err(_) => {
            humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration (e.g. 10s, 500ms, 2m): {e}"))?
        }
    };
    if d > LONGEST { Err(too_long(s)) } else { Ok(d) }
}

/// Milliseconds of a wait (a think time, a tool's latency): from 0 to [`LONGEST`].
pub fn millis(s: &str) -> Result<f64, String> {
    let ms = non_negative(s)?;
    if ms > LONGEST.as_secs_f64() * 1e3 { Err(too_long(&format!("{s}ms"))) } else { Ok(ms) }
}

/// Seconds above 0, at most [`LONGEST`].
pub fn seconds(s: &str) -> Result<f64, String> {
    let secs = positive(s)?;
    if secs > LONGEST.as_secs_f64() { Err(too_long(&format!("{s}s"))) } else { Ok(secs) }
}

/// Requests per second, or `inf`.
pub fn rate(s: &str) -> Result<f64, String> {
    let v = if s.eq_ignore_ascii_case("inf") {
        f64::INFINITY
    } else {
        s.parse::<f64>().map_err(|_| format!("{s:?} is not a number or inf"))?
    };
    rate_value(v).map_err(|why| format!("{s:?} {why}"))
}

/// A rate of requests per second: at least one request in [`LONGEST`] (D88), since a
/// slower one would send nothing and end as if it had sent all; `inf` is a rate.
pub fn rate_value(v: f64) -> Result<f64, &'static str> {
    if v.is_nan() || v <= 0.0 {
        Err("must be greater than 0 (or inf)")
    } else if v < 1.0 / LONGEST.as_secs_f64() {
        Err("is less than one request a year")
    } else {
        Ok(v)
    }
}

/// `--request-rate`: one rate for `surge run`, a list of levels for `surge sweep`.
#[derive(Debug, Clone, PartialEq)]
pub struct RateList(pub Vec<f64>);

/// The items of a comma-separated list, trimmed. An empty item (two commas together, or
/// one at an end) is refused, as vLLM's `float("")` refuses it: it is a value left out.
fn items(s: &str) -> Result<Vec<&str>, String> {
    let v: Vec<&str> = s.split(',').map(str::trim).collect();
    if v.len() > 1 && v.iter().any(|p| p.is_empty()) {
        return Err(format!("{s:?}: an empty item in the list"));
    }
    Ok(v.into_iter().filter(|p| !p.is_empty()).collect())
}

/// `inf`, `20`, or `1,2,4,8`.
pub fn rate_list(s: &str) -> Result<RateList, String> {
    let v = items(s)?.into_iter().map(rate).collect::<Result<Vec<_>, _>>()?;
    if v.is_empty() { Err("no rate given".into()) } else { Ok(RateList(v)) }
}

/// Concurrency levels of `surge sweep --concurrency`.
#[derive(Debug, Clone, PartialEq)]
pub struct Levels(pub Vec<u32>);

/// `10,50,100`: positive integers (concurrency levels), sorted, deduplicated.
pub fn level_list(s: &str) -> Result<Levels, String> {
    let mut v = Vec::new();
    for p in items(s)? {
        match p.parse::<u32>() {
            Ok(n) if n > 0 => v.push(n),
            _ => return Err(format!("{p:?} is not a positive integer")),
        }
    }
    if v.is_empty() {
        return Err("no level given".into());
    }
    v.sort_unstable();
    v.dedup();
    Ok(Levels(v))
}

/// A confidence level, strictly between 0.5 and 1.
pub fn confidence(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.5 && v < 1.0 => Ok(v),
        _ => Err(format!("{s:?}: expected a confidence level between 0.5 and 1, e.g. 0.95")),
    }
}

/// A fraction from 0 to 1 inclusive.
pub fn fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?}: expected a number from 0 to 1")),
    }
}

/// A share of a whole: above 0 and at most 1.
pub fn share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 1.0 => Ok(v),
        _ => Err(format!("{s:?}: expected a number above 0 and at most 1")),
    }
}

/// A percentage of a whole: above 0 and at most 100.
pub fn percent(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 100.0 => Ok(v),
        _ => Err(format!("{s:?}: expected a percentage above 0 and at most 100")),
    }
}

pub fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("{s:?} must be a number greater than 0")),
    }
}

pub fn non_negative(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v >= 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("{s:?} must be a number of at least 0")),
    }
}

/// `ttft:200`, `tpot:50`, `e2el:1000` (ms) into one SLO set.
pub fn goodput(items: &[String]) -> Result<Slo, String> {
    let mut slo = Slo::default();
    for item in items {
        let (k, v) = item.split_once(':').ok_or_else(|| format!("{item:?} is not NAME:MS (e.g. ttft:200)"))?;
        let ms: f64 = v
            .parse()
            .ok()
            .filter(|x: &f64| *x >= 0.0 && x.is_finite())
            .ok_or_else(|| format!("{item:?}: {v:?} is not a number of ms"))?;
        let slot = match k {
            "ttft" => &mut slo.ttft_ms,
            "tpot" => &mut slo.tpot_ms,
            "e2el" => &mut slo.e2el_ms,
            "ttfo" => &mut slo.ttfo_ms,
            _ => return Err(format!("{item:?}: unknown metric {k:?} (use ttft, tpot, e2el or ttfo)")),
        };
        *slot = Some(ms);
    }
    Ok(slo)
}

/// `key=value`.
pub fn metadata(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{s:?} is not KEY=VALUE")),
    }
}

/// Metrics named in `--percentile-metrics`, in canonical order.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricList(pub Vec<&'static str>);

/// Percentiles named in `--metric-percentiles`.
#[derive(Debug, Clone, PartialEq)]
pub struct Percentiles(pub Vec<f64>);

/// `ttft,tpot,itl,e2el` (any subset, in any order; reported in the canonical order).
pub fn metric_list(s: &str) -> Result<MetricList, String> {
    let mut wanted = Vec::new();
    for part in items(s)? {
        let m = METRICS.iter().chain(&QUEUE_METRICS).chain(&["ttfo"]).find(|m| **m == part).ok_or_else(|| {
            format!(
                "unknown metric {part:?} (use ttft, tpot, itl, e2el, ttfo, client_queue_time, e2el_including_client_queue)"
            )
        })?;
        wanted.push(*m);
    }
    if wanted.is_empty() {
        return Err("no metric given".into());
    }
    Ok(MetricList(
        METRICS.iter().chain(&QUEUE_METRICS).chain(&["ttfo"]).copied().filter(|m| wanted.contains(m)).collect(),
    ))
}

/// `50,90,99` (each in 0..=100).
pub fn percentile_list(s: &str) -> Result<Percentiles, String> {
    let mut out = Vec::new();
    for part in items(s)? {
        let p: f64 = part.parse().map_err(|_| format!("{part:?} is not a number"))?;
        if !(0.0..=100.0).contains(&p) {
            return Err(format!("{part} is not between 0 and 100"));
        }
        out.push(p);
    }
    if out.is_empty() {
        return Err("no percentile given".into());
    }
    Ok(Percentiles(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(duration("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(duration("250ms").unwrap(), Duration::from_millis(250));
        assert!(duration("soon").is_err());
        assert!(duration("-1").is_err());
    }

    #[test]
    fn rates() {
        assert!(rate("inf").unwrap().is_infinite());
        assert_eq!(rate("20").unwrap(), 20.0);
        assert!(rate("0").is_err());
        assert!(rate("x").is_err());
    }

    #[test]
    fn rate_and_level_lists() {
        assert_eq!(rate_list("1, 2,inf").unwrap().0[..2], [1.0, 2.0]);
        assert!(rate_list("1,0").is_err());
        assert_eq!(level_list("64,8,16,8").unwrap().0, vec![8, 16, 64]);
        assert!(level_list("8,0").is_err());
        assert!(level_list("x").is_err());
    }

    /// A value left out of a list is refused, not skipped; a lone value needs no comma.
    #[test]
    fn an_empty_item_in_a_list_is_refused() {
        for bad in ["1,,2", "1,2,", ",1", " , "] {
            assert!(rate_list(bad).unwrap_err().contains("empty item"), "{bad}");
            assert!(level_list(bad).unwrap_err().contains("empty item"), "{bad}");
            assert!(percentile_list(bad).unwrap_err().contains("empty item"), "{bad}");
        }
        assert!(metric_list("ttft,,itl").unwrap_err().contains("empty item"));
        assert_eq!(level_list(" 4 ").unwrap().0, vec![4]);
        assert_eq!(percentile_list("50, 99").unwrap().0, vec![50.0, 99.0]);
        assert!(rate_list("").is_err());
    }

    #[test]
    fn shares_and_percentages_are_bounded() {
        assert_eq!(share("1").unwrap(), 1.0);
        assert_eq!(share("0.4").unwrap(), 0.4);
        for bad in ["0", "1.5", "2", "-0.1", "nan", "inf"] {
            assert!(share(bad).is_err(), "{bad}");
        }
        assert_eq!(percent("100").unwrap(), 100.0);
        for bad in ["0", "100.5", "nan"] {
            assert!(percent(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn goodput_slos() {
        let s = goodput(&["ttft:200".into(), "tpot:50".into()]).unwrap();
        assert_eq!((s.ttft_ms, s.tpot_ms, s.e2el_ms), (Some(200.0), Some(50.0), None));
        assert_eq!(goodput(&["ttfo:300".into()]).unwrap().ttfo_ms, Some(300.0));
        assert!(goodput(&["ttft".into()]).is_err());
        assert!(goodput(&["ttft:abc".into()]).is_err());
        assert!(goodput(&["itl:5".into()]).is_err());
    }

    #[test]
    fn lists_and_words() {
        assert_eq!(metric_list("e2el,ttft").unwrap().0, vec!["ttft", "e2el"]);
        assert!(metric_list("ttft,foo").is_err());
        assert_eq!(percentile_list("50, 99.9").unwrap().0, vec![50.0, 99.9]);
        assert!(percentile_list("101").is_err());
        assert_eq!(crate::plan::percentile_word(99.0), "99");
        assert_eq!(crate::plan::percentile_word(99.9), "99.9");
        assert_eq!(metadata("a=b=c").unwrap(), ("a".into(), "b=c".into()));
        assert!(metadata("=x").is_err());
    }
}

#[cfg(test)]
mod repeated_flags {
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn run(extra: &[&str]) -> crate::cli::RunArgs {
        let mut argv = vec!["surge", "run"];
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv).expect("parses").command {
            Command::Run(a) => *a,
            _ => panic!("not a run"),
        }
    }

    /// D9: as argparse, a later occurrence of a flag replaces the earlier one (scripts
    /// append overrides to a base command line), list flags included; `--header` appends.
    #[test]
    fn later_occurrences_replace_earlier_ones_but_headers_append() {
        let a = run(&[
            "--percentile-metrics",
            "ttft",
            "--percentile-metrics",
            "ttft,itl",
            "--num-prompts",
            "5",
            "--num-prompts",
            "7",
        ]);
        assert_eq!(a.output.percentile_metrics.0, vec!["ttft", "itl"]);
        assert_eq!(a.load.num_prompts, Some(7));
        let a = run(&["--goodput", "ttft:1", "tpot:2", "--goodput", "e2el:3"]);
        assert_eq!(a.output.goodput, vec!["e2el:3"]);
        let a = run(&["--metadata", "hardware=a", "engine=b", "--metadata", "hardware=c"]);
        assert_eq!(a.output.metadata, vec![("hardware".to_string(), "c".to_string())]);
        let a = run(&["--header", "a:1", "--header", "b:2"]);
        assert_eq!(a.target.headers, vec!["a:1", "b:2"]);
        // D25: several values per occurrence, as vLLM's nargs.
        let a = run(&["--header", "a=1", "b=3", "--header", "c:2", "--num-prompts", "3"]);
        assert_eq!(a.target.headers, vec!["a=1", "b=3", "c:2"]);
    }
}
