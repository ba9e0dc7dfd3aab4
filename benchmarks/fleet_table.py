# The table of benchmarks/results/fleet.jsonl (benchmarks/run's fleet set): per fleet size, the
# medians over rounds of coetcd's and Go's summed rates and of etcd's CPU per 1000 acquisitions.
#   python3 benchmarks/fleet_table.py benchmarks/results/fleet.jsonl
import json, statistics, sys


def median(xs):
    return statistics.median(xs) if xs else None


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    cells = {}
    for r in rows:
        kind = 'processes' if r.get('fleet') == 'processes' else 'clients in one process'
        side = 'go' if r['impl'].startswith('go') else 'coetcd'
        cells.setdefault((kind, r['workers']), {}).setdefault(side, []).append(r)
    commits = sorted({r.get('commit', '?') for r in rows})
    rounds = len({r.get('round') for r in rows})
    print(f'Waiters spread over processes and clients: one lock name, one waiter per process or '
          f'client; medians of {rounds} rounds; commit {", ".join(commits)}; etcd {rows[0].get("etcd", "?")}.\n')
    print('| waiters | spread over | coetcd acq/s | Go acq/s | coetcd / Go | etcd CPU s per 1000 acq, coetcd | … Go '
          '| Watch messages etcd sent per acq, coetcd | … Go | errors |')
    print('|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|')
    for (kind, n), sides in sorted(cells.items(), key=lambda kv: (kv[0][0] != 'processes', kv[0][1])):
        c, g = sides.get('coetcd', []), sides.get('go', [])
        cr, gr = median([r['acquisitions_per_s'] for r in c]), median([r['acquisitions_per_s'] for r in g])
        ccpu = median([r['etcd_cpu_s_per_1000'] for r in c if r.get('etcd_cpu_s_per_1000', -1) >= 0])
        gcpu = median([r['etcd_cpu_s_per_1000'] for r in g if r.get('etcd_cpu_s_per_1000', -1) >= 0])
        cw = median([r['watch_msgs_sent_per_acq'] for r in c if r.get('watch_msgs_sent_per_acq', -1) >= 0])
        gw = median([r['watch_msgs_sent_per_acq'] for r in g if r.get('watch_msgs_sent_per_acq', -1) >= 0])
        errors = sum(r.get('errors', 0) + r.get('violations', 0) for r in c + g)
        fmt = lambda x, p=0: '–' if x is None else f'{x:.{p}f}'
        ratio = f'{cr / gr:.2f}×' if cr and gr else '–'
        print(f'| {n} | {kind} | {fmt(cr)} | {fmt(gr)} | {ratio} | {fmt(ccpu, 2)} | {fmt(gcpu, 2)} | {fmt(cw, 1)} | {fmt(gw, 1)} | {errors} |')


main(sys.argv[1])
