//! Exactness with a real model's tokenizer, which is not committed: run it with
//! `SURGE_REAL_TOKENIZER=/path/to/tokenizer.json cargo test -p surge-agent --test
//! real_tokenizer -- --ignored` (e.g. SmolLM2's tokenizer, extracted from its GGUF as
//! docs/tokenizers.md describes). It is ignored by default, and fails when asked to run
//! without the variable: it never passes without checking anything.
//! Prints the distribution of re-encoded lengths of 1,000 seeded prompts at 1024 tokens.

use std::collections::BTreeMap;
use std::time::Instant;
use surge_agent::dataset;
use surge_agent::tokenizer;
use surge_proto::{DatasetKind, DatasetSpec};

#[test]
#[ignore = "needs SURGE_REAL_TOKENIZER=/path/to/tokenizer.json"]
fn thousand_prompts_at_1024_with_a_real_tokenizer() {
    let path = std::env::var_os("SURGE_REAL_TOKENIZER").expect("set SURGE_REAL_TOKENIZER=/path/to/tokenizer.json");
    let t0 = Instant::now();
    let (_, tok) = tokenizer::load_path(std::path::Path::new(&path)).unwrap();
    let loaded = t0.elapsed();
    let words = tok.words().len();
    let vocab_scan = t0.elapsed() - loaded;
    let spec = DatasetSpec {
        kind: DatasetKind::Random as i32,
        seed: 42,
        random_input_len: 1024,
        random_output_len: 1,
        ..Default::default()
    };
    let t1 = Instant::now();
    let prompts = dataset::slice(&spec, Some(&tok), 0, 1000);
    let built = t1.elapsed();
    let mut dist = BTreeMap::<u32, usize>::new();
    for p in &prompts {
        *dist.entry(tok.count(&p.text)).or_default() += 1;
    }
    eprintln!(
        "{}: load {loaded:?}, word scan {vocab_scan:?} ({words} word tokens), 1000 prompts in {built:?}; \
         re-encoded lengths: {dist:?}",
        path.to_string_lossy()
    );
    assert_eq!(dist.get(&1024), Some(&1000), "{dist:?}");
}
