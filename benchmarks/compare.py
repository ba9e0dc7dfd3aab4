#!/usr/bin/env python3
"""benchmarks/compare.py CELLS.jsonl CRASH.jsonl STALE.jsonl FAILOVER.jsonl OUT.md OUT.png SETTING

The JSON lines of one benchmarks/compare run (coetcd-bench and go-bench cells on etcd, Redis,
ZooKeeper and PostgreSQL). Writes a Markdown section (throughput, p50/p99 wait, violations per
system and cell; the crashed-holder, paused-holder and one-server-down rows) and a gnuplot PNG
of throughput against waiters."""
import json
import os
import subprocess
import sys
import tempfile

cells_path, crash_path, stale_path, failover_path, out_md, out_png, setting = sys.argv[1:8]


def lines_of(path):
    return [json.loads(l) for l in open(path) if l.strip()] if os.path.exists(path) else []


cells = lines_of(cells_path)
crash = lines_of(crash_path)
stale = lines_of(stale_path)
failover = lines_of(failover_path)

# The tables are benchmarks/report's (tables.py), so compare.md and the docs say the same.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tables  # noqa: E402

for name, lines_of_run in (("compare.jsonl", cells), ("compare-crash.jsonl", crash), ("compare-stale.jsonl", stale),
                           ("compare-failover.jsonl", failover)):
    tables.use(name, lines_of_run)
SYSTEMS = tables.SYSTEMS + [("coetcd_shared", "coetcd `mutex`, the workers share one session")]
label = tables._label
present = [(lab, what) for lab, what in SYSTEMS if any(label(c) == lab for c in cells)]
lines = [
    f"## Locks compared ({setting})",
    "",
    "`benchmarks/compare`: each cell is `acquisitions/s · p50 / p99 wait (ms)`, each the median of its",
    "rounds; every worker takes the lock, reads a counter, yields, writes it back and releases (a lost",
    "update or two holders at once is a violation). One process per system, all on this machine.",
    "",
    tables.compare_contention(),
    "",
    "Workers sharing one coetcd session (an in-memory hand-off, not comparable with the rows above:",
    "docs/choosing-a-lock.md):",
    "",
    tables.compare_shared(),
    "",
    "For the locks that poll (`redis*`, `pg_table`) the releasing worker asks again at once while",
    "the others sleep 50–250 ms between tries, so it usually wins again: their throughput is one",
    "client's round trip, paid for by the others' waits (the fairness table below).",
    "",
    "The longest wait of any worker for one acquisition (fairness: a lock whose last holder can win",
    "again leaves others waiting; etcd's queue is FIFO by create revision):",
    "",
    tables.compare_fairness(),
]
gave_up = [(label(c), c["workers"], c["locks"], c["gave_up"]) for c in cells if c.get("gave_up")]
if gave_up:
    lines += ["", "Redis's recipe gave up after its 32 tries (the worker then asked again), all rounds: " +
              ", ".join(f"`{lab}` {w} on {l}: {g}" for lab, w, l, g in gave_up) + "."]
bads = [c for c in cells if tables.bad([c])]
lines += ["", f"Cells with a violation, an error or a lock left behind: {len(bads)}" +
          ("" if not bads else " — " + "; ".join(f"`{label(c)}` {c['workers']}: {c['first_error']}" for c in bads))]
if crash:
    lines += ["", "### A crashed holder", "",
              "A process takes the lock, a second one queues behind it, the first is SIGKILLed: the time from",
              "the kill until the second has the lock (and has exited, a few ms), each system at its defaults.", "",
              tables.compare_crash()]
if stale:
    lines += ["", "### A paused holder", "",
              "A process takes the lock, reads a counter kept in the same system (starting at 0) and is",
              "SIGSTOPped before it writes the counter back, for longer than its lock lasts (etcd sessions",
              "10 s, Redis and the lock table 8 s, ZooKeeper sessions 10 s). A second process takes the",
              "lock if the system lets it, increments the counter and exits; then the first resumes and",
              "writes what it had read plus one. Plainly written, that write lands and an increment is lost;",
              "fenced, it is made conditional on still holding the lock, in the same step",
              "(`benchmarks/peers/go/stale.go`, `benchmarks/stale_write.cpp`).", "",
              tables.compare_stale()]
if failover:
    lines += ["", "### One server dies", "",
              "Ten workers on one lock, each holding it 1 s, for 20 s; 5-6 s in (at a random point of a hold)",
              "one server is SIGKILLed. etcd and ZooKeeper run three members and lose their leader for good;",
              "Redis and PostgreSQL run one server, started again 0.1 s later on the same data. Workers go on",
              "after an error (count it, wait 100 ms, reconnect). \"Lock free\": the longest time nobody held",
              "the lock while workers wanted it (a hand-off takes milliseconds, so this is the outage as the",
              "workers saw it).", "",
              tables.compare_failover()]
lines += ["", f"![throughput against waiters on one lock]({os.path.basename(out_png)})", ""]
open(out_md, "w").write("\n".join(lines))


def pick(lab, workers, locks):
    """The cell as the tables show it (medians of its rounds), or None."""
    return tables.summary([c for c in cells if label(c) == lab and c["workers"] == workers and c["locks"] == locks])


CELLS = tables.COMPARE_CELLS

with tempfile.TemporaryDirectory() as tmp:
    data = os.path.join(tmp, "compare.dat")
    one_lock = [w for w, l in CELLS if l == 1]
    with open(data, "w") as f:
        for w in one_lock:
            vals = []
            for lab, _ in present:
                c = pick(lab, w, 1)
                vals.append(c["acquisitions_per_s"] if c and c["acquisitions_per_s"] > 0 else "NaN")
            f.write(f"{w} " + " ".join(str(v) for v in vals) + "\n")
    plots = [f"'{data}' u 1:{2 + i} w lp lw 2 t '{lab}'" for i, (lab, _) in enumerate(present)]
    script = f"""
set terminal pngcairo size 900,520 font ',10' noenhanced
set output '{out_png}'
set title "One lock: acquisitions/s against waiters\\n{setting}"
set logscale xy
set xlabel 'waiters on one lock'
set ylabel 'acquisitions/s'
set key outside right
set grid
plot {", ".join(plots)}
"""
    gp = os.path.join(tmp, "plot.gp")
    open(gp, "w").write(script)
    subprocess.run(["gnuplot", gp], check=True)
