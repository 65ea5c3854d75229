//! Bearer tokens: who a request speaks for.
//!
//! The config holds SHA-256 hashes of tokens, never the tokens. A request's
//! token is hashed and compared with every configured hash in constant time
//! (per comparison). Tokens are long random strings (`jobstore token` makes
//! them), so a fast hash is enough: there is nothing to brute-force.

use std::collections::BTreeMap;
use std::fmt;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::tenant::Client;

/// The SHA-256 of a token.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenHash([u8; 32]);

impl TokenHash {
    /// The hash of `token`.
    pub fn of(token: &str) -> Self {
        TokenHash(Sha256::digest(token.as_bytes()).into())
    }

    /// Parses 64 hex digits.
    pub fn from_hex(hex_digits: &str) -> Result<Self, String> {
        let bytes =
            hex::decode(hex_digits.trim()).map_err(|e| format!("not a hex SHA-256 ({e})"))?;
        let arr: [u8; 32] = bytes
            .try_into()
            .map_err(|_| "a SHA-256 is 64 hex digits".to_owned())?;
        Ok(TokenHash(arr))
    }

    /// Lowercase hex.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    fn matches(&self, other: &TokenHash) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenHash(<hidden>)")
    }
}

/// A new random token (32 bytes, hex).
pub fn new_token() -> String {
    let bytes: [u8; 32] = rand::random();
    hex::encode(bytes)
}

/// The tokens a daemon accepts.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// Admin token hashes: every client, and handlers.
    pub admin: Vec<TokenHash>,
    /// Per client, the hashes of its tokens.
    pub clients: BTreeMap<Client, Vec<TokenHash>>,
}

/// Who a request speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// No tokens are configured: everyone is trusted with every client
    /// (loopback or an explicitly insecure listener), but is not the admin.
    Open,
    /// The admin token.
    Admin,
    /// A client's own token.
    Client(Client),
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// No token, or a token nobody configured: 401.
    Unauthenticated(&'static str),
    /// A valid token that does not reach this resource: 403.
    Forbidden(String),
}

impl AuthConfig {
    /// Whether any token is configured (then every request needs one).
    pub fn enabled(&self) -> bool {
        !self.admin.is_empty() || !self.clients.is_empty()
    }

    /// Identifies the caller from an `Authorization` header value.
    pub fn identify(&self, authorization: Option<&str>) -> Result<Caller, Denied> {
        if !self.enabled() {
            return Ok(Caller::Open);
        }
        let Some(value) = authorization else {
            return Err(Denied::Unauthenticated(
                "this daemon requires a token: send Authorization: Bearer <token>",
            ));
        };
        let Some(token) = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))
        else {
            return Err(Denied::Unauthenticated(
                "the Authorization header must be \"Bearer <token>\"",
            ));
        };
        let hash = TokenHash::of(token.trim());
        // Compare with every hash (no early exit), so timing does not tell
        // which kind of token matched.
        let mut found = None;
        for h in &self.admin {
            if h.matches(&hash) {
                found = Some(Caller::Admin);
            }
        }
        for (client, hashes) in &self.clients {
            for h in hashes {
                if h.matches(&hash) && found.is_none() {
                    found = Some(Caller::Client(client.clone()));
                }
            }
        }
        found.ok_or(Denied::Unauthenticated("unknown token"))
    }
}

impl Caller {
    /// Whether this caller may act for `client`.
    pub fn may_access(&self, client: &Client) -> Result<(), Denied> {
        match self {
            Caller::Open | Caller::Admin => Ok(()),
            Caller::Client(own) if own == client => Ok(()),
            Caller::Client(own) => Err(Denied::Forbidden(format!(
                "the token of client \"{own}\" does not reach client \"{client}\""
            ))),
        }
    }

    /// Whether this caller may do what only the admin may.
    pub fn require_admin(&self, what: &str) -> Result<(), Denied> {
        match self {
            Caller::Admin => Ok(()),
            Caller::Open => Err(Denied::Forbidden(format!(
                "{what} needs the admin token, and none is configured (set JOBSTORE_ADMIN_TOKEN \
                 or auth.admin_token_sha256)"
            ))),
            Caller::Client(_) => Err(Denied::Forbidden(format!("{what} needs the admin token"))),
        }
    }

    /// Whether this caller is the admin.
    pub fn is_admin(&self) -> bool {
        matches!(self, Caller::Admin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> AuthConfig {
        let mut c = AuthConfig::default();
        c.admin.push(TokenHash::of("admin-token-0123456789"));
        c.clients.insert(
            Client::new("acme").unwrap(),
            vec![TokenHash::of("acme-token"), TokenHash::of("acme-token-2")],
        );
        c.clients.insert(
            Client::new("globex").unwrap(),
            vec![TokenHash::of("globex-token")],
        );
        c
    }

    #[test]
    fn identifies_callers() {
        let c = config();
        let acme = Client::new("acme").unwrap();
        let globex = Client::new("globex").unwrap();
        assert_eq!(
            c.identify(Some("Bearer admin-token-0123456789")),
            Ok(Caller::Admin)
        );
        assert_eq!(
            c.identify(Some("Bearer acme-token-2")),
            Ok(Caller::Client(acme.clone()))
        );
        assert!(matches!(c.identify(None), Err(Denied::Unauthenticated(_))));
        assert!(matches!(
            c.identify(Some("Bearer nope")),
            Err(Denied::Unauthenticated(_))
        ));
        assert!(matches!(
            c.identify(Some("Basic abc")),
            Err(Denied::Unauthenticated(_))
        ));
        let acme_caller = c.identify(Some("Bearer acme-token")).unwrap();
        acme_caller.may_access(&acme).unwrap();
        assert!(matches!(
            acme_caller.may_access(&globex),
            Err(Denied::Forbidden(_))
        ));
        assert!(acme_caller.require_admin("x").is_err());
    }

    #[test]
    fn open_when_nothing_is_configured() {
        let c = AuthConfig::default();
        assert_eq!(c.identify(None), Ok(Caller::Open));
        assert!(
            Caller::Open
                .require_admin("setting a process handler")
                .is_err()
        );
    }

    #[test]
    fn hex_round_trip() {
        let h = TokenHash::of("test");
        assert_eq!(
            h.to_hex(),
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
        );
        assert_eq!(TokenHash::from_hex(&h.to_hex()).unwrap(), h);
        assert!(TokenHash::from_hex("zz").is_err());
        assert!(TokenHash::from_hex("abcd").is_err());
    }
}
