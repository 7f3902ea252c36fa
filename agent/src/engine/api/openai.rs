//! The OpenAI-compatible wire format: request bodies for `/v1/completions` and
//! `/v1/chat/completions`, and the meaning of one streamed event (does it carry a token,
//! does it carry `usage`, is it `[DONE]`, is it malformed).

use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// What one SSE `data` payload of a completion stream means to the timer.
///
/// The token rule (D10): a chunk is a token event when one of its choices
/// carries generated output, *even an empty string*: completions `text`; chat
/// `delta.content`, `delta.reasoning`, `delta.reasoning_content`, `delta.tool_calls` or
/// `delta.function_call`. An empty string is a generated token whose text cannot be
/// printed yet (half of a multi-byte character, a special token); real vLLM servers send
/// one for every such token. Not token events: chat's role announcement (a delta with
/// `role` and empty or no output), a chunk whose only news is a `finish_reason` with empty
/// output, usage-only chunks (`"choices": []`), and SSE comments (dropped by the framer).
///
/// One refinement, measured on a real vLLM server: vLLM puts the `finish_reason` on the
/// chunk of the last generated token, and that token's text is `""` when the stream is cut
/// in the middle of a character or ends on a special token (EOS). A finish chunk whose
/// output field is present but empty is therefore a [`Event::Finish`]: the request counts
/// it as its last token event exactly when the server's `usage.completion_tokens` is one
/// more than the token events before it. A finish chunk without an output field (`"delta":
/// {}`, OpenAI's and llama.cpp's separate last chunk) is [`Event::Empty`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A chunk carrying generated output: a token event, of this part of the reply.
    Token(Part),
    /// A chunk whose only news is a `finish_reason`, with an empty output field present: a
    /// token event if `usage` says so (see above).
    Finish,
    /// A chunk without generated output (role announcement, finish_reason only, keep-alive).
    Empty,
    /// The final `usage` block.
    Usage(Counts),
    /// The chunk carried both a token and usage (some servers do that).
    TokenAndUsage(Part, Counts),
    /// The chunk carried both a [`Event::Finish`] and usage.
    FinishAndUsage(Counts),
    /// `data: [DONE]`.
    Done,
    /// An `{"error": ...}` object in the stream.
    ServerError,
    /// Not JSON, or JSON of the wrong shape.
    Malformed,
}

/// Which part of a reply a token event belongs to (D49): every one is a token (D10); the
/// answer is what a user reads, reasoning what a reasoning model thinks first, a tool
/// call what an agent acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Answer,
    Reasoning,
    /// A tool call's delta; `ToolStart` opens a call (its id or function name).
    Tool,
    ToolStart,
}

/// An optional string borrowed from the chunk whenever it has no escape. serde borrows a
/// `Cow<str>` field but not one inside an `Option` (it would allocate every token's text).
pub(super) fn borrowed<'de: 'a, 'a, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Cow<'a, str>>, D::Error> {
    #[derive(Deserialize)]
    struct Text<'a>(#[serde(borrow)] Cow<'a, str>);
    Ok(Option::<Text<'a>>::deserialize(d)?.map(|t| t.0))
}

/// A chunk read in one pass (D100): each choice folded into the verdict as it is read,
/// no list of choices built and moved, the response's `id` taken on the way when asked.
/// What it gives is what a whole-chunk struct did: the same keys, a repeated key still
/// malformed, unknown keys skipped.
struct ChunkSeed<'s> {
    out: Option<&'s mut String>,
    seen: Option<&'s mut Seen>,
    /// The `id` is read (as raw JSON) only when asked for; otherwise it is skipped unread.
    want_id: bool,
}

/// What a chunk came to: its choices' verdict (the most any choice carries, of the last
/// such choice's part), its usage, whether it was an error, and its `id` as JSON.
struct Read<'a> {
    carries: Carries,
    part: Part,
    usage: Option<Counts>,
    error: bool,
    id: Option<&'a serde_json::value::RawValue>,
    id_twice: bool,
}

#[derive(Deserialize, PartialEq, Eq)]
#[serde(field_identifier, rename_all = "snake_case")]
enum ChunkKey {
    Choices,
    Usage,
    Error,
    Id,
    #[serde(other)]
    Other,
}

impl<'de> serde::de::DeserializeSeed<'de> for ChunkSeed<'_> {
    type Value = Read<'de>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Read<'de>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ChunkSeed<'_> {
    type Value = Read<'de>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a completion chunk")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(mut self, mut map: A) -> Result<Read<'de>, A::Error> {
        use serde::de::Error;
        let mut read = Read {
            carries: Carries::Nothing,
            part: Part::Answer,
            usage: None,
            error: false,
            id: None,
            id_twice: false,
        };
        // The keys read so far; a repeated `id` is no id (a reading of the id alone
        // refuses it), any other repeated key is malformed.
        let mut had = [false; 4];
        while let Some(key) = map.next_key::<ChunkKey>()? {
            if let Some(i) =
                [ChunkKey::Choices, ChunkKey::Usage, ChunkKey::Error, ChunkKey::Id].iter().position(|k| *k == key)
            {
                if had[i] && key != ChunkKey::Id {
                    return Err(A::Error::custom("a repeated key"));
                }
                read.id_twice |= had[i];
                had[i] = true;
            }
            match key {
                ChunkKey::Choices => map.next_value_seed(Choices {
                    read: &mut read,
                    out: self.out.as_deref_mut(),
                    seen: self.seen.as_deref_mut(),
                })?,
                ChunkKey::Usage => read.usage = map.next_value()?,
                ChunkKey::Error => read.error = map.next_value::<Option<serde::de::IgnoredAny>>()?.is_some(),
                ChunkKey::Id if self.want_id => read.id = map.next_value()?,
                ChunkKey::Id | ChunkKey::Other => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(read)
    }
}

/// A chunk's `choices`, each folded into its [`Read`] as it is read.
struct Choices<'r, 'a, 's> {
    read: &'r mut Read<'a>,
    out: Option<&'s mut String>,
    seen: Option<&'s mut Seen>,
}

impl<'de> serde::de::DeserializeSeed<'de> for Choices<'_, 'de, '_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Choices<'_, 'de, '_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of choices")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(OneChoice(&mut self))?.is_some() {}
        Ok(())
    }
}

/// One choice, folded where it was read rather than handed back.
struct OneChoice<'c, 'r, 'a, 's>(&'c mut Choices<'r, 'a, 's>);

impl<'de> serde::de::DeserializeSeed<'de> for OneChoice<'_, '_, 'de, '_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        let c = Choice::deserialize(d)?;
        let fold = self.0;
        let (carries, part) = c.carries();
        if carries >= fold.read.carries {
            (fold.read.carries, fold.read.part) = (carries, part);
        }
        if let Some(out) = fold.out.as_deref_mut() {
            c.push_text(out);
        }
        if let Some(seen) = fold.seen.as_deref_mut() {
            seen.saw(&c);
        }
        Ok(())
    }
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow, deserialize_with = "borrowed")]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow, deserialize_with = "borrowed")]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow, deserialize_with = "borrowed")]
    role: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "borrowed")]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "borrowed")]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "borrowed")]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolCall<'a>>>,
    #[serde(default, borrow)]
    function_call: Option<Function<'a>>,
}

#[derive(Deserialize)]
struct ToolCall<'a> {
    /// Which call of the reply the delta extends (OpenAI, vLLM; absent: the first).
    #[serde(default)]
    index: Option<u32>,
    /// Present on a call's first delta (OpenAI, vLLM).
    #[serde(default, borrow, deserialize_with = "borrowed")]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<Function<'a>>,
}

impl ToolCall<'_> {
    /// The delta that opens a call: its id, or its function's name.
    fn opens(&self) -> bool {
        self.id.is_some() || self.function.as_ref().is_some_and(|f| f.name.is_some())
    }
}

#[derive(Deserialize)]
struct Function<'a> {
    #[serde(default, borrow, deserialize_with = "borrowed")]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "borrowed")]
    arguments: Option<Cow<'a, str>>,
}

impl Function<'_> {
    fn push_text(&self, out: &mut String) {
        out.push_str(self.name.as_deref().unwrap_or_default());
        out.push_str(self.arguments.as_deref().unwrap_or_default());
    }
}

/// What one choice carries: output fields present, and whether any of them is non-empty.
#[derive(Clone, Copy)]
struct Output {
    present: bool,
    nonempty: bool,
}

impl Output {
    fn of(field: Option<&str>) -> Self {
        Self { present: field.is_some(), nonempty: field.is_some_and(|t| !t.is_empty()) }
    }

    fn or(self, other: Self) -> Self {
        Self { present: self.present || other.present, nonempty: self.nonempty || other.nonempty }
    }
}

/// What one choice is to the token rule; a chunk is what the most of its choices is.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Carries {
    Nothing,
    /// Only a `finish_reason`, with an output field present but empty.
    Finish,
    Token,
}

impl Choice<'_> {
    /// D10 for one choice, and which part of the reply it carries (D49): answer text
    /// first, then reasoning, then a tool call; a present but empty field is its part.
    fn carries(&self) -> (Carries, Part) {
        let answer = Output::of(self.text.as_deref());
        let mut out = answer;
        let mut role = false;
        let mut part = Part::Answer;
        if let Some(d) = &self.delta {
            role = d.role.is_some();
            let content = Output::of(d.content.as_deref());
            let reasoning = Output::of(d.reasoning.as_deref()).or(Output::of(d.reasoning_content.as_deref()));
            out = out.or(content).or(reasoning);
            // A tool call's name or arguments are generated output, whatever their length.
            let tool = d.tool_calls.as_ref().is_some_and(|c| !c.is_empty()) || d.function_call.is_some();
            let opens = d.tool_calls.iter().flatten().any(ToolCall::opens)
                || d.function_call.as_ref().is_some_and(|f| f.name.is_some());
            if tool {
                out = out.or(Output { present: true, nonempty: true });
            }
            let said = answer.or(content);
            part = if said.nonempty {
                Part::Answer
            } else if reasoning.nonempty {
                Part::Reasoning
            } else if tool && opens {
                Part::ToolStart
            } else if tool {
                Part::Tool
            } else if reasoning.present && !said.present {
                Part::Reasoning
            } else {
                Part::Answer
            };
        }
        // Empty output: a token unless the chunk is a role announcement or a finish.
        let carries = match (out.nonempty, out.present && !role, self.finish_reason.is_some()) {
            (true, _, _) | (false, true, false) => Carries::Token,
            (false, true, true) => Carries::Finish,
            (false, false, _) => Carries::Nothing,
        };
        (carries, part)
    }

    fn push_text(&self, out: &mut String) {
        out.push_str(self.text.as_deref().unwrap_or_default());
        if let Some(d) = &self.delta {
            out.push_str(d.reasoning.as_deref().unwrap_or_default());
            out.push_str(d.reasoning_content.as_deref().unwrap_or_default());
            out.push_str(d.content.as_deref().unwrap_or_default());
            for call in d.tool_calls.iter().flatten() {
                if let Some(f) = &call.function {
                    f.push_text(out);
                }
            }
            if let Some(f) = &d.function_call {
                f.push_text(out);
            }
        }
    }
}

/// A `usage` block's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub struct Counts {
    #[serde(default)]
    pub prompt_tokens: u32,
    #[serde(default)]
    pub completion_tokens: u32,
    /// `prompt_tokens_details.cached_tokens` (vLLM with `--enable-prompt-tokens-details`,
    /// OpenAI, SGLang): prompt tokens served from the prefix cache.
    #[serde(default, rename = "prompt_tokens_details", deserialize_with = "cached")]
    pub cached_tokens: Option<u32>,
    /// `completion_tokens_details.reasoning_tokens` (vLLM, OpenAI): output tokens that were
    /// reasoning.
    #[serde(default, rename = "completion_tokens_details", deserialize_with = "reasoning")]
    pub reasoning_tokens: Option<u32>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u32>,
}

/// `completion_tokens_details` may be absent, `null`, or an object with or without the count.
fn reasoning<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    Ok(Option::<CompletionDetails>::deserialize(d)?.and_then(|x| x.reasoning_tokens))
}

#[derive(Deserialize)]
struct Details {
    #[serde(default)]
    cached_tokens: Option<u32>,
}

/// `prompt_tokens_details` may be absent, `null`, or an object with or without the count.
fn cached<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    Ok(Option::<Details>::deserialize(d)?.and_then(|x| x.cached_tokens))
}

#[derive(Deserialize)]
struct Id<'a> {
    #[serde(default, borrow, deserialize_with = "borrowed")]
    id: Option<Cow<'a, str>>,
}

/// The response `id` a chunk carries (at most 64 characters), e.g. vLLM's `cmpl-...`.
pub fn response_id(data: &[u8]) -> Option<String> {
    let id = serde_json::from_slice::<Id<'_>>(data.trim_ascii()).ok()?.id?;
    Some(cut_id(&id))
}

/// An id's first 64 characters, copied once to their length (so the row's bytes are made
/// from it without another allocation).
fn cut_id(id: &str) -> String {
    let end = id.char_indices().nth(64).map_or(id.len(), |(i, _)| i);
    id[..end].to_owned()
}

/// What a stream said besides its tokens: whether it finished with `tool_calls`, and
/// (when kept, for an agent loop) the calls it made, assembled from their deltas.
#[derive(Debug, Default)]
pub struct Seen {
    pub tool_finish: bool,
    /// A chunk carried a `finish_reason`.
    pub finished: bool,
    pub calls: Option<Vec<surge_proto::ToolCallMade>>,
}

impl Seen {
    /// Keeps the calls a reply makes (an agent loop sends them back).
    pub fn keeping_calls() -> Self {
        Self { tool_finish: false, finished: false, calls: Some(Vec::new()) }
    }

    fn saw(&mut self, c: &Choice<'_>) {
        self.tool_finish |= c.finish_reason.as_deref() == Some("tool_calls");
        self.finished |= c.finish_reason.is_some();
        let (Some(calls), Some(d)) = (&mut self.calls, &c.delta) else { return };
        for t in d.tool_calls.iter().flatten() {
            let i = t.index.unwrap_or(0) as usize;
            // Deltas name their call by index; a call opens with its id and name.
            if calls.len() <= i {
                if i >= MAX_CALLS {
                    continue;
                }
                calls.resize_with(i + 1, Default::default);
            }
            let call = &mut calls[i];
            if let Some(id) = &t.id {
                call.id = id.to_string();
            }
            if let Some(f) = &t.function {
                call.name.push_str(f.name.as_deref().unwrap_or_default());
                call.arguments.push_str(f.arguments.as_deref().unwrap_or_default());
            }
        }
    }
}

/// The most calls of one reply kept for an agent loop.
const MAX_CALLS: usize = 64;

/// Classifies one event payload.
pub fn classify(data: &[u8]) -> Event {
    classify_into(data, None, None)
}

/// Classifies one event payload and appends the text it carries to `text` (to re-count
/// output tokens with a tokenizer when the server sends no usage).
pub fn classify_text(data: &[u8], text: &mut String) -> Event {
    classify_into(data, Some(text), None)
}

fn classify_into(data: &[u8], out: Option<&mut String>, seen: Option<&mut Seen>) -> Event {
    classify_with_id(data, out, seen, None)
}

/// Classifies one event payload, appending its text to `text` when given, noting in
/// `seen` a `tool_calls` finish and the calls' deltas, and when `id` is given, writing the
/// chunk's response `id` (at most 64 characters) into it in the same pass, unless the
/// chunk is malformed.
pub fn classify_with_id(
    data: &[u8],
    text: Option<&mut String>,
    seen: Option<&mut Seen>,
    id: Option<&mut String>,
) -> Event {
    use serde::de::DeserializeSeed;
    let trimmed = data.trim_ascii();
    if trimmed == b"[DONE]" {
        return Event::Done;
    }
    let (mut text, mut seen) = (text, seen);
    let before = (text.as_ref().map(|t| t.len()), seen.as_ref().map(|s| (s.tool_finish, s.finished)));
    let mut de = serde_json::Deserializer::from_slice(trimmed);
    let seed = ChunkSeed { out: text.as_deref_mut(), seen: seen.as_deref_mut(), want_id: id.is_some() };
    let parsed = seed.deserialize(&mut de).and_then(|r| de.end().map(|()| r));
    // A malformed chunk, or a server's error, leaves no text and no finish, as when chunks
    // were read whole first. The calls it began are kept, but either fails its row, and a
    // failed row's calls are never answered.
    if !parsed.as_ref().is_ok_and(|r| !r.error) {
        if let (Some(t), Some(n)) = (text, before.0) {
            t.truncate(n);
        }
        if let (Some(s), Some(flags)) = (seen, before.1) {
            (s.tool_finish, s.finished) = flags;
        }
    }
    let Ok(read) = parsed else {
        return Event::Malformed;
    };
    if let Some(id) = id {
        *id = read.id.filter(|_| !read.id_twice).and_then(short_id).unwrap_or_default();
    }
    if read.error {
        return Event::ServerError;
    }
    match (read.carries, read.usage) {
        (Carries::Token, None) => Event::Token(read.part),
        (Carries::Finish, None) => Event::Finish,
        (Carries::Nothing, None) => Event::Empty,
        (Carries::Nothing, Some(u)) => Event::Usage(u),
        (Carries::Token, Some(u)) => Event::TokenAndUsage(read.part, u),
        (Carries::Finish, Some(u)) => Event::FinishAndUsage(u),
    }
}

/// An `id` that is a string, cut as [`cut_id`] cuts it; anything else is no id.
fn short_id(raw: &serde_json::value::RawValue) -> Option<String> {
    let id = borrowed(&mut serde_json::Deserializer::from_str(raw.get())).ok()??;
    Some(cut_id(&id))
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
    prompt: Option<PromptField<'a>>,
    #[serde(skip_serializing_if = "Messages::is_none")]
    messages: Messages<'a>,
    /// Completions' limit (`max_tokens`); chat sends `max_completion_tokens`, as vLLM's
    /// benchmark does.
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    ignore_eos: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
}

/// A completion's `prompt`: text, or token ids (`--prompt-token-ids`).
#[derive(Serialize, Clone, Copy)]
#[serde(untagged)]
enum PromptField<'a> {
    Text(&'a str),
    Ids(&'a [u32]),
}

/// The `messages` of a chat request: none (completions), one user message, an array
/// given as is (file datasets), or an array already serialized (a conversation's history
/// and its new message).
#[derive(Serialize)]
#[serde(untagged)]
enum Messages<'a> {
    None,
    User([Message<'a>; 1]),
    Given(&'a serde_json::Value),
    Raw(&'a serde_json::value::RawValue),
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
    /// Merged into the body, its keys winning (sampling flags, `--extra-body`).
    pub extra: Option<&'a serde_json::Map<String, serde_json::Value>>,
}

/// The JSON body of one streamed completion request.
pub fn body(params: &BodyParams<'_>, prompt: &str, max_tokens: u32) -> Vec<u8> {
    let messages =
        if params.chat { Messages::User([Message { role: "user", content: prompt }]) } else { Messages::None };
    encode(params, (!params.chat).then_some(PromptField::Text(prompt)), messages, max_tokens)
}

/// The JSON body of one streamed completion whose prompt is token ids (vllm-bench's
/// `--prompt-token-ids`: exact input lengths, no server-side tokenization).
pub fn ids_body(params: &BodyParams<'_>, ids: &[u32], max_tokens: u32) -> Vec<u8> {
    encode(params, Some(PromptField::Ids(ids)), Messages::None, max_tokens)
}

/// The JSON body of one streamed chat request whose `messages` are given (a JSON array).
pub fn chat_body(params: &BodyParams<'_>, messages: &serde_json::Value, max_tokens: u32) -> Vec<u8> {
    encode(params, None, Messages::Given(messages), max_tokens)
}

/// The JSON body of one streamed chat request whose `messages` array is already JSON
/// text (a conversation: the history's bytes extended by the new message, D31).
pub fn chat_body_raw(params: &BodyParams<'_>, messages: &serde_json::value::RawValue, max_tokens: u32) -> Vec<u8> {
    encode(params, None, Messages::Raw(messages), max_tokens)
}

fn encode(
    params: &BodyParams<'_>,
    prompt: Option<PromptField<'_>>,
    messages: Messages<'_>,
    max_tokens: u32,
) -> Vec<u8> {
    let chat = prompt.is_none();
    let b = CompletionBody {
        model: params.model,
        prompt,
        messages,
        max_tokens: (!chat).then_some(max_tokens),
        max_completion_tokens: chat.then_some(max_tokens),
        stream: true,
        stream_options: StreamOptions { include_usage: true },
        ignore_eos: params.ignore_eos,
        temperature: params.temperature,
    };
    match params.extra {
        None => serde_json::to_vec(&b).expect("serializing a plain struct cannot fail"),
        Some(extra) => {
            let mut v = serde_json::to_value(&b).expect("serializing a plain struct cannot fail");
            if let Some(obj) = v.as_object_mut() {
                obj.extend(extra.iter().map(|(k, x)| (k.clone(), x.clone())));
            }
            serde_json::to_vec(&v).expect("serializing a JSON value cannot fail")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_completion_and_chat_chunks() {
        assert_eq!(classify(br#"{"choices":[{"index":0,"text":" hi"}]}"#), Event::Token(Part::Answer));
        assert_eq!(classify(br#"{"choices":[{"delta":{"content":"x"}}]}"#), Event::Token(Part::Answer));
        assert_eq!(classify(br#"{"choices":[{"delta":{"role":"assistant"}}]}"#), Event::Empty);
        assert_eq!(classify(br#"{"choices":[{"text":"","finish_reason":"length"}]}"#), Event::Finish);
        assert_eq!(
            classify(br#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}"#),
            Event::Usage(Counts {
                prompt_tokens: 5,
                completion_tokens: 7,
                cached_tokens: None,
                reasoning_tokens: None
            })
        );
        let cached = br#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":8}}}"#;
        assert_eq!(
            classify(cached),
            Event::Usage(Counts {
                prompt_tokens: 9,
                completion_tokens: 2,
                cached_tokens: Some(8),
                reasoning_tokens: None
            })
        );
        let null = br#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"prompt_tokens_details":null}}"#;
        assert_eq!(
            classify(null),
            Event::Usage(Counts {
                prompt_tokens: 9,
                completion_tokens: 2,
                cached_tokens: None,
                reasoning_tokens: None
            })
        );
        assert_eq!(classify(b" [DONE] "), Event::Done);
        assert_eq!(classify(b"{not json"), Event::Malformed);
        assert_eq!(classify(br#"{"error":{"message":"boom"}}"#), Event::ServerError);
    }

    /// D10, case by case: every line fails if the rule is changed in that case.
    #[test]
    fn token_rule_counts_empty_output_but_not_role_finish_or_usage() {
        let cases: &[(&[u8], Event)] = &[
            // Empty text is a generated token (half a character, a special token).
            (br#"{"choices":[{"index":0,"text":"","finish_reason":null}]}"#, Event::Token(Part::Answer)),
            (br#"{"choices":[{"index":0,"delta":{"content":""},"finish_reason":null}]}"#, Event::Token(Part::Answer)),
            (br#"{"choices":[{"delta":{"reasoning":""}}]}"#, Event::Token(Part::Reasoning)),
            (br#"{"choices":[{"delta":{"reasoning":"think","content":null}}]}"#, Event::Token(Part::Reasoning)),
            (br#"{"choices":[{"delta":{"reasoning_content":"hm"}}]}"#, Event::Token(Part::Reasoning)),
            (
                br#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":""}}]}}]}"#,
                Event::Token(Part::Tool),
            ),
            (
                br#"{"choices":[{"delta":{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f"}}]}}]}"#,
                Event::Token(Part::ToolStart),
            ),
            (br#"{"choices":[{"delta":{"function_call":{"arguments":"{"}}}]}"#, Event::Token(Part::Tool)),
            // Output with a finish_reason is still output.
            (br#"{"choices":[{"text":"end","finish_reason":"length"}]}"#, Event::Token(Part::Answer)),
            // Role announcements: role with empty or no output.
            (br#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#, Event::Empty),
            (br#"{"choices":[{"delta":{"role":"assistant"}}]}"#, Event::Empty),
            (br#"{"choices":[{"delta":{"role":"assistant","content":" hi"}}]}"#, Event::Token(Part::Answer)),
            // Only a finish_reason with an empty output field: maybe vLLM's last token
            // (usage decides); with no output field: not a token.
            (br#"{"choices":[{"text":"","finish_reason":"stop"}]}"#, Event::Finish),
            (br#"{"choices":[{"delta":{"content":""},"finish_reason":"length"}]}"#, Event::Finish),
            (br#"{"choices":[{"delta":{"role":"assistant","content":""},"finish_reason":"stop"}]}"#, Event::Empty),
            (br#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#, Event::Empty),
            (br#"{"choices":[{"delta":{"content":null},"finish_reason":"stop"}]}"#, Event::Empty),
            (br#"{"choices":[{"delta":{}}]}"#, Event::Empty),
            (br#"{"choices":[]}"#, Event::Empty),
        ];
        for (data, want) in cases {
            assert_eq!(classify(data), *want, "{}", String::from_utf8_lossy(data));
        }
        assert_eq!(
            classify(br#"{"choices":[{"text":""}],"usage":{"prompt_tokens":1,"completion_tokens":2}}"#),
            Event::TokenAndUsage(
                Part::Answer,
                Counts { prompt_tokens: 1, completion_tokens: 2, cached_tokens: None, reasoning_tokens: None }
            )
        );
        assert_eq!(
            classify(br#"{"choices":[{"text":"","finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":3}}"#),
            Event::FinishAndUsage(Counts { prompt_tokens: 1, completion_tokens: 3, cached_tokens: None, reasoning_tokens: None })
        );
    }

    #[test]
    fn body_has_stream_options_and_chat_messages() {
        let p = BodyParams { model: "m", chat: true, ignore_eos: true, temperature: Some(0.0), extra: None };
        let v: serde_json::Value = serde_json::from_slice(&body(&p, "hello", 4)).unwrap();
        assert_eq!(v["messages"][0]["content"], "hello");
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["ignore_eos"], true);
        assert_eq!(v["max_completion_tokens"], 4, "chat: vLLM's name");
        assert!(v.get("max_tokens").is_none());
        assert!(v.get("prompt").is_none());
        let given = serde_json::json!([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]);
        let v: serde_json::Value = serde_json::from_slice(&chat_body(&p, &given, 9)).unwrap();
        assert_eq!(v["messages"], given);
        let p = BodyParams { chat: false, ..p };
        let v: serde_json::Value = serde_json::from_slice(&body(&p, "hello", 4)).unwrap();
        assert_eq!(v["prompt"], "hello");
        assert_eq!(v["max_tokens"], 4);
        assert!(v.get("messages").is_none() && v.get("max_completion_tokens").is_none());
        // Extra keys join the body and win over its own (vLLM: payload.update(extra_body)).
        let extra: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(r#"{"top_p":0.9,"temperature":0.7,"ignore_eos":false}"#).unwrap();
        let p = BodyParams { extra: Some(&extra), ..p };
        let text = String::from_utf8(body(&p, "hello", 4)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (v["top_p"].as_f64(), v["temperature"].as_f64(), v["ignore_eos"].as_bool()),
            (Some(0.9), Some(0.7), Some(false))
        );
        assert_eq!(text.matches("temperature").count(), 1, "{text}");
    }

    #[test]
    fn classify_text_collects_the_streamed_text() {
        let mut text = String::new();
        assert_eq!(classify_text(br#"{"choices":[{"text":" hi"}]}"#, &mut text), Event::Token(Part::Answer));
        assert_eq!(
            classify_text(br#"{"choices":[{"delta":{"content":" there"}}]}"#, &mut text),
            Event::Token(Part::Answer)
        );
        assert_eq!(
            classify_text(br#"{"choices":[{"delta":{"reasoning":" so"}}]}"#, &mut text),
            Event::Token(Part::Reasoning)
        );
        let call = br#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":" f","arguments":"(x)"}}]}}]}"#;
        assert_eq!(classify_text(call, &mut text), Event::Token(Part::ToolStart));
        assert_eq!(classify_text(b"[DONE]", &mut text), Event::Done);
        assert_eq!(text, " hi there so f(x)");
    }

    /// The response id comes with the chunk's own reading (D100), as a separate reading
    /// of the chunk gave it: a string cut to 64 characters, anything else no id, and a
    /// malformed chunk leaves it as it was. Whatever else the chunk holds, the event is
    /// what `classify` says.
    #[test]
    fn the_id_is_read_with_the_chunk_and_a_repeated_key_is_malformed() {
        let with = |data: &[u8]| {
            let mut id = String::from("before");
            let event = classify_with_id(data, None, None, Some(&mut id));
            assert_eq!(event, classify(data), "{}", String::from_utf8_lossy(data));
            (event, id)
        };
        let chunk = br#"{"id":"chatcmpl-7","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"x"},"logprobs":null,"finish_reason":null}]}"#;
        assert_eq!(with(chunk), (Event::Token(Part::Answer), "chatcmpl-7".into()));
        let after = br#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2},"id":"cmpl-\u0041"}"#;
        assert!(matches!(with(after), (Event::Usage(_), id) if id == "cmpl-A"));
        let long = format!(r#"{{"id":"{}","choices":[]}}"#, "é".repeat(70));
        assert_eq!(with(long.as_bytes()).1, "é".repeat(64));
        assert_eq!(with(br#"{"id":7,"choices":[]}"#), (Event::Empty, String::new()));
        assert_eq!(with(br#"{"id":null,"choices":[]}"#), (Event::Empty, String::new()));
        assert_eq!(with(br#"{"id":"a","choices":[],"id":"b"}"#), (Event::Empty, String::new()));
        assert_eq!(with(br#"{"choices":[]}"#), (Event::Empty, String::new()));
        assert_eq!(with(br#"{"id":"e","error":{"message":"boom"}}"#), (Event::ServerError, "e".into()));
        assert_eq!(with(br#"{"id":"m","choices":"#), (Event::Malformed, "before".into()));
        assert_eq!(with(b"[DONE]"), (Event::Done, "before".into()));
        // A key given twice is malformed, as a struct read whole made it.
        for twice in [
            &br#"{"choices":[{"text":"a"}],"choices":[]}"#[..],
            br#"{"usage":null,"usage":null}"#,
            br#"{"error":null,"error":{}}"#,
        ] {
            assert_eq!(classify(twice), Event::Malformed, "{}", String::from_utf8_lossy(twice));
        }
        // The most a choice carries wins, of the last such choice's part; every choice's
        // text is kept, in order.
        let mut text = String::new();
        let two = br#"{"choices":[{"delta":{"content":"a"}},{"delta":{"reasoning":"b"}},{"delta":{}}]}"#;
        assert_eq!(classify_text(two, &mut text), Event::Token(Part::Reasoning));
        assert_eq!(text, "ab");
        assert_eq!(
            classify(br#"{"choices":[{"delta":{"content":"a"}},{"delta":{"role":"r"}}]}"#),
            Event::Token(Part::Answer)
        );
        assert_eq!(classify(br#"{"choices":null}"#), Event::Malformed);
        // What a chunk said before it turned out malformed is not kept.
        let mut seen = Seen::default();
        let cut = br#"{"choices":[{"text":"lost","finish_reason":"tool_calls"}],"usage":5}"#;
        assert_eq!(classify_with_id(cut, Some(&mut text), Some(&mut seen), None), Event::Malformed);
        assert_eq!((text.as_str(), seen.tool_finish, seen.finished), ("ab", false, false));
        // Nor what a server's error said besides, whichever key came first.
        for error in [
            &br#"{"error":{"message":"x"},"choices":[{"text":"lost","finish_reason":"tool_calls"}]}"#[..],
            br#"{"choices":[{"text":"lost","finish_reason":"stop"}],"error":{"message":"x"}}"#,
        ] {
            assert_eq!(classify_with_id(error, Some(&mut text), Some(&mut seen), None), Event::ServerError);
            assert_eq!((text.as_str(), seen.tool_finish, seen.finished), ("ab", false, false));
        }
        // An id that is not UTF-8 is read only when asked for, and is then malformed (JSON
        // text is UTF-8; the id was skipped unread before, and its own reading failed).
        let bad = b"{\"id\":\"\xff\",\"choices\":[]}";
        assert_eq!(classify(bad), Event::Empty);
        let mut id = String::from("before");
        assert_eq!(classify_with_id(bad, None, None, Some(&mut id)), Event::Malformed);
        assert_eq!(id, "before");
        assert_eq!(classify(br#"{"choices":[]} x"#), Event::Malformed);
    }
}
