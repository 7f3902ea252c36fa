//! The ground truth for prefix caching (D33): an LRU cache of prompt blocks, as vLLM's
//! automatic prefix caching keeps KV blocks.
//!
//! A prompt is its words (the echo's tokens) in order, over every message of a chat
//! request. Its full blocks of `block` words are keyed by a hash chained from the first
//! block: block j's key is the hash of block j's words and block j-1's key, so a block
//! matches only after the same whole prefix. A prompt's cached tokens are the words of the
//! longest run of leading blocks already in the cache, within its first `prompt - 1` words
//! (as vLLM, which always computes the last prompt token). Then every full block of the
//! prompt is inserted (or refreshed), the last block first, so that a prompt's earlier
//! blocks are the more recently used, and the least recently used blocks are evicted until
//! the cache holds at most `capacity` tokens: a prefix loses its tail first, as in vLLM.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

/// Prompt-block LRU cache.
#[derive(Debug)]
pub(crate) struct PrefixCache {
    /// Most tokens held (whole blocks).
    capacity: u64,
    block: usize,
    /// Block key -> the tick it was last used.
    used: HashMap<u64, u64>,
    /// Tick -> block key: the least recently used first.
    order: BTreeMap<u64, u64>,
    tick: u64,
}

/// What one prompt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lookup {
    pub cached: u64,
    pub prompt: u64,
}

impl PrefixCache {
    pub fn new(capacity_tokens: u64, block: usize) -> Self {
        Self { capacity: capacity_tokens, block: block.max(1), used: HashMap::new(), order: BTreeMap::new(), tick: 0 }
    }

    /// Forgets every block (vLLM's `POST /reset_prefix_cache`).
    pub fn clear(&mut self) {
        self.used.clear();
        self.order.clear();
    }

    /// Looks `words` up and caches its blocks.
    pub fn admit<'a>(&mut self, words: impl Iterator<Item = &'a str>) -> Lookup {
        let words: Vec<&str> = words.collect();
        let mut key = 0u64;
        let mut keys = Vec::with_capacity(words.len() / self.block);
        for chunk in words.chunks_exact(self.block) {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            key.hash(&mut h);
            chunk.hash(&mut h);
            key = h.finish();
            keys.push(key);
        }
        // Blocks that may hit: those within the first prompt - 1 words.
        let eligible = words.len().saturating_sub(1) / self.block;
        let hits = keys.iter().take(eligible).take_while(|k| self.used.contains_key(k)).count();
        let cached = (hits * self.block) as u64;
        for &k in keys.iter().rev() {
            self.touch(k);
        }
        let max_blocks = (self.capacity / self.block as u64) as usize;
        while self.used.len() > max_blocks {
            let Some((_, oldest)) = self.order.pop_first() else { break };
            self.used.remove(&oldest);
        }
        Lookup { cached, prompt: words.len() as u64 }
    }

    fn touch(&mut self, key: u64) {
        self.tick += 1;
        if let Some(old) = self.used.insert(key, self.tick) {
            self.order.remove(&old);
        }
        self.order.insert(self.tick, key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> std::str::SplitWhitespace<'_> {
        text.split_whitespace()
    }

    #[test]
    fn a_growing_prompt_hits_its_earlier_full_blocks() {
        let mut c = PrefixCache::new(1_000, 2);
        assert_eq!(c.admit(words("a b c d e")), Lookup { cached: 0, prompt: 5 });
        // The same 4 words in whole blocks, then more.
        assert_eq!(c.admit(words("a b c d e f g")), Lookup { cached: 4, prompt: 7 });
        assert_eq!(c.admit(words("a b c d e f g")).cached, 6);
        // A prompt cached whole still computes its last token: its last block is not a hit.
        assert_eq!(c.admit(words("a b c d")).cached, 2);
        // Same words after another prefix: no hit (keys chain the prefix).
        assert_eq!(c.admit(words("x y a b c d")).cached, 0);
        assert_eq!(c.admit(words("a x c d")).cached, 0, "a changed first block misses all");
    }

    #[test]
    fn least_recently_used_blocks_are_evicted_first() {
        let mut c = PrefixCache::new(4, 2);
        c.admit(words("a b c d"));
        c.admit(words("e f"));
        // The prefix's tail (c d) was its least recently used block: evicted, a b kept.
        assert_eq!(c.admit(words("a b c d x")).cached, 2);
        assert_eq!(c.used.len(), 2, "holds at most 4 tokens");
        let mut none = PrefixCache::new(0, 2);
        none.admit(words("a b"));
        assert_eq!(none.admit(words("a b")).cached, 0, "a cache of no tokens holds nothing");
    }
}
