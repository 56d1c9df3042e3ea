"""A store client process for the legacy DISK tier tests
(test_store_disk_tier.py).

Started with Debian's python3 and the build tree on PYTHONPATH.  It sets up
one ``MooncakeDistributedStore``, prints one JSON line ``{"ready": true,
"rc": 0}``, then answers one JSON command per stdin line with one JSON
reply line until stdin closes, then closes the store (which writes and
reports every DISK file still queued, then unmounts its segment):

    {"op": "put", "key": k, "size": n, "seed": s}      -> {"rc": rc}
    {"op": "put_batch", "keys": [k], "size": n, "seed": s} -> {"rc": rc}
    {"op": "get", "key": k}                            -> {"rc": len or -1, "digest": hex}
    {"op": "get_into", "key": k, "size": n}            -> {"rc": rc, "digest": hex}
    {"op": "range", "key": k, "off": o, "len": n}       -> {"rc": [[[rc]]], "digest": hex}
                                                          (get_into_ranges, one range)
    {"op": "remove", "key": k}                         -> {"rc": rc} (forced: past a lease)
    {"op": "remove_all"}                               -> {"rc": count} (forced)
"""

import argparse
import json
import sys

import numpy as np

from mooncake.store import MooncakeDistributedStore
from ssd_node import digest, pattern


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--master", required=True)
    ap.add_argument("--meta", required=True)
    ap.add_argument("--segment", type=int, default=0)
    args = ap.parse_args()

    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", args.meta, args.segment, 16 << 20, "tcp", "", args.master)
    print(json.dumps({"ready": rc == 0, "rc": rc}), flush=True)
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
        elif op == "put_batch":
            vals = [pattern(cmd["seed"] + i, cmd["size"]) for i in range(len(cmd["keys"]))]
            out = {"rc": s.put_batch(cmd["keys"], vals)}
        elif op == "get":
            v = s.get(cmd["key"])
            out = {"rc": len(v) if v else -1, "digest": digest(v) if v else ""}
        elif op == "get_into":
            n = cmd["size"]
            reg[:n] = 0
            rc = s.get_into(cmd["key"], ptr, n)
            out = {"rc": rc, "digest": digest(reg[:n].tobytes())}
        elif op == "range":
            n = cmd["len"]
            reg[:n] = 0
            rc = s.get_into_ranges([ptr], [[cmd["key"]]], [[[0]]], [[[cmd["off"]]]], [[[n]]])
            out = {"rc": rc, "digest": digest(reg[:n].tobytes())}
        elif op == "remove":
            out = {"rc": s.remove(cmd["key"], True)}
        elif op == "remove_all":
            out = {"rc": s.remove_all(True)}
        else:
            out = {"error": f"unknown op {op}"}
        print(json.dumps(out), flush=True)
    s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
