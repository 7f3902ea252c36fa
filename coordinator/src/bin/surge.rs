//! `surge`: parse the command line, build the runtime, call the library.

use clap::Parser;
use std::process::ExitCode;
use surge_coordinator::cli::{CertsCommand, Cli, Command};
use surge_coordinator::{certs, exit, plan::RunPlan};

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("SURGE_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .log_internal_errors(false)
        .init();
    // The echo server and the embedded agent hold thousands of sockets at 2000+ in flight.
    if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
        tracing::warn!("cannot raise the open-file limit: {e}");
    }
    let code = match cli.command {
        Command::Certs(CertsCommand::Init { out }) => report_certs(certs::init(&out)),
        Command::Certs(CertsCommand::Issue { ca, name, sans, out }) => {
            report_certs(certs::issue(&ca, &name, &sans, &out))
        }
        Command::Run(args) => match RunPlan::from_args(*args) {
            Ok(plan) => block_on(surge_coordinator::run_command(plan)),
            Err(e) => {
                eprintln!("surge run: {e}");
                exit::USAGE
            }
        },
        Command::Sweep(args) => match surge_coordinator::sweep::SweepPlan::from_args(*args) {
            Ok(plan) => block_on(surge_coordinator::sweep::sweep_command(plan)),
            Err(e) => {
                eprintln!("surge sweep: {e}");
                exit::USAGE
            }
        },
        Command::Matrix(args) => match surge_coordinator::matrix::MatrixPlan::from_args(*args) {
            Ok(plan) => block_on(surge_coordinator::matrix::matrix_command(plan)),
            Err(e) => {
                eprintln!("surge matrix: {e}");
                exit::USAGE
            }
        },
        Command::Validate(args) => block_on(surge_coordinator::validate::validate_command(*args)),
        Command::Echo(args) => block_on(surge_coordinator::echo_command(args)),
        Command::Demo => block_on(surge_coordinator::demo_command()),
    };
    ExitCode::from(code)
}

fn report_certs(r: Result<(), certs::CertError>) -> u8 {
    match r {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("surge certs: {e}");
            exit::FAILURE
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
