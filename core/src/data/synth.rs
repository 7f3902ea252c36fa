//! Text of an exact number of tokens: draw token ids from the tokenizer's word vocabulary
//! ([`Tok::words`]) with a seeded RNG, decode them, re-encode the text, and adjust (drop
//! tokens from the end when it came out longer, draw more when shorter) until the text
//! re-encodes to exactly the length asked for, in a bounded number of rounds. When that
//! is impossible for some tokenizer, the closest text and its true count are returned.

use super::tokenizer::Tok;
use rand::Rng;

/// Decode / re-encode rounds at most.
const MAX_ROUNDS: usize = 16;

/// `n` token ids drawn uniformly from the word vocabulary (none if it is empty).
pub fn draw(tok: &Tok, rng: &mut impl Rng, n: usize) -> Vec<u32> {
    let words = tok.words();
    if words.is_empty() {
        return Vec::new();
    }
    (0..n).map(|_| words[rng.random_range(0..words.len())]).collect()
}

/// The text of `prefix` followed by `n` random tokens, re-encoding to exactly
/// `prefix.len() + n` tokens when possible (only the random part is adjusted). Returns the
/// text and its actual token count.
pub fn exact(tok: &Tok, rng: &mut impl Rng, prefix: &[u32], n: usize) -> (String, u32) {
    let target = prefix.len() + n;
    let mut ids = prefix.to_vec();
    ids.extend(draw(tok, rng, n));
    let mut best: Option<(String, usize)> = None;
    for _ in 0..MAX_ROUNDS {
        let text = tok.decode(&ids);
        let m = tok.count(&text) as usize;
        if m == target {
            return (text, m as u32);
        }
        let miss = m.abs_diff(target);
        let step = if m > target {
            let drop = (m - target).min(ids.len() - prefix.len());
            ids.truncate(ids.len() - drop);
            drop
        } else {
            let more = draw(tok, rng, target - m);
            let k = more.len();
            ids.extend(more);
            k
        };
        if best.as_ref().is_none_or(|(_, b)| miss < b.abs_diff(target)) {
            best = Some((text, m));
        }
        if step == 0 {
            break;
        }
    }
    let (text, m) = best.unwrap_or_default();
    (text, u32::try_from(m).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::tokenizer::fixture;
    use rand::{SeedableRng, rngs::SmallRng};

    #[test]
    fn exact_lengths_with_and_without_prefix() {
        let t = fixture();
        let mut rng = SmallRng::seed_from_u64(1);
        for n in [0, 1, 2, 7, 100, 333] {
            let (text, m) = exact(&t, &mut rng, &[], n);
            assert_eq!(m as usize, n);
            assert_eq!(t.count(&text) as usize, n, "{text:?}");
        }
        let prefix = draw(&t, &mut rng, 50);
        let (text, m) = exact(&t, &mut rng, &prefix, 70);
        assert_eq!((m, t.count(&text)), (120, 120));
        assert!(text.starts_with(&t.decode(&prefix)));
    }
}
