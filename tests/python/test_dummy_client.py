"""Dummy clients (issue 15 part 2): a process attaches to a real
mooncake_client daemon with setup_dummy over @mooncake_client_<port>.sock.

The daemon runs as its own process on a real master; this test process is
the dummy.  The forwarded calls are run as one table on a real client and
on a dummy, which must give the same results, codes included.  It checks put/get (staged through the shared local buffer),
zero-copy put_from/get_into on MooncakeHostMemAllocator memory (bytes land
in the pool: a real client reads them back), exist/size/remove, that
registering memory the daemon cannot map is refused, that malformed
requests on the socket are answered with an error while the daemon keeps
serving, and that kill -9 of the daemon makes calls fail fast until a new
daemon on the same port is back, when the dummy reattaches by itself.
With a cluster secret, only a dummy that proves it attaches.
"""

import ctypes
import fcntl
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import uuid

import pytest

from conftest import BUILD, MasterDaemon, MiB, poll_until
from mooncake.store import MooncakeDistributedStore, MooncakeHostMemAllocator, ReplicateConfig

EXE = str(BUILD / "tools" / "mooncake_client")
pytestmark = pytest.mark.skipif(not os.access(EXE, os.X_OK), reason="no mooncake_client")

PROTOCOL = -2019
RPC_FAIL = -900


def start(tmp_path, master, port, tenant, env=None, extra=()):
    log = open(tmp_path / f"daemon-{uuid.uuid4().hex[:6]}.stderr", "wb+")
    p = subprocess.Popen([EXE, "--host=127.0.0.1", f"--metadata_server={master.meta_uri}",
                          f"--master_server_address={master.addr}",
                          "--global_segment_size=64 MB", f"--port={port}",
                          f"--tenant_id={tenant}", *extra],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                         env={**os.environ, **(env or {})})
    pat = re.compile(rb"mooncake_client serving segment=(\S+) .* dummy=@(\S+)")

    def ready():
        if p.poll() is not None:
            log.seek(0)
            raise AssertionError(f"exited {p.returncode}: {log.read()[-2000:]!r}")
        log.seek(0)
        return pat.search(log.read())

    m = poll_until(ready, 60, "the daemon's serving line")
    assert m.group(2).decode() == f"mooncake_client_{port}.sock"
    return p, log, m.group(1).decode()


def stop(p, log):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 0
    log.close()


def hdr(type_, req_id, payload):
    # the store protocol's 32-byte header (docs/protocol.md), then the payload
    h = bytearray(32)
    h[0:4] = b"MCST"
    h[4] = 1
    h[5] = 7
    struct.pack_into("<H", h, 6, type_)
    struct.pack_into("<H", h, 8, 0)
    struct.pack_into("<i", h, 12, 0)
    struct.pack_into("<Q", h, 16, req_id)
    struct.pack_into("<I", h, 24, len(payload))
    return bytes(h) + payload


def answer(s):
    h = b""
    while len(h) < 32:
        chunk = s.recv(32 - len(h))
        assert chunk, "the daemon hung up"
        h += chunk
    assert h[:4] == b"MCST" and h[8] & 1
    status, = struct.unpack_from("<i", h, 12)
    req_id, plen = struct.unpack_from("<QI", h, 16)
    body = b""
    while len(body) < plen:
        body += s.recv(plen - len(body))
    n, = struct.unpack_from("<I", body, 0)
    results = list(struct.unpack_from(f"<{n}q", body, 4))
    return status, req_id, results


def lstr(b):
    return struct.pack("<I", len(b)) + b


@pytest.fixture
def daemon(mc_master, tmp_path):
    port = random.randint(31000, 31999)
    tenant = "dummy-" + uuid.uuid4().hex[:6]
    p, log, seg = start(tmp_path, mc_master, port, tenant)
    yield port, tenant, seg, p, log
    stop(p, log)


def test_dummy_calls_run_in_the_daemon(mc_master, daemon):
    port, tenant, seg, _, _ = daemon
    d = MooncakeDistributedStore()
    real = MooncakeDistributedStore()
    alloc = MooncakeHostMemAllocator()
    buf = alloc.alloc(4 * MiB)
    try:
        assert d.setup_dummy(0, 8 * MiB, f"127.0.0.1:{port}") == 0
        assert d.health_check() == 0
        assert d.get_hostname() == seg
        assert real.setup("127.0.0.1", mc_master.meta_uri, 0, 16 * MiB, "tcp", "",
                          mc_master.addr, tenant_id=tenant) == 0
        # copy-based, staged through the shared local buffer
        val = os.urandom(1 * MiB + 5)
        assert d.put("dk1", val) == 0
        assert d.get("dk1") == val
        assert real.get("dk1") == val
        assert d.is_exist("dk1") == 1 and d.get_size("dk1") == len(val)
        assert d.put("big", os.urandom(9 * MiB)) == -600  # larger than the local buffer
        # zero-copy on shared memory registered whole
        assert buf != 0
        assert d.register_buffer(buf, 4 * MiB) == 0
        src = os.urandom(1 * MiB)
        ctypes.memmove(buf, src, len(src))
        assert d.put_from("dk2", buf, len(src)) == 0
        assert real.get("dk2") == src  # the bytes are in the pool
        assert d.get_into("dk2", buf + 2 * MiB, 2 * MiB) == len(src)
        assert ctypes.string_at(buf + 2 * MiB, len(src)) == src
        assert d.get_into("dk2", buf + 2 * MiB, 1000) < 0  # capacity too small
        assert d.put_from("dk3", buf + 3 * MiB, 2 * MiB) < 0  # runs past the region
        assert d.is_exist("dk3") == 0
        keys = ["b0", "b1"]
        assert d.batch_put_from(keys, [buf, buf + 4096], [4096, 4096]) == [0, 0]
        assert d.batch_get_into(keys, [buf + MiB, buf + MiB + 4096], [4096, 4096]) == \
            [4096, 4096]
        assert ctypes.string_at(buf + MiB, 8192) == ctypes.string_at(buf, 8192)
        assert d.batch_is_exist(["b0", "nope"]) == [1, 0]
        # copy-based batches, key by key through the local buffer
        vals = [os.urandom(1000 + i) for i in range(3)]
        assert d.put_batch(["pb0", "pb1", "pb2"], vals) == 0
        assert d.get_batch(["pb0", "pb1", "nope", "pb2"]) == [vals[0], vals[1], b"", vals[2]]
        assert real.get_batch(["pb0", "pb2"]) == [vals[0], vals[2]]
        assert d.upsert_batch(["pb0"], [b"new"]) == 0 and d.get("pb0") == b"new"
        # memory the daemon cannot map is refused
        plain = ctypes.create_string_buffer(4096)
        assert d.register_buffer(ctypes.addressof(plain), 4096) != 0
        assert d.register_buffer(buf, 2 * MiB) != 0  # not the whole region
        # alloc_from_mem_pool: shared memory from the dummy (0 on a real client)
        assert real.alloc_from_mem_pool(MiB) == 0
        pool = d.alloc_from_mem_pool(MiB)
        assert pool != 0 and d.register_buffer(pool, MiB) == 0
        ctypes.memmove(pool, src[:4096], 4096)
        assert d.put_from("dk5", pool, 4096) == 0 and real.get("dk5") == src[:4096]
        assert d.get_into("dk2", pool, MiB) == len(src) and ctypes.string_at(pool, 64) == src[:64]
        assert d.unregister_buffer(pool) == 0 and alloc.free(pool) == 0
        assert d.remove("dk1") == -706  # leased by the reads above, as on a real client
        assert d.remove("dk1", True) == 0 and d.is_exist("dk1") == 0
        assert d.remove("dk1") == -704
        assert d.unregister_buffer(buf) == 0
        assert d.put_from("dk4", buf, 4096) < 0
    finally:
        d.close()
        real.close()
        alloc.free(buf)
    assert d.health_check() == 1


def test_copy_gets_of_changing_sizes(daemon):
    """A copy-based get first tries the room of the last gets' sizes in one
    request and asks the size only when the object does not fit: every size
    order must give the exact bytes."""
    port = daemon[0]
    d = MooncakeDistributedStore()
    try:
        assert d.setup_dummy(0, 8 * MiB, f"127.0.0.1:{port}") == 0
        vals = {f"cg{n}": os.urandom(n) for n in (100, 3 * MiB, 5 * MiB + 3, 7 * MiB, 1)}
        for k, v in vals.items():
            assert d.put(k, v) == 0
        # small, larger (does not fit the room), smaller, larger again, missing
        for k in ("cg100", "cg3145728", "cg1", "cg5242883", "cg100", "cg7340032",
                  "cg5242883", "cg1"):
            assert d.get(k) == vals[k], k
        assert d.get("cg-missing") == b""
        # an object that grows under the same key
        assert d.put("cg-grow", b"a" * 10) == 0 and d.get("cg-grow") == b"a" * 10
        assert d.remove("cg-grow", True) == 0
        big = os.urandom(6 * MiB)
        assert d.put("cg-grow", big) == 0 and d.get("cg-grow") == big
        assert d.get("cg100") == vals["cg100"]
        assert d.put("big", os.urandom(9 * MiB)) == -600  # larger than the local buffer
    finally:
        d.close()


def test_a_flipped_replica_is_never_served_to_a_dummy(mc_master, daemon):
    """Issue 16 part 1: a dummy's reads are checked like a real client's (the
    daemon's client reads and checks them).  The replica lives in this
    process's own store, so a byte of it is flipped through its address: a
    dummy's get_into then fails with CHECKSUM_MISMATCH and its copy-based get
    returns nothing, never the bytes, and the replica is dropped."""
    port, tenant, _, _, _ = daemon
    d = MooncakeDistributedStore()
    holder = MooncakeDistributedStore()
    alloc = MooncakeHostMemAllocator()
    buf = alloc.alloc(2 * MiB)
    try:
        assert holder.setup("127.0.0.1", mc_master.meta_uri, 16 * MiB, 0, "tcp", "",
                            mc_master.addr, tenant_id=tenant) == 0
        assert d.setup_dummy(0, 4 * MiB, f"127.0.0.1:{port}") == 0
        assert buf != 0 and d.register_buffer(buf, 2 * MiB) == 0
        cfg = ReplicateConfig()
        cfg.preferred_segment = holder.get_hostname()
        for key in ("fl-zc", "fl-copy"):
            val = os.urandom(MiB + 7)
            assert d.put(key, val, cfg) == 0
            assert d.get(key) == val  # good bytes are served
            (desc,) = holder.get_replica_desc(key)
            mem = desc.get_memory_descriptor().buffer_descriptor
            assert mem.segment_name == holder.get_hostname()  # ours to flip
            p = ctypes.cast(mem.buffer_address + 54321, ctypes.POINTER(ctypes.c_uint8))
            p[0] ^= 0x20
            if key == "fl-zc":
                # the call fails (what landed in buf is not the object)
                assert d.get_into(key, buf, 2 * MiB) == -801
            else:
                assert d.get(key) == b""
            assert d.is_exist(key) == 0  # its only replica was dropped
        assert d.unregister_buffer(buf) == 0
    finally:
        d.close()
        holder.close()
        alloc.free(buf)


def test_malformed_requests_are_refused_and_others_served(daemon):
    port, _, _, _, _ = daemon
    d = MooncakeDistributedStore()
    try:
        assert d.setup_dummy(0, 4 * MiB, f"127.0.0.1:{port}") == 0
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(f"\0mooncake_client_{port}.sock")
        # a PUT whose key count runs past the payload
        s.sendall(hdr(204, 1, b"\x00" + b"\xff" * 9))
        st, rid, _ = answer(s)
        assert (st, rid) == (PROTOCOL, 1)
        # an unknown request type
        s.sendall(hdr(299, 2, b""))
        st, rid, _ = answer(s)
        assert (st, rid) == (PROTOCOL, 2)
        # a well-formed GET naming a region this connection never mapped, and
        # one past the end of nothing: refused per key, nothing read or written
        item = lstr(b"k") + struct.pack("<IQQQ", 1, 0, 0, 4096)
        s.sendall(hdr(205, 3, struct.pack("<I", 1) + item))
        st, rid, res = answer(s)
        assert rid == 3 and st == -600 and res == [-600]
        # MapRegion without a descriptor
        s.sendall(hdr(202, 4, struct.pack("<QQ", 9, 4096)))
        st, rid, _ = answer(s)
        assert (st, rid) == (-600, 4)
        # the calls forwarded since: a ranged get whose offsets do not match
        # its buffers, ranges in a region never mapped, a copy task without a
        # key, a short QueryTask, replica descriptors of two keys, a mount
        # without its strings: each refused, nothing run
        two = lstr(b"k") + struct.pack("<IQQQQQQ", 2, 0, 0, 8, 0, 8, 8)
        s.sendall(hdr(212, 10, struct.pack("<IQ", 1, 0) + struct.pack("<I", 1) + two))
        assert answer(s) == (-600, 10, [-600])
        s.sendall(hdr(214, 16, struct.pack("<IBQBB", 1, 0, 0, 0, 0) + lstr(b"") +
                      struct.pack("<I", 0) + lstr(b"") + struct.pack("<I", 0) +
                      struct.pack("<I", 0) + struct.pack("<I", 1) + lstr(b"k")))
        assert answer(s) == (-600, 16, [-600])  # a size missing: refused, not run
        s.sendall(hdr(218, 11, struct.pack("<IQQ", 2, 0, 0) + struct.pack("<I", 1) + two))
        st, rid, res = answer(s)
        assert (st, rid, res) == (-600, 11, [-600, -600])
        s.sendall(hdr(221, 12, struct.pack("<I", 0)))
        assert answer(s)[:2] == (-600, 12)
        s.sendall(hdr(223, 13, struct.pack("<Q", 1)))
        assert answer(s)[:2] == (PROTOCOL, 13)
        s.sendall(hdr(219, 14, struct.pack("<I", 2) + lstr(b"a") + lstr(b"b")))
        assert answer(s)[:2] == (-600, 14)
        s.sendall(hdr(225, 15, struct.pack("<QQI", 4096, 0, 1) + lstr(b"/dev/shm/x")))
        assert answer(s)[:2] == (-600, 15)
        # the connection still answers
        s.sendall(hdr(201, 5, b""))
        assert answer(s)[:2] == (0, 5)
        # a frame with a bad magic: that connection is closed ...
        s.sendall(b"JUNK" + b"\0" * 28)
        assert s.recv(1) == b""
        s.close()
        # ... and the daemon serves the others
        assert d.put("after", b"x" * 100) == 0
        assert d.get("after") == b"x" * 100
        assert d.health_check() == 0
    finally:
        d.close()


def test_daemon_restart_fails_fast_then_reattaches(mc_master, tmp_path, daemon):
    port, tenant, _, p, log = daemon
    d = MooncakeDistributedStore()
    try:
        assert d.setup_dummy(0, 4 * MiB, f"127.0.0.1:{port}") == 0
        assert d.put("r1", b"y" * 64) == 0
        p.kill()
        p.wait()
        assert d.put("r2", b"y" * 64) == RPC_FAIL
        assert d.get("r2") == b""
        poll_until(lambda: d.health_check() == 2, 10, "health_check to say 2")
        p2, log2, seg2 = start(tmp_path, mc_master, port, tenant)
        try:
            poll_until(lambda: d.health_check() == 0, 30, "the dummy to reattach")
            # the dead daemon's segment stays mounted until the master expires
            # it (issue 15 part 5): place on the new one
            cfg = ReplicateConfig()
            cfg.preferred_segment = seg2
            assert d.put("r3", b"z" * 64, cfg) == 0
            assert d.get("r3") == b"z" * 64
        finally:
            stop(p2, log2)
    finally:
        d.close()


def test_silent_dummy_expires_and_its_memory_is_unmapped(mc_master, tmp_path):
    # dummies ping every second: with 3 s of grace a real dummy stays, a
    # silent connection goes, and with it the daemon's mapping of its memfd
    port = random.randint(31000, 31999)
    p, log, seg = start(tmp_path, mc_master, port, "exp-" + uuid.uuid4().hex[:6],
                        env={"MC_DUMMY_EXPIRE_MS": "3000"})
    d = MooncakeDistributedStore()
    try:
        assert d.setup_dummy(0, 1 * MiB, f"127.0.0.1:{port}") == 0
        name = "silent-" + uuid.uuid4().hex[:6]
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, 65536)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(f"\0mooncake_client_{port}.sock")
        socket.send_fds(s, [hdr(202, 1, struct.pack("<QQ", 1, 65536))], [fd])
        assert answer(s)[:2] == (0, 1)
        maps = f"/proc/{p.pid}/maps"
        assert "memfd:" + name in open(maps).read()
        assert s.recv(1) == b""  # blocks until the daemon expires the connection
        poll_until(lambda: "memfd:" + name not in open(maps).read(), 10, "the unmap")
        s.close()
        os.close(fd)
        cfg = ReplicateConfig()
        cfg.preferred_segment = seg  # not a segment a killed daemon left mounted
        assert d.health_check() == 0 and d.put("alive", b"a" * 10, cfg) == 0
    finally:
        d.close()
        stop(p, log)


def test_setup_dummy_refuses_what_it_cannot_attach_to():
    d = MooncakeDistributedStore()
    try:
        assert d.health_check() == 1
        port = random.randint(31000, 31999)
        path = f"\0mooncake_client_{port}.sock"
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if probe.connect_ex(path) == 0:  # another test's daemon: leave it be
            pytest.skip("port taken")
        probe.close()
        assert d.setup_dummy(0, MiB, f"127.0.0.1:{port}") == -1  # no daemon there
        assert d.setup_dummy(0, MiB, f"192.0.2.1:{port}") == -1  # not this host
        assert d.setup_dummy(0, MiB, "127.0.0.1:0") == -1
        assert d.health_check() == 1
    finally:
        d.close()


@pytest.mark.parametrize("case", ["whole", "trailing", "cut"])
def test_dummy_reads_exactly_one_answer_frame(case):
    """A fake daemon answers the dummy's HELLO with a well-formed frame
    ("whole"), the frame and bytes past it ("trailing": only one request is
    ever outstanding, so they can belong to nothing), or a header promising
    more payload than it sends before hanging up ("cut").  Only the first
    attaches; the others fail at once instead of hanging or reading the
    stray bytes as the next answer."""
    port = random.randint(31000, 31999)
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        ls.bind(f"\0mooncake_client_{port}.sock")
    except OSError:
        pytest.skip("port taken")
    ls.listen(1)
    ls.settimeout(60)
    done = threading.Event()

    def serve():
        c, _ = ls.accept()
        with c:
            h = b""
            while len(h) < 32:
                h += c.recv(32 - len(h))
            type_, = struct.unpack_from("<H", h, 6)
            req_id, plen = struct.unpack_from("<QI", h, 16)
            body = b""
            while len(body) < plen:
                body += c.recv(plen - len(body))
            assert type_ == 200  # HELLO
            payload = struct.pack("<I", 0) + lstr(b"fake-host") + struct.pack("<I", 0)
            frame = bytearray(hdr(200, req_id, payload))
            struct.pack_into("<H", frame, 8, 1)  # an answer
            if case == "trailing":
                frame += b"\0" * 7
            elif case == "cut":
                struct.pack_into("<I", frame, 24, len(payload) + 100)
            c.sendall(bytes(frame))
            if case != "cut":
                done.wait(60)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    d = MooncakeDistributedStore()
    try:
        rc = d.setup_dummy(0, 0, f"127.0.0.1:{port}")
        if case == "whole":
            assert rc == 0 and d.get_hostname() == "fake-host"
        else:
            assert rc != 0
    finally:
        done.set()
        t.join(60)
        ls.close()
        d.close()


DUMMY_PROC = r"""
import ctypes, os, sys
from mooncake.store import MooncakeDistributedStore, MooncakeHostMemAllocator, ReplicateConfig
port, seg, me = sys.argv[1], sys.argv[2], sys.argv[3]
d = MooncakeDistributedStore()
assert d.setup_dummy(0, 4 << 20, f"127.0.0.1:{port}") == 0
sys.stdout.write("up\n"); sys.stdout.flush()
sys.stdin.readline()  # every dummy attached: go
cfg = ReplicateConfig()
cfg.preferred_segment = seg
a = MooncakeHostMemAllocator()
buf = a.alloc(1 << 20)
assert d.register_buffer(buf, 1 << 20) == 0
for i in range(20):
    v = os.urandom(4096 + i)
    assert d.put(f"{me}-{i}", v, cfg) == 0
    assert d.get(f"{me}-{i}") == v
    ctypes.memmove(buf, v, len(v))
    assert d.put_from(f"{me}-z{i}", buf, len(v), cfg) == 0
    assert d.get_into(f"{me}-z{i}", buf + 65536, 65536) == len(v)
    assert ctypes.string_at(buf + 65536, len(v)) == v
d.close()
a.free(buf)
print("ok")
"""


def test_eight_dummies_in_their_own_processes_at_once(daemon):
    port, _, seg, _, _ = daemon
    import mooncake  # the children import the same package as this process
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(mooncake.__file__))}
    procs = [subprocess.Popen([sys.executable, "-c", DUMMY_PROC, str(port), seg, f"p{i}"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
             for i in range(8)]
    try:
        for p in procs:
            assert p.stdout.readline() == "up\n"
        for p in procs:  # all eight are attached before any starts
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            out, _ = p.communicate(timeout=120)
            assert p.returncode == 0 and out.strip() == "ok"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


KILLED_DUMMY = r"""
import ctypes, sys
from mooncake.store import MooncakeDistributedStore, MooncakeHostMemAllocator, ReplicateConfig
port, seg, me, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
d = MooncakeDistributedStore()
assert d.setup_dummy(0, 2 * size, f"127.0.0.1:{port}") == 0
cfg = ReplicateConfig()
cfg.preferred_segment = seg
a = MooncakeHostMemAllocator()
buf = a.alloc(size)
assert d.register_buffer(buf, size) == 0
for i in range(1000):
    v = bytes((i * 7 + j) % 256 for j in range(256)) * (size // 256)
    ctypes.memmove(buf, v, size)
    sys.stdout.write(f"put {i}\n")
    sys.stdout.flush()
    # even: copy-based (staged in the shared local buffer); odd: zero-copy
    assert (d.put(f"{me}-{i}", v, cfg) if i % 2 == 0 else d.put_from(f"{me}-{i}", buf, size, cfg)) == 0
"""


def test_a_dummy_killed_mid_put_leaves_no_partial_object(mc_master, daemon):
    # kill -9 of a dummy while its puts run in the daemon: every key it
    # started is afterwards absent or holds exactly the bytes it put
    port, tenant, seg, _, _ = daemon
    import mooncake
    size = 8 * MiB
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(mooncake.__file__))}
    p = subprocess.Popen([sys.executable, "-c", KILLED_DUMMY, str(port), seg, "killed", str(size)],
                         stdout=subprocess.PIPE, text=True, env=env)
    real = MooncakeDistributedStore()
    try:
        started = -1
        for _ in range(7):  # the put of "put 6" is in flight, or just done
            line = p.stdout.readline()
            assert line.startswith("put "), line
            started = int(line.split()[1])
        p.kill()
        p.wait()
        assert real.setup("127.0.0.1", mc_master.meta_uri, 0, 16 * MiB, "tcp", "",
                          mc_master.addr, tenant_id=tenant) == 0
        for i in range(started + 1):
            want = bytes((i * 7 + j) % 256 for j in range(256)) * (size // 256)
            got = real.get(f"killed-{i}")
            assert got in (b"", want), f"key {i}: {len(got)} bytes, not what was put"
            assert real.is_exist(f"killed-{i}") == (1 if got else 0)
        for i in range(started):  # the ones whose put returned
            assert real.is_exist(f"killed-{i}") == 1
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        real.close()


def method_table(c, p, buf, seg):
    """The forwarded calls, on keys prefixed p; what each returned."""
    out = []
    cfg = ReplicateConfig()
    cfg.preferred_segment = seg  # not one a killed daemon of another test left mounted
    v = bytes(range(256)) * 40
    ctypes.memmove(buf, v, len(v))
    out.append(c.put(p + "a", v, cfg))
    out.append(c.put(p + "a", b"other", cfg))  # exists: 0, value kept
    out.append(c.get(p + "a") == v)
    out.append(c.get(p + "missing"))
    out.append(c.is_exist(p + "a"))
    out.append(c.is_exist(p + "missing"))
    out.append(c.get_size(p + "a"))
    out.append(c.get_size(p + "missing"))
    out.append(c.batch_is_exist([p + "a", p + "missing"]))
    out.append(c.put_parts(p + "parts", b"ab", b"cd", b"ef", config=cfg))
    out.append(c.get(p + "parts"))
    out.append(c.upsert(p + "parts", b"xyz", cfg))
    out.append(c.get(p + "parts"))
    out.append(c.put(p + "empty", b"", cfg))
    out.append(c.put_from(p + "z", buf, 4096, cfg))
    out.append(c.put_from(p + "z0", buf, 0, cfg))
    out.append(c.get_into(p + "z", buf + 65536, 8192))
    out.append(ctypes.string_at(buf + 65536, 4096) == v[:4096])
    out.append(c.get_into(p + "z", buf + 65536, 100))
    out.append(c.get_into(p + "missing", buf + 65536, 100))
    out.append(c.batch_put_from([p + "b0", p + "b1"], [buf, buf + 100], [100, 200], cfg))
    out.append(c.batch_get_into([p + "b0", p + "b1", p + "missing"],
                                [buf + 65536, buf + 70000, buf + 80000], [100, 200, 300]))
    out.append(c.upsert_from(p + "z", buf + 8, 64, cfg))
    out.append(c.get_size(p + "z"))
    out.append(c.remove(p + "a"))
    out.append(c.remove(p + "a", True))
    out.append(c.remove(p + "a"))
    out.append(c.batch_remove([p + "b0", p + "missing"], True))
    out.append(c.remove_by_regex("^" + p + "b", True))
    return out


def test_forwarded_calls_give_what_a_real_client_gives(mc_master, daemon):
    port, tenant, seg, _, _ = daemon
    d, real = MooncakeDistributedStore(), MooncakeDistributedStore()
    alloc = MooncakeHostMemAllocator()
    buf = alloc.alloc(1 * MiB)
    try:
        assert d.setup_dummy(0, 4 * MiB, f"127.0.0.1:{port}") == 0
        assert real.setup("127.0.0.1", mc_master.meta_uri, 0, 16 * MiB, "tcp", "",
                          mc_master.addr, tenant_id=tenant) == 0
        assert d.register_buffer(buf, 1 * MiB) == 0
        assert real.register_buffer(buf, 1 * MiB) == 0
        got_real = method_table(real, "mt-r-", buf, seg)
        got_dummy = method_table(d, "mt-d-", buf, seg)
        assert got_dummy == got_real, (got_dummy, got_real)
    finally:
        d.close()
        real.close()
        alloc.free(buf)


def _shards(t):
    from mooncake.store import ParallelAxis, TensorParallelism
    return [(t.chunk(2, 0)[r], TensorParallelism([ParallelAxis("tp", r, 2, 0)]))
            for r in range(2)]


def method_table_more(c, p, buf, seg, shm_path):
    """Sessions, ranges, replica calls, tasks, segment mounts, tensors and
    the multi-buffer and copy-based batches: what each returned, with keys
    stripped of the prefix p so the two tables compare."""
    import torch
    out = []
    cfg = ReplicateConfig()
    cfg.preferred_segment = seg
    v = bytes(range(256)) * 64  # 16 KiB
    ctypes.memmove(buf, v, len(v))
    dst = buf + 512 * 1024
    # sessions: a ranged put in two buffers, then ranged reads
    out.append(c.batch_put_session_start([p + "s"], [8192], cfg))
    out.append(c.batch_put_from_multi_buffer_ranges([p + "s"], [[buf, buf + 4096]],
                                                    [[4096, 4096]], [[0, 4096]]))
    out.append(c.batch_put_session_end([p + "s"]))
    out.append(c.batch_get_session_start([p + "s", p + "missing"]))
    out.append(c.batch_get_into_multi_buffer_ranges([p + "s"], [[dst, dst + 100]], [[100, 30]],
                                                    [[50, 4000]]))
    out.append(ctypes.string_at(dst, 130) == v[50:150] + v[4000:4030])
    out.append(c.batch_get_into_multi_buffer_ranges([p + "missing"], [[dst]], [[10]], [[0]]))
    out.append(c.batch_get_session_end([p + "s"]))
    out.append(c.batch_put_session_start([p + "r"], [100], cfg))
    out.append(c.batch_put_session_revoke([p + "r"]))
    out.append(c.is_exist(p + "r"))
    # get_into_ranges: two ranges of one key, a missing key
    out.append(c.get_into_ranges([dst], [[p + "s", p + "missing"]], [[[0, 1000], [2000]]],
                                 [[[8, 100], [0]]], [[[16, 32], [4]]]))
    out.append(ctypes.string_at(dst, 16) == v[8:24] and
               ctypes.string_at(dst + 1000, 32) == v[100:132])
    # replicas
    reps = c.get_replica_desc(p + "s")
    out.append([(r.is_memory_replica(), r.get_memory_descriptor().buffer_descriptor.size)
                for r in reps])
    out.append(c.get_replica_desc(p + "missing"))
    out.append(sorted(k[len(p):] for k in c.batch_get_replica_desc([p + "s", p + "missing"])))
    out.append(c.batch_replica_clear([p + "missing"]))
    # tasks (the master's answers: no second segment to copy to here)
    out.append(c.create_copy_task(p + "missing", [seg]))
    out.append(c.create_copy_task(p + "s", ["nowhere:1"]))
    out.append(c.create_move_task(p + "s", "nowhere:1", seg))
    out.append(c.query_task((1, 2)))
    # segments: a file and an allocated one, mounted where the store is
    r = c.mount_segment(shm_path, 4 * MiB)
    out.append((r["ret"], len(r["segment_ids"])))
    out.append(c.unmount_and_free_segment(r["segment_ids"], 0))
    out.append(c.unmount_and_free_segment(r["segment_ids"], 0))
    r = c.allocate_and_mount_segment(4 * MiB + 1)
    out.append((r["ret"], r["allocated_size"]))
    out.append(c.unmount_segment(r["segment_ids"], 0))
    out.append(c.unmount_segment(r["segment_ids"], 0))
    out.append(c.unmount_and_free_segment(r["segment_ids"]))
    out.append(c.unmount_local_disk_segment(0))
    out.append(c.mount_segment(shm_path, 4 * MiB, protocol="rdma")["ret"])
    # zero-copy odds and ends
    out.append(c.put_from_with_metadata(p + "md", buf + 100, buf, 50, 10, cfg))
    out.append(c.get(p + "md") == v[:10] + v[100:150])
    out.append(c.batch_put_from_multi_buffers([p + "m"], [[buf, buf + 200]], [[100, 50]], cfg))
    out.append(c.batch_get_into_multi_buffers([p + "m"], [[dst, dst + 100]], [[100, 50]]))
    out.append(ctypes.string_at(dst, 150) == v[:100] + v[200:250])
    out.append(c.batch_upsert_from([p + "m"], [buf + 7], [64], cfg))
    out.append(c.get_size(p + "m"))
    # copy-based batches and buffers
    vals = [os.urandom(3000 + i) for i in range(4)]
    out.append(c.put_batch([p + f"c{i}" for i in range(4)], vals, cfg))
    out.append(c.upsert_parts(p + "c2", vals[2][:1000], vals[2][1000:], config=cfg))
    out.append(c.get_offload_rpc_read_count())
    out.append(c.get_batch([p + "c0", p + "missing", p + "c3"]) == [vals[0], b"", vals[3]])
    out.append(c.upsert_batch([p + "c0", p + "c1"], [b"u0", b"u1"], cfg))
    out.append(c.get_batch([p + "c0", p + "c1"]))
    h = c.get_buffer(p + "c2")
    out.append(bytes(h) == vals[2] if h is not None else None)
    hs = c.batch_get_buffer([p + "c3", p + "missing"])
    out.append([bytes(x) if x is not None else None for x in hs] == [vals[3], None])
    # tensors: whole, batched, tensor-parallel, unified parallelism
    t = torch.arange(4096, dtype=torch.float32).reshape(64, 64)
    out.append(c.put_tensor(p + "t", t))
    out.append(torch.equal(c.get_tensor(p + "t"), t))
    out.append(c.batch_put_tensor([p + "t1", p + "t2"], [t, t * 2]))
    out.append([torch.equal(a, b) for a, b in zip(c.batch_get_tensor([p + "t1", p + "t2"]),
                                                    [t, t * 2])])
    out.append(c.get_tensor(p + "missing"))
    out.append(c.put_tensor_with_tp(p + "tp", t, tp_size=2, split_dim=1))
    out.append(torch.equal(c.get_tensor_with_tp(p + "tp", tp_rank=1, tp_size=2),
                           t.chunk(2, 1)[1].contiguous()))
    for shard, par in _shards(t):
        out.append(c.put_tensor_with_parallelism(p + "par", shard, par))
    out.append(torch.equal(c.get_tensor_with_parallelism(p + "par"), t))
    out.extend(tensor_variants(c, p, dst, cfg, t[:8].clone()))
    return out


def tensor_variants(c, p, dst, cfg, ts):
    """The tensor calls built on put/get and the zero-copy ones."""
    import torch
    from mooncake.store import ParallelAxis, ReadTarget, TensorParallelism
    out = []
    out.append(c.upsert_tensor(p + "t", ts))
    out.append(c.pub_tensor(p + "pt", ts, cfg))
    out.append(c.upsert_pub_tensor(p + "pt", ts * 3, cfg))
    out.append(c.batch_upsert_tensor([p + "t1"], [ts]))
    out.append(c.batch_pub_tensor([p + "pb"], [ts], cfg))
    out.append(c.batch_upsert_pub_tensor([p + "pb"], [ts * 2], cfg))
    n = c.get_size(p + "pt")
    out.append(n)
    out.append(torch.equal(c.get_tensor_into(p + "pt", dst, 65536), ts * 3))
    gs = c.batch_get_tensor_into([p + "pb", p + "missing"], [dst + 65536, dst + 131072],
                                 [65536, 65536])
    out.append((torch.equal(gs[0], ts * 2), gs[1]))
    # the serialized tensor is at dst now: put it back from there
    out.append(c.put_tensor_from(p + "tf", dst, n, cfg))
    out.append(c.upsert_tensor_from(p + "tf", dst, n, cfg))
    out.append(c.batch_put_tensor_from([p + "tf2"], [dst], [n]))
    out.append(c.batch_upsert_tensor_from([p + "tf2"], [dst], [n]))
    out.append(torch.equal(c.get_tensor(p + "tf2"), ts * 3))
    # tensor parallel: shards under <key>_tp_<rank>
    out.append(c.pub_tensor_with_tp(p + "tq", ts, cfg, tp_size=2, split_dim=1))
    out.append(c.batch_put_tensor_with_tp([p + "tb"], [ts], tp_size=2, split_dim=0))
    out.append(c.batch_pub_tensor_with_tp([p + "tc"], [ts], cfg, tp_size=2, split_dim=0))
    out.append([torch.equal(x, ts.chunk(2, 0)[1])
                for x in c.batch_get_tensor_with_tp([p + "tb", p + "tc"], tp_rank=1, tp_size=2)])
    g = c.get_tensor_with_tp_into(p + "tq", dst + 65536, 65536, tp_rank=0, tp_size=2,
                                  split_dim=1)
    out.append(torch.equal(g, ts.chunk(2, 1)[0].contiguous()))
    gs = c.batch_get_tensor_with_tp_into([p + "tb"], [dst + 65536], [65536], tp_rank=0,
                                         tp_size=2)
    out.append(torch.equal(gs[0], ts.chunk(2, 0)[0]))
    out.append(c.put_tensor_with_tp_from(p + "tr", dst, n, 0, 2, 0))
    out.append(c.batch_put_tensor_with_tp_from([p + "ts"], [dst], [n], 0, 2, 0))
    out.append(torch.equal(c.get_tensor_with_tp(p + "ts", tp_rank=1, tp_size=2),
                           (ts * 3).chunk(2, 0)[1]))
    # unified parallelism
    par = [TensorParallelism([ParallelAxis("tp", r, 2, 0)]) for r in range(2)]
    halves = ts.chunk(2, 0)
    out.append(c.upsert_tensor_with_parallelism(p + "u", halves[0], par[0], cfg))
    out.append(c.batch_put_tensor_with_parallelism([p + "u2"], [halves[1]], [par[1]], cfg))
    out.append(c.batch_upsert_tensor_with_parallelism([p + "u2"], [halves[1]], [par[1]], cfg))
    out.append(c.put_tensor_with_parallelism_from(p + "uf", dst, n, par[0], cfg))
    out.append(c.upsert_tensor_with_parallelism_from(p + "uf", dst, n, par[0], cfg))
    out.append(c.batch_put_tensor_with_parallelism_from([p + "ug"], [dst], [n], [par[1]], cfg))
    out.append(c.batch_upsert_tensor_with_parallelism_from([p + "ug"], [dst], [n], [par[1]],
                                                           cfg))
    g = c.get_tensor_with_parallelism_into(p + "uf", dst + 65536, 65536,
                                           ReadTarget("shard", par[0]))
    out.append(None if g is None else torch.equal(g, ts * 3))
    got = c.batch_get_tensor_with_parallelism([p + "u", p + "missing"],
                                              [ReadTarget("shard", par[0]), None])
    out.append((torch.equal(got[0], halves[0]), got[1]))
    got = c.batch_get_tensor_with_parallelism_into([p + "ug"], [dst + 65536], [65536],
                                                   [ReadTarget("shard", par[1])])
    out.append(None if got[0] is None else torch.equal(got[0], ts * 3))
    # safetensors files, written and read through the store
    path = os.path.join(tempfile.gettempdir(), f"{p}{uuid.uuid4().hex[:8]}.safetensors")
    try:
        out.append(c.save_tensor_to_safetensor(p + "pt", path))
        back = c.load_tensor_from_safetensor(file_name=path, key=p + "loaded")
        out.append(back is not None and torch.equal(back, ts * 3))
        out.append(torch.equal(c.get_tensor(p + "loaded"), ts * 3))
    finally:
        if os.path.exists(path):
            os.unlink(path)
    return out


def test_more_forwarded_calls_give_what_a_real_client_gives(tmp_path):
    # a master of its own: the calls without a config (put_tensor) place
    # anywhere, and no segment of another test's killed daemon may be there
    pytest.importorskip("torch")
    mc_master = MasterDaemon(tmp_path, extra=("--default_kv_lease_ttl=500",))
    port, tenant = random.randint(31000, 31999), "default"
    p, log, seg = start(tmp_path, mc_master, port, tenant)
    d, real = MooncakeDistributedStore(), MooncakeDistributedStore()
    alloc = MooncakeHostMemAllocator()
    buf = alloc.alloc(1 * MiB)
    shm = f"/dev/shm/mc-dummy-test-{uuid.uuid4().hex[:8]}"
    with open(shm, "wb") as f:
        f.truncate(4 * MiB)
    try:
        assert d.setup_dummy(0, 4 * MiB, f"127.0.0.1:{port}") == 0
        assert real.setup("127.0.0.1", mc_master.meta_uri, 0, 16 * MiB, "tcp", "",
                          mc_master.addr, tenant_id=tenant) == 0
        assert d.register_buffer(buf, 1 * MiB) == 0
        assert real.register_buffer(buf, 1 * MiB) == 0
        got_real = method_table_more(real, "mm-r-", buf, seg, shm)
        got_dummy = method_table_more(d, "mm-d-", buf, seg, shm)
        assert got_dummy == got_real, [(i, a, b) for i, (a, b) in
                                       enumerate(zip(got_dummy, got_real)) if a != b]
        # the daemon still serves the first table's calls afterwards
        assert d.is_exist("mm-d-s") == 1 and real.get("mm-d-c3") == d.get("mm-d-c3")
        # remove_all through the dummy empties the store for both
        assert d.remove_all(True) > 0
        assert real.is_exist("mm-r-s") == 0 and d.is_exist("mm-d-s") == 0
    finally:
        d.close()
        real.close()
        alloc.free(buf)
        os.unlink(shm)
        stop(p, log)
        mc_master.stop()


# Methods of spec store.md 9.3 that the two tables above do not run, and why.
# Everything else is in a table, on a real client and on a dummy alike.
NOT_IN_A_TABLE = {
    # set-up and lifecycle: differ by design, tested on their own above
    "setup": "a dummy is set up with setup_dummy",
    "setup_dummy": "test_dummy_calls_run_in_the_daemon and the refusal test",
    "init_all": "sets up a real client (upstream's legacy set-up)",
    "close": "every test; health_check then says 1",
    "health_check": "0/2 as the daemon lives or not: the restart test",
    "get_hostname": "a dummy names its daemon's segment: test_dummy_calls_run_in_the_daemon",
    "alloc_from_mem_pool": "0 on a real client, shared memory on a dummy (upstream): "
                           "test_dummy_calls_run_in_the_daemon",
    "register_buffer": "every table registers its buffer; on a dummy only shared memory "
                       "registered whole (upstream): test_dummy_calls_run_in_the_daemon",
    "unregister_buffer": "test_dummy_calls_run_in_the_daemon",
    "remove_all": "would remove the other table's objects: test_more_forwarded_calls_give_"
                  "what_a_real_client_gives ends with it",
    # no CUDA in CI: the CPU torch refuses these the same way on both
    "get_tensor_into_cuda": "CUDA only",
    "batch_get_tensor_into_cuda": "CUDA only",
}


def test_every_store_method_is_in_a_table_or_said_why():
    import inspect
    from test_store_parallelism import SPEC_METHODS
    called = set()
    for fn in (method_table, method_table_more, tensor_variants):
        called |= set(re.findall(r"\bc\.(\w+)\(", inspect.getsource(fn)))
    missing = sorted(m for m in SPEC_METHODS if m not in called and m not in NOT_IN_A_TABLE)
    assert not missing, f"store methods neither in a dummy/real table nor excused: {missing}"
    stale = sorted(m for m in NOT_IN_A_TABLE if m in called)
    assert not stale, f"in a table now, drop from NOT_IN_A_TABLE: {stale}"


NOBODY_MOUNT = r"""
import json, sys
from mooncake.store import MooncakeDistributedStore
port, theirs, mine = sys.argv[1], sys.argv[2], sys.argv[3]
d = MooncakeDistributedStore()
assert d.setup_dummy(0, 1 << 20, f"127.0.0.1:{port}") == 0
out = [d.mount_segment(theirs, 4 << 20)["ret"]]
r = d.mount_segment(mine, 4 << 20)
out += [r["ret"], d.unmount_and_free_segment(r["segment_ids"], 0)]
d.close()
print(json.dumps(out))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a root daemon and a second user")
def test_root_daemon_mounts_only_files_of_the_dummys_user(daemon):
    # a daemon run as root serves every user's dummies; a dummy must not get
    # it to map (and so expose and overwrite) a file its own user cannot
    import json
    port = daemon[0]
    tag = uuid.uuid4().hex[:8]
    theirs, mine = f"/dev/shm/mc-root-{tag}", f"/dev/shm/mc-nobody-{tag}"
    for path in (theirs, mine):
        with open(path, "wb") as f:
            f.truncate(4 * MiB)
    os.chown(mine, 65534, 65534)
    os.chmod(mine, 0o600)
    import mooncake
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(mooncake.__file__))}

    def as_nobody():
        os.setgid(65534)
        os.setuid(65534)

    try:
        p = subprocess.run([sys.executable, "-c", NOBODY_MOUNT, str(port), theirs, mine],
                           capture_output=True, text=True, env=env, cwd="/",
                           preexec_fn=as_nobody, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        assert json.loads(p.stdout) == [-600, 0, 0]
    finally:
        os.unlink(theirs)
        os.unlink(mine)

def test_cluster_secret_on_the_dummy_socket(tmp_path, monkeypatch):
    """With MC_AUTH_SECRET the daemon's socket runs the handshake
    (base/auth_hs.h) first: a dummy with another secret, or none, does not
    attach (and the daemon logs the refusal); one with the secret works."""
    from conftest import MasterDaemon
    # the master and the daemon take it by their flag, the dummy (this
    # process) from the environment
    sf = tmp_path / "secret"
    sf.write_text("dummy-s3cret\n")
    sf.chmod(0o600)
    flag = f"--auth_secret_file={sf}"
    monkeypatch.delenv("MC_AUTH_SECRET_FILE", raising=False)
    monkeypatch.delenv("MC_AUTH_SECRET", raising=False)
    m = MasterDaemon(tmp_path, extra=(flag,))
    port = random.randint(31000, 31999)
    p = log = None
    try:
        p, log, seg = start(tmp_path, m, port, "auth-" + uuid.uuid4().hex[:6], extra=(flag,))
        for wrong in ("not-it", None):
            if wrong:
                monkeypatch.setenv("MC_AUTH_SECRET", wrong)
            else:
                monkeypatch.delenv("MC_AUTH_SECRET", raising=False)
            d = MooncakeDistributedStore()
            assert d.setup_dummy(0, 4 * MiB, f"127.0.0.1:{port}") != 0, wrong
            d.close()

        def refused():
            log.seek(0)
            return b"refused a connection to the dummy-client port" in log.read()
        poll_until(refused, 10, "the daemon's refusal line")
        # the socket speaks the handshake first: an upstream frame is not answered
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(f"\0mooncake_client_{port}.sock")
        s.sendall(hdr(201, 1, b""))
        try:
            got = s.recv(64)
        except ConnectionResetError:
            got = b""
        assert got == b"", "answered a frame before the handshake"
        s.close()
        monkeypatch.setenv("MC_AUTH_SECRET", "dummy-s3cret")
        d = MooncakeDistributedStore()
        try:
            assert d.setup_dummy(0, 4 * MiB, f"127.0.0.1:{port}") == 0
            assert d.get_hostname() == seg
            val = os.urandom(70000)
            assert d.put("auth-k", val) == 0
            assert d.get("auth-k") == val
        finally:
            d.close()
    finally:
        if p:
            stop(p, log)
        m.stop()
