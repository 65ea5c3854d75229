//! Mapping driver errors into [`jobstore_api::Error`] kinds, by error kind
//! and SQLSTATE, never by message text.

use jobstore_api::Error;

/// Whether a SQLSTATE means "the server cannot serve this now, try again":
/// connection exceptions (08), insufficient resources (53), operator
/// intervention (57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot
/// connect now, 57014 statement timeout), serialization failure and
/// deadlock (40001, 40P01), lock timeout (55P03), and a read-only server
/// (25006: a standby, for example during a failover).
pub(crate) fn retryable_sqlstate(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("53")
        || matches!(
            code,
            "57P01" | "57P02" | "57P03" | "57014" | "40001" | "40P01" | "55P03" | "25006"
        )
}

/// Maps a sqlx error from operation `what` into a store error.
pub(crate) fn map(what: &str, e: sqlx::Error) -> Error {
    let retryable = match &e {
        sqlx::Error::Database(db) => db.code().is_some_and(|c| retryable_sqlstate(&c)),
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        _ => false,
    };
    if retryable {
        Error::unavailable(format!("PostgreSQL {what}"), e)
    } else {
        Error::backend(format!("PostgreSQL {what}"), e)
    }
}

/// Maps a migration error: its database errors like [`map`], the rest
/// (a changed or missing migration) as backend errors.
pub(crate) fn map_migrate(e: sqlx::migrate::MigrateError) -> Error {
    match e {
        sqlx::migrate::MigrateError::Execute(inner)
        | sqlx::migrate::MigrateError::ExecuteMigration(inner, _) => map("migration", inner),
        other => Error::backend("PostgreSQL migration", other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates() {
        for c in [
            "08000", "08006", "08001", "53300", "53200", "57P01", "57P02", "57P03", "40001",
            "40P01", "57014",
        ] {
            assert!(retryable_sqlstate(c), "{c}");
        }
        for c in ["23505", "42P01", "22P02", "28P01", "3D000", "XX000"] {
            assert!(!retryable_sqlstate(c), "{c}");
        }
    }

    #[test]
    fn driver_kinds() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert!(map("x", sqlx::Error::Io(io)).is_retryable());
        assert!(map("x", sqlx::Error::PoolTimedOut).is_retryable());
        assert!(map("x", sqlx::Error::PoolClosed).is_retryable());
        let e = map("x", sqlx::Error::Protocol("odd".into()));
        assert_eq!(e.kind(), jobstore_api::ErrorKind::Backend);
        assert!(std::error::Error::source(&e).is_some());
        assert!(!map("x", sqlx::Error::RowNotFound).is_retryable());
    }
}
