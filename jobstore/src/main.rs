//! The `jobstore` binary: parses the command line, sets up logging, and
//! runs the daemon, a client command, or a bench.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use jobstore_bench::{BenchArgs, NoopArgs};
use jobstore_daemon::cli::{CliError, Command as DaemonCommand, run_client};
use jobstore_daemon::config::{Config, LogFormat, ServeArgs};
use tracing_subscriber::EnvFilter;

/// The `jobstore` command line.
#[derive(Debug, Parser)]
#[command(
    name = "jobstore",
    version,
    about = "A durable job queue: the daemon, and a client for its HTTP API",
    propagate_version = true
)]
struct Cli {
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

/// The subcommands: the daemon's, then the tools.
#[derive(Debug, Subcommand)]
enum Command {
    #[command(flatten)]
    Daemon(Box<DaemonCommand>),
    /// Measure a store and a daemon on it, in a namespace of its own that
    /// is dropped after (`jobstore bench store --store postgres://…`).
    Bench(Box<BenchArgs>),
    /// A long-lived worker that answers every job at once (for `bench`).
    #[command(hide = true)]
    NoopWorker(NoopArgs),
}

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
        Command::Daemon(command) => match *command {
            DaemonCommand::Serve(args) => serve(&runtime, &args),
            command => exit(runtime.block_on(run_client(command))),
        },
        Command::Bench(args) => {
            // Daemons run inside the bench: their warnings, not their
            // progress, unless JOBSTORE_LOG says otherwise.
            init_tracing_default(LogFormat::Human, "warn");
            exit(runtime.block_on(jobstore_bench::bench(*args)))
        }
        Command::NoopWorker(args) => exit(jobstore_bench::noop_worker(&args)),
    }
}

/// `jobstore serve`: runs the daemon until a signal stops it.
fn serve(runtime: &tokio::runtime::Runtime, args: &ServeArgs) -> ExitCode {
    let config = match Config::from_args(args) {
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

/// The exit of a client command or a tool: its error on stderr, and its
/// exit code.
fn exit(result: Result<(), CliError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("jobstore: {e}");
            ExitCode::from(e.code)
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
