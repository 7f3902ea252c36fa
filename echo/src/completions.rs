//! `POST /v1/completions` and `POST /v1/chat/completions`: request parsing,
//! prompt-token counting, faults, slots, and the streamed or non-streamed
//! response on the configured token schedule.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, Version, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Body;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::body::{BoxError, ResBody, json_error};
use crate::config::MAX_OUTPUT_TOKENS;
use crate::counter::Counter;
use crate::faults::{self, FaultPlan};
use crate::kind::Kind;
use crate::metrics::Injected;
use crate::parsed::Parsed;
use crate::schedule::{Schedule, deadline};
use crate::sse::{Chunker, Finish, SseBody, SseParams};
use crate::state::{ConnCtx, State};
use crate::timer::PreciseSleep;
use crate::tokens::{self, TokenPlan};

/// Largest request body accepted by the completion routes.
const MAX_REQUEST_BYTES: usize = 16 << 20;

/// Output tokens when neither the flag nor the request sets them.
const DEFAULT_OUTPUT_TOKENS: u64 = 16;

/// The fields of a completion request the server looks at; others are ignored.
#[derive(Debug, Deserialize)]
struct RawRequest {
    model: Option<String>,
    prompt: Option<Value>,
    messages: Option<Vec<RawMessage>>,
    /// Responses: a string or a list of input items (messages).
    input: Option<Value>,
    max_output_tokens: Option<u64>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
}

#[derive(Debug, Deserialize)]
struct RawMessage {
    content: Option<Value>,
    #[serde(default)]
    role: Option<String>,
    /// A `tool` message: the call it answers.
    #[serde(default)]
    tool_call_id: Option<String>,
    /// An `assistant` message: the calls it made.
    #[serde(default)]
    tool_calls: Option<Vec<RawCall>>,
}

#[derive(Debug, Deserialize)]
struct RawCall {
    #[serde(default)]
    id: Option<String>,
}

/// A chat request's `tool` messages, and how many of them name no call of the latest
/// assistant message before them.
fn tool_results(messages: &[RawMessage]) -> (u64, u64) {
    let (mut n, mut unmatched) = (0, 0);
    let mut calls: &[RawCall] = &[];
    for m in messages {
        match m.role.as_deref() {
            Some("assistant") => calls = m.tool_calls.as_deref().unwrap_or_default(),
            Some("tool") => {
                n += 1;
                let named = m.tool_call_id.as_deref();
                unmatched += u64::from(named.is_none_or(|id| !calls.iter().any(|c| c.id.as_deref() == Some(id))));
            }
            _ => {}
        }
    }
    (n, unmatched)
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    include_usage: Option<bool>,
}

/// Parse a request body (prompt tokens counted as words); for tests.
#[cfg(test)]
fn parse(kind: Kind, body: &[u8]) -> Result<Parsed, String> {
    parse_with(kind, body, &Counter::Words)
}

/// Parse a request body; the error is the message of a 400 answer.
fn parse_with(kind: Kind, body: &[u8], counter: &Counter) -> Result<Parsed, String> {
    let raw: RawRequest = serde_json::from_slice(body).map_err(|e| format!("invalid JSON body: {e}"))?;
    let prompt_tokens = match kind {
        Kind::Completion => match &raw.prompt {
            Some(prompt) => count_prompt(prompt, counter)?,
            None => return Err("'prompt' is required".to_owned()),
        },
        Kind::Chat => match &raw.messages {
            Some(messages) => messages.iter().try_fold(0u64, |sum, m| {
                Ok::<_, String>(sum.saturating_add(count_content(m.content.as_ref(), counter)?))
            })?,
            None => return Err("'messages' is required".to_owned()),
        },
        Kind::Transcription => return Err("a transcription is a multipart form".to_owned()),
        Kind::Responses => match &raw.input {
            Some(Value::String(s)) => counter.count(s),
            Some(Value::Array(items)) => items.iter().try_fold(0u64, |sum, m| {
                Ok::<_, String>(sum.saturating_add(count_content(m.get("content"), counter)?))
            })?,
            _ => return Err("'input' must be a string or a list of input items".to_owned()),
        },
    };
    let max_tokens = match kind {
        Kind::Chat => raw.max_completion_tokens.or(raw.max_tokens),
        Kind::Completion => raw.max_tokens,
        Kind::Responses => raw.max_output_tokens,
        Kind::Transcription => None,
    };
    let stream = raw.stream.unwrap_or(false);
    // A Responses stream always ends with its usage (response.completed).
    let include_usage =
        stream && (kind == Kind::Responses || raw.stream_options.and_then(|o| o.include_usage).unwrap_or(false));
    let messages = raw.messages.as_deref().unwrap_or_default();
    let images = messages.iter().map(|m| count_images(m.content.as_ref())).sum();
    let (tool_results, tool_results_unmatched) = tool_results(messages);
    Ok(Parsed {
        model: raw.model,
        prompt_tokens,
        max_tokens,
        stream,
        include_usage,
        images,
        tool_results,
        tool_results_unmatched,
    })
}

/// Prompt tokens of a completions `prompt`: tokens (words) of a string; for an
/// array, of each string element, 1 per integer (a token id) and the length
/// of each nested integer array.
fn count_prompt(prompt: &Value, counter: &Counter) -> Result<u64, String> {
    const BAD: &str = "'prompt' must be a string, an array of strings or an array of token ids";
    match prompt {
        Value::String(s) => Ok(counter.count(s)),
        Value::Array(items) => items.iter().try_fold(0u64, |sum, item| {
            let n = match item {
                Value::String(s) => counter.count(s),
                Value::Number(_) => 1,
                Value::Array(ids) if ids.iter().all(Value::is_number) => ids.len() as u64,
                _ => return Err(BAD.to_owned()),
            };
            Ok(sum.saturating_add(n))
        }),
        _ => Err(BAD.to_owned()),
    }
}

/// Prompt tokens of a chat message `content`: tokens (words) of a string, or of
/// the `text` of each part of an array; null or absent counts 0.
fn count_content(content: Option<&Value>, counter: &Counter) -> Result<u64, String> {
    match content {
        None | Some(Value::Null) => Ok(0),
        Some(Value::String(s)) => Ok(counter.count(s)),
        Some(Value::Array(parts)) => Ok(parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .map(|t| counter.count(t))
            .fold(0u64, u64::saturating_add)),
        Some(_) => Err("message 'content' must be a string, an array of parts or null".to_owned()),
    }
}

/// A prompt's text for the prefix cache: the completions `prompt` (its strings), or every
/// chat message's text in order, joined by spaces (the cache reads its words).
fn prompt_text(kind: Kind, body: &[u8]) -> String {
    let Ok(v) = serde_json::from_slice::<Value>(body) else { return String::new() };
    let mut out = String::new();
    let mut push = |t: &str| {
        out.push_str(t);
        out.push(' ');
    };
    match kind {
        Kind::Responses => {
            if let Some(s) = v.get("input").and_then(Value::as_str) {
                push(s);
            }
        }
        Kind::Transcription => {}
        Kind::Completion => match v.get("prompt") {
            Some(Value::String(s)) => push(s),
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).for_each(push),
            _ => {}
        },
        Kind::Chat => {
            for m in v.get("messages").and_then(Value::as_array).into_iter().flatten() {
                match m.get("content") {
                    Some(Value::String(s)) => push(s),
                    Some(Value::Array(parts)) => {
                        parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).for_each(&mut push)
                    }
                    _ => {}
                }
            }
        }
    }
    out
}

/// Inline images of a chat message `content`: `image_url` parts with a data URL.
fn count_images(content: Option<&Value>) -> u64 {
    let Some(Value::Array(parts)) = content else { return 0 };
    parts
        .iter()
        .filter(|p| p.get("type").and_then(Value::as_str) == Some("image_url"))
        .filter(|p| p.pointer("/image_url/url").and_then(Value::as_str).is_some_and(|u| u.starts_with("data:image/")))
        .count() as u64
}

/// Error returned to hyper so that it drops the connection without a response.
#[derive(Debug)]
struct InjectedReset;

impl std::fmt::Display for InjectedReset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection reset by fault injection")
    }
}

impl std::error::Error for InjectedReset {}

/// Serve one completion request. Its schedule starts when its bytes arrived
/// (or when it got a slot, if it had to wait for one). Long: the request's life in
/// order (refusals and faults, the body, the prefix cache, the slot, the stream or the
/// whole answer), each step a few lines.
pub(crate) async fn handle<B>(
    req: Request<B>,
    state: Arc<State>,
    conn: ConnCtx,
    kind: Kind,
) -> Result<Response<ResBody>, BoxError>
where
    B: Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let index = state.completions.fetch_add(1, Relaxed);
    if let Some(ip) = conn.peer.filter(|ip| state.config.deny_peer.contains(ip)) {
        return Ok(json_error(StatusCode::FORBIDDEN, &format!("requests from {ip} are not allowed")));
    }
    if index < state.config.unready_requests {
        return Ok(json_error(StatusCode::SERVICE_UNAVAILABLE, "not ready: the model is still loading"));
    }
    let faults = FaultPlan::for_request(&state.config, index);
    if faults.reset {
        return Err(Box::new(InjectedReset));
    }
    // HTTP/1.1 closes, HTTP/2 sends GOAWAY (--close-after-stream); HTTP/3 closes its own way.
    let hyper_served = req.version() <= Version::HTTP_2;
    let content_type = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    // vLLM names its response after the request's x-request-id; a misdirected reply
    // (--misdirect-rate) names another request.
    let mut request_id = req.headers().get("x-request-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
    if let Some(id) = request_id.as_mut().filter(|_| faults.misdirect) {
        id.push_str("-misdirected");
        state.metrics.count_anomaly(Injected::Misdirected);
    }
    let body = match Limited::new(req.into_body(), MAX_REQUEST_BYTES).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<LengthLimitError>() => {
            return Ok(json_error(StatusCode::PAYLOAD_TOO_LARGE, "request body too large"));
        }
        // The client went away or sent a broken body: nobody to answer.
        Err(e) => return Err(e),
    };
    // When the request's last bytes arrived. On HTTP/1.1 the connection's latest bytes
    // are this request's; on HTTP/2 they may be a later stream's, which only makes the
    // start later, never earlier.
    let arrived = conn.arrival.latest();
    let parsed = match kind {
        Kind::Transcription => crate::audio::parse(&content_type, body.clone(), &state.counter).await,
        _ => parse_with(kind, &body, &state.counter),
    };
    let parsed = match parsed {
        Ok(p) => p,
        Err(msg) => return Ok(json_error(StatusCode::BAD_REQUEST, &msg)),
    };
    let lora = parsed.model.as_deref().filter(|m| state.config.lora_modules.iter().any(|l| l == m));
    if let Some(m) = parsed
        .model
        .as_deref()
        .filter(|m| state.config.reject_unknown_model && *m != state.config.model && lora.is_none())
    {
        return Ok(json_error(StatusCode::NOT_FOUND, &format!("The model `{m}` does not exist.")));
    }
    let n = match state.config.output_tokens.or(parsed.max_tokens) {
        None => DEFAULT_OUTPUT_TOKENS,
        Some(n) if (1..=MAX_OUTPUT_TOKENS).contains(&n) => n,
        Some(n) => {
            let msg = format!("max_tokens must be within 1..={MAX_OUTPUT_TOKENS}, got {n}");
            return Ok(json_error(StatusCode::BAD_REQUEST, &msg));
        }
    };
    if faults.error_500 {
        return Ok(json_error(StatusCode::INTERNAL_SERVER_ERROR, "injected fault: internal server error"));
    }
    let metrics = &state.metrics;
    metrics.count_prompt_tokens(parsed.prompt_tokens);
    // The prefix cache (D33): cached tokens in the usage, the uncached ones' prefill
    // before the first token.
    let (cached_tokens, prefill_ms) = match &state.prefix_cache {
        None => (None, 0.0),
        Some(cache) => {
            let text = prompt_text(kind, &body);
            let found = cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).admit(text.split_whitespace());
            let uncached = found.prompt - found.cached;
            metrics.count_cache(found.cached, uncached);
            (Some(found.cached), uncached as f64 * state.config.prefill_us_per_token / 1e3)
        }
    };
    metrics.count_images(parsed.images);
    metrics.count_tool_results(parsed.tool_results, parsed.tool_results_unmatched);
    if let Some(name) = lora {
        metrics.count_lora(name);
    }

    // The schedule starts at arrival, or when a slot freed up for a request that had
    // to wait for one.
    let (permit, start) = match &state.slots {
        None => (None, arrived),
        Some(slots) => match slots.clone().try_acquire_owned() {
            Ok(p) => (Some(p), arrived),
            Err(_) => {
                let _waiting = metrics.waiting();
                // The semaphore is never closed; on the impossible error, run unslotted.
                (slots.clone().acquire_owned().await.ok(), Instant::now())
            }
        },
    };
    let running = metrics.running();
    let mut schedule = Schedule::new(&state.config, index, faults.stall_ms + prefill_ms);
    let model = parsed.model.as_deref().unwrap_or(&state.config.model);
    let model_json = serde_json::to_string(model).unwrap_or_else(|_| "\"\"".to_owned());
    let created = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());

    if parsed.stream {
        let mut shape = tokens::Shape::of(&state.config);
        shape.tool_call = kind == Kind::Chat && faults::tool_call(&state.config, index);
        if shape.tool_call {
            metrics.count_tool_call_reply();
        }
        // Anomalies (D70), on completions and chat streams: counted here as sent.
        let anomalies = matches!(kind, Kind::Completion | Kind::Chat);
        let mut chunker = Chunker::with_id(kind, index, request_id.as_deref(), created, &model_json);
        // An accuracy question (D71): its answer, right or (at the rate) wrong.
        let answer = (anomalies && !state.answers.is_empty())
            .then(|| state.answers.get(prompt_text(kind, &body).trim()).copied())
            .flatten()
            .map(|right| {
                let wrong = faults::wrong_answer(&state.config, index);
                metrics.count_anomaly(if wrong { Injected::WrongAnswer } else { Injected::RightAnswer });
                chunker.finish = Finish::Stop;
                if wrong { crate::answers::WRONG } else { right }
            });
        // An empty reply: one finishing chunk with no text (an answer of no words).
        let empty = anomalies && faults.empty && answer.is_none();
        if empty {
            chunker.finish = Finish::Stop;
            metrics.count_anomaly(Injected::Empty);
        }
        let n = if empty {
            1
        } else if let Some(words) = answer {
            words.len() as u64
        } else if anomalies && faults.early_eos {
            chunker.finish = Finish::Stop;
            metrics.count_anomaly(Injected::EarlyEos);
            faults::early_eos_after(n)
        } else {
            n
        };
        if anomalies && faults.drop_finish {
            chunker.finish = Finish::Dropped;
            metrics.count_anomaly(Injected::DroppedFinish);
        }
        let usage_extra = u64::from(anomalies && faults.usage_mismatch && parsed.include_usage);
        if usage_extra > 0 {
            metrics.count_anomaly(Injected::UsageMismatch);
        }
        let body = SseBody::new(SseParams {
            chunker,
            tokens: {
                let plan =
                    TokenPlan::new(shape, matches!(kind, Kind::Chat | Kind::Responses), state.config.seed, index);
                match answer {
                    Some(words) => plan.answering(words),
                    None if empty => plan.answering(&[]),
                    None => plan,
                }
            },
            empty,
            n,
            usage_extra,
            prompt_tokens: parsed.prompt_tokens,
            cached_tokens,
            include_usage: parsed.include_usage,
            arrived,
            start,
            schedule,
            timer: state.timer.clone(),
            malformed_at: faults.malformed.then(|| faults::malformed_index(n)),
            truncate_at: faults.truncate.then(|| faults::truncate_after(n)),
            metrics: metrics.clone(),
            close_notify: if hyper_served { conn.close_notify } else { None },
            permit,
            running,
        });
        if state.config.head_delay_ms > 0.0 {
            PreciseSleep::new(state.timer.clone(), deadline(arrived, state.config.head_delay_ms)).await;
        }
        let mut resp = Response::new(ResBody::Sse(Box::new(body)));
        let headers = resp.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        // Names the echo in a client's report of a cut stream (a proxy adds its own).
        headers.insert(header::SERVER, HeaderValue::from_static("surge-echo"));
        return Ok(resp);
    }

    let offset = schedule.last_offset_ms(n);
    if offset > 0.0 {
        PreciseSleep::new(state.timer.clone(), deadline(start, offset)).await;
    }
    let body = full_response(kind, index, created, model, n, parsed.prompt_tokens, cached_tokens);
    // Written as soon as it is returned: the first token's write, and the last.
    metrics.first_token(arrived);
    metrics.count_tokens(n);
    metrics.count_success();
    drop((running, permit));
    let mut resp = Response::new(ResBody::full(body));
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(resp)
}

/// The JSON of a non-streamed response of `n` tokens.
fn full_response(kind: Kind, index: u64, created: u64, model: &str, n: u64, prompt: u64, cached: Option<u64>) -> Bytes {
    let text: String = (0..n).map(tokens::word).collect();
    let mut usage = json!({
        "prompt_tokens": prompt,
        "completion_tokens": n,
        "total_tokens": prompt.saturating_add(n),
    });
    if let Some(c) = cached {
        usage["prompt_tokens_details"] = json!({ "cached_tokens": c });
    }
    let id = format!("{}{index}", kind.id_prefix());
    let value = match kind {
        Kind::Completion => json!({
            "id": id,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": "length"}],
            "usage": usage,
        }),
        Kind::Transcription => json!({"text": text, "usage": usage}),
        Kind::Responses => json!({
            "id": id,
            "object": "response",
            "created_at": created,
            "model": model,
            "status": "completed",
            "output": [{"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": text}]}],
            "usage": {"input_tokens": prompt, "output_tokens": n, "total_tokens": prompt.saturating_add(n)},
        }),
        Kind::Chat => json!({
            "id": id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            }],
            "usage": usage,
        }),
    };
    Bytes::from(serde_json::to_vec(&value).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_completion_request() {
        let body = br#"{"model":"m","prompt":"one two  three\nfour","max_tokens":5,
            "stream":true,"stream_options":{"include_usage":true},"ignore_eos":true,"temperature":0}"#;
        let p = parse(Kind::Completion, body).unwrap();
        assert_eq!(
            p,
            Parsed {
                model: Some("m".to_owned()),
                prompt_tokens: 4,
                max_tokens: Some(5),
                stream: true,
                include_usage: true,
                images: 0,
                tool_results: 0,
                tool_results_unmatched: 0,
            }
        );
    }

    #[test]
    fn tool_messages_are_matched_to_the_calls_before_them() {
        let body = br#"{"messages":[{"role":"user","content":"go"},
            {"role":"assistant","content":null,"tool_calls":[{"id":"call_7","type":"function","function":{"name":"echo","arguments":" a"}},{"id":"call_8"}]},
            {"role":"tool","tool_call_id":"call_7","content":"r"},{"role":"tool","tool_call_id":"call_8","content":"s"},
            {"role":"tool","tool_call_id":"call_9","content":"t"},{"role":"tool","content":"u"}]}"#;
        let p = parse(Kind::Chat, body).unwrap();
        assert_eq!((p.tool_results, p.tool_results_unmatched), (4, 2), "call_9 and a missing id name no call");
        assert_eq!(p.prompt_tokens, 5, "tool results are prompt tokens");
    }

    #[test]
    fn usage_only_when_streaming_and_asked() {
        let p = parse(Kind::Completion, br#"{"prompt":"a","stream_options":{"include_usage":true}}"#).unwrap();
        assert!(!p.stream && !p.include_usage);
        let p = parse(Kind::Completion, br#"{"prompt":"a","stream":true}"#).unwrap();
        assert!(p.stream && !p.include_usage);
        let p = parse(Kind::Completion, br#"{"prompt":"a","stream":null,"max_tokens":null}"#).unwrap();
        assert!(!p.stream);
        assert_eq!(p.max_tokens, None);
    }

    #[test]
    fn prompt_forms() {
        let count = |body: &[u8]| parse(Kind::Completion, body).map(|p| p.prompt_tokens);
        assert_eq!(count(br#"{"prompt":""}"#), Ok(0));
        assert_eq!(count(br#"{"prompt":["a b","c"]}"#), Ok(3));
        assert_eq!(count(br#"{"prompt":[1,2,3]}"#), Ok(3));
        assert_eq!(count(br#"{"prompt":[[1,2],[3]]}"#), Ok(3));
        assert!(count(br#"{"prompt":{"x":1}}"#).is_err());
        assert!(count(br#"{"prompt":[{"x":1}]}"#).is_err());
        assert!(count(br#"{"prompt":[["a"]]}"#).is_err());
        assert!(count(br#"{"max_tokens":3}"#).is_err());
    }

    #[test]
    fn chat_request() {
        let body = br#"{"model":"m","messages":[{"role":"system","content":"be brief"},
            {"role":"user","content":[{"type":"text","text":"hi there you"},{"type":"image_url"},
                {"type":"image_url","image_url":{"url":"data:image/jpeg;base64,AAAA"}}]},
            {"role":"assistant","content":null}],"max_tokens":3,"max_completion_tokens":9}"#;
        let p = parse(Kind::Chat, body).unwrap();
        assert_eq!(p.prompt_tokens, 5);
        assert_eq!(p.images, 1, "only the part with a data URL");
        assert_eq!(p.max_tokens, Some(9));
        let p = parse(Kind::Chat, br#"{"messages":[],"max_tokens":3}"#).unwrap();
        assert_eq!(p.max_tokens, Some(3));
        assert!(parse(Kind::Chat, br#"{"prompt":"x"}"#).is_err());
        assert!(parse(Kind::Chat, br#"{"messages":[{"content":5}]}"#).is_err());
    }

    #[test]
    fn malformed_inputs_are_errors_not_panics() {
        for body in [
            &b""[..],
            b"{",
            b"null",
            b"[]",
            b"\"x\"",
            b"{\"prompt\":\"a\",\"max_tokens\":-1}",
            b"{\"prompt\":\"a\",\"max_tokens\":1.5}",
            b"{\"prompt\":\"a\",\"stream\":\"yes\"}",
            b"{\"prompt\":\"a\",\"model\":7}",
            b"\xff\xfe",
        ] {
            assert!(parse(Kind::Completion, body).is_err());
            assert!(parse(Kind::Chat, body).is_err());
        }
        let deep = "[".repeat(100_000);
        assert!(parse(Kind::Completion, deep.as_bytes()).is_err());
    }

    #[test]
    fn full_responses() {
        let v: Value = serde_json::from_slice(&full_response(Kind::Completion, 3, 9, "m", 3, 2, None)).unwrap();
        assert_eq!(v["id"], "cmpl-3");
        assert_eq!(v["choices"][0]["text"], " the quick brown");
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        assert_eq!(v["usage"]["total_tokens"], 5);
        let v: Value = serde_json::from_slice(&full_response(Kind::Chat, 4, 9, "m", 2, 0, Some(0))).unwrap();
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["choices"][0]["message"]["content"], " the quick");
        assert_eq!(v["usage"]["completion_tokens"], 2);
    }
}
