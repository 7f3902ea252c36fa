//! One client connection, whatever carries it: an HTTP/1.1 or HTTP/2 connection (hyper
//! 1.x, over TCP or rustls) or an HTTP/3 one (`h3` over QUIC). The request loop sees only
//! [`Conn::send`] and [`Conn::chunk`]: the same row, timing points and error kinds for
//! every transport. A multiplexed connection's I/O runs in a task of its own; an
//! HTTP/1.1 connection's is polled by the request that holds it (`Driver`), so a request
//! costs no hand-over between tasks. Opening connections is `connector`'s, sharing them
//! `pool`'s, the target `target`'s and its TLS `tls`'s.

use super::ending::{ReadError, end_of_hyper};
use super::h3;
use super::ioclock::IoClock;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use std::task::Poll;
use std::time::Instant;
use surge_proto::{ErrorKind, StreamEnd};
use tokio_util::sync::CancellationToken;

/// Which HTTP version carries the requests (`--http-version`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// Not forced: HTTP/1.1 for http; for https, what ALPN agrees (h2 or http/1.1).
    Auto,
    Http1,
    Http2,
    Http3,
}

/// The request half of one client connection.
pub enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
    H3(h3::Sender),
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Sender::H1(_) => "Sender::H1",
            Sender::H2(_) => "Sender::H2",
            Sender::H3(_) => "Sender::H3",
        })
    }
}

impl Sender {
    /// Another handle on the same connection, for a multiplexed one.
    pub fn share(&self) -> Option<Sender> {
        match self {
            Sender::H1(_) => None,
            Sender::H2(s) => Some(Sender::H2(s.clone())),
            Sender::H3(s) => Some(Sender::H3(s.clone())),
        }
    }
}

pub use super::opening::Opening;

/// One client connection and the time of its latest socket read.
#[derive(Debug)]
pub struct Conn {
    pub sender: Sender,
    pub clock: IoClock,
    /// How it was opened, until the first request on it takes it (that request's
    /// `connecting` and `tls_handshaking`); `None` for a connection opened ahead of the run.
    pub opened: Option<Opening>,
    /// Cancelled once the connection has ended and dropped its requests.
    pub gone: CancellationToken,
    /// An HTTP/1.1 connection's I/O, driven by the request that holds the connection
    /// (`None` for a multiplexed one, whose own task drives it, and once it has ended).
    pub driver: Option<Driver>,
}

/// hyper's future of an HTTP/1.1 connection, polled by the task of the request using
/// the connection rather than by a task of its own: no hand-over between two tasks for
/// each request, response head and body chunk. Idle in the pool, nobody polls it; a close
/// by the server is seen when the next request readies the connection (a reconnect).
pub struct Driver(pub std::pin::Pin<Box<dyn Future<Output = ()> + Send>>);

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Driver")
    }
}

/// Runs `f` while driving the connection's I/O; `None` if the connection ended while
/// `f` was still waiting (its requests are then never answered).
async fn driven<F: Future>(driver: &mut Option<Driver>, f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = f.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        let Some(d) = driver.as_mut() else { return Poll::Ready(None) };
        if d.0.as_mut().poll(cx).is_ready() {
            *driver = None;
        }
        // What the connection just did (written, read) may have completed `f`.
        match f.as_mut().poll(cx) {
            Poll::Ready(out) => Poll::Ready(Some(out)),
            Poll::Pending if driver.is_none() => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// A response's body, read chunk by chunk whatever carries it.
pub enum Body {
    Hyper(hyper::body::Incoming, IoClock),
    H3(Box<h3::Stream>),
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Body::Hyper(..) => "Body::Hyper",
            Body::H3(_) => "Body::H3",
        })
    }
}

/// A response's head: what the request loop reads of it.
#[derive(Debug)]
pub struct Head {
    pub status: http::StatusCode,
    pub version: http::Version,
    /// Kept (a move, not a copy) to name the peer if the body is cut (`Server`, `Via`).
    pub headers: http::HeaderMap,
    /// When it arrived: the socket read that brought it (HTTP/1.1, HTTP/2), or when
    /// quinn handed it over (HTTP/3).
    pub arrived: Instant,
    /// When the request's last byte was handed over, where the connection says (HTTP/3).
    pub sent: Option<Instant>,
}

impl Head {
    fn of<B>(resp: http::Response<B>, arrived: Instant, sent: Option<Instant>) -> (Self, B) {
        let (parts, body) = resp.into_parts();
        (Self { status: parts.status, version: parts.version, headers: parts.headers, arrived, sent }, body)
    }
}

impl Body {
    /// The next chunk of data and when it arrived (`None`: the body ended cleanly).
    pub async fn chunk(&mut self) -> Option<Result<(Bytes, Instant), ReadError>> {
        match self {
            Body::Hyper(body, clock) => loop {
                match body.frame().await? {
                    // Dated by the socket read that brought it (see ioclock.rs).
                    Ok(frame) => match frame.into_data() {
                        Ok(data) => return Some(Ok((data, clock.arrival()))),
                        Err(_) => continue,
                    },
                    Err(e) => return Some(Err(ReadError::new(kind_of(&e), end_of_hyper(&e)))),
                }
            },
            Body::H3(stream) => h3::chunk(stream).await,
        }
    }
}

/// Classifies a hyper error by its innermost I/O cause.
fn kind_of(err: &hyper::Error) -> ErrorKind {
    use std::error::Error as _;
    let mut src = err.source();
    while let Some(e) = src {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::BrokenPipe => ErrorKind::ConnectionReset,
                std::io::ErrorKind::TimedOut => ErrorKind::Timeout,
                _ => ErrorKind::Other,
            };
        }
        src = e.source();
    }
    if err.is_incomplete_message() || err.is_canceled() {
        ErrorKind::ConnectionReset
    } else if err.is_timeout() {
        ErrorKind::Timeout
    } else {
        ErrorKind::Other
    }
}

impl Conn {
    pub fn is_closed(&self) -> bool {
        match &self.sender {
            Sender::H1(s) => s.is_closed() || self.driver.is_none(),
            Sender::H2(s) => s.is_closed(),
            Sender::H3(s) => s.is_closed() || self.gone.is_cancelled(),
        }
    }

    /// Whether requests share this connection (HTTP/2, HTTP/3).
    pub fn is_multiplexed(&self) -> bool {
        !matches!(self.sender, Sender::H1(_))
    }

    /// Waits until the connection can take a request; false if it cannot any more.
    pub async fn ready(&mut self) -> bool {
        match &mut self.sender {
            Sender::H1(s) => matches!(driven(&mut self.driver, s.ready()).await, Some(Ok(()))),
            Sender::H2(s) => s.ready().await.is_ok(),
            Sender::H3(s) => !s.is_closed() && !self.gone.is_cancelled(),
        }
    }

    /// The next chunk of `body`, a response on this connection (see [`Body::chunk`]).
    pub async fn chunk(&mut self, body: &mut Body) -> Option<Result<(Bytes, Instant), ReadError>> {
        if !matches!(self.sender, Sender::H1(_)) {
            return body.chunk().await;
        }
        // The connection ended before the body said why: the peer closed it.
        driven(&mut self.driver, body.chunk())
            .await
            .unwrap_or(Some(Err(ReadError::new(ErrorKind::ConnectionReset, StreamEnd::PeerClosed))))
    }

    /// Sends a request and waits for the response head.
    pub async fn send(&mut self, req: http::Request<Bytes>) -> Result<(Head, Body), ErrorKind> {
        let hyper = |r: Result<http::Response<hyper::body::Incoming>, hyper::Error>, clock: &IoClock| {
            r.map(|resp| {
                // Dated by the socket read that brought it (see ioclock.rs).
                let (head, body) = Head::of(resp, clock.arrival(), None);
                (head, Body::Hyper(body, clock.clone()))
            })
            .map_err(|e| kind_of(&e))
        };
        match &mut self.sender {
            Sender::H1(s) => match driven(&mut self.driver, s.send_request(req.map(Full::new))).await {
                Some(r) => hyper(r, &self.clock),
                None => Err(ErrorKind::ConnectionReset),
            },
            Sender::H2(s) => hyper(s.send_request(req.map(Full::new)).await, &self.clock),
            // Boxed: see `Connector::connect`.
            Sender::H3(s) => Box::pin(h3::send(s, req))
                .await
                .map(|(resp, stream, sent)| (Head::of(resp, Instant::now(), Some(sent)).0, Body::H3(Box::new(stream)))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ended() -> Option<Driver> {
        Some(Driver(Box::pin(async {})))
    }

    /// A connection that ends while a request still waits on it releases the request
    /// (`None`: a reset), whatever hyper does with the request's callback.
    #[tokio::test]
    async fn a_connection_that_ends_releases_what_waits_on_it() {
        let mut driver = ended();
        let out = tokio::time::timeout(Duration::from_secs(5), driven(&mut driver, std::future::pending::<()>())).await;
        assert_eq!(out.expect("released"), None);
        assert!(driver.is_none(), "the ended connection is not polled again");
        // Once ended, a request that can still complete does; one that cannot is released.
        assert_eq!(driven(&mut driver, async { 7 }).await, Some(7));
        assert_eq!(driven(&mut driver, std::future::pending::<()>()).await, None);
    }

    /// The connection is driven while the request waits: a request that needs the
    /// connection to make progress completes.
    #[tokio::test]
    async fn a_request_completes_once_its_connection_has_done_its_part() {
        let (tx, rx) = tokio::sync::oneshot::channel::<u8>();
        let mut tx = Some(tx);
        let mut polls = 0;
        // Its first poll is woken again (as by socket readiness); its second answers.
        let mut driver = Some(Driver(Box::pin(std::future::poll_fn(move |cx| {
            polls += 1;
            match polls {
                1 => cx.waker().wake_by_ref(),
                2 => drop(tx.take().map(|tx| tx.send(9))),
                _ => {}
            }
            Poll::<()>::Pending
        }))));
        let out = tokio::time::timeout(Duration::from_secs(5), driven(&mut driver, rx));
        assert_eq!(out.await.expect("completed").map(Result::ok), Some(Some(9)));
        assert!(driver.is_some(), "the connection is still up");
    }
}
