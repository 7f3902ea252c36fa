//! Reasoning and tool calls measured apart (D49), folded row by row: TTFT keeps vLLM's
//! meaning (the first delta, a thought for a reasoning model); this adds what a user
//! waits for. Over the successful rows that reasoned: `ttfo` (to the first answer delta),
//! the reasoning's duration (first to last reasoning delta), the answer's own TPOT, the
//! reasoning deltas and the server's reasoning tokens; over rows with a tool call, the
//! time to its first delta. Nothing is kept for a run that never reasons or calls a tool.

use super::fold::{Fold, Whole};
use super::sample::Sample;
use crate::fleet::outcome::GlobalRow;

/// The samples, made at the first row that needs them.
#[derive(Debug, Clone)]
pub struct Reasoning {
    /// Successful rows that reasoned.
    pub rows: u64,
    /// Their reasoning deltas (client-counted).
    pub reasoning_events: u64,
    /// Their output tokens that were not reasoning deltas.
    pub answer_tokens: u64,
    /// `usage.completion_tokens_details.reasoning_tokens` summed, over the rows that had it.
    pub server_reasoning_tokens: Option<u64>,
    pub ttfo: Sample,
    pub duration: Sample,
    pub answer_tpot: Sample,
    /// Rows whose reply had a tool-call delta, the calls they opened, their deltas, and
    /// the time to the first one.
    pub tool_rows: u64,
    pub tool_calls: u64,
    pub tool_call_events: u64,
    pub tool_call: Sample,
    /// Replies that ended with `finish_reason: "tool_calls"`.
    pub tool_call_finishes: u64,
}

impl Reasoning {
    fn new() -> Self {
        Self {
            rows: 0,
            reasoning_events: 0,
            answer_tokens: 0,
            server_reasoning_tokens: None,
            ttfo: Sample::new(),
            duration: Sample::new(),
            answer_tpot: Sample::new(),
            tool_rows: 0,
            tool_calls: 0,
            tool_call_events: 0,
            tool_call: Sample::new(),
            tool_call_finishes: 0,
        }
    }

    /// Folds a successful row into `slot` (made when the row reasoned or called a tool).
    pub fn add(slot: &mut Option<Box<Reasoning>>, r: &GlobalRow) {
        let row = &r.row;
        if row.reasoning_events == 0 && row.tool_call_us.is_none() {
            return;
        }
        let s = slot.get_or_insert_with(|| Box::new(Reasoning::new()));
        if let Some(t) = row.tool_call_us {
            s.tool_rows += 1;
            s.tool_calls += u64::from(row.tool_calls);
            s.tool_call_events += u64::from(row.tool_call_events);
            s.tool_call.add(t as f64 / 1e6);
            s.tool_call_finishes += u64::from(row.finish_tool_calls);
        }
        if row.reasoning_events == 0 {
            return;
        }
        s.rows += 1;
        s.reasoning_events += u64::from(row.reasoning_events);
        let answer = row.output_tokens.saturating_sub(row.reasoning_events);
        s.answer_tokens += u64::from(answer);
        if let Some(n) = row.reasoning_tokens {
            *s.server_reasoning_tokens.get_or_insert(0) += u64::from(n);
        }
        s.duration.add(row.reasoning_us as f64 / 1e6);
        if let Some(t) = row.ttfo_us {
            let ttfo = t as f64 / 1e6;
            s.ttfo.add(ttfo);
            if answer > 1 {
                s.answer_tpot.add((r.e2el_s() - ttfo).max(0.0) / f64::from(answer - 1));
            }
        }
    }

    pub fn seal(&mut self) {
        for s in [&mut self.ttfo, &mut self.duration, &mut self.answer_tpot, &mut self.tool_call] {
            s.seal();
        }
    }

    fn drop_exact(&mut self) {
        for s in [&mut self.ttfo, &mut self.duration, &mut self.answer_tpot, &mut self.tool_call] {
            s.drop_exact();
        }
    }
}

/// The fold: nothing until a successful row reasons or calls a tool; made past the exact
/// budget, it starts without exact values.
#[derive(Debug, Default)]
pub struct ReasoningFold {
    r: Option<Box<Reasoning>>,
    inexact: bool,
}

impl Fold for ReasoningFold {
    type Out = Option<Box<Reasoning>>;
    fn row(&mut self, r: &GlobalRow) {
        if r.ok() {
            Reasoning::add(&mut self.r, r);
            if let (true, Some(s)) = (self.inexact, &mut self.r) {
                s.drop_exact();
            }
        }
    }
    fn drop_exact(&mut self) {
        self.inexact = true;
        if let Some(s) = &mut self.r {
            s.drop_exact();
        }
    }
    fn finish(mut self, _run: &Whole) -> Self::Out {
        if let Some(r) = &mut self.r {
            r.seal();
        }
        self.r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::Row;

    fn row(reasoning: u32, ttfo_ms: Option<u64>, out: u32, e2el_ms: u64) -> GlobalRow {
        GlobalRow {
            agent: 0,
            start_s: 0.0,
            intended_s: None,
            row: Row {
                reasoning_events: reasoning,
                reasoning_us: u64::from(reasoning) * 2_000,
                ttfo_us: ttfo_ms.map(|m| m * 1000),
                output_tokens: out,
                latency_us: e2el_ms * 1000,
                reasoning_tokens: Some(reasoning),
                ..Default::default()
            },
        }
    }

    #[test]
    fn a_run_without_reasoning_keeps_nothing_and_one_with_it_measures_the_answer() {
        let mut slot = None;
        Reasoning::add(&mut slot, &row(0, None, 16, 50));
        assert!(slot.is_none(), "nothing is made for a plain reply");
        // 10 reasoning deltas 2 ms apart from 20 ms, the answer from 42 ms: 6 answer tokens
        // to 52 ms, so the answer's TPOT is (52 - 42) / 5 = 2 ms.
        Reasoning::add(&mut slot, &row(10, Some(42), 16, 52));
        let mut s = *slot.expect("made");
        s.seal();
        assert_eq!((s.rows, s.reasoning_events, s.answer_tokens, s.server_reasoning_tokens), (1, 10, 6, Some(10)));
        assert!((s.ttfo.median_ms() - 42.0).abs() < 1e-9);
        assert!((s.duration.median_ms() - 20.0).abs() < 1e-9);
        assert!((s.answer_tpot.median_ms() - 2.0).abs() < 1e-9, "{}", s.answer_tpot.median_ms());
    }
}
