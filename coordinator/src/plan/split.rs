//! Deterministic division of a run across agents by capacity (k6-style): agent i owns
//! the fraction [from_i, to_i) of the whole, and gets round(N*to_i) - round(N*from_i) of
//! the concurrency and the warm-ups, so shares always add up exactly. Request rates split
//! by the same fractions (superposed Poisson streams are Poisson). Request indices go
//! round-robin by index, weighted the same way ([`stripes`], D20): no two agents send the
//! same request, and each agent's requests are spread over the whole run (and over a file
//! dataset or a timed trace) instead of one agent taking its first part.

use surge_core::data::share::{MAX_WEIGHT, Stripe, stripes};
use surge_proto::PromptItem;

/// One agent's part of the run.
#[derive(Debug, Clone, PartialEq)]
pub struct Share {
    pub fraction: f64,
    /// The global request indices the agent sends.
    pub indices: Stripe,
    /// How many of them (the indices below the run's request count).
    pub num_prompts: u64,
    /// 0 = unbounded.
    pub max_concurrency: u32,
    /// Requests/s; infinite = unpaced.
    pub request_rate: f64,
    /// Warm-up requests: `--num-warmups` split like the concurrency, so the agents send
    /// exactly as many as asked.
    pub num_warmups: u32,
    /// Conversations open at once (`--multi-turn-concurrency`), split like the
    /// concurrency; 0 = unbounded.
    pub sessions: u32,
}

/// Splits `num_prompts`, `max_concurrency`, `request_rate` and `num_warmups` by `weights`
/// (capacities, each counted as 1 to [`MAX_WEIGHT`]).
pub fn split(
    weights: &[u32],
    num_prompts: u64,
    max_concurrency: Option<u32>,
    request_rate: f64,
    num_warmups: u32,
) -> Vec<Share> {
    split_sessions(weights, num_prompts, max_concurrency, request_rate, num_warmups, None)
}

/// [`split`], with the conversations open at once split too.
pub fn split_sessions(
    weights: &[u32],
    num_prompts: u64,
    max_concurrency: Option<u32>,
    request_rate: f64,
    num_warmups: u32,
    sessions: Option<u32>,
) -> Vec<Share> {
    let weights: Vec<u32> = weights.iter().map(|&w| w.clamp(1, MAX_WEIGHT)).collect();
    let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
    let mut acc = 0u64;
    let mut shares = Vec::with_capacity(weights.len());
    let unbounded = num_prompts == super::UNBOUNDED;
    for (&w, indices) in weights.iter().zip(stripes(&weights)) {
        let from = acc as f64 / total as f64;
        acc += u64::from(w);
        let to = acc as f64 / total as f64;
        let part = |n: u64| (n as f64 * to).round() as u64 - (n as f64 * from).round() as u64;
        shares.push(Share {
            fraction: to - from,
            num_prompts: if unbounded { super::UNBOUNDED } else { indices.count_below(num_prompts) },
            indices,
            max_concurrency: max_concurrency.map_or(0, |c| part(u64::from(c)) as u32),
            request_rate: if request_rate.is_finite() { request_rate * (to - from) } else { f64::INFINITY },
            num_warmups: part(u64::from(num_warmups)) as u32,
            // 0 when the bound is too small for this agent: refused before the load
            // (an agent without a slot would run its sessions unbounded).
            sessions: sessions.map_or(0, |c| part(u64::from(c)) as u32),
        });
    }
    shares
}

/// The prompts an agent needs for the `len` requests of its share of a file dataset, and
/// whether they are the whole file. A share inside the file's first pass gets its own
/// entries (item k is request k of the share); a share that runs past the end gets the
/// whole file in file order, as later passes take entries in orders of their own (D20).
pub fn slice_prompts(prompts: &[PromptItem], indices: &Stripe, len: u64) -> (Vec<PromptItem>, bool) {
    let n = prompts.len() as u64;
    if n == 0 || len == 0 {
        return (Vec::new(), false);
    }
    // Indices grow with k: the last request's is the largest (unless they wrapped).
    if len != super::UNBOUNDED && indices.index(len - 1) < n && indices.first() <= indices.index(len - 1) {
        return ((0..len).map(|k| prompts[indices.index(k) as usize].clone()).collect(), false);
    }
    (prompts.to_vec(), true)
}

/// Passes over a file of `n` entries that `issued` requests made (vLLM oversamples a
/// file that is too short; surge starts a new pass, D20). `None` without a file.
pub fn dataset_passes(n: usize, issued: u64) -> Option<u64> {
    (n > 0).then(|| issued.div_ceil(n as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_parts_add_up_and_shares_partition_the_indices() {
        for n in [1u64, 7, 10, 1000, 10_000, 12_345] {
            for weights in [vec![1, 1, 1], vec![2, 1], vec![4, 4, 2, 1], vec![1]] {
                let s = split(&weights, n, Some(2000), 100.0, 5);
                assert_eq!(s.iter().map(|x| x.num_warmups).sum::<u32>(), 5, "exactly the warm-ups asked");
                assert_eq!(s.iter().map(|x| x.num_prompts).sum::<u64>(), n);
                assert_eq!(s.iter().map(|x| u64::from(x.max_concurrency)).sum::<u64>(), 2000);
                let mut all: Vec<u64> = s.iter().flat_map(|x| (0..x.num_prompts).map(|k| x.indices.index(k))).collect();
                all.sort_unstable();
                assert_eq!(all, (0..n).collect::<Vec<_>>(), "every index once");
                assert!((s.iter().map(|x| x.request_rate).sum::<f64>() - 100.0).abs() < 1e-9);
            }
        }
    }

    #[test]
    fn agents_take_turns_by_index() {
        let s = split(&[4, 4], 10, None, f64::INFINITY, 0);
        let of = |x: &Share| (0..x.num_prompts).map(|k| x.indices.index(k)).collect::<Vec<_>>();
        assert_eq!(of(&s[0]), vec![0, 2, 4, 6, 8]);
        assert_eq!(of(&s[1]), vec![1, 3, 5, 7, 9]);
        // A run without a cap: every agent's indices, interleaved.
        let s = split(&[1, 2], super::super::UNBOUNDED, Some(30), f64::INFINITY, 0);
        assert_eq!(s[0].num_prompts, super::super::UNBOUNDED);
        assert_eq!((s[0].indices.index(0), s[1].indices.index(0), s[1].indices.index(1)), (1, 0, 2));
    }

    #[test]
    fn a_share_past_the_end_of_the_file_gets_the_whole_file() {
        let file: Vec<PromptItem> =
            (0..6).map(|i| PromptItem { text: format!("p{i}"), ..Default::default() }).collect();
        let texts = |v: &[PromptItem]| v.iter().map(|p| p.text.clone()).collect::<Vec<_>>();
        let two = split(&[1, 1], 6, None, f64::INFINITY, 0);
        let (inside, whole) = slice_prompts(&file, &two[1].indices, two[1].num_prompts);
        assert_eq!((texts(&inside), whole), (vec!["p1".to_string(), "p3".into(), "p5".into()], false));
        let (past, whole) = slice_prompts(&file, &two[1].indices, 4);
        assert_eq!((past.len(), whole), (6, true));
        assert_eq!(past[0].text, "p0", "in file order");
        assert!(slice_prompts(&file, &two[0].indices, super::super::UNBOUNDED).1, "an unbounded share");
        assert!(slice_prompts(&file, &Stripe::contiguous(u64::MAX - 1), 10).1, "indices that wrap");
        assert_eq!(dataset_passes(5, 0), Some(0));
        assert_eq!(dataset_passes(5, 5), Some(1));
        assert_eq!(dataset_passes(5, 11), Some(3));
        assert_eq!(dataset_passes(0, 11), None);
    }

    #[test]
    fn three_equal_agents() {
        let s = split(&[2, 2, 2], 10_000, Some(2000), f64::INFINITY, 0);
        let n: Vec<u64> = s.iter().map(|x| x.num_prompts).collect();
        assert_eq!(n, vec![3334, 3333, 3333]);
        let c: Vec<u32> = s.iter().map(|x| x.max_concurrency).collect();
        assert_eq!(c, vec![667, 666, 667]);
        assert!(s[0].request_rate.is_infinite());
    }
}

#[cfg(test)]
mod slice_tests {
    use super::*;

    fn item(i: u32) -> PromptItem {
        PromptItem { text: format!("p{i}"), ..Default::default() }
    }

    /// The agents' shares of a file dataset, expanded as each agent expands them, give
    /// the one-agent sequence index by index, and share no request.
    #[test]
    fn file_shares_partition_the_sequence() {
        let all: Vec<PromptItem> = (0..7).map(item).collect();
        let n = all.len() as u64;
        // Request k of a share, as the agent makes it: its own entries, or the passes.
        let expand = |s: &Share| -> Vec<(u64, String)> {
            let (got, whole) = slice_prompts(&all, &s.indices, s.num_prompts);
            (0..s.num_prompts)
                .map(|k| {
                    let i = s.indices.index(k);
                    let entry = if whole { surge_core::data::dataset::pass_entry(3, i / n, i % n, n) } else { k };
                    (i, got[entry as usize].text.clone())
                })
                .collect()
        };
        for total in [7u64, 5, 20, 13] {
            let alone = expand(&split(&[1], total, None, f64::INFINITY, 0)[0]);
            for weights in [vec![1, 1], vec![2, 1, 1]] {
                let mut parts: Vec<(u64, String)> =
                    split(&weights, total, None, f64::INFINITY, 0).iter().flat_map(expand).collect();
                parts.sort();
                assert_eq!(parts, alone, "total {total}, weights {weights:?}");
            }
            let whole: Vec<String> = alone.into_iter().map(|(_, t)| t).collect();
            // The first pass in file order, each later one every entry once.
            let first: Vec<String> = (0..total.min(n)).map(|i| format!("p{i}")).collect();
            assert_eq!(whole[..first.len()], first);
            for pass in whole.chunks(n as usize).skip(1).filter(|p| p.len() == n as usize) {
                let mut p = pass.to_vec();
                p.sort();
                assert_eq!(p, (0..n).map(|i| format!("p{i}")).collect::<Vec<_>>());
            }
        }
        assert!(slice_prompts(&[], &Stripe::contiguous(0), 5).0.is_empty());
    }
}
