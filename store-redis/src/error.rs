//! Mapping `redis::RedisError` into `jobstore_api::Error` by kind and code.

use jobstore_api::Error;
use redis::{ErrorKind as RK, RedisError, ServerErrorKind as SK};

/// Error codes a script of this crate raises (`redis.error_reply`); mapped
/// by code, never by message text.
pub(crate) const SCRIPT_CODE: &str = "JSBAD";

/// Whether `e` means "the server cannot be reached or cannot serve now":
/// connection refused, lost or timed out, cluster reconfiguring, loading,
/// busy with a script.
pub(crate) fn is_unavailable(e: &RedisError) -> bool {
    if e.is_io_error()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_cluster_error()
    {
        return true;
    }
    match e.kind() {
        RK::ClusterConnectionNotFound => true,
        RK::Server(
            SK::ClusterDown
            | SK::TryAgain
            | SK::Moved
            | SK::Ask
            | SK::MasterDown
            | SK::ReadOnly
            | SK::BusyLoading,
        ) => true,
        _ => matches!(
            e.code(),
            Some("BUSY" | "LOADING" | "CLUSTERDOWN" | "TRYAGAIN" | "MASTERDOWN")
        ),
    }
}

/// `e` as a jobstore error: [`Error::Unavailable`] (retryable) for
/// connection and cluster trouble, [`Error::Backend`] for the rest.
pub(crate) fn map(e: RedisError, what: &str) -> Error {
    if is_unavailable(&e) {
        Error::unavailable(format!("redis: {what}"), e)
    } else if e.code() == Some(SCRIPT_CODE) {
        Error::backend(
            format!("redis: {what}: the script rejected the stored data"),
            e,
        )
    } else if e.kind() == RK::InvalidClientConfig {
        Error::invalid(format!("redis: {what}: {e}"))
    } else {
        Error::backend(format!("redis: {what}"), e)
    }
}

/// A reply that does not have the shape a script promises.
pub(crate) fn malformed(what: &str) -> Error {
    Error::backend_msg(format!("redis: malformed reply or stored data: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobstore_api::ErrorKind;
    use std::io;

    /// The error a server sends as `reply` (RESP).
    fn server(reply: &[u8]) -> RedisError {
        match redis::parse_redis_value(reply).expect("parse") {
            redis::Value::ServerError(e) => e.into(),
            v => panic!("not an error reply: {v:?}"),
        }
    }

    fn kind(e: RedisError) -> ErrorKind {
        map(e, "test").kind()
    }

    #[test]
    fn errors_map_by_kind_and_code() {
        for e in [io::ErrorKind::ConnectionRefused, io::ErrorKind::TimedOut] {
            assert_eq!(kind(io::Error::from(e).into()), ErrorKind::Unavailable);
        }
        for reply in [
            &b"-LOADING Redis is loading the dataset in memory\r\n"[..],
            b"-BUSY Redis is busy running a script\r\n",
            b"-CLUSTERDOWN The cluster is down\r\n",
            b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
            b"-MASTERDOWN Link with MASTER is down\r\n",
            b"-READONLY You can't write against a read only replica.\r\n",
        ] {
            assert_eq!(kind(server(reply)), ErrorKind::Unavailable, "{reply:?}");
        }
        // A cluster client with no connection to the node a key maps to
        // (while the cluster reconfigures or a node is down).
        let no_node = RedisError::from((
            redis::ErrorKind::ClusterConnectionNotFound,
            "No connections found",
        ));
        assert_eq!(kind(no_node), ErrorKind::Unavailable);
        let bad = map(server(b"-JSBAD stored job has no jobtype\r\n"), "claim");
        assert_eq!(bad.kind(), ErrorKind::Backend);
        assert!(bad.to_string().contains("the script rejected"), "{bad}");
        for reply in [
            &b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"[..],
            b"-ERR unknown command\r\n",
        ] {
            assert_eq!(kind(server(reply)), ErrorKind::Backend, "{reply:?}");
        }
        let config = RedisError::from((redis::ErrorKind::InvalidClientConfig, "bad URL"));
        assert_eq!(kind(config), ErrorKind::InvalidInput);
    }
}
