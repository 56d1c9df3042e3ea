"""The same-host transport (src/transport/shm.c) between te_node processes.

Engines on one host that advertise a same-host endpoint move data with
process_vm_readv/writev done by the target; these tests check that the path
is really taken (the initiator logs "same-host path to ... up" at info
level), that every byte arrives for sizes from 1 byte to 64 MiB at
unaligned offsets, that out-of-range requests are rejected without touching
target memory, that the switch (MC_SHM_DISABLE=1) and a peer without the
capability both fall back to TCP, and that a target killed mid-transfer
fails the initiator's tasks within a bounded time.
"""

import os
import signal
import time

import pytest

from conftest import MODES, sigstop

KiB = 1 << 10
MiB = 1 << 20

SIZES = [1, 2, 7, 4 * KiB - 1, 4 * KiB + 1, 64 * KiB + 3, MiB - 1, MiB, 4 * MiB + 1, 17 * MiB + 5, 64 * MiB]
GUARD = 64
INFO = {"MC_LOG_LEVEL": "info", "MC_SHM_DISABLE": "0"}
UP = "same-host path to"


def is_ok(reply):
    return reply.startswith("OK")


def log_of(node):
    return node.log_path.read_bytes().decode(errors="replace")


def shm_used(node):
    return any(UP in line and " up:" in line for line in log_of(node).splitlines())


@pytest.fixture(scope="module", params=MODES)
def pair(request, module_cluster):
    mode = request.param
    target = module_cluster.node(mode, buffer="160m", env=INFO)
    init = module_cluster.node(mode, buffer="160m", env=INFO)
    seg = init.open(target.name)
    init.fill(11)
    target.fill(22)
    return init, target, seg


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s}B")
def test_shm_write_read_every_byte(pair, size):
    init, target, seg = pair
    loff = 1 + (size % 509)
    roff = 8 * KiB + 3 + (size % 251) * 7
    loff2 = 80 * MiB + 13
    seed = 7000 + size

    init.fill(seed, loff, size)
    src = init.crc(loff, size)
    t_left, t_right = target.crc(roff - GUARD, GUARD), target.crc(roff + size, GUARD)
    r = init.write(seg, loff, target.base + roff, size)
    assert is_ok(r), f"same-host write of {size} B failed: {r}"
    assert target.crc(roff, size) == src, f"target bytes differ after a {size} B write"
    assert target.crc(roff - GUARD, GUARD) == t_left, "write touched bytes before the range"
    assert target.crc(roff + size, GUARD) == t_right, "write touched bytes after the range"

    init.zero(loff2 - GUARD, size + 2 * GUARD)
    zero_guard = init.crc(loff2 - GUARD, GUARD)
    r = init.read(seg, loff2, target.base + roff, size)
    assert is_ok(r), f"same-host read of {size} B failed: {r}"
    assert init.crc(loff2, size) == src, f"read-back of {size} B differs"
    assert init.crc(loff2 - GUARD, GUARD) == zero_guard, "read touched bytes before the range"
    assert init.crc(loff2 + size, GUARD) == zero_guard, "read touched bytes after the range"
    assert shm_used(init), "the same-host path was not used"


def test_shm_batch_many_in_flight(pair):
    """A batch of 512 small and medium requests, pipelined over the lanes."""
    init, target, seg = pair
    specs, lpos, rpos = [], 5, 9
    for i in range(512):
        n = (i * 7919) % (40 * KiB) + 1
        specs.append(("w" if i % 3 else "r", lpos, rpos, n))
        lpos += n + 3
        rpos += n + 5
    init.fill(31, 0, 64 * MiB)
    target.fill(32, 0, 64 * MiB)
    expect = [init.crc(lo, n) if op == "w" else target.crc(ro, n) for op, lo, ro, n in specs]
    line = f"batch {seg} " + " ".join(f"{op}:{lo}:{target.base + ro:#x}:{n}" for op, lo, ro, n in specs)
    r = init.cmd(line)
    assert is_ok(r), f"batch failed: {r}"
    for (op, lo, ro, n), want in zip(specs, expect):
        got = target.crc(ro, n) if op == "w" else init.crc(lo, n)
        assert got == want, f"{op} local={lo} remote=+{ro} len={n}: checksum differs"


def test_shm_out_of_range_rejected(pair):
    init, target, seg = pair
    base, size = target.base, target.size
    before = target.crc(0, size)
    unreg_before = target.crca(target.unreg, target.unreg_size)
    cases = [
        f"write {seg} 0 {base + size:#x} 16",
        f"write {seg} 0 {base + size - 8:#x} 16",
        f"write {seg} 0 {base - 8:#x} 16",
        f"write {seg} 0 {target.unreg:#x} 4096",
        f"write -f {seg} 0 {base + 16:#x} {2**64 - 8}",
        f"read {seg} 0 {base + size - 8:#x} 16",
        f"read {seg} 0 {target.unreg:#x} 4096",
    ]
    for line in cases:
        r = init.cmd(line, timeout=30)
        assert r.startswith("ERR"), f"'{line}' was not rejected: {r}"
    assert target.crc(0, size) == before, "target buffer changed after rejected requests"
    assert target.crca(target.unreg, target.unreg_size) == unreg_before, "unregistered memory changed"
    # the connection survives rejections
    init.fill(5, 0, MiB)
    assert is_ok(init.write(seg, 0, base + 77, MiB))
    assert target.crc(77, MiB) == init.crc(0, MiB)


def roundtrip(init, target, seg, seed):
    init.fill(seed, 0, 4 * MiB)
    r = init.write(seg, 3, target.base + 5, 4 * MiB - 3)
    assert is_ok(r), f"write failed: {r}"
    assert target.crc(5, 4 * MiB - 3) == init.crc(3, 4 * MiB - 3)


@pytest.mark.parametrize("mode", MODES)
def test_switch_off_uses_tcp(cluster, mode):
    target = cluster.node(mode, env=INFO)
    init = cluster.node(mode, env={**INFO, "MC_SHM_DISABLE": "1"})
    seg = init.open(target.name)
    roundtrip(init, target, seg, 1)
    assert "same-host transport off (MC_SHM_DISABLE)" in log_of(init)
    assert not shm_used(init), "MC_SHM_DISABLE=1 still used the same-host path"


def test_force_tcp_uses_tcp(cluster):
    target = cluster.node("p2p", env=INFO)
    init = cluster.node("p2p", env={**INFO, "MC_FORCE_TCP": ""})
    seg = init.open(target.name)
    roundtrip(init, target, seg, 2)
    assert not shm_used(init)


@pytest.mark.parametrize("mode", MODES)
def test_peer_without_capability_uses_tcp(cluster, mode):
    """A target that does not advertise an endpoint (an upstream engine, or
    one with the switch off) is reached over TCP."""
    target = cluster.node(mode, env={**INFO, "MC_SHM_DISABLE": "1"})
    init = cluster.node(mode, env=INFO)
    seg = init.open(target.name)
    roundtrip(init, target, seg, 3)
    assert not shm_used(init), "used the same-host path to a peer without the capability"
    # the same initiator still uses it for a capable peer
    other = cluster.node(mode, env=INFO)
    seg2 = init.open(other.name)
    roundtrip(init, other, seg2, 4)
    assert shm_used(init)


@pytest.mark.parametrize("mode", MODES)
def test_killed_target_fails_in_flight_tasks(cluster, mode):
    """Requests queued at a target that is then killed fail at once with a
    typed status (the lane closes), well before the i/o timeout."""
    target = cluster.node(mode, env=INFO)
    init = cluster.node(mode, env=INFO)
    seg = init.open(target.name)
    roundtrip(init, target, seg, 5)
    assert shm_used(init)
    sigstop(target.pid)  # requests pile up unanswered
    try:
        batch = init.ok(f"submit w {seg} 0 {target.base:#x} {32 * MiB}")[0]
        time.sleep(0.2)
        st = init.ok(f"status {batch}")
        assert st[0] == "state=0", f"request finished against a stopped target: {st}"
    finally:
        target.kill9()
    t0 = time.monotonic()
    r = init.cmd(f"wait {batch} 60000", timeout=90)
    elapsed = time.monotonic() - t0
    assert r.startswith("ERR"), f"write to a killed target: {r}"
    assert "ERR_CONN_CLOSED" in r or "ERR_TIMEOUT" in r, r
    assert elapsed < 5, f"took {elapsed:.1f}s to fail after the target died"


def test_target_deregisters_while_idle(cluster):
    """Deregistered memory is refused by the target (same check as TCP)."""
    target = cluster.node("p2p", env=INFO)
    init = cluster.node("p2p", env=INFO)
    extra = int(target.ok("register 1m")[0], 0)
    seg = init.open(target.name)
    init.fill(9, 0, MiB)
    assert is_ok(init.write(seg, 0, extra + 1, MiB - 1))
    assert target.crca(extra + 1, MiB - 1) == init.crc(0, MiB - 1)
    target.ok(f"deregister {extra:#x}")
    before = target.crca(extra, MiB)
    init.fill(10, 0, MiB)
    r = init.write(seg, 0, extra + 1, MiB - 1)
    assert r.startswith("ERR"), f"write to deregistered memory: {r}"
    assert target.crca(extra, MiB) == before
    assert shm_used(init)


def node_as(cluster, uid, mode="p2p", buffer="64m", env=None):
    """A te_node running as another user (so process_vm_* between it and us
    is refused by the kernel)."""
    from conftest import TeNode, te_node_path

    argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", te_node_path(),
            "--metadata", cluster.metadata_uri(mode), "--host", "127.0.0.1", "--buffer", buffer]
    if mode != "p2p":
        argv += ["--name", cluster.unique_name()]
    cluster.count += 1
    n = TeNode(argv, f"te_node{cluster.count}-uid{uid}", cluster.logdir, env)
    cluster.procs.append(n)
    n.wait_ready()
    return n


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/bin/setpriv"),
                    reason="needs root and setpriv to run a target as another user")
def test_kernel_refusal_falls_back_to_tcp(cluster):
    """A target running as another user may not read our memory: its
    process_vm_readv fails with EPERM during the HELLO, and the initiator
    moves that peer to TCP by itself; transfers still succeed."""
    target = node_as(cluster, 65534, env=INFO)
    init = cluster.node("p2p", env=INFO)
    seg = init.open(target.name)
    roundtrip(init, target, seg, 6)
    init.zero(0, 4 * MiB)
    r = init.read(seg, 0, target.base + 5, 4 * MiB - 3)
    assert is_ok(r), f"read back failed: {r}"
    assert init.crc(0, 4 * MiB - 3) == target.crc(5, 4 * MiB - 3)
    assert not shm_used(init), "same-host path used although the kernel refuses it"
    assert "not permitted" in log_of(init), log_of(init)[-2000:]


def test_stopped_target_times_out_then_path_comes_back(cluster):
    """A target that stops answering (SIGSTOP) fails requests after the i/o
    timeout; a reconnect attempted while it is still stopped fails too and
    sends the peer to TCP for a second; once the target resumes the
    same-host path is re-established by itself."""
    target = cluster.node("p2p", env=INFO)
    # short timeouts everywhere, including the descriptor refetch (RPC) the
    # engine does after a failure
    init = cluster.node("p2p", env={**INFO, "MC_TCP_IO_TIMEOUT_MS": "1000",
                                    "MC_TCP_CONNECT_TIMEOUT_MS": "500",
                                    "MC_RPC_IO_TIMEOUT_MS": "1000",
                                    "MC_HANDSHAKE_CONNECT_TIMEOUT": "1"})
    seg = init.open(target.name)
    roundtrip(init, target, seg, 7)
    sigstop(target.pid)
    try:
        t0 = time.monotonic()
        r = init.write(seg, 0, target.base, MiB, timeout=60)
        elapsed = time.monotonic() - t0
        assert r.startswith("ERR") and "ERR_TIMEOUT" in r, r
        assert 0.8 < elapsed < 5, f"failed after {elapsed:.1f}s with a 1 s i/o timeout"
        r = init.write(seg, 0, target.base + 2 * MiB, MiB, timeout=60)
        assert r.startswith("ERR"), f"write to a stopped target: {r}"
    finally:
        os.kill(target.pid, signal.SIGCONT)
    assert "unavailable" in log_of(init)
    deadline = time.monotonic() + 10
    while "up again" not in log_of(init):
        assert time.monotonic() < deadline, "same-host path not re-established"
        init.fill(8, 0, MiB)
        r = init.write(seg, 0, target.base + 8 * MiB + 1, MiB)
        assert is_ok(r), f"write after the target resumed: {r}"
        assert target.crc(8 * MiB + 1, MiB) == init.crc(0, MiB)
        time.sleep(0.3)
