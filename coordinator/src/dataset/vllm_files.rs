//! vLLM's other file datasets, read from local files (nothing is downloaded), each a usage
//! error `FILE:LINE: reason` when the file does not hold what its name promises:
//!
//! - `burstgpt`: BurstGPT's CSV (`Timestamp,Model,Request tokens,Response tokens,...`), rows
//!   of `GPT-4` with a response kept, as vLLM; a seeded sample of `num` rows (all rows,
//!   shuffled, when fewer: requests then cycle through them). Only lengths are shipped:
//!   agents make each prompt of `Request tokens` tokens when it is sent.
//! - `spec_bench`: Spec-Bench's `question.jsonl`; a line's prompt is `turns[0]`, optionally
//!   only lines of one `category`.
//! - `sonnet`: a text file of poem lines; vLLM's prompt "Pick as many lines as you can
//!   from these poem lines:" + the first lines as a shared prefix + lines drawn at random,
//!   redrawn until it fits `input_len` tokens.
//! - `hf`: a local JSON or JSONL copy of one of the Hugging Face datasets vLLM knows,
//!   named by `--hf-name`, read by that dataset's fields.
//!
//! Token counts use the run's tokenizer when there is one, else whitespace words. No chat
//! template is applied (surge reads tokenizer.json only): a chat backend's server applies
//! its own; docs/vllm-compat.md lists the difference.

use super::files::{self, item, read, reason};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng, rngs::SmallRng};
use serde_json::Value;
use std::path::Path;
use surge_core::data::dataset;
use surge_core::data::tokenizer::Tok;
use surge_proto::{PromptItem, TokenSource};

/// Prompts a sonnet dataset makes at most; requests past them cycle (vLLM's sonnet is
/// deprecated, and a run of millions of requests must not hold millions of prompts).
pub const SONNET_MAX: u64 = 10_000;

/// vLLM's sonnet base prompt.
const SONNET_BASE: &str = "Pick as many lines as you can from these poem lines:\n";

/// A seeded order of `n` entries (`None`: file order, `--disable-shuffle`).
fn order(n: usize, seed: Option<u64>) -> Vec<usize> {
    let mut o: Vec<usize> = (0..n).collect();
    if let Some(s) = seed {
        o.shuffle(&mut SmallRng::seed_from_u64(s));
    }
    o
}

/// BurstGPT: `num` requests' lengths sampled with `seed` (every usable row, shuffled, when
/// the file has fewer).
pub fn burstgpt(path: &Path, seed: u64, num: u64) -> Result<Vec<PromptItem>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut rd = csv::ReaderBuilder::new().flexible(true).from_reader(std::io::BufReader::new(file));
    let mut rows: Vec<(u32, u32)> = Vec::new();
    for rec in rd.records() {
        let rec = rec.map_err(|e| format!("{}: {e}", path.display()))?;
        let line = rec.position().map_or(0, |p| p.line());
        let at = |reason: String| format!("{}:{line}: {reason}", path.display());
        if rec.len() < 4 {
            return Err(at(format!(
                "expected at least 4 columns (Timestamp,Model,Request tokens,Response tokens), got {}",
                rec.len()
            )));
        }
        let number = |i: usize, name: &str| -> Result<u32, String> {
            let f = rec[i].trim();
            f.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0 && *v <= f64::from(u32::MAX))
                .map(|v| v as u32)
                .ok_or_else(|| at(format!("{name} {f:?} is not a token count")))
        };
        // vLLM: GPT-4 rows whose response has tokens (failed requests have none).
        if rec[1].trim() != "GPT-4" {
            continue;
        }
        let (input, output) = (number(2, "Request tokens")?, number(3, "Response tokens")?);
        if output > 0 && input > 0 {
            rows.push((input, output));
        }
    }
    if rows.is_empty() {
        return Err(format!("{}: no GPT-4 row with request and response tokens", path.display()));
    }
    let picked = order(rows.len(), Some(seed));
    let n = usize::try_from(num).unwrap_or(usize::MAX).min(rows.len());
    Ok(picked[..n]
        .iter()
        .map(|&i| {
            let (input_tokens, output_tokens) = rows[i];
            let mut p = PromptItem { input_tokens, output_tokens, ..Default::default() };
            p.set_input_source(TokenSource::ClientEstimate);
            p
        })
        .collect())
}

/// JSON objects with the line each starts on.
type Objects = Vec<(usize, serde_json::Map<String, Value>)>;

/// A JSONL file's objects with their line numbers (blank lines skipped).
fn jsonl(path: &Path, text: &str) -> Result<Objects, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |r: String| format!("{}:{}: {r}", path.display(), i + 1);
        match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(m)) => out.push((i + 1, m)),
            Ok(_) => return Err(at("expected a JSON object".into())),
            Err(e) => return Err(at(format!("not JSON: {}", reason(&e)))),
        }
    }
    Ok(out)
}

/// A JSON array of objects, or JSONL: the objects with their line numbers (1 for an array).
fn objects(path: &Path) -> Result<Objects, String> {
    let text = read(path)?;
    if text.trim_start().starts_with('[') {
        let v: Vec<Value> = serde_json::from_str(&text)
            .map_err(|e| format!("{}:{}: {}", path.display(), e.line().max(1), reason(&e)))?;
        return v
            .into_iter()
            .enumerate()
            .map(|(i, o)| match o {
                Value::Object(m) => Ok((1, m)),
                _ => Err(format!("{}: entry {i} is not a JSON object", path.display())),
            })
            .collect();
    }
    jsonl(path, &text)
}

/// The string at `key`, or `FILE:LINE: reason`.
fn string<'a>(path: &Path, line: usize, m: &'a serde_json::Map<String, Value>, key: &str) -> Result<&'a str, String> {
    m.get(key).and_then(Value::as_str).ok_or_else(|| format!("{}:{line}: \"{key}\" must be a string", path.display()))
}

/// Up to `num` prompts taken in `shuffle` order from `entries` by `make` (`None` skips).
fn take<T>(
    entries: Vec<T>,
    shuffle: Option<u64>,
    num: u64,
    mut make: impl FnMut(&T) -> Result<Option<PromptItem>, String>,
) -> Result<Vec<PromptItem>, String> {
    let mut out = Vec::new();
    for i in order(entries.len(), shuffle) {
        if out.len() as u64 >= num {
            break;
        }
        if let Some(p) = make(&entries[i])? {
            out.push(p);
        }
    }
    Ok(out)
}

fn nonempty(path: &Path, v: Vec<PromptItem>, what: &str) -> Result<Vec<PromptItem>, String> {
    if v.is_empty() { Err(format!("{}: no {what} in the file", path.display())) } else { Ok(v) }
}

/// Spec-Bench: `turns[0]` of each line (only `category` lines when given).
pub fn spec_bench(
    path: &Path,
    tok: Option<&Tok>,
    output: u32,
    category: Option<&str>,
    shuffle: Option<u64>,
    num: u64,
) -> Result<Vec<PromptItem>, String> {
    let lines = jsonl(path, &read(path)?)?;
    let v = take(lines, shuffle, num, |(line, m)| {
        if let Some(c) = category
            && m.get("category").and_then(Value::as_str) != Some(c)
        {
            return Ok(None);
        }
        let first = m.get("turns").and_then(Value::as_array).and_then(|t| t.first()).and_then(Value::as_str);
        let text = first.ok_or_else(|| format!("{}:{line}: \"turns\" must be a list of strings", path.display()))?;
        Ok(Some(item(tok, text.to_string(), output, String::new())))
    })?;
    nonempty(path, v, if category.is_some() { "line of that --spec-bench-category" } else { "prompt" })
}

/// Python's `round`: halves to even.
fn round_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 && r % 2.0 != 0.0 { r - x.signum() } else { r }
}

/// Sonnet lengths and lines, as vLLM's `SonnetDataset`.
pub struct Sonnet {
    pub input_len: u32,
    pub prefix_len: u32,
    pub output_len: u32,
}

/// Sonnet: `min(num, SONNET_MAX)` prompts drawn with `seed`.
pub fn sonnet(path: &Path, tok: Option<&Tok>, s: &Sonnet, seed: u64, num: u64) -> Result<Vec<PromptItem>, String> {
    let text = read(path)?;
    let lines: Vec<&str> = text.split_inclusive('\n').filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return Err(format!("{}: no line in the file", path.display()));
    }
    let avg = lines.iter().map(|l| f64::from(count(tok, l))).sum::<f64>() / lines.len() as f64;
    let base = count(tok, SONNET_BASE);
    if s.input_len <= base {
        return Err(format!("--sonnet-input-len {}: must exceed the base prompt's {base} tokens", s.input_len));
    }
    let avg = avg.max(1.0);
    let input_lines = round_even(f64::from(s.input_len - base) / avg).max(1.0) as usize;
    let prefix_lines =
        (round_even((f64::from(s.prefix_len) - f64::from(base)) / avg).max(0.0) as usize).min(input_lines);
    let prefix: String = lines.iter().cycle().take(prefix_lines).copied().collect();
    let mut rng = SmallRng::seed_from_u64(seed);
    let n = num.min(SONNET_MAX);
    let mut out = Vec::with_capacity(n as usize);
    let mut misses = 0u64;
    while (out.len() as u64) < n {
        let mut p = format!("{SONNET_BASE}{prefix}");
        for _ in prefix_lines..input_lines {
            p.push_str(lines[rng.random_range(0..lines.len())]);
        }
        let it = item(tok, p, s.output_len, String::new());
        if it.input_tokens <= s.input_len {
            out.push(it);
        } else {
            // vLLM redraws without bound; a file whose lines never fit is an error here.
            misses += 1;
            if misses > 1000 + 100 * n {
                return Err(format!(
                    "{}: prompts of {input_lines} lines do not fit --sonnet-input-len {}",
                    path.display(),
                    s.input_len
                ));
            }
        }
    }
    Ok(out)
}

/// The `--hf-name` datasets read from a local file, and their default output lengths.
pub const HF_NAMES: [&str; 8] = [
    "philschmid/mt-bench",
    "openai/gsm8k",
    "openai/openai_humaneval",
    "likaixin/InstructCoder",
    "Aeala/ShareGPT_Vicuna_unfiltered",
    "AI-MO/aimo-validation-aime",
    "AI-MO/NuminaMath-1.5",
    "AI-MO/NuminaMath-CoT",
];

/// `--dataset-name hf`: the local file of dataset `name` (one of [`HF_NAMES`]).
pub fn hf(
    path: &Path,
    tok: Option<&Tok>,
    name: &str,
    output: Option<u32>,
    shuffle: Option<u64>,
    num: u64,
) -> Result<Vec<PromptItem>, String> {
    if name == "Aeala/ShareGPT_Vicuna_unfiltered" {
        return files::sharegpt(path, tok, shuffle, num, output);
    }
    let entries = objects(path)?;
    let v = take(entries, shuffle, num, |(line, m)| {
        let s = |k: &str| string(path, *line, m, k);
        let (text, default_out) = match name {
            "philschmid/mt-bench" => {
                let t = m.get("turns").and_then(Value::as_array).and_then(|t| t.first()).and_then(Value::as_str);
                (
                    t.ok_or_else(|| format!("{}:{line}: \"turns\" must be a list of strings", path.display()))?
                        .to_string(),
                    256,
                )
            }
            "openai/gsm8k" => (s("question")?.to_string(), 256),
            "openai/openai_humaneval" => (s("prompt")?.to_string(), 256),
            "likaixin/InstructCoder" => (
                format!(
                    "{}\n\n{} Just output the code, do not include any explanation.",
                    s("input")?,
                    s("instruction")?
                ),
                200,
            ),
            _ => {
                // AI-MO: the problem; the solution's length is the output length.
                let (problem, solution) = (s("problem")?, s("solution")?);
                let (p, o) = (count(tok, problem), count(tok, solution));
                if output.is_none() && (p > 2048 || p + o > 32_000) {
                    return Ok(None);
                }
                (problem.to_string(), o.max(1))
            }
        };
        Ok(Some(item(tok, text, output.unwrap_or(default_out), String::new())))
    })?;
    nonempty(path, v, "prompt")
}

fn count(tok: Option<&Tok>, t: &str) -> u32 {
    dataset::count(tok, t).0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(tag: &str, body: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("surge-vllm-files-{tag}-{}", std::process::id()));
        std::fs::write(&p, body).unwrap();
        p
    }

    #[test]
    fn burstgpt_keeps_gpt4_rows_with_a_response_and_samples_them() {
        let p = file(
            "burst",
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
             5,ChatGPT,100,20,120,Conversation log\n\
             6,GPT-4,300,0,300,Conversation log\n\
             7,GPT-4,400,50,450,Conversation log\n\
             8,GPT-4,500,60,560,API log\n",
        );
        let v = burstgpt(&p, 1, 10).unwrap();
        let mut got: Vec<(u32, u32)> = v.iter().map(|i| (i.input_tokens, i.output_tokens)).collect();
        got.sort();
        assert_eq!(got, [(400, 50), (500, 60)]);
        assert!(v.iter().all(|i| i.text.is_empty()), "agents make the text");
        assert_eq!(burstgpt(&p, 1, 1).unwrap().len(), 1);
        let bad = file("burst-bad", "Timestamp,Model,Request tokens,Response tokens\n1,GPT-4,many,3\n");
        let e = burstgpt(&bad, 1, 10).unwrap_err();
        assert!(e.ends_with(":2: Request tokens \"many\" is not a token count"), "{e}");
        std::fs::remove_file(p).ok();
        std::fs::remove_file(bad).ok();
    }

    #[test]
    fn spec_bench_takes_the_first_turn_of_a_category() {
        let p = file(
            "spec",
            "{\"question_id\":1,\"category\":\"qa\",\"turns\":[\"why is the sky blue\",\"and then\"]}\n\
             {\"question_id\":2,\"category\":\"math\",\"turns\":[\"two plus two\"]}\n",
        );
        let v = spec_bench(&p, None, 256, Some("math"), None, 10).unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!((v[0].text.as_str(), v[0].input_tokens, v[0].output_tokens), ("two plus two", 3, 256));
        assert_eq!(spec_bench(&p, None, 7, None, Some(3), 10).unwrap().len(), 2);
        assert!(spec_bench(&p, None, 7, Some("none"), None, 10).unwrap_err().contains("--spec-bench-category"));
        std::fs::remove_file(p).ok();
    }

    #[test]
    fn sonnet_prompts_share_the_prefix_and_fit_the_input_length() {
        let poem: String = (0..40).map(|i| format!("line {i} of the poem here\n")).collect();
        let p = file("sonnet", &poem);
        // Words: base 11, every line 6; 60 tokens: 8 lines (round(49 / 6)), 2 of them the
        // prefix (round((21 - 11) / 6)): 11 + 6 * 8 = 59.
        let s = Sonnet { input_len: 60, prefix_len: 21, output_len: 150 };
        let v = sonnet(&p, None, &s, 4, 5).unwrap();
        assert_eq!(v.len(), 5);
        for i in &v {
            assert!(
                i.text.starts_with(&format!("{SONNET_BASE}line 0 of the poem here\nline 1 of the poem here\n")),
                "{}",
                i.text
            );
            assert_eq!((i.input_tokens, i.output_tokens), (59, 150));
        }
        assert_ne!(v[0].text, v[1].text, "drawn lines differ");
        let short = Sonnet { input_len: 9, ..s };
        assert!(sonnet(&p, None, &short, 4, 5).unwrap_err().contains("--sonnet-input-len 9"));
        std::fs::remove_file(p).ok();
        assert_eq!([0.5, 1.5, 2.5, 2.4].map(round_even), [0.0, 2.0, 2.0, 2.0]);
    }

    #[test]
    fn hf_reads_a_local_copy_by_the_datasets_fields() {
        let p = file("gsm8k", "{\"question\":\"what is one and one\",\"answer\":\"2\"}\n");
        let v = hf(&p, None, "openai/gsm8k", None, None, 10).unwrap();
        assert_eq!((v[0].text.as_str(), v[0].output_tokens), ("what is one and one", 256));
        let e = hf(&p, None, "philschmid/mt-bench", None, None, 10).unwrap_err();
        assert!(e.ends_with(":1: \"turns\" must be a list of strings"), "{e}");
        let a = file("aimo", "[{\"problem\":\"find x\",\"solution\":\"x is four here\"}]");
        let v = hf(&a, None, "AI-MO/aimo-validation-aime", None, None, 10).unwrap();
        assert_eq!((v[0].input_tokens, v[0].output_tokens), (2, 4));
        std::fs::remove_file(p).ok();
        std::fs::remove_file(a).ok();
    }
}
