//! The server's responses: the one body type [`ResBody`] (a fixed buffer, the
//! request body streamed straight back for `/echo`, or a scheduled SSE stream),
//! its error type [`BoxError`], and the helpers that build whole responses
//! ([`with_type`], the OpenAI-style [`json_error`]).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::{Body, Frame, SizeHint};
use serde_json::json;

use crate::sse::SseBody;

/// Error type of response bodies (hyper aborts the stream on error).
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A response body.
pub(crate) enum ResBody {
    /// A complete body, sent as one frame (`None` once sent or when empty).
    Full(Option<Bytes>),
    /// The request body, echoed frame by frame without copying.
    Echo(UnsyncBoxBody<Bytes, BoxError>),
    /// A streamed completion.
    Sse(Box<SseBody>),
}

impl ResBody {
    /// A complete body.
    pub fn full(bytes: impl Into<Bytes>) -> Self {
        let bytes = bytes.into();
        Self::Full((!bytes.is_empty()).then_some(bytes))
    }
}

impl Body for ResBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            Self::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Self::Echo(incoming) => Pin::new(incoming).poll_frame(cx),
            Self::Sse(sse) => Pin::new(&mut **sse).poll_frame(cx).map(|frame| frame.map(|r| r.map_err(BoxError::from))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Full(bytes) => bytes.is_none(),
            Self::Echo(incoming) => incoming.is_end_stream(),
            Self::Sse(sse) => sse.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Full(bytes) => SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64)),
            Self::Echo(incoming) => incoming.size_hint(),
            Self::Sse(_) => SizeHint::default(),
        }
    }
}

/// A response with `body` and a `content-type` header.
pub(crate) fn with_type(body: ResBody, content_type: &'static str) -> Response<ResBody> {
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

    #[tokio::test]
    async fn full_body_yields_once_with_exact_size() {
        let body = ResBody::full("hello");
        assert_eq!(body.size_hint().exact(), Some(5));
        assert!(!body.is_end_stream());
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"hello");
        let empty = ResBody::full(Bytes::new());
        assert!(empty.is_end_stream());
        assert_eq!(empty.size_hint().exact(), Some(0));
    }

    #[tokio::test]
    async fn json_error_shape() {
        let resp = json_error(StatusCode::BAD_REQUEST, "bad \"thing\"");
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["error"]["message"], "bad \"thing\"");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["code"], 400);
    }
}
