//! Accuracy beside speed (D71), folded row by row from the questions' `correct`: how many
//! were answered and how many right, and the share right with its Wilson score interval
//! (which stays inside [0, 1] and holds at small counts, where the normal approximation
//! does not). Counts only: exact whatever the number of agents.

use super::fold::{Fold, Whole};
use crate::fleet::outcome::GlobalRow;
use statrs::distribution::{ContinuousCDF, Normal};

/// The interval's confidence.
pub const CONFIDENCE: f64 = 0.95;

/// The questions of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Accuracy {
    /// Questions answered (successful replies), and those answered right.
    pub samples: u64,
    pub correct: u64,
}

impl Accuracy {
    /// The share right (`None` without a sample).
    pub fn share(&self) -> Option<f64> {
        (self.samples > 0).then(|| self.correct as f64 / self.samples as f64)
    }

    /// The Wilson score interval of the share at `confidence`.
    pub fn interval(&self, confidence: f64) -> Option<(f64, f64)> {
        let p = self.share()?;
        let n = self.samples as f64;
        let z = Normal::standard().inverse_cdf(0.5 + confidence / 2.0);
        let z2 = z * z;
        let center = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
        let half = z / (1.0 + z2 / n) * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
        Some(((center - half).max(0.0), (center + half).min(1.0)))
    }
}

/// The fold: nothing until a question is answered.
#[derive(Debug, Default)]
pub struct AccuracyFold(Option<Accuracy>);

impl Fold for AccuracyFold {
    type Out = Option<Accuracy>;

    fn row(&mut self, r: &GlobalRow) {
        if let Some(right) = r.row.correct {
            let a = self.0.get_or_insert_with(Accuracy::default);
            a.samples += 1;
            a.correct += u64::from(right);
        }
    }

    fn finish(self, _run: &Whole) -> Self::Out {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wilson_interval_matches_its_textbook_values() {
        // 180 right of 200: 0.90, Wilson 95 % [0.8506, 0.9343].
        let a = Accuracy { samples: 200, correct: 180 };
        let (lo, hi) = a.interval(CONFIDENCE).unwrap();
        assert!((lo - 0.8506).abs() < 1e-4 && (hi - 0.9343).abs() < 1e-4, "{lo} {hi}");
        // All right: the interval ends at 1 and starts below it.
        let (lo, hi) = Accuracy { samples: 10, correct: 10 }.interval(CONFIDENCE).unwrap();
        assert!(hi == 1.0 && (lo - 0.7225).abs() < 1e-4, "{lo}");
        assert_eq!(Accuracy::default().interval(CONFIDENCE), None);
    }

    #[test]
    fn only_questions_count() {
        let mut f = AccuracyFold::default();
        let row = |correct| GlobalRow {
            agent: 0,
            start_s: 0.0,
            intended_s: None,
            row: surge_proto::Row { correct, ..Default::default() },
        };
        for c in [Some(true), Some(false), None, Some(true)] {
            f.row(&row(c));
        }
        assert_eq!(f.finish(&Whole::default()), Some(Accuracy { samples: 3, correct: 2 }));
    }
}
