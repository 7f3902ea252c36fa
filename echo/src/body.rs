//! The one response body type of the server: a fixed buffer, the request
//! body streamed straight back (`/echo`), or a scheduled SSE stream.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::sse::SseBody;

/// Error type of response bodies (hyper aborts the stream on error).
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A response body.
pub(crate) enum ResBody {
    /// A complete body, sent as one frame (`None` once sent or when empty).
    Full(Option<Bytes>),
    /// The request body, echoed frame by frame without copying.
    Echo(Incoming),
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
            Self::Echo(incoming) => {
                Pin::new(incoming).poll_frame(cx).map(|frame| frame.map(|r| r.map_err(BoxError::from)))
            }
            Self::Sse(sse) => Pin::new(&mut **sse).poll_frame(cx),
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
}
