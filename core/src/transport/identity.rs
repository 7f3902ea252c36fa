//! The mutual-TLS files of the control plane (`--tls-ca`, `--tls-cert`, `--tls-key`, on
//! the coordinator and on the agent), checked when they are read: each file's name is in
//! its error, so a missing file, an empty one or a key that is not the certificate's is
//! a usage error naming it, not a transport error at the first connection.

use std::path::Path;

/// Which of the three files an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    Ca,
    Cert,
    Key,
}

impl Which {
    /// The flag (and config key, without its dashes) that names the file.
    pub fn flag(self) -> &'static str {
        match self {
            Which::Ca => "--tls-ca",
            Which::Cert => "--tls-cert",
            Which::Key => "--tls-key",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} {path}: {message}", which.flag())]
pub struct IdentityError {
    pub which: Which,
    pub path: String,
    pub message: String,
}

/// The three files' contents, once each is known to hold what it must: the CA at least
/// one certificate, the certificate file its chain, the key file a private key that is
/// the certificate's.
pub struct Identity {
    pub ca: Vec<u8>,
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

pub fn read(ca: &Path, cert: &Path, key: &Path) -> Result<Identity, IdentityError> {
    let fail =
        |which: Which, path: &Path, message: String| IdentityError { which, path: path.display().to_string(), message };
    let load = |which, path: &Path| std::fs::read(path).map_err(|e| fail(which, path, e.to_string()));
    let certs = |which, path: &Path, pem: &[u8]| {
        let mut rd = pem;
        let list: Vec<_> =
            rustls_pemfile::certs(&mut rd).collect::<Result<_, _>>().map_err(|e| fail(which, path, e.to_string()))?;
        if list.is_empty() {
            return Err(fail(which, path, "no PEM certificate in it".into()));
        }
        Ok(list)
    };
    let ca_pem = load(Which::Ca, ca)?;
    // As tonic reads a CA file: certificates webpki cannot parse are skipped, and one
    // at least must be usable.
    let mut roots = rustls::RootCertStore::empty();
    let (usable, _) = roots.add_parsable_certificates(certs(Which::Ca, ca, &ca_pem)?);
    if usable == 0 {
        return Err(fail(Which::Ca, ca, "no usable certificate in it".into()));
    }
    let cert_pem = load(Which::Cert, cert)?;
    let chain = certs(Which::Cert, cert, &cert_pem)?;
    let key_pem = load(Which::Key, key)?;
    let der = rustls_pemfile::private_key(&mut key_pem.as_slice())
        .map_err(|e| fail(Which::Key, key, e.to_string()))?
        .ok_or_else(|| fail(Which::Key, key, "no PEM private key in it".into()))?;
    let provider = rustls::crypto::ring::default_provider();
    let signing = provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| fail(Which::Key, key, format!("not a usable key: {e}")))?;
    match rustls::sign::CertifiedKey::new(chain, signing).keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(rustls::Error::InconsistentKeys(_)) => {
            return Err(fail(Which::Key, key, format!("not the key of the certificate in {}", cert.display())));
        }
        Err(e) => return Err(fail(Which::Cert, cert, format!("not a usable certificate: {e}"))),
    }
    Ok(Identity { ca: ca_pem, cert: cert_pem, key: key_pem })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("surge-identity-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn pair(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap().self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn each_file_is_named_when_it_is_not_what_it_must_be() {
        let dir = scratch();
        let (cert, key) = pair("agent");
        let (_, other_key) = pair("other");
        let write = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let (ca, c, k) = (write("ca.pem", &cert), write("c.pem", &cert), write("k.pem", &key));
        let empty = write("empty", "");
        let wrong = write("wrong.key", &other_key);
        let missing = dir.join("missing");
        assert!(read(&ca, &c, &k).is_ok());
        let which = |r: Result<Identity, IdentityError>| r.err().map(|e| (e.which, e.to_string()));
        let (w, m) = which(read(&missing, &c, &k)).unwrap();
        assert_eq!(w, Which::Ca);
        assert!(m.starts_with("--tls-ca ") && m.contains("missing"), "{m}");
        assert_eq!(which(read(&empty, &c, &k)).unwrap().0, Which::Ca);
        assert_eq!(which(read(&ca, &empty, &k)).unwrap().0, Which::Cert);
        assert_eq!(which(read(&ca, &c, &empty)).unwrap().0, Which::Key);
        assert_eq!(which(read(&ca, &c, &c)).unwrap().0, Which::Key);
        let (w, m) = which(read(&ca, &c, &wrong)).unwrap();
        assert_eq!(w, Which::Key);
        assert!(m.contains("not the key of the certificate"), "{m}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
