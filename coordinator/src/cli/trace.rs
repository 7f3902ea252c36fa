//! Timed traces (`--dataset-name timed_trace`): JSONL, one request per line with its send
//! time, replayed at those times. Two line forms:
//!
//! - Mooncake's: `{"timestamp": MS, "input_length": N, "output_length": M, "hash_ids":
//!   [...]}` (`hash_ids` optional): the agents make a prompt of N tokens whose block j
//!   (`--trace-block-size` tokens, 512 as Mooncake's) depends only on `hash_ids[j]`, so
//!   requests sharing ids share a prefix, as in the traced workload;
//! - with text: `{"timestamp": MS, "prompt": "...", "output_tokens": M}` (or
//!   `"messages": [...]` on the chat backend).
//!
//! `timestamp` is in milliseconds; lines may come in any order (they are sorted, stably),
//! and times are taken from the earliest, so the first request goes at the start.
//! `output_length`/`output_tokens`/`max_tokens` absent = the default output length. Every
//! problem is `FILE:LINE: reason` (a usage error).

use serde_json::Value;
use std::path::Path;
use surge_agent::dataset;
use surge_agent::tokenizer::Tok;
use surge_proto::{PromptItem, TokenSource};

fn positive(v: &Value, key: &str) -> Result<u32, String> {
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|&n| n > 0)
        .ok_or(format!("\"{key}\" must be a positive integer"))
}

fn line_item(line: &str, tok: Option<&Tok>, default_output: u32, chat: bool) -> Result<PromptItem, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let obj = v.as_object().ok_or("expected a JSON object")?;
    let ts = obj
        .get("timestamp")
        .ok_or("no \"timestamp\" (milliseconds)")?
        .as_f64()
        .filter(|t| t.is_finite() && *t >= 0.0)
        .ok_or("\"timestamp\" must be a number of milliseconds >= 0")?;
    let out_key = ["output_length", "output_tokens", "max_tokens"].into_iter().find(|k| obj.contains_key(*k));
    let output = match out_key {
        Some(k) => positive(&obj[k], k)?,
        None => default_output,
    };
    let mut item = match (obj.get("input_length"), obj.get("prompt"), obj.get("messages")) {
        (Some(n), None, None) => {
            let hash_ids = match obj.get("hash_ids") {
                None => Vec::new(),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|h| h.as_u64().ok_or("\"hash_ids\" must be integers >= 0"))
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err("\"hash_ids\" must be an array of integers".into()),
            };
            let mut p = PromptItem { input_tokens: positive(n, "input_length")?, hash_ids, ..Default::default() };
            p.set_input_source(if tok.is_some() { TokenSource::Tokenizer } else { TokenSource::ClientEstimate });
            p
        }
        (None, Some(Value::String(text)), None) if !text.is_empty() => {
            let (input_tokens, source) = dataset::count(tok, text);
            let mut p = PromptItem { text: text.clone(), input_tokens, ..Default::default() };
            p.set_input_source(source);
            p
        }
        (None, Some(_), None) => return Err("\"prompt\" must be a non-empty string".into()),
        (None, None, Some(m)) if chat => {
            let text = super::files::messages_text(m)?;
            let (input_tokens, source) = dataset::count(tok, &text);
            let mut p = PromptItem { text, input_tokens, messages_json: m.to_string(), ..Default::default() };
            p.set_input_source(source);
            p
        }
        (None, None, Some(_)) => return Err("\"messages\" needs --backend openai-chat".into()),
        (None, None, None) => return Err("expected \"input_length\", \"prompt\" or \"messages\"".into()),
        _ => return Err("give one of \"input_length\", \"prompt\" or \"messages\"".into()),
    };
    item.output_tokens = output;
    item.timestamp_ms = ts;
    Ok(item)
}

/// Every request of the trace, sorted by time, times from the earliest.
pub fn trace(path: &Path, tok: Option<&Tok>, default_output: u32, chat: bool) -> Result<Vec<PromptItem>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let item =
            line_item(line, tok, default_output, chat).map_err(|r| format!("{}:{}: {r}", path.display(), i + 1))?;
        out.push(item);
    }
    if out.is_empty() {
        return Err(format!("{}: no request in the trace", path.display()));
    }
    out.sort_by(|a, b| a.timestamp_ms.total_cmp(&b.timestamp_ms));
    let first = out[0].timestamp_ms;
    for p in &mut out {
        p.timestamp_ms -= first;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str, text: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("surge-trace-{}-{name}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn mooncake_and_text_lines_sorted_from_the_first() {
        let p = scratch(
            "ok.jsonl",
            "{\"timestamp\": 1500, \"input_length\": 700, \"output_length\": 5, \"hash_ids\": [1, 2]}\n\n\
             {\"timestamp\": 1000, \"prompt\": \"hello there\"}\n",
        );
        let t = trace(&p, None, 9, false).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!((t[0].timestamp_ms, t[0].text.as_str(), t[0].output_tokens), (0.0, "hello there", 9));
        assert_eq!((t[1].timestamp_ms, t[1].input_tokens, t[1].output_tokens), (500.0, 700, 5));
        assert_eq!(t[1].hash_ids, [1, 2]);
        let _ = std::fs::remove_file(p);
    }

    #[test]
    fn bad_lines_name_file_line_and_reason() {
        for (text, want) in [
            ("{\"input_length\": 5}", ":1: no \"timestamp\""),
            ("{\"timestamp\": -1, \"input_length\": 5}", ":1: \"timestamp\" must be"),
            ("{\"timestamp\": 1}\n", ":1: expected \"input_length\""),
            ("\n{\"timestamp\": 1, \"input_length\": 0}", ":2: \"input_length\" must be a positive integer"),
            ("{\"timestamp\": 1, \"input_length\": 3, \"hash_ids\": [\"a\"]}", "\"hash_ids\" must be integers"),
            (
                "{\"timestamp\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}",
                "needs --backend openai-chat",
            ),
        ] {
            let p = scratch("bad.jsonl", text);
            let e = trace(&p, None, 4, false).unwrap_err();
            assert!(e.contains(want), "{e} lacks {want}");
        }
    }
}
