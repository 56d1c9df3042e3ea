"""The master's mount probe (issue 11): a MountSegment or ReMountSegment is
applied only once the new segment's transfer engine answers a Probe on its
RPC port (docs/protocol.md, "RPC / handshake channel").

Raw clients (mcproto.py) mount segments whose endpoint is closed, or
accepts and never answers: the mount is refused with ERR_ENDPOINT (-2012)
and a text naming the endpoint and the cause, by the deadline, the master
logs one line, and another client is served while the probe waits.  Real
store clients (store_node) mount with the probe on.  --mount_probe=false
turns it off.
"""

import re
import socket
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mcproto as mp  # noqa: E402
from test_master_daemon import Master  # noqa: E402
from test_store_processes import MIB, sc  # noqa: E402,F401

ERR_ENDPOINT = -2012
ERR_INVALID_PARAMS = -600
EIB = 1 << 60
BASE = 0x7F0000000000

# the probe on (its default), nothing else that mounts fake segments
ARGS = ["--rpc_port=0", "--rpc_address=127.0.0.1", "--metrics_port=0",
        "--metrics_host=127.0.0.1"]

REFUSED_LINE = re.compile(r"rpc: refused a mount from 127\.0\.0\.1:\d+: ")


def closed_port():
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Silent:
    """A listener that accepts connections and never answers them."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = []

    def accept(self, timeout):
        self.sock.settimeout(timeout)
        c, _ = self.sock.accept()
        self.accepted.append(c)
        return c

    def close(self):
        for c in self.accepted:
            c.close()
        self.sock.close()


def answer(conn, rid):
    """The frame answering request rid: (header, payload)."""
    while True:
        h, p = conn.recv()
        if h["id"] == rid:
            return h, p


def error_text(payload):
    return mp.Reader(payload).string().decode(errors="replace") if payload else ""


def mount_payload(conn, seg_id, name, endpoint, size=64 << 20, base=BASE):
    return mp.uuid(*conn.client_id) + mp.segment(seg_id, name, base, size, endpoint=endpoint)


def refusals(m):
    return [line for line in m.text().splitlines() if REFUSED_LINE.search(line)]


@pytest.fixture
def master():
    m = Master(ARGS + ["--mount_probe_timeout=1000ms"])
    yield m
    m.stop()


def test_nothing_listening_is_refused_with_the_cause(master):
    port = closed_port()
    with master.conn() as c:
        c.hello()
        t0 = time.monotonic()
        with pytest.raises(mp.StatusError) as e:
            c.mount((1, 1), "gone:1", BASE, 64 << 20, endpoint=f"127.0.0.1:{port}")
        took = time.monotonic() - t0
        assert e.value.status == ERR_ENDPOINT, e.value.text
        assert f"127.0.0.1:{port}" in e.value.text, e.value.text
        assert "refused" in e.value.text, e.value.text  # the cause: connection refused
        assert took < 1.0, took  # a refused connect needs no deadline
        # the connection goes on: the mount was refused, nothing else
        assert c.exist("anything") is False
        # and nothing was mounted
        with pytest.raises(mp.StatusError) as e:
            c.put_start("k", 4096)
        assert e.value.status == -200, e.value.text  # NO_AVAILABLE_HANDLE
    master.wait_line(REFUSED_LINE.search, 5)
    assert len(refusals(master)) == 1, master.text()


def test_silent_endpoint_is_refused_by_the_deadline_while_others_are_served(master):
    silent = Silent()
    try:
        with master.conn() as a, master.conn() as b:
            a.hello()
            b.hello()
            t0 = time.monotonic()
            rid = a.send(mp.MOUNT_SEGMENT,
                         mount_payload(a, (2, 1), "silent:1", f"127.0.0.1:{silent.port}"))
            # the probe has connected to the silent engine and waits for its answer ...
            silent.accept(timeout=5)
            # ... and meanwhile another client is served (a's own later
            # frames wait behind its mount: answers stay in request order)
            t1 = time.monotonic()
            assert b.exist("control") is False
            assert b.ping()[1] in (0, 1, 2)
            served = time.monotonic() - t1
            assert served < 0.5, served
            rid2 = a.send(mp.EXIST_KEY, mp.string("") + mp.key("behind"))
            h, p = answer(a, rid)
            took = time.monotonic() - t0
            assert h["status"] == ERR_ENDPOINT, error_text(p)
            text = error_text(p)
            assert f"127.0.0.1:{silent.port}" in text and "timed out" in text, text
            assert 0.9 <= took < 3.0, took  # --mount_probe_timeout=1000ms
            # the frame that waited behind the mount is answered after it, in order
            h, p = answer(a, rid2)
            assert h["status"] == 0 and mp.Reader(p).boolean() is False
        master.wait_line(REFUSED_LINE.search, 5)
        assert len(refusals(master)) == 1, master.text()
    finally:
        silent.close()


def test_client_leaving_during_the_probe_mounts_nothing(master):
    silent = Silent()
    try:
        c = master.conn()
        c.hello()
        c.send(mp.MOUNT_SEGMENT, mount_payload(c, (3, 1), "leaver:1", f"127.0.0.1:{silent.port}"))
        silent.accept(timeout=5)
        c.close()
        # the probe ends by its deadline and its failure is logged (the loop
        # may not have seen the close yet: it reads nothing from a waiting
        # connection, as for a regex job)
        master.wait_line(lambda l: "leaver:1" in l and "did not answer" in l, 5)
        with master.conn() as d:
            d.hello()
            assert d.exist("x") is False
            with pytest.raises(mp.StatusError) as e:
                d.put_start("k", 4096)
            assert e.value.status == -200, e.value.text
    finally:
        silent.close()


def test_stop_while_a_probe_waits():
    """SIGTERM with a probe in flight: the master joins it (by its deadline)
    and exits cleanly."""
    silent = Silent()
    m = Master(ARGS + ["--mount_probe_timeout=1000ms"])
    try:
        c = m.conn()
        c.hello()
        c.send(mp.MOUNT_SEGMENT, mount_payload(c, (9, 1), "stopper:1", f"127.0.0.1:{silent.port}"))
        silent.accept(timeout=5)
        t0 = time.monotonic()
        m.stop()  # asserts exit status 0 and no sanitizer report
        assert time.monotonic() - t0 < 5.0
        c.close()
    finally:
        silent.close()


def test_remount_with_a_bogus_endpoint_is_refused(master):
    port = closed_port()
    with master.conn() as c:
        c.hello()
        segs = (mp.segment((4, 1), "r1:1", BASE, 64 << 20, endpoint=f"127.0.0.1:{port}") +
                mp.segment((4, 2), "r2:1", BASE, 64 << 20, endpoint=f"127.0.0.1:{port}"))
        with pytest.raises(mp.StatusError) as e:
            c.call(mp.REMOUNT_SEGMENT, mp.uuid(*c.client_id) + mp.u32(2) + segs)
        assert e.value.status == ERR_ENDPOINT, e.value.text
        assert "r1:1" in e.value.text, e.value.text


def test_endpoint_without_a_port_is_refused(master):
    with master.conn() as c:
        c.hello()
        with pytest.raises(mp.StatusError) as e:
            c.mount((5, 1), "noport", BASE, 64 << 20, endpoint="noport")
        assert e.value.status == ERR_ENDPOINT, e.value.text
        assert "not host:port" in e.value.text, e.value.text


def test_8_eib_with_a_bogus_endpoint_is_refused_at_once(master):
    """The master's own checks come first: no probe for a mount it refuses."""
    with master.conn() as c:
        c.hello()
        for seg, size, base, words in [((6, 1), 8 * EIB, BASE, "larger than max_segment_size"),
                                       ((6, 2), 1 << 30, (1 << 64) - (1 << 29), "wraps around")]:
            t0 = time.monotonic()
            with pytest.raises(mp.StatusError) as e:
                c.mount(seg, "bogus:1", base, size, endpoint="10.255.255.1:1")
            assert time.monotonic() - t0 < 0.5
            assert e.value.status == ERR_INVALID_PARAMS and words in e.value.text, e.value.text
    assert not refusals(master), master.text()


def test_probe_off_mounts_a_fake_segment():
    m = Master(ARGS + ["--mount_probe=false"])
    try:
        with m.conn() as c:
            c.hello()
            c.mount((7, 1), "fake:1", BASE, 64 << 20, endpoint=f"127.0.0.1:{closed_port()}")
            assert c.put_start("k", 4096)[0]["segment_name"] == "fake:1"
    finally:
        m.stop()


def test_real_clients_mount_with_the_probe_on(sc):
    m = sc.start_master()  # --mount_probe defaults to true
    a, b = sc.node(), sc.node()
    assert {a.hostname, b.hostname} <= set(m.segments())
    want = a.put("k", MIB, 3, f"seg={b.hostname}")
    assert b.get("k") == (MIB, want)
    # a raw client naming a live engine (A's) as its endpoint mounts too
    with mp.Conn(m.rpc) as c:
        c.hello()
        c.mount((8, 1), "borrowed:1", BASE, 64 << 20, endpoint=a.hostname)
        assert "borrowed:1" in m.segments()
        c.unmount((8, 1))


def test_probe_finds_the_engine_through_rpc_meta(sc):
    """A store client whose name's port is taken runs its engine's RPC
    listener on another port and publishes that one in rpc_meta: the probe
    asks there, not the name's port, where a silent listener sits."""
    silent = Silent()
    try:
        m = sc.start_master("--mount_probe_timeout=1000ms")
        n = sc.node(extra=("--host", f"127.0.0.1:{silent.port}"))
        assert n.hostname == f"127.0.0.1:{silent.port}"
        assert n.hostname in m.segments()
        want = n.put("k", MIB, 9)
        assert n.get("k") == (MIB, want)
    finally:
        silent.close()


def test_bogus_8_gib_mount_beside_a_real_client_takes_no_puts(sc):
    """Issue 11's case: a raw client mounts 8 GiB at an endpoint nobody
    listens on and keeps its session alive.  Without the probe that segment
    took most allocations and the real client's puts failed with -101; now
    the mount is refused, the real client's segment stays and every put
    lands on it."""
    m = sc.start_master("--mount_probe_timeout=1000ms")
    a = sc.node()
    with mp.Conn(m.rpc) as raw:
        raw.hello()
        with pytest.raises(mp.StatusError) as e:
            raw.mount((10, 1), "bogus:1", BASE, 8 << 30, endpoint=f"127.0.0.1:{closed_port()}")
        assert e.value.status == ERR_ENDPOINT, e.value.text
        assert raw.ping()[1] in (0, 1, 2)  # the raw client's session lives on
        assert m.segments() == [a.hostname]
        for i in range(16):
            want = a.put(f"k{i}", MIB, i)
            assert a.get(f"k{i}") == (MIB, want)
        assert m.segment_used(a.hostname) >= 16 * MIB
        assert m.metric("master_mount_segment_failures_total") >= 1
