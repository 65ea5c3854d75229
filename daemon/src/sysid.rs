//! The daemon's sysid: its name in the store, held under a lease.
//!
//! Reserved at start (a sysid another live daemon holds is refused with a
//! clear error), renewed in the background every third of its TTL, and
//! released at shutdown. When renewal fails past expiry (the store is
//! unreachable, or another daemon took the name over), the daemon no longer
//! holds its sysid: [`SysidHandle::held`] turns false, claims stop, health
//! says so, and the keeper keeps trying to get it back.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use jobstore_api::{ErrorKind, JobStore, Millis, SysidLease, now_millis};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The file in the data dir that keeps a generated sysid.
pub const SYSID_FILE: &str = "sysid";
/// The file in the data dir that keeps the held lease (sysid and token), so
/// that a daemon restarted after a crash takes its own sysid back at once
/// instead of waiting for the old lease to expire. Another daemon given the
/// same name has no token and is still refused.
pub const LEASE_FILE: &str = "sysid.lease";

/// Why the sysid could not be taken at start.
#[derive(Debug, thiserror::Error)]
pub enum SysidError {
    /// Another live daemon holds it.
    #[error(
        "sysid {sysid:?} is held by another live daemon (its lease runs for up to {ttl:?} more); \
         give this daemon another name with --sysid, or stop the other one"
    )]
    Held {
        /// The sysid.
        sysid: String,
        /// The reservation length.
        ttl: Duration,
    },
    /// The store refused or failed.
    #[error("cannot reserve sysid {sysid:?}: {source}")]
    Store {
        /// The sysid.
        sysid: String,
        /// The store's error.
        source: jobstore_api::Error,
    },
    /// The sysid file could not be read or written.
    #[error("sysid file {path}: {source}")]
    File {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The configured or stored sysid is not valid.
    #[error("invalid sysid: {0}")]
    Invalid(String),
}

/// The sysid to use: the configured one, else the one kept in the data dir,
/// else a new one (`{hostname}-{6 hex}`) written there.
pub fn resolve(configured: Option<&str>, data_dir: &Path) -> Result<String, SysidError> {
    let check =
        |s: &str| jobstore_api::validate::sysid(s).map_err(|e| SysidError::Invalid(e.to_string()));
    if let Some(s) = configured {
        check(s)?;
        return Ok(s.to_owned());
    }
    let path = data_dir.join(SYSID_FILE);
    let file_err = |source| SysidError::File {
        path: path.display().to_string(),
        source,
    };
    match std::fs::read_to_string(&path) {
        Ok(s) => {
            let s = s.trim();
            check(s)?;
            return Ok(s.to_owned());
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(file_err(e)),
    }
    let host: String = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(64)
        .collect();
    let host = if host.is_empty() || host.starts_with('_') {
        "jobstore".to_owned()
    } else {
        host
    };
    let suffix: [u8; 3] = rand::random();
    let sysid = format!("{host}-{}", hex::encode(suffix));
    check(&sysid)?;
    std::fs::create_dir_all(data_dir).map_err(file_err)?;
    std::fs::write(&path, format!("{sysid}\n")).map_err(file_err)?;
    Ok(sysid)
}

/// The state of the sysid, as the keeper sees it.
#[derive(Debug, Clone)]
pub struct SysidStatus {
    /// The sysid.
    pub sysid: String,
    /// The lease while held.
    pub lease: Option<SysidLease>,
    /// The last renewal error, if the last attempt failed.
    pub last_error: Option<String>,
}

/// A read handle on the sysid's state.
#[derive(Debug, Clone)]
pub struct SysidHandle {
    rx: watch::Receiver<SysidStatus>,
}

impl SysidHandle {
    /// The sysid.
    pub fn sysid(&self) -> String {
        self.rx.borrow().sysid.clone()
    }

    /// Whether the daemon holds its sysid at `now` (a valid lease).
    pub fn held_at(&self, now: Millis) -> bool {
        self.rx
            .borrow()
            .lease
            .as_ref()
            .is_some_and(|l| l.expires > now)
    }

    /// Whether the daemon holds its sysid now.
    pub fn held(&self) -> bool {
        self.held_at(now_millis())
    }

    /// The current status.
    pub fn status(&self) -> SysidStatus {
        self.rx.borrow().clone()
    }

    /// Resolves when the status changes.
    pub async fn changed(&mut self) {
        let _ = self.rx.changed().await;
    }
}

/// Reserves and keeps the sysid.
pub struct SysidKeeper {
    store: Arc<dyn JobStore>,
    ttl: Duration,
    tx: watch::Sender<SysidStatus>,
    lease_file: Option<PathBuf>,
}

impl SysidKeeper {
    /// Reserves `sysid` for `ttl`. Fails when another live daemon holds it.
    /// With a `lease_file` (in the data dir), a lease this data dir held
    /// before a crash is taken back, and the new lease is kept there.
    pub async fn reserve(
        store: Arc<dyn JobStore>,
        sysid: &str,
        ttl: Duration,
        lease_file: Option<PathBuf>,
    ) -> Result<SysidKeeper, SysidError> {
        let store_err = |source| SysidError::Store {
            sysid: sysid.to_owned(),
            source,
        };
        let lease = match store.reserve_sysid(sysid, ttl, now_millis()).await {
            Ok(lease) => lease,
            Err(e) if e.kind() == ErrorKind::Conflict => {
                let saved = lease_file
                    .as_deref()
                    .and_then(read_lease)
                    .filter(|l| l.sysid == sysid);
                let Some(saved) = saved else {
                    return Err(SysidError::Held {
                        sysid: sysid.to_owned(),
                        ttl,
                    });
                };
                match store.renew_sysid(&saved, ttl, now_millis()).await {
                    Ok(lease) => {
                        tracing::info!(
                            sysid,
                            "took back the sysid this data dir held before an unclean stop"
                        );
                        lease
                    }
                    Err(e) if e.kind() == ErrorKind::Conflict => {
                        return Err(SysidError::Held {
                            sysid: sysid.to_owned(),
                            ttl,
                        });
                    }
                    Err(e) => return Err(store_err(e)),
                }
            }
            Err(e) => return Err(store_err(e)),
        };
        if let Some(path) = &lease_file {
            write_lease(path, &lease).map_err(|source| SysidError::File {
                path: path.display().to_string(),
                source,
            })?;
        }
        let (tx, _) = watch::channel(SysidStatus {
            sysid: sysid.to_owned(),
            lease: Some(lease),
            last_error: None,
        });
        Ok(SysidKeeper {
            store,
            ttl,
            tx,
            lease_file,
        })
    }

    /// A read handle.
    pub fn handle(&self) -> SysidHandle {
        SysidHandle {
            rx: self.tx.subscribe(),
        }
    }

    /// Renews every third of the TTL until `cancel`, then releases the
    /// sysid. Returns whether the release freed it.
    pub async fn run(self, cancel: CancellationToken) -> bool {
        let period = self.ttl / 3;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tokio::time::sleep(period) => {}
            }
            self.tick().await;
        }
        self.release().await
    }

    async fn tick(&self) {
        let status = self.tx.borrow().clone();
        let now = now_millis();
        let result = match &status.lease {
            Some(lease) => self.store.renew_sysid(lease, self.ttl, now).await,
            // Lost earlier: try to take it again (free or expired).
            None => self.store.reserve_sysid(&status.sysid, self.ttl, now).await,
        };
        self.tx.send_modify(|s| match result {
            Ok(lease) => {
                if s.lease.is_none() {
                    tracing::info!(sysid = %s.sysid, "sysid held again");
                    if let Some(path) = &self.lease_file
                        && let Err(e) = write_lease(path, &lease)
                    {
                        tracing::warn!(error = %e, "cannot write the sysid lease file");
                    }
                }
                s.lease = Some(lease);
                s.last_error = None;
            }
            Err(e) if e.kind() == ErrorKind::Conflict => {
                if s.lease.is_some() {
                    tracing::error!(sysid = %s.sysid, error = %e, "sysid lost: another daemon holds it; claiming stops");
                }
                s.lease = None;
                s.last_error = Some(e.to_string());
            }
            Err(e) => {
                let expired = s.lease.as_ref().is_none_or(|l| l.expires <= now);
                tracing::warn!(sysid = %s.sysid, error = %e, expired, "cannot renew the sysid");
                s.last_error = Some(e.to_string());
                // Keep the lease to retry renewing it: the store accepts a
                // renewal past expiry as long as nobody reserved it since.
                // `held()` already reads false once it expired.
            }
        });
    }

    async fn release(&self) -> bool {
        let lease = self.tx.borrow().lease.clone();
        let Some(lease) = lease else {
            return false;
        };
        match self.store.release_sysid(&lease).await {
            Ok(freed) => {
                self.tx.send_modify(|s| s.lease = None);
                if let Some(path) = &self.lease_file {
                    let _ = std::fs::remove_file(path);
                }
                freed
            }
            Err(e) => {
                tracing::warn!(sysid = %lease.sysid, error = %e, "cannot release the sysid; it frees itself when its lease expires");
                false
            }
        }
    }
}

fn read_lease(path: &Path) -> Option<SysidLease> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

fn write_lease(path: &Path, lease: &SysidLease) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(
        serde_json::to_string(lease)
            .map_err(std::io::Error::other)?
            .as_bytes(),
    )?;
    f.sync_data()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobstore_api::MemoryStore;

    #[test]
    fn generated_sysid_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let a = resolve(None, dir.path()).unwrap();
        let b = resolve(None, dir.path()).unwrap();
        assert_eq!(a, b);
        assert_eq!(resolve(Some("node-1"), dir.path()).unwrap(), "node-1");
        assert!(resolve(Some("__x"), dir.path()).is_err());
    }

    #[tokio::test]
    async fn a_held_sysid_is_refused_and_released_at_the_end() {
        let store: Arc<dyn JobStore> = Arc::new(MemoryStore::new());
        let ttl = Duration::from_secs(30);
        let keeper = SysidKeeper::reserve(store.clone(), "node-1", ttl, None)
            .await
            .unwrap();
        let handle = keeper.handle();
        assert!(handle.held());
        let err = SysidKeeper::reserve(store.clone(), "node-1", ttl, None)
            .await
            .err()
            .unwrap();
        assert!(matches!(err, SysidError::Held { .. }), "{err}");
        assert!(err.to_string().contains("--sysid"));
        let cancel = CancellationToken::new();
        cancel.cancel();
        assert!(keeper.run(cancel).await);
        assert!(!handle.held());
        SysidKeeper::reserve(store, "node-1", ttl, None)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_restart_takes_back_its_own_sysid_but_not_anothers() {
        let store: Arc<dyn JobStore> = Arc::new(MemoryStore::new());
        let ttl = Duration::from_secs(30);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(LEASE_FILE);
        let first = SysidKeeper::reserve(store.clone(), "n", ttl, Some(file.clone()))
            .await
            .unwrap();
        // Crash: no release. The same data dir gets it back at once.
        drop(first);
        let again = SysidKeeper::reserve(store.clone(), "n", ttl, Some(file.clone()))
            .await
            .unwrap();
        assert!(again.handle().held());
        // Another data dir with the same name is refused.
        let other = tempfile::tempdir().unwrap();
        let err =
            SysidKeeper::reserve(store.clone(), "n", ttl, Some(other.path().join(LEASE_FILE)))
                .await
                .err()
                .unwrap();
        assert!(matches!(err, SysidError::Held { .. }));
        let cancel = CancellationToken::new();
        cancel.cancel();
        assert!(again.run(cancel).await);
        assert!(!file.exists());
    }

    #[tokio::test]
    async fn a_sysid_taken_over_is_lost_then_regained() {
        let store: Arc<dyn JobStore> = Arc::new(MemoryStore::new());
        let keeper = SysidKeeper::reserve(store.clone(), "n", Duration::from_secs(3), None)
            .await
            .unwrap();
        let handle = keeper.handle();
        let lease = handle.status().lease.unwrap();
        // Another daemon takes it over after expiry.
        let other = store
            .reserve_sysid("n", Duration::from_secs(3), lease.expires)
            .await
            .unwrap();
        keeper.tick().await;
        assert!(!handle.held());
        assert!(handle.status().last_error.is_some());
        store.release_sysid(&other).await.unwrap();
        keeper.tick().await;
        assert!(handle.held());
    }
}
