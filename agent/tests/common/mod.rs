//! What the engine-level tests share: the request template of a streamed completion to a
//! target.

use std::time::Duration;
use surge_agent::engine::load::request::{Mode, RequestTemplate};
use surge_agent::engine::target::Target;

/// A streamed `/v1/completions` request to `target`, nothing else set but `read_timeout`.
pub fn stream_template(target: &Target, read_timeout: Option<Duration>) -> RequestTemplate {
    RequestTemplate {
        uri_h1: target.uri("/v1/completions", false),
        uri_h2: target.uri("/v1/completions", true),
        authority: http::HeaderValue::from_str(&target.authority).unwrap(),
        content_type: http::HeaderValue::from_static("application/json"),
        headers: Vec::new(),
        mode: Mode::Stream,
        tokenizer: None,
        trace: None,
        request_id_prefix: None,
        session_header: None,
        keep_text: false,
        read_timeout,
        keep_calls: false,
        replica_header: None,
        ignore_eos: false,
    }
}
