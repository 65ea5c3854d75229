#![doc = include_str!("../README.md")]

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;

use futures::FutureExt;
use jobstore_api::JobStore;

pub mod services;
pub mod suite;

#[doc(hidden)]
pub mod __private {
    pub use rstest::rstest;
    pub use tokio;
}

/// A store opened on a fresh namespace for one test, as a backend's factory
/// returns it.
pub struct TestStore {
    store: Arc<dyn JobStore>,
    peer: Option<Arc<dyn JobStore>>,
    cleanup: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl TestStore {
    /// Wraps a store opened on a fresh namespace.
    pub fn new(store: impl JobStore + 'static) -> Self {
        TestStore {
            store: Arc::new(store),
            peer: None,
            cleanup: None,
        }
    }

    /// Adds a second, independent handle on the *same* namespace (its own
    /// connection or pool, as another process would have). Tests of mutual
    /// exclusion and wake-ups then also run across the two handles.
    pub fn with_peer(mut self, peer: impl JobStore + 'static) -> Self {
        self.peer = Some(Arc::new(peer));
        self
    }

    /// Runs `cleanup` after the test, passed or failed (drop the schema,
    /// delete the keys).
    pub fn with_cleanup(mut self, cleanup: impl Future<Output = ()> + Send + 'static) -> Self {
        self.cleanup = Some(Box::pin(cleanup));
        self
    }

    fn ctx(&self) -> Ctx {
        Ctx {
            store: self.store.clone(),
            peer: self.peer.clone().unwrap_or_else(|| self.store.clone()),
        }
    }
}

/// What a suite function gets: the store under test, and a peer handle on the
/// same namespace (the store itself when the factory gave none).
#[derive(Clone)]
pub struct Ctx {
    /// The store under test, on a fresh namespace.
    pub store: Arc<dyn JobStore>,
    /// Another handle on the same namespace.
    pub peer: Arc<dyn JobStore>,
}

/// Runs one suite function against a store from `factory`; `None` from the
/// factory means the backend was skipped (the factory has printed why).
/// Cleanup runs whether the test passed or panicked.
pub async fn run<T, TF>(factory: impl Future<Output = Option<TestStore>>, test: T)
where
    T: FnOnce(Ctx) -> TF,
    TF: Future<Output = ()>,
{
    let Some(mut ts) = factory.await else {
        return;
    };
    let outcome = AssertUnwindSafe(test(ts.ctx())).catch_unwind().await;
    if let Some(cleanup) = ts.cleanup.take() {
        cleanup.await;
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// Runs one suite function that needs a second store on *another*
/// namespace (isolation tests).
pub async fn run_pair<F, FF, T, TF>(factory: F, test: T)
where
    F: Fn() -> FF,
    FF: Future<Output = Option<TestStore>>,
    T: FnOnce(Ctx, Ctx) -> TF,
    TF: Future<Output = ()>,
{
    let Some(mut a) = factory().await else {
        return;
    };
    let Some(mut b) = factory().await else {
        if let Some(c) = a.cleanup.take() {
            c.await;
        }
        return;
    };
    let outcome = AssertUnwindSafe(test(a.ctx(), b.ctx()))
        .catch_unwind()
        .await;
    for ts in [&mut a, &mut b] {
        if let Some(cleanup) = ts.cleanup.take() {
            cleanup.await;
        }
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// Runs `fut` to completion on a fresh multi-threaded tokio runtime (what
/// each generated test does, so backends need no test macro of their own).
pub fn block_on<F: Future>(fut: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(fut)
}

/// Expands to one `#[test]` per behaviour of the contract, each run against a
/// store from `$factory`: a path to an `async fn() -> Option<TestStore>` that
/// opens a store on a fresh namespace (or returns `None` after printing why
/// the backend is skipped; see [`services`]).
///
/// ```ignore
/// // tests/conformance.rs of a backend
/// async fn factory() -> Option<jobstore_conformance::TestStore> { /* ... */ }
/// jobstore_conformance::conformance_tests!(factory);
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($factory:path) => {
        $crate::__plain_tests!($factory;
            add_get_round_trip,
            add_with_run_at_schedules,
            add_reports_new_and_existing,
            add_existing_leaves_job_untouched,
            add_empty_batch,
            add_duplicate_id_in_batch_rejected,
            add_invalid_job_rejects_whole_batch,
            get_missing_job_is_none,
            edge_ids_and_jobtypes_round_trip,
            payload_too_large_rejected,
            claim_order_priority_dt_id,
            claim_respects_limit,
            claim_limit_zero_returns_nothing,
            claim_limit_above_max_rejected,
            claim_only_that_jobtype,
            claim_sets_lock_lease_attempts,
            scheduled_job_invisible_until_due,
            running_job_not_claimable,
            expired_lease_makes_job_eligible,
            expired_jobs_ordered_by_dt,
            max_batches_work,
            renew_extends_owner_lease,
            renew_by_non_owner_changes_nothing,
            renew_after_takeover_fails,
            renew_expired_but_untaken,
            renew_mixed_batch,
            release_retry,
            release_retry_without_delay,
            release_unget,
            release_archive,
            release_archive_every_code,
            release_archive_output_limit,
            archived_job_never_eligible,
            release_delete,
            release_by_non_owner_changes_nothing,
            release_after_takeover_fails,
            release_free_job_changes_nothing,
            release_mixed_batch,
            update_data_by_owner,
            update_data_by_non_owner_changes_nothing,
            cancel_waiting_and_scheduled,
            cancel_leaves_locked_and_archived,
            purge_archived_by_age,
            waiting_jobtypes_counts,
            empty_store_has_no_counts,
            waiting_count_cap_respected,
            job_counts_by_state,
            handler_round_trip,
            handler_versions_newest_wins,
            handler_delete_removes_all_versions,
            handler_list_newest_per_jobtype,
            handler_invalid_rejected,
            sysid_double_reserve_conflicts,
            sysid_expiry_frees_and_fences,
            sysid_renew_extends,
            sysid_wrong_token_rejected,
            sysid_release_frees,
            invalid_time_rejected,
            invalid_lease_rejected,
            oversized_batch_rejected,
            watch_wakes_on_add,
            watch_wakes_on_retry,
            concurrent_claims_exactly_once
        );

        #[test]
        fn namespace_isolation() {
            $crate::block_on($crate::run_pair($factory, $crate::suite::namespace_isolation))
        }

        #[$crate::__private::rstest]
        #[case::empty("empty")]
        #[case::nul_bytes("nul")]
        #[case::newlines("newlines")]
        #[case::invalid_utf8("invalid-utf8")]
        #[case::all_bytes("all-bytes")]
        #[case::one_mib("one-mib")]
        fn payload_round_trip(#[case] case: &str) {
            $crate::block_on($crate::run($factory(), |c| $crate::suite::payload_round_trip(c, case)))
        }

        #[$crate::__private::rstest]
        #[case::empty("")]
        #[case::too_long("x".repeat(201))]
        #[case::newline("a\nb")]
        #[case::nul("a\0b")]
        #[case::tab("a\tb")]
        #[case::pipe("a|b")]
        #[case::del("a\u{7f}b")]
        fn invalid_job_id_rejected(#[case] id: impl AsRef<str>) {
            let id = id.as_ref();
            $crate::block_on($crate::run($factory(), |c| $crate::suite::invalid_job_id_rejected(c, id)))
        }

        #[$crate::__private::rstest]
        #[case::empty("")]
        #[case::too_long("t".repeat(201))]
        #[case::starts_with_dash("-type")]
        #[case::starts_with_dot(".type")]
        #[case::space("acme mail")]
        #[case::slash("acme/mail")]
        #[case::pipe("acme|mail")]
        #[case::non_ascii("acmé")]
        fn invalid_jobtype_rejected(#[case] jobtype: impl AsRef<str>) {
            let jobtype = jobtype.as_ref();
            $crate::block_on($crate::run($factory(), |c| $crate::suite::invalid_jobtype_rejected(c, jobtype)))
        }

        #[$crate::__private::rstest]
        #[case::empty("")]
        #[case::done_marker("__done")]
        #[case::reserved_prefix("__x")]
        #[case::pipe("a|b")]
        #[case::control("a\rb")]
        #[case::too_long("s".repeat(201))]
        fn invalid_sysid_rejected(#[case] sysid: impl AsRef<str>) {
            let sysid = sysid.as_ref();
            $crate::block_on($crate::run($factory(), |c| $crate::suite::invalid_sysid_rejected(c, sysid)))
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __plain_tests {
    ($factory:path; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                $crate::block_on($crate::run($factory(), $crate::suite::$name))
            }
        )*
    };
}
