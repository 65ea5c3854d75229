#!/usr/bin/env bash
# Mutation testing of the stores' SQL queries and Lua scripts, which
# cargo-mutants does not mutate. Mutants are made by universalmutator
# (PyPI, installed into a venv on first use) with the rules in
# scripts/mutants-rules/ (comparisons, arithmetic, AND/OR, order, NULL
# tests, constants, LIMIT and SKIP LOCKED for SQL; comparisons,
# arithmetic, and/or/not, constants, min/max and deleted writes for Lua).
# Each mutant is copied over its file in a copy of the tree, the store's
# crate is rebuilt (the files are embedded with include_str!) and its
# tests run. A mutant is
#   caught    when a test fails (the run stops at the first failure),
#   timeout   when they run past MUTANTS_TIMEOUT (counted as caught),
#   missed    when they pass,
#   unviable  when it is not a valid script or statement: a Lua mutant
#             that Redis will not compile (checked with SCRIPT LOAD before
#             any build), or a SQL mutant whose tests fail with a syntax
#             error (or another error only a statement's text
#             can cause, such as an unknown column or operator).
# Per group it prints the counts and writes each mutant's diff to
# $MUTANTS_OUT/<group>/{caught,missed,timeout,unviable}.txt.
#
#   scripts/mutants-text.sh                      # every group
#   scripts/mutants-text.sh redis-lua            # one group
#   MUTANTS_SAMPLE=60 scripts/mutants-text.sh    # 60 random mutants a group
#
# Environment: MUTANTS_SAMPLE (mutants per group, drawn at random with
# MUTANTS_SEED, default 1; default: all), MUTANTS_LIST (a file of mutants
# to run, one "path (name)" line each, as in missed.txt: e.g.
# `grep '^[^ ]' missed.txt > list` to run a group's survivors again),
# MUTANTS_FILES (only files whose
# path contains this string), MUTANTS_TIMEOUT (seconds per test run,
# default 180), MUTANTS_OUT (default /tmp/jobstore-mutants-out),
# CARGO_TARGET_DIR (default: target/ of the copy), MUTANTS_REDIS_PORT
# (default 6391). The SQL groups need the servers their tests use (see the
# README's Tests). redis-lua starts a Redis of its own on
# MUTANTS_REDIS_PORT, checks syntax and runs the tests against it: a
# mutant whose script never ends leaves its server busy for good
# (SCRIPT KILL refuses a script that has written), so the server is
# restarted after any mutant that left it not answering.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/mutants-lib.sh
source "$root/scripts/mutants-lib.sh"
rules=$root/scripts/mutants-rules
timeout=${MUTANTS_TIMEOUT:-180}
out=${MUTANTS_OUT:-/tmp/jobstore-mutants-out}
seed=${MUTANTS_SEED:-1}
venv=${MUTANTS_VENV:-$root/.ci/mutants-venv}

# group | files (globs) | rules | package
groups=(
    "redis-lua|store-redis/scripts/*.lua|lua.rules|jobstore-redis"
    "postgres-sql|store-postgres/queries/*.sql store-postgres/migrations/*_init.sql|sql.rules|jobstore-postgres"
    "sqlite-sql|store-sqlite/queries/*.sql store-sqlite/migrations/*_initial.sql|sql.rules|jobstore-sqlite"
)

if [ ! -x "$venv/bin/mutate" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet 'universalmutator==1.14.1'
fi

wanted=("$@")
work=$(mktemp -d /tmp/jobstore-mutants-tree.XXXXXX)
redis_port=${MUTANTS_REDIS_PORT:-6391}
redis_dir=$work/redis
redis_alive() { [ "$(timeout 5 redis-cli -p "$redis_port" ping 2>/dev/null)" = PONG ]; }
redis_stop() {
    [ -f "$redis_dir/pid" ] || return 0
    timeout 5 redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 ||
        kill -9 "$(cat "$redis_dir/pid")" 2>/dev/null || true
    for _ in $(seq 1 50); do redis_alive || break; sleep 0.1; done
    rm -f "$redis_dir/pid"
}
redis_start() {
    mkdir -p "$redis_dir"
    redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
        --daemonize yes --pidfile "$redis_dir/pid" --dir "$redis_dir" \
        --logfile "$redis_dir/log" >/dev/null
    for _ in $(seq 1 50); do redis_alive && return 0; sleep 0.1; done
    echo "no Redis answers on port $redis_port" >&2
    exit 1
}
trap 'redis_stop; rm -rf "$work"' EXIT
tar -C "$root" --exclude=./target --exclude=./.git --exclude='./.ci/*venv' \
    --exclude='./mutants.out*' -cf - . | tar -C "$work" -xf -

# Lua job scripts are sent with lib.lua in front (store-redis/src/scripts.rs).
lua_compiles() { # file-with-mutant original-path
    local src=$1 name
    name=$(basename "$2")
    case $name in
        reserve.lua | rereserve.lua | unreserve.lua | handler_*.lua | sysid_*.lua | counts.lua) ;;
        lib.lua) src=$(mktemp) && cat "$1" "$work/store-redis/scripts/claim.lua" >"$src" ;;
        *) src=$(mktemp) && cat "$work/store-redis/scripts/lib.lua" "$1" >"$src" ;;
    esac
    ! redis-cli -h 127.0.0.1 -p "$redis_port" -x SCRIPT LOAD <"$src" 2>&1 | grep -q 'ERR'
}

# Errors a statement can only get from its text, never from the data: a
# mutant whose tests show one is not valid SQL for that server.
sql_invalid='syntax error|column .* does not exist|operator does not exist|function .* does not exist|could not determine data type|no such column|argument of .* must be type|misuse of aggregate'

# Runs the package's tests into a log and stops them at the first failed
# test, as nextest's fail-fast does: one failure decides the outcome, and
# the rest of the run would only cost time. Output is not captured, so a
# failure's message is in the log when its FAILED line is. Returns 0 when
# every test passed, 124 past the timeout, another status on a failure.
run_tests() { # log
    local log=$1 pid start=$SECONDS status=0
    (cd "$work" && exec setsid cargo test --profile mutants -p "$pkg" --tests -- --nocapture) >"$log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        if grep -q ' \.\.\. FAILED$' "$log"; then
            status=101
        elif [ $((SECONDS - start)) -ge "$timeout" ]; then
            status=124
        else
            sleep 0.5
            continue
        fi
        kill -- -"$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        return $status
    done
    wait "$pid" || return $?
}

summary=()
for g in "${groups[@]}"; do
    IFS='|' read -r name globs rulefile pkg <<<"$g"
    if [ ${#wanted[@]} -gt 0 ] && [[ ! " ${wanted[*]} " == *" $name "* ]]; then
        continue
    fi
    gout=$out/$name
    rm -rf "$gout" && mkdir -p "$gout/mutants"
    : >"$gout/all.txt"
    for f in $(cd "$work" && echo $globs); do
        if [ -n "${MUTANTS_FILES:-}" ] && [[ $f != *"$MUTANTS_FILES"* ]]; then continue; fi
        d=$gout/mutants/$(basename "$f")
        mkdir -p "$d"
        (cd "$d" && "$venv/bin/mutate" "$work/$f" none --only "$rules/$rulefile" --noCheck \
            --ignore "$rules/ignore" >/dev/null)
        for m in "$d"/*; do
            [ -e "$m" ] || continue # a file with no mutants
            printf '%s %s\n' "$f" "$m" >>"$gout/all.txt"
        done
    done
    total=$(grep -c . "$gout/all.txt" || true)
    if [ -n "${MUTANTS_LIST:-}" ]; then
        while read -r f m; do
            if grep -qxF "$f ($(basename "$m"))" "$MUTANTS_LIST"; then echo "$f $m"; fi
        done <"$gout/all.txt" >"$gout/run.txt"
    elif [ -n "${MUTANTS_SAMPLE:-}" ] && [ "$MUTANTS_SAMPLE" -lt "$total" ]; then
        shuf -n "$MUTANTS_SAMPLE" --random-source=<(yes "$seed") "$gout/all.txt" | sort >"$gout/run.txt"
    else
        cp "$gout/all.txt" "$gout/run.txt"
    fi
    n=$(grep -c . "$gout/run.txt" || true)
    echo "== $name: $n of $total mutants"
    if [ "$rulefile" = lua.rules ]; then
        redis_start
        export JOBSTORE_TEST_REDIS_URL=redis://127.0.0.1:$redis_port
    fi
    (cd "$work" && cargo test --profile mutants -p "$pkg" --tests --no-run -q 2>/dev/null)
    i=0
    while read -r f m; do
        i=$((i + 1))
        orig=$work/$f
        cp "$orig" "$gout/orig"
        change() { diff "$gout/orig" "$m" || true; }
        record() { # outcome
            { printf '%s (%s)\n' "$f" "$(basename "$m")"; change | sed 's/^/    /'; } >>"$gout/$1.txt"
            printf '%4d/%d %-8s %s:%s\n' "$i" "$n" "$1" "$f" "$(change | sed -n '1s/[^0-9].*//p;/^>/{s/^> *//p;q}' | tr '\n' ' ' | cut -c1-100)"
        }
        if [ "$rulefile" = lua.rules ] && ! lua_compiles "$m" "$f"; then
            record unviable
            continue
        fi
        cp "$m" "$orig"
        rc=0
        (cd "$work" && cargo test --profile mutants -p "$pkg" --tests --no-run -q >"$gout/log" 2>&1) || rc=$?
        if [ $rc = 0 ]; then
            run_tests "$gout/log" || rc=$?
        fi
        cp "$gout/orig" "$orig"
        if [ "$rulefile" = lua.rules ] && ! redis_alive; then
            echo "     (the mutant left Redis busy: restarted)"
            redis_stop
            redis_start
        fi
        if [ $rc = 0 ]; then
            record missed
        elif [ $rc = 124 ]; then
            record timeout
        elif [ "$rulefile" = sql.rules ] && grep -Eq "$sql_invalid" "$gout/log"; then
            record unviable
        else
            record caught
        fi
    done <"$gout/run.txt"
    # Leave the target dir built from the original files.
    touch "$work"/$globs
    (cd "$work" && cargo test --profile mutants -p "$pkg" --tests --no-run -q >/dev/null 2>&1) || true
    [ "$rulefile" != lua.rules ] || redis_stop
    line="$name: $n of $total mutants; $(mutants_summary "$gout")"
    echo "== $line"
    summary+=("$line")
done
printf '\n== summary\n'
printf '%s\n' "${summary[@]}"
