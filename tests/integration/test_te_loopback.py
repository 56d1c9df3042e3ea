"""Transfer Engine end to end over TCP loopback, with te_node processes.

Every scenario runs in both metadata modes where that is cheap: an HTTP
metadata server ("http") and no server at all ("p2p", P2PHANDSHAKE).  Data
is checked with XXH3 checksums computed inside the te_node processes: a
written range on the target must hash like the initiator's source, a range
read back must hash like the original, and guard bytes around each range
must not change.
"""

import os
import random
import signal
import socket
import time

import pytest

from conftest import MODES, ProcError, sigstop

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

SIZES = [1, 7, 4 * KiB - 1, 64 * KiB + 3, MiB, 4 * MiB + 1, 64 * MiB]
GUARD = 64  # bytes checked on each side of a transfer


def is_ok(reply):
    return reply.startswith("OK")


def expect_err(reply, what):
    assert reply.startswith("ERR"), f"{what}: expected a failure, got '{reply}'"
    return reply


def free_port():
    """A port nothing listens on (it was free a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def poll_until(cond, timeout, what, step=0.01):
    """Poll cond() until true or the deadline passes (step bounds the
    polling rate, it is not used to order events)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)


# ---------------------------------------------------------------------------
# A long-lived pair per mode for the data-path tests


@pytest.fixture(scope="module", params=MODES)
def pair(request, module_cluster):
    """(initiator, target, target segment id) with 160 MiB buffers each."""
    mode = request.param
    target = module_cluster.node(mode, buffer="160m")
    init = module_cluster.node(mode, buffer="160m")
    seg = init.open(target.name)
    base, length = init.remote_base(seg)
    assert base == target.base and length == target.size, "descriptor does not match READY"
    init.fill(101)
    target.fill(202)
    return init, target, seg


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s}B")
def test_write_read_back(pair, size):
    init, target, seg = pair
    # Unaligned offsets, different for each size.
    loff = 3 + (size % 61)
    roff = 4096 + 11 + (size % 53) * 8  # odd
    loff2 = 80 * MiB + 5  # where the read lands on the initiator
    seed = 1000 + size

    init.fill(seed, loff, size)
    src = init.crc(loff, size)
    t_left, t_right = target.crc(roff - GUARD, GUARD), target.crc(roff + size, GUARD)

    r = init.write(seg, loff, target.base + roff, size)
    assert is_ok(r), f"write of {size} B failed: {r}"
    assert target.crc(roff, size) == src, f"target bytes differ after a {size} B write"
    assert target.crc(roff - GUARD, GUARD) == t_left, "write touched bytes before the range"
    assert target.crc(roff + size, GUARD) == t_right, "write touched bytes after the range"

    init.zero(loff2 - GUARD, size + 2 * GUARD)
    zero_guard = init.crc(loff2 - GUARD, GUARD)
    r = init.read(seg, loff2, target.base + roff, size)
    assert is_ok(r), f"read of {size} B failed: {r}"
    assert init.crc(loff2, size) == src, f"read-back of {size} B differs"
    assert init.crc(loff2 - GUARD, GUARD) == zero_guard, "read touched bytes before the range"
    assert init.crc(loff2 + size, GUARD) == zero_guard, "read touched bytes after the range"


def test_batch_128_mixed(pair):
    init, target, seg = pair
    rng = random.Random(128)
    # Disjoint, unaligned ranges on both sides, half reads, half writes.
    specs = []
    lpos, rpos = 1, 3
    for i in range(128):
        length = rng.choice([1, 2, 3, 17, 4095, 4096, 65537]) if i % 4 == 0 else rng.randint(1, 256 * KiB)
        lpos += rng.randint(0, 300)
        rpos += rng.randint(0, 300)
        specs.append(("w" if rng.random() < 0.5 else "r", lpos, rpos, length))
        lpos += length
        rpos += length
    assert lpos < 64 * MiB and rpos < 64 * MiB

    init.fill(555, 0, 64 * MiB)
    target.fill(666, 0, 64 * MiB)
    expect = []
    for op, lo, ro, n in specs:
        expect.append(init.crc(lo, n) if op == "w" else target.crc(ro, n))

    line = "batch %d " % seg + " ".join(f"{op}:{lo}:{target.base + ro:#x}:{n}" for op, lo, ro, n in specs)
    r = init.cmd(line)
    assert is_ok(r), f"batch failed: {r}"
    for (op, lo, ro, n), want in zip(specs, expect):
        got = target.crc(ro, n) if op == "w" else init.crc(lo, n)
        assert got == want, f"{op} local={lo} remote=+{ro} len={n}: checksum differs"


def test_out_of_range_rejected(pair):
    init, target, seg = pair
    base, size = target.base, target.size
    init.fill(777, 0, MiB)
    before = target.crc(0, size)
    unreg_before = target.crca(target.unreg, target.unreg_size)
    local_before = init.crc(0, MiB)
    cases = [
        ("write", f"write {seg} 0 {base + size:#x} 16", "just past the end"),
        ("write", f"write {seg} 0 {base + size - 8:#x} 16", "straddling the end"),
        ("write", f"write {seg} 0 {base - 8:#x} 16", "straddling the start"),
        ("write", f"write {seg} 0 0 16", "address 0"),
        ("write", f"write {seg} 0 {target.unreg:#x} 4096", "unregistered region"),
        ("write", f"write -f {seg} 0 {base + 16:#x} {2**64 - 8}", "length wrapping 2^64"),
        ("write", f"write {seg} 0 {2**64 - 8:#x} 16", "address wrapping 2^64"),
        ("read", f"read {seg} 0 {base + size - 8:#x} 16", "read straddling the end"),
        ("read", f"read {seg} 0 {target.unreg:#x} 4096", "read of unregistered region"),
    ]
    for _, line, what in cases:
        t0 = time.monotonic()
        r = init.cmd(line, timeout=30)
        expect_err(r, what)
        assert time.monotonic() - t0 < 10, f"{what}: rejection took too long ({r})"
    assert target.crc(0, size) == before, "target buffer changed after rejected requests"
    assert target.crca(target.unreg, target.unreg_size) == unreg_before, "unregistered memory changed"
    assert init.crc(0, MiB) == local_before, "rejected reads changed the initiator's buffer"

    # The target keeps serving valid requests.
    r = init.write(seg, 5, base + 1001, 300 * KiB)
    assert is_ok(r), f"valid write after rejections failed: {r}"
    assert target.crc(1001, 300 * KiB) == init.crc(5, 300 * KiB)


def test_local_segment(pair):
    """Segment id 0 is the engine itself (local copy path), with the same
    range checks."""
    init, _, _ = pair
    assert init.open(init.name) == 0
    init.fill(99, 7, MiB)
    r = init.write(0, 7, init.base + 3 * MiB + 1, MiB)
    assert is_ok(r), f"local write: {r}"
    assert init.crc(3 * MiB + 1, MiB) == init.crc(7, MiB)
    r = init.read(0, 5 * MiB + 3, init.base + 7, MiB)
    assert is_ok(r), f"local read: {r}"
    assert init.crc(5 * MiB + 3, MiB) == init.crc(7, MiB)
    before = init.crc(0, init.size)
    for line, what in [
        (f"write 0 0 {init.base + init.size - 8:#x} 16", "local write straddling the end"),
        (f"write 0 0 {init.unreg:#x} 16", "local write to unregistered memory"),
        (f"write -f 0 0 {init.base + 16:#x} {2**64 - 8}", "local length wrapping 2^64"),
    ]:
        expect_err(init.cmd(line, timeout=30), what)
    assert init.crc(0, init.size) == before


def test_zero_length(pair):
    init, target, seg = pair
    assert is_ok(init.write(seg, 0, target.base + 5, 0))
    assert is_ok(init.read(seg, 0, target.base + 5, 0))


def test_stale_descriptor_rejected_by_target(pair):
    """The target itself checks ranges: write through a cached descriptor to a
    buffer the target has deregistered since."""
    init, target, seg = pair
    extra = int(target.ok("register 1m")[0], 0)
    seg2 = init.open(target.name, reopen=True)
    bufs = []
    for i in range(8):
        r = init.cmd(f"remote_base {seg2} {i}")
        if not r.startswith("OK"):
            break
        bufs.append(int(r.split()[1], 0))
    assert extra in bufs, f"reopened descriptor lacks the new buffer {extra:#x}: {bufs}"
    init.fill(888, 0, 64 * KiB)
    r = init.write(seg2, 0, extra, 64 * KiB)
    assert is_ok(r), f"write to the extra buffer failed: {r}"
    assert target.crca(extra, 64 * KiB) == init.crc(0, 64 * KiB)

    target.ok(f"deregister {extra:#x}")
    target.ok(f"filla 9 {extra:#x} {MiB}")
    before = target.crca(extra, MiB)
    r = init.write(seg2, 0, extra + 4096, 64 * KiB, timeout=30)
    expect_err(r, "write to a deregistered buffer")
    assert target.crca(extra, MiB) == before, "deregistered buffer was written"
    r = init.write(seg2, 0, target.base + 4096, 4 * KiB)
    assert is_ok(r), f"valid write after the rejection failed: {r}"


# ---------------------------------------------------------------------------
# Failures of peers


def start_big_transfer(init, line, sink):
    """Send a large transfer command to init and return once it is under
    way: the resident size of sink (where the data lands, in fresh pages)
    has grown by 32 MiB.  Skips the test if the command finished first."""
    rss0 = sink.rss()
    init.send(line)
    early = []

    def started():
        got = init.poll_line(0.002)
        if got is not None:
            early.append(got)
            return True
        return sink.rss() > rss0 + 32 * MiB

    poll_until(started, 30, f"'{line}' to get under way", step=0)
    if early:
        pytest.skip(f"the transfer finished before the peer could be killed: {early[0]}")


def test_kill_target_during_1g_write(cluster, mode):
    target = cluster.node(mode, buffer="1g")
    spare = cluster.node(mode, buffer="64m")
    init = cluster.node(mode, buffer="1g")
    seg = init.open(target.name)
    seg_spare = init.open(spare.name)

    start_big_transfer(init, f"write {seg} 0 {target.base:#x} {GiB}", target)
    target.kill9()
    t0 = time.monotonic()
    r = init.reply(timeout=60)
    elapsed = time.monotonic() - t0
    expect_err(r, "1 GiB write to a killed target")
    assert elapsed < 15, f"initiator took {elapsed:.1f}s to fail after the target died"

    # The same initiator still works with another target.
    init.fill(4242, 0, 4 * MiB)
    r = init.write(seg_spare, 0, spare.base + 7, 4 * MiB)
    assert is_ok(r), f"write to a second target after the failure: {r}"
    assert spare.crc(7, 4 * MiB) == init.crc(0, 4 * MiB)


@pytest.mark.parametrize("op", ["read", "write"])
def test_kill_initiator_mid_transfer(cluster, op):
    """The target survives an initiator that dies in the middle of a 1 GiB
    read or write, and keeps serving others.  The others write past the GiB
    the dead one was writing: bytes it sent before it died may still be
    landing there (from the target's socket buffer), and two initiators
    writing the same bytes at once is a race of theirs (ThreadSanitizer
    reports it in the target), not what this tests."""
    target = cluster.node("p2p", buffer=f"{GiB + 8 * MiB}")
    doomed = cluster.node("p2p", buffer="1g")
    seg = doomed.open(target.name)
    # Pages fill in where the data lands.
    start_big_transfer(doomed, f"{op} {seg} 0 {target.base:#x} {GiB}", doomed if op == "read" else target)
    doomed.kill9()

    other = cluster.node("p2p", buffer="8m")
    seg = other.open(target.name)
    other.fill(6, 0, 4 * MiB)
    r = other.write(seg, 0, target.base + GiB + 3, 4 * MiB, timeout=30)
    assert is_ok(r), f"target stopped serving after an initiator died mid-{op}: {r}"
    assert target.crc(GiB + 3, 4 * MiB) == other.crc(0, 4 * MiB)
    assert target.alive()


def test_stopped_target_times_out(cluster, mode):
    """A peer that stops answering without closing its sockets (SIGSTOP):
    the initiator fails after its i/o timeout (shortened here) and works
    again once the peer resumes."""
    target = cluster.node(mode)
    init = cluster.node(mode, env={"MC_TCP_IO_TIMEOUT_MS": "1500", "MC_HANDSHAKE_CONNECT_TIMEOUT": "1"})
    seg = init.open(target.name)
    init.fill(77, 0, 4 * MiB)
    assert is_ok(init.write(seg, 0, target.base, 4 * MiB))
    sigstop(target.pid)
    try:
        t0 = time.monotonic()
        r = init.write(seg, 0, target.base, 4 * MiB, timeout=60)
        elapsed = time.monotonic() - t0
        t0 = time.monotonic()
        p = init.cmd(f"probe {target.name}", timeout=60)
        probe_elapsed = time.monotonic() - t0
    finally:
        os.kill(target.pid, signal.SIGCONT)
    expect_err(r, "write to a stopped target")
    assert 1.0 < elapsed < 10, f"stopped target failed after {elapsed:.1f}s (i/o timeout 1.5 s): {r}"
    expect_err(p, "probe of a stopped target")
    assert probe_elapsed < 5, f"probe of a stopped target took {probe_elapsed:.1f}s (timeout 1 s): {p}"
    # Another range: the bytes of the timed-out write are still queued in
    # the target's socket and land when it resumes, possibly after later
    # writes (TCP cannot take them back), so reusing the range would race.
    init.fill(78, 0, 4 * MiB)
    r = init.write(seg, 0, target.base + 8 * MiB + 1, 4 * MiB)
    assert is_ok(r), f"write after the target resumed: {r}"
    assert target.crc(8 * MiB + 1, 4 * MiB) == init.crc(0, 4 * MiB)


def test_status_timeout_bounds_a_silent_target(cluster, mode):
    """MC_TCP_STATUS_TIMEOUT_SEC: a write whose bytes all went out (4 KiB fit in
    the socket buffers) and whose status frame never comes (the target is
    SIGSTOPped) fails after the status timeout, not after the i/o timeout
    (30 s by default).  TCP only: the same-host path has no status frames."""
    tcp = {"MC_SHM_DISABLE": "1"}
    target = cluster.node(mode, env=tcp)
    init = cluster.node(mode, env=dict(tcp, MC_TCP_STATUS_TIMEOUT_SEC="1"))
    seg = init.open(target.name)
    init.fill(79, 0, 4096)
    assert is_ok(init.write(seg, 0, target.base, 4096))
    sigstop(target.pid)
    try:
        t0 = time.monotonic()
        r = init.write(seg, 0, target.base + 4096, 4096, timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        os.kill(target.pid, signal.SIGCONT)
    expect_err(r, "write awaiting a stopped target's status")
    assert 0.9 < elapsed < 10, f"status wait ended after {elapsed:.1f}s (status timeout 1 s): {r}"
    assert is_ok(init.write(seg, 0, target.base + 8192, 4096)), "write after the target resumed"


def test_unknown_segment(cluster, mode):
    init = cluster.node(mode)
    name = f"127.0.0.1:{free_port()}" if mode == "p2p" else "no-such-segment-" + cluster.tag
    t0 = time.monotonic()
    expect_err(init.cmd(f"open {name}", timeout=30), "open of an unknown segment")
    assert time.monotonic() - t0 < 5, "unknown segment took too long to fail"
    expect_err(init.cmd(f"probe {name}", timeout=30), "probe of an unknown segment")
    # A segment id never handed out.
    expect_err(init.cmd("write 987654 0 0x1000 16", timeout=30), "write to an unknown segment id")


def test_dead_peer(cluster, mode):
    target = cluster.node(mode)
    init = cluster.node(mode)
    seg = init.open(target.name)
    assert is_ok(init.write(seg, 0, target.base, 4096))
    name = target.name
    target.kill9()

    t0 = time.monotonic()
    r = init.write(seg, 0, target.base, 4096, timeout=60)
    expect_err(r, "write to a dead peer (descriptor cached)")
    assert time.monotonic() - t0 < 10, f"dead peer took too long to fail: {r}"

    # A fresh initiator: in http mode the stale descriptor is still published.
    late = cluster.node(mode)
    t0 = time.monotonic()
    r = late.cmd(f"open {name}", timeout=60)
    if is_ok(r):
        r = late.write(int(r.split()[1]), 0, target.base, 4096, timeout=60)
    expect_err(r, "open+write to a dead peer from a fresh initiator")
    assert time.monotonic() - t0 < 10, f"dead peer took too long to fail: {r}"


def test_notify_and_probe(cluster, mode):
    target = cluster.node(mode)
    init = cluster.node(mode)
    assert target.ok("notifs") == ["0"]
    init.ok(f"notify {target.name} greeting hello world")
    seg = init.open(target.name)
    init.ok(f"notifyid {seg} second msg2")
    got = poll_until(lambda: target.ok("notifs")[1:] or None, 10, "notifications")
    while len(got) < 2:
        got += poll_until(lambda: target.ok("notifs")[1:] or None, 10, "second notification")
    assert got == ["greeting=hello%20world", "second=msg2"]

    # Submit with notify: the notification follows the completed write.
    init.fill(31, 0, MiB)
    r = init.cmd(f"writen {seg} 0 {target.base + 3:#x} {MiB} done batch-1")
    assert is_ok(r), r
    got = poll_until(lambda: target.ok("notifs")[1:] or None, 10, "notification after the write")
    assert got == ["done=batch-1"]
    assert target.crc(3, MiB) == init.crc(0, MiB)

    assert is_ok(init.cmd(f"probe {target.name}"))
    target.kill9()
    t0 = time.monotonic()
    expect_err(init.cmd(f"probe {target.name}", timeout=30), "probe of a dead peer")
    assert time.monotonic() - t0 < 10, "probe of a dead peer took too long"


def test_two_initiators_one_target(cluster, mode):
    target = cluster.node(mode, buffer="96m")
    a = cluster.node(mode, buffer="48m")
    b = cluster.node(mode, buffer="48m")
    sa, sb = a.open(target.name), b.open(target.name)
    a.fill(1)
    b.fill(2)
    target.fill(3)

    # Two large writes at once, to disjoint halves.
    n = 40 * MiB
    a.send(f"write {sa} 1 {target.base + 5:#x} {n}")
    b.send(f"write {sb} 3 {target.base + 48 * MiB + 7:#x} {n}")
    ra, rb = a.reply(), b.reply()
    assert is_ok(ra) and is_ok(rb), f"concurrent writes: {ra} / {rb}"
    assert target.crc(5, n) == a.crc(1, n)
    assert target.crc(48 * MiB + 7, n) == b.crc(3, n)

    # Interleaved stripes: a takes the even 64 KiB + 1 stripes, b the odd ones.
    stripe = 64 * KiB + 1
    specs = {a: [], b: []}
    for i in range(96):
        who = a if i % 2 == 0 else b
        loff = (i // 2) * stripe + 11
        roff = i * stripe
        specs[who].append((loff, roff))
    for who, seg in ((a, sa), (b, sb)):
        who.send(f"batch {seg} " + " ".join(f"w:{lo}:{target.base + ro:#x}:{stripe}" for lo, ro in specs[who]))
    ra, rb = a.reply(), b.reply()
    assert is_ok(ra) and is_ok(rb), f"concurrent batches: {ra} / {rb}"
    for who in (a, b):
        for lo, ro in specs[who]:
            assert target.crc(ro, stripe) == who.crc(lo, stripe), f"{who.label} stripe at +{ro} differs"


def test_restart_target_same_name(cluster, mode):
    if mode == "p2p":
        # P2P names are host:port; reuse the port to keep the name.
        first = cluster.node(mode)
        extra = ["--rpc-port", str(first.rpc_port)]
    else:
        first = cluster.node(mode)
        extra = []
    name = first.name
    init = cluster.node(mode)
    seg = init.open(name)
    init.fill(5, 0, MiB)
    assert is_ok(init.write(seg, 0, first.base + 1, MiB))
    first.kill9()

    second = cluster.node(mode, name=name, extra=extra)
    assert second.name == name, f"restarted target registered as {second.name}, not {name}"

    # The initiator may need to refetch the descriptor (new addresses, ports).
    t0 = time.monotonic()
    seg2 = init.open(name, reopen=True)
    base, length = init.remote_base(seg2)
    assert (base, length) == (second.base, second.size), "reopened descriptor is stale"
    r = init.write(seg2, 0, second.base + 1, MiB, timeout=30)
    assert is_ok(r), f"write to the restarted target failed: {r}"
    assert second.crc(1, MiB) == init.crc(0, MiB)
    assert time.monotonic() - t0 < 15
    assert is_ok(init.cmd(f"probe {name}"))


def test_duplicate_live_name_refused(cluster):
    """A second engine may not take the name of a live one, and its failed
    attempt must leave the owner's published metadata alone."""
    first = cluster.node("http")
    with pytest.raises(ProcError, match="ERR_EXISTS"):
        cluster.node("http", name=first.name)
    init = cluster.node("http")
    r = init.cmd(f"open {first.name}")
    assert is_ok(r), f"the live owner's segment vanished after a refused duplicate: {r}"
    r = init.write(int(r.split()[1]), 0, first.base + 1, 4096)
    assert is_ok(r), f"the live owner is unreachable after a refused duplicate: {r}"


# ---------------------------------------------------------------------------
# te_node itself


def test_te_node_rejects_bad_commands(cluster):
    node = cluster.node("p2p", buffer="1m")
    for line in [
        "",
        "bogus",
        "crc",
        "crc 0 99999999",
        "crc -1 1",
        "fill x",
        "write 1 2",
        "write 0 0 0x10 99999999999",
        "batch 0 w:1",
        "batch 0 q:0:0:1",
        "submit x 0 0 0 1",
        "wait notanumber",
        "remote_base",
        "register 0",
        "deregister 0x1",
        "x" * 300000,
    ]:
        r = node.cmd(line)
        assert r.startswith("ERR"), f"'{line[:40]}' -> '{r}'"
    assert node.ok("crc 0 16")
    with pytest.raises(ProcError):
        node.ok("bogus")


def test_async_submit_status_wait(pair):
    init, target, seg = pair
    n = 16 * MiB + 3
    init.fill(4711, 9, n)
    batch = init.ok(f"submit w {seg} 9 {target.base + 13:#x} {n}")[0]
    st = init.ok(f"status {batch}")
    assert st[0].split("=")[1] in ("0", "1", "4"), f"unexpected state of a fresh batch: {st}"
    r = init.cmd(f"wait {batch} 30000")
    assert is_ok(r), f"asynchronous write failed: {r}"
    assert target.crc(13, n) == init.crc(9, n)
    # The batch is gone once waited for.
    expect_err(init.cmd(f"status {batch}"), "status of a released batch")
    expect_err(init.cmd("status 12345"), "status of a batch never allocated")
