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

# (label in the results, what it is)
SYSTEMS = [
    ("coetcd", "coetcd mutex, a session per worker"),
    ("coetcd_shared", "coetcd mutex, the workers share one session (coroutine-level exclusion)"),
    ("go", "etcd's Go concurrency.Mutex, a session per worker"),
    ("redis", "Redis, redsync's recipe, default persistence (RDB snapshots, no AOF)"),
    ("redis_aof_always", "Redis, redsync's recipe, appendonly yes + appendfsync always"),
    ("zk", "ZooKeeper, go-zookeeper's zk.Lock (a session per worker)"),
    ("pg_table", "PostgreSQL, a lock table with an expiry (an upsert per try, a commit each)"),
    ("pg_advisory", "PostgreSQL, pg_advisory_lock on a backend per worker"),
]
CELLS = [(1, 1), (10, 1), (100, 1), (1000, 1), (100, 10)]


def label(c):
    if c["impl"] == "coetcd" and c.get("share_session"):
        return "coetcd_shared"
    return c["impl"]


def pick(lab, workers, locks):
    """The median round (by throughput) of one system's cell, or None."""
    runs = [c for c in cells if label(c) == lab and c["workers"] == workers and c["locks"] == locks]
    if not runs:
        return None
    runs.sort(key=lambda c: c["acquisitions_per_s"])
    return runs[len(runs) // 2]


def bad(c):
    return c["violations"] != 0 or c["errors"] != 0 or c.get("leftover_keys", 0) > 0


def cell_text(c):
    if c is None:
        return "—"
    t = f"{c['acquisitions_per_s']:.0f} · {c['p50_ms']:.1f} / {c['p99_ms']:.0f}"
    if bad(c):
        t += f" **{c['violations']} viol., {c['errors']} err.**"
    return t


present = [(lab, what) for lab, what in SYSTEMS if any(label(c) == lab for c in cells)]
lines = [
    f"## Locks compared ({setting})",
    "",
    "`benchmarks/compare`: each cell is `acquisitions/s · p50 / p99 wait (ms)` of the median round;",
    "every worker takes the lock, reads a counter, yields, writes it back and releases (a lost",
    "update or two holders at once is a violation). One process per system, all on this machine.",
    "",
    "| system | " + " | ".join(f"{w} on {l} lock{'s' if l > 1 else ''}" for w, l in CELLS) + " |",
    "|---|" + "---:|" * len(CELLS),
]
for lab, what in present:
    lines.append(f"| `{lab}` | " + " | ".join(cell_text(pick(lab, w, l)) for w, l in CELLS) + " |")
lines += ["", "For the locks that poll (`redis*`, `pg_table`) the releasing worker asks again at once while",
          "the others sleep 50–250 ms between tries, so it usually wins again: their throughput is one",
          "client's round trip, paid for by the others' waits (the fairness table below)."]
lines += ["", "| label | what it is |", "|---|---|"]
lines += [f"| `{lab}` | {what} |" for lab, what in present]

# Fairness: the longest any worker waited for one acquisition (a lock that lets the last
# holder win again starves the others).
lines += ["", "The longest wait of any worker for one acquisition, in ms (fairness: a lock whose last",
          "holder can win again leaves others waiting; \"got none\": workers that never had the lock",
          "in the cell, counted for the non-etcd systems; etcd's queue is FIFO by create revision):", "",
          "| system | " + " | ".join(f"{w} on {l}" for w, l in CELLS) + " |", "|---|" + "---:|" * len(CELLS)]
for lab, _ in present:
    row = []
    for w, l in CELLS:
        c = pick(lab, w, l)
        if c is None:
            row.append("—")
        else:
            starved = f" ({c['starved']} got none)" if c.get("starved") else ""
            row.append(f"{c['max_ms']:.0f}{starved}")
    lines.append(f"| `{lab}` | " + " | ".join(row) + " |")
gave_up = [(label(c), c["workers"], c["locks"], c["gave_up"]) for c in cells if c.get("gave_up")]
if gave_up:
    lines += ["", "Redis's recipe gave up after its 32 tries (the worker then asked again), all rounds: " +
              ", ".join(f"`{lab}` {w} on {l}: {g}" for lab, w, l, g in gave_up) + "."]
bads = [c for c in cells if bad(c)]
lines += ["", f"Cells with a violation, an error or a lock left behind: {len(bads)}" +
          ("" if not bads else " — " + "; ".join(f"`{label(c)}` {c['workers']}: {c['first_error']}" for c in bads))]

if crash:
    lines += ["", "### A crashed holder", "",
              "A process takes the lock, a second one queues behind it, the first is SIGKILLed: the time from",
              "the kill until the second has the lock (and has exited, a few ms), each system at its defaults.", "",
              "| system | wait for the next holder | what frees the lock |", "|---|---:|---|"]
    why = {
        "coetcd": "the session's lease expires (TTL 60 s, coetcd's and Go's default)",
        "redis": "the key's expiry (redsync's 8 s)",
        "redis_aof_always": "the key's expiry (redsync's 8 s)",
        "zk": "the session times out (asked 60 s; the server caps it at 20 ticks = 40 s)",
        "pg_table": "the row's expiry (8 s, as redsync's)",
        "pg_advisory": "the backend sees its client's socket close and ends the session (the figure includes the second process's 0.2 s wait before its leftover check)",
    }
    for r in crash:
        a = r["acquirer"]
        ok = a.get("acquisitions") == 1 and a.get("errors") == 0
        took = f"{r['pass_on_s']:.1f} s" if ok else f"**failed** ({a.get('first_error', '')})"
        lines.append(f"| `{r['label']}` | {took} | {why.get(r['label'], '')} |")
if stale:
    lines += ["", "### A paused holder", "",
              "A process takes the lock, reads a counter kept in the same system (starting at 0) and is",
              "SIGSTOPped before it writes the counter back, for longer than its lock lasts (etcd sessions",
              "10 s, Redis and the lock table 8 s, ZooKeeper sessions 10 s). A second process takes the",
              "lock if the system lets it, increments the counter and exits; then the first resumes and",
              "writes what it had read plus one. Plainly written, that write lands and an increment is lost;",
              "fenced, it is made conditional on still holding the lock, in the same step",
              "(`benchmarks/peers/go/stale.go`, `benchmarks/stale_write.cpp`).", "",
              "| system | write | second holder | the paused holder's write | counter (writes applied) |",
              "|---|---|---|---|---:|"]
    for r in stale:
        served = (f"in after {r['contender_wait_s']:.1f} s" if r["served_in_pause"] and r["contender_wait_s"] is not None
                  else f"kept out for the whole {r['pause_s']:.0f} s pause")
        hw = r["holder_write"].replace("write ", "")
        final = r["final"]
        lost = r["writes_applied"] - final if final is not None else None
        ctr = f"{final} ({r['writes_applied']})" if final is not None else "?"
        if lost:
            ctr += f" **{lost} increment lost**"
        lines.append(f"| `{r['label']}` | {'fenced' if r['fenced'] else 'plain'} | {served} | {hw} | {ctr} |")

if failover:
    lines += ["", "### One server dies", "",
              "Ten workers on one lock, each holding it 1 s, for 20 s; 5-6 s in (at a random point of a hold)",
              "one server is SIGKILLed.",
              "etcd and ZooKeeper run three members and lose their leader for good; Redis and PostgreSQL run",
              "one server, started again 0.1 s later on the same data. Workers go on after an error (count",
              "it, wait 100 ms, reconnect). \"Longest free\": the longest time nobody held the lock while",
              "workers wanted it (a hand-off takes milliseconds, so this is the outage as the workers saw",
              "it). One entry per round.", "",
              "| system | fault | acquisitions | longest free (s) | errors seen | violations | locks left |",
              "|---|---|---:|---:|---:|---:|---:|"]
    order = []
    for r in failover:
        if r["label"] not in order:
            order.append(r["label"])
    for lab in order:
        rs = [r for r in failover if r["label"] == lab]
        join = lambda f: " / ".join(f(r) for r in rs)
        errs = join(lambda r: str(r["errors"]))
        firsts = sorted({r["first_error"] for r in rs if r.get("first_error")})
        if firsts:
            errs += " (" + "; ".join(f.replace("|", "/")[:90] for f in firsts[:2]) + ")"
        idle_s = lambda r: f"{r['max_idle_ms'] / 1000:.1f}"
        viol = join(lambda r: str(r["violations"]))
        if any(r["violations"] for r in rs):
            viol = f"**{viol}**"
        lines.append(f"| `{lab}` | {rs[0]['fault']} | {join(lambda r: str(r['acquisitions']))} | "
                     f"{join(idle_s)} | "
                     f"{errs} | {viol} | {join(lambda r: str(r.get('leftover_keys', -1)))} |")
lines += ["", f"![throughput against waiters on one lock]({os.path.basename(out_png)})", ""]
open(out_md, "w").write("\n".join(lines))

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
