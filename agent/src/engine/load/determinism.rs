//! `--check-determinism` (D70): the same request (its body's hash) answered with other text
//! (its hash) than the first time is an anomaly. Each agent remembers at most [`MAX`]
//! requests (the first ones it sees): the memory is bounded whatever the run's length, and
//! a run that sends the same prompts again (a file dataset's passes, a fixed prompt,
//! questions) is checked on them.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

/// Distinct request bodies remembered (16 bytes each).
pub const MAX: usize = 1 << 16;

fn hash(bytes: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// Body hash -> the first reply's text hash.
#[derive(Debug, Default)]
pub struct Replies(Mutex<HashMap<u64, u64>>);

impl Replies {
    /// The body's key.
    pub fn key(body: &[u8]) -> u64 {
        hash(body)
    }

    /// Whether `text` differs from the first reply to the request keyed `key` (remembered
    /// when there is room).
    pub fn differs(&self, key: u64, text: &str) -> bool {
        let t = hash(text.as_bytes());
        let mut seen = self.0.lock().expect("replies lock");
        match seen.get(&key) {
            Some(&first) => first != t,
            None => {
                if seen.len() < MAX {
                    seen.insert(key, t);
                }
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_request_must_get_the_same_text() {
        let r = Replies::default();
        let (a, b) = (Replies::key(b"prompt a"), Replies::key(b"prompt b"));
        assert!(!r.differs(a, "one two"));
        assert!(!r.differs(a, "one two"), "the same text");
        assert!(r.differs(a, "one three"), "other text");
        assert!(!r.differs(b, "one three"), "another request's first reply");
    }
}
