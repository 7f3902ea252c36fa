//! HTTP/3 fidelity, as for HTTP/1.1 and HTTP/2: 2,000 requests at 200 in
//! flight against `surge echo --tls-self-signed --http3 --ttft-ms 50 --itl-ms 10`, then
//! 2,000 in flight; alone ([`crate::ALONE`]), so no other test's load moves the times.

use crate::h3util::{echo_h3, metric, run_h3};
use crate::util::{TempDir, text};

#[test]
fn http3_fidelity_at_200_in_flight_and_2000_in_flight_complete() {
    let _alone = crate::ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("h3-fidelity");
    let (_echo, base, ca) = echo_h3(&dir, &["--ttft-ms", "50", "--itl-ms", "10"]);
    let common = ["--ca-cert", ca.as_str(), "--random-output-len", "16", "--ignore-eos", "--num-prompts", "2000"];
    // Generous (D13): a host with a CPU hog on one of its two cores saw 51.6 ms, a 2-core
    // VM whose CPUs stall 53.2 ms (debug builds of QUIC on both ends); the bench scripts
    // hold the exact bound. The same VM at 25-34 % CPU pressure read 78.3 ms: a run is
    // judged again when the host stalled past the bound meanwhile ([`crate::stalls::held`]).
    let within = |(ttft, itl): &(f64, f64)| (ttft - 50.0).abs() <= 6.0 && (itl - 10.0).abs() <= 0.3;
    let run = |n: u32| {
        let mut args = common.to_vec();
        args.extend(["--max-concurrency", "200"]);
        let (out, r) = run_h3(&dir, &base, &args, &format!("h3-200-{n}.json"));
        assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
        assert_eq!((r["completed"].as_u64(), r["failed"].as_u64()), (Some(2000), Some(0)), "{r}");
        (r["median_ttft_ms"].as_f64().unwrap(), r["median_itl_ms"].as_f64().unwrap())
    };
    if let Some((ttft, itl)) = crate::stalls::held("http3", 6.0, run, within) {
        assert!((ttft - 50.0).abs() <= 6.0, "median TTFT {ttft} ms vs the echo's 50");
        assert!((itl - 10.0).abs() <= 0.3, "median ITL {itl} ms vs the echo's 10");
    }
    // Every completion and the initial test request came over QUIC: the echo counted them.
    let h3 = metric(&base, &ca, "surge_echo_http3_requests_total");
    assert!(h3 >= 2000.0, "the echo saw {h3} HTTP/3 requests");

    let mut args = common.to_vec();
    args.extend(["--max-concurrency", "2000"]);
    let (out, r) = run_h3(&dir, &base, &args, "h3-2000.json");
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    assert_eq!((r["completed"].as_u64(), r["failed"].as_u64()), (Some(2000), Some(0)), "{r}");
    assert!(r["peak_in_flight"].as_f64().unwrap() > 1000.0, "{}", r["peak_in_flight"]);
}
