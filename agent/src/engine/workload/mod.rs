//! The workload layer: the requests of an agent's slice, made when they are sent (D20).
//!
//! Request `k` of the slice (its global index given by the share's [`Stripe`]) is a pure
//! function of the workload and `k`, so nothing is built for the whole slice: preparing
//! a run costs the same, in time and memory, for ten requests as for a hundred million,
//! and a run without a request cap ([`UNBOUNDED`]) is no different.
//!
//! - Generated datasets (`random`, `prefix-repetition`): [`Jobs::get`] draws the prompt
//!   of request `k`'s global index with [`dataset::build`] and serializes its body, in the
//!   task that sends the request (never in a loop every request waits for). Same seed and
//!   index, same prompt and body as when the slice was built up front. Cost per request
//!   (`benches/jobs.rs`, one core): ~0.65 us for 16 words, ~18 us for 1024 words, ~28 us
//!   for 16 exact tokens and ~2.2 ms for 1024 exact tokens with the fixture tokenizer;
//!   [`Jobs::costly`] says when a build belongs on a blocking thread rather than on the
//!   runtime's workers.
//! - The `fixed` prompt and shipped prompts (file datasets, `Workload.prompts`, bounded by
//!   the file): their bodies are built once at prepare and request `k` takes body
//!   `k % n` (a reference-counted [`Bytes`], no copy).

pub mod history;
pub mod questions;
mod sessions;
pub mod spec;

use sessions::Script;
pub use sessions::{CHILD_INDEX, SessionPlan, Sessions, TurnPlan, Wait};

use super::EngineError;
use crate::data::dataset::{self, Prompt};
use crate::data::share::Stripe;
use crate::data::tokenizer::Tok;
use crate::data::turns;
use crate::engine::api::Api;
use crate::engine::api::audio;
use crate::engine::api::openai::{self, BodyParams};
use crate::engine::api::pooling::{self, Input};
use crate::engine::api::responses;
use bytes::Bytes;
use std::sync::Arc;
use surge_proto::{DatasetKind, DatasetSpec, TokenSource, Workload};

/// `Workload.slice_len` meaning "no request cap": a `--duration` run without
/// `--num-prompts`, which ends at the duration, a Stop or the deadline.
pub const UNBOUNDED: u64 = u64::MAX;

/// One request body, ready to send, with its prompt's token count.
#[derive(Debug, Clone)]
pub struct Planned {
    pub body: Bytes,
    pub input_tokens: u32,
    pub input_source: TokenSource,
    /// Inputs of a pooling request (documents for rerank); 0 for the others.
    pub input_sequences: u32,
    /// Seconds of audio an `openai-audio` request carries (0 for the others).
    pub audio_s: f64,
    /// The output tokens it asks for (`max_tokens`); 0 when it names none.
    pub max_tokens: u32,
}

/// The requests of one slice: how many, and how to make request `k`.
#[derive(Debug)]
pub struct Jobs {
    /// Requests to send; [`UNBOUNDED`] for no cap.
    len: u64,
    /// Whether making one request takes long enough (tens of microseconds and up) to
    /// keep it off the async workers, which also read the responses.
    costly: bool,
    /// The share's global indices (`Workload.slice_*`): rows carry `indices.index(k)`.
    indices: Stripe,
    pick: ModelPick,
    /// vLLM's probe request: "Hi", one output token, the base model.
    probe: Planned,
    form: Form,
    /// The shipped prompts are the whole file (`Workload.prompts_whole_file`): request i
    /// takes its entry by [`dataset::pass_entry`] with this seed. `None`: entry `k % n`.
    passes: Option<u64>,
}

/// Where a single request's prompt comes from.
#[derive(Debug)]
enum Source {
    /// Bodies made once (shipped prompts, the fixed prompt), cycled; never empty. One
    /// list per model a request may name: the base model first, then each LoRA module.
    Built(Vec<Vec<Planned>>),
    /// Prompts drawn per request from the seeded dataset.
    Generated { spec: DatasetSpec, tok: Option<Arc<Tok>>, shape: Shape },
    /// A timed trace's or BurstGPT's shipped items (lengths, hash ids, send times;
    /// bounded by the file), each prompt made when it is sent.
    Trace { items: Vec<surge_proto::PromptItem>, spec: DatasetSpec, tok: Option<Arc<Tok>>, shape: Shape },
}

/// Single requests, made from their source.
#[derive(Debug)]
pub struct Requests(Source);

/// The two types of workload.
#[derive(Debug)]
pub enum Form {
    /// Single requests: request `k` of the slice is one request of its source.
    Requests(Box<Requests>),
    /// Conversations (`Workload.multi_turn`): request `k` of the slice is session `k`.
    Sessions(Arc<Sessions>),
}

impl Form {
    fn requests(source: Source) -> Self {
        Form::Requests(Box::new(Requests(source)))
    }
}

/// What a body holds besides its prompt, owned so that jobs outlive the workload.
#[derive(Debug)]
pub(super) struct Shape {
    api: Api,
    model: String,
    chat: bool,
    /// `--random-batch-size` (>= 1) and the prompts in all (`0`: unbounded).
    batch: u64,
    batch_prompts: u64,
    ignore_eos: bool,
    temperature: Option<f64>,
    extra: Option<serde_json::Map<String, serde_json::Value>>,
    /// `--lora-modules`: the models requests name instead of `model`.
    lora: Vec<String>,
}

/// Which model each request names (`--lora-modules`, `--lora-assignment`).
#[derive(Debug, Clone, Copy)]
pub(super) struct ModelPick {
    /// LoRA modules (0: every request names the base model).
    modules: u64,
    /// A seeded draw per index (vLLM's `random`), else round-robin by index.
    random: bool,
    seed: u64,
}

impl ModelPick {
    /// The model of request `index`: 0 = the base model, m = LoRA module m - 1. A pure
    /// function of the index, so every agent draws the same for the same request.
    pub(super) fn of(self, index: u64, lora: bool) -> usize {
        if !lora || self.modules == 0 {
            return 0;
        }
        let pick = if self.random { dataset::mix(self.seed ^ LORA_STREAM, index) } else { index };
        (pick % self.modules) as usize + 1
    }
}

/// Keeps the LoRA draw independent of the prompt draws of the same seed and index.
const LORA_STREAM: u64 = 0x4c6f_5241_0000_0001;

impl Shape {
    pub(super) fn params(&self, model: usize) -> BodyParams<'_> {
        BodyParams {
            model: if model == 0 { &self.model } else { &self.lora[model - 1] },
            chat: self.chat,
            ignore_eos: self.ignore_eos,
            temperature: self.temperature,
            extra: self.extra.as_ref(),
        }
    }

    /// The body of one prompt naming `model` (see [`model_of`](Self::model_of)); fails
    /// only on a shipped chat prompt whose messages do not parse.
    pub(super) fn planned(&self, p: Prompt, model: usize) -> Result<Planned, EngineError> {
        let params = self.params(model);
        let messages = || serde_json::from_str::<serde_json::Value>(&p.messages_json).map_err(EngineError::Messages);
        let body = match self.api {
            Api::Plain => p.text.into_bytes(),
            Api::Chat if !p.messages_json.is_empty() => openai::chat_body(&params, &messages()?, p.output_tokens),
            Api::Responses => {
                let m = if p.messages_json.is_empty() { None } else { Some(messages()?) };
                let (ignore_eos, temperature) = (params.ignore_eos, params.temperature);
                responses::body(
                    params.model,
                    &p.text,
                    m.as_ref(),
                    p.output_tokens,
                    ignore_eos,
                    temperature,
                    params.extra,
                )
            }
            api if api.pools() => pooling::body(api, params.model, Input::Text(&p.text), params.extra),
            _ => openai::body(&params, &p.text, p.output_tokens),
        };
        let input_sequences = u32::from(self.api.pools());
        let max_tokens = if self.api.pools() || self.api == Api::Plain { 0 } else { p.output_tokens };
        Ok(Planned {
            body: Bytes::from(body),
            input_tokens: p.input_tokens,
            input_source: p.input_source,
            input_sequences,
            audio_s: 0.0,
            max_tokens,
        })
    }

    /// A pooling request carrying several inputs (a batch; for rerank the query first).
    /// `input_tokens`: what the client counts for them.
    fn batch(&self, texts: &[String], input_tokens: u32, source: TokenSource, model: usize) -> Planned {
        let params = self.params(model);
        let input = Input::Texts(texts);
        let body = pooling::body(self.api, params.model, input, params.extra);
        let input_sequences = input.sequences(self.api);
        Planned {
            body: Bytes::from(body),
            input_tokens,
            input_source: source,
            input_sequences,
            audio_s: 0.0,
            max_tokens: 0,
        }
    }

    /// An `openai-audio` request: the item's audio file in vLLM's form.
    fn audio(&self, item: &surge_proto::PromptItem, model: usize) -> Planned {
        let params = self.params(model);
        let body = audio::form(params.model, &item.audio_name, &item.audio, item.output_tokens, params.extra);
        Planned {
            body: Bytes::from(body),
            input_tokens: item.input_tokens,
            input_source: item.input_source(),
            input_sequences: 0,
            audio_s: item.audio_seconds,
            max_tokens: item.output_tokens,
        }
    }

    /// A request of token ids (`--prompt-token-ids`).
    fn ids(&self, ids: &[u32], output_tokens: u32, model: usize) -> Planned {
        let params = self.params(model);
        let body = match self.api {
            api if api.pools() => pooling::body(api, params.model, Input::Ids(ids), params.extra),
            _ => openai::ids_body(&params, ids, output_tokens),
        };
        let input_tokens = u32::try_from(ids.len()).unwrap_or(u32::MAX);
        Planned {
            body: Bytes::from(body),
            input_tokens,
            input_source: TokenSource::Tokenizer,
            input_sequences: u32::from(self.api.pools()),
            audio_s: 0.0,
            max_tokens: if self.api.pools() { 0 } else { output_tokens },
        }
    }
}

impl Jobs {
    /// The jobs of `w`'s slice; takes the shipped prompts out of the workload. Costs the
    /// shipped prompts (bounded by the file) or one prompt, never the slice length. Long:
    /// one arm per source of prompts (generated, shipped, sessions of each kind).
    pub fn new(w: &mut Workload, api: Api, tok: Option<Arc<Tok>>) -> Result<Self, EngineError> {
        let spec = w.dataset.clone().unwrap_or_default();
        let shape = Shape {
            api,
            model: w.model.clone(),
            chat: api == Api::Chat,
            batch: u64::from(spec.batch_size.max(1)),
            batch_prompts: spec.batch_prompts,
            ignore_eos: w.ignore_eos,
            temperature: w.temperature,
            extra: match w.extra_body_json.as_str() {
                "" => None,
                text => match serde_json::from_str::<serde_json::Value>(text) {
                    Ok(serde_json::Value::Object(m)) => Some(m),
                    _ => return Err(EngineError::ExtraBody(format!("not a JSON object: {text}"))),
                },
            },
            lora: w.lora_modules.clone(),
        };
        let pick = ModelPick {
            modules: w.lora_modules.len() as u64,
            random: w.lora_pick() == surge_proto::LoraPick::Random,
            seed: spec.seed,
        };
        let hi = Prompt {
            text: "Hi".into(),
            input_tokens: 1,
            output_tokens: 1,
            input_source: TokenSource::ClientEstimate,
            messages_json: String::new(),
        };
        let probe = shape.planned(hi, 0)?;
        let (len, indices) = (w.slice_len, Stripe::of(w));
        let mut shipped = std::mem::take(&mut w.prompts);
        let passes = w.prompts_whole_file.then_some(spec.seed);
        // Prompts past the slice's length are never sent (a whole file is kept whole).
        if !w.prompts_whole_file {
            shipped.truncate(usize::try_from(len).unwrap_or(usize::MAX));
        }
        if let Some(mt) = w.multi_turn.clone() {
            let file = matches!(spec.kind(), DatasetKind::TimedTrace | DatasetKind::Sharegpt);
            if file && shipped.is_empty() && len > 0 {
                return Err(EngineError::MissingPrompts);
            }
            let script = if spec.kind() == DatasetKind::TimedTrace {
                let speedup = if w.trace_speedup > 0.0 { w.trace_speedup } else { 1.0 };
                let sessions = group_sessions(shipped);
                let spawned: std::collections::HashSet<u64> =
                    sessions.iter().flatten().flat_map(|t| t.spawn.iter().copied()).collect();
                let roots = (0..sessions.len()).filter(|e| !spawned.contains(&(*e as u64))).collect();
                Script::Trace { sessions, speedup, roots }
            } else if spec.kind() == DatasetKind::Sharegpt {
                Script::Recorded { mt, sessions: group_sessions(shipped) }
            } else {
                let system = turns::system_prompt(&spec, &mt, tok.as_deref());
                Script::Generated { mt, system }
            };
            let len = match &script {
                Script::Trace { roots, .. } => len.min(roots.len() as u64),
                Script::Recorded { .. } | Script::Generated { .. } => len,
            };
            let costly = tok.is_some();
            let sessions = Arc::new(Sessions { script, spec, tok, shape, pick });
            return Ok(Self { len, indices, pick, probe, costly, form: Form::Sessions(sessions), passes: None });
        }
        if api == Api::Audio {
            // Audio files, shipped whole (bounded by the dataset): each body made once.
            if shipped.iter().all(|p| p.audio.is_empty()) {
                return Err(EngineError::MissingPrompts);
            }
            let built: Vec<Vec<Planned>> = (0..=shape.lora.len())
                .map(|model| shipped.iter().map(|item| shape.audio(item, model)).collect())
                .collect();
            let probe = built[0][0].clone();
            let len = if shipped.is_empty() { 0 } else { len };
            return Ok(Self {
                len,
                indices,
                pick,
                probe,
                costly: false,
                form: Form::requests(Source::Built(built)),
                passes,
            });
        }
        if matches!(spec.kind(), DatasetKind::TimedTrace | DatasetKind::Burstgpt) {
            if shipped.is_empty() && len > 0 {
                return Err(EngineError::MissingPrompts);
            }
            // A trace is sent once; BurstGPT's rows cycle, as file prompts do.
            let len = if spec.kind() == DatasetKind::TimedTrace { len.min(shipped.len() as u64) } else { len };
            return Ok(Self {
                len,
                indices,
                pick,
                probe,
                costly: true,
                form: Form::requests(Source::Trace { items: shipped, spec, tok, shape }),
                passes,
            });
        }
        let prompts: Vec<Prompt> = if !shipped.is_empty() {
            shipped
                .into_iter()
                .map(|p| {
                    let input_source = p.input_source();
                    Prompt {
                        text: p.text,
                        input_tokens: p.input_tokens,
                        output_tokens: p.output_tokens,
                        input_source,
                        messages_json: p.messages_json,
                    }
                })
                .collect()
        } else {
            match spec.kind() {
                DatasetKind::Sharegpt | DatasetKind::Custom if len > 0 => return Err(EngineError::MissingPrompts),
                // The same prompt for every index: counted (tokenizer) and serialized once.
                DatasetKind::Fixed => vec![dataset::build(&spec, tok.as_deref(), indices.first())],
                _ => {
                    let costly =
                        tok.is_some() || prompt_tokens(&spec) > COSTLY_WORDS || spec.kind() == DatasetKind::RandomMm;
                    return Ok(Self {
                        len,
                        indices,
                        pick,
                        probe,
                        costly,
                        form: Form::requests(Source::Generated { spec, tok, shape }),
                        passes: None,
                    });
                }
            }
        };
        let len = if prompts.is_empty() { 0 } else { len };
        let built = (0..=shape.lora.len())
            .map(|model| prompts.iter().map(|p| shape.planned(p.clone(), model)).collect::<Result<Vec<_>, _>>())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { len, indices, pick, probe, costly: false, form: Form::requests(Source::Built(built)), passes })
    }

    /// Whether [`get`](Self::get) is expensive (a tokenizer re-encodes every prompt, or
    /// prompts are long): callers then run it with `spawn_blocking`.
    pub fn costly(&self) -> bool {
        self.costly
    }

    /// Requests to send ([`UNBOUNDED`]: no cap).
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the slice has no request cap.
    pub fn is_unbounded(&self) -> bool {
        self.len == UNBOUNDED
    }

    /// The global request index of request `k` of the slice.
    pub fn index(&self, k: u64) -> u64 {
        self.indices.index(k)
    }

    /// Request `k` of the slice (`k < len`), made now: a prompt drawn and serialized
    /// (generated datasets, a few microseconds without a tokenizer), or a shared body.
    /// With `--lora-modules` it names its index's module.
    pub fn get(&self, k: u64) -> Planned {
        self.make(k, true)
    }

    /// The probe request of `--probe-request-rate`.
    pub fn probe(&self) -> Planned {
        self.probe.clone()
    }

    /// Request `k` naming the base model, as vLLM's initial test and warm-ups do.
    pub fn get_base(&self, k: u64) -> Planned {
        self.make(k, false)
    }

    /// Which of `n` shipped entries request `k` takes.
    fn entry(&self, k: u64, n: usize) -> usize {
        let n = n as u64;
        match self.passes {
            None => (k % n) as usize,
            Some(seed) => {
                let i = self.index(k);
                dataset::pass_entry(seed, i / n, i % n, n) as usize
            }
        }
    }

    fn make(&self, k: u64, lora: bool) -> Planned {
        let index = self.index(k);
        let source = match &self.form {
            Form::Requests(r) => &r.0,
            // Turn 0 of session k, alone (the initial test, warm-ups).
            Form::Sessions(s) => return s.first_turn(index, lora),
        };
        match source {
            Source::Built(bodies) => {
                let of = &bodies[self.pick.of(index, lora)];
                of[self.entry(k, of.len())].clone()
            }
            Source::Generated { spec, tok, shape } if spec.token_ids && tok.is_some() => {
                let tok = tok.as_deref().expect("checked");
                let (ids, output) = dataset::random_ids(spec, tok, index);
                shape.ids(&ids, output, self.pick.of(index, lora))
            }
            Source::Generated { spec, tok, shape } if shape.batch > 1 || spec.kind() == DatasetKind::RandomRerank => {
                let model = self.pick.of(index, lora);
                let first = index.saturating_mul(shape.batch);
                let left = if shape.batch_prompts > 0 { shape.batch_prompts.saturating_sub(first) } else { u64::MAX };
                let n = shape.batch.min(left).max(1);
                let (texts, tokens, source) = if spec.kind() == DatasetKind::RandomRerank {
                    dataset::rerank(spec, tok.as_deref(), first, n)
                } else {
                    let prompts: Vec<Prompt> =
                        (first..first + n).map(|i| dataset::build(spec, tok.as_deref(), i)).collect();
                    let tokens = prompts.iter().map(|p| p.input_tokens).fold(0u32, u32::saturating_add);
                    let source = prompts.first().map_or(TokenSource::ClientEstimate, |p| p.input_source);
                    (prompts.into_iter().map(|p| p.text).collect(), tokens, source)
                };
                shape.batch(&texts, tokens, source, model)
            }
            Source::Generated { spec, tok, shape } => {
                let prompt = dataset::build(spec, tok.as_deref(), index);
                // A generated prompt has no messages to parse: serializing cannot fail.
                shape.planned(prompt, self.pick.of(index, lora)).expect("a generated prompt has no messages")
            }
            Source::Trace { items, spec, tok, shape } => {
                let item = &items[self.entry(k, items.len())];
                let prompt = dataset::trace(spec, tok.as_deref(), item, index);
                let model = self.pick.of(index, lora);
                // Messages were checked when the coordinator parsed the file; a body that
                // cannot be made is sent as a plain prompt rather than panicking.
                shape.planned(prompt.clone(), model).unwrap_or_else(|_| {
                    let plain = Prompt { messages_json: String::new(), ..prompt };
                    shape.planned(plain, model).expect("a plain prompt serializes")
                })
            }
        }
    }

    /// The slice's type: single requests or sessions.
    pub fn form(&self) -> &Form {
        &self.form
    }

    /// A timed trace's send times, seconds from the start divided by `speedup`, one per
    /// request of the slice (`None` for other datasets); a session trace's, one per
    /// session of the slice (its first turn's).
    pub fn trace_offsets(&self, speedup: f64) -> Option<Arc<[f64]>> {
        let speedup = if speedup > 0.0 { speedup } else { 1.0 };
        let source = match &self.form {
            Form::Sessions(s) => return s.trace_offsets(self.len, |k| self.index(k), speedup),
            Form::Requests(r) => &r.0,
        };
        let Source::Trace { items, spec, .. } = source else { return None };
        if spec.kind() != DatasetKind::TimedTrace {
            return None;
        }
        Some(items.iter().map(|i| i.timestamp_ms / 1000.0 / speedup).collect())
    }
}

/// A session trace's items (every turn names its dense `session`), grouped by session in
/// order of first appearance, each session's turns in file order.
fn group_sessions(items: Vec<surge_proto::PromptItem>) -> Vec<Vec<surge_proto::PromptItem>> {
    let mut out: Vec<Vec<surge_proto::PromptItem>> = Vec::new();
    for item in items {
        let s = item.session.unwrap_or(out.len() as u64) as usize;
        if s >= out.len() {
            out.resize_with(s + 1, Vec::new);
        }
        out[s].push(item);
    }
    out.retain(|s| !s.is_empty());
    out
}

/// Prompt length (words, without a tokenizer) above which building is costly (~20 us).
const COSTLY_WORDS: u64 = 1024;

/// The largest prompt a generated spec asks for, in tokens.
fn prompt_tokens(spec: &DatasetSpec) -> u64 {
    match spec.kind() {
        DatasetKind::PrefixRepetition => {
            u64::from(spec.prefix_repetition_prefix_len) + u64::from(spec.prefix_repetition_suffix_len)
        }
        _ => {
            let spread = 1.0 + spec.random_range_ratio.clamp(0.0, 1.0);
            (f64::from(spec.random_input_len) * spread).ceil() as u64 + u64::from(spec.random_prefix_len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::Backend;

    fn new_jobs(w: &mut Workload, tok: Option<Arc<Tok>>) -> Result<Jobs, EngineError> {
        let api = Api::of(w.backend()).unwrap_or(Api::Completions);
        Jobs::new(w, api, tok)
    }
    /// The test fixture `tests/fixtures/tokenizer/tokenizer.json` (a tiny byte-level BPE).
    fn fixture() -> std::sync::Arc<crate::data::tokenizer::Tok> {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tokenizer");
        crate::data::tokenizer::load_cached_path(&p).expect("fixture tokenizer")
    }
    use surge_proto::PromptItem;

    /// `--prompt-token-ids`: completions send `prompt` as ids, pooling backends `input`,
    /// each exactly as long as drawn (no decode and re-encode); `--random-batch-size`
    /// puts prompts kB..kB+B-1 in request k, the last one fewer.
    #[test]
    fn token_ids_and_batches_in_the_bodies() {
        let mut w = workload(4);
        w.dataset.as_mut().unwrap().token_ids = true;
        w.dataset.as_mut().unwrap().random_range_ratio = 0.0;
        let jobs = new_jobs(&mut w, Some(fixture())).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&jobs.get(0).body).unwrap();
        let ids = v["prompt"].as_array().expect("an array of ids");
        assert_eq!((ids.len(), jobs.get(0).input_tokens), (32, 32));
        assert!(ids.iter().all(serde_json::Value::is_u64));
        let mut w = workload(4);
        w.backend = Backend::OpenaiEmbeddings as i32;
        w.dataset.as_mut().unwrap().token_ids = true;
        let jobs = new_jobs(&mut w, Some(fixture())).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&jobs.get(1).body).unwrap();
        assert!(v["input"].as_array().is_some_and(|a| a.iter().all(serde_json::Value::is_u64)), "{v}");
        // 10 prompts, 4 to a request: 4, 4, 2 (the slice starts at global request 1,000).
        let mut w = workload(3);
        w.backend = Backend::VllmPooling as i32;
        w.slice_start = 0;
        let d = w.dataset.as_mut().unwrap();
        (d.batch_size, d.batch_prompts) = (4, 10);
        let jobs = new_jobs(&mut w, None).unwrap();
        let sizes: Vec<u32> = (0..3).map(|k| jobs.get(k).input_sequences).collect();
        assert_eq!(sizes, [4, 4, 2]);
        let v: serde_json::Value = serde_json::from_slice(&jobs.get(2).body).unwrap();
        let last: Vec<String> =
            v["input"].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect();
        let want: Vec<String> = (8..10).map(|i| dataset::build(w.dataset.as_ref().unwrap(), None, i).text).collect();
        assert_eq!(last, want, "request 2 carries prompts 8 and 9");
    }

    fn workload(len: u64) -> Workload {
        Workload {
            backend: Backend::Openai as i32,
            model: "m".into(),
            dataset: Some(DatasetSpec {
                kind: DatasetKind::Random as i32,
                seed: 11,
                random_input_len: 32,
                random_output_len: 4,
                random_range_ratio: 0.5,
                ..Default::default()
            }),
            slice_start: 1_000,
            slice_len: len,
            ignore_eos: true,
            ..Default::default()
        }
    }

    /// The bodies made one at a time equal those the old up-front path made from
    /// `dataset::slice` (same prompts, same order, same bytes), with and without a tokenizer.
    #[test]
    fn bodies_on_the_fly_equal_the_materialized_slice() {
        for tok in [None, Some(fixture())] {
            let mut w = workload(300);
            let spec = w.dataset.clone().unwrap();
            let jobs = new_jobs(&mut w, tok.clone()).unwrap();
            assert_eq!((jobs.len(), jobs.costly()), (300, tok.is_some()));
            let params = BodyParams { model: "m", chat: false, ignore_eos: true, temperature: None, extra: None };
            for (k, p) in dataset::slice(&spec, tok.as_deref(), 1_000, 300).into_iter().enumerate() {
                let job = jobs.get(k as u64);
                assert_eq!(job.body, Bytes::from(openai::body(&params, &p.text, p.output_tokens)), "request {k}");
                assert_eq!((job.input_tokens, job.input_source), (p.input_tokens, p.input_source));
                assert_eq!(jobs.index(k as u64), 1_000 + k as u64);
            }
        }
    }

    /// A conversation's turn resends the history: the earlier message and the reply as
    /// given, then its own message; counts and think time follow the spec.
    #[test]
    fn a_sessions_turns_resend_its_history() {
        use surge_proto::{MultiTurn, ThinkTime};
        let mut w = workload(10);
        w.backend = Backend::OpenaiChat as i32;
        w.multi_turn = Some(MultiTurn {
            turns_min: 3,
            turns_max: 3,
            per_turn_input_len: 5,
            think: ThinkTime::Fixed as i32,
            delay_ms: 250.0,
            ..Default::default()
        });
        let all = new_jobs(&mut w, None).unwrap();
        let Form::Sessions(jobs) = all.form() else { panic!("a conversations workload is sessions") };
        let s = jobs.session(all.index(2));
        assert_eq!((s.index, s.turns), (1_002, 3));
        let mut h = jobs.history();
        let first = jobs.turn(&s, 0, &h);
        assert_eq!(first.history_tokens, 0);
        h.push(&first.user, first.user_tokens, " the quick", 2);
        let second = jobs.turn(&s, 1, &h);
        let body: serde_json::Value = serde_json::from_slice(&second.planned.body).unwrap();
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[0]["content"], first.user.as_str());
        assert_eq!(messages[1], serde_json::json!({"role": "assistant", "content": " the quick"}));
        assert_eq!(messages[2]["content"], second.user.as_str());
        assert_eq!(second.history_tokens, first.user_tokens + 2);
        assert_eq!(second.planned.input_tokens, first.user_tokens + 2 + 5);
        assert_eq!(jobs.wait(&s, 1), Wait::After(std::time::Duration::from_millis(250)));
    }

    /// A share that takes turns with others (D20) makes the prompts of its own indices.
    #[test]
    fn a_striped_share_makes_the_prompts_of_its_indices() {
        let mut w = workload(4);
        (w.slice_cycle, w.slice_positions) = (3, vec![1]);
        let spec = w.dataset.clone().unwrap();
        let jobs = new_jobs(&mut w, None).unwrap();
        for (k, i) in [1u64, 4, 7, 10].into_iter().enumerate() {
            assert_eq!(jobs.index(k as u64), i);
            let body: serde_json::Value = serde_json::from_slice(&jobs.get(k as u64).body).unwrap();
            assert_eq!(body["prompt"], dataset::build(&spec, None, i).text.as_str(), "request {k}");
        }
    }

    /// A slice of 100 million, or no cap at all, costs nothing to prepare: no prompt is made
    /// until asked for, and request 99,999,999 is the dataset's prompt at that index.
    #[test]
    fn preparing_does_not_depend_on_the_slice_length() {
        for len in [100_000_000, UNBOUNDED] {
            let mut w = workload(len);
            let spec = w.dataset.clone().unwrap();
            let t = std::time::Instant::now();
            let jobs = new_jobs(&mut w, None).unwrap();
            // (An eager build of 100 million prompts would take minutes; 500 ms leaves room
            // for a debug build beside the other tests on a host that stalls.)
            assert!(t.elapsed() < std::time::Duration::from_millis(500), "{:?}", t.elapsed());
            assert_eq!((jobs.len(), jobs.is_unbounded()), (len, len == UNBOUNDED));
            let last = dataset::build(&spec, None, 1_000 + 99_999_999);
            assert_eq!(jobs.get(99_999_999).input_tokens, last.input_tokens);
            let body: serde_json::Value = serde_json::from_slice(&jobs.get(99_999_999).body).unwrap();
            assert_eq!(body["prompt"], last.text.as_str());
        }
    }

    #[test]
    fn shipped_prompts_cycle_and_fixed_is_built_once() {
        let mut w = workload(5);
        w.backend = Backend::OpenaiChat as i32;
        w.dataset.as_mut().unwrap().kind = DatasetKind::Custom as i32;
        w.prompts = vec![
            PromptItem { text: "a".into(), input_tokens: 1, output_tokens: 2, ..Default::default() },
            PromptItem {
                messages_json: r#"[{"role":"user","content":"b"}]"#.into(),
                input_tokens: 3,
                output_tokens: 4,
                ..Default::default()
            },
        ];
        let jobs = new_jobs(&mut w, None).unwrap();
        assert!(w.prompts.is_empty(), "the prompts moved into the jobs");
        let tokens: Vec<u32> = (0..5).map(|k| jobs.get(k).input_tokens).collect();
        assert_eq!(tokens, [1, 3, 1, 3, 1]);
        let chat: serde_json::Value = serde_json::from_slice(&jobs.get(1).body).unwrap();
        assert_eq!(chat["messages"][0]["content"], "b");

        let mut bad = workload(1);
        bad.dataset.as_mut().unwrap().kind = DatasetKind::Sharegpt as i32;
        assert!(matches!(new_jobs(&mut bad, None), Err(EngineError::MissingPrompts)));

        let mut fixed = workload(UNBOUNDED);
        let spec = fixed.dataset.as_mut().unwrap();
        (spec.kind, spec.prompt, spec.fixed_output_len) = (DatasetKind::Fixed as i32, "hello there".into(), 3);
        let jobs = new_jobs(&mut fixed, None).unwrap();
        let (a, b) = (jobs.get(0), jobs.get(u64::MAX - 1));
        assert_eq!((a.body.as_ptr(), a.input_tokens), (b.body.as_ptr(), 2), "one shared body");
    }
}
