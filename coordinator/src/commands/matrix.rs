//! `surge matrix`: a fixed set of profiles run one after the other with the same model,
//! labels and agents, so results compare across models, engines and GPU shapes. Each
//! profile's result goes to `DIR/TAG.json` with `run_metadata.result_tag` = TAG.

use super::{open_session, resolve_model, run_on};
use crate::exit::{self, Failure};
use crate::fleet::session::Session;
use crate::output::Outputs;
use crate::output::files::complete_result;
use crate::plan::matrix::MatrixPlan;
use tokio_util::sync::CancellationToken;

/// `surge matrix`.
pub async fn matrix_command(plan: MatrixPlan) -> u8 {
    let mut outputs = Outputs::standard("matrix", true);
    super::warn_ignored(&plan.base, &mut outputs);
    let res = matrix(&plan, &mut outputs).await;
    outputs.stop(None).await;
    match res {
        Ok(code) => code,
        Err(f) => {
            outputs.notice(&f.message);
            f.code
        }
    }
}

/// The profiles; the caller closes `outputs` when it returns.
async fn matrix(plan: &MatrixPlan, outputs: &mut Outputs) -> Result<u8, Failure> {
    let model = resolve_model(&plan.base).await?;
    let embedded = CancellationToken::new();
    let _stop_embedded = embedded.clone().drop_guard();
    let mut session = open_session(&plan.base, &embedded, false, outputs).await?;
    let res = profiles(plan, &mut session, outputs, &model).await;
    session.close();
    outputs.stop(None).await;
    let code = res?;
    outputs.notice(&format!("results in {}", plan.dir.display()));
    if plan.base.plot_timeline {
        super::plot_timeline(outputs, &plan.dir, &plan.dir.join("report.html"), plan.base.cost_per_hour);
    }
    Ok(code)
}

/// Every profile not already complete, in order; stops at the first that does not pass.
async fn profiles(plan: &MatrixPlan, session: &mut Session, outputs: &mut Outputs, model: &str) -> Result<u8, Failure> {
    let mut code = exit::OK;
    for profile in &plan.profiles {
        let path = plan.file(profile);
        let settings = plan.settings_of(profile);
        if plan.resume
            && let Some(r) = complete_result(&path)
            && super::resume::same(&r.settings, &settings, &path, outputs)
        {
            outputs.notice(&format!("{} complete, skipped", path.display()));
            continue;
        }
        let p = plan.at(profile);
        let res = run_on(session, outputs, &p, model, &profile.tag, false).await;
        let (mut record, _, _) = res.map_err(|f| Failure::new(f.code, format!("{}: {}", profile.tag, f.message)))?;
        record.heading = Some(format!("surge matrix: {}", profile.tag));
        record.result.settings = settings;
        record.file = Some(path);
        outputs.run(&record).map_err(|e| Failure::run("", &e))?;
        let r = &record.result;
        let (c, why) = exit::of_run(&record.status, r.completed, &r.errors_by_kind, p.max_failure_rate);
        if let (exit::FAILURE, Some(why)) = (c, why) {
            outputs.notice(&format!("{}: {why}", profile.tag));
        }
        if c != exit::OK {
            code = c;
            break;
        }
    }
    Ok(code)
}
