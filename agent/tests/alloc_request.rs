//! Allocations per streamed request on its read side, counted (a regression guard for the
//! request's fixed cost, beside `alloc.rs`'s per token event): a counting allocator around
//! the system's, and whole 8-token chat streams as vLLM sends them, each decoded from a
//! fresh decoder to its row. What hyper allocates for a request is not counted here. The count per
//! request must stay at or under the stated constant; an allocation added to a request's
//! decoding fails it. This binary holds this one test, so nothing else allocates while it
//! counts.

use std::time::{Duration, Instant};
use surge_agent::engine::api::Mode;
use surge_agent::engine::api::decode::{Decoder, Flow};
use surge_core::alloc_count::Counting;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations per request, at most: 4. The gaps' bytes take two (the first gap, and again
/// past 8 bytes: 7 gaps of 500 us are 14), the row's gaps one more (a vector whose length
/// is not its capacity becomes shared bytes through a small box), and the response id one
/// (copied once, to its length, D100; it took three when it was collected char by char).
/// The decoder itself, its SSE parser and every chunk allocate nothing (D74).
const PER_REQUEST: f64 = 4.0;

/// An 8-token chat stream as vLLM sends it, one chunk per read: the role, eight tokens
/// (the last with its finish), the usage, `[DONE]`.
fn stream(r: usize) -> Vec<String> {
    let head =
        format!("\"id\":\"chatcmpl-{r}\",\"object\":\"chat.completion.chunk\",\"created\":1764000000,\"model\":\"m\"");
    let mut chunks = vec![format!(
        "data: {{{head},\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
    )];
    for i in 0..8 {
        let finish = if i == 7 { "\"length\"" } else { "null" };
        chunks.push(format!(
            "data: {{{head},\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\" w{i}\"}},\"logprobs\":null,\"finish_reason\":{finish}}}]}}\n\n"
        ));
    }
    chunks.push(format!(
        "data: {{{head},\"choices\":[],\"usage\":{{\"prompt_tokens\":16,\"total_tokens\":24,\"completion_tokens\":8}}}}\n\n"
    ));
    chunks.push("data: [DONE]\n\n".to_owned());
    chunks
}

#[test]
fn a_streamed_request_decodes_in_no_more_allocations_than_stated() {
    const WARM: usize = 100;
    const COUNTED: usize = 1_000;
    let streams: Vec<Vec<String>> = (0..WARM + COUNTED).map(stream).collect();
    assert!(Counting::count() >= streams.len() as u64, "the counting allocator counts");
    let headers = http::HeaderMap::new();
    let decode = |chunks: &[String]| {
        let st = Instant::now();
        let mut d = Decoder::new(Mode::Stream, true, st, st, false);
        let mut at = st;
        for c in chunks {
            at += Duration::from_micros(500);
            assert_eq!(d.feed(c.as_bytes(), at), Flow::More);
        }
        let mut row = surge_proto::Row::default();
        let ok = d.finish(at, (http::StatusCode::OK, http::Version::HTTP_11, &headers), None, false, &mut row);
        (ok, row)
    };
    for s in &streams[..WARM] {
        drop(decode(s));
    }
    let mut rows = Vec::with_capacity(COUNTED);
    let before = Counting::count();
    for s in &streams[WARM..] {
        rows.push(decode(s));
    }
    let n = Counting::count() - before;
    let per_request = n as f64 / COUNTED as f64;
    eprintln!("allocations per request {per_request:.3} ({n} over {COUNTED})");
    assert!(
        per_request <= PER_REQUEST,
        "{per_request:.3} allocations per request ({n} over {COUNTED}), more than the stated {PER_REQUEST}"
    );
    // Every request succeeded with its 8 tokens and the server's id.
    for (k, (ok, row)) in rows.iter().enumerate() {
        assert!(ok, "request {k}");
        assert_eq!((row.output_tokens, row.gap_count()), (8, 7), "request {k}");
        assert_eq!(row.response_id_str(), format!("chatcmpl-{}", WARM + k));
    }
}
