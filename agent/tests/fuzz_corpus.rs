//! Replays every file of the fuzz corpora (`fuzz/corpus/<target>/`) through the agent's
//! fuzz entry points on stable: what the fuzzer found once stays fixed. With
//! `SURGE_FUZZ_SEEDS=1` it also (re)writes the protobuf seeds, valid sessions encoded
//! here, into `fuzz/corpus/coordinator_msgs/`.

use prost::Message;
use std::path::{Path, PathBuf};
use surge_agent::fuzzing;
use surge_proto::coordinator_msg::Msg;
use surge_proto::{
    Ack, CoordinatorMsg, DatasetKind, DatasetSpec, Hello, PROTOCOL_VERSION, Prepare, Start, Stop, Workload,
};

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no seed", dir.display());
    files
}

fn replay(target: &str, f: fn(&[u8])) {
    for path in corpus(target) {
        f(&std::fs::read(&path).unwrap());
    }
}

/// A valid session, length-delimited: Hello, Prepare, Start, acks, Stop.
fn session_seed(version: u32) -> Vec<u8> {
    let w = Workload {
        base_url: "http://127.0.0.1:8000".into(),
        http: surge_proto::HttpChoice::Auto as i32,
        ramp: surge_proto::RampStrategy::None as i32,
        endpoint: "/v1/completions".into(),
        model: "m".into(),
        dataset: Some(DatasetSpec { kind: DatasetKind::Random as i32, random_input_len: 16, ..Default::default() }),
        slice_len: 10,
        max_concurrency: 4,
        ..Default::default()
    };
    let msgs = [
        Msg::Hello(Hello { protocol_version: version, ..Default::default() }),
        Msg::Prepare(Box::new(Prepare { run_id: 1, workload: Some(w) })),
        Msg::Start(Start { run_id: 1, start_at_unix_ns: 1_800_000_000_000_000_000, deadline_unix_ns: i64::MAX }),
        Msg::Ack(Ack { run_id: 1, seq: 0 }),
        Msg::Stop(Stop { run_id: 1, reason: "x".into() }),
        Msg::Bye(surge_proto::Bye {}),
    ];
    let mut out = Vec::new();
    for m in msgs {
        CoordinatorMsg { msg: Some(m) }.encode_length_delimited(&mut out).unwrap();
    }
    out
}

#[test]
fn coordinator_msgs_corpus() {
    if std::env::var_os("SURGE_FUZZ_SEEDS").is_some() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/coordinator_msgs");
        std::fs::write(dir.join("session"), session_seed(PROTOCOL_VERSION)).unwrap();
        std::fs::write(dir.join("old-version"), session_seed(2)).unwrap();
    }
    fuzzing::coordinator_msgs(&session_seed(PROTOCOL_VERSION));
    replay("coordinator_msgs", fuzzing::coordinator_msgs);
}

#[test]
fn sse_stream_corpus() {
    replay("sse_stream", fuzzing::sse_stream);
}

#[test]
fn agent_config_corpus() {
    replay("agent_config", fuzzing::agent_config);
}
