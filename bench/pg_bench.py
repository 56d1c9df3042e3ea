#!/usr/bin/python3
"""pg_bench: all_reduce and all_gather on mooncake-cpu against gloo, same run.

    PYTHONPATH=build/python /usr/bin/python3 bench/pg_bench.py \
        [--worlds 2,4] [--min-size 1K] [--max-size 256M] [--rounds 3] [--port 24100]

For each world size, the ranks of one backend start together (one process per
rank), run every collective and size, and exit; the backends alternate
(mooncake-cpu, gloo, mooncake-cpu, ...) for --rounds rounds, and the table
gives the median over rounds of each figure.  Sizes follow nccl-tests: the
all_reduce tensor, the all_gather output (list form: gloo of torch 1.13 has
no all_gather_into_tensor); float32.  time is the slowest
rank's mean per operation; algbw = size / time; busbw = algbw * 2(n-1)/n for
all_reduce and * (n-1)/n for all_gather.  ratio = gloo time / mooncake time
(> 1: mooncake-cpu is faster).

A/B of two mooncake packages in the same run: a backend written NAME@DIR runs
its ranks with PYTHONPATH=DIR (a directory holding a `mooncake` package, e.g.
a copy of build/python with another pg.py and _pg_*.py), e.g.
    --backends mooncake-cpu@/tmp/old,mooncake-cpu,gloo
With gloo among three or more backends, one ratio column per other backend
(gloo time / its time).
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_size(s):
    s = s.strip().upper()
    for suf, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if s.endswith(suf):
            return int(s[:-1]) * m
    return int(s)


def fmt_size(n):
    for suf, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m}{suf}"
    return str(n)


def rank_main(args):
    import torch
    import torch.distributed as dist
    if args.backend.startswith("mooncake"):
        import mooncake.pg  # noqa: F401  registers the backend
    dist.init_process_group(args.backend, rank=args.rank, world_size=args.world,
                            init_method=f"tcp://127.0.0.1:{args.port}")
    n = args.world
    res = {}
    sizes = []
    s = args.min_size
    while s <= args.max_size:
        sizes.append(s)
        s *= 4
    for coll in ("all_reduce", "all_gather"):
        for size in sizes:
            if coll == "all_reduce":
                t = torch.ones(size // 4)

                def op():
                    dist.all_reduce(t)
            else:
                # the list form: gloo of torch 1.13 has no all_gather_into_tensor
                outs = [torch.empty(size // 4 // n) for _ in range(n)]
                inp = torch.ones(size // 4 // n)

                def op():
                    dist.all_gather(outs, inp)
            # warm up (5 operations: the first ones of a size pay page faults and,
            # for the first size, connection set-up), then iterate for about
            # --seconds (at least 3 times)
            for _ in range(5 if size <= (1 << 20) else 1):
                op()
            dist.barrier()
            t0 = time.perf_counter()
            op()
            one = time.perf_counter() - t0
            iters = max(3, min(1000, int(args.seconds / max(one, 1e-6))))
            it = torch.tensor([iters], dtype=torch.int64)
            dist.all_reduce(it, op=dist.ReduceOp.MAX)  # every rank runs the same count
            iters = int(it.item())
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                op()
            dt = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            res[f"{coll}:{size}"] = dt.item()
    if args.rank == 0:
        print("RESULT " + json.dumps(res), flush=True)
    dist.barrier()
    os._exit(0)


def free_port_from(port):
    """The first port from PORT that 127.0.0.1 can listen on (a port of the
    range may be some other process's ephemeral port)."""
    while True:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                port += 1


def run_world(label, world, args):
    args.port = free_port_from(args.port)
    env = dict(os.environ, MC_LOG_LEVEL="error", OMP_NUM_THREADS="1")
    backend, _, path = label.partition("@")
    if path:
        env["PYTHONPATH"] = path
    cmd = [sys.executable, os.path.abspath(__file__), "--rank-main", "--backend", backend,
           "--world", str(world), "--port", str(args.port), "--min-size", str(args.min_size),
           "--max-size", str(args.max_size), "--seconds", str(args.seconds)]
    procs = [subprocess.Popen(cmd + ["--rank", str(r)], env=env, stdout=subprocess.PIPE, text=True)
             for r in range(world)]
    # a rank that fails (its store's port taken, say) leaves the others waiting
    # for it forever: stop them all then
    while any(p.poll() is None for p in procs):
        if any(p.returncode not in (None, 0) for p in procs):
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.1)
    out = [p.communicate()[0] for p in procs]
    for p, o in zip(procs, out):
        if p.returncode != 0:
            raise SystemExit(f"{label} world {world}: a rank failed ({p.returncode}):\n{o}")
    for line in out[0].splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise SystemExit(f"{label} world {world}: no result")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--min-size", default="1K")
    ap.add_argument("--max-size", default="256M")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=0.3, help="timed loop length per size")
    ap.add_argument("--port", type=int, default=24100)
    ap.add_argument("--backends", default="mooncake-cpu,gloo")
    ap.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--backend", help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.min_size, args.max_size = parse_size(str(args.min_size)), parse_size(str(args.max_size))
    if args.rank_main:
        return rank_main(args)
    backends = args.backends.split(",")
    for world in (int(w) for w in args.worlds.split(",")):
        runs = {b: [] for b in backends}
        for r in range(args.rounds):
            order = backends if r % 2 == 0 else backends[::-1]
            for b in order:
                runs[b].append(run_world(b, world, args))
                args.port += 1
        print(f"\n## world {world}, float32, median of {args.rounds} rounds "
              f"(backends alternating)\n")
        head = "| collective | size |"
        for b in backends:
            head += f" {b} time (us) | algbw GB/s | busbw GB/s |"
        others = [b for b in backends if b != "gloo"] if "gloo" in backends else []
        if len(backends) == 2:
            head += " ratio |"
        elif others:
            head += "".join(f" gloo / {b} |" for b in others)
        print(head)
        print("|" + "---|" * (head.count("|") - 1))
        for key in runs[backends[0]][0]:
            coll, size = key.split(":")
            size = int(size)
            factor = 2 * (world - 1) / world if coll == "all_reduce" else (world - 1) / world
            row = f"| {coll} | {fmt_size(size)} |"
            med = {}
            for b in backends:
                t = statistics.median(x[key] for x in runs[b])
                med[b] = t
                alg = size / t / 1e9
                row += f" {t * 1e6:.1f} | {alg:.3f} | {alg * factor:.3f} |"
            if len(backends) == 2:
                row += f" {med[backends[1]] / med[backends[0]]:.2f} |"
            elif others:
                row += "".join(f" {med['gloo'] / med[b]:.2f} |" for b in others)
            print(row, flush=True)


if __name__ == "__main__":
    main()
