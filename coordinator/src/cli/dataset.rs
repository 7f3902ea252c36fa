//! The dataset flags of `surge run` resolved before any load: the [`DatasetSpec`] agents
//! generate from, the tokenizer (read, hashed and parsed once here, then shipped to every
//! agent), and for file datasets the prompts themselves, parsed up front so that a bad
//! file is a usage error (exit 2) naming `FILE:LINE`.

use super::files as dataset_files;
use super::{BackendArg, DatasetArg, RunArgs, UsageError};
use crate::plan::TokenizerFile;
use std::path::Path;
use std::sync::Arc;
use surge_agent::tokenizer;
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

/// Checks the dataset flags and builds the dataset.
pub fn resolve(a: &RunArgs) -> Result<DatasetPlan, UsageError> {
    let r = a.random_range_ratio;
    if !(0.0..1.0).contains(&r) {
        return usage(format!("--random-range-ratio {r}: must be >= 0 and < 1"));
    }
    let file_dataset = matches!(a.dataset_name, DatasetArg::Sharegpt | DatasetArg::Custom | DatasetArg::TimedTrace);
    let path = match (&a.dataset_path, file_dataset) {
        (Some(p), true) => Some(p.clone()),
        (None, true) => return usage("--dataset-name sharegpt/custom/timed_trace needs --dataset-path FILE"),
        (Some(_), false) => {
            return usage("--dataset-path: only for --dataset-name sharegpt, custom or timed_trace");
        }
        (None, false) => None,
    };
    if let Some(p) = path.as_ref().filter(|p| !p.is_file()) {
        return usage(format!("--dataset-path {}: no such file", p.display()));
    }
    let tokenizer = a.tokenizer.as_deref().map(load_tokenizer).transpose()?;
    let tok = tokenizer.as_ref().map(|t| &*t.tok);
    let mut spec = DatasetSpec {
        seed: a.seed,
        random_input_len: a.random_input_len,
        random_output_len: a.random_output_len,
        random_range_ratio: r,
        random_prefix_len: a.random_prefix_len,
        ..Default::default()
    };
    let mut prompts = Vec::new();
    let name = match a.dataset_name {
        DatasetArg::Random => {
            if a.random_input_len == 0 && a.backend != BackendArg::Http {
                return usage("--random-input-len: must be at least 1");
            }
            spec.set_kind(DatasetKind::Random);
            "random"
        }
        DatasetArg::Fixed => {
            let Some(prompt) = a.prompt.clone() else {
                return usage("--dataset-name fixed needs --prompt TEXT");
            };
            spec.set_kind(DatasetKind::Fixed);
            spec.prompt = prompt;
            spec.fixed_output_len = a.random_output_len;
            "fixed"
        }
        DatasetArg::PrefixRepetition => {
            if a.prefix_repetition_prefix_len == 0 && a.prefix_repetition_suffix_len == 0 {
                return usage("--prefix-repetition-prefix-len/--prefix-repetition-suffix-len: both are 0");
            }
            spec.set_kind(DatasetKind::PrefixRepetition);
            spec.prefix_repetition_num_prefixes = a.prefix_repetition_num_prefixes;
            spec.prefix_repetition_prefix_len = a.prefix_repetition_prefix_len;
            spec.prefix_repetition_suffix_len = a.prefix_repetition_suffix_len;
            spec.prefix_repetition_output_len = a.prefix_repetition_output_len;
            "prefix_repetition"
        }
        DatasetArg::Sharegpt => {
            let p = path.as_deref().unwrap_or(Path::new(""));
            prompts = dataset_files::sharegpt(
                p,
                tok,
                (!a.disable_shuffle).then_some(a.seed),
                a.num_prompts.unwrap_or(crate::plan::DEFAULT_NUM_PROMPTS),
                a.sharegpt_output_len,
            )
            .map_err(|e| UsageError(format!("--dataset-path {e}")))?;
            spec.set_kind(DatasetKind::Sharegpt);
            "sharegpt"
        }
        DatasetArg::Custom => {
            let p = path.as_deref().unwrap_or(Path::new(""));
            let chat = a.backend == BackendArg::OpenaiChat;
            prompts = dataset_files::custom(p, tok, a.custom_output_len, chat)
                .map_err(|e| UsageError(format!("--dataset-path {e}")))?;
            spec.set_kind(DatasetKind::Custom);
            "custom"
        }
        DatasetArg::TimedTrace => {
            let p = path.as_deref().unwrap_or(Path::new(""));
            let chat = a.backend == BackendArg::OpenaiChat;
            prompts = super::trace::trace(p, tok, a.custom_output_len, chat)
                .map_err(|e| UsageError(format!("--dataset-path {e}")))?;
            spec.set_kind(DatasetKind::TimedTrace);
            spec.trace_block_size = a.trace_block_size;
            "timed_trace"
        }
    };
    Ok(DatasetPlan { spec, name, tokenizer, prompts: Arc::new(prompts) })
}
