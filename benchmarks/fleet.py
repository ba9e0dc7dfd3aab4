# One fleet cell (benchmarks/run's fleet set, issue 56): N processes of one waiter each on one
# lock name, started together and measuring one common window (--start-at), their rates summed;
# etcd's CPU over that window read from its /metrics. Prints one JSON row.
#   python3 benchmarks/fleet.py BENCH ENDPOINT N DURATION PREFIX [more flags for BENCH]
import json, os, subprocess, sys, tempfile, time, urllib.request


def server_metrics(endpoint):
    """etcd's CPU seconds and gRPC messages sent and received by method, or None."""
    out = {'cpu_s': None, 'sent': {}, 'received': {}}
    try:
        with urllib.request.urlopen(f'http://{endpoint}/metrics', timeout=5) as r:
            lines = r.read().decode().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith('process_cpu_seconds_total '):
            out['cpu_s'] = float(line.split()[1])
        for kind in ('sent', 'received'):
            if line.startswith(f'grpc_server_msg_{kind}_total{{') and 'grpc_method="' in line:
                method = line.split('grpc_method="', 1)[1].split('"', 1)[0]
                out[kind][method] = out[kind].get(method, 0) + float(line.rsplit(' ', 1)[1])
    return out


def per_acq(before, after, pick, acquisitions):
    """How much of `pick` (a metric) went to each acquisition over the window, or -1."""
    if not acquisitions or before is None or after is None or pick(before) is None:
        return -1
    return (pick(after) - pick(before)) / acquisitions


def seconds(text):
    for unit, scale in (('ms', 0.001), ('s', 1), ('m', 60)):
        if text.endswith(unit) and text[:-len(unit)].replace('.', '').isdigit():
            return float(text[:-len(unit)]) * scale
    raise SystemExit(f'fleet.py: a duration such as 5s, not {text!r}')


def main():
    bench, endpoint, n, duration, prefix, *more = sys.argv[1:]
    n, window = int(n), seconds(duration)
    # Each process connects, makes its session and is ready well before the window opens.
    start_at = time.time() + 2 + 0.05 * n
    with tempfile.TemporaryDirectory() as d:
        procs = []
        for i in range(n):
            out, err = open(f'{d}/{i}.json', 'w'), open(f'{d}/{i}.err', 'w')
            procs.append(subprocess.Popen(
                [bench, '--endpoints', endpoint, '--mode', 'mutex', '--workers', '1', '--locks', '1',
                 '--prefix', prefix, '--duration', duration, '--start-at', str(int(start_at * 1000)), '--json', *more],
                stdout=out, stderr=err))
        time.sleep(max(0.0, start_at - time.time()))
        before = server_metrics(endpoint)
        time.sleep(window)
        after = server_metrics(endpoint)
        codes = [p.wait(timeout=window + 120) for p in procs]
        rows, failed = [], []
        for i in range(n):
            text = open(f'{d}/{i}.json').read().strip()
            try:
                rows.append(json.loads(text))
            except ValueError:
                failed.append(f'process {i} (exit {codes[i]}): {open(f"{d}/{i}.err").read().strip()[-300:]}')
        late = [l for i in range(n) for l in open(f'{d}/{i}.err') if 'after --start-at' in l or 'after -start-at' in l]
    acquisitions = sum(r['acquisitions'] for r in rows)
    per_s = sum(r['acquisitions_per_s'] for r in rows)
    row = {
        'impl': rows[0]['impl'] if rows else os.path.basename(bench), 'mode': 'mutex', 'fleet': 'processes',
        'processes': n, 'workers': n, 'clients': n, 'seconds': window, 'acquisitions': acquisitions,
        'acquisitions_per_s': round(per_s, 1),
        # etcd's side of the window, all processes together: its CPU, the watch messages it
        # sent (events and progress, to every waiting client) and every request it received.
        'etcd_cpu_s_per_1000': round(1000 * per_acq(before, after, lambda m: m['cpu_s'], acquisitions), 4),
        'watch_msgs_sent_per_acq': round(per_acq(before, after, lambda m: m['sent'].get('Watch', 0), acquisitions), 3),
        'requests_per_acq': round(per_acq(before, after, lambda m: sum(
            v for k, v in m['received'].items() if k not in ('Watch', 'LeaseKeepAlive')), acquisitions), 3),
        'violations': sum(r.get('violations', 0) for r in rows), 'errors': sum(r.get('errors', 0) for r in rows) + len(failed),
        'first_error': failed[0] if failed else next((r['first_error'] for r in rows if r.get('first_error')), None),
        'late_starts': len(late), 'completions': rows[0].get('completions') if rows else None,
    }
    print(json.dumps(row))


main()
