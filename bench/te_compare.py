#!/usr/bin/env python3
"""Run transfer_engine_bench against iperf3 (and itself) in one sitting.

Starts one target (P2P handshake, or an HTTP metadata server with --http),
then for each case alternates an iperf3 loopback run (-l 1M) and a bench run,
--runs times, and prints the median of each with their ratio.  Figures go to
stdout as one line per case; see docs/benchmarks.md for recorded results.

usage: bench/te_compare.py [--build build] [--runs 5] [--duration 5] [--quick]
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time


def iperf(port, duration):
    out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-l", "1M",
                          "-t", str(max(1, int(duration))), "-J"], capture_output=True, text=True,
                         timeout=duration + 30)
    j = json.loads(out.stdout)
    return j["end"]["sum_received"]["bits_per_second"] / 8 / 1e9


def bench(exe, seg, op, block, batch, threads, duration, bufsize, extra=()):
    cmd = [exe, "--mode=initiator", "--metadata_server=P2PHANDSHAKE",
           "--local_server_name=127.0.0.1", f"--segment_id={seg}", f"--operation={op}",
           f"--block_size={block}", f"--batch_size={batch}", f"--threads={threads}",
           f"--duration={duration}", f"--buffer_size={bufsize}", "--latency",
           "--noshm",  # TCP against iperf3; bench/shm_compare.py measures the same-host path
           *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()}")
    gbs = float(re.search(r"throughput ([0-9.]+) GB/s", out.stdout).group(1))
    lat = re.search(r"p50 ([0-9.]+) us p99 ([0-9.]+) us .*requests/s ([0-9.]+)", out.stdout)
    return gbs, float(lat.group(1)), float(lat.group(2)), float(lat.group(3))


# The A/B cases of auth_compare.py and te_checksum_compare.py: small and
# large blocks, written and read, one thread.
AB_CASES = [("write", 4096, 128, 1), ("read", 4096, 128, 1),
            ("write", 4 << 20, 16, 1), ("read", 4 << 20, 16, 1)]


def ab_compare(exe, sides, args, extra=(), tag=None, per_run=None):
    """Alternate initiators (sides: [(name, segment, environment)], two or
    more; the order reversed every other run) over AB_CASES, --runs times
    each, and print one line (or JSON object) per case: each side's median
    and min-max and the ratio of every other side's median to the first's
    ("ratio" for the last side, "ratio_<name>" for each).  per_run, if
    given, is called before each run (of every side) with the run's index
    and returns {name: segment} to use in it (fresh targets per run)."""
    names = [s[0] for s in sides]
    blocks = getattr(args, "blocks", None)  # only these block sizes (None: all)
    for op, block, batch, threads in AB_CASES:
        if blocks and block not in blocks:
            continue
        res = {n: [] for n in names}
        for i in range(args.runs):
            segs = per_run(i) if per_run else {}
            for name, seg, env in (sides if i % 2 == 0 else sides[::-1]):
                old = dict(os.environ)
                os.environ.clear()
                os.environ.update(env)
                try:
                    res[name].append(bench(exe, segs.get(name, seg), op, block, batch,
                                           threads, args.duration, args.buffer_size, extra))
                finally:
                    os.environ.clear()
                    os.environ.update(old)
        col = 3 if block < 65536 else 0  # requests/s for small blocks, else GB/s
        unit = "req/s" if col else "GB/s"
        v = {k: [r[col] for r in rs] for k, rs in res.items()}
        med = {k: statistics.median(x) for k, x in v.items()}
        row = {"op": op, "block": block, "batch": batch, "threads": threads,
               "unit": unit, "runs": args.runs, **(tag or {})}
        for k in names:
            row.update({k: round(med[k], 3), f"{k}_min": round(min(v[k]), 3),
                        f"{k}_max": round(max(v[k]), 3)})
        for k in names[1:]:
            row[f"ratio_{k}"] = round(med[k] / med[names[0]], 3)
            # the same run's pair (adjacent in time, the same targets with
            # --fresh): slow drifts of the machine cancel
            row[f"pair_{k}"] = round(statistics.median(
                x / y for x, y in zip(v[k], v[names[0]])), 3)
        row["ratio"] = row[f"ratio_{names[-1]}"]
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"case op={op} block={block} batch={batch} threads={threads} "
                  + " ".join(f"{k}_{unit}={row[k]:.2f} ({row[k + '_min']:.2f}-"
                             f"{row[k + '_max']:.2f})" for k in names)
                  + "".join(f" ratio_{k}={row['ratio_' + k]:.3f} pair_{k}={row['pair_' + k]:.3f}"
                            for k in names[1:]),
                  flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=5)
    ap.add_argument("--quick", action="store_true", help="one short run per case (CI smoke)")
    ap.add_argument("--filter", default="", help="only cases whose description matches")
    ap.add_argument("--poll", default="", help="pass --poll=MODE to the bench")
    ap.add_argument("--buffer-size", type=int, default=1 << 30,
                    help="bytes registered on each side (iperf3 -l 1M works in 1 MiB)")
    ap.add_argument("--batch", type=int, default=128, help="batch size of the bulk cases")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.duration = 1, 0.5
    exe = os.path.join(args.build, "tools", "transfer_engine_bench")

    iperf_port = 5299
    iperf_srv = subprocess.Popen(["iperf3", "-s", "-p", str(iperf_port)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    target = subprocess.Popen([exe, "--mode=target", "--metadata_server=P2PHANDSHAKE",
                               "--local_server_name=127.0.0.1", f"--buffer_size={args.buffer_size}"],
                              stdout=subprocess.PIPE, text=True)
    try:
        seg = target.stdout.readline().strip()
        if not seg:
            sys.exit("target did not start")
        time.sleep(0.3)  # iperf3 server start-up has no ready line
        nb = args.batch
        cases = [
            # op, block, batch, threads, compare with iperf3
            ("write", 1 << 20, nb, 1, True), ("read", 1 << 20, nb, 1, True),
            ("write", 4 << 20, nb, 1, True), ("read", 4 << 20, nb, 1, True),
            ("write", 1 << 20, nb, 12, True), ("read", 1 << 20, nb, 12, True),
            ("write", 4 << 20, nb, 12, True), ("read", 4 << 20, nb, 12, True),
            ("write", 4096, 128, 1, False), ("read", 4096, 128, 1, False),
            ("write", 4096, 1, 1, False), ("read", 4096, 1, 1, False),
            ("write", 65536, 128, 1, False), ("read", 65536, 128, 1, False),
        ]
        extra = [f"--poll={args.poll}"] if args.poll else []
        for op, block, batch, threads, cmp in cases:
            desc = f"op={op} block={block} batch={batch} threads={threads}"
            if args.filter and not re.search(args.filter, desc):
                continue
            ref, res = [], []
            for _ in range(args.runs):
                if cmp:
                    ref.append(iperf(iperf_port, args.duration))
                res.append(bench(exe, seg, op, block, batch, threads, args.duration,
                                 args.buffer_size, extra))
            gbs = statistics.median(r[0] for r in res)
            p50 = statistics.median(r[1] for r in res)
            p99 = statistics.median(r[2] for r in res)
            rps = statistics.median(r[3] for r in res)
            line = (f"case {desc} "
                    f"GB/s={gbs:.2f} req/s={rps:.0f} p50_us={p50:.1f} p99_us={p99:.1f}")
            if cmp:
                iref = statistics.median(ref)
                line += f" iperf3_GB/s={iref:.2f} ratio={gbs / iref:.2f}"
            print(line, flush=True)
    finally:
        target.send_signal(signal.SIGTERM)
        iperf_srv.send_signal(signal.SIGTERM)
        target.wait(timeout=30)
        iperf_srv.wait(timeout=30)


if __name__ == "__main__":
    main()
