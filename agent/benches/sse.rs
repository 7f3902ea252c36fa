//! SSE framing and event classification throughput (events/s on one core).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use surge_agent::engine::api::openai::{Event, classify};
use surge_agent::engine::api::sse::SseParser;

/// `events` completion chunks (`chat`: chat chunks, as vLLM and `surge echo` send them).
fn stream(events: usize, chat: bool) -> Vec<u8> {
    let mut s = Vec::new();
    for i in 0..events {
        let chunk = if chat {
            format!(
                "data: {{\"id\":\"chatcmpl-48000\",\"object\":\"chat.completion.chunk\",\"created\":1796687377,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\" tok{i}\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
            )
        } else {
            format!(
                "data: {{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"text\":\" tok{i}\",\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
            )
        };
        s.extend_from_slice(chunk.as_bytes());
    }
    s.extend_from_slice(b"data: [DONE]\n\n");
    s
}

fn bench(c: &mut Criterion) {
    let n = 10_000;
    let s = stream(n, false);
    let chat = stream(n, true);
    let mut g = c.benchmark_group("sse");
    g.throughput(Throughput::Elements(n as u64 + 1));
    // Framing only, in chunks of the sizes socket reads typically return.
    for chunk in [64usize, 1460, 16384] {
        g.bench_function(format!("framing/chunk{chunk}"), |b| {
            b.iter(|| {
                let mut p = SseParser::default();
                let mut count = 0usize;
                for c in s.chunks(chunk) {
                    p.feed(black_box(c), |d| count += d.len()).unwrap();
                }
                black_box(count)
            })
        });
    }
    // Framing plus JSON classification of every event, as the engine does: completion
    // chunks, then chat chunks.
    for (name, events) in [("framing+classify/chunk1460", &s), ("framing+classify/chat/chunk1460", &chat)] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut p = SseParser::default();
                let mut tokens = 0usize;
                for c in events.chunks(1460) {
                    p.feed(c, |d| tokens += usize::from(matches!(classify(d), Event::Token(_)))).unwrap();
                }
                black_box(tokens)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
