#!/usr/bin/env python3
"""Transfer Engine throughput with and without per-transfer checksums
(MC_TE_CHECKSUM), A/B in one sitting.

Starts one transfer_engine_bench target (P2P handshake, TCP only; a target
always checks what it is sent checksummed), then for each case alternates
an initiator with MC_TE_CHECKSUM=0 and one with MC_TE_CHECKSUM=1, --runs
times (the order flipped every run), and prints the medians, each side's
spread (min-max) and the ratio (on / off): requests/s for 4 KiB blocks,
GB/s for 4 MiB.  The load average is printed before and after: a figure
taken with a load above half the cores is provisional.  Figures:
docs/bench/issue-16-trust.md.

usage: bench/te_checksum_compare.py [--build build] [--runs 5] [--duration 3] [--json]
"""
import argparse
import json
import os
import signal
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from auth_compare import start_target  # noqa: E402
from te_compare import bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=3)
    ap.add_argument("--buffer-size", type=int, default=256 << 20)
    ap.add_argument("--json", action="store_true", help="one JSON object per case")
    args = ap.parse_args()
    load0 = os.getloadavg()
    print(f"te_checksum_compare: load average {load0[0]:.2f} on {os.cpu_count()} cpus",
          file=sys.stderr, flush=True)
    exe = os.path.join(args.build, "tools", "transfer_engine_bench")
    base = {k: v for k, v in os.environ.items() if k != "MC_TE_CHECKSUM"}
    envs = {"off": dict(base, MC_TE_CHECKSUM="0"), "on": dict(base, MC_TE_CHECKSUM="1")}
    target, seg = start_target(exe, args.buffer_size, envs["off"])
    cases = [("write", 4096, 128, 1), ("read", 4096, 128, 1),
             ("write", 4 << 20, 16, 1), ("read", 4 << 20, 16, 1)]
    try:
        for op, block, batch, threads in cases:
            res = {"off": [], "on": []}
            for i in range(args.runs):
                order = ["off", "on"] if i % 2 == 0 else ["on", "off"]
                for name in order:
                    old = dict(os.environ)
                    os.environ.clear()
                    os.environ.update(envs[name])
                    try:
                        res[name].append(bench(exe, seg, op, block, batch, threads,
                                               args.duration, args.buffer_size))
                    finally:
                        os.environ.clear()
                        os.environ.update(old)
            col = 3 if block < 65536 else 0  # requests/s for small blocks, else GB/s
            unit = "req/s" if col else "GB/s"
            v = {k: [r[col] for r in rs] for k, rs in res.items()}
            med = {k: statistics.median(x) for k, x in v.items()}
            row = {"op": op, "block": block, "batch": batch, "threads": threads,
                   "unit": unit, "runs": args.runs,
                   "off": round(med["off"], 3), "on": round(med["on"], 3),
                   "off_min": round(min(v["off"]), 3), "off_max": round(max(v["off"]), 3),
                   "on_min": round(min(v["on"]), 3), "on_max": round(max(v["on"]), 3),
                   "ratio": round(med["on"] / med["off"], 3)}
            if args.json:
                print(json.dumps(row), flush=True)
            else:
                print(f"case op={op} block={block} batch={batch} threads={threads} "
                      f"off_{unit}={row['off']:.2f} ({row['off_min']:.2f}-{row['off_max']:.2f}) "
                      f"on_{unit}={row['on']:.2f} ({row['on_min']:.2f}-{row['on_max']:.2f}) "
                      f"ratio={row['ratio']:.3f}", flush=True)
    finally:
        target.send_signal(signal.SIGTERM)
        target.wait(timeout=30)
    load1 = os.getloadavg()
    print(f"te_checksum_compare: load average {load0[0]:.2f} before, {load1[0]:.2f} after"
          + (" (loaded: provisional figures)" if max(load0[0], load1[0]) >
             (os.cpu_count() or 1) / 2 else ""), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
