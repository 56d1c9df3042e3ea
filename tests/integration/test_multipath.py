"""Multi-path TCP with failover, over two real links.

The test builds its own network: two namespaces (target, initiator) joined
by two veth pairs on two subnets, each link throttled with tbf so a 1 GiB
transfer takes a few seconds.  The target te_node publishes both addresses
(MC_TCP_INTERFACES names its two interfaces); the initiator opens it by the
first one, P2P.  Then:

  * 1 GiB of writes in flight, link 1 goes silent (only the target's end is
    set down, so the initiator sees no error, just no progress): every write
    completes and the target's bytes hash like the source;
  * link 1 back up, 1 GiB of reads in flight, link 2 goes down: every read
    completes, bit-exact;
  * both links down: a write fails with a typed status within a bound set by
    the (shortened) i/o and connect timeouts, not the kernel's TCP timers;
  * both links up again: transfers work again.

Two more tests need no privileges: a target that publishes an address no
TCP connection can use (multicast) beside loopback, and one that publishes
only such addresses.

Needs root and permission for network namespaces and veth pairs (skips with
the reason otherwise).  Namespaces are deleted in the fixture's teardown
whatever happens (deleting a namespace deletes the veth ends inside it).
"""

import os
import shutil
import subprocess
import time

import pytest

from conftest import Cluster, TeNode, slow, te_node_path

MiB = 1 << 20
GiB = 1 << 30
CHUNK = 64 * MiB  # one request; 16 of them make the 1 GiB
NCHUNKS = GiB // CHUNK

# Short enough to keep the test quick, long enough that a live path is never
# taken for a dead one: under TSan on a loaded 2-core machine a worker was
# seen draining its sockets at ~10 MB/s, so a status could wait 2.4 s behind
# 24 MB already in the target's socket (1.5 s failed that way).
IO_TIMEOUT_MS = 3000
CONNECT_TIMEOUT_MS = 1000
ENV = {
    "MC_TCP_IO_TIMEOUT_MS": str(IO_TIMEOUT_MS),
    "MC_TCP_CONNECT_TIMEOUT_MS": str(CONNECT_TIMEOUT_MS),
    "MC_TCP_PATH_BACKOFF_MS": "500",
    "MC_HANDSHAKE_CONNECT_TIMEOUT": "1",
    # both namespaces share the host: keep the same-host transport out of it
    "MC_SHM_DISABLE": "1",
}
TYPED_FAILURES = ("ERR_TIMEOUT", "ERR_CONN_REFUSED", "ERR_CONN_CLOSED", "ERR_SOCKET")


def sh(*argv, check=True):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: rc={r.returncode} {r.stderr.strip()}")
    return r


class Net:
    """Namespace t (target) and i (initiator); link k (1, 2) is
    t_dev[k] 10.231.k.1/24 <-> i_dev[k] 10.231.k.2/24."""

    def __init__(self):
        tag = os.getpid() % 100000
        self.t, self.i = f"mcmp{tag}t", f"mcmp{tag}i"
        self.t_dev = {k: f"mp{tag}t{k}" for k in (1, 2)}
        self.i_dev = {k: f"mp{tag}i{k}" for k in (1, 2)}
        self.created = []

    def t_addr(self, k):
        return f"10.231.{k}.1"

    def setup(self):
        for ns in (self.t, self.i):
            sh("ip", "netns", "add", ns)
            self.created.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        for k in (1, 2):
            sh("ip", "link", "add", self.t_dev[k], "type", "veth", "peer", "name", self.i_dev[k])
            sh("ip", "link", "set", self.t_dev[k], "netns", self.t)
            sh("ip", "link", "set", self.i_dev[k], "netns", self.i)
            sh("ip", "-n", self.t, "addr", "add", f"10.231.{k}.1/24", "dev", self.t_dev[k])
            sh("ip", "-n", self.i, "addr", "add", f"10.231.{k}.2/24", "dev", self.i_dev[k])
            self.link(k, True)
            # ~1.6 Gbit/s per direction and link: 1 GiB takes seconds, not
            # milliseconds, so a link can go down in the middle
            for ns, dev in ((self.t, self.t_dev[k]), (self.i, self.i_dev[k])):
                sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
                   "rate", "1600mbit", "burst", "512kb", "latency", "100ms", check=False)

    def link(self, k, up):
        """Set both ends of link k up or down (the target's end first)."""
        state = "up" if up else "down"
        sh("ip", "-n", self.t, "link", "set", self.t_dev[k], state)
        sh("ip", "-n", self.i, "link", "set", self.i_dev[k], state)

    def link_target_end(self, k, up):
        """Only the target's end: the initiator sees no error, just silence."""
        sh("ip", "-n", self.t, "link", "set", self.t_dev[k], "up" if up else "down")

    def teardown(self):
        for ns in self.created:
            sh("ip", "netns", "del", ns, check=False)
        for k in (1, 2):  # in case setup stopped before moving them
            if os.path.exists(f"/sys/class/net/{self.t_dev[k]}"):
                sh("ip", "link", "del", self.t_dev[k], check=False)


@pytest.fixture
def net():
    if os.geteuid() != 0:
        pytest.skip("needs root to create network namespaces and veth pairs")
    if shutil.which("ip") is None:
        pytest.skip("iproute2 ('ip') is not installed")
    n = Net()
    try:
        try:
            n.setup()
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            pytest.skip(f"network namespaces or veth pairs are not permitted here: {e}")
        yield n
    finally:
        n.teardown()


@pytest.fixture(params=["MC_TCP_INTERFACES", pytest.param("MC_TE_FILTERS", marks=slow)])
def nodes(request, tmp_path_factory, net):
    """(net, target, initiator, segment id): target in t publishing both
    links' addresses, initiator in i with the segment opened.  The target
    names its two interfaces in MC_TCP_INTERFACES, or in its device list
    (MC_TE_FILTERS, upstream's device_name), which TCP publishes the same way."""
    c = Cluster(request, tmp_path_factory, "multipath")
    exe = te_node_path()
    if exe is None:
        pytest.fail("te_node not found (set MC_BUILD_DIR or MC_TE_NODE)")

    def start(ns, host, env):
        argv = ["ip", "netns", "exec", ns, exe, "--metadata", "P2PHANDSHAKE", "--host", host,
                "--buffer", "1g", "--log-level", "info"]
        c.count += 1
        n = TeNode(argv, f"te_node{c.count}-{ns}", c.logdir, env)
        c.procs.append(n)
        n.wait_ready()
        return n

    try:
        target = start(net.t, net.t_addr(1),
                       {**ENV, request.param: f"{net.t_dev[1]},{net.t_dev[2]}"})
        init = start(net.i, "10.231.1.2", ENV)
        seg = init.open(target.name)
        yield net, target, init, seg
    finally:
        c.teardown()


def submit_all(init, op, seg, target):
    return [int(init.ok(f"submit {op} {seg} {i * CHUNK} {target.base + i * CHUNK:#x} {CHUNK}")[0])
            for i in range(NCHUNKS)]


def batch_bytes(init, bid):
    r = init.ok(f"status {bid}")
    return int(dict(kv.split("=", 1) for kv in r)["bytes"])


def wait_under_way(init, bids):
    """Return once data moves but the last request is unfinished."""
    deadline = time.monotonic() + 30
    while batch_bytes(init, bids[0]) == 0:
        assert time.monotonic() < deadline, "the transfer did not start"
        time.sleep(0.01)
    if batch_bytes(init, bids[-1]) == CHUNK:
        pytest.skip("the whole transfer finished before a link could be taken down")


def wait_all(init, bids, bound_s):
    t0 = time.monotonic()
    for bid in bids:
        r = init.cmd(f"wait {bid} 120000", timeout=150)
        assert r.startswith("OK"), f"request failed despite a live second path: {r}\n{init.stderr_tail()}"
    elapsed = time.monotonic() - t0
    assert elapsed < bound_s, f"failover took {elapsed:.1f}s (bound {bound_s}s)"


def test_failover_and_all_paths_down(nodes):
    net, target, init, seg = nodes
    init.fill(11, 0, GiB)
    target.fill(22, 0, GiB)
    src = init.crc(0, GiB)

    # 1 GiB of writes; link 1 goes silent at the target's end mid-way
    bids = submit_all(init, "w", seg, target)
    wait_under_way(init, bids)
    net.link_target_end(1, False)
    wait_all(init, bids, 60)
    assert target.crc(0, GiB) == src, "target bytes differ after failover during writes"

    # link 1 back; 1 GiB of reads; link 2 goes down (both ends) mid-way
    net.link_target_end(1, True)
    target.fill(33, 0, GiB)
    want = target.crc(0, GiB)
    init.zero(0, GiB)
    bids = submit_all(init, "r", seg, target)
    wait_under_way(init, bids)
    net.link(2, False)
    wait_all(init, bids, 60)
    assert init.crc(0, GiB) == want, "read-back differs after failover during reads"

    log = init.log_path.read_text(errors="replace")
    assert "2 paths" in log, "the initiator did not see the target's two paths"
    assert "retrying the requests" in log, "no request was retried on another path"

    # every path down: a typed failure, bounded by the timeouts (a stalled
    # path costs the i/o timeout, a dead one the connect timeout), with slack
    net.link(1, False)
    t0 = time.monotonic()
    r = init.cmd(f"write {seg} 0 {target.base:#x} {CHUNK} 120000", timeout=150)
    elapsed = time.monotonic() - t0
    assert r.startswith("ERR"), f"write with every path down succeeded: {r}"
    assert r.split()[1] in TYPED_FAILURES, f"untyped failure: {r}"
    bound = 2 * (IO_TIMEOUT_MS + CONNECT_TIMEOUT_MS) / 1000 + 5
    assert elapsed < bound, f"took {elapsed:.1f}s to fail with every path down (bound {bound}s): {r}"

    # and back
    net.link(1, True)
    net.link(2, True)
    init.fill(44, 0, 16 * MiB)
    deadline = time.monotonic() + 30
    while True:
        r = init.write(seg, 0, target.base + 5, 16 * MiB, timeout=60)
        if r.startswith("OK") or time.monotonic() > deadline:
            break
    assert r.startswith("OK"), f"no recovery once the links came back: {r}"
    assert target.crc(5, 16 * MiB) == init.crc(0, 16 * MiB)


# ---------------------------------------------------------------------------
# Without namespaces: a published path no TCP connection can use (a
# multicast address: connect() fails at once with ENETUNREACH, whatever the
# network around us) next to a working loopback one.


# The live path is loopback, but under TSan on a loaded 2-core machine its
# connect (until the target's worker took it) was seen to pass 300 ms; the
# dead paths fail at once (ENETUNREACH) whatever the timeout.
LOOPBACK_CONNECT_MS = 2000
LOOPBACK_ENV = {**ENV, "MC_TCP_CONNECT_TIMEOUT_MS": str(LOOPBACK_CONNECT_MS)}


def test_unreachable_published_path_fails_over(cluster):
    target = cluster.node("p2p", buffer="256m",
                          env={**LOOPBACK_ENV, "MC_TCP_INTERFACES": "239.255.0.1, 127.0.0.1"})
    init = cluster.node("p2p", buffer="256m", extra=["--log-level", "info"], env=LOOPBACK_ENV)
    seg = init.open(target.name)
    init.fill(5, 0, 256 * MiB)
    # lanes 0 and 2 start on the dead path: their slices move to loopback
    for i in range(4):
        r = init.write(seg, i * 64 * MiB, target.base + i * 64 * MiB, 64 * MiB, timeout=60)
        assert r.startswith("OK"), f"write with one dead path failed: {r}"
    assert target.crc(0, 256 * MiB) == init.crc(0, 256 * MiB)
    init.zero(0, 256 * MiB)
    for i in range(4):
        r = init.read(seg, i * 64 * MiB, target.base + i * 64 * MiB, 64 * MiB, timeout=60)
        assert r.startswith("OK"), f"read with one dead path failed: {r}"
    assert target.crc(0, 256 * MiB) == init.crc(0, 256 * MiB)
    log = init.log_path.read_text(errors="replace")
    assert "2 paths" in log and "over 127.0.0.1" in log, "no failover to the live path was logged"


def test_every_published_path_unreachable_fails_typed(cluster):
    target = cluster.node("p2p", env={**LOOPBACK_ENV, "MC_TCP_INTERFACES": "239.255.0.1,239.255.0.2"})
    init = cluster.node("p2p", env=LOOPBACK_ENV)
    seg = init.open(target.name)  # over rpc, which is not a data path
    t0 = time.monotonic()
    r = init.write(seg, 0, target.base, 8 * MiB, timeout=60)
    elapsed = time.monotonic() - t0
    assert r.startswith("ERR") and r.split()[1] in TYPED_FAILURES, f"expected a typed failure: {r}"
    bound = 2 * LOOPBACK_CONNECT_MS / 1000 + 5
    assert elapsed < bound, f"took {elapsed:.1f}s with two dead paths (bound {bound} s)"
