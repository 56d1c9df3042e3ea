"""A P2P store peer in its own process, for tests/python/test_p2p_store.py
and bench/p2p_fanout.py.

    p2p_peer.py ETCD [--p2p]

reads one JSON command per line on stdin and answers one JSON line on
stdout: {"ok": true, ...} or {"ok": false, "error": class, "msg": text}.
Commands: hello (-> name), alloc {sizes} (buffers for the next get), register {name, sizes, shard, seed},
get {name, sizes} (-> digest, seconds, start and end as time.time()), unregister {name},
delete {name}, hash {name} (digest of what this peer holds).
Buffers are numpy arrays filled with tests' pattern(seed + index).
"""

import hashlib
import json
import os
import sys
import time

import numpy as np

from mooncake.p2p_store import P2PStore, P2PStoreError


def pattern(seed, n):
    if n > (64 << 20):  # large (benches): a random MiB tiled, to fill in well under a second
        return np.resize(np.random.default_rng(seed).integers(0, 256, 1 << 20, dtype=np.uint8), n)
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def digest(arrays):
    h = hashlib.blake2b(digest_size=16)
    for a in arrays:
        h.update(memoryview(a))
    return h.hexdigest()


def main():
    etcd = sys.argv[1]
    te_meta = "P2PHANDSHAKE" if "--p2p" in sys.argv else None
    host = os.environ.get("P2P_PEER_HOST", "127.0.0.1")  # the bench's network namespaces
    store = P2PStore(etcd, f"{host}:0" if te_meta else f"{host}:{os.getpid()}",
                     te_metadata_uri=te_meta)
    held = {}
    prepared = None
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            out = {}
            if op == "hello":
                out["name"] = store.get_local_server_name()
            elif op == "register":
                arrays = [pattern(cmd["seed"] + i, n) for i, n in enumerate(cmd["sizes"])]
                store.register(cmd["name"], [a.ctypes.data for a in arrays], cmd["sizes"],
                               cmd["shard"])
                held[cmd["name"]] = arrays
                del arrays
            elif op == "alloc":  # buffers for the next get, faulted in now
                prepared = None  # the previous set freed before the next is made
                prepared = [np.zeros(n, np.uint8) for n in cmd["sizes"]]
                for a in prepared:
                    a[::4096] = 0
            elif op == "get":
                arrays = prepared if prepared and [a.size for a in prepared] == cmd["sizes"] \
                    else [np.zeros(n, np.uint8) for n in cmd["sizes"]]
                prepared = None
                out["start"] = time.time()
                store.get_replica(cmd["name"], [a.ctypes.data for a in arrays], cmd["sizes"])
                out["end"] = time.time()
                out["seconds"] = out["end"] - out["start"]
                held[cmd["name"]] = arrays
                if cmd.get("verify", True):
                    out["digest"] = digest(arrays)
                # held alone keeps them: "delete" must free them before the next
                # "alloc" (4 GiB checkpoints: two live copies ran a 24 GiB host out)
                del arrays
            elif op == "hash":
                out["digest"] = digest(held[cmd["name"]])
            elif op == "unregister":
                store.unregister(cmd["name"])
                held.pop(cmd["name"], None)
            elif op == "delete":
                store.delete_replica(cmd["name"])
                held.pop(cmd["name"], None)
            elif op == "exit":
                break
            else:
                raise ValueError(f"unknown op {op}")
            out["ok"] = True
        except (P2PStoreError, ValueError, KeyError) as e:
            out = {"ok": False, "error": type(e).__name__, "msg": str(e)}
        print(json.dumps(out), flush=True)
    store.close()


if __name__ == "__main__":
    main()
