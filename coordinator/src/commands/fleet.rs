//! `surge fleet check`: the agents' table and whether each can run the planned load.

use super::open_fleet;
use crate::exit::{self, Failure};
use crate::fleet::check;
use crate::output::terminal::{out, say};
use crate::plan::{Agents, RunPlan};
use tokio_util::sync::CancellationToken;

pub async fn check_command(plan: RunPlan, probe: bool) -> u8 {
    match run(&plan, probe).await {
        Ok(code) => code,
        Err(f) => {
            say("fleet check", &f.message);
            f.code
        }
    }
}

async fn run(plan: &RunPlan, probe: bool) -> Result<u8, Failure> {
    if !matches!(plan.agents, Agents::Remote { .. }) {
        return Err(Failure::new(exit::USAGE, "--agents: the fleet to check (with the TLS flags of surge run)"));
    }
    let embedded = CancellationToken::new();
    // No load: no live outputs (Prometheus, OTLP) are started.
    let mut session = open_fleet(plan, &embedded, false).await?;
    let checked = check::check(&mut session, plan, probe).await.map_err(|e| Failure::run("", &e));
    let missing = session.missing().to_vec();
    // Each link says Bye before the process ends (an agent then closes at once rather
    // than waiting for a resume).
    session.close_and_wait(std::time::Duration::from_secs(2)).await;
    let checked = checked?;
    out(&crate::output::fleet::table(&checked, &missing));
    let failing = checked.iter().filter(|a| !a.ok()).count();
    if failing > 0 {
        say("fleet check", &format!("{failing} of {} agents cannot run the planned load", checked.len()));
        return Ok(exit::FAILURE);
    }
    Ok(exit::OK)
}
