#!/usr/bin/env python3
"""The async-server cells with and without fenced holders, from BENCH_SET=fenced benchmarks/run.

usage: fenced.py RAW.jsonl OUT.md SETTING
"""
import json
import sys

raw, out_md, setting = sys.argv[1:4]
cells = [json.loads(line) for line in open(raw) if line.strip()]


def find(impl, workers, fenced=False):
    """The cell's median round by throughput, with every round's violations and errors."""
    runs = [c for c in cells if c["impl"] == impl and c["workers"] == workers
            and c.get("fenced", False) == fenced and c["mode"] != "local_async"
            and (impl == "local" or c.get("share_session"))]
    if not runs:
        return None
    runs.sort(key=lambda c: c["acquisitions_per_s"])
    c = dict(runs[(len(runs) - 1) // 2])
    c["bad"] = sum(r["violations"] + r["errors"] for r in runs)
    c["rounds"] = len(runs)
    return c


def tput(c):
    return f"{c['acquisitions_per_s']:,.0f}".replace(",", " ") if c else "–"


def ratio(a, b):
    return f"{a['acquisitions_per_s'] / b['acquisitions_per_s']:.3g}×" if a and b and b["acquisitions_per_s"] else "–"


lines = [
    "# Fenced and unfenced local hand-offs",
    "",
    f"`BENCH_SET=fenced benchmarks/run` ({setting}). Workers are coroutines of one process sharing",
    "one session and one lock name (`coetcd-bench --mode mutex --share-session`); *fenced*: each",
    "holder reads its fencing token (`--fenced`), so each local hand-off first puts the key again",
    "(one etcd write) and the holder's `is_owner()` compare fails under the next holder. The",
    "*in-process* reference is the same workers on an async FIFO lock with no etcd. Median round",
    "by throughput; *bad* counts violations and errors over every round.",
    "",
    "| workers | unfenced acq/s | fenced acq/s | in-process acq/s | unfenced/in-process | fenced/in-process "
    "| fenced/unfenced | unfenced RPCs/acq | fenced RPCs/acq | fenced p99 ms | bad |",
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
]
for w in (1, 10, 100, 1000):
    u, f, ref = find("coetcd", w), find("coetcd", w, True), find("local", w)
    bad = sum(x["bad"] for x in (u, f) if x)
    lines.append(
        f"| {w} | {tput(u)} | {tput(f)} | {tput(ref)} | {ratio(u, ref)} | {ratio(f, ref)} | {ratio(f, u)} "
        f"| {u['rpcs_per_acq']:.4f} | {f['rpcs_per_acq']:.2f} | {f['p99_ms']:.2f} | {bad} |"
        if u and f else f"| {w} | {tput(u)} | {tput(f)} | {tput(ref)} | – | – | – | – | – | – | {bad} |")
lines += [
    "",
    "A fenced hand-off costs one commit, so fenced cells run at etcd's rate of serial commits (the",
    "*hand-off floor* of `benchmarks/results/latest.md`, a chain of single-key deletes: 1450/s in its",
    "run); holders that never ask for a fence keep handing off with no RPC (0 RPCs per acquisition",
    "above). With one worker there is no hand-off: each lock takes and releases the key.",
    "",
]
open(out_md, "w").write("\n".join(lines))
