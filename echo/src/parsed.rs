//! What the completion routes read from a request, whatever its form (a JSON body, or an
//! audio route's multipart form): a leaf shared by the parsers and the handler.

/// A parsed, validated completion request.
#[derive(Debug, PartialEq)]
pub(crate) struct Parsed {
    pub model: Option<String>,
    pub prompt_tokens: u64,
    pub max_tokens: Option<u64>,
    pub stream: bool,
    pub include_usage: bool,
    /// Chat: `image_url` parts carrying a `data:image/...` URL.
    pub images: u64,
    /// Chat: `tool` messages, and those naming no call of the assistant message before.
    pub tool_results: u64,
    pub tool_results_unmatched: u64,
}
