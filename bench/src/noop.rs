//! `jobstore noop-worker`: a long-lived worker (protocol version 1, see
//! the daemon's README) that answers every message at once with `D: 200`,
//! for benchmarks. With `--stamp` it first prints, for each job, the time
//! it received it: `t <µs since the epoch>`.

use std::io::{BufRead, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use clap::Args;

use jobstore_daemon::cli::CliError;

/// `jobstore noop-worker`.
#[derive(Debug, Clone, Args)]
pub struct NoopArgs {
    /// Print each job's receipt time (`t <µs since the epoch>`) before
    /// answering.
    #[arg(long)]
    pub stamp: bool,
}

/// Answers each line of stdin until it closes.
pub fn noop_worker(args: &NoopArgs) -> Result<(), CliError> {
    let stdin = std::io::stdin().lock();
    let mut out = std::io::stdout().lock();
    let fail = |e: std::io::Error| CliError::local(format!("noop-worker: {e}"));
    for line in stdin.lines() {
        let line = line.map_err(fail)?;
        if args.stamp && is_job(&line) {
            let us = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_micros());
            writeln!(out, "t {us}").map_err(fail)?;
        }
        out.write_all(b"D: 200\n").map_err(fail)?;
        out.flush().map_err(fail)?;
    }
    Ok(())
}

/// Whether a protocol message is a job (not a `before`/`before_each`/
/// `after_each` hook).
fn is_job(line: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(line)
        .map(|v| v["op"] == "job")
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::is_job;

    #[test]
    fn jobs_and_hooks() {
        assert!(is_job(r#"{"op":"job","id":"a","data":"x"}"#));
        assert!(!is_job(r#"{"op":"before_each","code":"x"}"#));
        assert!(!is_job("not json"));
    }
}
