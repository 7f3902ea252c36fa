//! Deterministic division of a run across agents by capacity (k6-style): agent i owns
//! the fraction [from_i, to_i) of the whole, and gets round(N*to_i) - round(N*from_i) of
//! any integer quantity N, so shares always add up to N exactly. Request rates split by
//! the same fractions (superposed Poisson streams are Poisson); request indices are
//! contiguous slices, so no two agents send the same prompt.

use surge_proto::PromptItem;

/// One agent's part of the run.
#[derive(Debug, Clone, PartialEq)]
pub struct Share {
    pub fraction: f64,
    pub slice_start: u64,
    pub num_prompts: u64,
    /// 0 = unbounded.
    pub max_concurrency: u32,
    /// Requests/s; infinite = unpaced.
    pub request_rate: f64,
    /// Warm-up requests: `--num-warmups` split like the prompts, so the agents send
    /// exactly as many as asked.
    pub num_warmups: u32,
}

/// Splits `num_prompts`, `max_concurrency`, `request_rate` and `num_warmups` by `weights`
/// (capacities).
pub fn split(
    weights: &[u32],
    num_prompts: u64,
    max_concurrency: Option<u32>,
    request_rate: f64,
    num_warmups: u32,
) -> Vec<Share> {
    let total: u64 = weights.iter().map(|&w| u64::from(w.max(1))).sum();
    let mut acc = 0u64;
    let mut shares = Vec::with_capacity(weights.len());
    // Without a cap, each agent gets its own index range, far apart.
    let unbounded = num_prompts == super::UNBOUNDED;
    for (i, &w) in weights.iter().enumerate() {
        let from = acc as f64 / total as f64;
        acc += u64::from(w.max(1));
        let to = acc as f64 / total as f64;
        let part = |n: u64| (n as f64 * to).round() as u64 - (n as f64 * from).round() as u64;
        shares.push(Share {
            fraction: to - from,
            slice_start: if unbounded { (i as u64) << 56 } else { (num_prompts as f64 * from).round() as u64 },
            num_prompts: if unbounded { super::UNBOUNDED } else { part(num_prompts) },
            max_concurrency: max_concurrency.map_or(0, |c| part(u64::from(c)) as u32),
            request_rate: if request_rate.is_finite() { request_rate * (to - from) } else { f64::INFINITY },
            num_warmups: part(u64::from(num_warmups)) as u32,
        });
    }
    shares
}

/// The prompts an agent needs for requests `[start, start + len)` of a file dataset, and
/// whether they are the whole file. A slice inside the file's first pass gets its own
/// entries (item k is request `start + k`); a slice that runs past the end gets the whole
/// file in file order, as later passes take entries in orders of their own (D20).
pub fn slice_prompts(prompts: &[PromptItem], start: u64, len: u64) -> (Vec<PromptItem>, bool) {
    let n = prompts.len() as u64;
    if n == 0 {
        return (Vec::new(), false);
    }
    match start.checked_add(len) {
        Some(end) if end <= n => ((start..end).map(|i| prompts[i as usize].clone()).collect(), false),
        _ => (prompts.to_vec(), true),
    }
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
    fn integer_parts_add_up_and_slices_tile() {
        for n in [1u64, 7, 10, 1000, 10_000, 12_345] {
            for weights in [vec![1, 1, 1], vec![2, 1], vec![4, 4, 2, 1], vec![1]] {
                let s = split(&weights, n, Some(2000), 100.0, 5);
                assert_eq!(s.iter().map(|x| x.num_warmups).sum::<u32>(), 5, "exactly the warm-ups asked");
                assert_eq!(s.iter().map(|x| x.num_prompts).sum::<u64>(), n);
                assert_eq!(s.iter().map(|x| u64::from(x.max_concurrency)).sum::<u64>(), 2000);
                let mut next = 0;
                for x in &s {
                    assert_eq!(x.slice_start, next);
                    next += x.num_prompts;
                }
                assert!((s.iter().map(|x| x.request_rate).sum::<f64>() - 100.0).abs() < 1e-9);
            }
        }
    }

    #[test]
    fn a_slice_past_the_end_of_the_file_gets_the_whole_file() {
        let file: Vec<PromptItem> =
            (0..5).map(|i| PromptItem { text: format!("p{i}"), ..Default::default() }).collect();
        let texts = |v: &[PromptItem]| v.iter().map(|p| p.text.clone()).collect::<Vec<_>>();
        let (inside, whole) = slice_prompts(&file, 1, 3);
        assert_eq!((texts(&inside), whole), (vec!["p1".to_string(), "p2".into(), "p3".into()], false));
        let (past, whole) = slice_prompts(&file, 3, 4);
        assert_eq!((past.len(), whole), (5, true));
        assert_eq!(past[0].text, "p0", "in file order");
        assert!(slice_prompts(&file, u64::MAX - 1, 10).1, "an unbounded slice");
        assert_eq!(dataset_passes(5, 0), Some(0));
        assert_eq!(dataset_passes(5, 5), Some(1));
        assert_eq!(dataset_passes(5, 11), Some(3));
        assert_eq!(dataset_passes(0, 11), None);
    }

    #[test]
    fn three_equal_agents() {
        let s = split(&[2, 2, 2], 10_000, Some(2000), f64::INFINITY, 0);
        let n: Vec<u64> = s.iter().map(|x| x.num_prompts).collect();
        assert_eq!(n, vec![3333, 3334, 3333]);
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

    /// Agent slices of a file dataset, expanded as the agent expands them, equal the
    /// one-agent sequence and share no request.
    #[test]
    fn file_slices_partition_the_sequence() {
        let all: Vec<PromptItem> = (0..7).map(item).collect();
        let n = all.len() as u64;
        let expand = |start: u64, len: u64| -> Vec<String> {
            let (got, whole) = slice_prompts(&all, start, len);
            (0..len)
                .map(|k| {
                    let i = start + k;
                    let entry = if whole { surge_agent::data::dataset::pass_entry(3, i / n, i % n, n) } else { k };
                    got[entry as usize].text.clone()
                })
                .collect()
        };
        for (total, cut) in [(7u64, 3u64), (5, 2), (20, 9), (20, 13)] {
            let whole = expand(0, total);
            let mut parts = expand(0, cut);
            parts.extend(expand(cut, total - cut));
            assert_eq!(parts, whole, "total {total} cut {cut}");
            // The first pass in file order, each later one every entry once.
            let first: Vec<String> = (0..total.min(n)).map(|i| format!("p{i}")).collect();
            assert_eq!(whole[..first.len()], first);
            for pass in whole.chunks(n as usize).skip(1).filter(|p| p.len() == n as usize) {
                let mut p = pass.to_vec();
                p.sort();
                assert_eq!(p, (0..n).map(|i| format!("p{i}")).collect::<Vec<_>>());
            }
        }
        assert!(slice_prompts(&[], 0, 5).0.is_empty());
    }
}
