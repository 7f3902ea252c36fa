//! The workload read once at the agent's edge: the closed sets (the HTTP version, the ramp
//! and how requests pick a LoRA adapter arrive as protobuf enums) and the numbers whose
//! zero means "none" on the wire (concurrency, rate, duration, timeouts) become the
//! engine's own types (`Option`, `NonZeroU32`, `Duration`). A value this agent does not know (a newer coordinator's), a choice
//! left unset, or a contradiction is refused with the field and the value named, before
//! any connection or request: an agent never runs a load other than the one asked for.

use crate::engine::conn::Version;
use std::num::NonZeroU32;
use std::time::Duration;
use surge_proto::{HttpChoice, LoraPick, RampStrategy, Workload};

/// Why a workload cannot run here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("workload field `{field}`: value {value} is not one this agent knows (a newer coordinator?)")]
    Unknown { field: &'static str, value: i32 },
    #[error("workload field `{field}`: not set")]
    Unset { field: &'static str },
    #[error("workload: {0}")]
    Contradiction(String),
}

/// A ramp's curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RampCurve {
    Linear,
    Exponential,
}

/// The workload as the engine uses it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spec {
    pub http: Version,
    /// `None`: no ramp.
    pub ramp: Option<RampCurve>,
    /// Requests pick an adapter at random (seeded) rather than round-robin.
    pub lora_random: bool,
    /// Requests in flight at most (`None`: no limit).
    pub max_concurrency: Option<NonZeroU32>,
    /// Requests per second of an open loop (`None`: as fast as the concurrency allows).
    pub request_rate: Option<f64>,
    /// How long requests are issued (`None`: until the slice is sent).
    pub duration: Option<Duration>,
    /// With a duration: how long requests in flight at its end may still finish before
    /// they are cancelled (D21; `None`: until the deadline).
    pub graceful_stop: Option<Duration>,
    /// `--read-timeout` (`None`: no limit).
    pub read_timeout: Option<Duration>,
    /// How long not-ready answers to the initial test are retried (zero: the first decides).
    pub ready_timeout: Duration,
    /// `--max-run-time`, bounding each initial test attempt (`None`: not given).
    pub max_run_time: Option<Duration>,
    /// Multiplexed HTTP/3 connections (`None`: one per 100 requests in flight).
    pub h3_connections: Option<NonZeroU32>,
    /// Probe requests per second beside the load (`None`: no probes).
    pub probe_rate: Option<f64>,
}

/// A rate field: zero is "none"; a negative, NaN or infinite value is refused.
fn rate(field: &'static str, v: f64) -> Result<Option<f64>, SpecError> {
    if !(v.is_finite() && v >= 0.0) {
        return Err(SpecError::Contradiction(format!("`{field}` {v}: not a rate")));
    }
    Ok((v > 0.0).then_some(v))
}

/// Milliseconds where zero is "none".
fn millis(v: u64) -> Option<Duration> {
    (v > 0).then(|| Duration::from_millis(v))
}

/// An enum field's value, refused when unknown or unset.
fn known<E>(field: &'static str, value: i32, unset: E) -> Result<E, SpecError>
where
    E: TryFrom<i32> + PartialEq,
{
    let v = E::try_from(value).map_err(|_| SpecError::Unknown { field, value })?;
    if v == unset { Err(SpecError::Unset { field }) } else { Ok(v) }
}

/// A conversations workload: its think time known and set, its turns and ratios sane.
fn multi_turn(w: &Workload, mt: &surge_proto::MultiTurn, ramped: bool) -> Result<(), SpecError> {
    known("multi_turn.think", mt.think, surge_proto::ThinkTime::Unspecified)?;
    let max = surge_proto::MAX_TURNS;
    if mt.turns_min == 0 || mt.turns_min > mt.turns_max || mt.turns_max > max {
        let (lo, hi) = (mt.turns_min, mt.turns_max);
        return Err(SpecError::Contradiction(format!("turns {lo}..={hi}: need 1 <= min <= max <= {max}")));
    }
    let ratios = [mt.prefix_global_ratio, mt.prefix_conversation_ratio];
    if ratios.iter().any(|r| !(0.0..=1.0).contains(r)) || ratios.iter().sum::<f64>() >= 1.0 {
        return Err(SpecError::Contradiction(format!("prefix ratios {ratios:?}: each in [0, 1], their sum below 1")));
    }
    if !(mt.delay_ms.is_finite() && mt.delay_ms >= 0.0) {
        return Err(SpecError::Contradiction(format!("think time {} ms", mt.delay_ms)));
    }
    if ramped {
        return Err(SpecError::Contradiction("a ramp with conversations: the rate of new sessions is fixed".into()));
    }
    if !matches!(w.backend(), surge_proto::Backend::Openai | surge_proto::Backend::OpenaiChat) {
        return Err(SpecError::Contradiction("conversations need a completions or chat backend".into()));
    }
    if let Some(tl) = &mt.tool_loop {
        known("multi_turn.tool_loop.latency", tl.latency, surge_proto::ThinkTime::Unspecified)?;
        if !(tl.latency_ms.is_finite() && tl.latency_ms >= 0.0) || tl.max_steps == 0 {
            let (ms, n) = (tl.latency_ms, tl.max_steps);
            return Err(SpecError::Contradiction(format!(
                "tool loop: latency {ms} ms, {n} steps (need >= 0 and >= 1)"
            )));
        }
        if w.backend() != surge_proto::Backend::OpenaiChat {
            return Err(SpecError::Contradiction("a tool loop needs the chat backend".into()));
        }
    }
    Ok(())
}

/// Reads and checks `w`'s closed sets.
pub fn check(w: &Workload) -> Result<Spec, SpecError> {
    let http = match known("http", w.http, HttpChoice::Unspecified)? {
        HttpChoice::Auto => Version::Auto,
        HttpChoice::Http1 => Version::Http1,
        HttpChoice::Http2 => Version::Http2,
        HttpChoice::Http3 => Version::Http3,
        HttpChoice::Unspecified => return Err(SpecError::Unset { field: "http" }),
    };
    let urls = std::iter::once(&w.base_url).chain(w.endpoints.iter().map(|e| &e.base_url));
    if http == Version::Http3
        && let Some(url) = urls.clone().find(|u| !u.starts_with("https://"))
    {
        return Err(SpecError::Contradiction(format!("HTTP/3 needs an https:// base URL, not {url}")));
    }
    let ramp = match known("ramp", w.ramp, RampStrategy::Unspecified)? {
        RampStrategy::None | RampStrategy::Unspecified => None,
        RampStrategy::Linear => Some(RampCurve::Linear),
        RampStrategy::Exponential => Some(RampCurve::Exponential),
    };
    if let Some(curve) = ramp {
        if w.request_rate > 0.0 {
            return Err(SpecError::Contradiction("a ramp and a request rate: the ramp sets the rate".into()));
        }
        let ok = w.ramp_start_rps.is_finite() && w.ramp_end_rps.is_finite() && w.ramp_start_rps <= w.ramp_end_rps;
        if !ok || (curve == RampCurve::Exponential && w.ramp_start_rps <= 0.0) {
            return Err(SpecError::Contradiction(format!(
                "ramp from {} to {} requests/s",
                w.ramp_start_rps, w.ramp_end_rps
            )));
        }
    }
    let lora_random = if w.lora_modules.is_empty() {
        // Nothing to pick from: the choice, if any, is still read (an unknown value is refused).
        LoraPick::try_from(w.lora_pick).map_err(|_| SpecError::Unknown { field: "lora_pick", value: w.lora_pick })?
            == LoraPick::Random
    } else {
        known("lora_pick", w.lora_pick, LoraPick::Unspecified)? == LoraPick::Random
    };
    let request_rate = rate("request_rate", w.request_rate)?;
    if request_rate.is_some() && !(w.burstiness.is_finite() && w.burstiness > 0.0) {
        return Err(SpecError::Contradiction(format!("`burstiness` {}: must be above 0", w.burstiness)));
    }
    if let Some(mt) = &w.multi_turn {
        multi_turn(w, mt, ramp.is_some())?;
    }
    Ok(Spec {
        http,
        ramp,
        lora_random,
        max_concurrency: NonZeroU32::new(w.max_concurrency),
        request_rate,
        duration: millis(w.duration_ms),
        graceful_stop: w.graceful_stop_ms.filter(|_| w.duration_ms > 0).map(Duration::from_millis),
        read_timeout: millis(w.read_timeout_ms),
        ready_timeout: Duration::from_millis(w.ready_timeout_ms),
        max_run_time: millis(w.max_run_time_ms),
        h3_connections: NonZeroU32::new(w.h3_connections),
        probe_rate: rate("probe_rate", w.probe_rate)?,
    })
}

/// The wire's choice of a [`Version`] (the coordinator's side of [`check`]).
pub fn http_choice(v: Version) -> HttpChoice {
    match v {
        Version::Auto => HttpChoice::Auto,
        Version::Http1 => HttpChoice::Http1,
        Version::Http2 => HttpChoice::Http2,
        Version::Http3 => HttpChoice::Http3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload() -> Workload {
        Workload {
            base_url: "http://127.0.0.1:1".into(),
            http: HttpChoice::Auto as i32,
            ramp: RampStrategy::None as i32,
            ..Default::default()
        }
    }

    #[test]
    fn known_values_become_the_engines_types() {
        let mut w = workload();
        w.http = HttpChoice::Http2 as i32;
        w.ramp = RampStrategy::Exponential as i32;
        w.ramp_start_rps = 1.0;
        w.ramp_end_rps = 4.0;
        w.lora_modules = vec!["a".into()];
        w.lora_pick = LoraPick::Random as i32;
        w.max_concurrency = 8;
        w.duration_ms = 1500;
        let s = check(&w).unwrap();
        assert_eq!((s.http, s.ramp, s.lora_random), (Version::Http2, Some(RampCurve::Exponential), true));
        assert_eq!((s.max_concurrency, s.duration), (NonZeroU32::new(8), Some(Duration::from_millis(1500))));
        assert_eq!((s.request_rate, s.read_timeout, s.probe_rate, s.h3_connections), (None, None, None, None));
        for v in [Version::Auto, Version::Http1, Version::Http2] {
            let w = Workload { http: http_choice(v) as i32, ..workload() };
            assert_eq!(check(&w).map(|s| s.http), Ok(v));
        }
    }

    #[test]
    fn an_unknown_value_is_refused_naming_the_field_and_the_value() {
        let w = Workload { http: 9, ..workload() };
        let e = check(&w).unwrap_err();
        assert_eq!(e, SpecError::Unknown { field: "http", value: 9 });
        assert_eq!(e.to_string(), "workload field `http`: value 9 is not one this agent knows (a newer coordinator?)");
        assert_eq!(check(&Workload { ramp: 7, ..workload() }), Err(SpecError::Unknown { field: "ramp", value: 7 }));
        assert_eq!(
            check(&Workload { lora_pick: 5, ..workload() }),
            Err(SpecError::Unknown { field: "lora_pick", value: 5 })
        );
    }

    #[test]
    fn unset_choices_and_contradictions_are_refused() {
        assert_eq!(check(&Workload { http: 0, ..workload() }), Err(SpecError::Unset { field: "http" }));
        assert_eq!(check(&Workload { ramp: 0, ..workload() }), Err(SpecError::Unset { field: "ramp" }));
        let w = Workload { lora_modules: vec!["a".into()], ..workload() };
        assert_eq!(check(&w), Err(SpecError::Unset { field: "lora_pick" }));
        let w = Workload { http: HttpChoice::Http3 as i32, ..workload() };
        assert!(matches!(check(&w), Err(SpecError::Contradiction(_))));
        let w = Workload { ramp: RampStrategy::Linear as i32, request_rate: 5.0, ramp_end_rps: 2.0, ..workload() };
        assert!(matches!(check(&w), Err(SpecError::Contradiction(_))));
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            let w = Workload { request_rate: bad, burstiness: 1.0, ..workload() };
            assert!(matches!(check(&w), Err(SpecError::Contradiction(_))), "rate {bad}");
        }
        let w = Workload { request_rate: 10.0, burstiness: 0.0, ..workload() };
        assert!(matches!(check(&w), Err(SpecError::Contradiction(m)) if m.contains("burstiness")));
    }

    #[test]
    fn conversations_are_checked() {
        use surge_proto::{MultiTurn, ThinkTime};
        let good = MultiTurn { turns_min: 2, turns_max: 4, think: ThinkTime::Fixed as i32, ..Default::default() };
        let w = |mt: MultiTurn| Workload {
            multi_turn: Some(mt),
            backend: surge_proto::Backend::OpenaiChat as i32,
            ..workload()
        };
        assert!(check(&w(good.clone())).is_ok());
        let unset = MultiTurn { think: 0, ..good.clone() };
        assert_eq!(check(&w(unset)), Err(SpecError::Unset { field: "multi_turn.think" }));
        for bad in [
            MultiTurn { turns_min: 0, ..good.clone() },
            MultiTurn { turns_min: 5, ..good.clone() },
            MultiTurn { turns_max: 1001, ..good.clone() },
            MultiTurn { prefix_global_ratio: 0.6, prefix_conversation_ratio: 0.4, ..good.clone() },
            MultiTurn { delay_ms: f64::NAN, ..good.clone() },
        ] {
            assert!(matches!(check(&w(bad.clone())), Err(SpecError::Contradiction(_))), "{bad:?}");
        }
        let ramped = Workload { ramp: RampStrategy::Linear as i32, ramp_end_rps: 2.0, ..w(good.clone()) };
        assert!(matches!(check(&ramped), Err(SpecError::Contradiction(m)) if m.contains("ramp")));
        let plain = Workload { backend: surge_proto::Backend::Http as i32, ..w(good) };
        assert!(matches!(check(&plain), Err(SpecError::Contradiction(m)) if m.contains("backend")));
    }
}
