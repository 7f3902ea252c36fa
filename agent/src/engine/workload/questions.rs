//! Accuracy beside speed (D71): which requests of the load are questions of the run's
//! accuracy file, their bodies (temperature 0, the question's `max_tokens`, EOS honoured),
//! and their scoring as the reply arrives. A pure function of the global request index,
//! so every agent asks the same questions of the same indices.

use super::EngineError;
use crate::engine::api::openai::{self, BodyParams};
use crate::engine::workload::Planned;
use bytes::Bytes;
use surge_core::data::answers::Scorer;
use surge_core::data::dataset::mix;
use surge_proto::{Backend, TokenSource, Workload};

/// Keeps the question draw apart from the dataset's own draws of the same seed.
const QUESTION_STREAM: u64 = 0x5155_4553_5449_4f4e;

/// The run's questions.
#[derive(Debug)]
pub struct Questions {
    scorer: Scorer,
    ratio: f64,
    seed: u64,
    model: String,
    chat: bool,
    extra: Option<serde_json::Map<String, serde_json::Value>>,
}

impl Questions {
    /// The workload's questions (`None`: it has none).
    pub fn of(w: &Workload) -> Result<Option<Self>, EngineError> {
        if w.accuracy.is_empty() {
            return Ok(None);
        }
        let bad = |m: String| {
            EngineError::Spec(crate::engine::workload::spec::SpecError::Contradiction(format!("accuracy: {m}")))
        };
        if !matches!(w.backend(), Backend::Openai | Backend::OpenaiChat) {
            return Err(bad("questions need a completions or chat backend".into()));
        }
        if !(w.accuracy_ratio > 0.0 && w.accuracy_ratio <= 1.0) {
            return Err(bad(format!("ratio {} not in (0, 1]", w.accuracy_ratio)));
        }
        let extra = match w.extra_body_json.as_str() {
            "" => None,
            j => serde_json::from_str(j).map_err(|e| EngineError::ExtraBody(e.to_string()))?,
        };
        Ok(Some(Self {
            scorer: Scorer::new(w.accuracy.clone()).map_err(bad)?,
            ratio: w.accuracy_ratio,
            seed: w.dataset.as_ref().map_or(0, |d| d.seed),
            model: w.model.clone(),
            chat: w.backend() == Backend::OpenaiChat,
            extra,
        }))
    }

    /// The question request `index` asks, if it is one: item `index mod n`.
    pub fn pick(&self, index: u64) -> Option<usize> {
        let draw = (mix(self.seed ^ QUESTION_STREAM, index) >> 11) as f64 / (1u64 << 53) as f64;
        let asked = self.ratio >= 1.0 || draw < self.ratio;
        asked.then(|| (index % self.scorer.len() as u64) as usize)
    }

    /// Question `i` as a request: its prompt at temperature 0.
    pub fn planned(&self, i: usize) -> Planned {
        let item = self.scorer.item(i);
        let params = BodyParams {
            model: &self.model,
            chat: self.chat,
            ignore_eos: false,
            temperature: Some(0.0),
            extra: self.extra.as_ref(),
        };
        Planned {
            body: Bytes::from(openai::body(&params, &item.prompt, item.max_tokens)),
            input_tokens: item.prompt.split_whitespace().count() as u32,
            input_source: TokenSource::ClientEstimate,
            input_sequences: 0,
            audio_s: 0.0,
            max_tokens: item.max_tokens,
        }
    }

    /// Scores a successful reply to question `i` (its text in the row).
    pub fn score(&self, i: usize, row: &mut surge_proto::Row) {
        if row.error() == surge_proto::ErrorKind::None {
            row.correct = Some(self.scorer.score(i, &row.generated_text));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::{AccuracyItem, AnswerKind};

    fn workload(ratio: f64) -> Workload {
        let item = |p: &str, a: &str| AccuracyItem {
            prompt: p.into(),
            kind: AnswerKind::Exact as i32,
            expected: a.into(),
            max_tokens: 4,
        };
        let mut w = Workload {
            model: "m".into(),
            accuracy: vec![item("one", "1"), item("two", "2")],
            accuracy_ratio: ratio,
            ..Default::default()
        };
        w.set_backend(Backend::OpenaiChat);
        w
    }

    #[test]
    fn every_request_or_a_seeded_share_asks_and_replies_are_scored() {
        let q = Questions::of(&workload(1.0)).unwrap().expect("questions");
        assert_eq!((0..4).map(|i| q.pick(i)).collect::<Vec<_>>(), [Some(0), Some(1), Some(0), Some(1)]);
        let body = String::from_utf8(q.planned(1).body.to_vec()).unwrap();
        assert!(body.contains("\"two\"") && body.contains("\"temperature\":0.0"), "{body}");
        let q = Questions::of(&workload(0.25)).unwrap().expect("questions");
        let asked = (0..40_000).filter(|&i| q.pick(i).is_some()).count();
        assert!(asked.abs_diff(10_000) < 400, "{asked}");
        let mut row = surge_proto::Row { generated_text: " 2 ".into(), ..Default::default() };
        q.score(1, &mut row);
        assert_eq!(row.correct, Some(true));
        assert!(Questions::of(&Workload::default()).unwrap().is_none());
        assert!(Questions::of(&workload(0.0)).is_err());
    }
}
