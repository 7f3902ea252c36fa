//! URLs and hosts given on the command line: an http(s) URL must name a host, and a port,
//! when it gives one, must be one (`http::Uri` keeps `:99999` as text and a client then
//! dials the scheme's port instead).

/// `url` parsed, if it is http(s) with a host and, when it names a port, a port from 1 to
/// 65535.
pub fn http(url: &str) -> Option<http::Uri> {
    let u = url.parse::<http::Uri>().ok()?;
    if !matches!(u.scheme_str(), Some("http" | "https")) || u.host().is_none_or(str::is_empty) {
        return None;
    }
    let authority = u.authority()?.as_str();
    let host_port = authority.rsplit('@').next().unwrap_or(authority);
    // After an IPv6 literal's `]`, or after the host's first `:`.
    let after_host = match host_port.rfind(']') {
        Some(end) => &host_port[end + 1..],
        None => host_port.find(':').map_or("", |i| &host_port[i..]),
    };
    if !after_host.is_empty() {
        match after_host.strip_prefix(':')?.parse::<u16>() {
            Ok(p) if p > 0 => {}
            _ => return None,
        }
    }
    Some(u)
}

/// vLLM's `http://{host}:{port}` from `--host` and `--port` (an IPv6 address bracketed,
/// given with its brackets or without); `None` when that is not a URL [`http`] takes, or
/// the host holds a character a host cannot.
pub fn from_host(host: &str, port: u16) -> Option<String> {
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    if bare.is_empty() || bare.contains(['/', '?', '#', '@', ' ', '[', ']']) || port == 0 {
        return None;
    }
    let url = if bare.contains(':') { format!("http://[{bare}]:{port}") } else { format!("http://{bare}:{port}") };
    http(&url).map(|_| url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_that_is_not_one_is_refused() {
        for good in [
            "http://127.0.0.1:8000",
            "https://h/v1",
            "http://h:1/x?y=1",
            "http://[::1]:8000",
            "http://[::1]",
            "http://u:p@h:80",
            "http://h:65535",
        ] {
            assert!(http(good).is_some(), "{good}");
        }
        for bad in [
            "http://127.0.0.1:99999",
            "http://127.0.0.1:65536",
            "http://127.0.0.1:-1",
            "http://127.0.0.1:abc",
            "http://127.0.0.1:",
            "http://127.0.0.1:0",
            "http://[::1]:x",
            "ftp://h:1",
            "h:1",
            "",
        ] {
            assert!(http(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn a_host_and_port_make_vllms_url() {
        assert_eq!(from_host("127.0.0.1", 8000).as_deref(), Some("http://127.0.0.1:8000"));
        assert_eq!(from_host("::1", 8000).as_deref(), Some("http://[::1]:8000"));
        assert_eq!(from_host("[::1]", 8000).as_deref(), Some("http://[::1]:8000"));
        for bad in ["", "127.0.0.1/x", "127.0.0.1?x", "a b", "u@h", "a\"b", "[]"] {
            assert_eq!(from_host(bad, 8000), None, "{bad}");
        }
        assert_eq!(from_host("h", 0), None);
    }
}
