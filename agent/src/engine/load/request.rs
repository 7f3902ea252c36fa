//! One request, timed: write it, read the response (an SSE token stream for the OpenAI
//! backends, a plain body for `http`), and turn what happened into a [`Row`].
//!
//! A request starts (st) just before its first byte is written to the socket (HTTP/1.1;
//! on a shared HTTP/2 or HTTP/3 connection, when it is handed to the connection). Tokens
//! are dated once per body chunk read (by the socket read that brought it over TCP, when
//! the read completes over QUIC), so events that arrived together get the same time (a
//! zero gap is the truth there). Nothing here knows which transport carries the bytes. A reused connection that
//! fails before any response byte is retried once on a fresh one: the server closed it
//! while it sat idle, which costs a reconnect, not a failed request.
//!
//! Token counts: the server's `usage` when it sends one; otherwise the input count of the
//! prompt (tokenizer or estimate) and, for output, the streamed text re-counted with the
//! run's tokenizer (the text is kept only when there is one), else the number of
//! token-bearing events. The row says which source each count came from.

use crate::data::tokenizer::Tok;
pub use crate::engine::api::Mode;
use crate::engine::api::decode::{Decoder, Flow};
use crate::engine::api::openai::Seen;
use crate::engine::conn::{Body, Conn, Head};
use crate::engine::ending::ReadError;
use crate::engine::load::pool::Pool;
use bytes::Bytes;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use surge_proto::{ErrorKind, HttpPhases, Row, StreamEnd, TokenSource};

/// What is fixed for all requests of a run.
#[derive(Debug)]
pub struct RequestTemplate {
    pub uri_h1: http::Uri,
    pub uri_h2: http::Uri,
    pub authority: http::HeaderValue,
    pub content_type: http::HeaderValue,
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    pub mode: Mode,
    /// Re-counts streamed output when the server sends no usage.
    pub tokenizer: Option<Arc<Tok>>,
    /// A traced run: its id and sample ratio; each request then carries a W3C
    /// `traceparent` derived from them and its index (D19).
    pub trace: Option<(u64, f64)>,
    /// `x-request-id: <prefix><index>` on every request (vLLM's `--request-id-prefix`).
    pub request_id_prefix: Option<String>,
    /// Multi-turn: `<header>: <prefix><session>` on every turn (vllm-bench's `X-Session-ID`).
    pub session_header: Option<http::HeaderName>,
    /// Rows carry the generated text (`--save-detailed`: vLLM's `generated_texts`).
    pub keep_text: bool,
    /// `--read-timeout`: the longest wait for the next body byte once the head came.
    pub read_timeout: Option<Duration>,
    /// An agent loop (`--tool-loop`): rows carry the calls their reply made.
    pub keep_calls: bool,
    /// Rows carry this response header's value: the replica that served it (D69).
    pub replica_header: Option<http::HeaderName>,
    /// `--ignore-eos`: a reply shorter than `max_tokens` is an anomaly (D70).
    pub ignore_eos: bool,
}

impl RequestTemplate {
    /// Request `index`'s `x-request-id`, `<prefix><index>`; a conversation's turn is
    /// `<prefix>conv-<session>-turn<t>`, as vllm-bench names it. `None` without a prefix.
    fn request_id(&self, index: u64, session: Option<u64>) -> Option<String> {
        let p = self.request_id_prefix.as_deref()?;
        Some(match session {
            None => format!("{p}{index}"),
            Some(s) => format!("{p}conv-{s}-turn{}", index % surge_proto::TURN_STRIDE),
        })
    }

    /// `absolute`: the absolute URI of a multiplexed connection (HTTP/2, HTTP/3), no `Host`.
    fn build(&self, body: Bytes, absolute: bool, index: u64, session: Option<u64>) -> http::Request<Bytes> {
        let mut req = http::Request::new(body);
        *req.method_mut() = http::Method::POST;
        *req.uri_mut() = if absolute { self.uri_h2.clone() } else { self.uri_h1.clone() };
        let h = req.headers_mut();
        if !absolute {
            h.insert(http::header::HOST, self.authority.clone());
        }
        h.insert(http::header::CONTENT_TYPE, self.content_type.clone());
        for (k, v) in &self.headers {
            h.insert(k.clone(), v.clone());
        }
        if let Some(id) = self.request_id(index, session)
            && let Ok(v) = http::HeaderValue::try_from(id)
        {
            h.insert(http::HeaderName::from_static("x-request-id"), v);
        }
        if let (Some(name), Some(s)) = (&self.session_header, session) {
            let prefix = self.request_id_prefix.as_deref().unwrap_or_default();
            if let Ok(v) = http::HeaderValue::try_from(format!("{prefix}conv-{s}")) {
                h.insert(name.clone(), v);
            }
        }
        if let Some((run_id, ratio)) = self.trace
            && let Ok(v) = http::HeaderValue::try_from(crate::trace::traceparent(run_id, index, ratio))
        {
            h.insert(http::HeaderName::from_static("traceparent"), v);
        }
        req
    }
}

/// One request to send.
#[derive(Debug, Clone)]
pub struct Job {
    pub index: u64,
    pub body: Bytes,
    pub input_tokens: u32,
    pub input_source: TokenSource,
    /// Inputs a pooling request carries (0 for the others).
    pub input_sequences: u32,
    /// Seconds of audio it carries (`openai-audio`).
    pub audio_s: f64,
    /// The output tokens it asks for (0: it names none): its length is checked (D70).
    pub max_tokens: u32,
    /// It lets the model end at EOS whatever `--ignore-eos` says (an accuracy question).
    pub honours_eos: bool,
    /// Intended send time (open loop), relative to the run start.
    pub intended: Option<Duration>,
    /// A conversation's turn: its session (for the session header) and whether the reply
    /// text is kept in the row (the next turn's history).
    pub session: Option<u64>,
    pub keep_reply: bool,
}

impl Job {
    /// Request `index`, planned, sent at `intended` (open loop) or at once.
    pub fn of(index: u64, p: crate::engine::workload::Planned, intended: Option<Duration>) -> Self {
        Job {
            index,
            body: p.body,
            input_tokens: p.input_tokens,
            input_source: p.input_source,
            input_sequences: p.input_sequences,
            audio_s: p.audio_s,
            max_tokens: p.max_tokens,
            honours_eos: false,
            intended,
            session: None,
            keep_reply: false,
        }
    }
}

pub use crate::engine::api::decode::{MESSAGE_MAX, message};
pub(crate) use crate::engine::api::micros::{signed_us, us};

/// Runs one job on a pooled connection and returns its row (never panics, never errors:
/// failures are rows with an error kind).
pub async fn execute(pool: &Arc<Pool>, tpl: &RequestTemplate, job: Job, t0: Instant) -> Row {
    // The request's own start: what comes before its first byte (a connection or stream
    // slot, a connect, a handshake) is its `blocked`, `connecting` and `tls` (D35).
    let began = Instant::now();
    let mut row = Row {
        index: job.index,
        intended_us: job.intended.map_or(-1, signed_us),
        input_tokens: job.input_tokens,
        input_source: job.input_source as i32,
        input_sequences: job.input_sequences,
        input_audio_s: job.audio_s,
        ..Default::default()
    };
    // A reused connection the server closed while it sat idle costs one retry on a
    // connection opened for this request, never a failure.
    let mut fresh = false;
    loop {
        let checkout = if fresh { pool.connect_new().await.map(|c| (c, false)) } else { pool.checkout().await };
        let (mut conn, reused) = match checkout {
            Ok(c) => c,
            Err(e) => {
                let now = Instant::now();
                row.start_us = signed_us(now.saturating_duration_since(t0));
                row.set_error(e.kind());
                row.error_message = message(&e.to_string());
                return row;
            }
        };
        if !conn.ready().await {
            if !fresh {
                fresh = true;
                pool.stats().reconnects.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            row.start_us = signed_us(t0.elapsed());
            row.set_error(ErrorKind::ConnectionReset);
            return row;
        }
        let opening = conn.opened.take().unwrap_or_default();
        let h2 = conn.is_multiplexed();
        let req = tpl.build(job.body.clone(), h2, job.index, job.session);
        if !h2 {
            conn.clock.arm_write();
        }
        let handed = Instant::now();
        // A connection that ended without answering this request (it has been seen,
        // rarely, with a server that closes after every stream) must not hold the
        // request forever: its end counts as a reset. An HTTP/1.1 connection's end is
        // seen by `send` itself (the request drives it).
        let sent = if h2 {
            let gone = conn.gone.clone();
            tokio::select! {
                biased;
                r = conn.send(req) => r,
                () = gone.cancelled() => Err(ErrorKind::ConnectionReset),
            }
        } else {
            conn.send(req).await
        };
        // st: just before the request's first byte went to the socket (see ioclock.rs).
        let written = conn.clock.take_write().filter(|_| !h2);
        let st = written.map_or(handed, |(w, _)| w.max(handed));
        row.start_us = signed_us(st.saturating_duration_since(t0));
        let resp = match sent {
            Ok(r) => r,
            Err(kind) => {
                // A stream refused on a multiplexed connection that is still up was
                // refused by the server: a failure, not a stale connection.
                if reused && !fresh && (!h2 || conn.is_closed()) {
                    fresh = true;
                    pool.stats().reconnects.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                row.latency_us = us(st.elapsed());
                row.set_error(kind);
                return row;
            }
        };
        let (head, body) = resp;
        if let Some(name) = &tpl.replica_header {
            row.replica = replica(&head.headers, name);
        }
        // The request's last byte: the last write's end (HTTP/1.1), handed to QUIC
        // (HTTP/3); an HTTP/2 stream's is not seen (its connection writes it): at st.
        let sent = written.map(|(_, last)| last).or(head.sent).unwrap_or(st).max(st);
        let head_at = head.arrived.max(sent);
        let phases = HttpPhases {
            blocked_us: us(st.saturating_duration_since(began).saturating_sub(opening.connecting + opening.tls)),
            connecting_us: us(opening.connecting),
            tls_us: us(opening.tls),
            sending_us: us(sent - st),
            waiting_us: us(head_at - sent),
            receiving_us: 0,
            reused,
        };
        read_response(pool, tpl, conn, head, body, (st, head_at, phases), &mut row, job.keep_reply).await;
        // Lengths are judged on counts the server gave or the events (a tokenizer's
        // re-count of the text may differ by a token at the edges).
        let counted = row.usage_from_server || row.output_source() == TokenSource::EventCount;
        if row.error() == ErrorKind::None && counted && tpl.mode.streams() {
            crate::engine::api::anomalies::of_length(job.max_tokens, tpl.ignore_eos && !job.honours_eos, &mut row);
        }
        // A server that names its replies after x-request-id (vLLM) shows which request
        // a reply answers: one of the run's others is an anomaly.
        if let Some(p) = tpl.request_id_prefix.as_deref()
            && row.error() == ErrorKind::None
        {
            crate::engine::api::anomalies::of_id(p, job.index, job.session, &mut row);
        }
        return row;
    }
}

/// Most bytes of a replica's name kept in a row.
const REPLICA_MAX: usize = 64;

/// The values of header `name` (", "-joined, cut at [`REPLICA_MAX`] bytes on a character
/// boundary): which replica answered.
fn replica(headers: &http::HeaderMap, name: &http::HeaderName) -> String {
    let mut out = String::new();
    for v in headers.get_all(name) {
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str(&String::from_utf8_lossy(v.as_bytes()));
    }
    if out.len() > REPLICA_MAX {
        let mut end = REPLICA_MAX;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
    }
    out
}

/// Reads the response's body until it ends, breaks off or is too large, handing each
/// chunk to the decoder ([`Decoder`], which knows the API); the row gets what it decoded.
/// What is I/O stays here: the connection's end on a multiplexed connection, the read
/// timeout, the connection's return to the pool.
#[allow(clippy::too_many_arguments)]
async fn read_response(
    pool: &Arc<Pool>,
    tpl: &RequestTemplate,
    mut conn: Conn,
    head: Head,
    mut body: Body,
    (st, head_at, mut phases): (Instant, Instant, HttpPhases),
    row: &mut Row,
    keep_reply: bool,
) {
    let keep_text = tpl.tokenizer.is_some() || tpl.keep_text || keep_reply;
    let seen = if tpl.keep_calls { Seen::keeping_calls() } else { Seen::default() };
    let mut decoder = Decoder::with_seen(tpl.mode, head.status.is_success(), st, head_at, keep_text, seen);
    // --read-timeout: a timer only when asked (none on the default path).
    let mut idle = tpl.read_timeout.map(|t| Box::pin(tokio::time::sleep(t)));
    // Watched on a multiplexed connection only (a token's clone takes its lock).
    let multiplexed = conn.is_multiplexed();
    let token = multiplexed.then(|| conn.gone.clone());
    let gone = async {
        match &token {
            Some(t) => t.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(gone);
    loop {
        let frame = tokio::select! {
            biased;
            f = conn.chunk(&mut body) => f,
            // The connection ended without ending the body: a cut stream (an HTTP/1.1
            // connection's end is seen by `chunk` itself).
            () = &mut gone, if multiplexed => Some(Err(ReadError::new(ErrorKind::ConnectionReset, StreamEnd::PeerClosed))),
            () = async { if let Some(s) = idle.as_mut() { s.as_mut().await } }, if idle.is_some() => {
                Some(Err(ReadError::new(ErrorKind::Timeout, StreamEnd::ReadTimeout)))
            }
        };
        match frame {
            None => break,
            Some(Err(ReadError { kind, end })) => {
                decoder.broke(kind, end);
                break;
            }
            Some(Ok((data, arrived))) => {
                if let (Some(s), Some(t)) = (idle.as_mut(), tpl.read_timeout) {
                    s.as_mut().reset(tokio::time::Instant::now() + t);
                }
                if decoder.feed(&data, arrived) == Flow::Stop {
                    break;
                }
            }
        }
    }
    let end = Instant::now();
    phases.receiving_us = us(decoder.last_byte() - head_at);
    row.phases = Some(phases);
    let head = (head.status, head.version, &head.headers);
    if decoder.finish(end, head, tpl.tokenizer.as_deref(), tpl.keep_text || keep_reply, row) {
        pool.checkin(conn);
    }
}

/// A template for tests: completions to 127.0.0.1:1, nothing optional.
#[cfg(test)]
pub(crate) fn tests_template() -> RequestTemplate {
    RequestTemplate {
        uri_h1: http::Uri::from_static("http://127.0.0.1:1/v1/completions"),
        uri_h2: http::Uri::from_static("http://127.0.0.1:1/v1/completions"),
        authority: http::HeaderValue::from_static("127.0.0.1:1"),
        content_type: http::HeaderValue::from_static("application/json"),
        headers: Vec::new(),
        mode: Mode::Stream,
        tokenizer: None,
        trace: None,
        request_id_prefix: None,
        session_header: None,
        keep_text: false,
        read_timeout: None,
        keep_calls: false,
        replica_header: None,
        ignore_eos: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replica_is_the_named_headers_values_cut_on_a_character() {
        let mut h = http::HeaderMap::new();
        let name = http::HeaderName::from_static("x-served-by");
        assert_eq!(replica(&h, &name), "");
        h.append(&name, http::HeaderValue::from_static("a"));
        h.append(&name, http::HeaderValue::from_static("b"));
        assert_eq!(replica(&h, &name), "a, b");
        h.insert(&name, http::HeaderValue::from_str(&"é".repeat(40)).expect("a value"));
        let got = replica(&h, &name);
        assert!(got.len() <= REPLICA_MAX && got.chars().all(|c| c == 'é'), "{got}");
    }

    fn template(trace: Option<(u64, f64)>) -> RequestTemplate {
        RequestTemplate {
            trace,
            request_id_prefix: Some("bench-1-".into()),
            session_header: Some(http::HeaderName::from_static("x-session-id")),
            ..tests_template()
        }
    }

    #[test]
    fn a_traced_run_sends_each_request_its_traceparent() {
        let turn = template(None).build(Bytes::new(), false, 5002, Some(5));
        let header =
            |r: &http::Request<Bytes>, k: &str| r.headers().get(k).and_then(|v| v.to_str().ok()).map(String::from);
        assert_eq!(header(&turn, "x-session-id").as_deref(), Some("bench-1-conv-5"));
        assert_eq!(header(&turn, "x-request-id").as_deref(), Some("bench-1-conv-5-turn2"));
        let req = template(Some((9, 1.0))).build(Bytes::new(), false, 77, None);
        let got = req.headers().get("traceparent").and_then(|v| v.to_str().ok()).map(String::from);
        assert_eq!(got, Some(crate::trace::traceparent(9, 77, 1.0)));
        assert_eq!(req.headers().get("x-request-id").and_then(|v| v.to_str().ok()), Some("bench-1-77"));
        let plain = template(None).build(Bytes::new(), false, 77, None);
        assert!(plain.headers().get("traceparent").is_none(), "only when tracing");
        assert!(plain.headers().get("x-session-id").is_none(), "only on a conversation's turns");
    }
}
