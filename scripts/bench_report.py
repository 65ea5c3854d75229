#!/usr/bin/env python3
"""Writes BENCHMARKS.md from the results of scripts/bench.sh: one JSON
object per `jobstore bench --json` run, the reference benches' output, the
commands, and the machine."""

import argparse
import json
import os
import platform
import statistics
import sys
from collections import defaultdict

BACKENDS = ["memory", "sqlite", "postgres", "redis", "mongodb"]


def get(obj, path):
    for key in path.split("."):
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def spread(values):
    """(median, min, max) of the values that exist, or None."""
    vs = [v for v in values if isinstance(v, (int, float))]
    if not vs:
        return None
    return statistics.median(vs), min(vs), max(vs)


def fmt(s, unit=""):
    if s is None:
        return "–"
    m, lo, hi = s
    if m >= 100:
        return f"{m:,.0f}{unit} ({lo:,.0f}–{hi:,.0f})"
    return f"{m:.3g}{unit} ({lo:.3g}–{hi:.3g})"


def ratio(a, b):
    if a is None or b is None or not b[0]:
        return None
    return a[0] / b[0]


def fmt_ratio(r, target=None, at_most=False):
    if r is None:
        return "–"
    text = f"{r:.2f}"
    if target is not None:
        ok = r <= target if at_most else r >= target
        text += f" ({'meets' if ok else 'misses'} {'≤' if at_most else '≥'} {target})"
    return text


def secs(x):
    return f"{x:,.0f}" if x >= 10 else f"{x:.1f}"


def machine():
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = "unknown"
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({model}), {mem} RAM, {platform.system()} {platform.release()}"


def main():
    ap = argparse.ArgumentParser()
    for a in ["results", "commands", "mode", "runs", "start", "end", "load-start", "load-end", "rev"]:
        ap.add_argument("--" + a, required=True)
    ap.add_argument("--seconds", help="the whole script's wall-clock time")
    a = ap.parse_args()

    runs = [json.loads(l) for l in open(a.results) if l.strip()]
    by = defaultdict(list)
    errors = []
    for r in runs:
        if "error" in r:
            errors.append(r)
        else:
            by[(r["mode"], r["backend"])].append(r)
    backends = [b for b in BACKENDS if any(k[1] == b for k in by)]
    loads = [l for r in runs for l in r.get("load", [])]

    def s(mode, backend, path):
        return spread([get(r["figures"], path) for r in by.get((mode, backend), [])])

    out = []
    w = out.append
    if a.mode == "soak":
        w("# Soak benchmark\n")
        w(f"Written by `scripts/bench.sh --soak` at commit `{a.rev}`, {a.start} to {a.end}; "
          "one soak per backend, at the rate its heading names.\n")
    else:
        w("# Benchmarks\n")
        w(f"Written by `scripts/bench.sh{'' if a.mode == 'full' else ' --' + a.mode}` at commit `{a.rev}`, "
          f"{a.start} to {a.end}; {a.runs} run(s) of every mode and backend, interleaved. "
          "Figures are medians, with min–max in parentheses.\n")
    w(f"**Machine:** {machine()}.  ")
    w(f"**Load average** (1 min): {a.load_start.split()[0]} at the start, {a.load_end.split()[0]} at the end; "
      + (f"{min(loads):.2f}–{max(loads):.2f} around the individual runs." if loads else "")
      + " Absolute figures move by up to 3x between machines of this kind and with load; the ratios, "
      "measured in the same run, are what to compare.\n")

    if a.mode != "soak":
        w("## Store calls (`store`)\n")
        w("| backend | adds/s | claim+archive/s | claim p50 / p99 ms | release p50 / p99 ms | adds vs reference | claim+archive vs reference |")
        w("|---|---|---|---|---|---|---|")
        for b in backends:
            adds = s("store", b, "adds_per_s")
            ca = s("store", b, "claim_archive_per_s")
            ref_adds = s("reference", b, "adds_per_s")
            ref_ca = s("reference", b, "claim_archive_per_s")
            target_ca = {"postgres": 1.0, "redis": 0.75}.get(b)
            w(f"| {b} | {fmt(adds)} | {fmt(ca)} | {fmt(s('store', b, 'claim_latency.p50_ms'))} / {fmt(s('store', b, 'claim_latency.p99_ms'))} "
              f"| {fmt(s('store', b, 'release_latency.p50_ms'))} / {fmt(s('store', b, 'release_latency.p99_ms'))} "
              f"| {fmt_ratio(ratio(adds, ref_adds), 0.9 if ref_adds else None)} | {fmt_ratio(ratio(ca, ref_ca), target_ca if ref_ca else None)} |")
        w("")
        ref_backends = [b for b in backends if by.get(("reference", b))]
        if ref_backends:
            w("References (`jobstore bench reference`, the same load in the same run): PostgreSQL's is a bare "
              "single-table `SKIP LOCKED` queue (claim+ack: `UPDATE state = 'completed'`), Redis's a bare ZPOPMIN "
              "queue (one ZSET and one HASH per job). Neither has ids with duplicate detection, fencing, results "
              "or counts.\n")
            w("| backend | reference adds/s | reference claim+ack/s | claim p50 / p99 ms |")
            w("|---|---|---|---|")
            for b in ref_backends:
                w(f"| {b} | {fmt(s('reference', b, 'adds_per_s'))} | {fmt(s('reference', b, 'claim_archive_per_s'))} "
                  f"| {fmt(s('reference', b, 'claim_latency.p50_ms'))} / {fmt(s('reference', b, 'claim_latency.p99_ms'))} |")
            w("")

        w("## Daemon (`drain`, `e2e`)\n")
        w("| backend | drain jobs/s | drain vs store claim+archive | e2e jobs/s | e2e vs drain | add-to-start at 100/s p50 / p99 ms | add-to-start at full speed p50 / p99 ms |")
        w("|---|---|---|---|---|---|---|")
        for b in backends:
            drain = s("drain", b, "jobs_per_s")
            e2e = s("e2e", b, "jobs_per_s")
            ca = s("store", b, "claim_archive_per_s")
            p50 = s("e2e", b, "add_to_start_at_rate.p50_ms")
            p99 = s("e2e", b, "add_to_start_at_rate.p99_ms")
            lat = f"{fmt(p50)} / {fmt(p99)}"
            if p50 and p99 and b in ("sqlite", "postgres", "redis"):
                lat += " (meets < 5 / < 25)" if p50[0] < 5 and p99[0] < 25 else " (misses < 5 / < 25)"
            w(f"| {b} | {fmt(drain)} | {fmt_ratio(ratio(drain, ca), 0.8)} | {fmt(e2e)} | {fmt_ratio(ratio(e2e, drain), 0.5)} "
              f"| {lat} | {fmt(s('e2e', b, 'add_to_start_full_speed.p50_ms'))} / {fmt(s('e2e', b, 'add_to_start_full_speed.p99_ms'))} |")
        w("")

        w("### CPU per job\n")
        w("CPU time per job (µs) during the timed part: the bench process's own (the store mode's claimers; "
          "the drain's daemon, which runs in the bench process; its no-op worker processes are not counted; "
          "in e2e at full speed, the daemon with its intake, journal and ingest and the bench's HTTP clients, "
          "all in the bench process) and the store server's where it reports it (Redis `INFO cpu`). The daemon "
          "and the server share this machine's cores, so CPU per job bounds the drain and e2e where neither "
          "side idles.\n")
        w("| backend | reference client | reference server | store client | store server | drain daemon | drain server | e2e daemon + clients | e2e server |")
        w("|---|---|---|---|---|---|---|---|---|")
        for b in backends:
            w(f"| {b} | {fmt(s('reference', b, 'client_cpu_us_per_job'))} | {fmt(s('reference', b, 'server_cpu_us_per_job'))} "
              f"| {fmt(s('store', b, 'client_cpu_us_per_job'))} | {fmt(s('store', b, 'server_cpu_us_per_job'))} "
              f"| {fmt(s('drain', b, 'daemon_cpu_us_per_job'))} | {fmt(s('drain', b, 'server_cpu_us_per_job'))} "
              f"| {fmt(s('e2e', b, 'daemon_cpu_us_per_job'))} | {fmt(s('e2e', b, 'server_cpu_us_per_job'))} |")
        w("")

        w("## Intake over HTTP (`intake`)\n")
        w("| backend | single adds, 1 client: adds/s | ack p50 / p99 ms | single adds, 8 clients: adds/s | ack p50 / p99 ms | 100-line bodies, 8 clients: jobs/s | ack p50 / p99 ms |")
        w("|---|---|---|---|---|---|---|")
        for b in backends:
            p50 = s("intake", b, "single_ack_latency.p50_ms")
            p99 = s("intake", b, "single_ack_latency.p99_ms")
            single = f"{fmt(p50)} / {fmt(p99)}"
            if p50 and p99:
                single += " (meets < 1 / < 5)" if p50[0] < 1 and p99[0] < 5 else " (misses < 1 / < 5)"
            bodies = s("intake", b, "bodies_jobs_per_s")
            bt = fmt(bodies)
            if bodies:
                bt += " (meets ≥ 200,000)" if bodies[0] >= 200000 else " (misses ≥ 200,000)"
            w(f"| {b} | {fmt(s('intake', b, 'single_adds_per_s'))} | {single} | {fmt(s('intake', b, 'concurrent_adds_per_s'))} "
              f"| {fmt(s('intake', b, 'concurrent_ack_latency.p50_ms'))} / {fmt(s('intake', b, 'concurrent_ack_latency.p99_ms'))} "
              f"| {bt} | {fmt(s('intake', b, 'bodies_ack_latency.p50_ms'))} / {fmt(s('intake', b, 'bodies_ack_latency.p99_ms'))} |")
        w("")

        if by.get(("wrk", "sqlite")):
            w("Beside it, `wrk` (`bench/wrk/add-lines.lua`) against a daemon on the default SQLite store "
              "with execution off:\n")
            w("| load | jobs acknowledged/s | ack p50 / p99 ms |")
            w("|---|---|---|")
            bp50, bp99 = s("wrk", "sqlite", "bodies_ack_latency.p50_ms"), s("wrk", "sqlite", "bodies_ack_latency.p99_ms")
            bodies = s("wrk", "sqlite", "bodies_jobs_per_s")
            bt = fmt(bodies)
            if bodies:
                bt += " (meets ≥ 200,000)" if bodies[0] >= 200000 else " (misses ≥ 200,000)"
            w(f"| 100-line bodies, 8 connections | {bt} | {fmt(bp50)} / {fmt(bp99)} |")
            sp50, sp99 = s("wrk", "sqlite", "single_ack_latency.p50_ms"), s("wrk", "sqlite", "single_ack_latency.p99_ms")
            lat = f"{fmt(sp50)} / {fmt(sp99)}"
            if sp50 and sp99:
                lat += " (meets < 1 / < 5)" if sp50[0] < 1 and sp99[0] < 5 else " (misses < 1 / < 5)"
            w(f"| single adds, 1 connection | {fmt(s('wrk', 'sqlite', 'single_adds_per_s'))} | {lat} |")
            w("")

        w("## Claim latency with large backlogs (`scale`)\n")
        w("The memory store is left out of the full run: it is the contract's executable reference, and its "
          "claim scans and sorts every job by design.\n")
        w("| backend | claim p50 / p99 ms at each point | p50 largest vs smallest | p50 with archive vs without |")
        w("|---|---|---|---|")
        for b in backends:
            rs = by.get(("scale", b), [])
            cells = []
            if rs:
                for i, p in enumerate(rs[0]["figures"].get("points", [])):
                    p50 = spread([get(r["figures"]["points"][i], "claim_latency.p50_ms") for r in rs if len(r["figures"].get("points", [])) > i])
                    p99 = spread([get(r["figures"]["points"][i], "claim_latency.p99_ms") for r in rs if len(r["figures"].get("points", [])) > i])
                    label = f"{p['waiting']:,} waiting" + (f" + {p['archived']:,} archived" if p["archived"] else "")
                    cells.append(f"{label}: {fmt(p50)} / {fmt(p99)}")
            w(f"| {b} | {'<br>'.join(cells) or '–'} | {fmt_ratio(s('scale', b, 'p50_largest_to_smallest') and s('scale', b, 'p50_largest_to_smallest')[0], 1.5, at_most=True)} "
              f"| {fmt_ratio(s('scale', b, 'p50_with_archive_to_without') and s('scale', b, 'p50_with_archive_to_without')[0])} |")
        w("")
    else:
        w("## Soak (`scripts/bench.sh --soak`)\n")
        w("A steady add+claim+archive load, one minute windows, at half the rate of a 20,000-job drain "
          "measured just before or at the rate `BENCH_SOAK_RATE` sets; PostgreSQL with autovacuum on "
          "at its defaults for the run.\n")
        for (mode, b), rs in by.items():
            if mode != "soak":
                continue
            for one_run in rs:
                f = one_run["figures"]
                params = one_run["parameters"]
                drain = [r["figures"].get("jobs_per_s") for r in by.get(("drain", b), []) if r.get("figures")]
                source = (f"half of a drain at {drain[-1]:.0f} jobs/s" if drain else "set by `BENCH_SOAK_RATE`")
                held = ""
                if params.get("hold_xmin_seconds"):
                    held = (f", a transaction ({params.get('hold_kind')}) held open beside it for "
                            f"{params['hold_xmin_seconds']:.0f} s")
                w(f"### {b}: {params.get('rate')} jobs/s for {params.get('duration_seconds')} s "
                  f"({source}){held}\n")
                w(f"Achieved: {f.get('achieved_rate_per_s')} jobs/s; most dead tuples in `jobs`: "
                  f"{f.get('dead_tuples_max', '–')}.\n")
                w(f"Claim p99 worst window vs first: {f.get('claim_p99_worst_to_first')} "
                  f"({'within' if f.get('claim_p99_within_2x') else 'over'} 2x).\n")
                w("| window | claim p50 / p99 ms | waiting | archived kept | memory per stored job (bytes) | dead tuples in `jobs` | vacuums so far: store / autovacuum |")
                w("|---|---|---|---|---|---|---|")
                for row in f.get("windows", []):
                    t = row.get("table") or {}
                    mark = " (held)" if row.get("holding") else ""
                    w(f"| {row['window']}{mark} | {row['claim_latency']['p50_ms']} / {row['claim_latency']['p99_ms']} | {row['waiting']} "
                      f"| {row['archived_kept']} | {row.get('memory_per_stored_job', '–')} "
                      f"| {t.get('dead_tuples', '–')} "
                      f"| {'–' if not t else str(t.get('vacuums', '–')) + ' / ' + str(t.get('autovacuums', '–'))} |")
                w("")

    walls = [r for r in runs if isinstance(r.get("wall_s"), (int, float))]
    if walls:
        modes = list(dict.fromkeys(r["mode"] for r in walls))
        wb = [b for b in backends if any(r["backend"] == b for r in walls)]
        w("## Time taken\n")
        runs = "" if a.mode == "soak" else f", all {a.runs} run(s) together"
        w(f"Wall-clock seconds of each mode{runs} (each run starts its own daemon "
          "or store and drops its namespace after), and the whole script's time, build included.\n")
        w("| mode | " + " | ".join(wb) + " | all |")
        w("|---|" + "---|" * (len(wb) + 1))
        for m in modes:
            cells = [sum(r["wall_s"] for r in walls if r["mode"] == m and r["backend"] == b) for b in wb]
            w(f"| {m} | " + " | ".join(secs(c) if c else "–" for c in cells) + f" | {secs(sum(cells))} |")
        total = sum(r["wall_s"] for r in walls)
        w("| all | " + " | ".join(secs(sum(r["wall_s"] for r in walls if r["backend"] == b)) for b in wb)
          + f" | {secs(total)} |")
        w("")
        if a.seconds:
            w(f"The script took {float(a.seconds) / 60:.1f} min from start to report.\n")

    if errors:
        w("## Failed runs\n")
        for e in errors:
            w(f"- run {e['run']}, {e['mode']} on {e['backend']}: `{e['error'].strip()[:500]}`")
        w("")

    if a.mode == "full":
        w("## Soak\n")
        w("The soak runs on its own (`scripts/bench.sh --soak`, 10 minutes per backend) and writes "
          "[BENCHMARKS-soak.md](BENCHMARKS-soak.md).\n")

    # What limits each missed target, with the profiles that show it: kept
    # beside the script so that a new run keeps the explanation.
    name = {"full": "bench-analysis.md", "soak": "bench-analysis-soak.md"}.get(a.mode)
    notes = os.path.join(os.path.dirname(os.path.abspath(__file__)), name or "")
    if name and os.path.exists(notes):
        w(open(notes).read().rstrip() + "\n")

    w("## Commands\n")
    w("```sh")
    for line in open(a.commands).read().splitlines():
        w(line)
    w("```\n")
    w("Every `jobstore bench` run works in a namespace of its own and drops it after; the JSON of each run "
      "(`--json`) holds every figure shown here and more (p50/p99/max of each store call, counts).\n")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
