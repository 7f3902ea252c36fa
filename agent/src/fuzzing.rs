//! Entry points for the fuzz targets (`fuzz/`) and for the corpus replay tests that run
//! on stable: each takes untrusted bytes as they reach the agent and must never panic.
//! Not an API; each function is what one fuzz target calls.

use crate::engine::api::openai;
use crate::engine::api::sse::SseParser;
use crate::service::session::{Event, Now, Session};
use crate::service::{AgentSettings, Allowlist};
use prost::Message;
use std::sync::Arc;
use std::time::Duration;
use surge_proto::CoordinatorMsg;

/// A target's response stream, in chunks whose sizes the first bytes choose: SSE framing,
/// then every event's payload classified as a token, usage, error or malformed chunk, and
/// its response id read with it as the id read alone.
pub fn sse_stream(data: &[u8]) {
    let (sizes, body) = data.split_at(data.len().min(4));
    let mut parser = SseParser::new(1 << 16);
    let mut text = String::new();
    let mut rest = body;
    let mut k = 0;
    while !rest.is_empty() {
        let n = usize::from(sizes.get(k % sizes.len().max(1)).copied().unwrap_or(255)).max(1).min(rest.len());
        let (chunk, tail) = rest.split_at(n);
        let fed = parser.feed(chunk, |payload| {
            let event = openai::classify(payload);
            let _ = openai::classify_text(payload, &mut text);
            // The id read with the chunk is the id a reading of the id alone gives (D100).
            let mut id = String::new();
            let _ = openai::classify_with_id(payload, None, None, Some(&mut id));
            if !matches!(event, openai::Event::Malformed | openai::Event::Done) {
                assert_eq!(id, openai::response_id(payload).unwrap_or_default(), "the chunk's id, read once");
            }
        });
        if fed.is_err() {
            return;
        }
        assert!(parser.buffered() <= 1 << 16, "the parser holds at most its limit");
        rest = tail;
        k += 1;
    }
}

/// A coordinator's session messages (length-delimited protobuf), each handled by a
/// fresh agent session state machine as it arrives.
pub fn coordinator_msgs(data: &[u8]) {
    let settings = Arc::new(AgentSettings::new(1000, Duration::from_secs(3), Allowlist::any()));
    let t0 = tokio::time::Instant::now();
    let mut session = Session::new(settings, 1, Now { at: t0, unix_ns: 1_800_000_000_000_000_000 });
    let mut buf = data;
    let mut k = 0u64;
    while !buf.is_empty() {
        let Ok(msg) = CoordinatorMsg::decode_length_delimited(&mut buf) else { return };
        let now = Now {
            at: t0 + Duration::from_millis(k * 10),
            unix_ns: 1_800_000_000_000_000_000 + (k as i64) * 10_000_000,
        };
        let _ = session.handle(Event::Message(msg), now);
        k += 1;
    }
}

/// An agent configuration file (TOML), as `--config` reads it.
pub fn agent_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = crate::daemon::parse_config_text(text);
}
