//! The checks every successful reply gets (D70): what a benchmark can be fooled by, as
//! MLPerf's audits look for it, counted on the row as anomalies and never turned into a
//! failure here. Cheap by design: a few comparisons of counts the decoder already has.
//!
//! - `no_finish_reason`: a completion or chat stream none of whose chunks said why it
//!   ended (a server that crashed into `[DONE]`, a proxy that rewrote the stream);
//! - `usage_mismatch`: the server's `usage.completion_tokens` differs from the token
//!   events the client counted (a server that miscounts, or one that packs several tokens
//!   into a chunk: speculative decoding, a tool parser's buffering);
//! - `short_output`: with `--ignore-eos`, fewer output tokens than `max_tokens` (the
//!   server ignored the request: MLPerf's TEST06 EOS check);
//! - `length_off`: more output tokens than `max_tokens`, or with `--ignore-eos` outside
//!   ±10 % of it (MLPerf's TEST09 bound on output lengths);
//! - `no_tokens`: a stream that ended as it should (its end marker or its usage) without
//!   one output token: a success with nothing in it (D50), with no TTFT;
//! - `wrong_request`: the reply's id names another of the run's requests (a server that
//!   names replies after `x-request-id`, as vLLM does, shows which request it answered:
//!   a proxy or server that mixed up streams, or a conversation's turn answered with
//!   another turn's reply).

use surge_proto::{Anomaly, Row};

/// What the decoder saw of a successful reply: whether it streamed, whether any chunk
/// carried a `finish_reason` (`None`: an API without one), the server's completion
/// tokens, and the client's token events.
#[derive(Debug, Clone, Copy)]
pub struct Stream {
    pub streamed: bool,
    pub finished: Option<bool>,
    pub usage_completion: Option<u32>,
    pub events: u32,
}

pub(crate) fn note(row: &mut Row, a: Anomaly) {
    row.anomalies.push(a as i32);
}

/// The stream's own checks, on a successful row.
pub fn of_stream(s: Stream, row: &mut Row) {
    // A stream that ended as it should and said nothing (D50: not a failure).
    if s.streamed && s.events == 0 {
        note(row, Anomaly::NoTokens);
    }
    if s.finished == Some(false) {
        note(row, Anomaly::NoFinishReason);
    }
    if let Some(u) = s.usage_completion
        && u != s.events
    {
        note(row, Anomaly::UsageMismatch);
    }
}

/// A reply whose id carries the run's request-id `prefix` (vLLM's `chatcmpl-<x-request-id>`)
/// must name this request: `<prefix><index>`, or a conversation turn's
/// `<prefix>conv-<session>-turn<t>`, after nothing or a `-`. An id without the prefix is
/// not judged. Reads the id in place: nothing is formatted.
pub fn of_id(prefix: &str, index: u64, session: Option<u64>, row: &mut Row) {
    let id = std::str::from_utf8(&row.response_id).unwrap_or_default();
    let Some(at) = id.find(prefix) else { return };
    let (head, rest) = (&id[..at], &id[at + prefix.len()..]);
    let number = |s: &str, want: u64| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && s.parse() == Ok(want);
    let named = match session {
        None => number(rest, index),
        Some(s) => rest
            .strip_prefix("conv-")
            .and_then(|r| r.split_once("-turn"))
            .is_some_and(|(a, t)| number(a, s) && number(t, index % surge_proto::TURN_STRIDE)),
    };
    if !(named && (head.is_empty() || head.ends_with('-'))) {
        note(row, Anomaly::WrongRequest);
    }
}

/// The length checks of a successful generating row that asked for `max_tokens` (0: it
/// named none).
pub fn of_length(max_tokens: u32, ignore_eos: bool, row: &mut Row) {
    row.max_tokens = max_tokens;
    if max_tokens == 0 {
        return;
    }
    let (out, max) = (u64::from(row.output_tokens), u64::from(max_tokens));
    if ignore_eos && out < max {
        note(row, Anomaly::ShortOutput);
    }
    // Within ±10 %: 10 x |out - max| <= max.
    if out > max || (ignore_eos && 10 * out.abs_diff(max) > max) {
        note(row, Anomaly::LengthOff);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(row: &Row) -> Vec<Anomaly> {
        row.anomalies().collect()
    }

    #[test]
    fn a_clean_stream_has_none_and_each_fault_its_kind() {
        let clean = Stream { streamed: true, finished: Some(true), usage_completion: Some(8), events: 8 };
        let mut row = Row { output_tokens: 8, ..Default::default() };
        of_stream(clean, &mut row);
        of_length(8, true, &mut row);
        assert!(row.anomalies.is_empty());
        assert_eq!(row.max_tokens, 8);

        let mut row = Row::default();
        of_stream(Stream { streamed: true, finished: Some(false), usage_completion: Some(9), events: 8 }, &mut row);
        assert_eq!(kinds(&row), [Anomaly::NoFinishReason, Anomaly::UsageMismatch]);
        let mut row = Row::default();
        of_stream(Stream { streamed: true, finished: None, usage_completion: None, events: 8 }, &mut row);
        assert!(row.anomalies.is_empty(), "no finish_reason to expect, no usage to compare");
        let mut row = Row::default();
        of_stream(Stream { streamed: true, finished: Some(true), usage_completion: None, events: 0 }, &mut row);
        assert_eq!(kinds(&row), [Anomaly::NoTokens]);
        let mut row = Row::default();
        of_stream(Stream { streamed: false, finished: None, usage_completion: None, events: 0 }, &mut row);
        assert!(row.anomalies.is_empty(), "a whole answer has no token events to count");
    }

    #[test]
    fn a_reply_naming_another_request_is_wrong() {
        let check = |id: &str| {
            let mut row = Row { response_id: id.to_owned().into_bytes().into(), ..Default::default() };
            of_id("bench-1-", 5002, Some(5), &mut row);
            kinds(&row)
        };
        assert_eq!(check("chatcmpl-bench-1-conv-5-turn2"), []);
        assert_eq!(check("bench-1-conv-5-turn2"), []);
        assert_eq!(check("chatcmpl-bench-1-conv-5-turn1"), [Anomaly::WrongRequest]);
        assert_eq!(check("chatcmpl-bench-1-conv-5-turn2-misdirected"), [Anomaly::WrongRequest]);
        assert_eq!(check("chatcmpl-xbench-1-conv-5-turn2"), [Anomaly::WrongRequest], "not on a boundary");
        assert_eq!(check("chatcmpl-1234"), [], "a server whose ids are its own is not judged");
        let single = |id: &str| {
            let mut row = Row { response_id: id.to_owned().into_bytes().into(), ..Default::default() };
            of_id("bench-1-", 17, None, &mut row);
            kinds(&row)
        };
        assert_eq!(single("cmpl-bench-1-17"), []);
        assert_eq!(single("cmpl-bench-1-117"), [Anomaly::WrongRequest]);
        assert_eq!(single("cmpl-bench-1-17-misdirected"), [Anomaly::WrongRequest]);
    }

    #[test]
    fn lengths_are_judged_against_max_tokens() {
        let check = |out: u32, max: u32, ignore_eos: bool| {
            let mut row = Row { output_tokens: out, ..Default::default() };
            of_length(max, ignore_eos, &mut row);
            kinds(&row)
        };
        assert_eq!(check(95, 100, true), [Anomaly::ShortOutput], "short, but within 10 %");
        assert_eq!(check(50, 100, true), [Anomaly::ShortOutput, Anomaly::LengthOff]);
        assert_eq!(check(50, 100, false), [], "EOS may end an answer when it is not ignored");
        assert_eq!(check(101, 100, false), [Anomaly::LengthOff], "never more than asked");
        assert_eq!(check(100, 100, true), []);
        assert_eq!(check(5, 0, true), [], "nothing asked, nothing judged");
    }
}
