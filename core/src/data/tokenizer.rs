//! A local tokenizer: a Hugging Face `tokenizer.json` loaded with the `tokenizers` crate
//! (nothing is ever downloaded), identified by the SHA-256 of its bytes.
//!
//! Counting never adds special tokens (no BOS/EOS): a count is the number of tokens of the
//! text itself, the quantity `--random-input-len` asks for.
//!
//! [`Tok::words`] is the vocabulary random prompts are drawn from: tokens that decode to
//! one alphabetic word behind whitespace (`" the"`, `"▁the"`) and re-encode to themselves
//! next to each other, so a sequence of them usually re-encodes to exactly as many tokens
//! (the generator in [`crate::data::synth`] checks and adjusts anyway).
//!
//! Agents get the bytes from the coordinator with their hash and keep parsed tokenizers in
//! a small process-wide cache ([`cached`]), so a sweep parses a tokenizer once.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use tokenizers::Tokenizer;

/// Tokenizers kept parsed per process.
const CACHE_MAX: usize = 4;
/// Below this many word tokens, any cleanly decoding token is used instead.
const MIN_WORDS: usize = 16;
/// Longest word token considered (bytes).
const MAX_WORD_BYTES: usize = 32;

/// A loaded tokenizer.
pub struct Tok {
    inner: Tokenizer,
    sha256: String,
    words: OnceLock<Vec<u32>>,
}

impl std::fmt::Debug for Tok {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tok").field("sha256", &self.sha256).finish_non_exhaustive()
    }
}

/// Why a tokenizer cannot be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerError {
    /// The file cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file was read but is not a usable tokenizer.
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: Box<TokenizerError>,
    },
    /// The `tokenizers` library refused the JSON.
    #[error("not a valid tokenizer.json: {0}")]
    Invalid(#[source] tokenizers::Error),
    /// The `tokenizers` library panicked on the JSON (reported as bad input, not a crash).
    #[error("the tokenizers library panicked while parsing it")]
    Panicked,
    /// Only the hash was sent, and no tokenizer with it is cached in this process.
    #[error("tokenizer {0} is not cached here and its bytes were not sent")]
    NotCached(String),
    /// The bytes sent are not those of the announced hash.
    #[error("tokenizer bytes hash to {actual}, not the announced {announced}")]
    HashMismatch { actual: String, announced: String },
}

impl TokenizerError {
    fn in_file(self, path: &Path) -> Self {
        Self::File { path: path.to_path_buf(), source: Box::new(self) }
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>, TokenizerError> {
    std::fs::read(path).map_err(|source| TokenizerError::Read { path: path.to_path_buf(), source })
}

/// The lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// `path` itself, or `path/tokenizer.json` when `path` is a directory.
pub fn resolve(path: &Path) -> PathBuf {
    if path.is_dir() { path.join("tokenizer.json") } else { path.to_path_buf() }
}

/// Reads a tokenizer file (or a directory holding `tokenizer.json`) and parses it.
/// Returns the file's bytes (to ship to agents) and the tokenizer.
pub fn load_path(path: &Path) -> Result<(Vec<u8>, Tok), TokenizerError> {
    let file = resolve(path);
    let bytes = read_file(&file)?;
    let tok = Tok::from_bytes(&bytes).map_err(|e| e.in_file(&file))?;
    Ok((bytes, tok))
}

impl Tok {
    /// Parses the JSON of a `tokenizer.json`.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, TokenizerError> {
        // The library reports bad JSON as errors; a panic inside it would still be a bug
        // to report as bad input, not a crash of the agent.
        let parsed = std::panic::catch_unwind(|| Tokenizer::from_bytes(bytes)).map_err(|_| TokenizerError::Panicked)?;
        let inner = parsed.map_err(TokenizerError::Invalid)?;
        Ok(Self { inner, sha256: sha256_hex(bytes), words: OnceLock::new() })
    }

    /// Hex SHA-256 of the bytes it was parsed from.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Token ids of `text`, without special tokens (empty if the tokenizer fails).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.inner.encode_fast(text, false).map(|e| e.get_ids().to_vec()).unwrap_or_default()
    }

    /// Number of tokens of `text`, without special tokens.
    pub fn count(&self, text: &str) -> u32 {
        match self.inner.encode_fast(text, false) {
            Ok(e) => u32::try_from(e.len()).unwrap_or(u32::MAX),
            Err(_) => u32::try_from(text.split_whitespace().count()).unwrap_or(u32::MAX),
        }
    }

    /// The text of `ids` (special tokens skipped; empty if the tokenizer fails).
    pub fn decode(&self, ids: &[u32]) -> String {
        self.inner.decode(ids, true).unwrap_or_default()
    }

    /// The ids random prompts are drawn from, in id order (computed once, on first use).
    pub fn words(&self) -> &[u32] {
        self.words.get_or_init(|| self.find_words())
    }

    fn find_words(&self) -> Vec<u32> {
        let added: std::collections::HashSet<u32> = self.inner.get_added_tokens_decoder().keys().copied().collect();
        let n = u32::try_from(self.inner.get_vocab_size(false)).unwrap_or(u32::MAX);
        let ids = (0..n).filter(|id| !added.contains(id));
        let words: Vec<u32> = ids.clone().filter(|&id| self.is_word(id)).collect();
        if words.len() >= MIN_WORDS {
            return words;
        }
        ids.filter(|&id| {
            let s = self.decode(&[id]);
            !s.trim().is_empty() && !s.contains('\u{FFFD}')
        })
        .collect()
    }

    /// One alphabetic word behind whitespace, re-encoding to itself twice in a row.
    fn is_word(&self, id: u32) -> bool {
        let single = self.decode(&[id]);
        let w = single.trim_start();
        if w.is_empty() || w.len() > MAX_WORD_BYTES || !w.chars().all(char::is_alphabetic) {
            return false;
        }
        let pair = self.decode(&[id, id]);
        pair.trim_start() == format!("{w} {w}") && self.encode(&pair) == [id, id]
    }
}

/// The tokenizer of `bytes`, claimed to hash to `sha256`: parsed once per process and
/// kept (a few, most recent first). `bytes` may be empty when `sha256` is already cached.
pub fn cached(sha256: &str, bytes: &[u8]) -> Result<Arc<Tok>, TokenizerError> {
    static CACHE: OnceLock<Mutex<Vec<Arc<Tok>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(Vec::new()));
    let hit = |c: &mut Vec<Arc<Tok>>| {
        let i = c.iter().position(|t| t.sha256 == sha256)?;
        let t = c.remove(i);
        c.insert(0, Arc::clone(&t));
        Some(t)
    };
    if let Some(t) = hit(&mut cache.lock().unwrap_or_else(|e| e.into_inner())) {
        return Ok(t);
    }
    if bytes.is_empty() {
        return Err(TokenizerError::NotCached(sha256.to_string()));
    }
    let actual = sha256_hex(bytes);
    if !sha256.is_empty() && actual != sha256 {
        return Err(TokenizerError::HashMismatch { actual, announced: sha256.to_string() });
    }
    let tok = Arc::new(Tok::from_bytes(bytes)?);
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = hit(&mut c) {
        return Ok(t);
    }
    c.insert(0, Arc::clone(&tok));
    c.truncate(CACHE_MAX);
    Ok(tok)
}

/// Parsed tokenizers by path, for tests and tools that load the same file repeatedly.
pub fn load_cached_path(path: &Path) -> Result<Arc<Tok>, TokenizerError> {
    static BY_PATH: OnceLock<Mutex<HashMap<PathBuf, String>>> = OnceLock::new();
    let map = BY_PATH.get_or_init(|| Mutex::new(HashMap::new()));
    let file = resolve(path);
    let known = map.lock().unwrap_or_else(|e| e.into_inner()).get(&file).cloned();
    if let Some(t) = known.and_then(|sha| cached(&sha, &[]).ok()) {
        return Ok(t);
    }
    let bytes = read_file(&file)?;
    let sha = sha256_hex(&bytes);
    let tok = cached(&sha, &bytes).map_err(|e| e.in_file(&file))?;
    map.lock().unwrap_or_else(|e| e.into_inner()).insert(file, sha);
    Ok(tok)
}

/// The test fixture `tests/fixtures/tokenizer/tokenizer.json` (a tiny byte-level BPE).
#[cfg(test)]
pub(crate) fn fixture() -> Arc<Tok> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tokenizer");
    load_cached_path(&p).expect("fixture tokenizer")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixture_loads_counts_and_has_words() {
        let t = fixture();
        assert_eq!(t.sha256().len(), 64);
        assert!(t.count("The quick brown fox jumps over the lazy dog.") > 9);
        assert_eq!(t.count(""), 0);
        let words = t.words();
        assert!(words.len() > 100, "{} word tokens", words.len());
        for &id in &words[..10] {
            let s = t.decode(&[id]);
            assert!(s.starts_with(' '), "{s:?}");
            assert_eq!(t.encode(&s), [id]);
        }
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert!(Tok::from_bytes(b"").is_err());
        assert!(Tok::from_bytes(b"{\"model\": 5}").is_err());
        assert!(Tok::from_bytes(&[0xff, 0xfe, 0x00]).is_err());
        assert!(load_path(Path::new("/nonexistent/tok")).is_err());
        let t = fixture();
        assert!(cached(t.sha256(), &[]).is_ok());
        assert!(cached(&"0".repeat(64), &[]).is_err());
        assert!(cached(&"0".repeat(64), b"{}").is_err());
    }

    #[test]
    fn errors_name_the_file_and_keep_their_cause() {
        use std::error::Error as _;
        let e = load_path(Path::new("/nonexistent/tok")).unwrap_err();
        assert!(matches!(&e, TokenizerError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound));
        assert!(e.to_string().starts_with("/nonexistent/tok: "), "{e}");
        let bad = std::env::temp_dir().join(format!("surge-bad-tok-{}.json", std::process::id()));
        std::fs::write(&bad, b"{\"model\": 5}").unwrap();
        let e = load_path(&bad).unwrap_err();
        std::fs::remove_file(&bad).unwrap();
        let text = e.to_string();
        assert!(text.starts_with(&bad.display().to_string()) && text.contains("not a valid tokenizer.json"), "{text}");
        let TokenizerError::File { source, .. } = &e else { panic!("{e:?}") };
        assert!(matches!(**source, TokenizerError::Invalid(_)), "{e:?}");
        assert!(e.source().is_some_and(|s| s.source().is_some()), "the library's error is in the chain");
        assert!(matches!(cached(&"0".repeat(64), &[]).unwrap_err(), TokenizerError::NotCached(_)));
        assert!(matches!(cached("abc", b"x").unwrap_err(), TokenizerError::HashMismatch { .. }));
    }
}
