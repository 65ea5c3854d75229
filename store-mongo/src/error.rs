//! Mapping driver errors into [`jobstore_api::Error`] kinds, by error kind
//! and server code, never by message.

use jobstore_api::Error;
use mongodb::bson::{Bson, Document};
use mongodb::error::{Error as MongoError, ErrorKind as K, WriteFailure};

/// `DuplicateKey`: a unique index refused a write.
pub(crate) const DUPLICATE_KEY: i32 = 11000;

/// The largest BSON document MongoDB stores (16 MiB).
pub(crate) const MAX_BSON_DOCUMENT: usize = 16 << 20;

/// Server codes of transient conditions: the same call may succeed later.
const TRANSIENT_CODES: &[i32] = &[
    6,     // HostUnreachable
    7,     // HostNotFound
    24,    // LockTimeout
    46,    // LockBusy
    50,    // MaxTimeMSExpired
    64,    // WriteConcernFailed (wtimeout)
    89,    // NetworkTimeout
    91,    // ShutdownInProgress
    112,   // WriteConflict
    133,   // FailedToSatisfyReadPreference
    134,   // ReadConcernMajorityNotAvailableYet
    189,   // PrimarySteppedDown
    202,   // NetworkInterfaceExceededTimeLimit
    262,   // ExceededTimeLimit
    462,   // IngressRequestRateLimitExceeded
    9001,  // SocketException
    10058, // LegacyNotPrimary
    10107, // NotWritablePrimary
    11600, // InterruptedAtShutdown
    11602, // InterruptedDueToReplStateChange
    13435, // NotPrimaryNoSecondaryOk
    13436, // NotPrimaryOrSecondary
    16500, // RequestRateTooLarge (Azure Cosmos DB throttling)
];

/// Server codes of a lost cursor: transient for a read, which can simply
/// run again.
const CURSOR_LOST_CODES: &[i32] = &[
    43,  // CursorNotFound
    175, // QueryPlanKilled
    237, // CursorKilled
];

/// Server codes of documents over the 16 MiB limit.
const TOO_LARGE_CODES: &[i32] = &[
    10334, // BSONObjectTooLarge
    17419, // document grew too large in an update
    17420, // idem (older servers)
];

/// Error labels the server or the driver puts on retryable errors.
const RETRYABLE_LABELS: &[&str] = &[
    "RetryableWriteError",
    "RetryableError",
    "SystemOverloadedError",
    "TransientTransactionError",
];

/// The server code carried by `e`, if it came from the server. (The store
/// sends no client-level `bulkWrite`, whose errors would need an arm here.)
pub(crate) fn server_code(e: &MongoError) -> Option<i32> {
    match &*e.kind {
        K::Command(c) => Some(c.code),
        K::Write(WriteFailure::WriteError(w)) => Some(w.code),
        K::Write(WriteFailure::WriteConcernError(w)) => Some(w.code),
        K::InsertMany(i) => i
            .write_errors
            .as_ref()
            .and_then(|ws| ws.iter().find(|w| w.code != DUPLICATE_KEY).or(ws.first()))
            .map(|w| w.code)
            .or_else(|| i.write_concern_error.as_ref().map(|w| w.code)),
        _ => None,
    }
}

/// Whether `e` is a duplicate-key error (code 11000).
pub(crate) fn is_duplicate_key(e: &MongoError) -> bool {
    server_code(e) == Some(DUPLICATE_KEY)
}

/// Maps a driver error from operation `what` into the API's kinds.
pub(crate) fn map(what: &str, e: MongoError) -> Error {
    let message = format!("MongoDB {what} failed");
    let unavailable = match &*e.kind {
        K::Io(_)
        | K::ConnectionPoolCleared { .. }
        | K::ServerSelection { .. }
        | K::DnsResolve { .. }
        | K::Shutdown => true,
        _ => {
            server_code(&e).is_some_and(|c| TRANSIENT_CODES.contains(&c))
                || RETRYABLE_LABELS.iter().any(|l| e.contains_label(l))
        }
    };
    if unavailable {
        return Error::unavailable(message, e);
    }
    if server_code(&e).is_some_and(|c| TOO_LARGE_CODES.contains(&c)) {
        // The store rejects payloads above its declared limit before
        // sending them; this is the server's own check, as a fallback.
        return Error::too_large(format!("document in {what}"), 0, MAX_BSON_DOCUMENT);
    }
    Error::backend(message, e)
}

/// [`map`] for a read: a lost cursor is `Unavailable` too.
pub(crate) fn map_read(what: &str, e: MongoError) -> Error {
    if server_code(&e).is_some_and(|c| CURSOR_LOST_CODES.contains(&c)) {
        return Error::unavailable(format!("MongoDB {what} failed"), e);
    }
    map(what, e)
}

/// The write errors of a write command run with `runCommand`, whose reply
/// is `ok` even when statements failed: the first statement error (or the
/// write concern error), mapped by code like a driver error.
pub(crate) fn check_write_reply(what: &str, reply: &Document) -> Result<(), Error> {
    let first_error = match reply.get("writeErrors") {
        Some(Bson::Array(errors)) => errors.iter().find_map(|e| match e {
            Bson::Document(d) => Some(d),
            _ => None,
        }),
        _ => None,
    };
    let failure = first_error.or(match reply.get("writeConcernError") {
        Some(Bson::Document(d)) => Some(d),
        _ => None,
    });
    let Some(failure) = failure else {
        return Ok(());
    };
    let code = match failure.get("code") {
        Some(Bson::Int32(c)) => *c,
        Some(Bson::Int64(c)) => i32::try_from(*c).unwrap_or(i32::MAX),
        _ => 0,
    };
    let detail = match failure.get("errmsg") {
        Some(Bson::String(m)) => m.as_str(),
        _ => "",
    };
    let message = format!("MongoDB {what} failed: server code {code}: {detail}");
    if TRANSIENT_CODES.contains(&code) {
        return Err(Error::unavailable(message, WriteReplyError(code)));
    }
    if TOO_LARGE_CODES.contains(&code) {
        return Err(Error::too_large(
            format!("document in {what}"),
            0,
            MAX_BSON_DOCUMENT,
        ));
    }
    Err(Error::backend(message, WriteReplyError(code)))
}

/// A failed statement of a write command's reply, kept as the cause.
#[derive(Debug)]
struct WriteReplyError(i32);

impl std::fmt::Display for WriteReplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "write error with server code {}", self.0)
    }
}

impl std::error::Error for WriteReplyError {}

#[cfg(test)]
mod tests {
    use super::*;
    use jobstore_api::ErrorKind;

    fn io(kind: std::io::ErrorKind) -> MongoError {
        MongoError::from(std::io::Error::new(kind, "test"))
    }

    #[test]
    fn io_errors_are_unavailable() {
        for kind in [
            std::io::ErrorKind::ConnectionRefused,
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::TimedOut,
        ] {
            let e = map("test", io(kind));
            assert_eq!(e.kind(), ErrorKind::Unavailable, "{kind:?}");
            assert!(e.is_retryable());
            assert!(std::error::Error::source(&e).is_some(), "cause kept");
        }
    }

    #[test]
    fn write_errors_in_a_command_reply_are_mapped_by_code() {
        use mongodb::bson::doc;
        assert!(check_write_reply("t", &doc! { "ok": 1, "n": 3 }).is_ok());
        let one = |code: i32| {
            doc! { "ok": 1, "n": 0, "writeErrors": [{ "index": 0, "code": code, "errmsg": "x" }] }
        };
        let kind = |d: &Document| check_write_reply("t", d).unwrap_err().kind();
        assert_eq!(kind(&one(11600)), ErrorKind::Unavailable);
        assert_eq!(kind(&one(10334)), ErrorKind::TooLarge);
        assert_eq!(kind(&one(8)), ErrorKind::Backend);
        let wc =
            doc! { "ok": 1, "n": 1, "writeConcernError": { "code": 64, "errmsg": "wtimeout" } };
        assert_eq!(kind(&wc), ErrorKind::Unavailable);
        let e = check_write_reply("t", &one(2)).unwrap_err();
        let cause = std::error::Error::source(&e).expect("a cause");
        assert_eq!(cause.to_string(), "write error with server code 2");
        // The server's own words are kept in the message.
        let failed = doc! { "ok": 1, "n": 0, "writeErrors": [{ "index": 0, "code": 2, "errmsg": "bad $op" }] };
        let e = check_write_reply("update", &failed).unwrap_err();
        assert!(e.to_string().contains("server code 2: bad $op"), "{e}");
    }

    fn command_error(code: i32) -> MongoError {
        let e: mongodb::error::CommandError = mongodb::bson::from_document(mongodb::bson::doc! {
            "code": code, "codeName": "X", "errmsg": "test"
        })
        .unwrap();
        MongoError::from(K::Command(e))
    }

    #[test]
    fn service_codes_are_mapped() {
        assert_eq!(
            map("t", command_error(16500)).kind(),
            ErrorKind::Unavailable
        );
        for code in [43, 175, 237] {
            assert_eq!(
                map_read("t", command_error(code)).kind(),
                ErrorKind::Unavailable
            );
            assert_eq!(map("t", command_error(code)).kind(), ErrorKind::Backend);
        }
        assert_eq!(map_read("t", command_error(2)).kind(), ErrorKind::Backend);
        assert_eq!(map("t", command_error(10334)).kind(), ErrorKind::TooLarge);
    }

    /// A code sent as a 64-bit integer is read like a 32-bit one.
    #[test]
    fn write_reply_codes_may_be_64_bit() {
        use mongodb::bson::doc;
        let one = |code: i64| {
            doc! { "ok": 1, "n": 0, "writeErrors": [{ "index": 0, "code": code, "errmsg": "x" }] }
        };
        let kind = |d: &Document| check_write_reply("t", d).unwrap_err().kind();
        assert_eq!(kind(&one(11600)), ErrorKind::Unavailable);
        assert_eq!(kind(&one(10334)), ErrorKind::TooLarge);
        assert_eq!(kind(&one(8)), ErrorKind::Backend);
    }

    /// A driver's write-concern failure carries its code like any write
    /// error: a replica set that lost its primary is unavailable.
    #[test]
    fn write_concern_failures_are_mapped_by_code() {
        let wc = |code: i32| -> MongoError {
            let w: mongodb::error::WriteConcernError =
                mongodb::bson::from_document(mongodb::bson::doc! {
                    "code": code, "codeName": "X", "errmsg": "test"
                })
                .unwrap();
            MongoError::from(K::Write(WriteFailure::WriteConcernError(w)))
        };
        assert_eq!(server_code(&wc(91)), Some(91));
        assert_eq!(map("t", wc(91)).kind(), ErrorKind::Unavailable);
        assert_eq!(map("t", wc(100)).kind(), ErrorKind::Backend);
    }

    /// An `insert_many` failure reports the first error that is not a
    /// duplicate key, else the duplicate key, else its write-concern code.
    #[test]
    fn insert_many_failures_report_their_most_telling_code() {
        use mongodb::bson::{doc, from_document};
        let failure = |d: Document| -> MongoError {
            let e: mongodb::error::InsertManyError = from_document(d).unwrap();
            MongoError::from(K::InsertMany(e))
        };
        let dup = doc! { "index": 0, "code": DUPLICATE_KEY, "errmsg": "dup" };
        let other = doc! { "index": 1, "code": 91, "errmsg": "shutdown" };
        let both = failure(doc! { "writeErrors": [dup.clone(), other] });
        assert_eq!(server_code(&both), Some(91));
        assert_eq!(map("t", both).kind(), ErrorKind::Unavailable);
        let only_dup = failure(doc! { "writeErrors": [dup] });
        assert!(is_duplicate_key(&only_dup));
        let wc = doc! { "code": 64, "codeName": "X", "errmsg": "wtimeout" };
        let concern = failure(doc! { "writeConcernError": wc });
        assert_eq!(server_code(&concern), Some(64));
        assert!(!is_duplicate_key(&concern));
    }

    #[test]
    fn other_errors_are_backend_with_source() {
        let e = map("test", MongoError::custom("boom"));
        assert_eq!(e.kind(), ErrorKind::Backend);
        assert!(std::error::Error::source(&e).is_some());
        assert_eq!(server_code(&MongoError::custom("x")), None);
    }
}
