//! Read coalescing (D14, D15): a token event that arrived in the same socket read as
//! the previous token event of its stream carries the same kernel stamp, an ITL gap of
//! exactly 0. A client that keeps up with a server writing one token per write reads
//! each token alone; one that reads late gets several at once and dates them all at the
//! last. When the server's intended ITL is known, a read that brought `m` tokens of a
//! stream implies its first token was read at least `(m - 1)` intervals late.

use surge_proto::Row;

/// Streams whose tokens came less than this far apart on average (µs) are left out: such
/// a server writes faster than one read per token, so its tokens share reads anyway.
pub const MIN_MEAN_GAP_US: u64 = 1000;

/// Counts over the token events of some streams.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Coalescing {
    /// Token events read together with the previous one of their stream.
    pub coalesced: u64,
    /// All token events of the counted streams.
    pub events: u64,
    /// Σ over token events of how many intervals each was read late at least: a read of
    /// `m` tokens adds `0 + 1 + … + (m - 1)`.
    pub late_intervals: u64,
    /// The most tokens of one stream one read brought, minus one.
    pub longest: u32,
}

impl Coalescing {
    /// The counts of one successful streamed row; `None` when it does not count (no token,
    /// a single token, or a mean gap under [`MIN_MEAN_GAP_US`]).
    pub fn of_row(row: &Row) -> Option<Self> {
        let gaps = row.gap_count() as u64;
        if row.ttft_us == 0 || gaps == 0 {
            return None;
        }
        let (mut sum_us, mut c) = (0u64, Self { events: gaps + 1, ..Self::default() });
        let mut run = 0u32;
        for g in row.gaps() {
            sum_us += u64::from(g);
            if g == 0 {
                run += 1;
                c.coalesced += 1;
                // This read's earlier tokens are each one interval later than before.
                c.late_intervals += u64::from(run);
                c.longest = c.longest.max(run);
            } else {
                run = 0;
            }
        }
        (sum_us >= MIN_MEAN_GAP_US * gaps).then_some(c)
    }

    pub fn add(&mut self, o: &Self) {
        self.coalesced += o.coalesced;
        self.events += o.events;
        self.late_intervals += o.late_intervals;
        self.longest = self.longest.max(o.longest);
    }

    /// `coalesced_token_fraction`; `None` when nothing streamed.
    pub fn fraction(&self) -> Option<f64> {
        (self.events > 0).then(|| self.coalesced as f64 / self.events as f64)
    }

    /// The read lateness these reads imply for a server writing a token every `itl_ms`:
    /// (mean over token events, the most), milliseconds; lower bounds.
    pub fn implied_lateness_ms(&self, itl_ms: f64) -> Option<(f64, f64)> {
        (self.events > 0)
            .then(|| (itl_ms * self.late_intervals as f64 / self.events as f64, itl_ms * f64::from(self.longest)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(ttft_us: u32, itl: Vec<u32>) -> Row {
        Row { ttft_us: ttft_us.into(), itl_us: surge_proto::gaps::pack(&itl), ..Default::default() }
    }

    #[test]
    fn counts_reads_of_several_tokens_and_their_lateness() {
        // Tokens: t0 | t1 | t2 t3 t4 (one read of 3) | t5 | t6 t7 (one read of 2).
        let c = Coalescing::of_row(&row(1000, vec![5000, 5000, 0, 0, 15000, 5000, 0])).unwrap();
        assert_eq!((c.coalesced, c.events, c.longest), (3, 8, 2));
        // The read of 3: t2 two intervals late, t3 one; the read of 2: t6 one.
        assert_eq!(c.late_intervals, 2 + 1 + 1);
        assert_eq!(c.fraction(), Some(3.0 / 8.0));
        assert_eq!(c.implied_lateness_ms(10.0), Some((10.0 * 4.0 / 8.0, 20.0)));
    }

    #[test]
    fn rows_that_say_nothing_about_the_client_are_left_out() {
        assert_eq!(Coalescing::of_row(&row(0, vec![])), None, "no token");
        assert_eq!(Coalescing::of_row(&row(1000, vec![])), None, "one token");
        assert_eq!(Coalescing::of_row(&row(1000, vec![0, 0, 100])), None, "written back to back");
        let alone = Coalescing::of_row(&row(1000, vec![1000, 1000])).unwrap();
        assert_eq!((alone.coalesced, alone.events, alone.late_intervals), (0, 3, 0));
        let mut sum = alone;
        sum.add(&Coalescing::of_row(&row(1000, vec![0, 5000, 0])).unwrap());
        assert_eq!((sum.coalesced, sum.events, sum.longest), (2, 7, 1));
        assert_eq!(Coalescing::default().fraction(), None);
    }
}
