//! The `jobstore` binary: parses the command line, sets up logging, and
//! runs the daemon or a client command.

use std::process::ExitCode;

use clap::Parser;
use jobstore_daemon::cli::{Cli, Command, run_client};
use jobstore_daemon::config::{Config, LogFormat};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("jobstore: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match cli.command {
        Command::Serve(args) => {
            let config = match Config::from_args(&args) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("jobstore: {e}");
                    return ExitCode::from(2);
                }
            };
            init_tracing(config.log_format);
            match runtime.block_on(jobstore_daemon::run(config, shutdown_signal())) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{e}");
                    eprintln!("jobstore: {e}");
                    ExitCode::from(1)
                }
            }
        }
        command => match runtime.block_on(run_client(command)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("jobstore: {e}");
                ExitCode::from(e.code)
            }
        },
    }
}

fn init_tracing(format: LogFormat) {
    let filter = EnvFilter::try_from_env("JOBSTORE_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// SIGTERM or Ctrl-C begins a graceful shutdown; a second one exits at once.
async fn shutdown_signal() {
    wait_for_signal().await;
    tracing::info!("signal received; shutting down (a second signal exits at once)");
    tokio::spawn(async {
        wait_for_signal().await;
        tracing::warn!("second signal: exiting now");
        std::process::exit(130);
    });
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
