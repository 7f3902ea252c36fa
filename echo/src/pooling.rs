//! The pooling routes, as vLLM answers them: `/v1/embeddings` (`input` or chat
//! `messages`; Infinity's `/embeddings` too), `/pooling` and `/rerank`. Each request is
//! answered whole `--ttft-ms` after it arrived, with deterministic vectors of
//! `--embedding-dim` floats (a function of the input's text alone), rerank scores, and a
//! `usage` whose `prompt_tokens` counts every input (words, or `--tokenizer`'s tokens;
//! one per token id).

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Body;
use serde_json::{Value, json};

use crate::body::{BoxError, ResBody, json_error, with_type};
use crate::counter::Counter;
use crate::schedule::deadline;
use crate::state::{ConnCtx, State};
use crate::timer::PreciseSleep;

/// Largest request body accepted.
const MAX_REQUEST_BYTES: usize = 16 << 20;

/// Which answer a route gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Embeddings,
    Pooling,
    Rerank,
}

/// One input's text and tokens.
fn input(v: &Value, counter: &Counter) -> Result<(String, u64), String> {
    match v {
        Value::String(s) => Ok((s.clone(), counter.count(s))),
        Value::Array(ids) if ids.iter().all(Value::is_number) => Ok((v.to_string(), ids.len() as u64)),
        _ => Err("an input must be a string or an array of token ids".into()),
    }
}

/// The inputs of an embeddings or pooling request: `input` (a string, ids, or a list of
/// either) or chat `messages` (their text parts, one input).
fn inputs(req: &Value, counter: &Counter) -> Result<Vec<(String, u64)>, String> {
    if let Some(messages) = req.get("messages").and_then(Value::as_array) {
        let mut text = String::new();
        for m in messages {
            match m.get("content") {
                Some(Value::String(s)) => text.push_str(s),
                Some(Value::Array(parts)) => {
                    parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).for_each(|t| text.push_str(t))
                }
                _ => {}
            }
        }
        let n = counter.count(&text);
        return Ok(vec![(text, n)]);
    }
    match req.get("input") {
        Some(Value::Array(items)) if items.first().is_some_and(|f| !f.is_number()) => {
            items.iter().map(|i| input(i, counter)).collect()
        }
        Some(v) => Ok(vec![input(v, counter)?]),
        None => Err("'input' or 'messages' is required".into()),
    }
}

/// A vector of `dim` floats in [-1, 1] drawn from `text` alone (FNV-1a, then a linear
/// congruential sequence): the same text always gets the same vector.
fn vector(text: &str, dim: usize) -> Vec<f32> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (0..dim)
        .map(|_| {
            h = h.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            ((h >> 40) as f32 / (1u64 << 23) as f32) - 1.0
        })
        .collect()
}

/// A relevance score in [0, 1] for a query and a document.
fn score(query: &str, doc: &str) -> f64 {
    let v = vector(&format!("{query}\u{0}{doc}"), 1)[0];
    f64::from(v.abs())
}

fn answer(route: Route, req: &Value, state: &State, index: u64, model: &str) -> Result<(Value, u64), String> {
    let counter = &state.counter;
    let dim = state.config.embedding_dim;
    if route == Route::Rerank {
        let query = match req.get("query") {
            Some(q) => input(q, counter)?,
            None => return Err("'query' is required".into()),
        };
        let docs = match req.get("documents") {
            Some(Value::Array(d)) => d.iter().map(|x| input(x, counter)).collect::<Result<Vec<_>, _>>()?,
            _ => return Err("'documents' must be a list".into()),
        };
        // Each pair is one sequence: the query's tokens count once per document.
        let tokens = docs.iter().map(|(_, n)| query.1 + n).sum::<u64>();
        let mut results: Vec<Value> = docs
            .iter()
            .enumerate()
            .map(|(i, (text, _))| json!({"index": i, "document": {"text": text}, "relevance_score": score(&query.0, text)}))
            .collect();
        results.sort_by(|a, b| {
            let s = |v: &Value| v["relevance_score"].as_f64().unwrap_or(0.0);
            s(b).total_cmp(&s(a))
        });
        let usage = json!({"prompt_tokens": tokens, "total_tokens": tokens});
        return Ok((
            json!({"id": format!("rerank-{index}"), "model": model, "usage": usage, "results": results}),
            tokens,
        ));
    }
    let items = inputs(req, counter)?;
    let tokens = items.iter().map(|(_, n)| n).sum::<u64>();
    let usage = json!({"prompt_tokens": tokens, "total_tokens": tokens});
    let data: Vec<Value> = items
        .iter()
        .enumerate()
        .map(|(i, (text, _))| match route {
            Route::Pooling => json!({"index": i, "object": "pooling", "data": vector(text, dim)}),
            _ => json!({"index": i, "object": "embedding", "embedding": vector(text, dim)}),
        })
        .collect();
    let id = if route == Route::Pooling { format!("pool-{index}") } else { format!("embd-{index}") };
    Ok((json!({"id": id, "object": "list", "model": model, "data": data, "usage": usage}), tokens))
}

/// Answers one pooling request.
pub(crate) async fn handle<B>(req: Request<B>, state: Arc<State>, conn: ConnCtx) -> Result<Response<ResBody>, BoxError>
where
    B: Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let route = match req.uri().path() {
        p if p.ends_with("embeddings") => Route::Embeddings,
        p if p.ends_with("pooling") => Route::Pooling,
        _ => Route::Rerank,
    };
    let index = state.completions.fetch_add(1, Relaxed);
    if index < state.config.unready_requests {
        return Ok(json_error(StatusCode::SERVICE_UNAVAILABLE, "not ready: the model is still loading"));
    }
    let body = match Limited::new(req.into_body(), MAX_REQUEST_BYTES).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return Ok(json_error(StatusCode::PAYLOAD_TOO_LARGE, "request body too large"));
        }
        Err(e) => return Err(e),
    };
    let arrived = conn.arrival.latest();
    let parsed: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        _ => return Ok(json_error(StatusCode::BAD_REQUEST, "the body must be a JSON object")),
    };
    let model = parsed.get("model").and_then(Value::as_str).unwrap_or(&state.config.model).to_owned();
    let (value, tokens) = match answer(route, &parsed, &state, index, &model) {
        Ok(a) => a,
        Err(msg) => return Ok(json_error(StatusCode::BAD_REQUEST, &msg)),
    };
    let running = state.metrics.running();
    if state.config.ttft_ms > 0.0 {
        PreciseSleep::new(state.timer.clone(), deadline(arrived, state.config.ttft_ms)).await;
    }
    state.metrics.count_prompt_tokens(tokens);
    state.metrics.first_token(arrived);
    state.metrics.count_success();
    drop(running);
    let mut resp = with_type(ResBody::full(serde_json::to_vec(&value).unwrap_or_default()), "application/json");
    resp.headers_mut().insert(header::SERVER, http::HeaderValue::from_static("surge-echo"));
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_are_a_function_of_the_text() {
        assert_eq!(vector("a b", 8), vector("a b", 8));
        assert_ne!(vector("a b", 8), vector("a c", 8));
        assert!(vector("x", 64).iter().all(|v| (-1.0..=1.0).contains(v)));
    }

    #[test]
    fn inputs_of_each_form() {
        let c = Counter::Words;
        let n = |v: Value| inputs(&v, &c).map(|i| i.iter().map(|x| x.1).collect::<Vec<_>>());
        assert_eq!(n(json!({"input": "a b c"})), Ok(vec![3]));
        assert_eq!(n(json!({"input": ["a b", "c"]})), Ok(vec![2, 1]));
        assert_eq!(n(json!({"input": [5, 6, 7, 8]})), Ok(vec![4]));
        assert_eq!(n(json!({"input": [[5, 6], [7]]})), Ok(vec![2, 1]));
        assert_eq!(
            n(json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "x y"}]}]})),
            Ok(vec![2])
        );
        assert!(n(json!({"input": {"a": 1}})).is_err());
        assert!(n(json!({})).is_err());
    }
}
