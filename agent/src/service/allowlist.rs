//! Which targets an agent may load: hosts, `host:port` pairs and CIDR blocks from its
//! configuration. `*` allows everything (the embedded agent of a local run uses it).
//! A base URL whose host is a name is allowed by the name itself or, after resolution,
//! by any CIDR containing one of its addresses ([`Allowlist::check`]).

use ipnet::IpNet;
use std::net::IpAddr;

/// One allowlist entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Any,
    Net(IpNet),
    Host { host: String, port: Option<u16> },
}

/// The parsed `allowed-targets` list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist {
    entries: Vec<Entry>,
    raw: Vec<String>,
}

/// An `allowed-targets` entry that cannot be parsed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AllowlistError {
    /// Neither a host, a `host:port` nor a CIDR.
    #[error("allowed-targets entry {0:?} is not a host, host:port or CIDR")]
    Entry(String),
    /// `host:port` with a port that is not a number from 0 to 65535.
    #[error("allowed-targets entry {entry:?} is not a host, host:port or CIDR")]
    Port {
        entry: String,
        #[source]
        source: std::num::ParseIntError,
    },
}

/// Why a base URL is refused (sent to the coordinator as `TargetNotAllowed`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    #[error("base URL {url:?}: {source}")]
    Uri {
        url: String,
        #[source]
        source: http::uri::InvalidUri,
    },
    #[error("base URL {url:?} has no host")]
    NoHost { url: String },
    /// `allowed` is the configured list, or a hint when it is empty.
    #[error("target {host}:{port} is not in this agent's allowlist ({allowed})")]
    NotAllowed { host: String, port: u16, allowed: String },
}

impl Allowlist {
    /// Parses entries such as `10.0.0.0/8`, `llm.internal`, `llm.internal:8000`, `::1`, `*`.
    pub fn parse<S: AsRef<str>>(items: &[S]) -> Result<Self, AllowlistError> {
        let mut entries = Vec::new();
        for item in items {
            let s = item.as_ref().trim();
            let entry = if s == "*" {
                Entry::Any
            } else if let Ok(net) = s.parse::<IpNet>() {
                Entry::Net(net)
            } else if let Ok(ip) = s.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
                Entry::Net(IpNet::from(ip))
            } else if let Ok(sa) = s.parse::<std::net::SocketAddr>() {
                Entry::Host { host: sa.ip().to_string(), port: Some(sa.port()) }
            } else {
                let (host, port) = match s.rsplit_once(':') {
                    Some((h, p)) => {
                        (h, Some(p.parse::<u16>().map_err(|source| AllowlistError::Port { entry: s.into(), source })?))
                    }
                    None => (s, None),
                };
                let valid = !host.is_empty()
                    && host.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_');
                if !valid {
                    return Err(AllowlistError::Entry(s.into()));
                }
                Entry::Host { host: host.to_ascii_lowercase(), port }
            };
            entries.push(entry);
        }
        Ok(Self { entries, raw: items.iter().map(|s| s.as_ref().trim().to_string()).collect() })
    }

    /// Everything allowed.
    pub fn any() -> Self {
        Self { entries: vec![Entry::Any], raw: vec!["*".into()] }
    }

    /// The entries as configured (sent to coordinators in Hello).
    pub fn raw(&self) -> &[String] {
        &self.raw
    }

    /// Whether `base_url` may be loaded: its host as written, or (for CIDR entries) the
    /// addresses it resolves to. A name that does not resolve is judged by name alone.
    pub async fn check(&self, base_url: &str) -> Result<(), Refused> {
        let uri: http::Uri = base_url.parse().map_err(|source| Refused::Uri { url: base_url.into(), source })?;
        let host = uri.host().ok_or_else(|| Refused::NoHost { url: base_url.into() })?;
        let port = uri.port_u16().unwrap_or(if uri.scheme_str() == Some("https") { 443 } else { 80 });
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<IpAddr> = match tokio::net::lookup_host((bare, port)).await {
            Ok(it) => it.map(|a| a.ip()).collect(),
            Err(_) => Vec::new(),
        };
        if self.allows(host, port, &addrs) {
            return Ok(());
        }
        let allowed = if self.raw.is_empty() { "empty: set allowed-targets".to_string() } else { self.raw.join(", ") };
        Err(Refused::NotAllowed { host: host.to_string(), port, allowed })
    }

    /// Whether `host:port` (with its resolved addresses) may be loaded.
    pub fn allows(&self, host: &str, port: u16, addrs: &[IpAddr]) -> bool {
        let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        let literal = host.parse::<IpAddr>().ok();
        self.entries.iter().any(|e| match e {
            Entry::Any => true,
            Entry::Net(net) => literal.map_or_else(|| addrs.iter().any(|a| net.contains(a)), |ip| net.contains(&ip)),
            Entry::Host { host: h, port: p } => {
                let host_matches = *h == host || literal.is_some_and(|ip| h.parse::<IpAddr>() == Ok(ip));
                host_matches && p.is_none_or(|p| p == port)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_ports_and_cidrs() {
        let a = Allowlist::parse(&["127.0.0.0/8", "llm.internal:8000", "other", "::1"]).unwrap();
        let lo: IpAddr = "127.0.0.5".parse().unwrap();
        assert!(a.allows("127.0.0.5", 1, &[]));
        assert!(a.allows("localhost", 80, &[lo]));
        assert!(a.allows("llm.internal", 8000, &[]));
        assert!(!a.allows("llm.internal", 8001, &[]));
        assert!(a.allows("OTHER", 9, &[]));
        assert!(a.allows("[::1]", 9, &[]));
        assert!(!a.allows("10.0.0.1", 80, &[]));
        assert!(!a.allows("evil.example", 80, &["8.8.8.8".parse().unwrap()]));
    }

    #[test]
    fn bad_entries_are_refused() {
        assert!(Allowlist::parse(&["10.0.0.0/33"]).is_err());
        assert!(Allowlist::parse(&["host:notaport"]).is_err());
        assert!(Allowlist::parse(&["a b"]).is_err());
        assert!(Allowlist::parse(&["*"]).unwrap().allows("x", 1, &[]));
        assert!(!Allowlist::default().allows("127.0.0.1", 1, &[]));
        assert!(matches!(Allowlist::parse(&["h:99999"]), Err(AllowlistError::Port { .. })));
    }

    #[tokio::test]
    async fn base_urls_are_checked_and_refusals_name_the_list() {
        let a = Allowlist::parse(&["127.0.0.1"]).unwrap();
        assert!(a.check("http://127.0.0.1:8000/v1").await.is_ok());
        let e = a.check("http://10.1.2.3:8000").await.unwrap_err();
        assert_eq!(e.to_string(), "target 10.1.2.3:8000 is not in this agent's allowlist (127.0.0.1)");
        let e = Allowlist::default().check("https://10.1.2.3").await.unwrap_err();
        assert!(e.to_string().ends_with("10.1.2.3:443 is not in this agent's allowlist (empty: set allowed-targets)"));
        assert!(matches!(a.check("/no/host").await, Err(Refused::NoHost { .. })));
    }
}
