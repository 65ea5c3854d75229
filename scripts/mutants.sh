#!/usr/bin/env bash
# Mutation testing with cargo-mutants (`cargo install cargo-mutants`): each
# group of source files is mutated, one mutant at a time, in a copy of the
# tree, and the tests that are meant to check that code run against each
# mutant. Prints caught / missed / unviable / timeout per group and the
# caught share of the viable mutants; the missed ones are listed in
# $MUTANTS_OUT/<group>/mutants.out/missed.txt.
#
#   scripts/mutants.sh                 # every group (hours on 2 cores)
#   scripts/mutants.sh memory validate # some groups
#
# Environment: CARGO_TARGET_DIR (default: target/ of the copy; when shared
# with a working tree, touch the mutated files there before the next build),
# MUTANTS_TIMEOUT (seconds per test run, default 300), MUTANTS_JOBS
# (parallel builds, default 1), MUTANTS_OUT (default /tmp/jobstore-mutants-out),
# MUTANTS_ARGS (more cargo-mutants options, split at spaces, e.g.
# MUTANTS_ARGS='--shard 1/4' or MUTANTS_ARGS='--re mod.rs:(5[5-9]|[6-9][0-9])[0-9]:'
# for part of a file).
# The store groups need the servers the tests use (see the README's Tests).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/mutants-lib.sh
source "$root/scripts/mutants-lib.sh"
timeout=${MUTANTS_TIMEOUT:-300}
jobs=${MUTANTS_JOBS:-1}
out=${MUTANTS_OUT:-/tmp/jobstore-mutants-out}

# group | files (cargo-mutants -f globs) | options and test arguments
groups=(
    "memory|store-api/src/memory.rs|--test-package jobstore-api --test-package jobstore-conformance -- --lib --tests"
    "validate|store-api/src/validate.rs store-api/src/types.rs store-api/src/batch.rs|--test-package jobstore-api --test-package jobstore-conformance -- --lib --tests"
    "history|store-api/src/history.rs|--test-package jobstore-api --test-package jobstore-conformance -- --lib --tests"
    "sqlite|store-sqlite/src/store.rs|--test-package jobstore-sqlite -- --lib --tests"
    "postgres|store-postgres/src/store.rs|--test-package jobstore-postgres -- --lib --tests"
    # The implicit added event and the deadlock retry (reads and the
    # statements that lock several jobs), with the tests that reach them.
    "postgres-retry|store-postgres/src/store.rs|--re retry_deadlock --re job_from_row --test-package jobstore-postgres -- --lib --tests -- history deadlock releases_racing a_release_aborted jobs_from_before claim_and_archive"
    "redis|store-redis/src/*.rs|--test-package jobstore-redis -- --lib --tests"
    "mongo|store-mongo/src/*.rs|--test-package jobstore-mongo -- --lib --tests"
    "scheduler|daemon/src/executor/scheduler/mod.rs|--test-package jobstore-daemon --cargo-arg=--lib -- executor::scheduler::"
    "schedule-rules|daemon/src/schedules/rule.rs|--test-package jobstore-daemon --cargo-arg=--lib -- schedules::"
    "journal-reader|daemon/src/journal/reader.rs daemon/src/journal/record.rs daemon/src/journal/segment.rs|--test-package jobstore-daemon --cargo-arg=--lib -- journal::"
    # Timing stats: the contract's types, their validation and the
    # reference store's two methods (several --re: a pattern cannot hold
    # the separator |); then the daemon's sink and each store's module, with
    # the tests that exercise stats (name filters after a second --).
    "stats-api|store-api/src/stats.rs store-api/src/validate.rs store-api/src/memory.rs|--re store-api/src/stats.rs: --re ::add_stats --re ::job_stats --re claimed_due --re stats_deltas --re durations --re stats_query --re jobtype_filter --test-package jobstore-api --test-package jobstore-conformance -- --lib --tests"
    "stats-daemon|daemon/src/executor/stats.rs|--test-package jobstore-daemon --cargo-arg=--lib -- executor::stats::"
    "stats-sqlite|store-sqlite/src/stats.rs|--test-package jobstore-sqlite -- --lib --tests -- stats state_matrix namespace_isolation_of_management claim_reports_when_each_job_was_due"
    "stats-postgres|store-postgres/src/stats.rs|--test-package jobstore-postgres -- --lib --tests -- stats state_matrix namespace_isolation_of_management claim_reports_when_each_job_was_due"
    "stats-redis|store-redis/src/stats.rs|--test-package jobstore-redis -- --lib --tests -- stats state_matrix namespace_isolation_of_management claim_reports_when_each_job_was_due"
    "stats-mongo|store-mongo/src/stats.rs|--test-package jobstore-mongo -- --lib --tests -- stats state_matrix namespace_isolation_of_management claim_reports_when_each_job_was_due"
    # Stored schedules: the daemon's planner with its unit tests; the
    # contract's types with the schedule functions of the reference store
    # and of the validators (picked by --re); each store's module (for
    # PostgreSQL, its schedule functions in store.rs), with the tests whose
    # names say schedule (the suite's schedule behaviours, its state_matrix
    # schedules case and schedules_isolated_between_namespaces among them).
    "schedule-plan|daemon/src/schedules/plan.rs|--test-package jobstore-daemon --cargo-arg=--lib -- schedules::"
    "schedules-api|store-api/src/schedule.rs store-api/src/memory.rs store-api/src/validate.rs|--re store-api/src/schedule.rs: --re memory.rs:.*_schedule --re validate.rs:.*schedule --re validate.rs:.*printable --test-package jobstore-api --test-package jobstore-conformance -- --lib --tests -- schedule"
    "schedules-sqlite|store-sqlite/src/schedules.rs|--test-package jobstore-sqlite -- --lib --tests -- schedule"
    "schedules-postgres|store-postgres/src/store.rs|--re store.rs:.*schedule --test-package jobstore-postgres -- --lib --tests -- schedule"
    "schedules-redis|store-redis/src/schedule.rs|--test-package jobstore-redis -- --lib --tests -- schedule"
    "schedules-mongo|store-mongo/src/schedules.rs|--test-package jobstore-mongo -- --lib --tests -- schedule"
    # Unique keys: the contract's flow types, the keyed parts of the
    # reference store (its add's keyed branch and the new job's key, lines
    # 97-134; the run again's held-key check, lines 390-399; key_holder,
    # stored_key) and the validators, picked by --re (line numbers as of
    # 4b875c7); the journal's key field; each store's functions the change
    # added, or its lines the change added to older ones. Tests: those
    # whose names say unique (the suite's behaviours, the state matrix's
    # keyed cases) or keyed, and each store's own tests of keys.
    # cargo-mutants 27.1 lets every field-deletion mutant of a file through
    # any --re (and any --exclude-re): a group also runs those of its files.
    "unique-api|store-api/src/flow.rs store-api/src/memory.rs store-api/src/validate.rs|--re store-api/src/flow.rs: --re memory.rs:9[7-9]: --re memory.rs:1[0-3][0-9]: --re memory.rs:39[0-9]: --re key_holder --re stored_key --re validate.rs:.*job_flow --re validate.rs:.*in.unique$ --re validate.rs:.*replace.unique.- --test-package jobstore-api --test-package jobstore-conformance -- --lib --tests -- unique"
    "unique-journal|daemon/src/journal/record.rs|--re decode_unique --re record.rs:179: --re record.rs:18[0-5]: --re record.rs:23[5-9]: --re record.rs:24[0-9]: --re record.rs:25[0-4]: --test-package jobstore-daemon --cargo-arg=--lib -- journal::record"
    "unique-sqlite|store-sqlite/src/*.rs|--re add_keyed_jobs --re decide_keyed --test-package jobstore-sqlite -- --lib --tests -- unique keyed a_run_again_gives_the_key every_step_reads_as_the_reference_store"
    "unique-redis|store-redis/src/*.rs|--re add.rs:164: --re add.rs:27[46]: --re add.rs:30[0-2]: --re Status::duplicate --re unique_flow --re store.rs:334: --test-package jobstore-redis -- --lib --tests -- unique keyed duplicate"
    "unique-postgres|store-postgres/src/*.rs|--re add_unique_chunk --re flow_of --test-package jobstore-postgres -- --lib --tests -- unique keyed"
    "unique-mongo|store-mongo/src/*.rs|--re convert.rs:.*ukey --re flow_from_doc --re rerun_ids --re free_key --re send_updates --re store-mongo/src/unique.rs: --test-package jobstore-mongo -- --lib --tests -- unique keyed rerun"
    # Repeating jobs: the contract's Repeat and FlowState constructors
    # (flow.rs), NewJob's repeat builders, Release::Repeat's output and
    # the capability (types.rs), the validators job_flow, repeat, release
    # and release_how (validate.rs), and the reference store's repeat
    # release (memory.rs); the daemon's Repeating, settle, repeat_ok and
    # note (policy.rs) and the U: lines (output.rs); the journal's rule in
    # the run_at field; each store's functions the change added, or its
    # lines the change added to older ones (line numbers as of 8975c60).
    # Tests: those whose names say repeat (the suite's six behaviours and
    # each store's own), with the crate's or the daemon's unit tests.
    "repeat-api|store-api/src/flow.rs store-api/src/memory.rs store-api/src/validate.rs store-api/src/types.rs|--re flow.rs:.*Repeat:: --re flow.rs:.*utc --re flow.rs:.*is_empty --re FlowState::of --re FlowState::from_parts --re memory.rs:2[89][0-9]: --re NewJob::repeat --re output_len --re with_repeat --re validate.rs:1[5-8][0-9]: --re validate.rs:2[7-9][0-9]: --re validate.rs:3[0-2][0-9]: --test-package jobstore-api --test-package jobstore-conformance -- --lib --tests -- repeat flow release"
    "repeat-daemon|daemon/src/executor/policy.rs daemon/src/runner/output.rs|--re Repeating --re settle --re repeat_ok --re policy.rs:.*note --re output.rs:12[4-9]: --re output.rs:13[0-4]: --re output.rs:181: --re unescape --test-package jobstore-daemon --cargo-arg=--lib -- executor::policy runner::output"
    "repeat-journal|daemon/src/journal/record.rs|--re record.rs:18[89]: --re record.rs:19[0-4]: --re record.rs:25[5-9]: --re record.rs:26[0-4]: --re record.rs:40[0-9]: --re record.rs:41[0-5]: --re push_escaped --re percent_decoded --test-package jobstore-daemon --cargo-arg=--lib -- journal::record"
    "repeat-sqlite|store-sqlite/src/store.rs|--re keep_entry --re entry_bytes --re add_flow_jobs --re store.rs:82[0-6]: --re store.rs:101[3-7]: --re store.rs:1219: --re store.rs:122[0-2]: --test-package jobstore-sqlite -- --lib --tests -- repeat every_step_reads_as_the_reference_store"
    "repeat-postgres|store-postgres/src/store.rs|--re release_chunks --re add_chunk.-> --re add_chunk$ --re release_query --re repeat_data --re flow_of --re store.rs:91[6-9]: --re store.rs:92[0-9]: --re store.rs:144[89]: --re store.rs:145[0-2]: --test-package jobstore-postgres -- --lib --tests -- repeat rules_travel a_list_mixing"
    "repeat-redis|store-redis/src/*.rs|--re add.rs:25[5-9]: --re add.rs:26[0-8]: --re add.rs:28[5-8]: --re job_flow --re decode.rs:209: --re store.rs:33[3-8]: --re store.rs:34[6-9]: --re store.rs:35[0-4]: --re store.rs:386: --re store.rs:395: --re store.rs:50[7-9]: --re store.rs:51[0-8]: --test-package jobstore-redis -- --lib --tests -- repeat"
    "repeat-mongo|store-mongo/src/*.rs|--re convert.rs:7[2-4]: --re convert.rs:12[1-9]: --re convert.rs:2[0-9][0-9]: --re convert.rs:3[0-4][0-9]: --re flow_from_doc --re store.rs:4[4-9][0-9]: --re store.rs:5[2-5][0-9]: --test-package jobstore-mongo -- --lib --tests -- repeat"
    # Dependencies, held edges and unblocking: the reference store's edge
    # functions (link, end_edges, cancel_for_dependency, forget_waiter,
    # unblock_jobs, job_waits, get_jobs), the contract's Waits, EdgeState,
    # DependencyFailure and StoredDeps (flow.rs) and the dependency
    # validators, picked by function name; the tests whose names say deps
    # or get_jobs (the suite's dependency behaviours, the namespace ones).
    "deps-api|store-api/src/flow.rs store-api/src/memory.rs store-api/src/validate.rs|--re memory.rs:.*link --re end_edges --re cancel_for_dependency --re forget_waiter --re unblock_jobs --re job_waits --re get_jobs --re Waits:: --re is_open --re DependencyFailure --re StoredDeps --re validate.rs:.*dependencies --re validate.rs:.*waits --re job_flow --test-package jobstore-api --test-package jobstore-conformance -- --lib --tests -- deps get_jobs"
)

wanted=("$@")
work=$(mktemp -d /tmp/jobstore-mutants-tree.XXXXXX)
trap 'rm -rf "$work"' EXIT
# The copy: sources only (no .git, no build output, no CI venvs).
tar -C "$root" --exclude=./target --exclude=./.git --exclude='./.ci/*venv' \
    --exclude='./mutants.out*' -cf - . | tar -C "$work" -xf -
mkdir -p "$out"

summary=()
for g in "${groups[@]}"; do
    IFS='|' read -r name files rest <<<"$g"
    if [ ${#wanted[@]} -gt 0 ] && [[ ! " ${wanted[*]} " == *" $name "* ]]; then
        continue
    fi
    fargs=()
    for f in $files; do fargs+=(-f "$f"); done
    # One job mutates the copy in place; parallel jobs need copies of their own.
    if [ "$jobs" = 1 ]; then mode=(--in-place); else mode=(-j "$jobs"); fi
    rc=0
    # shellcheck disable=SC2086 # $rest is a list of arguments
    # shellcheck disable=SC2086 # $MUTANTS_ARGS is a list of arguments
    (set -f; cd "$work" && cargo mutants "${mode[@]}" --profile mutants --no-shuffle --timeout "$timeout" \
        -o "$out/$name" "${fargs[@]}" ${MUTANTS_ARGS:-} $rest) || rc=$?
    # The copy's sources are restored now; build them once more so that a
    # shared CARGO_TARGET_DIR holds no artifact of the last mutant (cargo
    # may otherwise take it as fresh for the original tree).
    pkgs=()
    # shellcheck disable=SC2206 # the options before the first --, split at spaces
    set -f
    opts=(${rest%% -- *})
    set +f
    for i in "${!opts[@]}"; do
        case ${opts[$i]} in
        --test-package) pkgs+=(-p "${opts[$((i + 1))]}") ;;
        --cargo-arg=*) pkgs+=("${opts[$i]#--cargo-arg=}") ;;
        esac
    done
    (cd "$work" && cargo test --profile mutants --no-run "${pkgs[@]}" >/dev/null 2>&1) || true
    # 2: mutants missed, 3: timeouts; anything else is a failed run.
    case $rc in 0 | 2 | 3) ;; *) echo "cargo mutants failed for $name (exit $rc)" >&2; exit "$rc" ;; esac
    d="$out/$name/mutants.out"
    line="$name: $(mutants_summary "$d")"
    echo "== $line"
    summary+=("$line")
done
printf '\n== summary\n'
printf '%s\n' "${summary[@]}"
