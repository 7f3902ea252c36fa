//! Which global request indices an agent's share of a run holds (D20: agents
//! take disjoint shares of the requests, round-robin by index, weighted by capacity).
//!
//! A share is a [`Stripe`]: in every cycle of `cycle` consecutive global indices it holds
//! those at its `positions`. The coordinator draws the positions of all shares at once
//! with [`stripes`] (smooth weighted round-robin, as nginx spreads weighted upstreams), so
//! each agent's requests are spread over the whole index range, and so over a file
//! dataset and a timed trace, instead of one agent taking the first part and another the
//! rest. Request `k` of a share is a closed-form function of `k`: nothing is built per
//! request, whatever the length of the run.

use surge_proto::Workload;

/// The global request indices of one share, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stripe {
    /// Length of the cycle; 0: the share is the contiguous range from `start`.
    cycle: u64,
    /// The share's positions in every cycle: sorted, distinct, below `cycle`, not empty.
    positions: Vec<u64>,
    /// First index of a contiguous share.
    start: u64,
}

impl Stripe {
    /// The indices from `start` on, one after another (an agent alone in its run holds
    /// every index; workloads of coordinators that send no cycle).
    pub fn contiguous(start: u64) -> Self {
        Self { cycle: 0, positions: Vec::new(), start }
    }

    /// The share a workload names (`slice_cycle`, `slice_positions`, else `slice_start`).
    pub fn of(w: &Workload) -> Self {
        let mut positions: Vec<u64> = w.slice_positions.iter().copied().filter(|&p| p < w.slice_cycle).collect();
        positions.sort_unstable();
        positions.dedup();
        if positions.is_empty() {
            return Self::contiguous(w.slice_start);
        }
        Self { cycle: w.slice_cycle, positions, start: 0 }
    }

    /// Length of the cycle (0 for a contiguous share).
    pub fn cycle(&self) -> u64 {
        self.cycle
    }

    /// Positions in each cycle (empty for a contiguous share).
    pub fn positions(&self) -> &[u64] {
        &self.positions
    }

    /// The first index of the share.
    pub fn first(&self) -> u64 {
        self.index(0)
    }

    /// The global index of request `k` of the share. Wrapping: a share without a request
    /// cap keeps distinct indices instead of panicking, however long it runs.
    pub fn index(&self, k: u64) -> u64 {
        if self.positions.is_empty() {
            return self.start.wrapping_add(k);
        }
        let w = self.positions.len() as u64;
        (k / w).wrapping_mul(self.cycle).wrapping_add(self.positions[(k % w) as usize])
    }

    /// Which request of the share global index `g` is; `None` when another share holds it.
    pub fn position(&self, g: u64) -> Option<u64> {
        if self.positions.is_empty() {
            return g.checked_sub(self.start);
        }
        let rank = self.positions.binary_search(&(g % self.cycle)).ok()? as u64;
        (g / self.cycle).checked_mul(self.positions.len() as u64)?.checked_add(rank)
    }

    /// How many of the indices `0..n` the share holds (a contiguous share: those from
    /// its start).
    pub fn count_below(&self, n: u64) -> u64 {
        if self.positions.is_empty() {
            return n.saturating_sub(self.start);
        }
        let whole = (n / self.cycle) * self.positions.len() as u64;
        whole + self.positions.partition_point(|&p| p < n % self.cycle) as u64
    }
}

/// The largest weight a share is drawn with: a capacity above it counts as this much, so
/// that an agent reporting an absurd core count cannot make the cycle (and the positions
/// sent to every agent) huge.
pub const MAX_WEIGHT: u32 = 4096;

/// The shares of agents with capacities `weights`, in order: cycles of `sum(weights) /
/// gcd` indices, in which agent `i` holds `weights[i] / gcd` positions spread evenly
/// (each step goes to the agent furthest behind its part, the first one on ties). Every
/// index belongs to exactly one share; a weight counts as at least 1 and at most
/// [`MAX_WEIGHT`].
pub fn stripes(weights: &[u32]) -> Vec<Stripe> {
    let weights: Vec<u64> = weights.iter().map(|&w| u64::from(w.clamp(1, MAX_WEIGHT))).collect();
    let g = weights.iter().copied().reduce(gcd).unwrap_or(1);
    let weights: Vec<i64> = weights.iter().map(|&w| (w / g) as i64).collect();
    let cycle: i64 = weights.iter().sum();
    let mut current = vec![0i64; weights.len()];
    let mut positions = vec![Vec::new(); weights.len()];
    for pos in 0..cycle {
        for (c, w) in current.iter_mut().zip(&weights) {
            *c += w;
        }
        // The largest current value, the first agent among equals.
        let Some(pick) = (0..current.len()).reduce(|best, i| if current[i] > current[best] { i } else { best }) else {
            break;
        };
        current[pick] -= cycle;
        positions[pick].push(pos as u64);
    }
    positions.into_iter().map(|positions| Stripe { cycle: cycle as u64, positions, start: 0 }).collect()
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shares' indices below `n`, request by request.
    fn expand(s: &Stripe, n: u64) -> Vec<u64> {
        (0..s.count_below(n)).map(|k| s.index(k)).collect()
    }

    #[test]
    fn shares_partition_every_prefix_of_the_indices() {
        for weights in [vec![1], vec![1, 1], vec![2, 1], vec![4, 4, 2, 1], vec![8, 12], vec![96, 97], vec![0, 3]] {
            let shares = stripes(&weights);
            for n in [0u64, 1, 2, 7, 10, 1000, 12_345] {
                let mut all: Vec<u64> = shares.iter().flat_map(|s| expand(s, n)).collect();
                all.sort_unstable();
                assert_eq!(all, (0..n).collect::<Vec<_>>(), "weights {weights:?}, n {n}");
                for s in &shares {
                    for (k, g) in expand(s, n).into_iter().enumerate() {
                        assert_eq!(s.position(g), Some(k as u64), "position inverts index");
                    }
                }
            }
        }
    }

    #[test]
    fn shares_interleave_in_proportion_to_the_weights() {
        let s = stripes(&[1, 1]);
        assert_eq!(expand(&s[0], 6), vec![0, 2, 4]);
        assert_eq!(expand(&s[1], 6), vec![1, 3, 5]);
        assert_eq!(s[1].position(4), None, "the other agent's index");
        // 8 and 12 cores: cycles of 5, two indices and three.
        let s = stripes(&[8, 12]);
        assert_eq!((s[0].cycle(), s[0].positions().len(), s[1].positions().len()), (5, 2, 3));
        // Spread, not in blocks: every prefix of the indices is split within one request
        // of the weights' proportions (96 and 97 cores: not 96 then 97 in a row).
        for weights in [[96u32, 97], [1, 7], [3, 5]] {
            let s = stripes(&weights);
            let total = f64::from(weights[0] + weights[1]);
            for n in 0..3 * total as u64 {
                for (share, w) in s.iter().zip(weights) {
                    let ideal = n as f64 * f64::from(w) / total;
                    assert!((share.count_below(n) as f64 - ideal).abs() < 1.0, "{weights:?}, n {n}");
                }
            }
        }
    }

    #[test]
    fn a_share_without_a_cycle_is_contiguous_and_wraps() {
        let w = Workload { slice_start: 1000, ..Default::default() };
        let s = Stripe::of(&w);
        assert_eq!((s.first(), s.index(5), s.position(1005), s.position(3)), (1000, 1005, Some(5), None));
        assert_eq!(Stripe::contiguous(u64::MAX).index(2), 1, "wraps");
        let w = Workload { slice_cycle: 3, slice_positions: vec![2, 0, 9], ..Default::default() };
        let s = Stripe::of(&w);
        assert_eq!(s.positions(), &[0, 2], "sorted, positions outside the cycle dropped");
        assert_eq!(stripes(&[5])[0].index(u64::MAX), u64::MAX, "one agent holds every index");
        let s = stripes(&[u32::MAX, 1]);
        assert_eq!((s[0].cycle(), s[1].positions().len()), (u64::from(MAX_WEIGHT) + 1, 1), "weights are capped");
    }
}
