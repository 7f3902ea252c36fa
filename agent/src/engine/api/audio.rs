//! `openai-audio`'s request: a multipart form as vLLM's client posts it to
//! `/v1/audio/transcriptions` (or translations): the audio file first, then one text field
//! per key, values written as Python's `str()` writes them (`True`), which vLLM's server
//! reads. The answer is a chat-style stream (`choices[0].delta.content`, then `usage`).

/// The form's boundary: fixed, and long enough never to occur in an audio file's bytes by
/// chance at any rate that matters.
const BOUNDARY: &str = "surge-audio-5c1f0e8d7b2a4963a1d0c4e7f9b3a6d2";

/// The request's content type, with the boundary.
pub const CONTENT_TYPE: &str = "multipart/form-data; boundary=surge-audio-5c1f0e8d7b2a4963a1d0c4e7f9b3a6d2";

/// One audio request's form: `file` (named `file_name`), then `model`,
/// `max_completion_tokens`, `stream`, `language`, `stream_include_usage`,
/// `stream_continuous_usage_stats`, then `extra`'s keys (strings as they are, booleans as
/// Python writes them, other values as JSON text), an extra key replacing a field of the
/// same name.
pub fn form(
    model: &str,
    file_name: &str,
    audio: &[u8],
    max_tokens: u32,
    extra: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(audio.len() + 1024);
    let name = file_name.replace(['"', '\r', '\n'], "_");
    out.extend_from_slice(
        format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    out.extend_from_slice(audio);
    out.extend_from_slice(b"\r\n");
    let mut fields: Vec<(String, String)> = vec![
        ("model".into(), model.into()),
        ("max_completion_tokens".into(), max_tokens.to_string()),
        ("stream".into(), "True".into()),
        ("language".into(), "en".into()),
        ("stream_include_usage".into(), "True".into()),
        ("stream_continuous_usage_stats".into(), "True".into()),
    ];
    for (k, v) in extra.into_iter().flatten() {
        let text = match v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Bool(true) => "True".into(),
            serde_json::Value::Bool(false) => "False".into(),
            other => other.to_string(),
        };
        match fields.iter_mut().find(|(name, _)| name == k) {
            Some(f) => f.1 = text,
            None => fields.push((k.clone(), text)),
        }
    }
    for (k, v) in fields {
        out.extend_from_slice(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n").as_bytes(),
        );
    }
    out.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_has_the_file_then_vllms_fields_and_extra_keys_win() {
        let extra: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(r#"{"language":"de","temperature":0.2}"#).unwrap();
        let body = form("whisper", "a.wav", b"RIFF....WAVE", 64, Some(&extra));
        let text = String::from_utf8_lossy(&body);
        assert!(CONTENT_TYPE.ends_with(BOUNDARY));
        let file = text.find("name=\"file\"; filename=\"a.wav\"").unwrap();
        let model = text.find("name=\"model\"\r\n\r\nwhisper\r\n").unwrap();
        assert!(file < model, "{text}");
        assert!(text.contains("name=\"max_completion_tokens\"\r\n\r\n64\r\n"));
        assert!(text.contains("name=\"stream\"\r\n\r\nTrue\r\n"));
        assert!(text.contains("name=\"language\"\r\n\r\nde\r\n") && !text.contains("\r\n\r\nen\r\n"));
        assert!(text.contains("name=\"temperature\"\r\n\r\n0.2\r\n"));
        assert!(text.ends_with(&format!("--{BOUNDARY}--\r\n")));
    }
}
