//! Dataset files, parsed by the coordinator before any load: ShareGPT JSON and custom
//! JSONL. Every problem is reported as `FILE:LINE: reason` (a usage error, exit code 2).
//!
//! - ShareGPT: a JSON array of `{"conversations": [{"from": ..., "value": ...}, ...]}`.
//!   The first human turn (`human`/`user`) is the prompt, the turn right after it, when it
//!   is a reply (`gpt`/`assistant`/...), gives max_tokens (its token count) unless a fixed
//!   output length is given. Entries are shuffled with the seed and filtered as vLLM does
//!   (prompt and reply of at least 4 tokens, prompt at most 1024, both at most 2048).
//! - Custom JSONL, in file order, one object per line (blank lines skipped):
//!   `{"prompt": "...", "output_tokens": N}` or `{"messages": [{"role": ..., "content":
//!   ...}, ...], "output_tokens": N}` (chat backends only); `output_tokens` (or
//!   `max_tokens`) absent = the default output length.
//!
//! Token counts use the run's tokenizer when there is one, else whitespace words.

use rand::seq::SliceRandom;
use rand::{SeedableRng, rngs::SmallRng};
use serde::Deserialize;
use serde_json::Value;
use std::path::Path;
use surge_core::data::dataset;
use surge_core::data::tokenizer::Tok;
use surge_proto::PromptItem;

#[derive(Deserialize)]
struct Entry {
    conversations: Vec<Turn>,
}

#[derive(Deserialize)]
struct Turn {
    from: String,
    value: String,
}

const HUMAN: &[&str] = &["human", "user"];
const REPLY: &[&str] = &["gpt", "assistant", "chatgpt", "bard", "bing", "model"];

/// serde_json's message without its " at line L column C" tail.
pub(super) fn reason(e: &serde_json::Error) -> String {
    let s = e.to_string();
    let tail = format!(" at line {} column {}", e.line(), e.column());
    s.strip_suffix(&tail).unwrap_or(&s).to_string()
}

pub(super) fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

pub(super) fn item(tok: Option<&Tok>, text: String, output_tokens: u32, messages_json: String) -> PromptItem {
    let (input_tokens, source) = dataset::count(tok, &text);
    let mut p = PromptItem { text, input_tokens, output_tokens, messages_json, ..Default::default() };
    p.set_input_source(source);
    p
}

/// Up to `num` prompts of a ShareGPT file (fewer when it has fewer usable conversations),
/// its entries shuffled with `shuffle_seed` (`None`: vLLM's `--disable-shuffle`, file order).
pub fn sharegpt(
    path: &Path,
    tok: Option<&Tok>,
    shuffle_seed: Option<u64>,
    num: u64,
    fixed_output: Option<u32>,
) -> Result<Vec<PromptItem>, String> {
    let text = read(path)?;
    let entries: Vec<Entry> =
        serde_json::from_str(&text).map_err(|e| format!("{}:{}: {}", path.display(), e.line().max(1), reason(&e)))?;
    let mut order: Vec<usize> = (0..entries.len()).collect();
    if let Some(seed) = shuffle_seed {
        order.shuffle(&mut SmallRng::seed_from_u64(seed));
    }
    let mut out = Vec::new();
    for i in order {
        if out.len() as u64 >= num {
            break;
        }
        let turns = &entries[i].conversations;
        let Some(h) = turns.iter().position(|t| HUMAN.contains(&t.from.as_str())) else {
            continue;
        };
        let Some(reply) = turns.get(h + 1).filter(|t| REPLY.contains(&t.from.as_str())) else {
            continue;
        };
        let prompt = &turns[h].value;
        let (prompt_len, _) = dataset::count(tok, prompt);
        let reply_len = match fixed_output {
            Some(n) => n,
            None => dataset::count(tok, &reply.value).0,
        };
        let too_short = prompt_len < 4 || (fixed_output.is_none() && reply_len < 4);
        if too_short || prompt_len > 1024 || u64::from(prompt_len) + u64::from(reply_len) > 2048 {
            continue;
        }
        out.push(item(tok, prompt.clone(), reply_len, String::new()));
    }
    if out.is_empty() {
        return Err(format!(
            "{}: no usable conversation (a human turn of 4..=1024 tokens followed by a reply)",
            path.display()
        ));
    }
    Ok(out)
}

/// Up to `num` ShareGPT conversations as sessions (`--multi-turn`): every human turn
/// followed by a reply is one turn, the recorded reply's length its output length (or
/// `fixed_output`); turns past `max_turns` are left out. Item `session` numbers the
/// conversations kept, from 0; their turns follow in order.
pub fn sharegpt_sessions(
    path: &Path,
    tok: Option<&Tok>,
    shuffle_seed: Option<u64>,
    num: u64,
    fixed_output: Option<u32>,
    max_turns: u32,
) -> Result<Vec<PromptItem>, String> {
    let text = read(path)?;
    let entries: Vec<Entry> =
        serde_json::from_str(&text).map_err(|e| format!("{}:{}: {}", path.display(), e.line().max(1), reason(&e)))?;
    let mut order: Vec<usize> = (0..entries.len()).collect();
    if let Some(seed) = shuffle_seed {
        order.shuffle(&mut SmallRng::seed_from_u64(seed));
    }
    let mut out = Vec::new();
    let mut sessions = 0u64;
    for i in order {
        if sessions >= num {
            break;
        }
        let turns = &entries[i].conversations;
        let mut kept = 0u32;
        for (h, t) in turns.iter().enumerate() {
            if kept >= max_turns {
                break;
            }
            let Some(reply) = turns.get(h + 1).filter(|r| REPLY.contains(&r.from.as_str())) else { continue };
            if !HUMAN.contains(&t.from.as_str()) || t.value.trim().is_empty() {
                continue;
            }
            let out_len = fixed_output.unwrap_or_else(|| dataset::count(tok, &reply.value).0.max(1));
            let mut p = item(tok, t.value.clone(), out_len, String::new());
            p.session = Some(sessions);
            out.push(p);
            kept += 1;
        }
        sessions += u64::from(kept > 0);
    }
    if out.is_empty() {
        return Err(format!("{}: no conversation with a human turn followed by a reply", path.display()));
    }
    Ok(out)
}

/// Every line of a custom JSONL file, in order (`chat`: the backend takes messages).
pub fn custom(path: &Path, tok: Option<&Tok>, default_output: u32, chat: bool) -> Result<Vec<PromptItem>, String> {
    let text = read(path)?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let p =
            custom_line(line, tok, default_output, chat).map_err(|r| format!("{}:{}: {r}", path.display(), i + 1))?;
        out.push(p);
    }
    if out.is_empty() {
        return Err(format!("{}: no prompt in the file", path.display()));
    }
    Ok(out)
}

fn custom_line(line: &str, tok: Option<&Tok>, default_output: u32, chat: bool) -> Result<PromptItem, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {}", reason(&e)))?;
    let obj = v.as_object().ok_or("expected a JSON object")?;
    let output = match obj.get("output_tokens").or_else(|| obj.get("max_tokens")) {
        None => default_output,
        Some(n) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|&n| n > 0)
            .ok_or("\"output_tokens\" must be a positive integer")?,
    };
    match (obj.get("prompt"), obj.get("messages")) {
        (Some(_), Some(_)) => Err("give \"prompt\" or \"messages\", not both".into()),
        (Some(Value::String(p)), None) if !p.is_empty() => Ok(item(tok, p.clone(), output, String::new())),
        (Some(_), None) => Err("\"prompt\" must be a non-empty string".into()),
        (None, Some(m)) => {
            let text = messages_text(m)?;
            if !chat {
                return Err("\"messages\" needs --backend openai-chat".into());
            }
            Ok(item(tok, text, output, m.to_string()))
        }
        (None, None) => Err("expected \"prompt\" or \"messages\"".into()),
    }
}

/// The text of chat messages (contents joined by newlines), after checking their shape.
pub(super) fn messages_text(m: &Value) -> Result<String, String> {
    let msgs = m.as_array().filter(|a| !a.is_empty()).ok_or("\"messages\" must be a non-empty array")?;
    let mut parts = Vec::new();
    for (k, msg) in msgs.iter().enumerate() {
        if !msg.get("role").is_some_and(Value::is_string) {
            return Err(format!("messages[{k}]: \"role\" must be a string"));
        }
        match msg.get("content") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => parts.push(s.as_str()),
            Some(Value::Array(items)) => parts.extend(items.iter().filter_map(|p| p.get("text")?.as_str())),
            Some(_) => {
                return Err(format!("messages[{k}]: \"content\" must be a string, an array of parts or null"));
            }
        }
    }
    Ok(parts.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/datasets").join(name)
    }

    fn tok() -> std::sync::Arc<Tok> {
        surge_core::data::tokenizer::load_cached_path(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tokenizer"),
        )
        .unwrap()
    }

    fn scratch(name: &str, text: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("surge-ds-{}-{name}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn sharegpt_fixture_loads_shuffled_and_filtered() {
        let t = tok();
        let p = sharegpt(&fixture("sharegpt.json"), Some(&t), Some(0), 100, None).unwrap();
        assert_eq!(p.len(), 6, "7 conversations, one too short");
        assert!(p.iter().all(|i| i.input_tokens >= 4 && i.output_tokens >= 4 && i.messages_json.is_empty()));
        assert!(
            p.iter()
                .all(|i| i.input_tokens == t.count(&i.text) && i.input_source() == surge_proto::TokenSource::Tokenizer)
        );
        assert_eq!(p, sharegpt(&fixture("sharegpt.json"), Some(&t), Some(0), 100, None).unwrap());
        // --disable-shuffle: the same prompts in file order.
        let ordered = sharegpt(&fixture("sharegpt.json"), Some(&t), None, 100, None).unwrap();
        let text = std::fs::read_to_string(fixture("sharegpt.json")).unwrap();
        let at = |p: &PromptItem| text.find(&serde_json::to_string(&p.text).unwrap()).unwrap();
        assert!(ordered.windows(2).all(|w| at(&w[0]) < at(&w[1])), "file order");
        assert_eq!(ordered.len(), p.len());
        assert_ne!(ordered, p, "the seeded shuffle changed the order");
        let fixed = sharegpt(&fixture("sharegpt.json"), None, Some(1), 3, Some(77)).unwrap();
        assert_eq!(fixed.len(), 3);
        assert!(fixed.iter().all(|i| i.output_tokens == 77));
    }

    #[test]
    fn custom_fixture_loads_prompts_and_messages() {
        let p = custom(&fixture("custom.jsonl"), None, 33, true).unwrap();
        assert_eq!(p.len(), 4);
        assert_eq!(p[0].output_tokens, 16);
        assert_eq!(p[1].output_tokens, 33);
        assert!(!p[2].messages_json.is_empty());
        let err = custom(&fixture("custom.jsonl"), None, 33, false).unwrap_err();
        assert!(err.ends_with("custom.jsonl:4: \"messages\" needs --backend openai-chat"), "{err}");
    }

    #[test]
    fn malformed_lines_give_file_line_and_reason() {
        let cases = [
            ("{\"prompt\": \"a\"}\n\n{\"prompt\": \"b\", }\n", 3, "not JSON"),
            ("{\"prompt\": 5}\n", 1, "\"prompt\" must be"),
            ("{\"prompt\": \"a\", \"output_tokens\": -1}\n", 1, "positive integer"),
            ("[1]\n", 1, "expected a JSON object"),
            ("{\"text\": \"a\"}\n", 1, "expected \"prompt\" or \"messages\""),
            ("{\"messages\": [{\"content\": \"x\"}]}\n", 1, "\"role\""),
        ];
        for (i, (text, line, why)) in cases.iter().enumerate() {
            let path = scratch(&format!("bad{i}.jsonl"), text);
            let err = custom(&path, None, 8, true).unwrap_err();
            assert!(err.starts_with(&format!("{}:{line}: ", path.display())) && err.contains(why), "{err}");
            let _ = std::fs::remove_file(path);
        }
        let path =
            scratch("bad.json", "[\n  {\"conversations\": [\n    {\"from\": \"human\", \"value\": 5}\n  ]}\n]\n");
        let err = sharegpt(&path, None, Some(0), 10, None).unwrap_err();
        assert!(err.starts_with(&format!("{}:3: invalid type", path.display())), "{err}");
        let _ = std::fs::remove_file(path);
    }
}
