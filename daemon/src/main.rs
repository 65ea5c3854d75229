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
            let served = runtime.block_on(async {
                // Listen for signals before starting: one that arrives while
                // the daemon starts then stops it gracefully once started.
                let signals = Signals::new()?;
                jobstore_daemon::run(config, signals.shutdown())
                    .await
                    .map_err(|e| e.to_string())
            });
            match served {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{e}");
                    eprintln!("jobstore: {e}");
                    ExitCode::from(1)
                }
            }
        }
        command => {
            if matches!(command, Command::Bench(_)) {
                // Daemons run inside the bench: their warnings, not their
                // progress, unless JOBSTORE_LOG says otherwise.
                init_tracing_default(LogFormat::Human, "warn");
            }
            match runtime.block_on(run_client(command)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("jobstore: {e}");
                    ExitCode::from(e.code)
                }
            }
        }
    }
}

fn init_tracing(format: LogFormat) {
    init_tracing_default(format, "info");
}

fn init_tracing_default(format: LogFormat, default: &str) {
    let filter = EnvFilter::try_from_env("JOBSTORE_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// SIGTERM and SIGINT, registered when created.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Signals, String> {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate()).map_err(|e| format!("SIGTERM handler: {e}"))?;
        let int = signal(SignalKind::interrupt()).map_err(|e| format!("SIGINT handler: {e}"))?;
        Ok(Signals { term, int })
    }

    async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }

    /// The first signal begins a graceful shutdown; a second one exits at
    /// once.
    async fn shutdown(mut self) {
        self.next().await;
        tracing::info!("signal received; shutting down (a second signal exits at once)");
        tokio::spawn(async move {
            self.next().await;
            tracing::warn!("second signal: exiting now");
            std::process::exit(130);
        });
    }
}
