//! The wire edge (D46): a plan becomes each agent's [`Workload`] here, and nowhere else —
//! the mirror of the agent's `engine/workload/spec.rs`, which reads it. Every Workload feature
//! added after protocol 9 has a line in [`FEATURES`] with the protocol version that first
//! carries it: a feature an agent's version lacks is refused before any load, naming the
//! agent, the feature, the version it needs and the upgrade. A feature an older agent can
//! do without changing what is sent or measured says how ([`Older::Fallback`], read by
//! the session) or why it only adds information ([`Older::Informs`]).

use crate::plan::RunPlan;
use crate::plan::split::{self, Share};
use surge_proto::{Backend, DatasetKind, LoraPick, MultiTurn, PROTOCOL_VERSION, RampStrategy, ThinkTime, Workload, v9};

/// What an agent older than a feature's version does with it.
#[derive(Debug, Clone, Copy)]
pub enum Older {
    /// It would drop it and send or measure something else: refused.
    Refused(fn(&Workload) -> bool),
    /// The coordinator gives it another way (the reason says which).
    Fallback(&'static str),
    /// It only adds information an older agent cannot give (D46).
    Informs(&'static str),
    /// Added within its version: refused unless the agent lists it in
    /// `HelloReply.features` (D66).
    Listed(fn(&Workload) -> bool),
}

/// One Workload feature and the first protocol version that carries it.
#[derive(Debug, Clone, Copy)]
pub struct Feature {
    /// The wire's name: `Workload.multi_turn`, `Backend.BACKEND_VLLM_RERANK`.
    pub field: &'static str,
    /// What the user gave for it.
    pub flag: &'static str,
    pub since: u32,
    pub older: Older,
}

const fn refused(field: &'static str, flag: &'static str, uses: fn(&Workload) -> bool) -> Feature {
    Feature { field, flag, since: 10, older: Older::Refused(uses) }
}

fn backend(w: &Workload, b: Backend) -> bool {
    w.backend() == b
}

fn dataset(w: &Workload, k: DatasetKind) -> bool {
    w.dataset.as_ref().is_some_and(|d| d.kind() == k)
}

/// Every Workload feature protocol 9 did not have. A field or enum value added to the
/// `.proto` after it must have a line here (`every_post_9_field_is_in_the_table`).
pub const FEATURES: &[Feature] = &[
    refused("Workload.multi_turn", "--multi-turn (conversations)", |w| w.multi_turn.is_some()),
    Feature {
        field: "PromptItem.spawn",
        flag: "a session trace's \"spawn\" (sub-agents)",
        since: 10,
        older: Older::Listed(|w| w.prompts.iter().any(|p| !p.spawn.is_empty())),
    },
    Feature {
        field: "PromptItem.join",
        flag: "a session trace's \"join\" (sub-agents)",
        since: 10,
        older: Older::Listed(|w| w.prompts.iter().any(|p| p.join)),
    },
    Feature {
        field: "Workload.endpoints",
        flag: "several --base-url (or --endpoints)",
        since: 10,
        older: Older::Listed(|w| !w.endpoints.is_empty()),
    },
    Feature {
        field: "Workload.endpoint_policy",
        flag: "--endpoint-policy",
        since: 10,
        older: Older::Fallback("read only with Workload.endpoints, which an agent that does not list it is refused"),
    },
    Feature {
        field: "Workload.accuracy",
        flag: "--accuracy",
        since: 10,
        older: Older::Listed(|w| !w.accuracy.is_empty()),
    },
    Feature {
        field: "Workload.accuracy_ratio",
        flag: "--accuracy-ratio",
        since: 10,
        older: Older::Fallback("read only with Workload.accuracy, which an agent that does not list it is refused"),
    },
    Feature {
        field: "Workload.check_determinism",
        flag: "--check-determinism",
        since: 10,
        older: Older::Listed(|w| w.check_determinism),
    },
    Feature {
        field: "Workload.replica_header",
        flag: "--replica-header",
        since: 10,
        older: Older::Listed(|w| !w.replica_header.is_empty()),
    },
    Feature {
        field: "MultiTurn.tool_loop",
        flag: "--tool-loop",
        since: 10,
        older: Older::Listed(|w| w.multi_turn.as_ref().is_some_and(|m| m.tool_loop.is_some())),
    },
    Feature {
        field: "Workload.graceful_stop_ms",
        flag: "--graceful-stop",
        since: 10,
        older: Older::Fallback("the session gives a version 9 agent the duration and grace as its Start's deadline"),
    },
    Feature {
        field: "Workload.http",
        flag: "--http-version",
        since: 10,
        older: Older::Fallback("written into v9_http_version by v9::encode_workload"),
    },
    Feature {
        field: "Workload.ramp",
        flag: "--ramp-up-strategy",
        since: 10,
        older: Older::Fallback("written into v9_ramp_strategy by v9::encode_workload"),
    },
    Feature {
        field: "Workload.lora_pick",
        flag: "--lora-assignment",
        since: 10,
        older: Older::Fallback("written into v9_lora_assignment by v9::encode_workload"),
    },
    Feature {
        field: "Workload.gpu_sample_interval_ms",
        flag: "GPU sampling (an agent's --gpu nvml)",
        since: 10,
        older: Older::Informs("a version 9 agent has no GPU telemetry: the result has no agent GPU samples from it"),
    },
    refused("Backend.BACKEND_OPENAI_RESPONSES", "--backend openai-responses", |w| backend(w, Backend::OpenaiResponses)),
    refused("Backend.BACKEND_OPENAI_AUDIO", "--backend openai-audio", |w| backend(w, Backend::OpenaiAudio)),
    refused("Backend.BACKEND_OPENAI_EMBEDDINGS", "--backend openai-embeddings", |w| {
        backend(w, Backend::OpenaiEmbeddings)
    }),
    refused("Backend.BACKEND_OPENAI_EMBEDDINGS_CHAT", "--backend openai-embeddings-chat (or -clip, -vlm2vec)", |w| {
        backend(w, Backend::OpenaiEmbeddingsChat)
    }),
    refused("Backend.BACKEND_INFINITY_EMBEDDINGS", "--backend infinity-embeddings (or -clip)", |w| {
        backend(w, Backend::InfinityEmbeddings)
    }),
    refused("Backend.BACKEND_VLLM_POOLING", "--backend vllm-pooling", |w| backend(w, Backend::VllmPooling)),
    refused("Backend.BACKEND_VLLM_RERANK", "--backend vllm-rerank", |w| backend(w, Backend::VllmRerank)),
    refused("DatasetKind.DATASET_KIND_RANDOM_RERANK", "--dataset-name random-rerank", |w| {
        dataset(w, DatasetKind::RandomRerank)
    }),
    refused("DatasetKind.DATASET_KIND_CUSTOM_AUDIO", "--dataset-name custom_audio", |w| {
        dataset(w, DatasetKind::CustomAudio)
    }),
    refused("DatasetSpec.batch_size", "--random-batch-size", |w| w.dataset.as_ref().is_some_and(|d| d.batch_size > 1)),
    Feature {
        field: "DatasetSpec.batch_prompts",
        flag: "--random-batch-size",
        since: 10,
        older: Older::Fallback("read only with a batch_size above 1, which a version 9 agent is refused"),
    },
    refused("DatasetSpec.token_ids", "--prompt-token-ids", |w| w.dataset.as_ref().is_some_and(|d| d.token_ids)),
    refused("PromptItem.session", "a session trace (--multi-turn with a file)", |w| {
        w.prompts.iter().any(|p| p.session.is_some())
    }),
    refused("PromptItem.delay_ms", "a session trace's delays (--multi-turn with a file)", |w| {
        w.prompts.iter().any(|p| p.delay_ms != 0.0)
    }),
    refused("PromptItem.audio", "--dataset-name custom_audio", |w| w.prompts.iter().any(|p| !p.audio.is_empty())),
    refused("PromptItem.audio_name", "--dataset-name custom_audio", |w| {
        w.prompts.iter().any(|p| !p.audio_name.is_empty())
    }),
    refused("PromptItem.audio_seconds", "--dataset-name custom_audio", |w| {
        w.prompts.iter().any(|p| p.audio_seconds != 0.0)
    }),
];

/// A feature the agent's protocol version lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lacks {
    pub flag: &'static str,
    pub since: u32,
    pub version: u32,
    /// A feature added within the version, that the agent does not list (D66).
    pub unlisted: bool,
}

impl std::fmt::Display for Lacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.unlisted && self.version >= self.since {
            return write!(
                f,
                "it does not run {} (it speaks protocol version {} but was built before the feature): upgrade it to surge {}",
                self.flag,
                self.version,
                env!("CARGO_PKG_VERSION")
            );
        }
        write!(
            f,
            "it speaks protocol version {}, which lacks {} (protocol {}): upgrade it to surge {} (protocol {PROTOCOL_VERSION})",
            self.version,
            self.flag,
            self.since,
            env!("CARGO_PKG_VERSION")
        )
    }
}

/// The first feature of `w` that an agent of `version`, listing `listed`, lacks.
pub fn lacks(w: &Workload, version: u32, listed: &[String]) -> Option<Lacks> {
    FEATURES.iter().find_map(|f| match f.older {
        Older::Refused(uses) if version < f.since && uses(w) => {
            Some(Lacks { flag: f.flag, since: f.since, version, unlisted: false })
        }
        Older::Listed(uses) if uses(w) && (version < f.since || !listed.iter().any(|l| l == f.field)) => {
            Some(Lacks { flag: f.flag, since: f.since, version, unlisted: true })
        }
        _ => None,
    })
}

/// `w` as an agent of `version` (listing `listed` features) reads it: refused when it
/// lacks a feature `w` uses, else written in that version's fields.
pub fn for_version(mut w: Workload, version: u32, listed: &[String]) -> Result<Workload, Lacks> {
    if let Some(l) = lacks(&w, version, listed) {
        return Err(l);
    }
    if version == v9::VERSION {
        v9::encode_workload(&mut w);
    }
    Ok(w)
}

/// Agent `i`'s Workload: its share `s` of `plan`.
pub fn workload(plan: &RunPlan, model: &str, s: &Share, i: usize, run_id: u64) -> Workload {
    // A session trace goes whole to every agent: each takes its sessions' turns from it.
    let (prompts, prompts_whole_file) = if plan.multi_turn.is_some() && !plan.prompts.is_empty() {
        (plan.prompts.to_vec(), true)
    } else {
        split::slice_prompts(&plan.prompts, &s.indices, s.num_prompts)
    };
    Workload {
        base_url: plan.base_url.clone(),
        endpoint: plan.endpoint.clone(),
        backend: plan.backend as i32,
        model: model.to_string(),
        dataset: Some(plan.dataset.clone()),
        slice_start: s.indices.first(),
        slice_len: s.num_prompts,
        slice_cycle: s.indices.cycle(),
        slice_positions: s.indices.positions().to_vec(),
        max_concurrency: s.max_concurrency,
        request_rate: if s.request_rate.is_finite() { s.request_rate } else { 0.0 },
        burstiness: plan.burstiness,
        ramp: plan.ramp.map_or(RampStrategy::None, |r| {
            if r.exponential { RampStrategy::Exponential } else { RampStrategy::Linear }
        }) as i32,
        ramp_start_rps: plan.ramp.map_or(0.0, |r| f64::from(r.start) * s.fraction),
        ramp_end_rps: plan.ramp.map_or(0.0, |r| f64::from(r.end) * s.fraction),
        trace_speedup: plan.trace_speedup.unwrap_or(0.0),
        duration_ms: plan.duration.map_or(0, |d| d.as_millis() as u64),
        graceful_stop_ms: plan.graceful_stop.map(|g| g.as_millis() as u64),
        num_warmups: s.num_warmups,
        ignore_eos: plan.ignore_eos,
        temperature: plan.temperature,
        extra_body_json: plan.extra_body.clone().unwrap_or_default(),
        request_id_prefix: plan.request_id_prefix.clone().unwrap_or_else(|| format!("bench-{:08x}-", run_id as u32)),
        pacing_seed: plan.seed ^ ((i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        http: plan.http_version as i32,
        h3_connections: plan.h3_connections,
        target_insecure: plan.target_tls.insecure,
        target_ca_pem: plan.target_tls.ca_pem.clone(),
        headers: plan.headers.iter().cloned().collect(),
        // Several endpoints (D69): the list goes only where there is more than one, so a
        // one-endpoint run stays readable by an agent built before the list.
        endpoints: if plan.endpoints.several() {
            plan.endpoints
                .list
                .iter()
                .map(|e| surge_proto::TargetEndpoint { base_url: e.url.clone(), weight: e.weight })
                .collect()
        } else {
            Vec::new()
        },
        endpoint_policy: plan.endpoints.policy as i32,
        replica_header: plan.endpoints.replica_header.clone().unwrap_or_default(),
        accuracy: plan.accuracy.as_ref().map(|(items, _)| items.to_vec()).unwrap_or_default(),
        accuracy_ratio: plan.accuracy.as_ref().map_or(0.0, |(_, r)| *r),
        check_determinism: plan.check_determinism,
        prompts,
        prompts_whole_file,
        tokenizer_json: plan.tokenizer.as_ref().map(|t| t.bytes.to_vec()).unwrap_or_default(),
        tokenizer_sha256: plan.tokenizer.as_ref().map(|t| t.sha256.clone()).unwrap_or_default(),
        skip_initial_test: plan.no_initial_test,
        ready_timeout_ms: plan.ready_timeout.map_or(0, |d| d.as_millis() as u64),
        max_run_time_ms: plan.max_run_time.as_millis() as u64,
        read_timeout_ms: plan.read_timeout.map_or(0, |d| d.as_millis() as u64),
        // The first agent scrapes when the plan says agents scrape.
        scrape_urls: plan
            .scrape
            .as_ref()
            .filter(|s| s.from_agent && i == 0)
            .map(|s| s.urls.clone())
            .unwrap_or_default(),
        scrape_interval_ms: plan.scrape.as_ref().map_or(0, |s| s.interval.as_millis() as u64),
        scrape_metrics: plan.scrape.as_ref().map(|s| s.extra.clone()).unwrap_or_default(),
        trace_run_id: if plan.otlp.is_some() { run_id } else { 0 },
        trace_sample_ratio: plan.otlp.as_ref().map_or(0.0, |o| o.sample_ratio),
        keep_text: plan.save_detailed,
        // The first agent probes, at the whole rate (one probe at a time, as vLLM).
        probe_rate: if i == 0 { plan.probe_rate } else { 0.0 },
        lora_modules: plan.lora_modules.clone(),
        lora_pick: if plan.lora_random { LoraPick::Random } else { LoraPick::RoundRobin } as i32,
        multi_turn: plan.multi_turn.as_ref().map(|m| MultiTurn {
            turns_min: m.turns_min,
            turns_max: m.turns_max,
            per_turn_input_len: m.per_turn_input_len,
            delay_ms: m.delay_ms,
            think: if m.exponential { ThinkTime::Exponential } else { ThinkTime::Fixed } as i32,
            concurrency: s.sessions,
            prefix_global_ratio: m.prefix_global_ratio,
            prefix_conversation_ratio: m.prefix_conversation_ratio,
            shared_system_prompt_len: m.shared_system_prompt_len,
            session_header: m.session_header.clone().unwrap_or_default(),
            tool_loop: m.tool_loop.map(|t| surge_proto::ToolLoop {
                latency_ms: t.latency_ms,
                latency: if t.exponential { ThinkTime::Exponential } else { ThinkTime::Fixed } as i32,
                result_len: t.result_len,
                max_steps: t.max_steps,
            }),
        }),
        gpu_sample_interval_ms: plan.gpu_sample_interval.as_millis() as u64,
        // Written for agents of version 9 only (D43).
        v9_http_version: 0,
        v9_ramp_strategy: String::new(),
        v9_lora_assignment: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::{DatasetSpec, PromptItem};

    /// What protocol 9 knew: the highest field number of each message, the highest value
    /// of each enum. Anything above it is newer and must be in [`FEATURES`].
    const V9_KNEW: &[(&str, u32)] =
        &[("Workload", 46), ("DatasetSpec", 17), ("PromptItem", 7), ("Backend", 3), ("DatasetKind", 8)];

    /// `name = N;` lines of `message NAME { ... }` or `enum NAME { ... }` in the .proto.
    fn numbered(proto: &str, block: &str) -> Vec<(String, u32)> {
        let start = proto
            .find(&format!("message {block} {{"))
            .or_else(|| proto.find(&format!("enum {block} {{")))
            .unwrap_or_else(|| panic!("{block} in surge.proto"));
        let body = &proto[start..];
        let body = &body[..body.find("\n}").expect("the block's end")];
        body.lines()
            .skip(1)
            .filter_map(|l| {
                let l = l.split("//").next()?.trim();
                let (lhs, rhs) = l.split_once('=')?;
                let n: u32 = rhs.trim().trim_end_matches(';').trim().parse().ok()?;
                Some((lhs.split_whitespace().last()?.to_string(), n))
            })
            .collect()
    }

    /// A field or value added to the wire after protocol 9 without a line in the table
    /// would be dropped by a version 9 agent without a word: this test names it.
    #[test]
    fn every_post_9_field_is_in_the_table() {
        let proto = include_str!("../../../proto/proto/surge.proto");
        let mut newer = Vec::new();
        for &(block, watermark) in V9_KNEW {
            let fields = numbered(proto, block);
            assert!(fields.len() > 2, "{block}: read {fields:?}");
            for (name, n) in fields.into_iter().filter(|&(_, n)| n > watermark) {
                newer.push(format!("{block}.{name}"));
                let _ = n;
            }
        }
        for field in &newer {
            assert!(
                FEATURES.iter().any(|f| f.field == field),
                "{field} was added after protocol 9: give it a line in fleet/wire.rs FEATURES"
            );
        }
        for f in FEATURES {
            if let Older::Listed(_) = f.older {
                // Added within the version, in a message that may itself be post-9.
                let (block, name) = f.field.split_once('.').expect("Message.field");
                assert!(numbered(proto, block).iter().any(|(n, _)| n == name), "{}: not in surge.proto", f.field);
                continue;
            }
            assert!(newer.iter().any(|n| n == f.field), "{}: not a post-9 field of surge.proto", f.field);
            assert!(f.since > v9::VERSION && f.since <= PROTOCOL_VERSION, "{}", f.field);
        }
    }

    fn base() -> Workload {
        let plan = crate::cli::build::run_plan(crate::cli::build::default_run_args().expect("args")).expect("plan");
        let share = split::split(&[1], plan.num_prompts, plan.max_concurrency, plan.request_rate, 0).remove(0);
        workload(&plan, "m", &share, 0, 1)
    }

    fn with_dataset(f: impl FnOnce(&mut DatasetSpec)) -> Workload {
        let mut w = base();
        f(w.dataset.get_or_insert_with(Default::default));
        w
    }

    fn with_prompt(f: impl FnOnce(&mut PromptItem)) -> Workload {
        let mut w = base();
        let mut p = PromptItem { text: "x".into(), ..Default::default() };
        f(&mut p);
        w.prompts.push(p);
        w
    }

    /// What a current agent lists.
    fn listed() -> Vec<String> {
        surge_proto::LISTED_FEATURES.iter().map(|f| f.to_string()).collect()
    }

    /// A feature added within the version goes only to an agent that lists it, and every
    /// listed feature is in the table.
    #[test]
    fn a_feature_added_within_the_version_goes_only_to_an_agent_that_lists_it() {
        let (_, w) = examples().into_iter().find(|(f, _)| *f == "MultiTurn.tool_loop").expect("an example");
        let l = lacks(&w, PROTOCOL_VERSION, &[]).expect("an agent built before it is refused");
        let said = l.to_string();
        assert!(said.contains("--tool-loop") && said.contains("built before") && said.contains("upgrade"), "{said}");
        assert_eq!(lacks(&w, PROTOCOL_VERSION, &listed()), None);
        for name in surge_proto::LISTED_FEATURES {
            let f = FEATURES.iter().find(|f| f.field == *name).unwrap_or_else(|| panic!("{name}: not in FEATURES"));
            assert!(matches!(f.older, Older::Listed(_)), "{name}");
        }
    }

    /// One workload per refused feature, using it and nothing else new.
    fn examples() -> Vec<(&'static str, Workload)> {
        let mut out = vec![("Workload.multi_turn", {
            let mut w = base();
            w.multi_turn = Some(MultiTurn { turns_min: 2, turns_max: 2, ..Default::default() });
            w
        })];
        out.push(("PromptItem.spawn", with_prompt(|p| p.spawn = vec![1])));
        out.push(("Workload.endpoints", {
            let mut w = base();
            let e = |u: &str| surge_proto::TargetEndpoint { base_url: u.into(), weight: 1 };
            w.endpoints = vec![e("http://127.0.0.1:1"), e("http://127.0.0.1:2")];
            w
        }));
        out.push(("Workload.accuracy", {
            let mut w = base();
            w.accuracy = vec![surge_proto::AccuracyItem { prompt: "q".into(), ..Default::default() }];
            w.accuracy_ratio = 1.0;
            w
        }));
        out.push(("Workload.check_determinism", {
            let mut w = base();
            w.check_determinism = true;
            w
        }));
        out.push(("Workload.replica_header", {
            let mut w = base();
            w.replica_header = "x-served-by".into();
            w
        }));
        out.push(("PromptItem.join", with_prompt(|p| p.join = true)));
        out.push(("MultiTurn.tool_loop", {
            let mut w = base();
            let tool_loop = Some(surge_proto::ToolLoop { max_steps: 2, ..Default::default() });
            w.multi_turn = Some(MultiTurn { turns_min: 2, turns_max: 2, tool_loop, ..Default::default() });
            w
        }));
        for (field, b) in [
            ("Backend.BACKEND_OPENAI_RESPONSES", Backend::OpenaiResponses),
            ("Backend.BACKEND_OPENAI_AUDIO", Backend::OpenaiAudio),
            ("Backend.BACKEND_OPENAI_EMBEDDINGS", Backend::OpenaiEmbeddings),
            ("Backend.BACKEND_OPENAI_EMBEDDINGS_CHAT", Backend::OpenaiEmbeddingsChat),
            ("Backend.BACKEND_INFINITY_EMBEDDINGS", Backend::InfinityEmbeddings),
            ("Backend.BACKEND_VLLM_POOLING", Backend::VllmPooling),
            ("Backend.BACKEND_VLLM_RERANK", Backend::VllmRerank),
        ] {
            let mut w = base();
            w.set_backend(b);
            out.push((field, w));
        }
        out.push(("DatasetKind.DATASET_KIND_RANDOM_RERANK", with_dataset(|d| d.set_kind(DatasetKind::RandomRerank))));
        out.push(("DatasetKind.DATASET_KIND_CUSTOM_AUDIO", with_dataset(|d| d.set_kind(DatasetKind::CustomAudio))));
        out.push(("DatasetSpec.batch_size", with_dataset(|d| d.batch_size = 4)));
        out.push(("DatasetSpec.token_ids", with_dataset(|d| d.token_ids = true)));
        out.push(("PromptItem.session", with_prompt(|p| p.session = Some(3))));
        out.push(("PromptItem.delay_ms", with_prompt(|p| p.delay_ms = 5.0)));
        out.push(("PromptItem.audio", with_prompt(|p| p.audio = vec![1, 2])));
        out.push(("PromptItem.audio_name", with_prompt(|p| p.audio_name = "a.wav".into())));
        out.push(("PromptItem.audio_seconds", with_prompt(|p| p.audio_seconds = 1.5)));
        out
    }

    /// Every refused feature: a workload using it goes to a current agent and is refused
    /// for a version 9 one, naming the flag; the plain default workload goes to both.
    #[test]
    fn a_version_9_agent_is_refused_each_newer_feature_and_given_the_rest() {
        let plain = base();
        assert_eq!(lacks(&plain, v9::VERSION, &[]), None);
        let old = for_version(plain.clone(), v9::VERSION, &[]).expect("a plain run goes to version 9");
        assert_eq!(old.v9_http_version, 0);
        assert!(for_version(plain, PROTOCOL_VERSION, &[]).is_ok());
        let examples = examples();
        for f in FEATURES {
            let (Older::Refused(_) | Older::Listed(_)) = f.older else { continue };
            let (_, w) = examples
                .iter()
                .find(|(field, _)| *field == f.field)
                .unwrap_or_else(|| panic!("{}: add an example workload", f.field));
            if let Older::Listed(_) = f.older {
                // Refused for version 9 (maybe by the feature it rides on), sent to an
                // agent that lists it.
                assert!(lacks(w, v9::VERSION, &[]).is_some(), "{}", f.field);
                assert_eq!(lacks(w, PROTOCOL_VERSION, &listed()), None, "{}", f.field);
                continue;
            }
            let l = lacks(w, v9::VERSION, &[]).unwrap_or_else(|| panic!("{}: not refused for version 9", f.field));
            assert_eq!(l.flag, f.flag, "{}", f.field);
            let said = l.to_string();
            assert!(said.contains("protocol version 9") && said.contains(f.flag) && said.contains("upgrade"), "{said}");
            assert_eq!(lacks(w, PROTOCOL_VERSION, &listed()), None, "{}", f.field);
        }
    }
}
