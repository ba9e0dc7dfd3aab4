#!/usr/bin/env python3
"""The table of benchmarks/floors: per cell, the median rate, its ratio to each floor taken round
by round, and where the CPU of an acquisition goes (the client's and etcd's, in the timed window).

usage: floors.py RESULTS.jsonl OUT.md CORES CELL_DURATION
"""
import json
import statistics as st
import sys

raw, out_md, cores, duration = sys.argv[1:5]
rows = [json.loads(line) for line in open(raw) if line.strip()]
etcd = rows[0]["etcd"] if rows else "?"
CELLS = [
    ("delete", "delete chain: one single-key delete per step (`--mode delete_chain`)"),
    ("handoff", "hand-off chain: one txn per step, a guarded delete and a put under a lease (`--mode handoff_chain`)"),
    ("watched", "the hand-off chain, its client watching its keys (`--mode handoff_chain --watched`)"),
    ("m10", "mutex, 10 waiters of one process, a session each (`--mode mutex --workers 10`)"),
    ("m100", "mutex, 100 waiters (`--workers 100`)"),
    ("m1000", "mutex, 1000 waiters (`--workers 1000`)"),
    ("m1000-long", "mutex, 1000 waiters, in a cell five times as long"),
]
FLOORS = ["delete", "handoff", "watched"]


def by_round(cell):
    return {x["round"]: x["r"] for x in rows if x["cell"] == cell and not x["r"]["errors"]}


def span(values, fmt):
    if not values:
        return "–"
    return f"{fmt(st.median(values))} ({fmt(min(values))}–{fmt(max(values))})"


def ratio(cell, floor):
    c, f = by_round(cell), by_round(floor)
    return [c[r]["acquisitions_per_s"] / f[r]["acquisitions_per_s"] for r in c if r in f]


def us(key):
    return lambda r: r[key] * 1000 if r.get(key, -1) >= 0 else None


lines = [
    "# A hand-off between sessions against etcd's floors", "",
    f"`benchmarks/floors`: etcd {etcd} on loopback, {cores} cores shared by etcd and the client, {duration} per cell,",
    "the order of the cells turning each round. Ratios are taken round by round; the median is shown,",
    "with the range. CPU is per acquisition, the client's (all its threads) and etcd's (its",
    "`process_cpu_seconds_total`), from the clock's start until every worker is done: a mutex cell's",
    "window opens with every waiter's first put and closes after the waiters queued at the end have",
    "had their turn and every session is closed (a lease revoke each), so its txns per acquisition",
    "exceed 1 by the waiters over the acquisitions. The delete chain's CPU includes the untimed puts",
    "of the keys it deletes, one per delete. A watched chain whose watch saw fewer events than steps",
    "counts as an error.", "",
    "| cell | rounds | acq/s | / delete chain | / hand-off chain | / watched chain | client CPU µs | etcd CPU µs | txn/acq | errors, violations |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
]
for cell, _ in CELLS:
    rs = by_round(cell)
    if not rs:
        continue
    cols = [span(ratio(cell, f), lambda v: f"{v:.2f}×") if f != cell else "1" for f in FLOORS]
    client = [us("cpu_s_per_1000")(r) for r in rs.values()]
    server = [v for v in (us("etcd_cpu_s_per_1000")(r) for r in rs.values()) if v is not None]
    bad = sum(x["r"]["errors"] + x["r"]["violations"] for x in rows if x["cell"] == cell)
    if cell == "watched":  # the watch must have drained the chain's events
        bad += sum(1 for x in rows if x["cell"] == cell and x["r"].get("watched_events", 0) < x["r"]["acquisitions"])
    lines.append(f"| {cell} | {len(rs)} | {span([r['acquisitions_per_s'] for r in rs.values()], lambda v: f'{v:,.0f}')} "
                 f"| {' | '.join(cols)} | {span(client, lambda v: f'{v:.0f}')} | {span(server, lambda v: f'{v:.0f}')} "
                 f"| {st.median(r['txn_per_acq'] for r in rs.values()):.2f} | {bad} |")
lines += [""] + [f"- **{cell}**: {what}" for cell, what in CELLS]
open(out_md, "w").write("\n".join(lines) + "\n")
