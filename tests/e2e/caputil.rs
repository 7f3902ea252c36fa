//! Shared by the capacity tests of the e2e and timing binaries: the echo with 48 slots and
//! a `surge capacity` run against it.

use crate::util::{TempDir, echo, read_json, surge, text};
use serde_json::Value;
use std::time::Duration;

/// The echo: 48 streams at once, TTFT 20 ms, 16 tokens 2 ms apart (a 50 ms service).
pub(crate) fn echo_48() -> (crate::util::Proc, String) {
    echo("127.0.0.1", &["--max-concurrent-streams", "48", "--ttft-ms", "20", "--itl-ms", "2", "--output-tokens", "16"])
}

pub(crate) fn capacity(base: &str, dir: &TempDir, extra: &[&str]) -> (Value, String) {
    let d = dir.path("");
    let mut args = vec![
        "capacity",
        "--base-url",
        base,
        "--model",
        "m",
        "--random-input-len",
        "8",
        "--random-output-len",
        "16",
        "--result-dir",
        &d,
        "--strict",
    ];
    args.extend_from_slice(extra);
    let out = surge(&args, Duration::from_secs(400));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("no effect"), "{}", text(&out.stderr));
    (read_json(&dir.path("capacity.json")), stdout)
}
