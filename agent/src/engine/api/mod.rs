//! The API layer: which API a run speaks (vLLM's backends, D44), read once from the
//! workload's backend, what a request body holds and how its response is read, without
//! I/O: [`decode`] turns a response's bytes into a row (D67) by each API's event meaning
//! ([`openai`] for completions and chat, [`responses`], [`pooling`], [`audio`]'s
//! request) over [`sse`]; `parts` says which part of a reply a token was, `anomalies`
//! checks every reply (D70).

pub(crate) mod anomalies;
pub mod audio;
pub mod decode;
pub(crate) mod micros;
pub mod openai;
pub(crate) mod parts;
pub mod pooling;
pub mod responses;
pub mod sse;

use surge_proto::Backend;

/// The engine's closed set of APIs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `/v1/completions`: `prompt`, streamed.
    Completions,
    /// `/v1/chat/completions`: `messages`, streamed.
    Chat,
    /// `/v1/responses`: `input`, streamed as typed events.
    Responses,
    /// `/v1/audio/transcriptions` or translations: a multipart form, streamed as chat.
    Audio,
    /// `/v1/embeddings` with `input` (a string or a list), not streamed.
    Embeddings,
    /// `/v1/embeddings` with chat `messages`.
    EmbeddingsChat,
    /// Infinity's `/embeddings`: `input` without vLLM's truncation field.
    InfinityEmbeddings,
    /// vLLM's `/pooling`: `input`.
    Pooling,
    /// vLLM's `/rerank`: a query and its documents.
    Rerank,
    /// The prompt posted as the body (`http`).
    Plain,
}

impl Api {
    /// The API of a backend; `None` for an unset backend.
    pub fn of(b: Backend) -> Option<Self> {
        Some(match b {
            Backend::Unspecified => return None,
            Backend::Openai => Api::Completions,
            Backend::OpenaiChat => Api::Chat,
            Backend::Http => Api::Plain,
            Backend::OpenaiResponses => Api::Responses,
            Backend::OpenaiAudio => Api::Audio,
            Backend::OpenaiEmbeddings => Api::Embeddings,
            Backend::OpenaiEmbeddingsChat => Api::EmbeddingsChat,
            Backend::InfinityEmbeddings => Api::InfinityEmbeddings,
            Backend::VllmPooling => Api::Pooling,
            Backend::VllmRerank => Api::Rerank,
        })
    }

    /// How its responses are read.
    pub fn mode(self) -> Mode {
        match self {
            Api::Completions | Api::Chat | Api::Audio => Mode::Stream,
            Api::Responses => Mode::Responses,
            Api::Embeddings | Api::EmbeddingsChat | Api::InfinityEmbeddings | Api::Pooling | Api::Rerank => {
                Mode::Pooled
            }
            Api::Plain => Mode::Plain,
        }
    }

    /// A pooling API: one JSON answer, no tokens generated (vLLM's POOLING task).
    pub fn pools(self) -> bool {
        self.mode() == Mode::Pooled
    }

    /// Whether a request may carry several inputs (`--random-batch-size`).
    pub fn batches(self) -> bool {
        matches!(self, Api::Embeddings | Api::InfinityEmbeddings | Api::Pooling | Api::Rerank)
    }

    /// The request's content type.
    pub fn content_type(self) -> &'static str {
        match self {
            Api::Plain => "text/plain",
            Api::Audio => crate::engine::api::audio::CONTENT_TYPE,
            _ => "application/json",
        }
    }
}

/// How the body of a response is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// An OpenAI completion stream: SSE events, tokens, usage, `[DONE]`.
    Stream,
    /// A Responses API stream: typed events, usage on `response.completed`.
    Responses,
    /// One JSON answer read whole (the pooling backends): its end is the request's end
    /// (vLLM's TTFT and E2EL alike), its `usage.prompt_tokens` the input count.
    Pooled,
    /// Any body: first byte and end.
    Plain,
}

impl Mode {
    /// Whether responses are token streams.
    pub fn streams(self) -> bool {
        matches!(self, Mode::Stream | Mode::Responses)
    }
}
