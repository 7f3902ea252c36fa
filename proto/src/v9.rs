//! Protocol 9, the version before this one (D43): what differs on its wire, and the
//! conversions both ways, kept in one place so that the coordinator (which writes a
//! version 9 Prepare and reads a version 9 Done) and the agent's emulation of a version 9
//! peer (which does the opposite) cannot drift apart.
//!
//! Version 10 replaced four text or number fields by enums (`Workload.http`, `ramp`,
//! `lora_pick`, `Done.stop`); every other field it added has a default that means what
//! version 9 did. An agent of version 9 reads only the old fields, and does not know
//! `Workload.multi_turn`, `Workload.graceful_stop_ms` or the `Probe` message.

use crate::{Done, HttpChoice, LoraPick, RampStrategy, StopReason, Workload};

/// The protocol version this module speaks.
pub const VERSION: u32 = 9;

/// Writes a version 10 workload's enums into the fields a version 9 agent reads.
pub fn encode_workload(w: &mut Workload) {
    w.v9_http_version = match w.http() {
        HttpChoice::Unspecified | HttpChoice::Auto => 0,
        HttpChoice::Http1 => 1,
        HttpChoice::Http2 => 2,
        HttpChoice::Http3 => 3,
    };
    w.v9_ramp_strategy = match w.ramp() {
        RampStrategy::Unspecified | RampStrategy::None => "",
        RampStrategy::Linear => "linear",
        RampStrategy::Exponential => "exponential",
    }
    .to_string();
    w.v9_lora_assignment = match w.lora_pick() {
        LoraPick::Unspecified => "",
        LoraPick::RoundRobin => "round-robin",
        LoraPick::Random => "random",
    }
    .to_string();
}

/// Reads a workload as a version 9 agent does: the old fields only; what version 10
/// added is unknown to it. An unknown old value is returned as the error (version 9
/// refused it too).
pub fn decode_workload(w: &mut Workload) -> Result<(), String> {
    let http = match w.v9_http_version {
        0 => HttpChoice::Auto,
        1 => HttpChoice::Http1,
        2 => HttpChoice::Http2,
        3 => HttpChoice::Http3,
        n => return Err(format!("http_version {n} is not 0, 1, 2 or 3")),
    };
    let ramp = match w.v9_ramp_strategy.as_str() {
        "" => RampStrategy::None,
        "linear" => RampStrategy::Linear,
        "exponential" => RampStrategy::Exponential,
        s => return Err(format!("ramp_strategy {s:?} is not linear or exponential")),
    };
    let lora = match w.v9_lora_assignment.as_str() {
        "" | "round-robin" => LoraPick::RoundRobin,
        "random" => LoraPick::Random,
        s => return Err(format!("lora_assignment {s:?} is not round-robin or random")),
    };
    w.set_http(http);
    w.set_ramp(ramp);
    w.set_lora_pick(lora);
    w.multi_turn = None;
    w.graceful_stop_ms = None;
    Ok(())
}

/// Every reason an agent stops for (all but unspecified).
const STOPS: [StopReason; 7] = [
    StopReason::Finished,
    StopReason::Duration,
    StopReason::Stopped,
    StopReason::Deadline,
    StopReason::Lease,
    StopReason::Signal,
    StopReason::CoordinatorGone,
];

/// Version 9's words for why an agent stopped.
fn stop_word(s: StopReason) -> &'static str {
    match s {
        StopReason::Unspecified | StopReason::Finished => "finished",
        StopReason::Duration => "duration",
        StopReason::Stopped => "stopped",
        StopReason::Deadline => "deadline",
        StopReason::Lease => "lease",
        StopReason::Signal => "signal",
        StopReason::CoordinatorGone => "coordinator gone",
    }
}

/// Writes a Done as a version 9 agent does: the reason as text, `stop` unset.
pub fn encode_done(d: &mut Done) {
    d.failed += d.cancelled;
    d.cancelled = 0;
    d.v9_stop_reason = stop_word(d.stop()).to_string();
    d.set_stop(StopReason::Unspecified);
}

/// Reads a version 9 agent's Done: its text reason into `stop` (an unknown word stays
/// unspecified, which the coordinator reports as such).
pub fn decode_done(d: &mut Done) {
    let stop = STOPS.into_iter().find(|s| stop_word(*s) == d.v9_stop_reason).unwrap_or(StopReason::Unspecified);
    d.set_stop(stop);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_survives_the_trip_through_version_9() {
        for (http, ramp, lora) in [
            (HttpChoice::Auto, RampStrategy::None, LoraPick::RoundRobin),
            (HttpChoice::Http1, RampStrategy::Linear, LoraPick::Random),
            (HttpChoice::Http2, RampStrategy::Exponential, LoraPick::RoundRobin),
            (HttpChoice::Http3, RampStrategy::None, LoraPick::Random),
        ] {
            let mut w = Workload::default();
            w.set_http(http);
            w.set_ramp(ramp);
            w.set_lora_pick(lora);
            w.graceful_stop_ms = Some(1000);
            encode_workload(&mut w);
            // What a version 9 agent sees: the old fields, not the enums.
            let mut seen = Workload {
                v9_http_version: w.v9_http_version,
                v9_ramp_strategy: w.v9_ramp_strategy.clone(),
                v9_lora_assignment: w.v9_lora_assignment.clone(),
                graceful_stop_ms: w.graceful_stop_ms,
                ..Default::default()
            };
            decode_workload(&mut seen).unwrap();
            assert_eq!((seen.http(), seen.ramp(), seen.lora_pick()), (http, ramp, lora));
            assert_eq!(seen.graceful_stop_ms, None, "version 9 has no graceful stop");
        }
        let mut bad = Workload { v9_http_version: 7, ..Default::default() };
        assert!(decode_workload(&mut bad).unwrap_err().contains("http_version 7"));
    }

    #[test]
    fn every_stop_reason_survives_the_trip_through_version_9() {
        for s in STOPS {
            let mut d = Done::default();
            d.set_stop(s);
            encode_done(&mut d);
            assert_eq!(d.stop(), StopReason::Unspecified);
            decode_done(&mut d);
            assert_eq!(d.stop(), s);
        }
    }
}
