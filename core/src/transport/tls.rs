//! The target's TLS: which certificates are trusted (the Mozilla roots plus `--ca-cert`, or
//! any with `--insecure`) and the client configuration each HTTP version needs (its ALPN;
//! TLS 1.3 only under QUIC).

use super::conn::Version;
use super::target::TargetError;
use std::sync::Arc;

/// How the target's certificate is checked.
#[derive(Debug, Clone, Default)]
pub struct TargetTls {
    /// Do not verify it (vLLM's `--insecure`).
    pub insecure: bool,
    /// Roots trusted besides the Mozilla ones (PEM; `--ca-cert`).
    pub ca_pem: Vec<u8>,
}

impl TargetTls {
    /// A workload's target TLS settings (`target_insecure`, `target_ca_pem`).
    pub fn of(w: &surge_proto::Workload) -> Self {
        Self { insecure: w.target_insecure, ca_pem: w.target_ca_pem.clone() }
    }
}

impl TargetTls {
    /// The roots a certificate is verified against: the Mozilla ones and `ca_pem`'s.
    fn roots(&self) -> Result<rustls::RootCertStore, TargetError> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        let mut pem = self.ca_pem.as_slice();
        for cert in rustls_pemfile::certs(&mut pem) {
            let cert = cert.map_err(|e| TargetError::CaCert(e.to_string()))?;
            roots.add(cert).map_err(|e| TargetError::CaCert(e.to_string()))?;
        }
        Ok(roots)
    }

    /// The client configuration for `host` over `version`.
    pub fn client_config(&self, host: &str, version: Version) -> Result<rustls::ClientConfig, TargetError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let err = |source| TargetError::Tls { url: host.to_string(), source };
        let versions: &[&rustls::SupportedProtocolVersion] =
            if version == Version::Http3 { &[&rustls::version::TLS13] } else { rustls::DEFAULT_VERSIONS };
        let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(versions)
            .map_err(err)?;
        let mut cfg = if self.insecure {
            builder.dangerous().with_custom_certificate_verifier(Arc::new(NoVerify(provider))).with_no_client_auth()
        } else {
            builder.with_root_certificates(self.roots()?).with_no_client_auth()
        };
        cfg.alpn_protocols = match version {
            Version::Auto => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            Version::Http1 => vec![b"http/1.1".to_vec()],
            Version::Http2 => vec![b"h2".to_vec()],
            Version::Http3 => vec![b"h3".to_vec()],
        };
        Ok(cfg)
    }
}

/// Accepts any certificate (vLLM's `--insecure`), still checking the handshake's
/// signatures with the provider's algorithms.
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
