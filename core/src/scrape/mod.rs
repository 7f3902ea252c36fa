//! The server's own metrics (D11, D16): `GET` each `/metrics` URL, keep the families with
//! the serving stacks' prefixes (`vllm:`, `sglang:`, `llamacpp:`, `tgi_`) and any asked by
//! name, summed over label sets and over the URLs (replicas); with several URLs, each
//! one's families are also kept apart as `FAMILY{instance="HOST:PORT"}` (D69). Used by the coordinator
//! and, when the target is reachable only from agents, by an agent, whose scrapes travel
//! in its session stream ([`to_proto`], [`from_proto`]). [`gpu`] reads GPU exporter
//! pages (DCGM, AMD) per GPU.

pub mod gpu;
mod parse;

pub use gpu::{GpuKey, GpuReading, GpuSource, parse_gpus};
pub use parse::parse;
use std::collections::BTreeMap;
use std::time::Duration;
use surge_proto::{ScrapedMetric, ServerMetrics, scraped_metric::Kind};

/// Families kept without being asked for.
pub const KNOWN_PREFIXES: [&str; 4] = ["vllm:", "sglang:", "llamacpp:", "tgi_"];

/// A histogram summed over label sets: cumulative counts by upper bound (ascending).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    pub buckets: Vec<(f64, f64)>,
    pub count: f64,
    pub sum: f64,
}

impl Histogram {
    /// Adds `cumulative` to the bucket bounded by `le`.
    pub fn add_bucket(&mut self, le: f64, cumulative: f64) {
        match self.buckets.binary_search_by(|(b, _)| b.total_cmp(&le)) {
            Ok(i) => self.buckets[i].1 += cumulative,
            Err(i) => self.buckets.insert(i, (le, cumulative)),
        }
    }

    fn add(&mut self, o: &Histogram) {
        for &(le, c) in &o.buckets {
            self.add_bucket(le, c);
        }
        self.count += o.count;
        self.sum += o.sum;
    }
}

/// One family's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Metric {
    Counter(f64),
    Gauge(f64),
    Histogram(Histogram),
}

/// What one scrape of every URL found.
pub type Snapshot = BTreeMap<String, Metric>;

/// Which families to keep: the known prefixes and `extra` names.
pub fn wanted<'a>(extra: &'a [String]) -> impl Fn(&str) -> bool + 'a {
    move |name| KNOWN_PREFIXES.iter().any(|p| name.starts_with(p)) || extra.iter().any(|e| e == name)
}

/// Adds `b` into `a` (a second replica).
fn merge(a: &mut Snapshot, b: Snapshot) {
    for (name, m) in b {
        match (a.get_mut(&name), m) {
            (Some(Metric::Counter(x)), Metric::Counter(y)) | (Some(Metric::Gauge(x)), Metric::Gauge(y)) => *x += y,
            (Some(Metric::Histogram(x)), Metric::Histogram(y)) => x.add(&y),
            (Some(_), _) => {}
            (None, m) => {
                a.insert(name, m);
            }
        }
    }
}

/// `GET url` (from `local` when given) within `timeout`: the page's text and the URL's
/// host; an error names the URL.
async fn page(
    url: &str,
    timeout: Duration,
    local: Option<std::net::IpAddr>,
    tls: &crate::transport::tls::TargetTls,
) -> Result<(String, String), String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err(format!("{url}: not an http(s) URL"));
    };
    let base = format!("{scheme}://{authority}");
    let path = uri.path_and_query().map_or("/metrics", |p| p.as_str());
    let r = crate::client::get_from(local, tls, &base, path, timeout).await.map_err(|e| format!("{url}: {e}"))?;
    if r.status != 200 {
        return Err(format!("{url}: HTTP {}", r.status));
    }
    Ok((String::from_utf8_lossy(&r.body).into_owned(), authority.host().to_string()))
}

/// Scrapes every URL once (from the host address `local` when given), each within
/// `timeout`, verifying https URLs as `tls` says (the target's `--ca-cert`,
/// `--insecure`); an error names the URL.
pub async fn scrape(
    urls: &[String],
    extra: &[String],
    timeout: Duration,
    local: Option<std::net::IpAddr>,
    tls: &crate::transport::tls::TargetTls,
) -> Result<Snapshot, String> {
    let mut all = Snapshot::new();
    for url in urls {
        let (text, _) = page(url, timeout, local, tls).await?;
        let one = parse(&text, wanted(extra));
        if urls.len() > 1 {
            let authority = url.parse::<http::Uri>().ok().and_then(|u| u.authority().map(ToString::to_string));
            all.extend(apart(&one, authority.as_deref().unwrap_or(url)));
        }
        merge(&mut all, one);
    }
    Ok(all)
}

/// One URL's families under names of their own: `FAMILY{instance="AUTHORITY"}`.
fn apart(one: &Snapshot, authority: &str) -> Vec<(String, Metric)> {
    one.iter().map(|(name, m)| (format!("{name}{{instance=\"{authority}\"}}"), m.clone())).collect()
}

/// Scrapes every GPU exporter page once (`--gpu-metrics-url`), each within `timeout`:
/// the GPUs of all pages, each named by its labels (the URL's host when the page has no
/// host label). A page that answers without any GPU family is an error naming it.
pub async fn scrape_gpus(
    urls: &[String],
    timeout: Duration,
    tls: &crate::transport::tls::TargetTls,
) -> Result<Vec<GpuReading>, String> {
    let mut all = Vec::new();
    for url in urls {
        let (text, host) = page(url, timeout, None, tls).await?;
        let gpus = parse_gpus(&text, &host);
        if gpus.is_empty() {
            return Err(format!(
                "{url}: no GPU in the page (neither DCGM_FI_DEV_* nor AMD gpu_* families with a gpu label)"
            ));
        }
        all.extend(gpus);
    }
    Ok(all)
}

/// A snapshot for the wire.
pub fn to_proto(s: &Snapshot) -> Vec<ScrapedMetric> {
    s.iter()
        .map(|(name, m)| {
            let mut p = ScrapedMetric { name: name.clone(), ..Default::default() };
            match m {
                Metric::Counter(v) => (p.kind, p.value) = (Kind::Counter as i32, *v),
                Metric::Gauge(v) => (p.kind, p.value) = (Kind::Gauge as i32, *v),
                Metric::Histogram(h) => {
                    p.kind = Kind::Histogram as i32;
                    (p.le, p.cumulative) = h.buckets.iter().copied().unzip();
                    (p.count, p.sum) = (h.count, h.sum);
                }
            }
            p
        })
        .collect()
}

/// A snapshot from the wire; metrics of an unknown kind are left out.
pub fn from_proto(m: &ServerMetrics) -> Snapshot {
    m.metrics
        .iter()
        .filter_map(|p| {
            let metric = match Kind::try_from(p.kind).ok()? {
                Kind::Counter => Metric::Counter(p.value),
                Kind::Gauge => Metric::Gauge(p.value),
                Kind::Histogram => Metric::Histogram(Histogram {
                    buckets: p.le.iter().copied().zip(p.cumulative.iter().copied()).collect(),
                    count: p.count,
                    sum: p.sum,
                }),
                Kind::Unspecified => return None,
            };
            Some((p.name.clone(), metric))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_add_up_and_survive_the_wire() {
        let a = parse(
            "# TYPE vllm:x_total counter\nvllm:x_total 2\n# TYPE vllm:h histogram\nvllm:h_bucket{le=\"1\"} 1\nvllm:h_bucket{le=\"+Inf\"} 2\nvllm:h_count 2\nvllm:h_sum 1.5\n",
            wanted(&[]),
        );
        let mut all = a.clone();
        merge(&mut all, a);
        assert_eq!(all["vllm:x_total"], Metric::Counter(4.0));
        let Metric::Histogram(h) = &all["vllm:h"] else { panic!() };
        assert_eq!((h.buckets.clone(), h.count, h.sum), (vec![(1.0, 2.0), (f64::INFINITY, 4.0)], 4.0, 3.0));
        let wire = ServerMetrics { metrics: to_proto(&all), ..Default::default() };
        assert_eq!(from_proto(&wire), all);
    }

    #[test]
    fn each_replica_is_also_kept_apart_by_its_instance() {
        let one = parse("# TYPE vllm:x_total counter\nvllm:x_total 2\n", wanted(&[]));
        let named: Snapshot = apart(&one, "10.0.0.1:8000").into_iter().collect();
        assert_eq!(named.get("vllm:x_total{instance=\"10.0.0.1:8000\"}"), Some(&Metric::Counter(2.0)));
        assert_eq!(named.len(), 1);
    }

    #[test]
    fn extra_names_are_kept() {
        let text = "# TYPE my_queue gauge\nmy_queue 7\n# TYPE other gauge\nother 1\n";
        let extra = vec!["my_queue".to_string()];
        let m = parse(text, wanted(&extra));
        assert_eq!(m.keys().collect::<Vec<_>>(), vec!["my_queue"]);
    }
}
