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

/// The prompts an agent needs for requests `[start, start + len)` of a file dataset:
/// item k is request `start + k`, and the agent repeats them past the end.
pub fn slice_prompts(prompts: &[PromptItem], start: u64, len: u64) -> Vec<PromptItem> {
    let n = prompts.len() as u64;
    if n == 0 {
        return Vec::new();
    }
    (0..len.min(n)).map(|k| prompts[((start + k) % n) as usize].clone()).collect()
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
        let expand = |start: u64, len: u64| -> Vec<String> {
            let got = slice_prompts(&all, start, len);
            (0..len as usize).map(|k| got[k % got.len()].text.clone()).collect()
        };
        for (total, cut) in [(7u64, 3u64), (5, 2), (20, 9), (20, 13)] {
            let whole = expand(0, total);
            let mut parts = expand(0, cut);
            parts.extend(expand(cut, total - cut));
            assert_eq!(parts, whole, "total {total} cut {cut}");
            let expected: Vec<String> = (0..total).map(|i| format!("p{}", i % 7)).collect();
            assert_eq!(whole, expected);
        }
        assert!(slice_prompts(&[], 0, 5).is_empty());
    }
}
