#!/usr/bin/python3
"""A tensor written with one parallel layout and read with another, against
put_tensor/get_tensor of the same bytes (issue 18).

A master (embedded metadata server, free ports), a holder process that
contributes the only segment, and this process as the client.  Each round,
alternating:

- reference: ``put_tensor`` of the whole float32 tensor, ``get_tensor`` back;
- reshard: four writers' ``put_tensor_with_parallelism(writer_partition=(r,
  4, 0))`` (the four calls from this process), then the two shards of a
  2-rank layout on dim 0 (``ReadTarget("shard", tp r of 2)``) and the whole
  tensor (``ReadTarget("full")``).

GB/s is tensor bytes over the time of the phase; medians of --runs.

usage: bench/tensor_reshard.py [--build build] [--mib 1024] [--runs 3]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--mib", type=int, default=1024, help="tensor size in MiB")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    os.environ.setdefault("MC_SHM_DISABLE", "1")  # TCP unless asked otherwise
    sys.path.insert(0, os.path.join(build, "python"))
    sys.path.insert(0, HERE)
    import master_rss
    import torch
    from mooncake.store import (MooncakeDistributedStore, ParallelAxis, ReadTarget,
                                ReplicateConfig, TensorParallelism)

    nbytes = args.mib << 20
    seg = 2 * nbytes + (256 << 20)  # the whole tensor and its shards at once
    m = master_rss.Master(master_rss.find(build, "tools/mooncake_master"))
    holder = subprocess.Popen([sys.executable, "-c", f"""
import sys
sys.path.insert(0, {os.path.join(build, 'python')!r})
from mooncake.store import MooncakeDistributedStore
s = MooncakeDistributedStore()
assert s.setup("127.0.0.1", {m.meta_uri!r}, {seg}, 0, "tcp", "", {m.addr!r}) == 0
print(s.get_hostname(), flush=True)
sys.stdin.read()
s.close()
"""], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    c = MooncakeDistributedStore()
    res = {p: [] for p in ("put_tensor", "get_tensor", "4 writer partitions",
                           "2-rank shards (other layout)", "full (reassembled)")}
    try:
        name = holder.stdout.readline().strip()
        assert name, "holder did not start"
        assert c.setup("127.0.0.1", m.meta_uri, 0, 64 << 20, "tcp", "", m.addr) == 0
        cfg = ReplicateConfig()
        cfg.preferred_segment = name
        rows = nbytes // (4 * 1024)
        t = torch.randn(rows, 1024)
        gb = nbytes / 1e9

        def timed(fn):
            t0 = time.perf_counter()
            out = fn()
            return out, gb / (time.perf_counter() - t0)

        for run in range(args.runs):
            for side in (("ref", "par") if run % 2 == 0 else ("par", "ref")):
                key = f"reshard-{side}-{run}"
                if side == "ref":
                    rc, g = timed(lambda: c.pub_tensor(key, t, cfg))
                    assert rc == 0, rc
                    res["put_tensor"].append(g)
                    got, g = timed(lambda: c.get_tensor(key))
                    assert got is not None and torch.equal(got, t)
                    res["get_tensor"].append(g)
                    del got
                    assert c.remove(key, True) == 0
                    continue
                rc, g = timed(lambda: [c.put_tensor_with_parallelism(
                    key, t, None, cfg, writer_partition=(r, 4, 0)) for r in range(4)])
                assert rc == [0] * 4, rc
                res["4 writer partitions"].append(g)
                tgt = [ReadTarget("shard", TensorParallelism([ParallelAxis("tp", r, 2, 0)]))
                       for r in range(2)]
                got, g = timed(lambda: [c.get_tensor_with_parallelism(key, x) for x in tgt])
                assert torch.equal(got[0], t[:rows // 2]) and torch.equal(got[1], t[rows // 2:])
                res["2-rank shards (other layout)"].append(g)
                del got
                got, g = timed(lambda: c.get_tensor_with_parallelism(key, ReadTarget("full")))
                assert torch.equal(got, t)
                res["full (reassembled)"].append(g)
                del got
                assert c.remove_by_regex(f"^{key}__", True) >= 5
    finally:
        c.close()
        holder.stdin.close()
        holder.wait(timeout=60)
        m.stop()
    ref_put = statistics.median(res["put_tensor"])
    ref_get = statistics.median(res["get_tensor"])
    print(f"tensor {args.mib} MiB float32, {args.runs} alternating runs, medians "
          f"({os.cpu_count()} cores)")
    print("| phase | GB/s | x put_tensor / get_tensor |")
    print("|---|---|---|")
    for p, v in res.items():
        ref = ref_put if p in ("put_tensor", "4 writer partitions") else ref_get
        print(f"| {p} | {statistics.median(v):.2f} | {statistics.median(v) / ref:.2f} |")


if __name__ == "__main__":
    main()
