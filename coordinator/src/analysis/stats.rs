//! Exact descriptive statistics over raw values: percentiles by linear interpolation
//! between closest ranks (numpy's default), mean and population standard deviation.
//! Nothing is rounded or bucketed before it is computed.

/// The most requests in flight at one instant, from the requests' start and end times
/// (each sorted here, then walked together; at equal times an end comes before a start).
pub fn peak_in_flight(starts: &mut [f64], ends: &mut [f64]) -> i64 {
    sort(starts);
    sort(ends);
    let (mut cur, mut peak, mut j) = (0i64, 0i64, 0);
    for &s in starts.iter() {
        while j < ends.len() && ends[j] <= s {
            cur -= 1;
            j += 1;
        }
        cur += 1;
        peak = peak.max(cur);
    }
    peak
}

/// The `p`-th percentile (0..=100) of `sorted` (ascending), numpy's "linear" method;
/// 0.0 for an empty slice, as `vllm bench serve` reports.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => 0.0,
        1 => sorted[0],
        n => {
            let rank = (p / 100.0) * (n - 1) as f64;
            let lo = rank.floor() as usize;
            let hi = rank.ceil() as usize;
            let frac = rank - lo as f64;
            if lo == hi { sorted[lo] } else { sorted[lo] + (sorted[hi] - sorted[lo]) * frac }
        }
    }
}

/// Slices of at least this many values are radix-sorted (D85): shorter ones sort faster by
/// comparison.
const RADIX_FROM: usize = 1024;
/// Slices longer than this are sorted in place: a radix sort's scratch copy is as large as
/// its slice, and no sort should hold its values twice beyond 32 MiB.
const RADIX_UP_TO: usize = 1 << 22;

/// Sorts in place in `f64::total_cmp`'s order and returns the slice. The values of an exact
/// result are sorted here (D85), millions at a run's end: a radix sort by the bits takes
/// linear time where a comparison sort takes n log n.
pub fn sort(values: &mut [f64]) -> &[f64] {
    if (RADIX_FROM..=RADIX_UP_TO).contains(&values.len()) {
        radsort::sort(values);
    } else {
        values.sort_unstable_by(f64::total_cmp);
    }
    values
}

/// Arithmetic mean, 0.0 when empty.
pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() { 0.0 } else { values.iter().sum::<f64>() / values.len() as f64 }
}

/// Population standard deviation (numpy's default, ddof = 0), 0.0 when empty.
pub fn std_dev(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let m = mean(values);
    (values.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / values.len() as f64).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Values with every kind of bits a total order must place: both zeros, both NaNs,
    /// infinities, subnormals, and ties.
    fn value() -> impl Strategy<Value = f64> {
        prop_oneof![
            4 => -1e6f64..1e6,
            1 => Just(0.0),
            1 => Just(-0.0),
            1 => Just(f64::NAN),
            1 => Just(-f64::NAN),
            1 => Just(f64::INFINITY),
            1 => Just(f64::NEG_INFINITY),
            1 => Just(f64::MIN_POSITIVE / 3.0),
            1 => Just(1.5),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Bit for bit what a comparison sort by `total_cmp` gives, on either side of the
        /// radix sort's threshold.
        #[test]
        fn sorts_as_total_cmp_does_bit_for_bit(mut v in proptest::collection::vec(value(), 0..3000)) {
            let mut want = v.clone();
            want.sort_by(f64::total_cmp);
            sort(&mut v);
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            prop_assert_eq!(bits(&v), bits(&want));
        }
    }

    // Expected values from numpy 1.26: np.percentile(v, p) (method="linear").
    #[test]
    fn peak_in_flight_counts_what_overlaps_and_a_handover_is_not_an_overlap() {
        let (mut s, mut e) = (vec![0.0, 1.0, 2.0, 0.5], vec![1.0, 2.0, 3.0, 2.5]);
        // [0,1) [1,2) [2,3) [0.5,2.5): at most two at once; at 1.0 and 2.0 one ends as one starts.
        assert_eq!(peak_in_flight(&mut s, &mut e), 2);
        // Against counting at every start, on times with many ties.
        let reqs: Vec<(f64, f64)> =
            (0..400u32).map(|k| (f64::from(k % 37) / 4.0, f64::from(k % 37) / 4.0 + f64::from(k % 11) / 2.0)).collect();
        let brute = reqs.iter().map(|&(t, _)| reqs.iter().filter(|&&(a, b)| a <= t && b > t).count()).max().unwrap();
        let (mut s, mut e): (Vec<f64>, Vec<f64>) = reqs.iter().copied().unzip();
        assert_eq!(peak_in_flight(&mut s, &mut e), brute as i64);
        assert_eq!(peak_in_flight(&mut [], &mut []), 0);
    }

    #[test]
    fn matches_numpy_linear() {
        let mut v = vec![15.0, 20.0, 35.0, 40.0, 50.0];
        let s = sort(&mut v);
        assert_eq!(percentile_sorted(s, 0.0), 15.0);
        assert_eq!(percentile_sorted(s, 30.0), 20.0 + (35.0 - 20.0) * 0.2);
        assert_eq!(percentile_sorted(s, 40.0), 29.0);
        assert_eq!(percentile_sorted(s, 50.0), 35.0);
        assert_eq!(percentile_sorted(s, 100.0), 50.0);
        let mut w: Vec<f64> = (1..=10).map(f64::from).collect();
        let s = sort(&mut w);
        assert!((percentile_sorted(s, 99.0) - 9.91).abs() < 1e-12);
        assert!((percentile_sorted(s, 90.0) - 9.1).abs() < 1e-12);
        assert!((percentile_sorted(s, 25.0) - 3.25).abs() < 1e-12);
        assert_eq!(percentile_sorted(&[], 50.0), 0.0);
        assert_eq!(percentile_sorted(&[7.0], 99.0), 7.0);
    }

    #[test]
    fn unsorted_input_and_duplicates() {
        let mut v = vec![3.0, 1.0, 2.0, 2.0];
        let s = sort(&mut v);
        // np.percentile([3,1,2,2], 75) == 2.25
        assert!((percentile_sorted(s, 75.0) - 2.25).abs() < 1e-12);
    }

    #[test]
    fn mean_and_population_std() {
        let v = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        assert_eq!(mean(&v), 5.0);
        assert_eq!(std_dev(&v), 2.0);
        assert_eq!(std_dev(&[]), 0.0);
    }

    #[test]
    fn percentile_never_exceeds_max() {
        let mut v: Vec<f64> = (0..1000).map(|i| (i as f64 * 0.37).sin().abs() * 100.0).collect();
        let s = sort(&mut v);
        for p in [50.0, 90.0, 99.0, 99.9, 100.0] {
            assert!(percentile_sorted(s, p) <= s[s.len() - 1]);
        }
    }
}
