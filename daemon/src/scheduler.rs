//! The scheduler: which jobtype runs next.
