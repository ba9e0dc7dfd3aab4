#!/usr/bin/env python3
"""The table of benchmarks/memory: peak heap with one worker and with N, the marginal bytes per
extra waiting worker, and where they come from (per allocation site, the site's own peak with N
workers less the same with one, divided by N - 1).

usage: memory.py WORKDIR ONE N ETCD_VERSION OUT.jsonl OUT.md
WORKDIR holds summary-K.txt (heaptrack_print), stacks-K.txt (its -F output, peak costs),
massif-K.txt (its -M output: the heap over time) and bench-K.json (coetcd-bench --json) for K in
ONE and N.

Two figures per run. The peak is the process's largest heap: with many workers, the start, when
every worker's acquire txn is in flight at once. The waiting heap is the median of the snapshots
from half to 85 % of the run's time: after the start's burst and before the workers part, while
all but one wait (the timeline of a 1000-worker run is flat there to within 1 %).
"""
import collections
import functools
import json
import re
import sys

work, one, n, etcd, out_jsonl, out_md = sys.argv[1:7]
UNITS = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}  # heaptrack_print's units are powers of 1000


@functools.cache  # each file is read once, for the JSON line and for the table
def peak_heap(k):
    text = open(f"{work}/summary-{k}.txt").read()
    m = re.search(r"peak heap memory consumption: ([0-9.]+)([KMG]?)", text)
    return float(m.group(1)) * UNITS[m.group(2)]


@functools.cache
def waiting_heap(k):
    """The median heap of the snapshots between 50 % and 85 % of the run's time."""
    text = open(f"{work}/massif-{k}.txt").read()
    times = [float(t) for t in re.findall(r"^time=([0-9.]+)$", text, re.M)]
    heaps = [int(h) for h in re.findall(r"^mem_heap_B=([0-9]+)$", text, re.M)]
    end = max(times)
    middle = sorted(h for t, h in zip(times, heaps) if 0.5 * end <= t <= 0.85 * end)
    return middle[len(middle) // 2]


def qualified(frame):
    """A frame's qualified function name, without arguments, template arguments or source file."""
    frame = re.sub(r" \([^()]*\)$", "", frame)  # " (file.cpp)"
    depth, out = 0, []
    for ch in frame:  # drop <...> and (...) groups
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out).split(" ")[-1]


BENCH = ("mutex_loop", "worker")


def sites(k):
    """Peak bytes per site: the two innermost frames of coetcd's own functions (or the bench's)."""
    d = collections.Counter()
    for line in open(f"{work}/stacks-{k}.txt"):
        stack, _, cost = line.rstrip().rpartition(" ")
        names = [qualified(f) for f in stack.split(";")]
        ours = [x for x in names if x.startswith("coetcd::") or x in BENCH]
        if not ours:
            key = "outside coetcd's functions (gRPC, Asio, the C++ library)"
        elif ours[-1] in BENCH:
            key = f"the benchmark's {ours[-1]} (its frames, and allocations under it with no coetcd frame left by inlining)"
        else:
            inner = [x.replace("coetcd::detail::", "").replace("coetcd::", "") for x in reversed(ours[-2:])]
            key = " ← ".join(dict.fromkeys(inner))  # innermost first, a name once
        d[key] += int(cost)
    return d


workers = int(n)
base, many = peak_heap(one), peak_heap(n)
per_waiter = (many - base) / (workers - 1)
waiting_base, waiting_many = waiting_heap(one), waiting_heap(n)
per_waiting = (waiting_many - waiting_base) / (workers - 1)
a, b = sites(n), sites(one)
rows = sorted(set(a) | set(b), key=lambda s: -(a[s] - b[s]))
shown = [s for s in rows if (a[s] - b[s]) / (workers - 1) >= 40][:18]
rest = sum(a[s] - b[s] for s in rows if s not in shown) / (workers - 1)
def bench(k):
    """The bench's JSON line (heaptrack prints its own lines to the same output)."""
    found = [line for line in open(f"{work}/bench-{k}.json") if line.startswith("{")]
    return json.loads(found[-1]) if found else {}


benches = {k: bench(k) for k in (one, n)}

with open(out_jsonl, "w") as f:
    for k in (one, n):
        f.write(json.dumps({"etcd": etcd, "workers": int(k), "peak_heap_bytes": peak_heap(k),
                            "waiting_heap_bytes": waiting_heap(k),
                            "acquisitions": benches[k].get("acquisitions"),
                            "sites": {s: c for s, c in sites(k).most_common(40)}}) + "\n")

lines = [
    "# Memory per waiting worker",
    "",
    f"`benchmarks/memory`: `coetcd-bench --mode mutex` under heaptrack on etcd {etcd}, one lock, each "
    f"worker with its own session, 4 s; {one} worker against {n}. *While waiting*: the median of "
    "heaptrack's heap snapshots from half to 85 % of the run's time, when all workers but the "
    "holder wait for their turn. *Peak*: the process's largest heap, which with many workers comes "
    "at the start, while every worker's acquire txn is in flight at once.",
    "",
    "| workers | heap while waiting | peak heap | acquisitions |",
    "|---:|---:|---:|---:|",
]
for k in (one, n):
    lines.append(f"| {k} | {waiting_heap(k) / 1e6:.2f} MB | {peak_heap(k) / 1e6:.2f} MB | {benches[k].get('acquisitions')} |")
lines += [
    "",
    f"**Marginal heap per extra waiting worker: {per_waiting / 1e3:.2f} KB while waiting, "
    f"{per_waiter / 1e3:.2f} KB at the peak.**",
    "",
    f"What the peak holds: a site's bytes at the process's peak with {n} workers, less the same "
    f"with {one}, divided by {workers - 1}. Sites name the two innermost frames of coetcd's code in "
    "the allocation's stack (innermost first).",
    "",
    "| bytes per worker | site |",
    "|---:|---|",
]
for s in shown:
    lines.append(f"| {(a[s] - b[s]) / (workers - 1):.0f} | {s} |")
lines.append(f"| {rest:.0f} | every other site |")
lines.append("")
open(out_md, "w").write("\n".join(lines))
