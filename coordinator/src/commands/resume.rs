//! What `--resume` goes on from (D93): a sweep, a capacity search or a matrix keeps the
//! flags it was given in `DIR/surge-settings.json`, and a resume with other flags is refused
//! rather than mixing results measured under other settings with new ones.

use crate::exit::{self, Failure};
use crate::output::Outputs;
use std::collections::BTreeMap;
use std::path::Path;

/// The file beside the results.
pub const FILE: &str = "surge-settings.json";

type Settings = BTreeMap<String, Vec<String>>;

/// With `resume`, refuses when `dir` holds results of other settings (and goes on, the
/// file untouched, when they are the same); else keeps `given` as the directory's.
pub fn check_and_keep(
    dir: &Path,
    resume: bool,
    given: &[(String, Vec<String>)],
    outputs: &mut Outputs,
) -> Result<(), Failure> {
    let path = dir.join(FILE);
    let now: Settings = given.iter().cloned().collect();
    if resume {
        match std::fs::read(&path) {
            Ok(bytes) => {
                let before: Settings = serde_json::from_slice(&bytes).map_err(|e| {
                    Failure::new(exit::USAGE, format!("--resume: {}: not what surge writes there: {e}", path.display()))
                })?;
                let changed = differences(&before, &now);
                if changed.is_empty() {
                    return Ok(());
                }
                return Err(Failure::new(
                    exit::USAGE,
                    format!(
                        "--resume: the results in {} were measured with other settings ({}); give the same flags, \
                         or leave out --resume to measure again",
                        dir.display(),
                        changed.join("; ")
                    ),
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => outputs.notice(&format!(
                "--resume: {} has no {FILE} (written by an older surge): its results' settings cannot be checked",
                dir.display()
            )),
            Err(e) => return Err(Failure::new(exit::USAGE, format!("--resume: {}: {e}", path.display()))),
        }
    }
    crate::output::files::write_json(&path, &now).map_err(|e| Failure::run("--result-dir", &e))
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

    fn given(v: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
        v.iter().map(|(k, vs)| (k.to_string(), vs.iter().map(|s| s.to_string()).collect())).collect()
    }

    #[test]
    fn a_resume_with_other_flags_is_refused_naming_them() {
        let dir = std::env::temp_dir().join(format!("surge-resume-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut out = Outputs::standard("test", true);
        let first = given(&[("--num-prompts", &["3"]), ("--slo", &["ttft:p99<=1000"])]);
        // A fresh start writes the settings; resuming with the same goes on.
        check_and_keep(&dir, false, &first, &mut out).unwrap();
        check_and_keep(&dir, true, &first, &mut out).unwrap();
        let other = given(&[("--num-prompts", &["5"]), ("--random-output-len", &["9"])]);
        let e = check_and_keep(&dir, true, &other, &mut out).unwrap_err();
        assert_eq!(e.code, exit::USAGE);
        for part in
            ["--num-prompts: 3 -> 5", "--random-output-len: not given -> 9", "--slo: ttft:p99<=1000 -> not given"]
        {
            assert!(e.message.contains(part), "{part}: {}", e.message);
        }
        // Refused, the directory keeps its settings; measured again, it takes the new ones.
        assert!(check_and_keep(&dir, true, &first, &mut out).is_ok());
        check_and_keep(&dir, false, &other, &mut out).unwrap();
        check_and_keep(&dir, true, &other, &mut out).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
