#!/usr/bin/env python3
"""The table of benchmarks/handoff: per number of callers, the median rate of the callers sharing
one session and of the in-process FIFO lock (with its plain unlock, and with an unlock that
completes through a post), and the ratios taken round by round.

usage: handoff.py RESULTS.jsonl OUT.md CORES CELL_DURATION
"""
import json
import statistics as st
import sys

raw, out_md, cores, duration = sys.argv[1:5]
rows = [json.loads(line) for line in open(raw) if line.strip()]
etcd = rows[0]["etcd"] if rows else "?"


def cells(lock, workers):
    return {x["round"]: x for x in rows if x["lock"] == lock and x["r"]["workers"] == workers}


def rate(x):
    return x["r"]["acquisitions_per_s"]


def span(values, fmt):
    return f"{fmt(st.median(values))} ({fmt(min(values))}–{fmt(max(values))})"


lines = [
    "# Callers sharing a session against the in-process lock", "",
    f"`benchmarks/handoff`: etcd {etcd} on loopback, {cores} cores, {duration} per cell, the order of",
    "the three turning each round. *Shared*: `coetcd-bench --mode mutex --share-session`, every caller",
    "a coroutine on one session, so each hand-off after the first is local; *FIFO*: `--mode local`,",
    "an in-process FIFO lock of the bench with the same critical section, whose unlock is a plain",
    "call; *FIFO, async unlock*: `--mode local_async`, the same lock with an unlock that completes",
    "through a post, as an Asio initiating function must (coetcd's `async_unlock` does). Ratios are",
    "taken round by round; the median is shown, with the range. Violations must be 0.", "",
    "| callers | rounds | shared acq/s | FIFO acq/s | FIFO, async unlock acq/s | shared / FIFO | shared / FIFO, async unlock | violations |",
    "|---:|---:|---:|---:|---:|---:|---:|---:|",
]
for workers in sorted({x["r"]["workers"] for x in rows}):
    s, f, a = cells("shared", workers), cells("local", workers), cells("local_async", workers)
    every = [r for r in s if r in f and r in a]
    if not every:
        continue
    violations = sum(x["r"]["violations"] for x in list(s.values()) + list(f.values()) + list(a.values()))
    count = lambda v: f"{v:,.0f}"
    times = lambda v: f"{v:.2f}×"
    lines.append(f"| {workers} | {len(every)} | {span([rate(s[r]) for r in every], count)} "
                 f"| {span([rate(f[r]) for r in every], count)} | {span([rate(a[r]) for r in every], count)} "
                 f"| {span([rate(s[r]) / rate(f[r]) for r in every], times)} "
                 f"| {span([rate(s[r]) / rate(a[r]) for r in every], times)} | {violations} |")
open(out_md, "w").write("\n".join(lines) + "\n")
