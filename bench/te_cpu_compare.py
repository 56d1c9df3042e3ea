#!/usr/bin/env python3
"""CPU time per request of the Transfer Engine over TCP, two builds alternating.

Throughput of small requests on a 2-core virtual machine spreads over 40%
between runs of the same binary, too much to see a few per cent.  CPU time
per request (the target's and the initiator's user + system time over a run,
divided by the requests it completed) moves much less with scheduling, so
this compares two builds (say the tree before and after a change) by that.
Each round starts one target per build and runs every case against it.

usage: bench/te_cpu_compare.py --a BUILD_A --b BUILD_B [--rounds 5] [--duration 2]
"""
import argparse
import os, re, resource, subprocess, sys, statistics, time
ap = argparse.ArgumentParser()
ap.add_argument("--a", required=True, help="build directory A (e.g. the tree before)")
ap.add_argument("--b", required=True, help="build directory B")
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--duration", type=int, default=2)
args = ap.parse_args()
builds = {"a": args.a, "b": args.b}
tick = os.sysconf("SC_CLK_TCK")
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick
cases = [("write", 4096, 128), ("read", 4096, 128), ("write", 4096, 1), ("read", 4096, 1), ("write", 65536, 128), ("read", 65536, 128)]
res = {}
for r in range(args.rounds):
    for side, b in builds.items():
        exe = os.path.join(b, "tools", "transfer_engine_bench")
        t = subprocess.Popen([exe, "--mode=target", "--metadata_server=P2PHANDSHAKE", "--local_server_name=127.0.0.1",
                              f"--buffer_size={1<<30}"], stdout=subprocess.PIPE, text=True)
        seg = t.stdout.readline().strip()
        try:
            for op, block, batch in cases:
                c0 = cpu(t.pid)
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                p = subprocess.Popen([exe, "--mode=initiator", "--metadata_server=P2PHANDSHAKE", "--local_server_name=127.0.0.1",
                                      f"--segment_id={seg}", f"--operation={op}", f"--block_size={block}", f"--batch_size={batch}",
                                      "--threads=1", f"--duration={args.duration}", f"--buffer_size={64<<20}", "--latency", "--noshm"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                out, _ = p.communicate(timeout=60)
                c1 = cpu(t.pid)
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                ic = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
                rps = float(re.search(r"requests/s ([0-9.]+)", out).group(1))
                res.setdefault((op, block, batch, side), []).append((c1 - c0 + ic, rps))
        finally:
            t.terminate(); t.wait()
for k in sorted(res):
    v = res[k]
    per = [c / (r * args.duration) * 1e6 for c, r in v]
    print(k, f"median cpu-us/req {statistics.median(per):.3f}", "runs", [round(x, 3) for x in per], "rps", [round(r) for c, r in v])
