//! Helpers for the HTTP/3 tests (e2e and timing): a TLS echo serving HTTP/3, its metrics
//! over HTTPS, and `surge run --http-version 3` saving its result.

use crate::util::{Proc, TempDir, echo, read_json, surge, text};
use std::time::Duration;

/// A TLS echo serving HTTP/3; returns it, its https:// base URL and its CA file.
pub fn echo_h3(dir: &TempDir, args: &[&str]) -> (Proc, String, String) {
    let ca = dir.path("echo-ca.pem");
    let mut all = vec!["--tls-self-signed", "--http3", "--tls-cert-out", &ca];
    all.extend_from_slice(args);
    let (p, line) = echo("127.0.0.1", &all);
    let base = line.split_whitespace().next().expect("a URL").to_string();
    assert!(base.starts_with("https://"), "{line}");
    assert!(line.contains("HTTP/3"), "{line}");
    (p, base, ca)
}

/// A value of the TLS echo's metrics, read over HTTPS with its CA.
pub fn metric(base: &str, ca: &str, name: &str) -> f64 {
    let out = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "5", "--cacert", ca, &format!("{base}/metrics")])
        .output()
        .expect("curl");
    let body = text(&out.stdout);
    body.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.trim().parse::<f64>().ok()))
        .unwrap_or_else(|| panic!("metric {name} not in {body} {}", text(&out.stderr)))
}

pub fn run_h3(dir: &TempDir, base: &str, extra: &[&str], file: &str) -> (std::process::Output, serde_json::Value) {
    let mut args = vec![
        "run",
        "--base-url",
        base,
        "--http-version",
        "3",
        "--model",
        "m",
        "--random-input-len",
        "16",
        "--save-result",
        "--result-dir",
        dir.0.to_str().expect("utf-8 path"),
        "--result-filename",
        file,
    ];
    args.extend_from_slice(extra);
    let out = surge(&args, Duration::from_secs(180));
    let path = dir.path(file);
    let r = if std::path::Path::new(&path).exists() { read_json(&path) } else { serde_json::Value::Null };
    (out, r)
}
