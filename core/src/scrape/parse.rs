//! One `/metrics` answer (Prometheus text 0.0.4, or OpenMetrics) into one value per
//! family, summed over its label sets, through `prom_text_format_parser`. A family the
//! parser rejects (a TYPE line with no samples, which serving stacks emit for labelled
//! metrics not used yet) is left out; the others are kept.

use super::{Histogram, Metric};
use prom_text_format_parser::{Type, ValueType, parse_scrape};
use std::collections::BTreeMap;

/// The largest magnitude a sample is read at: more than any counter of a serving stack
/// reaches (2^59 tokens or bytes), and sums of many stay finite. A page's `1e308` made a
/// run's mean of a gauge infinite, written as `null`, and its own result unreadable.
const LARGEST: f64 = 1e18;

/// The families of `text` that `wanted` accepts, by name. Counters keep the name they
/// are exposed under (`vllm:generation_tokens_total`); an untyped family whose name ends
/// in `_total` is a counter (OpenMetrics' counter samples); `_created` stamps and
/// summaries are left out.
pub fn parse(text: &str, wanted: impl Fn(&str) -> bool) -> BTreeMap<String, Metric> {
    let (families, _rejected) = parse_scrape(text);
    let mut out = BTreeMap::new();
    for f in families {
        if f.name.ends_with("_created") || !wanted(&f.name) {
            continue;
        }
        // Past LARGEST, not finite or NaN: not a measurement, left out.
        let value = |s: &prom_text_format_parser::Sample| Some(s.value.value.as_f64()).filter(|v| v.abs() <= LARGEST);
        let metric = match f.kind {
            // A histogram with a sample past any measure is left out whole: without it, its
            // buckets would stop rising, or its sum would not go with its count.
            Type::Histogram if f.samples.iter().any(|s| value(s).is_none()) => continue,
            Type::Histogram => {
                let mut h = Histogram::default();
                for s in &f.samples {
                    match s.value.value_type {
                        ValueType::Count => h.count += value(s).unwrap_or_default(),
                        ValueType::Sum => h.sum += value(s).unwrap_or_default(),
                        ValueType::Sample => {
                            let le = s.labels.iter().find(|l| l.key == "le").and_then(|l| le(&l.value));
                            if let (Some(le), Some(v)) = (le, value(s)) {
                                h.add_bucket(le, v);
                            }
                        }
                    }
                }
                Metric::Histogram(h)
            }
            Type::Summary => continue,
            kind => {
                let sum = f.samples.iter().filter_map(value).sum();
                let counter = kind == Type::Counter || (kind == Type::Untyped && f.name.ends_with("_total"));
                if counter { Metric::Counter(sum) } else { Metric::Gauge(sum) }
            }
        };
        out.insert(f.name, metric);
    }
    out
}

/// A bucket bound: a float, or `+Inf`.
fn le(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" | "inf" | "+inf" => Some(f64::INFINITY),
        _ => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VLLM: &str = "# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
# TYPE vllm:num_requests_running gauge\n\
vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n\
vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 2.0\n\
# HELP vllm:lora_requests_info Running stats on lora requests.\n\
# TYPE vllm:lora_requests_info gauge\n\
# HELP vllm:generation_tokens_total Number of generation tokens processed.\n\
# TYPE vllm:generation_tokens_total counter\n\
vllm:generation_tokens_total{engine=\"0\",model_name=\"m\"} 1234.0\n\
# HELP vllm:generation_tokens_created Number of generation tokens processed.\n\
# TYPE vllm:generation_tokens_created gauge\n\
vllm:generation_tokens_created{engine=\"0\",model_name=\"m\"} 1.7e+09\n\
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.\n\
# TYPE vllm:time_to_first_token_seconds histogram\n\
vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.01\",model_name=\"m\"} 1.0\n\
vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.1\",model_name=\"m\"} 4.0\n\
vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"} 5.0\n\
vllm:time_to_first_token_seconds_count{engine=\"0\",model_name=\"m\"} 5.0\n\
vllm:time_to_first_token_seconds_sum{engine=\"0\",model_name=\"m\"} 0.5\n\
vllm:time_to_first_token_seconds_bucket{engine=\"1\",le=\"0.01\",model_name=\"m\"} 0.0\n\
vllm:time_to_first_token_seconds_bucket{engine=\"1\",le=\"0.1\",model_name=\"m\"} 1.0\n\
vllm:time_to_first_token_seconds_bucket{engine=\"1\",le=\"+Inf\",model_name=\"m\"} 1.0\n\
vllm:time_to_first_token_seconds_count{engine=\"1\",model_name=\"m\"} 1.0\n\
vllm:time_to_first_token_seconds_sum{engine=\"1\",model_name=\"m\"} 0.05\n\
# HELP python_gc_objects_collected_total Objects collected during gc\n\
# TYPE python_gc_objects_collected_total counter\n\
python_gc_objects_collected_total{generation=\"0\"} 9.0\n\
# HELP vllm:unused_total Nothing yet.\n\
# TYPE vllm:unused_total counter\n";

    #[test]
    fn vllm_families_are_summed_over_label_sets() {
        let m = parse(VLLM, |n| n.starts_with("vllm:"));
        assert_eq!(m.get("vllm:num_requests_running"), Some(&Metric::Gauge(5.0)));
        assert_eq!(m.get("vllm:generation_tokens_total"), Some(&Metric::Counter(1234.0)));
        assert!(!m.contains_key("vllm:generation_tokens_created"), "creation stamps are not metrics");
        assert!(!m.contains_key("python_gc_objects_collected_total"), "not wanted");
        assert!(!m.contains_key("vllm:unused_total") && !m.contains_key("vllm:lora_requests_info"), "no samples");
        let Some(Metric::Histogram(h)) = m.get("vllm:time_to_first_token_seconds") else { panic!("{m:?}") };
        assert_eq!(h.buckets, vec![(0.01, 1.0), (0.1, 5.0), (f64::INFINITY, 6.0)]);
        assert_eq!((h.count, h.sum), (6.0, 0.55));
    }

    #[test]
    fn openmetrics_counters_histograms_and_eof() {
        let om = "# TYPE foo counter\n# HELP foo A counter.\nfoo_total{a=\"1\"} 17.0\nfoo_created{a=\"1\"} 1.5e9\n\
# TYPE lat histogram\n# UNIT lat seconds\nlat_bucket{le=\"0.5\"} 1\nlat_bucket{le=\"+Inf\"} 2\nlat_count 2\nlat_sum 1.25\n\
# TYPE g gauge\ng 3.5\n# EOF\n";
        let m = parse(om, |_| true);
        assert_eq!(m.get("foo_total"), Some(&Metric::Counter(17.0)));
        assert_eq!(m.get("g"), Some(&Metric::Gauge(3.5)));
        assert!(matches!(m.get("lat"), Some(Metric::Histogram(h)) if h.count == 2.0 && h.buckets.len() == 2));
    }

    #[test]
    fn llama_server_metrics() {
        let text = "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n\
# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 120\n\
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.\n\
# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total 480\n\
# HELP llamacpp:requests_processing Number of requests processing.\n\
# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 2\n";
        let m = parse(text, |_| true);
        assert_eq!(m.get("llamacpp:tokens_predicted_total"), Some(&Metric::Counter(480.0)));
        assert_eq!(m.get("llamacpp:requests_processing"), Some(&Metric::Gauge(2.0)));
    }

    /// A real llama-server's `/metrics` (llama.cpp of llama-cpp-python 0.3.36, `--metrics`,
    /// after one completion of 4 tokens), D16.
    #[test]
    fn a_real_llama_server_exposition() {
        let text = include_str!("testdata/llama-server.metrics");
        let m = parse(text, |n| n.starts_with("llamacpp:"));
        let typed = text.lines().filter(|l| l.starts_with("# TYPE")).count();
        assert_eq!(m.len(), typed, "every family read: {:?}", m.keys().collect::<Vec<_>>());
        assert_eq!(m.get("llamacpp:tokens_predicted_total"), Some(&Metric::Counter(4.0)));
        assert_eq!(m.get("llamacpp:prompt_tokens_total"), Some(&Metric::Counter(1.0)));
        assert!(matches!(m.get("llamacpp:requests_processing"), Some(Metric::Gauge(_))));
    }

    /// A sample no serving stack reports is left out of its family's sum, which then stays
    /// finite through any run's sums and means (1e308 twice was infinite).
    #[test]
    fn samples_past_any_measure_are_left_out() {
        let page = "# TYPE g gauge\ng{a=\"1\"} 1e308\ng{a=\"2\"} 1e308\ng{a=\"3\"} 2\n\
# TYPE c_total counter\nc_total{a=\"1\"} -1e300\nc_total{a=\"2\"} 5\nc_total{a=\"3\"} 1e18\n\
# TYPE h histogram\nh_bucket{le=\"1\"} 1e200\nh_bucket{le=\"+Inf\"} 3\nh_count 3\nh_sum 1e300\n";
        let all = parse(page, |_| true);
        assert_eq!(all["g"], Metric::Gauge(2.0));
        assert_eq!(all["c_total"], Metric::Counter(5.0 + 1e18));
        assert!(!all.contains_key("h"), "a histogram with such a sample is left out whole");
    }

    #[test]
    fn garbage_gives_nothing_and_no_panic() {
        for text in ["", "not metrics at all", "{{{", "x{a=\"1\" 3\n"] {
            let got = parse(text, |_| true);
            assert!(got.is_empty(), "{text:?} gave {got:?}");
        }
        // A bucket whose bound is not a number is left out; the family, if kept, has none.
        let got = parse("# TYPE x histogram\nx_bucket{le=\"abc\"} 1\n", |_| true);
        match got.get("x") {
            None => {}
            Some(Metric::Histogram(h)) => assert!(h.buckets.is_empty(), "{h:?}"),
            Some(m) => panic!("x is a histogram, not {m:?}"),
        }
        assert!(got.keys().all(|k| k == "x"), "{got:?}");
    }
}
