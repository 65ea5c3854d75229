//! The one error type every backend returns.

use std::fmt;

/// A boxed error from a driver or the operating system, kept as the cause.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Shorthand for `Result<T, jobstore_api::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a [`JobStore`](crate::JobStore) operation can fail with.
///
/// The variants are portable *kinds*: every backend maps its driver's errors
/// into them by native error code (SQLSTATE, Redis error prefix, MongoDB
/// server code), never by parsing messages. Match on [`Error::kind`] to
/// decide what to do; use [`Error::is_retryable`] to decide whether to retry.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The caller passed something the contract forbids (a bad id, jobtype,
    /// limit or lease). Retrying the same call fails the same way.
    #[error("invalid input: {message}")]
    InvalidInput {
        /// What is wrong, naming the field and the rule it breaks.
        message: String,
    },
    /// The thing the operation needs does not exist.
    #[error("not found: {message}")]
    NotFound {
        /// What was looked for.
        message: String,
    },
    /// The operation lost a race or a lease: a sysid held by someone else,
    /// a stale sysid lease.
    #[error("conflict: {message}")]
    Conflict {
        /// What conflicted.
        message: String,
    },
    /// A payload, output or batch is larger than this store supports.
    #[error("too large: {what} is {size} bytes, the limit is {limit}")]
    TooLarge {
        /// What was too large (`"job data"`, `"result output"`, ...).
        what: String,
        /// Its size in bytes (or items, for batches).
        size: usize,
        /// The largest size accepted.
        limit: usize,
    },
    /// The backend could not be reached, or the connection broke, or it is
    /// overloaded. Retrying later may succeed.
    #[error("backend unavailable: {message}")]
    Unavailable {
        /// What failed.
        message: String,
        /// The driver's error.
        #[source]
        source: Option<BoxError>,
    },
    /// The store does not offer this operation (it says so in its
    /// [`Capabilities`](crate::Capabilities)). Retrying fails the same way.
    #[error("unsupported: {operation} is not offered by this store")]
    Unsupported {
        /// The operation, as the trait names it (`"list_jobs"`).
        operation: String,
    },
    /// Any other failure of the backend (a constraint it should not have
    /// hit, a malformed reply, a bug). Not retryable.
    #[error("backend error: {message}")]
    Backend {
        /// What failed.
        message: String,
        /// The driver's error.
        #[source]
        source: Option<BoxError>,
    },
}

/// The kind of an [`Error`], for matching without the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// See [`Error::InvalidInput`].
    InvalidInput,
    /// See [`Error::NotFound`].
    NotFound,
    /// See [`Error::Conflict`].
    Conflict,
    /// See [`Error::TooLarge`].
    TooLarge,
    /// See [`Error::Unavailable`].
    Unavailable,
    /// See [`Error::Unsupported`].
    Unsupported,
    /// See [`Error::Backend`].
    Backend,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::NotFound => "not found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::TooLarge => "too large",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Backend => "backend",
        })
    }
}

impl Error {
    /// The portable kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidInput { .. } => ErrorKind::InvalidInput,
            Error::NotFound { .. } => ErrorKind::NotFound,
            Error::Conflict { .. } => ErrorKind::Conflict,
            Error::TooLarge { .. } => ErrorKind::TooLarge,
            Error::Unavailable { .. } => ErrorKind::Unavailable,
            Error::Unsupported { .. } => ErrorKind::Unsupported,
            Error::Backend { .. } => ErrorKind::Backend,
        }
    }

    /// Whether the same call may succeed if retried later (only
    /// [`ErrorKind::Unavailable`]).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Unavailable { .. })
    }

    /// An [`Error::InvalidInput`] with this message.
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::InvalidInput {
            message: message.into(),
        }
    }

    /// An [`Error::NotFound`] with this message.
    pub fn not_found(message: impl Into<String>) -> Self {
        Error::NotFound {
            message: message.into(),
        }
    }

    /// An [`Error::Conflict`] with this message.
    pub fn conflict(message: impl Into<String>) -> Self {
        Error::Conflict {
            message: message.into(),
        }
    }

    /// The [`Error::Conflict`] of reserving a sysid held under a valid lease.
    pub fn sysid_held(sysid: &str) -> Self {
        Error::conflict(format!("sysid {sysid:?} is held under a valid lease"))
    }

    /// The [`Error::Conflict`] of renewing a sysid with a lease that no
    /// longer holds it.
    pub fn sysid_lost(sysid: &str) -> Self {
        Error::conflict(format!("sysid {sysid:?} is no longer held by this lease"))
    }

    /// The [`Error::Unsupported`] of `operation`.
    pub fn unsupported(operation: impl Into<String>) -> Self {
        Error::Unsupported {
            operation: operation.into(),
        }
    }

    /// An [`Error::TooLarge`].
    pub fn too_large(what: impl Into<String>, size: usize, limit: usize) -> Self {
        Error::TooLarge {
            what: what.into(),
            size,
            limit,
        }
    }

    /// An [`Error::Unavailable`] caused by `source`.
    pub fn unavailable(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Error::Unavailable {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// An [`Error::Backend`] caused by `source`.
    pub fn backend(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Error::Backend {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// An [`Error::Backend`] without an underlying cause (a malformed reply).
    pub fn backend_msg(message: impl Into<String>) -> Self {
        Error::Backend {
            message: message.into(),
            source: None,
        }
    }
}
