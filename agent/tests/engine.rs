//! The engine and the agent service in-process against the echo server, all on
//! 127.0.0.1 port 0.

use std::sync::Arc;
use std::time::{Duration, Instant};
use surge_agent::engine::VecSink;
use surge_agent::engine::{self, Control};
use surge_agent::service::AgentSettings;
use surge_agent::service::Allowlist;
use surge_proto::{
    AgentMsg, Backend, CoordinatorMsg, DatasetKind, DatasetSpec, ErrorCode, ErrorKind, Hello, Prepare, Start, Workload,
    agent_client::AgentClient, agent_msg, coordinator_msg::Msg,
};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

async fn echo(cfg: surge_echo::EchoConfig) -> (String, oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(surge_echo::serve(listener, cfg, async move {
        let _ = rx.await;
    }));
    (format!("http://{addr}"), tx)
}

fn workload(base: &str, n: u64, concurrency: u32, rate: f64) -> Workload {
    Workload {
        base_url: base.into(),
        http: surge_proto::HttpChoice::Auto as i32,
        ramp: surge_proto::RampStrategy::None as i32,
        endpoint: "/v1/completions".into(),
        backend: Backend::Openai as i32,
        model: "m".into(),
        dataset: Some(DatasetSpec {
            kind: DatasetKind::Random as i32,
            seed: 1,
            random_input_len: 16,
            random_output_len: 8,
            ..Default::default()
        }),
        slice_start: 0,
        slice_len: n,
        max_concurrency: concurrency,
        request_rate: rate,
        burstiness: 1.0,
        ..Default::default()
    }
}

fn control(limit: Duration) -> Control {
    Control { start_at: Instant::now(), deadline: Instant::now() + limit, stop: CancellationToken::new() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_rows_have_tokens_gaps_and_usage() {
    let (base, _stop) = echo(surge_echo::EchoConfig { ttft_ms: 5.0, itl_ms: 2.0, ..Default::default() }).await;
    let prepared = engine::prepare(workload(&base, 300, 20, 0.0)).await.unwrap();
    assert_eq!(prepared.connections_open, 20);
    let sink = Arc::new(VecSink::default());
    let report = engine::run(prepared, sink.clone(), control(Duration::from_secs(60))).await;
    let rows = sink.take();
    assert_eq!(rows.len(), 300);
    assert_eq!(report.completed, 300);
    assert!(report.max_in_flight <= 20);
    let mut idx: Vec<u64> = rows.iter().map(|r| r.index).collect();
    idx.sort_unstable();
    assert_eq!(idx, (0..300).collect::<Vec<_>>());
    for r in &rows {
        assert_eq!(r.error(), ErrorKind::None);
        assert_eq!(r.output_tokens, 8);
        assert_eq!(r.input_tokens, 16);
        assert!(r.usage_from_server);
        assert_eq!(r.gap_count(), 7);
        assert!(r.ttft_us >= 5_000, "TTFT {} us is below the server's 5 ms", r.ttft_us);
        assert!(r.latency_us >= r.ttft_us);
        assert_eq!(r.intended_us, -1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_records_intended_times_and_lag() {
    let (base, _stop) = echo(surge_echo::EchoConfig::default()).await;
    let prepared = engine::prepare(workload(&base, 200, 0, 400.0)).await.unwrap();
    let sink = Arc::new(VecSink::default());
    let report = engine::run(prepared, sink.clone(), control(Duration::from_secs(60))).await;
    let rows = sink.take();
    assert_eq!(rows.len(), 200);
    assert!(rows.iter().all(|r| r.intended_us >= 0 && r.start_us >= r.intended_us));
    // Poisson arrivals at 400/s: 199 gaps averaging 2.5 ms (standard error 0.18 ms).
    let (first, last) =
        rows.iter().fold((i64::MAX, i64::MIN), |(a, b), r| (a.min(r.intended_us), b.max(r.intended_us)));
    let mean_gap_ms = (last - first) as f64 / 199.0 / 1000.0;
    assert!((1.75..3.25).contains(&mean_gap_ms), "mean gap {mean_gap_ms} ms");
    // The echo answers at once, so sends keep up with the schedule.
    assert!(report.lag.p50_us < 20_000, "send lag p50 {} us", report.lag.p50_us);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_cancels_in_flight_requests() {
    let (base, _stop) = echo(surge_echo::EchoConfig { ttft_ms: 60_000.0, ..Default::default() }).await;
    // Without the initial test request, which would wait the echo's 60 s for its answer.
    let prepared = engine::prepare(Workload { skip_initial_test: true, ..workload(&base, 50, 10, 0.0) }).await.unwrap();
    let sink = Arc::new(VecSink::default());
    let ctl = control(Duration::from_secs(60));
    let stop = ctl.stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        stop.cancel();
    });
    let t = Instant::now();
    let report = engine::run(prepared, sink.clone(), ctl).await;
    assert!(t.elapsed() < Duration::from_secs(10));
    assert_eq!(report.stop_reason, engine::StopReason::Stopped);
    let rows = sink.take();
    assert_eq!(rows.len(), 10, "the 10 in flight are reported, the 40 never sent are not");
    assert!(rows.iter().all(|r| r.error() == ErrorKind::Cancelled));
}

/// An open loop with a rate opens ahead the connections of 10 s of its arrivals at their
/// peak rate (D84), never more than its slots or its requests, at least one: an agent's
/// whole capacity (an uncapped run reserves it) is not opened for 2 requests a second. A
/// multiplexed pool keeps its size (one connection per 100 slots).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_loop_opens_ahead_what_ten_seconds_of_its_arrivals_need() {
    let (base, _stop) = echo(surge_echo::EchoConfig::default()).await;
    let ramp = |start: f64, end: f64| {
        move |w: &mut Workload| {
            w.set_ramp(surge_proto::RampStrategy::Linear);
            (w.ramp_start_rps, w.ramp_end_rps) = (start, end);
        }
    };
    let none = |_: &mut Workload| {};
    type Shape<'a> = &'a dyn Fn(&mut Workload);
    let h2 = |w: &mut Workload| w.set_http(surge_proto::HttpChoice::Http2);
    let cases: [(f64, u64, u32, Shape, u32); 7] = [
        (2.0, u64::MAX, 900, &none, 20),
        (0.01, u64::MAX, 900, &none, 1),
        (2.0, 5, 900, &none, 5),
        (50.0, u64::MAX, 300, &none, 300),
        (0.0, 40, 900, &ramp(1.0, 3.0), 30),
        // All at once (no rate): one per slot, as a closed loop.
        (0.0, 50, 12, &none, 12),
        // Multiplexed: the pool keeps one connection per 100 slots for the whole run,
        // opened ahead whatever the rate (not one for 20 requests in 10 s).
        (2.0, u64::MAX, 900, &h2, 9),
    ];
    for (rate, n, slots, shape, want) in cases {
        let mut w = workload(&base, n, slots, rate);
        w.duration_ms = 1_000;
        shape(&mut w);
        let prepared = engine::prepare(w).await.unwrap();
        assert_eq!(prepared.connections_open, want, "rate {rate}, {n} requests, {slots} slots");
    }
}

/// A slice without a request cap (`slice_len` = u64::MAX, a `--duration` run without
/// `--num-prompts`): prepared at once, closed and open loop run until the duration, and
/// rows carry consecutive indices from the slice's start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbounded_slice_runs_until_the_duration() {
    let (base, _stop) = echo(surge_echo::EchoConfig { ttft_ms: 2.0, itl_ms: 1.0, ..Default::default() }).await;
    for (concurrency, rate) in [(8, 0.0), (0, 500.0)] {
        let mut w = workload(&base, u64::MAX, concurrency, rate);
        (w.slice_start, w.duration_ms, w.num_warmups) = (1 << 40, 400, 3);
        let t = Instant::now();
        let prepared = engine::prepare(w).await.unwrap();
        assert!(t.elapsed() < Duration::from_secs(2), "prepared in {:?}", t.elapsed());
        if concurrency > 0 {
            assert_eq!(prepared.connections_open, concurrency);
        }
        let sink = Arc::new(VecSink::default());
        let report = engine::run(prepared, sink.clone(), control(Duration::from_secs(30))).await;
        assert_eq!(report.stop_reason, engine::StopReason::Duration, "c={concurrency} rate={rate}");
        let mut idx: Vec<u64> = sink.take().iter().map(|r| r.index).collect();
        idx.sort_unstable();
        assert!(idx.len() > 20, "{} rows", idx.len());
        assert_eq!(idx, ((1 << 40)..(1 << 40) + idx.len() as u64).collect::<Vec<_>>());
        assert_eq!(report.completed, idx.len() as u64);
    }
}

async fn agent(lease: Duration) -> (String, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let settings = AgentSettings::new(1000, lease, Allowlist::parse(&["127.0.0.1"]).unwrap());
    tokio::spawn(surge_agent::daemon::serve(listener, None, settings, shutdown.clone()));
    (format!("http://{addr}"), shutdown)
}

/// A session stream whose first message (the agent waits for it before answering) is a
/// Hello speaking `version`.
async fn session(addr: &str, version: u32) -> (tokio::sync::mpsc::Sender<CoordinatorMsg>, tonic::Streaming<AgentMsg>) {
    session_with(addr, Hello { protocol_version: version, ..Default::default() }).await
}

/// A session stream whose first message is `hello`.
async fn session_with(
    addr: &str,
    hello: Hello,
) -> (tokio::sync::mpsc::Sender<CoordinatorMsg>, tonic::Streaming<AgentMsg>) {
    let mut client = None;
    for _ in 0..100 {
        if let Ok(c) = AgentClient::connect(addr.to_string()).await {
            client = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tx.send(send(Msg::Hello(hello))).await.unwrap();
    let inbound =
        client.expect("agent up").session(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
    (tx, inbound)
}

async fn next_non_heartbeat(inbound: &mut tonic::Streaming<AgentMsg>) -> agent_msg::Msg {
    loop {
        let m = tokio::time::timeout(Duration::from_secs(10), inbound.message()).await.unwrap().unwrap().unwrap();
        match m.msg.unwrap() {
            agent_msg::Msg::Heartbeat(_) | agent_msg::Msg::Health(_) => continue,
            other => return other,
        }
    }
}

fn send(m: Msg) -> CoordinatorMsg {
    CoordinatorMsg { msg: Some(m) }
}

/// D91: a new session takes the id its Hello gives, so that the coordinator can resume
/// it before it heard the answer; an id a live session holds is not given twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_takes_the_id_its_hello_gives_unless_a_live_one_has_it() {
    let (addr, _shutdown) = agent(Duration::from_secs(3)).await;
    let hello = |resume_session_id, session_id| Hello {
        protocol_version: surge_proto::PROTOCOL_VERSION,
        resume_session_id,
        session_id,
        ..Default::default()
    };
    let id = 0x5eed_0000_0000_0077;
    let (_tx, mut first) = session_with(&addr, hello(0, id)).await;
    let agent_msg::Msg::Hello(h) = next_non_heartbeat(&mut first).await else { panic!("expected a HelloReply") };
    assert_eq!((h.session_id, h.resumed), (id, false));
    // The same id again while that session lives: the agent picks its own.
    let (_tx2, mut second) = session_with(&addr, hello(0, id)).await;
    let agent_msg::Msg::Hello(h) = next_non_heartbeat(&mut second).await else { panic!("expected a HelloReply") };
    assert!(h.session_id != id && h.session_id != 0, "{h:?}");
    // A fresh stream resumes the first session by the id its Hello gave.
    let (_tx3, mut third) = session_with(&addr, hello(id, 0)).await;
    let agent_msg::Msg::Hello(h) = next_non_heartbeat(&mut third).await else { panic!("expected a HelloReply") };
    assert_eq!((h.session_id, h.resumed), (id, true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_mismatch_is_refused_naming_both_versions() {
    // An older coordinator cannot read this agent's messages: refused, naming both.
    let (addr, _shutdown) = agent(Duration::from_secs(3)).await;
    let older = surge_proto::PREVIOUS_PROTOCOL_VERSION;
    let (_tx, mut inbound) = session(&addr, older).await;
    let agent_msg::Msg::Error(e) = next_non_heartbeat(&mut inbound).await else { panic!("expected an error") };
    assert_eq!(e.code, ErrorCode::ProtocolMismatch as i32);
    assert!(
        e.message.contains(&format!("version {older}"))
            && e.message.contains(&format!("version {}", surge_proto::PROTOCOL_VERSION)),
        "{}",
        e.message
    );
    // A newer one hears this agent's version and decides (D43).
    let (_tx, mut inbound) = session(&addr, surge_proto::PROTOCOL_VERSION + 1).await;
    let agent_msg::Msg::Hello(h) = next_non_heartbeat(&mut inbound).await else { panic!("expected a HelloReply") };
    assert_eq!(h.protocol_version, surge_proto::PROTOCOL_VERSION);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_outside_the_allowlist_are_refused() {
    let (addr, _shutdown) = agent(Duration::from_secs(3)).await;
    let (tx, mut inbound) = session(&addr, surge_proto::PROTOCOL_VERSION).await;
    assert!(matches!(next_non_heartbeat(&mut inbound).await, agent_msg::Msg::Hello(_)));
    let w = workload("http://10.1.2.3:8000", 1, 1, 0.0);
    tx.send(send(Msg::Prepare(Box::new(Prepare { run_id: 1, workload: Some(w) })))).await.unwrap();
    let agent_msg::Msg::Error(e) = next_non_heartbeat(&mut inbound).await else { panic!("expected an error") };
    assert_eq!(e.code, ErrorCode::TargetNotAllowed as i32);
    assert!(e.message.contains("allowlist") && e.message.contains("10.1.2.3"), "{}", e.message);
}

/// A coordinator that goes silent (stream open, nothing sent): the agent stops the load
/// after its lease, reports nothing more, and keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_man_switch_stops_load_after_the_lease() {
    let (base, _stop) = echo(surge_echo::EchoConfig { ttft_ms: 20.0, itl_ms: 20.0, ..Default::default() }).await;
    let (addr, _shutdown) = agent(Duration::from_millis(1500)).await;
    let (tx, mut inbound) = session(&addr, surge_proto::PROTOCOL_VERSION).await;
    assert!(matches!(next_non_heartbeat(&mut inbound).await, agent_msg::Msg::Hello(_)));
    let mut w = workload(&base, 1_000_000_000, 20, 0.0);
    w.dataset.as_mut().unwrap().random_output_len = 1000;
    w.slice_len = 200_000;
    // This coordinator says nothing, not even during Prepare: a 20 s initial test request
    // (1000 tokens at 20 ms) would outlast the lease before the load starts.
    w.skip_initial_test = true;
    tx.send(send(Msg::Prepare(Box::new(Prepare { run_id: 7, workload: Some(w) })))).await.unwrap();
    assert!(matches!(next_non_heartbeat(&mut inbound).await, agent_msg::Msg::Ready(_)));
    let now_ns = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64;
    let start = Start { run_id: 7, start_at_unix_ns: now_ns, deadline_unix_ns: now_ns + 600_000_000_000 };
    tx.send(send(Msg::Start(start))).await.unwrap();
    let t = Instant::now();
    // Silence from here on; the agent must give up by itself.
    let done = loop {
        match next_non_heartbeat(&mut inbound).await {
            agent_msg::Msg::Done(d) => break d,
            _ => continue,
        }
    };
    assert_eq!(done.stop(), surge_proto::StopReason::Lease);
    assert!(t.elapsed() < Duration::from_secs(5), "stopped after {:?}", t.elapsed());
    drop(tx);
    // The agent still serves a new session.
    let (_tx2, mut inbound2) = session(&addr, surge_proto::PROTOCOL_VERSION).await;
    assert!(matches!(next_non_heartbeat(&mut inbound2).await, agent_msg::Msg::Hello(_)));
}
