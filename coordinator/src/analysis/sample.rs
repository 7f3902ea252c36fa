//! One metric's distribution, folded value by value in bounded memory: exact running
//! count, mean and standard deviation; percentiles exact (numpy's linear interpolation
//! over the sorted values) while the run's samples fit the exact budget, and from a
//! mergeable HDR histogram (4 significant digits, 1 µs resolution) beyond it. Kept values
//! wait on disk until the run ends (see `spilled`). The histogram is built from them only
//! if they go: while they are kept it holds nothing (D81).

use super::spilled::Spilled;
use super::stats::{mean, percentile_sorted, sort, std_dev};
use hdrhistogram::Histogram;
use std::borrow::Cow;

/// Highest value a histogram holds, µs (10 hours); longer values are clamped.
const HIGH_US: u64 = 36_000_000_000;

/// Growth from one distribution bucket's bound to the next: 32 buckets per doubling
/// (each about 2.2 % wide).
const BUCKET_BASE: f64 = 1.021_897_148_654_116_7;

/// A metric's values, in seconds.
#[derive(Debug, Clone)]
pub struct Sample {
    n: u64,
    mean: f64,
    m2: f64,
    exact: Option<Spilled<f64>>,
    /// Empty while the values are kept; built from them at `digits` significant digits
    /// when they go, and recorded into from then on (D81).
    hist: Histogram<u64>,
    digits: u8,
    sorted: bool,
}

impl Default for Sample {
    fn default() -> Self {
        Self::new()
    }
}

fn us(v_s: f64) -> u64 {
    ((v_s * 1e6).round().max(1.0) as u64).min(HIGH_US)
}

/// Significant digits of a light (and a lazy) sample's histogram.
const LIGHT_DIGITS: u8 = 3;

/// A histogram's log-spaced buckets, empty ones left out.
fn buckets_of(hist: &Histogram<u64>) -> Vec<(f64, u64)> {
    if hist.is_empty() {
        return Vec::new();
    }
    hist.iter_log(1, BUCKET_BASE)
        .filter(|v| v.count_since_last_iteration() > 0)
        .map(|v| (v.value_iterated_to() as f64 / 1000.0, v.count_since_last_iteration()))
        .collect()
}

impl Sample {
    pub fn new() -> Self {
        Self::with_digits(4)
    }

    /// A sample whose histogram keeps 3 significant digits (within 0.1 % beyond the exact
    /// budget) in a tenth of the memory: for breakdowns with many samples (per turn).
    pub fn light() -> Self {
        Self::with_digits(LIGHT_DIGITS)
    }

    /// A light sample whose kept values are written in small chunks: for breakdowns (one
    /// per endpoint, one per turn).
    pub fn lazy() -> Self {
        Self { exact: Some(Spilled::with_chunk(super::spilled::SMALL_CHUNK)), ..Self::light() }
    }

    fn with_digits(digits: u8) -> Self {
        // A placeholder of a few counts until `drop_exact` builds the histogram.
        let hist = Histogram::new_with_bounds(1, 2, 1).expect("valid histogram bounds");
        Self { n: 0, mean: 0.0, m2: 0.0, exact: Some(Spilled::new()), hist, digits, sorted: true }
    }

    /// Adds one value (seconds).
    pub fn add(&mut self, v: f64) {
        self.n += 1;
        let d = v - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (v - self.mean);
        match &mut self.exact {
            Some(e) => {
                e.push(v);
                self.sorted = false;
            }
            None => self.hist.saturating_record(us(v)),
        }
    }

    /// The histogram of `values` at this sample's digits.
    fn histogram_of(&self, values: &Spilled<f64>) -> Histogram<u64> {
        self.histogram_up_to(values, HIGH_US)
    }

    /// The histogram of `values`, to be read and dropped (buckets, percentiles before
    /// [`Sample::seal`]): only as high as the largest of them. Values are bucketed by the
    /// digits alone, so it holds the same counts where the same ones are as one up to
    /// [`HIGH_US`], without zeroing 10 h of counts (2.6 MiB at 4 digits) for each call.
    fn view_of(&self, values: &Spilled<f64>) -> Histogram<u64> {
        let mut high = 2;
        // Values that cannot be read back are missing, as in `histogram_of`; if the first
        // reading failed, the second might read more: up to 10 h, then.
        if values.for_each(|v| high = high.max(us(v))).is_err() {
            high = HIGH_US;
        }
        self.histogram_up_to(values, high)
    }

    fn histogram_up_to(&self, values: &Spilled<f64>, high: u64) -> Histogram<u64> {
        let mut hist = Histogram::new_with_bounds(1, high, self.digits).expect("valid histogram bounds");
        // Values that cannot be read back are missing from it (a temporary file we wrote
        // could not be read: nothing better is left).
        let _ = values.for_each(|v| hist.saturating_record(us(v)));
        hist
    }

    /// Stops keeping the values; percentiles come from the histogram from now on.
    pub fn drop_exact(&mut self) {
        if let Some(e) = self.exact.take() {
            // The histogram from the values kept so far, read back a chunk at a time: the
            // run's memory does not jump here.
            self.hist = self.histogram_of(&e);
        }
    }

    pub fn is_exact(&self) -> bool {
        self.exact.is_some()
    }

    pub fn len(&self) -> u64 {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Reads the kept values back and sorts them, once, before percentiles are read. Values
    /// that cannot be read back leave the histogram of those that could (as beyond the
    /// budget).
    pub fn seal(&mut self) {
        if let (Some(e), false) = (&mut self.exact, self.sorted) {
            if e.load().is_err() {
                self.drop_exact();
                return;
            }
            sort(e.values_mut());
            self.sorted = true;
        }
    }

    /// The mean: from the kept values (bit for bit what numpy gives) or the running mean.
    pub fn mean_ms(&self) -> f64 {
        match &self.exact {
            Some(e) if self.sorted => mean(e.values()) * 1000.0,
            _ if self.n == 0 => 0.0,
            _ => self.mean * 1000.0,
        }
    }

    /// Population standard deviation, as numpy's default.
    pub fn std_ms(&self) -> f64 {
        match &self.exact {
            Some(e) if self.sorted => std_dev(e.values()) * 1000.0,
            _ if self.n == 0 => 0.0,
            _ => (self.m2 / self.n as f64).sqrt() * 1000.0,
        }
    }

    pub fn median_ms(&self) -> f64 {
        self.percentile_ms(50.0)
    }

    /// The `p`-th percentile in ms: exact when the values were kept (call [`Sample::seal`]
    /// first), else linear interpolation between the histogram's ranked values (values
    /// kept but not sealed: a histogram built from them for the call).
    pub fn percentile_ms(&self, p: f64) -> f64 {
        match &self.exact {
            Some(e) if self.sorted => percentile_sorted(e.values(), p) * 1000.0,
            _ => self.hist_percentile_s(p) * 1000.0,
        }
    }

    /// The value of rank `k` (1-based, of the sorted values) in ms: exact when the values
    /// were kept and sealed, else from the histogram.
    pub fn at_rank_ms(&self, k: u64) -> f64 {
        match &self.exact {
            Some(e) if self.sorted && k >= 1 && (k as usize) <= e.values().len() => e.values()[k as usize - 1] * 1000.0,
            _ => self.ranked(k.saturating_sub(1)) * 1000.0,
        }
    }

    /// The `p`-th percentile with its interval at `confidence` (D47), in ms.
    pub fn interval_ms(&self, p: f64, confidence: f64) -> super::interval::Interval {
        let r = super::interval::ranks(self.n, p / 100.0, confidence);
        super::interval::Interval {
            n: self.n,
            estimate: self.percentile_ms(p),
            low: r.lower.map(|k| self.at_rank_ms(k)),
            high: r.upper.map(|k| self.at_rank_ms(k)),
        }
    }

    /// The distribution as log-spaced buckets (32 per doubling, from 1 µs), empty buckets
    /// left out: `(upper bound ms, count)` in rising order. Counts sum to [`Sample::len`]
    /// (values past the histogram's 10 h are counted in its last bucket).
    /// A sample still exact builds them from its kept values.
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        match &self.exact {
            Some(e) => buckets_of(&self.view_of(e)),
            None => buckets_of(&self.hist),
        }
    }

    /// The histogram percentiles are read from: the sample's own once its values went,
    /// else one built from the values it keeps (read before [`Sample::seal`]).
    fn hist_view(&self) -> Cow<'_, Histogram<u64>> {
        match &self.exact {
            Some(e) => Cow::Owned(self.view_of(e)),
            None => Cow::Borrowed(&self.hist),
        }
    }

    /// The value of rank `k` (0-based) from the histogram, in seconds.
    fn ranked(&self, k: u64) -> f64 {
        ranked_in(&self.hist_view(), k)
    }

    fn hist_percentile_s(&self, p: f64) -> f64 {
        let hist = self.hist_view();
        let n = hist.len();
        if n == 0 {
            return 0.0;
        }
        let rank = (p / 100.0) * (n - 1) as f64;
        let (lo, hi) = (rank.floor() as u64, rank.ceil() as u64);
        let a = ranked_in(&hist, lo);
        if lo == hi { a } else { a + (ranked_in(&hist, hi) - a) * (rank - lo as f64) }
    }
}

/// The value of rank `k` (0-based) in `hist`, in seconds.
fn ranked_in(hist: &Histogram<u64>, k: u64) -> f64 {
    let mut seen = 0u64;
    for v in hist.iter_recorded() {
        seen += v.count_at_value();
        if seen > k {
            return hist.median_equivalent(v.value_iterated_to()) as f64 / 1e6;
        }
    }
    hist.max() as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::SmallRng};

    fn numpy(values: &mut [f64], p: f64) -> f64 {
        sort(values);
        percentile_sorted(values, p) * 1000.0
    }

    #[test]
    fn a_lazy_sample_reads_as_a_light_one_exact_and_beyond() {
        let mut rng = SmallRng::seed_from_u64(11);
        let values: Vec<f64> = (0..5_000).map(|_| rng.random_range(0.001..2.0)).collect();
        let (mut light, mut lazy) = (Sample::light(), Sample::lazy());
        for &v in &values {
            light.add(v);
            lazy.add(v);
        }
        // More than one small chunk went to disk and comes back.
        light.seal();
        lazy.seal();
        for p in [1.0, 50.0, 99.0, 99.9] {
            assert_eq!(lazy.percentile_ms(p), light.percentile_ms(p), "p{p} exact");
        }
        assert_eq!((lazy.mean_ms(), lazy.std_ms()), (light.mean_ms(), light.std_ms()));
        assert_eq!(lazy.buckets(), light.buckets(), "buckets from the kept values");
        // Past the budget: the histogram it would have had, from the values kept so far,
        // then every later value.
        light.drop_exact();
        lazy.drop_exact();
        for &v in &values[..100] {
            light.add(v);
            lazy.add(v);
        }
        for p in [1.0, 50.0, 99.0] {
            assert_eq!(lazy.percentile_ms(p), light.percentile_ms(p), "p{p} from the histogram");
        }
        assert_eq!(lazy.buckets(), light.buckets());
        assert_eq!(lazy.len(), 5_100);
        // Dropped without being sealed: the kept values are read back from disk.
        let (mut light, mut lazy) = (Sample::light(), Sample::lazy());
        for &v in &values {
            light.add(v);
            lazy.add(v);
        }
        light.drop_exact();
        lazy.drop_exact();
        assert_eq!((lazy.percentile_ms(50.0), lazy.buckets()), (light.percentile_ms(50.0), light.buckets()));
    }

    #[test]
    fn exact_while_kept_and_within_a_hundredth_of_a_percent_beyond() {
        let mut rng = SmallRng::seed_from_u64(7);
        // Heavy-tailed latencies from 1 ms to ~20 s.
        let mut values: Vec<f64> = (0..200_000).map(|_| 0.001 * (1.0 / (1.0 - rng.random::<f64>() * 0.9999))).collect();
        let (mut exact, mut approx) = (Sample::new(), Sample::new());
        approx.drop_exact();
        for &v in &values {
            exact.add(v);
            approx.add(v);
        }
        exact.seal();
        for p in [1.0, 25.0, 50.0, 90.0, 99.0, 99.9, 100.0] {
            let want = numpy(&mut values, p);
            assert_eq!(exact.percentile_ms(p), want, "p{p} exact");
            let got = approx.percentile_ms(p);
            let tol = (want * 1e-4).max(0.001);
            assert!((got - want).abs() <= tol, "p{p}: {got} vs {want} (tolerance {tol})");
        }
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        assert!((approx.mean_ms() - mean * 1000.0).abs() < 1e-6 * mean * 1000.0);
    }

    /// While the values are kept, the histogram is a placeholder of a few counts: no
    /// record per value, no megabytes per metric. It is built whole when they go.
    #[test]
    fn the_histogram_is_built_only_when_the_values_go() {
        let mut s = Sample::new();
        for k in 1..=40_000 {
            s.add(f64::from(k) * 1e-5);
        }
        assert_eq!(s.hist.len(), 0, "nothing recorded while the values are kept");
        assert!(s.hist.distinct_values() < 64, "a placeholder: {} counts", s.hist.distinct_values());
        // Read before it is sealed: from a histogram of the kept values, as before D81.
        let unsealed = s.percentile_ms(50.0);
        assert!((unsealed - 200.0).abs() <= 0.02 + 200.0 * 1e-4, "unsealed p50 {unsealed} ms");
        s.drop_exact();
        assert_eq!(s.hist.len(), 40_000, "every kept value, read back");
        assert!(s.hist.distinct_values() > 100_000, "4 significant digits: {}", s.hist.distinct_values());
        s.add(1.0);
        assert_eq!(s.hist.len(), 40_001, "and each later value");
        let p50 = s.percentile_ms(50.0);
        assert!((p50 - 200.0).abs() <= 0.02 + 200.0 * 1e-4, "p50 {p50} ms");
    }

    #[test]
    fn buckets_count_every_value_once_in_rising_bounds() {
        let mut s = Sample::new();
        for v in [0.0005, 0.0005, 0.002, 0.010, 0.0101, 1.5] {
            s.add(v);
        }
        let b = s.buckets();
        assert_eq!(b.iter().map(|(_, c)| c).sum::<u64>(), 6);
        assert!(b.windows(2).all(|w| w[0].0 < w[1].0), "{b:?}");
        // Each value sits at or under its bucket's bound, and above the one before.
        assert!(b[0].0 >= 0.5 && b[0].1 == 2, "{b:?}");
        assert!(b.last().is_some_and(|&(le, c)| (1500.0..1500.0 * 1.03).contains(&le) && c == 1), "{b:?}");
        assert!(Sample::new().buckets().is_empty());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        /// A histogram only as high as the kept values gives the buckets, ranks and
        /// percentiles one up to 10 h gives, at 4 digits and at 3, values of every scale
        /// (1 µs, bucket edges, past 10 h) included.
        #[test]
        fn a_view_as_high_as_its_values_reads_as_the_full_histogram(
            raw in proptest::collection::vec(
                proptest::prop_oneof![
                    4 => 0.0f64..2.0,
                    2 => 0.0f64..40_000.0,
                    1 => proptest::prelude::Just(1e-6),
                    1 => proptest::prelude::Just(0.002_048),
                    1 => proptest::prelude::Just(0.032_767),
                    1 => proptest::prelude::Just(1e6),
                ],
                1..400,
            ),
            light in proptest::bool::ANY,
        ) {
            let mut s = if light { Sample::light() } else { Sample::new() };
            raw.iter().for_each(|&v| s.add(v));
            let e = s.exact.as_ref().expect("kept");
            let (full, view) = (s.histogram_of(e), s.view_of(e));
            proptest::prop_assert!(view.distinct_values() <= full.distinct_values());
            proptest::prop_assert_eq!(buckets_of(&view), buckets_of(&full));
            for k in [0, raw.len() as u64 / 2, raw.len() as u64 - 1] {
                proptest::prop_assert_eq!(ranked_in(&view, k), ranked_in(&full, k));
            }
            for p in [0.0, 50.0, 99.0, 100.0] {
                proptest::prop_assert_eq!(view.value_at_quantile(p / 100.0), full.value_at_quantile(p / 100.0));
            }
        }
    }

    #[test]
    fn empty_reads_zero() {
        let mut s = Sample::new();
        s.seal();
        assert_eq!((s.mean_ms(), s.std_ms(), s.percentile_ms(99.0)), (0.0, 0.0, 0.0));
        s.drop_exact();
        assert_eq!(s.percentile_ms(50.0), 0.0);
    }
}
