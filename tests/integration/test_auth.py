"""The cluster secret on the Transfer Engine's TCP data port (issue 16 part 2),
with real te_node processes over loopback.

A target started with MC_AUTH_SECRET accepts data connections only from a
peer that proves the same secret (base/auth_hs.h); a peer with another
secret, or none (upstream's wire), is refused before any request is acted on
and the target's memory keeps its bytes.  An initiator with a secret refuses
a target that cannot prove it.  The same-host transport is off while a
secret is set, so every pair here talks TCP.
"""

import pytest

from conftest import MODES

KiB = 1 << 10
SIZE = 64 * KiB + 5


def start(cluster, mode, secret):
    e = {"MC_SHM_DISABLE": "1"}
    if secret:
        e["MC_AUTH_SECRET"] = secret
    return cluster.node(mode, buffer="4m", env=e)


@pytest.mark.parametrize("mode", MODES)
def test_right_secret_moves_data(cluster, mode):
    target = start(cluster, mode, "s3cret-A")
    init = start(cluster, mode, "s3cret-A")
    seg = init.open(target.name)
    init.fill(11)
    target.fill(22)
    r = init.write(seg, 0, target.base + 100, SIZE)
    assert r.startswith("OK"), r
    assert target.crc(100, SIZE) == init.crc(0, SIZE)
    target.fill(33, 0, SIZE)
    r = init.read(seg, 0, target.base, SIZE)
    assert r.startswith("OK"), r
    assert init.crc(0, SIZE) == target.crc(0, SIZE)


@pytest.mark.parametrize("peer_secret", ["s3cret-B", None], ids=["wrong", "none"])
def test_wrong_or_no_secret_refused(cluster, peer_secret):
    # http metadata: the descriptor comes from the metadata server, so the
    # data port is what refuses
    target = start(cluster, "http", "s3cret-A")
    init = start(cluster, "http", peer_secret)
    seg = init.open(target.name)
    init.fill(44)
    target.fill(55)
    before = target.crc(0, 4 * SIZE)
    r = init.write(seg, 0, target.base, SIZE, timeout=30)
    assert r.startswith("ERR"), f"write with a {peer_secret or 'missing'} secret: {r}"
    r = init.read(seg, 0, target.base, SIZE, timeout=30)
    assert r.startswith("ERR"), r
    assert target.crc(0, 4 * SIZE) == before, "the refused peer changed target memory"
    # the target logged the refusal (once per interval, with the reason)
    tail = target.log_path.read_text(errors="replace")
    assert "refused a connection to the tcp data port" in tail, tail[-2000:]


def test_target_without_secret_refused_by_initiator(cluster):
    target = start(cluster, "http", None)
    init = start(cluster, "http", "s3cret-A")
    seg = init.open(target.name)
    init.fill(66)
    target.fill(77)
    before = target.crc(0, SIZE)
    r = init.write(seg, 0, target.base, SIZE, timeout=30)
    assert r.startswith("ERR"), r
    assert target.crc(0, SIZE) == before


@pytest.mark.parametrize("peer_secret", ["s3cret-B", None], ids=["wrong", "none"])
def test_rpc_port_refuses_wrong_or_no_secret(cluster, peer_secret):
    """P2P handshake mode: opening a segment asks the target's RPC port for
    its descriptor, which a peer without the secret does not get."""
    target = start(cluster, "p2p", "s3cret-A")
    init = start(cluster, "p2p", peer_secret)
    r = init.cmd(f"open {target.name}", timeout=30)
    assert r.startswith("ERR"), f"open with a {peer_secret or 'missing'} secret: {r}"
    tail = target.log_path.read_text(errors="replace")
    assert "refused a connection to the rpc port" in tail, tail[-2000:]
    # a notification is refused as well (Notify on the same port)
    r = init.cmd(f"notify {target.name} n m", timeout=30)
    assert r.startswith("ERR"), r
    assert target.ok("notifs")[0] == "0"
    # the right secret opens it (and the target still serves)
    good = start(cluster, "p2p", "s3cret-A")
    seg = good.open(target.name)
    assert good.remote_base(seg)[0] == target.base
