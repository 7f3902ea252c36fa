//! The OpenAI-compatible wire format: request bodies for `/v1/completions` and
//! `/v1/chat/completions`, and the meaning of one streamed event (does it carry a token,
//! does it carry `usage`, is it `[DONE]`, is it malformed).

use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// What one SSE `data` payload of a completion stream means to the timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A chunk whose delta carries non-empty text: a token-bearing event.
    Token,
    /// A chunk without text (role-only delta, finish_reason only, keep-alive).
    Empty,
    /// The final `usage` block.
    Usage { prompt_tokens: u32, completion_tokens: u32 },
    /// The chunk carried both a token and usage (some servers do that).
    TokenAndUsage { prompt_tokens: u32, completion_tokens: u32 },
    /// `data: [DONE]`.
    Done,
    /// An `{"error": ...}` object in the stream.
    ServerError,
    /// Not JSON, or JSON of the wrong shape.
    Malformed,
}

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Vec<Choice<'a>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: u32,
    #[serde(default)]
    completion_tokens: u32,
}

/// Classifies one event payload.
pub fn classify(data: &[u8]) -> Event {
    classify_into(data, None)
}

/// Classifies one event payload and appends the text it carries to `text` (to re-count
/// output tokens with a tokenizer when the server sends no usage).
pub fn classify_text(data: &[u8], text: &mut String) -> Event {
    classify_into(data, Some(text))
}

fn classify_into(data: &[u8], out: Option<&mut String>) -> Event {
    let trimmed = data.trim_ascii();
    if trimmed == b"[DONE]" {
        return Event::Done;
    }
    let Ok(chunk) = serde_json::from_slice::<Chunk<'_>>(trimmed) else {
        return Event::Malformed;
    };
    if chunk.error.is_some() {
        return Event::ServerError;
    }
    let token = chunk.choices.iter().any(|c| {
        let text = c.text.as_deref().is_some_and(|t| !t.is_empty());
        let delta = c.delta.as_ref().is_some_and(|d| {
            d.content.as_deref().is_some_and(|t| !t.is_empty())
                || d.reasoning_content.as_deref().is_some_and(|t| !t.is_empty())
        });
        text || delta
    });
    if let Some(out) = out {
        for c in &chunk.choices {
            out.push_str(c.text.as_deref().unwrap_or_default());
            if let Some(d) = &c.delta {
                out.push_str(d.reasoning_content.as_deref().unwrap_or_default());
                out.push_str(d.content.as_deref().unwrap_or_default());
            }
        }
    }
    match (token, chunk.usage) {
        (true, None) => Event::Token,
        (false, None) => Event::Empty,
        (false, Some(u)) => Event::Usage { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens },
        (true, Some(u)) => {
            Event::TokenAndUsage { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens }
        }
    }
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: &'a str,
}

#[derive(Serialize)]
struct CompletionBody<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt: Option<&'a str>,
    #[serde(skip_serializing_if = "Messages::is_none")]
    messages: Messages<'a>,
    max_tokens: u32,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    ignore_eos: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
}

/// The `messages` of a chat request: none (completions), one user message, or an array
/// given as is (file datasets).
#[derive(Serialize)]
#[serde(untagged)]
enum Messages<'a> {
    None,
    User([Message<'a>; 1]),
    Given(&'a serde_json::Value),
}

impl Messages<'_> {
    fn is_none(&self) -> bool {
        matches!(self, Messages::None)
    }
}

/// Parameters shared by every request of a run.
#[derive(Debug, Clone)]
pub struct BodyParams<'a> {
    pub model: &'a str,
    pub chat: bool,
    pub ignore_eos: bool,
    pub temperature: Option<f64>,
}

/// The JSON body of one streamed completion request.
pub fn body(params: &BodyParams<'_>, prompt: &str, max_tokens: u32) -> Vec<u8> {
    let messages =
        if params.chat { Messages::User([Message { role: "user", content: prompt }]) } else { Messages::None };
    encode(params, (!params.chat).then_some(prompt), messages, max_tokens)
}

/// The JSON body of one streamed chat request whose `messages` are given (a JSON array).
pub fn chat_body(params: &BodyParams<'_>, messages: &serde_json::Value, max_tokens: u32) -> Vec<u8> {
    encode(params, None, Messages::Given(messages), max_tokens)
}

fn encode(params: &BodyParams<'_>, prompt: Option<&str>, messages: Messages<'_>, max_tokens: u32) -> Vec<u8> {
    let b = CompletionBody {
        model: params.model,
        prompt,
        messages,
        max_tokens,
        stream: true,
        stream_options: StreamOptions { include_usage: true },
        ignore_eos: params.ignore_eos,
        temperature: params.temperature,
    };
    serde_json::to_vec(&b).expect("serializing a plain struct cannot fail")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_completion_and_chat_chunks() {
        assert_eq!(classify(br#"{"choices":[{"index":0,"text":" hi"}]}"#), Event::Token);
        assert_eq!(classify(br#"{"choices":[{"delta":{"content":"x"}}]}"#), Event::Token);
        assert_eq!(classify(br#"{"choices":[{"delta":{"role":"assistant"}}]}"#), Event::Empty);
        assert_eq!(classify(br#"{"choices":[{"text":"","finish_reason":"length"}]}"#), Event::Empty);
        assert_eq!(
            classify(br#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}"#),
            Event::Usage { prompt_tokens: 5, completion_tokens: 7 }
        );
        assert_eq!(classify(b" [DONE] "), Event::Done);
        assert_eq!(classify(b"{not json"), Event::Malformed);
        assert_eq!(classify(br#"{"error":{"message":"boom"}}"#), Event::ServerError);
    }

    #[test]
    fn body_has_stream_options_and_chat_messages() {
        let p = BodyParams { model: "m", chat: true, ignore_eos: true, temperature: Some(0.0) };
        let v: serde_json::Value = serde_json::from_slice(&body(&p, "hello", 4)).unwrap();
        assert_eq!(v["messages"][0]["content"], "hello");
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["ignore_eos"], true);
        assert_eq!(v["max_tokens"], 4);
        assert!(v.get("prompt").is_none());
        let given = serde_json::json!([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]);
        let v: serde_json::Value = serde_json::from_slice(&chat_body(&p, &given, 9)).unwrap();
        assert_eq!(v["messages"], given);
        let p = BodyParams { chat: false, ..p };
        let v: serde_json::Value = serde_json::from_slice(&body(&p, "hello", 4)).unwrap();
        assert_eq!(v["prompt"], "hello");
        assert!(v.get("messages").is_none());
    }

    #[test]
    fn classify_text_collects_the_streamed_text() {
        let mut text = String::new();
        assert_eq!(classify_text(br#"{"choices":[{"text":" hi"}]}"#, &mut text), Event::Token);
        assert_eq!(classify_text(br#"{"choices":[{"delta":{"content":" there"}}]}"#, &mut text), Event::Token);
        assert_eq!(classify_text(b"[DONE]", &mut text), Event::Done);
        assert_eq!(text, " hi there");
    }
}
