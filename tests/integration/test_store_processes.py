"""Mooncake Store over real processes on loopback.

Each test starts its own ``mooncake_master`` (embedded HTTP metadata server,
port 0 for every listener, a short --client_ttl) and two or three
``store_node`` processes (tests/integration/store_node.c: a store client
over the public API, one command per stdin line), and checks what crosses
process boundaries: data put by one client is read back bit-exact by
another from a replica on a third party's segment; a writer killed after
PutStart leaves nothing readable and its space comes back; a client killed
while holding segments makes its objects unreadable (never garbage) after
client_ttl while the master keeps serving the others; bad requests get
their error codes; a malformed frame closes only its own connection.

Raw-protocol steps use mcproto.py (docs/protocol.md).  Every wait is a
bounded poll of an observable condition (a reply line, the master's HTTP
admin pages), never a bare sleep.
"""

import json
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import BUILD, START_TIMEOUT, Proc, ProcError, _find_binary

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mcproto  # noqa: E402

CLIENT_TTL_S = 2
MIB = 1 << 20


def master_path():
    return _find_binary("MC_MASTER", "mooncake_master", ["tools/mooncake_master"])


def store_node_path():
    return _find_binary("MC_STORE_NODE", "store_node", ["tests/integration/store_node"])


def wait_until(pred, timeout, what, interval=0.05):
    """Poll pred() until it returns a true value; fail after timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = pred()
        if last:
            return last
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.1f}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


class Master(Proc):
    """mooncake_master; its ports come from the 'listening ...' line on stderr."""

    def wait_listening(self):
        pat = re.compile(r"listening rpc=(\d+) metrics=(\d+) metadata=(\d+)")

        def found():
            if not self.alive():
                raise ProcError(f"master exited (rc={self.p.poll()}); {self.stderr_tail()}")
            m = pat.search(self.log_path.read_bytes().decode(errors="replace"))
            return m

        m = wait_until(found, START_TIMEOUT, "the master's 'listening' line")
        self.rpc, self.metrics, self.meta = (int(x) for x in m.groups())
        self.meta_uri = f"http://127.0.0.1:{self.meta}/metadata"

    def http(self, path, timeout=5.0):
        """(status, body text) of GET on the admin server."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics}{path}",
                                        timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def segments(self):
        st, body = self.http("/get_all_segments")
        assert st == 200, body
        return [line for line in body.splitlines() if line]

    def segment_used(self, name):
        st, body = self.http("/get_segments_detail")
        assert st == 200, body
        segs = [s for s in json.loads(body)["segments"] if s["segment_name"] == name]
        return sum(int(s["allocator_used_bytes"]) for s in segs) if segs else None

    def metric(self, name):
        st, body = self.http("/metrics")
        assert st == 200, body
        for line in body.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None


class StoreNode(Proc):
    """store_node driven over stdin/stdout (see store_node.c)."""

    def wait_ready(self):
        line = self.wait_for_line(lambda l: l.startswith(("READY", "FAILED")), START_TIMEOUT)
        if line.startswith("FAILED"):
            self.expect_rc = 1
            raise ProcError(f"{self.label}: setup failed: {line}; {self.stderr_tail()}")
        self.info = dict(kv.split("=", 1) for kv in line.split()[1:])
        self.hostname = self.info["hostname"]

    def cmd(self, line, timeout=60.0):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.readline(timeout)

    def ok(self, line, timeout=60.0):
        r = self.cmd(line, timeout)
        if not r.startswith("OK"):
            raise ProcError(f"{self.label}: '{line}' -> '{r}'; {self.stderr_tail()}")
        return r

    def err(self, line):
        """Run a command expected to fail: (name, code)."""
        r = self.cmd(line)
        assert r.startswith("ERR "), f"{self.label}: '{line}' should fail, got '{r}'"
        parts = r.split()
        return parts[1], int(parts[2])

    @staticmethod
    def fields(reply):
        return dict(kv.split("=", 1) for kv in reply.split()[1:] if "=" in kv)

    def put(self, key, size, seed, *opts, op="put"):
        return self.fields(self.ok(f"{op} {key} {size} {seed} {' '.join(opts)}"))["xxh3"]

    def get(self, key, op="get"):
        f = self.fields(self.ok(f"{op} {key}"))
        return int(f["size"]), f["xxh3"]


class StoreCluster:
    def __init__(self, request, tmp_path_factory):
        self.logdir = tmp_path_factory.mktemp(request.node.name[:40])
        self.procs = []
        self.master = None
        self.n = 0

    def start_master(self, *extra):
        exe = master_path()
        if exe is None:
            pytest.skip(f"mooncake_master not built under {BUILD}")
        argv = [exe, "--rpc_port=0", "--rpc_address=127.0.0.1",
                "--metrics_port=0", "--metrics_host=127.0.0.1",
                "--enable_http_metadata_server=true", "--http_metadata_server_port=0",
                "--http_metadata_server_host=127.0.0.1",
                f"--client_ttl={CLIENT_TTL_S}", *extra]
        m = Master(argv, "master", self.logdir)
        self.procs.append(m)
        m.wait_listening()
        self.master = m
        return m

    def node(self, segment="64m", buffer="16m", zbuf="16m", extra=(), env=None):
        exe = store_node_path()
        if exe is None:
            pytest.fail(f"store_node not found under {BUILD}")
        self.n += 1
        argv = [exe, "--master", f"127.0.0.1:{self.master.rpc}", "--metadata",
                self.master.meta_uri, "--host", "127.0.0.1", "--segment", segment,
                "--buffer", buffer, "--zbuf", zbuf, *extra]
        n = StoreNode(argv, f"store_node{self.n}", self.logdir, env)
        self.procs.append(n)
        n.wait_ready()
        return n

    def teardown(self):
        # Clients first (they unmount), the master last.
        complaints = []
        for p in reversed(self.procs):
            if isinstance(p, Master) and p.alive():
                p.p.send_signal(signal.SIGTERM)
            c = p.stop(grace=10.0)
            if c:
                complaints.append(c)
        for p in self.procs:
            if p.log_path.stat().st_size:
                print(p.stderr_tail())
        assert not complaints, "; ".join(complaints)


@pytest.fixture
def sc(request, tmp_path_factory):
    c = StoreCluster(request, tmp_path_factory)
    yield c
    c.teardown()


# ---- data crosses processes ---------------------------------------------------

# The engines' default between processes of one host (the same-host
# transport where the build has it), and TCP forced.
TRANSPORTS = {"default": None, "tcp": {"MC_SHM_DISABLE": "1"}}


@pytest.mark.parametrize("transport", list(TRANSPORTS))
@pytest.mark.parametrize("size", [1 * MIB, 4 * MIB])
def test_put_by_one_read_by_another(sc, size, transport):
    sc.start_master()
    env = TRANSPORTS[transport]
    a, b, c = sc.node(env=env), sc.node(env=env), sc.node(env=env)
    assert set(sc.master.segments()) >= {a.hostname, b.hostname, c.hostname}

    # Copy-based: A writes onto B's segment, C reads it back.
    want = a.put("obj-copy", size, 11, f"seg={b.hostname}")
    r = c.ok("replicas obj-copy")
    assert f" {b.hostname}:{size}:3" in r, r
    assert c.get("obj-copy") == (size, want)
    assert b.get("obj-copy") == (size, want)  # B reads its own segment
    assert c.get("obj-copy", op="get_into") == (size, want)

    # Zero-copy: C writes from its registered buffer onto A's segment, B reads into its own.
    want2 = c.put("obj-zc", size, 12, f"seg={a.hostname}", op="put_from")
    assert f" {a.hostname}:{size}:3" in b.ok("replicas obj-zc")
    assert b.get("obj-zc", op="get_into") == (size, want2)
    assert a.get("obj-zc") == (size, want2)
    assert want != want2

    # Two replicas on two other processes; both readable by the third.
    want3 = a.put("obj-2rep", size, 13, f"seg={b.hostname}", f"seg={c.hostname}", "rep=2")
    r = a.ok("replicas obj-2rep")
    assert "n=2" in r and b.hostname in r and c.hostname in r, r
    assert b.get("obj-2rep") == (size, want3)
    assert c.get("obj-2rep", op="get_into") == (size, want3)

    assert c.ok("exist obj-copy") == "OK 1"
    assert c.ok("bexist obj-copy obj-zc nope") == "OK 1 1 0"
    assert int(c.ok("size obj-zc").split()[1]) == size


def test_many_objects_and_remove(sc):
    sc.start_master()
    a, b = sc.node(), sc.node()
    put = StoreNode.fields(a.ok(f"putn many- 32 {256 << 10} 100 seg={b.hostname}"))
    got = StoreNode.fields(b.ok(f"getn many- 32 {256 << 10} 100"))
    assert got["bad"] == "0" and got["xxh3"] == put["xxh3"], (put, got)
    # Insert-if-absent: a second put of the same key keeps the first value.
    a.ok(f"put many-0 {256 << 10} 999 seg={b.hostname}")
    assert StoreNode.fields(b.ok(f"getn many- 1 {256 << 10} 100"))["bad"] == "0"
    # Reads took leases; force removes anyway.
    assert b.err("remove many-1")[0] == "ERR_OBJECT_HAS_LEASE"
    b.ok("remove many-1 force")
    assert b.err("get many-1")[0] == "ERR_OBJECT_NOT_FOUND"
    assert b.ok("remove_regex ^many-[12][0-9]$ force") == "OK 20"
    assert b.ok("remove_all force") == "OK 11"
    assert wait_until(lambda: sc.master.segment_used(b.hostname) == 0, 10,
                      "B's segment to be empty")


# ---- faults -----------------------------------------------------------------------

RAW_WRITER = r"""
import sys
sys.path.insert(0, sys.argv[1])
import mcproto
c = mcproto.Conn(int(sys.argv[2]))
c.hello()
seg = (7, 7)
c.mount(seg, "raw-writer:1", 1 << 40, 64 << 20)
reps = c.put_start(sys.argv[3], int(sys.argv[4]), preferred_segment=sys.argv[5])
print("STARTED", reps[0]["segment_name"], reps[0]["address"], reps[0]["status"], flush=True)
sys.stdin.read()  # wait to be killed
"""


def test_writer_killed_mid_put(sc):
    # Short discard/release timeouts so the zombie's space comes back in
    # seconds (upstream: 30 s / 600 s).
    # --mount_probe=false: the raw writer mounts a fake segment
    sc.start_master("--put_start_discard_timeout_sec=1", "--put_start_release_timeout_sec=2",
                    "--mount_probe=false")
    a, b = sc.node(), sc.node()
    base_used = sc.master.segment_used(a.hostname)
    size = 4 * MIB

    # A separate process does MOUNT + PUT_START with the replica on A, then is
    # SIGKILLed before writing or finishing.
    w = subprocess.Popen([sys.executable, "-c", RAW_WRITER, str(Path(__file__).parent),
                          str(sc.master.rpc), "partial", str(size), a.hostname],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = w.stdout.readline()
        assert line.startswith("STARTED"), line
        _, seg, _addr, status = line.split()
        assert seg == a.hostname and int(status) == 2  # PROCESSING
        assert sc.master.segment_used(a.hostname) >= base_used + size
    finally:
        w.kill()
        w.wait(timeout=10)

    # Not readable at any point: never a partial object.
    assert b.ok("exist partial") == "OK 0"
    assert b.err("get partial")[0] in ("ERR_REPLICA_IS_NOT_READY", "ERR_OBJECT_NOT_FOUND")
    assert b.err("get_into partial")[0] in ("ERR_REPLICA_IS_NOT_READY", "ERR_OBJECT_NOT_FOUND")

    # The writer's fake segment goes with its client_ttl...
    wait_until(lambda: "raw-writer:1" not in sc.master.segments(), CLIENT_TTL_S * 5,
               "the killed writer's segment to be unmounted")
    # ...and the space its PutStart took on A comes back after the release timeout.
    wait_until(lambda: sc.master.segment_used(a.hostname) == base_used, 15,
               "A's space to come back")
    assert b.ok("exist partial") == "OK 0"

    # The key is free again: a real put succeeds and reads back exactly.
    want = b.put("partial", size, 5, f"seg={a.hostname}")
    assert a.get("partial") == (size, want)


def test_writer_disconnect_then_new_put_preempts(sc):
    """A PutStart whose writer vanished blocks the key only until the
    discard timeout; then a new put pre-empts it and the data is right."""
    sc.start_master("--put_start_discard_timeout_sec=1", "--put_start_release_timeout_sec=2")
    a, b = sc.node(), sc.node()
    with mcproto.Conn(sc.master.rpc) as c:
        c.hello()
        reps = c.put_start("zombie", MIB, preferred_segment=a.hostname)
        assert reps and reps[0]["segment_name"] == a.hostname
    # Inside the discard window the key is taken (the library reports
    # OBJECT_ALREADY_EXISTS as success but stores nothing).
    b.ok(f"put zombie {MIB} 1 seg={a.hostname}")
    assert b.ok("exist zombie") == "OK 0"

    def put_lands():
        want = b.put("zombie", MIB, 2, f"seg={a.hostname}")
        r = b.cmd("get zombie")
        return r.startswith("OK") and StoreNode.fields(r)["xxh3"] == want

    wait_until(put_lands, 10, "a new put of the zombie key to land", interval=0.2)
    assert a.get("zombie")[0] == MIB


def test_holder_killed_objects_unreadable(sc):
    sc.start_master()
    a, b, c = sc.node(), sc.node(), sc.node()
    size = MIB
    on_c = a.put("on-c", size, 21, f"seg={c.hostname}")
    on_b = a.put("on-b", size, 22, f"seg={b.hostname}")
    assert b.get("on-c") == (size, on_c)

    c.kill9()
    t_kill = time.monotonic()

    # Until the master notices, a read may fail (the holder is gone) but must
    # never return other bytes; the master keeps serving the others all along.
    def gone():
        r = b.cmd("get on-c")
        if r.startswith("OK"):
            assert StoreNode.fields(r)["xxh3"] == on_c, f"garbage read: {r}"
        assert a.get("on-b") == (size, on_b)
        assert b.ok("exist on-b") == "OK 1"
        return r.startswith("ERR ERR_OBJECT_NOT_FOUND")

    wait_until(gone, CLIENT_TTL_S * 6, "on-c to become OBJECT_NOT_FOUND", interval=0.2)
    # Not before the TTL: the last ping was at most ~1 s (the heartbeat) before the kill.
    assert time.monotonic() - t_kill >= CLIENT_TTL_S - 1.5
    assert c.hostname not in sc.master.segments()
    assert b.ok("exist on-c") == "OK 0"
    assert b.err("get_into on-c")[0] == "ERR_OBJECT_NOT_FOUND"
    # The survivors still work, including new puts.
    want = b.put("after", size, 23, f"seg={a.hostname}")
    assert a.get("after") == (size, want)


# ---- error codes -------------------------------------------------------------------

def test_error_codes(sc):
    sc.start_master()
    a = sc.node(segment="64m", buffer="16m", zbuf="160m")
    b = sc.node(segment="64m")

    # Unknown preferred segment: upstream drops names it does not know and
    # places the replica elsewhere (alloc.h); never on a phantom segment.
    want = a.put("pref", 4096, 3, "seg=no-such-host:1")
    r = b.ok("replicas pref")
    assert "no-such-host" not in r and (a.hostname in r or b.hostname in r), r
    assert b.get("pref") == (4096, want)

    # Above the local buffer (16 MiB): nothing stages through it, so a
    # copy-based put of 32 MiB goes through (upstream: -600) and reads back.
    want = a.put("past-lbuf", 32 * MIB, 1)
    assert b.get("past-lbuf") == (32 * MIB, want)
    b.ok("remove past-lbuf force")
    # Oversize: above every segment.
    # (A failed allocation makes the master run an eviction round, which may
    # take "pref" with it: it has no lease; so it was checked first.)
    assert a.err(f"put big {128 * MIB} 1") == ("ERR_NO_AVAILABLE_HANDLE", -200)
    assert a.err(f"put_from big {128 * MIB} 1") == ("ERR_NO_AVAILABLE_HANDLE", -200)
    assert a.ok("exist big") == "OK 0"
    # Zero length: put refuses it; put_from is a no-op success (upstream).
    assert a.err("put zero 0 1") == ("ERR_INVALID_PARAMS", -600)
    a.ok("put_from zero 0 1")
    assert a.ok("exist zero") == "OK 0"
    # Empty key.
    assert a.err('put "" 1k 1') == ("ERR_INVALID_PARAMS", -600)
    assert a.err('get ""') == ("ERR_INVALID_PARAMS", -600)
    assert a.err('exist ""') == ("ERR_INVALID_PARAMS", -600)
    # Bad regex.
    assert a.err("remove_regex ([a- force") == ("ERR_INVALID_PARAMS", -600)
    # Absent keys.
    assert a.err("get nothing-here") == ("ERR_OBJECT_NOT_FOUND", -704)
    assert a.err("remove nothing-here") == ("ERR_OBJECT_NOT_FOUND", -704)

    # The same checks straight on the wire, without the library's own checks.
    with mcproto.Conn(sc.master.rpc) as c:
        c.hello()
        assert c.status_of(mcproto.PUT_START, put_start_payload(c, "", 4096)) == -600
        assert c.status_of(mcproto.PUT_START, put_start_payload(c, "k0", 0)) == -600
        assert c.status_of(mcproto.PUT_START,
                           put_start_payload(c, "huge", 1 << 40)) == -200
        assert c.status_of(mcproto.REMOVE_BY_REGEX,
                           mcproto.string("") + mcproto.string("([") +
                           mcproto.boolean(True)) == -600
        assert c.status_of(mcproto.GET_REPLICA_LIST,
                           mcproto.string("") + mcproto.key("absent")) == -704


def put_start_payload(c, key, length, **cfg):
    return (mcproto.uuid(*c.client_id) + mcproto.string("") + mcproto.key(key) +
            mcproto.u64(length) + mcproto.string("") + mcproto.replicate_config(**cfg))


def test_malformed_frames_close_only_their_connection(sc):
    sc.start_master()
    a = sc.node()
    want = a.put("survivor", 64 << 10, 9)
    good = mcproto.Conn(sc.master.rpc)
    good.hello()

    def assert_closed(conn):
        # docs/protocol.md: closed without an answer.  An error answer
        # (ERR_PROTOCOL, or ERR_TOO_LARGE for the length) right before the
        # close is tolerated: the master sends one when it can name the id.
        with pytest.raises(mcproto.Closed):
            h, _ = conn.recv()
            assert h["status"] in (mcproto.ERR_PROTOCOL, mcproto.ERR_TOO_LARGE), h
            conn.recv()
        conn.close()

    bad_inputs = [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(16),  # bad magic
        mcproto.frame(mcproto.PING, 1, b"\x01\x02\x03"),  # payload too short
        mcproto.frame(mcproto.PING, 1, mcproto.uuid(1, 2) + b"\x00"),  # bytes left over
        mcproto.frame(mcproto.EXIST_KEY, 2,
                      mcproto.string("") + mcproto.u32(100000) + b"x"),  # key length lies
        mcproto.HDR.pack(b"MCST", 1, 0, mcproto.PING, 0, 0, 0, 3, 0xFFFFFFF0, 0),  # too large
    ]
    for raw in bad_inputs:
        c = mcproto.Conn(sc.master.rpc)
        c.hello()
        c.send_raw(raw)
        assert_closed(c)
        # Others are unaffected.
        assert good.exist("survivor") is True
        assert a.get("survivor") == (64 << 10, want)

    # A connection closed in the middle of a frame.
    c = mcproto.Conn(sc.master.rpc)
    c.send_raw(mcproto.frame(mcproto.PING, 5, mcproto.uuid(1, 2))[:40])
    c.close()

    # Foreign major version: an error response (-300), then the master closes.
    c = mcproto.Conn(sc.master.rpc)
    c.send_raw(mcproto.frame(mcproto.SERVICE_READY, 7, mcproto.string("x"), major=9))
    h, _ = c.recv()
    assert h["status"] == mcproto.ERR_INVALID_VERSION and h["id"] == 7
    assert_closed(c)

    # Unknown message type: ERR_NOT_SUPPORTED, and the connection stays open.
    c = mcproto.Conn(sc.master.rpc)
    c.hello()
    assert c.status_of(999) == mcproto.ERR_NOT_SUPPORTED
    assert c.exist("survivor") is True
    c.close()

    assert good.exist("survivor") is True
    assert good.batch_exist(["survivor", "nope"]) == [True, False]
    good.close()
    assert a.get("survivor") == (64 << 10, want)
    assert sc.master.alive()


# ---- the benches still run (smoke, not figures) -----------------------------------

def test_store_benches_smoke(sc):
    bench = _find_binary("MC_STORE_BENCH", "store_bench", ["bench/store_bench"])
    proto = _find_binary("MC_STORE_PROTO_BENCH", "store_proto_bench", ["bench/store_proto_bench"])
    if bench is None or proto is None:
        pytest.skip("store_bench / store_proto_bench not built")
    m = sc.start_master("--mount_probe=false")  # store_proto_bench mounts a fake segment
    r = subprocess.run([bench, f"--master=127.0.0.1:{m.rpc}", f"--metadata={m.meta_uri}",
                        "--quick", "--sizes=64k", "--window=1m", "--segment=64m",
                        "--meta-keys=100", "--json",
                        "--cases=zc,copy,batch,batchcopy,mt,meta"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    cases = {json.loads(line)["case"] for line in r.stdout.splitlines()}
    assert {"put_from", "get_into", "put", "get", "batch_put_from", "batch_get_into",
            "put_batch", "batch_get", "mt_put_from", "mt_get_into", "exist", "batch_exist",
            "replica_desc"} <= cases
    r = subprocess.run([proto, f"--master=127.0.0.1:{m.rpc}", "--quick", "--keys=100",
                        "--batch=100", "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 4
    # Both cleaned up after themselves.
    wait_until(lambda: sc.master.segments() == [], 10, "the benches' segments to go")
