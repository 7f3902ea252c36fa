//! How the server counts prompt tokens: whitespace-separated words (the default), or the
//! tokens of a local `tokenizer.json` given with `--tokenizer` (file or directory holding
//! one), without special tokens. This is the echo server's own reading of the tokenizer
//! (the `tokenizers` crate directly), sharing no code with the client it checks.

use std::path::{Path, PathBuf};
use tokenizers::Tokenizer;

/// A prompt-token counter.
pub(crate) enum Counter {
    Words,
    Tokenizer(Box<Tokenizer>),
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Counter::Words => "Counter::Words",
            Counter::Tokenizer(_) => "Counter::Tokenizer",
        })
    }
}

/// `path`, or `path/tokenizer.json` when it is a directory.
pub(crate) fn resolve(path: &Path) -> PathBuf {
    if path.is_dir() { path.join("tokenizer.json") } else { path.to_path_buf() }
}

impl Counter {
    /// Words without a path; the tokenizer at `path` otherwise (the error names the file).
    pub fn load(path: Option<&Path>) -> Result<Self, String> {
        let Some(path) = path else {
            return Ok(Counter::Words);
        };
        let file = resolve(path);
        let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let parsed = std::panic::catch_unwind(|| Tokenizer::from_bytes(&bytes))
            .map_err(|_| format!("{}: the tokenizers library panicked", file.display()))?;
        let tok = parsed.map_err(|e| format!("{}: not a valid tokenizer.json: {e}", file.display()))?;
        Ok(Counter::Tokenizer(Box::new(tok)))
    }

    /// Prompt tokens of `text`.
    pub fn count(&self, text: &str) -> u64 {
        let words = || text.split_whitespace().count() as u64;
        match self {
            Counter::Words => words(),
            Counter::Tokenizer(t) => t.encode_fast(text, false).map_or_else(|_| words(), |e| e.len() as u64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_tokenizer_and_bad_files() {
        assert_eq!(Counter::Words.count(" a  b\nc "), 3);
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tokenizer");
        let t = Counter::load(Some(&dir)).unwrap();
        assert!(t.count("The quick brown fox jumps over the lazy dog.") > 9);
        assert_eq!(t.count(""), 0);
        assert!(Counter::load(Some(Path::new("/nonexistent.json"))).is_err());
        let bad = std::env::temp_dir().join(format!("echo-bad-tok-{}.json", std::process::id()));
        std::fs::write(&bad, "{\"model\": 1}").unwrap();
        let err = Counter::load(Some(&bad)).unwrap_err();
        assert!(err.contains("not a valid tokenizer.json"), "{err}");
        let _ = std::fs::remove_file(bad);
    }
}
