"""A process serving mooncake.engine's RPC helper for test_rpc_interface.py
and bench/rpc_interface.py.

    rpc_peer.py [--timeout S] [--quiet]

Serves on 127.0.0.1:0 (start_server_async), prints {"port": N} once listening, then one JSON
line per message its callbacks receive:

    {"kind": "data", "src": "ip:port", "size": n, "digest": hex}
    {"kind": "tensor", "src": ..., "shape": [...], "dtype": "torch.x",
     "total_bytes": n, "digest": hex}

(--quiet: no line per message, for the benchmark).  EOF on stdin stops
the server, then the process.  The
cluster secret comes from the environment, as for any program.
"""

import argparse
import hashlib
import json
import sys
import threading

from mooncake.engine import RpcInterface


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=int, default=30)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    out_lock = threading.Lock()

    def emit(d):
        if not args.quiet:
            with out_lock:
                print(json.dumps(d), flush=True)

    r = RpcInterface()
    assert r.initialize_server("127.0.0.1:0", 4, args.timeout)

    def on_data(m):
        emit({"kind": "data", "src": m.source_address, "size": m.data_size,
              "digest": hashlib.blake2b(m.get_memory_view(), digest_size=16).hexdigest()})

    def on_tensor(t):
        assert t.get_data_size() == t.total_bytes == len(t.get_data_as_bytes())
        emit({"kind": "tensor", "src": t.source_address, "shape": t.shape, "dtype": t.dtype,
              "total_bytes": t.total_bytes,
              "digest": hashlib.blake2b(t.get_memory_view(), digest_size=16).hexdigest()})

    r.set_data_receive_callback(on_data)
    r.set_tensor_receive_callback(on_tensor)
    assert r.start_server_async()
    print(json.dumps({"port": r.get_server_port()}), flush=True)
    sys.stdin.read()
    r.stop_server()


if __name__ == "__main__":
    main()
