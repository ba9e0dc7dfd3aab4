"""The tables benchmarks/report writes into README.md and docs/, each from committed results.

A cell is every round of one benchmark configuration; it shows the median of its rounds. A
ratio between two cells is taken round by round (each round runs the whole matrix, so both
sides of a ratio ran minutes apart on the same etcd) and the median of those is shown."""
import json
import os
import statistics

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
_cache = {}


def use(name, lines):
    """Makes load(name) return `lines`: a report script hands over the run it was given."""
    _cache[name] = lines


def load(name):
    """The JSON lines of benchmarks/results/NAME (empty when the file is missing)."""
    if name not in _cache:
        path = os.path.join(RESULTS, name)
        _cache[name] = [json.loads(l) for l in open(path) if l.strip()] if os.path.exists(path) else []
    return _cache[name]


# Fields a cell is told apart by, with the value a line without the field has.
# (--fair-hold and --fair-handoffs are not in the lines: a sweep of them belongs in a file of its own.)
DEFAULTS = {"locks": 1, "clients": 1, "share_session": False, "linger_ms": 0, "fenced": False, "checked": False,
            "pass_local": False, "hold_ms": 0.0, "keep_going": False}


def cell(lines, impl, mode, workers=1, completions=None, **fields):
    want = dict(DEFAULTS, **fields)
    out = []
    for c in lines:
        if c["impl"] != impl or c["mode"] != mode or c["workers"] != workers:
            continue
        if any(c.get(k, d) != want[k] for k, d in DEFAULTS.items()):
            continue
        if "permits" in fields and c.get("permits") != fields["permits"]:
            continue
        if completions is not None and c.get("completions", "thread") not in (completions, ""):
            continue
        if completions is None and impl != "go" and c.get("completions", "thread") != "thread":
            continue
        out.append(c)
    return out


def median(runs, field):
    vals = [r[field] for r in runs if r.get(field) is not None and r[field] >= 0]
    return statistics.median(vals) if vals else None


def ratio(a, b, field="acquisitions_per_s"):
    """Median over rounds of a/b, pairing the two cells' lines by round (by order when the lines
    have no round)."""
    pairs = []
    if all("round" in r for r in a + b):
        by_round = {r["round"]: r for r in b}
        pairs = [(r, by_round[r["round"]]) for r in a if r["round"] in by_round]
    else:
        pairs = list(zip(a, b))
    vals = [x[field] / y[field] for x, y in pairs if y.get(field)]
    return statistics.median(vals) if vals else None


def summary(runs):
    """One dict for a cell's rounds, as the tables show it: every number the median of the rounds',
    violations and errors summed, the throughput's spread, and the rounds themselves ("runs", for
    ratio()). None for no rounds."""
    if not runs:
        return None
    out = dict(runs[0])
    for k, v in runs[0].items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = median(runs, k)
    out["violations"] = sum(r.get("violations", 0) for r in runs)
    out["errors"] = sum(r.get("errors", 0) for r in runs)
    vals = [r["acquisitions_per_s"] for r in runs]
    out["spread"] = (min(vals), max(vals))
    out["runs"] = runs
    return out


def bad(runs):
    """Violations and errors over every round, and locks left behind."""
    return sum(r.get("violations", 0) + r.get("errors", 0) + (1 if r.get("leftover_keys", 0) > 0 else 0) for r in runs)


def n(v, fmt="{:,.0f}"):
    return "–" if v is None else fmt.format(v).replace(",", " ")


def x(v):
    """A ratio: two decimals, whole numbers from 100, two significant digits below 0.1."""
    if v is None:
        return "–"
    if v >= 100:
        return f"{v:.0f}×"
    return f"{v:.2f}×" if v >= 0.1 else f"{v:.2g}×"


def ms(v):
    if v is None:
        return "–"
    return f"{v:.2f}" if v < 10 else f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def tput(runs):
    """Median acquisitions/s, with the lowest and highest round."""
    if not runs:
        return "–"
    vals = sorted(r["acquisitions_per_s"] for r in runs)
    med = n(statistics.median(vals))
    return med if len(vals) < 2 or vals[0] == vals[-1] else f"{med} ({n(vals[0])}–{n(vals[-1])})"


def rounds_note(lines):
    rounds = sorted({r.get("round") for r in lines if r.get("round")})
    secs = sorted({round(r.get("seconds", 0)) for r in lines if r.get("mode") == "mutex"})
    count = f"{len(rounds)} round{'s' if len(rounds) != 1 else ''}"
    return count + (f", {secs[-1]} s per cell" if secs else "")


def viol(*cells):
    return " / ".join("–" if not c else str(bad(c)) for c in cells)


# ---- benchmarks/results/latest.jsonl: the full run of benchmarks/run ----------------------------

CONTENTION_ROWS = [(1, 1), (2, 1), (10, 1), (100, 1), (1000, 1), (100, 10), (100, 100), (1000, 1000)]


def contention():
    """One lock or several, a session per worker: coetcd, Go, the txn floor, beside the
    delete-chain floor of the same round (latest.jsonl)."""
    L = load("latest.jsonl")
    floor_c, floor_g = cell(L, "coetcd", "delete_chain"), cell(L, "go", "delete_chain")
    out = ["| workers | locks | coetcd acq/s | Go acq/s | coetcd / Go | coetcd / floor | Go / floor | txn floor acq/s "
           "| p99 ms coetcd | p99 ms Go | RPCs/acq coetcd / Go | violations coetcd / Go / txn |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for w, k in CONTENTION_ROWS:
        c, g, t = cell(L, "coetcd", "mutex", w, locks=k), cell(L, "go", "mutex", w, locks=k), cell(L, "coetcd", "txn", w, locks=k)
        fc = ratio(c, floor_c) if k == 1 else None
        fg = ratio(g, floor_g) if k == 1 else None
        out.append(f"| {w} | {k} | {tput(c)} | {tput(g)} | {x(ratio(c, g))} | {x(fc)} | {x(fg)} | {tput(t)} "
                   f"| {ms(median(c, 'p99_ms'))} | {ms(median(g, 'p99_ms'))} "
                   f"| {n(median(c, 'rpcs_per_acq'), '{:.2f}')} / {n(median(g, 'rpcs_per_acq'), '{:.2f}')} | {viol(c, g, t)} |")
    out += ["", f"Floor (a serial chain of single-key deletes, one commit each; the ceiling of many waiters on one lock): "
            f"{tput(floor_c)} deletes/s on coetcd's client, {tput(floor_g)} on Go's. Coetcd / floor and Go / floor "
            "divide each by its own client's floor of the same round; they are left out where a cell has several "
            f"locks (several chains side by side). {rounds_note(L)}; from `benchmarks/results/latest.jsonl`."]
    return "\n".join(out)


def async_server():
    """Callers of one process sharing a session per client, one name (latest.jsonl)."""
    L = load("latest.jsonl")
    out = ["| callers | sessions | coetcd acq/s | Go twin acq/s | coetcd / Go twin | in-process acq/s | coetcd / in-process "
           "| RPCs/acq coetcd / Go | p99 wait ms coetcd / Go | longest wait ms coetcd / Go "
           "| share of sessions, longest gap ms (coetcd) | violations coetcd / Go |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for w, k in [(1, 1), (10, 1), (100, 1), (1000, 1), (100, 4)]:
        c = cell(L, "coetcd", "mutex", w, share_session=True, clients=k)
        g = cell(L, "go", "mutex", w, share_session=True, clients=k, pass_local=True)
        ref = cell(L, "local", "local", w) if k == 1 else []
        share = "–"
        if c and k > 1:
            share = f"{median(c, 'share_min'):.2f}–{median(c, 'share_max'):.2f}, {ms(median(c, 'max_gap_ms'))}"
        # (one caller: the lone lock, two RPCs per acquisition, against a lock in memory: no ratio)
        inproc = x(ratio(c, ref)) if w > 1 else "–"
        out.append(f"| {w} | {k} | {tput(c)} | {tput(g)} | {x(ratio(c, g))} | {tput(ref)} | {inproc} "
                   f"| {n(median(c, 'rpcs_per_acq'), '{:.4f}')} / {n(median(g, 'rpcs_per_acq'), '{:.4f}')} "
                   f"| {ms(median(c, 'p99_ms'))} / {ms(median(g, 'p99_ms'))} | {ms(median(c, 'max_ms'))} / {ms(median(g, 'max_ms'))} "
                   f"| {share} | {viol(c, g)} |")
    out += ["", "Share: each session's acquisitions against the mean (median of the rounds' lowest and highest); "
            "gap: the longest a session went without an acquisition. "
            f"{rounds_note(L)}; from `benchmarks/results/latest.jsonl`."]
    return "\n".join(out)


def linger():
    """One worker re-locking with linger (latest.jsonl)."""
    L = load("latest.jsonl")
    lin, plain, g = cell(L, "coetcd", "mutex", 1, linger_ms=100), cell(L, "coetcd", "mutex", 1), cell(L, "go", "mutex", 1)
    return "\n".join([
        "| one worker, no contention | acq/s | RPCs/acq | p99 ms | against Go's `concurrency.Mutex` |",
        "|---|---:|---:|---:|---:|",
        f"| coetcd, `linger` 100 ms | {tput(lin)} | {n(median(lin, 'rpcs_per_acq'), '{:.4f}')} | {ms(median(lin, 'p99_ms'))} | {x(ratio(lin, g))} |",
        f"| coetcd, no linger | {tput(plain)} | {n(median(plain, 'rpcs_per_acq'), '{:.2f}')} | {ms(median(plain, 'p99_ms'))} | {x(ratio(plain, g))} |",
        f"| Go `concurrency.Mutex` | {tput(g)} | {n(median(g, 'rpcs_per_acq'), '{:.2f}')} | {ms(median(g, 'p99_ms'))} | 1.00× |",
        "",
        f"Nobody else waits, so no hand-off happens: the linger row measures re-locking a key the session "
        f"kept. {rounds_note(L)}; from `benchmarks/results/latest.jsonl`."])


def fenced():
    """Shared-session cells with and without fenced holders (latest.jsonl)."""
    L = load("latest.jsonl")
    out = ["| callers on one session | unfenced acq/s | fenced acq/s | fenced / unfenced | fenced RPCs/acq | fenced p99 ms | violations unfenced / fenced |",
           "|---:|---:|---:|---:|---:|---:|---|"]
    for w in (1, 10, 100, 1000):
        u = cell(L, "coetcd", "mutex", w, share_session=True)
        f = cell(L, "coetcd", "mutex", w, share_session=True, fenced=True)
        out.append(f"| {w} | {tput(u)} | {tput(f)} | {x(ratio(f, u))} | {n(median(f, 'rpcs_per_acq'), '{:.2f}')} "
                   f"| {ms(median(f, 'p99_ms'))} | {viol(u, f)} |")
    out += ["", f"{rounds_note(L)}; from `benchmarks/results/latest.jsonl`."]
    return "\n".join(out)


CHECKED = [
    ("mutex", "10 workers, a session each", dict(mode="mutex", workers=10)),
    ("rw_mutex", "100 workers, every tenth a writer", dict(mode="rw", workers=100)),
    ("semaphore", "100 workers, 10 permits", dict(mode="sem", workers=100, permits=10)),
    ("mutex, shared session", "100 callers on one session", dict(mode="mutex", workers=100, share_session=True)),
    ("election", "10 workers, a session each", dict(mode="election", workers=10)),
]


def checked():
    """Cells whose critical section is a guarded read-modify-write of a counter in etcd (latest.jsonl)."""
    L = load("latest.jsonl")
    out = ["| kind | cell | acq/s | p99 ms | RPCs/acq | guards refused | updates lost | violations (all rounds) |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for kind, what, spec in CHECKED:
        spec = dict(spec)
        mode, workers = spec.pop("mode"), spec.pop("workers")
        c = cell(L, "coetcd", mode, workers, checked=True, **spec)
        if not c:
            out.append(f"| {kind} | {what} | – | – | – | – | – | – |")
            continue
        out.append(f"| {kind} | {what} | {tput(c)} | {ms(median(c, 'p99_ms'))} | {n(median(c, 'rpcs_per_acq'), '{:.2f}')} "
                   f"| {sum(r.get('refused', 0) for r in c)} | {sum(r.get('lost_updates', 0) for r in c)} | {bad(c)} |")
    out += ["", f"{rounds_note(L)}; from `benchmarks/results/latest.jsonl`."]
    return "\n".join(out)


def family():
    """rw_mutex against Go's recipe.RWMutex, semaphore against its Go twin (latest.jsonl)."""
    L = load("latest.jsonl")
    out = ["| lock | sessions | hold | coetcd acq/s | Go acq/s | coetcd / Go | p99 ms coetcd, readers / writers "
           "| p99 ms Go, readers / writers | RPCs/acq coetcd / Go | violations coetcd / Go |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for share in (False, True):
        for hold in (0.0, 5.0):
            c = cell(L, "coetcd", "rw", 100, share_session=share, hold_ms=hold)
            g = cell(L, "go", "rw", 100, share_session=share, hold_ms=hold)
            rw = lambda r: f"{ms(median(r, 'read_p99_ms'))} / {ms(median(r, 'write_p99_ms'))}"
            out.append(f"| `rw_mutex` | {'one shared' if share else 'one each'} | {'5 ms' if hold else 'a yield'} "
                       f"| {tput(c)} | {tput(g)} | {x(ratio(c, g))} | {rw(c)} | {rw(g)} "
                       f"| {n(median(c, 'rpcs_per_acq'), '{:.2f}')} / {n(median(g, 'rpcs_per_acq'), '{:.2f}')} | {viol(c, g)} |")
    c, g = cell(L, "coetcd", "sem", 100, permits=10), cell(L, "go", "sem", 100, permits=10)
    out.append(f"| `semaphore`, 10 permits | one each | a yield | {tput(c)} | {tput(g)} | {x(ratio(c, g))} "
               f"| {ms(median(c, 'p99_ms'))} | {ms(median(g, 'p99_ms'))} "
               f"| {n(median(c, 'rpcs_per_acq'), '{:.2f}')} / {n(median(g, 'rpcs_per_acq'), '{:.2f}')} | {viol(c, g)} |")
    out += ["", f"100 workers on one name. {rounds_note(L)}; from `benchmarks/results/latest.jsonl`."]
    return "\n".join(out)


def kv():
    """The client core against Go's client, request for request (latest.jsonl)."""
    L = load("latest.jsonl")
    out = ["| request | in flight | coetcd ops/s | Go ops/s | coetcd / Go | p50 ms coetcd / Go | p99 ms coetcd / Go | CPU s/1000 coetcd / Go |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for mode in ("put", "get", "kv_txn"):
        for w in (1, 10, 100, 1000):
            c, g = cell(L, "coetcd", mode, w), cell(L, "go", mode, w)
            out.append(f"| {mode} | {w} | {tput(c)} | {tput(g)} | {x(ratio(c, g))} "
                       f"| {ms(median(c, 'p50_ms'))} / {ms(median(g, 'p50_ms'))} | {ms(median(c, 'p99_ms'))} / {ms(median(g, 'p99_ms'))} "
                       f"| {n(median(c, 'cpu_s_per_1000'), '{:.2f}')} / {n(median(g, 'cpu_s_per_1000'), '{:.2f}')} |")
    out += ["", "One worker taking a lock (raw put-if-absent txn + delete, and the mutex), both completion modes:", "",
            "| one worker | coetcd (thread) acq/s | coetcd (poll) acq/s | Go acq/s | thread / Go | poll / Go | CPU s/1000 thread / poll / Go |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for mode in ("txn", "mutex"):
        t, p, g = cell(L, "coetcd", mode, 1, completions="thread"), cell(L, "coetcd", mode, 1, completions="poll"), cell(L, "go", mode, 1)
        t = [r for r in t if r.get("completions") == "thread"]
        p = [r for r in p if r.get("completions") == "poll"]
        out.append(f"| {mode} | {tput(t)} | {tput(p)} | {tput(g)} | {x(ratio(t, g))} | {x(ratio(p, g))} "
                   f"| {n(median(t, 'cpu_s_per_1000'), '{:.2f}')} / {n(median(p, 'cpu_s_per_1000'), '{:.2f}')} / {n(median(g, 'cpu_s_per_1000'), '{:.2f}')} |")
    out += ["", f"{rounds_note(L)}; from `benchmarks/results/latest.jsonl` (`get_latency` against gRPC's blocking stub: "
            "`benchmarks/results/kv.md`)."]
    return "\n".join(out)


# ---- benchmarks/results/cluster.jsonl: BENCH_SET=cluster ----------------------------------------

def cluster():
    """The main contention rows on a 3-member cluster (cluster.jsonl)."""
    L = load("cluster.jsonl")
    floor_c, floor_g = cell(L, "coetcd", "delete_chain"), cell(L, "go", "delete_chain")
    out = ["| waiters on one lock | coetcd acq/s | Go acq/s | coetcd / Go | coetcd / floor | Go / floor | p99 ms coetcd | p99 ms Go | violations coetcd / Go |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for w in (1, 10, 100, 1000):
        c, g = cell(L, "coetcd", "mutex", w), cell(L, "go", "mutex", w)
        out.append(f"| {w} | {tput(c)} | {tput(g)} | {x(ratio(c, g))} | {x(ratio(c, floor_c))} | {x(ratio(g, floor_g))} "
                   f"| {ms(median(c, 'p99_ms'))} | {ms(median(g, 'p99_ms'))} | {viol(c, g)} |")
    out += ["", f"Floor on three members: {tput(floor_c)} deletes/s on coetcd's client, {tput(floor_g)} on Go's. "
            f"{rounds_note(L)}; from `benchmarks/results/cluster.jsonl`."]
    return "\n".join(out)


# ---- benchmarks/results/versions.jsonl: BENCH_SET=versions --------------------------------------

def versions():
    """The main contention rows on etcd 3.4 and 3.5, both in every round (versions.jsonl)."""
    L = load("versions.jsonl")
    vs = sorted({r["etcd"] for r in L}, key=lambda v: [int(p) for p in v.split(".")])
    if len(vs) != 2:
        return "(no run on two etcd versions in `benchmarks/results/versions.jsonl`)"
    old, new = vs
    at = lambda v: [r for r in L if r["etcd"] == v]
    out = [f"| waiters on one lock | coetcd {old} | coetcd {new} | {new} / {old} | Go {old} | Go {new} | {new} / {old} "
           f"| coetcd / Go on {old} | coetcd / Go on {new} | violations |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    rows = [(f"{w}", dict(mode="mutex", workers=w), dict(mode="mutex", workers=w)) for w in (1, 10, 100, 1000)]
    rows.append(("100, one session (async server)", dict(mode="mutex", workers=100, share_session=True),
                 dict(mode="mutex", workers=100, share_session=True, pass_local=True)))
    rows.append(("floor: delete chain", dict(mode="delete_chain"), dict(mode="delete_chain")))
    for label, cf, gf in rows:
        c0, c1 = cell(at(old), "coetcd", **cf), cell(at(new), "coetcd", **cf)
        g0, g1 = cell(at(old), "go", **gf), cell(at(new), "go", **gf)
        out.append(f"| {label} | {tput(c0)} | {tput(c1)} | {x(ratio(c1, c0))} | {tput(g0)} | {tput(g1)} | {x(ratio(g1, g0))} "
                   f"| {x(ratio(c0, g0))} | {x(ratio(c1, g1))} | {viol(c0 + c1, g0 + g1)} |")
    out += ["", f"Acquisitions/s (deletes/s for the floor), one member of each version started afresh for each "
            f"round, the two versions in turn first; violations coetcd / Go over both. Go's peer is the same "
            f"binary on both (Debian 12's 3.4 client packages). {rounds_note(L)}; from "
            "`benchmarks/results/versions.jsonl`."]
    return "\n".join(out)


# ---- benchmarks/results/stm.jsonl: BENCH_SET=stm ------------------------------------------------

def stm():
    """Counters incremented by many coroutines of one client: coetcd::stm (in commit groups, and
    alone), coetcd::counter, and Go's concurrency.NewSTM, in every round (stm.jsonl)."""
    L = load("stm.jsonl")
    if not L:
        return "(no run in `benchmarks/results/stm.jsonl`: BENCH_SET=stm benchmarks/run)"
    out = ["| workers, counters | coetcd | commits/s | Go `NewSTM` commits/s | coetcd / Go | runs per commit, coetcd / Go "
           "| lost increments |",
           "|---|---|---:|---:|---:|---:|---:|"]
    for w, k in ((100, 10), (1, 1)):
        g = cell(L, "go", "stm", w, locks=k)
        for impl, label in (("coetcd", "`stm` (commit groups)"), ("coetcd-alone", "`stm`, `group_commit = false`"),
                            ("coetcd-counter", "`counter`, one object per key")):
            c = cell(L, impl, "stm", w, locks=k)
            if not c:
                continue
            runs = "–" if impl == "coetcd-counter" else f"{ms(median(c, 'runs_per_commit'))} / {ms(median(g, 'runs_per_commit'))}"
            lost = sum(r.get("lost_updates", 0) + r.get("errors", 0) for r in c + g)
            out.append(f"| {w}, {k} | {label} | {tput(c)} | {tput(g)} | {x(ratio(c, g))} | {runs} | {lost} |")
    rounds = sorted({r.get("round") for r in L if r.get("round")})
    secs = sorted({round(r.get("seconds", 0)) for r in L})
    out += ["", f"Commits/s (each commit one increment), worker i on counter i % counters, one client, one etcd "
            f"member; lost increments: the counters' sum against the commits, and errors, over every round of "
            f"both sides. {len(rounds)} rounds, {secs[-1] if secs else '?'} s per cell; from "
            "`benchmarks/results/stm.jsonl` (`BENCH_SET=stm benchmarks/run`)."]
    return "\n".join(out)


# ---- benchmarks/results/queue.jsonl: BENCH_SET=queue --------------------------------------------

def queue():
    """N producers and N consumers on one client: coetcd::queue against Go's recipe.Queue (queue.jsonl)."""
    L = load("queue.jsonl")
    if not L:
        return "(no run in `benchmarks/results/queue.jsonl`: BENCH_SET=queue benchmarks/run)"
    out = ["| producers + consumers | coetcd `queue` items/s | Go `recipe.Queue` items/s | coetcd / Go "
           "| left after 20 s of draining, coetcd / Go | taken twice |",
           "|---|---:|---:|---:|---:|---:|"]
    for w in (1, 10):
        c, g = cell(L, "coetcd", "queue", w), cell(L, "go", "queue", w)
        if not c or not g:
            continue
        left = f"{n(median(c, 'left'))} / {n(median(g, 'left'))}"
        twice = sum(r.get("duplicated", 0) + r.get("errors", 0) for r in c + g)
        out.append(f"| {w} + {w} | {tput(c)} | {tput(g)} | {x(ratio(c, g))} | {left} | {twice} |")
    rounds = sorted({r.get("round") for r in L if r.get("round")})
    out += ["", f"Items taken per second while the producers ran (one client, one queue object for coetcd, one "
            f"`recipe.Queue` for Go, one etcd member); then the consumers drain what is left for up to 20 s: items "
            f"still in the queue after that are counted, not lost. Taken twice: duplicates and errors over every "
            f"round of both sides. {len(rounds)} rounds, Go first in odd ones; from `benchmarks/results/queue.jsonl` "
            "(`BENCH_SET=queue benchmarks/run`)."]
    return "\n".join(out)


def cache_table():
    """coetcd::cache: local reads, memory, first sync and lag behind writers (stm.jsonl, mode cache)."""
    L = [r for r in load("stm.jsonl") if r.get("mode") == "cache"]
    if not L:
        return "(no cache run in `benchmarks/results/stm.jsonl`: BENCH_SET=stm benchmarks/run)"
    m = lambda f: median(L, f)
    out = ["| keys (value bytes) | local reads/s, one core | memory / keys and values | first sync | writers | changes/s "
           "seen | lag p50 | lag p99 | resets |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
           f"| {n(m('keys'))} ({n(m('value_size'))}) | {n(m('reads_per_s'))} | {x(m('memory_ratio'))} | {ms(m('sync_ms'))} ms "
           f"| {n(m('workers'))} | {n(m('events_per_s'))} | {ms(m('lag_p50_ms'))} ms | {ms(m('lag_p99_ms'))} ms "
           f"| {sum(r.get('resets', 0) for r in L)} |",
           "",
           f"Medians of {len(L)} rounds (`cache_bench`, one per round of `BENCH_SET=stm benchmarks/run`): reads of random "
           "keys on the cache's own thread for a second; memory is the heap the synced cache holds (`mallinfo2`) against "
           "the keys' and values' bytes; lag is the time from a put's sending to its change in the cache reader's hands "
           "(the commit and its fsync included), the writers putting at full speed from a second client on the same "
           "thread and machine. From `benchmarks/results/stm.jsonl`."]
    return "\n".join(out)


# ---- README ------------------------------------------------------------------------------------

def readme_performance():
    """The README's short table (latest.jsonl)."""
    L = load("latest.jsonl")
    floor_c = cell(L, "coetcd", "delete_chain")
    out = ["| case | coetcd acq/s | compared with | its acq/s | coetcd / it | coetcd / floor |",
           "|---|---:|---|---:|---:|---:|"]
    for w in (1, 10, 100, 1000):
        c, g = cell(L, "coetcd", "mutex", w), cell(L, "go", "mutex", w)
        out.append(f"| {w} waiter{'s' if w > 1 else ''} on one lock, a session each | {tput(c).split(' (')[0]} "
                   f"| Go `concurrency.Mutex` | {tput(g).split(' (')[0]} | {x(ratio(c, g))} | {x(ratio(c, floor_c))} |")
    for w, k in ((100, 1), (100, 4)):
        c = cell(L, "coetcd", "mutex", w, share_session=True, clients=k)
        g = cell(L, "go", "mutex", w, share_session=True, clients=k, pass_local=True)
        out.append(f"| {w} callers on {k} session{'s' if k > 1 else ''} (async server) | {tput(c).split(' (')[0]} "
                   f"| Go: `sync.Mutex` inside a held `concurrency.Mutex` | {tput(g).split(' (')[0]} | {x(ratio(c, g))} | – |")
    out += ["", "Floor: etcd's rate of serial commits here (a chain of single-key deletes), measured in the same round; "
            "a hand-off between waiters costs one commit (the release), a lone acquisition two (take and release). "
            "The async-server rows take the key once per turn and pass it in memory, as their Go twin does. "
            f"2 cores, one etcd on loopback, {rounds_note(L)}, medians; from `benchmarks/results/latest.jsonl`."]
    return "\n".join(out)


# ---- benchmarks/results/compare*.jsonl: benchmarks/compare --------------------------------------

SYSTEMS = [
    ("coetcd", "coetcd `mutex`, a session per worker"),
    ("go", "Go `concurrency.Mutex`, a session per worker"),
    ("redis", "Redis (redsync), default persistence"),
    ("redis_aof_always", "Redis (redsync), `appendfsync always`"),
    ("zk", "ZooKeeper `zk.Lock`"),
    ("pg_table", "PostgreSQL lock table"),
    ("pg_advisory", "PostgreSQL advisory lock"),
]
COMPARE_CELLS = [(1, 1), (10, 1), (100, 1), (1000, 1), (100, 10)]


def _label(c):
    return "coetcd_shared" if c["impl"] == "coetcd" and c.get("share_session") else c["impl"]


def _compare_cell(lab, w, k):
    return [c for c in load("compare.jsonl") if _label(c) == lab and c["workers"] == w and c["locks"] == k]


def _compare_text(runs):
    if not runs:
        return "–"
    t = f"{n(median(runs, 'acquisitions_per_s'))} · {ms(median(runs, 'p50_ms'))} / {ms(median(runs, 'p99_ms'))}"
    starved = median(runs, "starved")
    if starved:
        t += f" ({starved:.0f} of {runs[0]['workers']} never served)"
    if bad(runs):
        t += f" **{bad(runs)} violations/errors**"
    return t


def compare_contention():
    """Acquisitions/s · p50 / p99 wait per system and cell (compare.jsonl)."""
    out = ["| system | " + " | ".join(f"{w} on {k} lock{'s' if k > 1 else ''}" for w, k in COMPARE_CELLS) + " |",
           "|---|" + "---:|" * len(COMPARE_CELLS)]
    for lab, what in SYSTEMS:
        if any(_label(c) == lab for c in load("compare.jsonl")):
            out.append(f"| {what} | " + " | ".join(_compare_text(_compare_cell(lab, w, k)) for w, k in COMPARE_CELLS) + " |")
    out += ["", f"Acquisitions/s · p50 / p99 wait in ms, each the median of its rounds ({rounds_note(load('compare.jsonl'))}); "
            "from `benchmarks/results/compare.jsonl`."]
    return "\n".join(out)


def compare_shared():
    """coetcd's workers sharing one session, apart from the round-trip rows (compare.jsonl)."""
    out = ["| coetcd `mutex`, the workers share one session | " + " | ".join(f"{w} on {k}" for w, k in COMPARE_CELLS[1:]) + " |",
           "|---|" + "---:|" * (len(COMPARE_CELLS) - 1),
           "| acquisitions/s · p50 / p99 ms | " + " | ".join(_compare_text(_compare_cell("coetcd_shared", w, k)) for w, k in COMPARE_CELLS[1:]) + " |",
           "", f"Medians of the rounds ({rounds_note(load('compare.jsonl'))}); from `benchmarks/results/compare.jsonl`."]
    return "\n".join(out)


def compare_fairness():
    """The longest any worker waited for one acquisition (compare.jsonl)."""
    out = ["| system | " + " | ".join(f"{w} on {k}" for w, k in COMPARE_CELLS) + " |", "|---|" + "---:|" * len(COMPARE_CELLS)]
    for lab, what in SYSTEMS:
        if any(_label(c) == lab for c in load("compare.jsonl")):
            out.append(f"| {what} | " + " | ".join(ms(median(_compare_cell(lab, w, k), "max_ms")) for w, k in COMPARE_CELLS) + " |")
    out += ["", f"The longest wait of any worker for one acquisition, in ms (median of the rounds, {rounds_note(load('compare.jsonl'))}); "
            "from `benchmarks/results/compare.jsonl`."]
    return "\n".join(out)


CRASH_WHY = {
    "coetcd": "the session's lease expires (TTL 60 s, coetcd's and Go's default)",
    "go": "the session's lease expires (TTL 60 s)",
    "redis": "the key's expiry (redsync's 8 s, counted from the take)",
    "redis_aof_always": "the key's expiry (redsync's 8 s, counted from the take)",
    "zk": "the session times out (asked 60 s; the server caps it at 20 ticks = 40 s)",
    "pg_table": "the row's expiry (8 s, as redsync's)",
    "pg_advisory": "the backend sees its client's socket close and ends the session",
}


def compare_crash():
    """A crashed holder: from SIGKILL to the next holder (compare-crash.jsonl)."""
    out = ["| system | from the kill to the next holder | what frees the lock |", "|---|---:|---|"]
    for r in load("compare-crash.jsonl"):
        a = r["acquirer"]
        ok = a.get("acquisitions") == 1 and a.get("errors") == 0
        took = f"{r['pass_on_s']:.1f} s" if ok else f"failed ({a.get('first_error', '')})"
        out.append(f"| {dict(SYSTEMS).get(r['label'], r['label'])} | {took} | {CRASH_WHY.get(r['label'], '')} |")
    out += ["", "From `benchmarks/results/compare-crash.jsonl`."]
    return "\n".join(out)


def compare_stale():
    """A paused holder's write, plain and fenced (compare-stale.jsonl)."""
    out = ["| system | write | the second holder | the paused holder's write | counter (writes applied) |", "|---|---|---|---|---:|"]
    for r in load("compare-stale.jsonl"):
        served = (f"got in after {r['contender_wait_s']:.1f} s" if r["served_in_pause"] and r["contender_wait_s"] is not None
                  else f"kept out for the whole {r['pause_s']:.0f} s pause")
        final = r["final"]
        lost = r["writes_applied"] - final if final is not None else None
        ctr = f"{final} ({r['writes_applied']})" if final is not None else "?"
        if lost:
            ctr += f" **{lost} increment lost**"
        out.append(f"| {dict(SYSTEMS).get(r['label'], r['label'])} | {'fenced' if r['fenced'] else 'plain'} | {served} "
                   f"| {r['holder_write'].replace('write ', '')} | {ctr} |")
    out += ["", "From `benchmarks/results/compare-stale.jsonl`."]
    return "\n".join(out)


def compare_failover():
    """One server killed under load, one entry per round (compare-failover.jsonl)."""
    F = load("compare-failover.jsonl")
    out = ["| system | fault | acquisitions in 20 s | lock free (s) | errors seen | violations | locks left |",
           "|---|---|---:|---:|---:|---:|---:|"]
    order = []
    for r in F:
        if r["label"] not in order:
            order.append(r["label"])
    for lab in order:
        rs = [r for r in F if r["label"] == lab]
        join = lambda f: ", ".join(f(r) for r in rs)
        v = join(lambda r: str(r["violations"]))
        if any(r["violations"] for r in rs):
            v = f"**{v}**"
        free = join(lambda r: "{:.1f}".format(r["max_idle_ms"] / 1000))
        out.append(f"| {dict(SYSTEMS).get(lab, lab)} | {rs[0]['fault']} | {join(lambda r: str(r['acquisitions']))} "
                   f"| {free} | {join(lambda r: str(r['errors']))} | {v} "
                   f"| {join(lambda r: str(r.get('leftover_keys', -1)))} |")
    out += ["", "One entry per round; from `benchmarks/results/compare-failover.jsonl`."]
    return "\n".join(out)


def readme_comparison():
    """The README's comparison summary (compare.jsonl, compare-failover.jsonl)."""
    F = load("compare-failover.jsonl")
    out = ["| system | 1 waiter acq/s | 100 waiters on one lock acq/s | p99 wait at 100, ms | leader or server killed: lock free (s) | violations after the kill |",
           "|---|---:|---:|---:|---:|---:|"]
    for lab, what in SYSTEMS:
        if not any(_label(c) == lab for c in load("compare.jsonl")):
            continue
        one, hundred = _compare_cell(lab, 1, 1), _compare_cell(lab, 100, 1)
        fo = [r for r in F if r["label"] == lab]
        free = "–" if not fo else f"{median(fo, 'max_idle_ms') / 1000:.1f}"
        two = "–" if not fo else str(sum(r["violations"] for r in fo))
        out.append(f"| {what} | {n(median(one, 'acquisitions_per_s'))} | {n(median(hundred, 'acquisitions_per_s'))} "
                   f"| {ms(median(hundred, 'p99_ms'))} | {free} | {two} |")
    out += ["", f"Medians of the rounds ({rounds_note(load('compare.jsonl'))}) on one 2-core machine, servers at their "
            "defaults; violations summed over the failover rounds. From `benchmarks/results/compare.jsonl` and "
            "`compare-failover.jsonl`."]
    return "\n".join(out)


TABLES = {
    "contention": contention,
    "async-server": async_server,
    "linger": linger,
    "fenced": fenced,
    "checked": checked,
    "family": family,
    "kv": kv,
    "cluster": cluster,
    "versions": versions,
    "stm": stm,
    "cache": cache_table,
    "queue": queue,
    "readme-performance": readme_performance,
    "readme-comparison": readme_comparison,
    "compare-contention": compare_contention,
    "compare-shared": compare_shared,
    "compare-fairness": compare_fairness,
    "compare-crash": compare_crash,
    "compare-stale": compare_stale,
    "compare-failover": compare_failover,
}
