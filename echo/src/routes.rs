//! Shared server state and request routing: `/echo`, `/v1/models`,
//! `/metrics`, the completion routes, and 404 for everything else.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use serde_json::json;
use tokio::sync::{Notify, Semaphore};

use crate::arrival::ArrivalClock;
use crate::body::{BoxError, ResBody};
use crate::completions::{self, Kind};
use crate::config::EchoConfig;
use crate::counter::Counter;
use crate::metrics::Metrics;
use crate::timer::Timer;

/// State shared by all connections of one server.
#[derive(Debug)]
pub(crate) struct State {
    pub config: EchoConfig,
    pub metrics: Arc<Metrics>,
    /// Completion requests seen so far (numbers requests for ids and faults).
    pub completions: AtomicU64,
    /// Completion slots (`--max-concurrent-streams`).
    pub slots: Option<Arc<Semaphore>>,
    /// Wakes streams and non-streamed responses at their token deadlines.
    pub timer: Timer,
    /// Counts prompt tokens (words or `--tokenizer`).
    pub counter: Counter,
    /// The `/v1/models` body, rendered once.
    models_body: Bytes,
}

impl State {
    pub fn new(config: EchoConfig, timer: Timer, counter: Counter) -> Self {
        let models = json!({
            "object": "list",
            "data": [{"id": config.model, "object": "model", "owned_by": "surge-echo"}],
        });
        Self {
            slots: config.max_concurrent_streams.map(|k| Arc::new(Semaphore::new(k))),
            models_body: Bytes::from(serde_json::to_vec(&models).unwrap_or_default()),
            metrics: Arc::new(Metrics::default()),
            completions: AtomicU64::new(0),
            timer,
            counter,
            config,
        }
    }
}

/// What a request handler knows about its connection.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConnCtx {
    /// The close-after-stream signal, when that mode is on.
    pub close_notify: Option<Arc<Notify>>,
    /// When the connection's latest bytes arrived (the kernel's stamp).
    pub arrival: ArrivalClock,
}

/// Route one request.
pub(crate) async fn handle(
    req: Request<Incoming>,
    state: Arc<State>,
    conn: ConnCtx,
) -> Result<Response<ResBody>, BoxError> {
    state.metrics.requests_total.fetch_add(1, Relaxed);
    let method = req.method();
    match req.uri().path() {
        "/echo" if method == Method::POST => Ok(echo(req)),
        "/v1/completions" if method == Method::POST => completions::handle(req, state, conn, Kind::Completion).await,
        "/v1/chat/completions" if method == Method::POST => completions::handle(req, state, conn, Kind::Chat).await,
        "/v1/models" if method == Method::GET => {
            Ok(with_type(ResBody::full(state.models_body.clone()), "application/json"))
        }
        "/metrics" if method == Method::GET => {
            Ok(with_type(ResBody::full(state.metrics.render()), "text/plain; version=0.0.4; charset=utf-8"))
        }
        _ => Ok(json_error(StatusCode::NOT_FOUND, "not found")),
    }
}

/// The request body, streamed straight back with the same content type.
fn echo(mut req: Request<Incoming>) -> Response<ResBody> {
    let content_type = req.headers_mut().remove(header::CONTENT_TYPE);
    let mut resp = Response::new(ResBody::Echo(req.into_body()));
    if let Some(ct) = content_type {
        resp.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    resp
}

fn with_type(body: ResBody, content_type: &'static str) -> Response<ResBody> {
    let mut resp = Response::new(body);
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// An OpenAI-style JSON error: `{"error":{"message","type","code"}}`.
pub(crate) fn json_error(status: StatusCode, message: &str) -> Response<ResBody> {
    let kind = if status.is_server_error() {
        "server_error"
    } else if status == StatusCode::NOT_FOUND {
        "not_found_error"
    } else {
        "invalid_request_error"
    };
    let body = json!({"error": {"message": message, "type": kind, "code": status.as_u16()}});
    let mut resp = with_type(ResBody::full(serde_json::to_vec(&body).unwrap_or_default()), "application/json");
    *resp.status_mut() = status;
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[test]
    fn models_body_lists_the_model() {
        let state = State::new(
            EchoConfig { model: "my\"model".to_owned(), ..EchoConfig::default() },
            Timer::new().unwrap(),
            Counter::Words,
        );
        let v: serde_json::Value = serde_json::from_slice(&state.models_body).unwrap();
        assert_eq!(v["object"], "list");
        assert_eq!(v["data"][0]["id"], "my\"model");
        assert_eq!(v["data"][0]["object"], "model");
        assert_eq!(v["data"][0]["owned_by"], "surge-echo");
    }

    #[tokio::test]
    async fn json_error_shape() {
        let resp = json_error(StatusCode::BAD_REQUEST, "bad \"thing\"");
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["error"]["message"], "bad \"thing\"");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["code"], 400);
    }
}
