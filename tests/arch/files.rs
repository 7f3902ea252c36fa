//! The file-level import graph (D60): one node per source file, an edge where one file
//! names a path that resolves into another (`crate::a::b`, `super::b`, `self::c`, a child
//! module `c::x`, grouped or not). A path resolves to the deepest file its segments reach.
//! No cycle is allowed between files, not only between top-level modules. A file's use of
//! the modules that enclose it (`super::Item` from a child of `mod.rs`) is not an edge:
//! a module's root file and the files it declares are one module, as Rust scopes them.

use std::collections::BTreeMap;

use crate::rules::{File, Graph};
use crate::scan::{Tok, is_ident, is_seq, matching};

/// A file's module path: `lib.rs` -> [], `a.rs` and `a/mod.rs` -> [a], `a/b.rs` -> [a, b].
fn module_of(path: &str) -> Vec<String> {
    let p = path.trim_end_matches(".rs");
    let p = p.strip_suffix("/mod").unwrap_or(p);
    if p == "lib" || p == "main" {
        return Vec::new();
    }
    p.split('/').map(str::to_owned).collect()
}

/// Every path of `toks` written from a module root, expanded over `{..}` groups: the
/// first token's index and the segments after the root word (`crate`, `super`, `self`,
/// or nothing for a child module's name).
fn paths(toks: &[Tok]) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    for i in 0..toks.len() {
        if i > 0 && toks[i - 1].text == "::" {
            continue;
        }
        if !is_ident(&toks[i]) || !is_seq(toks, i + 1, &["::"]) {
            continue;
        }
        let mut prefix = vec![toks[i].text.clone()];
        let mut j = i + 2;
        while is_seq(toks, j, &["super", "::"]) && prefix.iter().all(|p| p == "super") {
            prefix.push("super".into());
            j += 2;
        }
        expand(toks, j, prefix, &mut out, i);
    }
    out
}

/// The segments from `j` on, appended to `prefix`; a `{..}` group gives one path per entry.
fn expand(toks: &[Tok], mut j: usize, mut prefix: Vec<String>, out: &mut Vec<(usize, Vec<String>)>, at: usize) {
    loop {
        match toks.get(j) {
            Some(t) if t.text == "{" => {
                let close = matching(toks, j);
                let mut start = j + 1;
                let mut depth = 0usize;
                for k in j + 1..=close {
                    let t = &toks[k].text;
                    match t.as_str() {
                        "{" | "(" | "[" => depth += 1,
                        "}" | ")" | "]" if depth > 0 => depth -= 1,
                        _ => {}
                    }
                    if depth == 0 && (t == "," || k == close) {
                        if start < k {
                            expand(toks, start, prefix.clone(), out, at);
                        }
                        start = k + 1;
                    }
                }
                return;
            }
            Some(t) if is_ident(t) => {
                prefix.push(t.text.clone());
                if is_seq(toks, j + 1, &["::"]) {
                    j += 2;
                } else {
                    out.push((at, prefix));
                    return;
                }
            }
            _ => {
                out.push((at, prefix));
                return;
            }
        }
    }
}

/// The graph of a crate's files (`bin/` left out).
pub fn file_graph(crate_name: &str, files: &[File]) -> Graph {
    let modules: BTreeMap<Vec<String>, &str> =
        files.iter().filter(|f| !f.path.starts_with("bin/")).map(|f| (module_of(&f.path), f.path.as_str())).collect();
    let mut g = Graph { modules: modules.values().map(|p| p.to_string()).collect(), ..Default::default() };
    for f in files.iter().filter(|f| !f.path.starts_with("bin/")) {
        let here = module_of(&f.path);
        for (at, segs) in paths(&f.toks) {
            let tok = &f.toks[at];
            if tok.inline_depth > 0 && segs[0] != "crate" {
                continue;
            }
            let (mut abs, rest): (Vec<String>, &[String]) = match segs[0].as_str() {
                "crate" => (Vec::new(), &segs[1..]),
                "self" => (here.clone(), &segs[1..]),
                "super" => {
                    let ups = segs.iter().take_while(|s| *s == "super").count();
                    if ups > here.len() {
                        continue;
                    }
                    (here[..here.len() - ups].to_vec(), &segs[ups..])
                }
                _ => {
                    // A child module of this file's module, named without `self::`.
                    let mut child = here.clone();
                    child.push(segs[0].clone());
                    if !modules.contains_key(&child) {
                        continue;
                    }
                    (here.clone(), &segs[..])
                }
            };
            let mut target = modules.get(&abs).copied();
            for s in rest {
                abs.push(s.clone());
                match modules.get(&abs) {
                    Some(p) => target = Some(p),
                    None => break,
                }
            }
            // A file may use the items of the modules that enclose it (`super::Item`): its
            // parent's file is the root of the module it belongs to, not another file.
            let enclosing = |t: &str| {
                let m = module_of(t);
                m.len() < here.len() && here.starts_with(&m)
            };
            if let Some(t) = target.filter(|t| *t != f.path && !enclosing(t)) {
                g.edges
                    .entry((f.path.clone(), t.to_owned()))
                    .or_insert_with(|| format!("{crate_name}/src/{}:{}", f.path, tok.line));
            }
        }
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{analyze, cycles};

    fn graph(list: &[(&str, &str)]) -> Graph {
        let fs: Vec<(String, String)> = list.iter().map(|(p, t)| (p.to_string(), t.to_string())).collect();
        file_graph("x", &analyze(&fs))
    }

    /// Two sibling files of one module that import each other: a cycle at file
    /// granularity that the top-level module graph cannot see.
    #[test]
    fn sibling_files_in_a_loop_are_a_cycle() {
        let g = graph(&[
            ("lib.rs", "mod engine;"),
            ("engine/mod.rs", "mod api;\nmod jobs;\npub fn run() { jobs::go() }"),
            ("engine/api.rs", "use super::jobs::Job;\npub struct Api;"),
            ("engine/jobs.rs", "use super::{api::Api, other};\npub fn go() {}"),
        ]);
        let found = cycles("x", &g);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("engine/api.rs") && found[0].contains("engine/jobs.rs"), "{found:?}");
        assert!(g.edges.contains_key(&("engine/mod.rs".into(), "engine/jobs.rs".into())), "{:?}", g.edges);
    }

    #[test]
    fn layered_files_pass_and_paths_resolve_to_the_deepest_file() {
        let g = graph(&[
            ("lib.rs", "mod a;\nmod b;"),
            ("a/mod.rs", "pub mod c;\npub use c::C;"),
            ("a/c.rs", "pub struct C;"),
            (
                "b.rs",
                "use crate::a::c::C;\nfn f() { crate::a::C; self::g(); }\n#[cfg(test)]\nmod tests { use crate::b; }",
            ),
        ]);
        assert!(cycles("x", &g).is_empty(), "{:?}", g.edges);
        assert!(g.edges.contains_key(&("b.rs".into(), "a/c.rs".into())));
        assert!(g.edges.contains_key(&("b.rs".into(), "a/mod.rs".into())));
        assert!(g.edges.contains_key(&("a/mod.rs".into(), "a/c.rs".into())));
    }
}
