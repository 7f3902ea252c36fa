//! `surge compare`: two runs against echo servers with a TTFT of 10 and 20 ms,
//! gated by `--fail-if` rules; a metric missing from the results and results of
//! different schemas are usage errors naming them.

use crate::util::{TempDir, echo, run_saved, surge, text};
use std::time::Duration;

fn one(ttft: &str, dir: &TempDir) -> String {
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", ttft, "--itl-ms", "1"]);
    let args = [
        "run",
        "--base-url",
        &base,
        "--model",
        "m",
        "--num-prompts",
        "200",
        "--max-concurrency",
        "16",
        "--random-input-len",
        "8",
        "--random-output-len",
        "4",
        "--ignore-eos",
    ];
    run_saved(dir, &args, Duration::from_secs(60));
    dir.path("r.json")
}

#[test]
fn a_regression_gate_on_two_runs() {
    let (a, b) = (TempDir::new("cmp-a"), TempDir::new("cmp-b"));
    let (base, cand) = (one("10", &a), one("20", &b));
    let cmp = |rules: &[&str]| {
        let mut args = vec!["compare", base.as_str(), cand.as_str()];
        for r in rules {
            args.extend(["--fail-if", r]);
        }
        surge(&args, Duration::from_secs(30))
    };
    // TTFT doubled: +50 % is breached, +150 % is not.
    let out = cmp(&["median_ttft_ms>+50%"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("median_ttft_ms>+50%"), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.contains("median_ttft_ms") && table.contains("request_throughput"), "{table}");
    let out = cmp(&["median_ttft_ms>+150%", "output_throughput<-90%"]);
    assert_eq!(out.status.code(), Some(0), "{}\n{}", text(&out.stdout), text(&out.stderr));
    // The change printed is the change of the medians in the files.
    let m = |p: &str| crate::util::read_json(p)["median_ttft_ms"].as_f64().unwrap();
    let change = 100.0 * (m(&cand) - m(&base)) / m(&base);
    assert!(text(&out.stdout).contains(&format!("{change:+.1}%")), "{change:+.1}% in {}", text(&out.stdout));
    // A metric nobody has is an error naming it.
    let out = cmp(&["p99_nothing_ms>+1%"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("p99_nothing_ms"), "{}", text(&out.stderr));
    // Results of different schemas are not compared.
    let mut v = crate::util::read_json(&cand);
    v["result_schema"] = serde_json::json!(99);
    let other = b.path("schema99.json");
    std::fs::write(&other, serde_json::to_vec(&v).unwrap()).unwrap();
    let out = surge(&["compare", &base, &other], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("schema 3") && text(&out.stderr).contains("schema 99"), "{}", text(&out.stderr));
}

/// Sweep directories are matched by level, and with two runs a side each line carries
/// Welch's p-value; a much slower candidate is marked significant.
#[test]
fn sweep_directories_are_matched_by_level_with_welch_p_values() {
    let sweep = |ttft: &str, dir: &TempDir| {
        let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", ttft, "--itl-ms", "1"]);
        let d = dir.path("");
        let args = [
            "sweep",
            "--base-url",
            &base,
            "--model",
            "m",
            "--concurrency",
            "4,8",
            "--runs",
            "2",
            "--num-prompts",
            "60",
            "--random-input-len",
            "8",
            "--random-output-len",
            "4",
            "--result-dir",
            &d,
        ];
        let out = surge(&args, Duration::from_secs(120));
        assert!(out.status.success(), "{}", text(&out.stderr));
        d
    };
    let (a, b) = (TempDir::new("cmp-sweep-a"), TempDir::new("cmp-sweep-b"));
    let (base, cand) = (sweep("5", &a), sweep("25", &b));
    let out = surge(&["compare", &base, &cand, "--fail-if", "median_ttft_ms>+100%"], Duration::from_secs(30));
    let table = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{table}\n{}", text(&out.stderr));
    let ttft: Vec<&str> = table.lines().filter(|l| l.contains("median_ttft_ms")).collect();
    assert_eq!(ttft.len(), 2, "one line per level: {table}");
    assert!(ttft.iter().all(|l| l.trim_end().ends_with('*')), "TTFT 5 -> 25 ms is significant: {table}");
    let breaches = text(&out.stderr).matches("median_ttft_ms>+100%").count();
    assert_eq!(breaches, 2, "breached at both levels: {}", text(&out.stderr));
}
