//! Entry points for the fuzz targets (`fuzz/`) and for the corpus replay tests that run
//! on stable: each takes untrusted bytes as they reach the coordinator and must never
//! panic. Not an API; each function is what one fuzz target calls.

use crate::fleet::collect::{Collector, Input};
use crate::fleet::incoming::{Incoming, Said};
use crate::fleet::outcome::AgentReport;
use prost::Message;
use std::io::Write;
use std::time::{Duration, Instant};
use surge_proto::AgentMsg;

/// Agents' session messages (length-delimited protobuf; the first byte of each picks
/// which of three agents sent it), each read as a link reads it ([`Incoming`], D99),
/// which must accept, refuse and read what prost's `AgentMsg` does, and handled by the
/// run's collector as it arrives.
pub fn agent_msgs(data: &[u8]) {
    let t0 = Instant::now();
    let agents = (0..3).map(|i| AgentReport { addr: format!("a{i}"), ..Default::default() }).collect();
    let mut c = Collector::new(7, 1_800_000_000_000_000_000, agents, false, t0, t0 + Duration::from_secs(3600));
    let mut buf = data;
    let mut k = 0u64;
    while let Some((&who, rest)) = buf.split_first() {
        buf = rest;
        let Ok(len) = prost::decode_length_delimiter(&mut buf) else { return };
        let Some((frame, rest)) = buf.split_at_checked(len) else { return };
        buf = rest;
        let said = match (Incoming::decode(frame), AgentMsg::decode(frame)) {
            (Ok(ours), Ok(prost)) => {
                let Some(said) = ours.said() else {
                    assert!(prost.msg.is_none(), "read nothing where prost read {prost:?}");
                    continue;
                };
                // Compared as bytes: a row's f64 may be NaN, which equals nothing.
                let ours = Incoming::from(said.clone()).encode_to_vec();
                assert_eq!(ours, prost.encode_to_vec(), "read as prost reads it");
                said
            }
            (Err(_), Err(_)) => return,
            (ours, prost) => panic!("read {:?} where prost read {:?}", ours.map(Incoming::said), prost),
        };
        let agent = usize::from(who % 3);
        let input = match said {
            Said::Batch(batch) => Input::Batch { agent, batch },
            Said::Msg(msg) => Input::Msg { agent, msg },
        };
        let now = t0 + Duration::from_millis(k * 10);
        let _ = c.handle(input, now);
        k += 1;
    }
    let _ = c.finish();
}

/// A file in a temporary directory holding `data`, removed when dropped.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(data: &[u8], ext: &str) -> Option<Self> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("surge-fuzz-{}-{k}.{ext}", std::process::id()));
        std::fs::File::create(&path).and_then(|mut f| f.write_all(data)).ok()?;
        Some(Self(path))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A ShareGPT file (`--dataset-name sharegpt`).
pub fn sharegpt(data: &[u8]) {
    let Some(f) = TempFile::new(data, "json") else { return };
    let _ = crate::dataset::files::sharegpt(&f.0, None, Some(0), 1000, None);
}

/// A custom JSONL file (`--dataset-name custom`), for both backends.
pub fn custom_jsonl(data: &[u8]) {
    let Some(f) = TempFile::new(data, "jsonl") else { return };
    let _ = crate::dataset::files::custom(&f.0, None, 128, false);
    let _ = crate::dataset::files::custom(&f.0, None, 128, true);
}

/// A coordinator configuration file (`--config`, TOML), parsed as `load_file` parses
/// what it reads (no file per input: the target runs ~3x faster).
pub fn coordinator_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = crate::cli::config::parse_text(text);
}
