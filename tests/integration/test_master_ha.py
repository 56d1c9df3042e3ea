"""Master high availability: leader election on a real etcd and Redis (issue 14).

Two ``mooncake_master --enable_ha`` processes on loopback share one
coordinator, each with its own --wal_dir: one serves, the other is a
standby that refuses every request and streams the leader's log from it;
/role and /ha_status say which.  kill -9 of the leader makes the standby
serve within lease TTL + warm-up + slack from the tables it streamed (no
reload), and a store client given ``etcd://...`` (or ``redis://``) as its
master follows it: it remounts its segment on the new leader as it
connects, so a get asked right after the kill reads back what it put
before the failover on its first try, and it keeps putting.  A put is answered only once
the standby has its record (--ha_sync_replicas).  A leader frozen past its lease (SIGSTOP) refuses writes with
UNAVAILABLE_IN_CURRENT_MODE once it runs again.  An unreachable
coordinator at start is a clear error exit.

The lease is 3 s (--ha_lease_ttl_seconds) to keep the file short; every
wait is a bounded poll of /ha_status or of a client's reply.
"""

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import BUILD, START_TIMEOUT, sigstop, slow

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mcproto  # noqa: E402
from test_store_processes import (  # noqa: E402
    CLIENT_TTL_S,
    Master,
    StoreCluster,
    StoreNode,
    master_path,
    store_node_path,
    wait_until,
)

TTL_S = 3
# the lease lapsing, the warm-up, a loaded (sanitized) machine
FAILOVER_S = 2 * TTL_S + 25.0
NODE_ENV = {"MC_MASTER_FAILOVER_TIMEOUT_MS": "20000"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_etcd(ep, deadline_s=30):
    """Until etcd at ep answers its /health with true (a member that
    accepts connections may not have a raft leader yet)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(f"http://{ep}/health", timeout=1) as r:
                if b'"true"' in r.read():
                    return True
        except OSError:
            pass
        time.sleep(0.05)  # polling a condition with a deadline
    return False


def etcd_status(ep):
    req = urllib.request.Request(f"http://{ep}/v3/maintenance/status", data=b"{}",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=2) as r:
        return json.loads(r.read())


def raft_leader(members, deadline_s=30):
    """The "host:port" of the member that is the raft leader now."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        for proc, ep in members:
            if proc.poll() is not None:
                continue
            try:
                st = etcd_status(ep)
            except OSError:
                continue
            if st.get("leader") and st["leader"] == st["header"]["member_id"]:
                return ep
        time.sleep(0.05)  # polling a condition with a deadline
    raise AssertionError("no etcd member became the raft leader")


def wait_port(port, deadline_s):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)  # polling a condition with a deadline
    return False


@pytest.fixture
def etcd_ep(tmp_path):
    exe = shutil.which("etcd")
    if exe is None:
        pytest.skip("etcd-server not installed")
    client, peer = free_port(), free_port()
    proc = subprocess.Popen(
        [exe, "--name", "ha", "--data-dir", str(tmp_path / "etcd"),
         "--listen-client-urls", f"http://127.0.0.1:{client}",
         "--advertise-client-urls", f"http://127.0.0.1:{client}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"ha=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_etcd(f"127.0.0.1:{client}"), "etcd did not start"
        yield f"127.0.0.1:{client}"
    finally:
        proc.kill()
        proc.wait(timeout=30)


@pytest.fixture
def etcd3(tmp_path):
    """A real three-member etcd cluster on loopback: [(proc, "host:port")]."""
    exe = shutil.which("etcd")
    if exe is None:
        pytest.skip("etcd-server not installed")
    ports = [(free_port(), free_port()) for _ in range(3)]
    cluster = ",".join(f"m{i}=http://127.0.0.1:{p}" for i, (_, p) in enumerate(ports))
    members = []
    try:
        for i, (client, peer) in enumerate(ports):
            members.append((subprocess.Popen(
                [exe, "--name", f"m{i}", "--data-dir", str(tmp_path / f"etcd{i}"),
                 "--listen-client-urls", f"http://127.0.0.1:{client}",
                 "--advertise-client-urls", f"http://127.0.0.1:{client}",
                 "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                 "--initial-cluster", cluster, "--initial-cluster-state", "new"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), f"127.0.0.1:{client}"))
        for _, ep in members:
            assert wait_etcd(ep), "an etcd member did not start"
        # the raft leader last: members[0], the one every client tries
        # first, is a follower whose loss needs no etcd election
        lead = raft_leader(members)
        yield [m for m in members if m[1] != lead] + [m for m in members if m[1] == lead]
    finally:
        for proc, _ in members:
            proc.kill()
            proc.wait(timeout=30)


@pytest.fixture
def redis_proc():
    """A real redis-server on loopback: (proc, "redis://host:port")."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server not installed")
    port = free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_port(port, 30), "redis-server did not start"
        yield proc, f"redis://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(timeout=30)


@pytest.fixture
def redis_uri(redis_proc):
    return redis_proc[1]


class HaCluster(StoreCluster):
    def __init__(self, request, tmp_path_factory):
        super().__init__(request, tmp_path_factory)
        self.nwal = 0

    def ha_master(self, backend, connstring, wal=None, extra=(), port=0, wait=True, env=None):
        exe = master_path()
        if exe is None:
            pytest.skip(f"mooncake_master not built under {BUILD}")
        argv = [exe, f"--rpc_port={port}", "--rpc_address=127.0.0.1",
                "--metrics_port=0", "--metrics_host=127.0.0.1",
                f"--client_ttl={CLIENT_TTL_S}", "--enable_ha",
                f"--ha_backend_type={backend}", f"--ha_backend_connstring={connstring}",
                f"--ha_lease_ttl_seconds={TTL_S}", f"--wal_dir={wal or self.new_wal()}",
                *extra]
        m = Master(argv, f"master{len(self.procs)}", self.logdir, env)
        self.procs.append(m)
        if wait:
            m.wait_listening()
        return m

    def new_wal(self):
        self.nwal += 1
        return self.logdir / f"wal{self.nwal}"

    def ha_node(self, master_addr, metadata, env=None):
        exe = store_node_path()
        if exe is None:
            pytest.fail(f"store_node not found under {BUILD}")
        self.n += 1
        argv = [exe, "--master", master_addr, "--metadata", metadata, "--host", "127.0.0.1",
                "--segment", "32m", "--buffer", "8m", "--zbuf", "8m"]
        n = StoreNode(argv, f"store_node{self.n}", self.logdir, {**NODE_ENV, **(env or {})})
        self.procs.append(n)
        n.wait_ready()
        return n


@pytest.fixture
def hc(request, tmp_path_factory):
    c = HaCluster(request, tmp_path_factory)
    yield c
    c.teardown()


def ha_status(m):
    st, body = m.http("/ha_status")
    assert st == 200, body
    return body


def wait_serving(m, timeout=FAILOVER_S):
    wait_until(lambda: ha_status(m) == "serving", timeout, f"{m.label} serving", 0.1)


def leader_and_standby(hc, backend, connstring, extra=(), before_standby=None):
    """First master serving, second one a standby streaming its log."""
    m1 = hc.ha_master(backend, connstring, extra=extra)
    wait_serving(m1)
    if before_standby:
        before_standby(m1)
    m2 = hc.ha_master(backend, connstring, extra=extra)
    wait_until(lambda: ha_status(m2) == "standby", START_TIMEOUT, "the second master standby")
    wait_until(lambda: m2.metric("ha_stream_synced") == 1, START_TIMEOUT,
               "the standby loading the leader's snapshot")
    wait_until(lambda: m1.metric("ha_standbys_streaming") == 1, START_TIMEOUT,
               "the leader counting its standby")
    assert m1.http("/role") == (200, "leader")
    assert m2.http("/role") == (200, "standby")
    return m1, m2


def get_eventually(node, key, timeout=FAILOVER_S):
    """A get after a failover succeeds once the client has remounted."""
    return wait_until(lambda: node.cmd(f"get {key}").startswith("OK") and node.get(key),
                      timeout, f"get {key} on the new leader", 0.2)


def failover_kill9(hc, backend, connstring, client_addr):
    early = {}

    def put_early(m1):
        # objects the standby gets in its snapshot, not from the stream
        early["node"] = hc.ha_node(client_addr, client_addr)
        early["sum"] = early["node"].put("early", 100000, 3)

    m1, m2 = leader_and_standby(hc, backend, connstring, before_standby=put_early)
    node = early["node"]
    hc.procs.remove(node)  # stopped before the masters at teardown (it unmounts)
    hc.procs.append(node)
    # a standby's tables are not the service plane (spec 7.1): 503, -1011
    st, body = m2.http("/get_all_keys")
    assert st == 503 and '"error_code":-1011' in body, (st, body)
    st, health = m2.http("/health")
    assert '"service_ready":false' in health and str(m1.rpc) in health, health
    st, summary = m2.http("/metrics/summary")
    assert summary.startswith("role=standby, state=standby, service_ready=false, "), summary
    assert summary.endswith(f"leader=127.0.0.1:{m1.rpc}, view_version={int(m2.metric('ha_view_version'))}"), summary
    sum1 = node.put("before", 300000, 7)
    assert m1.metric("ha_is_leader") == 1 and m2.metric("ha_is_leader") == 0
    # the put was answered once the standby had its record: no wait here
    assert m2.metric("ha_log_seq") == m1.metric("ha_log_seq") > 0
    assert m1.metric("ha_standby_lag_records") == 0

    acked = {"early": (100000, early["sum"]), "before": (300000, sum1)}
    for i in range(8):
        acked[f"k{i}"] = (4096 * (i + 1), node.put(f"k{i}", 4096 * (i + 1), 20 + i))
    # an object in another client's segment, that client frozen over the
    # failover: hidden on the new leader until that client remounts
    other = hc.ha_node(client_addr, client_addr)  # after the masters: stopped first
    acked["other"] = (60000, node.put("other", 60000, 31, f"seg={other.hostname}"))
    node.put("unread", 4096, 33)  # never read after the failover
    sigstop(other.p.pid)

    t0 = time.monotonic()
    m1.p.send_signal(signal.SIGKILL)
    m1.killed = True
    m1.p.wait(timeout=30)
    # asked at once: the client's first call waits for the new leader, and
    # its segment is remounted there before that call is sent, so the
    # object is readable on the first try (no NO_AVAILABLE_HANDLE while
    # the heartbeat has not remounted yet)
    node.p.stdin.write("get before\n")
    node.p.stdin.flush()
    wait_serving(m2)
    assert m2.http("/role") == (200, "leader")
    assert m2.metric("ha_elections_won_total") == 1
    # its stream ended and the leader's port refused: it ended the dead
    # leader's view itself and served without the lease and the warm-up
    assert m2.metric("ha_views_ended_total") == 1
    # its answers carry the view it serves under (header bytes 28..31)
    with mcproto.Conn(m2.rpc) as c:
        c.send(mcproto.PING, mcproto.uuid(*c.client_id))
        h, _ = c.recv()
        assert h["status"] == 0 and h["view"] == m2.metric("ha_view_version") > 0, h

        # and so does the Ping body's view_version, as upstream's
        assert c.ping()[0] == h["view"]
    # the service plane's pages: served by the leader now
    assert m2.http("/get_all_segments")[0] == 200

    # its own directory holds the leader's snapshot it was sent, and the
    # leader's log never reached it any other way
    assert list((hc.logdir / "wal2").glob("snap-*.snap")), list((hc.logdir / "wal2").iterdir())
    # the client follows the new leader: the old objects are back (streamed
    # tables, segment remounted on connecting), each on its first read, and
    # new puts land
    first = node.readline(FAILOVER_S)
    assert first.startswith("OK") and node.fields(first)["xxh3"] == sum1, first
    assert time.monotonic() - t0 < FAILOVER_S
    # the old leader's read leases are in no log: the new one counts every
    # object leased for the 10 s lease TTL from its take-over (after t0), so
    # that a read or a location cache entry learnt from the old leader stays
    # right: a plain remove is refused meanwhile, a forced one is not
    r = node.cmd("remove unread")
    if time.monotonic() - t0 < 10.0:
        assert " -706 " in r, r
    assert node.cmd("remove unread force").startswith("OK")
    # the other client's object: the get is answered REPLICA_IS_NOT_READY
    # while its owner is frozen, asked again (this client followed a new
    # leader moments ago), and read once the owner runs and remounts
    refused = m2.metric("master_get_replica_list_failures_total")
    node.p.stdin.write("get other\n")
    node.p.stdin.flush()
    wait_until(lambda: m2.metric("master_get_replica_list_failures_total") > refused,
               FAILOVER_S, "the new leader refusing the hidden object", 0.02)
    os.kill(other.p.pid, signal.SIGCONT)
    r = node.readline(FAILOVER_S)
    assert r.startswith("OK") and node.fields(r)["xxh3"] == acked["other"][1], r
    for key, want in acked.items():
        r = node.cmd(f"get {key}")
        assert r.startswith("OK"), (key, r)
        assert (int(node.fields(r)["size"]), node.fields(r)["xxh3"]) == want, (key, r)
    sum2 = node.put("after", 200000, 9)
    assert node.get("after") == (200000, sum2)


def test_etcd_failover_after_kill9(hc, etcd_ep):
    failover_kill9(hc, "etcd", etcd_ep, f"etcd://{etcd_ep}")


def test_redis_failover_after_kill9(hc, redis_uri):
    failover_kill9(hc, "redis", redis_uri, redis_uri)


def behind_standby_loses(hc, backend, connstring, client_addr):
    """Three masters; the standby that fell behind must not lead.

    One standby is paused (SIGSTOP) while puts continue: the leader drops
    its stream after a lease, and what is put after that never reaches it.
    The other standby is paused too, then the leader is killed and the one
    behind runs first, alone: before most-caught-up elections it ended the
    dead leader's view and took it at once, losing every put it missed.
    Now it finds the other's candidate entry further on and stands back;
    resumed, the caught-up standby leads and every acknowledged put is
    readable."""
    m1 = hc.ha_master(backend, connstring)
    wait_serving(m1)
    ahead = hc.ha_master(backend, connstring)
    behind = hc.ha_master(backend, connstring)
    for m in (ahead, behind):
        wait_until(lambda: ha_status(m) == "standby" and m.metric("ha_stream_synced") == 1,
                   START_TIMEOUT, f"{m.label} streaming the leader's log")
    wait_until(lambda: m1.metric("ha_standbys_streaming") == 2, START_TIMEOUT,
               "the leader counting both standbys")
    node = hc.ha_node(client_addr, client_addr)
    hc.procs.remove(node)  # stopped before the masters at teardown (it unmounts)
    hc.procs.append(node)
    acked = {"a": (100000, node.put("a", 100000, 1))}
    sigstop(behind.pid)
    try:
        # owed an ACK for a lease, the paused standby is dropped
        acked["b"] = (1000, node.put("b", 1000, 2))
        wait_until(lambda: m1.metric("ha_stream_dropped_total") == 1, FAILOVER_S,
                   "the leader dropping the paused standby")
        for i in range(6):
            acked[f"k{i}"] = (4096 * (i + 1), node.put(f"k{i}", 4096 * (i + 1), 10 + i))
        seq = m1.metric("ha_log_seq")
        # the caught-up standby has them, and its candidate entry says so
        wait_until(lambda: ahead.metric("ha_candidate_seq") == seq, START_TIMEOUT,
                   "the caught-up standby posting its position")
        sigstop(ahead.pid)
        try:
            m1.p.send_signal(signal.SIGKILL)
            m1.killed = True
            m1.p.wait(timeout=30)
        except BaseException:
            os.kill(ahead.pid, signal.SIGCONT)
            raise
    finally:
        os.kill(behind.pid, signal.SIGCONT)
    try:
        # the standby behind runs alone: it may end the dead leader's view,
        # but it stands back (or, as before, takes the view)
        wait_until(lambda: behind.metric("ha_elections_deferred_total") or
                   ha_status(behind) in ("leader_warmup", "recovering", "serving"),
                   FAILOVER_S, "the standby behind standing back or leading")
        assert behind.metric("ha_elections_won_total") == 0, \
            "the standby behind took the view"
    finally:
        os.kill(ahead.pid, signal.SIGCONT)
    wait_serving(ahead)
    assert ahead.metric("ha_elections_won_total") == 1
    assert behind.metric("ha_elections_won_total") == 0
    assert behind.metric("ha_elections_deferred_total") == 1
    # the one behind follows the new leader, and loads its tables
    wait_until(lambda: ha_status(behind) == "standby" and
               str(ahead.rpc) in behind.http("/leader")[1] and
               behind.metric("ha_stream_synced") == 1 and
               ahead.metric("ha_standbys_streaming") == 1, START_TIMEOUT,
               "the standby behind streaming from the new leader")
    get_eventually(node, "a")
    for key, want in acked.items():
        r = node.cmd(f"get {key}")
        assert r.startswith("OK"), (key, r)
        assert (int(node.fields(r)["size"]), node.fields(r)["xxh3"]) == want, (key, r)
    s = node.put("after", 2000, 9)
    assert node.get("after") == (2000, s)


def test_etcd_behind_standby_loses_the_election(hc, etcd_ep):
    behind_standby_loses(hc, "etcd", etcd_ep, f"etcd://{etcd_ep}")


def test_redis_behind_standby_loses_the_election(hc, redis_uri):
    behind_standby_loses(hc, "redis", redis_uri, redis_uri)


VIEW_KEY = "mooncake-store/mooncake_cluster/master_view"


def etcd_forget(ep):
    """Delete the view and the candidate entries (the keys under it), as
    their leases lapse within two TTLs of every master's death (6 s)."""
    key = VIEW_KEY.encode()
    body = json.dumps({"key": base64.b64encode(key).decode(),
                       "range_end": base64.b64encode(key[:-1] + b"x").decode()})
    req = urllib.request.Request(f"http://{ep}/v3/kv/deleterange", data=body.encode(),
                                 method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status == 200


def redis_forget(uri):
    """The same on Redis: the view's hash and the candidates' hash."""
    host, port = uri[len("redis://"):].rsplit(":", 1)
    args = ["DEL", VIEW_KEY, VIEW_KEY + "/candidates"]
    cmd = f"*{len(args)}\r\n" + "".join(f"${len(a)}\r\n{a}\r\n" for a in args)
    with socket.create_connection((host, int(port)), timeout=5) as c:
        c.sendall(cmd.encode())
        assert c.recv(64).startswith(b":")


def restarted_whole(hc, backend, connstring, client, forget, snap_dirs=False):
    """Every master killed, then each started again on its own --wal_dir:
    the one whose directory holds the most leads.  The lowest address
    (which wins ties) led first and was killed first, so its log is the
    shortest (an older view); the next one took over and acknowledged more
    puts with the third streaming.  Restarted first, alone, the lowest
    wins the view, sees the others' later view in their candidate entries
    during its warm-up and gives the view up unserved; one of them leads
    from its own directory (its leader's snapshot restored) and every
    acknowledged put reads back.  Before, a master that had loaded no
    leader's snapshot posted 0 0 whatever its directory held: the lowest
    led with its short log, the later puts were not found, and the others'
    directories were emptied for its snapshot.

    snap_dirs: each master also gets a MOONCAKE_SNAPSHOT_LOCAL_PATH of its
    own.  A standby keeps its leader's snapshot there, where the start-up
    load and the position read it.  Before, it wrote that snapshot into the
    --wal_dir and read snapshots from the other directory: the take-over
    and restart found a log cut at its start and no snapshot for it, so
    the two that held the later puts posted no position and the lowest led
    with its short log."""
    ports = set()
    while len(ports) < 3:  # ephemeral ports: five digits, so text order is number order
        ports.add(free_port())
    low, mid, high = sorted(ports)
    wals = {p: hc.new_wal() for p in ports}
    snaps = {p: hc.logdir / f"snaps-{p}" for p in ports} if snap_dirs else {}

    def start(port, wait=True):
        env = {"MOONCAKE_SNAPSHOT_LOCAL_PATH": str(snaps[port])} if snap_dirs else None
        return hc.ha_master(backend, connstring, wal=wals[port], port=port, wait=wait, env=env)

    first = start(low)
    wait_serving(first)
    second = start(mid)
    wait_until(lambda: second.metric("ha_stream_synced") == 1, START_TIMEOUT,
               "the second master streaming the first one's log")
    node = hc.ha_node(client, client)
    acked = {"a": (100000, node.put("a", 100000, 1))}
    first.kill9()
    wait_serving(second)
    third = start(high)
    wait_until(lambda: third.metric("ha_stream_synced") == 1 and
               second.metric("ha_standbys_streaming") == 1, START_TIMEOUT,
               "the third master streaming the second one's log")
    for i in range(4):  # each answered once the third had its record
        acked[f"k{i}"] = (4096 * (i + 1), node.put(f"k{i}", 4096 * (i + 1), 10 + i))
    third.kill9()  # the standby first: alone, the leader writes nothing more
    second.kill9()
    forget(connstring)

    first = start(low)
    wait_until(lambda: ha_status(first) == "leader_warmup", FAILOVER_S,
               "the first master started, alone, winning the view")
    second, third = start(mid, wait=False), start(high, wait=False)
    second.wait_listening()
    third.wait_listening()
    hc.procs.remove(node)  # stopped before the masters at teardown (it unmounts)
    hc.procs.append(node)
    masters = (first, second, third)
    wait_until(lambda: any(ha_status(m) == "serving" for m in masters), FAILOVER_S,
               "a master serving")
    assert ha_status(first) != "serving", "the master with the shortest log leads"
    for key, want in acked.items():
        assert get_eventually(node, key) == want, key
    # it won the view alone and gave it up unserved (counted as deferred)
    assert first.metric("ha_elections_won_total") >= 1
    assert first.metric("ha_elections_deferred_total") >= 1
    new = second if ha_status(second) == "serving" else third
    # the others follow it, their directories replaced by its snapshot
    for m in masters:
        if m is not new:
            wait_until(lambda: m.metric("ha_stream_synced") == 1, START_TIMEOUT,
                       f"{m.label} streaming from the new leader")
    if snap_dirs:  # each standby's copy of the leader's snapshot: where its own go
        for port, m in zip((low, mid, high), masters):
            if m is not new:
                assert list(snaps[port].glob("snap-*.snap")), m.label
                assert not list(wals[port].glob("snap-*")), m.label
    s = node.put("after", 2000, 9)
    assert node.get("after") == (2000, s)


def test_etcd_cluster_restarted_whole_elects_the_longest_log(hc, etcd_ep):
    """With a snapshot directory per master (the Redis case runs without)."""
    restarted_whole(hc, "etcd", etcd_ep, f"etcd://{etcd_ep}", etcd_forget, snap_dirs=True)


@slow
def test_redis_cluster_restarted_whole_elects_the_longest_log(hc, redis_uri):
    restarted_whole(hc, "redis", redis_uri, redis_uri, redis_forget)


def test_deposed_leader_refuses_writes(hc, etcd_ep):
    m1, m2 = leader_and_standby(hc, "etcd", etcd_ep)
    direct = hc.ha_node(f"127.0.0.1:{m1.rpc}", f"etcd://{etcd_ep}")
    hc.procs.remove(direct)  # stopped before the masters at teardown
    hc.procs.append(direct)
    k1 = direct.put("k1", 1000, 1)
    assert direct.err("get missing")[1] == -704
    # a standby refuses everything with UNAVAILABLE_IN_CURRENT_MODE
    st, metrics = m2.http("/metrics")
    assert "ha_service_ready 0" in metrics

    sigstop(m1.pid)
    try:
        wait_serving(m2)
    finally:
        m1.p.send_signal(signal.SIGCONT)
    # the first request after waking is refused, whatever its threads did first
    name, code = direct.err("put k2 1000 2")
    assert (name, code) == ("ERR_UNAVAILABLE_IN_CURRENT_MODE", -1011)
    wait_until(lambda: ha_status(m1) == "standby", START_TIMEOUT, "the old leader standby")
    assert m1.http("/role") == (200, "standby")
    wait_until(lambda: m1.metric("ha_step_downs_total") == 1, START_TIMEOUT,
               "the old leader counting its step-down")
    wait_until(lambda: str(m2.rpc) in m1.http("/leader")[1], START_TIMEOUT,
               "the old leader naming the new one")
    # it streams from the new leader (its tables replaced), so it may lead
    # again: kill -9 of the new leader hands the view back to it
    wait_until(lambda: m1.metric("ha_stream_synced") == 1 and
               m2.metric("ha_standbys_streaming") == 1, START_TIMEOUT,
               "the old leader streaming from the new one")
    m2.p.send_signal(signal.SIGKILL)
    m2.killed = True
    m2.p.wait(timeout=30)
    wait_serving(m1)
    assert m1.metric("ha_elections_won_total") == 2
    assert get_eventually(direct, "k1") == (1000, k1)


def test_coordinator_unreachable_at_start(hc):
    exe = master_path()
    if exe is None:
        pytest.skip(f"mooncake_master not built under {BUILD}")
    dead = free_port()
    wal = f"--wal_dir={hc.new_wal()}"
    r = subprocess.run([exe, "--rpc_port=0", "--metrics_port=0", "--enable_ha", wal,
                        f"--ha_backend_connstring=127.0.0.1:{dead}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "unreachable" in r.stderr and f"127.0.0.1:{dead}" in r.stderr, r.stderr
    r = subprocess.run([exe, "--rpc_port=0", "--metrics_port=0", "--enable_ha", wal,
                        "--ha_backend_type=redis",
                        f"--ha_backend_connstring=redis://127.0.0.1:{dead}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "unreachable" in r.stderr, r.stderr


def test_redis_lost_later_makes_the_leader_step_down(hc, redis_proc):
    # the coordinator gone while a leader serves (the etcd case: the
    # partition test): it cannot renew its view, so it stops serving
    # within its lease and refuses writes rather than risk a second leader
    proc, uri = redis_proc
    m = hc.ha_master("redis", uri)
    wait_serving(m)
    node = hc.ha_node(f"127.0.0.1:{m.rpc}", uri)
    hc.procs.remove(node)  # stopped before the master at teardown
    hc.procs.append(node)
    node.put("k", 1000, 1)
    proc.kill()
    proc.wait(timeout=30)
    # /ha_status stops saying serving at the lease's deadline, before the
    # election thread notices and counts the step-down: wait for the count
    wait_until(lambda: m.metric("ha_step_downs_total") == 1, 2 * TTL_S + 10,
               "the leader stepping down")
    assert ha_status(m) != "serving"
    name, code = node.err("put k2 1000 2")
    assert (name, code) == ("ERR_UNAVAILABLE_IN_CURRENT_MODE", -1011)


def test_answers_wait_for_the_standbys_asked_for(hc, etcd_ep):
    # --ha_sync_replicas=1 and no standby yet: the leader answers nothing
    # that its log has not given to one standby; one joining releases it
    m1 = hc.ha_master("etcd", etcd_ep, extra=["--ha_sync_replicas=1"])
    wait_serving(m1)
    with mcproto.Conn(m1.rpc) as c:
        c.sock.settimeout(1.5)
        c.send(mcproto.PING, mcproto.uuid(*c.client_id))
        with pytest.raises(socket.timeout):
            c.recv()
        m2 = hc.ha_master("etcd", etcd_ep, extra=["--ha_sync_replicas=1"])
        c.sock.settimeout(START_TIMEOUT)
        h, _ = c.recv()
        assert h["status"] == 0, h
    assert m2.metric("ha_stream_synced") == 1
    assert m1.metric("ha_standbys_streaming") == 1


def test_a_stalled_standby_is_dropped_then_rejoins(hc, etcd_ep):
    # the default (-1): a standby that stops acknowledging holds writes for
    # one lease at most, then the leader goes on alone; back, it resyncs
    # a client TTL above the lease: pings wait behind the held put
    m1, m2 = leader_and_standby(hc, "etcd", etcd_ep, extra=["--client_ttl=10"])
    node = hc.ha_node(f"etcd://{etcd_ep}", f"etcd://{etcd_ep}")
    node.put("a", 1000, 1)
    sigstop(m2.pid)
    try:
        t0 = time.monotonic()
        node.put("b", 1000, 2)
        took = time.monotonic() - t0
        assert took < TTL_S + 10, took
        wait_until(lambda: m1.metric("ha_stream_dropped_total") == 1, START_TIMEOUT,
                   "the leader dropping the stalled standby")
        assert m1.metric("ha_standbys_streaming") == 0
        node.put("c", 1000, 3)  # alone now: no wait at all
    finally:
        m2.p.send_signal(signal.SIGCONT)
    wait_until(lambda: m1.metric("ha_stream_syncs_total") == 2, START_TIMEOUT,
               "the standby syncing again")
    wait_until(lambda: m1.metric("ha_standbys_streaming") == 1 and
               m2.metric("ha_log_seq") == m1.metric("ha_log_seq"), START_TIMEOUT,
               "the standby caught up")


def test_kill9_of_the_standby_under_load(hc, etcd_ep):
    # puts run while the only standby is killed -9: the leader goes on
    # (the standby's closed stream drops it at once, no lease to wait),
    # a new standby joins and catches up, and after the leader's kill -9
    # it serves every put acknowledged before, during and after
    m1, m2 = leader_and_standby(hc, "etcd", etcd_ep)
    node = hc.ha_node(f"etcd://{etcd_ep}", f"etcd://{etcd_ep}")
    hc.procs.remove(node)  # stopped before the masters at teardown
    hc.procs.append(node)
    acked = {}
    stop = threading.Event()

    def load():
        i = 0
        while not stop.is_set():
            acked[f"s{i}"] = node.put(f"s{i}", 4000, i)  # each must succeed
            i += 1
            time.sleep(0.005)  # a steady rate, not a fill of the segment

    t = threading.Thread(target=load)
    t.start()
    try:
        wait_until(lambda: len(acked) >= 5, START_TIMEOUT, "puts before the kill", 0.02)
        m2.p.send_signal(signal.SIGKILL)
        m2.killed = True
        m2.p.wait(timeout=30)
        n = len(acked)
        wait_until(lambda: len(acked) >= n + 20, START_TIMEOUT, "puts after the kill", 0.02)
        assert ha_status(m1) == "serving"
        m3 = hc.ha_master("etcd", etcd_ep)
        hc.procs.remove(node)  # still stopped before the masters
        hc.procs.append(node)
        wait_until(lambda: m3.metric("ha_stream_synced") == 1 and
                   m1.metric("ha_standbys_streaming") == 1, START_TIMEOUT,
                   "a new standby streaming")
        n = len(acked)
        wait_until(lambda: len(acked) >= n + 5, START_TIMEOUT, "puts with the new standby", 0.02)
    finally:
        stop.set()
        t.join(120)
    assert not t.is_alive()
    m1.p.send_signal(signal.SIGKILL)
    m1.killed = True
    m1.p.wait(timeout=30)
    wait_serving(m3)
    for key, x in acked.items():
        assert get_eventually(node, key) == (4000, x), key


def put_across_a_leader_kill(hc, etcd_ep, client_env, counter):
    """A leader and a standby, a holder and a client; the client's put of k
    stalls on the stopped holder once the leader's `counter` moved, the
    leader is killed, the standby takes over, the holder resumes. Returns
    (m1, m2, holder, client, the put's answer), the answer checked OK and
    the bytes the put's."""
    m1, m2 = leader_and_standby(hc, "etcd", etcd_ep)
    addr = f"etcd://{etcd_ep}"
    tcp = {"MC_SHM_DISABLE": "1"}  # the write goes through the holder's worker
    holder = hc.ha_node(addr, addr, tcp)
    client = hc.ha_node(addr, addr, {**tcp, "MC_LOG_LEVEL": "info", **client_env})
    for n in (holder, client):  # stopped before the masters at teardown
        hc.procs.remove(n)
        hc.procs.append(n)
    before = m1.metric(counter)
    starts = m1.metric("master_put_start_requests_total")
    sigstop(holder.p.pid)
    try:
        client.p.stdin.write(f"put k 1000000 7 seg={holder.hostname}\n")
        client.p.stdin.flush()
        wait_until(lambda: m1.metric(counter) > before, START_TIMEOUT,
                   f"{counter} at the leader", 0.05)
        if counter != "master_put_start_requests_total":
            assert m1.metric("master_put_start_requests_total") == starts
        m1.p.send_signal(signal.SIGKILL)
        m1.killed = True
        m1.p.wait(timeout=30)
        wait_serving(m2)
    finally:
        os.kill(holder.p.pid, signal.SIGCONT)
    r = client.readline(60)
    assert r.startswith("OK"), f"{r}; {client.stderr_tail()}"
    assert get_eventually(holder, "k") == (1000000, StoreNode.fields(r)["xxh3"])
    return m1, m2, holder, client, r


def test_a_put_across_a_failover_is_carried_through(hc, etcd_ep):
    # the put's Start reaches the leader, its write stalls (the holder is
    # stopped), the leader dies: the End reaches the new leader, which never
    # heard of the put (OBJECT_NOT_FOUND), so the client puts it again
    # instead of failing a call the caller would have to repeat; the
    # two-call path, so put credits off (the next test is their case)
    _, m2, _, client, _ = put_across_a_leader_kill(hc, etcd_ep, {"MC_STORE_PUT_CREDIT": "0"},
                                                   "master_put_start_requests_total")
    # the new leader placed it: usually the End reached it and the client
    # put the key again ("putting it again" in its log); in a slow,
    # sanitized build the old leader may die between counting the Start and
    # answering it, and the client then asks the new leader for the Start
    assert m2.metric("master_put_start_requests_total") >= 1, client.stderr_tail(1 << 20)


def test_a_credit_put_across_a_failover_is_carried_through(hc, etcd_ep):
    # put credits (MC_STORE_PUT_CREDIT, on by default): the client's ask reaches the
    # leader, its write into the granted block stalls (the holder is
    # stopped), the leader dies: the new leader never granted that credit,
    # refuses the put's item (INVALID_WRITE), and the client puts the key
    # again the PutStart/PutEnd way
    _, _, _, client, _ = put_across_a_leader_kill(hc, etcd_ep, {"MC_STORE_PUT_CREDIT": "8"},
                                                  "master_put_credit_requests_total")
    # the whole log: info lines follow the one looked for
    assert "refused its credit; putting it again" in client.stderr_tail(1 << 20)


def test_two_masters_cannot_share_a_log_dir(hc, etcd_ep):
    """Nor a snapshot directory (MOONCAKE_SNAPSHOT_LOCAL_PATH)."""
    # a leader killed while it sent a standby its snapshot left this behind
    wal = hc.new_wal()
    (wal / "repl-3").mkdir(parents=True)
    (wal / "repl-3" / "snap-0000000000000007.tmp").write_bytes(b"x" * 100)
    # its snapshot directory named as the --wal_dir, spelt otherwise: one lock
    m1 = hc.ha_master("etcd", etcd_ep, wal=wal,
                      env={"MOONCAKE_SNAPSHOT_LOCAL_PATH": f"{wal}/."})
    wait_serving(m1)
    assert not (wal / "repl-3").exists()
    exe = master_path()
    r = subprocess.run([exe, "--rpc_port=0", "--metrics_port=0", "--enable_ha",
                        f"--ha_backend_connstring={etcd_ep}", f"--wal_dir={hc.logdir / 'wal1'}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "in use by another master" in r.stderr, r.stderr
    # nor one snapshot directory: a standby deletes the snapshots there
    r = subprocess.run([exe, "--rpc_port=0", "--metrics_port=0", "--enable_ha",
                        f"--ha_backend_connstring={etcd_ep}", f"--wal_dir={hc.new_wal()}"],
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "MOONCAKE_SNAPSHOT_LOCAL_PATH": str(wal)})
    assert r.returncode != 0 and "MOONCAKE_SNAPSHOT_LOCAL_PATH" in r.stderr and \
        "in use by another master" in r.stderr, r.stderr
    r = subprocess.run([exe, "--rpc_port=0", "--metrics_port=0", "--enable_ha",
                        f"--ha_backend_connstring={etcd_ep}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--enable_ha needs --wal_dir" in r.stderr, r.stderr


def test_a_log_stream_is_refused_off_the_leader(hc, etcd_ep):
    # SYNC (type 120, req_id = the view) on a standby, or on the leader with
    # another view: an error frame with -1011, then the connection closes
    m1, m2 = leader_and_standby(hc, "etcd", etcd_ep)
    view = int(m1.metric("ha_view_version"))
    for m, v in ((m2, view), (m1, view + 1)):
        with mcproto.Conn(m.rpc) as c:
            c.send_raw(mcproto.frame(120, v, b""))
            h, _ = c.recv()
            assert (h["type"], h["status"], h["id"]) == (120, -1011, v), h
            with pytest.raises(mcproto.Closed):
                c.recv()
    # an ACK on a connection that is no stream is a protocol error: closed
    with mcproto.Conn(m1.rpc) as c:
        c.send_raw(mcproto.frame(122, 5, b""))
        with pytest.raises(mcproto.Closed):
            c.recv()
    assert m1.metric("ha_stream_syncs_total") == 1


def put_then_kill_an_etcd_member(hc, etcd3, i):
    """A leader and a standby on the three members, a node's put "x"
    acknowledged, then kill -9 of member i (etcd3 orders the raft leader
    last): (leader, standby, node, the put's xxh3)."""
    eps = ";".join(ep for _, ep in etcd3)
    m1, m2 = leader_and_standby(hc, "etcd", eps)
    node = hc.ha_node(f"etcd://{eps}", f"etcd://{eps}")
    hc.procs.remove(node)  # stopped before the masters at teardown
    hc.procs.append(node)
    sx = node.put("x", 50000, 1)
    etcd3[i][0].kill()
    etcd3[i][0].wait(timeout=30)
    return m1, m2, node, sx


@slow
def test_three_member_etcd_loses_a_member_then_the_leader(hc, etcd3):
    # kill -9 of the etcd member every client tries first (a follower, so
    # etcd needs no election): the leader keeps its lease through the
    # others (no step-down); then kill -9 of the leader: the standby takes
    # over on the two members left
    m1, m2, node, sx = put_then_kill_an_etcd_member(hc, etcd3, 0)
    end = time.monotonic() + 2 * TTL_S
    while time.monotonic() < end:  # two leases: each renewal went elsewhere
        assert ha_status(m1) == "serving"
        time.sleep(0.2)
    assert m1.metric("ha_step_downs_total") == 0
    sy = node.put("y", 50000, 2)
    m1.p.send_signal(signal.SIGKILL)
    m1.killed = True
    m1.p.wait(timeout=30)
    wait_serving(m2)
    assert get_eventually(node, "x") == (50000, sx)
    assert node.get("y") == (50000, sy)


@slow
def test_three_member_etcd_loses_its_raft_leader(hc, etcd3):
    # kill -9 of etcd's raft leader: no lease can be renewed until etcd
    # elects another, which may outlast the master's lease on a loaded
    # machine, so a step-down is allowed; but some master serves again on
    # the two members left, with every acknowledged put readable
    m1, m2, node, sx = put_then_kill_an_etcd_member(hc, etcd3, 2)
    wait_until(lambda: "serving" in (ha_status(m1), ha_status(m2)), FAILOVER_S,
               "a master serving after the etcd election", 0.1)
    assert get_eventually(node, "x") == (50000, sx)
    sy = node.put("y", 50000, 2)
    assert node.get("y") == (50000, sy)


class Partition:
    """Namespace p holding the leader; a veth pair joins it to the root
    namespace: 10.232.<tag>.1 (root side, etcd and the standby) and
    10.232.<tag>.2 (the leader).  cut()/heal() set both ends down/up."""

    def __init__(self):
        tag = os.getpid() % 200 + 1
        self.ns, self.root_dev, self.ns_dev = f"mcha{tag}", f"mcha{tag}r", f"mcha{tag}p"
        self.root_ip, self.ns_ip = f"10.232.{tag}.1", f"10.232.{tag}.2"

    def sh(self, *argv, check=True):
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        if check and r.returncode:
            raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip()}")

    def setup(self):
        self.sh("ip", "netns", "add", self.ns)
        self.sh("ip", "-n", self.ns, "link", "set", "lo", "up")
        self.sh("ip", "link", "add", self.root_dev, "type", "veth", "peer", "name", self.ns_dev)
        self.sh("ip", "link", "set", self.ns_dev, "netns", self.ns)
        self.sh("ip", "addr", "add", f"{self.root_ip}/24", "dev", self.root_dev)
        self.sh("ip", "-n", self.ns, "addr", "add", f"{self.ns_ip}/24", "dev", self.ns_dev)
        self.heal()

    def cut(self):
        self.sh("ip", "link", "set", self.root_dev, "down")
        self.sh("ip", "-n", self.ns, "link", "set", self.ns_dev, "down")

    def heal(self):
        self.sh("ip", "link", "set", self.root_dev, "up")
        self.sh("ip", "-n", self.ns, "link", "set", self.ns_dev, "up")

    def teardown(self):
        self.sh("ip", "netns", "del", self.ns, check=False)
        self.sh("ip", "link", "del", self.root_dev, check=False)


@pytest.fixture
def part():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 for a network namespace")
    p = Partition()
    try:
        try:
            p.setup()
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            pytest.skip(f"network namespaces or veth pairs are not permitted here: {e}")
        yield p
    finally:
        p.teardown()


@slow
def test_partition_from_etcd_leaves_one_leader(hc, part, tmp_path):
    # the leader in its own namespace loses etcd and its standby at once
    # (both ends of the link down): it stops serving within its lease, the
    # standby serves after the lease lapses in etcd and its warm-up, and no
    # sample ever sees both serving
    exe = shutil.which("etcd")
    if exe is None:
        pytest.skip("etcd-server not installed")
    client, peer = free_port(), free_port()
    etcd = subprocess.Popen(
        [exe, "--name", "p", "--data-dir", str(tmp_path / "etcd"),
         "--listen-client-urls", f"http://{part.root_ip}:{client}",
         "--advertise-client-urls", f"http://{part.root_ip}:{client}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"p=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ep = f"{part.root_ip}:{client}"
        assert wait_etcd(ep), "etcd did not start"
        exe_m = master_path()
        argv = ["ip", "netns", "exec", part.ns, str(exe_m), "--rpc_port=0",
                f"--rpc_address={part.ns_ip}", "--metrics_port=0", "--metrics_host=127.0.0.1",
                "--enable_ha", f"--ha_backend_connstring={ep}",
                f"--ha_lease_ttl_seconds={TTL_S}", f"--wal_dir={hc.new_wal()}"]
        m1 = Master(argv, "leader_in_ns", hc.logdir)
        hc.procs.append(m1)
        m1.wait_listening()

        def ns_status():
            code = (f"import urllib.request as u; print(u.urlopen('http://127.0.0.1:"
                    f"{m1.metrics}/ha_status', timeout=2).read().decode())")
            r = subprocess.run(["ip", "netns", "exec", part.ns, sys.executable, "-c", code],
                               capture_output=True, text=True, timeout=20)
            return r.stdout.strip()

        wait_until(lambda: ns_status() == "serving", FAILOVER_S, "the leader in its namespace")
        exe_m2 = master_path()
        m2 = Master([str(exe_m2), "--rpc_port=0", f"--rpc_address={part.root_ip}",
                     "--metrics_port=0", "--metrics_host=127.0.0.1", "--enable_ha",
                     f"--ha_backend_connstring={ep}", f"--ha_lease_ttl_seconds={TTL_S}",
                     f"--wal_dir={hc.new_wal()}"], "standby", hc.logdir)
        hc.procs.append(m2)
        m2.wait_listening()
        wait_until(lambda: m2.metric("ha_stream_synced") == 1, START_TIMEOUT,
                   "the standby streaming from the leader across the veth")

        part.cut()
        t0 = time.monotonic()
        both = []
        while True:
            s1, s2 = ns_status(), ha_status(m2)
            if s1 == "serving" and s2 == "serving":
                both.append(time.monotonic() - t0)
            if s2 == "serving" and s1 != "serving":
                break
            assert time.monotonic() - t0 < FAILOVER_S, (s1, s2)
        took = time.monotonic() - t0
        assert not both, f"two leaders serving at {both}"
        assert took >= TTL_S * 0.5, took
        assert ns_status() != "serving"
        part.heal()
        # the deposed one stays a standby and learns the new view
        wait_until(lambda: ns_status() == "standby", START_TIMEOUT, "the old leader standby")
        assert ha_status(m2) == "serving"
    finally:
        etcd.kill()
        etcd.wait(timeout=30)


def task_status(node, tid):
    return int(node.fields(node.ok(f"task {tid}"))["status"])


def test_tasks_follow_a_failover(hc, etcd_ep):
    """Copy tasks are in the log the standby streams (master/tasks_wal.c):
    after a kill -9 of the leader the new leader answers QueryTask for a
    finished task and a pending one (its source's holder SIGSTOPped over
    the kill), and runs the pending one once the holder remounts on it."""
    addr = f"etcd://{etcd_ep}"
    m1, m2 = leader_and_standby(hc, "etcd", etcd_ep, extra=("--client_ttl=10",))
    holder, q = hc.ha_node(addr, addr), hc.ha_node(addr, addr)
    want_done = holder.put("t-done", 65536, 5, f"seg={holder.hostname}")
    done = q.fields(q.ok(f"copy t-done {q.hostname}"))["id"]
    wait_until(lambda: task_status(q, done) == 3, 15.0, "the first copy", 0.1)
    want_pend = holder.put("t-pend", 65536, 6, f"seg={holder.hostname}")
    sigstop(holder.p.pid)
    try:
        pend = q.fields(q.ok(f"copy t-pend {q.hostname}"))["id"]
        assert task_status(q, pend) == 0
        # the standby has the task's record before the answer came back
        assert m2.metric("ha_log_seq") == m1.metric("ha_log_seq")
        m1.p.send_signal(signal.SIGKILL)
        m1.killed = True
        m1.p.wait(timeout=30)
        wait_serving(m2)
        assert task_status(q, done) == 3  # q follows the new leader
        assert task_status(q, pend) == 0
    finally:
        os.kill(holder.p.pid, signal.SIGCONT)
    wait_until(lambda: task_status(q, pend) == 3, FAILOVER_S, "the pending copy on m2", 0.2)
    assert q.get("t-pend") == (65536, want_pend)
    assert q.get("t-done") == (65536, want_done)
    new = q.fields(q.ok(f"copy t-done {holder.hostname}"))["id"]
    assert new not in (done, pend)
