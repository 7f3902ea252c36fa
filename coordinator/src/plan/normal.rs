//! A plan in its normal form (D78): every input the run will not read set to its default,
//! so that two plans that run the same are equal. The flags without effect are found by
//! this equality (`cli::ignored`): a flag whose removal leaves the normal plan as it is
//! changed nothing.

use super::{Agents, RunPlan, TargetTls};
use surge_proto::{DatasetKind, DatasetSpec, EndpointPolicy, HttpChoice};

impl RunPlan {
    /// This plan with what its run does not read set to its default. For a plan whose load
    /// is known (a run, a sweep's or a capacity search's first level); a matrix's profiles
    /// set the load and the lengths later, so its base is left as built.
    pub fn normalized(mut self) -> Self {
        read_by_kind(&mut self.dataset);
        if !self.backend_generates() {
            self.temperature = None;
            self.ignore_eos = false;
        }
        // A pooling answer has no output to size.
        if self.pooling() {
            let d = &mut self.dataset;
            (d.random_output_len, d.fixed_output_len, d.prefix_repetition_output_len) = (0, 0, 0);
        }
        // --burstiness shapes the gaps of paced arrivals only.
        if self.request_rate.is_infinite() && self.ramp.is_none() {
            self.burstiness = 1.0;
        }
        if self.lora_modules.len() < 2 {
            self.lora_random = false;
        }
        if let Some(m) = &mut self.multi_turn {
            m.exponential &= m.delay_ms > 0.0;
            if let Some(t) = &mut m.tool_loop {
                t.exponential &= t.latency_ms > 0.0;
            }
        }
        if !self.endpoints.several() {
            self.endpoints.policy = EndpointPolicy::RoundRobin;
        }
        if !self.save_result {
            (self.result_dir, self.result_filename, self.append_result) = (None, None, false);
        }
        if !self.reaches_https() {
            self.target_tls = TargetTls::default();
            if let Some(s) = &mut self.scrape {
                s.tls = TargetTls::default();
            }
            if let Some(g) = &mut self.gpu {
                g.tls = TargetTls::default();
            }
        }
        if self.http_version != HttpChoice::Http3 {
            self.h3_connections = 0;
        }
        if matches!(self.agents, Agents::Embedded) {
            self.tolerate_agent_loss = false;
        }
        match self.steady_plan() {
            None => self.steady = None,
            // An open loop's steady state is judged by the rate, not the threshold.
            Some(super::SteadyPlan::Open { .. }) => {
                if let Some((threshold, _)) = &mut self.steady {
                    *threshold = 0.0;
                }
            }
            Some(super::SteadyPlan::Closed { .. }) => {}
        }
        if self.prometheus_listen.is_none() {
            self.live_linger = std::time::Duration::ZERO;
        }
        self
    }

    /// Whether the backend generates text (reads sampling and an output length).
    fn backend_generates(&self) -> bool {
        use surge_proto::Backend as B;
        matches!(self.backend, B::Openai | B::OpenaiChat | B::OpenaiResponses | B::OpenaiAudio)
    }

    /// Whether any URL this process or its agents fetch is https (then `--insecure` and
    /// `--ca-cert` are read).
    fn reaches_https(&self) -> bool {
        let https = |u: &String| u.starts_with("https://");
        self.endpoints.list.iter().any(|e| https(&e.url))
            || self.scrape.as_ref().is_some_and(|s| s.urls.iter().any(https))
            || self.gpu.as_ref().is_some_and(|g| g.urls.iter().any(https))
    }
}

/// The dataset spec with only what its kind reads (`core::data::dataset::build`); the
/// seed and the batching every kind keeps.
fn read_by_kind(spec: &mut DatasetSpec) {
    use DatasetKind as K;
    let kind = spec.kind();
    if !matches!(kind, K::Random | K::RandomRerank | K::RandomMm | K::Unspecified) {
        (spec.random_input_len, spec.random_output_len, spec.random_range_ratio, spec.random_prefix_len) =
            (0, 0, 0.0, 0);
    }
    if kind != K::Fixed {
        (spec.prompt, spec.fixed_output_len) = (String::new(), 0);
    }
    if kind != K::PrefixRepetition {
        spec.prefix_repetition_num_prefixes = 0;
        spec.prefix_repetition_prefix_len = 0;
        spec.prefix_repetition_suffix_len = 0;
        spec.prefix_repetition_output_len = 0;
    }
    if kind != K::TimedTrace {
        spec.trace_block_size = 0;
    }
    if kind != K::RandomMm {
        (spec.mm_base_items, spec.mm_items_range_ratio, spec.mm_limit_images) = (0, 0.0, 0);
        spec.mm_buckets.clear();
    }
}
