#!/usr/bin/env python3
"""The table of benchmarks/completions: per cell, the median rate of each completion mode, its
ratio to the baseline taken round by round (Go's client for one worker, `thread` elsewhere), the
client's and etcd's CPU per 1000 operations.

usage: completions.py RESULTS.jsonl OUT.md CORES CELL_DURATION
"""
import json
import statistics as st
import sys

raw, out_md, cores, duration = sys.argv[1:5]
rows = [json.loads(line) for line in open(raw) if line.strip()]
etcd = rows[0]["etcd"] if rows else "?"


def cells(client, mode, workers):
    return {x["round"]: x for x in rows
            if x["client"] == client and x["r"]["mode"] == mode and x["r"]["workers"] == workers}


def rate(x):
    return x["r"]["acquisitions_per_s"]


def etcd_cpu(x):
    return x["etcd_cpu_s"] / max(1, x["r"]["acquisitions"]) * 1000


def line(label, mode, workers, clients, base):
    b = cells(base, mode, workers)
    out = []
    for client in clients:
        c = cells(client, mode, workers)
        if not c:
            continue
        ratios = [rate(c[r]) / rate(b[r]) for r in c if r in b]
        out.append(f"| {label} | {client} | {len(c)} | {st.median(map(rate, c.values())):.0f} "
                   f"({min(map(rate, c.values())):.0f}–{max(map(rate, c.values())):.0f}) "
                   f"| {st.median(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f}) "
                   f"| {st.median(x['r']['cpu_s_per_1000'] for x in c.values()):.3f} "
                   f"| {st.median(map(etcd_cpu, c.values())):.3f} |")
    return out


lines = [
    "# Completion modes: which wins where", "",
    f"`benchmarks/completions`: etcd {etcd} on loopback, {cores} cores shared by etcd and the client,",
    f"{duration} per cell, the order of the modes turning each round. Ratios are taken round by",
    "round and the median shown (with the range); CPU is seconds per 1000 operations, the client's",
    "(all its threads) and etcd's (read from /proc around the cell).", "",
    "## One worker locking: each mode against Go's client", "",
    "| one worker | client | rounds | acq/s median (range) | / Go | client CPU s/1000 | etcd CPU s/1000 |",
    "|---|---|---:|---:|---:|---:|---:|",
]
for mode, label in (("txn", "raw put-if-absent txn + delete"), ("mutex", "mutex (Go: `concurrency.Mutex`)")):
    lines += line(label, mode, 1, ("go", "thread", "adaptive", "poll"), "go")
lines += ["", "## More in flight: each mode against `thread`", "",
          "| cell | mode | rounds | ops/s median (range) | / thread | client CPU s/1000 | etcd CPU s/1000 |",
          "|---|---|---:|---:|---:|---:|---:|"]
for mode, workers, label in (("put", 1, "put, 1 in flight"), ("put", 10, "put, 10 in flight"),
                             ("put", 100, "put, 100 in flight"), ("kv_txn", 1, "txn, 1 in flight"),
                             ("kv_txn", 10, "txn, 10 in flight"), ("kv_txn", 100, "txn, 100 in flight"),
                             ("mutex", 10, "mutex, 10 waiters"), ("mutex", 100, "mutex, 100 waiters")):
    lines += line(label, mode, workers, ("thread", "adaptive", "poll"), "thread")
open(out_md, "w").write("\n".join(lines) + "\n")
