//! `--dataset-name custom_audio` for `--backend openai-audio`: local audio files, read
//! once before the load and shipped to the agents (nothing is downloaded). The
//! `--dataset-path` is a directory (its `.wav` and `.flac` files in name order) or vLLM's
//! JSONL form, `{"audio": PATH, "prompt": TEXT?, "output_tokens": N?}` per line (paths
//! relative to the file). Each file's length in seconds comes from its header (vLLM's
//! RTFx divides the audio's seconds by the run's).

use std::path::{Path, PathBuf};
use surge_proto::{PromptItem, TokenSource};

/// The most audio a run ships (the agents' gRPC messages hold 64 MiB).
pub const MAX_AUDIO_BYTES: usize = 48 << 20;

/// The seconds of a WAV or FLAC file's audio.
fn seconds(name: &str, bytes: &[u8]) -> Result<f64, String> {
    let lower = name.to_ascii_lowercase();
    if lower.ends_with(".flac") {
        let r = claxon::FlacReader::new(std::io::Cursor::new(bytes)).map_err(|e| format!("{name}: not FLAC: {e}"))?;
        let info = r.streaminfo();
        let samples = info.samples.ok_or_else(|| format!("{name}: FLAC without a sample count"))?;
        return Ok(samples as f64 / f64::from(info.sample_rate.max(1)));
    }
    let r = hound::WavReader::new(std::io::Cursor::new(bytes)).map_err(|e| format!("{name}: not WAV: {e}"))?;
    Ok(f64::from(r.duration()) / f64::from(r.spec().sample_rate.max(1)))
}

/// One file as a request.
fn item(
    path: &Path,
    prompt: &str,
    output_tokens: u32,
    tok: Option<&surge_core::data::tokenizer::Tok>,
) -> Result<PromptItem, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let audio_seconds = seconds(&path.display().to_string(), &bytes)?;
    let (input_tokens, source) = match tok {
        Some(t) => (t.count(prompt), TokenSource::Tokenizer),
        None => (u32::try_from(prompt.split_whitespace().count()).unwrap_or(u32::MAX), TokenSource::ClientEstimate),
    };
    Ok(PromptItem {
        text: prompt.to_string(),
        input_tokens,
        output_tokens,
        input_source: source as i32,
        audio: bytes,
        audio_name: name,
        audio_seconds,
        ..Default::default()
    })
}

/// The requests of `path` (a directory or a JSONL file), `output_len` where a line gives
/// none; an error names the file (and line).
pub fn audio(
    path: &Path,
    output_len: u32,
    tok: Option<&surge_core::data::tokenizer::Tok>,
) -> Result<Vec<PromptItem>, String> {
    let mut items = Vec::new();
    if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x.eq_ignore_ascii_case("wav") || x.eq_ignore_ascii_case("flac")))
            .collect();
        files.sort();
        for f in files {
            items.push(item(&f, "", output_len, tok)?);
        }
    } else {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let at = format!("{}:{}", path.display(), n + 1);
            let v: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("{at}: {e}"))?;
            let audio = v.get("audio").and_then(|a| a.as_str()).ok_or_else(|| format!("{at}: no \"audio\" path"))?;
            let prompt = v.get("prompt").and_then(|p| p.as_str()).unwrap_or("");
            let out = match v.get("output_tokens") {
                None => output_len,
                Some(o) => o
                    .as_u64()
                    .and_then(|o| u32::try_from(o).ok())
                    .filter(|&o| o > 0)
                    .ok_or_else(|| format!("{at}: output_tokens must be a count"))?,
            };
            items.push(item(&dir.join(audio), prompt, out, tok).map_err(|e| format!("{at}: {e}"))?);
        }
    }
    if items.is_empty() {
        return Err(format!("{}: no .wav or .flac file", path.display()));
    }
    let total: usize = items.iter().map(|i| i.audio.len()).sum();
    if total > MAX_AUDIO_BYTES {
        return Err(format!(
            "{}: {} MiB of audio; at most {} MiB are shipped to the agents",
            path.display(),
            total >> 20,
            MAX_AUDIO_BYTES >> 20
        ));
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mono 16-bit WAV of `samples` samples at `rate`.
    fn wav(samples: u32, rate: u32) -> Vec<u8> {
        let mut out = std::io::Cursor::new(Vec::new());
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: rate,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut w = hound::WavWriter::new(&mut out, spec).unwrap();
        for i in 0..samples {
            w.write_sample((i % 100) as i16).unwrap();
        }
        w.finalize().unwrap();
        out.into_inner()
    }

    #[test]
    fn durations_and_the_two_forms() {
        let dir = std::env::temp_dir().join(format!("surge-audio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("b.wav"), wav(8000, 16000)).unwrap();
        std::fs::write(dir.join("a.wav"), wav(24000, 16000)).unwrap();
        let items = audio(&dir, 64, None).unwrap();
        let got: Vec<(String, f64, u32)> =
            items.iter().map(|i| (i.audio_name.clone(), i.audio_seconds, i.output_tokens)).collect();
        assert_eq!(got, [("a.wav".into(), 1.5, 64), ("b.wav".into(), 0.5, 64)]);
        let jsonl = dir.join("set.jsonl");
        std::fs::write(
            &jsonl,
            "{\"audio\":\"b.wav\",\"prompt\":\"two words\",\"output_tokens\":9}\n\n{\"audio\":\"a.wav\"}\n",
        )
        .unwrap();
        let items = audio(&jsonl, 64, None).unwrap();
        assert_eq!((items[0].input_tokens, items[0].output_tokens, items[1].output_tokens), (2, 9, 64));
        std::fs::write(&jsonl, "{\"audio\":\"missing.wav\"}\n").unwrap();
        assert!(audio(&jsonl, 64, None).unwrap_err().contains("set.jsonl:1"));
        std::fs::write(dir.join("c.wav"), b"not a wav").unwrap();
        assert!(audio(&dir, 64, None).unwrap_err().contains("c.wav"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
