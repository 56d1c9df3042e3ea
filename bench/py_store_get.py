#!/usr/bin/python3
"""Python's copy-based gets against the zero-copy ones, over TCP.

A master (embedded metadata server, free ports), a holder process that
contributes the only segment, and this process as a pure client put 64 MiB
of 1 MiB and 4 MiB objects onto the holder, then time
``MooncakeDistributedStore.get`` (which returns bytes) against
``get_into`` (a registered buffer) of the same keys, and ``get_batch``
(a list of bytes) against ``batch_get_into``, 8 keys a call, in
alternating 1 s loops.  Prints the median GB/s of each, the CPU time
this process (calling thread and engine workers) spent per GB and its
minor page faults per MiB read (both steadier than GB/s on a loaded
host), and checks values.
--sizes and --batch change the object sizes and the keys per batch call
(issue 12 part 4: --sizes 64k --batch 32, store_small.py's batch rows);
--ops runs only some of the four calls, --seconds sets each loop's length.

usage: bench/py_store_get.py [--build build] [--rounds 7] [--sizes 1m,4m]
                             [--batch 8] [--ops get,get_into,get_batch,batch_get_into]
                             [--seconds 1]
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--sizes", default="1m,4m")
    ap.add_argument("--batch", type=int, default=8, help="keys per batch call")
    ap.add_argument("--ops", default="get,get_into,get_batch,batch_get_into")
    ap.add_argument("--seconds", type=float, default=1.0, help="length of each timed loop")
    args = ap.parse_args()
    sys.path.insert(0, HERE)
    from store_aggregate import parse_size
    sizes = [parse_size(x) for x in args.sizes.split(",")]
    nb = args.batch
    build = os.path.abspath(args.build)
    os.environ["MC_SHM_DISABLE"] = "1"  # TCP, inherited by the holder
    sys.path.insert(0, os.path.join(build, "python"))
    sys.path.insert(0, HERE)
    import master_rss
    import numpy as np
    from mooncake.store import MooncakeDistributedStore, ReplicateConfig

    m = master_rss.Master(master_rss.find(build, "tools/mooncake_master"))
    holder = subprocess.Popen([sys.executable, "-c", f"""
import sys
sys.path.insert(0, {os.path.join(build, 'python')!r})
from mooncake.store import MooncakeDistributedStore
s = MooncakeDistributedStore()
assert s.setup("127.0.0.1", {m.meta_uri!r}, 1 << 30, 0, "tcp", "", {m.addr!r}) == 0
print(s.get_hostname(), flush=True)
sys.stdin.read()
s.close()
"""], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    c = MooncakeDistributedStore()
    try:
        name = holder.stdout.readline().strip()
        assert name, "holder did not start"
        assert c.setup("127.0.0.1", m.meta_uri, 0, 64 << 20, "tcp", "", m.addr) == 0
        cfg = ReplicateConfig()
        cfg.preferred_segment = name
        for size in sizes:
            n = max((64 << 20) // size, nb)
            vals = [np.random.bytes(size) for _ in range(n)]
            keys = [f"pyget-{size}-{i}" for i in range(n)]
            for k, v in zip(keys, vals):
                assert c.put(k, v, cfg) == 0
            buf = np.zeros(nb * size, np.uint8)
            assert c.register_buffer(buf.ctypes.data, nb * size) == 0
            groups = [keys[i:i + nb] for i in range(0, n - nb + 1, nb)]
            ptrs = [buf.ctypes.data + j * size for j in range(nb)]
            ops = {
                "get": lambda: sum(len(c.get(k)) for k in keys),
                "get_into": lambda: sum(c.get_into(k, buf.ctypes.data, size) for k in keys),
                "get_batch": lambda: sum(len(v) for g in groups for v in c.get_batch(g)),
                "batch_get_into": lambda: sum(sum(c.batch_get_into(g, ptrs, [size] * nb))
                                              for g in groups),
            }
            ops = {op: ops[op] for op in args.ops.split(",")}
            res = {op: [] for op in ops}
            cpu = {op: [] for op in ops}
            flt = {op: [] for op in ops}
            for _ in range(args.rounds):
                for op, fn in ops.items():
                    t0, total = time.perf_counter(), 0
                    c0, f0 = time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
                    while time.perf_counter() - t0 < args.seconds:
                        total += fn()
                    res[op].append(total / (time.perf_counter() - t0) / 1e9)
                    f1 = resource.getrusage(resource.RUSAGE_SELF)
                    cpu[op].append((time.process_time() - c0) * 1e3 / (total / 1e9))
                    flt[op].append((f1.ru_minflt - f0.ru_minflt) / (total / 2**20))
            assert c.get(keys[3]) == vals[3]
            assert c.get_batch(groups[0]) == vals[:nb]
            for op, v in res.items():
                print(f"py_store_get size={size} op={op} GB/s={statistics.median(v):.2f} "
                      f"cpu_ms/GB={statistics.median(cpu[op]):.0f} "
                      f"faults/MiB={statistics.median(flt[op]):.1f} "
                      f"runs={' '.join(f'{x:.2f}' for x in v)}", flush=True)
            assert c.unregister_buffer(buf.ctypes.data) == 0
            for k in keys:
                c.remove(k, True)
    finally:
        c.close()
        holder.stdin.close()
        holder.wait(timeout=30)
        m.stop()


if __name__ == "__main__":
    main()
