//! Server-sent-event bodies of streamed completions: the chunk formatter
//! [`Chunker`], the body [`SseBody`] and its one error, [`Truncated`].
//!
//! [`SseBody`] is a hand-written `http_body::Body`: no task or channel per
//! stream; each `poll_frame` waits (one reusable [`PreciseSleep`] of the
//! server's timer) for the next token's absolute deadline and then yields one
//! `data: {json}\n\n` event. Chunks are
//! formatted by hand into a reused `BytesMut`: the per-request part of every
//! chunk (id, object, created, model) is rendered once.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};
use hyper::body::{Body, Frame};
use tokio::sync::{Notify, OwnedSemaphorePermit};

use crate::kind::Kind;
use crate::metrics::{GaugeGuard, Metrics};
use crate::schedule::{Schedule, deadline};
use crate::timer::{PreciseSleep, Timer};
use crate::tokens::{Field, Token, TokenPlan};

const DONE: &[u8] = b"data: [DONE]\n\n";

/// Formats the chunks of one response.
#[derive(Debug)]
pub(crate) struct Chunker {
    kind: Kind,
    /// The request's number (a tool call's id).
    index: u64,
    /// `data: {"id":"…","object":"…","created":T,"model":M,`
    head: Vec<u8>,
    /// How the last token's chunk ends a text answer.
    pub finish: Finish,
}

/// The `finish_reason` of a stream's last token (a tool call's is always `tool_calls`,
/// unless dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Finish {
    /// `"length"`: `max_tokens` reached.
    #[default]
    Length,
    /// `"stop"`: the model ended (`--early-eos-rate`).
    Stop,
    /// `null`: a server that never says why it stopped (`--drop-finish-reason-rate`).
    Dropped,
}

impl Chunker {
    /// `model_json` is the model name already encoded as a JSON string.
    #[cfg(test)]
    pub fn new(kind: Kind, index: u64, created: u64, model_json: &str) -> Self {
        Self::with_id(kind, index, None, created, model_json)
    }

    /// As [`Chunker::new`], the response's id made of `request_id` (the request's
    /// `x-request-id`, as vLLM makes it) when given, else of `index`.
    pub fn with_id(kind: Kind, index: u64, request_id: Option<&str>, created: u64, model_json: &str) -> Self {
        let id = request_id.map_or_else(|| index.to_string(), |r| r.replace(['"', '\\'], ""));
        if kind == Kind::Responses {
            // The per-request part of the created and completed events.
            let head = format!(
                "{{\"id\":\"resp_{id}\",\"object\":\"response\",\"created_at\":{created},\"model\":{model_json},"
            );
            return Self { kind, index, head: head.into_bytes(), finish: Finish::Length };
        }
        let head = format!(
            "data: {{\"id\":\"{}{id}\",\"object\":\"{}\",\"created\":{created},\"model\":{model_json},",
            kind.id_prefix(),
            kind.chunk_object(),
        );
        Self { kind, index, head: head.into_bytes(), finish: Finish::Length }
    }

    /// Event of one token; `last` marks it with `finish_reason: "length"`.
    pub fn token(&self, buf: &mut BytesMut, tok: Token, last: bool) -> Bytes {
        if self.kind == Kind::Responses {
            self.put_delta_start(buf, tok);
            buf.put_slice(b"\"}\n\n");
            return buf.split().freeze();
        }
        buf.reserve(self.head.len() + 192);
        buf.put_slice(&self.head);
        self.put_choice_start(buf, tok);
        buf.put_slice(match (self.kind, tok.field) {
            (Kind::Completion, _) => b"\",\"logprobs\":null,\"finish_reason\":",
            (Kind::Chat, Field::ToolCall { .. }) => b"\"}}]},\"logprobs\":null,\"finish_reason\":",
            (Kind::Chat | Kind::Responses | Kind::Transcription, _) => b"\"},\"logprobs\":null,\"finish_reason\":",
        });
        buf.put_slice(match (last, tok.field, self.finish) {
            (false, _, _) | (true, _, Finish::Dropped) => b"null",
            (true, Field::ToolCall { .. }, _) => b"\"tool_calls\"",
            (true, _, Finish::Length) => b"\"length\"",
            (true, _, Finish::Stop) => b"\"stop\"",
        });
        buf.put_slice(b"}]}\n\n");
        buf.split().freeze()
    }

    /// Chat's role announcement (sent with the first token, as vLLM does), or the Responses
    /// API's `response.created` (at once): not a token.
    pub fn role(&self, buf: &mut BytesMut) -> Bytes {
        if self.kind == Kind::Responses {
            buf.put_slice(b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":");
            buf.put_slice(&self.head);
            buf.put_slice(b"\"status\":\"in_progress\"}}\n\n");
            return buf.split().freeze();
        }
        buf.reserve(self.head.len() + 128);
        buf.put_slice(&self.head);
        buf.put_slice(
            b"\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        );
        buf.split().freeze()
    }

    /// Event of one token whose data is cut short: not valid JSON.
    pub fn malformed(&self, buf: &mut BytesMut, tok: Token) -> Bytes {
        if self.kind == Kind::Responses {
            self.put_delta_start(buf, tok);
            buf.put_slice(b"\n\n");
            return buf.split().freeze();
        }
        buf.reserve(self.head.len() + 128);
        buf.put_slice(&self.head);
        self.put_choice_start(buf, tok);
        buf.put_slice(b"\"\n\n");
        buf.split().freeze()
    }

    /// Final usage-only chunk (`"choices":[]`).
    /// `reasoning`: how many of the completion tokens were reasoning (its details, when above 0).
    pub fn usage(
        &self,
        buf: &mut BytesMut,
        prompt: u64,
        completion: u64,
        cached: Option<u64>,
        reasoning: u64,
    ) -> Bytes {
        if self.kind == Kind::Responses {
            let total = prompt.saturating_add(completion);
            let mut details = format!(",\"input_tokens_details\":{{\"cached_tokens\":{}}}", cached.unwrap_or(0));
            if reasoning > 0 {
                details.push_str(&format!(",\"output_tokens_details\":{{\"reasoning_tokens\":{reasoning}}}"));
            }
            buf.put_slice(b"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":");
            buf.put_slice(&self.head);
            let tail = format!(
                "\"status\":\"completed\",\"usage\":{{\"input_tokens\":{prompt},\"output_tokens\":{completion},\"total_tokens\":{total}{details}}}}}}}\n\n"
            );
            buf.put_slice(tail.as_bytes());
            return buf.split().freeze();
        }
        buf.reserve(self.head.len() + 160);
        buf.put_slice(&self.head);
        let total = prompt.saturating_add(completion);
        let mut details =
            cached.map_or_else(String::new, |c| format!(",\"prompt_tokens_details\":{{\"cached_tokens\":{c}}}"));
        if reasoning > 0 {
            details.push_str(&format!(",\"completion_tokens_details\":{{\"reasoning_tokens\":{reasoning}}}"));
        }
        let tail = format!(
            "\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{completion},\"total_tokens\":{total}{details}}}}}\n\n"
        );
        buf.put_slice(tail.as_bytes());
        buf.split().freeze()
    }

    /// A Responses delta event up to the end of its `delta`'s text: reasoning tokens as
    /// `response.reasoning_text.delta`, the others as `response.output_text.delta`.
    fn put_delta_start(&self, buf: &mut BytesMut, tok: Token) {
        let kind: &[u8] = if tok.field == Field::Reasoning {
            b"response.reasoning_text.delta"
        } else {
            b"response.output_text.delta"
        };
        buf.reserve(192);
        buf.put_slice(b"event: ");
        buf.put_slice(kind);
        buf.put_slice(b"\ndata: {\"type\":\"");
        buf.put_slice(kind);
        buf.put_slice(b"\",\"output_index\":0,\"content_index\":0,\"delta\":\"");
        buf.put_slice(tok.text.as_bytes());
    }

    /// `"choices":[{"index":0,"text":"TEXT` (or the chat delta equivalent).
    fn put_choice_start(&self, buf: &mut BytesMut, tok: Token) {
        buf.put_slice(b"\"choices\":[{\"index\":0,");
        let field: &[u8] = match (self.kind, tok.field) {
            (Kind::Completion | Kind::Responses, _) => b"\"text\":\"",
            (Kind::Transcription, _) => b"\"delta\":{\"content\":\"",
            (Kind::Chat, Field::Content) => b"\"delta\":{\"content\":\"",
            (Kind::Chat, Field::Reasoning) => b"\"delta\":{\"reasoning\":\"",
            (Kind::Chat, Field::ToolCall { first: true }) => {
                // The call's id names the request: `call_<index>`.
                let id = format!("\"delta\":{{\"tool_calls\":[{{\"index\":0,\"id\":\"call_{}", self.index);
                buf.put_slice(id.as_bytes());
                b"\",\"type\":\"function\",\"function\":{\"name\":\"echo\",\"arguments\":\""
            }
            (Kind::Chat, Field::ToolCall { first: false }) => {
                b"\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\""
            }
        };
        buf.put_slice(field);
        buf.put_slice(tok.text.as_bytes());
    }
}

/// Everything a stream needs besides its schedule.
pub(crate) struct SseParams {
    pub chunker: Chunker,
    /// Output tokens (>= 1).
    pub n: u64,
    /// Field and text of each token.
    pub tokens: TokenPlan,
    pub prompt_tokens: u64,
    /// `--prefix-cache-tokens`: the prompt's cached tokens, reported in the usage.
    pub cached_tokens: Option<u64>,
    pub include_usage: bool,
    /// Added to the usage's completion tokens (`--usage-mismatch-rate`: 1; else 0).
    pub usage_extra: u64,
    /// The one chunk carries no text (`--empty-reply-rate`): no token is counted, and the
    /// usage says 0.
    pub empty: bool,
    /// When the request arrived (time to first token counts from here).
    pub arrived: Instant,
    /// Time zero of the schedule: when the request arrived, or got its slot.
    pub start: Instant,
    pub schedule: Schedule,
    /// The server's timer, which wakes the stream at each deadline.
    pub timer: Timer,
    pub malformed_at: Option<u64>,
    /// Cut the stream before token event number `truncate_at`.
    pub truncate_at: Option<u64>,
    pub metrics: Arc<Metrics>,
    /// Notified after `[DONE]` (close-after-stream on HTTP/1.1).
    pub close_notify: Option<Arc<Notify>>,
    /// The slot, released when the body is dropped.
    #[expect(dead_code, reason = "held for its Drop")]
    pub permit: Option<OwnedSemaphorePermit>,
    /// Holds the running gauges up while the body lives.
    #[expect(dead_code, reason = "held for its Drop")]
    pub running: GaugeGuard,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// The Responses API's `response.created`, at once.
    Role,
    Tokens,
    Usage,
    Done,
    End,
}

/// A streamed completion body.
pub(crate) struct SseBody {
    p: SseParams,
    phase: Phase,
    /// Next token index.
    k: u64,
    /// The deadline of token `k` has been computed.
    armed: bool,
    /// Token `k` must wait for `sleep`.
    waiting: bool,
    sleep: Option<PreciseSleep>,
    /// Truncation: yielded once so hyper flushes what was sent.
    cutting: bool,
    buf: BytesMut,
    /// Chat: the role announcement goes out with the first token, as vLLM sends it (its
    /// first engine output, after the prefill), not with the response head.
    role_pending: bool,
}

impl SseBody {
    pub fn new(params: SseParams) -> Self {
        Self {
            phase: if params.chunker.kind == Kind::Responses { Phase::Role } else { Phase::Tokens },
            role_pending: params.chunker.kind == Kind::Chat,
            p: params,
            k: 0,
            armed: false,
            waiting: false,
            sleep: None,
            cutting: false,
            buf: BytesMut::new(),
        }
    }

    fn arm(&mut self) {
        self.armed = true;
        let offset = self.p.schedule.next_offset_ms();
        if offset > 0.0 {
            let at = deadline(self.p.start, offset);
            match &mut self.sleep {
                Some(sleep) => sleep.reset(at),
                None => self.sleep = Some(PreciseSleep::new(self.p.timer.clone(), at)),
            }
            self.waiting = true;
        }
    }
}

/// Error that aborts a truncated stream (hyper then closes the connection).
#[derive(Debug)]
pub(crate) struct Truncated;

impl fmt::Display for Truncated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("stream truncated by fault injection")
    }
}

impl std::error::Error for Truncated {}

impl Body for SseBody {
    type Data = Bytes;
    type Error = Truncated;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Truncated>>> {
        let this = self.get_mut();
        loop {
            match this.phase {
                Phase::Role => {
                    this.phase = Phase::Tokens;
                    return Poll::Ready(Some(Ok(Frame::data(this.p.chunker.role(&mut this.buf)))));
                }
                Phase::Tokens => {
                    if this.k >= this.p.n {
                        this.phase = Phase::Usage;
                        continue;
                    }
                    if !this.armed {
                        this.arm();
                    }
                    if this.waiting {
                        if let Some(sleep) = &mut this.sleep {
                            ready!(Pin::new(sleep).poll(cx));
                        }
                        this.waiting = false;
                    }
                    let k = this.k;
                    if this.p.truncate_at == Some(k) {
                        if !this.cutting {
                            // Let hyper flush the events already yielded.
                            this.cutting = true;
                            cx.waker().wake_by_ref();
                            return Poll::Pending;
                        }
                        this.phase = Phase::End;
                        return Poll::Ready(Some(Err(Truncated)));
                    }
                    let last = k + 1 == this.p.n;
                    let tok = this.p.tokens.token(k);
                    let mut data = if this.p.malformed_at == Some(k) {
                        this.p.chunker.malformed(&mut this.buf, tok)
                    } else {
                        this.p.chunker.token(&mut this.buf, tok, last)
                    };
                    if std::mem::take(&mut this.role_pending) {
                        let role = this.p.chunker.role(&mut this.buf);
                        let mut both = BytesMut::with_capacity(role.len() + data.len());
                        both.extend_from_slice(&role);
                        both.extend_from_slice(&data);
                        data = both.freeze();
                    }
                    this.k += 1;
                    this.armed = false;
                    if !this.p.empty {
                        if k == 0 {
                            this.p.metrics.first_token(this.p.arrived);
                        }
                        this.p.metrics.count_tokens(1);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Phase::Usage => {
                    this.phase = Phase::Done;
                    if this.p.include_usage {
                        let data = this.p.chunker.usage(
                            &mut this.buf,
                            this.p.prompt_tokens,
                            if this.p.empty { 0 } else { this.p.n + this.p.usage_extra },
                            this.p.cached_tokens,
                            this.p.tokens.reasoning_of(this.p.n),
                        );
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
                Phase::Done => {
                    this.phase = Phase::End;
                    this.p.metrics.count_success();
                    if let Some(notify) = &this.p.close_notify {
                        notify.notify_one();
                    }
                    // The Responses API ends with response.completed, no [DONE].
                    if this.p.chunker.kind == Kind::Responses {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(DONE)))));
                }
                Phase::End => return Poll::Ready(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.phase == Phase::End
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EchoConfig;
    use http_body_util::BodyExt;
    use serde_json::Value;

    fn tok(k: u64) -> Token {
        Token { field: Field::Content, text: crate::tokens::word(k) }
    }

    fn json_of(event: &[u8]) -> Value {
        let text = std::str::from_utf8(event).unwrap();
        let data = text.strip_prefix("data: ").and_then(|t| t.strip_suffix("\n\n")).unwrap();
        serde_json::from_str(data).unwrap()
    }

    #[test]
    fn completion_chunks_are_valid_json() {
        let c = Chunker::new(Kind::Completion, 7, 123, "\"m\\\"x\"");
        let mut buf = BytesMut::new();
        let v = json_of(&c.token(&mut buf, tok(0), false));
        assert_eq!(v["id"], "cmpl-7");
        assert_eq!(v["object"], "text_completion");
        assert_eq!(v["created"], 123);
        assert_eq!(v["model"], "m\"x");
        assert_eq!(v["choices"][0]["index"], 0);
        assert_eq!(v["choices"][0]["text"], " the");
        assert_eq!(v["choices"][0]["logprobs"], Value::Null);
        assert_eq!(v["choices"][0]["finish_reason"], Value::Null);
        let v = json_of(&c.token(&mut buf, tok(9), true));
        assert_eq!(v["choices"][0]["text"], " quick");
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        let cached = json_of(&c.usage(&mut buf, 3, 4, Some(2), 0));
        assert_eq!(cached["usage"]["prompt_tokens_details"], serde_json::json!({"cached_tokens": 2}));
        let v = json_of(&c.usage(&mut buf, 3, 4, None, 0));
        let reasoned = json_of(&c.usage(&mut buf, 3, 4, None, 2));
        assert_eq!(reasoned["usage"]["completion_tokens_details"]["reasoning_tokens"], 2);
        assert_eq!(v["choices"], serde_json::json!([]));
        assert_eq!(v["usage"], serde_json::json!({"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}));
        let v = json_of(&c.token(&mut buf, Token { field: Field::Content, text: "" }, false));
        assert_eq!(v["choices"][0]["text"], "");
        let bad = c.malformed(&mut buf, tok(1));
        let text = std::str::from_utf8(&bad).unwrap();
        let data = text.strip_prefix("data: ").unwrap().trim_end();
        assert!(serde_json::from_str::<Value>(data).is_err());
    }

    #[test]
    fn chat_chunks_are_valid_json() {
        let c = Chunker::new(Kind::Chat, 1, 5, "\"m\"");
        let mut buf = BytesMut::new();
        let v = json_of(&c.role(&mut buf));
        assert_eq!(v["id"], "chatcmpl-1");
        assert_eq!(v["object"], "chat.completion.chunk");
        assert_eq!(v["choices"][0]["delta"], serde_json::json!({"role": "assistant", "content": ""}));
        let v = json_of(&c.token(&mut buf, tok(0), false));
        assert_eq!(v["choices"][0]["delta"], serde_json::json!({"content": " the"}));
        assert_eq!(v["choices"][0]["finish_reason"], Value::Null);
        let v = json_of(&c.token(&mut buf, Token { field: Field::Reasoning, text: "中" }, false));
        assert_eq!(v["choices"][0]["delta"], serde_json::json!({"reasoning": "中"}));
        let v = json_of(&c.token(&mut buf, Token { field: Field::ToolCall { first: true }, text: "" }, false));
        let call = &v["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(call["function"], serde_json::json!({"name": "echo", "arguments": ""}));
        assert_eq!(call["id"], "call_1", "the call names the request");
        let v = json_of(&c.token(&mut buf, Token { field: Field::ToolCall { first: false }, text: " x" }, true));
        assert_eq!(v["choices"][0]["delta"]["tool_calls"][0]["function"], serde_json::json!({"arguments": " x"}));
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "a reply that is a tool call ends so");
    }

    fn body(n: u64, truncate_at: Option<u64>, include_usage: bool) -> (SseBody, Arc<Metrics>) {
        body_of(Chunker::new(Kind::Completion, 0, 0, "\"m\""), n, truncate_at, include_usage, 0)
    }

    fn body_of(
        chunker: Chunker,
        n: u64,
        truncate_at: Option<u64>,
        include_usage: bool,
        usage_extra: u64,
    ) -> (SseBody, Arc<Metrics>) {
        let metrics = Arc::new(Metrics::new());
        let config = EchoConfig::default();
        let chat = chunker.kind == Kind::Chat;
        let body = SseBody::new(SseParams {
            chunker,
            tokens: TokenPlan::new(crate::tokens::Shape::default(), chat, 0, 0),
            n,
            prompt_tokens: 2,
            cached_tokens: None,
            include_usage,
            usage_extra,
            empty: false,
            arrived: Instant::now(),
            start: Instant::now(),
            schedule: Schedule::new(&config, 0, 0.0),
            timer: Timer::new().unwrap(),
            malformed_at: None,
            truncate_at,
            metrics: metrics.clone(),
            close_notify: None,
            permit: None,
            running: metrics.running(),
        });
        (body, metrics)
    }

    #[tokio::test]
    async fn stream_yields_tokens_usage_done() {
        let (b, metrics) = body(5, None, true);
        let bytes = b.collect().await.unwrap().to_bytes();
        let text = std::str::from_utf8(&bytes).unwrap();
        let events: Vec<&str> = text.split_terminator("\n\n").collect();
        assert_eq!(events.len(), 7);
        assert_eq!(events[6], "data: [DONE]");
        assert!(events[5].contains("\"total_tokens\":7"));
        assert_eq!(metrics.tokens_sent(), 5);
        // The running gauge dropped with the body.
        assert_eq!(metrics.running_now(), 0);
    }

    #[tokio::test]
    async fn chat_sends_its_role_with_the_first_token_and_the_faults_change_the_end() {
        let (mut b, _) = body_of(Chunker::new(Kind::Chat, 0, 0, "\"m\""), 3, None, true, 0);
        let first = b.frame().await.expect("a frame").expect("data").into_data().expect("bytes");
        let text = std::str::from_utf8(&first).unwrap();
        let events: Vec<&str> = text.split_terminator("\n\n").collect();
        assert_eq!(events.len(), 2, "the role and the first token in one write: {text}");
        assert!(events[0].contains("\"role\":\"assistant\"") && !events[1].contains("\"role\""), "{text}");

        let mut stop = Chunker::new(Kind::Completion, 0, 0, "\"m\"");
        stop.finish = Finish::Stop;
        let (b, _) = body_of(stop, 2, None, true, 1);
        let all = b.collect().await.unwrap().to_bytes();
        let text = std::str::from_utf8(&all).unwrap();
        assert!(text.contains("\"finish_reason\":\"stop\"") && text.contains("\"completion_tokens\":3"), "{text}");
        let mut dropped = Chunker::new(Kind::Completion, 0, 0, "\"m\"");
        dropped.finish = Finish::Dropped;
        let (b, _) = body_of(dropped, 2, None, true, 0);
        let all = b.collect().await.unwrap().to_bytes();
        let text = std::str::from_utf8(&all).unwrap();
        assert!(!text.contains("\"finish_reason\":\""), "no finish_reason anywhere: {text}");
    }

    #[tokio::test]
    async fn truncated_stream_errors_without_done() {
        let (mut b, _) = body(6, Some(3), false);
        let mut data = 0;
        loop {
            match b.frame().await {
                Some(Ok(_)) => data += 1,
                Some(Err(e)) => {
                    assert!(e.to_string().contains("truncated"));
                    break;
                }
                None => panic!("stream ended cleanly"),
            }
        }
        assert_eq!(data, 3);
    }
}
