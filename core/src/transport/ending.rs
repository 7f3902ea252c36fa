//! How a response body ended, when it ended badly: a clean end with nothing in it, a clean
//! end without `[DONE]`, the peer closing the connection (FIN), a reset (TCP RST or an
//! HTTP/2 / HTTP/3 stream reset), or surge's own read timeout (D38).
//!
//! A stream cut by a reverse proxy looks, to a client, like one cut by the server: the
//! kind stays `truncated` (or `connection_reset`, `timeout`: the counts and exit codes keep
//! their meaning). What tells them apart is here: the ending, the events and bytes that
//! came before it, the HTTP version and the response's `Server` and `Via` headers, which a
//! proxy fills with its own name. [`Tally`] gathers them while the body is read and turns
//! them into the row's `cut` and its one-line message.

use surge_proto::{ErrorKind, HttpVersion, StreamCut, StreamEnd};

/// Why reading a body failed: the row's error kind and how the stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadError {
    pub kind: ErrorKind,
    pub end: StreamEnd,
}

impl ReadError {
    pub fn new(kind: ErrorKind, end: StreamEnd) -> Self {
        Self { kind, end }
    }
}

/// Most bytes kept of a `Server` or `Via` header.
const HEADER_MAX: usize = 100;

/// How a hyper error (HTTP/1.1 or HTTP/2) ended the body it broke.
pub fn end_of_hyper(err: &hyper::Error) -> StreamEnd {
    use std::error::Error as _;
    let mut src = err.source();
    while let Some(e) = src {
        if let Some(h2e) = e.downcast_ref::<h2::Error>() {
            if let Some(io) = h2e.get_io() {
                return end_of_io(io.kind());
            }
            // A RST_STREAM from the peer, or its GOAWAY for a stream it will not finish.
            if h2e.is_go_away() && h2e.reason() == Some(h2::Reason::NO_ERROR) {
                return StreamEnd::PeerClosed;
            }
            return StreamEnd::Reset;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return end_of_io(io.kind());
        }
        src = e.source();
    }
    if err.is_incomplete_message() {
        StreamEnd::PeerClosed
    } else if err.is_timeout() {
        StreamEnd::ReadTimeout
    } else {
        StreamEnd::Unspecified
    }
}

/// An I/O error's ending: the kernel says reset or end of file.
fn end_of_io(kind: std::io::ErrorKind) -> StreamEnd {
    match kind {
        std::io::ErrorKind::ConnectionReset
        | std::io::ErrorKind::ConnectionAborted
        | std::io::ErrorKind::BrokenPipe => StreamEnd::Reset,
        std::io::ErrorKind::UnexpectedEof => StreamEnd::PeerClosed,
        std::io::ErrorKind::TimedOut => StreamEnd::ReadTimeout,
        _ => StreamEnd::Unspecified,
    }
}

/// The `HttpVersion` of a response.
pub fn version_of(v: http::Version) -> HttpVersion {
    match v {
        http::Version::HTTP_2 => HttpVersion::HttpVersion2,
        http::Version::HTTP_3 => HttpVersion::HttpVersion3,
        http::Version::HTTP_11 | http::Version::HTTP_10 | http::Version::HTTP_09 => HttpVersion::HttpVersion11,
        _ => HttpVersion::Unspecified,
    }
}

/// `HTTP/1.1`, `HTTP/2`, `HTTP/3` (`""` when unknown).
pub fn version_name(v: HttpVersion) -> &'static str {
    match v {
        HttpVersion::HttpVersion11 => "HTTP/1.1",
        HttpVersion::HttpVersion2 => "HTTP/2",
        HttpVersion::HttpVersion3 => "HTTP/3",
        HttpVersion::Unspecified => "",
    }
}

/// Who ended a stream that ended this way: the peer (the server, or a proxy in front of
/// it: its `Server`/`Via` say which) or surge itself (results: `output::sets::StreamEnd::by`).
fn ended_by(e: StreamEnd) -> &'static str {
    match e {
        StreamEnd::ReadTimeout => "client",
        StreamEnd::Unspecified => "unknown",
        StreamEnd::EmptyBody | StreamEnd::CleanEnd | StreamEnd::PeerClosed | StreamEnd::Reset => "peer",
    }
}

/// Every value of a header, `", "`-joined and cut to [`HEADER_MAX`] bytes.
fn header(headers: &http::HeaderMap, name: http::header::HeaderName) -> String {
    let mut out = String::new();
    for v in headers.get_all(name) {
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str(&String::from_utf8_lossy(v.as_bytes()));
    }
    let mut end = out.len().min(HEADER_MAX);
    while !out.is_char_boundary(end) {
        end -= 1;
    }
    out.truncate(end);
    out
}

/// What is counted of a body while it is read, to describe it if it is cut.
#[derive(Debug, Default)]
pub struct Tally {
    /// SSE events received, of any kind.
    pub events: u32,
    /// Body bytes received.
    pub bytes: u64,
}

/// The row's `cut` for a body that ended with `end` after `tally`, on a response of
/// `version` with `headers`.
pub fn cut(end: StreamEnd, tally: &Tally, version: HttpVersion, headers: &http::HeaderMap) -> StreamCut {
    StreamCut {
        end: end as i32,
        events: tally.events,
        bytes: tally.bytes,
        version: version as i32,
        server: header(headers, http::header::SERVER),
        via: header(headers, http::header::VIA),
    }
}

/// The row's message for a cut stream: how it ended and who ended it, with the response's
/// version, `Server` and `Via`. The counts are left out (they are in the `cut` itself), so
/// every stream cut the same way by the same peer has the same message and is counted as
/// one error example. The row cuts it to its 300 bytes (`request::message`).
pub fn message(c: &StreamCut) -> String {
    let how = match c.end() {
        StreamEnd::EmptyBody => "the body ended cleanly right after the response head, empty (no event, no [DONE])",
        StreamEnd::CleanEnd => "the body ended cleanly without [DONE] or usage",
        StreamEnd::PeerClosed => "the peer closed the connection (FIN) before the body ended",
        StreamEnd::Reset => "the peer reset the connection or the stream (RST) before the body ended",
        StreamEnd::ReadTimeout => "no byte came for the read timeout: surge stopped waiting",
        StreamEnd::Unspecified => "the body broke off for a reason the transport did not say",
    };
    let mut m = format!("stream cut, ended by the {}: {how}", ended_by(c.end()));
    let version = version_name(c.version());
    if !version.is_empty() {
        m.push_str("; ");
        m.push_str(version);
    }
    if !c.server.is_empty() {
        m.push_str(", Server: ");
        m.push_str(&c.server);
    }
    if !c.via.is_empty() {
        m.push_str(", Via: ");
        m.push_str(&c.via);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, http::HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn a_cut_names_its_ending_its_version_and_every_server_and_via() {
        let h = headers(&[("server", "Caddy"), ("server", "surge-echo"), ("via", "1.1 edge")]);
        let c = cut(StreamEnd::EmptyBody, &Tally::default(), HttpVersion::HttpVersion11, &h);
        assert_eq!((c.server.as_str(), c.via.as_str()), ("Caddy, surge-echo", "1.1 edge"));
        let m = message(&c);
        assert!(
            m.starts_with("stream cut, ended by the peer: the body ended cleanly right after the response head, empty"),
            "{m}"
        );
        assert!(m.ends_with("; HTTP/1.1, Server: Caddy, surge-echo, Via: 1.1 edge"), "{m}");
        let t = cut(
            StreamEnd::ReadTimeout,
            &Tally { events: 3, bytes: 90 },
            HttpVersion::HttpVersion2,
            &http::HeaderMap::new(),
        );
        assert!(message(&t).starts_with("stream cut, ended by the client: no byte came"), "{}", message(&t));
        assert_eq!((t.events, t.bytes), (3, 90));
    }

    #[test]
    fn io_errors_map_to_resets_ends_of_file_and_timeouts() {
        assert_eq!(end_of_io(std::io::ErrorKind::ConnectionReset), StreamEnd::Reset);
        assert_eq!(end_of_io(std::io::ErrorKind::BrokenPipe), StreamEnd::Reset);
        assert_eq!(end_of_io(std::io::ErrorKind::UnexpectedEof), StreamEnd::PeerClosed);
        assert_eq!(end_of_io(std::io::ErrorKind::TimedOut), StreamEnd::ReadTimeout);
    }

    #[test]
    fn a_long_header_is_cut_at_a_character_boundary() {
        let long = "é".repeat(80);
        let mut h = http::HeaderMap::new();
        h.insert("server", http::HeaderValue::from_bytes(long.as_bytes()).unwrap());
        let c = cut(StreamEnd::Reset, &Tally::default(), HttpVersion::HttpVersion3, &h);
        assert!(c.server.len() <= HEADER_MAX && c.server.chars().all(|ch| ch == 'é'));
    }
}
