//! One conversation's history, kept as the bytes the next request extends (D31): for chat,
//! the JSON of the `messages` array so far without its closing `]`; for completions, the
//! conversation flattened to text (each prompt followed by the reply to it). Never a
//! parsed JSON tree; dropped when the conversation ends.

use serde_json::value::RawValue;

/// The history of one conversation.
#[derive(Debug, Clone)]
pub struct History {
    chat: bool,
    buf: String,
    /// Tokens of the history (system prompt, earlier messages and replies): what the next
    /// turn resends, and what a prefix cache could reuse.
    tokens: u32,
}

/// Appends `text` as a JSON string.
fn push_json_string(buf: &mut String, text: &str) {
    // Serializing a &str into a String cannot fail.
    buf.push_str(&serde_json::to_string(text).unwrap_or_default());
}

impl History {
    /// An empty conversation, with its system prompt (text and tokens) first if any.
    pub fn new(chat: bool, system: Option<(&str, u32)>) -> Self {
        let mut h = Self { chat, buf: String::new(), tokens: 0 };
        if chat {
            h.buf.push('[');
        }
        if let Some((text, tokens)) = system {
            if chat {
                h.buf.push_str(r#"{"role":"system","content":"#);
                push_json_string(&mut h.buf, text);
                h.buf.push('}');
            } else {
                h.buf.push_str(text);
                h.buf.push('\n');
            }
            h.tokens = tokens;
        }
        h
    }

    /// History tokens so far.
    pub fn tokens(&self) -> u32 {
        self.tokens
    }

    fn push_message(buf: &mut String, role: &str, content: &str) {
        if !buf.ends_with('[') {
            buf.push(',');
        }
        buf.push_str(r#"{"role":""#);
        buf.push_str(role);
        buf.push_str(r#"","content":"#);
        push_json_string(buf, content);
        buf.push('}');
    }

    /// Chat: the `messages` of the next request, the history then `user`.
    pub fn messages(&self, user: &str) -> Box<RawValue> {
        let mut out = String::with_capacity(self.buf.len() + user.len() + 40);
        out.push_str(&self.buf);
        Self::push_message(&mut out, "user", user);
        out.push(']');
        // Built from serialized strings only: always valid JSON.
        RawValue::from_string(out).unwrap_or_else(|_| RawValue::from_string("[]".into()).expect("valid JSON"))
    }

    /// Completions: the prompt of the next request, the history then `user`.
    pub fn prompt(&self, user: &str) -> String {
        let mut out = String::with_capacity(self.buf.len() + user.len());
        out.push_str(&self.buf);
        out.push_str(user);
        out
    }

    /// A turn that succeeded: its user message and the server's reply, as streamed, join
    /// the history (`user_tokens` and `reply_tokens` counted as the row counted them).
    pub fn push(&mut self, user: &str, user_tokens: u32, reply: &str, reply_tokens: u32) {
        if self.chat {
            Self::push_message(&mut self.buf, "user", user);
            Self::push_message(&mut self.buf, "assistant", reply);
        } else {
            self.buf.push_str(user);
            self.buf.push_str(reply);
            self.buf.push('\n');
        }
        self.tokens = self.tokens.saturating_add(user_tokens).saturating_add(reply_tokens);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_history_grows_by_each_message_and_reply() {
        let mut h = History::new(true, Some(("be \"brief\"", 2)));
        let first: serde_json::Value = serde_json::from_str(h.messages("hi there").get()).unwrap();
        assert_eq!(
            first,
            serde_json::json!([{"role":"system","content":"be \"brief\""},{"role":"user","content":"hi there"}])
        );
        h.push("hi there", 2, " the quick", 2);
        let second: serde_json::Value = serde_json::from_str(h.messages("more").get()).unwrap();
        assert_eq!(second.as_array().unwrap().len(), 4);
        assert_eq!(second[2], serde_json::json!({"role":"assistant","content":" the quick"}));
        assert_eq!(second[3]["content"], "more");
        assert_eq!(h.tokens(), 6);
        let plain = History::new(true, None);
        assert_eq!(plain.messages("x").get(), r#"[{"role":"user","content":"x"}]"#);
    }

    #[test]
    fn completions_history_is_the_conversation_as_text() {
        let mut h = History::new(false, None);
        assert_eq!(h.prompt("one two"), "one two");
        h.push("one two", 2, " the quick", 2);
        assert_eq!(h.prompt("three"), "one two the quick\nthree");
        assert_eq!(h.tokens(), 4);
    }
}
