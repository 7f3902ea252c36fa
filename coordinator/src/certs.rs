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

/// A certificate operation that failed, naming the file or the value.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CertError(pub String);

fn write_file(path: &Path, data: &str, mode: u32) -> Result<(), CertError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(|e| CertError(format!("{}: {e}", path.display())))?;
    // An existing file keeps its old mode on open: set it explicitly.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| CertError(format!("{}: {e}", path.display())))?;
    f.write_all(data.as_bytes()).map_err(|e| CertError(format!("{}: {e}", path.display())))
}

fn mkdir(dir: &Path) -> Result<(), CertError> {
    std::fs::create_dir_all(dir).map_err(|e| CertError(format!("--out {}: {e}", dir.display())))
}

/// Writes `out/ca.pem` and `out/ca.key`.
pub fn init(out: &Path) -> Result<(), CertError> {
    mkdir(out)?;
    let key = KeyPair::generate().map_err(|e| CertError(format!("key generation: {e}")))?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "surge CA");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params.not_after = rcgen::date_time_ymd(2036, 1, 1);
    let cert = params.self_signed(&key).map_err(|e| CertError(format!("CA certificate: {e}")))?;
    write_file(&out.join("ca.pem"), &cert.pem(), 0o644)?;
    write_file(&out.join("ca.key"), &key.serialize_pem(), 0o600)?;
    Ok(())
}

/// Writes `out/NAME.pem` and `out/NAME.key`, signed by the CA in `ca_dir`.
pub fn issue(ca_dir: &Path, name: &str, sans: &[String], out: &Path) -> Result<(), CertError> {
    if name.is_empty() || name.contains('/') {
        return Err(CertError(format!("--name {name:?}: must be a plain file name")));
    }
    let read = |f: &str| {
        let p = ca_dir.join(f);
        std::fs::read_to_string(&p).map_err(|e| CertError(format!("--ca {}: {e}", p.display())))
    };
    let ca_key = KeyPair::from_pem(&read("ca.key")?).map_err(|e| CertError(format!("--ca ca.key: {e}")))?;
    let issuer =
        Issuer::from_ca_cert_pem(&read("ca.pem")?, ca_key).map_err(|e| CertError(format!("--ca ca.pem: {e}")))?;
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
        let san = match s.parse::<std::net::IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(s.clone().try_into().map_err(|e| CertError(format!("--san {s:?}: {e}")))?),
        };
        params.subject_alt_names.push(san);
    }
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    params.not_after = rcgen::date_time_ymd(2035, 1, 1);
    let key = KeyPair::generate().map_err(|e| CertError(format!("key generation: {e}")))?;
    let cert = params.signed_by(&key, &issuer).map_err(|e| CertError(format!("signing: {e}")))?;
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
        init(&dir).unwrap();
        issue(&dir, "agent1", &["127.0.0.2".into(), "agent1.local".into()], &dir).unwrap();
        for f in ["ca.key", "agent1.key"] {
            let mode = std::fs::metadata(dir.join(f)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{f}");
        }
        assert!(std::fs::read_to_string(dir.join("agent1.pem")).unwrap().starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(issue(&dir.join("missing"), "x", &[], &dir).unwrap_err().0.contains("--ca"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
