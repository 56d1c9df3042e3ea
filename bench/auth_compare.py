#!/usr/bin/env python3
"""The Transfer Engine with and without the cluster secret, A/B in one sitting.

Starts two transfer_engine_bench targets (P2P handshake, TCP only), one
with MC_AUTH_SECRET and one without, then for each case alternates an
initiator without a secret against the plain target and one with the
secret against the other, --runs times, and prints the medians and the
ratio (secret / plain).  Then runs bench/auth_connect_bench for the
connection setup time.  Figures: docs/benchmarks.md.

usage: bench/auth_compare.py [--build build] [--runs 5] [--duration 3]
"""
import argparse
import os
import signal
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from te_compare import bench  # noqa: E402

SECRET = "bench-cluster-secret"


def start_target(exe, bufsize, env):
    t = subprocess.Popen([exe, "--mode=target", "--metadata_server=P2PHANDSHAKE",
                          "--local_server_name=127.0.0.1", f"--buffer_size={bufsize}"],
                         stdout=subprocess.PIPE, text=True, env=env)
    seg = t.stdout.readline().strip()
    if not seg:
        sys.exit("target did not start")
    return t, seg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=3)
    ap.add_argument("--buffer-size", type=int, default=256 << 20)
    args = ap.parse_args()
    exe = os.path.join(args.build, "tools", "transfer_engine_bench")
    plain_env = {k: v for k, v in os.environ.items() if not k.startswith("MC_AUTH_")}
    auth_env = dict(plain_env, MC_AUTH_SECRET=SECRET)
    tp, seg_p = start_target(exe, args.buffer_size, plain_env)
    ta, seg_a = start_target(exe, args.buffer_size, auth_env)
    cases = [("write", 4096, 128, 1), ("read", 4096, 128, 1),
             ("write", 4 << 20, 16, 1), ("read", 4 << 20, 16, 1)]
    try:
        for op, block, batch, threads in cases:
            res = {"plain": [], "secret": []}
            for i in range(args.runs):
                order = [("plain", seg_p, plain_env), ("secret", seg_a, auth_env)]
                if i % 2:
                    order.reverse()
                for name, seg, env in order:
                    old = dict(os.environ)
                    os.environ.clear()
                    os.environ.update(env)
                    try:
                        res[name].append(bench(exe, seg, op, block, batch, threads,
                                               args.duration, args.buffer_size))
                    finally:
                        os.environ.clear()
                        os.environ.update(old)
            m = {k: (statistics.median(r[0] for r in v), statistics.median(r[3] for r in v))
                 for k, v in res.items()}
            key = 1 if block < 65536 else 0
            unit = "req/s" if key else "GB/s"
            print(f"case op={op} block={block} batch={batch} threads={threads} "
                  f"plain_{unit}={m['plain'][key]:.2f} secret_{unit}={m['secret'][key]:.2f} "
                  f"ratio={m['secret'][key] / m['plain'][key]:.3f}", flush=True)
    finally:
        for t in (tp, ta):
            t.send_signal(signal.SIGTERM)
            t.wait(timeout=30)
    out = subprocess.run([os.path.join(args.build, "bench", "auth_connect_bench"),
                          "--conns", "2000", "--rounds", str(args.runs)],
                         capture_output=True, text=True, timeout=600)
    print(out.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
