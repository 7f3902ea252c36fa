//! The run loops: a prepared workload run against the target, closed loop (N in flight)
//! or open loop (a paced schedule bounded by the concurrency limit), with the probes of
//! `--probe-request-rate` beside it. Each request is made when it is sent
//! ([`crate::engine::workload`]), timed by [`request`] and decoded by the API layer
//! ([`crate::engine::api`]); a conversation's session runs its turns in `conversation`.
//!
//! - [`request`]: one timed request (the I/O), on a connection of [`pool`], one pool per
//!   endpoint, which [`endpoints`] picks per request (D69);
//! - [`pacing`] (the open-loop schedule) and [`pacer`] (the thread releasing it on time);
//! - `determinism`: `--check-determinism`'s memory of first replies.

mod conversation;
mod determinism;
pub mod endpoints;
pub mod pacer;
pub mod pacing;
pub mod pool;
pub mod request;

use super::api::anomalies;
use super::sink::Sink;
use super::workload::{Form, Jobs, Planned, questions};
use super::{Control, Prepared, Report, StopReason};
use crate::engine::stats::Stats;
use endpoints::Endpoints;
use pacing::Schedule;
use request::{Job, signed_us, us};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};
use surge_proto::{ErrorKind, Row, TokenSource};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Runs a prepared workload; every request ends as one row in `sink`.
pub async fn run(prepared: Prepared, sink: Arc<dyn Sink>, ctl: Control) -> Report {
    let Prepared { workload, spec, jobs, endpoints, questions, stats, .. } = prepared;
    // Rows are relative to the planned start, which both ends of a session know.
    let t0 = ctl.start_at;
    tokio::time::sleep_until(t0.into()).await;
    let started_at = SystemTime::now() - t0.elapsed();
    let deadline = tokio::time::Instant::from_std(ctl.deadline);
    let duration = spec.duration;
    let schedule =
        Schedule::for_workload(&workload, jobs.trace_offsets(workload.trace_speedup)).expect("validated in prepare");
    let jobs = Arc::new(jobs);
    let keep_text = workload.keep_text;
    let ctx = Arc::new(RunCtx {
        endpoints,
        questions,
        replies: workload.check_determinism.then(determinism::Replies::default),
        keep_text,
        sink,
        stats: Arc::clone(&stats),
        cancel: ctl.stop.child_token(),
        t0,
        jobs,
    });
    let tracker = TaskTracker::new();
    let probes = spec.probe_rate.map(|rate| {
        let stop = ctx.cancel.child_token();
        (tokio::spawn(probe_loop(Arc::clone(&ctx), rate, stop.clone())), stop)
    });
    let slots = spec.max_concurrency.map_or(0, NonZeroU32::get);
    let sessions = match ctx.jobs.form() {
        Form::Sessions(s) => Some(Arc::clone(s)),
        Form::Requests(_) => None,
    };
    let (mut reason, workers) = if let Some(script) = sessions {
        let mt = workload.multi_turn.unwrap_or_default();
        let limits = conversation::Limits {
            script,
            sessions: mt.concurrency,
            requests: slots,
            duration,
            keep_text: workload.keep_text,
        };
        (conversation::run(&ctx, &tracker, schedule, limits, &ctl, deadline).await, Vec::new())
    } else if schedule.is_open_loop() || spec.max_concurrency.is_none() {
        (paced(&ctx, &tracker, schedule, slots, duration, &ctl, deadline).await, Vec::new())
    } else {
        (StopReason::Finished, closed_loop(&ctx, &tracker, slots, duration))
    };
    tracker.close();
    let cancel = |reason| {
        ctx.cancel.cancel();
        workers.iter().for_each(tokio::task::AbortHandle::abort);
        reason
    };
    // D21: the duration, then the graceful stop, then what is still in flight is cancelled.
    let grace = match (duration, spec.graceful_stop) {
        (Some(d), Some(g)) => tokio::time::Instant::from_std(t0 + d + g).min(deadline),
        _ => deadline,
    };
    let graceful = grace < deadline;
    tokio::select! {
        _ = tracker.wait() => {}
        _ = ctl.stop.cancelled() => reason = cancel(StopReason::Stopped),
        _ = tokio::time::sleep_until(grace), if graceful => {
            ctx.stats.duration_reached.store(true, Ordering::Relaxed);
            reason = cancel(StopReason::Duration);
        }
        _ = tokio::time::sleep_until(deadline) => reason = cancel(StopReason::Deadline),
    }
    tracker.wait().await;
    // The load is over: no new probe; the one in flight finishes (as vLLM awaits it).
    if let Some((task, stop)) = probes {
        stop.cancel();
        let _ = task.await;
    }
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
        cancelled: stats.cancelled.load(Ordering::Relaxed),
        stop_reason: reason,
        wall: t0.elapsed(),
        lag: stats.lag(),
        wake: stats.wake(),
        max_in_flight: stats.max_in_flight.load(Ordering::Relaxed),
        reconnects: stats.reconnects.load(Ordering::Relaxed),
    }
}

/// vLLM's `--probe-request-rate`: one probe at a time beside the load, each sent
/// `1 / rate` s after the previous one answered, until `stop` (the load is over) or the
/// run is cancelled. Probes share the connection pool, not the concurrency bound; their
/// rows carry `probe` and count in neither `completed` nor `failed`.
async fn probe_loop(ctx: Arc<RunCtx>, rate: f64, stop: CancellationToken) {
    let gap = Duration::from_secs_f64((1.0 / rate).min(86_400.0));
    let mut k = 0u64;
    while !stop.is_cancelled() {
        let job = Job::of(k, ctx.jobs.probe(), None);
        let lease = ctx.endpoints.pick(k, None);
        let e = lease.endpoint();
        let mut row = tokio::select! {
            row = request::execute(&e.pool, &e.tpl, job, ctx.t0) => row,
            () = ctx.cancel.cancelled() => return,
        };
        row.probe = true;
        row.endpoint = lease.index;
        drop(lease);
        ctx.sink.record(row);
        k += 1;
        tokio::select! {
            () = tokio::time::sleep(gap) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// What every request of a run shares.
struct RunCtx {
    endpoints: Arc<Endpoints>,
    questions: Option<Arc<questions::Questions>>,
    /// `--check-determinism` (D70): each request body's first reply.
    replies: Option<determinism::Replies>,
    /// `--save-detailed`: rows keep the generated text.
    keep_text: bool,
    sink: Arc<dyn Sink>,
    stats: Arc<Stats>,
    /// Cancels in-flight requests (stop, deadline).
    cancel: CancellationToken,
    t0: Instant,
    /// Request `k` of the slice, made by the task that sends it.
    jobs: Arc<Jobs>,
}

impl RunCtx {
    /// Request `k`: made here when cheap, on a blocking thread when costly (a tokenizer,
    /// long prompts), so the async workers keep reading responses meanwhile.
    async fn make(&self, k: u64) -> Planned {
        if !self.jobs.costly() {
            return self.jobs.get(k);
        }
        let jobs = Arc::clone(&self.jobs);
        match tokio::task::spawn_blocking(move || jobs.get(k)).await {
            Ok(planned) => planned,
            // The blocking pool is shutting down (the runtime ends): make it here.
            Err(_) => self.jobs.get(k),
        }
    }

    /// Makes request `k` of the slice, sends it and reports its row, or the row of its
    /// cancellation (stop, deadline). Runs in the request's own task (open loop), so
    /// bodies are made in parallel, before `st` is taken.
    async fn one(&self, k: u64, intended: Option<Duration>) {
        tokio::select! {
            () = self.attempt(k, intended) => {}
            // Dropping the attempt reports its cancellation.
            () = self.cancel.cancelled() => {}
        }
    }

    /// Makes request `k`, sends it and reports its row. Dropped while the request is in
    /// flight (a cancelled run), it reports the request's cancelled row instead.
    async fn attempt(&self, k: u64, intended: Option<Duration>) {
        let index = self.jobs.index(k);
        let question = self.questions.as_ref().and_then(|q| Some((q, q.pick(index)?)));
        let planned = match question {
            Some((q, i)) => q.planned(i),
            None => self.make(k).await,
        };
        let mut job = Job::of(index, planned, intended);
        // A question's reply text is kept until it is scored, a checked reply's until it
        // is compared; a question may end at EOS.
        let key = self.replies.as_ref().map(|_| determinism::Replies::key(&job.body));
        job.keep_reply = question.is_some() || key.is_some();
        job.honours_eos = question.is_some();
        let mut row = self.send(job, None).await;
        if let (Some(r), Some(key)) = (&self.replies, key)
            && row.error() == ErrorKind::None
            && r.differs(key, &row.generated_text)
        {
            anomalies::note(&mut row, surge_proto::Anomaly::Nondeterministic);
        }
        if let Some((q, i)) = question {
            q.score(i, &mut row);
        }
        if !self.keep_text {
            row.generated_text.clear();
        }
        self.record(row);
    }

    /// Sends `job` (a conversation's turn: `session` and turn) and returns its row.
    /// Dropped while the request is in flight, it reports the cancelled row instead.
    async fn send(&self, job: Job, session: Option<(u64, u32)>) -> Row {
        let _in_flight = self.stats.request_started();
        let started = self.t0.elapsed();
        let input = (job.input_tokens, job.input_source);
        let (index, intended) = (job.index, job.intended);
        let lease = self.endpoints.pick(index, session.map(|(s, _)| s));
        let endpoint = lease.index;
        let mut cancelled = Cancelled { ctx: self, armed: true, index, intended, started, input, session, endpoint };
        let e = lease.endpoint();
        let mut row = request::execute(&e.pool, &e.tpl, job, self.t0).await;
        cancelled.armed = false;
        row.endpoint = endpoint;
        row
    }

    fn record(&self, row: Row) {
        let counter = match row.error() {
            ErrorKind::None => &self.stats.completed,
            ErrorKind::Cancelled => &self.stats.cancelled,
            _ => &self.stats.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.sink.record(row);
    }
}

/// A request in flight: reports its cancelled row when dropped still armed (its
/// attempt was dropped before the answer: a stopped run, a deadline).
struct Cancelled<'a> {
    ctx: &'a RunCtx,
    armed: bool,
    index: u64,
    intended: Option<Duration>,
    started: Duration,
    input: (u32, TokenSource),
    /// A conversation's turn: its session and turn.
    session: Option<(u64, u32)>,
    /// The endpoint it went to.
    endpoint: u32,
}

impl Drop for Cancelled<'_> {
    fn drop(&mut self) {
        if self.armed {
            let now = Instant::now();
            let mut row = cancelled_row(self.index, self.intended, self.started, (self.ctx.t0, now), self.input);
            if let Some((s, t)) = self.session {
                (row.session, row.turn) = (Some(s), t);
            }
            row.endpoint = self.endpoint;
            self.ctx.record(row);
        }
    }
}

/// Closed loop: `concurrency` workers, each sending its next request as soon as its
/// previous one finished (no task per request, no semaphore, no cancellation to watch:
/// a stopped run aborts the workers, and each reports its request in flight as
/// cancelled). Returns the workers' abort handles.
fn closed_loop(
    ctx: &Arc<RunCtx>,
    tracker: &TaskTracker,
    concurrency: u32,
    duration: Option<Duration>,
) -> Vec<tokio::task::AbortHandle> {
    // The next request of the slice; u64, as the slice may be unbounded.
    let next = Arc::new(AtomicU64::new(0));
    let workers = u64::from(concurrency).min(ctx.jobs.len());
    (0..workers)
        .map(|_| {
            let (ctx, next) = (Arc::clone(ctx), Arc::clone(&next));
            let worker = tracker.spawn(async move {
                loop {
                    if duration.is_some_and(|d| ctx.t0.elapsed() >= d) {
                        ctx.stats.duration_reached.store(true, Ordering::Relaxed);
                        return;
                    }
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= ctx.jobs.len() {
                        return;
                    }
                    ctx.attempt(k, None).await;
                }
            });
            worker.abort_handle()
        })
        .collect()
}

/// The next release of an open loop or a bounded one: its intended offset (when paced)
/// and a slot of `sem` (when bounded), or why issuing stops (stop, deadline, the
/// schedule's end).
async fn next_release(
    pacer: &mut Option<pacer::Pacer>,
    sem: Option<&Arc<Semaphore>>,
    ctl: &Control,
    deadline: tokio::time::Instant,
) -> Result<(Option<Duration>, Option<tokio::sync::OwnedSemaphorePermit>), StopReason> {
    let intended = match pacer {
        None => None,
        Some(p) => tokio::select! {
            biased;
            _ = ctl.stop.cancelled() => return Err(StopReason::Stopped),
            _ = tokio::time::sleep_until(deadline) => return Err(StopReason::Deadline),
            off = p.next() => match off {
                Some(off) => Some(off),
                None => return Err(if p.hit_limit() { StopReason::Duration } else { StopReason::Finished }),
            },
        },
    };
    let permit = match sem {
        None => None,
        Some(sem) => tokio::select! {
            biased;
            _ = ctl.stop.cancelled() => return Err(StopReason::Stopped),
            _ = tokio::time::sleep_until(deadline) => return Err(StopReason::Deadline),
            p = Arc::clone(sem).acquire_owned() => Some(p.expect("semaphore never closed")),
        },
    };
    Ok((intended, permit))
}

/// Open loop (or unbounded concurrency): requests released by the pacing thread at
/// their intended times, each in its own task, bounded by the concurrency limit.
#[allow(clippy::too_many_arguments)]
async fn paced(
    ctx: &Arc<RunCtx>,
    tracker: &TaskTracker,
    schedule: Schedule,
    concurrency: u32,
    duration: Option<Duration>,
    ctl: &Control,
    deadline: tokio::time::Instant,
) -> StopReason {
    let open_loop = schedule.is_open_loop();
    let mut pacer =
        open_loop.then(|| pacer::Pacer::start(schedule, ctx.t0, ctx.jobs.len(), duration, Arc::clone(&ctx.stats)));
    let sem = (concurrency > 0).then(|| Arc::new(Semaphore::new(concurrency as usize)));
    for k in 0..ctx.jobs.len() {
        let (intended, permit) = match next_release(&mut pacer, sem.as_ref(), ctl, deadline).await {
            Ok(next) => next,
            Err(reason) => return reason,
        };
        if duration.is_some_and(|d| ctx.t0.elapsed() >= d) {
            return StopReason::Duration;
        }
        if let Some(off) = intended {
            ctx.stats.record_lag(us(ctx.t0.elapsed().saturating_sub(off)));
        }
        let ctx = Arc::clone(ctx);
        tracker.spawn(async move {
            let _permit = permit;
            ctx.one(k, intended).await;
        });
    }
    StopReason::Finished
}

/// The row of a request cancelled at `now` (stop, deadline), `started` after `t0`. All
/// times in u64 / i64 microseconds: a request cancelled after hours keeps its true latency.
fn cancelled_row(
    index: u64,
    intended: Option<Duration>,
    started: Duration,
    (t0, now): (Instant, Instant),
    (input_tokens, input_source): (u32, TokenSource),
) -> Row {
    let mut row = Row {
        input_source: input_source as i32,
        index,
        intended_us: intended.map_or(-1, signed_us),
        start_us: signed_us(started),
        latency_us: us(now.saturating_duration_since(t0).saturating_sub(started)),
        input_tokens,
        ..Default::default()
    };
    row.set_error(ErrorKind::Cancelled);
    row
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::workload as jobs;
    use crate::engine::{EngineError, prepare};
    use surge_proto::Workload;

    const MIN_73: Duration = Duration::from_secs(73 * 60);

    /// A request cancelled 73 minutes after it started (longer than u32 microseconds can
    /// hold, 71.6 min): its row keeps the exact latency, start and intended times. The
    /// engine's clocks are std `Instant`s (tokio's paused clock cannot move them), so the
    /// instants are constructed.
    #[test]
    fn a_request_cancelled_after_73_minutes_keeps_its_exact_latency() {
        let now = Instant::now();
        let Some(t0) = now.checked_sub(MIN_73 + MIN_73 + Duration::from_micros(5)) else {
            return eprintln!("skipped: the monotonic clock is younger than 146 minutes");
        };
        let started = MIN_73 + Duration::from_micros(5);
        let row = cancelled_row(9, Some(MIN_73), started, (t0, now), (16, TokenSource::Tokenizer));
        let expected = 73 * 60 * 1_000_000;
        assert!(expected > u64::from(u32::MAX));
        assert_eq!(row.latency_us, expected);
        assert_eq!((row.start_us, row.intended_us), (expected as i64 + 5, expected as i64));
        assert_eq!((row.error(), row.index, row.input_tokens), (ErrorKind::Cancelled, 9, 16));
        // A clock read before the start (never by construction) gives 0, not a wrap.
        assert_eq!(cancelled_row(0, None, started, (now, t0), (0, TokenSource::Tokenizer)).latency_us, 0);
    }

    #[test]
    fn microseconds_saturate_instead_of_wrapping() {
        assert_eq!(us(MIN_73), 4_380_000_000);
        assert_eq!(signed_us(MIN_73), 4_380_000_000);
        assert_eq!(us(Duration::MAX), u64::MAX);
        assert_eq!(signed_us(Duration::MAX), i64::MAX);
    }

    /// Send lag and timer lateness of hours are recorded as they are (the histograms grow
    /// past their preset hour).
    #[test]
    fn lag_of_73_minutes_is_not_clamped() {
        let stats = Stats::default();
        stats.record_lag(1_000);
        stats.record_lag(us(MIN_73));
        stats.record_wake(us(MIN_73));
        let (lag, wake) = (stats.lag(), stats.wake());
        for max in [lag.max_us, wake.max_us] {
            assert!(max.abs_diff(4_380_000_000) < 4_380_000, "{max}");
        }
    }

    /// No cap on requests, no concurrency limit, no rate: refused before anything starts.
    #[tokio::test]
    async fn an_unbounded_slice_needs_a_bound_on_the_load() {
        let w = Workload {
            base_url: "http://127.0.0.1:9".into(),
            http: surge_proto::HttpChoice::Auto as i32,
            ramp: surge_proto::RampStrategy::None as i32,
            slice_len: jobs::UNBOUNDED,
            max_concurrency: 0,
            request_rate: 0.0,
            ..Default::default()
        };
        assert!(matches!(prepare(w).await, Err(EngineError::Unbounded)));
    }
}
