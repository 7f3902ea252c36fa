//! Where token counts came from, per row and for a whole run: `server_usage` (the
//! server's usage block), `tokenizer` (counted with `--tokenizer`), `event_count` (output
//! only: token-bearing events) or `client_estimate` (input only: words of the prompt).
//! A run reports the source of most of its successful rows, and the full tally.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use surge_proto::{Row, TokenSource};

/// Where token counts came from (`input_tokens_source`, `output_tokens_source`, the
/// tally's keys), in the order of their names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    ClientEstimate,
    EventCount,
    ServerUsage,
    Tokenizer,
    #[serde(rename = "", other)]
    Other,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClientEstimate => "client_estimate",
            Self::EventCount => "event_count",
            Self::ServerUsage => "server_usage",
            Self::Tokenizer => "tokenizer",
            Self::Other => "",
        }
    }
}

/// The result's name of a source.
pub fn name(s: TokenSource) -> Source {
    match s {
        TokenSource::ServerUsage => Source::ServerUsage,
        TokenSource::Tokenizer => Source::Tokenizer,
        TokenSource::EventCount => Source::EventCount,
        TokenSource::ClientEstimate | TokenSource::Unspecified => Source::ClientEstimate,
    }
}

/// A row's (input, output) sources; rows of agents that do not say fall back to
/// `usage_from_server`.
pub fn of(row: &Row) -> (Source, Source) {
    let fallback = |s: TokenSource, none: Source| match s {
        TokenSource::Unspecified if row.usage_from_server => Source::ServerUsage,
        TokenSource::Unspecified => none,
        s => name(s),
    };
    (fallback(row.input_source(), Source::ClientEstimate), fallback(row.output_source(), Source::EventCount))
}

/// Rows per source, for input and output counts.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub input: BTreeMap<Source, u64>,
    pub output: BTreeMap<Source, u64>,
}

fn majority(m: &BTreeMap<Source, u64>, none: Source) -> Source {
    m.iter().max_by_key(|(_, n)| **n).map_or(none, |(k, _)| *k)
}

impl Tally {
    pub fn add(&mut self, row: &Row) {
        let (i, o) = of(row);
        *self.input.entry(i).or_default() += 1;
        *self.output.entry(o).or_default() += 1;
    }

    /// The source of most input counts.
    pub fn input_source(&self) -> Source {
        majority(&self.input, Source::ClientEstimate)
    }

    /// The source of most output counts.
    pub fn output_source(&self) -> Source {
        majority(&self.output, Source::EventCount)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majority_and_fallback() {
        let mut t = Tally::default();
        assert_eq!((t.input_source(), t.output_source()), (Source::ClientEstimate, Source::EventCount));
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
        assert_eq!((t.input_source(), t.output_source()), (Source::Tokenizer, Source::Tokenizer));
        assert_eq!(t.input[&Source::ServerUsage], 2);
        assert_eq!(of(&Row::default()), (Source::ClientEstimate, Source::EventCount));
    }
}
