//! Options and URL parsing.

use std::time::Duration;

use jobstore_api::limits::DEFAULT_POLL_INTERVAL;
use jobstore_api::{Error, Result};

/// The namespace used when neither the URL nor the options name one.
pub const DEFAULT_PREFIX: &str = "jobstore";

/// Options of a [`RedisStore`](crate::RedisStore). Build with
/// [`RedisOptions::new`] and the setters.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RedisOptions {
    /// The namespace (key prefix); overrides the URL's `prefix` parameter.
    pub prefix: Option<String>,
    /// How long one connection attempt may take (default 5 s).
    pub connection_timeout: Duration,
    /// How long one reply may take (default 30 s).
    pub response_timeout: Duration,
    /// The longest a [`WorkWatcher`](jobstore_api::WorkWatcher) waits
    /// without a notice (default 500 ms).
    pub poll_interval: Duration,
    /// At most this many due jobs, and as many expired leases, become
    /// eligible in one claim (default 5,000): bounds the work of one claim.
    /// Never below [`MAX_CLAIM`](jobstore_api::limits::MAX_CLAIM) (a
    /// smaller value is raised to it), so one claim can always hand out
    /// its whole limit.
    pub promote_slice: usize,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            prefix: None,
            connection_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(30),
            poll_interval: DEFAULT_POLL_INTERVAL,
            promote_slice: 5_000,
        }
    }
}

impl RedisOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the namespace (key prefix).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Sets the connection timeout.
    pub fn connection_timeout(mut self, t: Duration) -> Self {
        self.connection_timeout = t;
        self
    }

    /// Sets the response timeout.
    pub fn response_timeout(mut self, t: Duration) -> Self {
        self.response_timeout = t;
        self
    }

    /// Sets the watcher's poll interval.
    pub fn poll_interval(mut self, t: Duration) -> Self {
        self.poll_interval = t;
        self
    }

    /// Sets the promotion slice of claims (at least
    /// [`MAX_CLAIM`](jobstore_api::limits::MAX_CLAIM)).
    pub fn promote_slice(mut self, n: usize) -> Self {
        self.promote_slice = n.max(jobstore_api::limits::MAX_CLAIM);
        self
    }
}

/// Where to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// One server: its URL, without `prefix`.
    Single(String),
    /// A cluster: seed node URLs, without `prefix`.
    Cluster(Vec<String>),
}

/// Splits `url` into the target and the `prefix` parameter, if any.
pub(crate) fn parse_url(url: &str) -> Result<(Target, Option<String>)> {
    let bad = |why: &str| Error::invalid(format!("redis URL: {why}"));
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| bad("expected scheme://..."))?;
    match scheme {
        "redis+cluster" | "rediss+cluster" => {
            let node_scheme = scheme.trim_end_matches("+cluster");
            let (before_query, query) = match rest.split_once('?') {
                Some((b, q)) => (b, Some(q)),
                None => (rest, None),
            };
            let authority = before_query.trim_end_matches('/');
            if authority.contains('/') {
                return Err(bad(
                    "a cluster URL has no path (cluster nodes have only db 0)",
                ));
            }
            let (userinfo, hosts) = match authority.rsplit_once('@') {
                Some((u, h)) => (format!("{u}@"), h),
                None => (String::new(), authority),
            };
            let (prefix, other) = split_query(query);
            let tail = if other.is_empty() {
                String::new()
            } else {
                format!("?{other}")
            };
            let nodes: Vec<String> = hosts
                .split(',')
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .map(|h| format!("{node_scheme}://{userinfo}{h}/{tail}"))
                .collect();
            if nodes.is_empty() {
                return Err(bad("no cluster node given"));
            }
            Ok((Target::Cluster(nodes), prefix))
        }
        _ => {
            let (stripped, prefix) = strip_prefix_param(url)?;
            Ok((Target::Single(stripped), prefix))
        }
    }
}

/// A node URL without its `prefix` parameter, and that parameter.
pub(crate) fn strip_prefix_param(url: &str) -> Result<(String, Option<String>)> {
    match url.split_once('?') {
        None => Ok((url.to_owned(), None)),
        Some((base, query)) => {
            let (prefix, other) = split_query(Some(query));
            let stripped = if other.is_empty() {
                base.to_owned()
            } else {
                format!("{base}?{other}")
            };
            Ok((stripped, prefix))
        }
    }
}

/// The `prefix` parameter (decoded) and the other parameters (as given).
fn split_query(query: Option<&str>) -> (Option<String>, String) {
    let mut prefix = None;
    let mut other = Vec::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let key = pair.split('=').next().unwrap_or("");
        if key == "prefix" {
            prefix = url::form_urlencoded::parse(pair.as_bytes())
                .next()
                .map(|(_, v)| v.into_owned());
        } else {
            other.push(pair);
        }
    }
    (prefix, other.join("&"))
}

/// A namespace: 1..=64 bytes of `[A-Za-z0-9_.-]`. No braces: it is part
/// of every hash tag. No `:`: the tag `{P:T}` is split at its first `:`,
/// so a prefix `a:b` with jobtype `x` would share keys with prefix `a` and
/// jobtype `b:x` (jobtypes may contain `:`).
pub(crate) fn validate_prefix(prefix: &str) -> Result<()> {
    let ok = !prefix.is_empty()
        && prefix.len() <= 64
        && prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "redis key prefix {prefix:?} must be 1..=64 bytes of A-Z a-z 0-9 _ . - (no ':')"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_url_loses_prefix() {
        let (t, p) = parse_url("redis://127.0.0.1:6379/2?prefix=jobs&protocol=resp3").unwrap();
        assert_eq!(
            t,
            Target::Single("redis://127.0.0.1:6379/2?protocol=resp3".into())
        );
        assert_eq!(p.as_deref(), Some("jobs"));
        let (t, p) = parse_url("redis://h:1?prefix=a%3Ab").unwrap();
        assert_eq!(t, Target::Single("redis://h:1".into()));
        assert_eq!(p.as_deref(), Some("a:b"));
        let (_, p) = parse_url("redis://h:1").unwrap();
        assert_eq!(p, None);
    }

    #[test]
    fn cluster_url_lists_nodes() {
        let (t, p) = parse_url("redis+cluster://u:pw@h1:1,h2:2/?prefix=x").unwrap();
        assert_eq!(
            t,
            Target::Cluster(vec![
                "redis://u:pw@h1:1/".into(),
                "redis://u:pw@h2:2/".into()
            ])
        );
        assert_eq!(p.as_deref(), Some("x"));
        assert!(parse_url("redis+cluster://").is_err());
        assert!(parse_url("nonsense").is_err());
    }

    /// Each setter sets its own field; the promotion slice is raised to
    /// `MAX_CLAIM`.
    #[test]
    fn setters_set_their_fields() {
        let max = jobstore_api::limits::MAX_CLAIM;
        let o = RedisOptions::new()
            .prefix("p")
            .connection_timeout(Duration::from_millis(11))
            .response_timeout(Duration::from_millis(12))
            .poll_interval(Duration::from_millis(13))
            .promote_slice(max + 5);
        assert_eq!(o.prefix.as_deref(), Some("p"));
        assert_eq!(o.connection_timeout, Duration::from_millis(11));
        assert_eq!(o.response_timeout, Duration::from_millis(12));
        assert_eq!(o.poll_interval, Duration::from_millis(13));
        assert_eq!(o.promote_slice, max + 5);
        assert_eq!(RedisOptions::new().promote_slice(1).promote_slice, max);
    }

    #[test]
    fn prefixes() {
        assert!(validate_prefix("jst_0123").is_ok());
        assert!(validate_prefix("").is_err());
        assert!(validate_prefix("a{b}").is_err());
        assert!(validate_prefix("a:b").is_err());
        assert!(validate_prefix("a.b-c").is_ok());
        assert!(validate_prefix(&"x".repeat(65)).is_err());
    }
}
