//! The notice bus: which jobtypes may have new work, for everything in this
//! daemon that waits for work (the claim loop, long-polling fetches of
//! remote workers).
//!
//! Notices come from the store ([`JobStore::watch`](jobstore_api::JobStore::watch),
//! forwarded by [`pump`]) and from this daemon's own ingest, which names the
//! jobtype of every new job at once, whatever the store's notifications do.
//! A notice is a hint: a listener that lags behind or times out looks at the
//! store instead.

use std::time::Duration;

use jobstore_api::{Wakeup, WorkWatcher};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

/// Notices a listener may fall behind by before it is told it lagged.
const CAPACITY: usize = 1024;

/// What a listener hears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// This jobtype (a store jobtype) may have new work.
    Jobtype(String),
    /// Anything may have changed: look at the store.
    Anything,
}

/// The bus: cheap to clone; every clone sends to the same listeners.
#[derive(Debug, Clone)]
pub struct Notices {
    tx: broadcast::Sender<String>,
}

impl Default for Notices {
    fn default() -> Self {
        Notices {
            tx: broadcast::channel(CAPACITY).0,
        }
    }
}

impl Notices {
    /// Tells every listener that `jobtype` may have new work.
    pub fn jobtype(&self, jobtype: &str) {
        let _ = self.tx.send(jobtype.to_owned());
    }

    /// Tells every listener that anything may have changed.
    pub fn anything(&self) {
        let _ = self.tx.send(String::new());
    }

    /// A new listener, hearing what is sent from now on.
    pub fn listen(&self) -> Listener {
        Listener {
            rx: self.tx.subscribe(),
        }
    }
}

/// One listener of the bus.
#[derive(Debug)]
pub struct Listener {
    rx: broadcast::Receiver<String>,
}

impl Listener {
    /// The next notice; [`Notice::Anything`] when notices were missed (the
    /// listener fell behind). Waits forever while the bus is silent, and
    /// once every sender is gone.
    pub async fn next(&mut self) -> Notice {
        loop {
            match self.rx.recv().await {
                Ok(jt) => return notice(jt),
                Err(broadcast::error::RecvError::Lagged(_)) => return Notice::Anything,
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    }

    /// A notice already sent, without waiting: `None` when there is none.
    pub fn try_next(&mut self) -> Option<Notice> {
        match self.rx.try_recv() {
            Ok(jt) => Some(notice(jt)),
            Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed) => {
                None
            }
            Err(broadcast::error::TryRecvError::Lagged(_)) => Some(Notice::Anything),
        }
    }
}

fn notice(jt: String) -> Notice {
    if jt.is_empty() {
        Notice::Anything
    } else {
        Notice::Jobtype(jt)
    }
}

/// Forwards the store's wake-ups to the bus until `stop`: a notice per
/// jobtype, [`Notice::Anything`] when the store cannot say which.
pub async fn pump(
    mut watcher: WorkWatcher,
    notices: Notices,
    poll: Duration,
    stop: CancellationToken,
) {
    loop {
        let w = tokio::select! {
            _ = stop.cancelled() => return,
            w = watcher.wait(poll) => w,
        };
        match w {
            Wakeup::Work(types) => types.iter().for_each(|jt| notices.jobtype(jt)),
            Wakeup::Unknown => notices.anything(),
            Wakeup::TimedOut => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn listeners_hear_jobtypes_and_lagging_means_anything() {
        let bus = Notices::default();
        let mut l = bus.listen();
        assert_eq!(l.try_next(), None);
        bus.jobtype("acme-mail");
        bus.anything();
        assert_eq!(l.next().await, Notice::Jobtype("acme-mail".into()));
        assert_eq!(l.try_next(), Some(Notice::Anything));
        for _ in 0..CAPACITY + 1 {
            bus.jobtype("acme-mail");
        }
        assert_eq!(l.next().await, Notice::Anything, "fell behind");
    }
}
