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

    /// Chat: the `messages` as they stand (an agent loop's step sends no new user message).
    pub fn messages_now(&self) -> Box<RawValue> {
        let mut out = String::with_capacity(self.buf.len() + 1);
        out.push_str(&self.buf);
        out.push(']');
        RawValue::from_string(out).unwrap_or_else(|_| RawValue::from_string("[]".into()).expect("valid JSON"))
    }

    /// Chat: the user's message of a turn whose reply called tools (its steps resend it).
    pub fn push_user(&mut self, user: &str, tokens: u32) {
        Self::push_message(&mut self.buf, "user", user);
        self.tokens = self.tokens.saturating_add(tokens);
    }

    /// Chat: the assistant's reply that made `calls` (`tokens`: the reply's output).
    pub fn push_calls(&mut self, calls: &[surge_proto::ToolCallMade], tokens: u32) {
        let calls: Vec<serde_json::Value> = calls
            .iter()
            .map(|c| {
                serde_json::json!({"id": c.id, "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
        let message = serde_json::json!({"role": "assistant", "content": null, "tool_calls": calls});
        if !self.buf.ends_with('[') {
            self.buf.push(',');
        }
        self.buf.push_str(&message.to_string());
        self.tokens = self.tokens.saturating_add(tokens);
    }

    /// Chat: a tool's result for call `id`.
    pub fn push_tool_result(&mut self, id: &str, result: &str, tokens: u32) {
        if !self.buf.ends_with('[') {
            self.buf.push(',');
        }
        self.buf.push_str(r#"{"role":"tool","tool_call_id":"#);
        push_json_string(&mut self.buf, id);
        self.buf.push_str(r#","content":"#);
        push_json_string(&mut self.buf, result);
        self.buf.push('}');
        self.tokens = self.tokens.saturating_add(tokens);
    }

    /// Chat: the assistant's answer that ends a turn with tool steps.
    pub fn push_answer(&mut self, reply: &str, tokens: u32) {
        Self::push_message(&mut self.buf, "assistant", reply);
        self.tokens = self.tokens.saturating_add(tokens);
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
    fn an_agent_loops_steps_send_the_calls_and_their_results() {
        let mut h = History::new(true, None);
        h.push_user("go", 1);
        let call = surge_proto::ToolCallMade { id: "call_3".into(), name: "echo".into(), arguments: " a".into() };
        h.push_calls(std::slice::from_ref(&call), 2);
        h.push_tool_result("call_3", "result \"x\"", 3);
        let v: serde_json::Value = serde_json::from_str(h.messages_now().get()).unwrap();
        assert_eq!(
            v,
            serde_json::json!([
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_3", "type": "function", "function": {"name": "echo", "arguments": " a"}}]},
                {"role": "tool", "tool_call_id": "call_3", "content": "result \"x\""},
            ])
        );
        h.push_answer(" done", 1);
        assert_eq!(h.tokens(), 7);
        let next: serde_json::Value = serde_json::from_str(h.messages("more").get()).unwrap();
        assert_eq!(next[3], serde_json::json!({"role": "assistant", "content": " done"}));
        assert_eq!(next[4]["content"], "more");
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
