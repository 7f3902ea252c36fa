//! `/v1/audio/transcriptions` and `/v1/audio/translations`: the multipart form vLLM's
//! `openai-audio` client posts (the `file`, `model`, `max_completion_tokens`, `stream`,
//! `stream_include_usage`, ...), read into the same request the completion routes serve.
//! The audio itself is not decoded: the answer's tokens follow the echo's schedule, and
//! its prompt tokens are the words of the optional `prompt` field.

use bytes::Bytes;

use crate::counter::Counter;
use crate::parsed::Parsed;

/// A form field's text (`True`, `true` and `1` are yes).
fn yes(v: &str) -> bool {
    matches!(v.trim(), "True" | "true" | "1")
}

/// Reads the form; the error is the message of a 400 answer.
pub(crate) async fn parse(content_type: &str, body: Bytes, counter: &Counter) -> Result<Parsed, String> {
    let boundary = multer::parse_boundary(content_type).map_err(|e| format!("not a multipart form: {e}"))?;
    let stream = futures_util::stream::once(async move { Ok::<Bytes, std::convert::Infallible>(body) });
    let mut form = multer::Multipart::new(stream, boundary);
    let mut p = Parsed {
        model: None,
        prompt_tokens: 0,
        max_tokens: None,
        stream: false,
        include_usage: false,
        images: 0,
        tool_results: 0,
        tool_results_unmatched: 0,
    };
    let mut file = false;
    while let Some(field) = form.next_field().await.map_err(|e| format!("the form: {e}"))? {
        let name = field.name().unwrap_or_default().to_owned();
        if name == "file" {
            file = !field.bytes().await.map_err(|e| format!("the file: {e}"))?.is_empty();
            continue;
        }
        let text = field.text().await.map_err(|e| format!("field {name}: {e}"))?;
        match name.as_str() {
            "model" => p.model = Some(text),
            "max_completion_tokens" | "max_tokens" => {
                p.max_tokens = Some(text.trim().parse().map_err(|_| format!("{name} {text:?}: not a count"))?);
            }
            "stream" => p.stream = yes(&text),
            "stream_include_usage" => p.include_usage = yes(&text),
            "prompt" => p.prompt_tokens = counter.count(&text),
            _ => {}
        }
    }
    if !file {
        return Err("'file' is required (the audio)".into());
    }
    p.include_usage &= p.stream;
    Ok(p)
}
