//! The OpenAI Responses API (`/v1/responses`, vLLM's `openai-responses` backend): the
//! request body and the meaning of one streamed event, read from its JSON `type` (the
//! SSE `event:` line is not needed; vLLM sends both).
//!
//! D10 here: `response.output_text.delta`, `response.reasoning_text.delta`,
//! `response.reasoning_summary_text.delta`, `response.refusal.delta` and
//! `response.function_call_arguments.delta` are token events, an empty delta included.
//! The `.done` events repeat text already streamed and are not. `response.completed` and
//! `response.incomplete` end the response and carry its `usage` (`input_tokens`,
//! `output_tokens`); `response.failed` and `error` are the server's errors.

use crate::engine::api::openai::{Counts, Event, Part, borrowed};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    input: Input<'a>,
    max_output_tokens: u32,
    stream: bool,
    store: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    ignore_eos: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Input<'a> {
    Text(&'a str),
    Messages(&'a Value),
}

/// The JSON body of one streamed Responses request: `input` is the prompt, or a chat
/// prompt's `messages` (the Responses API takes them as input items).
pub fn body(
    model: &str,
    prompt: &str,
    messages: Option<&Value>,
    max_tokens: u32,
    ignore_eos: bool,
    temperature: Option<f64>,
    extra: Option<&Map<String, Value>>,
) -> Vec<u8> {
    let input = messages.map_or(Input::Text(prompt), Input::Messages);
    let b = Body { model, input, max_output_tokens: max_tokens, stream: true, store: false, ignore_eos, temperature };
    let Some(extra) = extra else {
        return serde_json::to_vec(&b).expect("serializing a plain struct cannot fail");
    };
    let mut v = serde_json::to_value(&b).expect("serializing a plain struct cannot fail");
    if let Some(obj) = v.as_object_mut() {
        obj.extend(extra.iter().map(|(k, x)| (k.clone(), x.clone())));
    }
    serde_json::to_vec(&v).expect("serializing a JSON value cannot fail")
}

#[derive(Deserialize)]
struct Typed<'a> {
    #[serde(default, borrow, rename = "type", deserialize_with = "borrowed")]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "borrowed")]
    delta: Option<Cow<'a, str>>,
    #[serde(default)]
    response: Option<Response>,
}

#[derive(Deserialize)]
struct Response {
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    input_tokens: u32,
    #[serde(default)]
    output_tokens: u32,
    #[serde(default)]
    input_tokens_details: Option<Details>,
    #[serde(default)]
    output_tokens_details: Option<Details>,
}

#[derive(Deserialize)]
struct Details {
    #[serde(default)]
    cached_tokens: Option<u32>,
    #[serde(default)]
    reasoning_tokens: Option<u32>,
}

/// Classifies one event's data and, with `text`, appends the output text it carries.
pub fn classify(data: &[u8], text: Option<&mut String>) -> Event {
    let trimmed = data.trim_ascii();
    if trimmed == b"[DONE]" {
        return Event::Done;
    }
    let Ok(ev) = serde_json::from_slice::<Typed<'_>>(trimmed) else {
        return Event::Malformed;
    };
    match ev.kind.as_deref() {
        Some(
            kind @ ("response.output_text.delta"
            | "response.refusal.delta"
            | "response.reasoning_text.delta"
            | "response.reasoning_summary_text.delta"
            | "response.function_call_arguments.delta"),
        ) => {
            if let (Some(out), Some(d)) = (text, ev.delta.as_deref()) {
                out.push_str(d);
            }
            Event::Token(match kind {
                "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => Part::Reasoning,
                "response.function_call_arguments.delta" => Part::Tool,
                _ => Part::Answer,
            })
        }
        Some("response.completed" | "response.incomplete") => match ev.response.and_then(|r| r.usage) {
            Some(u) => Event::Usage(Counts {
                prompt_tokens: u.input_tokens,
                completion_tokens: u.output_tokens,
                cached_tokens: u.input_tokens_details.and_then(|d| d.cached_tokens),
                reasoning_tokens: u.output_tokens_details.and_then(|d| d.reasoning_tokens),
            }),
            None => Event::Done,
        },
        Some("response.failed" | "error") => Event::ServerError,
        Some(_) => Event::Empty,
        None => Event::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_by_type() {
        let mut text = String::new();
        let cases: &[(&[u8], Event)] = &[
            (br#"{"type":"response.created","response":{"status":"in_progress"}}"#, Event::Empty),
            (br#"{"type":"response.reasoning_text.delta","delta":"hm"}"#, Event::Token(Part::Reasoning)),
            (br#"{"type":"response.output_text.delta","delta":""}"#, Event::Token(Part::Answer)),
            (br#"{"type":"response.output_text.delta","delta":" hi"}"#, Event::Token(Part::Answer)),
            (br#"{"type":"response.output_text.done","text":" hi"}"#, Event::Empty),
            (br#"{"type":"response.failed","response":{}}"#, Event::ServerError),
            (br#"{"type":"error","message":"no"}"#, Event::ServerError),
            (br#"{"delta":"x"}"#, Event::Malformed),
            (b"{not json", Event::Malformed),
        ];
        for (data, want) in cases {
            assert_eq!(classify(data, Some(&mut text)), *want, "{}", String::from_utf8_lossy(data));
        }
        assert_eq!(text, "hm hi", "deltas collected, .done not repeated");
        let done = br#"{"type":"response.completed","response":{"status":"incomplete","usage":{"input_tokens":17,"output_tokens":4,"total_tokens":21,"input_tokens_details":{"cached_tokens":16}}}}"#;
        assert_eq!(
            classify(done, None),
            Event::Usage(Counts {
                prompt_tokens: 17,
                completion_tokens: 4,
                cached_tokens: Some(16),
                reasoning_tokens: None
            })
        );
        assert_eq!(classify(br#"{"type":"response.incomplete","response":{}}"#, None), Event::Done);
    }

    #[test]
    fn body_as_vllm_sends_it() {
        let extra: Map<String, Value> = serde_json::from_str(r#"{"top_p":0.5,"store":true}"#).unwrap();
        let v: Value =
            serde_json::from_slice(&body("served", "hello", None, 16, true, Some(0.0), Some(&extra))).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"model":"served","input":"hello","max_output_tokens":16,"stream":true,
                "store":true,"ignore_eos":true,"temperature":0.0,"top_p":0.5})
        );
    }
}
