//! Where token counts came from, per row and for a whole run: `server_usage` (the
//! server's usage block), `tokenizer` (counted with `--tokenizer`), `event_count` (output
//! only: token-bearing events) or `client_estimate` (input only: words of the prompt).
//! A run reports the source of most of its successful rows, and the full tally.

use std::collections::BTreeMap;
use surge_proto::{Row, TokenSource};

/// The result-file name of a source.
pub fn name(s: TokenSource) -> &'static str {
    match s {
        TokenSource::ServerUsage => "server_usage",
        TokenSource::Tokenizer => "tokenizer",
        TokenSource::EventCount => "event_count",
        TokenSource::ClientEstimate | TokenSource::Unspecified => "client_estimate",
    }
}

/// A row's (input, output) sources; rows of agents that do not say fall back to
/// `usage_from_server`.
pub fn of(row: &Row) -> (&'static str, &'static str) {
    let fallback = |s: TokenSource, none: &'static str| match s {
        TokenSource::Unspecified if row.usage_from_server => "server_usage",
        TokenSource::Unspecified => none,
        s => name(s),
    };
    (fallback(row.input_source(), "client_estimate"), fallback(row.output_source(), "event_count"))
}

/// Rows per source, for input and output counts.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub input: BTreeMap<&'static str, u64>,
    pub output: BTreeMap<&'static str, u64>,
}

fn majority(m: &BTreeMap<&'static str, u64>, none: &'static str) -> &'static str {
    m.iter().max_by_key(|(_, n)| **n).map_or(none, |(k, _)| k)
}

impl Tally {
    pub fn add(&mut self, row: &Row) {
        let (i, o) = of(row);
        *self.input.entry(i).or_default() += 1;
        *self.output.entry(o).or_default() += 1;
    }

    /// The source of most input counts.
    pub fn input_source(&self) -> &'static str {
        majority(&self.input, "client_estimate")
    }

    /// The source of most output counts.
    pub fn output_source(&self) -> &'static str {
        majority(&self.output, "event_count")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majority_and_fallback() {
        let mut t = Tally::default();
        assert_eq!((t.input_source(), t.output_source()), ("client_estimate", "event_count"));
        let mut usage = Row { usage_from_server: true, ..Default::default() };
        t.add(&usage);
        usage.set_input_source(TokenSource::ServerUsage);
        usage.set_output_source(TokenSource::ServerUsage);
        t.add(&usage);
        let mut tok = Row::default();
        tok.set_input_source(TokenSource::Tokenizer);
        tok.set_output_source(TokenSource::Tokenizer);
        for _ in 0..3 {
            t.add(&tok);
        }
        assert_eq!((t.input_source(), t.output_source()), ("tokenizer", "tokenizer"));
        assert_eq!(t.input["server_usage"], 2);
        assert_eq!(of(&Row::default()), ("client_estimate", "event_count"));
    }
}
