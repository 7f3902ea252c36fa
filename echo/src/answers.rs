//! `--answers FILE` (D71): the questions of an accuracy file and their right answers, so
//! the echo answers them as a correct model would (and, at `--wrong-answer-rate`, as a
//! wrong one). Loaded once at start; the answers' tokens live as long as the process.

use std::collections::HashMap;
use std::path::Path;

/// A question's prompt (trimmed) -> its answer's tokens (words, each after the first
/// with its leading space).
pub(crate) type Answers = HashMap<String, &'static [&'static str]>;

/// What a wrong answer says.
pub(crate) const WRONG: &[&str] = &["wrong"];

#[derive(serde::Deserialize)]
struct Line {
    prompt: String,
    #[serde(default)]
    answer: Option<String>,
    #[serde(default)]
    number: Option<serde_json::Value>,
    #[serde(default)]
    choice: Option<String>,
}

fn tokens(text: &str) -> &'static [&'static str] {
    let words: Vec<&'static str> = text
        .split_whitespace()
        .enumerate()
        .map(|(k, w)| -> &'static str {
            Box::leak(if k == 0 { w.to_string() } else { format!(" {w}") }.into_boxed_str())
        })
        .collect();
    Box::leak(words.into_boxed_slice())
}

/// The file's questions with an answer the echo can give (a `regex` line needs an
/// `answer` too); a line that does not parse is an error naming it.
pub(crate) fn load(path: &Path) -> Result<Answers, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let mut out = Answers::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let l: Line = serde_json::from_str(line).map_err(|e| format!("line {}: {e}", n + 1))?;
        let answer = l.answer.or_else(|| l.number.map(|v| v.to_string().trim_matches('"').to_string())).or(l.choice);
        if let Some(a) = answer.filter(|a| !a.trim().is_empty()) {
            out.insert(l.prompt.trim().to_string(), tokens(&a));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_line_gives_its_answer_as_tokens() {
        let dir = std::env::temp_dir().join(format!("surge-echo-answers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("q.jsonl");
        let text = "{\"prompt\": \"2+2? \", \"number\": 4}\n{\"prompt\": \"Capital?\", \"answer\": \"the city of Paris\"}\n{\"prompt\": \"x\", \"regex\": \"y\"}\n";
        std::fs::write(&f, text).unwrap();
        let a = load(&f).unwrap();
        assert_eq!(a["2+2?"], ["4"]);
        assert_eq!(a["Capital?"], ["the", " city", " of", " Paris"]);
        assert!(!a.contains_key("x"), "a regex alone gives the echo nothing to say");
        std::fs::write(&f, "not json\n").unwrap();
        assert!(load(&f).unwrap_err().starts_with("line 1"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
