//! Preparing a workload (D7, D17): its closed sets read at the edge, the request
//! template, the tokenizer, the job source, each endpoint's connections opened ahead and
//! its initial test request (D69), and the warm-ups; what [`super::run`] then starts.

use super::workload::{self as jobs, spec};
use super::{EngineError, Prepared, api};
use crate::data::tokenizer::{self, Tok};
use crate::engine::connector::Connector;
use crate::engine::load::endpoints::{self, Endpoints};
use crate::engine::load::pacing::Schedule;
use crate::engine::load::pool::Pool;
use crate::engine::load::request::{self, Job, RequestTemplate};
use crate::engine::stats::Stats;
use crate::engine::target::Target;
use crate::engine::tls::TargetTls;
use crate::engine::workload::Jobs;
use std::sync::Arc;
use std::time::{Duration, Instant};
use surge_proto::{ErrorKind, Workload};

/// Most connections opened ahead of a run.
const WARM_MAX: usize = 4096;
/// An open loop with a rate opens ahead the connections of this many seconds of its
/// arrivals at their peak rate (D84); more open on demand.
const WARM_HORIZON_S: f64 = 10.0;

fn template(w: &Workload, spec: &spec::Spec, target: &Target) -> Result<RequestTemplate, EngineError> {
    let api = api::Api::of(w.backend()).ok_or(EngineError::Spec(spec::SpecError::Unset { field: "backend" }))?;
    let (mode, content_type) = (api.mode(), api.content_type());
    let mut headers = Vec::new();
    let bad = |name: &str, e: http::Error| EngineError::Header { name: name.to_string(), source: e };
    for (k, v) in &w.headers {
        let name = http::HeaderName::try_from(k.as_str()).map_err(|e| bad(k, e.into()))?;
        let value = http::HeaderValue::try_from(v.as_str()).map_err(|e| bad(k, e.into()))?;
        headers.push((name, value));
    }
    Ok(RequestTemplate {
        uri_h1: target.uri(&w.endpoint, false),
        uri_h2: target.uri(&w.endpoint, true),
        authority: http::HeaderValue::try_from(target.authority.as_str()).map_err(|e| bad("host", e.into()))?,
        content_type: http::HeaderValue::from_static(content_type),
        headers,
        mode,
        tokenizer: None,
        trace: (w.trace_run_id != 0).then_some((w.trace_run_id, w.trace_sample_ratio)),
        request_id_prefix: (!w.request_id_prefix.is_empty()).then(|| w.request_id_prefix.clone()),
        session_header: match w.multi_turn.as_ref().map(|m| m.session_header.as_str()) {
            None | Some("") => None,
            Some(name) => Some(http::HeaderName::try_from(name).map_err(|e| bad(name, e.into()))?),
        },
        keep_text: w.keep_text,
        read_timeout: spec.read_timeout,
        keep_calls: w.multi_turn.as_ref().is_some_and(|m| m.tool_loop.is_some()),
        ignore_eos: w.ignore_eos,
        replica_header: match w.replica_header.as_str() {
            "" => None,
            name => Some(http::HeaderName::try_from(name).map_err(|e| bad(name, e.into()))?),
        },
    })
}

/// The run's tokenizer, if the workload carries one (parsed once per process per hash,
/// off the async threads). Takes the bytes out of the workload.
async fn load_tokenizer(w: &mut Workload) -> Result<Option<Arc<Tok>>, EngineError> {
    if w.tokenizer_sha256.is_empty() && w.tokenizer_json.is_empty() {
        return Ok(None);
    }
    let (sha, bytes) = (w.tokenizer_sha256.clone(), std::mem::take(&mut w.tokenizer_json));
    tokio::task::spawn_blocking(move || tokenizer::cached(&sha, &bytes))
        .await
        .map_err(|source| EngineError::Task { what: "tokenizer", source })?
        .map(Some)
        .map_err(EngineError::Tokenizer)
}

/// Readies the slice's job source (no body is built for the slice: see [`jobs`]), opens
/// connections (one per concurrency slot, HTTP/1.1) and sends the warm-up requests, whose
/// rows are discarded. Neither its time nor its memory depends on `slice_len`.
pub async fn prepare(workload: Workload) -> Result<Prepared, EngineError> {
    prepare_on(workload, None).await
}

/// As [`prepare`], with connections to the target opened from `local` (an address of
/// this host) when given.
pub async fn prepare_on(mut workload: Workload, local: Option<std::net::IpAddr>) -> Result<Prepared, EngineError> {
    let spec = spec::check(&workload).map_err(EngineError::Spec)?;
    let schedule = Schedule::for_workload(&workload, None)?;
    // Conversations are bounded by their open sessions (a request bound alone would let
    // sessions start without end), or by a rate.
    let bounded = match &workload.multi_turn {
        Some(m) => m.concurrency > 0 || schedule.is_open_loop(),
        None => spec.max_concurrency.is_some() || schedule.is_open_loop(),
    };
    if workload.slice_len == jobs::UNBOUNDED && !bounded {
        return Err(EngineError::Unbounded);
    }
    let tok = load_tokenizer(&mut workload).await?;
    let api = api::Api::of(workload.backend()).ok_or(EngineError::Spec(spec::SpecError::Unset { field: "backend" }))?;
    let jobs = Jobs::new(&mut workload, api, tok.clone())?;
    let questions = crate::engine::workload::questions::Questions::of(&workload)?.map(Arc::new);
    let stats = Arc::new(Stats::default());
    // The requests expected in flight: one per concurrency slot, but never more than the
    // requests to send, nor than WARM_MAX (a huge cap is a limit, not a plan). The pools
    // are sized by it (multiplexed: one connection per 100) and the warm-ups sent that
    // many at a time. An open loop opens more on demand.
    let open_loop = schedule.is_open_loop();
    let warm_max = if open_loop { WARM_MAX / 4 } else { WARM_MAX };
    let slots = spec.max_concurrency.map_or(0, |n| u64::from(n.get()));
    // Conversations: no more requests in flight than sessions open.
    let sessions = workload.multi_turn.as_ref().map(|m| u64::from(m.concurrency)).filter(|&c| c > 0);
    let concurrency = slots.min(jobs.len().max(1)).min(sessions.unwrap_or(u64::MAX)).min(warm_max as u64) as usize;
    // Connections opened before the start: as many; a paced run, no more than its
    // arrivals over WARM_HORIZON_S need at their peak rate, at least one (D84).
    let ahead = match Schedule::peak_rate(&workload).filter(|_| open_loop) {
        Some(rate) => concurrency.min(((rate * WARM_HORIZON_S).ceil() as usize).max(1)),
        None => concurrency,
    };
    let tls = TargetTls::of(&workload);
    let policy = endpoints::Policy::of(&workload).map_err(EngineError::Spec)?;
    let urls = endpoints::urls(&workload);
    let total_weight: u64 = urls.iter().map(|(_, w)| u64::from(*w)).sum();
    let mut list = Vec::with_capacity(urls.len());
    let mut connections_open = 0;
    for (url, weight) in &urls {
        let target = Target::resolve(url).await?;
        let mut tpl = template(&workload, &spec, &target)?;
        tpl.tokenizer = tok.clone();
        // Each endpoint's share of the requests in flight and of the connections opened
        // ahead, by its weight.
        let part = |n: usize| (n as u64 * u64::from(*weight)).div_ceil(total_weight) as usize;
        let share = part(concurrency);
        let pool = Arc::new(Pool::with_connections(
            Connector::with_tls(target, spec.http, &tls)?.from_address(local),
            Arc::clone(&stats),
            share,
            spec.h3_connections.map_or(0, |n| n.get() as usize),
        ));
        connections_open += pool.warm(part(ahead), 128).await.map_err(EngineError::Connect)? as u32;
        list.push((pool, Arc::new(tpl), *weight));
    }
    let endpoints = Arc::new(Endpoints::new(list, policy, workload.pacing_seed));
    if !workload.skip_initial_test && !jobs.is_empty() {
        for (e, (url, _)) in endpoints.iter().zip(&urls) {
            initial_test(url, &workload.endpoint, &spec, &e.pool, &e.tpl, &jobs).await?;
        }
    }
    let mut warmups_completed = 0;
    if workload.num_warmups > 0 && !jobs.is_empty() {
        let t0 = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for k in 0..u64::from(workload.num_warmups) {
            let planned = jobs.get_base(k % jobs.len());
            let endpoints = Arc::clone(&endpoints);
            set.spawn(async move {
                let job = Job::of(k, planned, None);
                let lease = endpoints.pick(k, None);
                let e = lease.endpoint();
                request::execute(&e.pool, &e.tpl, job, t0).await
            });
            if set.len() >= concurrency.max(1)
                && let Some(Ok(r)) = set.join_next().await
            {
                warmups_completed += u32::from(r.error() == ErrorKind::None);
            }
        }
        while let Some(r) = set.join_next().await {
            warmups_completed += u32::from(r.is_ok_and(|r| r.error() == ErrorKind::None));
        }
    }
    Ok(Prepared { workload, spec, jobs, endpoints, questions, stats, connections_open, warmups_completed })
}

/// How long the initial test request may take when the workload names no --max-run-time.
const INITIAL_TEST_LIMIT: Duration = Duration::from_secs(100);

/// One request before the load, as the first of the run will be (D7): a wrong endpoint,
/// model or key stops the run here with the server's own words.
async fn initial_test(
    base_url: &str,
    path: &str,
    spec: &spec::Spec,
    pool: &Arc<Pool>,
    tpl: &Arc<RequestTemplate>,
    jobs: &Jobs,
) -> Result<(), EngineError> {
    let job = Job::of(jobs.index(0), jobs.get_base(0), None);
    let url = format!("{base_url}{path}");
    let ready_until = Instant::now() + spec.ready_timeout;
    let limit = spec.max_run_time.unwrap_or(INITIAL_TEST_LIMIT);
    let (row, not_ready) = loop {
        let attempt = request::execute(pool, tpl, job.clone(), Instant::now());
        let row = tokio::time::timeout(limit, attempt).await.map_err(|_| EngineError::InitialTest {
            url: url.clone(),
            message: format!("no answer within {:.1}s (--max-run-time)", limit.as_secs_f64()),
        })?;
        // Not ready yet: refused, or a gateway/overload answer; retried while allowed.
        let not_ready = row.error() == ErrorKind::Connect || matches!(row.http_status, 502 | 503 | 429);
        if !not_ready || Instant::now() >= ready_until {
            break (row, not_ready);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    if row.error() == ErrorKind::None {
        return Ok(());
    }
    let kind = row.error().as_str_name().trim_start_matches("ERROR_KIND_").to_ascii_lowercase();
    let mut message = if row.error_message.is_empty() { kind } else { format!("{kind}: {}", row.error_message) };
    if not_ready {
        let waited = spec.ready_timeout.as_secs_f64();
        message.push_str(&format!("; not ready after waiting {waited}s (--ready-check-timeout-sec waits longer)"));
    }
    Err(EngineError::InitialTest { url, message })
}
