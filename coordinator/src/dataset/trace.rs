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
//!
//! A session trace (AIPerf's `mooncake_trace` with `session_id`): lines that carry a
//! `session_id` (string or integer) are the turns of that session in file order. A
//! session's first turn is sent at its `timestamp` (0 without one); each later turn at its
//! `timestamp`, or `delay` ms after the previous turn of the session finished. Sessions
//! are ordered by their first turn's time and numbered densely from 0; every line of such
//! a file needs a `session_id`.
//! `output_length`/`output_tokens`/`max_tokens` absent = the default output length. Every
//! problem is `FILE:LINE: reason` (a usage error).

use serde_json::Value;
use std::path::Path;
use surge_core::data::dataset;
use surge_core::data::tokenizer::Tok;
use surge_proto::{PromptItem, TokenSource};

fn positive(v: &Value, key: &str) -> Result<u32, String> {
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|&n| n > 0)
        .ok_or(format!("\"{key}\" must be a positive integer"))
}

/// The longest delay a trace may give: a year (366 days), in ms. Timestamps may be on any
/// clock (Mooncake's are unix milliseconds): they count from the first.
pub(crate) const YEAR_MS: f64 = surge_core::data::turns::LONGEST_WAIT.as_secs() as f64 * 1e3;

fn line_item(line: &str, tok: Option<&Tok>, default_output: u32, chat: bool) -> Result<PromptItem, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let obj = v.as_object().ok_or("expected a JSON object")?;
    let session = obj.contains_key("session_id");
    let ts = match obj.get("timestamp") {
        None if session => -1.0,
        None => return Err("no \"timestamp\" (milliseconds)".into()),
        Some(t) => t
            .as_f64()
            .filter(|t| t.is_finite() && *t >= 0.0)
            .ok_or("\"timestamp\" must be a number of milliseconds >= 0")?,
    };
    let delay = match obj.get("delay") {
        None => -1.0,
        Some(_) if !session => return Err("\"delay\" needs a \"session_id\"".into()),
        Some(d) => d
            .as_f64()
            .filter(|d| (0.0..=YEAR_MS).contains(d))
            .ok_or("\"delay\" must be a number of milliseconds from 0 to a year")?,
    };
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
            let input_tokens = positive(n, "input_length")?;
            if input_tokens > dataset::MAX_INPUT_TOKENS {
                return Err(format!("\"input_length\" {input_tokens}: at most {}", dataset::MAX_INPUT_TOKENS));
            }
            let mut p = PromptItem { input_tokens, hash_ids, ..Default::default() };
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
    item.delay_ms = delay;
    Ok(item)
}

/// A line's `session_id` as text (`None`: no session).
fn session_id(line: &str) -> Option<String> {
    let v: Value = serde_json::from_str(line).ok()?;
    id_text(v.get("session_id")?)
}

fn id_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// A line's sub-agents (D68): the session ids in `spawn`, and `join`.
fn sub_agents(line: &str) -> Result<(Vec<String>, bool), String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let session = v.get("session_id").is_some();
    let spawn = match v.get("spawn") {
        None => Vec::new(),
        Some(_) if !session => return Err("\"spawn\" needs a \"session_id\"".into()),
        Some(Value::Array(ids)) => ids.iter().filter_map(id_text).collect(),
        Some(_) => return Err("\"spawn\" must be an array of session ids".into()),
    };
    let join = match v.get("join") {
        None => false,
        Some(_) if !session => return Err("\"join\" needs a \"session_id\"".into()),
        Some(j) => j.as_bool().ok_or("\"join\" must be true or false")?,
    };
    Ok((spawn, join))
}

/// Turns each `spawn` id into its session's number: every spawned id must be a session
/// of the trace, spawned once, by another session, and reachable from one that is not
/// spawned (no cycle).
fn number_spawns(
    items: &mut [PromptItem],
    spawned: &[(usize, Vec<String>)],
    number: &std::collections::HashMap<String, u64>,
) -> Result<(), String> {
    let mut parent: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    for (i, ids) in spawned {
        let own = items[*i].session.unwrap_or(0);
        for id in ids {
            let n = *number.get(id).ok_or(format!("\"spawn\": no session {id:?} in the trace"))?;
            if n == own || parent.insert(n, own).is_some() {
                return Err(format!("\"spawn\": session {id:?} is spawned twice (or by itself)"));
            }
            items[*i].spawn.push(n);
        }
    }
    for &start in parent.keys() {
        let (mut at, mut hops) = (start, 0);
        while let Some(&p) = parent.get(&at) {
            at = p;
            hops += 1;
            if hops > parent.len() {
                return Err("\"spawn\": sessions spawn each other in a cycle".into());
            }
        }
    }
    Ok(())
}

/// A turn of a session trace and the session ids it spawns.
type Turn = (PromptItem, Vec<String>);

/// A session trace's turns: grouped by session (first appearance), each session's turns in
/// file order, sessions ordered by their first turn's time; times from the earliest first
/// turn. `ids` holds each item's session id text, `spawns` the ids each item spawns (D68),
/// numbered here once the sessions are.
fn sessions(items: Vec<PromptItem>, ids: Vec<String>, spawns: Vec<Vec<String>>) -> Result<Vec<PromptItem>, String> {
    let mut order: Vec<String> = Vec::new();
    let mut groups: std::collections::HashMap<String, Vec<Turn>> = std::collections::HashMap::new();
    for ((item, id), spawn) in items.into_iter().zip(ids).zip(spawns) {
        if !groups.contains_key(&id) {
            order.push(id.clone());
        }
        groups.entry(id).or_default().push((item, spawn));
    }
    let mut sessions: Vec<(String, Vec<Turn>)> =
        order.into_iter().filter_map(|id| groups.remove(&id).map(|g| (id, g))).collect();
    for (_, s) in &mut sessions {
        // A first turn without a time starts with the trace.
        if s[0].0.timestamp_ms < 0.0 {
            s[0].0.timestamp_ms = 0.0;
        }
        s[0].0.delay_ms = -1.0;
    }
    sessions.sort_by(|a, b| a.1[0].0.timestamp_ms.total_cmp(&b.1[0].0.timestamp_ms));
    let first = sessions.first().map_or(0.0, |s| s.1[0].0.timestamp_ms);
    let number: std::collections::HashMap<String, u64> =
        sessions.iter().enumerate().map(|(k, (id, _))| (id.clone(), k as u64)).collect();
    let mut out = Vec::new();
    let mut spawned = Vec::new();
    for (k, (_, turns)) in sessions.into_iter().enumerate() {
        for (mut t, spawn) in turns {
            if t.timestamp_ms >= 0.0 {
                t.timestamp_ms = (t.timestamp_ms - first).max(0.0);
            } else if t.delay_ms < 0.0 {
                t.delay_ms = 0.0;
            }
            t.session = Some(k as u64);
            if !spawn.is_empty() {
                spawned.push((out.len(), spawn));
            }
            out.push(t);
        }
    }
    number_spawns(&mut out, &spawned, &number)?;
    Ok(out)
}

/// Every request of the trace at `path` (a JSONL file, a Weka trace, or a directory of
/// Weka traces, D73), sorted by time, times from the earliest; and a Weka trace's block
/// size (its own, which the run uses).
pub fn read(
    path: &Path,
    tok: Option<&Tok>,
    default_output: u32,
    chat: bool,
) -> Result<(Vec<PromptItem>, Option<u32>), String> {
    let w = if path.is_dir() {
        super::weka::read_dir(path, tok)?
    } else {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        match super::weka::read_if_weka(&text, path, tok) {
            Some(w) => w?,
            None => return lines(path, &text, tok, default_output, chat).map(|t| (t, None)),
        }
    };
    Ok((grouped(path, w.items, w.ids, w.spawns)?, Some(w.block_size)))
}

/// A session trace's turns grouped into sessions (at most [`surge_proto::MAX_TURNS`] each).
fn grouped(
    path: &Path,
    items: Vec<PromptItem>,
    ids: Vec<String>,
    spawns: Vec<Vec<String>>,
) -> Result<Vec<PromptItem>, String> {
    let most = surge_proto::MAX_TURNS as usize;
    let mut turns: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for id in &ids {
        let n = turns.entry(id.as_str()).or_default();
        *n += 1;
        if *n > most {
            return Err(format!("{}: session {id:?} has more than {most} turns", path.display()));
        }
    }
    sessions(items, ids, spawns).map_err(|e| format!("{}: {e}", path.display()))
}

/// The requests of a JSONL trace.
fn lines(
    path: &Path,
    text: &str,
    tok: Option<&Tok>,
    default_output: u32,
    chat: bool,
) -> Result<Vec<PromptItem>, String> {
    let mut out = Vec::new();
    let mut ids = Vec::new();
    // Each line's sub-agents (D68): the session ids it spawns.
    let mut spawns: Vec<Vec<String>> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |r: String| format!("{}:{}: {r}", path.display(), i + 1);
        let mut item = line_item(line, tok, default_output, chat).map_err(at)?;
        let (spawn, join) = sub_agents(line).map_err(at)?;
        item.join = join;
        spawns.push(spawn);
        match session_id(line) {
            Some(id) => ids.push(id),
            None if !ids.is_empty() => return Err(at("no \"session_id\" (earlier lines have one)".into())),
            None => {}
        }
        if !ids.is_empty() && ids.len() != out.len() + 1 {
            return Err(at("\"session_id\" on some lines only: give every line one".into()));
        }
        out.push(item);
    }
    if out.is_empty() {
        return Err(format!("{}: no request in the trace", path.display()));
    }
    if !ids.is_empty() {
        return grouped(path, out, ids, spawns);
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

    fn trace(path: &Path, tok: Option<&Tok>, default_output: u32, chat: bool) -> Result<Vec<PromptItem>, String> {
        read(path, tok, default_output, chat).map(|t| t.0)
    }

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
    fn session_lines_group_into_sessions_in_file_order() {
        let p = scratch(
            "sessions.jsonl",
            "{\"session_id\": \"b\", \"timestamp\": 900, \"input_length\": 5}\n\
             {\"session_id\": \"a\", \"timestamp\": 500, \"input_length\": 6}\n\
             {\"session_id\": \"b\", \"delay\": 250, \"input_length\": 7}\n\
             {\"session_id\": \"a\", \"timestamp\": 2500, \"input_length\": 8}\n",
        );
        let t = trace(&p, None, 4, false).unwrap();
        let got: Vec<(Option<u64>, u32, f64, f64)> =
            t.iter().map(|i| (i.session, i.input_tokens, i.timestamp_ms, i.delay_ms)).collect();
        assert_eq!(
            got,
            vec![
                (Some(0), 6, 0.0, -1.0),
                (Some(0), 8, 2000.0, -1.0),
                (Some(1), 5, 400.0, -1.0),
                (Some(1), 7, -1.0, 250.0)
            ]
        );
        let mixed = scratch(
            "mixed.jsonl",
            "{\"session_id\": 1, \"input_length\": 5}\n{\"timestamp\": 1, \"input_length\": 5}\n",
        );
        assert!(trace(&mixed, None, 4, false).unwrap_err().contains(":2: no \"session_id\""));
        let _ = (std::fs::remove_file(p), std::fs::remove_file(mixed));
    }

    #[test]
    fn spawns_are_numbered_and_checked() {
        let line = |id: &str, extra: &str| format!("{{\"session_id\": \"{id}\", \"input_length\": 5{extra}}}\n");
        let ok =
            [line("p", ", \"spawn\": [\"c\", \"d\"]"), line("p", ", \"join\": true"), line("c", ""), line("d", "")];
        let p = scratch("spawn.jsonl", &ok.concat());
        let t = trace(&p, None, 4, false).unwrap();
        let got: Vec<(Option<u64>, Vec<u64>, bool)> = t.iter().map(|i| (i.session, i.spawn.clone(), i.join)).collect();
        assert_eq!(
            got,
            vec![
                (Some(0), vec![1, 2], false),
                (Some(0), vec![], true),
                (Some(1), vec![], false),
                (Some(2), vec![], false)
            ]
        );
        for (lines, want) in [
            (vec![line("p", ", \"spawn\": [\"x\"]")], "no session \"x\""),
            (
                vec![line("p", ", \"spawn\": [\"c\"]"), line("q", ", \"spawn\": [\"c\"]"), line("c", "")],
                "spawned twice",
            ),
            (vec![line("p", ", \"spawn\": [\"p\"]")], "by itself"),
            (vec![line("a", ", \"spawn\": [\"b\"]"), line("b", ", \"spawn\": [\"a\"]")], "cycle"),
            (vec![line("p", ", \"spawn\": \"c\""), line("c", "")], "must be an array"),
            (vec![line("p", ", \"join\": 1")], "\"join\" must be true or false"),
        ] {
            let p = scratch("bad-spawn.jsonl", &lines.concat());
            let e = trace(&p, None, 4, false).unwrap_err();
            assert!(e.contains(want), "{e} lacks {want}");
        }
        let plain = scratch("plain-spawn.jsonl", "{\"timestamp\": 1, \"input_length\": 3, \"spawn\": [\"a\"]}\n");
        assert!(trace(&plain, None, 4, false).unwrap_err().contains("\"spawn\" needs a \"session_id\""));
        let _ = (std::fs::remove_file(p), std::fs::remove_file(plain));
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
