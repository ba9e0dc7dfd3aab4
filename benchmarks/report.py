#!/usr/bin/env python3
"""Turns the JSON lines of one benchmarks/run into latest.md (tables.py's tables, which the docs
show too, and the targets) and gnuplot PNGs: throughput and p99 wait against waiters on one
lock, and throughput against callers per session.

usage: report.py RESULTS.jsonl OUT.md OUT.png "setting description"
"""
import json
import os
import subprocess
import sys
import tempfile

raw, out_md, out_png, setting = sys.argv[1:5]
cells = [json.loads(line) for line in open(raw) if line.strip()]


# The tables are benchmarks/report's (tables.py), so latest.md and the docs say the same.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tables  # noqa: E402

tables.use("latest.jsonl", cells)


def med(impl, mode, workers=1, **fields):
    return tables.cell(cells, impl, mode, workers, **fields)


def find(impl, mode, workers=1, **fields):
    """The cell as the tables show it (medians of its rounds), for the plots."""
    return tables.summary(med(impl, mode, workers, **fields))


floor_c = find("coetcd", "delete_chain")


lines = [
    "# Lock contention: coetcd vs etcd's Go concurrency.Mutex",
    "",
    f"One run of `benchmarks/run` ({setting}). Every cell runs against the same local etcd, one after",
    "another; the whole matrix is repeated and each cell shows its median round (the lowest and",
    "highest acquisitions/s in brackets), its p99 the median of the rounds' p99s, a ratio the median",
    "of the ratios within each round. Only acquisitions inside a cell's window count, in both benches.",
    "Workers each have their own session unless they share one; worker *i* uses lock *i* mod *locks*.",
    "The *txn floor* is one put-if-absent txn plus one delete per acquisition, retried at once when",
    "taken (no waiting, no watch), on coetcd's client. Wait = from asking for the lock to holding it.",
    "What each table means: docs/performance.md.",
    "",
    tables.contention(),
    "",
    "![throughput and p99 wait vs waiters](latest.png)",
    "",
    "## The async server: callers sharing a session",
    "",
    "Go's twin holds `concurrency.Mutex` per session while its goroutines pass a `sync.Mutex`, within",
    "coetcd's fairness bounds (`benchmarks/peers/go/held.go`); *in-process* is the same workers on an",
    "async FIFO lock with no etcd.",
    "",
    tables.async_server(),
    "",
    "![throughput vs callers per session](latest-shared.png)",
    "",
    "## Linger",
    "",
    tables.linger(),
    "",
    "## Fenced local hand-offs",
    "",
    tables.fenced(),
    "",
    "## Checked critical sections (a guarded read-modify-write of a counter in etcd)",
    "",
    tables.checked(),
    "",
    "## Targets",
    "",
    "| target | measured | |",
    "|---|---:|---|",
]


def target(name, value, goal, text=None):
    ok = value is not None and value >= goal
    shown = text if text is not None else tables.x(value)
    lines.append(f"| {name} | {shown} | {'met' if ok else 'MISSED'} |")


R = tables.ratio
target("1 uncontended worker ≥ 0.95 × txn floor", R(med("coetcd", "mutex"), med("coetcd", "txn")), 0.95)
target("10 waiters, 1 lock: ≥ 10 × Go", R(med("coetcd", "mutex", 10), med("go", "mutex", 10)), 10)
target("100 waiters, 1 lock: ≥ 2.5 × Go", R(med("coetcd", "mutex", 100), med("go", "mutex", 100)), 2.5)
target("1000 waiters, 1 lock: ≥ 4 × Go", R(med("coetcd", "mutex", 1000), med("go", "mutex", 1000)), 4)
target("1000 waiters, 1 lock: ≥ 0.8 × hand-off floor", R(med("coetcd", "mutex", 1000), med("coetcd", "delete_chain")), 0.8)
target("100 workers, 10 locks: ≥ 5 × Go", R(med("coetcd", "mutex", 100, locks=10), med("go", "mutex", 100, locks=10)), 5)
target("1000 workers, 1000 locks: ≥ 1.05 × Go",
       R(med("coetcd", "mutex", 1000, locks=1000), med("go", "mutex", 1000, locks=1000)), 1.05)
ranges = [c["range_per_acq"] for c in cells if c["impl"] == "coetcd" and c["mode"] == "mutex" and not c.get("checked")]
target("no Range RPC per hand-off", 1.0 if ranges and max(ranges) < 0.01 else 0.0, 1.0,
       f"max {max(ranges):.3f} Range/acq" if ranges else "–")
c1000, g1000 = tables.median(med("coetcd", "mutex", 1000), "peak_rss_mb"), tables.median(med("go", "mutex", 1000), "peak_rss_mb")
rss = g1000 / c1000 if c1000 and g1000 else None
target("peak RSS, 1000 waiters ≤ 1/3 of Go", rss, 3.0,
       f"{c1000:.1f} vs {g1000:.1f} MB (Go/coetcd {rss:.2f}×)" if rss else "–")
c100 = med("coetcd", "mutex", 100, share_session=True)
target("100 / 1 session: ≥ 0.5 × in-process", R(c100, med("local", "local", 100)), 0.5)
c4 = med("coetcd", "mutex", 100, share_session=True, clients=4)
target("100 / 4 sessions: ≥ 10 × the 100-waiter cell (a session each)", R(c4, med("coetcd", "mutex", 100)), 10)
rpc4 = tables.median(c4, "rpcs_per_acq")
target("100 / 4 sessions: ≤ 0.05 RPCs/acq", (0.05 / rpc4) if rpc4 else (1.0 if c4 else None), 1.0, tables.n(rpc4, "{:.4f}"))
lo, hi = tables.median(c4, "share_min"), tables.median(c4, "share_max")
target("100 / 4 sessions: each share within 0.5–2 × the mean", 1.0 if lo and lo >= 0.5 and hi <= 2 else 0.0, 1.0,
       f"{lo:.2f}–{hi:.2f}" if lo else "–")
target("checked cells: no violation", 1.0 if all(c["violations"] == 0 for c in cells if c.get("checked")) else 0.0, 1.0,
       f"{sum(c['violations'] for c in cells if c.get('checked'))} in {sum(1 for c in cells if c.get('checked'))} cells")
lines += [""]
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
            for c in (find("coetcd", "mutex", w, share_session=True), find("go", "mutex", w, share_session=True, pass_local=True),
                      find("local", "local", w)):
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
plot '{shared}' u 1:2 w lp lw 2 t 'coetcd mutex', '' u 1:3 w lp lw 2 t 'Go: sync.Mutex inside a held concurrency.Mutex', \\
     '' u 1:4 w lp lw 2 dt 2 t 'in-process async lock (no etcd)'
"""
    open(gp, "w").write(script)
    subprocess.run(["gnuplot", gp], check=True)
