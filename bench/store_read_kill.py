#!/usr/bin/env python3
"""Reads across a holder's kill -9 (issue 15 part 5): the share of gets that
succeed in the window after the kill, and what the kill adds to their latency.

Each round starts a mooncake_master (--client_ttl, upstream's 10 s by
default) and three store_node clients on loopback (tests/integration/
store_node): a puts --objects objects of --size bytes with rep=2 on b and c,
then reads them in turn (getloop, one get at a time, every get timed) for
--before + --window seconds; --before seconds in, b is killed with SIGKILL.
Until the master expires b (about the TTL) its replicas are still handed
out, so a get that picks b fails its transfer and must go to c.

Measured per round, from the getloop's own per-get records:
  before   gets in the --before seconds before the kill: p50/p99 latency
  window   gets started in the --window seconds after the kill: count,
           share that succeeded (target 100%), p50/p99/max latency, and the
           added p99 (window p99 - before p99)
The medians over --rounds are printed last.

usage: bench/store_read_kill.py [--build build] [--objects 200] [--size 1m]
                                [--rounds 3] [--client-ttl 10] [--before 3]
                                [--window 15] [--tcp]
"""
import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from master_rss import Master, find  # noqa: E402
from store_repair import Node, size_of  # noqa: E402


def pct(v, q):
    if not v:
        return float("nan")
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def one_round(args, size):
    m = Master(find(args.build, "tools/mooncake_master"), [f"--client_ttl={args.client_ttl}"])
    exe = find(args.build, "tests/integration/store_node")
    nodes = [Node(exe, m, int(args.objects * size * 1.25) + (64 << 20)) for _ in range(3)]
    a, b, c = nodes
    fd, path = tempfile.mkstemp(prefix="read_kill.", suffix=".txt")
    os.close(fd)
    try:
        a.ok(f"putn k {args.objects} {size} 3 seg={b.hostname} seg={c.hostname} rep=2")
        a.ok(f"getn k {args.objects} {size} 3")  # all readable, and warm
        result = {}
        secs = int(args.before + args.window + 1)
        t = threading.Thread(target=lambda: result.update(
            a.ok(f"getloop k {args.objects} {secs} {path}")))
        t.start()
        time.sleep(args.before)  # the bench's schedule, not a synchronisation
        t_kill = time.monotonic() * 1e3
        b.kill9()
        t.join()
        rows = []
        with open(path) as f:
            for line in f:
                t0, ms, rc = line.split()
                rows.append((float(t0), float(ms), int(rc)))
        before = [ms for t0, ms, rc in rows if t_kill - args.before * 1e3 <= t0 < t_kill]
        win = [(ms, rc) for t0, ms, rc in rows if t_kill <= t0 < t_kill + args.window * 1e3]
        ok = [ms for ms, rc in win if rc == 0]
        r = {
            "gets_before": len(before),
            "before_p50_ms": pct(before, 0.5),
            "before_p99_ms": pct(before, 0.99),
            "gets_window": len(win),
            "ok_share": len(ok) / len(win) if win else float("nan"),
            "failed": len(win) - len(ok),
            "window_p50_ms": pct([ms for ms, _ in win], 0.5),
            "window_p99_ms": pct([ms for ms, _ in win], 0.99),
            "window_max_ms": max((ms for ms, _ in win), default=float("nan")),
        }
        r["added_p99_ms"] = r["window_p99_ms"] - r["before_p99_ms"]
        return r
    finally:
        os.unlink(path)
        for n in nodes:
            n.stop()
        m.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--objects", type=int, default=200)
    ap.add_argument("--size", default="1m")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--client-ttl", type=int, default=10)
    ap.add_argument("--before", type=float, default=3)
    ap.add_argument("--window", type=float, default=15)
    ap.add_argument("--tcp", action="store_true",
                    help="MC_SHM_DISABLE=1: reads over TCP, not the same-host path")
    args = ap.parse_args()
    if args.tcp:
        os.environ["MC_SHM_DISABLE"] = "1"
    size = size_of(args.size)
    rounds = []
    for i in range(args.rounds):
        r = one_round(args, size)
        rounds.append(r)
        print(f"round {i + 1}: " + " ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()),
            flush=True)
    print("median: " + " ".join(
        f"{k}={statistics.median(r[k] for r in rounds):.4g}" for k in rounds[0]))


if __name__ == "__main__":
    main()
