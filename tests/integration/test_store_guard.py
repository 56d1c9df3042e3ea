"""Where the processes listen, and which segments the master refuses (issue 11).

Listening: an engine told its host (the store's local_hostname, the engine's
host parameter, MC_TCP_BIND_ADDRESS, the P2P name's host) listens there
only, on its RPC port and its TCP data port; an explicit 0.0.0.0 means every
interface.  Checked with ``ss -ltnp`` (iproute2) for the process's pid.

Mounting: a raw client mounting a segment of 8 EiB (or of size zero, or one
whose end wraps past 2^64) is refused with an error code and a message, so
is one whose endpoint answers no probe, and the legitimate clients' puts
keep landing.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import te_node_path, TeNode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mcproto  # noqa: E402
from test_store_processes import MIB, StoreNode, sc  # noqa: E402,F401

SS = shutil.which("ss")


def listening(pid):
    """The local addresses (ip, port) of pid's listening TCP sockets."""
    out = subprocess.run([SS, "-Hltnp"], check=True, capture_output=True, text=True).stdout
    addrs = []
    for line in out.splitlines():
        if f"pid={pid}," not in line:
            continue
        local = line.split()[3]
        host, port = local.rsplit(":", 1)
        addrs.append((host.strip("[]"), int(port)))
    return addrs


needs_ss = pytest.mark.skipif(SS is None, reason="ss (iproute2) not installed")


@needs_ss
def test_store_client_listens_on_its_host(sc):
    m = sc.start_master()
    n = sc.node()  # --host 127.0.0.1
    addrs = listening(n.pid)
    assert len(addrs) >= 2, addrs  # the engine's RPC port and TCP data port
    assert all(h == "127.0.0.1" for h, _ in addrs), addrs
    # the master was told 127.0.0.1 for each of its listeners
    maddrs = listening(m.pid)
    assert {p for _, p in maddrs} >= {m.rpc, m.metrics, m.meta}, maddrs
    assert all(h == "127.0.0.1" for h, _ in maddrs), maddrs


@needs_ss
def test_store_client_on_any_listens_everywhere(sc):
    sc.start_master()
    n = sc.node(extra=("--host", "0.0.0.0"))
    addrs = listening(n.pid)
    assert len(addrs) >= 2, addrs
    assert all(h in ("*", "0.0.0.0", "::") for h, _ in addrs), addrs


@needs_ss
def test_foreign_address_is_advertised_only(sc):
    """An address this host lacks (a NAT's public one) is told to peers but
    cannot be bound: the engine listens on every interface, as upstream.
    Nothing answers at that address here, so the master's mount probe would
    refuse the segment: it is off for this test."""
    sc.start_master("--mount_probe=false")
    n = sc.node(extra=("--host", "203.0.113.7"))  # TEST-NET-3
    assert n.hostname.startswith("203.0.113.7:"), n.hostname
    addrs = listening(n.pid)
    assert len(addrs) >= 2, addrs
    assert all(h in ("*", "0.0.0.0", "::") for h, _ in addrs), addrs


@needs_ss
@pytest.mark.parametrize("how", ["bind_address", "p2p"])
def test_engine_listens_where_told(how, request, tmp_path):
    exe = te_node_path()
    if exe is None:
        pytest.fail("te_node not built")
    if how == "p2p":
        argv = [exe, "--metadata", "P2PHANDSHAKE", "--name", "127.0.0.1", "--buffer", "16m"]
        env = None
    else:
        uri = request.getfixturevalue("meta_server").uri
        argv = [exe, "--metadata", uri, "--name", f"bind-{tmp_path.name}", "--buffer", "16m"]
        env = {"MC_TCP_BIND_ADDRESS": "127.0.0.1"}
    n = TeNode(argv, f"te_node-{how}", tmp_path, env)
    try:
        n.wait_ready()
        addrs = listening(n.pid)
        assert len(addrs) >= 2, addrs
        assert all(h == "127.0.0.1" for h, _ in addrs), addrs
    finally:
        c = n.stop()
    assert not c, c


# ---- absurd segments ------------------------------------------------------------------

EIB = 1 << 60


def test_absurd_segment_mounts_are_refused(sc):
    sc.start_master()
    a, b = sc.node(), sc.node()
    base = 0x7F0000000000
    with mcproto.Conn(sc.master.rpc) as c:
        c.hello()
        c.client_id = (0x1234, 0x5678)
        cases = [
            ("8 EiB", 8 * EIB, base, "larger than max_segment_size"),
            ("2 TiB", 2 << 40, base, "larger than max_segment_size"),
            ("size zero", 0, base, "size 0"),
            ("wrapping", 1 << 30, (1 << 64) - (1 << 29), "wraps around"),
            ("past user space", 1 << 30, (1 << 57) - (1 << 29), "user-space"),
        ]
        for i, (what, size, b0, words) in enumerate(cases):
            with pytest.raises(mcproto.StatusError) as e:
                c.mount((7, i), f"bogus-{i}:1", b0, size, endpoint="10.255.255.1:1")
            assert e.value.status == -600, what
            assert words in e.value.text, (what, e.value.text)
        # a sane size whose endpoint answers nothing: refused by the mount probe
        with pytest.raises(mcproto.StatusError) as e:
            c.mount((7, 98), "bogus-endpoint:1", base, 64 << 20, endpoint="127.0.0.1:1")
        assert e.value.status == -2012, e.value.text  # ERR_ENDPOINT
        assert "127.0.0.1:1" in e.value.text, e.value.text
        # a sane one from the same connection, whose endpoint is a live engine
        # (A's), is accepted: the checks are per mount
        c.mount((7, 99), "sane:1", base, 64 << 20, endpoint=a.hostname)
        c.unmount((7, 99))
    assert not [s for s in sc.master.segments() if s.startswith("bogus")]
    # the legitimate clients' puts keep landing, on both segments
    for i in range(20):
        holder = (a, b)[i % 2]
        want = a.put(f"k{i}", MIB, i, f"seg={holder.hostname}")
        assert b.get(f"k{i}") == (MIB, want)


def test_max_segment_size_is_configurable(sc):
    sc.start_master("--max_segment_size=32m", "--mount_probe=false")  # fake segments
    with mcproto.Conn(sc.master.rpc) as c:
        c.hello()
        c.client_id = (0x1234, 0x9999)
        with pytest.raises(mcproto.StatusError) as e:
            c.mount((8, 1), "big:1", 0x7F0000000000, 64 << 20)
        assert e.value.status == -600 and "33554432" in e.value.text, e.value.text
        c.mount((8, 2), "fits:1", 0x7F0000000000, 32 << 20)
