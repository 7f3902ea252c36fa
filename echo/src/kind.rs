//! Which OpenAI API a completion request uses, and the names that follow from
//! it (response id prefix, chunk `object`). A leaf: used by the routing, the
//! completion handler and the SSE chunk formatter alike.

/// Which OpenAI API a request uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `/v1/completions`
    Completion,
    /// `/v1/chat/completions`
    Chat,
    /// `/v1/responses` (typed events, usage on `response.completed`, no `[DONE]`)
    Responses,
    /// `/v1/audio/transcriptions` and translations (a multipart form in, chat-style
    /// chunks out)
    Transcription,
}

impl Kind {
    /// Prefix of the response `id` (followed by the request's number).
    pub fn id_prefix(self) -> &'static str {
        match self {
            Kind::Completion => "cmpl-",
            Kind::Chat => "chatcmpl-",
            Kind::Responses => "resp_",
            Kind::Transcription => "trsc-",
        }
    }

    /// The `object` of a streamed chunk.
    pub fn chunk_object(self) -> &'static str {
        match self {
            Kind::Completion => "text_completion",
            Kind::Chat => "chat.completion.chunk",
            Kind::Responses => "response",
            Kind::Transcription => "transcription.chunk",
        }
    }
}
