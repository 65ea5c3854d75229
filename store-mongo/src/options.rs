//! Options and URL parsing: [`MongoOptions`], and this store's own URL
//! parameters, split off before the URL reaches the driver.

use std::time::Duration;

use jobstore_api::{Error, Result};

use crate::store;

/// The URL parameter that sets the collection prefix (removed before the
/// URL reaches the driver).
pub const PREFIX_PARAM: &str = "jobstore_prefix";

/// The URL parameter that sets the write-concern timeout in milliseconds.
pub const WTIMEOUT_PARAM: &str = "jobstore_wtimeout_ms";

/// The URL parameter that sets the per-round-trip timeout in milliseconds.
pub const TIMEOUT_PARAM: &str = "jobstore_timeout_ms";

/// The URL parameter that lowers the largest payload accepted, in bytes.
pub const MAX_PAYLOAD_PARAM: &str = "jobstore_max_payload";

/// How long a write waits for a majority to acknowledge it, by default.
pub const DEFAULT_WTIMEOUT: Duration = Duration::from_secs(10);

/// The longest one round trip may take, by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The database used when neither the URL path nor [`MongoOptions`] names one.
pub const DEFAULT_DATABASE: &str = "jobstore";

/// Where a [`MongoStore`](crate::MongoStore) keeps its collections, set in code; each field
/// overrides the URL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MongoOptions {
    /// The database (default: the URL's path, else [`DEFAULT_DATABASE`]).
    pub database: Option<String>,
    /// A prefix for the collection names (default: the URL's
    /// `jobstore_prefix` parameter, else none).
    pub prefix: Option<String>,
}

impl MongoOptions {
    /// Uses this database.
    pub fn database(mut self, database: impl Into<String>) -> Self {
        self.database = Some(database.into());
        self
    }

    /// Prefixes every collection name with `prefix`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }
}

/// This store's own URL parameters, and the URL left for the driver.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OwnParams {
    pub(crate) driver_url: String,
    pub(crate) prefix: Option<String>,
    pub(crate) wtimeout: Duration,
    pub(crate) timeout: Duration,
    pub(crate) max_payload: Option<usize>,
}

/// A positive integer URL parameter.
pub(crate) fn positive(key: &str, value: &str) -> Result<u64> {
    match value.parse::<u64>() {
        Ok(v) if v > 0 => Ok(v),
        _ => Err(Error::invalid(format!(
            "URL parameter {key} must be a positive integer, not {value:?}"
        ))),
    }
}

/// Splits this store's own parameters off `url` (see [`OwnParams`]).
pub(crate) fn split_own_params(url: &str) -> Result<OwnParams> {
    let mut own = OwnParams {
        driver_url: url.to_owned(),
        prefix: None,
        wtimeout: DEFAULT_WTIMEOUT,
        timeout: DEFAULT_TIMEOUT,
        max_payload: None,
    };
    let Some((base, query)) = url.split_once('?') else {
        return Ok(own);
    };
    let mut kept = Vec::new();
    for param in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        if key.eq_ignore_ascii_case(PREFIX_PARAM) {
            own.prefix = Some(value.to_owned());
        } else if key.eq_ignore_ascii_case(WTIMEOUT_PARAM) {
            own.wtimeout = Duration::from_millis(positive(key, value)?);
        } else if key.eq_ignore_ascii_case(TIMEOUT_PARAM) {
            own.timeout = Duration::from_millis(positive(key, value)?);
        } else if key.eq_ignore_ascii_case(MAX_PAYLOAD_PARAM) {
            let v = usize::try_from(positive(key, value)?).unwrap_or(usize::MAX);
            let min = jobstore_api::limits::MIN_PAYLOAD_SUPPORT;
            if !(min..=store::MAX_PAYLOAD).contains(&v) {
                return Err(Error::invalid(format!(
                    "URL parameter {key} must be between {min} and {} bytes, not {v}",
                    store::MAX_PAYLOAD
                )));
            }
            own.max_payload = Some(v);
        } else {
            kept.push(param);
        }
    }
    own.driver_url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok(own)
}

/// A database name MongoDB accepts: 1..=63 bytes, none of `/\. "$*<>:|?`
/// or NUL.
pub(crate) fn check_database_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > 63
        || name
            .chars()
            .any(|c| "/\\. \"$*<>:|?\0".contains(c) || c.is_control())
    {
        return Err(Error::invalid(format!(
            "MongoDB database name {name:?} must be 1..=63 bytes without / \\ . space \" $ * < > : | ? or control characters"
        )));
    }
    Ok(())
}

/// A collection prefix: up to 64 bytes of `[A-Za-z0-9_.-]`.
pub(crate) fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.len() > 64
        || !prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
    {
        return Err(Error::invalid(format!(
            "collection prefix {prefix:?} must be at most 64 bytes of A-Z a-z 0-9 _ . -"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_params_are_stripped() {
        let split = |u: &str| {
            let own = split_own_params(u).unwrap();
            (own.driver_url, own.prefix)
        };
        assert_eq!(split("mongodb://h:1/db"), ("mongodb://h:1/db".into(), None));
        assert_eq!(
            split("mongodb://h:1/db?jobstore_prefix=q1_"),
            ("mongodb://h:1/db".into(), Some("q1_".into()))
        );
        assert_eq!(
            split("mongodb://u:p@h1,h2/db?replicaSet=rs&JOBSTORE_PREFIX=x.&tls=true"),
            (
                "mongodb://u:p@h1,h2/db?replicaSet=rs&tls=true".into(),
                Some("x.".into())
            )
        );
        assert_eq!(
            split("mongodb://h/?authSource=admin"),
            ("mongodb://h/?authSource=admin".into(), None)
        );
    }

    #[test]
    fn timeouts_come_from_the_url_with_defaults() {
        let own = split_own_params("mongodb://h/db").unwrap();
        assert_eq!(
            (own.wtimeout, own.timeout),
            (DEFAULT_WTIMEOUT, DEFAULT_TIMEOUT)
        );
        let own = split_own_params(
            "mongodb://h/db?jobstore_wtimeout_ms=250&w=1&jobstore_timeout_ms=900&jobstore_max_payload=2000000",
        )
        .unwrap();
        assert_eq!(own.driver_url, "mongodb://h/db?w=1");
        assert_eq!(own.wtimeout, Duration::from_millis(250));
        assert_eq!(own.timeout, Duration::from_millis(900));
        assert_eq!(own.max_payload, Some(2_000_000));
        for bad in [
            "mongodb://h/?jobstore_timeout_ms=0",
            "mongodb://h/?jobstore_wtimeout_ms=-1",
            "mongodb://h/?jobstore_max_payload=x",
            "mongodb://h/?jobstore_max_payload=1000",
            "mongodb://h/?jobstore_max_payload=99999999",
        ] {
            let e = split_own_params(bad).unwrap_err();
            assert_eq!(e.kind(), jobstore_api::ErrorKind::InvalidInput, "{bad}");
        }
    }

    #[test]
    fn names_are_checked() {
        assert!(check_database_name("jst_0123456789abcdef").is_ok());
        for bad in ["", "a.b", "a/b", "a b", "a$", &"d".repeat(64)] {
            assert!(check_database_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_prefix("").is_ok());
        assert!(check_prefix("app1.q_").is_ok());
        assert!(check_prefix("a$").is_err());
        assert!(check_prefix(&"p".repeat(65)).is_err());
        // The longest names allowed.
        assert!(check_database_name(&"d".repeat(63)).is_ok());
        assert!(check_prefix(&"p".repeat(64)).is_ok());
    }

    #[test]
    fn option_setters_set_their_fields() {
        let o = MongoOptions::default().database("db1").prefix("p_");
        assert_eq!(o.database.as_deref(), Some("db1"));
        assert_eq!(o.prefix.as_deref(), Some("p_"));
    }
}
