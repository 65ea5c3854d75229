//! The `jobstore` binary.

fn main() {}
