//! Architecture rules of the workspace (CONTRIBUTING.md, "Architecture rules (`tests/arch`)"), checked on the
//! source files: no import cycle between the top-level modules of
//! `coordinator`, `agent` and `echo`; library code prints nothing and never
//! exits the process; the coordinator builds no JSON by hand (`json!`).
//! Test code (`#[cfg(test)]` items, `mod tests`) is exempt. Std only, no build.

mod docs;
mod files;
mod rules;
mod scan;

use std::fs;
use std::path::{Path, PathBuf};

use rules::Rules;

/// The workspace root (the parent of this crate).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

/// Every `.rs` file under `<crate>/src`, as (path under `src/`, contents), sorted.
fn sources(krate: &str) -> Vec<(String, String)> {
    fn walk(dir: &Path, src: &Path, out: &mut Vec<(String, String)>) {
        let mut entries: Vec<PathBuf> = fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
            .map(|e| e.expect("directory entry").path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, src, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(src).expect("under src").to_string_lossy().replace('\\', "/");
                // A file moved away while we read (the tree is being restructured) is skipped.
                if let Ok(text) = fs::read_to_string(&p) {
                    out.push((rel, text));
                }
            }
        }
    }
    let src = root().join(krate).join("src");
    let mut out = Vec::new();
    walk(&src, &src, &mut out);
    assert!(out.iter().any(|(p, _)| p == "lib.rs"), "{}: no src/lib.rs", src.display());
    out
}

fn assert_no_cycles(krate: &str) {
    let files = rules::analyze(&sources(krate));
    let g = rules::graph(krate, &files);
    assert!(!g.modules.is_empty(), "{krate}: no `mod` items found in src/lib.rs");
    let found = rules::cycles(krate, &g);
    assert!(
        found.is_empty(),
        "import cycles between top-level modules (none allowed; CONTRIBUTING.md):\n{}",
        found.join("\n")
    );
}

/// No file of `krate` imports, through other files, itself (D60).
fn assert_no_file_cycles(krate: &str) {
    let g = files::file_graph(krate, &rules::analyze(&sources(krate)));
    assert!(!g.modules.is_empty(), "{krate}: files read");
    let found = rules::cycles(krate, &g);
    assert!(found.is_empty(), "import cycles between files (none allowed; CONTRIBUTING.md):\n{}", found.join("\n"));
}

#[test]
fn no_crate_has_a_file_cycle() {
    let mut found = Vec::new();
    for krate in ["coordinator", "agent", "core", "echo", "proto"] {
        if let Err(e) = std::panic::catch_unwind(|| assert_no_file_cycles(krate)) {
            found.push(e.downcast_ref::<String>().cloned().unwrap_or_default());
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The engine's layers (D75): the API layer imports neither the workload nor the run
/// loops; the workload does not import the run loops.
#[test]
fn the_engines_layers_import_only_those_below() {
    let g = files::file_graph("agent", &rules::analyze(&sources("agent")));
    let layer = |p: &str| ["engine/api/", "engine/workload/", "engine/load/"].iter().position(|l| p.starts_with(l));
    let wrong: Vec<String> = g
        .edges
        .iter()
        .filter(|((from, to), _)| matches!((layer(from), layer(to)), (Some(a), Some(b)) if b > a))
        .map(|((from, to), at)| format!("{from} -> {to} at {at}"))
        .collect();
    assert!(g.modules.iter().any(|m| m.starts_with("engine/api/")), "the layers' folders are read");
    assert!(wrong.is_empty(), "an engine layer imports one that builds on it:\n{}", wrong.join("\n"));
}

#[test]
fn coordinator_has_no_module_cycle() {
    assert_no_cycles("coordinator");
}

#[test]
fn agent_has_no_module_cycle() {
    assert_no_cycles("agent");
}

#[test]
fn echo_has_no_module_cycle() {
    assert_no_cycles("echo");
}

#[test]
fn core_has_no_module_cycle() {
    assert_no_cycles("core");
}

/// The coordinator reaches the agent crate only to run the embedded agent (D63): one file
/// names `surge_agent`; what both sides use comes from `surge_core`.
#[test]
fn one_coordinator_file_names_the_agent_crate() {
    let files: Vec<String> = sources("coordinator")
        .into_iter()
        .filter(|(_, text)| scan::code(text).toks.iter().any(|t| t.text == "surge_agent"))
        .map(|(p, _)| p)
        .collect();
    assert_eq!(files, ["fleet/local.rs"], "only the embedded agent's module may name surge_agent");
}

fn violations(rules: Rules, crates: &[&str]) -> Vec<String> {
    crates.iter().flat_map(|k| rules::output_violations(k, &rules::analyze(&sources(k)), rules)).collect()
}

/// "Library code prints nothing": output goes to sinks under `output/`, binaries under `bin/` may print.
#[test]
fn library_code_prints_nothing() {
    let found = violations(Rules { print: true, exit: false, json: false }, &["coordinator", "agent", "core", "echo"]);
    assert!(found.is_empty(), "{} print macros outside output/ and bin/:\n{}", found.len(), found.join("\n"));
}

/// "Library code never exits the process": exit codes come from one place (`exit.rs`) and the binaries.
#[test]
fn library_code_never_exits() {
    let found = violations(Rules { print: false, exit: true, json: false }, &["coordinator", "agent", "core", "echo"]);
    assert!(found.is_empty(), "{} process::exit outside bin/ and exit.rs:\n{}", found.len(), found.join("\n"));
}

/// The coordinator's JSON comes from its typed result model, never from `json!`.
#[test]
fn coordinator_builds_no_json_by_hand() {
    let found = violations(Rules { print: false, exit: false, json: true }, &["coordinator"]);
    assert!(found.is_empty(), "{} json! outside tests:\n{}", found.len(), found.join("\n"));
}
