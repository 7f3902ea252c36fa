//! `surge capacity` (D62) against `surge echo --max-concurrent-streams 48`, whose capacity
//! is known: a closed loop's under a tight TTFT objective is exactly 48 (one request more
//! waits a whole service time), an evenly paced open loop's is 48 divided by the 50 ms
//! service time. Alone ([`crate::ALONE`]): a 45 ms objective against a 20 ms TTFT leaves
//! 25 ms for the host's noise, which other tests' load would take; one request more than
//! 48 still waits up to 50 ms. A host whose CPUs stall longer than that margin fails a
//! level whatever its load (stalls of 27-100 ms seen on a 2-core VM, the three-agent
//! search once failing its first level, 16, at a p99 of 51 ms): such a search is run
//! again, at most twice, and not judged when all three stalled so ([`held`]).

use crate::caputil::{capacity, echo_48};
use crate::util::{TempDir, agent, read_json, surge, text};
use serde_json::Value;
use std::time::Duration;

/// The objective: p99 TTFT within 45 ms, against the echo's 20 ms TTFT.
const SLO: &str = "ttft:p99<=45";
const SLO_MS: f64 = 45.0;
/// The objective's margin over the echo's TTFT: a longer stall of the host fails a level.
const MARGIN_MS: f64 = SLO_MS - 20.0;

/// Runs a capacity search into a fresh directory named `tag` with the stall probe beside
/// it, again when `right` rejects its answer and the host stalled longer than
/// [`MARGIN_MS`] meanwhile ([`crate::stalls::held`]; a 2-core VM at 25-34 % CPU pressure
/// stalled 52-57 ms in each of three tries). Returns the try to judge; `None`: not judged.
fn held(
    tag: &str,
    search: impl Fn(&TempDir) -> (Value, String),
    right: impl Fn(&Value) -> bool,
) -> Option<(TempDir, Value, String)> {
    let attempt = |n: u32| {
        let dir = TempDir::new(&format!("{tag}-{n}"));
        let (c, stdout) = search(&dir);
        (dir, c, stdout)
    };
    crate::stalls::held(tag, MARGIN_MS, attempt, |(_, c, stdout)| {
        right(c) || {
            eprintln!("{tag}: capacity {}\n{stdout}", c["capacity"]);
            false
        }
    })
}

/// The closed-loop search from 1 to 1024 finds exactly 48, bracket [48, 49], in 12 levels
/// and at most 18 level-runs (a level whose interval straddles the objective is extended:
/// a host stalled 15 ms in every 150 read 37-41 ms at every passing level and took 15;
/// doubling to 64 and stepping down by one would take 22); every level-run's file is
/// written; the summary prints the answer.
#[test]
fn a_closed_loop_capacity_is_exactly_the_servers_slots() {
    let _alone = crate::ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let (_echo, base) = echo_48();
    let Some((dir, c, stdout)) = held(
        "capacity-closed",
        |dir| capacity(&base, dir, &["--over", "concurrency", "--slo", SLO, "--range", "1:1024"]),
        |c| c["capacity"] == 48.0,
    ) else {
        return;
    };
    assert_eq!(c["capacity"], 48.0, "{stdout}");
    assert_eq!(c["bracket"], serde_json::json!([48.0, 49.0]), "{stdout}");
    assert_eq!(c["levels"].as_array().unwrap().len(), 12, "{stdout}");
    assert!(c["totals"]["level_runs"].as_u64().unwrap() <= 18, "{stdout}");
    assert_eq!(c["complete"], true);
    assert_eq!(c["unit"], "concurrency");
    let levels = c["levels"].as_array().unwrap();
    let first: Vec<f64> = levels.iter().take(7).map(|l| l["level"].as_f64().unwrap()).collect();
    assert_eq!(first, [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0], "doubling up to the first failure");
    for l in levels {
        let s = &l["slos"][0];
        assert_eq!(s["slo"], SLO);
        let verdict = l["verdict"].as_str().unwrap();
        // A pass is an upper bound within the limit, a fail a lower bound beyond it.
        match verdict {
            "pass" => assert!(s["high_ms"].as_f64().unwrap() <= SLO_MS, "{l}"),
            "fail" => assert!(l["stopped_early"].is_object() || s["low_ms"].as_f64().unwrap() > SLO_MS, "{l}"),
            v => panic!("{v}: {l}"),
        }
        for f in l["files"].as_array().unwrap() {
            let r = read_json(f.as_str().unwrap());
            assert_eq!(r["max_concurrency"].as_f64(), l["level"].as_f64(), "{f}");
        }
    }
    assert!(c["at_capacity"]["request_throughput"].as_f64().unwrap() > 0.0);
    assert!(stdout.contains("capacity: 48 concurrency (bracket [48, 49])"), "{stdout}");
    // `surge compare --max-capacity-drop`: the same search passes; one whose capacity fell
    // to 44 (-8.3 %) breaches 5 % (exit 1) and not 10 %.
    let d = dir.path("");
    let out = surge(&["compare", &d, &d, "--max-capacity-drop", "5%"], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("+0.0%"), "{}", text(&out.stdout));
    let mut lower = c.clone();
    lower["capacity"] = 44.0.into();
    lower["bracket"] = serde_json::json!([44.0, 45.0]);
    let cand_dir = TempDir::new("capacity-lower");
    std::fs::write(cand_dir.path("capacity.json"), serde_json::to_string(&lower).unwrap()).unwrap();
    let out = surge(&["compare", &d, &cand_dir.path(""), "--max-capacity-drop", "5%"], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("--max-capacity-drop 5% breached"), "{}", text(&out.stderr));
    let out = surge(&["compare", &d, &cand_dir.path(""), "--max-capacity-drop", "10%"], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // `surge report DIR`: the search's section, its table and the objective's chart with
    // the capacity marked.
    let out = surge(&["report", &d], Duration::from_secs(60));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let html = std::fs::read_to_string(dir.path("report.html")).unwrap();
    assert!(html.contains("Capacity: "), "no capacity section");
    assert!(html.contains("capacity 48"), "the capacity is marked");
    assert!(html.contains("levels in search order"));
    assert!(html.contains("<svg"), "the chart is drawn");
}

/// The same search over three agents (from 16: the low levels are the slow ones): the
/// same answer, each level split across them.
#[test]
fn three_agents_find_the_same_closed_loop_capacity() {
    let _alone = crate::ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let (_echo, base) = echo_48();
    let agents: Vec<_> = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
        .iter()
        .map(|ip| agent(ip, &["--plaintext", "--allowed-targets", "127.0.0.1"]))
        .collect();
    let addrs = agents.iter().map(|(_, a)| a.as_str()).collect::<Vec<_>>().join(",");
    let Some((_dir, c, stdout)) = held(
        "capacity-agents",
        |dir| {
            let range = ["--range", "16:1024", "--agents", &addrs, "--agents-plaintext"];
            capacity(&base, dir, &[&["--over", "concurrency", "--slo", SLO][..], &range].concat())
        },
        |c| c["capacity"] == 48.0,
    ) else {
        return;
    };
    assert_eq!(c["capacity"], 48.0, "{stdout}");
    assert_eq!(c["bracket"], serde_json::json!([48.0, 49.0]), "{stdout}");
    let f = c["levels"][0]["files"][0].as_str().unwrap().to_string();
    assert_eq!(read_json(&f)["client"]["agents"].as_array().unwrap().len(), 3);
}

/// An evenly paced open loop: capacity near 48 / 50 ms = 960 requests/s (from 8 % below
/// to 5 % above); the levels above it are stopped early as over-saturated. Seen on a 2-core
/// VM whose CPUs stall: 911, 951 and 995 (a level of a few seconds just past 960 builds a
/// queue of tens of milliseconds, inside the objective's margin; 1,040 fails); the doubling
/// grid's last pass (800) and the refinement's 872 stay outside.
#[test]
fn an_open_loop_capacity_is_slots_over_service_time() {
    let _alone = crate::ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let (_echo, base) = echo_48();
    let within = |c: &Value| c["capacity"].as_f64().is_some_and(|cap| (0.92 * 960.0..=1.05 * 960.0).contains(&cap));
    let Some((_dir, c, stdout)) = held(
        "capacity-rate",
        |dir| capacity(&base, dir, &["--over", "rate", "--burstiness", "1000", "--slo", SLO, "--range", "100:4000"]),
        within,
    ) else {
        return;
    };
    let cap = c["capacity"].as_f64().unwrap_or_else(|| panic!("no capacity:\n{stdout}"));
    assert!(within(&c), "capacity {cap}\n{stdout}");
    let [p, f] = [c["bracket"][0].as_f64().unwrap(), c["bracket"][1].as_f64().unwrap()];
    assert!(f / p - 1.0 <= 0.05, "bracket [{p}, {f}]");
    assert_eq!(c["unit"], "request_rate");
}
