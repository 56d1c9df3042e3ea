#!/usr/bin/python3
"""Per-call overhead of the Python binding (mooncake.engine) over the C API.

Setup, one run: a C target process (``te_call_bench --serve``, a P2P engine
on 127.0.0.1 with 16 MiB registered) and two initiators that time the same
operations against it:

  C       ``te_call_bench --peer ... --interactive``: the exact C calls the
          binding makes (open_segment, batch_new, submit, batch_wait,
          batch_discard), one timed loop per request on its stdin;
  Python  this process: ``TransferEngine.transfer_sync_read`` and
          ``batch_transfer_sync_read`` through mooncake.engine.

Operations: read_4k (one 4 KiB sync read) and batch_128x64k (one batch sync
read of 128 x 64 KiB).  Both initiators are connected and warmed up first;
then short loops alternate between C and Python (which goes first flips
every round), so that both see the same machine load.  The figures printed
are the medians over the rounds of each loop's mean time per call, and the
overhead (Python - C) in microseconds and percent.  One machine-readable
line per op:

  py_overhead op=read_4k c_us=X py_us=Y overhead_us=Y-X overhead_pct=P rounds=R

and, for reference, the binding's own cost per call (argument conversion
and dispatch, no transfer), measured on an engine that was never
initialized:

  py_overhead op=read_4k binding_only_us=Z

Usage: /usr/bin/python3 bench/py_overhead.py [--build DIR] [--rounds R]
       [--iters N] [--batch-iters M] [--quick]
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_kv(line):
    return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)


def py_loop(te, peer, laddr, raddr, op, iters):
    """Mean microseconds per call of one timed loop."""
    if op == "read_4k":
        read = te.transfer_sync_read
        t0 = time.perf_counter_ns()
        for _ in range(iters):
            if read(peer, laddr, raddr, 4096) != 0:
                raise SystemExit("transfer_sync_read failed")
    else:
        piece, nb = 64 << 10, 128
        srcs = [laddr + i * piece for i in range(nb)]
        dsts = [raddr + i * piece for i in range(nb)]
        lens = [piece] * nb
        bread = te.batch_transfer_sync_read
        t0 = time.perf_counter_ns()
        for _ in range(iters):
            if bread(peer, srcs, dsts, lens) != 0:
                raise SystemExit("batch_transfer_sync_read failed")
    return (time.perf_counter_ns() - t0) / 1000.0 / iters


class CInitiator:
    def __init__(self, bench, peer, raddr):
        self.p = subprocess.Popen([str(bench), "--peer", peer, "--addr", hex(raddr), "--interactive"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise SystemExit("te_call_bench initiator did not start")
            if line.startswith("READY"):
                break

    def loop(self, op, iters):
        self.p.stdin.write(f"{op} {iters}\n")
        self.p.stdin.flush()
        kv = dict(x.split("=", 1) for x in self.p.stdout.readline().split())
        return float(kv["mean_us"])

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=20)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build"), help="meson build directory")
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--iters", type=int, default=500, help="4 KiB reads per loop")
    ap.add_argument("--batch-iters", type=int, default=10, help="batches per loop")
    ap.add_argument("--quick", action="store_true", help="a short smoke run")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.iters, args.batch_iters = 3, 100, 2

    build = Path(args.build).resolve()
    sys.path.insert(0, str(build / "python"))
    import numpy as np
    from mooncake.engine import TransferEngine

    bench = build / "bench" / "te_call_bench"
    if not os.access(bench, os.X_OK):
        raise SystemExit(f"{bench} not built")
    target = subprocess.Popen([str(bench), "--serve"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        line = target.stdout.readline()
        if not line.startswith("READY"):
            raise SystemExit(f"target did not start: {line!r}")
        info = parse_kv(line)
        peer, raddr = info["name"], int(info["addr"], 0)

        te = TransferEngine()
        if te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") != 0:
            raise SystemExit("initialize failed")
        local = np.full(128 * (64 << 10), 0x5A, np.uint8)
        laddr = local.ctypes.data
        if te.register_memory(laddr, local.nbytes) != 0:
            raise SystemExit("register_memory failed")

        iters = {"read_4k": args.iters, "batch_128x64k": args.batch_iters}
        for op in iters:  # warm up the Python side's connections
            py_loop(te, peer, laddr, raddr, op, max(1, iters[op] // 5))
        cinit = CInitiator(bench, peer, raddr)
        c_res = {op: [] for op in iters}
        py_res = {op: [] for op in iters}
        for r in range(args.rounds):
            for op, n in iters.items():
                if r % 2 == 0:
                    c_res[op].append(cinit.loop(op, n))
                    py_res[op].append(py_loop(te, peer, laddr, raddr, op, n))
                else:
                    py_res[op].append(py_loop(te, peer, laddr, raddr, op, n))
                    c_res[op].append(cinit.loop(op, n))
        cinit.close()
        for op in iters:
            c = statistics.median(c_res[op])
            p = statistics.median(py_res[op])
            print(f"py_overhead op={op} c_us={c:.2f} py_us={p:.2f} overhead_us={p - c:.2f} "
                  f"overhead_pct={100.0 * (p - c) / c:.1f} rounds={args.rounds} "
                  f"c_min_us={min(c_res[op]):.2f} py_min_us={min(py_res[op]):.2f}", flush=True)
        # The binding's own cost without any transfer: argument conversion and
        # the call, measured on an engine that was never initialized (it
        # returns right after parsing, before touching the C API).
        idle = TransferEngine()
        for op, n in (("read_4k", 200000), ("batch_128x64k", 20000)):
            t0 = time.perf_counter_ns()
            if op == "read_4k":
                f = idle.transfer_sync_read
                for _ in range(n):
                    f(peer, laddr, raddr, 4096)
            else:
                f = idle.batch_transfer_sync_read
                srcs = [laddr + i * (64 << 10) for i in range(128)]
                dsts = [raddr + i * (64 << 10) for i in range(128)]
                lens = [64 << 10] * 128
                for _ in range(n):
                    f(peer, srcs, dsts, lens)
            print(f"py_overhead op={op} binding_only_us={(time.perf_counter_ns() - t0) / 1000.0 / n:.3f}")
        te.unregister_memory(laddr)
    finally:
        target.stdin.close()
        try:
            target.wait(timeout=20)
        except subprocess.TimeoutExpired:
            target.kill()


if __name__ == "__main__":
    main()
