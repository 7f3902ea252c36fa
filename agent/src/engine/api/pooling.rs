//! The pooling backends' wire (vLLM's `openai-embeddings`, `-chat`, `infinity-embeddings`,
//! `vllm-pooling`, `vllm-rerank`): one JSON body, one JSON answer, no stream. The answer
//! is read whole; its `usage.prompt_tokens` is the request's input count.

use crate::engine::api::Api;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What one pooling request carries.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(untagged)]
pub enum Input<'a> {
    /// One prompt.
    Text(&'a str),
    /// Several prompts (`--random-batch-size`); for rerank, the query then its documents.
    Texts(&'a [String]),
    /// Token ids (`--prompt-token-ids`).
    Ids(&'a [u32]),
}

impl Input<'_> {
    /// Inputs the server embeds (documents for rerank).
    pub fn sequences(self, api: Api) -> u32 {
        match (self, api) {
            (Input::Texts(ts), Api::Rerank) => ts.len().saturating_sub(1) as u32,
            (Input::Texts(ts), _) => ts.len() as u32,
            _ => 1,
        }
    }
}

/// A chat message of text parts (`openai-embeddings-chat`).
#[derive(Serialize)]
struct Message {
    role: &'static str,
    content: [Part; 1],
}

#[derive(Serialize)]
struct Part {
    #[serde(rename = "type")]
    kind: &'static str,
    text: String,
}

/// Every pooling body: the fields its API sends, serialized straight from the borrowed
/// prompts (no intermediate JSON value unless `--extra-body` is merged in).
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    input: Option<Input<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    messages: Option<[Message; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    query: Option<Input<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    documents: Option<&'a [String]>,
    /// vLLM's "no truncation"; Infinity has no such field.
    #[serde(skip_serializing_if = "Option::is_none")]
    truncate_prompt_tokens: Option<i32>,
}

/// The JSON body of one pooling request for `api` (a pooling API), `extra`'s keys winning.
pub fn body(api: Api, model: &str, input: Input<'_>, extra: Option<&Map<String, Value>>) -> Vec<u8> {
    let mut b =
        Body { model, input: None, messages: None, query: None, documents: None, truncate_prompt_tokens: Some(-1) };
    match api {
        Api::EmbeddingsChat => {
            let text = match input {
                Input::Text(t) => t.to_string(),
                Input::Texts(ts) => ts.join(" "),
                Input::Ids(_) => String::new(),
            };
            b.messages = Some([Message { role: "user", content: [Part { kind: "text", text }] }]);
        }
        Api::InfinityEmbeddings => (b.input, b.truncate_prompt_tokens) = (Some(input), None),
        Api::Rerank => {
            let (query, documents): (Input<'_>, &[String]) = match input {
                Input::Texts([q, docs @ ..]) => (Input::Text(q), docs),
                Input::Texts([]) => (Input::Text(""), &[]),
                other => (other, &[]),
            };
            (b.query, b.documents) = (Some(query), Some(documents));
        }
        // Embeddings, pooling.
        _ => b.input = Some(input),
    }
    match extra {
        None => serde_json::to_vec(&b).expect("serializing a plain struct cannot fail"),
        Some(extra) => {
            let mut v = serde_json::to_value(&b).expect("serializing a plain struct cannot fail");
            if let Some(obj) = v.as_object_mut() {
                obj.extend(extra.iter().map(|(k, x)| (k.clone(), x.clone())));
            }
            serde_json::to_vec(&v).expect("serializing a JSON value cannot fail")
        }
    }
}

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: Option<u32>,
    #[serde(default)]
    total_tokens: Option<u32>,
}

/// What a pooling answer says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    /// Its input tokens (`usage.prompt_tokens`, else rerank's `usage.total_tokens`), if it says.
    Ok(Option<u32>),
    /// An `{"error": ...}` object.
    ServerError,
    /// Not a JSON object.
    Malformed,
}

/// Reads a whole pooling answer.
pub fn read(body: &[u8]) -> Answered {
    match serde_json::from_slice::<Answer>(body) {
        Ok(Answer { error: Some(_), .. }) => Answered::ServerError,
        Ok(a) => Answered::Ok(a.usage.and_then(|u| u.prompt_tokens.or(u.total_tokens))),
        Err(_) => Answered::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn v(api: Api, input: Input<'_>) -> Value {
        serde_json::from_slice(&body(api, "m", input, None)).unwrap()
    }

    #[test]
    fn bodies_as_vllm_sends_them() {
        assert_eq!(
            v(Api::Embeddings, Input::Text("a b")),
            json!({"model":"m","input":"a b","truncate_prompt_tokens":-1})
        );
        let batch = ["x".to_string(), "y".to_string(), "z".to_string()];
        assert_eq!(v(Api::Pooling, Input::Texts(&batch))["input"], json!(["x", "y", "z"]));
        assert_eq!(v(Api::InfinityEmbeddings, Input::Text("a")), json!({"model":"m","input":"a"}));
        assert_eq!(
            v(Api::EmbeddingsChat, Input::Text("a"))["messages"],
            json!([{"role":"user","content":[{"type":"text","text":"a"}]}])
        );
        let r = v(Api::Rerank, Input::Texts(&batch));
        assert_eq!((r["query"].clone(), r["documents"].clone()), (json!("x"), json!(["y", "z"])));
        assert_eq!(Input::Texts(&batch).sequences(Api::Rerank), 2);
        assert_eq!(Input::Texts(&batch).sequences(Api::Embeddings), 3);
        assert_eq!(v(Api::Embeddings, Input::Ids(&[5, 7]))["input"], json!([5, 7]));
        let extra: Map<String, Value> = serde_json::from_str(r#"{"dimensions":8,"truncate_prompt_tokens":4}"#).unwrap();
        let w: Value = serde_json::from_slice(&body(Api::Embeddings, "m", Input::Text("a"), Some(&extra))).unwrap();
        assert_eq!((w["dimensions"].clone(), w["truncate_prompt_tokens"].clone()), (json!(8), json!(4)));
    }

    #[test]
    fn answers() {
        assert_eq!(read(br#"{"data":[],"usage":{"prompt_tokens":7,"total_tokens":7}}"#), Answered::Ok(Some(7)));
        assert_eq!(read(br#"{"results":[],"usage":{"total_tokens":9}}"#), Answered::Ok(Some(9)));
        assert_eq!(read(br#"{"data":[]}"#), Answered::Ok(None));
        assert_eq!(read(br#"{"error":{"message":"no"}}"#), Answered::ServerError);
        assert_eq!(read(b"[1,2"), Answered::Malformed);
    }
}
