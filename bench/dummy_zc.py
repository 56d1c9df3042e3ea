#!/usr/bin/python3
"""Zero-copy put_from/get_into through a dummy client against a real client.

A master, a holder (mooncake_client B, whose segment takes every object)
and the daemon the dummy attaches to (mooncake_client A, a small segment of
its own), all over TCP.  This process holds a real pure client and a dummy
on A; both write to and read from B's segment, so the dummy's bytes take
the same TCP path from A's engine as the real client's take from its own:
the difference is the dummy's hop (a Unix-socket request, the daemon's
call).  For 1 MiB and 4 MiB objects, 16 keys at a time, it alternates 1 s
loops of put_from (fresh keys, removed after) and get_into on each client
and prints the median GB/s of each and the dummy/real ratio.  The batch
forms (batch_put_from, batch_get_into: one request for the 16 keys) and
copy-based put/get are measured on both clients too.

Then the aggregate (--part agg): 8 dummy processes on daemon A against one
real client in a process of its own, each process with 8 keys of 1 MiB on
B, alternating: the real client alone for --seconds, then the 8 dummies at
once (started together on one line of stdin each) for as long; the sum of
the dummies' bytes over the longest of their times against the real
client's, for get_into and for upsert_from (the same keys rewritten).

Then the latency (--part lat): one call at a time, alternating real and
dummy call by call, --calls of each: get_into and put_from of 1 MiB and
4 MiB, the copy-based get and put of as much, and is_exist of a present key
(one master round trip, no bytes); the medians, their dummy-real difference
(what the dummy's hop costs a call), and dummy/real as a throughput ratio
(the real median over the dummy's).  Interleaved call by call, this ratio
holds on a loaded machine where the 1 s loops of --part zc swing 5x.

usage: bench/dummy_zc.py [--build build] [--rounds 5] [--part zc|agg|lat|all]
                         [--daemon-port P] [--calls 400]
"""
import argparse
import ctypes
import os
import random
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def daemon(exe, m, port, size):
    p = subprocess.Popen([exe, "--host=127.0.0.1", f"--metadata_server={m.meta_uri}",
                          f"--master_server_address={m.addr}", f"--global_segment_size={size}",
                          f"--port={port}"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    pat = re.compile(r"mooncake_client serving segment=(\S+)")
    for line in p.stderr:
        mm = pat.search(line.decode(errors="replace"))
        if mm:
            return p, mm.group(1)
    raise RuntimeError("mooncake_client did not start")


AGG_KEYS = 8
AGG_SIZE = 1 << 20


def worker(args):
    """One process of the aggregate: a real client or a dummy, 8 keys of its own."""
    from mooncake.store import (MooncakeDistributedStore, MooncakeHostMemAllocator,
                                ReplicateConfig)
    c, alloc = MooncakeDistributedStore(), MooncakeHostMemAllocator()
    if args.worker == "real":
        rc = c.setup("127.0.0.1", args.meta, 0, 16 << 20, "tcp", "", args.master)
    else:
        rc = c.setup_dummy(0, 16 << 20, f"127.0.0.1:{args.port}")
    assert rc == 0, rc
    buf = alloc.alloc(2 * AGG_KEYS * AGG_SIZE)
    assert buf and c.register_buffer(buf, 2 * AGG_KEYS * AGG_SIZE) == 0
    ctypes.memmove(buf, os.urandom(AGG_KEYS * AGG_SIZE), AGG_KEYS * AGG_SIZE)
    cfg = ReplicateConfig()
    cfg.preferred_segment = args.holder
    keys = [f"agg-{args.tag}-{i}" for i in range(AGG_KEYS)]
    src = [buf + i * AGG_SIZE for i in range(AGG_KEYS)]
    dst = buf + AGG_KEYS * AGG_SIZE
    for k, p in zip(keys, src):
        assert c.upsert_from(k, p, AGG_SIZE, cfg) == 0
    print("ready", flush=True)
    for line in sys.stdin:
        op, secs = line.split()
        t0, total = time.perf_counter(), 0
        while time.perf_counter() - t0 < float(secs):
            for k, p in zip(keys, src):
                if op == "get_into":
                    assert c.get_into(k, dst, AGG_SIZE) == AGG_SIZE
                else:
                    assert c.upsert_from(k, p, AGG_SIZE, cfg) == 0
                total += AGG_SIZE
        print(f"{total} {time.perf_counter() - t0}", flush=True)
    c.close()
    alloc.free(buf)


def aggregate(args, build, m, port, bname):
    base = [sys.executable, os.path.abspath(__file__), "--build", build, "--meta", m.meta_uri,
            "--master", m.addr, "--port", str(port), "--holder", bname]
    env = {**os.environ, "PYTHONPATH": os.path.join(build, "python")}

    def spawn(kind, tag):
        p = subprocess.Popen(base + ["--worker", kind, "--tag", tag], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)
        assert p.stdout.readline() == "ready\n", f"{kind} worker {tag} did not start"
        return p

    real = spawn("real", "r")
    dummies = [spawn("dummy", f"d{i}") for i in range(8)]
    res = {}
    try:
        for _ in range(args.rounds):
            for op in ("get_into", "upsert_from"):
                for who, procs in (("real", [real]), ("8dummies", dummies)):
                    for p in procs:  # all of a side start together
                        p.stdin.write(f"{op} {args.seconds}\n")
                        p.stdin.flush()
                    got = [p.stdout.readline().split() for p in procs]
                    total = sum(int(g[0]) for g in got)
                    secs = max(float(g[1]) for g in got)
                    res.setdefault((op, who), []).append(total / secs / 1e9)
        for op in ("get_into", "upsert_from"):
            r, d = statistics.median(res[(op, "real")]), statistics.median(res[(op, "8dummies")])
            for who in ("real", "8dummies"):
                v = res[(op, who)]
                print(f"dummy_agg size={AGG_SIZE} op={op} clients={who} "
                      f"GB/s={statistics.median(v):.2f} runs={' '.join(f'{x:.2f}' for x in v)}",
                      flush=True)
            print(f"dummy_agg size={AGG_SIZE} op={op} 8dummies/real={d / r:.2f}", flush=True)
    finally:
        for p in [real] + dummies:
            p.stdin.close()
            p.wait(timeout=60)


def latency(args, real, dummy, buf, cfg):
    """Per-call latency, real and dummy alternating call by call (which goes
    first alternating too), for 1 MiB and 4 MiB."""
    src, dst = buf, buf + 16 * (4 << 20)
    seq = [0]
    for size in (1 << 20, 4 << 20):
        assert real.put_from("dlat-get", src, size, cfg) == 0

        def get(c):
            assert c.get_into("dlat-get", dst, size) == size

        def exist(c):
            assert c.is_exist("dlat-get") == 1

        def put(c):
            seq[0] += 1
            assert c.put_from(f"dlat-put-{seq[0]}", src, size, cfg) == 0

        def cget(c):
            assert len(c.get("dlat-get")) == size

        val = os.urandom(size)

        def cput(c):
            seq[0] += 1
            assert c.put(f"dlat-put-{seq[0]}", val, cfg) == 0

        ops = [("get_into", get), ("put_from", put), ("get", cget), ("put", cput)]
        if size == 1 << 20:
            ops.append(("is_exist", exist))
        us = {}
        for name, fn in ops:
            for i in range(args.calls + 20):
                pair = (("real", real), ("dummy", dummy))
                for who, c in (pair if i % 2 else pair[::-1]):
                    t0 = time.perf_counter()
                    fn(c)
                    t = (time.perf_counter() - t0) * 1e6
                    if i >= 20:  # warm-up calls not counted
                        us.setdefault((name, who), []).append(t)
                    if name in ("put_from", "put"):
                        real.remove(f"dlat-put-{seq[0]}", True)
        real.remove("dlat-get", True)
        for name, _ in ops:
            r, d = statistics.median(us[(name, "real")]), statistics.median(us[(name, "dummy")])
            q = lambda v: sorted(v)[int(0.9 * len(v))]
            print(f"dummy_lat size={size if name != 'is_exist' else 0} op={name} "
                  f"real_us={r:.0f} dummy_us={d:.0f} hop_us={d - r:.0f} "
                  f"real_p90={q(us[(name, 'real')]):.0f} dummy_p90={q(us[(name, 'dummy')]):.0f}"
                  f" dummy/real={r / d:.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--part", choices=("zc", "agg", "lat", "all"), default="all")
    ap.add_argument("--daemon-port", type=int, default=0,
                    help="daemon A's port (B takes the next); random in 31000-31998 if 0")
    ap.add_argument("--calls", type=int, default=400, help="latency: calls of each op")
    ap.add_argument("--seconds", type=float, default=2.0, help="aggregate: seconds a side")
    for hidden in ("--worker", "--meta", "--master", "--port", "--holder", "--tag"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    os.environ["MC_SHM_DISABLE"] = "1"  # TCP, inherited by the daemons
    sys.path.insert(0, os.path.join(build, "python"))
    sys.path.insert(0, HERE)
    if args.worker:
        return worker(args)
    import master_rss
    from mooncake.store import (MooncakeDistributedStore, MooncakeHostMemAllocator,
                                ReplicateConfig)

    m = master_rss.Master(master_rss.find(build, "tools/mooncake_master"))
    exe = master_rss.find(build, "tools/mooncake_client")
    port = args.daemon_port or random.randint(31000, 31998)
    b, bname = daemon(exe, m, port + 1, "1GB")
    a, _ = daemon(exe, m, port, "16MB")
    real, dummy = MooncakeDistributedStore(), MooncakeDistributedStore()
    alloc = MooncakeHostMemAllocator()
    n = 16
    buf = alloc.alloc(2 * n * (4 << 20))
    try:
        assert real.setup("127.0.0.1", m.meta_uri, 0, 16 << 20, "tcp", "", m.addr) == 0
        assert dummy.setup_dummy(0, 64 << 20, f"127.0.0.1:{port}") == 0
        assert real.register_buffer(buf, 2 * n * (4 << 20)) == 0
        assert dummy.register_buffer(buf, 2 * n * (4 << 20)) == 0
        ctypes.memmove(buf, os.urandom(n * (4 << 20)), n * (4 << 20))
        cfg = ReplicateConfig()
        cfg.preferred_segment = bname
        seq = [0]
        if args.part in ("agg", "all"):
            aggregate(args, build, m, port, bname)
        if args.part in ("lat", "all"):
            latency(args, real, dummy, buf, cfg)
        for size in ((1 << 20, 4 << 20) if args.part in ("zc", "all") else ()):
            src = [buf + i * size for i in range(n)]
            dst = buf + n * (4 << 20)

            def put(c):
                seq[0] += 1
                keys = [f"dzc-{seq[0]}-{i}" for i in range(n)]
                for k, p in zip(keys, src):
                    assert c.put_from(k, p, size, cfg) == 0
                for k in keys:
                    real.remove(k, True)
                return n * size

            keys = [f"dzc-get-{size}-{i}" for i in range(n)]
            for k, p in zip(keys, src):
                assert real.put_from(k, p, size, cfg) == 0

            def get(c):
                return sum(c.get_into(k, dst, size) for k in keys)

            val = os.urandom(size)

            def cput(c):
                seq[0] += 1
                k = f"dzc-c-{seq[0]}"
                assert c.put(k, val, cfg) == 0
                real.remove(k, True)
                return size

            def cget(c):
                return len(c.get(keys[0]))

            def bput(c):
                seq[0] += 1
                bkeys = [f"dzc-b-{seq[0]}-{i}" for i in range(n)]
                assert c.batch_put_from(bkeys, src, [size] * n, cfg) == [0] * n
                real.batch_remove(bkeys, True)
                return n * size

            dsts = [dst + i * size for i in range(n)]

            def bget(c):
                return sum(c.batch_get_into(keys, dsts, [size] * n))

            ops = {}
            for name, fn in (("put_from", put), ("get_into", get), ("batch_put_from", bput),
                             ("batch_get_into", bget), ("put", cput), ("get", cget)):
                for who, c in (("real", real), ("dummy", dummy)):
                    ops[(name, who)] = (lambda f, c: lambda: f(c))(fn, c)
            res = {k: [] for k in ops}
            for _ in range(args.rounds):
                for k, fn in ops.items():
                    t0, total = time.perf_counter(), 0
                    while time.perf_counter() - t0 < 1.0:
                        total += fn()
                    res[k].append(total / (time.perf_counter() - t0) / 1e9)
            assert dummy.get_into(keys[3], dst, size) == size
            assert ctypes.string_at(dst, size) == ctypes.string_at(src[3], size)
            for (op, who), v in res.items():
                print(f"dummy_zc size={size} op={op} client={who} "
                      f"GB/s={statistics.median(v):.2f} runs={' '.join(f'{x:.2f}' for x in v)}",
                      flush=True)
            for op in ("put_from", "get_into", "batch_put_from", "batch_get_into", "put", "get"):
                print(f"dummy_zc size={size} op={op} dummy/real="
                      f"{statistics.median(res[(op, 'dummy')]) / statistics.median(res[(op, 'real')]):.2f}",
                      flush=True)
            for k in keys:
                real.remove(k, True)
    finally:
        dummy.close()
        real.close()
        alloc.free(buf)
        for p in (a, b):
            p.terminate()
            p.wait(timeout=60)
        m.stop()


if __name__ == "__main__":
    main()
