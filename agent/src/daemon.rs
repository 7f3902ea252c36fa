//! The `surge-agent` process: layered configuration (TOML file, then `SURGE_AGENT_*`
//! environment, then flags), mutual TLS, the gRPC server, systemd notifications and
//! signals. Also the embedded agent a local `surge run` talks to.

use crate::service::{AgentService, AgentSettings, Allowlist, AllowlistError};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

/// Default dead-man lease.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(3);
/// Default cap on requests in flight.
pub const DEFAULT_MAX_IN_FLIGHT: u32 = 10_000;

/// `surge-agent` command line; every option can also come from the file or environment.
#[derive(Debug, Clone, Default, clap::Parser)]
#[command(name = "surge-agent", version, about = "surge load agent: runs shares of a benchmark for a coordinator")]
pub struct AgentArgs {
    /// TOML configuration file (keys as the long flags, e.g. `max-in-flight = 4096`).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on for coordinators.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// CA certificate (PEM) that coordinators' certificates must be signed by.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// This agent's certificate (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// This agent's private key (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Targets this agent may load: hosts, host:port, CIDRs, comma separated.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub allowed_targets: Option<Vec<String>>,
    /// Most requests in flight this agent accepts.
    #[arg(long, value_name = "N")]
    pub max_in_flight: Option<u32>,
    /// Dead-man interval: stop all load when the coordinator is silent this long.
    #[arg(long, value_name = "DURATION")]
    pub lease: Option<String>,
    /// Plaintext gRPC without TLS; refused unless listening on loopback. (`--insecure` is
    /// its old, deprecated name.)
    #[arg(long, alias = "insecure")]
    pub plaintext: bool,
    /// Source IP address of connections to the target (pick a NIC or a source address
    /// the target's firewall expects; default: the kernel's choice).
    #[arg(long, value_name = "IP")]
    pub local_address: Option<String>,
    /// Serve this agent's live metrics (Prometheus text format) on ADDR, e.g. 0.0.0.0:9464.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,
    /// Read this host's GPUs and send their power, energy, utilization, memory, clock and
    /// temperature to the coordinator during runs (`nvml`: NVIDIA's library, loaded at run
    /// time; a host without it or without a GPU serves load without GPU telemetry).
    #[arg(long, value_enum, value_name = "SOURCE")]
    pub gpu: Option<GpuArg>,
    /// Speak an older protocol version, as an agent of that version would (tests of
    /// rolling upgrades, D43): 9 reads and writes version 9's wire; any older number only
    /// announces itself, to be refused. Only in test builds (the `emulate-protocol`
    /// feature, which the end-to-end tests turn on); hidden.
    #[cfg(feature = "emulate-protocol")]
    #[arg(long, value_name = "VERSION", hide = true)]
    pub emulate_protocol: Option<u32>,
}

/// Where `--gpu` reads the GPUs from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GpuArg {
    /// NVIDIA's management library (libnvidia-ml.so.1).
    Nvml,
}

/// The configuration file / environment keys.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileConfig {
    listen: Option<String>,
    tls_ca: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    allowed_targets: Option<Vec<String>>,
    max_in_flight: Option<u32>,
    lease: Option<String>,
    /// (`insecure` is its old, deprecated name.)
    #[serde(alias = "insecure")]
    plaintext: Option<bool>,
    local_address: Option<String>,
    metrics_listen: Option<String>,
    gpu: Option<GpuArg>,
}

/// A validated agent configuration.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub listen: String,
    /// Where to serve the live metrics (`--metrics-listen`).
    pub metrics_listen: Option<SocketAddr>,
    pub tls: Option<TlsFiles>,
    pub settings: AgentSettings,
    /// What the operator should read at start (e.g. why there is no GPU telemetry).
    pub notes: Vec<String>,
}

/// Paths of the agent's TLS material.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A configuration problem, naming the file, variable or flag.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("config file {}: not found", .0.display())]
    FileNotFound(PathBuf),
    /// The file or the environment cannot be read or parsed; `origin` names which.
    #[error("{origin}: {source}")]
    Layers {
        origin: String,
        #[source]
        source: config::ConfigError,
    },
    /// A key is unknown or has a value of the wrong type.
    #[error("{origin} (or SURGE_AGENT_*): {source}")]
    Keys {
        origin: String,
        #[source]
        source: config::ConfigError,
    },
    #[error("listen {listen:?}: not an IP:port address")]
    Listen {
        listen: String,
        #[source]
        source: std::net::AddrParseError,
    },
    #[error("plaintext: allowed only on loopback, but listen is {0}")]
    PlaintextNotLoopback(String),
    #[error("plaintext: cannot be combined with tls-ca/tls-cert/tls-key")]
    PlaintextWithTls,
    #[error("tls-ca, tls-cert and tls-key are all required (or --plaintext on a loopback listen address)")]
    TlsIncomplete,
    #[error(transparent)]
    Allowlist(#[from] AllowlistError),
    #[error("max-in-flight: must be at least 1")]
    MaxInFlightZero,
    #[error("--emulate-protocol {0}: this agent speaks version {v} and can only emulate older ones", v = surge_proto::PROTOCOL_VERSION)]
    EmulateProtocol(u32),
    #[error("lease {value:?}: {source}")]
    Lease {
        value: String,
        #[source]
        source: humantime::DurationError,
    },
    #[error("lease: must be at least 100ms")]
    LeaseTooShort,
    #[error("lease {0:?}: must be at most 24h (it is how long the load goes on once the coordinator is gone)")]
    LeaseTooLong(String),
    #[error("metrics-listen {value:?} is not an IP:PORT address: {source}")]
    MetricsListen {
        value: String,
        #[source]
        source: std::net::AddrParseError,
    },
    #[error("local-address {value:?} is not an IP address: {source}")]
    LocalAddress {
        value: String,
        #[source]
        source: std::net::AddrParseError,
    },
    /// The configuration file is not TOML, or holds a key that is no option name.
    #[error("config {}: {why}", path.display())]
    BadKey { path: PathBuf, why: String },
    /// A file cannot be read; `what` names it.
    #[error("{what} {}: {source}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A TLS file cannot be read or does not hold what it must (its flag named).
    #[error(transparent)]
    Identity(#[from] surge_core::transport::identity::IdentityError),
}

fn load_layers(path: Option<&Path>) -> Result<FileConfig, ConfigError> {
    let mut b = config::Config::builder();
    if let Some(p) = path {
        if !p.exists() {
            return Err(ConfigError::FileNotFound(p.to_path_buf()));
        }
        let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
            what: "config",
            path: p.to_path_buf(),
            source,
        })?;
        crate::tomlkeys::check(&text).map_err(|why| ConfigError::BadKey { path: p.to_path_buf(), why })?;
        b = b.add_source(config::File::from_str(&text, config::FileFormat::Toml));
    }
    b = b.add_source(
        // SURGE_AGENT_MAX_IN_FLIGHT -> max-in-flight, so it overrides the file's key.
        config::Environment::with_prefix("SURGE_AGENT")
            .prefix_separator("_")
            .convert_case(config::Case::Kebab)
            .try_parsing(true)
            .list_separator(",")
            .with_list_parse_key("allowed-targets"),
    );
    let origin = path.map_or_else(|| "SURGE_AGENT_* environment".to_string(), |p| p.display().to_string());
    let cfg = b.build().map_err(|source| ConfigError::Layers { origin: origin.clone(), source })?;
    cfg.try_deserialize::<FileConfig>().map_err(|source| ConfigError::Keys { origin, source })
}

/// The keys of a configuration file's text (TOML), as `--config` reads them.
#[doc(hidden)]
pub fn parse_config_text(text: &str) -> Result<(), String> {
    crate::tomlkeys::check(text)?;
    let cfg = config::Config::builder()
        .add_source(config::File::from_str(text, config::FileFormat::Toml))
        .build()
        .map_err(|e| e.to_string())?;
    let f = cfg.try_deserialize::<FileConfig>().map_err(|e| e.to_string())?;
    if let Some(list) = &f.allowed_targets {
        Allowlist::parse(list).map_err(|e| e.to_string())?;
    }
    if let Some(lease) = &f.lease {
        humantime::parse_duration(lease).map_err(|e| e.to_string())?;
    }
    Ok(())
}

impl AgentConfig {
    /// File, then environment, then flags.
    pub fn load(args: &AgentArgs) -> Result<Self, ConfigError> {
        let f = load_layers(args.config.as_deref())?;
        let listen = args.listen.clone().or(f.listen).unwrap_or_else(|| "0.0.0.0:7171".into());
        let insecure = args.plaintext || f.plaintext.unwrap_or(false);
        let ca = args.tls_ca.clone().or(f.tls_ca);
        let cert = args.tls_cert.clone().or(f.tls_cert);
        let key = args.tls_key.clone().or(f.tls_key);
        let tls = match (ca, cert, key, insecure) {
            (Some(ca), Some(cert), Some(key), _) => Some(TlsFiles { ca, cert, key }),
            (None, None, None, true) => {
                let addr: SocketAddr =
                    listen.parse().map_err(|source| ConfigError::Listen { listen: listen.clone(), source })?;
                if !addr.ip().is_loopback() {
                    return Err(ConfigError::PlaintextNotLoopback(listen));
                }
                None
            }
            (_, _, _, true) => return Err(ConfigError::PlaintextWithTls),
            _ => return Err(ConfigError::TlsIncomplete),
        };
        let allowed = Allowlist::parse(&args.allowed_targets.clone().or(f.allowed_targets).unwrap_or_default())?;
        let max_in_flight = args.max_in_flight.or(f.max_in_flight).unwrap_or(DEFAULT_MAX_IN_FLIGHT);
        if max_in_flight == 0 {
            return Err(ConfigError::MaxInFlightZero);
        }
        let given = args.lease.clone().or(f.lease);
        let lease = match &given {
            None => DEFAULT_LEASE,
            Some(value) => humantime::parse_duration(value)
                .map_err(|source| ConfigError::Lease { value: value.clone(), source })?,
        };
        if lease < Duration::from_millis(100) {
            return Err(ConfigError::LeaseTooShort);
        }
        if lease > Duration::from_secs(86_400) {
            return Err(ConfigError::LeaseTooLong(given.unwrap_or_default()));
        }
        let local_address = match args.local_address.clone().or(f.local_address) {
            None => None,
            Some(value) => {
                Some(value.parse().map_err(|source| ConfigError::LocalAddress { value: value.clone(), source })?)
            }
        };
        let metrics_listen = match args.metrics_listen.clone().or(f.metrics_listen) {
            None => None,
            Some(value) => {
                Some(value.parse().map_err(|source| ConfigError::MetricsListen { value: value.clone(), source })?)
            }
        };
        let cert_name = tls.as_ref().map(|t| cert_names(&t.cert)).unwrap_or_default();
        let mut notes = Vec::new();
        let gpu = match args.gpu.or(f.gpu) {
            None => None,
            Some(GpuArg::Nvml) => match crate::gpu::GpuReader::load() {
                Ok(r) => {
                    notes.push(format!("--gpu nvml: GPU telemetry from {} GPU(s) through NVML", r.count()));
                    Some(std::sync::Arc::new(r))
                }
                Err(why) => {
                    notes.push(format!("--gpu nvml: no GPU telemetry: {why}; serving load without it"));
                    None
                }
            },
        };
        #[cfg(feature = "emulate-protocol")]
        let emulated = args.emulate_protocol;
        #[cfg(not(feature = "emulate-protocol"))]
        let emulated: Option<u32> = None;
        let protocol = match emulated {
            None => surge_proto::PROTOCOL_VERSION,
            Some(v) if v <= surge_proto::PROTOCOL_VERSION => v,
            Some(v) => return Err(ConfigError::EmulateProtocol(v)),
        };
        Ok(Self {
            listen,
            metrics_listen,
            tls,
            settings: AgentSettings {
                local_address,
                cert_name,
                protocol,
                gpu,
                ..AgentSettings::new(max_in_flight, lease, allowed)
            },
            notes,
        })
    }
}

/// The names in the certificate at `path`: its common name, then its subject alternative
/// names (`""` when it cannot be read: the TLS setup reports that, not this).
fn cert_names(path: &Path) -> String {
    let Ok(bytes) = std::fs::read(path) else { return String::new() };
    let Ok((_, pem)) = x509_parser::pem::parse_x509_pem(&bytes) else { return String::new() };
    let Ok(cert) = pem.parse_x509() else { return String::new() };
    let mut names: Vec<String> =
        cert.subject().iter_common_name().filter_map(|cn| cn.as_str().ok()).map(String::from).collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            let name = match name {
                x509_parser::extensions::GeneralName::DNSName(d) => d.to_string(),
                x509_parser::extensions::GeneralName::IPAddress(ip) => match ip.len() {
                    4 => std::net::Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3]).to_string(),
                    16 => <[u8; 16]>::try_from(*ip)
                        .map(std::net::Ipv6Addr::from)
                        .map_or_else(|_| String::new(), |a| a.to_string()),
                    _ => continue,
                },
                other => other.to_string(),
            };
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names.join(", ")
}

/// The server-side mutual-TLS configuration: clients must present a certificate signed by `ca`.
pub fn server_tls(files: &TlsFiles) -> Result<ServerTlsConfig, ConfigError> {
    let id = surge_core::transport::identity::read(&files.ca, &files.cert, &files.key)?;
    Ok(ServerTlsConfig::new()
        .identity(Identity::from_pem(id.cert, id.key))
        .client_ca_root(Certificate::from_pem(id.ca)))
}

/// Serves the agent on `listener` until `shutdown` is cancelled; sessions then stop their
/// load, flush and close.
pub async fn serve(
    listener: TcpListener,
    tls: Option<ServerTlsConfig>,
    settings: AgentSettings,
    shutdown: CancellationToken,
) -> Result<(), tonic::transport::Error> {
    let svc = AgentService::new(settings, shutdown.clone());
    let drivers = svc.drivers();
    let svc = svc.into_server();
    let mut builder = Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(1)))
        .http2_keepalive_timeout(Some(Duration::from_secs(3)));
    if let Some(tls) = tls {
        builder = builder.tls_config(tls)?;
    }
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    let grace = shutdown.clone();
    let served = builder.add_service(svc).serve_with_incoming_shutdown(incoming, async move {
        grace.cancelled().await;
        // The sessions heard the stop too: they stop their load, flush their last batches
        // and send Done; the connections close once they all have.
        drivers.close();
        drivers.wait().await;
    });
    // A coordinator that vanished without closing its connection (a partition, a deleted
    // network namespace) would hold the graceful shutdown open forever: it is bounded.
    tokio::select! {
        r = served => r,
        () = async {
            shutdown.cancelled().await;
            tokio::time::sleep(SHUTDOWN_MAX).await;
        } => {
            tracing::warn!(after = ?SHUTDOWN_MAX, "connections still open after the stop: exiting anyway");
            Ok(())
        }
    }
}

/// Longest wait for open connections to close once the agent is told to stop.
const SHUTDOWN_MAX: Duration = Duration::from_secs(5);

/// The in-process agent a local `surge run` talks to over channels
/// ([`AgentService::open_local`]: no socket, no encoding), allowing any target; its
/// sessions stop their load at `shutdown`.
pub fn embedded(shutdown: CancellationToken) -> AgentService {
    AgentService::new(AgentSettings::new(1_000_000, DEFAULT_LEASE, Allowlist::any()), shutdown)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(config: &Path) -> AgentArgs {
        AgentArgs { config: Some(config.to_path_buf()), plaintext: true, ..Default::default() }
    }

    // One test touches the process environment, so the cases run in sequence here.
    #[test]
    fn file_then_environment_then_flags() {
        let dir = std::env::temp_dir().join(format!("surge-agent-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("agent.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:0\"\nmax-in-flight = 100\nlease = \"2s\"\nallowed-targets = [\"10.0.0.0/8\"]\n",
        )
        .unwrap();
        let c = AgentConfig::load(&args(&file)).unwrap();
        assert_eq!((c.settings.max_in_flight, c.settings.lease), (100, Duration::from_secs(2)));
        assert_eq!(c.settings.allowed.raw(), ["10.0.0.0/8"]);
        unsafe_env_set("SURGE_AGENT_MAX_IN_FLIGHT", Some("64"));
        unsafe_env_set("SURGE_AGENT_ALLOWED_TARGETS", Some("127.0.0.1,10.1.0.0/16"));
        let c = AgentConfig::load(&args(&file)).unwrap();
        assert_eq!(c.settings.max_in_flight, 64, "the environment overrides the file");
        assert_eq!(c.settings.allowed.raw(), ["127.0.0.1", "10.1.0.0/16"]);
        let mut a = args(&file);
        a.max_in_flight = Some(8);
        assert_eq!(AgentConfig::load(&a).unwrap().settings.max_in_flight, 8, "flags override both");
        unsafe_env_set("SURGE_AGENT_MAX_IN_FLIGHT", None);
        unsafe_env_set("SURGE_AGENT_ALLOWED_TARGETS", None);
        // Unknown keys and bad values name the file and the key.
        std::fs::write(&file, "max-in-flite = 3\n").unwrap();
        let e = AgentConfig::load(&args(&file)).unwrap_err().to_string();
        assert!(e.contains("agent.toml") && e.contains("max-in-flite"), "{e}");
        std::fs::write(&file, "listen = \"127.0.0.1:0\"\nlease = \"soon\"\n").unwrap();
        let e = AgentConfig::load(&args(&file)).unwrap_err();
        assert!(matches!(&e, ConfigError::Lease { value, .. } if value == "soon"), "{e:?}");
        assert!(e.to_string().starts_with("lease \"soon\": "), "{e}");
        // A lease past a day (400 billion years overflowed the clock it is added to).
        std::fs::write(&file, "listen = \"127.0.0.1:0\"\nlease = \"400000000000y\"\n").unwrap();
        let e = AgentConfig::load(&args(&file)).unwrap_err();
        assert!(matches!(&e, ConfigError::LeaseTooLong(v) if v == "400000000000y"), "{e:?}");
        std::fs::write(&file, "listen = \"10.0.0.1:7171\"\n").unwrap();
        let e = AgentConfig::load(&args(&file)).unwrap_err();
        assert_eq!(e.to_string(), "plaintext: allowed only on loopback, but listen is 10.0.0.1:7171");
        std::fs::write(&file, "listen = \"127.0.0.1:0\"\nallowed-targets = [\"a b\"]\n").unwrap();
        let e = AgentConfig::load(&args(&file)).unwrap_err();
        assert!(matches!(e, ConfigError::Allowlist(_)), "{e:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `set_var` is unsafe in Rust 2024 (other threads may read the environment); this
    /// test is the only reader of `SURGE_AGENT_*` in its binary.
    #[allow(unsafe_code)]
    fn unsafe_env_set(k: &str, v: Option<&str>) {
        // SAFETY: no other thread of this test binary reads these variables.
        unsafe {
            match v {
                Some(v) => std::env::set_var(k, v),
                None => std::env::remove_var(k),
            }
        }
    }
}
