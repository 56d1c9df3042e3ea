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
import uuid

import pytest

from conftest import BUILD, MiB, poll_until
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
