//! `surge-echo`: a fast mock OpenAI-compatible server, the yardstick against
//! which surge's load client is validated (served by `surge echo`).
//!
//! It shares no code with the client it measures. HTTP/1.1 (keep-alive) and
//! HTTP/2 (h2c, prior knowledge) are served on the same port, one tokio task
//! per connection; streamed bodies are polled directly by hyper, without a
//! task or channel per stream, so thousands of concurrent streams are cheap.
//!
//! # Routes
//!
//! - `POST /echo`: the request body, streamed back verbatim (200, same
//!   `content-type`), with no parsing and no copy.
//! - `GET /v1/models`: `{"object":"list","data":[{"id":MODEL,"object":"model","owned_by":"surge-echo"}]}`.
//! - `POST /v1/completions` and `POST /v1/chat/completions`: see below.
//! - `GET /metrics`: Prometheus text with `surge_echo_requests_total`,
//!   `surge_echo_requests_running`, `surge_echo_requests_waiting`,
//!   `surge_echo_tokens_total` and `surge_echo_prompt_tokens_total`; with
//!   `--metrics-flavor vllm` also vLLM's names for the same counts, each labelled
//!   `model_name="MODEL"`: `vllm:num_requests_running`, `vllm:num_requests_waiting`,
//!   `vllm:kv_cache_usage_perc` (running / slots, 0 without `--max-concurrent-streams`),
//!   `vllm:prompt_tokens_total`, `vllm:generation_tokens_total`,
//!   `vllm:request_success_total` and the histogram `vllm:time_to_first_token_seconds`
//!   (arrival to the write of the first output token, with vLLM's buckets).
//! - anything else: 404 with a JSON error.
//!
//! # Completions
//!
//! **Prompt tokens** are the number of whitespace-separated words (or, with
//! `--tokenizer PATH`, of tokens of that `tokenizer.json`, without special tokens) of the
//! prompt: for `/v1/completions` of `prompt` (a string; or an array whose
//! strings count their words, whose integers count 1 each as token ids, and
//! whose integer arrays count their length); for `/v1/chat/completions` the
//! sum over `messages` of the words of each `content` (a string, or the
//! `text` of each part of an array; null counts 0).
//!
//! **Output tokens** `n` = `--output-tokens`, else the request's
//! `max_completion_tokens` (chat) or `max_tokens`, else 16; it must be within
//! 1..=[`MAX_OUTPUT_TOKENS`]. Token texts cycle through a few words
//! (`" the"`, `" quick"`, ...), each with a leading space, so the output has
//! exactly `n` whitespace-separated words.
//!
//! **Schedule**: with `--max-concurrent-streams K` a request first waits, in
//! FIFO order, for one of K slots. From the moment it holds a slot, token `k`
//! (0-based) is sent at `ttft + k * itl` (cumulative absolute deadlines, so
//! no drift), each delay optionally jittered by `--jitter-ms`. A streamed
//! response (`"stream": true`) is `text/event-stream` with one token per
//! `data: {json}\n\n` event, the last with `"finish_reason":"length"`; then,
//! if `stream_options.include_usage` is true, a chunk with `"choices":[]`
//! and `usage`; then `data: [DONE]`. A non-streamed response is sent when
//! the last token is due, as one JSON object with the full text and `usage`.
//! A body that is not valid JSON or lacks `prompt` / `messages` gets a 400
//! with a JSON error.
//!
//! **Faults** (for tests) are chosen deterministically from `--seed` and the
//! number of the completion request: 500s, dropped connections, a malformed
//! event, streams cut off without `[DONE]`, stalls before the first token;
//! and `--close-after-stream` closes HTTP/1.1 connections after each stream.
//!
//! # Modules
//!
//! Imports flow one way, with no cycle: `server` (accept loop, connections) ->
//! `routes` -> `completions` -> `body` -> `sse`; beneath them the leaves
//! `state`, `kind`, `metrics` (and its `vllm` twins), `schedule`, `tokens`, `faults`,
//! `timer`, `arrival`, `config` and `counter`, none of which imports a module above it.
//! (The `arch` test of `surge-tests` checks that there is no cycle.)
//!
//! # Example
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let config = surge_echo::EchoConfig { ttft_ms: 50.0, itl_ms: 10.0, ..Default::default() };
//! let (tx, rx) = tokio::sync::oneshot::channel::<()>();
//! let server = tokio::spawn(surge_echo::serve(listener, config, async {
//!     let _ = rx.await;
//! }));
//! // ... drive load ...
//! let _ = tx.send(());
//! server.await.expect("server task")?;
//! # Ok(())
//! # }
//! ```

mod answers;
mod arrival;
mod audio;
mod body;
mod completions;
mod config;
mod counter;
mod faults;
mod h3server;
mod kind;
mod metrics;
mod parsed;
mod pooling;
mod prefix_cache;
mod routes;
mod schedule;
mod server;
mod sse;
mod state;
mod timer;
mod tls;
mod tokens;
mod vllm;

pub use config::{EchoArgs, EchoConfig, MAX_OUTPUT_TOKENS, MetricsFlavor};
pub use server::Ready;

/// Checks `config` and readies the server on `listener` (certificates made and written,
/// the HTTP/3 socket bound); [`Ready::run`] serves. Errors as [`serve`]'s.
pub fn prepare(listener: tokio::net::TcpListener, config: EchoConfig) -> std::io::Result<Ready> {
    server::prepare(listener, config)
}

/// Serve until `shutdown` resolves. Takes an already-bound listener so tests
/// bind 127.0.0.1:0.
///
/// When `shutdown` resolves the server stops accepting, drops its open
/// connections (in-flight responses are cut) and returns. Fails at once with
/// [`std::io::ErrorKind::InvalidInput`] if `config` does not pass
/// [`EchoConfig::validate`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: EchoConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    server::prepare(listener, config)?.run(shutdown).await
}
