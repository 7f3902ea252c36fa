//! What each generated token of a stream carries: which field and which text.
//!
//! By default every token is one word of content. `--partial-tokens P` makes a fraction
//! of the tokens multi-byte characters split over two tokens, the way a real vLLM server
//! streams Chinese text or emoji: the first token's chunk carries `""` (its bytes are not
//! a whole character yet), the next carries the whole character. The last token can be
//! such a first half: the stream then stops inside a character, as vLLM's does when
//! `max_tokens` cuts it there, and its last chunk carries `""` with the `finish_reason`.
//! `--reasoning-tokens K`
//! sends a chat stream's first K tokens as `delta.reasoning`; `--tool-call` sends a chat
//! stream's content as the arguments of one tool call. Every token is one chunk, on the
//! schedule, and counts in `usage.completion_tokens`.

use crate::config::EchoConfig;
use crate::faults;

/// Salt for the per-token split-character draw.
const SALT_PARTIAL: u64 = 0x5041_5254_4941_0007;

/// Whole characters a split pair ends with (3- and 4-byte UTF-8, JSON-safe unescaped).
const CHARS: [&str; 6] = ["中", "文", "字", "😀", "🚀", "🎉"];

/// Words the output tokens cycle through (each with its leading space).
const WORDS: [&str; 8] = [" the", " quick", " brown", " fox", " jumps", " over", " lazy", " dog"];

/// Text of plain output token `k`: never empty, JSON-safe without escaping.
pub(crate) fn word(k: u64) -> &'static str {
    WORDS[(k % WORDS.len() as u64) as usize]
}

/// The field of a chat delta a token goes in (completions always use `text`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    Content,
    Reasoning,
    /// The arguments of tool call 0; `first` also carries its id and name.
    ToolCall {
        first: bool,
    },
}

/// One token: where it goes and what it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Token {
    pub field: Field,
    pub text: &'static str,
}

/// The token-shape flags of the server (chat-only parts are ignored for completions).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Shape {
    pub partial: f64,
    pub reasoning: u64,
    pub tool_call: bool,
}

impl Shape {
    /// The shape the server's flags ask for.
    pub fn of(config: &EchoConfig) -> Self {
        Self { partial: config.partial_tokens, reasoning: config.reasoning_tokens, tool_call: config.tool_call }
    }
}

/// Hands out the tokens of one response in order.
#[derive(Debug)]
pub(crate) struct TokenPlan {
    shape: Shape,
    chat: bool,
    seed: u64,
    index: u64,
    /// The previous token was the first half of a split character.
    pending: bool,
    /// `--answers`: the reply is these tokens (words, each after the first with its space).
    answer: Option<&'static [&'static str]>,
}

impl TokenPlan {
    /// The plan of completion request number `index`.
    pub fn new(shape: Shape, chat: bool, seed: u64, index: u64) -> Self {
        Self { shape, chat, seed, index, pending: false, answer: None }
    }

    /// The reply is `tokens`, as content (an accuracy question's answer, D71).
    pub fn answering(mut self, tokens: &'static [&'static str]) -> Self {
        self.answer = Some(tokens);
        self
    }

    /// How many of the first `n` tokens are reasoning (the usage's `reasoning_tokens`).
    pub fn reasoning_of(&self, n: u64) -> u64 {
        if self.chat { self.shape.reasoning.min(n) } else { 0 }
    }

    /// Token `k`; call for k = 0, 1, ... in order.
    pub fn token(&mut self, k: u64) -> Token {
        if let Some(words) = self.answer {
            return Token { field: Field::Content, text: words.get(k as usize).copied().unwrap_or("") };
        }
        let field = if self.chat && k < self.shape.reasoning {
            Field::Reasoning
        } else if self.chat && self.shape.tool_call {
            Field::ToolCall { first: k == self.shape.reasoning }
        } else {
            Field::Content
        };
        let text = if self.pending {
            self.pending = false;
            CHARS[(k % CHARS.len() as u64) as usize]
        } else if self.split_here(k) {
            self.pending = true;
            ""
        } else {
            word(k)
        };
        Token { field, text }
    }

    fn split_here(&self, k: u64) -> bool {
        let p = self.shape.partial;
        p > 0.0 && faults::unit(faults::mix(self.seed ^ k.rotate_left(32), self.index, SALT_PARTIAL)) < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(shape: Shape, chat: bool, index: u64, n: u64) -> Vec<Token> {
        let mut plan = TokenPlan::new(shape, chat, 1, index);
        (0..n).map(|k| plan.token(k)).collect()
    }

    #[test]
    fn default_is_words_of_content() {
        let t = texts(Shape::default(), true, 0, 10);
        assert!(t.iter().all(|t| t.field == Field::Content && !t.text.is_empty()));
    }

    #[test]
    fn split_characters_come_in_pairs_at_about_the_rate() {
        let shape = Shape { partial: 0.4, ..Shape::default() };
        let (mut empty, mut all, mut last_empty) = (0, 0, 0);
        for index in 0..200 {
            let t = texts(shape, false, index, 64);
            // Every "" is followed by a whole multi-byte character, but for a last token
            // that stops the stream inside one.
            last_empty += usize::from(t[63].text.is_empty());
            for w in t.windows(2) {
                if w[0].text.is_empty() {
                    assert!(w[1].text.len() >= 3 && !w[1].text.is_ascii(), "{w:?}");
                }
            }
            empty += t.iter().filter(|t| t.text.is_empty()).count();
            all += t.len();
        }
        // Each token not completing a character starts a split with probability 0.4:
        // about 0.4 / 1.4 = 29 % of tokens are empty.
        let frac = empty as f64 / all as f64;
        assert!((0.25..0.33).contains(&frac), "{frac}");
        assert!((30..90).contains(&last_empty), "{last_empty} of 200 streams end inside a character");
    }

    #[test]
    fn reasoning_then_tool_call() {
        let shape = Shape { reasoning: 2, tool_call: true, ..Shape::default() };
        let t = texts(shape, true, 0, 5);
        assert_eq!(t[0].field, Field::Reasoning);
        assert_eq!(t[1].field, Field::Reasoning);
        assert_eq!(t[2].field, Field::ToolCall { first: true });
        assert_eq!(t[3].field, Field::ToolCall { first: false });
        // Completions ignore the chat-only shapes.
        assert!(texts(shape, false, 0, 5).iter().all(|t| t.field == Field::Content));
    }
}
