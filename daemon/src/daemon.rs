//! Starting and stopping a daemon: [`Daemon`] and [`run`].

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use jobstore_api::JobStore;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, redact_url};
use crate::events::JobEvents;
use crate::executor::{ExecSettings, Executor, ExecutorParts};
use crate::http::{AppState, Shared};
use crate::ingest::{Ingest, Outcomes};
use crate::journal::{Journal, JournalOptions};
use crate::metrics::{MeteredStore, Metrics, StoreHealth};
use crate::runner::Runners;
use crate::sysid::{self, SysidKeeper};
use crate::{factory, http};

/// Why a daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The configuration was refused.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The data dir could not be created.
    #[error("data dir {path}: {source}")]
    DataDir {
        /// The directory.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The journal could not be opened.
    #[error("journal: {0}")]
    Journal(#[from] crate::journal::JournalError),
    /// The store could not be opened.
    #[error("store {url}: {source}")]
    Store {
        /// The URL (password hidden).
        url: String,
        /// Why.
        source: jobstore_api::Error,
    },
    /// The sysid could not be taken.
    #[error(transparent)]
    Sysid(#[from] sysid::SysidError),
    /// The listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The job log or the span export could not start.
    #[error(transparent)]
    Events(#[from] crate::events::EventsError),
    /// The address file could not be written.
    #[error("cannot write the address file {path}: {source}")]
    AddrFile {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// A running daemon. Dropping it does not stop it; call
/// [`shutdown`](Daemon::shutdown) and [`wait`](Daemon::wait).
pub struct Daemon {
    addr: SocketAddr,
    sysid: String,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
    store: Arc<dyn JobStore>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon")
            .field("addr", &self.addr)
            .field("sysid", &self.sysid)
            .finish_non_exhaustive()
    }
}

impl Daemon {
    /// Opens the journal and the store, reserves the sysid, starts ingest
    /// and binds the listener. Returns once the daemon serves requests.
    pub async fn start(config: Config) -> Result<Daemon, DaemonError> {
        Self::start_inner(config, None).await
    }

    /// [`start`](Daemon::start) on a store already open (`config.store_url`
    /// is then only shown in logs): tools such as `jobstore bench` share
    /// one store, `memory://` included, between the daemon and themselves.
    pub async fn start_with_store(
        config: Config,
        store: Arc<dyn JobStore>,
    ) -> Result<Daemon, DaemonError> {
        Self::start_inner(config, Some(store)).await
    }

    async fn start_inner(
        config: Config,
        opened: Option<Arc<dyn JobStore>>,
    ) -> Result<Daemon, DaemonError> {
        config.check()?;
        let config = Arc::new(config);
        std::fs::create_dir_all(&config.data_dir).map_err(|source| DaemonError::DataDir {
            path: config.data_dir.display().to_string(),
            source,
        })?;

        // Opening verifies the unsynced part of the journal: blocking I/O.
        let options =
            JournalOptions::new(config.journal_dir()).segment_size(config.journal_segment_bytes);
        let journal = tokio::task::spawn_blocking(move || Journal::open(options))
            .await
            .map_err(|e| DaemonError::DataDir {
                path: config.journal_dir().display().to_string(),
                source: std::io::Error::other(e),
            })??;
        let recovery = journal.recovery();
        tracing::info!(?recovery, dir = %config.journal_dir().display(), "journal open");

        let url_for_log = config
            .store_url
            .as_deref()
            .map_or_else(|| "embedded SQLite".to_owned(), redact_url);
        let raw_store = match opened {
            Some(store) => store,
            None => factory::open(config.store_url.as_deref(), &config.data_dir)
                .await
                .map_err(|source| DaemonError::Store {
                    url: url_for_log.clone(),
                    source,
                })?,
        };
        let metrics = Arc::new(Metrics::new());
        let store_health = Arc::new(StoreHealth::default());
        let store: Arc<dyn JobStore> = Arc::new(MeteredStore::new(
            raw_store,
            metrics.clone(),
            store_health.clone(),
        ));
        let max_payload = store.capabilities().max_payload;

        let sysid_name = sysid::resolve(config.sysid.as_deref(), &config.data_dir)?;
        let keeper = SysidKeeper::reserve(
            store.clone(),
            &sysid_name,
            config.sysid_ttl,
            Some(config.data_dir.join(sysid::LEASE_FILE)),
        )
        .await?;
        let sysid = keeper.handle();
        let events = JobEvents::start(&config.events, &sysid_name, metrics.clone())?;

        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| DaemonError::Listen {
                    addr: config.listen,
                    source,
                })?;
        let addr = listener
            .local_addr()
            .map_err(|source| DaemonError::Listen {
                addr: config.listen,
                source,
            })?;
        if let Some(path) = &config.addr_file {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, format!("{addr}\n"))
                .and_then(|()| std::fs::rename(&tmp, path))
                .map_err(|source| DaemonError::AddrFile {
                    path: path.display().to_string(),
                    source,
                })?;
        }

        let shutdown = CancellationToken::new();
        let draining = CancellationToken::new();
        let outcomes = Arc::new(Outcomes::default());
        let executor = Executor::new(ExecutorParts {
            store: store.clone(),
            journal: journal.clone(),
            sysid: keeper.handle(),
            runners: Arc::new(Runners::new(config.http_allow_hosts.clone())),
            settings: ExecSettings {
                shutdown_grace: config.shutdown_grace,
                local: config.execute,
                process_handlers: config.allow_process_handlers,
                ..config.exec.clone()
            },
            metrics: metrics.clone(),
            max_payload,
            worker_expiry: config.exec.lease,
            events: events.clone(),
        });
        let state = AppState(Arc::new(Shared {
            store: store.clone(),
            journal: journal.clone(),
            config: config.clone(),
            metrics: metrics.clone(),
            store_health,
            outcomes: outcomes.clone(),
            sysid,
            draining: draining.clone(),
            max_payload,
            executor: executor.clone(),
            counts: Default::default(),
            events: events.clone(),
        }));

        // Ingest runs until told to stop, then drains within the grace period.
        let ingest_stop = CancellationToken::new();
        let ingest_drain = CancellationToken::new();
        let ingest = tokio::spawn(
            Ingest {
                journal: journal.clone(),
                store: store.clone(),
                outcomes,
                metrics: metrics.clone(),
                batch: config.ingest_batch,
                reserve_timeout: config.ingest_reserve_timeout,
                rejected_file: config.data_dir.join("rejected.jsonl"),
                notices: Some(executor.notices()),
                events: events.clone(),
            }
            .run(ingest_stop.clone(), ingest_drain.clone()),
        );
        let sysid_stop = CancellationToken::new();
        let sysid_task = tokio::spawn(keeper.run(sysid_stop.clone()));

        // Jobs run until shutdown, then stop gracefully.
        let exec_stop = CancellationToken::new();
        let executor = {
            let stop = exec_stop.clone();
            tokio::spawn(async move { executor.run(stop).await })
        };
        let app = http::router(state);
        tracing::info!(%addr, sysid = %sysid_name, store = %url_for_log, "jobstore listening");

        let task = {
            let shutdown = shutdown.clone();
            let config = config.clone();
            tokio::spawn(async move {
                let graceful = {
                    let shutdown = shutdown.clone();
                    let draining = draining.clone();
                    async move {
                        shutdown.cancelled().await;
                        draining.cancel();
                        tracing::info!("shutting down: no new requests, finishing those in flight");
                    }
                };
                let serve = http::serve::serve(listener, app, config.header_read_timeout, graceful);
                let deadline = async {
                    shutdown.cancelled().await;
                    tokio::time::sleep(config.shutdown_grace).await;
                };
                let http = async {
                    tokio::select! {
                        () = serve => {},
                        _ = deadline => tracing::warn!("requests still in flight at the end of the grace period"),
                    }
                };
                let jobs = async {
                    shutdown.cancelled().await;
                    exec_stop.cancel();
                    if executor.await.is_err() {
                        tracing::error!("executor failed");
                    }
                };
                // Requests and running jobs end side by side; jobs that
                // runs asked for are in the journal once both are done.
                tokio::join!(http, jobs);
                // Everything acknowledged is in the journal; move what is
                // left into the store within the grace period.
                ingest_stop.cancel();
                let drain_deadline = tokio::time::sleep(config.shutdown_grace);
                tokio::pin!(drain_deadline);
                let mut ingest = ingest;
                tokio::select! {
                    _ = &mut ingest => {}
                    _ = &mut drain_deadline => {
                        ingest_drain.cancel();
                        let _ = ingest.await;
                    }
                }
                let left = journal.stats().backlog_records;
                if left > 0 {
                    tracing::warn!(
                        records = left,
                        "journal records not yet in the store; the next start ingests them"
                    );
                }
                if let Err(e) = journal.close().await {
                    tracing::error!(error = %e, "journal close failed");
                }
                // The last events are written and exported.
                events.shutdown(std::time::Duration::from_secs(5)).await;
                sysid_stop.cancel();
                match sysid_task.await {
                    Ok(true) => tracing::info!("sysid released"),
                    _ => {
                        tracing::warn!("sysid not released; it frees itself when its lease expires")
                    }
                }
                tracing::info!("stopped");
            })
        };
        Ok(Daemon {
            addr,
            sysid: sysid_name,
            shutdown,
            task,
            store,
            metrics,
        })
    }

    /// The address the daemon listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The daemon's sysid.
    pub fn sysid(&self) -> &str {
        &self.sysid
    }

    /// The daemon's store (metered), for tests and tools.
    pub fn store(&self) -> Arc<dyn JobStore> {
        self.store.clone()
    }

    /// The daemon's metrics, as `GET /metrics` shows them.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// Begins a graceful shutdown.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Waits until the daemon has stopped.
    pub async fn wait(self) {
        if let Err(e) = self.task.await {
            tracing::error!(error = %e, "daemon task failed");
        }
    }
}

/// Runs a daemon until `shutdown` resolves, then stops it gracefully.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), DaemonError> {
    let daemon = Daemon::start(config).await?;
    shutdown.await;
    daemon.shutdown();
    daemon.wait().await;
    Ok(())
}
