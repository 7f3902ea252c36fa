//! One response's body, decoded without I/O (in quinn-proto's manner): bytes in, with the
//! time they arrived; the row's timing, counts and outcome out. The caller reads the
//! socket (`crate::engine::load::request`) and hands each chunk to [`Decoder::feed`]; a body that
//! broke off is [`Decoder::broke`]; [`Decoder::finish`] writes the row. Which API the
//! bytes speak is the template's [`Mode`]: an SSE token stream (completions and chat,
//! classified by [`super::openai`]; the Responses API by [`super::responses`]), one pooling
//! answer read whole ([`super::pooling`]), or a plain body whose first and last bytes are
//! its times. Tested here on bytes alone.

use crate::data::tokenizer::Tok;
use crate::engine::api::Mode;
use crate::engine::api::anomalies;
use crate::engine::api::micros::{gap_us, us};
use crate::engine::api::openai::{Counts, Event, Seen, classify_with_id, response_id};
use crate::engine::api::parts::Parts;
use crate::engine::api::pooling::{self, Answered};
use crate::engine::api::responses;
use crate::engine::api::sse::SseParser;
use crate::engine::ending::{self, Tally};
use std::time::Instant;
use surge_proto::{ErrorKind, Row, StreamEnd, TokenSource};

/// Most bytes of a row's error message (D1).
pub const MESSAGE_MAX: usize = 300;

/// `text` cut to [`MESSAGE_MAX`] bytes at a character boundary.
pub fn message(text: &str) -> String {
    let mut end = text.len().min(MESSAGE_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// The largest pooling answer read (a batch of 4,096-float embeddings as JSON is a few MB).
const ANSWER_MAX: usize = 64 << 20;
/// Most bytes of streamed text kept (for the tokenizer, the row, an accuracy check), and
/// of a row's gaps between token events (about 8 million of them): a reply past either
/// is too large. A row must fit the agent's 64 MiB messages to the coordinator, and an
/// endless stream kept its text and its gaps until the run's end.
pub const TEXT_MAX: usize = 16 << 20;

/// Whether reading goes on after a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    More,
    /// The body is too large to read further: the request has failed.
    Stop,
}

/// The state of one response's decoding.
#[derive(Debug)]
pub struct Decoder {
    mode: Mode,
    /// A 2xx status: its body is the answer; otherwise its start is the refusal's message.
    ok: bool,
    /// The request's start (st): no event is dated before it.
    st: Instant,
    /// The response's last byte so far (from its first: the head).
    last_byte: Instant,
    /// The streamed text, kept to re-count it with the tokenizer, to ship it in the row,
    /// or for the conversation's next turn.
    text: Option<String>,
    parser: SseParser,
    /// A pooling answer, read whole.
    answer: Vec<u8>,
    s: Stream,
    /// How the body ended when it broke off (a failed read).
    broke: Option<StreamEnd>,
    tally: Tally,
    /// What the server said when it refused (the start of the body), for the message.
    refusal: Vec<u8>,
    response_id: String,
    /// A `tool_calls` finish, and the calls when an agent loop keeps them.
    seen: Seen,
}

/// What the events said so far.
#[derive(Debug, Default)]
struct Stream {
    first: Option<Instant>,
    last: Option<Instant>,
    /// The gaps between token events, packed as the row carries them.
    itl_us: Vec<u8>,
    events: u32,
    /// Which part of the reply each token event was (D49).
    parts: Parts,
    usage: Option<Counts>,
    /// When a finish chunk with empty output came after the last token event (D10's
    /// refinement): the last token if usage counts one more than the events.
    finish: Option<Instant>,
    done: bool,
    error: Option<ErrorKind>,
}

/// Dates one token event: the first sets TTFT, each later one adds a gap.
fn token_event(at: Instant, first: &mut Option<Instant>, last: &mut Option<Instant>, itl_us: &mut Vec<u8>) {
    match *last {
        None => *first = Some(at),
        Some(prev) => surge_proto::gaps::push(itl_us, gap_us(at - prev)),
    }
    *last = Some(at);
}

impl Stream {
    /// One SSE event of the stream, read at `now`.
    fn event(&mut self, event: Event, now: Instant) {
        let token = match event {
            Event::Token(p) => Some(p),
            Event::Empty => None,
            Event::Finish => {
                self.finish = Some(now);
                None
            }
            Event::Usage(u) => {
                self.usage = Some(u);
                None
            }
            Event::TokenAndUsage(p, u) => {
                self.usage = Some(u);
                Some(p)
            }
            Event::FinishAndUsage(u) => {
                self.usage = Some(u);
                self.finish = Some(now);
                None
            }
            Event::Done => {
                self.done = true;
                None
            }
            Event::ServerError => {
                self.error.get_or_insert(ErrorKind::HttpStatus);
                None
            }
            Event::Malformed => {
                self.error.get_or_insert(ErrorKind::Malformed);
                None
            }
        };
        if let Some(part) = token {
            self.finish = None;
            self.events += 1;
            token_event(now, &mut self.first, &mut self.last, &mut self.itl_us);
            self.parts.saw(part, now);
        }
    }
}

impl Decoder {
    /// A response in `mode` with status `ok` (2xx or not) to a request started at `st`,
    /// whose head came at `head_at`; `keep_text`: keep the streamed text.
    pub fn new(mode: Mode, ok: bool, st: Instant, head_at: Instant, keep_text: bool) -> Self {
        Self::with_seen(mode, ok, st, head_at, keep_text, Seen::default())
    }

    /// [`Decoder::new`], keeping what `seen` asks for (an agent loop: the reply's calls).
    pub fn with_seen(mode: Mode, ok: bool, st: Instant, head_at: Instant, keep_text: bool, seen: Seen) -> Self {
        Self {
            mode,
            ok,
            st,
            last_byte: head_at,
            text: keep_text.then(String::new),
            parser: SseParser::default(),
            answer: Vec::new(),
            s: Stream::default(),
            broke: None,
            tally: Tally::default(),
            refusal: Vec::new(),
            response_id: String::new(),
            seen,
        }
    }

    /// Whether the stream's end (`[DONE]`, or the Responses API's last event) was seen.
    pub fn done(&self) -> bool {
        self.s.done
    }

    /// The response's last byte so far.
    pub fn last_byte(&self) -> Instant {
        self.last_byte
    }

    /// A chunk of the body, read at `arrived`.
    pub fn feed(&mut self, data: &[u8], arrived: Instant) -> Flow {
        let now = arrived.max(self.st);
        self.last_byte = self.last_byte.max(now);
        self.tally.bytes += data.len() as u64;
        if !self.ok {
            let room = MESSAGE_MAX.saturating_sub(self.refusal.len());
            self.refusal.extend_from_slice(&data[..data.len().min(room)]);
            return Flow::More;
        }
        if matches!(self.mode, Mode::Plain | Mode::Pooled) {
            self.s.first.get_or_insert(now);
            self.s.last = Some(now);
            if self.mode == Mode::Pooled {
                if self.answer.len() + data.len() > ANSWER_MAX {
                    self.s.error.get_or_insert(ErrorKind::BodyTooLarge);
                    return Flow::Stop;
                }
                self.answer.extend_from_slice(data);
            }
            return Flow::More;
        }
        let Self { mode, text, parser, tally, response_id, s, seen, .. } = self;
        let res = parser.feed(data, |ev| {
            tally.events += 1;
            // The server's id of the response, from its first chunk: read with the chunk
            // itself, except in the Responses API, whose events are read apart and their
            // top-level id by a reading of its own, as before.
            let want_id = response_id.is_empty();
            let event = match (&mut *text, *mode) {
                (t, Mode::Responses) => {
                    let event = responses::classify(ev, t.as_mut());
                    if want_id && !matches!(event, Event::Done | Event::Malformed) {
                        *response_id = self::response_id(ev).unwrap_or_default();
                    }
                    event
                }
                (t, _) => classify_with_id(ev, t.as_mut(), Some(seen), want_id.then_some(&mut *response_id)),
            };
            s.event(event, now);
        });
        if res.is_err() || self.text.as_ref().is_some_and(|t| t.len() > TEXT_MAX) || self.s.itl_us.len() > TEXT_MAX {
            self.s.error.get_or_insert(ErrorKind::BodyTooLarge);
            return Flow::Stop;
        }
        Flow::More
    }

    /// The body broke off: `kind` as the read failed, `end` how.
    pub fn broke(&mut self, kind: ErrorKind, end: StreamEnd) {
        self.s.error = Some(match kind {
            ErrorKind::Other | ErrorKind::ConnectionReset if self.s.done => ErrorKind::Other,
            ErrorKind::Other | ErrorKind::ConnectionReset => ErrorKind::Truncated,
            k => k,
        });
        self.broke = Some(end);
    }

    /// The body ended at `end` (read whole, or broken off): the row's times, counts and
    /// outcome. `head`: the response's status, version and headers (the headers name the
    /// peer of a cut stream); `tokenizer` re-counts the output when the server sends no
    /// usage; `keep_text`: the row carries the text. True when the request succeeded (its
    /// connection may serve another).
    pub fn finish(
        mut self,
        end: Instant,
        head: (http::StatusCode, http::Version, &http::HeaderMap),
        tokenizer: Option<&Tok>,
        keep_text: bool,
        row: &mut Row,
    ) -> bool {
        let (status, version, headers) = head;
        let (mode, st, ok) = (self.mode, self.st, self.ok);
        row.http_status = u32::from(status.as_u16());
        row.response_id = std::mem::take(&mut self.response_id).into_bytes().into();
        // vLLM's last token rides on its finish chunk, with "" for text when the stream
        // stops inside a character or on EOS: the server's count says whether that chunk
        // was one.
        if let (Some(at), Some(u)) = (self.s.finish, self.s.usage)
            && u.completion_tokens == self.s.events + 1
        {
            self.s.events += 1;
            token_event(at, &mut self.s.first, &mut self.s.last, &mut self.s.itl_us);
        }
        row.itl_us = std::mem::take(&mut self.s.itl_us).into();
        row.finish_tool_calls = self.seen.tool_finish;
        row.calls = self.seen.calls.take().unwrap_or_default();
        if self.s.error.is_none() && ok && mode.streams() && !self.s.done && self.s.usage.is_none() {
            self.s.error = Some(ErrorKind::Truncated);
            self.broke = Some(if self.tally.bytes == 0 { StreamEnd::EmptyBody } else { StreamEnd::CleanEnd });
        }
        // A 200 whose body broke off, or ended without the stream's end: say how and who.
        if ok
            && !self.s.done
            && let (Some(how), Some(kind)) = (self.broke, self.s.error)
        {
            let cut = ending::cut(how, &self.tally, ending::version_of(version), headers);
            if matches!(kind, ErrorKind::Truncated | ErrorKind::Timeout | ErrorKind::ConnectionReset) {
                row.error_message = message(&ending::message(&cut));
                row.cut = Some(cut);
            }
        }
        if !ok {
            self.s.error.get_or_insert(ErrorKind::HttpStatus);
            let said = String::from_utf8_lossy(&self.refusal);
            row.error_message = message(&format!("HTTP {}: {}", status.as_u16(), said.trim()));
        }
        // A pooling answer: its usage, or the server's error in a 200.
        let mut pooled_input = None;
        if self.s.error.is_none() && ok && mode == Mode::Pooled {
            match pooling::read(&self.answer) {
                Answered::Ok(n) => pooled_input = n,
                Answered::ServerError => self.s.error = Some(ErrorKind::HttpStatus),
                Answered::Malformed => self.s.error = Some(ErrorKind::Malformed),
            }
        }
        let ttft_us = self.s.first.map_or(0, |f| us(f - st));
        let latency_us = self.s.last.map_or_else(|| us(end - st), |l| us(l - st));
        if let Some(kind) = self.s.error {
            row.latency_us = us(end - st);
            row.ttft_us = ttft_us;
            row.set_error(kind);
            return false;
        }
        row.latency_us = latency_us;
        if mode == Mode::Pooled {
            // vLLM's pooling request: done when its answer is read; TTFT = E2EL.
            row.ttft_us = latency_us;
            if let Some(n) = pooled_input {
                row.input_tokens = n;
                row.usage_from_server = true;
                row.set_input_source(TokenSource::ServerUsage);
            }
            row.set_output_source(TokenSource::ServerUsage);
            return true;
        }
        row.ttft_us = ttft_us;
        self.s.parts.write(st, self.s.usage.as_ref(), row);
        self.counts(tokenizer, row);
        let stream = anomalies::Stream {
            streamed: mode.streams(),
            finished: (mode == Mode::Stream).then_some(self.seen.finished),
            usage_completion: self.s.usage.map(|u| u.completion_tokens),
            events: self.s.events,
        };
        anomalies::of_stream(stream, row);
        if keep_text {
            row.generated_text = self.text.unwrap_or_default();
        }
        true
    }

    /// A successful reply's token counts: the server's usage, else the text re-counted by
    /// the run's tokenizer, else the token events.
    fn counts(&self, tokenizer: Option<&Tok>, row: &mut Row) {
        match self.s.usage {
            Some(u) if self.mode.streams() => {
                row.input_tokens = u.prompt_tokens;
                row.output_tokens = u.completion_tokens;
                row.cached_tokens = u.cached_tokens;
                row.usage_from_server = true;
                row.set_input_source(TokenSource::ServerUsage);
                row.set_output_source(TokenSource::ServerUsage);
            }
            _ => match (tokenizer, &self.text) {
                (Some(tok), Some(t)) if self.mode.streams() => {
                    row.output_tokens = tok.count(t);
                    row.set_output_source(TokenSource::Tokenizer);
                }
                _ => {
                    row.output_tokens = self.s.events;
                    row.set_output_source(TokenSource::EventCount);
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const OK: http::StatusCode = http::StatusCode::OK;
    const H1: http::Version = http::Version::HTTP_11;

    /// Feeds `chunks` (body bytes, ms after the start) to a decoder of a request started
    /// at `st` whose head came 5 ms later, then finishes it at the last chunk.
    fn decode(mode: Mode, status: http::StatusCode, chunks: &[(&str, u64)]) -> (Row, bool) {
        let st = Instant::now();
        let at = |ms: u64| st + Duration::from_millis(ms);
        let mut d = Decoder::new(mode, status.is_success(), st, at(5), true);
        for (bytes, ms) in chunks {
            assert_eq!(d.feed(bytes.as_bytes(), at(*ms)), Flow::More);
        }
        let mut row = Row::default();
        let end = at(chunks.last().map_or(5, |c| c.1));
        let ok = d.finish(end, (status, H1, &http::HeaderMap::new()), None, true, &mut row);
        (row, ok)
    }

    fn chunk(text: &str) -> String {
        format!("data: {{\"id\":\"cmpl-1\",\"choices\":[{{\"index\":0,\"text\":\"{text}\"}}]}}\n\n")
    }

    #[test]
    fn a_stream_is_timed_by_its_chunks_and_counted_by_its_usage() {
        let usage =
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n";
        // Two events in one chunk share its time: a zero gap is the truth there.
        let two = chunk(" b") + &chunk(" c");
        let (row, ok) = decode(Mode::Stream, OK, &[(&chunk(" a"), 20), (&two, 35), (usage, 36)]);
        assert!(ok);
        assert_eq!(row.error(), ErrorKind::None);
        assert_eq!((row.ttft_us, row.latency_us), (20_000, 35_000), "the last token ends the request");
        assert_eq!(row.gaps().collect::<Vec<_>>(), [15_000, 0]);
        assert_eq!((row.input_tokens, row.output_tokens, row.usage_from_server), (9, 3, true));
        assert_eq!(row.generated_text, " a b c");
        assert_eq!(row.response_id_str(), "cmpl-1");
    }

    /// Text kept past TEXT_MAX: the reply is too large, a counted error, and the decoder
    /// stops reading (an 80 MB reply made a row no batch could carry, and the run invalid).
    #[test]
    fn kept_text_past_its_limit_is_a_body_too_large() {
        let st = Instant::now();
        let mut d = Decoder::new(Mode::Stream, true, st, st, true);
        let piece = chunk(&"x".repeat(1 << 20));
        let fed = (0..32).map(|_| d.feed(piece.as_bytes(), st)).position(|f| f == Flow::Stop);
        assert_eq!(fed, Some(TEXT_MAX >> 20), "stops at the first chunk past the limit");
        let mut row = Row::default();
        assert!(!d.finish(st, (OK, H1, &http::HeaderMap::new()), None, true, &mut row));
        assert_eq!(row.error(), ErrorKind::BodyTooLarge);
        // Without keeping the text, the same reply is read whole.
        let mut d = Decoder::new(Mode::Stream, true, st, st, false);
        assert!((0..32).all(|_| d.feed(piece.as_bytes(), st) == Flow::More));
        // Its gaps are bounded alike: events read together are a byte each (a zero gap), and
        // 2^16 of them a chunk pass 16 MiB at the 257th (2^24 + 2^16 - 1 bytes).
        let events = chunk("x").repeat(1 << 16);
        let mut d = Decoder::new(Mode::Stream, true, st, st, false);
        let fed = (0..300).map(|_| d.feed(events.as_bytes(), st)).position(|f| f == Flow::Stop);
        assert_eq!(fed, Some(256), "stops past 16 MiB of gaps");
    }

    #[test]
    fn a_stream_cut_between_events_is_truncated_and_says_how() {
        let (row, ok) = decode(Mode::Stream, OK, &[(&chunk(" a"), 20)]);
        assert!(!ok, "the connection is not reused");
        assert_eq!(row.error(), ErrorKind::Truncated);
        assert_eq!(row.ttft_us, 20_000, "what was measured stays");
        let cut = row.cut.expect("how it ended");
        assert_eq!(cut.end, StreamEnd::CleanEnd as i32);
        assert_eq!(cut.events, 1);
        assert!(!row.error_message.is_empty());
    }

    #[test]
    fn a_refusal_is_an_http_status_with_the_servers_words() {
        let (row, ok) = decode(Mode::Stream, http::StatusCode::SERVICE_UNAVAILABLE, &[("  overloaded\n", 7)]);
        assert!(!ok);
        assert_eq!(row.error(), ErrorKind::HttpStatus);
        assert_eq!(row.http_status, 503);
        assert_eq!(row.error_message, "HTTP 503: overloaded");
    }

    #[test]
    fn the_finish_chunk_is_the_last_token_when_usage_counts_one_more() {
        let finish = "data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"stop\"}]}\n\n";
        let usage =
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n";
        let (row, _) = decode(Mode::Stream, OK, &[(&chunk(" a"), 20), (finish, 30), (usage, 31)]);
        assert_eq!(row.output_tokens, 2);
        assert_eq!((row.latency_us, row.gaps().collect::<Vec<_>>()), (30_000, vec![10_000]));
        let usage = usage.replace("\"completion_tokens\":2", "\"completion_tokens\":1");
        let (row, _) = decode(Mode::Stream, OK, &[(&chunk(" a"), 20), (finish, 30), (&usage, 31)]);
        assert_eq!((row.latency_us, row.gap_count()), (20_000, 0), "an empty finish is not a token");
    }

    #[test]
    fn a_stream_with_no_token_is_an_anomaly_and_a_pooling_answer_is_read_whole() {
        // Ended as it should, said nothing: a success with no TTFT and the anomaly (D50).
        let empty = "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"stop\"}]}\n\n";
        let (row, ok) = decode(Mode::Stream, OK, &[(empty, 8), ("data: [DONE]\n\n", 9)]);
        assert!(ok);
        assert_eq!((row.error(), row.ttft_us, row.latency_us, row.output_tokens), (ErrorKind::None, 0, 9_000, 0));
        assert_eq!(row.anomalies().collect::<Vec<_>>(), [surge_proto::Anomaly::NoTokens]);
        // Nothing at all, not even its end: still a failure (D38).
        let (row, ok) = decode(Mode::Stream, OK, &[]);
        assert!(!ok);
        assert_eq!(row.error(), ErrorKind::Truncated);
        let answer = [("{\"data\":[{\"embedding\":[0.1,", 8), ("0.2]}],\"usage\":{\"prompt_tokens\":12}}", 11)];
        let (row, ok) = decode(Mode::Pooled, OK, &answer);
        assert!(ok);
        assert_eq!((row.ttft_us, row.latency_us, row.input_tokens), (11_000, 11_000, 12), "TTFT = E2EL, as vLLM's");
        let (row, _) = decode(Mode::Pooled, OK, &[("{\"error\":{\"message\":\"no\"}}", 8)]);
        assert_eq!(row.error(), ErrorKind::HttpStatus, "the server's error in a 200");
        let (row, _) = decode(Mode::Pooled, OK, &[("{\"data\":", 8)]);
        assert_eq!(row.error(), ErrorKind::Malformed);
    }

    #[test]
    fn a_body_that_breaks_off_after_the_end_is_not_truncated() {
        let st = Instant::now();
        let mut d = Decoder::new(Mode::Stream, true, st, st, false);
        let _ = d.feed((chunk(" a") + "data: [DONE]\n\n").as_bytes(), st + Duration::from_millis(3));
        d.broke(ErrorKind::ConnectionReset, StreamEnd::PeerClosed);
        let mut row = Row::default();
        assert!(!d.finish(st + Duration::from_millis(4), (OK, H1, &http::HeaderMap::new()), None, false, &mut row));
        assert_eq!(row.error(), ErrorKind::Other, "the answer was whole; the connection's end is not the reply's");
        let mut d = Decoder::new(Mode::Stream, true, st, st, false);
        let _ = d.feed(chunk(" a").as_bytes(), st + Duration::from_millis(3));
        d.broke(ErrorKind::ConnectionReset, StreamEnd::PeerClosed);
        let mut row = Row::default();
        d.finish(st + Duration::from_millis(4), (OK, H1, &http::HeaderMap::new()), None, false, &mut row);
        assert_eq!(row.error(), ErrorKind::Truncated);
        assert_eq!(row.cut.map(|c| c.end), Some(StreamEnd::PeerClosed as i32));
    }
}
