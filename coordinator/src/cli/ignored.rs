//! Flags given on the command line that cannot change the run (D44): `--hf-name` with the
//! random dataset, `--burstiness` with `--request-rate inf`, sampling flags on a pooling
//! backend. Each is said before the load (`warning: --X has no effect with --Y`), listed
//! in the result's `ignored_flags`, and refused under `--strict` (exit 2).
//!
//! Every long flag of `run`, `sweep` and `matrix` is classified by [`reader`]: by its
//! name's dataset prefix, by its help heading, or by name. A flag no rule classifies fails
//! `every_flag_is_classified`, so a new flag cannot drift out of the check.

use super::{BackendArg, DatasetArg, RunArgs};
use clap::parser::ValueSource;

/// What must hold for a flag to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// Read by every run.
    Always,
    /// Read only by these datasets.
    Datasets(&'static [DatasetArg]),
    /// Sampling: read only by backends that generate text.
    Generation,
    /// Read only when requests are paced (a finite `--request-rate` or a ramp).
    Paced,
    /// Read only when this other flag is given too.
    With(&'static str),
    /// Read only with an https:// target.
    Https,
    /// Read only with `--agents` (or agents from `--config`).
    Agents,
    /// Read only with `--http-version 3`.
    Http3,
    /// Read only by a run that writes its result: `--save-result` or a flag that implies
    /// it, and every sweep and matrix.
    Saved,
    /// Read only with several endpoints (repeated `--base-url`, or `--endpoints`, D69).
    SeveralEndpoints,
    /// Read only by a run that looks for its steady state (a closed loop or a paced one,
    /// without a ramp or conversations, and without `--no-steady-state`).
    SteadyState,
}

use DatasetArg as D;

/// Datasets whose lengths come from `--random-*`.
const RANDOM: &[DatasetArg] = &[D::Random, D::RandomMm, D::RandomRerank];
/// Datasets shuffled with `--seed` unless `--disable-shuffle`.
const SHUFFLED: &[DatasetArg] = &[D::Sharegpt, D::SpecBench, D::Hf];
/// Datasets read from `--dataset-path`.
const FILES: &[DatasetArg] =
    &[D::Sharegpt, D::Custom, D::TimedTrace, D::Burstgpt, D::SpecBench, D::Sonnet, D::Hf, D::CustomAudio];

/// Dataset-specific flags by their name's prefix (vLLM's naming).
const PREFIXES: &[(&str, &[DatasetArg])] = &[
    ("random-mm-", &[D::RandomMm]),
    ("sharegpt-", &[D::Sharegpt]),
    ("custom-", &[D::Custom, D::TimedTrace, D::CustomAudio]),
    ("prefix-repetition-", &[D::PrefixRepetition]),
    ("spec-bench-", &[D::SpecBench]),
    ("sonnet-", &[D::Sonnet]),
    ("hf-", &[D::Hf]),
    ("trace-", &[D::TimedTrace]),
];

/// How `long` (a flag's name without dashes) is read; `None`: not classified (a test
/// fails on it). Long: one table, a line per flag or group of flags.
pub fn reader(long: &str, heading: Option<&str>) -> Option<Reader> {
    if let Some((_, sets)) = PREFIXES.iter().find(|(p, _)| long.starts_with(p)) {
        return Some(Reader::Datasets(sets));
    }
    if long.starts_with("multi-turn-") {
        return Some(Reader::With("multi-turn"));
    }
    if long.starts_with("otlp-") && long != "otlp-endpoint" {
        return Some(Reader::With("otlp-endpoint"));
    }
    if long.starts_with("knee-") {
        return Some(Reader::With("find-knee"));
    }
    if long.starts_with("steady-state-") {
        return Some(Reader::SteadyState);
    }
    if long.starts_with("profile-") {
        return Some(Reader::With("profile"));
    }
    if heading == Some("Sampling") && long != "extra-body" {
        return Some(Reader::Generation);
    }
    Some(match long {
        "random-input-len" | "random-range-ratio" | "random-prefix-len" | "input-len" => Reader::Datasets(RANDOM),
        "random-output-len" => Reader::Datasets(&[D::Random, D::RandomMm, D::Fixed]),
        "prompt-token-ids" => Reader::Datasets(&[D::Random]),
        "random-batch-size" => Reader::Datasets(&[D::Random, D::RandomRerank]),
        "prompt" => Reader::Datasets(&[D::Fixed]),
        "disable-shuffle" => Reader::Datasets(SHUFFLED),
        "no-oversample" | "dataset-path" => Reader::Datasets(FILES),
        "burstiness" => Reader::Paced,
        "per-turn-input-len"
        | "shared-system-prompt-len"
        | "session-id-header"
        | "no-session-id-header"
        | "tool-loop" => Reader::With("multi-turn"),
        "tool-latency-ms" | "tool-latency-dist" | "tool-result-len" | "max-tool-steps" => Reader::With("tool-loop"),
        "lora-assignment" => Reader::With("lora-modules"),
        "endpoint-policy" => Reader::SeveralEndpoints,
        "accuracy-ratio" => Reader::With("accuracy"),
        "result-dir" | "result-filename" | "append-result" => Reader::Saved,
        "live-linger" => Reader::With("prometheus-listen"),
        "scrape-interval" | "scrape-metric" | "scrape-from" => Reader::Always,
        "insecure" | "ca-cert" => Reader::Https,
        "h3-connections" => Reader::Http3,
        "tls-ca"
        | "tls-cert"
        | "tls-key"
        | "agents-plaintext"
        | "agent-connect-timeout"
        | "min-agents"
        | "tolerate-agent-loss" => Reader::Agents,
        // Read by every run: what, where, how much, how it is reported.
        "help"
        | "version"
        | "base-url"
        | "endpoints"
        | "replica-header"
        | "host"
        | "port"
        | "endpoint"
        | "backend"
        | "model"
        | "served-model-name"
        | "lora-modules"
        | "ready-timeout"
        | "header"
        | "no-initial-test"
        | "read-timeout"
        | "http-version"
        | "http2"
        | "dataset-name"
        | "output-len"
        | "tokenizer"
        | "skip-tokenizer-init"
        | "seed"
        | "multi-turn"
        | "probe-request-rate"
        | "num-prompts"
        | "duration"
        | "graceful-stop"
        | "max-concurrency"
        | "request-rate"
        | "ramp-up-strategy"
        | "ramp-up-start-rps"
        | "ramp-up-end-rps"
        | "num-warmups"
        | "max-run-time"
        | "extra-body"
        | "timeslice"
        | "plot-timeline"
        | "show-http-phases"
        | "timeline-itl-thresholds"
        | "percentile-metrics"
        | "metric-percentiles"
        | "goodput"
        | "save-result"
        | "save-detailed"
        | "save-rows"
        | "metadata"
        | "label"
        | "cost-per-hour"
        | "energy-price-kwh"
        | "max-failure-rate"
        | "fail-on-anomaly"
        | "check-determinism"
        | "accuracy"
        | "server-itl-ms"
        | "metrics-url"
        | "no-scrape-metrics"
        | "gpu-metrics-url"
        | "prometheus-listen"
        | "request-id-prefix"
        | "otlp-endpoint"
        | "client-cpu-limit"
        | "client-lag-limit"
        | "client-rate-shortfall"
        | "client-host-busy-limit"
        | "client-pressure-limit"
        | "client-coalesced-limit"
        | "agents"
        | "config"
        | "strict"
        | "dry-run"
        | "profile"
        | "no-steady-state"
        | "precision"
        | "confidence" => Reader::Always,
        // surge capacity's own.
        "slo" | "min-goodput-ratio" | "over" | "range" | "resolution" | "max-level-runs" | "max-requests-per-level" => {
            Reader::Always
        }
        // surge sweep's and matrix's own.
        "concurrency" | "runs" | "cooldown" | "find-knee" | "resume" | "tag" | "reset-prefix-cache" | "standard"
        | "hardware" | "engine" | "cluster-label" | "tag-suffix" => Reader::Always,
        _ => return None,
    })
}

/// What a run's flags decide that the readers depend on.
struct Context<'a> {
    a: &'a RunArgs,
    given: &'a [String],
    agents: bool,
}

impl Context<'_> {
    fn given(&self, long: &str) -> bool {
        self.given.iter().any(|g| g == long)
    }

    /// `None` when `r` reads the flag in this run, else the flag (and value) that makes it
    /// ineffective.
    fn blocks(&self, r: Reader) -> Option<String> {
        let a = self.a;
        match r {
            Reader::Always => None,
            Reader::Datasets(sets) => {
                let name = a.dataset.dataset_name;
                (!sets.contains(&name)).then(|| format!("--dataset-name {}", value_name(name)))
            }
            Reader::Generation => (!a.target.backend.generates())
                .then(|| format!("--backend {} (it generates no text)", value_name(a.target.backend))),
            Reader::Paced => {
                let paced = a.load.request_rate.0.iter().any(|r| r.is_finite()) || a.load.ramp_up_strategy.is_some();
                (!paced).then(|| "--request-rate inf".to_string())
            }
            Reader::With(other) => (!self.given(other)).then(|| format!("no --{other}")),
            Reader::Https => {
                let https =
                    !a.target.base_url.is_empty() && a.target.base_url.iter().all(|u| u.starts_with("https://"));
                (!https).then(|| "an http:// target".to_string())
            }
            Reader::Agents => (!self.agents).then(|| "no --agents".to_string()),
            Reader::SeveralEndpoints => {
                (a.target.base_url.len() < 2 && a.target.endpoints.is_none()).then(|| "one endpoint".to_string())
            }
            Reader::Saved => (!a.output.saves()).then(|| "no --save-result".to_string()),
            Reader::Http3 => (a.transport.http_version.as_deref() != Some("3")).then(|| "no --http-version 3".into()),
            Reader::SteadyState => {
                let paced = a.load.request_rate.0.iter().any(|r| r.is_finite());
                let closed = a.load.max_concurrency.is_some() || self.given("concurrency");
                if self.given("no-steady-state") {
                    Some("--no-steady-state".into())
                } else if a.load.ramp_up_strategy.is_some() || a.conversation.multi_turn {
                    Some("a ramp or conversations (no steady state is looked for)".into())
                } else {
                    (!closed && !paced).then(|| "neither --max-concurrency nor a finite --request-rate".into())
                }
            }
        }
    }
}

/// A clap value's name as given on the command line (`random-mm`, `openai-chat`).
fn value_name<V: clap::ValueEnum>(v: V) -> String {
    v.to_possible_value().map(|p| p.get_name().to_string()).unwrap_or_default()
}

/// One flag that cannot have an effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ignored {
    /// `--hf-name`.
    pub flag: String,
    /// `--dataset-name random`.
    pub because: String,
}

impl std::fmt::Display for Ignored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} has no effect with {}", self.flag, self.because)
    }
}

/// The flags of `a` given on the command line (`a.given`) that this run will not read.
/// `agents`: the run has remote agents (from `--agents` or `--config`).
pub fn ignored(a: &RunArgs, agents: bool) -> Vec<Ignored> {
    let cx = Context { a, given: &a.given, agents };
    let cmd = <RunArgs as clap::Args>::augment_args(clap::Command::new("run"));
    a.given
        .iter()
        .filter_map(|long| {
            let heading = cmd.get_arguments().find(|x| x.get_long() == Some(long)).and_then(|x| x.get_help_heading());
            let because = cx.blocks(reader(long, heading).unwrap_or(Reader::Always))?;
            Some(Ignored { flag: format!("--{long}"), because })
        })
        .collect()
}

/// The long names of the arguments given on the command line in `m` (a subcommand's
/// matches), in the order of their definition.
pub fn given(cmd: &clap::Command, m: &clap::ArgMatches) -> Vec<String> {
    cmd.get_arguments()
        .filter(|x| m.value_source(x.get_id().as_str()) == Some(ValueSource::CommandLine))
        .filter_map(|x| x.get_long().map(String::from))
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
    use super::*;
    use clap::{CommandFactory, FromArgMatches};

    /// Every flag of every load command has a rule: a new flag without one fails here.
    #[test]
    fn every_flag_is_classified() {
        let cli = super::super::Cli::command();
        for sub in ["run", "sweep", "matrix", "capacity"] {
            let cmd = cli.find_subcommand(sub).expect(sub);
            for arg in cmd.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                assert!(
                    reader(long, arg.get_help_heading()).is_some(),
                    "surge {sub} --{long}: say in cli/ignored.rs::reader when it is read"
                );
            }
        }
    }

    fn run(args: &[&str]) -> Vec<String> {
        let mut argv = vec!["surge", "run"];
        argv.extend_from_slice(args);
        let m = super::super::Cli::command().try_get_matches_from(argv).expect("flags parse");
        let (_, sub) = m.subcommand().expect("run");
        let mut a = RunArgs::from_arg_matches(sub).expect("run args");
        a.given = given(&<RunArgs as clap::Args>::augment_args(clap::Command::new("run")), sub);
        ignored(&a, false).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn says_what_the_run_will_not_read() {
        assert_eq!(run(&["--hf-name", "sharegpt"]), ["--hf-name has no effect with --dataset-name random"]);
        assert_eq!(run(&["--burstiness", "2"]), ["--burstiness has no effect with --request-rate inf"]);
        assert!(run(&["--burstiness", "2", "--request-rate", "5"]).is_empty());
        assert_eq!(
            run(&["--dataset-name", "fixed", "--prompt", "x", "--random-input-len", "9", "--sharegpt-output-len", "3"]),
            [
                "--random-input-len has no effect with --dataset-name fixed",
                "--sharegpt-output-len has no effect with --dataset-name fixed"
            ]
        );
        assert_eq!(
            run(&["--backend", "openai-embeddings", "--temperature", "0", "--extra-body", "{}"]),
            ["--temperature has no effect with --backend openai-embeddings (it generates no text)"]
        );
        assert_eq!(run(&["--tls-ca", "ca.pem"]), ["--tls-ca has no effect with no --agents"]);
        assert_eq!(run(&["--result-dir", "d"]), ["--result-dir has no effect with no --save-result"]);
        assert!(run(&["--result-dir", "d", "--save-result", "--seed", "3", "--output-len", "4"]).is_empty());
        assert!(run(&["--random-output-len", "3"]).is_empty(), "defaults and read flags are not listed");
        assert!(run(&["--result-dir", "d", "--save-detailed"]).is_empty(), "--save-detailed saves the result");
        assert!(run(&["--result-filename", "r.json", "--plot-timeline"]).is_empty(), "so does --plot-timeline");
    }

    /// The flags each command's tests pass raise no "no effect" warning: a sweep and a
    /// matrix write their results, so their --result-dir is read.
    #[test]
    fn the_commands_own_flags_have_effect() {
        let check = |argv: &[&str]| {
            let cmd = super::super::Cli::command();
            let m = cmd.clone().try_get_matches_from(argv).expect("flags parse");
            let mut cli = super::super::Cli::from_arg_matches(&m).expect("args");
            cli.record_given(&cmd, &m);
            let plan = match cli.command {
                super::super::Command::Sweep(a) => crate::cli::build::sweep_plan(*a).map(|p| p.base),
                super::super::Command::Matrix(a) => crate::cli::build::matrix_plan(*a).map(|p| p.base),
                super::super::Command::Run(a) => crate::cli::build::run_plan(*a),
                super::super::Command::Capacity(a) => crate::cli::build::capacity_plan(*a).map(|p| p.sweep.base),
                _ => panic!("{argv:?}"),
            };
            let plan = plan.unwrap_or_else(|e| panic!("{argv:?}: {e}"));
            assert!(plan.ignored_flags.is_empty(), "{argv:?}: {:?}", plan.ignored_flags);
        };
        let base = ["--base-url", "http://127.0.0.1:9", "--num-prompts", "10", "--result-dir", "d", "--strict"];
        let with = |head: &[&'static str]| [head, &base[..]].concat();
        check(&with(&["surge", "sweep", "--concurrency", "2"]));
        check(&with(&["surge", "sweep", "--request-rate", "1,2", "--result-filename", "x"]));
        check(&with(&["surge", "matrix", "--standard"]));
        check(&with(&["surge", "run", "--save-result", "--append-result"]));
        check(&with(&["surge", "run", "--save-detailed", "--result-filename", "r.json"]));
        check(&with(&["surge", "capacity", "--range", "1:64", "--slo", "ttft:p99<=100", "--tag", "c"]));
        check(&with(&[
            "surge",
            "capacity",
            "--over",
            "rate",
            "--range",
            "1:64",
            "--slo",
            "e2el:p90<=500",
            "--runs",
            "2",
        ]));
        let tools = [
            "surge",
            "run",
            "--save-result",
            "--backend",
            "openai-chat",
            "--multi-turn",
            "--tool-loop",
            "--tool-latency-ms",
            "5",
        ];
        check(&with(
            &[&tools[..], &["--tool-latency-dist", "exponential", "--max-tool-steps", "2", "--tool-result-len", "4"]]
                .concat(),
        ));
        // Several endpoints read their policy and the replica header.
        check(&with(&[
            "surge",
            "run",
            "--save-result",
            "--base-url",
            "http://127.0.0.2:9",
            "--endpoint-policy",
            "session",
            "--replica-header",
            "x-served-by",
        ]));
    }

    #[test]
    fn a_policy_for_one_endpoint_is_warned() {
        let cmd = super::super::Cli::command();
        let argv = ["surge", "run", "--base-url", "http://127.0.0.1:9", "--endpoint-policy", "random"];
        let m = cmd.clone().try_get_matches_from(argv).expect("flags parse");
        let mut cli = super::super::Cli::from_arg_matches(&m).expect("args");
        cli.record_given(&cmd, &m);
        let super::super::Command::Run(a) = cli.command else { panic!() };
        let plan = crate::cli::build::run_plan(*a).expect("a plan");
        assert_eq!(plan.ignored_flags, ["--endpoint-policy has no effect with one endpoint"]);
    }
}
