//! `--dataset-name random-mm`'s flags, checked and written into the [`DatasetSpec`] agents
//! draw from: vLLM's `--random-mm-bucket-config` (a Python dict literal
//! `{(height, width, frames): probability, ...}`) and `--random-mm-limit-mm-per-prompt`
//! (JSON). Buckets of probability 0 are dropped and the rest normalized, as vLLM does;
//! surge makes images only, so a video bucket (frames > 1) with a probability is refused.

use super::{RunArgs, UsageError};
use surge_proto::{DatasetSpec, MmBucket};

const BUCKETS: &str = "--random-mm-bucket-config";

fn bad<T>(msg: impl Into<String>) -> Result<T, UsageError> {
    Err(UsageError(msg.into()))
}

/// `{(H, W, T): p, ...}` into (H, W, T, p) entries.
pub fn parse_buckets(text: &str) -> Result<Vec<(u32, u32, u32, f64)>, String> {
    let inner =
        text.trim().strip_prefix('{').and_then(|t| t.strip_suffix('}')).ok_or("expected {(H, W, T): P, ...}")?;
    let mut out = Vec::new();
    let mut rest = inner.trim();
    while !rest.is_empty() {
        let open = rest.strip_prefix('(').ok_or_else(|| format!("expected '(' at {rest:?}"))?;
        let (tuple, after) = open.split_once(')').ok_or("a '(' without ')'")?;
        let dims: Vec<u32> = tuple
            .split(',')
            .map(|d| d.trim().parse::<u32>().map_err(|_| format!("{:?} is not a size", d.trim())))
            .collect::<Result<_, _>>()?;
        let [h, w, t] = dims[..] else { return Err(format!("({tuple}): expected (height, width, frames)")) };
        let after = after.trim_start().strip_prefix(':').ok_or_else(|| format!("expected ':' after ({tuple})"))?;
        let (p, next) = after.split_once(',').unwrap_or((after, ""));
        let p: f64 = p.trim().parse().map_err(|_| format!("{:?} is not a probability", p.trim()))?;
        if !(p.is_finite() && p >= 0.0) {
            return Err(format!("({tuple}): probability {p} is negative"));
        }
        out.push((h, w, t, p));
        rest = next.trim();
    }
    Ok(out)
}

/// Checks the random-mm flags and writes them into `spec`.
pub fn fill(spec: &mut DatasetSpec, a: &RunArgs) -> Result<(), UsageError> {
    let r = a.dataset.random_mm_num_mm_items_range_ratio;
    if !(0.0..=1.0).contains(&r) {
        return bad(format!("--random-mm-num-mm-items-range-ratio {r}: must be within [0, 1]"));
    }
    let limits: serde_json::Value = serde_json::from_str(&a.dataset.random_mm_limit_mm_per_prompt)
        .map_err(|e| UsageError(format!("--random-mm-limit-mm-per-prompt: not JSON: {e}")))?;
    let Some(limit) = limits.get("image").and_then(serde_json::Value::as_u64) else {
        return bad("--random-mm-limit-mm-per-prompt: needs an \"image\" count, e.g. {\"image\": 3}");
    };
    let buckets =
        parse_buckets(&a.dataset.random_mm_bucket_config).map_err(|e| UsageError(format!("{BUCKETS}: {e}")))?;
    let kept: Vec<_> = buckets.into_iter().filter(|b| b.3 > 0.0).collect();
    if let Some((h, w, t, _)) = kept.iter().find(|b| b.2 != 1) {
        return bad(format!("{BUCKETS}: ({h}, {w}, {t}) is a video bucket; surge makes images only (frames 1)"));
    }
    // JPEG's sides are 16-bit: a wider image was sent empty.
    let fits = |b: &(u32, u32, u32, f64)| {
        (1..=65_535).contains(&b.0) && (1..=65_535).contains(&b.1) && u64::from(b.0) * u64::from(b.1) <= 1 << 26
    };
    if let Some((h, w, ..)) = kept.iter().find(|b| !fits(b)) {
        return bad(format!("{BUCKETS}: ({h}, {w}, 1): each side from 1 to 65535, at most 2^26 pixels"));
    }
    let total: f64 = kept.iter().map(|b| b.3).sum();
    if kept.is_empty() || total <= 0.0 {
        return bad(format!("{BUCKETS}: no bucket with a probability above 0"));
    }
    let base = f64::from(a.dataset.random_mm_base_items_per_request);
    let hi = (base * (1.0 + r)).ceil().min(limit as f64);
    let lo = (base * (1.0 - r)).floor().max(0.0);
    if lo > hi {
        return bad(format!(
            "--random-mm-base-items-per-request {base}: at least {lo} images per request, above the limit {limit}"
        ));
    }
    spec.mm_base_items = a.dataset.random_mm_base_items_per_request;
    spec.mm_items_range_ratio = r;
    spec.mm_limit_images = u32::try_from(limit).unwrap_or(u32::MAX);
    spec.mm_buckets =
        kept.iter().map(|&(height, width, _, p)| MmBucket { height, width, probability: p / total }).collect();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllms_default_bucket_literal_parses() {
        let b = parse_buckets("{(256, 256, 1): 0.5, (720, 1280, 1): 0.5, (720, 1280, 16): 0.0}").unwrap();
        assert_eq!(b, [(256, 256, 1, 0.5), (720, 1280, 1, 0.5), (720, 1280, 16, 0.0)]);
        assert_eq!(parse_buckets("{(2,3,1):1}").unwrap(), [(2, 3, 1, 1.0)]);
        assert!(parse_buckets("{(2,3):1}").unwrap_err().contains("(height, width, frames)"));
        assert!(parse_buckets("{(2,3,1):-1}").unwrap_err().contains("negative"));
        assert!(parse_buckets("(2,3,1):1").is_err());
    }
}
