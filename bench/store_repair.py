#!/usr/bin/env python3
"""Replica repair and drain: how fast the master restores replica_num after
a holder dies, and how fast a drain empties a segment (issue 15 part 6;
docs/design.md "Replica repair").

Each round runs two phases on fresh processes (a mooncake_master and three
store_node clients on loopback, tests/integration/store_node):

  repair  node a puts --objects objects of --size bytes with rep=2 on
          nodes b and c (putn: the foreground write rate, each byte sent
          twice, is the reference of the same run), reads them all back
          (getn: the read rate, the second reference), then b is killed
          with SIGKILL.  After --client_ttl the master expires b and every
          object is one replica short; repair copies c's replica to a.
          Measured: detect_s (kill to the first repair queued, about the
          TTL), repair_s (from then until every object has 2 replicas
          again and master_replica_repair_under_replicated is 0), the
          repair rate in objects/s and MB/s, and that rate against the
          putn rate.  a then reads every object back and checks it.
  drain   node a puts the same objects with rep=1 on b; POST
          /api/v1/drain_jobs empties b (max_concurrency --concurrency);
          measured: the job's time and bytes per second.

--rounds alternate the phases; the medians are printed with each round.
--phase repair or --phase drain runs one of them (the issue's repair of
10,000 objects and drain of 1 GiB are different object counts).

usage: bench/store_repair.py [--build build] [--objects 1000] [--size 1m] [--rounds 3]
                             [--client-ttl 2] [--concurrency 16] [--repair-rate 1g]
                             [--phase both|repair|drain]
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
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from master_rss import Master, find  # noqa: E402

MB = 1e6


def size_of(s):
    m = re.fullmatch(r"(\d+)([kmg]?)", s.lower())
    if not m:
        sys.exit(f"bad size {s}")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2)]


class Node:
    def __init__(self, exe, master, segment):
        self.p = subprocess.Popen(
            [exe, "--master", master.addr, "--metadata", master.meta_uri, "--host",
             "127.0.0.1", "--segment", str(segment), "--buffer", "16m", "--zbuf", "16m"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True)
        line = self.p.stdout.readline()
        if not line.startswith("READY"):
            sys.exit(f"store_node did not start: {line!r}")
        self.hostname = dict(kv.split("=", 1) for kv in line.split()[1:])["hostname"]

    def ok(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        r = self.p.stdout.readline().strip()
        if not r.startswith("OK"):
            sys.exit(f"'{line}' -> {r!r}")
        return dict(kv.split("=", 1) for kv in r.split()[1:] if "=" in kv)

    def kill9(self):
        self.p.send_signal(signal.SIGKILL)
        self.p.wait()

    def stop(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.close()
            except OSError:
                pass
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def metric(m, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{m.metrics}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


def http_json(m, path, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{m.metrics}{path}",
                                 data=json.dumps(body).encode() if body is not None else None,
                                 method="POST" if body is not None else "GET")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def cluster(args, segment):
    m = Master(find(args.build, "tools/mooncake_master"),
               [f"--client_ttl={args.client_ttl}",
                f"--replica_repair_bytes_per_sec={args.repair_rate}"])
    exe = find(args.build, "tests/integration/store_node")
    return m, [Node(exe, m, segment) for _ in range(3)]


def repair_round(args, size):
    m, (a, b, c) = cluster(args, int(args.objects * size * 1.25))
    try:
        put = a.ok(f"putn r {args.objects} {size} 7 seg={b.hostname} seg={c.hostname} rep=2")
        get = a.ok(f"getn r {args.objects} {size} 7")
        b.kill9()
        t_kill = time.monotonic()
        t_detect = None
        while True:
            under = metric(m, "master_replica_repair_under_replicated")
            done = metric(m, "master_replica_repairs_total")
            now = time.monotonic()
            if t_detect is None and (under > 0 or done > 0):
                t_detect = now
            if t_detect is not None and under == 0 and done >= args.objects:
                break
            if now - t_kill > 120 + args.client_ttl:
                sys.exit(f"repair did not finish: under={under} done={done}")
            time.sleep(0.01 if t_detect is None else 0.05)
        t_done = time.monotonic()
        check = a.ok(f"getn r {args.objects} {size} 7")
        if int(check.get("bad", "0")):
            sys.exit(f"repaired objects differ: {check}")
        repair_s = t_done - t_detect
        return {
            "detect_s": t_detect - t_kill,
            "repair_s": repair_s,
            "objects_per_s": args.objects / repair_s,
            "repair_mbps": args.objects * size / repair_s / MB,
            "put_mbps": float(put["mbps"]),
            "get_mbps": float(get["mbps"]),
            "bytes": metric(m, "master_replica_repair_bytes_total"),
        }
    finally:
        for n in (a, b, c):
            n.stop()
        m.stop()


def drain_round(args, size):
    m, (a, b, c) = cluster(args, int(args.objects * size * 1.25))
    try:
        a.ok(f"putn d {args.objects} {size} 9 seg={b.hostname}")
        t0 = time.monotonic()
        job = http_json(m, "/api/v1/drain_jobs",
                        {"segments": [b.hostname], "max_concurrency": args.concurrency})
        while True:
            q = http_json(m, f"/api/v1/drain_jobs/query?job_id={job['job_id']}")
            if q["status_name"] in ("SUCCEEDED", "FAILED", "CANCELED"):
                break
            time.sleep(0.01)
        took = time.monotonic() - t0
        if q["status_name"] != "SUCCEEDED":
            sys.exit(f"drain ended {q}")
        check = a.ok(f"getn d {args.objects} {size} 9")
        if int(check.get("bad", "0")):
            sys.exit(f"drained objects differ: {check}")
        return {"drain_s": took, "drain_mbps": q["migrated_bytes"] / took / MB,
                "migrated_bytes": q["migrated_bytes"]}
    finally:
        for n in (a, b, c):
            n.stop()
        m.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--objects", type=int, default=1000)
    ap.add_argument("--size", default="1m")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--client-ttl", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--repair-rate", default="1g")
    ap.add_argument("--phase", choices=("both", "repair", "drain"), default="both")
    args = ap.parse_args()
    size = size_of(args.size)
    reps, drains = [], []
    for r in range(args.rounds):
        if args.phase in ("both", "repair"):
            x = repair_round(args, size)
            reps.append(x)
            print(f"round {r} repair objects={args.objects} size={size} "
                  f"detect_s={x['detect_s']:.2f} repair_s={x['repair_s']:.3f} "
                  f"objects_per_s={x['objects_per_s']:.0f} repair_mbps={x['repair_mbps']:.0f} "
                  f"put_mbps={x['put_mbps']:.0f} get_mbps={x['get_mbps']:.0f}", flush=True)
        if args.phase in ("both", "drain"):
            y = drain_round(args, size)
            drains.append(y)
            print(f"round {r} drain objects={args.objects} bytes={y['migrated_bytes']} "
                  f"drain_s={y['drain_s']:.3f} drain_mbps={y['drain_mbps']:.0f}", flush=True)

    def med(rows, k):
        return statistics.median(row[k] for row in rows)

    line = f"store_repair objects={args.objects} size={size} rounds={args.rounds}"
    if reps:
        line += (f" repair_s={med(reps, 'repair_s'):.3f}"
                 f" objects_per_s={med(reps, 'objects_per_s'):.0f}"
                 f" repair_mbps={med(reps, 'repair_mbps'):.0f} put_mbps={med(reps, 'put_mbps'):.0f}"
                 f" get_mbps={med(reps, 'get_mbps'):.0f}"
                 f" repair_vs_get={med(reps, 'repair_mbps') / med(reps, 'get_mbps'):.2f}"
                 f" detect_s={med(reps, 'detect_s'):.2f}"
                 f" kill_to_repaired_s={med(reps, 'detect_s') + med(reps, 'repair_s'):.2f}")
    if drains:
        line += (f" drain_s={med(drains, 'drain_s'):.3f}"
                 f" drain_mbps={med(drains, 'drain_mbps'):.0f}")
    print(line)


if __name__ == "__main__":
    main()
