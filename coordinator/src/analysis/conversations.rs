//! Conversations (multi-turn runs), folded row by row from the rows' `session`, `turn`,
//! `cached_tokens`, `history_tokens` and `session_end`: per-turn counts and latency
//! distributions (vllm-bench's `per_turn_metrics`), how conversations ended, and the prefix
//! cache's hit rate beside the most a cache could reuse. Nothing is kept per conversation:
//! the row that ended a session carries its totals (D31).

use super::fold::{Fold, Whole};
use super::sample::Sample;
use crate::fleet::outcome::GlobalRow;

/// Turn indices broken down one by one; later turns count in the totals only (bounded
/// memory for agentic traces of hundreds of turns).
pub const MAX_TURN_METRICS: usize = 64;

/// One turn index's requests.
#[derive(Debug, Clone, Default)]
pub struct Turn {
    pub completed: u64,
    pub failed: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub history_tokens: u64,
    /// Cached prompt tokens the server reported, over the successful rows that reported.
    pub cached_tokens: u64,
    pub cached_input_tokens: u64,
    pub cached_rows: u64,
    pub ttft: Sample,
    pub tpot: Sample,
    pub itl: Sample,
    pub e2el: Sample,
}

impl Turn {
    /// A breakdown's distributions (one per turn, one per endpoint): lazy samples, 3-digit
    /// histograms once the run's values no longer fit the exact budget (D81) and kept
    /// values written in small chunks, where a `Default` would give 4-digit samples.
    pub(crate) fn new() -> Self {
        Self {
            completed: 0,
            failed: 0,
            input_tokens: 0,
            output_tokens: 0,
            history_tokens: 0,
            cached_tokens: 0,
            cached_input_tokens: 0,
            cached_rows: 0,
            ttft: Sample::lazy(),
            tpot: Sample::lazy(),
            itl: Sample::lazy(),
            e2el: Sample::lazy(),
        }
    }

    pub fn dist(&self, name: &str) -> &Sample {
        match name {
            "ttft" => &self.ttft,
            "tpot" => &self.tpot,
            "itl" => &self.itl,
            _ => &self.e2el,
        }
    }

    /// Cached over input tokens of the rows whose server reported a count (`None`: none did).
    pub fn hit_rate(&self) -> Option<f64> {
        (self.cached_rows > 0 && self.cached_input_tokens > 0)
            .then(|| self.cached_tokens as f64 / self.cached_input_tokens as f64)
    }

    /// History over input tokens: the most a prefix cache could have reused.
    pub fn history_fraction(&self) -> Option<f64> {
        (self.input_tokens > 0).then(|| self.history_tokens as f64 / self.input_tokens as f64)
    }

    pub(crate) fn add(&mut self, r: &GlobalRow) {
        if !r.ok() {
            self.failed += 1;
            return;
        }
        self.completed += 1;
        self.input_tokens += u64::from(r.row.input_tokens);
        self.output_tokens += u64::from(r.row.output_tokens);
        self.history_tokens += u64::from(r.row.history_tokens);
        if let Some(c) = r.row.cached_tokens {
            self.cached_tokens += u64::from(c);
            self.cached_input_tokens += u64::from(r.row.input_tokens);
            self.cached_rows += 1;
        }
        if let Some(t) = r.first_token_s() {
            self.ttft.add(t);
        }
        self.e2el.add(r.e2el_s());
        if let Some(t) = r.tpot_s() {
            self.tpot.add(t);
        }
        for g in r.row.gaps() {
            self.itl.add(f64::from(g) / 1e6);
        }
    }

    pub(crate) fn drop_exact(&mut self) {
        for s in [&mut self.ttft, &mut self.tpot, &mut self.itl, &mut self.e2el] {
            s.drop_exact();
        }
    }

    pub(crate) fn seal(&mut self) {
        for s in [&mut self.ttft, &mut self.tpot, &mut self.itl, &mut self.e2el] {
            s.seal();
        }
    }
}

/// Everything a multi-turn run reports beyond its requests' metrics.
#[derive(Debug, Clone, Default)]
pub struct Conversations {
    /// By turn index (0-based, D32), at most [`MAX_TURN_METRICS`].
    pub turns: Vec<Turn>,
    /// All turns together (the prefix-cache totals).
    pub all: Turn,
    /// Sessions whose first turn was sent.
    pub started: u64,
    /// Sessions whose every turn succeeded.
    pub completed: u64,
    /// Sessions ended by a failed turn.
    pub failed: u64,
    /// Turns not sent because an earlier turn of their session failed.
    pub cancelled_turns: u64,
    /// Turns sent by ended sessions (vllm-bench's `avg_turns_completed` counts the
    /// failed turn too).
    pub turns_sent: u64,
    /// Ended sessions: first turn's start to last turn's end (seconds), and turns sent.
    pub duration: Sample,
    pub turns_per_conversation: Sample,
}

impl Conversations {
    pub fn new() -> Self {
        Self {
            all: Turn::new(),
            duration: Sample::light(),
            turns_per_conversation: Sample::light(),
            ..Default::default()
        }
    }

    /// One row of a multi-turn run (rows without a session are ignored).
    pub fn add(&mut self, r: &GlobalRow) {
        if r.row.session.is_none() {
            return;
        }
        let t = r.row.turn as usize;
        // An agent loop's tool steps (D65) are their own fold's: a turn is its user's
        // message and the reply to it.
        let step = r.row.step > 0;
        // A sub-agent's session (D68) is its graph's, counted by its own fold: the
        // conversations are the roots (`num_conversations`); its turns count as turns.
        let sub = r.row.parent.is_some();
        if t == 0 && !step && !sub {
            self.started += 1;
        }
        if t < MAX_TURN_METRICS && !step {
            if self.turns.len() <= t {
                self.turns.resize_with(t + 1, Turn::new);
            }
            self.turns[t].add(r);
        }
        if !step {
            self.all.add(r);
        }
        if let Some(end) = r.row.session_end.as_ref().filter(|_| !sub) {
            if end.failed {
                self.failed += 1;
            } else {
                self.completed += 1;
            }
            self.cancelled_turns += u64::from(end.cancelled_turns);
            let sent = u64::from(end.turns_completed) + u64::from(end.failed);
            self.turns_sent += sent;
            self.duration.add(end.duration_us as f64 / 1e6);
            // Stored in "seconds" as a count: read back with `percentile_ms() / 1000`.
            self.turns_per_conversation.add(sent as f64);
        }
    }

    /// Sessions that ended (completed or failed).
    pub fn ended(&self) -> u64 {
        self.completed + self.failed
    }

    /// vllm-bench's `avg_turns_completed`: turns sent per ended session.
    pub fn avg_turns(&self) -> f64 {
        if self.ended() == 0 { 0.0 } else { self.turns_sent as f64 / self.ended() as f64 }
    }

    /// Whether the server reported cached tokens on any turn, and how many in all.
    pub fn total_cached_tokens(&self) -> Option<u64> {
        (self.all.cached_rows > 0).then_some(self.all.cached_tokens)
    }

    /// The warning of a run whose turns resent history but got no cached token back.
    pub fn cache_warning(&self) -> Option<String> {
        if self.all.history_tokens == 0 || self.all.completed == 0 {
            return None;
        }
        match self.total_cached_tokens() {
            Some(c) if c > 0 => None,
            Some(_) => Some(
                "the server reported 0 cached prompt tokens although turns resent their history: \
                 is prefix caching on (vLLM: --enable-prefix-caching)?"
                    .into(),
            ),
            None => Some(
                "the server reported no cached prompt tokens (usage.prompt_tokens_details): the prefix \
                 cache's hit rate is unknown (vLLM reports it with --enable-prompt-tokens-details)"
                    .into(),
            ),
        }
    }

    pub fn drop_exact(&mut self) {
        self.turns.iter_mut().for_each(Turn::drop_exact);
        self.all.drop_exact();
        self.duration.drop_exact();
        self.turns_per_conversation.drop_exact();
    }

    pub fn seal(&mut self) {
        self.turns.iter_mut().for_each(Turn::seal);
        self.all.seal();
        self.duration.seal();
        self.turns_per_conversation.seal();
    }
}

/// The fold: nothing until a row of a session arrives; made past the exact budget, it
/// starts without exact records.
#[derive(Debug, Default)]
pub struct ConversationsFold {
    c: Option<Conversations>,
    inexact: bool,
}

impl Fold for ConversationsFold {
    type Out = Option<Conversations>;
    fn row(&mut self, r: &GlobalRow) {
        if r.row.session.is_none() {
            return;
        }
        let c = self.c.get_or_insert_with(Conversations::new);
        c.add(r);
        if self.inexact {
            c.drop_exact();
        }
    }
    fn drop_exact(&mut self) {
        self.inexact = true;
        if let Some(c) = &mut self.c {
            c.drop_exact();
        }
    }
    fn finish(mut self, _run: &Whole) -> Self::Out {
        if let Some(c) = &mut self.c {
            c.seal();
        }
        self.c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::{ErrorKind, Row, SessionEnd};

    fn turn(session: u64, t: u32, ok: bool, end: Option<SessionEnd>) -> GlobalRow {
        let mut row = Row {
            session: Some(session),
            turn: t,
            input_tokens: 10 * (t + 1),
            history_tokens: 10 * t,
            cached_tokens: Some(8 * t),
            output_tokens: 2,
            ttft_us: 1000 * u64::from(t + 1),
            latency_us: 5000,
            session_end: end,
            ..Default::default()
        };
        if !ok {
            row.set_error(ErrorKind::HttpStatus);
        }
        GlobalRow { agent: 0, start_s: 0.0, intended_s: None, row }
    }

    #[test]
    fn turns_sessions_and_the_cache_are_counted_exactly() {
        let end = |done, cancelled, failed| {
            Some(SessionEnd {
                duration_us: 2_000_000,
                turns_completed: done,
                cancelled_turns: cancelled,
                failed,
                ..Default::default()
            })
        };
        let mut c = Conversations::new();
        // Session 1: 3 turns fine. Session 2: turn 1 fails, 1 turn left unsent.
        for r in [
            turn(1, 0, true, None),
            turn(1, 1, true, None),
            turn(1, 2, true, end(3, 0, false)),
            turn(2, 0, true, None),
            turn(2, 1, false, end(1, 1, true)),
            GlobalRow { agent: 0, start_s: 0.0, intended_s: None, row: Row::default() },
        ] {
            c.add(&r);
        }
        c.seal();
        assert_eq!((c.started, c.completed, c.failed, c.cancelled_turns), (2, 1, 1, 1));
        assert_eq!(c.avg_turns(), 2.5, "3 turns and 2 (the failed one counts), vllm-bench's");
        assert_eq!(c.turns.len(), 3);
        assert_eq!((c.turns[1].completed, c.turns[1].failed), (1, 1));
        assert_eq!(c.turns[0].hit_rate(), Some(0.0));
        assert_eq!(c.turns[1].hit_rate(), Some(8.0 / 20.0));
        assert_eq!(c.turns[2].history_fraction(), Some(20.0 / 30.0));
        assert_eq!(c.total_cached_tokens(), Some(8 + 16));
        assert_eq!(c.turns[2].ttft.median_ms(), 3.0);
        assert_eq!(c.duration.mean_ms(), 2000.0);
        assert!(c.cache_warning().is_none());
    }

    #[test]
    fn history_without_cached_tokens_warns() {
        let mut c = Conversations::new();
        let mut r = turn(1, 1, true, None);
        r.row.cached_tokens = None;
        c.add(&r);
        assert!(c.cache_warning().is_some_and(|w| w.contains("--enable-prompt-tokens-details")));
        let mut z = Conversations::new();
        let mut r = turn(1, 1, true, None);
        r.row.cached_tokens = Some(0);
        z.add(&r);
        assert!(z.cache_warning().is_some_and(|w| w.contains("0 cached")));
    }
}
