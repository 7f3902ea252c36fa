//! `docs/cli.md`, made from the clap definitions: every command of `surge` and
//! `surge-agent`, every flag under its help heading, with its value, default and help. A
//! test regenerates it and fails when the file differs, so a flag cannot change without
//! its documentation (`SURGE_WRITE_DOCS=1 cargo test -p surge-coordinator cli_reference`
//! rewrites it).

use clap::{Arg, Command, CommandFactory};
use std::fmt::Write as _;

/// The whole reference, as Markdown.
pub fn markdown() -> String {
    let mut out = String::from(
        "# Command-line reference\n\n\
         Generated from the clap definitions (`coordinator/src/cli/reference.rs`); do not edit by\n\
         hand: `SURGE_WRITE_DOCS=1 cargo test -p surge-coordinator cli_reference` rewrites it, and\n\
         the test fails while it differs from the code. Every flag of `run` also applies to\n\
         `sweep` and `matrix`. Durations take units (`500ms`, `30s`, `2m`, `1h`).\n",
    );
    let mut surge = super::Cli::command();
    surge.build();
    command(&mut out, &surge, "surge");
    let mut agent = crate::fleet::local::agent_command();
    agent.build();
    command(&mut out, &agent, "surge-agent");
    out
}

/// One command and, after it, its subcommands.
fn command(out: &mut String, cmd: &Command, path: &str) {
    let level = path.matches(' ').count() + 2;
    let _ = write!(out, "\n{} `{path}`\n\n", "#".repeat(level.min(4)));
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = writeln!(out, "{}\n", one_line(&about.to_string()));
    }
    let args: Vec<&Arg> = cmd.get_arguments().filter(|a| !a.is_hide_set() && a.get_id() != "help").collect();
    if !args.is_empty() {
        // Headings in the order their first flag appears; flags without one first.
        let mut headings: Vec<Option<&str>> = Vec::new();
        for a in &args {
            if !headings.contains(&a.get_help_heading()) {
                headings.push(a.get_help_heading());
            }
        }
        for heading in headings {
            if let Some(h) = heading {
                let _ = write!(out, "**{h}**\n\n");
            }
            out.push_str("| flag | value | default | what it does |\n|---|---|---|---|\n");
            for a in args.iter().filter(|a| a.get_help_heading() == heading) {
                row(out, a);
            }
            out.push('\n');
        }
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        command(out, sub, &format!("{path} {}", sub.get_name()));
    }
}

/// One flag as a table row.
fn row(out: &mut String, a: &Arg) {
    let flag = match (a.get_long(), a.get_short()) {
        (Some(l), Some(s)) => format!("`-{s}`, `--{l}`"),
        (Some(l), None) => format!("`--{l}`"),
        (None, Some(s)) => format!("`-{s}`"),
        (None, None) => format!("`{}`", a.get_id().as_str().to_uppercase()),
    };
    let takes_value = a.get_num_args().is_some_and(|n| n.takes_values());
    let value = if !takes_value {
        String::new()
    } else {
        let possible: Vec<String> =
            a.get_possible_values().iter().filter(|v| !v.is_hide_set()).map(|v| v.get_name().to_string()).collect();
        if possible.is_empty() {
            a.get_value_names()
                .map(|v| v.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(" "))
                .unwrap_or_default()
        } else {
            possible.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ")
        }
    };
    let default =
        a.get_default_values().iter().map(|v| format!("`{}`", v.to_string_lossy())).collect::<Vec<_>>().join(" ");
    let help = a.get_long_help().or(a.get_help()).map(|h| one_line(&h.to_string())).unwrap_or_default();
    let _ = writeln!(out, "| {flag} | {value} | {default} | {} |", help.replace('|', "\\|"));
}

/// Help text on one line (a table cell): paragraphs joined, spaces kept single.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn cli_reference_in_docs_matches_the_code() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md");
        let want = super::markdown();
        if std::env::var_os("SURGE_WRITE_DOCS").is_some() {
            std::fs::write(&path, &want).expect("write docs/cli.md");
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "docs/cli.md differs from the flags in the code: run `SURGE_WRITE_DOCS=1 cargo test -p surge-coordinator \
             cli_reference` and commit the file (first differing line: {:?})",
            have.lines()
                .zip(want.lines())
                .find(|(a, b)| a != b)
                .map_or_else(|| "the length".to_string(), |(a, _)| a.to_string())
        );
    }

    #[test]
    fn every_run_flag_is_under_a_heading() {
        let text = super::markdown();
        let run = text.split("### `surge run`").nth(1).and_then(|t| t.split("\n### ").next()).expect("surge run");
        for h in ["**Target**", "**Dataset**", "**Load shape**", "**Sampling**", "**Results**", "**Server view**"] {
            assert!(run.contains(h), "{h} missing");
        }
        // Only --help is outside a group.
        let first = run.split("**Target**").next().unwrap();
        assert!(!first.contains("| `--"), "ungrouped flags: {first}");
    }
}
