//! `surge matrix`: a fixed set of profiles run one after the other with the same model,
//! labels and agents, so results compare across models, engines and GPU shapes. The
//! standard matrix is the one users run on every model; `--config FILE` adds `[[profile]]`
//! tables (custom profiles are extra runs, never replacements). Each profile writes
//! `DIR/TAG.json` with `run_metadata.result_tag` = TAG.

use crate::cli::MatrixArgs;
use crate::plan::{ProfileSpec, RunPlan, UsageError, load_file};
use crate::sweep::complete_result;
use crate::{Failure, exit, finish, open_session, report, resolve_model};
use std::path::PathBuf;
use surge_proto::DatasetKind;
use tokio_util::sync::CancellationToken;

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
#[derive(Debug, Clone)]
pub struct MatrixPlan {
    pub base: RunPlan,
    pub profiles: Vec<ProfileSpec>,
    pub dir: PathBuf,
    pub resume: bool,
}

impl MatrixPlan {
    pub fn from_args(a: MatrixArgs) -> Result<Self, UsageError> {
        let file = match &a.run.config {
            Some(p) => load_file(p)?,
            None => Default::default(),
        };
        let mut profiles = if a.standard { standard() } else { Vec::new() };
        for p in &file.profiles {
            if p.tag.is_empty()
                || p.tag.contains('/')
                || p.concurrency == 0
                || p.num_prompts == 0
                || p.input_len == 0
                || p.output_len == 0
            {
                return Err(UsageError(format!(
                    "--config: profile {:?}: tag must be a file name and every number above 0",
                    p.tag
                )));
            }
            if profiles.iter().any(|q| q.tag == p.tag) {
                return Err(UsageError(format!("--config: profile {:?} defined twice", p.tag)));
            }
            profiles.push(p.clone());
        }
        if profiles.is_empty() {
            return Err(UsageError("--standard or --config FILE with [[profile]] tables is required".into()));
        }
        for p in &mut profiles {
            p.tag.push_str(&a.tag_suffix);
        }
        let mut base = RunPlan::from_args(a.run)?;
        base.save_result = true;
        let labels = [
            ("hardware", a.hardware.or(file.hardware)),
            ("engine", a.engine.or(file.engine)),
            ("cluster_label", a.cluster_label.or(file.cluster_label)),
        ];
        for (k, v) in labels {
            if let Some(v) = v {
                base.metadata.retain(|(key, _)| key != k);
                base.metadata.push((k.into(), v));
            }
        }
        let dir = base.result_dir.clone().unwrap_or_else(|| PathBuf::from("surge-matrix"));
        Ok(Self { base, profiles, dir, resume: a.resume })
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

/// `surge matrix`.
pub async fn matrix_command(plan: MatrixPlan) -> u8 {
    match matrix(plan).await {
        Ok(code) => code,
        Err(f) => {
            eprintln!("surge matrix: {}", f.message);
            f.code
        }
    }
}

async fn matrix(plan: MatrixPlan) -> Result<u8, Failure> {
    let model = resolve_model(&plan.base).await?;
    let embedded = CancellationToken::new();
    let _stop_embedded = embedded.clone().drop_guard();
    let mut session = open_session(&plan.base, &embedded).await?;
    let mut code = exit::OK;
    for profile in &plan.profiles {
        let path = plan.dir.join(format!("{}.json", profile.tag));
        if plan.resume && complete_result(&path).is_some() {
            eprintln!("surge matrix: {} complete, skipped", path.display());
            continue;
        }
        let p = plan.at(profile);
        println!("surge matrix: {}", profile.tag);
        let outcome = match session.run(&p, &model, None).await {
            Ok(o) => o,
            Err(e) => {
                session.close();
                return Err(Failure::new(exit::FAILURE, format!("{}: {e}", profile.tag)));
            }
        };
        let f = finish(&p, &model, &outcome);
        print!("{}", crate::summary::render(&p, &f.metrics, &outcome, &f.client));
        report::write(&path, &f.doc).map_err(|e| Failure::new(exit::FAILURE, format!("{}: {e}", path.display())))?;
        let c = crate::status_code(&outcome.status);
        if c != exit::OK {
            code = c;
            break;
        }
    }
    session.close();
    eprintln!("surge matrix: results in {}", plan.dir.display());
    Ok(code)
}
