//! What `--resume` goes on from (D93): each level-run's result, and a capacity search's
//! `capacity.json`, carries the flags that measured it (`settings`), and a resume takes
//! only what was measured with the flags it is given; the rest is measured again, said.

use crate::output::Outputs;
use std::collections::BTreeMap;
use std::path::Path;

/// The flags given and their values, as a result keeps them.
pub type Settings = BTreeMap<String, Vec<String>>;

/// Whether a result at `path` measured with `before` may stand for one measured `now`.
/// One without settings (written before results kept them) is taken, as it always was.
pub fn same(before: &Settings, now: &Settings, path: &Path, outputs: &mut Outputs) -> bool {
    if before.is_empty() {
        return true;
    }
    let changed = differences(before, now);
    if changed.is_empty() {
        return true;
    }
    outputs.notice(&format!(
        "{}: measured with other settings ({}); measured again",
        path.display(),
        changed.join("; ")
    ));
    false
}

/// Each flag whose values differ, as `--flag: before -> now`.
fn differences(before: &Settings, now: &Settings) -> Vec<String> {
    let shown = |v: Option<&Vec<String>>| match v {
        None => "not given".to_string(),
        Some(v) => {
            let s = v.join(" ");
            if s.chars().count() > 60 { format!("{}...", s.chars().take(60).collect::<String>()) } else { s }
        }
    };
    let mut keys: Vec<&String> = before.keys().chain(now.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| before.get(*k) != now.get(*k))
        .map(|k| format!("{k}: {} -> {}", shown(before.get(k)), shown(now.get(k))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(v: &[(&str, &[&str])]) -> Settings {
        v.iter().map(|(k, vs)| (k.to_string(), vs.iter().map(|s| s.to_string()).collect())).collect()
    }

    #[test]
    fn only_what_the_same_flags_measured_is_taken() {
        let mut out = Outputs::standard("test", true);
        let path = Path::new("r.json");
        let first = settings(&[("--num-prompts", &["3"]), ("--slo", &["ttft:p99<=1000"])]);
        assert!(same(&first, &first, path, &mut out));
        let other = settings(&[("--num-prompts", &["5"]), ("--random-output-len", &["9"])]);
        assert!(!same(&first, &other, path, &mut out));
        let d = differences(&first, &other);
        assert_eq!(
            d,
            ["--num-prompts: 3 -> 5", "--random-output-len: not given -> 9", "--slo: ttft:p99<=1000 -> not given"]
        );
        // A result written before results kept their settings is taken, as before.
        assert!(same(&Settings::new(), &other, path, &mut out));
    }
}
