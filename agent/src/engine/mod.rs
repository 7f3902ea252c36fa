//! The load engine: prepares a workload (dataset slice, request bodies, warm
//! connections, warm-up requests) and runs it against the target, closed loop (N in
//! flight) or open loop (a paced schedule bounded by the concurrency limit), reporting
//! every finished request to a [`Sink`].
//!
//! The engine knows nothing of gRPC or of the coordinator: it is driven by a
//! [`Control`] (start instant, hard deadline, stop token) and reports to a sink.
//!
//! - [`conn`]: target resolution, TCP/TLS/HTTP connections and their pool;
//! - [`request`]: one timed request and its row; [`sse`] and [`openai`] read its stream;
//! - [`pacing`] (the open-loop schedule) and [`pacer`] (the thread releasing it on time);
//! - [`ioclock`]: socket-level timestamps; [`stats`]: live counters of a run;
//! - [`sink`]: where rows go.

pub mod conn;
pub mod ioclock;
pub mod openai;
pub mod pacer;
pub mod pacing;
pub mod request;
pub mod sink;
pub mod sse;
pub mod stats;

pub use sink::{Sink, VecSink};

use crate::data::dataset::{self, Prompt};
use crate::data::tokenizer::{self, Tok, TokenizerError};
use bytes::Bytes;
use conn::{Connector, Pool, Target};
use openai::BodyParams;
use pacing::Schedule;
use request::{Job, Mode, RequestTemplate};
use stats::{Lag, Stats};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};
use surge_proto::{Backend, DatasetKind, ErrorKind, Row, TokenSource, Workload};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Most connections opened ahead of a run.
const WARM_MAX: usize = 4096;

/// Why a workload cannot be prepared.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    #[error(transparent)]
    Target(#[from] conn::TargetError),
    #[error(transparent)]
    Pacing(#[from] pacing::PacingError),
    #[error("cannot connect to the target: {0}")]
    Connect(#[source] conn::ConnectError),
    /// A header name or value (or the target's authority, as `host`) that HTTP refuses.
    #[error("invalid header {name:?}")]
    Header {
        name: String,
        #[source]
        source: http::Error,
    },
    #[error("tokenizer: {0}")]
    Tokenizer(#[source] TokenizerError),
    #[error("dataset: a file dataset without prompts")]
    MissingPrompts,
    #[error("dataset: messages: {0}")]
    Messages(#[source] serde_json::Error),
    /// A blocking task (tokenizer parsing, prompt generation) died.
    #[error("{what}: {source}")]
    Task {
        what: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
}

/// One request body, ready to send, with its prompt's token count.
#[derive(Debug, Clone)]
struct Planned {
    body: Bytes,
    input_tokens: u32,
    input_source: TokenSource,
}

/// A workload ready to start: bodies built, connections open, warm-ups done.
#[derive(Debug)]
pub struct Prepared {
    workload: Workload,
    jobs: Vec<Planned>,
    pool: Arc<Pool>,
    tpl: Arc<RequestTemplate>,
    stats: Arc<Stats>,
    pub connections_open: u32,
    pub warmups_completed: u32,
}

/// How a run is driven from outside.
#[derive(Debug, Clone)]
pub struct Control {
    /// When the first request may be sent.
    pub start_at: Instant,
    /// Hard deadline: everything stops here, in-flight requests are cancelled.
    pub deadline: Instant,
    /// Stop now: no new request, in-flight requests cancelled.
    pub stop: CancellationToken,
}

/// Why issuing stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Finished,
    Duration,
    Stopped,
    Deadline,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Finished => "finished",
            StopReason::Duration => "duration",
            StopReason::Stopped => "stopped",
            StopReason::Deadline => "deadline",
        }
    }
}

/// The outcome of a run, besides its rows.
#[derive(Debug, Clone)]
pub struct Report {
    /// Wall-clock time of the instant rows are relative to (the planned start).
    pub started_at: SystemTime,
    pub completed: u64,
    pub failed: u64,
    pub stop_reason: StopReason,
    pub wall: Duration,
    pub lag: Lag,
    pub wake: Lag,
    pub max_in_flight: u32,
    pub reconnects: u64,
}

impl Prepared {
    /// Live counters (for health reports while the run is going).
    pub fn stats(&self) -> Arc<Stats> {
        Arc::clone(&self.stats)
    }
}

fn template(w: &Workload, target: &Target) -> Result<RequestTemplate, EngineError> {
    let mode = if w.backend() == Backend::Http { Mode::Plain } else { Mode::Stream };
    let content_type = if mode == Mode::Plain { "text/plain" } else { "application/json" };
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

/// This agent's prompts: shipped ones (file datasets) or its slice of the generated dataset.
async fn prompts(w: &Workload, tok: Option<Arc<Tok>>) -> Result<Vec<Prompt>, EngineError> {
    let spec = w.dataset.clone().unwrap_or_default();
    if w.prompts.is_empty() {
        if matches!(spec.kind(), DatasetKind::Sharegpt | DatasetKind::Custom) && w.slice_len > 0 {
            return Err(EngineError::MissingPrompts);
        }
        let (start, len) = (w.slice_start, w.slice_len);
        return tokio::task::spawn_blocking(move || dataset::slice(&spec, tok.as_deref(), start, len))
            .await
            .map_err(|source| EngineError::Task { what: "dataset", source });
    }
    let n = w.prompts.len();
    Ok((0..w.slice_len as usize)
        .map(|k| {
            let p = &w.prompts[k % n];
            Prompt {
                text: p.text.clone(),
                input_tokens: p.input_tokens,
                output_tokens: p.output_tokens,
                input_source: p.input_source(),
                messages_json: p.messages_json.clone(),
            }
        })
        .collect())
}

fn planned(params: &BodyParams<'_>, mode: Mode, p: Prompt) -> Result<Planned, EngineError> {
    let body = if mode == Mode::Plain {
        p.text.into_bytes()
    } else if !p.messages_json.is_empty() && params.chat {
        let messages: serde_json::Value = serde_json::from_str(&p.messages_json).map_err(EngineError::Messages)?;
        openai::chat_body(params, &messages, p.output_tokens)
    } else {
        openai::body(params, &p.text, p.output_tokens)
    };
    Ok(Planned { body: Bytes::from(body), input_tokens: p.input_tokens, input_source: p.input_source })
}

/// Builds bodies, opens connections (one per concurrency slot, HTTP/1.1) and sends the
/// warm-up requests, whose rows are discarded.
pub async fn prepare(mut workload: Workload) -> Result<Prepared, EngineError> {
    let _ = Schedule::new(workload.request_rate, workload.burstiness, workload.pacing_seed)?;
    let target = Target::resolve(&workload.base_url).await?;
    let mut tpl = template(&workload, &target)?;
    let tok = load_tokenizer(&mut workload).await?;
    tpl.tokenizer = tok.clone();
    let tpl = Arc::new(tpl);
    let prompts = prompts(&workload, tok).await?;
    workload.prompts = Vec::new();
    let params = BodyParams {
        model: &workload.model,
        chat: workload.backend() == Backend::OpenaiChat,
        ignore_eos: workload.ignore_eos,
        temperature: workload.temperature,
    };
    let jobs = prompts.into_iter().map(|p| planned(&params, tpl.mode, p)).collect::<Result<Vec<_>, _>>()?;
    let stats = Arc::new(Stats::default());
    // Connections opened before the start: one per concurrency slot, but never more than
    // the requests to send, nor than WARM_MAX (a huge cap is a limit, not a plan).
    // An open loop opens more on demand.
    let open_loop = workload.request_rate > 0.0;
    let concurrency =
        (workload.max_concurrency as usize).min(jobs.len().max(1)).min(if open_loop { WARM_MAX / 4 } else { WARM_MAX });
    let pool =
        Arc::new(Pool::new(Connector::new(target, workload.http_version == 2)?, Arc::clone(&stats), concurrency));
    let connections_open = pool.warm(concurrency, 128).await.map_err(EngineError::Connect)? as u32;
    let mut warmups_completed = 0;
    if workload.num_warmups > 0 && !jobs.is_empty() {
        let t0 = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for k in 0..workload.num_warmups as usize {
            let Planned { body, input_tokens, input_source } = jobs[k % jobs.len()].clone();
            let (pool, tpl) = (Arc::clone(&pool), Arc::clone(&tpl));
            set.spawn(async move {
                let job = Job { index: k as u64, body, input_tokens, input_source, intended: None };
                request::execute(&pool, &tpl, job, t0).await
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
    Ok(Prepared { workload, jobs, pool, tpl, stats, connections_open, warmups_completed })
}

/// Runs a prepared workload; every request ends as one row in `sink`.
pub async fn run(prepared: Prepared, sink: Arc<dyn Sink>, ctl: Control) -> Report {
    let Prepared { workload, jobs, pool, tpl, stats, .. } = prepared;
    // Rows are relative to the planned start, which both ends of a session know.
    let t0 = ctl.start_at;
    tokio::time::sleep_until(t0.into()).await;
    let started_at = SystemTime::now() - t0.elapsed();
    let deadline = tokio::time::Instant::from_std(ctl.deadline);
    let duration = (workload.duration_ms > 0).then(|| Duration::from_millis(workload.duration_ms));
    let schedule =
        Schedule::new(workload.request_rate, workload.burstiness, workload.pacing_seed).expect("validated in prepare");
    let ctx = Arc::new(RunCtx {
        pool,
        tpl,
        sink,
        stats: Arc::clone(&stats),
        cancel: ctl.stop.child_token(),
        t0,
        first_index: workload.slice_start,
    });
    let tracker = TaskTracker::new();
    let mut reason = if schedule.is_open_loop() || workload.max_concurrency == 0 {
        paced(&ctx, &tracker, jobs, schedule, workload.max_concurrency, duration, &ctl, deadline).await
    } else {
        closed_loop(&ctx, &tracker, jobs, workload.max_concurrency, duration)
    };
    tracker.close();
    tokio::select! {
        _ = tracker.wait() => {}
        _ = ctl.stop.cancelled() => { reason = StopReason::Stopped; ctx.cancel.cancel(); }
        _ = tokio::time::sleep_until(deadline) => { reason = StopReason::Deadline; ctx.cancel.cancel(); }
    }
    tracker.wait().await;
    if reason == StopReason::Finished {
        if ctl.stop.is_cancelled() {
            reason = StopReason::Stopped;
        } else if ctx.stats.duration_reached.load(Ordering::Relaxed) {
            reason = StopReason::Duration;
        }
    }
    Report {
        started_at,
        completed: stats.completed.load(Ordering::Relaxed),
        failed: stats.failed.load(Ordering::Relaxed),
        stop_reason: reason,
        wall: t0.elapsed(),
        lag: stats.lag(),
        wake: stats.wake(),
        max_in_flight: stats.max_in_flight.load(Ordering::Relaxed),
        reconnects: stats.reconnects.load(Ordering::Relaxed),
    }
}

/// What every request of a run shares.
struct RunCtx {
    pool: Arc<Pool>,
    tpl: Arc<RequestTemplate>,
    sink: Arc<dyn Sink>,
    stats: Arc<Stats>,
    /// Cancels in-flight requests (stop, deadline).
    cancel: CancellationToken,
    t0: Instant,
    first_index: u64,
}

impl RunCtx {
    /// Sends request `i` of the slice and reports its row.
    async fn one(&self, i: usize, job: Planned, intended: Option<Duration>) {
        let index = self.first_index + i as u64;
        let row = {
            let _in_flight = self.stats.request_started();
            let Planned { body, input_tokens, input_source } = job;
            let started = self.t0.elapsed();
            let job = Job { index, body, input_tokens, input_source, intended };
            tokio::select! {
                row = request::execute(&self.pool, &self.tpl, job, self.t0) => row,
                _ = self.cancel.cancelled() => cancelled_row(index, intended, started, self.t0, (input_tokens, input_source)),
            }
        };
        let counter = if row.error() == ErrorKind::None { &self.stats.completed } else { &self.stats.failed };
        counter.fetch_add(1, Ordering::Relaxed);
        self.sink.record(row);
    }
}

/// Closed loop: `concurrency` workers, each sending its next request as soon as its
/// previous one finished (no task per request, no semaphore).
fn closed_loop(
    ctx: &Arc<RunCtx>,
    tracker: &TaskTracker,
    jobs: Vec<Planned>,
    concurrency: u32,
    duration: Option<Duration>,
) -> StopReason {
    let jobs = Arc::new(jobs);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for _ in 0..(concurrency as usize).min(jobs.len()) {
        let (ctx, jobs, next) = (Arc::clone(ctx), Arc::clone(&jobs), Arc::clone(&next));
        tracker.spawn(async move {
            loop {
                if ctx.cancel.is_cancelled() {
                    return;
                }
                if duration.is_some_and(|d| ctx.t0.elapsed() >= d) {
                    ctx.stats.duration_reached.store(true, Ordering::Relaxed);
                    return;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = jobs.get(i) else { return };
                ctx.one(i, job.clone(), None).await;
            }
        });
    }
    StopReason::Finished
}

/// Open loop (or unbounded concurrency): requests released by the pacing thread at
/// their intended times, each in its own task, bounded by the concurrency limit.
#[allow(clippy::too_many_arguments)]
async fn paced(
    ctx: &Arc<RunCtx>,
    tracker: &TaskTracker,
    jobs: Vec<Planned>,
    schedule: Schedule,
    concurrency: u32,
    duration: Option<Duration>,
    ctl: &Control,
    deadline: tokio::time::Instant,
) -> StopReason {
    let open_loop = schedule.is_open_loop();
    let mut pacer =
        open_loop.then(|| pacer::Pacer::start(schedule, ctx.t0, jobs.len(), duration, Arc::clone(&ctx.stats)));
    let sem = (concurrency > 0).then(|| Arc::new(Semaphore::new(concurrency as usize)));
    for (i, job) in jobs.into_iter().enumerate() {
        let intended = match &mut pacer {
            None => None,
            Some(p) => tokio::select! {
                biased;
                _ = ctl.stop.cancelled() => return StopReason::Stopped,
                _ = tokio::time::sleep_until(deadline) => return StopReason::Deadline,
                off = p.next() => match off {
                    Some(off) => Some(off),
                    None => return if p.hit_limit() { StopReason::Duration } else { StopReason::Finished },
                },
            },
        };
        let permit = match &sem {
            None => None,
            Some(sem) => tokio::select! {
                biased;
                _ = ctl.stop.cancelled() => return StopReason::Stopped,
                _ = tokio::time::sleep_until(deadline) => return StopReason::Deadline,
                p = Arc::clone(sem).acquire_owned() => Some(p.expect("semaphore never closed")),
            },
        };
        if duration.is_some_and(|d| ctx.t0.elapsed() >= d) {
            return StopReason::Duration;
        }
        if let Some(off) = intended {
            ctx.stats.record_lag(ctx.t0.elapsed().saturating_sub(off).as_micros() as u64);
        }
        let ctx = Arc::clone(ctx);
        tracker.spawn(async move {
            let _permit = permit;
            ctx.one(i, job, intended).await;
        });
    }
    StopReason::Finished
}

fn cancelled_row(
    index: u64,
    intended: Option<Duration>,
    started: Duration,
    t0: Instant,
    (input_tokens, input_source): (u32, TokenSource),
) -> Row {
    let mut row = Row {
        input_source: input_source as i32,
        index,
        intended_us: intended.map_or(-1, |d| d.as_micros() as i64),
        start_us: started.as_micros() as i64,
        latency_us: u64::try_from(t0.elapsed().saturating_sub(started).as_micros()).unwrap_or(u64::MAX),
        input_tokens,
        ..Default::default()
    };
    row.set_error(ErrorKind::Cancelled);
    row
}
