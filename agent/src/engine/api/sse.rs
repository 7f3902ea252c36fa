//! Server-sent-events framing: turns a byte stream, split anywhere, into `data` payloads.
//!
//! The parser is incremental and zero-copy on the fast path: when a chunk holds whole
//! events, their single-line `data` payloads are handed out as slices of the chunk. Only
//! the unfinished tail of a chunk is copied, and re-scanned when the next chunk arrives.
//! Line endings `\n`, `\r\n` and `\r` are all accepted (a `\r` at the very end of the
//! available bytes waits for the next chunk, which may start with its `\n`). Comments
//! (`:`) and fields other than `data` are ignored. An event larger than the configured
//! limit is an error, never an unbounded buffer.

use memchr::memchr2;

/// Errors of SSE framing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// One event grew past the limit without its terminating blank line.
    #[error("an SSE event exceeded {limit} bytes")]
    EventTooLarge {
        /// The configured limit in bytes.
        limit: usize,
    },
}

/// Incremental SSE parser. Feed it chunks; it calls back once per complete event that
/// carried at least one `data` field.
#[derive(Debug)]
pub struct SseParser {
    /// Unconsumed bytes: the start of an event whose end has not arrived yet.
    pending: Vec<u8>,
    /// Scratch for events with several `data` lines (joined with `\n`).
    joined: Vec<u8>,
    limit: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new(16 << 20)
    }
}

impl SseParser {
    /// A parser refusing events larger than `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self { pending: Vec::new(), joined: Vec::new(), limit }
    }

    /// Bytes held back waiting for the rest of an event.
    pub fn buffered(&self) -> usize {
        self.pending.len()
    }

    /// Feeds one chunk, calling `on_data` with each complete event's data payload.
    pub fn feed(&mut self, chunk: &[u8], mut on_data: impl FnMut(&[u8])) -> Result<(), SseError> {
        if self.pending.is_empty() {
            let used = scan(chunk, &mut self.joined, &mut on_data);
            self.keep(&chunk[used..])
        } else {
            self.pending.extend_from_slice(chunk);
            let pending = std::mem::take(&mut self.pending);
            let used = scan(&pending, &mut self.joined, &mut on_data);
            let rest = pending[used..].to_vec();
            self.pending = pending;
            self.pending.clear();
            self.keep(&rest)
        }
    }

    fn keep(&mut self, rest: &[u8]) -> Result<(), SseError> {
        if rest.len() > self.limit {
            self.pending.clear();
            return Err(SseError::EventTooLarge { limit: self.limit });
        }
        self.pending.extend_from_slice(rest);
        Ok(())
    }
}

/// Scans whole events in `buf`; returns how many bytes were consumed (up to the start
/// of the first incomplete event).
fn scan(buf: &[u8], joined: &mut Vec<u8>, on_data: &mut impl FnMut(&[u8])) -> usize {
    let mut pos = 0; // start of the current line
    let mut event_start = 0;
    // The first data line of the current event, as a range of `buf`.
    let mut first: Option<(usize, usize)> = None;
    let mut multi = false;
    while pos < buf.len() {
        let Some(rel) = memchr2(b'\n', b'\r', &buf[pos..]) else { break };
        let eol = pos + rel;
        let next = if buf[eol] == b'\r' {
            match buf.get(eol + 1) {
                None => break, // a '\n' may follow in the next chunk
                Some(b'\n') => eol + 2,
                Some(_) => eol + 1,
            }
        } else {
            eol + 1
        };
        let line = &buf[pos..eol];
        if line.is_empty() {
            if let Some((s, e)) = first.take() {
                if multi {
                    on_data(joined);
                    joined.clear();
                } else {
                    on_data(&buf[s..e]);
                }
            }
            multi = false;
            event_start = next;
        } else if let Some(value) = data_value(line) {
            let s = pos + (line.len() - value.len());
            match first {
                None => first = Some((s, eol)),
                Some((fs, fe)) => {
                    if !multi {
                        joined.clear();
                        joined.extend_from_slice(&buf[fs..fe]);
                        multi = true;
                    }
                    joined.push(b'\n');
                    joined.extend_from_slice(value);
                }
            }
        }
        pos = next;
    }
    if first.is_some() || multi {
        joined.clear();
    }
    if event_start == pos && pos == buf.len() {
        return buf.len();
    }
    event_start
}

/// The value of a `data` field line, or `None` for any other line.
fn data_value(line: &[u8]) -> Option<&[u8]> {
    let rest = line.strip_prefix(b"data")?;
    match rest.first() {
        None => Some(rest),
        Some(b':') => {
            let v = &rest[1..];
            Some(v.strip_prefix(b" ").unwrap_or(v))
        }
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<Vec<u8>> {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, |d| out.push(d.to_vec())).unwrap();
        }
        out
    }

    #[test]
    fn whole_events() {
        let s = b"data: {\"a\":1}\n\ndata: [DONE]\n\n";
        assert_eq!(parse_all(&[s]), vec![b"{\"a\":1}".to_vec(), b"[DONE]".to_vec()]);
    }

    #[test]
    fn crlf_and_cr_and_comments_and_multiline() {
        let s = b": ping\r\n\r\nevent: x\rdata:a\rdata: b\r\rid: 3\ndata\n\n";
        assert_eq!(parse_all(&[s]), vec![b"a\nb".to_vec(), b"".to_vec()]);
    }

    #[test]
    fn cr_at_chunk_end_waits_for_lf() {
        let out = parse_all(&[b"data: x\r", b"\n\r", b"\ndata: y\n\n"]);
        assert_eq!(out, vec![b"x".to_vec(), b"y".to_vec()]);
    }

    #[test]
    fn incomplete_event_is_not_emitted() {
        assert!(parse_all(&[b"data: x\n"]).is_empty());
    }

    #[test]
    fn oversize_event_is_an_error() {
        let mut p = SseParser::new(8);
        let err = p.feed(b"data: 0123456789", |_| {}).unwrap_err();
        assert_eq!(err, SseError::EventTooLarge { limit: 8 });
    }

    fn stream_strategy() -> impl Strategy<Value = Vec<u8>> {
        let line_end = prop_oneof![Just("\n"), Just("\r\n"), Just("\r")];
        let event = (proptest::collection::vec("[a-z{}\":, ]{0,12}", 1..3), line_end, proptest::bool::ANY).prop_map(
            |(datas, nl, comment)| {
                let mut e = String::new();
                if comment {
                    e.push_str(": keepalive");
                    e.push_str(nl);
                }
                for d in datas {
                    e.push_str("data: ");
                    e.push_str(&d);
                    e.push_str(nl);
                }
                e.push_str(nl);
                e
            },
        );
        proptest::collection::vec(event, 0..8).prop_map(|v| v.concat().into_bytes())
    }

    proptest! {
        #[test]
        fn any_split_gives_the_same_events(
            stream in stream_strategy(),
            cuts in proptest::collection::vec(0usize..400, 0..12),
        ) {
            let whole = parse_all(&[&stream]);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (stream.len() + 1)).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut prev = 0;
            for c in cuts {
                chunks.push(&stream[prev..c]);
                prev = c;
            }
            chunks.push(&stream[prev..]);
            prop_assert_eq!(parse_all(&chunks), whole.clone());
            // and byte by byte
            let bytes: Vec<&[u8]> = stream.chunks(1).collect();
            prop_assert_eq!(parse_all(&bytes), whole);
        }
    }
}
