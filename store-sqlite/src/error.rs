//! sqlx errors to [`jobstore_api::Error`] kinds, by sqlx error variant and
//! SQLite result code.

use jobstore_api::Error;
use sqlx::sqlite::SqliteError;

/// SQLite's primary result codes that mean "try again later".
const SQLITE_BUSY: i32 = 5;
const SQLITE_LOCKED: i32 = 6;
const SQLITE_NOMEM: i32 = 7;
const SQLITE_IOERR: i32 = 10;
const SQLITE_FULL: i32 = 13;
const SQLITE_CANTOPEN: i32 = 14;
const SQLITE_PROTOCOL: i32 = 15;
/// A string or blob larger than SQLite's limit.
const SQLITE_TOOBIG: i32 = 18;
/// SQLite's default `SQLITE_MAX_LENGTH`, the limit behind `SQLITE_TOOBIG`.
const SQLITE_MAX_LENGTH: usize = 1_000_000_000;

/// The extended result code of a SQLite error, if `e` is one.
pub(crate) fn sqlite_code(e: &sqlx::Error) -> Option<i32> {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<SqliteError>()
            .and_then(sqlx::error::DatabaseError::code)
            .and_then(|c| c.parse::<i32>().ok()),
        _ => None,
    }
}

/// Whether `e` is `SQLITE_BUSY` or `SQLITE_LOCKED` (any extended code).
pub(crate) fn is_busy(e: &sqlx::Error) -> bool {
    matches!(
        sqlite_code(e).map(|c| c & 0xff),
        Some(SQLITE_BUSY | SQLITE_LOCKED)
    )
}

/// Maps a sqlx error from operation `what` into the API's error kinds.
pub(crate) fn map(what: &str, e: sqlx::Error) -> Error {
    let message = format!("sqlite {what} failed");
    match &e {
        sqlx::Error::Database(_) => match sqlite_code(&e).map(|c| c & 0xff) {
            Some(
                SQLITE_BUSY | SQLITE_LOCKED | SQLITE_NOMEM | SQLITE_IOERR | SQLITE_FULL
                | SQLITE_CANTOPEN | SQLITE_PROTOCOL,
            ) => Error::unavailable(message, e),
            Some(SQLITE_TOOBIG) => Error::too_large(
                format!("a value in sqlite {what}"),
                SQLITE_MAX_LENGTH + 1,
                SQLITE_MAX_LENGTH,
            ),
            _ => Error::backend(message, e),
        },
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => Error::unavailable(message, e),
        _ => Error::backend(message, e),
    }
}

/// Maps a migration error.
pub(crate) fn map_migrate(e: sqlx::migrate::MigrateError) -> Error {
    match e {
        sqlx::migrate::MigrateError::Execute(e) => map("migration", e),
        other => Error::backend("sqlite migration failed", other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_database_errors() {
        assert!(map("x", sqlx::Error::PoolTimedOut).is_retryable());
        assert!(map("x", sqlx::Error::PoolClosed).is_retryable());
        assert!(
            map(
                "x",
                sqlx::Error::Io(std::io::Error::other("disk went away"))
            )
            .is_retryable()
        );
        assert_eq!(
            map("x", sqlx::Error::RowNotFound).kind(),
            jobstore_api::ErrorKind::Backend
        );
    }
}
