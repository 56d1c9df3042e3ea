"""A store client process for the SSD tier tests (test_store_ssd.py).

Started with Debian's python3 and the build tree on PYTHONPATH.  It sets up
one ``MooncakeDistributedStore`` (with the SSD tier when ``--ssd`` names a
directory), prints one JSON line ``{"ready": true, "rc": 0, "name": ...}``
(or ``{"ready": false, "rc": <code>}``), then answers one JSON command per
stdin line with one JSON reply line until stdin closes:

    {"op": "put", "key": k, "size": n, "seed": s}  -> {"rc": rc}
    {"op": "get", "key": k}                        -> {"rc": len or code, "digest": hex,
                                                       "ms": milliseconds}
    {"op": "types", "key": k}                      -> {"types": ["memory"|"local_disk"|...]}
    {"op": "count"}                                -> {"count": get_offload_rpc_read_count()}
    {"op": "forms", "key": k, "size": n, "seed": s} -> {"<form>": true|false|rc, ...}: the
        object read through every get form (get_batch, get_buffer, batch_get_buffer,
        get_into, batch_get_into, get_into_ranges, a get session's ranged read)

Values are ``pattern(seed, n)``, so the test knows every byte without
holding them.
"""

import argparse
import hashlib
import json
import sys
import time

import numpy as np

from mooncake.store import MooncakeDistributedStore


def pattern(seed, n):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def digest(b):
    return hashlib.blake2b(b, digest_size=16).hexdigest()


def forms(s, reg, ptr, k, n, seed):
    want = pattern(seed, n)
    off, ln = 1000, min(5000, n - 1000)
    out = {}
    v = s.get_batch([k])
    out["get_batch"] = bool(v) and v[0] == want
    h = s.get_buffer(k)
    out["get_buffer"] = h is not None and bytes(memoryview(h)) == want
    hs = s.batch_get_buffer([k])
    out["batch_get_buffer"] = hs[0] is not None and bytes(memoryview(hs[0])) == want
    reg[:n] = 0
    rc = s.get_into(k, ptr, n)
    out["get_into"] = rc == n and reg[:n].tobytes() == want or rc
    reg[:n] = 0
    rcs = s.batch_get_into([k], [ptr], [n])
    out["batch_get_into"] = rcs == [n] and reg[:n].tobytes() == want or rcs
    reg[:ln] = 0
    res = s.get_into_ranges([ptr], [[k]], [[[0]]], [[[off]]], [[[ln]]])
    out["get_into_ranges"] = res == [[[ln]]] and reg[:ln].tobytes() == want[off:off + ln] or res
    reg[:ln] = 0
    st = s.batch_get_session_start([k])
    # past a 1 ms read lease on purpose: a disk replica is not held to it
    time.sleep(0.01)
    res = s.batch_get_into_multi_buffer_ranges([k], [[ptr]], [[ln]], [[off]])
    s.batch_get_session_end([k])
    out["session"] = (st == [0] and res == [ln] and reg[:ln].tobytes() == want[off:off + ln]
                      or [st, res])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--master", required=True)
    ap.add_argument("--meta", required=True)
    ap.add_argument("--segment", type=int, default=0)
    ap.add_argument("--ssd", default="")
    ap.add_argument("--tenant", default="default")
    args = ap.parse_args()

    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", args.meta, args.segment, 16 << 20, "tcp", "", args.master,
                 enable_ssd_offload=bool(args.ssd), ssd_offload_path=args.ssd,
                 tenant_id=args.tenant)
    print(json.dumps({"ready": rc == 0, "rc": rc, "name": s.get_hostname() if rc == 0 else ""}),
          flush=True)
    if rc != 0:
        return 1
    reg = np.zeros(8 << 20, np.uint8)
    ptr = reg.ctypes.data
    assert s.register_buffer(ptr, reg.nbytes) == 0
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "put":
            out = {"rc": s.put(cmd["key"], pattern(cmd["seed"], cmd["size"]))}
        elif op == "get":
            t0 = time.monotonic()
            v = s.get(cmd["key"])
            ms = (time.monotonic() - t0) * 1000
            out = {"rc": len(v) if v else -1, "digest": digest(v) if v else "", "ms": ms}
        elif op == "types":
            types = []
            for r in s.get_replica_desc(cmd["key"]):
                types.append("memory" if r.is_memory_replica() else
                             "local_disk" if r.is_local_disk_replica() else "other")
            out = {"types": types}
        elif op == "count":
            out = {"count": s.get_offload_rpc_read_count()}
        elif op == "forms":
            out = forms(s, reg, ptr, cmd["key"], cmd["size"], cmd["seed"])
        else:
            out = {"error": f"unknown op {op}"}
        print(json.dumps(out), flush=True)
    s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
