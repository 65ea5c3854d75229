//! The store's own vacuums of `jobs` (see
//! [`PgStoreOptions::vacuum_every`](crate::PgStoreOptions::vacuum_every)).
//!
//! Every claim leaves the old versions of the rows it took in front of the
//! next claims in `jobs_free`; until a vacuum removes them, each claim
//! steps over all of them. Autovacuum comes at most once a naptime, so a
//! store that claims many jobs asks for a vacuum itself after every so
//! many claims. One task per store runs them, one at a time, on a
//! connection of its own (no statement timeout: a vacuum of a bloated
//! table may take longer than a statement should).

use std::sync::Mutex;
use std::time::Instant;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use tokio::sync::mpsc;

/// `SKIP_LOCKED`: while another store's vacuum (or autovacuum) holds the
/// table this one is skipped rather than queued. `INDEX_CLEANUP ON`: the
/// dead index entries are the point, so the index pass is never bypassed.
/// `TRUNCATE false`: cutting empty pages off the end needs an exclusive
/// lock that every claim would wait for.
const VACUUM: &str = "VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false) jobs";

/// Counts claimed jobs and asks the task for a vacuum every `every`.
pub(crate) struct Vacuums {
    every: u64,
    claimed: Mutex<u64>,
    /// Capacity one: a request made while one waits is the same request.
    tx: mpsc::Sender<()>,
}

impl Vacuums {
    /// Starts the task; `None` when `every` is 0 (no vacuums). The task
    /// ends when the returned value is dropped.
    pub(crate) fn start(connect: &PgConnectOptions, every: u64) -> Option<Vacuums> {
        if every == 0 {
            return None;
        }
        let (tx, rx) = mpsc::channel(1);
        let connect = connect.clone().options([("statement_timeout", "0")]);
        tokio::spawn(run(connect, rx));
        Some(Vacuums {
            every,
            claimed: Mutex::new(0),
            tx,
        })
    }

    /// Counts `n` claimed jobs; past the mark, asks for a vacuum and starts
    /// counting again.
    pub(crate) fn claimed(&self, n: usize) {
        let due = {
            let mut c = self.claimed.lock().unwrap_or_else(|e| e.into_inner());
            *c += n as u64;
            let due = *c >= self.every;
            if due {
                *c = 0;
            }
            due
        };
        if due {
            // Full: a vacuum is already asked for and will see these too.
            let _ = self.tx.try_send(());
        }
    }
}

async fn run(connect: PgConnectOptions, mut rx: mpsc::Receiver<()>) {
    let mut conn: Option<PgConnection> = None;
    while rx.recv().await.is_some() {
        if conn.is_none() {
            match PgConnection::connect_with(&connect).await {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    tracing::debug!(error = %e, "no connection for a vacuum of jobs");
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        let started = Instant::now();
        match sqlx::raw_sql(VACUUM).execute(&mut *c).await {
            Ok(_) => tracing::debug!(took = ?started.elapsed(), "vacuumed jobs"),
            Err(e) => {
                tracing::warn!(error = %e, "vacuum of jobs failed");
                conn = None;
            }
        }
    }
}
