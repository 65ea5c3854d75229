#!/bin/bash
# Server time of the store's claim of 100 and release (archive) of 100, from
# one psql session: builds a fresh schema from STORE_DIR/migrations, adds
# JOBS jobs (64-byte payloads), then ROUNDS times claims 100 with
# STORE_DIR/queries/claim_jobs.sql and archives them with release_jobs.sql,
# both prepared. STORE_DIR may be any version of this crate (a `git
# archive` of an older commit, say), so versions can be run interleaved.
#
#   scripts/profile_claim_release.sh STORE_DIR SCHEMA ROUNDS [JOBS]
#
# Prints one line per statement: "claim|release PLAN_MS EXEC_MS" from
# EXPLAIN (ANALYZE, TIMING OFF) (execution includes triggers, not the
# commit); with CPU=1 instead "claim|release CPU_MS ELAPSED_MS", the
# backend's user + system CPU and elapsed time of a plain EXECUTE, commit
# included (log_statement_stats; needs a superuser). ANALYZE=0 leaves the
# tables without statistics (as the store bench has them: generic plans);
# by default they are analyzed after the adds. PSQL overrides the psql
# command (default: psql -h 127.0.0.1 -U postgres -d test). The schema is
# dropped at the end.
set -euo pipefail
dir=$1; schema=$2; rounds=$3; jobs=${4:-50000}
P="${PSQL:-psql -h 127.0.0.1 -U postgres -d test} -X -q -v ON_ERROR_STOP=1"
analyze=ANALYZE; [ "${ANALYZE:-1}" = 0 ] && analyze=
out=$(mktemp -d)
$P -c "DROP SCHEMA IF EXISTS $schema CASCADE" -c "CREATE SCHEMA $schema" >/dev/null 2>&1
for f in "$dir"/migrations/*.sql; do
  PGOPTIONS="-c search_path=$schema -c client_min_messages=warning" $P -1 -f "$f" >/dev/null
done
# the newest add_jobs of that version: with tags (migration 7), with trace
# context (migration 12)
tags=""; grep -q p_tags "$dir"/migrations/*.sql && tags="array_fill(''::text, ARRAY[$jobs]),"
grep -q p_traceparents "$dir"/migrations/*.sql \
  && tags="$tags array_fill(NULL::text, ARRAY[$jobs]), array_fill(NULL::text, ARRAY[$jobs]),"
PGOPTIONS="-c search_path=$schema" $P >/dev/null <<SQL
SELECT count(*) FROM add_jobs(
  ARRAY(SELECT 'job-' || lpad(i::text, 8, '0') FROM generate_series(1, $jobs) i),
  array_fill('bench'::text, ARRAY[$jobs]),
  array_fill(convert_to(repeat('x', 64), 'UTF8'), ARRAY[$jobs]),
  array_fill(0, ARRAY[$jobs]),
  ARRAY(SELECT 1700000000000::int8 + i FROM generate_series(1, $jobs) i),
  $tags 1700000000000, 'chan');
VACUUM $analyze jobs;
VACUUM $analyze archive;
SQL
# the release's parameters after the channel: repeat payloads (migration
# 16), NULL for a list of archives
more=""; grep -q '\$11' "$dir"/queries/release_jobs.sql && more=", NULL"
{
  echo "PREPARE claim AS $(cat "$dir"/queries/claim_jobs.sql);"
  echo "PREPARE rel AS $(cat "$dir"/queries/release_jobs.sql);"
  if [ "${CPU:-0}" = 1 ]; then
    echo "SET log_statement_stats = on;"
    echo "SET client_min_messages = log;"
    run="" sink='\g /dev/null'
  else
    run="EXPLAIN (ANALYZE, TIMING OFF, COSTS OFF)" sink=";"
  fi
  for r in $(seq 1 "$rounds"); do
    now=$((1700000100000 + r * 10))
    echo "\\warn MARK claim"
    echo "$run EXECUTE claim('bench', $now, 100, 'sys-bench-1', $((now + 60000))) $sink"
    echo "SELECT array_agg(id ORDER BY id) AS ids, array_agg('a'::text) AS kinds,
      array_agg(NULL::int8) AS dts, array_agg('ok'::text) AS codes, array_agg(200) AS statuses,
      array_agg(''::bytea) AS outputs FROM jobs WHERE lock = 'sys-bench-1' \\gset"
    echo "\\warn MARK release"
    echo "$run EXECUTE rel(:'ids', 'sys-bench-1', :'kinds', :'dts', :'codes', :'statuses', :'outputs', $now, $((now + 31536000000000)), 'chan'$more) $sink"
    echo "\\warn MARK other"
  done
} > "$out/run.sql"
PGOPTIONS="-c search_path=$schema" $P -f "$out/run.sql" > "$out/stdout" 2> "$out/stderr"
if [ "${CPU:-0}" = 1 ]; then
  awk '/^MARK/ {k = $2; next}
       /s user, .* s system, .* s elapsed/ {
         if (k == "claim" || k == "release") {
           gsub(",", ""); printf "%s %.3f %.3f\n", k, ($2 + $5) * 1000, $8 * 1000; k = ""
         }
       }' "$out/stderr"
else
  awk '/Planning Time/ {p = $3} /Execution Time/ {n++; print ((n % 2) ? "claim" : "release"), p, $3}' "$out/stdout"
fi
$P -c "DROP SCHEMA $schema CASCADE" >/dev/null 2>&1
rm -rf "$out"
