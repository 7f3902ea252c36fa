//! Requests over HTTPS, HTTP/1.1 and HTTP/2 (ALPN): the engine's TLS path, with the
//! socket stamps under rustls. A TLS terminator (test CA, `localhost`) forwards the
//! decrypted bytes to the echo server; everything on 127.0.0.1 port 0.

mod common;

use base64::Engine as _;
use bytes::Bytes;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use std::sync::Arc;
use std::time::{Duration, Instant};
use surge_agent::engine::conn::Version;
use surge_agent::engine::connector::Connector;
use surge_agent::engine::load::pool::Pool;
use surge_agent::engine::load::request::{self, Job, RequestTemplate};
use surge_agent::engine::stats::Stats;
use surge_agent::engine::target::Target;
use surge_agent::engine::tls::TargetTls;
use surge_proto::{ErrorKind, TokenSource};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A CA certificate and a `localhost` server certificate signed by it.
fn certs() -> (CertificateDer<'static>, CertificateDer<'static>, PrivateKeyDer<'static>) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_owned()]).unwrap().signed_by(&key, &issuer).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    (ca_cert.der().clone(), leaf.der().clone(), key)
}

/// Terminates TLS on a new port and pipes each connection to `backend`.
async fn tls_terminator(backend: std::net::SocketAddr) -> (u16, TargetTls) {
    let (ca, leaf, key) = certs();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf], key)
        .unwrap();
    // The echo server speaks both on one port (HTTP/2 by prior knowledge).
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(cfg));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // Without TCP_NODELAY, Nagle holds each token behind the client's delayed ACK.
                let _ = tcp.set_nodelay(true);
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let Ok(mut plain) = TcpStream::connect(backend).await else { return };
                let _ = plain.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    let pem = format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        base64::engine::general_purpose::STANDARD.encode(ca.as_ref())
    );
    (port, TargetTls { insecure: false, ca_pem: pem.into_bytes() })
}

async fn echo_server() -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let cfg = surge_echo::EchoConfig { ttft_ms: 20.0, itl_ms: 5.0, ..Default::default() };
    tokio::spawn(surge_echo::serve(listener, cfg, async move {
        let _ = rx.await;
    }));
    (addr, tx)
}

fn template(target: &Target) -> RequestTemplate {
    common::stream_template(target, None)
}

const BODY: &str = r#"{"model":"m","prompt":"one two three","max_tokens":6,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true}"#;

async fn stream_over_https(h2: bool) {
    let (backend, _stop) = echo_server().await;
    let (port, roots) = tls_terminator(backend).await;
    let target = Target::resolve(&format!("https://localhost:{port}")).await.unwrap();
    let stats = Arc::new(Stats::default());
    let pool = Arc::new(Pool::with_connections(
        Connector::with_tls(target.clone(), if h2 { Version::Http2 } else { Version::Http1 }, &roots).unwrap(),
        stats,
        4,
        0,
    ));
    let tpl = template(&target);
    let t0 = Instant::now();
    for index in 0..4 {
        let job = Job {
            index,
            body: Bytes::from_static(BODY.as_bytes()),
            input_tokens: 3,
            input_source: TokenSource::ClientEstimate,
            input_sequences: 0,
            audio_s: 0.0,
            max_tokens: 0,
            honours_eos: false,
            intended: None,
            session: None,
            keep_reply: false,
        };
        let row = tokio::time::timeout(Duration::from_secs(10), request::execute(&pool, &tpl, job, t0)).await.unwrap();
        assert_eq!(row.error(), ErrorKind::None, "request {index} over https (h2 {h2}): {row:?}");
        assert_eq!(row.http_status, 200);
        assert_eq!(row.output_tokens, 6);
        assert!(row.usage_from_server);
        assert_eq!(row.gap_count(), 5);
        // Socket stamps under TLS: never below the server's schedule (token k at 20 + 5k
        // ms). The server may write a token late (the tests share the host), which shortens
        // the gap after it: each token's time is checked, not the gaps' sum.
        assert!(row.ttft_us >= 20_000, "TTFT {} us is below the server's 20 ms", row.ttft_us);
        let mut at = row.ttft_us;
        for (k, gap) in row.gaps().enumerate() {
            at += u64::from(gap);
            let due = 20_000 + 5_000 * (k as u64 + 1);
            assert!(
                at + 1_000 >= due,
                "token {} at {at} us, before the server's {due} us: gaps {:?}",
                k + 1,
                row.gaps().collect::<Vec<_>>()
            );
        }
        assert!(row.latency_us >= row.ttft_us);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_over_https_http1() {
    stream_over_https(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_over_https_http2() {
    stream_over_https(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_certificate_is_a_tls_error() {
    let (backend, _stop) = echo_server().await;
    let (port, _roots) = tls_terminator(backend).await;
    let target = Target::resolve(&format!("https://localhost:{port}")).await.unwrap();
    let stats = Arc::new(Stats::default());
    // The Mozilla roots do not include the test CA.
    let pool = Arc::new(Pool::with_connections(
        Connector::with_tls(target.clone(), Version::Http1, &TargetTls::default()).unwrap(),
        stats,
        1,
        0,
    ));
    let job = Job {
        index: 0,
        body: Bytes::from_static(BODY.as_bytes()),
        input_tokens: 3,
        input_source: TokenSource::ClientEstimate,
        input_sequences: 0,
        audio_s: 0.0,
        max_tokens: 0,
        honours_eos: false,
        intended: None,
        session: None,
        keep_reply: false,
    };
    let row = request::execute(&pool, &template(&target), job, Instant::now()).await;
    assert_eq!(row.error(), ErrorKind::Tls);
}
