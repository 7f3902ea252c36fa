//! `surge-agent`: parse, configure, serve.

use clap::Parser;
use std::process::ExitCode;
use surge_agent::daemon::{self, AgentArgs, AgentConfig};
use tokio_util::sync::CancellationToken;

// hyper gives each response a fresh 8 KiB read buffer: glibc's malloc serves it by
// consolidating its fast bins every time (2-3 % of a closed loop's CPU on /echo).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let args = AgentArgs::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("SURGE_LOG").unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        // Colours only on a terminal: journald and log files get plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        // A closed stderr (e.g. `| head`) must not turn a log line into a panic.
        .log_internal_errors(false)
        .init();
    let cfg = match AgentConfig::load(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("surge-agent: {e}");
            return ExitCode::from(2);
        }
    };
    for note in &cfg.notes {
        eprintln!("surge-agent: {note}");
    }
    // The TLS files are read before anything starts: one missing or unreadable is a usage
    // error naming its flag or key.
    let tls = match cfg.tls.as_ref().map(daemon::server_tls).transpose() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("surge-agent: {e}");
            return ExitCode::from(2);
        }
    };
    // 2000+ requests in flight need as many sockets: lift the soft limit to the hard one.
    if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
        tracing::warn!("cannot raise the open-file limit: {e}");
    }
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("surge-agent: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = match rt.block_on(run(cfg, tls)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("surge-agent: {e:#}");
            ExitCode::from(1)
        }
    };
    // Tasks still stuck on a connection whose peer vanished must not hold the exit.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    code
}

async fn run(cfg: AgentConfig, tls: Option<tonic::transport::ServerTlsConfig>) -> anyhow::Result<()> {
    let listener =
        tokio::net::TcpListener::bind(&cfg.listen).await.map_err(|e| anyhow::anyhow!("listen {}: {e}", cfg.listen))?;
    let addr = listener.local_addr()?;
    {
        use std::io::Write;
        let _ = writeln!(std::io::stdout(), "surge-agent listening on {addr}");
    }
    tracing::info!(%addr, tls = tls.is_some(), "listening");
    let shutdown = CancellationToken::new();
    let mut settings = cfg.settings;
    if let Some(at) = cfg.metrics_listen {
        let l = tokio::net::TcpListener::bind(at).await.map_err(|e| anyhow::anyhow!("metrics-listen {at}: {e}"))?;
        let live = std::sync::Arc::new(surge_agent::live::LiveMetrics::for_agent());
        settings.live = Some(std::sync::Arc::clone(&live));
        {
            use std::io::Write;
            let _ = writeln!(std::io::stdout(), "surge-agent metrics on http://{}/metrics", l.local_addr()?);
        }
        tokio::spawn(surge_agent::live::serve(l, live, shutdown.clone()));
    }
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
    if let Some(interval) = sd_notify::watchdog_enabled() {
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval / 2);
            loop {
                tokio::select! {
                    _ = tick.tick() => { let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]); }
                    _ = stop.cancelled() => break,
                }
            }
        });
    }
    let signals = shutdown.clone();
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
            return;
        };
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        tracing::info!("signal received: stopping load and closing sessions");
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
        signals.cancel();
    });
    daemon::serve(listener, tls, settings, shutdown).await?;
    Ok(())
}
