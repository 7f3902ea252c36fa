//! W3C trace context for the requests of a traced run (D19): a request's trace
//! id and span id are derived from the run id and its global index, so the `traceparent`
//! an agent sends and the span the coordinator rebuilds from the row agree, with nothing
//! extra on the wire. Sampling (`--otlp-sample-ratio`) is decided from the trace id the
//! same way on both sides.

/// SplitMix64: a bijective mix of 64 bits.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A request's trace id (16 bytes) and its span id (8 bytes); never all zero.
pub fn ids(run_id: u64, index: u64) -> (u128, u64) {
    let hi = mix(run_id ^ mix(index));
    let lo = mix(hi ^ index.rotate_left(17)) | 1;
    let span = mix(lo ^ run_id) | 1;
    ((u128::from(hi) << 64) | u128::from(lo), span)
}

/// Whether the trace is sampled at `ratio` (0..=1): its low 64 bits below ratio x 2^64,
/// as OpenTelemetry's trace-id-ratio sampler decides.
pub fn sampled(trace_id: u128, ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    if ratio <= 0.0 {
        return false;
    }
    ((trace_id as u64) >> 1) < (ratio * (1u64 << 63) as f64) as u64
}

/// The `traceparent` header of request `index` of run `run_id`.
pub fn traceparent(run_id: u64, index: u64, ratio: f64) -> String {
    let (trace, span) = ids(run_id, index);
    format!("00-{trace:032x}-{span:016x}-{:02x}", u8::from(sampled(trace, ratio)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_distinct_and_valid() {
        let (t, s) = ids(7, 42);
        assert_eq!(ids(7, 42), (t, s), "derived, not drawn");
        assert_ne!(ids(7, 43).0, t);
        assert_ne!(ids(8, 42).0, t);
        let seen: std::collections::HashSet<u128> = (0..10_000).map(|i| ids(1, i).0).collect();
        assert_eq!(seen.len(), 10_000);
        let h = traceparent(7, 42, 1.0);
        assert_eq!(h.len(), 55, "{h}");
        assert!(h.starts_with("00-") && h.ends_with("-01"), "{h}");
        assert_eq!(&h[3..35], format!("{t:032x}"));
    }

    #[test]
    fn sampling_follows_the_ratio() {
        let n = 20_000u64;
        let kept = (0..n).filter(|&i| sampled(ids(3, i).0, 0.25)).count() as f64 / n as f64;
        assert!((kept - 0.25).abs() < 0.02, "{kept}");
        assert!(traceparent(3, 1, 0.0).ends_with("-00"));
    }
}
