//! A profile matrix as a value: the base run and the profiles (the standard set users
//! run on every model, plus `[[profile]]` tables); each profile's plan is the base with
//! the dataset, concurrency, request count and rate replaced.

use super::RunPlan;
use serde::Deserialize;
use std::path::PathBuf;
use surge_proto::DatasetKind;

/// One profile (a `[[profile]]` table of a configuration file, or a standard one).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ProfileSpec {
    pub tag: String,
    pub input_len: u32,
    pub output_len: u32,
    pub concurrency: u32,
    pub num_prompts: u64,
    /// Requests/s; absent = inf.
    pub request_rate: Option<f64>,
}

/// The standard profile matrix.
pub fn standard() -> Vec<ProfileSpec> {
    let p = |tag: &str, input_len, output_len, concurrency, num_prompts| ProfileSpec {
        tag: tag.into(),
        input_len,
        output_len,
        concurrency,
        num_prompts,
        request_rate: None,
    };
    vec![
        p("latency-1024x256-c1", 1024, 256, 1, 20),
        p("serve-1024x256-c16", 1024, 256, 16, 200),
        p("longctx-8192x256-c4", 8192, 256, 4, 50),
    ]
}

/// A validated matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct MatrixPlan {
    pub base: RunPlan,
    pub profiles: Vec<ProfileSpec>,
    pub dir: PathBuf,
    pub resume: bool,
    /// The flags given, as its results keep them (D93).
    pub settings: super::Settings,
}

impl MatrixPlan {
    /// The flags and `p` itself, as its result keeps them (D93).
    pub fn settings_of(&self, p: &ProfileSpec) -> std::collections::BTreeMap<String, Vec<String>> {
        let mut s = self.settings.map();
        s.insert("(profile)".into(), vec![format!("{p:?}")]);
        s
    }

    /// The result file of one profile.
    pub fn file(&self, p: &ProfileSpec) -> PathBuf {
        self.dir.join(format!("{}.json", p.tag))
    }

    /// The run plan of one profile: random dataset, temperature 0, rate inf unless set.
    pub fn at(&self, p: &ProfileSpec) -> RunPlan {
        let mut r = self.base.clone();
        r.dataset.kind = DatasetKind::Random as i32;
        r.dataset.random_input_len = p.input_len;
        r.dataset.random_output_len = p.output_len;
        r.dataset_name = "random";
        r.prompts = Default::default();
        r.max_concurrency = Some(p.concurrency);
        r.num_prompts = p.num_prompts;
        r.request_rate = p.request_rate.unwrap_or(f64::INFINITY);
        r.temperature = Some(0.0);
        r.metadata.retain(|(k, _)| k != "result_tag");
        r.metadata.push(("result_tag".into(), p.tag.clone()));
        r
    }
}
