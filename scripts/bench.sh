#!/usr/bin/env bash
# Runs every `jobstore bench` mode on memory, SQLite, PostgreSQL and Redis
# (MongoDB where a server answers), BENCH_RUNS times each (default 3),
# interleaved (run 1 of every mode and backend, then run 2, ...), plus the
# bare reference queues on PostgreSQL (SKIP LOCKED) and Redis (ZPOPMIN)
# under the store mode's load (`jobstore bench reference`), and writes
# BENCHMARKS.md: medians with min and max, the exact commands,
# the machine, the load during the run, each figure's ratio to its
# reference.
#
#   scripts/bench.sh            the full run
#   scripts/bench.sh --quick    a few hundred jobs per mode: checks the script
#   scripts/bench.sh --soak     the soak alone (10 minutes per backend, at
#                               half the drain rate measured first), into
#                               BENCHMARKS-soak.md
#
# Servers: JOBSTORE_TEST_POSTGRES_URL (postgres://postgres@127.0.0.1:5432/test),
# JOBSTORE_TEST_REDIS_URL (redis://127.0.0.1:6379), JOBSTORE_TEST_MONGO_URL
# (mongodb://127.0.0.1:27017/bench). BENCH_BACKENDS limits the backends
# (comma list), BENCH_OUT the report (BENCHMARKS.md, or BENCHMARKS-soak.md),
# BENCH_KEEP a directory to keep the raw results in; for --soak,
# BENCH_SOAK (duration, 10m) and BENCH_SOAK_RATE (jobs/s, for every backend
# or per backend as postgres=10000,redis=25000; default half the rate of a
# 20,000-job drain measured first), BENCH_SOAK_HOLD (a duration: PostgreSQL
# soaks a second time with a transaction held open that long beside the
# load, of the kind BENCH_SOAK_HOLD_KIND says: xid, the default, or
# snapshot).
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=full
case "${1:-}" in
  --quick) MODE=quick ;;
  --soak) MODE=soak ;;
  "") ;;
  *) echo "usage: $0 [--quick|--soak]" >&2; exit 2 ;;
esac

RUNS=${BENCH_RUNS:-3}
PG=${JOBSTORE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
REDIS=${JOBSTORE_TEST_REDIS_URL:-redis://127.0.0.1:6379}
MONGO=${JOBSTORE_TEST_MONGO_URL:-mongodb://127.0.0.1:27017/bench}
if [[ $MODE == soak ]]; then OUT_MD=${BENCH_OUT:-BENCHMARKS-soak.md}; else OUT_MD=${BENCH_OUT:-BENCHMARKS.md}; fi
TARGET=${CARGO_TARGET_DIR:-target}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

SCRIPT_S=$(date +%s)
echo "building (release)" >&2
cargo build --release -q -p jobstore
BIN="$TARGET/release/jobstore"

# The backends that answer.
declare -A URL
URL[memory]="memory://"
URL[sqlite]="sqlite://$WORK/jobs.db"
if pg_isready -q -d "$PG" 2>/dev/null; then URL[postgres]="$PG"; else echo "PostgreSQL does not answer at $PG: skipped" >&2; fi
if redis-cli -u "$REDIS" ping >/dev/null 2>&1; then URL[redis]="$REDIS"; else echo "Redis does not answer at $REDIS: skipped" >&2; fi
mongo_hostport=$(sed -E 's#^mongodb(\+srv)?://([^@/]*@)?([^/,?]+).*#\3#' <<<"$MONGO")
[[ $mongo_hostport == *:* ]] || mongo_hostport+=":27017"
if timeout 2 bash -c "</dev/tcp/${mongo_hostport%:*}/${mongo_hostport##*:}" 2>/dev/null \
   && timeout 60 "$BIN" bench store --store "$MONGO" --jobs 10 --json >/dev/null 2>&1; then URL[mongodb]="$MONGO"; else echo "MongoDB does not answer at $MONGO: skipped" >&2; fi
BACKENDS=()
for b in memory sqlite postgres redis mongodb; do
  [[ -n "${URL[$b]:-}" ]] || continue
  if [[ -n "${BENCH_BACKENDS:-}" && ",$BENCH_BACKENDS," != *",$b,"* ]]; then continue; fi
  BACKENDS+=("$b")
done

# Each mode's arguments.
declare -A ARGS
if [[ $MODE == quick ]]; then
  ARGS[store]="--jobs 500"
  ARGS[reference]="--jobs 500"
  ARGS[drain]="--jobs 500"
  ARGS[e2e]="--jobs 300 --rate 100 --rate-duration 1s"
  ARGS[intake]="--jobs 300"
  ARGS[scale]="--sizes 100,1000 --archive 1000 --samples 20"
  RUNS=${BENCH_RUNS:-1}
else
  ARGS[store]="--jobs 50000 --claimers 4 --batch 100"
  ARGS[reference]="${ARGS[store]}"
  ARGS[drain]="--jobs 20000"
  ARGS[e2e]="--jobs 20000 --rate 100 --rate-duration 5s --clients 8 --lines 100"
  ARGS[intake]="--jobs 100000 --single-jobs 5000 --clients 8 --lines 100"
  ARGS[scale]="--sizes 10000,100000,1000000 --archive 100000 --samples 200 --batch 100"
fi
MODES=(reference store drain e2e intake scale)

RESULTS="$WORK/results.jsonl"
COMMANDS="$WORK/commands.txt"
: >"$RESULTS"
: >"$COMMANDS"

# Runs one bench; appends its JSON, with the load average around it, to
# the results.
one() {
  local backend=$1 mode=$2 run=$3; shift 3
  local cmd=("$BIN" bench "$mode" --json --store "${URL[$backend]}" "$@")
  local shown=("jobstore" bench "$mode" --json --store "${URL[$backend]}" "$@")
  grep -qxF "${shown[*]}" "$COMMANDS" || echo "${shown[*]}" >>"$COMMANDS"
  local before after json t0 wall
  before=$(cut -d' ' -f1 /proc/loadavg)
  t0=$(date +%s.%N)
  echo "run $run: $mode on $backend" >&2
  if json=$("${cmd[@]}" 2>"$WORK/err"); then
    after=$(cut -d' ' -f1 /proc/loadavg)
    wall=$(awk -v t0="$t0" -v t1="$(date +%s.%N)" 'BEGIN { printf "%.1f", t1 - t0 }')
    jq -c --arg run "$run" --arg l0 "$before" --arg l1 "$after" --arg wall "$wall" \
      '. + {run: ($run|tonumber), load: [($l0|tonumber), ($l1|tonumber)], wall_s: ($wall|tonumber)}' <<<"$json" >>"$RESULTS"
  else
    echo "  failed: $(cat "$WORK/err")" >&2
    jq -nc --arg m "$mode" --arg b "$backend" --arg e "$(cat "$WORK/err")" --arg run "$run" \
      '{mode: $m, backend: $b, error: $e, run: ($run|tonumber)}' >>"$RESULTS"
  fi
}

# Intake measured by a load tool of the field beside the bench's own
# figure: wrk against a daemon on the default SQLite store with execution
# off, 100-line bodies from 8 connections, then single adds from one.
wrk_run() {
  local run=$1 dir="$WORK/wrk-$1" secs=10 t0
  t0=$(date +%s.%N)
  [[ $MODE == quick ]] && secs=2
  command -v wrk >/dev/null || { echo "wrk is not installed: its intake figures are skipped (apt-get install wrk)" >&2; return 0; }
  mkdir -p "$dir"
  "$BIN" serve --no-execute --data-dir "$dir/data" --listen 127.0.0.1:0 --addr-file "$dir/addr" 2>"$dir/log" &
  local pid=$!
  for _ in $(seq 1 100); do [[ -s "$dir/addr" ]] && break; sleep 0.1; done
  local url="http://$(cat "$dir/addr")"
  echo "run $run: wrk intake on sqlite" >&2
  LINES=100 wrk -s bench/wrk/add-lines.lua -t4 -c8 -d${secs}s "$url" >"$dir/bodies" 2>&1 || true
  LINES=1 wrk -s bench/wrk/add-lines.lua -t1 -c1 -d${secs}s "$url" >"$dir/single" 2>&1 || true
  # Killed, not stopped: a graceful stop would first ingest the millions
  # of jobs wrk added, and this daemon's data is thrown away.
  kill -KILL "$pid"; wait "$pid" 2>/dev/null || true
  python3 - "$dir" "$run" "$t0" >>"$RESULTS" <<'PY'
import json, re, sys, time
d, run, t0 = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
def parse(name):
    t = open(f"{d}/{name}").read()
    rate = re.search(r"jobs acknowledged/s: (\d+)", t)
    lat = re.search(r"latency p50 ([\d.]+) ms\s+p99 ([\d.]+) ms", t)
    bad = re.search(r"(\d+) non-200", t)
    return (float(rate.group(1)) if rate else None, float(lat.group(1)) if lat else None,
            float(lat.group(2)) if lat else None, int(bad.group(1)) if bad else None)
b, s = parse("bodies"), parse("single")
print(json.dumps({"mode": "wrk", "backend": "sqlite", "run": run, "wall_s": round(time.time() - t0, 1), "figures": {
    "bodies_jobs_per_s": b[0], "bodies_ack_latency": {"p50_ms": b[1], "p99_ms": b[2]}, "bodies_non_200": b[3],
    "single_adds_per_s": s[0], "single_ack_latency": {"p50_ms": s[1], "p99_ms": s[2]}, "single_non_200": s[3]}}))
PY
}

START=$(date -u +%FT%TZ)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)

if [[ $MODE == soak ]]; then
  if [[ -n "${URL[postgres]:-}" ]]; then
    # The soak runs PostgreSQL with autovacuum on at its defaults (the test
    # server here runs with it off), and puts the setting back after.
    av=$(psql "$PG" -Atc "SHOW autovacuum" 2>/dev/null || echo unknown)
    if [[ $av == off ]]; then
      psql "$PG" -qc "ALTER SYSTEM SET autovacuum = on" -c "SELECT pg_reload_conf()" >/dev/null
      trap 'psql "$PG" -qc "ALTER SYSTEM RESET autovacuum" -c "SELECT pg_reload_conf()" >/dev/null; rm -rf "$WORK"' EXIT
    fi
    echo "PostgreSQL autovacuum: was $av, now $(psql "$PG" -Atc "SHOW autovacuum")" >&2
  fi
  for b in "${BACKENDS[@]}"; do
    # BENCH_SOAK_RATE: one rate for every backend (10000), or one per
    # backend (postgres=10000,redis=25000; a backend not named measures its
    # drain).
    half=
    if [[ ${BENCH_SOAK_RATE:-} == *=* ]]; then
      half=$(tr ',' '\n' <<<"$BENCH_SOAK_RATE" | sed -n "s/^$b=//p")
    elif [[ -n "${BENCH_SOAK_RATE:-}" ]]; then
      half=$BENCH_SOAK_RATE
    fi
    if [[ -z $half ]]; then
      one "$b" drain 0 --jobs 20000
      half=$(jq -r --arg b "$b" 'select(.backend == $b and .mode == "drain" and .figures) | .figures.jobs_per_s / 2 | floor' "$RESULTS" | tail -1)
    fi
    one "$b" soak 1 --rate "${half:-1000}" --duration "${BENCH_SOAK:-10m}" --interval 1m
    # BENCH_SOAK_HOLD (a duration): PostgreSQL soaks again with a
    # transaction held open beside the load for that long (--hold-xmin).
    if [[ $b == postgres && -n "${BENCH_SOAK_HOLD:-}" ]]; then
      one "$b" soak 2 --rate "${half:-1000}" --duration "${BENCH_SOAK:-10m}" --interval 1m \
        --hold-xmin "$BENCH_SOAK_HOLD" --hold-kind "${BENCH_SOAK_HOLD_KIND:-xid}"
    fi
  done
else
  for run in $(seq 1 "$RUNS"); do
    for mode in "${MODES[@]}"; do
      for b in "${BACKENDS[@]}"; do
        if [[ $mode == reference && $b != postgres && $b != redis ]]; then continue; fi
        # The memory store is the contract's executable reference: a claim
        # scans and sorts every job by design, so a million waiting jobs
        # measure that scan, not a backend.
        if [[ $mode == scale && $b == memory && $MODE != quick ]]; then continue; fi
        # shellcheck disable=SC2086
        one "$b" "$mode" "$run" ${ARGS[$mode]}
      done
    done
    wrk_run "$run"
  done
fi

END=$(date -u +%FT%TZ)
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
REPORT_ARGS=(--results "$RESULTS" --commands "$COMMANDS"
  --mode "$MODE" --runs "$RUNS" --start "$START" --end "$END"
  --load-start "$LOAD0" --load-end "$LOAD1" --seconds "$(($(date +%s) - SCRIPT_S))"
  --rev "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)")
python3 scripts/bench_report.py "${REPORT_ARGS[@]}" >"$OUT_MD"
# BENCH_KEEP=DIR keeps the raw results and a script that writes the report
# again from them (after the analysis beside this script is edited, say).
if [[ -n "${BENCH_KEEP:-}" ]]; then
  mkdir -p "$BENCH_KEEP"
  cp "$RESULTS" "$COMMANDS" "$BENCH_KEEP/"
  REPORT_ARGS[1]="$BENCH_KEEP/results.jsonl" REPORT_ARGS[3]="$BENCH_KEEP/commands.txt"
  printf 'python3 scripts/bench_report.py' >"$BENCH_KEEP/report.sh"
  printf ' %q' "${REPORT_ARGS[@]}" >>"$BENCH_KEEP/report.sh"
  printf ' >%q\n' "$OUT_MD" >>"$BENCH_KEEP/report.sh"
fi
echo "wrote $OUT_MD" >&2
