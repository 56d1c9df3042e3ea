#!/usr/bin/env python3
"""Mooncake Store's small objects against Redis at the same pipelining depth.

Issue 12 part 4: 4 KiB and 64 KiB put and get, one key per call and 32 keys
per call, beside redis-benchmark with the same value size and the same
depth, in one sitting (target: the store at >= 1.5x Redis each way).

Each round, for every --sizes entry, alternates:

1. redis-benchmark -p PORT -d SIZE -c 1 -P 1 -r K -n N -t set,get --csv
   against redis-server 7 (Debian's, on a free port, no persistence; no
   --threads, redis-benchmark's default of one thread);
2. the store's one-key calls: bench/store_bench --sizes=SIZE --window=K*SIZE
   --cases=zc,copy (put_from/get_into from and into registered memory,
   put/get from and into unregistered memory), a holder process of its own,
   every replica on the holder;
3. redis-benchmark as in 1 with -P 32;
4. the store's 32-key calls: store_bench ... --cases=batch,batchcopy
   --batch=32 (batch_put_from/batch_get_into and put_batch/batch_get);
5. unless --no-shm, 2 and 4 again without MC_SHM_DISABLE=1: the same-host
   transport the store uses by default between processes on one host;
6. unless --no-engine, after (or, every other round, before) the store rows
   of each depth, the Transfer Engine alone at that size and depth: one
   bench/te_call_bench --serve target (started once, its memory faulted in)
   and one te_call_bench --agg --block=SIZE --window=K*SIZE --batch=DEPTH
   initiator (one per size and depth, kept for the sitting): write phases
   (every block, DEPTH requests per synchronous call) and read phases
   (--get-rounds per write) for --duration seconds, MC_SHM_DISABLE=1.

Fair by construction: the same value size; the same depth (one request
in flight against one call, 32 pipelined requests against one 32-key call);
one connection (-c 1) against one calling thread; the same K keys (-r K:
Redis sets and gets random keys among K, the store puts, gets and removes a
window of K keys per round; N >= 10 K, so Redis's GETs find their keys).
Rows 2 and 4 keep the store on TCP (MC_SHM_DISABLE=1), as Redis is.  N is
sized from the previous run's rate (an unrecorded first run at N = 10 K
sizes the first) so that each redis-benchmark test takes about --duration
seconds, as each store case does.  Every figure is the
median over --runs rounds; the ratio is the store's keys/s over Redis's
requests/s (the same as GB/s over GB/s at one size).

The engine rows are the transport's own ceiling in the same sitting: the
same bytes per call (one request per call at depth 1, DEPTH requests per
call at depth DEPTH) with none of the store's work per object (master
exchanges, checksums, trailers, key bookkeeping).  Beside each tcp store
row the table shows the engine's keys/s (blocks over the phases' wall
time) for the same size and depth, writes against the put calls and reads
against the get calls, and the store's keys/s over them ("x engine").

--get-rounds N has the store read each window N times per put (gets of keys
read before, as redis-benchmark's GETs are; store_bench --get-rounds);
--only CASES runs only those store_bench case groups (zc, copy, batch,
batchcopy; e.g. --only batchcopy for put_batch/batch_get) and the Redis
runs at their depths.

--location-cache E adds, for every path, the store rows again with
MC_STORE_LOCATION_CACHE=E (the others then run with it 0), in alternating
order from round to round, labelled "tcp lc" / "shm lc".

usage: bench/store_small.py [--build build] [--runs 3] [--duration 2]
                            [--sizes 4k,64k] [--keys 1024] [--batch 32]
                            [--no-shm] [--no-engine] [--get-rounds 1]
                            [--location-cache E] [--only zc,copy,batch,batchcopy]
                            [--json] [--quick]
"""
import argparse
import csv
import io
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import master_rss  # noqa: E402
from store_aggregate import Proc, parse_size, phase, run_side, size_label  # noqa: E402
from store_compare import Redis  # noqa: E402

# store case -> the Redis test it is held against
REDIS_OP = {"put_from": "SET", "put": "SET", "batch_put_from": "SET", "put_batch": "SET",
            "get_into": "GET", "get": "GET", "batch_get_into": "GET", "batch_get": "GET"}
ORDER = list(REDIS_OP)


def parse_redis_csv(text):
    """redis-benchmark --csv output -> {test: {"rps", "p99_us"}}.

    Columns: test, rps, avg, min, p50, p95, p99, max (latencies in ms); the
    header row and blank lines are skipped."""
    out = {}
    for row in csv.reader(io.StringIO(text)):
        if len(row) < 7 or row[0] == "test":
            continue
        out[row[0]] = {"rps": float(row[1]), "p99_us": float(row[6]) * 1e3}
    return out


def redis_run(port, size, depth, keys, n):
    cmd = ["redis-benchmark", "-p", str(port), "-d", str(size), "-c", "1", "-P", str(depth),
           "-r", str(keys), "-n", str(n), "-t", "set,get", "--csv"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    rows = parse_redis_csv(r.stdout)
    if r.returncode or not {"SET", "GET"} <= rows.keys():
        sys.exit(f"store_small: {shlex.join(cmd)} failed:\n{r.stdout[-1000:]}{r.stderr[-1000:]}")
    return rows, cmd


def store_run(build, m, size, keys, cases, batch, duration, shm, get_rounds=1, cache=None):
    bench = master_rss.find(build, "bench/store_bench")
    window = keys * size
    cmd = [bench, f"--master={m.addr}", f"--metadata={m.meta_uri}", "--runs=1",
           f"--duration={duration}", f"--sizes={size}", f"--window={window}",
           f"--segment={max(4 * window, 64 << 20)}", f"--cases={cases}", f"--batch={batch}",
           "--json"]
    if get_rounds != 1:  # an older store_bench has no such flag
        cmd.append(f"--get-rounds={get_rounds}")
    env = dict(os.environ)
    if cache is not None:
        env["MC_STORE_LOCATION_CACHE"] = str(cache)
    if shm:
        env.pop("MC_SHM_DISABLE", None)
    else:
        env["MC_SHM_DISABLE"] = "1"
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if r.returncode:
        sys.exit(f"store_small: {shlex.join(cmd)} failed:\n{r.stderr[-3000:]}")
    return [json.loads(line) for line in r.stdout.splitlines()], cmd


class Engine:
    """The Transfer Engine alone over TCP: one te_call_bench --serve target of
    span bytes and one te_call_bench --agg initiator per (size, depth)."""

    def __init__(self, build, span):
        self.tb = master_rss.find(build, "bench/te_call_bench")
        self.env = dict(os.environ, MC_SHM_DISABLE="1")
        self.target = Proc([self.tb, "--serve", f"--size={span}"], "READY name=", self.env)
        self.init = {}

    def run(self, size, depth, keys, duration, get_rounds):
        """Write and read phases of keys size-byte blocks, depth per call, for
        duration seconds: ({"put"|"get": run_side's figures}, argv)."""
        c = self.init.get((size, depth))
        if c is None:
            t = self.target
            c = Proc([self.tb, "--agg", f"--peer={t.field('name')}", f"--addr={t.field('addr')}",
                      f"--block={size}", f"--window={keys * size}", f"--batch={depth}"],
                     "READY", self.env)
            self.init[(size, depth)] = c
            for cmd in ("write", "read"):  # untimed: first touches
                phase([c], cmd)
        res = run_side([c], False, duration, get_rounds, (c.p.pid, self.target.p.pid), size)
        return res, c.argv

    def stop(self):
        for c in self.init.values():
            c.stop()
        self.target.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=2.0,
                    help="seconds per store case and, roughly, per redis-benchmark test")
    ap.add_argument("--sizes", default="4k,64k")
    ap.add_argument("--keys", type=int, default=1024,
                    help="key space: redis-benchmark -r K, the store's window of K keys")
    ap.add_argument("--batch", type=int, default=32, help="keys per batch call, -P of Redis")
    ap.add_argument("--no-shm", action="store_true",
                    help="skip the store's same-host transport rows")
    ap.add_argument("--no-engine", action="store_true",
                    help="skip the engine's own rate (te_call_bench) beside the tcp rows")
    ap.add_argument("--get-rounds", type=int, default=1,
                    help="store reads of the window per put (store_bench --get-rounds)")
    ap.add_argument("--location-cache", type=int, default=None,
                    help="also run the store rows with MC_STORE_LOCATION_CACHE=E")
    ap.add_argument("--only", default="zc,copy,batch,batchcopy",
                    help="store_bench case groups to run (zc, copy, batch, batchcopy)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="one short round (smoke)")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.duration = 1, 0.3
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    only = args.only.split(",")
    if not set(only) <= {"zc", "copy", "batch", "batchcopy"}:
        sys.exit("store_small: --only takes zc, copy, batch and batchcopy")
    groups = [(d, ",".join(c for c in cs if c in only))
              for d, cs in ((1, ("zc", "copy")), (args.batch, ("batch", "batchcopy")))]
    groups = [(d, c) for d, c in groups if c]
    if args.keys < args.batch or args.keys % args.batch:
        sys.exit("store_small: --keys must be a multiple of --batch")
    if not (shutil.which("redis-server") and shutil.which("redis-benchmark")):
        sys.exit("store_small: redis-server and redis-benchmark are needed "
                 "(apt-get install redis-server redis-tools)")
    paths = ["tcp"] + ([] if args.no_shm else ["shm"])
    if args.location_cache is not None:
        paths = [p + sfx for p in paths for sfx in ("", " lc")]

    store_s, redis_s, engine_s, cmds = {}, {}, {}, {}
    units = paths + ([] if args.no_engine else ["engine"])
    rd = Redis()
    m = master_rss.Master(master_rss.find(args.build, "tools/mooncake_master",
                                          "src/master/mooncake_master"))
    eng = None
    try:
        if not args.no_engine:
            eng = Engine(args.build, args.keys * max(sizes))
            cmds[("engine target",)] = eng.target.argv
        # Requests per redis-benchmark run: sized by an unrecorded first run
        # (which also fills the K keys), then re-sized from each run's rate.
        nreq = {}
        for size in sizes:
            for depth, _ in groups:
                rows, _ = redis_run(rd.port, size, depth, args.keys, 10 * args.keys)
                rps = min(rows["SET"]["rps"], rows["GET"]["rps"])
                nreq[(size, depth)] = max(10 * args.keys, int(rps * args.duration))
        for i in range(args.runs):
            print(f"store_small: round {i + 1}/{args.runs}", file=sys.stderr, flush=True)
            for size in sizes:
                for depth, cases in groups:
                    rows, cmd = redis_run(rd.port, size, depth, args.keys, nreq[(size, depth)])
                    cmds[("redis", size, depth)] = cmd
                    for op, v in rows.items():
                        redis_s.setdefault((op, size, depth), []).append(v)
                    rps = min(rows["SET"]["rps"], rows["GET"]["rps"])
                    nreq[(size, depth)] = max(10 * args.keys, int(rps * args.duration))
                    for path in (units if i % 2 == 0 else units[::-1]):
                        if path == "engine":
                            res, cmd = eng.run(size, depth, args.keys, args.duration,
                                               args.get_rounds)
                            cmds[("engine", size, depth)] = cmd
                            for op, v in res.items():
                                v["keys_per_s"] = v["gbps"] * 1e9 / size
                                engine_s.setdefault((op, size, depth), []).append(v)
                            continue
                        cache = None
                        if args.location_cache is not None:
                            cache = args.location_cache if path.endswith(" lc") else 0
                        js, cmd = store_run(args.build, m, size, args.keys, cases, args.batch,
                                            args.duration, path.startswith("shm"),
                                            args.get_rounds, cache)
                        cmds[("store", size, depth, path)] = (cmd, cache)
                        for j in js:
                            j["keys_per_s"] = j["gbps"] * 1e9 / size
                            store_s.setdefault((j["case"], size, path), []).append(j)
    finally:
        if eng:
            eng.stop()
        m.stop()
        rd.stop()

    def med(samples):
        return {k: statistics.median(s[k] for s in samples)
                for k, v in samples[0].items() if isinstance(v, (int, float))}

    store = {k: dict(v[0], **med(v)) for k, v in store_s.items()}
    redis = {k: med(v) for k, v in redis_s.items()}
    engine = {k: med(v) for k, v in engine_s.items()}
    if args.json:
        print(json.dumps({
            "store": {f"{k[0]}/{k[1]}/{k[2]}": v for k, v in store.items()},
            "redis": {f"{k[0]}/{k[1]}/{k[2]}": v for k, v in redis.items()},
            "engine": {f"{k[0]}/{k[1]}/{k[2]}": v for k, v in engine.items()}}))
        return

    print(f"runs={args.runs} duration={args.duration:g}s (medians), keys={args.keys}, "
          f"one connection / one calling thread, {os.cpu_count()} CPU cores")
    print()
    print("| size | depth | store call | path | store keys/s | store GB/s | store p99 us/call | "
          "store CPU ms/GB | store faults/MiB | Redis | Redis req/s | Redis p99 us | x Redis |"
          + ("" if args.no_engine else " engine keys/s | x engine |"))
    print("|" + "---|" * (13 if args.no_engine else 15))
    for size in sizes:
        for path in paths:
            for case in ORDER:
                st = store.get((case, size, path))
                if not st:
                    continue
                depth = st["batch"]
                r = redis[(REDIS_OP[case], size, depth)]
                cpu = f"{st['cpu_ms_per_gb']:.0f}" if "cpu_ms_per_gb" in st else "-"
                flt = f"{st['faults_per_mib']:.1f}" if "faults_per_mib" in st else "-"
                print(f"| {size_label(size)} | {depth} | {case} | {path} | "
                      f"{st['keys_per_s']:.0f} | {st['gbps']:.3f} | {st['p99_us']:.0f} | "
                      f"{cpu} | {flt} | "
                      f"{REDIS_OP[case]} -P {depth} | {r['rps']:.0f} | {r['p99_us']:.0f} | "
                      f"{st['keys_per_s'] / r['rps']:.2f}x |", end="")
                if args.no_engine:
                    print()
                    continue
                e = engine.get(("put" if REDIS_OP[case] == "SET" else "get", size, depth))
                if e and path.startswith("tcp"):
                    print(f" {e['keys_per_s']:.0f} | {st['keys_per_s'] / e['keys_per_s']:.2f}x |")
                else:
                    print(" - | - |")
    print()
    print("target: 4 KiB and 64 KiB put and get >= 1.5x Redis at the same depth (tcp rows)")
    print("depth 1: one call, one key / one request in flight; depth 32: one call of 32 keys /")
    print("  32 pipelined requests; Redis p99 is per request as redis-benchmark reports it")
    print("path tcp: MC_SHM_DISABLE=1 (as Redis, over loopback TCP); shm: the store's default")
    print("  same-host transport between two processes on one host")
    print("store CPU: the calling process's (calling thread and engine workers, not the")
    print("  holder's) per GB moved; faults: its minor page faults per MiB moved")
    print("store: keys over the time inside the calls (key names, stamps and the round's one")
    print("  batch remove are outside it); Redis: requests over the test's wall time, one")
    print("  redis-benchmark thread (no --threads), SET overwriting and GET reading K keys")
    if not args.no_engine:
        print("engine (tcp rows): te_call_bench --agg against --serve, MC_SHM_DISABLE=1, one")
        print("  initiator, the same K blocks of SIZE bytes, DEPTH requests per synchronous call")
        print("  (one batch: new, submit, wait, discard); writes beside puts, reads beside gets;")
        print("  blocks over the phases' wall time; x engine = store keys/s / engine keys/s")
    if args.get_rounds != 1:
        print(f"store gets: each window read {args.get_rounds} times per put (--get-rounds)")
    if args.location_cache is not None:
        print(f"path ... lc: MC_STORE_LOCATION_CACHE={args.location_cache} (the others 0)")
    print("checksums: store MC_STORE_VERIFY=" + os.environ.get("MC_STORE_VERIFY", "1 (default)")
          + " (puts hash every byte, reads check it); Redis: none")
    print()
    print("commands (last round; redis-server --port PORT --bind 127.0.0.1 --save '' "
          "--appendonly no):")
    for k, cmd in cmds.items():
        env = ""
        if k[0].startswith("engine"):
            env = "MC_SHM_DISABLE=1 "
        if k[0] == "store":
            cmd, cache = cmd
            env = "MC_SHM_DISABLE=1 " if k[3].startswith("tcp") else ""
            if cache is not None:
                env += f"MC_STORE_LOCATION_CACHE={cache} "
        print(f"  {env}{shlex.join(cmd)}")


if __name__ == "__main__":
    main()
