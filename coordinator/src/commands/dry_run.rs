//! `surge run --dry-run`: the plan and its dataset, made as the agents would make them
//! (request `i` is a pure function of the dataset and `i`, D20), with nothing sent to the
//! target: each agent's request count (with `--agents`, each agent is asked its cores, as
//! a run weighs them), the input and output lengths, and the first prompt.

use crate::exit;
use crate::output::Outputs;
use crate::plan::{Agents, RunPlan, UNBOUNDED, split};
use surge_core::data::dataset;

/// Requests whose lengths are summarized at most (with a tokenizer, a long prompt takes
/// milliseconds to make).
const SAMPLE: u64 = 10_000;

/// Min, mean and max of a list of lengths.
fn stats(v: &[u32]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    let sum: u64 = v.iter().map(|&x| u64::from(x)).sum();
    let (min, max) = (v.iter().min().unwrap_or(&0), v.iter().max().unwrap_or(&0));
    format!("total {sum}, mean {:.1}, min {min}, max {max}", sum as f64 / v.len() as f64)
}

/// Prints the dry run's lines; exit 0.
pub async fn dry_run_command(plan: &RunPlan, outputs: &mut Outputs) -> u8 {
    let bounded = plan.num_prompts != UNBOUNDED;
    let n = plan.num_prompts.min(SAMPLE);
    outputs.notice(&format!(
        "dry run: nothing is sent; {} request(s) of --dataset-name {} to {}{} (--backend {}){}",
        if bounded { plan.num_prompts.to_string() } else { "no cap (a duration run)".into() },
        plan.dataset_name,
        plan.base_url,
        plan.endpoint,
        plan.backend_name,
        if n < plan.num_prompts { format!("; lengths of the first {n}") } else { String::new() },
    ));
    // (agent, cores): each agent that answers, as the run would split among them.
    let agents: Vec<(String, u32)> = match &plan.agents {
        Agents::Embedded => vec![("embedded".into(), 1)],
        Agents::Remote { .. } => {
            // The agents' handshake only: their cores, as the run splits by them.
            let embedded = tokio_util::sync::CancellationToken::new();
            match super::open_fleet(plan, &embedded, false).await {
                Ok(session) => {
                    let w = session.agents.iter().map(|a| (a.addr.clone(), a.hello.cores.max(1))).collect();
                    session.close();
                    w
                }
                Err(f) => {
                    outputs.notice(&f.message);
                    return f.code;
                }
            }
        }
    };
    let weights: Vec<u32> = agents.iter().map(|(_, c)| *c).collect();
    let shares = split::split(&weights, plan.num_prompts, plan.max_concurrency, plan.request_rate, 0);
    let remote = matches!(plan.agents, Agents::Remote { .. });
    for ((a, c), s) in agents.iter().zip(&shares) {
        let count = if bounded { s.num_prompts.to_string() } else { "no cap".into() };
        let cores = if remote { format!(" ({c} cores)") } else { String::new() };
        outputs.notice(&format!("  agent {a}{cores}: {count} requests, concurrency {}", s.max_concurrency));
    }
    let tok = plan.tokenizer.as_ref().map(|t| &*t.tok);
    let mut first = None;
    let (mut inputs, mut outs) = (Vec::new(), Vec::new());
    if plan.prompts.is_empty() {
        for i in 0..n {
            let p = dataset::build(&plan.dataset, tok, i);
            inputs.push(p.input_tokens);
            outs.push(p.output_tokens);
            first.get_or_insert(p.text);
        }
    } else {
        for i in 0..n {
            let p = &plan.prompts[(i % plan.prompts.len() as u64) as usize];
            inputs.push(p.input_tokens);
            outs.push(p.output_tokens);
            first.get_or_insert_with(|| if p.text.is_empty() { p.messages_json.clone() } else { p.text.clone() });
        }
    }
    let source = if tok.is_some() { "tokenizer" } else { "words (no --tokenizer)" };
    outputs.notice(&format!("  input tokens ({source}): {}", stats(&inputs)));
    if !plan.pooling() {
        outputs.notice(&format!("  output tokens (max_tokens asked): {}", stats(&outs)));
    }
    let first = first.unwrap_or_default();
    let shown: String = first.chars().take(400).collect();
    let more = if first.chars().count() > 400 { " ..." } else { "" };
    outputs.notice(&format!("  first prompt: {shown:?}{more}"));
    exit::OK
}
