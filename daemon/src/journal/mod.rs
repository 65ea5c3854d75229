//! The local, append-only file journal.
