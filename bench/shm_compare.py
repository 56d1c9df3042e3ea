#!/usr/bin/env python3
"""The same-host transport against TCP and a single-thread memcpy, in one sitting.

Starts one transfer_engine_bench target (P2P handshake, --buffer-size bytes),
then for each case alternates, --runs times:

  memcpy  te_local_bench's single-thread memcpy of --buffer-size bytes in
          block-sized calls between two prefaulted buffers (larger than the
          caches), the reference;
  shm     transfer_engine_bench as a second process over the same-host path
          (--shm, the default);
  tcp     the same with --noshm (MC_SHM_DISABLE=1: loopback TCP).

and prints the medians, their ratios to memcpy, and the load average before
and after (the machine may be shared; quote medians with the load).

usage: bench/shm_compare.py [--build build] [--runs 5] [--duration 3] [--quick]
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys


def memcpy_ref(build, block, size):
    exe = os.path.join(build, "bench", "te_local_bench")
    out = subprocess.run([exe, "--size", str(size), "--min_block", str(block), "--max_block",
                          str(block), "--runs", "1"], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"te_local_bench: {out.stderr.strip()}")
    return float(re.search(r"memcpy_GB/s=([0-9.]+)", out.stdout).group(1))


def bench(exe, seg, op, block, batch, threads, duration, bufsize, shm):
    cmd = [exe, "--mode=initiator", "--metadata_server=P2PHANDSHAKE",
           "--local_server_name=127.0.0.1", f"--segment_id={seg}", f"--operation={op}",
           f"--block_size={block}", f"--batch_size={batch}", f"--threads={threads}",
           f"--duration={duration}", f"--buffer_size={bufsize}", "--shm" if shm else "--noshm"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 120)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()}")
    return float(re.search(r"throughput ([0-9.]+) GB/s", out.stdout).group(1))


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=3)
    ap.add_argument("--buffer-size", type=int, default=256 << 20,
                    help="bytes registered on each side, and copied by the memcpy reference")
    ap.add_argument("--batch", type=int, default=0,
                    help="requests per batch (default: buffer-size / block)")
    ap.add_argument("--filter", default="", help="only cases whose description matches")
    ap.add_argument("--quick", action="store_true", help="one short run per case (CI smoke)")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.duration = 1, 0.5
    exe = os.path.join(args.build, "tools", "transfer_engine_bench")
    target = subprocess.Popen([exe, "--mode=target", "--metadata_server=P2PHANDSHAKE",
                               "--local_server_name=127.0.0.1", f"--buffer_size={args.buffer_size}"],
                              stdout=subprocess.PIPE, text=True)
    try:
        seg = target.stdout.readline().strip()
        if not seg:
            sys.exit("target did not start")
        print(f"# shm_compare: {args.buffer_size} B buffers, median of {args.runs} runs of "
              f"{args.duration} s, {os.cpu_count()} cpus, load before {loadavg()}", flush=True)
        cases = [(op, block) for block in (1 << 20, 4 << 20, 16 << 20) for op in ("write", "read")]
        for op, block in cases:
            batch = args.batch or max(1, args.buffer_size // block)
            desc = f"op={op} block={block} batch={batch} threads=1"
            if args.filter and not re.search(args.filter, desc):
                continue
            mc, sh, tc = [], [], []
            for _ in range(args.runs):
                mc.append(memcpy_ref(args.build, block, args.buffer_size))
                sh.append(bench(exe, seg, op, block, batch, 1, args.duration, args.buffer_size, True))
                tc.append(bench(exe, seg, op, block, batch, 1, args.duration, args.buffer_size, False))
            m, s, t = statistics.median(mc), statistics.median(sh), statistics.median(tc)
            print(f"case {desc} memcpy_GB/s={m:.2f} shm_GB/s={s:.2f} tcp_GB/s={t:.2f} "
                  f"shm/memcpy={s / m:.2f} tcp/memcpy={t / m:.2f} "
                  f"runs_shm={','.join(f'{x:.2f}' for x in sh)} "
                  f"runs_memcpy={','.join(f'{x:.2f}' for x in mc)} load={loadavg()}", flush=True)
    finally:
        target.send_signal(signal.SIGTERM)
        target.wait(timeout=30)


if __name__ == "__main__":
    main()
