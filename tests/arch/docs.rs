//! The decision record resolves: every `D<n>` cited in code, scripts and docs has its
//! section (`## D<n>`) in `docs/design.md`, and no comment or page points to an "issue N"
//! that a reader of the repository cannot open. Std only, no build.

use std::fs;
use std::path::{Path, PathBuf};

/// Files that cite decisions: code, scripts, the contract, configs and docs, outside
/// `target/` and `.git/`; `bench/runs/` keeps dated logs verbatim and is left as written.
fn cited_files(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().to_string();
            if p.is_dir() {
                if !matches!(name.as_str(), "target" | ".git" | "runs" | "fixtures" | "corpus" | "artifacts") {
                    walk(&p, out);
                }
            } else if ["rs", "sh", "proto", "toml", "md", "py", "yaml", "service"]
                .iter()
                .any(|x| p.extension().is_some_and(|e| e == *x))
                || name == "run"
            {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, &mut out);
    out.sort();
    out
}

/// The decision numbers cited in `text`: `D` then digits, not inside a longer word.
fn citations(text: &str) -> Vec<u32> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    for i in 0..b.len() {
        if b[i] != b'D' || (i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) {
            continue;
        }
        let digits: String = text[i + 1..].chars().take_while(char::is_ascii_digit).collect();
        let after = text[i + 1 + digits.len()..].chars().next();
        if !digits.is_empty() && !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.push(digits.parse().expect("digits"));
        }
    }
    out
}

/// The decisions `docs/design.md` records (its `## D<n>` headings).
fn recorded(design: &str) -> Vec<u32> {
    design
        .lines()
        .filter_map(|l| l.strip_prefix("## D"))
        .filter_map(|rest| rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .collect()
}

/// "issue 12", "issues 3", "issue #4" (case-insensitive).
fn issue_refs(text: &str) -> Vec<String> {
    let lower = text.to_ascii_lowercase();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = lower[from..].find("issue") {
        let i = from + at;
        from = i + 5;
        let rest = lower[i + 5..].trim_start_matches('s');
        let rest = rest.strip_prefix(' ').unwrap_or("x").trim_start_matches('#');
        if rest.starts_with(|c: char| c.is_ascii_digit()) && (i == 0 || !lower.as_bytes()[i - 1].is_ascii_alphabetic())
        {
            let end = lower[i..].find('\n').map_or(lower.len(), |e| i + e);
            out.push(text[i..end.min(i + 60)].to_string());
        }
    }
    out
}

#[test]
fn every_cited_decision_is_recorded_in_docs_design_md() {
    let root = super::root();
    let design = fs::read_to_string(root.join("docs/design.md")).expect("docs/design.md exists");
    let have = recorded(&design);
    assert!(have.len() >= 38, "docs/design.md records {} decisions", have.len());
    let mut missing = Vec::new();
    for p in cited_files(&root) {
        let Ok(text) = fs::read_to_string(&p) else { continue };
        for d in citations(&text) {
            if !have.contains(&d) {
                missing.push(format!("{}: D{d}", p.strip_prefix(&root).unwrap_or(&p).display()));
            }
        }
    }
    missing.dedup();
    assert!(missing.is_empty(), "decisions cited but not recorded in docs/design.md:\n{}", missing.join("\n"));
}

#[test]
fn nothing_points_to_an_issue_number() {
    let root = super::root();
    let mut found = Vec::new();
    for p in cited_files(&root) {
        // This file names what it looks for.
        if p.ends_with("tests/arch/docs.rs") {
            continue;
        }
        let Ok(text) = fs::read_to_string(&p) else { continue };
        for r in issue_refs(&text) {
            found.push(format!("{}: {r}", p.strip_prefix(&root).unwrap_or(&p).display()));
        }
    }
    assert!(found.is_empty(), "say what is meant, not an issue number the reader cannot open:\n{}", found.join("\n"));
}

#[test]
fn the_scanners_find_what_they_look_for() {
    assert_eq!(citations("(D20) D3, xD4 D5x D_6 `D38`."), [20, 3, 38]);
    assert_eq!(recorded("## D1 One\ntext D2\n## D12 Twelve\n"), [1, 12]);
    assert_eq!(
        issue_refs("see issue 17; Issues #3 and tissue 4, the issue's"),
        ["issue 17; Issues #3 and tissue 4, the issue's", "Issues #3 and tissue 4, the issue's"]
    );
}

/// The README stays a front page: what surge is, the two commands, where to read on.
#[test]
fn the_readme_is_at_most_10_kb() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace");
    let n = fs::metadata(root.join("README.md")).expect("README.md").len();
    assert!(n <= 10_000, "README.md is {n} bytes; keep it at most 10,000 (detail goes to docs/guide.md)");
}

/// The `--backend` names `run_plan` gives (`BackendArg::X => (Backend::Y, "name", ...)`).
fn backend_names(build_rs: &str) -> Vec<String> {
    build_rs
        .lines()
        .filter(|l| l.trim_start().starts_with("BackendArg::"))
        .filter_map(|l| l.split('"').nth(1).map(str::to_owned))
        .collect()
}

/// Every `--backend` value is explained in the user guide.
#[test]
fn every_backend_is_in_the_guide() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace");
    let build = fs::read_to_string(root.join("coordinator/src/cli/build.rs")).expect("build.rs");
    let guide = fs::read_to_string(root.join("docs/guide.md")).expect("docs/guide.md");
    let names = backend_names(&build);
    assert!(names.len() >= 13 && names.iter().any(|n| n == "vllm-rerank"), "read {names:?}");
    let missing: Vec<&String> = names.iter().filter(|n| !guide.contains(&format!("`{n}`"))).collect();
    assert!(missing.is_empty(), "backends not in docs/guide.md (as `NAME`): {missing:?}");
}
