//! Flags given on the command line that cannot change the run (D44, D78): `--hf-name` with
//! the random dataset, `--burstiness` with `--request-rate inf`, sampling flags on a pooling
//! backend. A given flag has no effect when the command's plan built from the command line
//! without it equals the plan built with it: no list of flag names says when each is read,
//! the plan does (in its normal form, `plan::normal`). Each is said before the load
//! (`warning: --X has no effect ...`), listed in the result's `ignored_flags`, and refused
//! under `--strict` (exit 2).

use super::{BackendArg, Cli, Command, DatasetArg, RunArgs, UsageError};
use clap::ArgMatches;
use clap::parser::ValueSource;
use std::cell::RefCell;
use std::ffi::OsString;

/// One flag that cannot have an effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ignored {
    /// `--hf-name`.
    pub flag: String,
    /// What makes it ineffective when its name says (`--dataset-name random`).
    pub because: Option<String>,
}

impl std::fmt::Display for Ignored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.because {
            Some(b) => write!(f, "{} has no effect with {b}", self.flag),
            None => write!(f, "{} has no effect on this run (its plan is the same without it)", self.flag),
        }
    }
}

/// The flags given in `a` (on its command line, `a.argv`) that change nothing: taken out of
/// the line, the flag's own value changes (it was not given at its default, nor at the
/// value another flag implies) yet `plan` stays as it is. `rebuild` builds the same
/// command's plan from a parsed command line (`None`: another command); a line without
/// the flag that does not parse or build needed it. `--strict` is not judged: it asks for
/// this check. Each is said with the flag that makes it so, when one given does (the
/// flag matters once that one is taken out too).
pub fn ignored<P: PartialEq>(
    a: &RunArgs,
    plan: &P,
    rebuild: impl Fn(Command) -> Option<Result<P, UsageError>>,
) -> Vec<Ignored> {
    if a.argv.is_empty() {
        return Vec::new();
    }
    let lines = Lines::new();
    let build = |argv: &[OsString], m: Option<&ArgMatches>| {
        m.and_then(|m| lines.cli(m, argv)).and_then(|c| rebuild(c.command)?.ok())
    };
    let parsed = lines.parse(&a.argv);
    let judged: Vec<&String> = a.given.iter().filter(|long| *long != "strict").collect();
    let found: Vec<&String> = judged
        .iter()
        .copied()
        .filter(|long| {
            let argv = without(&lines.cmd(), &a.argv, long);
            let m = lines.parse(&argv);
            if lines.values(parsed.as_ref(), long) == lines.values(m.as_ref(), long)
                || !build(&argv, m.as_ref()).is_some_and(|p| p == *plan)
            {
                return false;
            }
            // Given at a default the code sets (`--multi-turn-num-turns 3`, `--request-rate
            // INF`): another value changes the plan, or is refused (then it is read).
            let other = perturbed(&lines.cmd(), &a.argv, long);
            other.is_none_or(|v| build(&v, lines.parse(&v).as_ref()).is_some_and(|p| p == *plan))
        })
        .collect();
    if found.is_empty() {
        return Vec::new();
    }
    let others: Vec<(&String, Vec<OsString>, Option<P>)> = judged
        .iter()
        .map(|g| {
            let argv = without(&lines.cmd(), &a.argv, g);
            let p = build(&argv, lines.parse(&argv).as_ref());
            (*g, argv, p)
        })
        .collect();
    found
        .into_iter()
        .map(|long| {
            let by = others.iter().filter(|(g, _, _)| *g != long).find_map(|(g, argv, p)| {
                let p = p.as_ref()?;
                let argv = without(&lines.cmd(), argv, long);
                build(&argv, lines.parse(&argv).as_ref())
                    .is_some_and(|q| q != *p)
                    .then(|| shown(&lines, parsed.as_ref(), g))
            });
            Ignored { flag: format!("--{long}"), because: by.or_else(|| because(&lines.cmd(), long, a)) }
        })
        .collect()
}

/// Command lines parsed by one command, built once: each is parsed in place
/// (`try_get_matches_from_mut`), since building clap's command of every flag, or cloning
/// it, costs several times a parse, and a load's line is parsed a few times for each flag
/// given on it (most of a run's fixed CPU when each parse had a command of its own).
struct Lines(RefCell<clap::Command>);

impl Lines {
    fn new() -> Self {
        let mut cmd = <Cli as clap::CommandFactory>::command();
        cmd.build();
        Self(RefCell::new(cmd))
    }

    /// The command, to look its arguments up.
    fn cmd(&self) -> std::cell::Ref<'_, clap::Command> {
        self.0.borrow()
    }

    /// The matches of `argv`; `None` when it does not parse.
    fn parse(&self, argv: &[OsString]) -> Option<ArgMatches> {
        self.0.borrow_mut().try_get_matches_from_mut(argv).ok()
    }

    /// The command line `argv`, parsed into `m`, as [`Cli::try_parse_recording`] gives it.
    fn cli(&self, m: &ArgMatches, argv: &[OsString]) -> Option<Cli> {
        Cli::from_matches(&self.cmd(), m, argv).ok()
    }

    /// The values `--long` has in `m` (its default, or the value another flag implies,
    /// when not given); `None` for a line that did not parse.
    fn values(&self, m: Option<&ArgMatches>, long: &str) -> Option<Vec<OsString>> {
        let cmd = self.cmd();
        let (mut c, mut m) = (&*cmd, m?);
        while let Some((name, sub)) = m.subcommand() {
            (c, m) = (c.find_subcommand(name)?, sub);
        }
        let id = c.get_arguments().find(|x| x.get_long() == Some(long))?.get_id().as_str();
        Some(m.get_raw(id).map(|v| v.map(ToOwned::to_owned).collect()).unwrap_or_default())
    }
}

/// `argv` with the first value of `--long` changed: another of its possible values, else
/// its last number one up (`3` to `4`, `0.5` to `0.6`, `10s` to `11s`, `ttft:100` to
/// `ttft:101`), else the text with a letter more; `inf` becomes `1`. `None`: it takes no
/// value.
fn perturbed(cmd: &clap::Command, argv: &[OsString], long: &str) -> Option<Vec<OsString>> {
    let arg = find(cmd, long).filter(|x| x.get_action().takes_values())?;
    let mut names: Vec<&str> = arg.get_all_aliases().unwrap_or_default();
    names.push(long);
    let at = argv.iter().position(|t| {
        let s = t.to_string_lossy();
        s.strip_prefix("--").is_some_and(|n| names.contains(&n.split_once('=').map_or(n, |(k, _)| k)))
    })?;
    let token = argv[at].to_string_lossy().into_owned();
    let (slot, value) = match token.split_once('=') {
        Some((_, v)) => (at, v.to_string()),
        None => (at + 1, argv.get(at + 1)?.to_string_lossy().into_owned()),
    };
    let other = arg.get_possible_values().into_iter().map(|p| p.get_name().to_string()).find(|p| *p != value);
    let changed = match other {
        Some(p) => p,
        None if value == "inf" => "1".to_string(),
        None => bump(&value),
    };
    let mut out = argv.to_vec();
    out[slot] = if slot == at { format!("--{long}={changed}").into() } else { changed.into() };
    Some(out)
}

/// `v` with its last run of digits one up, else with a letter more.
fn bump(v: &str) -> String {
    let Some(end) = v.rfind(|c: char| c.is_ascii_digit()).map(|i| i + 1) else { return format!("{v}x") };
    // Digits are one byte each; the character before the run may be several.
    let start = v[..end].char_indices().rev().find(|(_, c)| !c.is_ascii_digit()).map_or(0, |(i, c)| i + c.len_utf8());
    let n: u128 = v[start..end].parse().unwrap_or(0);
    format!("{}{}{}", &v[..start], n.saturating_add(1), &v[end..])
}

/// `--long` as given on the line parsed into `m`: `--backend openai-embeddings`,
/// `--multi-turn`.
fn shown(lines: &Lines, m: Option<&ArgMatches>, long: &str) -> String {
    let takes = find(&lines.cmd(), long).is_some_and(|x| x.get_action().takes_values());
    let values = lines.values(m, long).filter(|_| takes).unwrap_or_default();
    std::iter::once(format!("--{long}"))
        .chain(values.iter().map(|v| v.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The argument whose long name or alias is `long`, in `cmd` or any of its subcommands.
fn find<'c>(cmd: &'c clap::Command, long: &str) -> Option<&'c clap::Arg> {
    let own = cmd
        .get_arguments()
        .find(|x| x.get_long() == Some(long) || x.get_all_aliases().is_some_and(|a| a.contains(&long)));
    own.or_else(|| cmd.get_subcommands().find_map(|s| find(s, long)))
}

/// `argv` without every `--long` (or an alias of it) and its values: one, or for a flag
/// of several values (`--header A B`) every token up to the next flag.
fn without(cmd: &clap::Command, argv: &[OsString], long: &str) -> Vec<OsString> {
    let arg = find(cmd, long);
    let mut names: Vec<&str> = arg.and_then(clap::Arg::get_all_aliases).unwrap_or_default();
    names.push(long);
    let takes = arg.is_some_and(|x| x.get_action().takes_values());
    let many = arg.and_then(clap::Arg::get_num_args).is_some_and(|n| n.max_values() > 1);
    let is_flag = |t: &OsString| t.to_string_lossy().starts_with('-');
    let mut out = Vec::with_capacity(argv.len());
    let mut it = argv.iter().peekable();
    while let Some(t) = it.next() {
        let s = t.to_string_lossy();
        if s == "--" {
            out.push(t.clone());
            out.extend(it.cloned());
            break;
        }
        let name = s.strip_prefix("--").map(|n| n.split_once('=').map_or(n, |(k, _)| k));
        if !name.is_some_and(|n| names.contains(&n)) {
            out.push(t.clone());
            continue;
        }
        if takes && !s.contains('=') && it.next().is_some() && many {
            while it.next_if(|v| !is_flag(v)).is_some() {}
        }
    }
    out
}

/// What makes `--long` ineffective, when its name or heading says: a dataset's own flag
/// (`--hf-name`) with another dataset, a sampling flag with a backend that generates no
/// text. `None`: the plan alone says it.
fn because(cmd: &clap::Command, long: &str, a: &RunArgs) -> Option<String> {
    let dataset = a.dataset.dataset_name;
    let owner = <DatasetArg as clap::ValueEnum>::value_variants()
        .iter()
        .map(|d| (*d, value_name(*d).replace('_', "-")))
        .filter(|(_, name)| long.starts_with(&format!("{name}-")))
        .max_by_key(|(_, name)| name.len());
    if owner.is_some_and(|(d, _)| d != dataset) {
        return Some(format!("--dataset-name {}", value_name(dataset)));
    }
    // --extra-body is under "Sampling" but every backend sends it.
    let heading = find(cmd, long).and_then(clap::Arg::get_help_heading).filter(|_| long != "extra-body");
    (heading == Some("Sampling") && !a.target.backend.generates())
        .then(|| format!("--backend {} (it generates no text)", value_name(a.target.backend)))
}

/// A clap value's name as given on the command line (`random-mm`, `openai-chat`).
fn value_name<V: clap::ValueEnum>(v: V) -> String {
    v.to_possible_value().map(|p| p.get_name().to_string()).unwrap_or_default()
}

/// The long names of the arguments given on the command line in `m` (a subcommand's
/// matches), in the order of their definition.
pub fn given(cmd: &clap::Command, m: &clap::ArgMatches) -> Vec<String> {
    cmd.get_arguments()
        .filter(|x| m.value_source(x.get_id().as_str()) == Some(ValueSource::CommandLine))
        .filter_map(|x| x.get_long().map(String::from))
        .collect()
}

/// Flags that change how a resumed sweep or search goes on, not what its results measured:
/// `--resume` does not compare them (D93).
const NOT_SETTINGS: [&str; 7] =
    ["resume", "runs", "max-level-runs", "cooldown", "result-dir", "agent-connect-timeout", "min-agents"];

/// The arguments given on the command line in `m` with their values as given, in the
/// order of their definition, but for [`NOT_SETTINGS`]: what `--resume` compares (D93).
pub fn settings(cmd: &clap::Command, m: &clap::ArgMatches) -> Vec<(String, Vec<String>)> {
    cmd.get_arguments()
        .filter(|x| m.value_source(x.get_id().as_str()) == Some(ValueSource::CommandLine))
        .filter_map(|x| {
            let long = x.get_long().filter(|l| !NOT_SETTINGS.contains(l))?;
            let values = m
                .get_raw(x.get_id().as_str())
                .map(|v| v.map(|s| s.to_string_lossy().into_owned()).collect())
                .unwrap_or_default();
            Some((format!("--{long}"), values))
        })
        .collect()
}

impl BackendArg {
    /// Whether it generates text (reads the sampling flags and an output length).
    pub fn generates(self) -> bool {
        matches!(
            self,
            BackendArg::Openai
                | BackendArg::Vllm
                | BackendArg::OpenaiChat
                | BackendArg::OpenaiResponses
                | BackendArg::OpenaiAudio
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Cli, Command};
    use std::collections::BTreeSet;
    use std::ffi::OsString;
    use std::path::{Path, PathBuf};

    fn argv(args: &[&str]) -> Vec<OsString> {
        std::iter::once("surge").chain(args.iter().copied()).map(OsString::from).collect()
    }

    /// What `surge ARGS` warns has no effect (as warned), or its usage error.
    fn warned(args: &[&str]) -> Result<Vec<String>, String> {
        let cli = Cli::try_parse_recording(&argv(args)).map_err(|e| e.to_string())?;
        let b = |r: Result<Vec<String>, super::UsageError>| r.map_err(|e| e.0);
        use crate::cli::build::{capacity_plan, matrix_plan, run_plan, sweep_plan};
        match cli.command {
            Command::Run(a) => b(run_plan(*a).map(|p| p.ignored_flags)),
            Command::Sweep(a) => b(sweep_plan(*a).map(|p| p.base.ignored_flags)),
            Command::Matrix(a) => b(matrix_plan(*a).map(|p| p.base.ignored_flags)),
            Command::Capacity(a) => b(capacity_plan(*a).map(|p| p.sweep.base.ignored_flags)),
            _ => panic!("{args:?}: not a load command"),
        }
    }

    fn run(args: &[&str]) -> Vec<String> {
        let mut all = vec!["run"];
        all.extend_from_slice(args);
        warned(&all).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    #[test]
    fn says_what_the_run_will_not_read() {
        assert_eq!(run(&["--hf-name", "sharegpt"]), ["--hf-name has no effect with --dataset-name random"]);
        assert_eq!(
            run(&["--burstiness", "2"]),
            ["--burstiness has no effect on this run (its plan is the same without it)"]
        );
        assert!(run(&["--burstiness", "2", "--request-rate", "5"]).is_empty());
        assert!(
            run(&[
                "--burstiness",
                "2",
                "--ramp-up-strategy",
                "linear",
                "--ramp-up-start-rps",
                "1",
                "--ramp-up-end-rps",
                "4"
            ])
            .is_empty()
        );
        assert_eq!(
            run(&["--dataset-name", "fixed", "--prompt", "x", "--random-input-len", "9", "--sharegpt-output-len", "3"]),
            [
                "--random-input-len has no effect with --dataset-name fixed",
                "--sharegpt-output-len has no effect with --dataset-name fixed"
            ]
        );
        assert_eq!(
            run(&["--backend", "openai-embeddings", "--temperature", "0", "--extra-body", "{\"a\":1}"]),
            ["--temperature has no effect with --backend openai-embeddings (it generates no text)"]
        );
        let same = |flag: &str| format!("--{flag} has no effect on this run (its plan is the same without it)");
        assert_eq!(run(&["--result-dir", "d"]), [same("result-dir")]);
        assert!(run(&["--result-dir", "d", "--save-result", "--seed", "3", "--output-len", "4"]).is_empty());
        assert!(run(&["--random-output-len", "3"]).is_empty(), "defaults and read flags are not listed");
        assert!(run(&["--result-dir", "d", "--save-detailed"]).is_empty(), "--save-detailed saves the result");
        assert!(run(&["--result-filename", "r.json", "--plot-timeline"]).is_empty(), "so does --plot-timeline");
        // The plan decides, not the flag's name: --host is read only without --base-url,
        // --insecure by any https URL the run fetches (here the server's metrics).
        let url = ["--base-url", "http://127.0.0.1:9"];
        assert_eq!(
            run(&[&url[..], &["--host", "10.0.0.1"]].concat()),
            ["--host has no effect with --base-url http://127.0.0.1:9"]
        );
        // Given at its default (clap's or the code's), or beside a flag that implies it:
        // nothing to say.
        assert!(run(&["--request-rate", "inf", "--dataset-name", "random", "--seed", "0"]).is_empty());
        assert!(run(&["--num-prompts", "1000", "--endpoint", "/v1/completions"]).is_empty());
        let chat =
            ["--backend", "openai-chat", "--multi-turn", "--multi-turn-num-turns", "3", "--multi-turn-delay-ms", "0"];
        assert!(run(&chat).is_empty());
        assert!(run(&["--save-result", "--save-detailed"]).is_empty());
        assert!(
            run(&["--ignore-eos", "--random-input-len", "8"]).is_empty(),
            "the random dataset implies it, as vLLM's"
        );
        // A default written otherwise, or a value another changed would make invalid.
        assert!(run(&["--max-failure-rate", "1.0", "--request-rate", "INF"]).is_empty());
        assert!(run(&["--backend", "openai-embeddings", "--percentile-metrics", "e2el"]).is_empty());
        let turns =
            ["--backend", "openai-chat", "--multi-turn", "--multi-turn-min-turns", "3", "--multi-turn-delay-ms", "5"];
        assert!(run(&turns).is_empty());
        // Any text: non-ASCII values are perturbed whole characters at a time.
        assert_eq!(run(&["--result-dir", "résumé2"]), [same("result-dir")]);
        assert_eq!(super::bump("測試1.json"), "測試2.json");
        assert_eq!(super::bump("é"), "éx");
        assert_eq!(run(&[&url[..], &["--insecure"]].concat()), [same("insecure")]);
        let https_metrics = ["--metrics-url", "https://127.0.0.1:9/metrics", "--insecure"];
        assert!(run(&[&url[..], &https_metrics[..]].concat()).is_empty());
        assert_eq!(run(&["--steady-state-threshold", "0.9"]), [same("steady-state-threshold")]);
        assert!(run(&["--steady-state-threshold", "0.9", "--max-concurrency", "4"]).is_empty());
        assert_eq!(run(&[&url[..], &["--endpoint-policy", "random"]].concat()), [same("endpoint-policy")]);
        // vLLM's flags surge accepts and never reads are said to be so.
        assert_eq!(run(&["--timeline-itl-thresholds", "10,90"]), [same("timeline-itl-thresholds")]);
        for flag in ["hf-split", "hf-subset"] {
            assert_eq!(
                run(&[&format!("--{flag}"), "x"]),
                [format!("--{flag} has no effect with --dataset-name random")]
            );
        }
    }

    /// What a sweep's levels, a capacity search's or a matrix's profiles set is not read
    /// from the command line: said so. `--dry-run` is refused there (they would run).
    #[test]
    fn what_levels_and_profiles_set_is_said() {
        let same = |flag: &str| format!("--{flag} has no effect on this run (its plan is the same without it)");
        let url = ["--base-url", "http://127.0.0.1:9"];
        let said = |args: &[&str]| warned(&[args, &url[..]].concat()).expect("builds");
        assert_eq!(said(&["sweep", "--concurrency", "1,2", "--result-filename", "x.json"]), [same("result-filename")]);
        assert_eq!(
            said(&["capacity", "--range", "1:8", "--slo", "ttft:p99<=9", "--result-filename", "x.json"]),
            [same("result-filename")]
        );
        assert_eq!(
            said(&["matrix", "--standard", "--temperature", "0.7", "--max-concurrency", "8"]),
            [same("max-concurrency"), same("temperature")]
        );
        let cmds: [&[&str]; 3] = [
            &["sweep", "--concurrency", "1,2"],
            &["capacity", "--range", "1:8", "--slo", "ttft:p99<=9"],
            &["matrix", "--standard"],
        ];
        for cmd in cmds {
            let e = warned(&[cmd, &url[..], &["--dry-run"]].concat()).expect_err("refused");
            assert!(e.contains("--dry-run"), "{cmd:?}: {e}");
        }
    }

    #[test]
    fn strict_refuses_what_has_no_effect_and_names_it() {
        let e = warned(&["run", "--strict", "--burstiness", "2"]).unwrap_err();
        assert!(e.contains("--strict: --burstiness has no effect"), "{e}");
        assert!(warned(&["run", "--strict", "--burstiness", "2", "--request-rate", "3"]).is_ok());
    }

    #[test]
    fn a_flag_and_its_values_are_taken_out_whatever_their_spelling() {
        let mut cmd = <Cli as clap::CommandFactory>::command();
        cmd.build();
        let cut = |args: &[&str], long: &str| {
            super::without(&cmd, &argv(args), long).iter().map(|s| s.to_string_lossy().into_owned()).collect::<Vec<_>>()
        };
        let rest = ["surge", "run", "--seed", "3"];
        assert_eq!(cut(&["run", "--header", "a:1", "b:2", "--seed", "3"], "header"), rest);
        assert_eq!(cut(&["run", "--header=a:1", "--seed", "3", "--header", "b:2"], "header"), rest);
        assert_eq!(cut(&["run", "--save-result", "--seed", "3"], "save-result"), rest);
        assert_eq!(cut(&["run", "--ready-check-timeout-sec", "5s", "--seed", "3"], "ready-timeout"), rest, "an alias");
        assert_eq!(cut(&["run", "--seed", "3", "--model", "m"], "model"), rest);
        let other = |args: &[&str], long: &str| {
            let v = super::perturbed(&cmd, &argv(args), long).expect("takes a value");
            v.iter().map(|s| s.to_string_lossy().into_owned()).collect::<Vec<_>>()[2..].join(" ")
        };
        assert_eq!(other(&["run", "--seed", "3"], "seed"), "--seed 4");
        assert_eq!(other(&["run", "--duration=10s"], "duration"), "--duration=11s");
        assert_eq!(other(&["run", "--request-rate", "inf"], "request-rate"), "--request-rate 1");
        assert_eq!(other(&["run", "--goodput", "ttft:100", "tpot:5"], "goodput"), "--goodput ttft:101 tpot:5");
        assert_eq!(other(&["run", "--model", "m"], "model"), "--model mx");
        assert_eq!(other(&["run", "--backend", "openai"], "backend"), "--backend vllm");
        assert!(super::perturbed(&cmd, &argv(&["run", "--save-result"]), "save-result").is_none());
    }

    /// The files the examples below read, in a directory of this process.
    fn files() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("surge-flag-effects-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
        for (from, to) in [
            ("datasets/sharegpt.json", "sharegpt.json"),
            ("datasets/custom.jsonl", "custom.jsonl"),
            ("tokenizer/tokenizer.json", "tokenizer.json"),
            ("accuracy-sample.jsonl", "accuracy.jsonl"),
        ] {
            std::fs::copy(fixtures.join(from), dir.join(to)).expect(from);
        }
        let poem: String = (0..60).map(|i| format!("line {i} of the poem here\n")).collect();
        let trace: String = (0..4)
            .map(|i| {
                format!("{{\"timestamp\":{},\"input_length\":600,\"output_length\":8,\"hash_ids\":[{i},9]}}\n", i * 10)
            })
            .collect();
        let spec_bench = "{\"question_id\":1,\"category\":\"qa\",\"turns\":[\"why is the sky blue\"]}\n\
                          {\"question_id\":2,\"category\":\"math\",\"turns\":[\"two plus two\"]}\n";
        let gsm8k: String =
            (0..4).map(|i| format!("{{\"question\":\"what is {i} and one\",\"answer\":\"{}\"}}\n", i + 1)).collect();
        for (name, text) in [
            ("poem.txt", poem.as_str()),
            ("trace.jsonl", trace.as_str()),
            ("spec_bench.jsonl", spec_bench),
            ("gsm8k.jsonl", gsm8k.as_str()),
            ("endpoints.txt", "http://127.0.0.1:9 2 a\nhttp://127.0.0.2:9 1 b\n"),
            ("agents.toml", "agents = [\"127.0.0.1:7\"]\n"),
            ("tools.json", "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}}]"),
        ] {
            std::fs::write(dir.join(name), text).expect(name);
        }
        crate::certs::init(&dir.join("tls")).expect("certs");
        dir
    }

    /// Every flag of every load command changes the plan of some command line (each line
    /// below builds; what it warns of does not count), so that a flag no plan reads cannot be added
    /// unnoticed; the three vLLM flags surge accepts and never reads are warned instead.
    #[test]
    fn every_flag_changes_some_plan() {
        let dir = files();
        let f = |name: &str| dir.join(name).to_string_lossy().into_owned();
        let (sharegpt, custom, tok, poem, trace) =
            (f("sharegpt.json"), f("custom.jsonl"), f("tokenizer.json"), f("poem.txt"), f("trace.jsonl"));
        let (ca, key) = (f("tls/ca.pem"), f("tls/ca.key"));
        let url = "http://127.0.0.1:9";
        let https = "https://127.0.0.1:9";
        // One command line per string, split at spaces (no value below has one).
        let tls = format!("--tls-ca {ca} --tls-cert {ca} --tls-key {key}");
        let lines: Vec<String> = [
            format!("run --base-url {url} --endpoint /v1/x --backend openai-chat --model m --served-model-name s --lora-modules a b --lora-assignment round-robin --ready-timeout 5s --header a:1 --no-initial-test --read-timeout 9s --http2 --replica-header x-r"),
            "run --host 10.0.0.1 --port 81 --http-version 1.1 --num-prompts 7 --seed 4 --max-concurrency 3 --steady-state-threshold 0.8 --steady-state-min-window 3 --probe-request-rate 2 --num-warmups 2 --max-run-time 9m --dry-run".into(),
            format!("run --endpoints {} --endpoint-policy random", f("endpoints.txt")),
            format!("run --base-url {https} --http-version 3 --h3-connections 4 --insecure"),
            format!("run --base-url {https} --ca-cert {ca}"),
            format!("run --hf-name openai/gsm8k --dataset-name hf --dataset-path {} --hf-output-len 9", f("gsm8k.jsonl")),
            format!("run --dataset-name spec_bench --dataset-path {} --spec-bench-output-len 9 --spec-bench-category qa", f("spec_bench.jsonl")),
            format!("run --dataset-name sonnet --dataset-path {poem} --tokenizer {tok} --sonnet-input-len 120 --sonnet-prefix-len 40 --sonnet-output-len 9"),
            "run --backend openai-chat --dataset-name random-mm --random-mm-base-items-per-request 2 --random-mm-num-mm-items-range-ratio 0.5 --random-mm-limit-mm-per-prompt {\"image\":3,\"video\":0} --random-mm-bucket-config {(64,64,1):1.0}".into(),
            format!("run --dataset-name sharegpt --dataset-path {sharegpt} --disable-shuffle --sharegpt-output-len 9 --no-oversample --num-prompts 500"),
            // --tokenizer is warned here: --skip-tokenizer-init drops it.
            format!("run --skip-tokenizer-init --tokenizer {tok}"),
            format!("run --backend openai-chat --dataset-name custom --dataset-path {custom} --custom-output-len 9"),
            "run --dataset-name fixed --prompt hello --output-len 9 --ignore-eos".into(),
            "run --dataset-name prefix-repetition --prefix-repetition-num-prefixes 3 --prefix-repetition-prefix-len 9 --prefix-repetition-suffix-len 9 --prefix-repetition-output-len 9".into(),
            format!("run --dataset-name timed_trace --dataset-path {trace} --trace-block-size 64 --trace-speedup 2"),
            format!("run --input-len 9 --random-output-len 5 --random-range-ratio 0.5 --random-prefix-len 4 --prompt-token-ids --tokenizer {tok} --backend openai"),
            "run --random-input-len 9 --backend openai-embeddings --random-batch-size 4".into(),
            "run --backend openai-chat --multi-turn --multi-turn-num-turns 5 --multi-turn-concurrency 2 --multi-turn-delay-ms 5 --multi-turn-delay-dist exponential --per-turn-input-len 7 --shared-system-prompt-len 6 --session-id-header x-s".into(),
            "run --backend openai-chat --multi-turn --multi-turn-min-turns 2 --multi-turn-max-turns 4 --no-session-id-header --tool-loop --tool-latency-ms 5 --tool-latency-dist exponential --tool-result-len 4 --max-tool-steps 2".into(),
            "run --backend openai-chat --multi-turn --multi-turn-prefix-global-ratio 0.2 --multi-turn-prefix-conversation-ratio 0.2".into(),
            "run --duration 10s --graceful-stop 2s --request-rate 5 --burstiness 2".into(),
            "run --ramp-up-strategy linear --ramp-up-start-rps 1 --ramp-up-end-rps 4".into(),
            "run --temperature 0.5 --top-p 0.9 --top-k 5 --min-p 0.1 --frequency-penalty 0.1 --presence-penalty 0.1 --repetition-penalty 1.1 --logprobs 2 --extra-body {\"a\":1}".into(),
            format!("run --backend openai-chat --tools {} --tool-choice auto", f("tools.json")),
            format!("run --timeslice 2s --plot-timeline --show-http-phases --percentile-metrics ttft --metric-percentiles 50 --goodput ttft:100 --save-detailed --save-rows r.csv --result-dir d --result-filename r.json --metadata a=1 b=2 --append-result --label l --cost-per-hour 2 --energy-price-kwh 0.1 --max-failure-rate 0.5 --fail-on-anomaly --check-determinism --accuracy {} --accuracy-ratio 0.5 --save-result", f("accuracy.jsonl")),
            "run --no-steady-state --max-concurrency 2 --profile --profile-batch-threshold 4 --profile-duration 2 --precision ttft:p99:5% --confidence 0.9".into(),
            "run --server-itl-ms 5 --metrics-url http://127.0.0.1:9/m --scrape-interval 2s --scrape-metric x --gpu-metrics-url http://127.0.0.1:9/g --prometheus-listen 127.0.0.1:0 --live-linger 3s --request-id-prefix p- --otlp-endpoint http://127.0.0.1:4317 --otlp-protocol http/protobuf --otlp-header a=b --otlp-sample-ratio 0.5".into(),
            "run --no-scrape-metrics --client-cpu-limit 0.5 --client-lag-limit 9ms --client-rate-shortfall 0.2 --client-host-busy-limit 50 --client-pressure-limit 20 --client-coalesced-limit 0.2".into(),
            format!("run --base-url {url} --agents 127.0.0.1:7 {tls} --agent-connect-timeout 3s --min-agents 1 --tolerate-agent-loss --scrape-from agent"),
            format!("run --base-url {url} --agents 127.0.0.1:7 --agents-plaintext"),
            format!("run --base-url {url} --config {} --agents-plaintext", f("agents.toml")),
            "sweep --concurrency 1,2 --runs 2 --cooldown 1s --find-knee --knee-efficiency 0.4 --knee-latency-growth 2 --knee-steps 3 --resume --tag t --reset-prefix-cache".into(),
            "matrix --standard --hardware h --engine e --cluster-label c --tag-suffix _x --resume".into(),
            "capacity --range 1:64 --slo ttft:p99<=100 --resolution 2 --max-level-runs 5 --max-requests-per-level 5000 --runs 2 --cooldown 1s --resume --tag c --reset-prefix-cache".into(),
            "capacity --over rate --range 1:64 --slo e2el:p90<=500".into(),
            "capacity --range 1:64 --goodput ttft:100 --min-goodput-ratio 0.9".into(),
        ]
        .into();
        let mut changed: BTreeSet<String> = BTreeSet::new();
        let mut failed = Vec::new();
        for line in &lines {
            let args: Vec<&str> = line.split(' ').collect();
            let said = match warned(&args) {
                Ok(said) => said,
                Err(e) => {
                    failed.push(format!("{args:?}: {e}"));
                    continue;
                }
            };
            let cli = Cli::try_parse_recording(&argv(&args)).expect("parses");
            let given = match &cli.command {
                Command::Run(a) => &a.given,
                Command::Sweep(a) => &a.run.given,
                Command::Matrix(a) => &a.run.given,
                Command::Capacity(a) => &a.run.given,
                _ => unreachable!(),
            };
            let warned: Vec<&str> = said.iter().filter_map(|w| w.strip_prefix("--")?.split(' ').next()).collect();
            if warned.len() > 1 {
                failed.push(format!("{args:?}: {said:?}"));
            }
            changed.extend(given.iter().filter(|g| !warned.contains(&g.as_str())).cloned());
        }
        std::fs::remove_dir_all(&dir).ok();
        assert!(failed.is_empty(), "{failed:#?}");
        // Never in a plan: clap answers them, or it is the check itself; vLLM's flags
        // accepted and never read (their warning is tested above).
        let not_planned = ["help", "version", "strict", "hf-split", "hf-subset", "timeline-itl-thresholds"];
        let cmd = <Cli as clap::CommandFactory>::command();
        let mut missing = Vec::new();
        for sub in ["run", "sweep", "matrix", "capacity"] {
            for arg in cmd.find_subcommand(sub).expect(sub).get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if !changed.contains(long) && !not_planned.contains(&long) {
                    missing.push(format!("surge {sub} --{long}"));
                }
            }
        }
        assert!(missing.is_empty(), "no example line shows these flags change a plan: {missing:?}");
    }

    /// The flags each command's tests pass raise no "no effect" warning: a sweep and a
    /// matrix write their results, so their --result-dir is read.
    #[test]
    fn the_commands_own_flags_have_effect() {
        let base = ["--base-url", "http://127.0.0.1:9", "--num-prompts", "10", "--result-dir", "d", "--strict"];
        let check = |head: &[&str]| {
            let args = [head, &base[..]].concat();
            let said = warned(&args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            assert!(said.is_empty(), "{args:?}: {said:?}");
        };
        check(&["sweep", "--concurrency", "2"]);
        check(&["sweep", "--request-rate", "1,2"]);
        check(&["matrix", "--standard"]);
        check(&["run", "--save-result", "--append-result"]);
        check(&["run", "--save-result", "--save-detailed", "--plot-timeline"]);
        check(&["run", "--save-detailed", "--result-filename", "r.json"]);
        check(&["capacity", "--range", "1:64", "--slo", "ttft:p99<=100", "--tag", "c"]);
        check(&["capacity", "--over", "rate", "--range", "1:64", "--slo", "e2el:p90<=500", "--runs", "2"]);
        check(&[
            "run",
            "--save-result",
            "--backend",
            "openai-chat",
            "--multi-turn",
            "--tool-loop",
            "--tool-latency-ms",
            "5",
            "--tool-latency-dist",
            "exponential",
            "--max-tool-steps",
            "2",
            "--tool-result-len",
            "4",
        ]);
        // Several endpoints read their policy and the replica header.
        check(&[
            "run",
            "--save-result",
            "--base-url",
            "http://127.0.0.2:9",
            "--endpoint-policy",
            "session",
            "--replica-header",
            "x-served-by",
        ]);
    }
}
