//! Wake-ups for new work: [`WorkWatcher`], returned by
//! [`JobStore::watch`](crate::JobStore::watch).

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use tokio::sync::broadcast;

/// A notice that work may have arrived for `jobtype`; an empty jobtype
/// means "anything may have changed" (sent, for example, after a listener
/// reconnects and may have missed notices).
pub type WorkNotice = String;

/// Why [`WorkWatcher::wait`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wakeup {
    /// Work may have arrived for these jobtypes.
    Work(BTreeSet<String>),
    /// Something may have changed, jobtype unknown (a polling interval went
    /// by, notices were missed): check every jobtype.
    Unknown,
    /// The timeout passed with no notice.
    TimedOut,
}

/// Waits for new work. Created by [`JobStore::watch`](crate::JobStore::watch);
/// keep one per daemon and call [`wait`](Self::wait) in the claim loop.
///
/// A store with a notification channel feeds it notices; without one it
/// polls: `wait` returns [`Wakeup::Unknown`] after the poll interval. It may
/// wake spuriously; it never sleeps through an add made by another process
/// for longer than the poll interval.
pub struct WorkWatcher {
    rx: Option<broadcast::Receiver<WorkNotice>>,
    poll: Duration,
    _guard: Option<Box<dyn Send + Sync>>,
}

impl fmt::Debug for WorkWatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkWatcher")
            .field("notifications", &self.rx.is_some())
            .field("poll", &self.poll)
            .finish()
    }
}

impl WorkWatcher {
    /// A watcher that only polls, waking every `poll`.
    pub fn polling(poll: Duration) -> Self {
        WorkWatcher {
            rx: None,
            poll,
            _guard: None,
        }
    }

    /// A watcher fed by a channel of notices. `guard` is kept alive as long
    /// as the watcher (for example a handle that stops a listener task on
    /// drop). If the channel closes, the watcher falls back to polling every
    /// `poll`. With notifications, `poll` still bounds every wait, so jobs
    /// that become due by time alone are picked up.
    pub fn notified(
        rx: broadcast::Receiver<WorkNotice>,
        poll: Duration,
        guard: Option<Box<dyn Send + Sync>>,
    ) -> Self {
        WorkWatcher {
            rx: Some(rx),
            poll,
            _guard: guard,
        }
    }

    /// Whether this watcher receives notices (false: polling only).
    pub fn is_notified(&self) -> bool {
        self.rx.is_some()
    }

    /// Waits until work may have arrived, or `timeout`, whichever is first.
    /// A wait is never longer than the poll interval: when that interval is
    /// shorter than `timeout`, its end returns [`Wakeup::Unknown`].
    pub async fn wait(&mut self, timeout: Duration) -> Wakeup {
        let (limit, on_limit) = if self.poll < timeout {
            (self.poll, Wakeup::Unknown)
        } else {
            (timeout, Wakeup::TimedOut)
        };
        let Some(rx) = self.rx.as_mut() else {
            tokio::time::sleep(limit).await;
            return on_limit;
        };
        let first = match tokio::time::timeout(limit, rx.recv()).await {
            Err(_) => return on_limit,
            Ok(first) => first,
        };
        let mut jobtypes = BTreeSet::new();
        let mut unknown = false;
        let mut next = match first {
            Err(broadcast::error::RecvError::Closed) => {
                self.rx = None;
                return Wakeup::Unknown;
            }
            Err(broadcast::error::RecvError::Lagged(_)) => None,
            Ok(notice) => Some(notice),
        };
        loop {
            match next {
                Some(jt) if !jt.is_empty() => {
                    jobtypes.insert(jt);
                }
                _ => unknown = true,
            }
            next = match rx.try_recv() {
                Ok(notice) => Some(notice),
                Err(broadcast::error::TryRecvError::Lagged(_)) => None,
                Err(_) => break,
            };
        }
        if unknown {
            Wakeup::Unknown
        } else {
            Wakeup::Work(jobtypes)
        }
    }
}
