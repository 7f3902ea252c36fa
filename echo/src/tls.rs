//! `--tls-self-signed`: a private CA and a certificate it signs for `localhost`,
//! `127.0.0.1`, `::1` and the listen address, made at start (nothing read from disk),
//! and the rustls server configuration serving it. The CA certificate can be written
//! out (`--tls-cert-out`) for a client's `--ca-cert`.

use std::net::IpAddr;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// The server's certificate chain and key, and the CA's certificate (PEM).
pub(crate) struct SelfSigned {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    pub ca_pem: String,
}

/// Makes the CA and the server certificate for `listen_ip` (and the loopback names).
pub(crate) fn self_signed(listen_ip: IpAddr) -> Result<SelfSigned, rcgen::Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(rcgen::DnType::CommonName, "surge echo local CA");
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
    if !listen_ip.is_unspecified() && !listen_ip.is_loopback() {
        names.push(listen_ip.to_string());
    }
    let key = KeyPair::generate()?;
    let leaf = CertificateParams::new(names)?.signed_by(&key, &issuer)?;
    Ok(SelfSigned {
        chain: vec![leaf.der().clone()],
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        ca_pem: ca_cert.pem(),
    })
}

/// A rustls server configuration for `certs` offering `alpn`.
pub(crate) fn server_config(certs: &SelfSigned, alpn: &[&[u8]]) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs.chain.clone(), certs.key.clone_key())?;
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(cfg))
}
