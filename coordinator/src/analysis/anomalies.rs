//! Anomalies (D70), folded row by row: each kind's count over the successful rows, and
//! up to [`EXAMPLES`] examples of each (which request, on which agent, what it said).
//! Memory is fixed: a count and three examples per kind.

use super::fold::{Fold, Whole};
use crate::fleet::outcome::GlobalRow;
use std::collections::BTreeMap;
use surge_proto::Anomaly;

/// Examples kept per kind.
pub const EXAMPLES: usize = 3;

/// An anomaly's name in results and rows.
pub fn name(a: Anomaly) -> &'static str {
    match a {
        Anomaly::NoFinishReason => "no_finish_reason",
        Anomaly::UsageMismatch => "usage_mismatch",
        Anomaly::ShortOutput => "short_output",
        Anomaly::LengthOff => "length_off",
        Anomaly::Nondeterministic => "nondeterministic",
        Anomaly::WrongRequest => "wrong_request",
        Anomaly::NoTokens => "no_tokens",
        Anomaly::Unspecified => "unspecified",
    }
}

/// Every kind, in the order results list them.
pub const KINDS: [Anomaly; 7] = [
    Anomaly::NoTokens,
    Anomaly::NoFinishReason,
    Anomaly::UsageMismatch,
    Anomaly::ShortOutput,
    Anomaly::LengthOff,
    Anomaly::Nondeterministic,
    Anomaly::WrongRequest,
];

/// One example of a kind.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    pub seq: u64,
    pub agent: usize,
    pub detail: String,
}

/// What the run's replies did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Anomalies {
    /// Successful rows with at least one anomaly.
    pub rows: u64,
    pub counts: BTreeMap<&'static str, u64>,
    pub examples: BTreeMap<&'static str, Vec<Example>>,
}

fn detail(a: Anomaly, r: &GlobalRow) -> String {
    let row = &r.row;
    let events = if row.output_tokens > 0 { row.gap_count() + 1 } else { 0 };
    match a {
        Anomaly::NoFinishReason => "no chunk carried a finish_reason".to_string(),
        Anomaly::UsageMismatch => {
            format!("usage.completion_tokens {} against {events} streamed token events", row.output_tokens)
        }
        Anomaly::ShortOutput => {
            format!("{} output tokens of max_tokens {} (ignore_eos)", row.output_tokens, row.max_tokens)
        }
        Anomaly::LengthOff => format!("{} output tokens for max_tokens {}", row.output_tokens, row.max_tokens),
        Anomaly::Nondeterministic => "the same request answered with other text than its first reply".to_string(),
        Anomaly::WrongRequest => format!("the reply's id {:?} names another request", row.response_id_str()),
        Anomaly::NoTokens => "the stream ended as it should without an output token".to_string(),
        Anomaly::Unspecified => String::new(),
    }
}

/// The fold: every run has it (a clean run reports zeros).
#[derive(Debug, Default)]
pub struct AnomaliesFold(Anomalies);

impl Fold for AnomaliesFold {
    type Out = Anomalies;

    fn row(&mut self, r: &GlobalRow) {
        if r.row.anomalies.is_empty() || !r.ok() || r.row.probe {
            return;
        }
        self.0.rows += 1;
        for a in r.row.anomalies() {
            let kind = name(a);
            *self.0.counts.entry(kind).or_default() += 1;
            let ex = self.0.examples.entry(kind).or_default();
            if ex.len() < EXAMPLES {
                ex.push(Example { seq: r.row.index, agent: r.agent, detail: detail(a, r) });
            }
        }
    }

    fn finish(self, _run: &Whole) -> Anomalies {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::Row;

    fn row(index: u64, anomalies: &[Anomaly]) -> GlobalRow {
        let row = Row {
            index,
            output_tokens: 4,
            max_tokens: 8,
            itl_us: surge_proto::gaps::pack(&[1; 3]),
            anomalies: anomalies.iter().map(|&a| a as i32).collect(),
            ..Default::default()
        };
        GlobalRow { agent: 1, start_s: 0.0, intended_s: None, row }
    }

    #[test]
    fn counts_each_kind_and_keeps_three_examples() {
        let mut f = AnomaliesFold::default();
        for k in 0..5 {
            f.row(&row(k, &[Anomaly::ShortOutput, Anomaly::LengthOff]));
        }
        f.row(&row(9, &[Anomaly::UsageMismatch]));
        f.row(&row(10, &[]));
        let mut failed = row(11, &[Anomaly::NoFinishReason]);
        failed.row.set_error(surge_proto::ErrorKind::Timeout);
        f.row(&failed);
        let a = f.finish(&Whole::default());
        assert_eq!(a.rows, 6, "a failed row is a failure, not an anomaly");
        assert_eq!(a.counts.get("short_output"), Some(&5));
        assert_eq!(a.counts.get("length_off"), Some(&5));
        assert_eq!(a.counts.get("usage_mismatch"), Some(&1));
        assert_eq!(a.counts.get("no_finish_reason"), None);
        assert_eq!(a.examples["short_output"].len(), EXAMPLES);
        assert_eq!(a.examples["short_output"][0].detail, "4 output tokens of max_tokens 8 (ignore_eos)");
        assert_eq!(a.examples["usage_mismatch"][0].detail, "usage.completion_tokens 4 against 4 streamed token events");
    }
}
