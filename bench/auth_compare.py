#!/usr/bin/env python3
"""The Transfer Engine with and without the cluster secret, A/B in one sitting.

Starts two transfer_engine_bench targets (P2P handshake, TCP only), one
with MC_AUTH_SECRET and one without, then for each case alternates an
initiator without a secret against the plain target and one with the
secret against the other, --runs times (the order flipped every run),
and prints the medians, each side's spread (min-max) and the ratio
(secret / plain).  Then runs bench/auth_connect_bench for the connection
setup time.  The load average is printed before and after: a figure taken
with a load above half the cores is provisional.  --shm runs the
initiators over the same-host transport (which also authenticates) instead
of TCP.

Two targets are two processes, and on a small machine two processes of the
same program can differ by a few percent (where their threads and memory
landed).  --aa adds a second target without a secret (side "plain2") as
the control: its ratio to "plain" is what the setup alone gives, and a
secret's cost is only what lies outside it.  --fresh starts new targets
before every run (the first target started alternating), so that no one
process's placement weighs on every run of a side.  Figures:
docs/benchmarks.md.

usage: bench/auth_compare.py [--build build] [--runs 5] [--duration 3] [--shm] [--aa]
                             [--fresh] [--blocks 4096] [--json]
"""
import argparse
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from te_compare import ab_compare  # noqa: E402

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
    ap.add_argument("--shm", action="store_true", help="same-host transport instead of TCP")
    ap.add_argument("--aa", action="store_true",
                    help="a second target without a secret as the A/A control")
    ap.add_argument("--fresh", action="store_true", help="new targets before every run")
    ap.add_argument("--blocks", type=lambda v: [int(x) for x in v.split(",")], default=None,
                    help="only the cases of these block sizes (bytes, comma-separated)")
    ap.add_argument("--json", action="store_true", help="one JSON object per case")
    args = ap.parse_args()
    extra = ("--shm",) if args.shm else ()  # after te_compare's --noshm: the last one wins
    load0 = os.getloadavg()
    print(f"auth_compare: load average {load0[0]:.2f} on {os.cpu_count()} cpus, "
          f"transport {'shm' if args.shm else 'tcp'}", file=sys.stderr, flush=True)
    exe = os.path.join(args.build, "tools", "transfer_engine_bench")
    plain_env = {k: v for k, v in os.environ.items() if not k.startswith("MC_AUTH_")}
    auth_env = dict(plain_env, MC_AUTH_SECRET=SECRET)
    sides = [("plain", plain_env), ("secret", auth_env)]
    if args.aa:
        sides.insert(1, ("plain2", plain_env))
    targets = {}

    def stop_all():
        for t, _ in targets.values():
            t.send_signal(signal.SIGTERM)
            t.wait(timeout=30)
        targets.clear()

    def start_all(i):
        stop_all()
        for name, env in (sides if i % 2 == 0 else sides[::-1]):
            targets[name] = start_target(exe, args.buffer_size, env)
        return {name: seg for name, (_, seg) in targets.items()}

    try:
        # with --fresh every run starts its own (ab_compare's per-run hook)
        segs = {} if args.fresh else start_all(0)
        ab_compare(exe, [(name, segs.get(name), env) for name, env in sides], args, extra,
                   {"transport": "shm" if args.shm else "tcp", "fresh": args.fresh},
                   per_run=start_all if args.fresh else None)
    finally:
        stop_all()
    out = subprocess.run([os.path.join(args.build, "bench", "auth_connect_bench"),
                          "--conns", "2000", "--rounds", str(args.runs)],
                         capture_output=True, text=True, timeout=600)
    print(out.stdout.strip().splitlines()[-1], flush=True)
    load1 = os.getloadavg()
    print(f"auth_compare: load average {load0[0]:.2f} before, {load1[0]:.2f} after"
          + (" (loaded: provisional figures)" if max(load0[0], load1[0]) >
             (os.cpu_count() or 1) / 2 else ""), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
