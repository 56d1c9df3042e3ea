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
and prints the median GB/s of each and the dummy/real ratio.  Copy-based
put/get through the dummy are reported too.

usage: bench/dummy_zc.py [--build build] [--rounds 5]
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    os.environ["MC_SHM_DISABLE"] = "1"  # TCP, inherited by the daemons
    sys.path.insert(0, os.path.join(build, "python"))
    sys.path.insert(0, HERE)
    import master_rss
    from mooncake.store import (MooncakeDistributedStore, MooncakeHostMemAllocator,
                                ReplicateConfig)

    m = master_rss.Master(master_rss.find(build, "tools/mooncake_master"))
    exe = master_rss.find(build, "tools/mooncake_client")
    port = random.randint(31000, 31999)
    b, bname = daemon(exe, m, port + 1 if port < 31999 else port - 1, "1GB")
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
        for size in (1 << 20, 4 << 20):
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

            ops = {("put_from", "real"): lambda: put(real), ("put_from", "dummy"): lambda: put(dummy),
                   ("get_into", "real"): lambda: get(real), ("get_into", "dummy"): lambda: get(dummy),
                   ("put", "dummy"): lambda: cput(dummy), ("get", "dummy"): lambda: cget(dummy)}
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
            for op in ("put_from", "get_into"):
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
