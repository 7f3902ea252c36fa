//! Weka agentic-coding traces (kv-cache-tester's format, which AIPerf replays; D73): one
//! JSON object per conversation, `{"id", "block_size", "hash_id_scope", "requests": [...]}`,
//! whose requests are model calls (`"type": "n"` or `"s"`: `t` seconds from the
//! conversation's start, `in` and `out` tokens, `hash_ids`, `api_time`) and sub-agents
//! (`"type": "subagent"`: `t`, `agent_id`, `duration_ms`, and their own calls). Read as a
//! session trace with sub-agents (D68), the way AIPerf reads it:
//!
//! - the conversation is a session; its calls are its turns, the first at its `t`, each
//!   later one as long after the previous call's recorded end (`t + api_time`) as the
//!   trace waited (end-to-start, never negative);
//! - a sub-agent is a session spawned by the conversation's last call before it (one
//!   before every call is left out, as AIPerf leaves it), and joined by the first later
//!   call that starts at or after the sub-agent's end (`t + duration_ms`, else its last
//!   call's end); none: it runs on, unwaited; its calls are timed end to start as well;
//! - `hash_ids` are block ids of `block_size` tokens; with `hash_id_scope` `"local"` (the
//!   default) each conversation's ids are its own (so two files never share a prefix by
//!   chance), shared by the conversation and its sub-agents;
//! - `model` is not read: every call goes to the run's `--model`.
//!
//! A file is one such object (pretty-printed or not) or one per line; a directory is every
//! `.json` and `.jsonl` file in it, in name order. Every problem names the file (and line).

use serde::Deserialize;
use std::path::Path;
use surge_core::data::tokenizer::Tok;
use surge_proto::{PromptItem, TokenSource};

#[derive(Deserialize)]
struct Conversation {
    id: String,
    block_size: u32,
    #[serde(default)]
    hash_id_scope: Option<String>,
    requests: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(tag = "type")]
enum Entry {
    #[serde(rename = "n")]
    Normal(Call),
    #[serde(rename = "s")]
    Streaming(Call),
    #[serde(rename = "subagent")]
    SubAgent(SubAgent),
}

#[derive(Deserialize)]
struct Call {
    t: f64,
    #[serde(rename = "in")]
    input: u32,
    out: u32,
    #[serde(default)]
    hash_ids: Vec<u64>,
    #[serde(default)]
    api_time: f64,
}

#[derive(Deserialize)]
struct SubAgent {
    t: f64,
    agent_id: String,
    #[serde(default)]
    duration_ms: Option<f64>,
    requests: Vec<Entry>,
}

/// The requests of a Weka trace, as session-trace turns: each item, its session's id, and
/// the session ids it spawns; with the trace's block size.
pub struct Read {
    pub items: Vec<PromptItem>,
    pub ids: Vec<String>,
    pub spawns: Vec<Vec<String>>,
    pub block_size: u32,
    conversations: u64,
}

impl Read {
    fn new(block_size: u32) -> Self {
        Self { items: Vec::new(), ids: Vec::new(), spawns: Vec::new(), block_size, conversations: 0 }
    }

    fn push(&mut self, item: PromptItem, id: &str) -> usize {
        self.items.push(item);
        self.ids.push(id.to_string());
        self.spawns.push(Vec::new());
        self.items.len() - 1
    }
}

/// How a trace file holds its conversations: one JSON object (the whole text parses as
/// one), or one object per line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Whole,
    Lines,
}

/// `text`'s shape, and whether it is a Weka trace (its object, or its first line's, has a
/// `requests` array). The whole text is parsed once here.
fn shape(text: &str) -> (Shape, bool) {
    let has_requests = |v: &serde_json::Value| v.get("requests").is_some_and(|r| r.is_array());
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) => (Shape::Whole, has_requests(&v)),
        Err(_) => {
            let first = text.lines().find(|l| !l.trim().is_empty());
            let weka =
                first.and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok()).is_some_and(|v| has_requests(&v));
            (Shape::Lines, weka)
        }
    }
}

/// Whether `text` is a Weka trace: one JSON object with `requests`, or such an object on
/// its first line.
#[cfg(test)]
fn looks_like(text: &str) -> bool {
    shape(text).1
}

/// Every conversation of `text`, the contents of `file`, when it is a Weka trace (one JSON
/// object with `requests`, or such an object on its first line); `None` when it is not one.
pub fn read_if_weka(text: &str, file: &Path, tok: Option<&Tok>) -> Option<Result<Read, String>> {
    let (shape, weka) = shape(text);
    weka.then(|| read_text(text, shape, file, tok))
}

/// Every conversation of `text`, the contents of `file`, held in `shape`.
fn read_text(text: &str, shape: Shape, file: &Path, tok: Option<&Tok>) -> Result<Read, String> {
    let mut out = None;
    add_file(text, shape, file, tok, &mut out)?;
    finish(out, file)
}

/// Every conversation of the files of directory `dir`, in name order.
pub fn read_dir(dir: &Path, tok: Option<&Tok>) -> Result<Read, String> {
    let mut files = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for e in entries {
        let p = e.map_err(|e| format!("{}: {e}", dir.display()))?.path();
        if p.extension().is_some_and(|x| x == "json" || x == "jsonl") {
            files.push(p);
        }
    }
    files.sort();
    let mut out: Option<Read> = None;
    for f in &files {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        add_file(&text, shape(&text).0, f, tok, &mut out)?;
    }
    finish(out, dir)
}

fn finish(out: Option<Read>, path: &Path) -> Result<Read, String> {
    match out {
        Some(r) if !r.items.is_empty() => Ok(r),
        _ => Err(format!("{}: no request in the trace", path.display())),
    }
}

/// The conversations of one file (one object, or one per line) into `out`.
fn add_file(text: &str, shape: Shape, f: &Path, tok: Option<&Tok>, out: &mut Option<Read>) -> Result<(), String> {
    let objects: Vec<(usize, &str)> = match shape {
        Shape::Whole => vec![(0, text)],
        Shape::Lines => {
            text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()).map(|(i, l)| (i + 1, l)).collect()
        }
    };
    for (line, json) in objects {
        let at = |m: String| match line {
            0 => format!("{}: {m}", f.display()),
            n => format!("{}:{n}: {m}", f.display()),
        };
        let c: Conversation = serde_json::from_str(json).map_err(|e| at(format!("not a Weka trace: {e}")))?;
        let r = out.get_or_insert_with(|| Read::new(c.block_size));
        if c.block_size == 0 || c.block_size != r.block_size {
            return Err(at(format!(
                "\"block_size\" {} (the first conversation's is {}; one block size per run)",
                c.block_size, r.block_size
            )));
        }
        r.conversations += 1;
        add(c, r.conversations - 1, tok, r).map_err(at)?;
    }
    Ok(())
}

/// A call's turn: `in` tokens whose blocks are `hash_ids` (made the conversation's own
/// with a `local` scope), `out` tokens asked (at least 1).
fn turn(c: &Call, scope: Option<u64>, tok: Option<&Tok>) -> Result<PromptItem, String> {
    if c.input == 0 || c.input > surge_core::data::dataset::MAX_INPUT_TOKENS {
        return Err(format!(
            "\"in\" must be a positive integer, at most {}",
            surge_core::data::dataset::MAX_INPUT_TOKENS
        ));
    }
    const YEAR_S: f64 = surge_core::data::turns::LONGEST_WAIT.as_secs() as f64;
    if !(c.t.is_finite() && c.t >= 0.0 && (0.0..=YEAR_S).contains(&c.api_time)) {
        return Err("\"t\" must be seconds >= 0 and \"api_time\" seconds from 0 to a year".into());
    }
    let hash_ids = match scope {
        Some(k) => c.hash_ids.iter().map(|&h| local_id(k, h)).collect(),
        None => c.hash_ids.clone(),
    };
    let mut p = PromptItem { input_tokens: c.input, output_tokens: c.out.max(1), hash_ids, ..Default::default() };
    p.set_input_source(if tok.is_some() { TokenSource::Tokenizer } else { TokenSource::ClientEstimate });
    Ok(p)
}

/// Conversation `k`'s own block id for its id `h` (a `local` scope).
fn local_id(k: u64, h: u64) -> u64 {
    let mut x = (k << 40) ^ h ^ 0x9E37_79B9_7F4A_7C15;
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The calls of a sub-agent (no sub-agent inside another: refused).
fn calls<'a>(entries: &'a [Entry], agent: &str) -> Result<Vec<&'a Call>, String> {
    entries
        .iter()
        .map(|e| match e {
            Entry::Normal(c) | Entry::Streaming(c) => Ok(c),
            Entry::SubAgent(_) => Err(format!("sub-agent {agent:?} holds a sub-agent (one level is read)")),
        })
        .collect()
}

/// Milliseconds from `end` (seconds) to `t`, never negative, to the microsecond.
fn gap_ms(end: f64, t: f64) -> f64 {
    ((t - end) * 1e6).round().max(0.0) / 1000.0
}

/// Conversation number `k` into `r`.
fn add(c: Conversation, k: u64, tok: Option<&Tok>, r: &mut Read) -> Result<(), String> {
    let scope = match c.hash_id_scope.as_deref() {
        None | Some("local") => Some(k),
        Some("global") => None,
        Some(other) => return Err(format!("\"hash_id_scope\" {other:?}: \"local\" or \"global\"")),
    };
    let mut seen = std::collections::HashSet::new();
    // The conversation's last turn (its index in `r`, its recorded end), and the
    // sub-agents spawned and not yet joined (their recorded ends).
    let (mut last, mut waiting): (Option<(usize, f64)>, Vec<f64>) = (None, Vec::new());
    for e in &c.requests {
        match e {
            Entry::Normal(call) | Entry::Streaming(call) => {
                let mut item = turn(call, scope, tok)?;
                let joined: Vec<f64> = waiting.iter().copied().filter(|&end| end <= call.t).collect();
                waiting.retain(|&end| end > call.t);
                item.join = !joined.is_empty();
                (item.timestamp_ms, item.delay_ms) = match last {
                    None => (call.t * 1000.0, -1.0),
                    Some((_, end)) => (-1.0, gap_ms(joined.iter().copied().fold(end, f64::max), call.t)),
                };
                let i = r.push(item, &c.id);
                last = Some((i, call.t + call.api_time));
            }
            Entry::SubAgent(s) => {
                if !seen.insert(s.agent_id.as_str()) {
                    return Err(format!("sub-agent {:?} appears twice", s.agent_id));
                }
                let inner = calls(&s.requests, &s.agent_id)?;
                // Before the conversation's first call: no turn spawns it (AIPerf drops it).
                let Some((parent, _)) = last else { continue };
                if inner.is_empty() {
                    continue;
                }
                let id = format!("{}::sa:{}", c.id, s.agent_id);
                // Inner times before the spawn are relative to it.
                let at = |t: f64| if t < s.t { s.t + t } else { t };
                let mut end = s.t;
                let mut prev: Option<f64> = None;
                for call in inner {
                    let mut item = turn(call, scope, tok)?;
                    let t = at(call.t);
                    (item.timestamp_ms, item.delay_ms) = match prev {
                        None => (-1.0, -1.0),
                        Some(p) => (-1.0, gap_ms(p, t)),
                    };
                    r.push(item, &id);
                    prev = Some(t + call.api_time);
                    end = end.max(t + call.api_time);
                }
                if let Some(ms) = s.duration_ms.filter(|d| d.is_finite() && *d >= 0.0) {
                    end = s.t + ms / 1000.0;
                }
                r.spawns[parent].push(id);
                waiting.push(end);
            }
        }
    }
    if last.is_none() {
        return Err(format!("conversation {:?} has no request", c.id));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str, text: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("surge-weka-{}-{name}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    fn read(p: &Path, tok: Option<&Tok>) -> Result<Read, String> {
        let text = std::fs::read_to_string(p).unwrap();
        read_text(&text, shape(&text).0, p, tok)
    }

    const TRACE: &str = r#"{"id": "demo", "models": ["opus", "haiku"], "block_size": 64, "hash_id_scope": "local",
 "requests": [
  {"t": 0.0, "type": "s", "model": "opus", "in": 200, "out": 50, "hash_ids": [1, 2, 3], "stop": "tool_use", "api_time": 2.0},
  {"t": 2.5, "type": "subagent", "agent_id": "a1", "subagent_type": "Explore", "status": "completed",
   "duration_ms": 5000, "models": ["haiku"], "requests": [
     {"t": 2.6, "type": "n", "model": "haiku", "in": 130, "out": 40, "hash_ids": [1, 10], "api_time": 1.0},
     {"t": 4.0, "type": "s", "model": "haiku", "in": 260, "out": 80, "hash_ids": [1, 10, 11, 12], "api_time": 1.5}]},
  {"t": 3.0, "type": "s", "model": "opus", "in": 250, "out": 10, "hash_ids": [1, 2, 3, 4], "api_time": 0.5},
  {"t": 8.0, "type": "s", "model": "opus", "in": 330, "out": 60, "hash_ids": [1, 2, 3, 4, 5], "api_time": 2.2, "think_time": 0.5}]}"#;

    #[test]
    fn a_conversation_with_a_sub_agent_becomes_sessions_that_spawn_and_join() {
        let p = scratch("one.json", TRACE);
        assert!(looks_like(TRACE));
        let r = read(&p, None).unwrap();
        assert_eq!(r.block_size, 64);
        let got: Vec<(&str, u32, u32, f64, f64, bool, usize)> = r
            .items
            .iter()
            .zip(&r.ids)
            .zip(&r.spawns)
            .map(|((i, id), s)| {
                (id.as_str(), i.input_tokens, i.output_tokens, i.timestamp_ms, i.delay_ms, i.join, s.len())
            })
            .collect();
        assert_eq!(
            got,
            vec![
                // Turn 0 at t 0; it spawns the sub-agent (the last call before it).
                ("demo", 200, 50, 0.0, -1.0, false, 1),
                // The sub-agent: its first call when spawned, its second 0.4 s after the first ended.
                ("demo::sa:a1", 130, 40, -1.0, -1.0, false, 0),
                ("demo::sa:a1", 260, 80, -1.0, 400.0, false, 0),
                // 3.0 s is before the sub-agent's end (7.5 s): no join; 1 s after turn 0 ended.
                ("demo", 250, 10, -1.0, 1000.0, false, 0),
                // 8.0 s is after it: the turn joins, 0.5 s after the sub-agent's end.
                ("demo", 330, 60, -1.0, 500.0, true, 0),
            ]
        );
        assert_eq!(r.spawns[0], ["demo::sa:a1"]);
        // The conversation's and its sub-agent's blocks share ids; another conversation's do not.
        assert_eq!(r.items[0].hash_ids[0], r.items[1].hash_ids[0]);
        let two = scratch("two.jsonl", &format!("{}\n{}\n", TRACE.replace('\n', ""), TRACE.replace('\n', "")));
        let r2 = read(&two, None).unwrap();
        assert_eq!(r2.items.len(), 10);
        assert_ne!(r2.items[0].hash_ids[0], r2.items[5].hash_ids[0], "local ids are each conversation's own");
        // A directory: its .json and .jsonl files in name order, nothing else.
        let dir = std::env::temp_dir().join(format!("surge-weka-dir-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("b.json"), TRACE).unwrap();
        std::fs::write(dir.join("a.jsonl"), TRACE.replace('\n', "").replace("\"demo\"", "\"first\"")).unwrap();
        std::fs::write(dir.join("notes.txt"), "not a trace").unwrap();
        let d = read_dir(&dir, None).unwrap();
        assert_eq!((d.items.len(), d.ids[0].as_str(), d.ids[5].as_str()), (10, "first", "demo"));
        let _ = std::fs::remove_dir_all(&dir);
        let global = TRACE.replace("\"local\"", "\"global\"");
        let g = read(&scratch("global.json", &global), None).unwrap();
        assert_eq!(g.items[0].hash_ids, [1, 2, 3]);
        let _ = (std::fs::remove_file(p), std::fs::remove_file(two));
    }

    #[test]
    fn a_sub_agent_nobody_waits_for_runs_on_and_bad_traces_are_named() {
        // Ends after the last call: spawned, never joined.
        let late = TRACE.replace("\"duration_ms\": 5000", "\"duration_ms\": 50000");
        let r = read(&scratch("late.json", &late), None).unwrap();
        assert!(r.items.iter().all(|i| !i.join));
        assert!(!looks_like("{\"timestamp\": 0, \"input_length\": 5}\n"));
        for (text, want) in [
            (TRACE.replace("\"in\": 200", "\"in\": 0"), "\"in\" must be a positive integer"),
            (TRACE.replace("\"agent_id\": \"a1\"", "\"agent_id\": \"a1\", \"x\": 1").replace("\"t\": 8.0, \"type\": \"s\"", "\"t\": 8.0, \"type\": \"q\""), "not a Weka trace"),
            (TRACE.replace("\"local\"", "\"galaxy\""), "\"hash_id_scope\" \"galaxy\""),
            (TRACE.replace("\"requests\": [\n     {\"t\": 2.6, \"type\": \"n\"", "\"requests\": [{\"t\": 2.6, \"type\": \"subagent\", \"agent_id\": \"x\", \"requests\": []},\n     {\"t\": 2.6, \"type\": \"n\""), "holds a sub-agent"),
        ] {
            let p = scratch("bad.json", &text);
            let e = read(&p, None).err().unwrap_or_default();
            assert!(e.contains(want) && e.contains("bad.json"), "{e} lacks {want}");
        }
        let mixed = format!(
            "{}\n{}\n",
            TRACE.replace('\n', ""),
            TRACE.replace('\n', "").replace("\"block_size\": 64", "\"block_size\": 32")
        );
        let e = read(&scratch("mixed.jsonl", &mixed), None).err().unwrap_or_default();
        assert!(e.contains(":2: \"block_size\" 32"), "{e}");
    }
}
