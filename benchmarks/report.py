#!/usr/bin/env python3
"""Turns the JSON lines of one benchmarks/run into a Markdown table with ratios and targets,
and a gnuplot PNG of throughput and p99 wait against the number of waiters on one lock.

usage: report.py RESULTS.jsonl OUT.md OUT.png "setting description"
"""
import json
import os
import subprocess
import sys
import tempfile

raw, out_md, out_png, setting = sys.argv[1:5]
cells = [json.loads(line) for line in open(raw) if line.strip()]


def find(impl, mode, workers=1, locks=1, share=False, clients=1, linger=0, completions="thread", fenced=False):
    """The cell's median round by throughput (one whole run, so its fields agree with each
    other), with the violations and errors of every round and the spread of throughput.
    Go's cells have no completion mode ("")."""
    runs = [c for c in cells
            if c["impl"] == impl and c["mode"] == mode and c["workers"] == workers and c["locks"] == locks
            and c.get("share_session", False) == share and c.get("clients", 1) == clients
            and c.get("linger_ms", 0) == linger and c.get("completions", "thread") in (completions, "")
            and c.get("fenced", False) == fenced]
    if not runs:
        return None
    runs.sort(key=lambda c: c["acquisitions_per_s"])
    c = dict(runs[(len(runs) - 1) // 2])
    c["violations"] = sum(r["violations"] for r in runs)
    c["errors"] = sum(r["errors"] for r in runs)
    c["spread"] = (runs[0]["acquisitions_per_s"], runs[-1]["acquisitions_per_s"])
    return c


def num(c, field, fmt="{:.0f}"):
    return fmt.format(c[field]) if c and c.get(field, -1) >= 0 else "–"


def tput(c):
    """Median acquisitions/s, with the lowest and highest round when there were several."""
    if not c:
        return "–"
    lo, hi = c["spread"]
    return f"{c['acquisitions_per_s']:.0f}" + (f" ({lo:.0f}–{hi:.0f})" if hi > lo else "")


def ratio(a, b, field="acquisitions_per_s"):
    if not a or not b or not b[field]:
        return None
    return a[field] / b[field]


def fmt_ratio(r):
    return "–" if r is None else f"{r:.2f}×"


floor_c = find("coetcd", "delete_chain")
floor_g = find("go", "delete_chain")
rows = [(1, 1), (2, 1), (10, 1), (100, 1), (1000, 1), (100, 10), (100, 100), (1000, 1000)]

lines = [
    "# Lock contention: coetcd vs etcd's Go concurrency.Mutex",
    "",
    f"One run of `benchmarks/run` ({setting}). Every cell runs against the same local etcd,",
    "one after another; the whole matrix is repeated and each cell shows its median round (the",
    "lowest and highest acquisitions/s in brackets). Workers each have their own session;",
    "worker *i* uses lock *i* mod *locks*.",
    "The *txn floor* is one put-if-absent txn plus one delete per acquisition, retried at once when",
    "taken (no waiting, no watch), on coetcd's client. Wait = from asking for the lock to holding it.",
    "",
    "| workers | locks | coetcd acq/s | Go acq/s | coetcd/Go | txn floor acq/s | coetcd/floor "
    "| coetcd p99 ms | Go p99 ms | coetcd RSS MB | Go RSS MB | coetcd RPCs/acq | Go RPCs/acq "
    "| coetcd Range/acq | Go Range/acq | coetcd CPU s/1000 | Go CPU s/1000 | violations |",
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
]
for w, k in rows:
    c, g, t = find("coetcd", "mutex", w, k), find("go", "mutex", w, k), find("coetcd", "txn", w, k)
    viol = "/".join(str(x["violations"] + x["errors"]) if x else "–" for x in (c, g, t))
    lines.append(
        f"| {w} | {k} | {tput(c)} | {tput(g)} | {fmt_ratio(ratio(c, g))} "
        f"| {tput(t)} | {fmt_ratio(ratio(c, t))} "
        f"| {num(c, 'p99_ms', '{:.1f}')} | {num(g, 'p99_ms', '{:.1f}')} "
        f"| {num(c, 'peak_rss_mb', '{:.1f}')} | {num(g, 'peak_rss_mb', '{:.1f}')} "
        f"| {num(c, 'rpcs_per_acq', '{:.2f}')} | {num(g, 'rpcs_per_acq', '{:.2f}')} "
        f"| {num(c, 'range_per_acq', '{:.2f}')} | {num(g, 'range_per_acq', '{:.2f}')} "
        f"| {num(c, 'cpu_s_per_1000', '{:.2f}')} | {num(g, 'cpu_s_per_1000', '{:.2f}')} | {viol} |"
    )
lines += [
    "",
    "violations = overlaps or lost updates + errors over all rounds, for coetcd / Go / txn floor "
    "(all must be 0).",
    "",
    "**Hand-off floor** (a serial chain of single-key deletes, one commit each): "
    f"{num(floor_c, 'acquisitions_per_s')} deletes/s on coetcd's client "
    f"(p50 {num(floor_c, 'p50_ms', '{:.2f}')} ms), {num(floor_g, 'acquisitions_per_s')} on Go's.",
    "",
    "## Targets",
    "",
    "| target | measured | |",
    "|---|---:|---|",
]


def target(name, value, goal, text=None):
    ok = value is not None and value >= goal
    shown = text if text is not None else fmt_ratio(value)
    lines.append(f"| {name} | {shown} | {'met' if ok else 'MISSED'} |")


target("1 uncontended worker ≥ 0.95 × txn floor", ratio(find("coetcd", "mutex"), find("coetcd", "txn")), 0.95)
target("10 waiters, 1 lock: ≥ 10 × Go", ratio(find("coetcd", "mutex", 10), find("go", "mutex", 10)), 10)
target("100 waiters, 1 lock: ≥ 2.5 × Go", ratio(find("coetcd", "mutex", 100), find("go", "mutex", 100)), 2.5)
target("1000 waiters, 1 lock: ≥ 4 × Go", ratio(find("coetcd", "mutex", 1000), find("go", "mutex", 1000)), 4)
target("1000 waiters, 1 lock: ≥ 0.8 × hand-off floor", ratio(find("coetcd", "mutex", 1000), floor_c), 0.8)
target("100 workers, 10 locks: ≥ 5 × Go", ratio(find("coetcd", "mutex", 100, 10), find("go", "mutex", 100, 10)), 5)
target("1000 workers, 1000 locks: ≥ 1.05 × Go",
       ratio(find("coetcd", "mutex", 1000, 1000), find("go", "mutex", 1000, 1000)), 1.05)
ranges = [c["range_per_acq"] for c in cells if c["impl"] == "coetcd" and c["mode"] == "mutex"]
target("no Range RPC per hand-off", 1.0 if ranges and max(ranges) < 0.01 else 0.0, 1.0,
       f"max {max(ranges):.3f} Range/acq" if ranges else "–")
c1000, g1000 = find("coetcd", "mutex", 1000), find("go", "mutex", 1000)
rss = g1000["peak_rss_mb"] / c1000["peak_rss_mb"] if c1000 and g1000 else None
target("peak RSS, 1000 waiters ≤ 1/3 of Go", rss, 3.0,
       f"{c1000['peak_rss_mb']:.1f} vs {g1000['peak_rss_mb']:.1f} MB (Go/coetcd {rss:.2f}×)" if rss else "–")
lines += ["", "![throughput and p99 wait vs waiters](latest.png)", ""]

# The async server: workers of one process share a session per client and one lock name.
shared_rows = [(w, 1) for w in (1, 10, 100, 1000)] + [(100, 4)]
lines += [
    "## The async server: callers sharing a session",
    "",
    "Workers are coroutines (goroutines) of one process that share one session per client and",
    "take one lock name (`--share-session`; *sessions* = clients). coetcd queues them locally",
    "behind the session's one key; Go's twin takes a `sync.Mutex` per session and then",
    "`concurrency.Mutex` (a Go session shares its lock with itself). The *in-process* reference",
    "is the same workers on an async FIFO lock with no etcd: the limit of a local hand-off here.",
    "*Fenced*: each coetcd holder reads its fencing token (`--fenced`), so each local hand-off first",
    "puts the key again (one write), as it does for holders that fence their writes.",
    "Share = each session's acquisitions against the mean; gap = the longest a session went",
    "without an acquisition.",
    "",
    "| workers | sessions | coetcd acq/s | Go twin acq/s | coetcd/Go | in-process acq/s | coetcd/in-process "
    "| fenced acq/s | fenced/in-process "
    "| coetcd RPCs/acq | Go RPCs/acq | coetcd p99 ms | share min–max | longest gap ms | violations |",
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|",
]
for w, k in shared_rows:
    c = find("coetcd", "mutex", w, 1, True, k)
    g = find("go", "mutex", w, 1, True, k)
    ref = find("local", "local", w, 1) if k == 1 else None
    f = find("coetcd", "mutex", w, 1, True, k, fenced=True)
    viol = "/".join(str(x["violations"] + x["errors"]) if x else "–" for x in (c, g))
    share = f"{c['share_min']:.2f}–{c['share_max']:.2f}" if c and k > 1 else "–"
    lines.append(
        f"| {w} | {k} | {tput(c)} | {tput(g)} | {fmt_ratio(ratio(c, g))} | {tput(ref)} | {fmt_ratio(ratio(c, ref))} "
        f"| {tput(f)} | {fmt_ratio(ratio(f, ref))} "
        f"| {num(c, 'rpcs_per_acq', '{:.4f}')} | {num(g, 'rpcs_per_acq', '{:.2f}')} | {num(c, 'p99_ms', '{:.2f}')} "
        f"| {share} | {num(c, 'max_gap_ms', '{:.1f}') if k > 1 else '–'} | {viol} |")
lin = find("coetcd", "mutex", 1, 1, linger=100)
lines += [
    "",
    f"**Linger** (`--linger 100`, one worker): {tput(lin)} acq/s, against Go's `concurrency.Mutex` "
    f"{tput(find('go', 'mutex'))} ({fmt_ratio(ratio(lin, find('go', 'mutex')))}).",
    "",
    "| target | measured | |",
    "|---|---:|---|",
]
c100, g100, r100 = find("coetcd", "mutex", 100, 1, True), find("go", "mutex", 100, 1, True), find("local", "local", 100)
target("100 / 1 session: ≥ 100,000 acq/s", c100["acquisitions_per_s"] / 100000 if c100 else None, 1.0,
       tput(c100))
target("100 / 1 session: ≥ 0.5 × in-process", ratio(c100, r100), 0.5)
target("100 / 1 session: ≥ 100 × Go's twin", ratio(c100, g100), 100)
c4, g4 = find("coetcd", "mutex", 100, 1, True, 4), find("go", "mutex", 100, 1, True, 4)
target("100 / 4 sessions: ≥ 20 × Go's twin", ratio(c4, g4), 20)
target("100 / 4 sessions: ≥ 10 × the 100-waiter cell (a session each)", ratio(c4, find("coetcd", "mutex", 100)), 10)
target("100 / 4 sessions: ≤ 0.05 RPCs/acq", (0.05 / c4["rpcs_per_acq"]) if c4 and c4["rpcs_per_acq"] > 0 else
       (1.0 if c4 else None), 1.0, num(c4, "rpcs_per_acq", "{:.4f}"))
target("100 / 4 sessions: each share within 0.5–2 × the mean",
       1.0 if c4 and c4["share_min"] >= 0.5 and c4["share_max"] <= 2 else 0.0, 1.0, share if c4 else "–")
target("1 worker with linger: ≥ 20 × Go's concurrency.Mutex", ratio(lin, find("go", "mutex")), 20)
lines += ["", "![throughput vs callers per session](latest-shared.png)", ""]
open(out_md, "w").write("\n".join(lines))

# The plot: waiters on one lock on the x axis.
with tempfile.TemporaryDirectory() as tmp:
    data = os.path.join(tmp, "one_lock.dat")
    with open(data, "w") as f:
        for w in (1, 2, 10, 100, 1000):
            vals = []
            for impl, mode in (("coetcd", "mutex"), ("go", "mutex"), ("coetcd", "txn")):
                c = find(impl, mode, w)
                vals += [c["acquisitions_per_s"], c["p99_ms"]] if c else ["NaN", "NaN"]
            f.write(f"{w} " + " ".join(str(v) for v in vals) + "\n")
    floor = floor_c["acquisitions_per_s"] if floor_c else "NaN"
    script = f"""
set terminal pngcairo size 1100,460 font ',10'
set output '{out_png}'
set multiplot layout 1,2 title 'One lock, N waiters ({setting})'
set logscale x
set xlabel 'waiters on one lock'
set key top right
set grid
set ylabel 'acquisitions/s'
set yrange [0:*]
# Headroom above the highest line (often the hand-off floor) for the key.
set offsets 0, 0, graph 0.3, 0
plot '{data}' u 1:2 w lp lw 2 t 'coetcd mutex', '' u 1:4 w lp lw 2 t 'Go concurrency.Mutex', \\
     '' u 1:6 w lp lw 2 dt 2 t 'txn floor (no waiting)', {floor} w l lw 2 dt 3 lc rgb 'black' t 'hand-off floor (delete chain)'
set ylabel 'p99 lock wait, ms'
set logscale y
set yrange [*:*]
set offsets 0, 0, 0, 0
set key top left
plot '{data}' u 1:3 w lp lw 2 t 'coetcd mutex', '' u 1:5 w lp lw 2 t 'Go concurrency.Mutex', \\
     '' u 1:7 w lp lw 2 dt 2 t 'txn floor (no waiting)'
unset multiplot
"""
    gp = os.path.join(tmp, "plot.gp")
    open(gp, "w").write(script)
    subprocess.run(["gnuplot", gp], check=True)

    # Throughput against callers per session (one session, one name).
    shared = os.path.join(tmp, "shared.dat")
    with open(shared, "w") as f:
        for w in (1, 10, 100, 1000):
            vals = []
            for c in (find("coetcd", "mutex", w, 1, True), find("go", "mutex", w, 1, True), find("local", "local", w)):
                vals.append(c["acquisitions_per_s"] if c else "NaN")
            f.write(f"{w} " + " ".join(str(v) for v in vals) + "\n")
    shared_png = os.path.join(os.path.dirname(out_png), "latest-shared.png")
    script = f"""
set terminal pngcairo size 700,460 font ',10'
set output '{shared_png}'
set title 'Callers of one session on one lock ({setting})'
set logscale xy
set xlabel 'callers (coroutines / goroutines) per session'
set ylabel 'acquisitions/s'
set key bottom right
set grid
plot '{shared}' u 1:2 w lp lw 2 t 'coetcd mutex', '' u 1:3 w lp lw 2 t 'Go: sync.Mutex + concurrency.Mutex', \\
     '' u 1:4 w lp lw 2 dt 2 t 'in-process async lock (no etcd)'
"""
    open(gp, "w").write(script)
    subprocess.run(["gnuplot", gp], check=True)
