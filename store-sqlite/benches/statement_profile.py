#!/usr/bin/env python3
"""The claim and release statements of the SQLite store, timed outside the
store: from Python's sqlite3 module, as the profile in BENCHMARKS.md
("Managing jobs: the cost on claim and archive") did. Each run adds JOBS
jobs (64-byte payloads) to a fresh WAL file (synchronous = FULL), then
drains them with claims of BATCH (BEGIN IMMEDIATE; claim_pick; claim_take;
COMMIT) each followed by a release of those BATCH jobs that archives them
(ok, no output), and records the CPU time (user + sys) of each claim and
each release; it prints the median of each run's medians.

    python3 statement_profile.py RUNS JOBS BATCH KIND=DIR ...

DIR holds a version's migrations/ and queries/ (this crate, or another
version of it: `git archive REV store-sqlite | tar -x -C /tmp/REV`); KIND
says how that version binds its statements:

    v3           before histories (migrations 1 to 3): no events, no counts
    v6           migrations 5 and 6: every claim and release appends its
                 event; counts kept by triggers
    v7           migration 7: the claim kept in the row, counts by one
                 grouped upsert in the release's transaction
    v7+triggers  v7's statements with migration 5's counter triggers put
                 back (and no upsert)

Python's own sqlite3 module may be older than the SQLite the store
bundles; below 3.45 jsonb_each becomes json_each and unhex() is dropped.
NEW_SQLITE=1 imports pysqlite3 instead (`pip install pysqlite3-binary`,
SQLite 3.51 as of this writing). CG=/path/libcg.so counts instructions
instead of timing, under valgrind: build the library from

    #include <valgrind/callgrind.h>
    void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
    void cg_zero(void) { CALLGRIND_ZERO_STATS; }
    void cg_dump(const char *s) { CALLGRIND_DUMP_STATS_AT(s); }

(`gcc -O2 -shared -fPIC -o libcg.so cg.c`), run one run of one KIND with
`valgrind --tool=callgrind --instr-atstart=no --dump-instr=no
--callgrind-out-file=OUT/cg.%p python3 ...` (the python binary itself, not
a wrapper script) and take the median of the `totals:` line of the dumps
whose trigger is `claim`, and of those whose trigger is `release`.
"""
import json, os, re, statistics, sys, tempfile, time

if os.environ.get("NEW_SQLITE"):
    import pysqlite3 as sqlite3  # a recent SQLite (3.51), as the store bundles
else:
    import sqlite3

T0 = 1_700_000_000_000
LEASE = 60_000
OWNER = "sys-bench"
HORIZON = 1000 * 365 * 24 * 3600 * 1000
PAYLOAD = b"x" * 64


def sql(path):
    s = open(path).read()
    if sqlite3.sqlite_version_info < (3, 45):
        s = s.replace("jsonb_each", "json_each")
        s = re.sub(r"unhex\(([^()]*)\)", r"\1", s)
    return s


def setup(crate, kind, path, jobs):
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    mig = os.path.join(crate, "migrations")
    for name in sorted(os.listdir(mig)):
        db.executescript(sql(os.path.join(mig, name)))
    if kind == "v7+triggers":
        m5 = open(os.path.join(mig, "20261128000005_history_tags.sql")).read()
        for trig in re.findall(r"CREATE TRIGGER.*?\nEND;", m5, re.S):
            db.executescript(trig)
    q = os.path.join(crate, "queries")
    add = sql(os.path.join(q, "add_jobs.sql"))
    cols = re.search(r"INSERT INTO jobs \(([^)]*)\)", add).group(1).split(", ")
    added = json.dumps([{"at": T0, "attempt": 0, "event": "added"}], separators=(",", ":"))
    value = {"jobtype": "bench", "priority": 0, "dt": T0, "create_dt": T0,
             "data": PAYLOAD, "tags": "[]", "history": added,
             "traceparent": None, "tracestate": None}
    db.execute("BEGIN IMMEDIATE")
    for lo in range(0, jobs, 1000):
        n = min(1000, jobs - lo)
        row = "(" + ", ".join("?" * len(cols)) + ")"
        params = []
        for i in range(lo, lo + n):
            params += [f"bench-{i:010}" if c == "id" else value[c] for c in cols]
        db.execute(re.sub(r"^--.*\n", "", add, flags=re.M).replace("{rows}", ", ".join([row] * n)), params).fetchall()
    db.execute("COMMIT")
    return db, {n: sql(os.path.join(q, n + ".sql")) for n in
                ["claim_pick", "claim_take", "release_keep"]} | (
        {"counts_add": sql(os.path.join(q, "counts_add.sql"))} if kind == "v7" else {})


CG = None
if os.environ.get("CG"):
    import ctypes
    CG = ctypes.CDLL(os.environ["CG"])


def begin():
    if CG:
        CG.cg_zero()
        return 0
    return time.process_time_ns()


def end(label, t):
    if CG:
        CG.cg_dump(label.encode())
        return 0
    return time.process_time_ns() - t


def event(at, what, **kw):
    return {"at": at, "by": OWNER, "attempt": 0, "event": what} | kw


def drain(db, s, kind, batch):
    claims, releases = [], []
    now = T0
    if CG:
        CG.cg_start()
    while True:
        now += 1
        cpu = begin()
        db.execute("BEGIN IMMEDIATE")
        picked = db.execute(s["claim_pick"], ("bench", now, batch)).fetchall()
        if not picked:
            db.execute("COMMIT")
            end("empty", cpu)
            return claims, releases
        ids = json.dumps([r[0] for r in picked])
        if kind == "v3":
            args = (OWNER, now + LEASE, ids)
        elif kind == "v6":
            args = (OWNER, now + LEASE, ids, json.dumps(event(now, "claimed"), separators=(",", ":")))
        else:
            args = (OWNER, now + LEASE, ids, now)
        got = db.execute(s["claim_take"], args).fetchall()
        db.execute("COMMIT")
        claims.append(end("claim", cpu))
        assert len(got) == len(picked)
        entries = []
        for (id_, *_rest) in got:
            e = {"id": id_, "k": "a", "c": "ok", "s": 200, "o": ""}
            if kind == "v6":
                e["e"] = event(now, "archived", code="ok", status=200)
            entries.append(e)
        entries = json.dumps(entries, separators=(",", ":"))
        cpu = begin()
        args = (OWNER, now, now + HORIZON, entries)
        if kind == "v7":
            db.execute("BEGIN IMMEDIATE")
            rows = db.execute(s["release_keep"], args).fetchall()
            groups = {}
            for (_id, jobtype, lock, code) in rows:
                if lock == "__done":
                    k = (jobtype, code or "ok")
                    groups[k] = groups.get(k, 0) + 1
            if groups:
                db.execute(s["counts_add"], (json.dumps([[j, c, n] for (j, c), n in groups.items()]),))
            db.execute("COMMIT")
        else:
            rows = db.execute(s["release_keep"], args).fetchall()
        releases.append(end("release", cpu))
        assert len(rows) == len(got)


def main():
    runs, jobs, batch = map(int, sys.argv[1:4])
    variants = [a.split("=", 1) for a in sys.argv[4:]]
    res = {k: ([], []) for k, _ in variants}
    for run in range(runs):
        for kind, crate in variants:
            with tempfile.TemporaryDirectory() as d:
                db, s = setup(crate, kind, os.path.join(d, "p.db"), jobs)
                c, r = drain(db, s, kind, batch)
                total = db.cursor().execute("SELECT COALESCE(SUM(n), 0) FROM counts").fetchone()[0] \
                    if kind != "v3" else jobs
                assert total == jobs, (kind, total)
                db.close()
            res[kind][0].append(statistics.median(c) / 1e6)
            res[kind][1].append(statistics.median(r) / 1e6)
            print(f"run {run + 1} {kind:13} claim {res[kind][0][-1]:.3f} ms  release {res[kind][1][-1]:.3f} ms", flush=True)
    print(f"\nmedian of {runs} runs (each the median of {jobs // batch} calls of {batch} jobs), CPU ms:")
    for kind, _ in variants:
        c, r = statistics.median(res[kind][0]), statistics.median(res[kind][1])
        print(f"{kind:13} claim {c:.3f}  release {r:.3f}  claim+release {c + r:.3f}")


main()
