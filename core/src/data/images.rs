//! vLLM's `random-mm` images: request `i` carries a number of images drawn uniformly from
//! `[floor(base*(1-r)), ceil(base*(1+r))]` (at most the limit), each of a size drawn from
//! the spec's buckets by probability, of uniformly random RGB pixels, JPEG-encoded and sent
//! as `data:image/jpeg;base64,...` URLs after the text in one user message, as vLLM's
//! chat request does. A pure function of the request's seed (`dataset` derives it from the
//! run's seed and the index), so each request's images differ (no server-side cache hit)
//! and are the same on every agent.

use base64::Engine;
use rand::{Rng, RngCore, SeedableRng, rngs::SmallRng};
use surge_proto::DatasetSpec;

/// JPEG quality (PIL's default, which vLLM's `Image.save(format="JPEG")` uses).
const QUALITY: u8 = 75;

/// The sizes (height, width) of one request's images, drawn from `rng`.
pub fn sizes(spec: &DatasetSpec, rng: &mut SmallRng) -> Vec<(u32, u32)> {
    let base = f64::from(spec.mm_base_items);
    let r = spec.mm_items_range_ratio.clamp(0.0, 1.0);
    let hi = ((base * (1.0 + r)).ceil() as u64).min(u64::from(spec.mm_limit_images));
    let lo = ((base * (1.0 - r)).floor().max(0.0) as u64).min(hi);
    let n = rng.random_range(lo..=hi);
    (0..n)
        .filter_map(|_| {
            let mut x: f64 = rng.random();
            for b in &spec.mm_buckets {
                if x < b.probability {
                    return Some((b.height, b.width));
                }
                x -= b.probability;
            }
            spec.mm_buckets.last().map(|b| (b.height, b.width))
        })
        .collect()
}

/// One image of random pixels as a JPEG data URL.
fn jpeg_url(height: u32, width: u32, rng: &mut SmallRng) -> String {
    let mut pixels = vec![0u8; height as usize * width as usize * 3];
    rng.fill_bytes(&mut pixels);
    let mut jpeg = Vec::with_capacity(pixels.len() / 4);
    let encoded = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, QUALITY).encode(
        &pixels,
        width,
        height,
        image::ColorType::Rgb8,
    );
    // Sizes were checked by the coordinator (1..=2^26 pixels): encoding in memory cannot fail.
    debug_assert!(encoded.is_ok(), "{encoded:?}");
    format!("data:image/jpeg;base64,{}", base64::engine::general_purpose::STANDARD.encode(&jpeg))
}

/// The chat messages of one request: one user message, its text then its images, drawn
/// from `seed` (the request's own, so each request's images differ).
pub fn messages(spec: &DatasetSpec, seed: u64, text: &str) -> String {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut content = vec![serde_json::json!({"type": "text", "text": text})];
    for (h, w) in sizes(spec, &mut rng) {
        content.push(serde_json::json!({"type": "image_url", "image_url": {"url": jpeg_url(h, w, &mut rng)}}));
    }
    serde_json::json!([{"role": "user", "content": content}]).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::MmBucket;

    fn spec(base: u32, r: f64) -> DatasetSpec {
        DatasetSpec {
            seed: 5,
            mm_base_items: base,
            mm_items_range_ratio: r,
            mm_limit_images: 255,
            mm_buckets: vec![
                MmBucket { height: 8, width: 16, probability: 0.25 },
                MmBucket { height: 32, width: 24, probability: 0.75 },
            ],
            ..Default::default()
        }
    }

    #[test]
    fn counts_and_sizes_follow_the_spec() {
        let s = spec(2, 0.5);
        let mut seen = std::collections::HashMap::new();
        let mut counts = [0u32; 4];
        for i in 0..4000 {
            let mut rng = SmallRng::seed_from_u64(i);
            let v = sizes(&s, &mut rng);
            counts[v.len()] += 1;
            for hw in v {
                *seen.entry(hw).or_insert(0u32) += 1;
            }
        }
        // 1..=3 images (floor(2 * 0.5) ..= ceil(2 * 1.5)), each about a third of requests.
        assert_eq!(counts[0], 0);
        assert!(counts[1..].iter().all(|&c| (1100..1600).contains(&c)), "{counts:?}");
        let (small, big) = (seen[&(8, 16)], seen[&(32, 24)]);
        let share = f64::from(small) / f64::from(small + big);
        assert!((0.22..0.28).contains(&share), "{share}");
        let capped = DatasetSpec { mm_limit_images: 1, ..spec(4, 0.0) };
        assert_eq!(sizes(&capped, &mut SmallRng::seed_from_u64(0)).len(), 1);
    }

    #[test]
    fn messages_carry_the_text_then_decodable_jpegs() {
        let s = spec(2, 0.0);
        let m: serde_json::Value = serde_json::from_str(&messages(&s, 7, "hello")).unwrap();
        let content = m[0]["content"].as_array().unwrap();
        assert_eq!(m[0]["role"], "user");
        assert_eq!(content[0], serde_json::json!({"type": "text", "text": "hello"}));
        assert_eq!(content.len(), 3);
        for c in &content[1..] {
            let url = c["image_url"]["url"].as_str().unwrap();
            let b64 = url.strip_prefix("data:image/jpeg;base64,").unwrap();
            let jpeg = base64::engine::general_purpose::STANDARD.decode(b64).unwrap();
            let img = image::load_from_memory_with_format(&jpeg, image::ImageFormat::Jpeg).unwrap();
            assert!(matches!((img.height(), img.width()), (8, 16) | (32, 24)));
        }
        assert_eq!(messages(&s, 7, "hello"), messages(&s, 7, "hello"), "a pure function of the index");
        assert_ne!(messages(&s, 7, "hello"), messages(&s, 8, "hello"), "every request's images differ");
    }
}
