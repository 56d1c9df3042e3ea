"""A Transfer Engine peer process for the mooncake.engine tests.

Started by conftest.py with Debian's python3 and the build tree on
PYTHONPATH.  It creates one engine through ``mooncake.engine``, registers a
numpy buffer, prints one JSON line::

    {"ready": true, "name": <segment name>, "addr": <buffer address>,
     "size": <bytes>, "rpc_port": <port>}

and then answers one JSON command per stdin line with one JSON reply line
(``{"ok": true, ...}`` or ``{"ok": false, "error": ...}``) until stdin closes.
Offsets (``off``) are relative to the registered buffer; remote addresses
(``raddr``) are absolute, as the engine's API takes them.
"""

import argparse
import hashlib
import json
import sys
import traceback

import numpy as np

from mooncake.engine import TransferEngine, TransferNotify, TransferOpcode


def pattern(seed, n):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def digest(view):
    return hashlib.blake2b(memoryview(np.ascontiguousarray(view)), digest_size=16).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--metadata", default="P2PHANDSHAKE")
    ap.add_argument("--name", default="127.0.0.1")
    ap.add_argument("--protocol", default="tcp")
    ap.add_argument("--size", type=int, default=64 << 20)
    args = ap.parse_args()

    te = TransferEngine()
    rc = te.initialize(args.name, args.metadata, args.protocol, "")
    if rc != 0:
        print(json.dumps({"ready": False, "rc": rc}), flush=True)
        return 1
    buf = np.zeros(args.size, np.uint8)
    addr = buf.ctypes.data
    if te.register_memory(addr, args.size) != 0:
        print(json.dumps({"ready": False, "rc": "register"}), flush=True)
        return 1
    if args.metadata == "P2PHANDSHAKE":
        host = args.name.rsplit(":", 1)[0] if args.name.count(":") == 1 else args.name
        name = f"{host}:{te.get_rpc_port()}"
    else:
        name = args.name
    print(json.dumps({"ready": True, "name": name, "addr": addr, "size": args.size,
                      "rpc_port": te.get_rpc_port()}), flush=True)

    managed = []
    regions = {}  # address -> numpy array, kept alive until exit
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        reply = {"ok": True}
        try:
            if op == "fill":
                off, n = cmd["off"], cmd["len"]
                buf[off:off + n] = pattern(cmd["seed"], n)
            elif op == "zero":
                buf[cmd["off"]:cmd["off"] + cmd["len"]] = 0
            elif op == "hash":
                reply["hash"] = digest(buf[cmd["off"]:cmd["off"] + cmd["len"]])
            elif op == "hash_addr":
                data = te.read_bytes_from_buffer(cmd["addr"], cmd["len"])
                reply["hash"] = digest(np.frombuffer(data, np.uint8))
            elif op == "write" or op == "read":
                f = te.transfer_sync_write if op == "write" else te.transfer_sync_read
                reply["rc"] = f(cmd["peer"], addr + cmd["off"], cmd["raddr"], cmd["len"])
            elif op == "batch":
                opcode = TransferOpcode.Write if cmd["write"] else TransferOpcode.Read
                reply["rc"] = te.batch_transfer_sync(
                    cmd["peer"], [addr + o for o in cmd["offs"]], cmd["raddrs"], cmd["lens"], opcode)
            elif op == "notify":
                # a one-byte write carrying a notification
                reply["rc"] = te.transfer_sync(cmd["peer"], addr, cmd["raddr"], 1, TransferOpcode.Write,
                                               TransferNotify(cmd["name"], cmd["msg"]))
            elif op == "notifies":
                reply["notifies"] = [[n.name, n.msg] for n in te.get_notifies()]
            elif op == "probe":
                reply["rc"] = te.send_probe(cmd["peer"])
            elif op == "alloc":
                a = te.allocate_managed_buffer(cmd["len"])
                managed.append((a, cmd["len"]))
                reply["addr"] = a
            elif op == "regions":
                # more registered memory, as KV caches per layer, weight buckets or
                # per-request buffers: count arrays of len bytes in one batch call
                arrs = [np.zeros(cmd["len"], np.uint8) for _ in range(cmd["count"])]
                if cmd.get("seed") is not None:
                    for i, a in enumerate(arrs):
                        a[:] = pattern(cmd["seed"] + i, cmd["len"])
                addrs = [a.ctypes.data for a in arrs]
                regions.update(zip(addrs, arrs))
                reply["rc"] = te.batch_register_memory(addrs, [cmd["len"]] * cmd["count"])
                reply["addrs"] = addrs
            elif op == "unregister":
                reply["rc"] = te.batch_unregister_memory(cmd["addrs"])
            elif op == "first_buffer":
                reply["addr"] = te.get_first_buffer_address(cmd["segment"])
            else:
                reply = {"ok": False, "error": f"unknown op {op}"}
        except Exception:  # reported to the test, which fails on it
            reply = {"ok": False, "error": traceback.format_exc()}
        print(json.dumps(reply), flush=True)
    for a, n in managed:
        te.free_managed_buffer(a, n)
    te.unregister_memory(addr)
    del te
    return 0


if __name__ == "__main__":
    sys.exit(main())
