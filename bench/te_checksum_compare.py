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
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from auth_compare import start_target  # noqa: E402
from te_compare import ab_compare  # noqa: E402


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
    try:
        ab_compare(exe, [("off", seg, envs["off"]), ("on", seg, envs["on"])], args)
    finally:
        target.send_signal(signal.SIGTERM)
        target.wait(timeout=30)
    load1 = os.getloadavg()
    print(f"te_checksum_compare: load average {load0[0]:.2f} before, {load1[0]:.2f} after"
          + (" (loaded: provisional figures)" if max(load0[0], load1[0]) >
             (os.cpu_count() or 1) / 2 else ""), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
