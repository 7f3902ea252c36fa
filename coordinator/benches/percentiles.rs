//! Coordinator-side costs: exact percentiles, the merge of 1M rows from 4 agents into the
//! run's metrics, and the bytes on the wire per request for sample streaming.

use criterion::{Criterion, criterion_group, criterion_main};
use prost::Message;
use std::hint::black_box;
use surge_coordinator::analysis::aggregate::{GlobalRow, compute};
use surge_coordinator::analysis::stats::{percentile_sorted, sort};
use surge_coordinator::plan::Slo;
use surge_proto::{Row, SampleBatch};

fn row(i: u64, tokens: usize) -> Row {
    let x = (i.wrapping_mul(2654435761) % 10_000) as u32;
    Row {
        index: i,
        intended_us: -1,
        start_us: (i * 500) as i64,
        ttft_us: u64::from(100_000 + x),
        latency_us: u64::from(100_000 + x + 20_000 * tokens as u32),
        input_tokens: 1024,
        output_tokens: tokens as u32 + 1,
        http_status: 200,
        error: 0,
        itl_us: surge_proto::gaps::pack(&(0..tokens).map(|k| 20_000 + ((x + k as u32 * 7) % 500)).collect::<Vec<_>>()),
        usage_from_server: true,
        input_source: surge_proto::TokenSource::ServerUsage as i32,
        output_source: surge_proto::TokenSource::ServerUsage as i32,
        error_message: String::new(),
        response_id: Default::default(),
        generated_text: String::new(),
        probe: false,
        cut: None,
        ..Default::default()
    }
}

fn bench(c: &mut Criterion) {
    let mut values: Vec<f64> =
        (0..1_000_000u64).map(|i| ((i.wrapping_mul(2654435761) % 1_000_003) as f64) / 1e6).collect();
    c.bench_function("percentiles/sort+p50,p90,p99,p99.9 of 1M", |b| {
        b.iter(|| {
            let mut v = values.clone();
            let s = sort(&mut v);
            black_box([50.0, 90.0, 99.0, 99.9].map(|p| percentile_sorted(s, p)))
        })
    });
    let sorted = sort(&mut values).to_vec();
    c.bench_function("percentiles/one query on sorted 1M", |b| {
        b.iter(|| black_box(percentile_sorted(&sorted, black_box(99.9))))
    });

    // 1M rows from 4 agents (250k each), 8 output tokens (7 gaps) each.
    let rows: Vec<GlobalRow> = (0..1_000_000u64)
        .map(|i| GlobalRow { agent: (i % 4) as usize, start_s: i as f64 * 5e-4, intended_s: None, row: row(i, 7) })
        .collect();
    let mut g = c.benchmark_group("merge");
    g.sample_size(10);
    g.bench_function("1M rows from 4 agents -> metrics", |b| b.iter(|| black_box(compute(&rows, &Slo::default()))));
    g.finish();

    // Wire size per request, printed once: a full batch of 1024 rows.
    for tokens in [0usize, 31, 255] {
        let batch = SampleBatch {
            run_id: 1,
            seq: 7,
            rows: (0..1024).map(|i| row(1_000_000 + i, tokens)).collect(),
            started_unix_ns: 1,
        };
        let bytes = batch.encoded_len() as f64 / 1024.0;
        println!(
            "sample streaming: {bytes:.1} B/request with {tokens} token gaps ({:.2} B per gap beyond the fixed part)",
            if tokens > 0 { (bytes - wire_fixed()) / tokens as f64 } else { 0.0 }
        );
    }
}

fn wire_fixed() -> f64 {
    let batch =
        SampleBatch { run_id: 1, seq: 7, rows: (0..1024).map(|i| row(1_000_000 + i, 0)).collect(), started_unix_ns: 1 };
    batch.encoded_len() as f64 / 1024.0
}

criterion_group!(benches, bench);
criterion_main!(benches);
