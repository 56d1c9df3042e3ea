"""The cluster secret on the Transfer Engine's TCP data port (issue 16 part 2),
with real te_node processes over loopback.

A target started with MC_AUTH_SECRET accepts data connections only from a
peer that proves the same secret (base/auth_hs.h); a peer with another
secret, or none (upstream's wire), is refused before any request is acted on
and the target's memory keeps its bytes.  An initiator with a secret refuses
a target that cannot prove it.  The same-host transport is switched off
in the TCP tests, so those pairs talk TCP; the same-host tests turn it on
and check that its endpoint refuses a peer without the secret and carries
the data for one with it.
"""

import time

import pytest

from conftest import MODES


def wait_log(proc, text, timeout=10.0):
    """Until proc's stderr holds text: the refusal is logged by the peer's
    thread after our side already saw the failure, so it is awaited (the
    log is the only place it shows), with a deadline."""
    deadline = time.monotonic() + timeout
    while True:
        log = proc.log_path.read_text(errors="replace")
        if text in log:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"'{text}' not logged within {timeout}s: {log[-2000:]}")
        time.sleep(0.02)

KiB = 1 << 10
SIZE = 64 * KiB + 5


def start(cluster, mode, secret):
    e = {"MC_SHM_DISABLE": "1"}
    if secret:
        e["MC_AUTH_SECRET"] = secret
    return cluster.node(mode, buffer="4m", env=e)


def shm_up(node):
    """The initiator logged its same-host path up (transport/shm.c, info)."""
    log = node.log_path.read_text(errors="replace")
    return any("same-host path to" in l and " up:" in l for l in log.splitlines())


def start_shm(cluster, secret):
    e = {"MC_SHM_DISABLE": "0", "MC_LOG_LEVEL": "info"}
    if secret:
        e["MC_AUTH_SECRET"] = secret
    return cluster.node("http", buffer="4m", env=e)


def test_shm_right_secret_uses_same_host_path(cluster):
    target = start_shm(cluster, "s3cret-A")
    init = start_shm(cluster, "s3cret-A")
    seg = init.open(target.name)
    init.fill(12)
    target.fill(21)
    r = init.write(seg, 0, target.base + 7, SIZE)
    assert r.startswith("OK"), r
    assert target.crc(7, SIZE) == init.crc(0, SIZE)
    target.fill(31, 0, SIZE)
    r = init.read(seg, 0, target.base, SIZE)
    assert r.startswith("OK"), r
    assert init.crc(0, SIZE) == target.crc(0, SIZE)
    assert shm_up(init), "with the same secret the same-host path was not used"
    assert "refused a connection" not in target.log_path.read_text(errors="replace")


@pytest.mark.parametrize("peer_secret", ["s3cret-B", None], ids=["wrong", "none"])
def test_shm_wrong_or_no_secret_cannot_attach(cluster, peer_secret):
    target = start_shm(cluster, "s3cret-A")
    init = start_shm(cluster, peer_secret)
    seg = init.open(target.name)
    init.fill(13)
    target.fill(23)
    before = target.crc(0, 4 * SIZE)
    r = init.write(seg, 0, target.base, SIZE, timeout=30)
    assert r.startswith("ERR"), f"write with a {peer_secret or 'missing'} secret: {r}"
    r = init.read(seg, 0, target.base, SIZE, timeout=30)
    assert r.startswith("ERR"), r
    assert target.crc(0, 4 * SIZE) == before, "the refused peer changed target memory"
    assert not shm_up(init), "a peer without the secret attached to the same-host endpoint"
    # the same-host endpoint itself refused it (TCP's refusal is logged apart)
    wait_log(target, "refused a connection to the same-host port")


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
    wait_log(target, "refused a connection to the tcp data port")


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
    wait_log(target, "refused a connection to the rpc port")
    # a notification is refused as well (Notify on the same port)
    r = init.cmd(f"notify {target.name} n m", timeout=30)
    assert r.startswith("ERR"), r
    assert target.ok("notifs")[0] == "0"
    # the right secret opens it (and the target still serves)
    good = start(cluster, "p2p", "s3cret-A")
    seg = good.open(target.name)
    assert good.remote_base(seg)[0] == target.base


# ---- the master's RPC port -------------------------------------------------------

def auth_handshake(sock, secret, channel=b"master"):
    """The client side of base/auth_hs.h, written from docs/protocol.md with
    the standard library: a second implementation of the wire format."""
    import hashlib
    import hmac
    import os
    import struct

    def hdr(t, n):
        return b"MCAU" + struct.pack("<BBH", 1, t, n)

    def mac(label, cn, sn):
        msg = b"mooncake-auth-v1 " + label + b"\0" + channel + b"\0" + cn + sn
        return hmac.new(secret, msg, hashlib.sha256).digest()

    cn = os.urandom(32)
    sock.sendall(hdr(1, 32) + cn)
    got = b""
    while len(got) < 72:
        chunk = sock.recv(72 - len(got))
        if not chunk:
            return False
        got += chunk
    assert got[:8] == hdr(2, 64), got[:8]
    sn, smac = got[8:40], got[40:72]
    if not hmac.compare_digest(smac, mac(b"server", cn, sn)):
        return False
    sock.sendall(hdr(3, 32) + mac(b"client", cn, sn))
    return True


@pytest.fixture
def secured_master(monkeypatch, tmp_path_factory, request):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_store_processes import StoreCluster

    c = StoreCluster(request, tmp_path_factory)
    monkeypatch.setenv("MC_AUTH_SECRET", "m4ster-secret")
    c.start_master()
    yield c
    c.teardown()


def test_master_rpc_port_needs_the_secret(secured_master):
    import socket
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import mcproto

    sc = secured_master
    # a store client with the secret (from the environment) puts and gets
    a = sc.node()
    want = a.put("k-auth", 64 << 10, 5)
    assert a.get("k-auth") == (64 << 10, want)

    # upstream's wire (no handshake): closed without an answer
    c = mcproto.Conn(sc.master.rpc)
    c.send_raw(mcproto.frame(mcproto.SERVICE_READY, 1, mcproto.string("x")))
    with pytest.raises(mcproto.Closed):
        c.recv()
    c.close()

    # a wrong secret: the master's proof does not verify, and our (wrong)
    # proof gets the connection closed
    s = socket.create_connection(("127.0.0.1", sc.master.rpc), timeout=10)
    assert auth_handshake(s, b"not-the-secret") is False
    s.close()

    # the right secret, from an independent implementation: then the
    # protocol is upstream's
    c = mcproto.Conn(sc.master.rpc)
    assert auth_handshake(c.sock, b"m4ster-secret") is True
    c.hello()
    assert c.exist("k-auth") is True
    c.close()

    # a store client with another secret cannot start
    with pytest.raises(Exception):
        sc.node(env={"MC_AUTH_SECRET": "other"})
    # counted in /metrics: the upstream frame, the wrong secret, the other
    # client. The log line was already written by the first two refusals, so
    # the count itself is what is awaited (the master may close the client's
    # connection before its loop counts the refusal).
    import urllib.request
    deadline = time.monotonic() + 10
    while True:
        body = urllib.request.urlopen(f"http://127.0.0.1:{sc.master.metrics}/metrics",
                                      timeout=10).read().decode()
        line = [l for l in body.splitlines() if l.startswith("master_auth_refused_total ")]
        if (line and float(line[0].split()[1]) >= 3) or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert line and float(line[0].split()[1]) >= 3, line
    assert a.get("k-auth") == (64 << 10, want)


# ---- --auth_secret_file on every program -----------------------------------------

PROGRAMS = {
    "mooncake_master": ["--rpc_port=0", "--metrics_port=0"],
    "mooncake_client": ["--port=23901"],
    "mooncake_http_metadata_server": ["--port=0"],
    "mooncake_conductor": ["--port=0"],
    "transfer_engine_bench": ["--mode=target", "--metadata_server=P2PHANDSHAKE",
                              "--buffer_size=1048576"],
}


@pytest.mark.parametrize("prog", sorted(PROGRAMS))
def test_every_program_takes_a_secret_file_and_refuses_an_open_one(prog, tmp_path):
    """Each program has the flag (an unknown one would be refused with another
    message) and refuses, before serving anything, a secret file its group or
    others may read, naming the fix; the right file is used end to end by
    test_dummy_client.py (master and daemon) and test_bounds.py."""
    import os
    import subprocess
    from pathlib import Path
    exe = Path(os.environ["MC_BUILD_DIR"]) / "tools" / prog
    if not exe.exists():
        pytest.skip(f"{prog} not built")
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    secret.chmod(0o644)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MC_AUTH_")}
    p = subprocess.run([str(exe), *PROGRAMS[prog], f"--auth_secret_file={secret}"],
                       capture_output=True, text=True, timeout=60, env=env,
                       stdin=subprocess.DEVNULL)
    assert p.returncode != 0, p.stderr[-2000:]
    assert f"chmod 600 {secret}" in p.stderr, p.stderr[-2000:]
    p = subprocess.run([str(exe), *PROGRAMS[prog], f"--auth_secret_file={tmp_path}/nope"],
                       capture_output=True, text=True, timeout=60, env=env,
                       stdin=subprocess.DEVNULL)
    assert p.returncode != 0 and "No such file" in p.stderr, p.stderr[-2000:]


# ---- the warning of a listener open to the network ----------------------------------

@pytest.mark.parametrize("host,secret,warnings", [
    ("0.0.0.0", None, 1),  # beyond loopback, no secret: one warning
    ("0.0.0.0", "s3cret", 0),  # a secret: none
    ("127.0.0.1", None, 0),  # loopback only: none
])
def test_an_open_listener_without_a_secret_warns_once(host, secret, warnings):
    """Without a cluster secret a program that listens beyond loopback logs
    one warning naming the port and the fix (issue 16 part 2; base/auth.c
    mc_auth_warn_open), before it reports itself listening; with a secret,
    or on loopback only, it logs none."""
    import os
    import subprocess
    from pathlib import Path
    exe = Path(os.environ["MC_BUILD_DIR"]) / "tools" / "mooncake_http_metadata_server"
    if not exe.exists():
        pytest.skip("mooncake_http_metadata_server not built")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MC_AUTH_")}
    if secret:
        env["MC_AUTH_SECRET"] = secret
    p = subprocess.Popen([str(exe), "--host", host, "--port", "0"], env=env, text=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    import threading
    watchdog = threading.Timer(30, p.kill)  # a program that never says it listens
    watchdog.start()
    try:
        line = p.stdout.readline()  # written after the warning, on the same thread
        assert "listening on" in line, line
    finally:
        watchdog.cancel()
        p.terminate()
        _, err = p.communicate(timeout=30)
    got = [l for l in err.splitlines() if "with no cluster secret" in l]
    assert len(got) == warnings, err[-2000:]
    if warnings:
        assert "the HTTP metadata server" in got[0] and "MC_AUTH_SECRET_FILE" in got[0]
