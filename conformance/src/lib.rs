#![doc = include_str!("../README.md")]

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;

use futures::FutureExt;
use jobstore_api::JobStore;

pub mod checks;
pub mod servers;
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
/// ```no_run
/// // tests/conformance.rs of a backend (here the in-memory reference store)
/// use jobstore_conformance::TestStore;
///
/// async fn factory() -> Option<TestStore> {
///     Some(TestStore::new(jobstore_api::MemoryStore::new()))
/// }
///
/// jobstore_conformance::conformance_tests!(factory);
/// # fn main() {}
/// ```
///
/// A test server that departs from the documented behaviour of the real one
/// (an emulator) can have single behaviours marked `#[ignore]` with the
/// reason, so they show as ignored rather than passed, and still run with
/// `cargo test -- --include-ignored` against a real server:
///
/// ```no_run
/// # use jobstore_conformance::TestStore;
/// # async fn factory() -> Option<TestStore> {
/// #     Some(TestStore::new(jobstore_api::MemoryStore::new()))
/// # }
/// jobstore_conformance::conformance_tests!(factory, ignore: {
///     waiting_count_cap_respected: "the emulator caps counts differently (reason here)",
/// });
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($factory:path) => {
        $crate::conformance_tests!($factory, ignore: {});
    };
    ($factory:path, ignore: { $($ignored:ident : $reason:literal),* $(,)? }) => {
        $crate::__conformance_tests!(($) $factory; $($ignored : $reason),*);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    (($d:tt) $factory:path; $($ignored:ident : $reason:literal),*) => {
        macro_rules! __jobstore_conformance_test {
            $(
                ($ignored) => {
                    #[test]
                    #[ignore = $reason]
                    fn $ignored() {
                        $crate::block_on($crate::run($factory(), $crate::suite::$ignored))
                    }
                };
            )*
            ($d name:ident) => {
                #[test]
                fn $d name() {
                    $crate::block_on($crate::run($factory(), $crate::suite::$d name))
                }
            };
        }
        __jobstore_conformance_test!(add_get_round_trip);
        __jobstore_conformance_test!(add_with_run_at_schedules);
        __jobstore_conformance_test!(add_reports_new_and_existing);
        __jobstore_conformance_test!(add_existing_leaves_job_untouched);
        __jobstore_conformance_test!(add_empty_batch);
        __jobstore_conformance_test!(add_duplicate_id_in_batch_rejected);
        __jobstore_conformance_test!(add_invalid_job_rejects_whole_batch);
        __jobstore_conformance_test!(get_missing_job_is_none);
        __jobstore_conformance_test!(get_jobs_reads_many);
        __jobstore_conformance_test!(edge_ids_and_jobtypes_round_trip);
        __jobstore_conformance_test!(payload_too_large_rejected);
        __jobstore_conformance_test!(limits_at_exact_bounds);
        __jobstore_conformance_test!(claim_order_priority_dt_id);
        __jobstore_conformance_test!(claim_respects_limit);
        __jobstore_conformance_test!(claim_limit_zero_returns_nothing);
        __jobstore_conformance_test!(claim_limit_above_max_rejected);
        __jobstore_conformance_test!(claim_only_that_jobtype);
        __jobstore_conformance_test!(claim_sets_lock_lease_attempts);
        __jobstore_conformance_test!(scheduled_job_invisible_until_due);
        __jobstore_conformance_test!(claims_with_a_clock_behind_keep_to_their_own_time);
        __jobstore_conformance_test!(claims_behind_pass_over_jobs_made_eligible_ahead);
        __jobstore_conformance_test!(running_job_not_claimable);
        __jobstore_conformance_test!(expired_lease_makes_job_eligible);
        __jobstore_conformance_test!(expired_jobs_ordered_by_dt);
        __jobstore_conformance_test!(expired_and_waiting_jobs_claimed_by_priority);
        __jobstore_conformance_test!(expired_jobs_passed_over_by_a_claim_stay_their_owners);
        __jobstore_conformance_test!(max_batches_work);
        __jobstore_conformance_test!(renew_extends_owner_lease);
        __jobstore_conformance_test!(renew_by_non_owner_changes_nothing);
        __jobstore_conformance_test!(renew_after_takeover_fails);
        __jobstore_conformance_test!(renew_expired_but_untaken);
        __jobstore_conformance_test!(renew_mixed_batch);
        __jobstore_conformance_test!(release_retry);
        __jobstore_conformance_test!(release_retry_without_delay);
        __jobstore_conformance_test!(release_unget);
        __jobstore_conformance_test!(release_archive);
        __jobstore_conformance_test!(release_archive_every_code);
        __jobstore_conformance_test!(release_archive_output_limit);
        __jobstore_conformance_test!(archived_job_never_eligible);
        __jobstore_conformance_test!(release_delete);
        __jobstore_conformance_test!(release_by_non_owner_changes_nothing);
        __jobstore_conformance_test!(release_after_takeover_fails);
        __jobstore_conformance_test!(release_free_job_changes_nothing);
        __jobstore_conformance_test!(release_mixed_batch);
        __jobstore_conformance_test!(release_per_job_mixed_batch);
        __jobstore_conformance_test!(release_per_job_fencing);
        __jobstore_conformance_test!(release_per_job_duplicate_id_rejected);
        __jobstore_conformance_test!(release_per_job_output_too_large_releases_nothing);
        __jobstore_conformance_test!(release_per_job_delay_too_long_releases_nothing);
        __jobstore_conformance_test!(release_per_job_max_batch);
        __jobstore_conformance_test!(update_data_by_owner);
        __jobstore_conformance_test!(update_data_by_non_owner_changes_nothing);
        __jobstore_conformance_test!(cancel_waiting_and_scheduled);
        __jobstore_conformance_test!(cancel_leaves_locked_and_archived);
        __jobstore_conformance_test!(purge_archived_by_age);
        __jobstore_conformance_test!(purge_archived_by_code);
        __jobstore_conformance_test!(purge_with_no_codes_purges_nothing);
        __jobstore_conformance_test!(purge_racing_archives_leaves_no_job_half_done);
        __jobstore_conformance_test!(waiting_jobtypes_counts);
        __jobstore_conformance_test!(waiting_jobtypes_with_only_expired_jobs);
        __jobstore_conformance_test!(empty_store_has_no_counts);
        __jobstore_conformance_test!(waiting_count_cap_respected);
        __jobstore_conformance_test!(job_counts_by_state);
        __jobstore_conformance_test!(purged_result_codes_leave_the_counts);
        __jobstore_conformance_test!(purged_jobs_leave_nothing_behind);
        __jobstore_conformance_test!(jobtypes_with_no_jobs_left_are_not_counted);
        __jobstore_conformance_test!(a_lease_ends_in_the_counts_at_its_expiry);
        __jobstore_conformance_test!(handler_round_trip);
        __jobstore_conformance_test!(handler_versions_newest_wins);
        __jobstore_conformance_test!(handler_delete_removes_all_versions);
        __jobstore_conformance_test!(handler_list_newest_per_jobtype);
        __jobstore_conformance_test!(handler_invalid_rejected);
        __jobstore_conformance_test!(handler_limits_round_trip);
        __jobstore_conformance_test!(sysid_double_reserve_conflicts);
        __jobstore_conformance_test!(sysid_expiry_frees_and_fences);
        __jobstore_conformance_test!(sysid_renew_extends);
        __jobstore_conformance_test!(sysid_wrong_token_rejected);
        __jobstore_conformance_test!(sysid_release_frees);
        __jobstore_conformance_test!(invalid_time_rejected);
        __jobstore_conformance_test!(invalid_lease_rejected);
        __jobstore_conformance_test!(oversized_batch_rejected);
        __jobstore_conformance_test!(duplicate_ids_in_list_rejected);
        __jobstore_conformance_test!(injection_round_trip);
        __jobstore_conformance_test!(injection_literal_jobtypes_round_trip);
        __jobstore_conformance_test!(watch_wakes_on_add);
        __jobstore_conformance_test!(watch_wakes_on_retry);
        __jobstore_conformance_test!(watch_wakes_on_per_job_release);
        __jobstore_conformance_test!(watch_wakes_on_every_kind_of_new_work);
        __jobstore_conformance_test!(concurrent_claims_exactly_once);
        __jobstore_conformance_test!(list_each_state_in_its_order);
        __jobstore_conformance_test!(list_pages_walk_everything_once);
        __jobstore_conformance_test!(list_filters);
        __jobstore_conformance_test!(list_bad_queries_rejected);
        __jobstore_conformance_test!(list_pages_stable_while_jobs_move);
        __jobstore_conformance_test!(rerun_archived_jobs);
        __jobstore_conformance_test!(rerun_racing_purge);
        __jobstore_conformance_test!(delete_jobs_refuses_locked);
        __jobstore_conformance_test!(edit_free_jobs);
        __jobstore_conformance_test!(edit_racing_claim);
        __jobstore_conformance_test!(cancel_marks_locked_jobs);
        __jobstore_conformance_test!(cancel_racing_release);
        __jobstore_conformance_test!(pause_and_resume_jobtype);
        __jobstore_conformance_test!(watch_wakes_on_resume);
        __jobstore_conformance_test!(history_records_every_change);
        __jobstore_conformance_test!(history_keeps_the_newest_events);
        __jobstore_conformance_test!(history_reads_as_the_memory_store_in_every_path);
        __jobstore_conformance_test!(tags_round_trip_and_filter_lists);
        __jobstore_conformance_test!(stats_add_and_read);
        __jobstore_conformance_test!(stats_keep_the_last_hour_and_30_days);
        __jobstore_conformance_test!(stats_filter_by_jobtype);
        __jobstore_conformance_test!(stats_bad_input_rejected);
        __jobstore_conformance_test!(stats_concurrent_adds_sum_exactly);
        __jobstore_conformance_test!(claim_reports_when_each_job_was_due);
        __jobstore_conformance_test!(trace_context_kept_from_add_to_every_read);
        __jobstore_conformance_test!(trace_context_validated);
        __jobstore_conformance_test!(trace_context_concurrent_claims_keep_each_jobs_own);
        __jobstore_conformance_test!(schedule_round_trip);
        __jobstore_conformance_test!(schedule_set_again_keeps_firing_state);
        __jobstore_conformance_test!(schedule_list_and_delete);
        __jobstore_conformance_test!(schedule_due_pause_and_resume);
        __jobstore_conformance_test!(schedule_advance_compare_and_set);
        __jobstore_conformance_test!(schedule_concurrent_advances_apply_once);
        __jobstore_conformance_test!(schedule_concurrent_sets_bump_the_version_once_each);
        __jobstore_conformance_test!(schedule_bad_input_rejected);
        __jobstore_conformance_test!(unique_add_returns_holder_in_every_live_state);
        __jobstore_conformance_test!(unique_key_freed_by_every_way_out);
        __jobstore_conformance_test!(unique_key_freed_after_lease_runs_out);
        __jobstore_conformance_test!(unique_window_after_archive);
        __jobstore_conformance_test!(unique_replace_data_of_free_holder);
        __jobstore_conformance_test!(unique_scope_is_jobtype);
        __jobstore_conformance_test!(unique_id_checked_before_key);
        __jobstore_conformance_test!(unique_twice_in_one_batch);
        __jobstore_conformance_test!(unique_rerun_refused_while_key_held);
        __jobstore_conformance_test!(unique_key_kept_by_retry_and_unget);
        __jobstore_conformance_test!(unique_key_limits_rejected_nothing_stored);
        __jobstore_conformance_test!(unique_concurrent_adds_make_one_job);
        __jobstore_conformance_test!(repeat_release_frees_with_next_time_result_data);
        __jobstore_conformance_test!(repeat_rule_round_trips);
        __jobstore_conformance_test!(repeat_by_non_owner_changes_nothing);
        __jobstore_conformance_test!(repeat_keeps_unique_key);
        __jobstore_conformance_test!(repeat_validation);
        __jobstore_conformance_test!(repeat_races_a_takeover);
        __jobstore_conformance_test!(deps_blocked_until_every_dependency_ends);
        __jobstore_conformance_test!(deps_on_archived_jobs_resolve_at_the_add);
        __jobstore_conformance_test!(deps_on_unknown_jobs_are_refused);
        __jobstore_conformance_test!(deps_failure_cancels_down_a_chain);
        __jobstore_conformance_test!(deps_end_by_every_way_out);
        __jobstore_conformance_test!(deps_blocked_jobs_edit_and_delete);
        __jobstore_conformance_test!(deps_job_waits_pages);
        __jobstore_conformance_test!(deps_validation);
        __jobstore_conformance_test!(deps_fan_in_is_exact);
        __jobstore_conformance_test!(deps_hold_keeps_the_waiter_blocked);
        __jobstore_conformance_test!(deps_unblock_jobs_skips_what_is_left);
        __jobstore_conformance_test!(deps_unblock_racing_the_last_dependency);

        #[test]
        fn unique_keys_isolated_between_namespaces() {
            $crate::block_on($crate::run_pair($factory, $crate::suite::unique_keys_isolated_between_namespaces))
        }

        #[test]
        fn get_jobs_isolated_between_namespaces() {
            $crate::block_on($crate::run_pair($factory, $crate::suite::get_jobs_isolated_between_namespaces))
        }

        #[test]
        fn deps_isolated_between_namespaces() {
            $crate::block_on($crate::run_pair($factory, $crate::suite::deps_isolated_between_namespaces))
        }

        #[test]
        fn schedules_isolated_between_namespaces() {
            $crate::block_on($crate::run_pair($factory, $crate::suite::schedules_isolated_between_namespaces))
        }

        #[test]
        fn namespace_isolation() {
            $crate::block_on($crate::run_pair($factory, $crate::suite::namespace_isolation))
        }

        #[test]
        fn namespace_isolation_of_management() {
            $crate::block_on($crate::run_pair($factory, $crate::suite::namespace_isolation_of_management))
        }

        #[test]
        fn trace_context_isolated_between_namespaces() {
            $crate::block_on($crate::run_pair($factory, $crate::suite::trace_context_isolated_between_namespaces))
        }

        #[test]
        fn namespace_isolation_by_id() {
            $crate::block_on($crate::run_pair($factory, $crate::suite::namespace_isolation_by_id))
        }

        #[$crate::__private::rstest]
        #[case::add("add")]
        #[case::claim("claim")]
        #[case::renew("renew")]
        #[case::retry("retry")]
        #[case::unget("unget")]
        #[case::archive("archive")]
        #[case::delete("delete")]
        #[case::update("update")]
        #[case::cancel("cancel")]
        #[case::purge("purge")]
        #[case::get("get")]
        #[case::rerun("rerun")]
        #[case::remove("remove")]
        #[case::edit("edit")]
        #[case::list("list")]
        #[case::stats("stats")]
        #[case::schedules("schedules")]
        fn state_matrix(#[case] op: &str) {
            $crate::block_on($crate::run($factory(), |c| $crate::suite::state_matrix(c, op)))
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
        #[case::lang_32_bytes("lang-32-bytes")]
        #[case::lang_33_bytes("lang-33-bytes")]
        #[case::lang_empty("lang-empty")]
        #[case::lang_uppercase("lang-uppercase")]
        #[case::lang_dot("lang-dot")]
        #[case::lang_underscore_dash_digit("lang-underscore-dash-digit")]
        #[case::body_at_max("body-at-max")]
        #[case::body_one_past("body-one-past")]
        #[case::body_nul("body-nul")]
        #[case::hook_at_max("hook-at-max")]
        #[case::hook_one_past("hook-one-past")]
        #[case::hook_nul("hook-nul")]
        #[case::hooks_at_max("hooks-at-max")]
        #[case::before_one_past("before-one-past")]
        #[case::before_each_one_past("before-each-one-past")]
        #[case::before_nul("before-nul")]
        #[case::after_each_nul("after-each-nul")]
        #[case::eid_at_max("eid-at-max")]
        #[case::eid_one_past("eid-one-past")]
        #[case::eid_empty("eid-empty")]
        #[case::eid_pipe("eid-pipe")]
        #[case::eid_nul("eid-nul")]
        #[case::max_attempts_1("max-attempts-1")]
        #[case::max_attempts_0("max-attempts-0")]
        #[case::max_attempts_max("max-attempts-max")]
        #[case::max_attempts_past_max("max-attempts-past-max")]
        #[case::concurrency_1("concurrency-1")]
        #[case::concurrency_0("concurrency-0")]
        #[case::concurrency_max("concurrency-max")]
        #[case::concurrency_past_max("concurrency-past-max")]
        #[case::max_age_1("max-age-1")]
        #[case::max_age_0("max-age-0")]
        #[case::max_age_max("max-age-max")]
        #[case::max_age_past_max("max-age-past-max")]
        #[case::time_limit_1("time-limit-1")]
        #[case::time_limit_0("time-limit-0")]
        #[case::time_limit_max("time-limit-max")]
        #[case::time_limit_past_max("time-limit-past-max")]
        #[case::backoff_base_1("backoff-base-1")]
        #[case::backoff_base_0("backoff-base-0")]
        #[case::backoff_base_max("backoff-base-max")]
        #[case::backoff_base_past_max("backoff-base-past-max")]
        #[case::backoff_max_1("backoff-max-1")]
        #[case::backoff_max_0("backoff-max-0")]
        #[case::backoff_max_max("backoff-max-max")]
        #[case::backoff_max_past_max("backoff-max-past-max")]
        #[case::backoff_base_equals_max("backoff-base-equals-max")]
        #[case::backoff_base_above_max("backoff-base-above-max")]
        fn handler_validation(#[case] case: &str) {
            $crate::block_on($crate::run($factory(), |c| $crate::suite::handler_validation(c, case)))
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
