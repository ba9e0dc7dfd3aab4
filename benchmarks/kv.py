#!/usr/bin/env python3
"""The client core against etcd's Go client: put, get and txn at 1, 10, 100 and 1000 requests
in flight, and the lone request (one worker: the raw lock txn + delete, and the mutex), from the
JSON lines of one benchmarks/run. Writes a Markdown section and a gnuplot PNG of p50 latency
against requests in flight.

usage: kv.py RESULTS.jsonl OUT.md OUT.png "setting description"
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tables  # noqa: E402

raw, out_md, out_png, setting = sys.argv[1:5]
cells = [json.loads(line) for line in open(raw) if line.strip()]
IN_FLIGHT = (1, 10, 100, 1000)
OPS = (("put", "put"), ("get", "get"), ("kv_txn", "txn"))


def find(impl, mode, workers=1, completions="thread"):
    """The cell as benchmarks/report shows it: medians of its rounds (tables.summary)."""
    return tables.summary(tables.cell(cells, impl, mode, workers, completions=completions))


def num(c, field, fmt="{:.0f}"):
    return fmt.format(c[field]) if c and c.get(field, -1) >= 0 else "–"


def tput(c):
    if not c:
        return "–"
    lo, hi = c["spread"]
    return f"{c['acquisitions_per_s']:.0f}" + (f" ({lo:.0f}–{hi:.0f})" if hi > lo else "")


def ratio(a, b, field="acquisitions_per_s"):
    """Taken round by round, the median shown (tables.ratio)."""
    if not a or not b:
        return None
    return tables.ratio(a["runs"], b["runs"], field)


def fmt_ratio(r):
    return "–" if r is None else f"{r:.2f}×"


def bad(*cs):
    return "/".join(str(c["violations"] + c["errors"]) if c else "–" for c in cs)


lines = [
    "## The client core: put, get and txn against etcd's Go client",
    "",
    f"Same run ({setting}). Each worker keeps one request in flight on a key of its own",
    "(`coetcd-bench --mode put|get|kv_txn --workers N` and `go-bench` with the same flags); the",
    "txn compares the key's version, puts on success and gets otherwise. Latency is one call's",
    "round trip. coetcd sends at most 128 unary calls at once per client and queues the rest;",
    "Go sends them all. *poll* is `client_options::completions = completion_mode::poll`.",
    "",
    "| op | in flight | coetcd ops/s | Go ops/s | coetcd/Go | coetcd p50 ms | Go p50 ms | Go/coetcd p50 "
    "| coetcd p99 ms | Go p99 ms | coetcd CPU s/1000 | Go CPU s/1000 | errors |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
]
for mode, name in OPS:
    for w in IN_FLIGHT:
        for completions in ("thread", "poll"):
            c, g = find("coetcd", mode, w, completions), find("go", mode, w)
            if completions == "poll" and not c:
                continue
            label = name + (" (poll)" if completions == "poll" else "")
            lines.append(
                f"| {label} | {w} | {tput(c)} | {tput(g)} | {fmt_ratio(ratio(c, g))} "
                f"| {num(c, 'p50_ms', '{:.3f}')} | {num(g, 'p50_ms', '{:.3f}')} | {fmt_ratio(ratio(g, c, 'p50_ms'))} "
                f"| {num(c, 'p99_ms', '{:.2f}')} | {num(g, 'p99_ms', '{:.2f}')} "
                f"| {num(c, 'cpu_s_per_1000', '{:.3f}')} | {num(g, 'cpu_s_per_1000', '{:.3f}')} | {bad(c, g)} |")

lines += [
    "",
    "### The lone request: one worker taking a lock",
    "",
    "| one worker | Go acq/s | coetcd acq/s (thread) | coetcd/Go | coetcd acq/s (poll) | coetcd/Go "
    "| CPU s/1000 Go / thread / poll |",
    "|---|---:|---:|---:|---:|---:|---|",
]
targets = []
for mode, name in (("txn", "raw put-if-absent txn + delete"), ("mutex", "`concurrency.Mutex` vs `coetcd::mutex`")):
    g, c, p = find("go", mode), find("coetcd", mode), find("coetcd", mode, 1, "poll")
    cpu = " / ".join(num(x, "cpu_s_per_1000", "{:.3f}") for x in (g, c, p))
    lines.append(f"| {name} | {tput(g)} | {tput(c)} | {fmt_ratio(ratio(c, g))} | {tput(p)} "
                 f"| {fmt_ratio(ratio(p, g))} | {cpu} |")
    best = max((r for r in (ratio(c, g), ratio(p, g)) if r is not None), default=None)
    targets.append((f"one worker, {name}: ≥ 1.0 × Go (best mode)", best, 1.0))
for completions in ("thread", "poll"):
    c, g = find("coetcd", "get", 1, completions), find("go", "get", 1)
    targets.append((f"one get in flight ({completions}): p50 ≤ Go's", ratio(g, c, "p50_ms"), 1.0))
lines += ["", "| target | measured | |", "|---|---:|---|"]
for name, value, goal in targets:
    lines.append(f"| {name} | {fmt_ratio(value)} | {'met' if value is not None and value >= goal else 'MISSED'} |")
lines += ["", f"![p50 latency against requests in flight]({os.path.basename(out_png)})", ""]
open(out_md, "w").write("\n".join(lines))

with tempfile.TemporaryDirectory() as tmp:
    data = os.path.join(tmp, "kv.dat")
    with open(data, "w") as f:
        for w in IN_FLIGHT:
            vals = []
            for mode, _ in OPS:
                for impl in ("coetcd", "go"):
                    c = find(impl, mode, w)
                    vals.append(c["p50_ms"] if c else "NaN")
            f.write(f"{w} " + " ".join(str(v) for v in vals) + "\n")
    plots = []
    for i, (_, name) in enumerate(OPS):
        plots.append(f"'{data}' u 1:{2 + 2 * i} w lp lw 2 lc {i + 1} t 'coetcd {name}'")
        plots.append(f"'{data}' u 1:{3 + 2 * i} w lp lw 2 dt 2 lc {i + 1} t 'Go {name}'")
    script = f"""
set terminal pngcairo size 760,480 font ',10'
set output '{out_png}'
set title 'p50 latency against requests in flight ({setting})'
set logscale xy
set xlabel 'requests in flight (one client)'
set ylabel 'p50 latency, ms'
set key top left
set grid
plot {", ".join(plots)}
"""
    gp = os.path.join(tmp, "plot.gp")
    open(gp, "w").write(script)
    subprocess.run(["gnuplot", gp], check=True)
