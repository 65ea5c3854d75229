//! Tests of the journal as a whole.
