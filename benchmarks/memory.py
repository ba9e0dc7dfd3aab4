#!/usr/bin/env python3
"""The table of benchmarks/memory: peak heap with one worker and with N, the marginal bytes per
extra waiting worker, and where they come from (per allocation site, the site's own peak with N
workers less the same with one, divided by N - 1).

usage: memory.py WORKDIR ONE N ETCD_VERSION OUT.jsonl OUT.md
WORKDIR holds summary-K.txt (heaptrack_print), stacks-K.txt (its -F output, peak costs) and
bench-K.json (coetcd-bench --json) for K in ONE and N.
"""
import collections
import json
import re
import sys

work, one, n, etcd, out_jsonl, out_md = sys.argv[1:7]
UNITS = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}  # heaptrack_print's units are powers of 1000


def peak_heap(k):
    text = open(f"{work}/summary-{k}.txt").read()
    m = re.search(r"peak heap memory consumption: ([0-9.]+)([KMG]?)", text)
    return float(m.group(1)) * UNITS[m.group(2)]


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
                            "acquisitions": benches[k].get("acquisitions"),
                            "sites": {s: c for s, c in sites(k).most_common(40)}}) + "\n")

lines = [
    "# Memory per waiting worker",
    "",
    f"`benchmarks/memory`: `coetcd-bench --mode mutex` under heaptrack on etcd {etcd}, one lock, each "
    f"worker with its own session, 4 s; {one} worker against {n}. Peak heap is heaptrack's "
    "(the process's largest live heap); a site's bytes are its own peak with "
    f"{n} workers less the same with {one}, divided by {workers - 1}. Sites name the two innermost "
    "frames of coetcd's code in the allocation's stack (innermost first). Per-site peaks need not "
    "coincide in time, so the sites' sum can differ a little from the marginal peak.",
    "",
    "| workers | peak heap | acquisitions |",
    "|---:|---:|---:|",
]
for k in (one, n):
    lines.append(f"| {k} | {peak_heap(k) / 1e6:.2f} MB | {benches[k].get('acquisitions')} |")
lines += [
    "",
    f"**Marginal peak heap per extra waiting worker: {per_waiter / 1e3:.2f} KB.**",
    "",
    "| bytes per waiter | site |",
    "|---:|---|",
]
for s in shown:
    lines.append(f"| {(a[s] - b[s]) / (workers - 1):.0f} | {s} |")
lines.append(f"| {rest:.0f} | every other site |")
lines.append("")
open(out_md, "w").write("\n".join(lines))
