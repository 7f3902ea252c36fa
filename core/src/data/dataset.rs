//! Request prompts: request `i` of a run is a pure function of the dataset spec, the
//! run's tokenizer (if any) and `i`, so every agent can build exactly its own slice and
//! the union of all slices equals the dataset one agent would have built.
//!
//! - `random`: with a tokenizer, exactly `random_input_len` tokens (see [`crate::data::synth`]);
//!   without one, that many words drawn from a list of short, common English words. Each
//!   of them, with its leading space, is a single token in the BPE vocabularies of the
//!   common model families, so the prompt is about that many tokens; the echo server,
//!   which counts whitespace-separated words, sees exactly that many. With
//!   `random_range_ratio` r the input and output lengths are drawn uniformly from
//!   `[floor(len*(1-r)), ceil(len*(1+r))]` (output at least 1), as vLLM does; with
//!   `random_prefix_len` P every prompt starts with the same P tokens (drawn from the
//!   seed alone), then its own random part.
//! - `fixed`: the same prompt every time.
//! - `prefix-repetition`: `num_prefixes` shared prefixes of `prefix_len` tokens, each
//!   followed by `suffix_len` random tokens of the request's own; requests go through the
//!   prefixes in blocks of `num_prefixes`, each block in a seeded shuffled order, so every
//!   prefix is used equally often.
//! - `random-mm`: the `random` text, then images ([`super::images`]) in one chat message.
//! - `sharegpt`, `custom`: files, parsed by the coordinator, which ships each agent its
//!   slice; [`prompt`] has nothing to build for them (an empty prompt). `timed_trace` and
//!   `burstgpt` ship lengths: [`trace`] makes each prompt when it is sent.

use super::synth;
use super::tokenizer::Tok;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng, rngs::SmallRng};
use surge_proto::{DatasetKind, DatasetSpec, TokenSource};

/// One request's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    pub text: String,
    /// Prompt tokens: exact with a tokenizer, else approximate (exact for the echo server).
    pub input_tokens: u32,
    /// `max_tokens` to ask for.
    pub output_tokens: u32,
    /// `Tokenizer` when `input_tokens` was counted with one, else `ClientEstimate`.
    pub input_source: TokenSource,
    /// Chat requests of file datasets: the JSON array of messages (else empty).
    pub messages_json: String,
}

#[rustfmt::skip]
const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are",
    "as", "with", "his", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by",
    "word", "but", "not", "what", "all", "were", "we", "when", "your", "can", "said", "there",
    "use", "an", "each", "which", "she", "do", "how", "their", "if", "will", "up", "other",
    "about", "out", "many", "then", "them", "these", "so", "some", "her", "would", "make",
    "like", "him", "into", "time", "has", "look", "two", "more", "write", "go", "see", "number",
    "no", "way", "could", "people", "my", "than", "first", "water", "been", "call", "who",
    "oil", "its", "now", "find", "long", "down", "day", "did", "get", "come", "made", "may",
    "part", "over", "new", "sound", "take", "only", "little", "work", "know", "place", "year",
    "live", "me", "back", "give", "most", "very", "after", "thing", "our", "just", "name",
    "good", "man", "think", "say", "great", "where", "help", "through", "much", "before",
    "line", "right", "too", "mean", "old", "any", "same", "tell", "boy", "follow", "came",
    "want", "show", "also", "around", "form", "three", "small", "set", "put", "end", "does",
    "another", "well", "large", "must", "big", "even", "such", "because", "turn", "here",
    "why", "ask", "went", "men", "read", "need", "land", "different", "home", "us", "move",
    "try", "kind", "hand", "picture", "again", "change", "off", "play", "spell", "air", "away",
    "animal", "house", "point", "page", "letter", "mother", "answer", "found", "study", "still",
    "learn", "should", "world", "high", "every", "near", "add", "food", "between", "own",
    "below", "country", "plant", "last", "school", "father", "keep", "tree", "never", "start",
    "city", "earth", "eye", "light", "thought", "head", "under", "story", "saw", "left",
];

/// The longest prompt a plan may ask an agent to synthesize, in tokens (ten times the
/// longest context served today): a prompt is built whole in memory, and a length no
/// model reads would only exhaust it.
pub const MAX_INPUT_TOKENS: u32 = 10_000_000;

/// Salt of a random-mm request's image draws (apart from its text's).
const IMAGE_SALT: u64 = 0x494d_4147_4500_0001;

/// Salt of a timed trace's hash-id blocks.
const TRACE_BLOCK_SALT: u64 = 0x5452_4143_4500_0001;

/// Salts of the RNG streams that are not per request.
const RANDOM_PREFIX_SALT: u64 = 0x5052_4546_4958_0001;
const REPETITION_PREFIX_SALT: u64 = 0x5052_4546_4958_0002;
const REPETITION_ORDER_SALT: u64 = 0x5052_4546_4958_0003;
/// Most prefixes shuffled per block; above, blocks are rotated instead.
const MAX_SHUFFLED_PREFIXES: u64 = 1024;

/// Builds request `index` of the dataset without a tokenizer.
pub fn prompt(spec: &DatasetSpec, index: u64) -> Prompt {
    build(spec, None, index)
}

/// Builds request `index` of the dataset, with exact token lengths when `tok` is given.
pub fn build(spec: &DatasetSpec, tok: Option<&Tok>, index: u64) -> Prompt {
    match spec.kind() {
        DatasetKind::Fixed => {
            let (input_tokens, input_source) = count(tok, &spec.prompt);
            Prompt {
                text: spec.prompt.clone(),
                input_tokens,
                output_tokens: spec.fixed_output_len,
                input_source,
                messages_json: String::new(),
            }
        }
        DatasetKind::RandomMm => {
            let text = random(spec, tok, index);
            let messages_json = super::images::messages(spec, mix(spec.seed ^ IMAGE_SALT, index), &text.text);
            Prompt { messages_json, ..text }
        }
        DatasetKind::Random | DatasetKind::RandomRerank | DatasetKind::Unspecified => random(spec, tok, index),
        DatasetKind::PrefixRepetition => {
            let k = repetition_prefix(spec, index);
            let mut prefix_rng = SmallRng::seed_from_u64(mix(spec.seed ^ REPETITION_PREFIX_SALT, k));
            let mut rng = SmallRng::seed_from_u64(mix(spec.seed, index));
            let (p, s) = (spec.prefix_repetition_prefix_len, spec.prefix_repetition_suffix_len);
            compose(tok, &mut prefix_rng, p, &mut rng, s, spec.prefix_repetition_output_len)
        }
        DatasetKind::Sharegpt
        | DatasetKind::Custom
        | DatasetKind::TimedTrace
        | DatasetKind::Burstgpt
        | DatasetKind::CustomAudio => Prompt {
            text: String::new(),
            input_tokens: 0,
            output_tokens: 0,
            input_source: TokenSource::ClientEstimate,
            messages_json: String::new(),
        },
    }
}

/// Request `index` of the `random` dataset (also `random-mm`'s text).
fn random(spec: &DatasetSpec, tok: Option<&Tok>, index: u64) -> Prompt {
    let mut rng = SmallRng::seed_from_u64(mix(spec.seed, index));
    let (input, output) = random_lengths(spec, &mut rng);
    let mut prefix_rng = SmallRng::seed_from_u64(mix(spec.seed ^ RANDOM_PREFIX_SALT, 0));
    compose(tok, &mut prefix_rng, spec.random_prefix_len, &mut rng, input, output)
}

/// Request `index` of the `random` dataset as token ids (`--prompt-token-ids`, vllm-bench's):
/// its prefix and its own ids, exactly as long as asked (nothing decoded), and its output
/// length.
pub fn random_ids(spec: &DatasetSpec, tok: &Tok, index: u64) -> (Vec<u32>, u32) {
    let mut rng = SmallRng::seed_from_u64(mix(spec.seed, index));
    let (input, output) = random_lengths(spec, &mut rng);
    let mut prefix_rng = SmallRng::seed_from_u64(mix(spec.seed ^ RANDOM_PREFIX_SALT, 0));
    let mut ids = synth::draw(tok, &mut prefix_rng, spec.random_prefix_len as usize);
    ids.extend(synth::draw(tok, &mut rng, input as usize));
    (ids, output)
}

/// Salt of random-rerank's query.
const RERANK_QUERY_SALT: u64 = 0x5245_5241_4e4b_0001;

/// vLLM's `random-rerank` for a reranker: one query of about half the input length
/// (`--random-input-len / 2 - 1`, the same for every request of the run) and documents
/// `first .. first + n` of the global sequence, each the rest of the input length, the
/// query and a separator taken off. Returns the query then the documents, and what vLLM
/// counts for them: `(query + 1) x documents + the documents' tokens`.
pub fn rerank(spec: &DatasetSpec, tok: Option<&Tok>, first: u64, n: u64) -> (Vec<String>, u32, TokenSource) {
    let input = spec.random_input_len.max(2);
    let query_spec =
        DatasetSpec { random_input_len: (input / 2).saturating_sub(1).max(1), random_prefix_len: 0, ..spec.clone() };
    let query = random(&query_spec, tok, mix(spec.seed ^ RERANK_QUERY_SALT, 0));
    let doc_len = input.saturating_sub(query.input_tokens + 1).max(1);
    let doc_spec = DatasetSpec { random_input_len: doc_len, random_prefix_len: 0, ..spec.clone() };
    let mut texts = Vec::with_capacity(n as usize + 1);
    let mut tokens = (query.input_tokens + 1).saturating_mul(u32::try_from(n).unwrap_or(u32::MAX));
    let source = query.input_source;
    texts.push(query.text);
    for i in first..first + n {
        let d = random(&doc_spec, tok, i);
        tokens = tokens.saturating_add(d.input_tokens);
        texts.push(d.text);
    }
    (texts, tokens, source)
}

/// A random request's input and output lengths (`--random-range-ratio`).
fn random_lengths(spec: &DatasetSpec, rng: &mut SmallRng) -> (u32, u32) {
    if spec.random_range_ratio > 0.0 {
        let r = spec.random_range_ratio.min(1.0);
        let (lo, hi) = range(spec.random_input_len, r);
        let (olo, ohi) = range(spec.random_output_len, r);
        (rng.random_range(lo.max(1.min(hi))..=hi), rng.random_range(olo.max(1)..=ohi.max(1)))
    } else {
        (spec.random_input_len, spec.random_output_len)
    }
}

/// Request `index` of a timed trace from its shipped item: the item's own text, else
/// `input_tokens` tokens made of its hash-id blocks (block j: `trace_block_size` tokens
/// drawn from `hash_ids[j]` and the seed alone, so requests that share ids share a prefix),
/// then tokens of its own for what the blocks do not cover. Exact with a tokenizer (the
/// last part is adjusted), else that many words.
pub fn trace(spec: &DatasetSpec, tok: Option<&Tok>, item: &surge_proto::PromptItem, index: u64) -> Prompt {
    if !item.text.is_empty() || !item.messages_json.is_empty() {
        return Prompt {
            text: item.text.clone(),
            input_tokens: item.input_tokens,
            output_tokens: item.output_tokens,
            input_source: item.input_source(),
            messages_json: item.messages_json.clone(),
        };
    }
    let block = spec.trace_block_size.max(1);
    let mut left = item.input_tokens;
    let mut blocks: Vec<(SmallRng, u32)> = Vec::with_capacity(item.hash_ids.len());
    for &h in &item.hash_ids {
        let n = left.min(block);
        if n == 0 {
            break;
        }
        blocks.push((SmallRng::seed_from_u64(mix(spec.seed ^ TRACE_BLOCK_SALT, h)), n));
        left -= n;
    }
    let mut rng = SmallRng::seed_from_u64(mix(spec.seed, index));
    let (text, input_tokens, input_source) = match tok {
        Some(t) => {
            let prefix: Vec<u32> = blocks.iter_mut().flat_map(|(r, n)| synth::draw(t, r, *n as usize)).collect();
            let (text, m) = synth::exact(t, &mut rng, &prefix, left as usize);
            (text, m, TokenSource::Tokenizer)
        }
        None => {
            let mut text = String::with_capacity(item.input_tokens as usize * 6);
            for (r, n) in &mut blocks {
                push_words(&mut text, r, *n);
            }
            push_words(&mut text, &mut rng, left);
            (text, item.input_tokens, TokenSource::ClientEstimate)
        }
    };
    Prompt { text, input_tokens, output_tokens: item.output_tokens, input_source, messages_json: String::new() }
}

/// Builds the slice `[start, start + len)` (on several threads when a tokenizer makes
/// each prompt expensive).
pub fn slice(spec: &DatasetSpec, tok: Option<&Tok>, start: u64, len: u64) -> Vec<Prompt> {
    let threads = std::thread::available_parallelism().map_or(1, usize::from) as u64;
    if tok.is_none() || len < 64 || threads < 2 {
        return (start..start + len).map(|i| build(spec, tok, i)).collect();
    }
    let chunk = len.div_ceil(threads);
    std::thread::scope(|s| {
        let parts: Vec<_> = (0..threads)
            .map(|t| {
                let lo = start + (t * chunk).min(len);
                let hi = start + ((t + 1) * chunk).min(len);
                s.spawn(move || (lo..hi).map(|i| build(spec, tok, i)).collect::<Vec<_>>())
            })
            .collect();
        parts.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
    })
}

/// Token count of `text`: the tokenizer's, else its words (an estimate).
pub fn count(tok: Option<&Tok>, text: &str) -> (u32, TokenSource) {
    match tok {
        Some(t) => (t.count(text), TokenSource::Tokenizer),
        None => (u32::try_from(text.split_whitespace().count()).unwrap_or(u32::MAX), TokenSource::ClientEstimate),
    }
}

/// vLLM's range of a length under `--random-range-ratio r`: `[floor(len*(1-r)), ceil(len*(1+r))]`.
fn range(len: u32, r: f64) -> (u32, u32) {
    let l = f64::from(len);
    let lo = (l * (1.0 - r)).floor().max(0.0) as u32;
    let hi = ((l * (1.0 + r)).ceil().min(f64::from(u32::MAX)) as u32).max(lo);
    (lo, hi)
}

/// A prefix of `p` tokens (from `prefix_rng`) then `n` random tokens (from `rng`).
fn compose(tok: Option<&Tok>, prefix_rng: &mut SmallRng, p: u32, rng: &mut SmallRng, n: u32, output: u32) -> Prompt {
    let (text, input_tokens, input_source) = match tok {
        Some(t) => {
            let prefix = synth::draw(t, prefix_rng, p as usize);
            let (text, m) = synth::exact(t, rng, &prefix, n as usize);
            (text, m, TokenSource::Tokenizer)
        }
        None => {
            let mut text = String::with_capacity((p + n) as usize * 6);
            push_words(&mut text, prefix_rng, p);
            push_words(&mut text, rng, n);
            (text, p.saturating_add(n), TokenSource::ClientEstimate)
        }
    };
    Prompt { text, input_tokens, output_tokens: output, input_source, messages_json: String::new() }
}

fn push_words(text: &mut String, rng: &mut SmallRng, n: u32) {
    for _ in 0..n {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(WORDS[rng.random_range(0..WORDS.len())]);
    }
}

/// Which shared prefix request `index` of a prefix-repetition dataset uses.
fn repetition_prefix(spec: &DatasetSpec, index: u64) -> u64 {
    let np = u64::from(spec.prefix_repetition_num_prefixes.max(1));
    let (block, pos) = (index / np, index % np);
    let mut rng = SmallRng::seed_from_u64(mix(spec.seed ^ REPETITION_ORDER_SALT, block));
    if np > MAX_SHUFFLED_PREFIXES {
        return (pos + rng.random_range(0..np)) % np;
    }
    let mut order: Vec<u64> = (0..np).collect();
    order.shuffle(&mut rng);
    order[pos as usize]
}

/// Salt of the orders of a file's later passes.
const PASS_SALT: u64 = 0x005e_ed0f_9a55;

/// The entry of a file of `n` entries that position `pos` of pass `pass` takes: pass 0
/// in file order, every later pass in an order of its own drawn from `seed` and the pass
/// (D20; vLLM oversamples by random choice). The order is a seeded affine bijection
/// `a * pos + b mod n` (a coprime to n), so no pass is materialized and every entry is
/// taken once per pass.
pub fn pass_entry(seed: u64, pass: u64, pos: u64, n: u64) -> u64 {
    if n <= 1 {
        return 0;
    }
    if pass == 0 {
        return pos % n;
    }
    let h = mix(seed ^ PASS_SALT, pass);
    let mut a = 1 + h % (n - 1);
    while gcd(a, n) != 1 {
        a = 1 + a % (n - 1);
    }
    let b = mix(h, 1) % n;
    ((u128::from(a) * u128::from(pos % n) + u128::from(b)) % u128::from(n)) as u64
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// SplitMix64 of (seed, index): independent streams per request.
pub fn mix(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod pass_tests {
    use super::pass_entry;

    /// Every pass takes every entry once; pass 0 in file order, later ones in new orders.
    #[test]
    fn each_pass_is_an_order_of_the_whole_file() {
        for n in [1u64, 2, 7, 10, 24, 1000, 1024] {
            let mut orders = Vec::new();
            for pass in 0..4 {
                let order: Vec<u64> = (0..n).map(|pos| pass_entry(42, pass, pos, n)).collect();
                let mut sorted = order.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "n {n} pass {pass}");
                orders.push(order);
            }
            assert_eq!(orders[0], (0..n).collect::<Vec<_>>(), "pass 0 in file order");
            if n >= 7 {
                assert_ne!(orders[1], orders[0], "n {n}: a new order");
                assert_ne!(orders[2], orders[1], "n {n}: each pass its own");
            }
        }
        // Huge indices do not overflow.
        assert!(pass_entry(7, u64::MAX / 3, u64::MAX - 1, 1_000_003) < 1_000_003);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::tokenizer::fixture;
    use std::collections::HashSet;

    fn random(len: u32) -> DatasetSpec {
        DatasetSpec {
            kind: DatasetKind::Random as i32,
            seed: 7,
            random_input_len: len,
            random_output_len: 3,
            ..Default::default()
        }
    }

    #[test]
    fn trace_prompts_share_the_blocks_of_equal_hash_ids() {
        let spec =
            DatasetSpec { kind: DatasetKind::TimedTrace as i32, seed: 3, trace_block_size: 4, ..Default::default() };
        let item = |hash_ids: Vec<u64>, n: u32| surge_proto::PromptItem {
            input_tokens: n,
            output_tokens: 2,
            hash_ids,
            ..Default::default()
        };
        let a = trace(&spec, None, &item(vec![7, 8, 9], 10), 0);
        let b = trace(&spec, None, &item(vec![7, 8, 5], 11), 1);
        let words = |p: &Prompt| p.text.split(' ').map(String::from).collect::<Vec<_>>();
        let (wa, wb) = (words(&a), words(&b));
        assert_eq!((wa.len(), wb.len()), (10, 11));
        assert_eq!(wa[..8], wb[..8], "blocks 7 and 8 are shared");
        assert_ne!(wa[8..], wb[8..10]);
        assert_eq!((a.input_tokens, a.output_tokens), (10, 2));
        // With a tokenizer the length is exact.
        let t = fixture();
        let c = trace(&spec, Some(&t), &item(vec![7, 8], 12), 2);
        assert_eq!(t.count(&c.text), 12);
        assert_eq!(c.input_tokens, 12);
    }

    #[test]
    fn random_prompt_has_exactly_n_words_and_is_reproducible() {
        let s = random(128);
        let p = prompt(&s, 5);
        assert_eq!(p.text.split_whitespace().count(), 128);
        assert_eq!(p.input_source, TokenSource::ClientEstimate);
        assert_eq!(p, prompt(&s, 5));
        assert_ne!(p.text, prompt(&s, 6).text);
    }

    #[test]
    fn slices_partition_the_dataset() {
        let s = random(16);
        let whole = slice(&s, None, 0, 10);
        let mut parts = slice(&s, None, 0, 3);
        parts.extend(slice(&s, None, 3, 7));
        assert_eq!(parts, whole);
    }

    /// Two agents' slices of one seeded dataset (a 40/60 split, as the coordinator makes
    /// it) share no prompt and together equal the one-agent dataset, with a tokenizer.
    #[test]
    fn two_agents_slices_share_nothing_and_union_to_the_whole() {
        let t = fixture();
        let s = DatasetSpec { random_prefix_len: 0, ..random(64) };
        let whole = slice(&s, Some(&t), 0, 500);
        let a = slice(&s, Some(&t), 0, 200);
        let b = slice(&s, Some(&t), 200, 300);
        let texts_a: HashSet<&str> = a.iter().map(|p| p.text.as_str()).collect();
        assert!(b.iter().all(|p| !texts_a.contains(p.text.as_str())), "a prompt is in both slices");
        let union: Vec<Prompt> = a.into_iter().chain(b).collect();
        assert_eq!(union, whole);
        let distinct: HashSet<&str> = whole.iter().map(|p| p.text.as_str()).collect();
        assert_eq!(distinct.len(), 500);
    }

    /// The acceptance check: 1,000 seeded random prompts of 1024 tokens each
    /// re-encode to exactly 1024 tokens with the fixture tokenizer.
    #[test]
    fn thousand_random_prompts_are_exactly_1024_tokens() {
        let t = fixture();
        let s = DatasetSpec { seed: 42, ..random(1024) };
        let prompts = slice(&s, Some(&t), 0, 1000);
        assert_eq!(prompts.len(), 1000);
        let off: Vec<(usize, u32)> =
            prompts.iter().enumerate().map(|(i, p)| (i, t.count(&p.text))).filter(|&(_, n)| n != 1024).collect();
        assert!(off.is_empty(), "{} prompts are not 1024 tokens: {:?}", off.len(), &off[..off.len().min(10)]);
        assert!(prompts.iter().all(|p| p.input_tokens == 1024 && p.input_source == TokenSource::Tokenizer));
    }

    #[test]
    fn range_ratio_spreads_lengths_like_vllm() {
        assert_eq!(range(100, 0.5), (50, 150));
        assert_eq!(range(10, 0.25), (7, 13));
        let t = fixture();
        let s = DatasetSpec { random_range_ratio: 0.5, random_output_len: 20, ..random(100) };
        let ps = slice(&s, Some(&t), 0, 200);
        let ins: Vec<u32> = ps.iter().map(|p| p.input_tokens).collect();
        assert!(ins.iter().all(|&n| (50..=150).contains(&n)), "{ins:?}");
        assert!(ins.iter().min() < Some(&70) && ins.iter().max() > Some(&130));
        assert!(ps.iter().all(|p| t.count(&p.text) == p.input_tokens));
        assert!(ps.iter().all(|p| (10..=30).contains(&p.output_tokens)));
    }

    #[test]
    fn random_prefix_is_shared_and_counted() {
        let t = fixture();
        let s = DatasetSpec { random_prefix_len: 32, ..random(16) };
        let ps = slice(&s, Some(&t), 0, 20);
        let head: String = ps[0].text.chars().take(60).collect();
        assert!(ps.iter().all(|p| p.text.starts_with(&head) && p.input_tokens == 48 && t.count(&p.text) == 48));
        let words = slice(&s, None, 0, 3);
        assert!(words.iter().all(|p| p.input_tokens == 48 && p.text.split_whitespace().count() == 48));
    }

    #[test]
    fn prefix_repetition_uses_every_prefix_equally() {
        let t = fixture();
        let s = DatasetSpec {
            kind: DatasetKind::PrefixRepetition as i32,
            seed: 3,
            prefix_repetition_num_prefixes: 4,
            prefix_repetition_prefix_len: 40,
            prefix_repetition_suffix_len: 10,
            prefix_repetition_output_len: 5,
            ..Default::default()
        };
        let ps = slice(&s, Some(&t), 0, 40);
        let mut by_prefix = std::collections::HashMap::<String, usize>::new();
        for p in &ps {
            assert_eq!((p.input_tokens, t.count(&p.text), p.output_tokens), (50, 50, 5));
            *by_prefix.entry(p.text.chars().take(80).collect()).or_default() += 1;
        }
        assert_eq!(by_prefix.len(), 4, "{by_prefix:?}");
        assert!(by_prefix.values().all(|&n| n == 10));
        assert_eq!(ps.iter().map(|p| &p.text).collect::<HashSet<_>>().len(), 40);
    }
}
