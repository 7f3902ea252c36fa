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
}
