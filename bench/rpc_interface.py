#!/usr/bin/python3
"""mooncake.engine.RpcInterface against a raw socket echo, in one sitting.

Usage (the build tree on PYTHONPATH via --build, or an installed package)::

    /usr/bin/python3 bench/rpc_interface.py --build build-rel [--rounds 7]
        [--small 64] [--rtt-iters 2000] [--big-mib 4] [--big-iters 64] [--quick]

Two server processes on loopback, started by this program:

  rpc   an RpcInterface server (start_server_async) whose data callback
        touches nothing (the message is received into a fresh buffer, as
        the callback owns it);
  raw   the reference: a plain Python socket server, a thread per
        connection, that reads an 8-byte length and the payload into one
        reused buffer with recv_into and answers 4 bytes: the least a
        Python program does to move the same bytes with the same
        request/answer shape.

The client (this process) sends over one kept connection:

  rtt     --rtt-iters messages of --small bytes, one at a time: microseconds
          per round trip (send_data's return, or the raw answer);
  bulk    --big-iters messages of --big-mib MiB: GB/s of payload;
  tensor  the same bytes as a float32 tensor through send_tensor (rpc only;
          its ratio is to the raw bulk figure).

Each round runs every case on both servers, the order alternating from
round to round; one line per case with the medians and the median of the
per-round ratios (rpc / raw: above 1 is slower for rtt, faster for bulk).
Figures belong in docs/benchmarks.md only from a quiet machine; --quick is
a smoke run of a few seconds.
"""

import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time


def serve_raw():
    srv = socket.create_server(("127.0.0.1", 0))
    print(json.dumps({"port": srv.getsockname()[1]}), flush=True)

    def conn(c):
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray(1 << 20)
        hdr = bytearray(8)
        try:
            while True:
                if not _recv_exact(c, memoryview(hdr)):
                    return
                n = struct.unpack("<Q", hdr)[0]
                if n > len(buf):
                    buf = bytearray(n)
                if not _recv_exact(c, memoryview(buf)[:n]):
                    return
                c.sendall(b"\0\0\0\0")
        finally:
            c.close()

    threading.Thread(target=lambda: sys.stdin.read() or os._exit(0), daemon=True).start()
    while True:
        c, _ = srv.accept()
        threading.Thread(target=conn, args=(c,), daemon=True).start()


def _recv_exact(c, view):
    got = 0
    while got < len(view):
        k = c.recv_into(view[got:])
        if k == 0:
            return False
        got += k
    return True


def serve_rpc():
    from mooncake.engine import RpcInterface
    r = RpcInterface()
    assert r.initialize_server("127.0.0.1:0", 4, 30)
    r.set_data_receive_callback(lambda m: None)
    r.set_tensor_receive_callback(lambda m: None)
    assert r.start_server_async()
    print(json.dumps({"port": r.get_server_port()}), flush=True)
    sys.stdin.read()
    r.stop_server()


class RawClient:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.ack = bytearray(4)

    def send(self, data):
        n = memoryview(data).nbytes
        if n <= 65536:
            self.s.sendall(struct.pack("<Q", n) + data)
        else:
            self.s.sendall(struct.pack("<Q", n))
            self.s.sendall(data)
        if not _recv_exact(self.s, memoryview(self.ack)):
            raise ConnectionError("raw server closed")
        return 0


def start(mode, env):
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", mode],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    port = json.loads(p.stdout.readline())["port"]
    return p, port


def timed(fn, iters):
    t0 = time.perf_counter()
    for _ in range(iters):
        if fn() != 0:
            raise RuntimeError("a send failed")
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=None)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--small", type=int, default=64)
    ap.add_argument("--rtt-iters", type=int, default=2000)
    ap.add_argument("--big-mib", type=int, default=4)
    ap.add_argument("--big-iters", type=int, default=64)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--serve", choices=("rpc", "raw"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve == "raw":
        return serve_raw()
    if args.serve == "rpc":
        return serve_rpc()
    if args.quick:
        args.rounds, args.rtt_iters, args.big_iters = 2, 200, 8
    env = dict(os.environ)
    if args.build:
        env["PYTHONPATH"] = os.path.join(os.path.abspath(args.build), "python")
        sys.path.insert(0, env["PYTHONPATH"])
    import numpy as np
    import torch
    from mooncake.engine import create_rpc_client

    rp, rport = start("rpc", env)
    wp, wport = start("raw", env)
    try:
        cli = create_rpc_client()
        addr = f"127.0.0.1:{rport}"
        raw = RawClient(wport)
        small = os.urandom(args.small)
        big = np.random.default_rng(0).integers(0, 256, args.big_mib << 20, dtype=np.uint8)
        tens = torch.from_numpy(big.view(np.float32))
        nbig = big.nbytes * args.big_iters
        res = {k: [] for k in ("rtt_rpc", "rtt_raw", "bulk_rpc", "bulk_raw", "tensor_rpc")}
        for fn in (lambda: cli.send_data(addr, small), lambda: raw.send(small)):  # warm up
            timed(fn, 50)
        for r in range(args.rounds):
            cases = [("rtt_rpc", lambda: cli.send_data(addr, small), args.rtt_iters),
                     ("rtt_raw", lambda: raw.send(small), args.rtt_iters),
                     ("bulk_rpc", lambda: cli.send_data(addr, big), args.big_iters),
                     ("bulk_raw", lambda: raw.send(big), args.big_iters),
                     ("tensor_rpc", lambda: cli.send_tensor(addr, tens), args.big_iters)]
            if r % 2:
                cases.reverse()
            for name, fn, iters in cases:
                dt = timed(fn, iters)
                res[name].append(dt / iters * 1e6 if name.startswith("rtt") else nbig / dt / 1e9)
        med = {k: statistics.median(v) for k, v in res.items()}

        def ratio(a, b):
            return statistics.median(x / y for x, y in zip(res[a], res[b]))

        print(f"rpc_interface rounds={args.rounds} small={args.small}B big={args.big_mib}MiB "
              f"load={os.getloadavg()[0]:.2f}")
        print(f"rtt     rpc {med['rtt_rpc']:8.1f} us   raw {med['rtt_raw']:8.1f} us   "
              f"rpc/raw {ratio('rtt_rpc', 'rtt_raw'):.2f}")
        print(f"bulk    rpc {med['bulk_rpc']:8.2f} GB/s raw {med['bulk_raw']:8.2f} GB/s "
              f"rpc/raw {ratio('bulk_rpc', 'bulk_raw'):.2f}")
        print(f"tensor  rpc {med['tensor_rpc']:8.2f} GB/s raw {med['bulk_raw']:8.2f} GB/s "
              f"rpc/raw {ratio('tensor_rpc', 'bulk_raw'):.2f}")
        cli.close()
    finally:
        for p in (rp, wp):
            p.stdin.close()
            p.wait(20)


if __name__ == "__main__":
    main()
