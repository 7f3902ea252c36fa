//! The result's closed sets (D77): each value a result file can hold for these keys, as an
//! enum that writes the same text as before. A value this version does not know (a newer
//! surge's) reads as `Other` and writes back as `""`. vLLM's naming keys (`backend`,
//! `endpoint_type`, `dataset_name`) stay text: they name the plan's `--backend` and
//! `--dataset-name` (closed sets there) as vLLM writes them, and nothing read back
//! branches on them. `health` holds a lost agent's reason, free text.

use serde::{Deserialize, Serialize};

/// A delay's distribution: `inter_turn_delay_dist`, `tool_latency_dist`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dist {
    Fixed,
    Exponential,
    #[serde(rename = "", other)]
    Other,
}

impl Dist {
    pub fn of(exponential: bool) -> Self {
        if exponential { Self::Exponential } else { Self::Fixed }
    }
}

/// A multi-turn run's `mode` (vllm-bench's key; it has one value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    MultiTurn,
    #[serde(rename = "", other)]
    Other,
}

/// `run_metadata.benchmark_type`: `serve`, the one kind of benchmark surge runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BenchmarkType {
    Serve,
    #[serde(rename = "", other)]
    Other,
}

/// `endpoint_policy` (D69), as `--endpoint-policy` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    RoundRobin,
    Random,
    LeastInFlight,
    Session,
    #[serde(rename = "", other)]
    Other,
}

impl From<surge_proto::EndpointPolicy> for Policy {
    fn from(p: surge_proto::EndpointPolicy) -> Self {
        use surge_proto::EndpointPolicy as P;
        match p {
            P::Unspecified | P::RoundRobin => Self::RoundRobin,
            P::Random => Self::Random,
            P::LeastInFlight => Self::LeastInFlight,
            P::Session => Self::Session,
        }
    }
}

impl Policy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RoundRobin => "round-robin",
            Self::Random => "random",
            Self::LeastInFlight => "least-in-flight",
            Self::Session => "session",
            Self::Other => "",
        }
    }
}

/// `ramp_up_strategy`, vLLM's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ramp {
    Linear,
    Exponential,
    #[serde(rename = "", other)]
    Other,
}

/// `client.latency_mode`: from which send latencies are measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LatencyMode {
    #[serde(rename = "open loop: latencies from the actual send; e2el_including_client_queue from the intended send")]
    OpenLoop,
    #[serde(rename = "closed loop: latencies from the actual send (coordinated omission applies)")]
    ClosedLoop,
    #[serde(rename = "", other)]
    Other,
}

/// How a cut stream ended (D38): `ended` in an error example.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamEnd {
    EmptyBody,
    CleanEnd,
    PeerClosed,
    Reset,
    ReadTimeout,
    #[serde(other)]
    Unknown,
}

impl From<surge_proto::StreamEnd> for StreamEnd {
    fn from(e: surge_proto::StreamEnd) -> Self {
        use surge_proto::StreamEnd as E;
        match e {
            E::EmptyBody => Self::EmptyBody,
            E::CleanEnd => Self::CleanEnd,
            E::PeerClosed => Self::PeerClosed,
            E::Reset => Self::Reset,
            E::ReadTimeout => Self::ReadTimeout,
            E::Unspecified => Self::Unknown,
        }
    }
}

impl StreamEnd {
    /// Who ended a stream that ended this way (as the row's message says it).
    pub fn by(self) -> EndedBy {
        match self {
            Self::ReadTimeout => EndedBy::Client,
            Self::Unknown => EndedBy::Unknown,
            _ => EndedBy::Peer,
        }
    }
}

/// Who ended a cut stream: the peer (the server or a proxy) or surge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndedBy {
    Peer,
    Client,
    #[serde(other)]
    Unknown,
}

/// The HTTP version of a response, as results write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HttpVersion {
    #[serde(rename = "HTTP/1.1")]
    Http11,
    #[serde(rename = "HTTP/2")]
    Http2,
    #[serde(rename = "HTTP/3")]
    Http3,
    #[serde(rename = "", other)]
    Unknown,
}

impl From<surge_proto::HttpVersion> for HttpVersion {
    fn from(v: surge_proto::HttpVersion) -> Self {
        use surge_proto::HttpVersion as V;
        match v {
            V::HttpVersion11 => Self::Http11,
            V::HttpVersion2 => Self::Http2,
            V::HttpVersion3 => Self::Http3,
            V::Unspecified => Self::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each writes the text results have always held, and reads it back; an unknown
    /// value reads as the catch-all.
    #[test]
    fn each_value_keeps_its_text() {
        let text = |v: &dyn erased::Json| v.json();
        assert_eq!(text(&Dist::of(true)), "\"exponential\"");
        assert_eq!(text(&Policy::from(surge_proto::EndpointPolicy::LeastInFlight)), "\"least-in-flight\"");
        assert_eq!(text(&HttpVersion::from(surge_proto::HttpVersion::HttpVersion11)), "\"HTTP/1.1\"");
        assert_eq!(text(&StreamEnd::from(surge_proto::StreamEnd::Unspecified)), "\"unknown\"");
        assert_eq!(text(&StreamEnd::ReadTimeout.by()), "\"client\"");
        assert!(text(&LatencyMode::ClosedLoop).starts_with("\"closed loop: "));
        let read = |s: &str| serde_json::from_str::<Dist>(s).expect("reads");
        assert_eq!(read("\"fixed\""), Dist::Fixed);
        assert_eq!(read("\"a_newer_dist\""), Dist::Other);
        assert_eq!(serde_json::from_str::<Policy>("\"session\"").expect("reads"), Policy::Session);
    }

    mod erased {
        pub trait Json {
            fn json(&self) -> String;
        }
        impl<T: serde::Serialize> Json for T {
            fn json(&self) -> String {
                serde_json::to_string(self).expect("serializes")
            }
        }
    }
}
