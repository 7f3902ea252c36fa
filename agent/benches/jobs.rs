//! The cost of making one request on the fly (prompt drawn + body serialized), the work
//! each request's task does before it is sent (engine/jobs.rs).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::path::Path;
use surge_agent::engine::api::Api;
use surge_agent::engine::workload::Jobs;
use surge_agent::tokenizer;
use surge_proto::{Backend, DatasetKind, DatasetSpec, Workload};

fn workload(input_len: u32) -> Workload {
    Workload {
        backend: Backend::Openai as i32,
        model: "meta-llama/Llama-3.1-8B-Instruct".into(),
        dataset: Some(DatasetSpec {
            kind: DatasetKind::Random as i32,
            seed: 1,
            random_input_len: input_len,
            random_output_len: 128,
            ..Default::default()
        }),
        slice_len: u64::MAX,
        ignore_eos: true,
        ..Default::default()
    }
}

fn bench(c: &mut Criterion) {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tokenizer");
    let tok = tokenizer::load_cached_path(&fixture).expect("fixture tokenizer");
    let mut g = c.benchmark_group("jobs/get");
    for len in [16u32, 1024] {
        let jobs = Jobs::new(&mut workload(len), Api::Completions, None).unwrap();
        let mut k = 0u64;
        g.bench_with_input(BenchmarkId::new("words", len), &len, |b, _| {
            b.iter(|| {
                k += 1;
                black_box(jobs.get(k))
            })
        });
        let jobs = Jobs::new(&mut workload(len), Api::Completions, Some(tok.clone())).unwrap();
        g.bench_with_input(BenchmarkId::new("tokenizer", len), &len, |b, _| {
            b.iter(|| {
                k += 1;
                black_box(jobs.get(k))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
