//! Where requests go: the base URL parsed and its host resolved once before the run, and
//! the request URI of an endpoint in the form each HTTP version wants.

use std::net::SocketAddr;

/// Where requests go, resolved once before the run.
#[derive(Debug, Clone)]
pub struct Target {
    pub https: bool,
    pub host: String,
    pub port: u16,
    pub addr: SocketAddr,
    /// `host:port` as sent in `Host` / `:authority`.
    pub authority: String,
    /// Path prefix of the base URL (without trailing `/`), prepended to the endpoint.
    pub base_path: String,
}

/// An unusable base URL.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    #[error("base URL {0:?} is not an http:// or https:// URL")]
    Scheme(String),
    #[error("base URL {url:?}: {source}")]
    Uri {
        url: String,
        #[source]
        source: http::uri::InvalidUri,
    },
    #[error("base URL {url:?}: no host")]
    NoHost { url: String },
    /// The host is not a valid TLS server name.
    #[error("base URL {url:?}: {source}")]
    ServerName {
        url: String,
        #[source]
        source: rustls::pki_types::InvalidDnsNameError,
    },
    /// HTTP/3 needs an https:// base URL (QUIC always carries TLS).
    #[error("base URL {0:?}: HTTP/3 needs an https:// URL")]
    H3NeedsHttps(String),
    /// The extra CA certificates (--ca-cert) are not PEM certificates.
    #[error("--ca-cert: {0}")]
    CaCert(String),
    /// The TLS client configuration cannot be built.
    #[error("base URL {url:?}: {source}")]
    Tls {
        url: String,
        #[source]
        source: rustls::Error,
    },
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot resolve {host}: no address")]
    NoAddress { host: String },
}

impl Target {
    /// Parses and resolves `base_url` (e.g. `http://127.0.0.1:8000` or `https://h/v1x`).
    pub async fn resolve(base_url: &str) -> Result<Self, TargetError> {
        let uri: http::Uri = base_url.parse().map_err(|source| TargetError::Uri { url: base_url.into(), source })?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(TargetError::Scheme(base_url.into())),
        };
        let host = uri
            .host()
            .ok_or_else(|| TargetError::NoHost { url: base_url.into() })?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let addr = tokio::net::lookup_host((host.as_str(), port))
            .await
            .map_err(|source| TargetError::Resolve { host: host.clone(), source })?
            .next()
            .ok_or_else(|| TargetError::NoAddress { host: host.clone() })?;
        let authority = uri.authority().map(|a| a.to_string()).unwrap_or_else(|| format!("{host}:{port}"));
        let base_path = uri.path().trim_end_matches('/').to_string();
        Ok(Self { https, host, port, addr, authority, base_path })
    }

    /// The request URI for `endpoint`: origin-form for HTTP/1.1, absolute for HTTP/2.
    pub fn uri(&self, endpoint: &str, absolute: bool) -> http::Uri {
        let path = format!("{}{}", self.base_path, endpoint);
        let s = if absolute {
            format!("{}://{}{}", if self.https { "https" } else { "http" }, self.authority, path)
        } else {
            path
        };
        s.parse().unwrap_or_else(|_| http::Uri::from_static("/"))
    }
}
