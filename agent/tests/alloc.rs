//! Allocations on the token path, counted (a regression guard for the per-event cost):
//! a counting allocator around the system's, and a long chat stream decoded chunk by
//! chunk as vLLM sends it. The count per token event, after the stream's buffers have
//! grown, must stay at or under the stated constant; an allocation added to the path
//! fails it. This binary holds this one test, so nothing else allocates while it counts.

use std::time::{Duration, Instant};
use surge_agent::engine::api::Mode;
use surge_agent::engine::api::decode::{Decoder, Flow};
use surge_core::alloc_count::Counting;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations per token event, at most: none (the 0.001 is the gaps' vector doubling
/// once while counted). Each chunk is decoded in place: its strings are borrowed from the
/// bytes read, its one choice held inline.
const PER_TOKEN_EVENT: f64 = 0.001;

/// One token's chunk of stream `kind`, as vLLM sends it.
fn chunk(kind: &str, i: usize) -> String {
    let head =
        "\"id\":\"chatcmpl-bench-1\",\"object\":\"chat.completion.chunk\",\"created\":1764000000,\"model\":\"m\"";
    match kind {
        "chat" => format!(
            "data: {{{head},\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\" w{i}\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
        ),
        "reasoning" => format!(
            "data: {{{head},\"choices\":[{{\"index\":0,\"delta\":{{\"reasoning_content\":\" w{i}\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
        ),
        "completions" => format!(
            "data: {{\"id\":\"cmpl-bench-1\",\"object\":\"text_completion\",\"created\":1764000000,\"model\":\"m\",\"choices\":[{{\"index\":0,\"text\":\" w{i}\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}}]}}\n\n"
        ),
        _ => format!(
            "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"delta\":\" w{i}\",\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"sequence_number\":{i}}}\n\n"
        ),
    }
}

#[test]
fn a_token_event_allocates_no_more_than_stated() {
    const WARM: usize = 4_096;
    const COUNTED: usize = 4_000;
    for kind in ["chat", "reasoning", "completions", "responses"] {
        let mode = if kind == "responses" { Mode::Responses } else { Mode::Stream };
        let chunks: Vec<String> = (0..WARM + COUNTED).map(|i| chunk(kind, i)).collect();
        assert!(Counting::count() >= chunks.len() as u64, "the counting allocator counts");
        let st = Instant::now();
        let mut d = Decoder::new(mode, true, st, st, false);
        let mut at = st;
        // The stream's buffers (the gaps, the parser's) grow to size first; the gaps'
        // vector doubles once more while counted (1 allocation in 4,000 events).
        for c in &chunks[..WARM] {
            at += Duration::from_micros(50);
            assert_eq!(d.feed(c.as_bytes(), at), Flow::More);
        }
        let before = Counting::count();
        for c in &chunks[WARM..] {
            at += Duration::from_micros(50);
            d.feed(c.as_bytes(), at);
        }
        let n = Counting::count() - before;
        let per_event = n as f64 / COUNTED as f64;
        assert!(
            per_event <= PER_TOKEN_EVENT,
            "{kind}: {per_event:.4} allocations per token event ({n} over {COUNTED}), more than the stated {PER_TOKEN_EVENT}"
        );
        eprintln!("{kind}: allocations per token event {per_event:.4} ({n} over {COUNTED})");
        // Every chunk was a token event.
        let mut row = surge_proto::Row::default();
        d.finish(at, (http::StatusCode::OK, http::Version::HTTP_11, &http::HeaderMap::new()), None, false, &mut row);
        assert_eq!(row.gap_count(), WARM + COUNTED - 1, "{kind}");
    }
}
