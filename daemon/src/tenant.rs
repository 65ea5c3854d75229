//! Tenants (the `{client}` of every API path) and how their names map onto
//! the store's jobtypes and job ids.
//!
//! A client's jobtype `type` is stored as the jobtype `{client}-{type}`, and
//! a job id `id` that the API shows is stored as `{client}-{id}`. Client
//! names cannot contain `-`, so both splits are unambiguous: everything up
//! to the first `-` is the tenant. Because every store key a request can
//! reach carries its client's prefix, one client can never name another
//! client's job, jobtype or handler.

use std::fmt;

use jobstore_api::limits::{MAX_ID_LEN, MAX_JOBTYPE_LEN};
use jobstore_api::validate;

/// Longest client name, in bytes.
pub const MAX_CLIENT_LEN: usize = 64;

/// The separator between a client and its jobtype or job id in the store.
pub const SEP: char = '-';

/// Why a client name, jobtype or job id from a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct NameError {
    /// Which name was wrong: `client`, `jobtype`, `id`.
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl NameError {
    fn new(field: &'static str, message: impl Into<String>) -> Self {
        NameError {
            field,
            message: message.into(),
        }
    }
}

/// A validated client (tenant) name: 1..=[`MAX_CLIENT_LEN`] bytes of
/// `[A-Za-z0-9_]`, starting with a letter or digit.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Client(String);

impl Client {
    /// Validates a client name.
    pub fn new(name: &str) -> Result<Self, NameError> {
        check_client(name)?;
        Ok(Client(name.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The store jobtype of this client's `jobtype` (validated): `{client}-{jobtype}`.
    pub fn jobtype(&self, jobtype: &str) -> Result<String, NameError> {
        check_local_jobtype(jobtype)?;
        let full = format!("{}{SEP}{jobtype}", self.0);
        if full.len() > MAX_JOBTYPE_LEN {
            return Err(NameError::new(
                "jobtype",
                format!(
                    "{jobtype:?} is too long: with the client prefix it is {} bytes, the limit is {MAX_JOBTYPE_LEN}",
                    full.len()
                ),
            ));
        }
        Ok(full)
    }

    /// The store id of this client's job `id` (validated): `{client}-{id}`.
    pub fn job_id(&self, id: &str) -> Result<String, NameError> {
        check_local_id(id)?;
        let full = format!("{}{SEP}{id}", self.0);
        if full.len() > MAX_ID_LEN {
            return Err(NameError::new(
                "id",
                format!(
                    "{id:?} is too long: with the client prefix it is {} bytes, the limit is {MAX_ID_LEN}",
                    full.len()
                ),
            ));
        }
        Ok(full)
    }

    /// A new store-wide unique, time-sortable job id (UUIDv7) of this
    /// client.
    pub fn new_job_id(&self) -> String {
        format!("{}{SEP}{}", self.0, uuid::Uuid::now_v7().as_simple())
    }

    /// The local part of a store jobtype or id if it belongs to this client.
    pub fn strip<'a>(&self, stored: &'a str) -> Option<&'a str> {
        stored
            .strip_prefix(self.0.as_str())
            .and_then(|rest| rest.strip_prefix(SEP))
    }
}

impl fmt::Display for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The tenant part of a store jobtype or id: everything before the first
/// `-` (the whole string if there is none).
pub fn tenant_of(stored: &str) -> &str {
    stored.split_once(SEP).map_or(stored, |(t, _)| t)
}

/// The part after the tenant: `type` of `client-type`.
pub fn local_of(stored: &str) -> &str {
    stored.split_once(SEP).map_or(stored, |(_, l)| l)
}

fn check_client(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::new("client", "is empty"));
    }
    if name.len() > MAX_CLIENT_LEN {
        return Err(NameError::new(
            "client",
            format!(
                "is {} bytes long, the limit is {MAX_CLIENT_LEN}",
                name.len()
            ),
        ));
    }
    if !name.as_bytes()[0].is_ascii_alphanumeric() {
        return Err(NameError::new(
            "client",
            format!("{name:?} must start with a letter or digit"),
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_'))
    {
        return Err(NameError::new(
            "client",
            format!("{name:?} contains {c:?}; allowed are A-Z a-z 0-9 _"),
        ));
    }
    Ok(())
}

fn check_local_jobtype(jobtype: &str) -> Result<(), NameError> {
    validate::jobtype(jobtype).map_err(|e| NameError::new("jobtype", strip_kind(e)))
}

/// A job id as a client gives it: the store's id rules (no control
/// characters, no `|`) and no `/`, so that it fits in one path segment.
fn check_local_id(id: &str) -> Result<(), NameError> {
    validate::id(id).map_err(|e| NameError::new("id", strip_kind(e)))?;
    if id.contains('/') {
        return Err(NameError::new("id", format!("{id:?} contains '/'")));
    }
    Ok(())
}

fn strip_kind(e: jobstore_api::Error) -> String {
    match e {
        jobstore_api::Error::InvalidInput { message } => message,
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_names() {
        for ok in ["a", "acme", "Acme_2", "0x"] {
            Client::new(ok).unwrap();
        }
        for bad in [
            "",
            "-a",
            "_a",
            "a-b",
            "a/b",
            "..",
            "a.b",
            "a b",
            "a\n",
            "é",
            &"x".repeat(65),
        ] {
            assert!(Client::new(bad).is_err(), "{bad:?} accepted");
        }
        Client::new(&"x".repeat(64)).unwrap();
    }

    #[test]
    fn jobtypes_and_ids_round_trip() {
        let c = Client::new("acme").unwrap();
        let jt = c.jobtype("mail-send.v2").unwrap();
        assert_eq!(jt, "acme-mail-send.v2");
        assert_eq!(tenant_of(&jt), "acme");
        assert_eq!(local_of(&jt), "mail-send.v2");
        assert_eq!(c.strip(&jt), Some("mail-send.v2"));
        assert_eq!(Client::new("acm").unwrap().strip(&jt), None);
        let id = c.job_id("order-1").unwrap();
        assert_eq!(id, "acme-order-1");
        assert_eq!(c.strip(&id), Some("order-1"));
    }

    #[test]
    fn bad_local_names() {
        let c = Client::new("acme").unwrap();
        for bad in ["", "-x", "a/b", "..", "a b", "a|b"] {
            assert!(c.jobtype(bad).is_err(), "jobtype {bad:?} accepted");
        }
        for bad in ["", "a/b", "a|b", "a\u{7}"] {
            assert!(c.job_id(bad).is_err(), "id {bad:?} accepted");
        }
        assert!(c.jobtype(&"x".repeat(196)).is_err());
        c.jobtype(&"x".repeat(195)).unwrap();
        assert!(c.job_id(&"x".repeat(196)).is_err());
        c.job_id(&"x".repeat(195)).unwrap();
    }
}
