//! Request prompts: request `i` of a run is a pure function of the dataset spec and `i`,
//! so every agent can build exactly its own slice and the union of all slices equals the
//! dataset one agent would have built.
//!
//! `random` without a tokenizer: the prompt is `random_input_len` words drawn (seeded by
//! `seed` and `i`) from a list of short, common English words. Each of them, with its
//! leading space, is a single token in the BPE vocabularies of the common model families,
//! so the prompt is about `random_input_len` tokens; the echo server, which counts
//! whitespace-separated words, sees exactly that many. Exact lengths for a given model
//! need its tokenizer (planned: `--tokenizer`).

use rand::{Rng, SeedableRng, rngs::SmallRng};
use surge_proto::{DatasetKind, DatasetSpec};

/// One request's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    pub text: String,
    /// Approximate prompt tokens (exact for the echo server).
    pub input_tokens: u32,
    /// `max_tokens` to ask for.
    pub output_tokens: u32,
}

const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are",
    "as", "with", "his", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by",
    "word", "but", "not", "what", "all", "were", "we", "when", "your", "can", "said", "there",
    "use", "an", "each", "which", "she", "do", "how", "their", "if", "will", "up", "other",
    "about", "out", "many", "then", "them", "these", "so", "some", "her", "would", "make",
    "like", "him", "into", "time", "has", "look", "two", "more", "write", "go", "see", "number",
    "no", "way", "could", "people", "my", "than", "first", "water", "been", "call", "who",
    "oil", "its", "now", "find", "long", "down", "day", "did", "get", "come", "made", "may",
    "part", "over", "new", "sound", "take", "only", "little", "work", "know", "place", "year",
    "live", "me", "back", "give", "most", "very", "after", "thing", "our", "just", "name",
    "good", "man", "think", "say", "great", "where", "help", "through", "much", "before",
    "line", "right", "too", "mean", "old", "any", "same", "tell", "boy", "follow", "came",
    "want", "show", "also", "around", "form", "three", "small", "set", "put", "end", "does",
    "another", "well", "large", "must", "big", "even", "such", "because", "turn", "here",
    "why", "ask", "went", "men", "read", "need", "land", "different", "home", "us", "move",
    "try", "kind", "hand", "picture", "again", "change", "off", "play", "spell", "air", "away",
    "animal", "house", "point", "page", "letter", "mother", "answer", "found", "study", "still",
    "learn", "should", "world", "high", "every", "near", "add", "food", "between", "own",
    "below", "country", "plant", "last", "school", "father", "keep", "tree", "never", "start",
    "city", "earth", "eye", "light", "thought", "head", "under", "story", "saw", "left",
];

/// Builds request `index` of the dataset.
pub fn prompt(spec: &DatasetSpec, index: u64) -> Prompt {
    match spec.kind() {
        DatasetKind::Fixed => Prompt {
            text: spec.prompt.clone(),
            input_tokens: spec.prompt.split_whitespace().count() as u32,
            output_tokens: spec.fixed_output_len,
        },
        DatasetKind::Random | DatasetKind::Unspecified => {
            let mut rng = SmallRng::seed_from_u64(mix(spec.seed, index));
            let n = spec.random_input_len as usize;
            let mut text = String::with_capacity(n * 6);
            for k in 0..n {
                if k > 0 {
                    text.push(' ');
                }
                text.push_str(WORDS[rng.random_range(0..WORDS.len())]);
            }
            Prompt { text, input_tokens: n as u32, output_tokens: spec.random_output_len }
        }
    }
}

/// Builds the slice `[start, start + len)`.
pub fn slice(spec: &DatasetSpec, start: u64, len: u64) -> Vec<Prompt> {
    (start..start + len).map(|i| prompt(spec, i)).collect()
}

/// SplitMix64 of (seed, index): independent streams per request.
fn mix(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(len: u32) -> DatasetSpec {
        DatasetSpec {
            kind: DatasetKind::Random as i32,
            seed: 7,
            random_input_len: len,
            random_output_len: 3,
            ..Default::default()
        }
    }

    #[test]
    fn random_prompt_has_exactly_n_words_and_is_reproducible() {
        let s = random(128);
        let p = prompt(&s, 5);
        assert_eq!(p.text.split_whitespace().count(), 128);
        assert_eq!(p, prompt(&s, 5));
        assert_ne!(p.text, prompt(&s, 6).text);
    }

    #[test]
    fn slices_partition_the_dataset() {
        let s = random(16);
        let whole = slice(&s, 0, 10);
        let mut parts = slice(&s, 0, 3);
        parts.extend(slice(&s, 3, 7));
        assert_eq!(parts, whole);
    }
}
