//! `surge certs`: a private CA and the certificates it signs for coordinator <-> agent
//! mutual TLS. Each issued certificate is valid for both client and server use, so the
//! same one serves a coordinator or an agent. Private keys are written with mode 0600.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// A certificate operation that failed, naming the file or the value: a usage error (a
/// flag's value that cannot be used) or a failure (a file that cannot be written).
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Failed(String),
}

/// What `init` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Init {
    Made,
    /// The directory already held a CA: kept, so what it signed stays valid.
    Kept,
}

fn write_file(path: &Path, data: &str, mode: u32) -> Result<(), CertError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(|e| CertError::Failed(format!("{}: {e}", path.display())))?;
    // An existing file keeps its old mode on open: set it explicitly.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| CertError::Failed(format!("{}: {e}", path.display())))?;
    f.write_all(data.as_bytes()).map_err(|e| CertError::Failed(format!("{}: {e}", path.display())))
}

fn mkdir(dir: &Path) -> Result<(), CertError> {
    std::fs::create_dir_all(dir).map_err(|e| CertError::Usage(format!("--out {}: {e}", dir.display())))
}

/// Writes `out/ca.pem` and `out/ca.key`, unless `out` holds both already (a CA made
/// again would void every certificate the old one signed): they are kept. One without
/// the other is refused.
pub fn init(out: &Path) -> Result<Init, CertError> {
    let (pem, key) = (out.join("ca.pem"), out.join("ca.key"));
    match (pem.exists(), key.exists()) {
        (true, true) => {
            let text = |p: &Path| {
                std::fs::read_to_string(p).map_err(|e| CertError::Usage(format!("--out {}: {e}", p.display())))
            };
            let k = KeyPair::from_pem(&text(&key)?)
                .map_err(|e| CertError::Usage(format!("--out {}: not a CA's key: {e}", key.display())))?;
            Issuer::from_ca_cert_pem(&text(&pem)?, k)
                .map_err(|e| CertError::Usage(format!("--out {}: not a CA's certificate: {e}", pem.display())))?;
            // The key must be the certificate's, or what `issue` signs would not verify.
            surge_core::transport::identity::read(&pem, &pem, &key)
                .map_err(|e| CertError::Usage(format!("--out {}: not a CA: {}", out.display(), e.message)))?;
            return Ok(Init::Kept);
        }
        (true, false) | (false, true) => {
            return Err(CertError::Usage(format!(
                "--out {}: holds one of ca.pem and ca.key without the other; remove it or choose another directory",
                out.display()
            )));
        }
        (false, false) => {}
    }
    mkdir(out)?;
    let key = KeyPair::generate().map_err(|e| CertError::Failed(format!("key generation: {e}")))?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "surge CA");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params.not_after = rcgen::date_time_ymd(2036, 1, 1);
    let cert = params.self_signed(&key).map_err(|e| CertError::Failed(format!("CA certificate: {e}")))?;
    write_file(&out.join("ca.pem"), &cert.pem(), 0o644)?;
    write_file(&out.join("ca.key"), &key.serialize_pem(), 0o600)?;
    Ok(Init::Made)
}

/// Writes `out/NAME.pem` and `out/NAME.key`, signed by the CA in `ca_dir`.
pub fn issue(ca_dir: &Path, name: &str, sans: &[String], out: &Path) -> Result<(), CertError> {
    if name.is_empty() || name.contains(['/', '\0']) || name.starts_with('.') {
        return Err(CertError::Usage(format!("--name {name:?}: must be a plain file name")));
    }
    if name.eq_ignore_ascii_case("ca") {
        return Err(CertError::Usage("--name ca: ca.pem and ca.key are the CA's own files".into()));
    }
    let read = |f: &str| {
        let p = ca_dir.join(f);
        std::fs::read_to_string(&p).map_err(|e| CertError::Usage(format!("--ca {}: {e}", p.display())))
    };
    let ca_key = KeyPair::from_pem(&read("ca.key")?).map_err(|e| CertError::Usage(format!("--ca ca.key: {e}")))?;
    let issuer = Issuer::from_ca_cert_pem(&read("ca.pem")?, ca_key)
        .map_err(|e| CertError::Usage(format!("--ca ca.pem: {e}")))?;
    mkdir(out)?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    let mut all_sans: Vec<String> = sans.to_vec();
    if all_sans.is_empty() {
        all_sans.push(name.to_string());
    }
    for s in &all_sans {
        let bad = |why: String| CertError::Usage(format!("--san {s:?}: {why}"));
        let san = match s.parse::<std::net::IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => {
                // A host name as TLS checks it (letters, digits, '-' and dots), after a
                // wildcard's `*.`, which webpki matches.
                rustls::pki_types::DnsName::try_from(s.strip_prefix("*.").unwrap_or(s))
                    .map_err(|_| bad("not a host name or an IP address".into()))?;
                SanType::DnsName(s.clone().try_into().map_err(|e| bad(format!("{e}")))?)
            }
        };
        params.subject_alt_names.push(san);
    }
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    params.not_after = rcgen::date_time_ymd(2035, 1, 1);
    let key = KeyPair::generate().map_err(|e| CertError::Failed(format!("key generation: {e}")))?;
    let cert = params.signed_by(&key, &issuer).map_err(|e| CertError::Failed(format!("signing: {e}")))?;
    write_file(&out.join(format!("{name}.pem")), &cert.pem(), 0o644)?;
    write_file(&out.join(format!("{name}.key")), &key.serialize_pem(), 0o600)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn init_and_issue_write_pem_files_with_private_keys_0600() {
        let dir = std::env::temp_dir().join(format!("surge-certs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(init(&dir).unwrap(), Init::Made);
        let ca = std::fs::read(dir.join("ca.pem")).unwrap();
        // Made again: the CA is kept, so what it signed stays valid.
        assert_eq!(init(&dir).unwrap(), Init::Kept);
        assert_eq!(std::fs::read(dir.join("ca.pem")).unwrap(), ca);
        issue(&dir, "agent1", &["127.0.0.2".into(), "agent1.local".into()], &dir).unwrap();
        for f in ["ca.key", "agent1.key"] {
            let mode = std::fs::metadata(dir.join(f)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{f}");
        }
        assert!(std::fs::read_to_string(dir.join("agent1.pem")).unwrap().starts_with("-----BEGIN CERTIFICATE-----"));
        let usage = |e: CertError| match e {
            CertError::Usage(m) => m,
            CertError::Failed(m) => panic!("a failure, not a usage error: {m}"),
        };
        assert!(usage(issue(&dir.join("missing"), "x", &[], &dir).unwrap_err()).contains("--ca"));
        issue(&dir, "wild", &["*.agents.internal".into()], &dir).expect("a wildcard name is one");
        for name in ["", "../evil", "ca", "CA", ".hidden"] {
            assert!(usage(issue(&dir, name, &[], &dir).unwrap_err()).contains("--name"), "{name}");
        }
        for san in ["bad host!", "", "*."] {
            assert!(usage(issue(&dir, "x", &[san.into()], &dir).unwrap_err()).contains("--san"), "{san}");
        }
        assert_eq!(std::fs::read(dir.join("ca.pem")).unwrap(), ca, "the CA is untouched");
        std::fs::remove_file(dir.join("ca.key")).unwrap();
        assert!(usage(init(&dir).unwrap_err()).contains("without the other"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
