"""The P2P store (mooncake.p2p_store) against a real etcd, peers in real
processes on loopback.

One etcd member serves the module; every test uses its own object names.
Peers in other processes are tests/python/p2p_peer.py, driven by JSON lines;
the test process is a peer too.  Waits are for answers on pipes; nothing
sleeps to synchronise.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from etcd_proc import EtcdServer, etcd_binary

from mooncake.p2p_store import (P2PStore, ErrAddressOverlapped, ErrInvalidArgument,
                                ErrKeyExists, ErrPayloadNotFound, ErrPayloadNotOpened,
                                ErrPayloadOpened, ErrTooManyRetries, MIN_ATTEMPTS)

HERE = Path(__file__).resolve().parent
KiB, MiB = 1 << 10, 1 << 20
PREFIX = "mooncake/checkpoint/"

pytestmark = pytest.mark.skipif(not etcd_binary(), reason="etcd-server is not installed")


def pattern(seed, n):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def digest(arrays):
    h = hashlib.blake2b(digest_size=16)
    for a in arrays:
        h.update(memoryview(a))
    return h.hexdigest()


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    srv = EtcdServer(str(tmp_path_factory.mktemp("etcd")))
    yield srv
    srv.stop()


class Peer:
    def __init__(self, etcd, p2p=False):
        args = [sys.executable, str(HERE / "p2p_peer.py"), etcd.endpoint] + (["--p2p"] if p2p else [])
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                                         [str(HERE)] + sys.path)))
        self.name = self.cmd("hello")["name"]

    def cmd(self, op, **kw):
        self.proc.stdin.write(json.dumps(dict(op=op, **kw)) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"peer exited with {self.proc.wait()}"
        return json.loads(line)

    def ok(self, op, **kw):
        ans = self.cmd(op, **kw)
        assert ans["ok"], ans
        return ans

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def peers(etcd):
    made = []

    def make(p2p=False):
        made.append(Peer(etcd, p2p))
        return made[-1]
    yield make
    for p in made:
        p.kill()


@pytest.fixture
def store(etcd):
    stores = []

    def make(p2p=False):
        name = "127.0.0.1:0" if p2p else f"127.0.0.1:{os.getpid()}{len(stores)}"
        stores.append(P2PStore(etcd.endpoint, name, "P2PHANDSHAKE" if p2p else None))
        return stores[-1]
    yield make
    for s in stores:
        s.close()


def stored(etcd, name):
    raw = etcd.kv_get(PREFIX + name)
    return None if raw is None else json.loads(raw)


def buffers(sizes):
    arrays = [np.zeros(n, np.uint8) for n in sizes]
    return arrays, [a.ctypes.data for a in arrays]


SIZES = [3 * MiB + 5, MiB // 2]  # 4 + 1 shards of at most 1 MiB; short last shards


def expected(seed, sizes):
    return digest([pattern(seed + i, n) for i, n in enumerate(sizes)])


def test_layout_chain_and_cleanup(etcd, peers, store):
    """Seed in one process, two readers; the catalog JSON is upstream's; the
    key goes when the last holder leaves."""
    seed = peers()
    seed.ok("register", name="t1/ckpt", sizes=SIZES, shard=MiB, seed=7)
    doc = stored(etcd, "t1/ckpt")
    assert list(doc) == ["name", "size", "size_list", "max_shard_size", "shards"]
    assert doc["name"] == "t1/ckpt" and doc["size"] == sum(SIZES)
    assert doc["size_list"] == SIZES and doc["max_shard_size"] == MiB
    assert [s["size"] for s in doc["shards"]] == [MiB, MiB, MiB, 5, MiB // 2]
    for s in doc["shards"]:
        assert list(s) == ["size", "gold", "replica_list"]
        assert s["replica_list"] is None  # an empty list is null, as Go writes it
        assert [g["segment_name"] for g in s["gold"]] == [seed.name]
    # offsets are the holder's absolute addresses, shard by shard
    offs = [s["gold"][0]["offset"] for s in doc["shards"]]
    assert offs[1] - offs[0] == MiB and offs[2] - offs[1] == MiB

    r1, r2 = store(), store()
    a1, p1 = buffers(SIZES)
    r1.get_replica("t1/ckpt", p1, SIZES)
    assert digest(a1) == expected(7, SIZES)
    doc = stored(etcd, "t1/ckpt")
    assert all([x["segment_name"] for x in s["replica_list"]] == [r1.get_local_server_name()]
               for s in doc["shards"])
    a2, p2 = buffers(SIZES)
    r2.get_replica("t1/ckpt", p2, SIZES)
    assert digest(a2) == expected(7, SIZES)
    doc = stored(etcd, "t1/ckpt")
    names = {r1.get_local_server_name(), r2.get_local_server_name()}
    assert all({x["segment_name"] for x in s["replica_list"]} == names for s in doc["shards"])

    infos = r1.list("t1/")
    assert [(i.name, i.max_shard_size, i.total_size, i.size_list) for i in infos] == \
        [("t1/ckpt", MiB, sum(SIZES), SIZES)]
    assert r1.list("t1/nothing") == []

    seed.ok("unregister", name="t1/ckpt")
    doc = stored(etcd, "t1/ckpt")
    assert doc is not None and all(s["gold"] is None for s in doc["shards"])
    r1.delete_replica("t1/ckpt")
    assert stored(etcd, "t1/ckpt") is not None
    r2.delete_replica("t1/ckpt")
    assert stored(etcd, "t1/ckpt") is None
    seed.close()


def test_errors(etcd, store):
    s, other = store(), store()
    a, p = buffers([2 * MiB])
    a[0][:] = pattern(1, 2 * MiB)
    with pytest.raises(ErrInvalidArgument, match="divide 4 GiB"):
        s.register("t2/x", p, [2 * MiB], 3 * MiB)
    with pytest.raises(ErrInvalidArgument, match="empty"):
        s.register("t2/x", [], [], MiB)
    s.register("t2/x", p, [2 * MiB], MiB)
    with pytest.raises(ErrPayloadOpened):
        s.register("t2/x", p, [2 * MiB], MiB)
    with pytest.raises(ErrAddressOverlapped):
        s.register("t2/y", [p[0] + 4096], [MiB], MiB)
    b, q = buffers([2 * MiB])
    with pytest.raises(ErrKeyExists, match="already exists"):
        other.register("t2/x", q, [2 * MiB], MiB)
    with pytest.raises(ErrPayloadNotFound):
        other.get_replica("t2/missing", q, [2 * MiB])
    # the receiver's layout must be the stored one (upstream indexes past it)
    with pytest.raises(ErrInvalidArgument, match="same sizes"):
        other.get_replica("t2/x", [q[0], q[0] + MiB], [MiB, MiB])
    with pytest.raises(ErrPayloadNotOpened):
        other.unregister("t2/x")
    with pytest.raises(ErrPayloadNotOpened):
        other.delete_replica("t2/x")
    # the failed calls left nothing registered: the same buffer works now
    other.get_replica("t2/x", q, [2 * MiB])
    assert digest(b) == digest(a)
    # force_create replaces the object (and drops its holders)
    c, r = buffers([MiB])
    other.delete_replica("t2/x")
    other.register("t2/x", r, [MiB], MiB, force_create=True)
    assert stored(etcd, "t2/x")["size_list"] == [MiB]
    s.unregister("t2/x")  # its gold was already dropped by the overwrite
    other.unregister("t2/x")
    assert stored(etcd, "t2/x") is None


def test_refcounted_registration(etcd, store):
    """One buffer behind two objects: registered once, released with the last."""
    s = store()
    a, p = buffers([MiB])
    s.register("t3/a", p, [MiB], MiB)
    s.register("t3/b", p, [MiB], MiB)
    s.unregister("t3/a")
    r = store()
    b, q = buffers([MiB])
    r.get_replica("t3/b", q, [MiB])  # t3/b is still readable: the range is still registered
    s.unregister("t3/b")
    r.delete_replica("t3/b")


def test_corrupt_catalog_is_refused(etcd, store):
    s = store()
    etcd.kv_put(PREFIX + "t4/bad", b'{"name":"t4/bad","size":10,"size_list":[10],'
                b'"max_shard_size":4,"shards":[{"size":4,"gold":null,"replica_list":null}]}')
    a, p = buffers([10])
    with pytest.raises(Exception, match="split of size_list"):
        s.get_replica("t4/bad", p, [10])
    assert [i.name for i in s.list("t4/")] == []  # skipped, not fatal


def test_fallback_order_and_dead_holders(etcd, peers, store):
    """Replica first; a dead replica falls back to gold; with every holder
    dead the pull fails with ErrTooManyRetries after its attempts."""
    seed, rep = peers(p2p=True), peers(p2p=True)
    seed.ok("register", name="t5/ckpt", sizes=SIZES, shard=MiB, seed=11)
    assert rep.ok("get", name="t5/ckpt", sizes=SIZES)["digest"] == expected(11, SIZES)
    rep.kill()  # a replica that is listed but gone: attempt 0 picks it
    s = store(p2p=True)
    a, p = buffers(SIZES)
    s.get_replica("t5/ckpt", p, SIZES)
    assert digest(a) == expected(11, SIZES)
    s.delete_replica("t5/ckpt")

    seed.kill()
    b, q = buffers(SIZES)
    t0 = time.monotonic()
    with pytest.raises(ErrTooManyRetries, match=f"too many retries.*{MIN_ATTEMPTS} attempts"):
        s.get_replica("t5/ckpt", q, SIZES)
    assert time.monotonic() - t0 < 30
    # and the name is not left open: the same call fails the same way again
    with pytest.raises(ErrTooManyRetries):
        s.get_replica("t5/ckpt", q, SIZES)


def test_replicas_come_before_gold(etcd, store):
    """A reader takes a random replica first and then walks the replicas in
    list order, all before the gold holder (spec 3.2).  The one live replica
    holds other bytes than gold (B, not A), so the bytes say who served the
    pull: behind two dead replicas it is always the live one, whichever the
    random first pick was (three readers); with no live replica left gold
    serves (test_fallback_order_and_dead_holders, unit_p2p)."""
    gold, holder = store(p2p=True), store(p2p=True)
    a, p = buffers([MiB])
    a[0][:] = pattern(21, MiB)
    gold.register("t10/pref", p, [MiB], MiB)
    b, q = buffers([MiB])
    b[0][:] = pattern(22, MiB)
    holder.register("t10/holder", q, [MiB], MiB)  # B is registered with its engine
    doc = stored(etcd, "t10/pref")
    doc["shards"][0]["replica_list"] = [
        {"segment_name": "127.0.0.1:1", "offset": 4096},  # nothing listens on these
        {"segment_name": "127.0.0.1:2", "offset": 4096},
        {"segment_name": holder.get_local_server_name(), "offset": q[0]}]
    etcd.kv_put(PREFIX + "t10/pref", json.dumps(doc, separators=(",", ":")).encode())
    for _ in range(3):
        r = store(p2p=True)
        c, u = buffers([MiB])
        r.get_replica("t10/pref", u, [MiB])
        assert digest(c) == digest(b), "gold served the pull while a live replica was listed"
        r.delete_replica("t10/pref")
    holder.unregister("t10/holder")
    gold.unregister("t10/pref")


def test_registration_in_4gib_chunks(etcd, store):
    """A buffer over 4 GiB goes to the engine in chunks of at most 4 GiB, and
    the same range behind a second object is counted, not registered again
    (spec 3.4).  In etcd mode the engine publishes its buffers under
    mooncake/ram/<name>, where the chunks show.  The 4 GiB + 1 MiB buffer is
    address space only (MAP_NORESERVE, never touched): registration reads no
    byte of it."""
    import ctypes
    import mmap
    size = (4 << 30) + MiB
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    MAP_NORESERVE = 0x4000
    addr = libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE,
                     mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        pytest.skip(f"cannot map {size} bytes of address space")
    s = store()  # etcd mode: the engine's buffers are in etcd

    def published():
        seg = json.loads(etcd.kv_get("mooncake/ram/" + s.get_local_server_name()))
        return sorted((b["addr"], b["length"]) for b in seg["buffers"])
    try:
        s.register("t11/big", [addr], [size], 1 << 30)
        doc = stored(etcd, "t11/big")
        assert [sh["size"] for sh in doc["shards"]] == [1 << 30] * 4 + [MiB]
        assert [sh["gold"][0]["offset"] for sh in doc["shards"]] == \
            [addr + i * (1 << 30) for i in range(5)]
        assert published() == [(addr, 4 << 30), (addr + (4 << 30), MiB)]
        s.register("t11/again", [addr], [size], 1 << 30)
        assert len(published()) == 2
        s.unregister("t11/big")
        assert published() == [(addr, 4 << 30), (addr + (4 << 30), MiB)]  # still referenced
        s.unregister("t11/again")
        assert published() == []
        assert stored(etcd, "t11/big") is None and stored(etcd, "t11/again") is None
    finally:
        s.close()
        libc.munmap(addr, size)


def test_p2phandshake_names_are_real(etcd, store):
    """In P2PHANDSHAKE mode the catalog names the engine's real host:port."""
    s = store(p2p=True)
    name = s.get_local_server_name()
    host, port = name.rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0
    a, p = buffers([MiB])
    a[0][:] = pattern(3, MiB)
    s.register("t6/x", p, [MiB], 256 * KiB)
    assert {g["segment_name"] for sh in stored(etcd, "t6/x")["shards"] for g in sh["gold"]} == {name}
    r = store(p2p=True)
    b, q = buffers([MiB])
    r.get_replica("t6/x", q, [MiB])
    assert digest(b) == digest(a)
    r.delete_replica("t6/x")
    s.unregister("t6/x")


def test_close_leaves_the_catalog(etcd, peers, store):
    """A peer that closes right after its last call (no delete_replica or
    unregister) takes its locations out of the catalog first, so a later
    reader never picks it; upstream's Close left them (readers then spent
    attempts on a holder that was gone)."""
    seed = peers()
    seed.ok("register", name="t9/ckpt", sizes=SIZES, shard=MiB, seed=9)
    r1, r2 = store(), store()
    a1, p1 = buffers(SIZES)
    r1.get_replica("t9/ckpt", p1, SIZES)
    gone = r1.get_local_server_name()
    assert all(gone in {x["segment_name"] for x in s["replica_list"]}
               for s in stored(etcd, "t9/ckpt")["shards"])
    r1.close()
    doc = stored(etcd, "t9/ckpt")
    assert all(s["replica_list"] is None for s in doc["shards"]), doc
    a2, p2 = buffers(SIZES)
    r2.get_replica("t9/ckpt", p2, SIZES)
    assert digest(a2) == expected(9, SIZES)
    seed.close()  # the holder's process ends without unregister: its gold goes too
    doc = stored(etcd, "t9/ckpt")
    assert all([g["segment_name"] for g in (s["gold"] or [])] == [] for s in doc["shards"]), doc
    r2.close()  # the last holder: the key goes
    assert stored(etcd, "t9/ckpt") is None


def test_concurrent_readers_all_recorded(etcd, store):
    """Readers racing on the compare-and-swap all end up in replica_list."""
    s = store(p2p=True)
    a, p = buffers([2 * MiB])
    a[0][:] = pattern(5, 2 * MiB)
    s.register("t7/x", p, [2 * MiB], MiB)
    readers = [store(p2p=True) for _ in range(4)]
    bufs = [buffers([2 * MiB]) for _ in readers]
    errs = []

    def pull(r, q):
        try:
            r.get_replica("t7/x", q, [2 * MiB])
        except Exception as e:  # reported below
            errs.append(e)
    ts = [threading.Thread(target=pull, args=(r, b[1])) for r, b in zip(readers, bufs)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errs
    assert all(digest(b[0]) == digest(a) for b in bufs)
    names = {r.get_local_server_name() for r in readers}
    for sh in stored(etcd, "t7/x")["shards"]:
        assert {x["segment_name"] for x in sh["replica_list"]} == names
    for r in readers:
        r.delete_replica("t7/x")
    s.unregister("t7/x")
    assert stored(etcd, "t7/x") is None


def test_example_trainer_and_inferencer(etcd):
    """tools/p2p_store_example, upstream's example program, in both roles."""
    exe = Path(os.environ.get("MC_BUILD_DIR", HERE.parents[1] / "build")) / "tools" / "p2p_store_example"
    if not exe.exists():
        pytest.skip(f"{exe} not built")
    common = [f"--metadata_server={etcd.endpoint}", "--file_size_mb=8", "--shard_size_mb=1",
              "--name=foo/example"]
    trainer = subprocess.Popen([str(exe), "--cmd=trainer", "--local_server_name=127.0.0.1:0",
                                "--p2p_handshake", "--wait_sec=60"] + common,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in trainer.stdout:
            lines.append(line)
            if line.strip() == "ready":
                break
        assert any("listed foo/example: 8388608 bytes" in x for x in lines), lines
        inf = subprocess.run([str(exe), "--cmd=inferencer", "--local_server_name=127.0.0.1:0",
                              "--p2p_handshake"] + common, capture_output=True, text=True,
                             timeout=60)
        assert inf.returncode == 0, inf.stderr
        assert "verified 8388608 bytes" in inf.stdout
        trainer.stdin.close()
        assert trainer.wait(timeout=30) == 0
        assert stored(etcd, "foo/example") is None
        bad = subprocess.run([str(exe), "--device_name=mlx5_0"] + common, capture_output=True,
                             text=True, timeout=30)
        assert bad.returncode == 2 and "--device_name is not supported" in bad.stderr
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()
