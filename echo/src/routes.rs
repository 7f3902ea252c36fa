//! Request routing: `/echo`, `/v1/models`, `/metrics`, the completion routes
//! (handed to [`crate::completions`]), and 404 for everything else.

use std::sync::Arc;

use http::{Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Body;

use crate::body::{BoxError, ResBody, json_error, with_type};
use crate::completions;
use crate::kind::Kind;
use crate::pooling;
use crate::state::{ConnCtx, State};

/// Content type of `GET /metrics`: the Prometheus text format 0.0.4.
const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Which replica answers (`--replica-name`), on every response.
const SERVED_BY: http::HeaderName = http::HeaderName::from_static("x-served-by");

/// Route one request (its body from hyper, or read whole from an HTTP/3 stream); a
/// replica names itself on the answer.
pub(crate) async fn handle<B>(req: Request<B>, state: Arc<State>, conn: ConnCtx) -> Result<Response<ResBody>, BoxError>
where
    B: Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let served_by = state.served_by.clone();
    let mut resp = route(req, state, conn).await?;
    if let Some(name) = served_by {
        resp.headers_mut().insert(SERVED_BY, name);
    }
    Ok(resp)
}

async fn route<B>(req: Request<B>, state: Arc<State>, conn: ConnCtx) -> Result<Response<ResBody>, BoxError>
where
    B: Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    state.metrics.count_request();
    let method = req.method();
    match req.uri().path() {
        "/echo" if method == Method::POST => Ok(echo(req)),
        "/v1/completions" if method == Method::POST => completions::handle(req, state, conn, Kind::Completion).await,
        "/v1/chat/completions" if method == Method::POST => completions::handle(req, state, conn, Kind::Chat).await,
        "/v1/responses" if method == Method::POST => completions::handle(req, state, conn, Kind::Responses).await,
        "/v1/audio/transcriptions" | "/v1/audio/translations" if method == Method::POST => {
            completions::handle(req, state, conn, Kind::Transcription).await
        }
        "/v1/embeddings" | "/embeddings" | "/v1/pooling" | "/pooling" | "/v1/rerank" | "/rerank" | "/v2/rerank"
            if method == Method::POST =>
        {
            pooling::handle(req, state, conn).await
        }
        "/v1/models" if method == Method::GET => {
            Ok(with_type(ResBody::full(state.models_body.clone()), "application/json"))
        }
        "/metrics" if method == Method::GET => {
            let allowed = &state.config.metrics_allow_peer;
            if !allowed.is_empty() && !conn.peer.is_some_and(|ip| allowed.contains(&ip)) {
                return Ok(Response::builder()
                    .status(http::StatusCode::FORBIDDEN)
                    .body(ResBody::full(bytes::Bytes::from_static(b"metrics are not served to this address\n")))?);
            }
            Ok(with_type(ResBody::full(state.metrics.render()), METRICS_CONTENT_TYPE))
        }
        // Load balancer and Kubernetes probes, as vLLM's server answers them.
        "/health" if method == Method::GET => Ok(Response::new(ResBody::full(bytes::Bytes::new()))),
        "/ping" if method == Method::GET || method == Method::POST => {
            Ok(Response::new(ResBody::full(bytes::Bytes::new())))
        }
        "/version" if method == Method::GET => {
            let body = format!("{{\"version\":\"surge-echo {}\"}}", env!("CARGO_PKG_VERSION"));
            Ok(with_type(ResBody::full(body), "application/json"))
        }
        // vLLM's profiler: a stop without a start is refused, so a client's pairing shows.
        "/start_profile" if method == Method::POST => {
            state.profiling.store(true, std::sync::atomic::Ordering::Relaxed);
            Ok(Response::new(ResBody::full(bytes::Bytes::new())))
        }
        "/stop_profile" if method == Method::POST => {
            if state.profiling.swap(false, std::sync::atomic::Ordering::Relaxed) {
                Ok(Response::new(ResBody::full(bytes::Bytes::new())))
            } else {
                Ok(json_error(StatusCode::CONFLICT, "the profiler is not running"))
            }
        }
        // vLLM's reset: the prefix cache (--prefix-cache-tokens) empties.
        "/reset_prefix_cache" if method == Method::POST => {
            if let Some(cache) = &state.prefix_cache {
                cache.lock().expect("prefix cache lock").clear();
            }
            Ok(Response::new(ResBody::full(bytes::Bytes::new())))
        }
        _ => Ok(json_error(StatusCode::NOT_FOUND, "not found")),
    }
}

/// The request body, streamed straight back with the same content type.
fn echo<B>(mut req: Request<B>) -> Response<ResBody>
where
    B: Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let content_type = req.headers_mut().remove(header::CONTENT_TYPE);
    let mut resp = Response::new(ResBody::Echo(req.into_body().map_err(Into::into).boxed_unsync()));
    if let Some(ct) = content_type {
        resp.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    resp
}
