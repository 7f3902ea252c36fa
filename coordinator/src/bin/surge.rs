//! `surge`: parse the command line, build the runtime, call the library.

use std::process::ExitCode;
use surge_coordinator::cli::{CertsCommand, Cli, Command, FleetCommand, UsageError, build};
use surge_coordinator::{certs, commands, exit};

// hyper gives each response a fresh 8 KiB read buffer: glibc's malloc serves it by
// consolidating its fast bins every time (2-3 % of a closed loop's CPU on /echo).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = Cli::parse_recording();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("SURGE_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        // Colours only on a terminal: journald and log files get plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .log_internal_errors(false)
        .init();
    // The echo server and the embedded agent hold thousands of sockets at 2000+ in flight.
    if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
        tracing::warn!("cannot raise the open-file limit: {e}");
    }
    let code = match cli.command {
        Command::Certs(CertsCommand::Init { out }) => report_certs(certs::init(&out).map(|done| {
            if done == certs::Init::Kept {
                eprintln!("surge certs: {} already holds a CA: kept (what it signed stays valid)", out.display());
            }
        })),
        Command::Certs(CertsCommand::Issue { ca, name, sans, out }) => {
            report_certs(certs::issue(&ca, &name, &sans, &out))
        }
        Command::Run(args) => match build::run_plan(*args) {
            Ok(plan) => block_on(commands::run_command(plan)),
            Err(e) => usage("run", &e),
        },
        Command::Sweep(args) => match build::sweep_plan(*args) {
            Ok(plan) => block_on(commands::sweep::sweep_command(plan)),
            Err(e) => usage("sweep", &e),
        },
        Command::Matrix(args) => match build::matrix_plan(*args) {
            Ok(plan) => block_on(commands::matrix::matrix_command(plan)),
            Err(e) => usage("matrix", &e),
        },
        Command::Capacity(args) => match build::capacity_plan(*args) {
            Ok(plan) => block_on(commands::capacity::capacity_command(plan)),
            Err(e) => usage("capacity", &e),
        },
        Command::Validate(args) => match build::validate_plan(*args) {
            Ok(plan) => block_on(commands::validate::validate_command(plan)),
            Err(e) => usage("validate", &e),
        },
        Command::Echo(args) => block_on(commands::echo_command(*args)),
        Command::Demo => block_on(commands::demo_command()),
        Command::Fleet(FleetCommand::Check(args)) => {
            let probe = !args.target.base_url.is_empty() || args.target.endpoints.is_some();
            match build::run_plan(*args) {
                Ok(plan) => block_on(commands::fleet::check_command(plan, probe)),
                Err(e) => usage("fleet check", &e),
            }
        }
        Command::Compare(a)
            if a.max_capacity_drop.is_some()
                || a.paths.iter().any(|p| commands::compare_capacity::capacity_at(p).is_some()) =>
        {
            commands::compare::compare_capacity_command(&a.paths, a.max_capacity_drop.as_deref())
        }
        Command::Compare(a) => commands::compare::compare_command(&a.paths, &a.fail_if, a.html.as_deref()),
        Command::Report(a) => {
            commands::report::report_command(&a.paths, a.output.as_deref(), a.png.as_deref(), a.cost_per_hour)
        }
    };
    ExitCode::from(code)
}

fn usage(command: &str, e: &UsageError) -> u8 {
    eprintln!("surge {command}: {e}");
    exit::USAGE
}

fn report_certs(r: Result<(), certs::CertError>) -> u8 {
    match r {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("surge certs: {e}");
            match e {
                certs::CertError::Usage(_) => exit::USAGE,
                certs::CertError::Failed(_) => exit::FAILURE,
            }
        }
    }
}

fn block_on(fut: impl std::future::Future<Output = u8>) -> u8 {
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt.block_on(fut),
        Err(e) => {
            eprintln!("surge: cannot start the runtime: {e}");
            exit::FAILURE
        }
    }
}
