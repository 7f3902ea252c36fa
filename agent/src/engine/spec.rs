//! The workload's closed sets, read once at the agent's edge: the HTTP version, the ramp
//! and how requests pick a LoRA adapter arrive as protobuf enums, and here they become the
//! engine's own types. A value this agent does not know (a newer coordinator's), a choice
//! left unset, or a contradiction is refused with the field and the value named, before
//! any connection or request: an agent never runs a load other than the one asked for.

use super::conn::Version;
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

/// The workload's closed sets as the engine uses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    pub http: Version,
    /// `None`: no ramp.
    pub ramp: Option<RampCurve>,
    /// Requests pick an adapter at random (seeded) rather than round-robin.
    pub lora_random: bool,
}

/// An enum field's value, refused when unknown or unset.
fn known<E: TryFrom<i32>>(field: &'static str, value: i32, unset: E) -> Result<E, SpecError>
where
    E: PartialEq,
{
    let v = E::try_from(value).map_err(|_| SpecError::Unknown { field, value })?;
    if v == unset { Err(SpecError::Unset { field }) } else { Ok(v) }
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
    if http == Version::Http3 && !w.base_url.starts_with("https://") {
        return Err(SpecError::Contradiction(format!("HTTP/3 needs an https:// base URL, not {}", w.base_url)));
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
    Ok(Spec { http, ramp, lora_random })
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
        assert_eq!(check(&w), Ok(Spec { http: Version::Http2, ramp: Some(RampCurve::Exponential), lora_random: true }));
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
    }
}
