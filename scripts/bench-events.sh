#!/usr/bin/env bash
# The cost of job events on the drain: an interleaved A/B of two release
# builds of `jobstore bench drain`, BEFORE (a build without job events)
# and AFTER (this tree), AFTER run three ways: both sinks off, the job log
# on (`--job-log`, a file), and span export on (`--otlp-endpoint`, to
# scripts/otlp-sink.py, a receiver on this machine). BENCH_PAIRS rounds
# (default 5); each round runs the four variants once per backend, in an
# order that alternates between rounds; a fresh SQLite file per run.
# Prints the medians, min–max, and each AFTER variant's ratio to BEFORE
# round by round, with its median.
#
#   scripts/bench-events.sh BEFORE_BIN AFTER_BIN
#
# BENCH_BACKENDS (sqlite,postgres; memory too), BENCH_JOBS (20000), BENCH_KEEP (a
# directory to keep the raw JSON lines in), JOBSTORE_TEST_POSTGRES_URL
# (postgres://postgres@127.0.0.1:5432/test).
set -euo pipefail
cd "$(dirname "$0")/.."

[[ $# == 2 ]] || { echo "usage: $0 BEFORE_BIN AFTER_BIN" >&2; exit 2; }
BEFORE=$1 AFTER=$2
PAIRS=${BENCH_PAIRS:-5}
JOBS=${BENCH_JOBS:-20000}
PG=${JOBSTORE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
IFS=, read -r -a BACKENDS <<<"${BENCH_BACKENDS:-sqlite,postgres}"
WORK=$(mktemp -d)
RESULTS=${BENCH_KEEP:-$WORK}/events-ab.jsonl
mkdir -p "$(dirname "$RESULTS")"
: >"$RESULTS"

python3 scripts/otlp-sink.py --port-file "$WORK/otlp.port" 2>"$WORK/otlp-sink.log" &
SINK=$!
trap 'kill $SINK 2>/dev/null; wait $SINK 2>/dev/null; cat "$WORK/otlp-sink.log" >&2; rm -rf "$WORK"' EXIT
for _ in $(seq 1 50); do [[ -s $WORK/otlp.port ]] && break; sleep 0.1; done
OTLP="http://127.0.0.1:$(cat "$WORK/otlp.port")"

run() { # round backend variant
  local round=$1 backend=$2 variant=$3 bin=$AFTER url extra=()
  case $backend in
    sqlite) url="sqlite://$WORK/jobs-$round-$variant.db" ;;
    postgres) url=$PG ;;
    memory) url=memory:// ;;
    *) echo "unknown backend $backend" >&2; exit 2 ;;
  esac
  case $variant in
    before) bin=$BEFORE ;;
    off) ;;
    log) extra=(--job-log "$WORK/jobs.log") ;;
    otlp) extra=(--otlp-endpoint "$OTLP") ;;
  esac
  local out
  out=$("$bin" bench drain --json --store "$url" --jobs "$JOBS" "${extra[@]}")
  jq -c --arg r "$round" --arg b "$backend" --arg v "$variant" \
    '{round: ($r|tonumber), backend: $b, variant: $v, jobs_per_s: .figures.jobs_per_s, cpu_us_per_job: .figures.daemon_cpu_us_per_job}' \
    <<<"$out" >>"$RESULTS"
  echo "round $round $backend $variant: $(jq -r .figures.jobs_per_s <<<"$out") jobs/s" >&2
  rm -f "$WORK"/jobs-*.db* "$WORK/jobs.log"*
}

echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for round in $(seq 1 "$PAIRS"); do
  if (( round % 2 )); then order=(before off log otlp); else order=(otlp log off before); fi
  for backend in "${BACKENDS[@]}"; do
    for variant in "${order[@]}"; do run "$round" "$backend" "$variant"; done
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

python3 - "$RESULTS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by, cpu = {}, {}
for r in rows:
    by.setdefault((r["backend"], r["variant"]), {})[r["round"]] = r["jobs_per_s"]
    if r.get("cpu_us_per_job") is not None:
        cpu.setdefault((r["backend"], r["variant"]), []).append(r["cpu_us_per_job"])
print("| backend | variant | jobs/s median (min–max) | ratio to before, round by round (median) | daemon CPU µs/job (median) |")
print("|---|---|---|---|---|")
for backend in dict.fromkeys(r["backend"] for r in rows):
    before = by[(backend, "before")]
    for variant in ("before", "off", "log", "otlp"):
        v = by.get((backend, variant), {})
        if not v:
            continue
        vals = list(v.values())
        cell = f"{statistics.median(vals):,.0f} ({min(vals):,.0f}–{max(vals):,.0f})"
        c = cpu.get((backend, variant))
        c = f"{statistics.median(c):.1f}" if c else "—"
        if variant == "before":
            print(f"| {backend} | {variant} | {cell} | | {c} |")
            continue
        ratios = [v[k] / before[k] for k in sorted(v) if k in before]
        rs = ", ".join(f"{x:.2f}" for x in ratios)
        print(f"| {backend} | {variant} | {cell} | {rs} ({statistics.median(ratios):.2f}) | {c} |")
PY
