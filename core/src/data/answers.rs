//! Accuracy questions and how their replies are scored (D71): a local JSONL file of
//! prompts with expected answers (GSM8K- and MMLU-style), each line `{"prompt": ...}` with
//! one of `"answer"` (the reply, trimmed, equals it, ignoring case), `"regex"` (matches
//! somewhere in the reply; an `"answer"` beside it is only an example), `"number"` (the reply's last number equals it within 1e-6 of
//! its size) or `"choice"` (the reply's first standalone capital letter A-J is it), and
//! optionally `"max_tokens"` (64 when absent). Nothing is downloaded.

use regex::Regex;
use surge_proto::{AccuracyItem, AnswerKind};

/// Output tokens asked of a question that names none.
pub const DEFAULT_MAX_TOKENS: u32 = 64;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    prompt: String,
    #[serde(default)]
    answer: Option<String>,
    #[serde(default)]
    regex: Option<String>,
    #[serde(default)]
    number: Option<serde_json::Value>,
    #[serde(default)]
    choice: Option<String>,
    #[serde(default)]
    max_tokens: Option<u32>,
}

/// One line of an accuracy file, checked (its regex compiles, its number parses).
pub fn parse_line(text: &str) -> Result<AccuracyItem, String> {
    let l: Line = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let number = match &l.number {
        None => None,
        Some(serde_json::Value::Number(n)) => Some(n.to_string()),
        Some(serde_json::Value::String(s)) if s.trim().parse::<f64>().is_ok() => Some(s.trim().to_string()),
        Some(v) => return Err(format!("\"number\" {v}: not a number")),
    };
    let (kind, expected) = match (l.answer, l.regex, number, l.choice) {
        // A regex line may carry an `answer` too: an example of a right one (the echo's).
        (_, Some(r), None, None) => {
            Regex::new(&r).map_err(|e| format!("\"regex\" {r:?}: {e}"))?;
            (AnswerKind::Regex, r)
        }
        (Some(a), None, None, None) => (AnswerKind::Exact, a),
        (None, None, Some(n), None) => (AnswerKind::Number, n),
        (None, None, None, Some(c)) if c.len() == 1 && ('A'..='J').contains(&c.chars().next().unwrap_or(' ')) => {
            (AnswerKind::Choice, c)
        }
        (None, None, None, Some(c)) => return Err(format!("\"choice\" {c:?}: one capital letter from A to J")),
        _ => return Err("one of \"answer\", \"regex\", \"number\" or \"choice\", exactly".to_string()),
    };
    if l.prompt.is_empty() {
        return Err("\"prompt\" is empty".to_string());
    }
    let max_tokens = l.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS).max(1);
    Ok(AccuracyItem { prompt: l.prompt, kind: kind as i32, expected, max_tokens })
}

/// Reads an accuracy file's text: its questions, or the first bad line's number and why.
pub fn parse(text: &str) -> Result<Vec<AccuracyItem>, String> {
    let mut items = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        items.push(parse_line(line).map_err(|e| format!("line {}: {e}", n + 1))?);
    }
    if items.is_empty() {
        return Err("no question in the file".to_string());
    }
    Ok(items)
}

/// The questions of a run, their regexes compiled once.
#[derive(Debug)]
pub struct Scorer {
    items: Vec<AccuracyItem>,
    regexes: Vec<Option<Regex>>,
}

fn last_number(text: &str) -> Option<f64> {
    let re = number_pattern();
    re.find_iter(text).last().and_then(|m| m.as_str().replace(',', "").parse().ok())
}

fn number_pattern() -> &'static Regex {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| Regex::new(r"-?\d[\d,]*(?:\.\d+)?").expect("a valid pattern"))
}

fn first_choice(text: &str) -> Option<char> {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| Regex::new(r"\b([A-J])\b").expect("a valid pattern"));
    re.captures(text).and_then(|c| c[1].chars().next())
}

impl Scorer {
    /// `items` as a workload carries them; a regex that does not compile is an error.
    pub fn new(items: Vec<AccuracyItem>) -> Result<Self, String> {
        let regexes = items
            .iter()
            .map(|i| match i.kind() {
                AnswerKind::Regex => Regex::new(&i.expected).map(Some).map_err(|e| e.to_string()),
                _ => Ok(None),
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { items, regexes })
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn item(&self, i: usize) -> &AccuracyItem {
        &self.items[i]
    }

    /// Whether `reply` answers question `i`.
    pub fn score(&self, i: usize, reply: &str) -> bool {
        let item = &self.items[i];
        match item.kind() {
            AnswerKind::Exact => reply.trim().eq_ignore_ascii_case(item.expected.trim()),
            AnswerKind::Regex => self.regexes[i].as_ref().is_some_and(|r| r.is_match(reply)),
            AnswerKind::Number => match (last_number(reply), item.expected.parse::<f64>()) {
                (Some(got), Ok(want)) => (got - want).abs() <= 1e-6 * want.abs().max(1.0),
                _ => false,
            },
            AnswerKind::Choice => first_choice(reply).is_some_and(|c| item.expected.starts_with(c)),
            AnswerKind::Unspecified => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_is_read_and_scored() {
        let text = r#"{"prompt": "2+2?", "number": 4}
{"prompt": "Capital of France?", "answer": "Paris"}
{"prompt": "Pick one", "choice": "C", "max_tokens": 8}

{"prompt": "Say hello", "regex": "(?i)hel+o"}"#;
        let s = Scorer::new(parse(text).unwrap()).unwrap();
        assert_eq!(s.len(), 4);
        assert!(s.score(0, "Let me think: 2 + 2 = 4") && s.score(0, "The answer is 4.0") && !s.score(0, "4 or 5"));
        assert!(s.score(0, "1,234 then 4"), "the last number");
        assert!(s.score(1, "  paris ") && !s.score(1, "Paris, France"));
        assert!(s.score(2, "The answer is C.") && !s.score(2, "Clearly (B)") && !s.score(2, "Cats"));
        assert_eq!((s.item(2).max_tokens, s.item(0).max_tokens), (8, DEFAULT_MAX_TOKENS));
        assert!(s.score(3, "well HELLO there") && !s.score(3, "bye"));
    }

    #[test]
    fn bad_lines_say_why() {
        assert!(parse(r#"{"prompt": "x"}"#).unwrap_err().contains("one of"));
        assert!(parse(r#"{"prompt": "x", "answer": "a", "number": 1}"#).unwrap_err().contains("exactly"));
        assert!(parse(r#"{"prompt": "x", "answer": "a", "regex": "a+"}"#).is_ok(), "an example beside a regex");
        assert!(parse(r#"{"prompt": "x", "regex": "("}"#).unwrap_err().contains("regex"));
        assert!(parse(r#"{"prompt": "x", "choice": "Z"}"#).unwrap_err().contains("A to J"));
        assert!(parse(r#"{"prompt": "x", "number": "many"}"#).unwrap_err().contains("not a number"));
        assert!(parse("{\"prompt\": \"a\", \"answer\": \"b\"}\nnot json").unwrap_err().starts_with("line 2:"));
        assert!(parse("\n").unwrap_err().contains("no question"));
    }
}
