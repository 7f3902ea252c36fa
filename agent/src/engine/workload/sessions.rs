//! A conversations workload (D31): request `k` of the slice is a session, whose turns are
//! made one at a time as the session reaches them, from generated turns, a file's
//! conversations (ShareGPT) or a session trace (with sub-agents, D68), and an agent loop's
//! steps (D65). The other type of workload is single requests ([`super::Requests`]).

use super::history::History;
use super::{ModelPick, Planned, Shape};
use crate::data::dataset::{self, Prompt};
use crate::data::tokenizer::Tok;
use crate::data::turns;
use crate::engine::api::openai;
use bytes::Bytes;
use std::sync::Arc;
use surge_proto::{DatasetSpec, MultiTurn, TokenSource};

/// What makes the turns of a session.
#[derive(Debug)]
pub(super) enum Script {
    /// Generated turns ([`turns`]), the live history resent by each.
    Generated { mt: MultiTurn, system: Option<Prompt> },
    /// A session trace: every session's recorded turns in file order (the whole file,
    /// bounded by it); each turn's prompt is the trace's, history included.
    /// `--trace-speedup` divides its timestamps and delays.
    /// `roots`: the sessions no turn spawns (D68), the ones the slice's indices pick.
    Trace { sessions: Vec<Vec<surge_proto::PromptItem>>, speedup: f64, roots: Vec<usize> },
    /// A file's conversations (ShareGPT): each turn's user message and output length as
    /// recorded, the live history resent by each.
    Recorded { mt: MultiTurn, sessions: Vec<Vec<surge_proto::PromptItem>> },
}

/// One session of the slice.
#[derive(Debug, Clone, Copy)]
pub struct SessionPlan {
    /// Its global index (rows' `session`, the session header).
    pub index: u64,
    pub turns: u32,
    /// Which model every turn names (`--lora-modules`: chosen per session).
    model: usize,
    /// Position in a session trace.
    entry: usize,
    /// The index of the session whose graph this is (its own for a root, D68).
    root: u64,
}

/// Sub-agents' session indices have this bit: they never meet a root's (D68).
pub const CHILD_INDEX: u64 = 1 << 47;

/// When a turn after the first is sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Wait {
    /// This long after the previous turn finished (think time, a trace's `delay`).
    After(std::time::Duration),
    /// At this offset from the run's start (a trace's `timestamp`), once the previous
    /// turn finished.
    At(std::time::Duration),
}

/// One turn, ready to send.
#[derive(Debug, Clone)]
pub struct TurnPlan {
    pub planned: Planned,
    /// The new user message and its tokens (what the history gains with the reply).
    pub user: String,
    pub user_tokens: u32,
    /// History tokens this turn resends.
    pub history_tokens: u32,
    /// The output the turn asks for (an agent loop's steps ask for as much).
    pub output_tokens: u32,
}

/// The sessions of a slice and how each turn is made.
#[derive(Debug)]
pub struct Sessions {
    pub(super) script: Script,
    pub(super) spec: DatasetSpec,
    pub(super) tok: Option<Arc<Tok>>,
    pub(super) shape: Shape,
    pub(super) pick: ModelPick,
}

impl Sessions {
    /// Whether making a turn takes long enough to keep it off the async workers (a
    /// tokenizer counts every turn).
    pub fn costly(&self) -> bool {
        self.tok.is_some()
    }

    /// The session of global index `index`.
    pub fn session(&self, index: u64) -> SessionPlan {
        let model = self.pick.of(index, true);
        match &self.script {
            Script::Generated { mt, .. } => {
                SessionPlan { index, turns: turns::turns(&self.spec, mt, index), model, entry: 0, root: index }
            }
            Script::Trace { sessions, roots, .. } => {
                let entry = roots.get((index % roots.len().max(1) as u64) as usize).copied().unwrap_or(0);
                let turns = sessions.get(entry).map_or(0, |s| s.len() as u32);
                SessionPlan { index, turns, model, entry, root: index }
            }
            Script::Recorded { sessions, .. } => {
                let entry = (index % sessions.len().max(1) as u64) as usize;
                let turns = sessions.get(entry).map_or(0, |s| s.len() as u32);
                SessionPlan { index, turns, model, entry, root: index }
            }
        }
    }

    /// Turn 0 of the session of `index` alone (the initial test, warm-ups), naming the
    /// base model unless `lora`.
    pub(super) fn first_turn(&self, index: u64, lora: bool) -> Planned {
        let session = self.session(index);
        let session = SessionPlan { model: if lora { session.model } else { 0 }, ..session };
        self.turn(&session, 0, &self.history()).planned
    }

    /// The sessions turn `t` of `s` spawns once it ends (a session trace's sub-agents, D68).
    pub fn spawns(&self, s: &SessionPlan, t: u32) -> Vec<SessionPlan> {
        let Script::Trace { sessions, .. } = &self.script else { return Vec::new() };
        let Some(item) = sessions.get(s.entry).and_then(|turns| turns.get(t as usize)) else { return Vec::new() };
        item.spawn
            .iter()
            .filter_map(|&n| {
                let entry = usize::try_from(n).ok().filter(|e| *e < sessions.len())?;
                // A sub-agent's index: above every root's, its root's and its own entry in it.
                let index = CHILD_INDEX | (s.root.wrapping_mul(1 << 16) + n + 1);
                Some(SessionPlan { index, turns: sessions[entry].len() as u32, model: s.model, entry, root: s.root })
            })
            .collect()
    }

    /// Whether turn `t` of `s` waits, before it is sent, for every session `s` spawned.
    pub fn joins(&self, s: &SessionPlan, t: u32) -> bool {
        let Script::Trace { sessions, .. } = &self.script else { return false };
        sessions.get(s.entry).and_then(|turns| turns.get(t as usize)).is_some_and(|item| item.join)
    }

    /// Whether a session's turns resend its history (generated turns without prefix
    /// ratios, a file's conversations); a trace's turns carry their own.
    pub fn keeps_history(&self) -> bool {
        match &self.script {
            Script::Generated { mt, .. } => !turns::without_history(mt),
            Script::Recorded { .. } => true,
            Script::Trace { .. } => false,
        }
    }

    /// The agent loop of a chat conversation whose turns keep their history, if asked.
    pub fn tool_loop(&self) -> Option<&surge_proto::ToolLoop> {
        match &self.script {
            Script::Generated { mt, .. } | Script::Recorded { mt, .. } if self.shape.chat && self.keeps_history() => {
                mt.tool_loop.as_ref()
            }
            _ => None,
        }
    }

    /// The tool latency before step `step` of turn `t` of session `s`.
    pub fn tool_latency(&self, tl: &surge_proto::ToolLoop, s: &SessionPlan, t: u32, step: u32) -> std::time::Duration {
        turns::tool_latency(&self.spec, tl, s.index, t, step)
    }

    /// The result of call `call` of step `step` (text, tokens).
    pub fn tool_result(
        &self,
        tl: &surge_proto::ToolLoop,
        s: &SessionPlan,
        t: u32,
        step: u32,
        call: u32,
    ) -> (String, u32) {
        let p = turns::tool_result(&self.spec, tl, self.tok.as_deref(), s.index, t, step, call);
        (p.text, p.input_tokens)
    }

    /// A step of an agent loop: the history as it stands (the calls and their results
    /// last), asking for `output_tokens`.
    pub fn step(&self, s: &SessionPlan, history: &History, output_tokens: u32) -> Planned {
        let body = openai::chat_body_raw(&self.shape.params(s.model), &history.messages_now(), output_tokens);
        Planned {
            body: Bytes::from(body),
            input_tokens: history.tokens(),
            input_source: TokenSource::ClientEstimate,
            input_sequences: 0,
            audio_s: 0.0,
            max_tokens: output_tokens,
        }
    }

    /// A new conversation's history (its system prompt, if any).
    pub fn history(&self) -> History {
        match &self.script {
            Script::Generated { system, .. } => {
                History::new(self.shape.chat, system.as_ref().map(|p| (p.text.as_str(), p.input_tokens)))
            }
            Script::Recorded { .. } | Script::Trace { .. } => History::new(self.shape.chat, None),
        }
    }

    /// When turn `t` (> 0) of session `s` is sent.
    pub fn wait(&self, s: &SessionPlan, t: u32) -> Wait {
        match &self.script {
            Script::Generated { mt, .. } | Script::Recorded { mt, .. } => {
                Wait::After(turns::think(&self.spec, mt, s.index, t))
            }
            Script::Trace { sessions, speedup, .. } => {
                let item = &sessions[s.entry][t as usize];
                let ms = |v: f64| turns::wait(v / 1e3 / speedup);
                if item.delay_ms >= 0.0 { Wait::After(ms(item.delay_ms)) } else { Wait::At(ms(item.timestamp_ms)) }
            }
        }
    }

    /// Turn `t` of session `s`, after `history` (a generated session resends it; a trace's
    /// turn carries its own).
    pub fn turn(&self, s: &SessionPlan, t: u32, history: &History) -> TurnPlan {
        let (spec, tok, shape) = (&self.spec, &self.tok, &self.shape);
        match &self.script {
            Script::Generated { mt, system } => {
                let user = turns::user_message(spec, mt, tok.as_deref(), s.index, t);
                let alone;
                let h = if turns::without_history(mt) {
                    alone = History::new(shape.chat, system.as_ref().map(|p| (p.text.as_str(), p.input_tokens)));
                    &alone
                } else {
                    history
                };
                let params = shape.params(s.model);
                let body = if shape.chat {
                    openai::chat_body_raw(&params, &h.messages(&user.text), user.output_tokens)
                } else {
                    openai::body(&params, &h.prompt(&user.text), user.output_tokens)
                };
                let planned = Planned {
                    body: Bytes::from(body),
                    input_tokens: h.tokens().saturating_add(user.input_tokens),
                    input_source: user.input_source,
                    input_sequences: 0,
                    audio_s: 0.0,
                    max_tokens: user.output_tokens,
                };
                TurnPlan {
                    planned,
                    user_tokens: user.input_tokens,
                    history_tokens: h.tokens(),
                    user: user.text,
                    output_tokens: user.output_tokens,
                }
            }
            Script::Recorded { sessions, .. } => {
                let item = &sessions[s.entry][t as usize];
                let params = shape.params(s.model);
                let body = if shape.chat {
                    openai::chat_body_raw(&params, &history.messages(&item.text), item.output_tokens)
                } else {
                    openai::body(&params, &history.prompt(&item.text), item.output_tokens)
                };
                let planned = Planned {
                    body: Bytes::from(body),
                    input_tokens: history.tokens().saturating_add(item.input_tokens),
                    input_source: item.input_source(),
                    input_sequences: 0,
                    audio_s: 0.0,
                    max_tokens: item.output_tokens,
                };
                TurnPlan {
                    planned,
                    user_tokens: item.input_tokens,
                    history_tokens: history.tokens(),
                    user: item.text.clone(),
                    output_tokens: item.output_tokens,
                }
            }
            Script::Trace { sessions, .. } => {
                let item = &sessions[s.entry][t as usize];
                let prompt =
                    dataset::trace(spec, tok.as_deref(), item, s.index * surge_proto::TURN_STRIDE + u64::from(t));
                let planned = shape.planned(prompt.clone(), s.model).unwrap_or_else(|_| {
                    let plain = Prompt { messages_json: String::new(), ..prompt };
                    shape.planned(plain, s.model).expect("a plain prompt serializes")
                });
                let user_tokens = planned.input_tokens;
                TurnPlan {
                    planned,
                    user: String::new(),
                    user_tokens,
                    history_tokens: 0,
                    output_tokens: item.output_tokens,
                }
            }
        }
    }

    /// A session trace's send times, one per session of the slice (its first turn's),
    /// seconds from the start divided by `speedup`; `index`: the slice's global indices.
    pub(super) fn trace_offsets(&self, len: u64, index: impl Fn(u64) -> u64, speedup: f64) -> Option<Arc<[f64]>> {
        let Script::Trace { sessions, roots, .. } = &self.script else { return None };
        let len = len.min(roots.len() as u64);
        Some((0..len).map(|k| sessions[self.session(index(k)).entry][0].timestamp_ms / 1000.0 / speedup).collect())
    }
}
