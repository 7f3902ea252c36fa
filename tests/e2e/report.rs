//! `surge report`: the HTML page parsed with an HTML parser: nothing in it points
//! outside the file, every section has its chart, and the values plotted (each chart's data
//! table) are the values in the result files; PNGs decode and are not blank.

use crate::util::{TempDir, echo, read_json, run_saved, surge, text};
use scraper::{Html, Selector};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

fn sel(s: &str) -> Selector {
    Selector::parse(s).expect("selector")
}

/// Fails on anything that would make a browser fetch: scripts, links, a resource attribute
/// with a scheme, `url(`/`@import` in CSS.
fn assert_self_contained(doc: &Html) {
    assert_eq!(doc.select(&sel("script")).count(), 0, "no script");
    assert_eq!(doc.select(&sel("link")).count(), 0, "no link element");
    for el in doc.select(&sel("*")) {
        for (name, value) in el.value().attrs() {
            let resource = matches!(name, "src" | "href" | "xlink:href" | "action" | "data" | "srcset" | "poster");
            assert!(
                !resource || value.starts_with('#'),
                "<{} {name}={value:?}> points outside the page",
                el.value().name()
            );
            assert!(!value.contains("url("), "<{} {name}> uses url(): {value}", el.value().name());
        }
    }
    for style in doc.select(&sel("style")) {
        let css: String = style.text().collect();
        assert!(!css.contains("url(") && !css.contains("@import"), "CSS fetches: {css}");
    }
}

/// Chart id -> its data rows (series, x, y, CI low, CI high, label).
fn charts(doc: &Html) -> BTreeMap<String, Vec<Vec<String>>> {
    let mut out = BTreeMap::new();
    for fig in doc.select(&sel("figure.chart")) {
        let id = fig.value().attr("data-chart").expect("data-chart").to_string();
        assert_eq!(fig.select(&sel("svg")).count(), 1, "chart {id} has one inline svg");
        let rows = fig
            .select(&sel("table.data tbody tr"))
            .map(|tr| tr.select(&sel("td")).map(|td| td.text().collect::<String>()).collect())
            .collect();
        assert!(out.insert(id.clone(), rows).is_none(), "chart id {id} twice");
    }
    out
}

/// The (x, y) points of one series of a chart.
fn points(rows: &[Vec<String>], series: &str) -> Vec<(f64, f64)> {
    rows.iter().filter(|r| r[0] == series).map(|r| (r[1].parse().unwrap(), r[2].parse().unwrap())).collect()
}

fn nums(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

/// Decodes a PNG and checks its size and that it holds more than one colour.
fn assert_png_not_blank(path: &std::path::Path) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (960, 440), "{}", path.display());
    let px = info.color_type.samples();
    let first = &buf[..px];
    let differing = buf[..info.buffer_size()].chunks(px).filter(|p| p != &first).count();
    assert!(differing > 2000, "{} is (nearly) blank: {differing} pixels differ", path.display());
}

#[test]
fn a_run_report_is_self_contained_and_plots_the_results_values() {
    let (_echo, base) =
        echo("127.0.0.1", &["--ttft-ms", "5", "--itl-ms", "1", "--fault-500-rate", "0.05", "--metrics-flavor", "vllm"]);
    let dir = TempDir::new("report-run");
    let metrics = format!("{base}/metrics");
    let args = [
        "run",
        "--base-url",
        &base,
        "--model",
        "m",
        "--num-prompts",
        "600",
        "--max-concurrency",
        "8",
        "--random-input-len",
        "8",
        "--random-output-len",
        "6",
        "--ignore-eos",
        "--timeslice",
        "250ms",
        "--cost-per-hour",
        "10",
        "--label",
        "runA",
        "--metrics-url",
        &metrics,
        "--scrape-interval",
        "250ms",
    ];
    let r = run_saved(&dir, &args, Duration::from_secs(60));
    assert!(r["failed"].as_u64().unwrap() > 0, "the faults made errors");
    let (html, pngs) = (dir.path("r.html"), dir.path("png"));
    let out = surge(&["report", &dir.path("r.json"), "-o", &html, "--png", &pngs], Duration::from_secs(60));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    let doc = Html::parse_document(&page);
    assert_self_contained(&doc);
    let c = charts(&doc);
    // One chart element per section: distributions, time series, errors, cost.
    for id in [
        "ttft-histogram",
        "ttft-cdf",
        "itl-histogram",
        "itl-cdf",
        "e2el-histogram",
        "e2el-cdf",
        "ts-output-throughput",
        "ts-in-flight",
        "ts-ttft-p99",
        "ts-errors",
        "errors-by-kind",
        "cost-vs-latency",
    ] {
        assert!(c.contains_key(id), "chart {id} missing; have {:?}", c.keys());
    }
    for id in ["run-metadata", "summary", "agents", "errors"] {
        assert!(doc.select(&sel(&format!("section#{id} table"))).count() > 0, "section {id} has a table");
    }
    // The histogram is the result's distribution, bucket for bucket.
    let d = &r["distributions"]["ttft"];
    let want: Vec<(f64, f64)> = nums(&d["le_ms"]).into_iter().zip(nums(&d["counts"])).collect();
    assert_eq!(points(&c["ttft-histogram"], "runA"), want);
    assert_eq!(want.iter().map(|p| p.1).sum::<f64>(), r["completed"].as_f64().unwrap());
    // The CDF ends at 1 and marks the quantiles the result holds.
    let cdf = points(&c["ttft-cdf"], "runA");
    assert_eq!(cdf.last().unwrap().1, 1.0);
    for q in ["p50", "p90", "p99"] {
        let mark = c["ttft-cdf"].iter().find(|row| row[0] == "mark: runA" && row[5] == q).expect(q);
        assert_eq!(mark[1].parse::<f64>().unwrap(), d[format!("{q}_ms")].as_f64().unwrap(), "{q}");
    }
    // The time series, slice for slice.
    let slices = r["time_series"].as_array().unwrap();
    let want: Vec<(f64, f64)> =
        slices.iter().map(|s| (s["t"].as_f64().unwrap(), s["output_throughput"].as_f64().unwrap())).collect();
    assert_eq!(points(&c["ts-output-throughput"], "runA"), want);
    let failed: f64 = points(&c["ts-errors"], "runA").iter().map(|p| p.1).sum();
    assert_eq!(failed, r["failed"].as_f64().unwrap());
    // Errors by kind and the cost point.
    let bars = points(&c["errors-by-kind"], "runA");
    assert_eq!(bars.iter().map(|p| p.1).sum::<f64>(), r["failed"].as_f64().unwrap());
    let cost = points(&c["cost-vs-latency"], "runA");
    assert_eq!(
        cost,
        vec![(r["median_e2el_ms"].as_f64().unwrap(), r["cost_per_million_output_tokens"].as_f64().unwrap())]
    );
    // Every scraped server family over time, value for value (slices without a scrape left out).
    let series = r["server_metrics"]["series"].as_object().expect("server series");
    assert!(!series.is_empty());
    for (family, values) in series {
        let id: String =
            family.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
        let want: Vec<(f64, f64)> = slices
            .iter()
            .zip(values.as_array().unwrap())
            .filter_map(|(s, v)| Some((s["t"].as_f64().unwrap(), v.as_f64()?)))
            .collect();
        let chart = c.get(&format!("server-{id}")).unwrap_or_else(|| panic!("no chart for {family}"));
        assert_eq!(points(chart, "runA"), want, "{family}");
    }
    // The summary table shows the result's numbers.
    let summary: String = doc.select(&sel("section#summary")).next().unwrap().text().collect();
    assert!(summary.contains(&r["completed"].to_string()), "{summary}");
    // A PNG per chart, decodable and not blank.
    let files: Vec<_> = std::fs::read_dir(&pngs).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), c.len(), "{files:?}");
    for f in &files {
        assert_png_not_blank(f);
    }
}

#[test]
fn a_sweep_report_plots_the_summary_with_its_intervals_and_compare_html_overlays() {
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "5", "--itl-ms", "1"]);
    let dir = TempDir::new("report-sweep");
    let d = dir.path("sweep");
    let args = [
        "sweep",
        "--base-url",
        &base,
        "--model",
        "m",
        "--num-prompts",
        "120",
        "--random-input-len",
        "8",
        "--random-output-len",
        "4",
        "--ignore-eos",
        "--concurrency",
        "2,8,32",
        "--runs",
        "2",
        "--cooldown",
        "0s",
        "--result-dir",
        &d,
        "--cost-per-hour",
        "4",
    ];
    let out = surge(&args, Duration::from_secs(180));
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let out = surge(&["report", &d], Duration::from_secs(60));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page = std::fs::read_to_string(format!("{d}/report.html")).unwrap();
    assert!(page.len() < 2_000_000, "{} bytes", page.len());
    let doc = Html::parse_document(&page);
    assert_self_contained(&doc);
    let c = charts(&doc);
    for id in [
        "sweep-request-throughput",
        "sweep-output-throughput",
        "sweep-ttft",
        "sweep-tpot",
        "sweep-itl",
        "sweep-e2el",
        "sweep-tradeoff",
        "sweep-cost",
    ] {
        assert!(c.contains_key(id), "chart {id} missing; have {:?}", c.keys());
    }
    let summary = read_json(&format!("{d}/summary.json"));
    let levels = summary["levels"].as_array().unwrap();
    assert_eq!(levels.len(), 3);
    // Throughput against the level: the mean and the CI of summary.json.
    let rows: Vec<&Vec<String>> = c["sweep-request-throughput"].iter().filter(|r| !r[0].starts_with("mark")).collect();
    assert_eq!(rows.len(), 3);
    for (row, l) in rows.iter().zip(levels) {
        let s = &l["stats"]["request_throughput"];
        assert_eq!(row[1].parse::<f64>().unwrap(), l["concurrency"].as_f64().unwrap());
        assert_eq!(row[2].parse::<f64>().unwrap(), s["mean"].as_f64().unwrap());
        assert_eq!(row[3].parse::<f64>().unwrap(), s["ci95_low"].as_f64().unwrap());
        assert_eq!(row[4].parse::<f64>().unwrap(), s["ci95_high"].as_f64().unwrap());
    }
    // p99 TTFT per level, and the trade-off's per-user speed = 1000 / median TPOT.
    let p99 = points(&c["sweep-ttft"], "p99");
    let want: Vec<(f64, f64)> = levels
        .iter()
        .map(|l| (l["concurrency"].as_f64().unwrap(), l["stats"]["p99_ttft_ms"]["mean"].as_f64().unwrap()))
        .collect();
    assert_eq!(p99, want);
    let trade = points(&c["sweep-tradeoff"], "sweep");
    for ((x, y), l) in trade.iter().zip(levels) {
        assert_eq!(*x, l["stats"]["output_throughput"]["mean"].as_f64().unwrap());
        assert_eq!(*y, 1000.0 / l["stats"]["p50_tpot_ms"]["mean"].as_f64().unwrap());
    }
    // compare --html: the comparison table, both sweeps overlaid.
    let other = dir.path("other");
    std::fs::create_dir_all(&other).unwrap();
    for e in std::fs::read_dir(&d).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            std::fs::copy(&p, std::path::Path::new(&other).join(p.file_name().unwrap())).unwrap();
        }
    }
    let html = dir.path("cmp.html");
    let out = surge(&["compare", &d, &other, "--html", &html], Duration::from_secs(60));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc = Html::parse_document(&std::fs::read_to_string(&html).unwrap());
    assert_self_contained(&doc);
    assert!(doc.select(&sel("section#comparison table")).count() == 1);
    let c = charts(&doc);
    let series: std::collections::BTreeSet<&str> = c["sweep-ttft"].iter().map(|r| r[0].as_str()).collect();
    assert_eq!(series.len(), 4, "two sweeps x p50/p99: {series:?}");
}

#[test]
fn bad_report_input_is_a_usage_error_naming_the_file() {
    let dir = TempDir::new("report-bad");
    let f = dir.path("x.json");
    std::fs::write(&f, "{\"not\": \"a result\"}").unwrap();
    let out = surge(&["report", &f], Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("x.json"), "{}", text(&out.stderr));
    let out = surge(&["report", &dir.path("missing.json")], Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("missing.json"), "{}", text(&out.stderr));
}
