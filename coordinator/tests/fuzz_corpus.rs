//! Replays every file of the fuzz corpora (`fuzz/corpus/<target>/`) through the
//! coordinator's fuzz entry points on stable: what the fuzzer found once stays fixed.
//! With `SURGE_FUZZ_SEEDS=1` it also (re)writes the protobuf seeds, valid agent messages
//! encoded here, into `fuzz/corpus/agent_msgs/`.

use prost::Message;
use std::path::{Path, PathBuf};
use surge_coordinator::fuzzing;
use surge_proto::agent_msg::Msg;
use surge_proto::{AgentMsg, Done, Health, Heartbeat, HelloReply, Row, SampleBatch};

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

/// Three agents' messages, each prefixed with its sender's number.
fn agents_seed() -> Vec<u8> {
    let row = |index| Row { index, ttft_us: 1000, latency_us: 5000, output_tokens: 4, ..Default::default() };
    let msgs = [
        (0, Msg::Hello(HelloReply { session_id: 5, ..Default::default() })),
        (1, Msg::Heartbeat(Heartbeat { sent_unix_ns: 1 })),
        (0, Msg::Batch(SampleBatch { run_id: 7, seq: 0, rows: vec![row(0), row(1)], started_unix_ns: 1 })),
        (0, Msg::Batch(SampleBatch { run_id: 7, seq: 0, rows: vec![row(0), row(1)], started_unix_ns: 1 })),
        (2, Msg::Health(Health { in_flight: 3, ..Default::default() })),
        (
            0,
            Msg::Done(Done {
                run_id: 7,
                batches: 1,
                completed: 2,
                stop: surge_proto::StopReason::Finished as i32,
                ..Default::default()
            }),
        ),
        (1, Msg::Done(Done { run_id: 7, stop: surge_proto::StopReason::Signal as i32, ..Default::default() })),
    ];
    let mut out = Vec::new();
    for (who, m) in msgs {
        out.push(who);
        AgentMsg { msg: Some(m) }.encode_length_delimited(&mut out).unwrap();
    }
    out
}

#[test]
fn agent_msgs_corpus() {
    if std::env::var_os("SURGE_FUZZ_SEEDS").is_some() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/agent_msgs");
        std::fs::write(dir.join("three-agents"), agents_seed()).unwrap();
    }
    fuzzing::agent_msgs(&agents_seed());
    replay("agent_msgs", fuzzing::agent_msgs);
}

#[test]
fn dataset_and_config_corpora() {
    replay("sharegpt", fuzzing::sharegpt);
    replay("custom_jsonl", fuzzing::custom_jsonl);
    replay("coordinator_config", fuzzing::coordinator_config);
}
