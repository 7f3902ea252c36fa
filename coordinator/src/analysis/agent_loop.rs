//! Agent loops (D65), folded row by row: per step index (0: a turn's first request, the
//! user's; k: its k-th tool step) the requests' counts and latencies (`per_step_metrics`,
//! like `per_turn_metrics`), the replies that called tools and those that answered, the
//! tool latencies waited, and per session (from the row that ended it, which carries its
//! totals) its steps, tool time and model time. Nothing is kept per session.

use super::conversations::Turn;
use super::fold::{Fold, Whole};
use super::sample::Sample;
use crate::fleet::outcome::GlobalRow;

/// Step indices broken down one by one; later ones count in the totals only.
pub const MAX_STEP_METRICS: usize = 64;

/// What the agent loops of a run came to.
#[derive(Debug, Clone)]
pub struct AgentLoop {
    /// By step index.
    pub steps: Vec<Turn>,
    /// Requests that were tool steps (step > 0).
    pub tool_steps: u64,
    /// Successful replies that ended in tool calls, and those that answered.
    pub tool_call_replies: u64,
    pub answers: u64,
    /// The tool latency waited before each step.
    pub tool_wait: Sample,
    /// Per ended session: its steps (a count folded as "seconds"), its tool time, its
    /// model time.
    pub sessions: u64,
    pub session_steps: Sample,
    pub session_tool: Sample,
    pub session_model: Sample,
    /// Past the exact budget: steps made from now on keep no exact values.
    inexact: bool,
}

impl Default for AgentLoop {
    fn default() -> Self {
        Self {
            steps: Vec::new(),
            tool_steps: 0,
            tool_call_replies: 0,
            answers: 0,
            tool_wait: Sample::light(),
            sessions: 0,
            session_steps: Sample::light(),
            session_tool: Sample::light(),
            session_model: Sample::light(),
            inexact: false,
        }
    }
}

impl Fold for AgentLoop {
    type Out = Option<AgentLoop>;

    fn row(&mut self, r: &GlobalRow) {
        if r.row.session.is_none() {
            return;
        }
        let k = r.row.step as usize;
        if k < MAX_STEP_METRICS {
            if self.steps.len() <= k {
                let made = self.steps.len();
                self.steps.resize_with(k + 1, Turn::new);
                if self.inexact {
                    self.steps[made..].iter_mut().for_each(Turn::drop_exact);
                }
            }
            self.steps[k].add(r);
        }
        if k > 0 {
            self.tool_steps += 1;
            self.tool_wait.add(r.row.tool_wait_us as f64 / 1e6);
        }
        if r.ok() {
            if r.row.finish_tool_calls {
                self.tool_call_replies += 1;
            } else {
                self.answers += 1;
            }
        }
        if let Some(end) = &r.row.session_end {
            self.sessions += 1;
            self.session_steps.add(f64::from(end.steps));
            self.session_tool.add(end.tool_wait_us as f64 / 1e6);
            self.session_model.add(end.model_us as f64 / 1e6);
        }
    }

    fn drop_exact(&mut self) {
        self.inexact = true;
        self.steps.iter_mut().for_each(Turn::drop_exact);
        for s in [&mut self.tool_wait, &mut self.session_steps, &mut self.session_tool, &mut self.session_model] {
            s.drop_exact();
        }
    }

    fn finish(mut self, run: &Whole) -> Self::Out {
        if run.sends == 0 {
            return None;
        }
        self.steps.iter_mut().for_each(Turn::seal);
        for s in [&mut self.tool_wait, &mut self.session_steps, &mut self.session_tool, &mut self.session_model] {
            s.seal();
        }
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::{Row, SessionEnd};

    fn row(turn: u32, step: u32, calls: bool, end: Option<SessionEnd>) -> GlobalRow {
        GlobalRow {
            agent: 0,
            start_s: 0.0,
            intended_s: None,
            row: Row {
                ttft_us: 10_000 + u64::from(step) * 1_000,
                latency_us: 20_000,
                output_tokens: 4,
                session: Some(1),
                turn,
                step,
                tool_wait_us: if step > 0 { 50_000 } else { 0 },
                finish_tool_calls: calls,
                session_end: end,
                ..Default::default()
            },
        }
    }

    #[test]
    fn steps_replies_and_sessions_are_counted_apart() {
        let mut f = AgentLoop::default();
        let end = SessionEnd { steps: 2, tool_wait_us: 100_000, model_us: 80_000, ..Default::default() };
        for r in [row(0, 0, true, None), row(0, 1, true, None), row(0, 2, false, None), row(1, 0, false, Some(end))] {
            f.row(&r);
        }
        let a = f.finish(&Whole { sends: 4, ..Whole::default() }).expect("a run that sent");
        assert_eq!((a.tool_steps, a.tool_call_replies, a.answers, a.sessions), (2, 2, 2, 1));
        let per_step: Vec<u64> = a.steps.iter().map(|s| s.completed).collect();
        assert_eq!(per_step, vec![2, 1, 1], "two user turns, one first step, one second");
        assert!((a.steps[2].ttft.median_ms() - 12.0).abs() < 1e-9);
        assert!((a.tool_wait.mean_ms() - 50.0).abs() < 0.5);
        assert!((a.session_tool.mean_ms() - 100.0).abs() < 1.0 && (a.session_model.mean_ms() - 80.0).abs() < 1.0);
    }
}
