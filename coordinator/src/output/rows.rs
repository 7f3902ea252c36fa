//! `--save-rows PATH`: one JSON object per request, written as rows arrive (zstd when
//! PATH ends in `.zst`), so a run of any length keeps no row in memory. Names are vLLM's
//! detailed keys in the singular; times in seconds from the run's start.

use super::OutputError;
use super::result::StreamExample;
use crate::analysis::metrics::{GlobalRow, kind_name};
use serde::Serialize;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// One line of the file.
#[derive(Serialize)]
struct Line<'a> {
    agent: usize,
    start_time: f64,
    intended_start_time: Option<f64>,
    ttft: f64,
    latency: f64,
    itl: Vec<f64>,
    input_len: u32,
    output_len: u32,
    /// What the server (or the connection) said; `""` when the request succeeded.
    error: &'a str,
    /// The error kind (`http_status`, `timeout`, ...); `""` when it succeeded.
    error_kind: &'a str,
    /// The agent's request sequence number (the request's global index).
    seq: u64,
    /// The server's response id (`""` when it sent none).
    id: std::borrow::Cow<'a, str>,
    /// A stream cut after its head: how it ended and who ended it (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<StreamExample>,
    /// A conversation's turn: its session and turn (0-based), history tokens resent, and
    /// the cached prompt tokens the server reported (absent in other runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    turn: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    history_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cached_tokens: Option<u32>,
    /// A pooling request's inputs (documents for rerank), an audio request's seconds of
    /// audio (absent for the others).
    #[serde(skip_serializing_if = "Option::is_none")]
    input_sequences: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    audio_s: Option<f64>,
    /// On the row that ended its session: how (`completed`/`failed`), and turns not sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    session_end: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cancelled_turns: Option<u32>,
    /// k6's HTTP phases in seconds, and whether the connection was reused (D35; absent
    /// when the agent did not time them, or the request failed before a response head).
    #[serde(skip_serializing_if = "Option::is_none")]
    http: Option<HttpLine>,
    /// A reply that reasoned first (D49): its reasoning deltas, their span (s), the time to
    /// the first answer token (s), the server's reasoning tokens; and the time to the
    /// first tool-call delta (s). Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttfo: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    server_reasoning_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<u32>,
    /// A reply that ended with `finish_reason: "tool_calls"` (absent otherwise).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    finish_tool_calls: bool,
    /// An agent loop's tool step (D65): its index in the turn and the tool latency (s)
    /// waited before it (absent on a turn's first request).
    #[serde(skip_serializing_if = "Option::is_none")]
    step: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_wait: Option<f64>,
    /// On the row that ended its session, an agent loop's totals: tool steps, tool time
    /// (s) and model time (s).
    #[serde(skip_serializing_if = "Option::is_none")]
    session_steps: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_tool_time: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_model_time: Option<f64>,
    /// A sub-agent's row: the session that spawned its session (D68).
    #[serde(skip_serializing_if = "Option::is_none")]
    parent: Option<u64>,
    /// On a root's last row, when it spawned sub-agents: its graph's duration and
    /// critical path (s) and its widest fan-out.
    #[serde(skip_serializing_if = "Option::is_none")]
    graph_duration: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    critical_path: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fan_out: Option<u32>,
    /// Several endpoints (D69): the one it went to, by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    endpoint: Option<&'a str>,
    /// `--replica-header`: the replica the response named.
    #[serde(skip_serializing_if = "Option::is_none")]
    replica: Option<&'a str>,
    /// What the reply did that a benchmark can be fooled by (D70); absent when nothing.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    anomalies: Vec<&'static str>,
    /// An accuracy question (D71): whether its reply was right.
    #[serde(skip_serializing_if = "Option::is_none")]
    correct: Option<bool>,
}

/// A row's HTTP phases (seconds).
#[derive(Serialize)]
struct HttpLine {
    blocked: f64,
    connecting: f64,
    tls_handshaking: f64,
    sending: f64,
    waiting: f64,
    receiving: f64,
    duration: f64,
    reused: bool,
}

impl HttpLine {
    fn of(p: &surge_proto::HttpPhases) -> Self {
        let s = |us: u64| us as f64 / 1e6;
        Self {
            blocked: s(p.blocked_us),
            connecting: s(p.connecting_us),
            tls_handshaking: s(p.tls_us),
            sending: s(p.sending_us),
            waiting: s(p.waiting_us),
            receiving: s(p.receiving_us),
            duration: s(p.sending_us + p.waiting_us + p.receiving_us),
            reused: p.reused,
        }
    }
}

/// The open file.
pub struct RowFile {
    path: PathBuf,
    out: Box<dyn Write + Send>,
    written: u64,
    /// Several endpoints: their names, by index (empty with one).
    endpoints: Vec<String>,
}

impl RowFile {
    pub fn create(path: &Path) -> Result<Self, OutputError> {
        let err = |source| OutputError::Write { path: path.to_path_buf(), source };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let file = BufWriter::with_capacity(1 << 20, File::create(path).map_err(err)?);
        let out: Box<dyn Write + Send> = if path.extension().is_some_and(|e| e == "zst") {
            Box::new(zstd::Encoder::new(file, 3).map_err(err)?.auto_finish())
        } else {
            Box::new(file)
        };
        Ok(Self { path: path.to_path_buf(), out, written: 0, endpoints: Vec::new() })
    }

    /// Rows name their endpoint (a run with several, D69).
    pub fn with_endpoints(mut self, names: Vec<String>) -> Self {
        self.endpoints = names;
        self
    }

    /// Appends one row.
    pub fn write(&mut self, r: &GlobalRow) -> Result<(), OutputError> {
        let kind = if r.ok() { String::new() } else { kind_name(r.row.error()) };
        // An agent loop's totals (D65) and a graph's (D68), on the row that ended a session.
        let totals = r.row.session_end.as_ref().filter(|e| e.model_us > 0);
        let graph = r.row.session_end.as_ref().filter(|e| e.fan_out > 0);
        let line = Line {
            agent: r.agent,
            start_time: r.start_s,
            intended_start_time: r.intended_s,
            ttft: r.ttft_s(),
            latency: r.e2el_s(),
            itl: r.row.gaps().map(|g| f64::from(g) / 1e6).collect(),
            input_len: r.row.input_tokens,
            output_len: r.row.output_tokens,
            error: if r.ok() {
                ""
            } else if r.row.error_message.is_empty() {
                &kind
            } else {
                &r.row.error_message
            },
            error_kind: &kind,
            seq: r.row.index,
            id: r.row.response_id_str(),
            stream: r.row.cut.as_ref().map(StreamExample::of),
            session: r.row.session,
            turn: r.row.session.map(|_| r.row.turn),
            history_tokens: r.row.session.map(|_| r.row.history_tokens),
            cached_tokens: r.row.cached_tokens,
            input_sequences: (r.row.input_sequences > 0).then_some(r.row.input_sequences),
            audio_s: (r.row.input_audio_s > 0.0).then_some(r.row.input_audio_s),
            session_end: r.row.session_end.as_ref().map(|e| if e.failed { "failed" } else { "completed" }),
            cancelled_turns: r.row.session_end.as_ref().map(|e| e.cancelled_turns),
            http: r.row.phases.as_ref().map(HttpLine::of),
            reasoning_tokens: (r.row.reasoning_events > 0).then_some(r.row.reasoning_events),
            reasoning: (r.row.reasoning_events > 0).then(|| r.row.reasoning_us as f64 / 1e6),
            ttfo: r.row.ttfo_us.map(|t| t as f64 / 1e6),
            server_reasoning_tokens: r.row.reasoning_tokens,
            tool_call: r.row.tool_call_us.map(|t| t as f64 / 1e6),
            tool_calls: (r.row.tool_calls > 0).then_some(r.row.tool_calls),
            finish_tool_calls: r.row.finish_tool_calls,
            step: (r.row.step > 0).then_some(r.row.step),
            tool_wait: (r.row.step > 0).then(|| r.row.tool_wait_us as f64 / 1e6),
            session_steps: totals.map(|e| e.steps),
            session_tool_time: totals.map(|e| e.tool_wait_us as f64 / 1e6),
            session_model_time: totals.map(|e| e.model_us as f64 / 1e6),
            parent: r.row.parent,
            graph_duration: graph.map(|e| e.graph_duration_us as f64 / 1e6),
            critical_path: graph.map(|e| e.critical_path_us as f64 / 1e6),
            fan_out: graph.map(|e| e.fan_out),
            endpoint: self.endpoints.get(r.row.endpoint as usize).map(String::as_str),
            replica: (!r.row.replica.is_empty()).then_some(r.row.replica.as_str()),
            anomalies: r.row.anomalies().map(crate::analysis::anomalies::name).collect(),
            correct: r.row.correct,
        };
        let err = |source| OutputError::Write { path: self.path.clone(), source };
        serde_json::to_writer(&mut self.out, &line).map_err(|e| err(std::io::Error::other(e)))?;
        self.out.write_all(b"\n").map_err(err)?;
        self.written += 1;
        Ok(())
    }

    /// Flushes everything to disk.
    pub fn finish(&mut self) -> Result<u64, OutputError> {
        self.out.flush().map_err(|source| OutputError::Write { path: self.path.clone(), source })?;
        Ok(self.written)
    }
}

/// `--save-rows`, an output of one run: every row as it arrives, flushed at the run's end.
impl super::Output for RowFile {
    fn name(&self) -> &'static str {
        "--save-rows"
    }
    fn rows(&mut self, _agents: &[String], rows: &[&GlobalRow]) -> Result<(), OutputError> {
        rows.iter().try_for_each(|r| self.write(r))
    }
    fn level_end(&mut self, _result: &super::result::RunResult) -> Result<(), OutputError> {
        self.finish().map(drop)
    }
}
