//! The dataset flags of `surge run` resolved before any load: the [`DatasetSpec`] agents
//! generate from, the tokenizer (read, hashed and parsed once here, then shipped to every
//! agent), and for file datasets the prompts themselves, parsed up front so that a bad
//! file is a usage error (exit 2) naming `FILE:LINE`.

use super::{BackendArg, DatasetArg, RunArgs, UsageError};
use crate::dataset::files as dataset_files;
use crate::dataset::vllm_files;
use crate::plan::TokenizerFile;
use std::path::Path;
use std::sync::Arc;
use surge_core::data::tokenizer;
use surge_proto::{DatasetKind, DatasetSpec, PromptItem};

/// A resolved dataset.
#[derive(Debug, Clone)]
pub struct DatasetPlan {
    pub spec: DatasetSpec,
    /// vLLM's name for it in results.
    pub name: &'static str,
    pub tokenizer: Option<TokenizerFile>,
    /// File datasets: request i uses `prompts[i % len]`. Empty for generated datasets.
    pub prompts: Arc<Vec<PromptItem>>,
}

fn usage<T>(msg: impl Into<String>) -> Result<T, UsageError> {
    Err(UsageError(msg.into()))
}

/// Reads and parses `--tokenizer`.
pub fn load_tokenizer(path: &Path) -> Result<TokenizerFile, UsageError> {
    let (bytes, tok) = tokenizer::load_path(path).map_err(|e| UsageError(format!("--tokenizer {e}")))?;
    Ok(TokenizerFile {
        path: tokenizer::resolve(path),
        sha256: tok.sha256().to_string(),
        bytes: Arc::new(bytes),
        tok: Arc::new(tok),
    })
}

/// What [`resolve`] reads of a run's flags.
#[derive(Clone, PartialEq)]
struct Inputs {
    dataset: super::DatasetArgs,
    num_prompts: Option<u64>,
    duration: bool,
    multi_turn: bool,
    max_turns: Option<u32>,
    backend: BackendArg,
}

impl Inputs {
    fn of(a: &RunArgs) -> Self {
        Inputs {
            dataset: a.dataset.clone(),
            num_prompts: a.load.num_prompts,
            duration: a.load.duration.is_some(),
            multi_turn: a.conversation.multi_turn,
            max_turns: a.conversation.max_turns,
            backend: a.target.backend,
        }
    }
}

thread_local! {
    /// Within [`memoized`]: the first dataset resolved, kept for the plans built again
    /// without one flag each (D78), so that a file is read once unless a flag changes it.
    static FIRST: std::cell::RefCell<Option<Option<(Inputs, DatasetPlan)>>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with the first dataset it resolves kept for its later resolves of the same
/// flags; forgotten when `f` returns.
pub fn memoized<T>(f: impl FnOnce() -> T) -> T {
    let outer = FIRST.with(|m| m.borrow_mut().replace(None));
    let out = f();
    FIRST.with(|m| *m.borrow_mut() = outer);
    out
}

/// Checks the dataset flags and builds the dataset.
pub fn resolve(a: &RunArgs) -> Result<DatasetPlan, UsageError> {
    let inputs = Inputs::of(a);
    let kept = FIRST.with(|m| match &*m.borrow() {
        Some(Some((i, plan))) if *i == inputs => Some(plan.clone()),
        _ => None,
    });
    if let Some(plan) = kept {
        return Ok(plan);
    }
    let plan = resolve_now(a)?;
    FIRST.with(|m| {
        if let Some(slot @ None) = &mut *m.borrow_mut() {
            *slot = Some((inputs, plan.clone()));
        }
    });
    Ok(plan)
}

/// Whether a request's random input of `input_len` tokens (with `a`'s prefix, range ratio
/// and batch: documents and their query with random-rerank) stays within
/// [`surge_core::data::dataset::MAX_INPUT_TOKENS`]; else why not, naming the flags.
pub(super) fn random_input_fits(a: &RunArgs, input_len: u32) -> Result<(), String> {
    let d = &a.dataset;
    let longest = f64::from(input_len) * (1.0 + d.random_range_ratio) + f64::from(d.random_prefix_len);
    let texts = d.random_batch_size + u32::from(d.dataset_name == DatasetArg::RandomRerank);
    let per_request = longest * f64::from(texts);
    let max = surge_core::data::dataset::MAX_INPUT_TOKENS;
    if per_request > f64::from(max) {
        return Err(format!(
            "--random-input-len (or --input-len) {input_len} with --random-prefix-len {}, --random-range-ratio {} \
             and --random-batch-size {}: up to {per_request:.0} tokens a request; at most {max}",
            d.random_prefix_len, d.random_range_ratio, d.random_batch_size
        ));
    }
    Ok(())
}

fn resolve_now(a: &RunArgs) -> Result<DatasetPlan, UsageError> {
    let r = a.dataset.random_range_ratio;
    if !(0.0..1.0).contains(&r) {
        return usage(format!("--random-range-ratio {r}: must be >= 0 and < 1"));
    }
    if matches!(a.dataset.dataset_name, DatasetArg::Random | DatasetArg::RandomMm | DatasetArg::RandomRerank) {
        random_input_fits(a, a.dataset.random_input_len).map_err(UsageError)?;
    }
    let path = dataset_path(a)?;
    // vLLM's --skip-tokenizer-init: no tokenizer, whatever --tokenizer says.
    let tokenizer =
        a.dataset.tokenizer.as_deref().filter(|_| !a.dataset.skip_tokenizer_init).map(load_tokenizer).transpose()?;
    let num = a.load.num_prompts.unwrap_or(crate::plan::DEFAULT_NUM_PROMPTS);
    let shuffle = (!a.dataset.disable_shuffle).then_some(a.dataset.seed);
    let tok = tokenizer.as_ref().map(|t| &*t.tok);
    let mut spec = DatasetSpec {
        seed: a.dataset.seed,
        random_input_len: a.dataset.random_input_len,
        random_output_len: a.dataset.random_output_len,
        random_range_ratio: r,
        random_prefix_len: a.dataset.random_prefix_len,
        batch_size: a.dataset.random_batch_size,
        batch_prompts: a.load.num_prompts.unwrap_or(if a.load.duration.is_some() { 0 } else { num }),
        token_ids: a.dataset.prompt_token_ids,
        ..Default::default()
    };
    check_token_ids(a, tokenizer.is_some())?;
    let (name, prompts) = read(a, &mut spec, path.as_deref(), tok, shuffle, num)?;
    Ok(DatasetPlan { spec, name, tokenizer, prompts: Arc::new(prompts) })
}

/// `--dataset-path`: given exactly for the datasets read from a file (a directory for
/// custom_audio), and there.
fn dataset_path(a: &RunArgs) -> Result<Option<std::path::PathBuf>, UsageError> {
    use DatasetArg as D;
    let file_dataset = matches!(
        a.dataset.dataset_name,
        D::Sharegpt | D::Custom | D::TimedTrace | D::Burstgpt | D::SpecBench | D::Sonnet | D::Hf | D::CustomAudio
    );
    let path = match (&a.dataset.dataset_path, file_dataset) {
        (Some(p), true) => Some(p.clone()),
        (None, true) => {
            return usage(
                "--dataset-name sharegpt/custom/timed_trace/burstgpt/spec_bench/sonnet/hf/custom_audio needs --dataset-path FILE (a local file: nothing is downloaded)",
            );
        }
        (Some(_), false) => {
            return usage(
                "--dataset-path: only for --dataset-name sharegpt, custom, timed_trace, burstgpt, spec_bench, sonnet, hf or custom_audio",
            );
        }
        (None, false) => None,
    };
    // custom_audio also takes a directory of audio files, timed_trace one of Weka traces (D73).
    let dir_ok = matches!(a.dataset.dataset_name, D::CustomAudio | D::TimedTrace);
    if let Some(p) = path.as_ref().filter(|p| !(p.is_file() || dir_ok && p.is_dir())) {
        return usage(format!("--dataset-path {}: no such file", p.display()));
    }
    Ok(path)
}

/// `--prompt-token-ids`: the random dataset, a tokenizer to draw from, a backend that
/// takes ids.
fn check_token_ids(a: &RunArgs, tokenizer: bool) -> Result<(), UsageError> {
    if !a.dataset.prompt_token_ids {
        return Ok(());
    }
    if a.dataset.dataset_name != DatasetArg::Random {
        return usage("--prompt-token-ids: only for --dataset-name random");
    }
    if !tokenizer {
        return usage("--prompt-token-ids: needs --tokenizer (the ids are drawn from its vocabulary)");
    }
    if matches!(
        a.target.backend,
        BackendArg::OpenaiChat
            | BackendArg::OpenaiResponses
            | BackendArg::OpenaiEmbeddingsChat
            | BackendArg::OpenaiEmbeddingsClip
            | BackendArg::OpenaiEmbeddingsVlm2vec
            | BackendArg::Http
    ) {
        return usage(
            "--prompt-token-ids: the backend sends text (completions and the pooling backends with `input` take ids)",
        );
    }
    Ok(())
}

/// The dataset's kind in `spec` and the prompts read from its file (none for generated
/// datasets), with its name. Long: one arm per dataset, each its own flags' checks.
fn read(
    a: &RunArgs,
    spec: &mut DatasetSpec,
    path: Option<&Path>,
    tok: Option<&tokenizer::Tok>,
    shuffle: Option<u64>,
    num: u64,
) -> Result<(&'static str, Vec<surge_proto::PromptItem>), UsageError> {
    let mut prompts = Vec::new();
    let name = match a.dataset.dataset_name {
        DatasetArg::Random => {
            if a.dataset.random_input_len == 0 && a.target.backend != BackendArg::Http {
                return usage("--random-input-len: must be at least 1");
            }
            spec.set_kind(DatasetKind::Random);
            "random"
        }
        DatasetArg::Fixed => {
            let Some(prompt) = a.dataset.prompt.clone() else {
                return usage("--dataset-name fixed needs --prompt TEXT");
            };
            spec.set_kind(DatasetKind::Fixed);
            spec.prompt = prompt;
            spec.fixed_output_len = a.dataset.random_output_len;
            "fixed"
        }
        DatasetArg::PrefixRepetition => {
            if a.dataset.prefix_repetition_prefix_len == 0 && a.dataset.prefix_repetition_suffix_len == 0 {
                return usage("--prefix-repetition-prefix-len/--prefix-repetition-suffix-len: both are 0");
            }
            spec.set_kind(DatasetKind::PrefixRepetition);
            spec.prefix_repetition_num_prefixes = a.dataset.prefix_repetition_num_prefixes;
            spec.prefix_repetition_prefix_len = a.dataset.prefix_repetition_prefix_len;
            spec.prefix_repetition_suffix_len = a.dataset.prefix_repetition_suffix_len;
            spec.prefix_repetition_output_len = a.dataset.prefix_repetition_output_len;
            "prefix_repetition"
        }
        DatasetArg::Sharegpt => {
            let p = path.unwrap_or(Path::new(""));
            let (seed, num) = (
                (!a.dataset.disable_shuffle).then_some(a.dataset.seed),
                a.load.num_prompts.unwrap_or(crate::plan::DEFAULT_NUM_PROMPTS),
            );
            let out = a.dataset.sharegpt_output_len;
            prompts = if a.conversation.multi_turn {
                // Every turn of each conversation; --multi-turn-max-turns caps them.
                let cap = a.conversation.max_turns.unwrap_or(surge_proto::MAX_TURNS);
                dataset_files::sharegpt_sessions(p, tok, seed, num, out, cap)
            } else {
                dataset_files::sharegpt(p, tok, seed, num, out)
            }
            .map_err(|e| UsageError(format!("--dataset-path {e}")))?;
            spec.set_kind(DatasetKind::Sharegpt);
            "sharegpt"
        }
        DatasetArg::Custom => {
            let p = path.unwrap_or(Path::new(""));
            let chat = a.target.backend == BackendArg::OpenaiChat;
            prompts = dataset_files::custom(p, tok, a.dataset.custom_output_len, chat)
                .map_err(|e| UsageError(format!("--dataset-path {e}")))?;
            spec.set_kind(DatasetKind::Custom);
            "custom"
        }
        DatasetArg::TimedTrace => {
            let p = path.unwrap_or(Path::new(""));
            let chat = a.target.backend == BackendArg::OpenaiChat;
            let (items, block) = crate::dataset::trace::read(p, tok, a.dataset.custom_output_len, chat)
                .map_err(|e| UsageError(format!("--dataset-path {e}")))?;
            prompts = items;
            spec.set_kind(DatasetKind::TimedTrace);
            // A Weka trace names its own block size (D73).
            spec.trace_block_size = block.unwrap_or(a.dataset.trace_block_size);
            "timed_trace"
        }
        DatasetArg::Burstgpt => {
            let p = path.unwrap_or(Path::new(""));
            prompts =
                vllm_files::burstgpt(p, a.dataset.seed, num).map_err(|e| UsageError(format!("--dataset-path {e}")))?;
            spec.set_kind(DatasetKind::Burstgpt);
            "burstgpt"
        }
        DatasetArg::SpecBench => {
            let p = path.unwrap_or(Path::new(""));
            let category = a.dataset.spec_bench_category.as_deref();
            prompts = vllm_files::spec_bench(p, tok, a.dataset.spec_bench_output_len, category, shuffle, num)
                .map_err(|e| UsageError(format!("--dataset-path {e}")))?;
            spec.set_kind(DatasetKind::Custom);
            "spec_bench"
        }
        DatasetArg::Sonnet => {
            let p = path.unwrap_or(Path::new(""));
            let s = vllm_files::Sonnet {
                input_len: a.dataset.sonnet_input_len,
                prefix_len: a.dataset.sonnet_prefix_len,
                output_len: a.dataset.sonnet_output_len,
            };
            prompts = vllm_files::sonnet(p, tok, &s, a.dataset.seed, num)
                .map_err(|e| UsageError(if e.starts_with("--") { e } else { format!("--dataset-path {e}") }))?;
            spec.set_kind(DatasetKind::Custom);
            "sonnet"
        }
        DatasetArg::Hf => {
            let p = path.unwrap_or(Path::new(""));
            let names = vllm_files::HF_NAMES.join(", ");
            let name = match a.dataset.hf_name.as_deref() {
                Some(n) if vllm_files::HF_NAMES.contains(&n) => n,
                Some(n) => return usage(format!("--hf-name {n}: surge reads local copies of {names}")),
                None => return usage(format!("--dataset-name hf needs --hf-name, one of {names}")),
            };
            prompts = vllm_files::hf(p, tok, name, a.dataset.hf_output_len, shuffle, num)
                .map_err(|e| UsageError(format!("--dataset-path {e}")))?;
            spec.set_kind(DatasetKind::Custom);
            "hf"
        }
        DatasetArg::CustomAudio => {
            let p = path.unwrap_or(Path::new(""));
            prompts = crate::dataset::audio_files::audio(p, a.dataset.custom_output_len, tok)
                .map_err(|e| UsageError(format!("--dataset-path {e}")))?;
            spec.set_kind(DatasetKind::CustomAudio);
            "custom_audio"
        }
        DatasetArg::RandomRerank => {
            if a.dataset.random_input_len < 4 {
                return usage("--random-input-len: random-rerank needs at least 4 (a query and a document)");
            }
            spec.set_kind(DatasetKind::RandomRerank);
            "random-rerank"
        }
        DatasetArg::RandomMm => {
            if a.target.backend != BackendArg::OpenaiChat {
                return usage("--dataset-name random-mm: needs --backend openai-chat (images go in chat content)");
            }
            if a.dataset.random_input_len == 0 {
                return usage("--random-input-len: must be at least 1");
            }
            super::mm::fill(spec, a)?;
            spec.set_kind(DatasetKind::RandomMm);
            "random-mm"
        }
    };
    Ok((name, prompts))
}
