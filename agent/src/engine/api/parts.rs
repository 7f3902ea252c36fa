//! Which part of a reply its token events were (D49): every delta is a token, as vLLM
//! counts it (D10), so TTFT is the first *thought* of a reasoning model; this notes when
//! the answer began (`ttfo_us`), how many deltas and how long the reasoning took, and when
//! the first tool-call delta came, for the row. A few comparisons per event, no allocation.

use crate::engine::api::openai::{Counts, Part};
use std::time::Instant;
use surge_proto::Row;

#[derive(Debug, Default)]
pub struct Parts {
    reasoning: u32,
    first_reasoning: Option<Instant>,
    last_reasoning: Option<Instant>,
    first_answer: Option<Instant>,
    first_tool: Option<Instant>,
    tool_calls: u32,
    tool_events: u32,
}

fn us(from: Instant, to: Instant) -> u64 {
    u64::try_from(to.saturating_duration_since(from).as_micros()).unwrap_or(u64::MAX)
}

impl Parts {
    /// A token event of `part` at `at`.
    #[inline]
    pub fn saw(&mut self, part: Part, at: Instant) {
        match part {
            Part::Answer => {
                self.first_answer.get_or_insert(at);
            }
            Part::Reasoning => {
                self.reasoning += 1;
                self.first_reasoning.get_or_insert(at);
                self.last_reasoning = Some(at);
            }
            Part::Tool | Part::ToolStart => {
                self.first_tool.get_or_insert(at);
                self.tool_events += 1;
                self.tool_calls += u32::from(part == Part::ToolStart);
            }
        }
    }

    /// Writes what was seen into the row of a request started at `start`; `usage` is the
    /// server's count, when it sent one.
    pub fn write(&self, start: Instant, usage: Option<&Counts>, row: &mut Row) {
        row.reasoning_events = self.reasoning;
        if let (Some(a), Some(b)) = (self.first_reasoning, self.last_reasoning) {
            row.reasoning_us = us(a, b);
        }
        // Without reasoning the first answer delta is the first token: TTFT says it.
        if self.reasoning > 0 {
            row.ttfo_us = self.first_answer.map(|a| us(start, a));
        }
        row.tool_call_us = self.first_tool.map(|t| us(start, t));
        row.tool_calls = self.tool_calls;
        row.tool_call_events = self.tool_events;
        row.reasoning_tokens = usage.and_then(|u| u.reasoning_tokens);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_answer_begins_after_the_reasoning() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut p = Parts::default();
        for ms in [20, 22, 24] {
            p.saw(Part::Reasoning, at(ms));
        }
        p.saw(Part::Answer, at(26));
        p.saw(Part::Answer, at(28));
        let mut row = Row::default();
        let usage = Counts { reasoning_tokens: Some(3), ..Default::default() };
        p.write(t0, Some(&usage), &mut row);
        assert_eq!((row.reasoning_events, row.reasoning_us, row.ttfo_us), (3, 4_000, Some(26_000)));
        assert_eq!((row.reasoning_tokens, row.tool_call_us), (Some(3), None));
        // A plain reply: no reasoning, no ttfo (TTFT is it).
        let mut plain = Parts::default();
        plain.saw(Part::Answer, at(5));
        plain.saw(Part::ToolStart, at(9));
        plain.saw(Part::Tool, at(10));
        let mut row = Row::default();
        plain.write(t0, None, &mut row);
        assert_eq!((row.reasoning_events, row.ttfo_us, row.tool_call_us), (0, None, Some(9_000)));
        assert_eq!((row.tool_calls, row.tool_call_events), (1, 2), "one call, two argument deltas");
    }
}
