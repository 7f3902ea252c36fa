//! Which targets an agent may load: hosts, `host:port` pairs and CIDR blocks from its
//! configuration. `*` allows everything (the embedded agent of a local run uses it).
//! A base URL whose host is a name is allowed by the name itself or, after resolution,
//! by any CIDR containing one of its addresses.

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

/// An entry that is neither a host, a `host:port` nor a CIDR.
#[derive(Debug, thiserror::Error)]
#[error("allowed-targets entry {0:?} is not a host, host:port or CIDR")]
pub struct AllowlistError(pub String);

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
                    Some((h, p)) => (h, Some(p.parse::<u16>().map_err(|_| AllowlistError(s.into()))?)),
                    None => (s, None),
                };
                let valid = !host.is_empty()
                    && host.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_');
                if !valid {
                    return Err(AllowlistError(s.into()));
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
    }
}
