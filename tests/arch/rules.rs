//! The rules, checked on a crate's source files given as (path under `src/`,
//! contents) pairs, so unit tests can feed synthetic files:
//!
//! - [`cycles`]: no import cycle between the top-level modules of a crate;
//! - [`output_violations`]: library code prints nothing, never exits the
//!   process, and (in the coordinator) builds no JSON by hand with `json!`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::scan::{self, Code, Tok, is_ident, is_seq, matching};

/// One source file of a crate, its test code removed.
#[derive(Debug)]
pub struct File {
    /// Path under the crate's `src/`, with `/` separators.
    pub path: String,
    pub toks: Vec<Tok>,
}

/// Lex every file and drop the test code: `#[cfg(test)]` items, `mod tests { .. }`,
/// and the files of modules declared `#[cfg(test)] mod name;`.
pub fn analyze(files: &[(String, String)]) -> Vec<File> {
    let codes: Vec<(&String, Code)> = files.iter().map(|(p, text)| (p, scan::code(text))).collect();
    let mut test_paths = Vec::new();
    for (path, code) in &codes {
        let dir = module_dir(path);
        for name in &code.test_mods {
            let base = if dir.is_empty() { name.clone() } else { format!("{dir}/{name}") };
            test_paths.push(format!("{base}.rs"));
            test_paths.push(format!("{base}/"));
        }
    }
    let is_test =
        |p: &str| test_paths.iter().any(|t| if t.ends_with('/') { p.starts_with(t.as_str()) } else { p == t });
    codes
        .into_iter()
        .filter(|(path, code)| !code.all_test && !is_test(path))
        .map(|(path, code)| File { path: path.clone(), toks: code.toks })
        .collect()
}

/// Where the files of the modules a file declares live: `a/` for `a.rs` and
/// `a/mod.rs`, the root for `lib.rs`, `main.rs` and `bin/x.rs`.
fn module_dir(path: &str) -> String {
    let (dir, file) = path.rsplit_once('/').unwrap_or(("", path));
    if matches!(file, "lib.rs" | "main.rs" | "mod.rs") || dir == "bin" {
        dir.to_owned()
    } else {
        path.trim_end_matches(".rs").to_owned()
    }
}

/// How many `super::` lead from the file's module to the crate root.
fn file_depth(path: &str) -> usize {
    let parts = path.split('/').count();
    if path.ends_with("/mod.rs") { parts - 1 } else { parts }
}

/// The module graph of a crate: its top-level modules and, for each import
/// edge, where it was first seen.
#[derive(Debug, Default)]
pub struct Graph {
    pub modules: BTreeSet<String>,
    pub edges: BTreeMap<(String, String), String>,
}

/// Build the graph. The top-level modules are the `mod` items of `lib.rs`; a
/// file under `src/NAME/` or `src/NAME.rs` belongs to NAME; NAME imports OTHER
/// when one of its files names `crate::OTHER` (in a `use`, grouped or not, or
/// inline in code), `super::OTHER` from the crate root, or `crate::ITEM` where
/// `lib.rs` re-exports ITEM from OTHER.
pub fn graph(crate_name: &str, files: &[File]) -> Graph {
    let mut g = Graph::default();
    let Some(lib) = files.iter().find(|f| f.path == "lib.rs") else { return g };
    g.modules = top_modules(&lib.toks);
    let reexports = reexports(&lib.toks, &g.modules);
    for f in files {
        let first = f.path.split('/').next().unwrap_or_default();
        let owner = first.strip_suffix(".rs").unwrap_or(first);
        if !g.modules.contains(owner) || f.path.starts_with("bin/") {
            continue;
        }
        for (name, line) in root_paths(&f.toks, file_depth(&f.path)) {
            let target = if g.modules.contains(&name) { Some(&name) } else { reexports.get(&name) };
            if let Some(target) = target.filter(|t| *t != owner) {
                g.edges
                    .entry((owner.to_owned(), target.clone()))
                    .or_insert_with(|| format!("{crate_name}/src/{}:{line}", f.path));
            }
        }
    }
    g
}

/// The `mod` items at the top of `lib.rs`.
fn top_modules(lib: &[Tok]) -> BTreeSet<String> {
    let mut mods = BTreeSet::new();
    let mut depth = 0usize;
    for (i, t) in lib.iter().enumerate() {
        match t.text.as_str() {
            "{" | "(" | "[" => depth += 1,
            "}" | ")" | "]" => depth = depth.saturating_sub(1),
            "mod" if depth == 0 && lib.get(i + 1).is_some_and(is_ident) => {
                mods.insert(lib[i + 1].text.clone());
            }
            _ => {}
        }
    }
    mods
}

/// Items `lib.rs` imports at its top from a top-level module (`pub use m::{A, B as C}`;
/// a private `use` is visible to every module of the crate as well): name -> module.
fn reexports(lib: &[Tok], modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut depth = 0usize;
    for (i, t) in lib.iter().enumerate() {
        match t.text.as_str() {
            "{" | "(" | "[" => depth += 1,
            "}" | ")" | "]" => depth = depth.saturating_sub(1),
            _ => {}
        }
        if t.text != "use" || depth > 0 {
            continue;
        }
        let mut j = i + 1;
        if is_seq(lib, j, &["crate", "::"]) || is_seq(lib, j, &["self", "::"]) {
            j += 2;
        }
        let Some(module) = lib.get(j).filter(|m| modules.contains(&m.text)) else { continue };
        let end = (j..lib.len()).find(|&k| lib[k].text == ";").unwrap_or(lib.len());
        for k in j + 1..end {
            let leaf = is_ident(&lib[k])
                && lib[k].text != "self"
                && lib.get(k + 1).is_none_or(|n| matches!(n.text.as_str(), "," | "}" | ";"));
            if leaf {
                out.insert(lib[k].text.clone(), module.text.clone());
            }
        }
    }
    out
}

/// The first segment of every path that starts at the crate root, with its
/// line: `crate::NAME`, each entry of `crate::{A, b::C}`, and `super::NAME`
/// with as many `super` as the token is deep below the root.
fn root_paths(toks: &[Tok], file_depth: usize) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        let after_sep = i > 0 && toks[i - 1].text == "::";
        let start = if t.text == "crate" && !after_sep && is_seq(toks, i + 1, &["::"]) {
            i + 2
        } else if t.text == "super" && !after_sep {
            let mut j = i;
            while is_seq(toks, j, &["super", "::"]) {
                j += 2;
            }
            if (j - i) / 2 != file_depth + t.inline_depth {
                continue;
            }
            j
        } else {
            continue;
        };
        match toks.get(start) {
            Some(n) if is_ident(n) && n.text != "self" => out.push((n.text.clone(), n.line)),
            Some(n) if n.text == "{" => {
                let close = matching(toks, start);
                let mut depth = 0usize;
                let mut entry_start = true;
                for e in &toks[start + 1..close] {
                    if entry_start && depth == 0 && is_ident(e) && e.text != "self" {
                        out.push((e.text.clone(), e.line));
                    }
                    entry_start = false;
                    match e.text.as_str() {
                        "{" | "(" | "[" => depth += 1,
                        "}" | ")" | "]" => depth = depth.saturating_sub(1),
                        "," if depth == 0 => entry_start = true,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Every import cycle of the graph, one message per strongly connected group:
/// its shortest cycle (`crate: a -> b -> a`), where each of its edges was seen,
/// and, when the cycle leaves some of the group out, every edge inside the group.
pub fn cycles(crate_name: &str, g: &Graph) -> Vec<String> {
    let mut succ: BTreeMap<&str, Vec<&str>> = g.modules.iter().map(|m| (m.as_str(), Vec::new())).collect();
    for (a, b) in g.edges.keys() {
        succ.entry(a).or_default().push(b);
    }
    let mut out = Vec::new();
    for group in strongly_connected(&succ) {
        let cycle = shortest_cycle(&group, &succ);
        let mut msg = format!("{crate_name}: {}", cycle.join(" -> "));
        for pair in cycle.windows(2) {
            let at = &g.edges[&(pair[0].to_owned(), pair[1].to_owned())];
            msg.push_str(&format!("\n    {} -> {} at {at}", pair[0], pair[1]));
        }
        if group.len() + 1 > cycle.len() {
            msg.push_str(&format!("\n  all edges among {{{}}}:", group.join(", ")));
            for ((a, b), at) in &g.edges {
                if group.contains(&a.as_str()) && group.contains(&b.as_str()) {
                    msg.push_str(&format!("\n    {a} -> {b} at {at}"));
                }
            }
        }
        out.push(msg);
    }
    out
}

/// Groups of more than one module that all reach each other (Tarjan), each
/// sorted, in order.
fn strongly_connected<'g>(succ: &BTreeMap<&'g str, Vec<&'g str>>) -> Vec<Vec<&'g str>> {
    #[derive(Default)]
    struct Tarjan<'g> {
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        groups: Vec<Vec<&'g str>>,
    }
    fn visit<'g>(t: &mut Tarjan<'g>, succ: &BTreeMap<&'g str, Vec<&'g str>>, v: &'g str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on_stack.insert(v);
        for &w in succ.get(v).into_iter().flatten() {
            if !t.index.contains_key(w) {
                visit(t, succ, w);
                let low = t.low[v].min(t.low[w]);
                t.low.insert(v, low);
            } else if t.on_stack.contains(w) {
                let low = t.low[v].min(t.index[w]);
                t.low.insert(v, low);
            }
        }
        if t.low[v] == t.index[v] {
            let mut group = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on_stack.remove(w);
                group.push(w);
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                t.groups.push(group);
            }
        }
    }
    let mut t = Tarjan::default();
    for &v in succ.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, succ, v);
        }
    }
    t.groups.sort();
    t.groups
}

/// The shortest cycle through the group's first module, inside the group
/// (breadth first), as `[start, .., start]`.
fn shortest_cycle<'g>(group: &[&'g str], succ: &BTreeMap<&'g str, Vec<&'g str>>) -> Vec<&'g str> {
    let start = group[0];
    let mut prev: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for &w in succ.get(v).into_iter().flatten().filter(|w| group.contains(w)) {
            if w == start {
                let mut path = vec![v];
                while let Some(&p) = prev.get(path[path.len() - 1]) {
                    path.push(p);
                }
                path.reverse();
                path.push(start);
                return path;
            }
            if w != start && !prev.contains_key(w) {
                prev.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    vec![start]
}

/// Which of the output rules apply to a crate.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// No `print!`, `println!`, `eprint!`, `eprintln!` outside `output/` and `bin/`.
    pub print: bool,
    /// No `process::exit` outside `bin/` and `exit.rs`.
    pub exit: bool,
    /// No `json!` at all (outside tests): JSON comes from typed models.
    pub json: bool,
}

/// Every breach of `rules`, as `crate/src/path:line: what`.
pub fn output_violations(crate_name: &str, files: &[File], rules: Rules) -> Vec<String> {
    let mut out = Vec::new();
    for f in files {
        let dirs: Vec<&str> = f.path.split('/').collect();
        let (dirs, file) = dirs.split_at(dirs.len() - 1);
        let binary = dirs.contains(&"bin") || f.path == "main.rs";
        let may_print = binary || dirs.contains(&"output");
        let may_exit = binary || file == ["exit.rs"];
        let mut report = |t: &Tok, what: &str| out.push(format!("{crate_name}/src/{}:{}: {what}", f.path, t.line));
        for (i, t) in f.toks.iter().enumerate() {
            let bang = is_seq(&f.toks, i + 1, &["!"]);
            let name = t.text.as_str();
            if rules.print && !may_print && bang && matches!(name, "print" | "println" | "eprint" | "eprintln") {
                report(t, &format!("{name}! in library code (print through a sink under output/)"));
            }
            if rules.exit && !may_exit && is_seq(&f.toks, i, &["process", "::", "exit"]) {
                report(t, "process::exit outside bin/ and exit.rs");
            }
            let call = f.toks.get(i + 2).is_some_and(|n| matches!(n.text.as_str(), "(" | "[" | "{"));
            if rules.json && name == "json" && bang && call {
                report(t, "json! (build JSON from a typed model)");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(list: &[(&str, &str)]) -> Vec<File> {
        let owned: Vec<(String, String)> = list.iter().map(|(p, t)| (p.to_string(), t.to_string())).collect();
        analyze(&owned)
    }

    fn edges(list: &[(&str, &str)]) -> Vec<String> {
        graph("c", &files(list)).edges.keys().map(|(a, b)| format!("{a}->{b}")).collect()
    }

    #[test]
    fn finds_a_cycle_and_spells_it_out() {
        let fs = files(&[
            ("lib.rs", "pub mod cli;\nmod plan;\npub(crate) mod output;\n#[cfg(test)]\nmod golden;\n"),
            ("cli/mod.rs", "mod parse;\nuse crate::output::Sink;\n"),
            ("cli/parse.rs", "//! Uses crate::output in a comment only.\n\nuse crate::plan::Plan;\n"),
            ("plan.rs", "pub fn build() {\n    let _ = crate::cli::parse::args();\n}\n"),
            ("output/mod.rs", "pub struct Sink;\n"),
            ("golden.rs", "use crate::cli; use crate::plan;\n"),
        ]);
        let g = graph("coordinator", &fs);
        assert_eq!(g.modules, ["cli", "output", "plan"].map(String::from).into());
        let found = cycles("coordinator", &g);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("coordinator: cli -> plan -> cli\n"), "{}", found[0]);
        assert!(found[0].contains("cli -> plan at coordinator/src/cli/parse.rs:3"), "{}", found[0]);
        assert!(found[0].contains("plan -> cli at coordinator/src/plan.rs:2"), "{}", found[0]);
    }

    #[test]
    fn acyclic_graph_passes() {
        let fs = files(&[
            ("lib.rs", "mod a; mod b; mod c;"),
            ("a.rs", "use crate::{b::X, c};"),
            ("b.rs", "use crate::c::Y;"),
            ("c.rs", "fn f() { \"crate::a::x\"; }\n#[cfg(test)]\nmod tests { use crate::a; }"),
        ]);
        assert!(cycles("e", &graph("e", &fs)).is_empty());
    }

    #[test]
    fn longer_cycles() {
        let fs = files(&[
            ("lib.rs", "mod a; mod b; mod c; mod d;"),
            ("a.rs", "use crate::b;"),
            ("b.rs", "use crate::{c::{self, Z}};"),
            ("c.rs", "use crate::a;\nuse crate::d;"),
        ]);
        let found = cycles("x", &graph("x", &fs));
        assert_eq!(
            found,
            ["x: a -> b -> c -> a\n    a -> b at x/src/a.rs:1\n    b -> c at x/src/b.rs:1\n    c -> a at x/src/c.rs:1"]
        );
        // A group larger than its shortest cycle: every edge inside it is listed.
        let fs = files(&[
            ("lib.rs", "mod a; mod b; mod c;"),
            ("a.rs", "use crate::b;"),
            ("b.rs", "use crate::{a, c};"),
            ("c.rs", "fn f() { crate::b::g() }"),
        ]);
        let found = cycles("x", &graph("x", &fs));
        assert_eq!(found.len(), 1);
        assert!(found[0].starts_with("x: a -> b -> a\n"), "{}", found[0]);
        assert!(found[0].contains("all edges among {a, b, c}:"), "{}", found[0]);
        assert!(found[0].contains("c -> b at x/src/c.rs:1"), "{}", found[0]);
    }

    #[test]
    fn grouped_inline_super_and_reexported_paths() {
        let lib = "mod a; mod b; mod c; mod d; mod e;\npub use e::{Thing, other::Other as Renamed};\n\
                   fn local() { use d::Local; }\n";
        let found = edges(&[
            ("lib.rs", lib),
            ("a.rs", "use crate::{\n    b::{X, y},\n    c,\n};\nfn f() { crate::Renamed::new(); }"),
            ("b/mod.rs", "use super::d::D;\nmod inner { use super::c::NotRoot; }\n"),
            ("b/deep.rs", "use super::super::e::E;\nuse super::sibling;\n"),
            ("c.rs", "fn f() -> crate::Thing { crate::e::make(crate::Local) }"),
            ("d.rs", "use crate::d::Self_;\n"),
        ]);
        assert_eq!(found, ["a->b", "a->c", "a->e", "b->d", "b->e", "c->e"]);
    }

    #[test]
    fn prints_exits_and_json_are_reported_where_forbidden() {
        let fs = files(&[
            ("lib.rs", "pub fn run() {\n    println!(\"hi\");\n}\n"),
            (
                "plan/mod.rs",
                "// println!(\"doc\")\nfn f() {\n    let s = \"eprintln!(x)\";\n    eprint!(\"{s}\");\n    std::process::exit(2);\n}\n",
            ),
            ("output/terminal.rs", "fn show() { println!(\"ok\"); }\nfn j() { serde_json::json!({}) }\n"),
            ("bin/surge.rs", "fn main() { eprintln!(\"x\"); std::process::exit(1); }"),
            ("exit.rs", "pub fn exit(code: i32) -> ! { std::process::exit(code) }"),
            (
                "fleet.rs",
                "fn f() {}\n#[cfg(test)]\nmod tests {\n    fn t() { println!(\"x\"); let _ = json!(1); }\n}\n",
            ),
            ("run.rs", "use std::process;\nfn f() { let v = json![1]; printer.print(); process::exit(3) }\n"),
        ]);
        let all = Rules { print: true, exit: true, json: true };
        let found = output_violations("coordinator", &fs, all);
        let at: Vec<&str> = found.iter().map(|m| m.split(": ").next().unwrap()).collect();
        assert_eq!(
            at,
            [
                "coordinator/src/lib.rs:2",
                "coordinator/src/plan/mod.rs:4",
                "coordinator/src/plan/mod.rs:5",
                "coordinator/src/output/terminal.rs:2",
                "coordinator/src/run.rs:2",
                "coordinator/src/run.rs:2",
            ],
            "{found:#?}"
        );
        assert!(found[0].contains("println!"), "{}", found[0]);
        let none = Rules { print: false, exit: false, json: false };
        assert!(output_violations("agent", &fs, none).is_empty());
    }
}
