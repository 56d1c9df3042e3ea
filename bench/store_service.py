#!/usr/bin/python3
"""The REST store service's put/get rate for 1 MiB values against the native calls.

usage: bench/store_service.py [--build build] [--rounds 7] [--keys 8] [--size-kib 1024] [--quick]

One master (embedded metadata server, free ports) and one
``mc_store_rest_server`` process (``python -m mooncake.mooncake_store_service``)
that contributes the only segment (512 MiB).  This process then, round by
round and alternating which goes first:

  rest    PUT /api/put (JSON {"key", "value": <string of --size-kib KiB>})
          then GET /api/get/{key} for --keys keys, over one keep-alive
          HTTP connection to the service;
  native  MooncakeDistributedStore.put / get of the same bytes from a pure
          client (no segment of its own), so its objects land in the same
          segment of the service process.

Every value read is compared with the one written.  One line per method and
operation: median ops/s and MB/s over the rounds, and rest's median per-round
ratio to native (pct_of_native).  Figures belong in docs/benchmarks.md only
from a quiet machine; --quick is the smoke run.
"""

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--keys", type=int, default=8)
    ap.add_argument("--size-kib", type=int, default=1024)
    ap.add_argument("--quick", action="store_true", help="a short smoke run")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.keys = 2, 4
    build = os.path.abspath(args.build)
    pypath = os.path.join(build, "python")
    sys.path.insert(0, pypath)
    sys.path.insert(0, HERE)
    import master_rss
    from mooncake.store import MooncakeDistributedStore

    size = args.size_kib << 10
    m = master_rss.Master(master_rss.find(build, "tools/mooncake_master"))
    cfg = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump({"local_hostname": "127.0.0.1", "metadata_server": m.meta_uri,
               "master_server_address": m.addr, "protocol": "tcp", "device_name": "",
               "global_segment_size": "512MB", "local_buffer_size": "64MB"}, cfg)
    cfg.close()
    env = {**os.environ, "PYTHONPATH": pypath + os.pathsep + os.environ.get("PYTHONPATH", "")}
    svc = subprocess.Popen([sys.executable, "-m", "mooncake.mooncake_store_service", "--config",
                            cfg.name, "--host", "127.0.0.1", "--port", "0", "--log-level",
                            "WARNING"], stdout=subprocess.PIPE, text=True, env=env)
    native = MooncakeDistributedStore()
    try:
        line = svc.stdout.readline()
        if "listening on" not in line:
            sys.exit(f"the service did not start: {line!r}")
        port = int(line.strip().rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.connect()
        # http.client sends the headers and the body in two writes; without
        # TCP_NODELAY the body waits for the headers' delayed ACK (40 ms)
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        assert native.setup("127.0.0.1", m.meta_uri, 0, 64 << 20, "tcp", "", m.addr) == 0

        def rest(keys, value):
            body_of = {k: json.dumps({"key": k, "value": value}).encode() for k in keys}
            t0 = time.perf_counter()
            for k in keys:
                conn.request("PUT", "/api/put", body_of[k], {"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                assert r.status == 200, r.status
            t1 = time.perf_counter()
            for k in keys:
                conn.request("GET", f"/api/get/{k}")
                r = conn.getresponse()
                got = r.read()
                assert r.status == 200 and len(got) == size, (r.status, len(got))
            t2 = time.perf_counter()
            assert got == value.encode()
            return t1 - t0, t2 - t1

        def nat(keys, value):
            data = value.encode()
            t0 = time.perf_counter()
            for k in keys:
                assert native.put(k, data) == 0
            t1 = time.perf_counter()
            for k in keys:
                got = native.get(k)
                assert len(got) == size
            t2 = time.perf_counter()
            assert got == data
            return t1 - t0, t2 - t1

        methods = {"rest": rest, "native": nat}
        secs = {(n, op): [] for n in methods for op in ("put", "get")}
        for r in range(args.rounds + 1):  # round 0 warms up
            order = ["rest", "native"] if r % 2 == 0 else ["native", "rest"]
            for n in order:
                value = (chr(ord("a") + r % 26) * size)
                keys = [f"svcbench-{n}-{r}-{i}" for i in range(args.keys)]
                tp, tg = methods[n](keys, value)
                if r:
                    secs[(n, "put")].append(tp)
                    secs[(n, "get")].append(tg)
        for op in ("put", "get"):
            for n in methods:
                s = secs[(n, op)]
                ops = [args.keys / x for x in s]
                ratio = [b / a * 100.0 for a, b in zip(secs[("rest", op)], secs[("native", op)])]
                extra = f" pct_of_native={statistics.median(ratio):.1f}" if n == "rest" else ""
                print(f"store_service method={n} op={op} size_kib={args.size_kib} "
                      f"keys={args.keys} rounds={args.rounds} "
                      f"median_ops={statistics.median(ops):.1f} "
                      f"median_mbps={statistics.median(ops) * size / 1e6:.1f}{extra}", flush=True)
        conn.close()
    finally:
        native.close()
        svc.terminate()
        svc.wait(timeout=30)
        m.stop()
        os.unlink(cfg.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
