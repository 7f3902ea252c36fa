//! The pooling backends' wire (vLLM's `openai-embeddings`, `-chat`, `infinity-embeddings`,
//! `vllm-pooling`, `vllm-rerank`): one JSON body, one JSON answer, no stream. The answer
//! is read whole; its `usage.prompt_tokens` is the request's input count.

use super::api::Api;
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// What one pooling request carries.
#[derive(Debug, Clone, Copy)]
pub enum Input<'a> {
    /// One prompt.
    Text(&'a str),
    /// Several prompts (`--random-batch-size`); for rerank, the query then its documents.
    Texts(&'a [String]),
    /// Token ids (`--prompt-token-ids`).
    Ids(&'a [u32]),
}

impl Input<'_> {
    fn value(self) -> Value {
        match self {
            Input::Text(t) => Value::from(t),
            Input::Texts(ts) => Value::from(ts.to_vec()),
            Input::Ids(ids) => Value::from(ids.to_vec()),
        }
    }

    /// Inputs the server embeds (documents for rerank).
    pub fn sequences(self, api: Api) -> u32 {
        match (self, api) {
            (Input::Texts(ts), Api::Rerank) => ts.len().saturating_sub(1) as u32,
            (Input::Texts(ts), _) => ts.len() as u32,
            _ => 1,
        }
    }
}

/// The JSON body of one pooling request for `api` (a pooling API), `extra`'s keys winning.
pub fn body(api: Api, model: &str, input: Input<'_>, extra: Option<&Map<String, Value>>) -> Vec<u8> {
    let mut b = match api {
        Api::EmbeddingsChat => {
            let text = match input {
                Input::Text(t) => t.to_string(),
                Input::Texts(ts) => ts.join(" "),
                Input::Ids(_) => String::new(),
            };
            json!({"model": model, "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
                   "truncate_prompt_tokens": -1})
        }
        Api::InfinityEmbeddings => json!({"model": model, "input": input.value()}),
        Api::Rerank => {
            let (query, documents) = match input {
                Input::Texts([q, docs @ ..]) => (Value::from(q.as_str()), Value::from(docs.to_vec())),
                Input::Texts([]) => (Value::from(""), Value::Array(Vec::new())),
                Input::Text(t) => (Value::from(t), Value::Array(Vec::new())),
                Input::Ids(ids) => (Value::from(ids.to_vec()), Value::Array(Vec::new())),
            };
            json!({"model": model, "query": query, "documents": documents, "truncate_prompt_tokens": -1})
        }
        // Embeddings, pooling.
        _ => json!({"model": model, "input": input.value(), "truncate_prompt_tokens": -1}),
    };
    if let (Some(extra), Some(obj)) = (extra, b.as_object_mut()) {
        obj.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    serde_json::to_vec(&b).expect("serializing a JSON value cannot fail")
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
