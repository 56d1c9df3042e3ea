#!/usr/bin/env python3
"""Mooncake Store's SSD tier against fio on the same directory, in one sitting.

Issue 13's performance part, four figures:

(a) offload throughput, DRAM to SSD, for each --sizes entry (1 MiB and
    4 MiB): bench/disk_store_bench write (the offload heartbeat's write
    step: objects in DRAM appended to the disk store's pending group and
    written as buckets, fsynced, O_DIRECT where the directory takes it)
    against `fio --rw=write` with the same block size and total, O_DIRECT
    when the store used it (target >= 80%).  Also reported: the same
    offload end to end through a master (puts into an owner client with
    the SSD tier, timed from the last put to every object having its
    LOCAL_DISK replica), which includes the wait for the next offload
    heartbeat (MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS=1, the least).
(b) get of objects that live only on disk: an owner client puts
    --total-read bytes, then twice its pool of filler, so the first
    objects leave DRAM; one reader in another process gets them, one
    get_into per object, then batch_get_into of --batch objects, against
    `fio --rw=read` at iodepth 1 and at iodepth --batch (targets >= 70%
    and >= 80%).  bench/disk_store_bench read (the owner's read step
    alone) is shown beside them.
(c) a working set --ws-factor (4) times the DRAM pool: --ws-pool (1 GiB)
    of pool, --ws-factor x that of 1 MiB objects put (a put refused while
    the pool is full of objects still being offloaded is retried and
    counted), then every object read back byte-exact from another
    process; the DRAM hit rate and the disk reads
    (get_offload_rpc_read_count) reported, and every read that failed:
    a miss with its result code, time and whether it went to disk, or
    wrong bytes with where they differ (counted apart).
(d) restart recovery: --restart-objects (100,000) small objects on disk,
    the owner client closed, a new one started on the same directory:
    objects per second from its start to every object being readable
    (batch_is_exist all 1 in the reader; one in 50 read back byte-exact).
    bench/disk_rescan_bench times the disk store's rescan alone.

(a) and (b) run once per disk backend of --backends (default both:
bucket, the default bucket_storage_backend, and file_per_key, one file per
object under MOONCAKE_OFFLOAD_FSDIR), chosen through
MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR in the environment of
disk_store_bench and of the owner client; each backend is a row of its
own against the same fio runs.  (c) and (d) use the first backend.

Runs alternate store and fio (--runs of each, the order flipped every
run) on one directory under --dir (default /tmp: the machine's disk; fio
and the store write there), and every ratio is of the medians.  (c) and
(d) run once.  Needs fio (Debian's package).

usage: bench/store_ssd.py [--build build] [--dir /tmp] [--sizes 1m,4m]
                          [--total 1g] [--total-read 512m] [--pool 1g]
                          [--batch 16] [--ws-pool 1g] [--ws-factor 4]
                          [--restart-objects 100000] [--runs 3]
                          [--backends bucket,file_per_key]
                          [--figures a,b,c,d] [--json] [--quick]
"""
import argparse
import json
import os
import queue
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import master_rss  # noqa: E402
from store_aggregate import parse_size, size_label  # noqa: E402

PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
MIB = 1 << 20
# --backends names: the disk backend's descriptor (spec store.md 5.5)
BACKENDS = {"bucket": "bucket_storage_backend", "file_per_key": "file_per_key_storage_backend"}


def backend_env(be):
    """The environment that selects disk backend be in a store process."""
    return {"MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR": BACKENDS[be]}


def value(prefix, i, n):
    """The bytes of object i of prefix: known to every process without holding them."""
    import numpy as np
    return np.random.default_rng(zlib.crc32(prefix.encode()) * 1000003 + i).bytes(n)


def key(prefix, i):
    return f"{prefix}-{i:08d}"


def mismatch(k, got, want, prefix, i):
    """What a read-back that differs from its value holds instead (for the report)."""
    import numpy as np
    w = np.frombuffer(want, np.uint8)
    diff = np.flatnonzero(got != w)
    out = {"key": k, "mismatch": int(diff.size), "first": int(diff[0]), "last": int(diff[-1])}
    head = got[diff[0]:diff[0] + 64].tobytes()
    for d in (-2, -1, 1, 2):  # a neighbour's bytes where ours should be?
        if i + d >= 0 and value(prefix, i + d, len(w))[diff[0]:diff[0] + 64] == head:
            out["holds_neighbour"] = d
    if not got[diff].any():
        out["zeros"] = True
    return out


# ---- the node: one store client in its own process, JSON lines on stdin/stdout ----

def node_main(args):
    sys.path.insert(0, os.path.join(args.build, "python"))
    import numpy as np
    from mooncake.store import MooncakeDistributedStore

    s = MooncakeDistributedStore()
    t0 = time.monotonic()
    rc = s.setup("127.0.0.1", args.meta, args.segment, 16 << 20, "tcp", "", args.master,
                 enable_ssd_offload=bool(args.ssd), ssd_offload_path=args.ssd)
    print(json.dumps({"ready": rc == 0, "rc": rc, "setup_s": time.monotonic() - t0}), flush=True)
    if rc != 0:
        return 1
    reg, ptr = None, 0

    def buffer(nbytes):
        nonlocal reg, ptr
        if reg is None or reg.nbytes < nbytes:
            if reg is not None:
                s.unregister_buffer(ptr)
            reg = np.ones(nbytes, np.uint8)  # touched: no page faults inside the timing
            ptr = reg.ctypes.data
            assert s.register_buffer(ptr, reg.nbytes) == 0
        return reg, ptr

    for line in sys.stdin:
        c = json.loads(line)
        op, p = c["op"], c.get("prefix", "")
        keys = [key(p, i) for i in range(c.get("start", 0), c.get("start", 0) + c.get("n", 0))]
        out = {}
        if op == "put":
            # one object at a time; a put refused while the pool is full is retried
            ok = failed = retries = 0
            t_put = 0.0
            for j, k in enumerate(keys):
                v = value(p, c["start"] + j, c["size"])
                deadline = time.monotonic() + 60
                while True:
                    t = time.monotonic()
                    r = s.put(k, v)
                    t_put += time.monotonic() - t
                    if r == 0:
                        ok += 1
                        break
                    if time.monotonic() > deadline:
                        failed += 1
                        break
                    retries += 1
                    time.sleep(0.005)
            out = {"ok": ok, "failed": failed, "retries": retries, "put_s": t_put,
                   "t_end": time.monotonic()}
        elif op == "put_batch":
            ok = 0
            for i in range(0, len(keys), 1000):
                ks = keys[i:i + 1000]
                vs = [value(p, c["start"] + i + j, c["size"]) for j in range(len(ks))]
                r = s.put_batch(ks, vs)
                ok += len(ks) if r == 0 else 0
            out = {"ok": ok}
        elif op == "wait_disk":
            # until every key has a LOCAL_DISK replica (and, with only, no memory one)
            deadline = time.monotonic() + c.get("timeout", 600)
            left = list(keys)
            while left and time.monotonic() < deadline:
                nxt = []
                for i in range(0, len(left), 10000):
                    d = s.batch_get_replica_desc(left[i:i + 10000])
                    for k in left[i:i + 10000]:
                        rs = d.get(k) or []
                        disk = any(r.is_local_disk_replica() for r in rs)
                        mem = any(r.is_memory_replica() for r in rs)
                        if not disk or (c.get("only") and mem):
                            nxt.append(k)
                left = nxt
                if left:
                    time.sleep(0.02)
            out = {"left": len(left), "t_end": time.monotonic()}
        elif op == "get":
            size, batch = c["size"], c.get("batch", 1)
            slot = (size + 4095) & ~4095
            buf, base = buffer(slot * batch)
            n0 = s.get_offload_rpc_read_count()
            bad = bytes_ = 0
            fails = []  # (key, the get's result) for a miss, ("mismatch", ...) for bad bytes
            t_get = 0.0
            for i in range(0, len(keys), batch):
                ks = keys[i:i + batch]
                t = time.monotonic()
                nd = s.get_offload_rpc_read_count()
                if batch == 1:
                    rs = [s.get_into(ks[0], base, size)]
                else:
                    rs = s.batch_get_into(ks, [base + j * slot for j in range(len(ks))],
                                          [size] * len(ks))
                dt = time.monotonic() - t
                t_get += dt
                for j, r in enumerate(rs):
                    if r != size:
                        bad += 1
                        fails.append({"key": ks[j], "rc": r, "ms": round(dt * 1000, 1),
                                      "disk_reads": s.get_offload_rpc_read_count() - nd})
                        continue
                    bytes_ += r
                    if c.get("verify"):
                        want = value(p, c["start"] + i + j, size)
                        got = buf[j * slot:j * slot + size]
                        if got.tobytes() != want:
                            bad += 1
                            fails.append(mismatch(ks[j], got, want, p, c["start"] + i + j))
            out = {"bad": bad, "bytes": bytes_, "get_s": t_get, "fails": fails[:64],
                   "misses": sum(1 for f in fails if "rc" in f),
                   "wrong": sum(1 for f in fails if "rc" not in f),
                   "disk_reads": s.get_offload_rpc_read_count() - n0}
        elif op == "readable":
            # until batch_is_exist says 1 for every key; then every 50th read back
            deadline = time.monotonic() + c.get("timeout", 600)
            while True:
                missing = 0
                for i in range(0, len(keys), 20000):
                    missing += sum(1 for x in s.batch_is_exist(keys[i:i + 20000]) if x != 1)
                if missing == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.01)
            t_end = time.monotonic()
            bad = 0
            for i in range(0, len(keys), 50):
                v = s.get(keys[i])
                if v != value(p, c["start"] + i, c["size"]):
                    bad += 1
            out = {"missing": missing, "bad": bad, "t_end": t_end}
        elif op == "clock":
            out = {"t": time.monotonic()}
        else:
            out = {"error": f"unknown op {op}"}
        print(json.dumps(out), flush=True)
    s.close()
    return 0


class Node:
    """A node process (this script with --node)."""

    def __init__(self, build, master, segment, ssd, env=None, tag="node"):
        e = dict(os.environ)
        e.update({"MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS": "1",
                  "MC_STORE_OFFLOAD_HEARTBEAT_MAX_ITEMS": "100000",
                  "MC_STORE_PREFAULT": "off"})
        e.update(env or {})
        self.err = tempfile.TemporaryFile()
        self.argv = [PY, os.path.abspath(__file__), "--node", "--build", build,
                     "--master", master.addr, "--meta", master.meta_uri,
                     "--segment", str(segment), "--ssd", ssd]
        self.t_spawn = time.monotonic()
        self.p = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.err, text=True, env=e)
        self.lines = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(x) for x in self.p.stdout],
                         daemon=True).start()
        self.ready = self.read(120)
        if not self.ready.get("ready"):
            self.fail(f"setup failed: {self.ready}")

    def fail(self, what):
        self.err.seek(0)
        tail = self.err.read().decode(errors="replace")[-3000:]
        sys.exit(f"store_ssd: {shlex.join(self.argv)}: {what}\n{tail}")

    def read(self, timeout):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.fail("no answer")
        return json.loads(line)

    def cmd(self, timeout=900, **kw):
        self.p.stdin.write(json.dumps(kw) + "\n")
        self.p.stdin.flush()
        return self.read(timeout)

    def stop(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            try:
                self.p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.err.close()


# ---- fio and the disk store bench ----

def fio(path, rw, bs, total, depth, direct):
    argv = ["fio", "--name=ref", f"--filename={path}", f"--rw={rw}", f"--bs={bs}",
            f"--size={total}", f"--direct={1 if direct else 0}", "--ioengine=io_uring",
            f"--iodepth={depth}", "--output-format=json"]
    if rw == "write":
        argv.append("--end_fsync=1")
    r = subprocess.run(argv, check=True, capture_output=True, text=True)
    j = json.loads(r.stdout)["jobs"][0]
    side = j["write" if rw == "write" else "read"]
    return side["io_bytes"] / (side["runtime"] / 1000.0) / 1e9, shlex.join(argv)


def fio_per_file(directory, bs, total, direct):
    """The file-per-key backend's own reference: one file per object, each
    written whole and fsynced on close before the next is opened (what a
    per-key durable write costs the device), as that backend does."""
    os.makedirs(directory, exist_ok=True)
    argv = ["fio", "--name=ref", f"--directory={directory}", "--filename_format=f.$filenum",
            f"--nrfiles={max(1, total // bs)}", f"--filesize={bs}", f"--bs={bs}",
            f"--size={total}", "--rw=write", "--openfiles=1", "--fsync_on_close=1",
            f"--direct={1 if direct else 0}", "--ioengine=io_uring", "--iodepth=1",
            "--output-format=json"]
    r = subprocess.run(argv, check=True, capture_output=True, text=True)
    j = json.loads(r.stdout)["jobs"][0]["write"]
    shutil.rmtree(directory, ignore_errors=True)
    return j["io_bytes"] / (j["runtime"] / 1000.0) / 1e9, shlex.join(argv)


def dsb(build, be, *args):
    exe = master_rss.find(build, "bench/disk_store_bench")
    argv = [exe, *[str(a) for a in args]]
    env = dict(os.environ, **backend_env(be))
    r = subprocess.run(argv, capture_output=True, text=True, env=env)
    line = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    if r.returncode != 0 or not line.startswith("OK"):
        sys.exit(f"store_ssd: {shlex.join(argv)} ({BACKENDS[be]}) failed: {r.stderr[-2000:]}")
    f = dict(x.split("=", 1) for x in line.split()[1:])
    return {"gbps": int(f["bytes"]) / float(f["s"]) / 1e9, "direct": f["direct"] == "1"}, \
        shlex.join([f"{k}={v}" for k, v in backend_env(be).items()] + argv)


def drop_dir(path):
    shutil.rmtree(path, ignore_errors=True)


# ---- the figures ----

def fig_a_b_store_side(args, base, size, run, res, cmds):
    """(a) and (b)'s disk-store rows (each backend) and fio rows for one size, one run,
    A/B in order."""
    dirs = {be: os.path.join(base, f"dsb-{be}-{size}") for be in args.backends}
    f = os.path.join(base, "fio.dat")
    total = args.total // size * size
    nread = min(args.total_read, total) // size * size

    def store_w():
        for be, d in dirs.items():
            drop_dir(d)
            r, cmds[f"disk_store_bench write {be}"] = dsb(args.build, be, "write", "--dir", d,
                                                          "--size", size, "--total", total)
            res.setdefault(("a_dsb", be, size), []).append(r["gbps"])
            res["direct"] = r["direct"]

    def fio_w():
        g, cmds["fio write"] = fio(f, "write", size, total, args.fio_write_depth,
                                   res.get("direct", True))
        res.setdefault(("a_fio", size), []).append(g)
        if "file_per_key" in dirs:
            g, cmds["fio write per file"] = fio_per_file(os.path.join(base, "fio-files"), size,
                                                         total, res.get("direct", True))
            res.setdefault(("a_fio_pf", size), []).append(g)

    def store_r():
        for be, d in dirs.items():
            for b in (1, args.batch):
                r, cmds[f"disk_store_bench read {be} b{b}"] = dsb(args.build, be, "read",
                                                                  "--dir", d, "--size", size,
                                                                  "--batch", b)
                res.setdefault(("b_dsb", be, size, b), []).append(r["gbps"])

    def fio_r():
        for b in (1, args.batch):
            g, cmds[f"fio read qd{b}"] = fio(f, "read", size, nread, b, res.get("direct", True))
            res.setdefault(("b_fio", size, b), []).append(g)

    order = [(store_w, fio_w), (store_r, fio_r)]
    for a, b in order:
        if run % 2 == 0:
            a()
            b()
        else:
            b()
            a()
    for d in dirs.values():
        drop_dir(d)
    try:
        os.unlink(f)
    except FileNotFoundError:
        pass


def fig_a_b_e2e(args, m, base, be, size, run, res):
    """(a) end to end through the master and (b) the reader's gets of disk-only objects,
    the owner's disk on backend be."""
    ssd = os.path.join(base, f"owner-{be}-{size}-{run}")
    drop_dir(ssd)
    pool = args.pool
    n_read = max(args.batch, args.total_read // size)
    n_fill = 2 * pool // size
    owner = Node(args.build, m, pool, ssd, env=backend_env(be))
    reader = Node(args.build, m, 0, "")
    try:
        # (a) end to end: objects that fit in the pool, from the last put to all on disk
        n_a = max(1, min(pool // 2, args.total) // size)
        p = f"{be}{size}-{run}"  # keys of this backend's rounds only
        r = owner.cmd(op="put", prefix=f"a{p}", start=0, n=n_a, size=size)
        w = owner.cmd(op="wait_disk", prefix=f"a{p}", start=0, n=n_a)
        if r["failed"] or w["left"]:
            sys.exit(f"store_ssd: (a) e2e {be}: {r['failed']} puts failed, "
                     f"{w['left']} not on disk")
        res.setdefault(("a_e2e", be, size), []).append(
            n_a * size / (w["t_end"] - r["t_end"]) / 1e9)
        # (b) the read set, then filler until the read set is on disk only
        owner.cmd(op="put", prefix=f"b{p}", start=0, n=n_read, size=size)
        owner.cmd(op="wait_disk", prefix=f"b{p}", start=0, n=n_read)
        step = max(1, pool // 4 // size)
        for i in range(0, n_fill, step):
            owner.cmd(op="put", prefix=f"f{p}", start=i, n=min(step, n_fill - i), size=size)
            owner.cmd(op="wait_disk", prefix=f"f{p}", start=i, n=min(step, n_fill - i))
        w = owner.cmd(op="wait_disk", prefix=f"b{p}", start=0, n=n_read, only=True, timeout=60)
        if w["left"]:
            print(f"store_ssd: (b) {be}: {w['left']} of {n_read} objects still in DRAM; "
                  "their gets are DRAM hits", file=sys.stderr)
        # untimed: the reader's buffer and the owner's staging extents touched once
        # (the owner reads O_DIRECT, so a second read of an object goes to the disk again)
        reader.cmd(op="get", prefix=f"b{p}", start=0, n=min(n_read, args.batch), size=size,
                   batch=args.batch)
        for b in (1, args.batch):
            g = reader.cmd(op="get", prefix=f"b{p}", start=0, n=n_read, size=size, batch=b)
            if g["bad"]:
                sys.exit(f"store_ssd: (b) {be}: {g['bad']} gets failed: {g['fails'][:8]}")
            res.setdefault(("b_get", be, size, b), []).append(g["bytes"] / g["get_s"] / 1e9)
            res.setdefault(("b_disk_reads", be, size, b), []).append(g["disk_reads"] / n_read)
        # byte-exact, untimed
        v = reader.cmd(op="get", prefix=f"b{p}", start=0, n=min(n_read, 8), size=size,
                       batch=1, verify=True)
        if v["bad"]:
            sys.exit(f"store_ssd: (b) {be}: {v['bad']} objects read back wrong: {v['fails'][:8]}")
    finally:
        reader.stop()
        owner.stop()
        drop_dir(ssd)


def fig_c(args, m, base, res):
    size = MIB
    ssd = os.path.join(base, "owner-ws")
    drop_dir(ssd)
    n = args.ws_factor * args.ws_pool // size
    owner = Node(args.build, m, args.ws_pool, ssd, env=backend_env(args.backends[0]))
    reader = Node(args.build, m, 0, "")
    try:
        r = owner.cmd(op="put", prefix="ws", start=0, n=n, size=size)
        g = reader.cmd(op="get", prefix="ws", start=0, n=n, size=size, batch=1, verify=True)
        res["c"] = {"objects": n, "pool": args.ws_pool, "backend": args.backends[0],
                    "puts_ok": r["ok"],
                    "puts_failed": r["failed"], "put_retries": r["retries"],
                    "put_gbps": n * size / r["put_s"] / 1e9,
                    "read_ok": n - g["bad"], "read_bad": g["bad"],
                    "read_misses": g["misses"], "read_wrong": g["wrong"],
                    "read_fails": g["fails"],
                    "disk_reads": g["disk_reads"],
                    "dram_hit_rate": 1 - g["disk_reads"] / n if n else 0.0,
                    "get_gbps": g["bytes"] / g["get_s"] / 1e9 if g["get_s"] else 0.0}
    finally:
        reader.stop()
        owner.stop()
        drop_dir(ssd)


def fig_d(args, m, base, res):
    size = args.restart_size
    n = args.restart_objects
    ssd = os.path.join(base, "owner-restart")
    drop_dir(ssd)
    seg = max(64 * MIB, 2 * n * ((size + 63) & ~63))
    env = backend_env(args.backends[0])
    owner = Node(args.build, m, seg, ssd, env=env)
    reader = Node(args.build, m, 0, "")
    try:
        r = owner.cmd(op="put_batch", prefix="rs", start=0, n=n, size=size)
        w = owner.cmd(op="wait_disk", prefix="rs", start=0, n=n)
        if r["ok"] != n or w["left"]:
            sys.exit(f"store_ssd: (d) {n - r['ok']} puts failed, {w['left']} not on disk")
        owner.stop()
        t0 = time.monotonic()
        owner = Node(args.build, m, seg, ssd, env=env)
        setup_s = owner.ready["setup_s"]
        rd = reader.cmd(op="readable", prefix="rs", start=0, n=n, size=size, timeout=600)
        # the reader's clock and ours are the same CLOCK_MONOTONIC
        dt = rd["t_end"] - t0
        res["d"] = {"objects": n, "size": size, "backend": args.backends[0], "seconds": dt, "objects_per_s": n / dt,
                    "missing": rd["missing"], "bad": rd["bad"], "setup_s": setup_s}
    finally:
        reader.stop()
        owner.stop()
        drop_dir(ssd)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--node", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--master", help=argparse.SUPPRESS)
    ap.add_argument("--meta", help=argparse.SUPPRESS)
    ap.add_argument("--segment", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--ssd", default="", help=argparse.SUPPRESS)
    ap.add_argument("--build", default="build")
    ap.add_argument("--dir", default="/tmp", help="where the store and fio write")
    ap.add_argument("--sizes", default="1m,4m", help="object sizes and fio block sizes")
    ap.add_argument("--total", default="1g", help="bytes per write run (a)")
    ap.add_argument("--total-read", default="512m", help="bytes of disk-only objects read (b)")
    ap.add_argument("--pool", default="1g", help="the owner's DRAM pool in (a) and (b)")
    ap.add_argument("--batch", type=int, default=16, help="objects per batched get (b)")
    ap.add_argument("--fio-write-depth", type=int, default=16)
    ap.add_argument("--ws-pool", default="1g", help="the DRAM pool of (c)")
    ap.add_argument("--ws-factor", type=int, default=4, help="working set over pool (c)")
    ap.add_argument("--restart-objects", type=int, default=100000, help="objects of (d)")
    ap.add_argument("--restart-size", type=int, default=512, help="bytes per object of (d)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--backends", default="bucket,file_per_key",
                    help="disk backends of (a) and (b), each its own rows: "
                    + ", ".join(BACKENDS) + " ((c) and (d) use the first)")
    ap.add_argument("--figures", default="a,b,c,d")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one run (smoke)")
    args = ap.parse_args()
    if args.node:
        return node_main(args)
    if args.quick:
        args.runs, args.total, args.total_read, args.pool = 1, "32m", "16m", "32m"
        args.ws_pool, args.restart_objects, args.batch = "32m", 3000, 4
    sizes = [parse_size(x) for x in args.sizes.split(",")]
    args.backends = [x.strip() for x in args.backends.split(",") if x.strip()]
    bad = [x for x in args.backends if x not in BACKENDS]
    if bad or not args.backends:
        sys.exit(f"store_ssd: --backends {','.join(bad) or '(none)'}: not one of "
                 + ", ".join(BACKENDS))
    for a in ("total", "total_read", "pool", "ws_pool"):
        setattr(args, a, parse_size(getattr(args, a)))
    figs = set(args.figures.split(","))
    if not shutil.which("fio") and figs & {"a", "b"}:
        sys.exit("store_ssd: fio is needed (apt-get install fio)")
    base = tempfile.mkdtemp(prefix="mc-store-ssd-", dir=args.dir)
    res, cmds = {}, {}
    m = master_rss.Master(master_rss.find(args.build, "tools/mooncake_master",
                                          "src/master/mooncake_master"),
                          extra=["--enable_offload=true", "--default_kv_lease_ttl=200",
                                 "--client_ttl=2"])
    try:
        for run in range(args.runs):
            print(f"store_ssd: run {run + 1}/{args.runs}", file=sys.stderr, flush=True)
            for size in sizes:
                if figs & {"a", "b"}:
                    fig_a_b_store_side(args, base, size, run, res, cmds)
                    for be in args.backends:
                        fig_a_b_e2e(args, m, base, be, size, run, res)
        if "c" in figs:
            print("store_ssd: (c) working set", file=sys.stderr, flush=True)
            fig_c(args, m, base, res)
        if "d" in figs:
            print("store_ssd: (d) restart", file=sys.stderr, flush=True)
            fig_d(args, m, base, res)
    finally:
        m.stop()
        drop_dir(base)

    med = {k: statistics.median(v) for k, v in res.items() if isinstance(v, list)}
    if args.json:
        print(json.dumps({"medians": {"/".join(map(str, k)): v for k, v in med.items()},
                          "direct": res.get("direct"), "c": res.get("c"), "d": res.get("d"),
                          "commands": cmds, "runs": args.runs, "dir": args.dir,
                          "backends": args.backends}))
        return 0
    direct = res.get("direct")
    print(f"runs={args.runs} (medians), dir={args.dir} ({'O_DIRECT' if direct else 'buffered'}"
          f" where the store used it), {os.cpu_count()} CPU cores")
    print()
    print("| figure | backend | size | store GB/s | fio GB/s | store / fio | target |")
    print("|---|---|---|---|---|---|---|")
    for size in sizes if figs & {"a", "b"} else []:
        sl = size_label(size)
        fw = med.get(("a_fio", size), 0)
        for be in args.backends:
            for name, k in (("(a) offload write step (disk_store_bench)", "a_dsb"),
                            ("(a) offload end to end (last put -> all on disk)", "a_e2e")):
                v = med.get((k, be, size), 0)
                tgt = ">= 80%" if k == "a_dsb" else "(heartbeat wait included)"
                print(f"| {name} | {be} | {sl} | {v:.3f} | {fw:.3f} fio write "
                      f"qd{args.fio_write_depth} | {v / fw if fw else 0:.0%} | {tgt} |")
                fp = med.get(("a_fio_pf", size), 0)
                if be == "file_per_key" and fp:
                    print(f"| {name} | {be} | {sl} | {v:.3f} | {fp:.3f} fio write one file "
                          f"per object, fsync each | {v / fp:.0%} | (its own reference) |")
        for b in (1, args.batch):
            fr = med.get(("b_fio", size, b), 0)
            label = "get_into" if b == 1 else f"batch_get_into x{b}"
            tgt = ">= 70%" if b == 1 else ">= 80%"
            for be in args.backends:
                v = med.get(("b_get", be, size, b), 0)
                dr = med.get(("b_disk_reads", be, size, b), 0)
                print(f"| (b) disk-only {label}, reader process ({dr:.0%} from disk) | {be} | "
                      f"{sl} | {v:.3f} | {fr:.3f} fio read qd{b} | {v / fr if fr else 0:.0%} | "
                      f"{tgt} |")
                v = med.get(("b_dsb", be, size, b), 0)
                print(f"| (b) owner read step, batch {b} (disk_store_bench) | {be} | {sl} | "
                      f"{v:.3f} | {fr:.3f} fio read qd{b} | {v / fr if fr else 0:.0%} | |")
    c, d = res.get("c"), res.get("d")
    if c:
        print()
        print(f"(c) working set {c['objects']} x 1 MiB through a {c['pool'] >> 20} MiB pool "
              f"({c['backend']}): "
              f"puts {c['puts_ok']}/{c['objects']} ok ({c['puts_failed']} failed, "
              f"{c['put_retries']} retries of a full pool), read back byte-exact "
              f"{c['read_ok']}/{c['objects']} ({c['read_misses']} misses, "
              f"{c['read_wrong']} wrong bytes), DRAM hit rate {c['dram_hit_rate']:.1%}, "
              f"disk reads {c['disk_reads']}, get {c['get_gbps']:.3f} GB/s")
        for f in c["read_fails"]:
            print(f"(c)   failed: {json.dumps(f)}")
    if d:
        print(f"(d) restart ({d['backend']}): {d['objects']} objects of {d['size']} B readable "
              "again "
              f"{d['seconds']:.2f} s after the new client's start ({d['objects_per_s']:.0f} "
              f"objects/s; setup {d['setup_s']:.2f} s; missing {d['missing']}, "
              f"wrong {d['bad']} of every 50th read back)")
    print()
    print("(a)/(b) store and fio alternate on one directory; fio: "
          + "; ".join(f"{k}: {v}" for k, v in sorted(cmds.items()) if k.startswith("fio")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
