//! Latency statistics as vLLM keys them (`mean_ttft_ms`, `p99_itl_ms`, ...): a leaf of
//! the result model that the run's document and a multi-turn run's per-turn keys share.

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

pub use crate::analysis::dist::MetricStats;

/// Every metric's statistics, keyed as vLLM keys them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Latencies(pub Vec<MetricStats>);

impl Latencies {
    pub fn get(&self, name: &str) -> Option<&MetricStats> {
        self.0.iter().find(|m| m.name == name)
    }
}

impl Serialize for Latencies {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for d in &self.0 {
            let k = &d.name;
            m.serialize_entry(&format!("mean_{k}_ms"), &d.mean_ms)?;
            m.serialize_entry(&format!("median_{k}_ms"), &d.median_ms)?;
            m.serialize_entry(&format!("std_{k}_ms"), &d.std_ms)?;
            for (p, v) in &d.percentiles {
                m.serialize_entry(&format!("p{}_{k}_ms", crate::plan::percentile_word(*p)), v)?;
            }
        }
        m.end()
    }
}

/// A sub-agent graph's statistics (D68), keyed as the latencies are.
const GRAPH_METRICS: [&str; 2] = ["graph_duration", "critical_path"];

/// `(stat, metric)` of a key such as `p99.9_ttft_ms` or `mean_itl_ms`.
pub(crate) fn latency_key(key: &str) -> Option<(&str, &'static str)> {
    let rest = key.strip_suffix("_ms")?;
    let metrics = crate::plan::REASONING_METRICS.iter().chain(&crate::plan::QUEUE_METRICS).chain(&GRAPH_METRICS);
    metrics.chain(&crate::plan::METRICS).find_map(|&metric| {
        let stat = rest.strip_suffix(metric)?.strip_suffix('_')?;
        (!stat.contains('_') || stat.starts_with('p')).then_some((stat, metric))
    })
}

impl<'de> Deserialize<'de> for Latencies {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Num {
            N(Option<f64>),
            Other(IgnoredAny),
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Latencies;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("latency statistics")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Latencies, A::Error> {
                let mut out: Vec<MetricStats> = Vec::new();
                while let Some((key, v)) = map.next_entry::<String, Num>()? {
                    let (Some((stat, metric)), Num::N(v)) = (latency_key(&key), v) else { continue };
                    let v = v.unwrap_or(f64::NAN);
                    let i = match out.iter().position(|m| m.name == metric) {
                        Some(i) => i,
                        None => {
                            out.push(MetricStats {
                                name: metric.to_string(),
                                mean_ms: f64::NAN,
                                median_ms: f64::NAN,
                                std_ms: f64::NAN,
                                percentiles: Vec::new(),
                            });
                            out.len() - 1
                        }
                    };
                    let m = &mut out[i];
                    match stat {
                        "mean" => m.mean_ms = v,
                        "median" => m.median_ms = v,
                        "std" => m.std_ms = v,
                        p => {
                            if let Some(p) = p.strip_prefix('p').and_then(|w| w.parse::<f64>().ok()) {
                                m.percentiles.push((p, v));
                            }
                        }
                    }
                }
                let rank = |n: &str| {
                    crate::plan::METRICS
                        .iter()
                        .chain(&crate::plan::QUEUE_METRICS)
                        .chain(&crate::plan::REASONING_METRICS)
                        .chain(&GRAPH_METRICS)
                        .position(|m| *m == n)
                };
                out.sort_by_key(|m| rank(&m.name));
                Ok(Latencies(out))
            }
        }
        d.deserialize_map(V)
    }
}
