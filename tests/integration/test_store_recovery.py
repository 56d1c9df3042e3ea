"""The store recovers from a restart of its metadata service (issue 11).

A master that embeds the HTTP metadata server keeps the engines' segment
descriptors and rpc_meta records in memory, and so does the standalone
``mooncake_http_metadata_server``: after a kill -9 and restart on the same
ports they are empty.  The clients must publish their keys again on their
own, so that every client, old or new, can put and read within a few
seconds.  Each scenario restarts the service on fixed ports and then polls
(bounded) for puts and gets across old and new clients to succeed.
"""

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BUILD, Proc, metadata_server_path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_store_processes import (  # noqa: E402
    CLIENT_TTL_S,
    MIB,
    Master,
    StoreCluster,
    StoreNode,
    master_path,
    wait_until,
)

RECOVER_S = 15.0  # generous bound; the clients' checks run every second


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RecoveryCluster(StoreCluster):
    def master_argv(self, rpc, metrics, meta=None):
        exe = master_path()
        if exe is None:
            pytest.skip(f"mooncake_master not built under {BUILD}")
        argv = [exe, f"--rpc_port={rpc}", "--rpc_address=127.0.0.1",
                f"--metrics_port={metrics}", "--metrics_host=127.0.0.1",
                f"--client_ttl={CLIENT_TTL_S}"]
        if meta:
            argv += ["--enable_http_metadata_server=true",
                     f"--http_metadata_server_port={meta}",
                     "--http_metadata_server_host=127.0.0.1"]
        return argv

    def run_master(self, argv, meta_uri=None):
        m = Master(argv, f"master{len(self.procs)}", self.logdir)
        self.procs.append(m)
        m.wait_listening()
        if meta_uri:
            m.meta_uri = meta_uri
        self.master = m
        return m

    def run_meta_server(self, port):
        exe = metadata_server_path()
        if exe is None:
            pytest.skip(f"mooncake_http_metadata_server not built under {BUILD}")
        p = Proc([exe, "--host", "127.0.0.1", "--port", port], f"meta{len(self.procs)}",
                 self.logdir)
        self.procs.append(p)
        p.wait_for_line(lambda l: "listening on" in l, 20.0)
        return p


    def teardown(self):
        # clients and masters first, then the metadata servers (on SIGTERM:
        # they do not stop at the end of their input)
        servers = [p for p in self.procs if not isinstance(p, (Master, StoreNode))]
        # stopped in reverse order: the clients, then the masters
        self.procs = ([p for p in self.procs if isinstance(p, Master)] +
                      [p for p in self.procs if isinstance(p, StoreNode)])
        try:
            super().teardown()
        finally:
            for p in servers:
                if p.alive():
                    p.p.send_signal(signal.SIGTERM)
                c = p.stop(grace=10.0)
                assert not c, c


@pytest.fixture
def rc(request, tmp_path_factory):
    c = RecoveryCluster(request, tmp_path_factory)
    yield c
    c.teardown()


def put_on(node, key, size, seed, holder):
    """xxh3 of key put by node with its replica on holder's segment, or None
    (the put failed, or the master placed it elsewhere: removed again)."""
    r = node.cmd(f"put {key} {size} {seed} seg={holder.hostname}")
    if not r.startswith("OK"):
        return None
    if f" {holder.hostname}:" not in node.ok(f"replicas {key}"):
        node.ok(f"remove {key} force")
        return None
    return StoreNode.fields(r)["xxh3"]


def got_ok(node, key):
    r = node.cmd(f"get {key}")
    if not r.startswith("OK"):
        assert "ERR_SEGMENT_NOT_FOUND" in r, f"{node.label}: get {key} -> {r}"
        return None
    f = StoreNode.fields(r)
    return int(f["size"]), f["xxh3"]


def check_all_pairs(nodes, tag):
    """Each node puts on every other node's segment; every node reads it back."""
    for i, w in enumerate(nodes):
        for j, h in enumerate(nodes):
            if i == j:
                continue
            key = f"{tag}-{i}-on-{j}"
            want = wait_until(lambda: put_on(w, key, MIB, 100 * i + j, h),
                              RECOVER_S, f"{w.label} to put {key} on {h.label}", interval=0.2)
            for r in nodes:
                got = wait_until(lambda: got_ok(r, key), RECOVER_S, f"{r.label} to read {key}",
                                 interval=0.2)
                assert got == (MIB, want), f"{r.label} reading {key}"


# "periodic": the http client's own check (every second) puts the entries
# back; "remount": with that check off, the remount the restarted master
# asks for does.
@pytest.mark.parametrize("check", ["periodic", "remount"])
def test_master_with_metadata_server_restart(rc, check):
    env = {"MC_METADATA_HTTP_CHECK_MS": "0"} if check == "remount" else None
    rpc, metrics, meta = free_port(), free_port(), free_port()
    argv = rc.master_argv(rpc, metrics, meta)
    m = rc.run_master(argv)
    a, b = rc.node(env=env), rc.node(env=env)
    check_all_pairs([a, b], "before")

    m.kill9()
    rc.run_master(argv)
    c = rc.node(env=env)  # a new client, which knows nobody's descriptor yet
    check_all_pairs([a, b, c], "after")


def test_standalone_metadata_server_restart(rc):
    meta = str(free_port())
    uri = f"http://127.0.0.1:{meta}/metadata"
    ms = rc.run_meta_server(meta)
    rc.run_master(rc.master_argv(free_port(), free_port()), meta_uri=uri)
    a, b = rc.node(), rc.node()
    check_all_pairs([a, b], "before")

    ms.kill9()
    rc.run_meta_server(meta)
    c = rc.node()
    check_all_pairs([a, b, c], "after")


def test_remount_probe_after_restart_finds_the_engine(rc):
    """A client whose name's port is taken (here by a listener that never
    answers) has its engine's RPC port only in rpc_meta.  After a master
    restart that record is gone with the embedded metadata server; the
    client puts it back before it remounts, so the restarted master's mount
    probe finds the engine at the first remount, not the silent port."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    port = silent.getsockname()[1]
    env = {"MC_METADATA_HTTP_CHECK_MS": "0"}  # only the remount puts entries back
    try:
        rpc, metrics, meta = free_port(), free_port(), free_port()
        argv = rc.master_argv(rpc, metrics, meta) + ["--mount_probe_timeout=1000ms"]
        m = rc.run_master(argv)
        a = rc.node(env=env, extra=("--host", f"127.0.0.1:{port}"))
        assert a.hostname == f"127.0.0.1:{port}"
        b = rc.node(env=env)
        check_all_pairs([a, b], "before")

        m.kill9()
        m = rc.run_master(argv)
        wait_until(lambda: a.hostname in m.segments(), RECOVER_S, "a to remount")
        check_all_pairs([a, b], "after")
        log = a.log_path.read_text(errors="replace")
        assert "remount of segment" not in log, log
    finally:
        silent.close()


def got_any(node, key):
    """(size, xxh3) of key, or None while it is not readable (the restarted
    master hides an object until its segment is mounted again)."""
    r = node.cmd(f"get {key}")
    if not r.startswith("OK"):
        return None
    f = StoreNode.fields(r)
    return int(f["size"]), f["xxh3"]


@pytest.mark.parametrize("fsync", ["always", "everysec"])
def test_master_wal_keeps_acknowledged_objects(rc, tmp_path, fsync):
    """Issue 14: kill -9 of a master on --wal_dir, restarted on the same
    directory: the clients remount on their next ping and every object put
    before the kill (and acknowledged) is readable with its bytes; a removed
    one stays removed, and the restarted master takes new puts."""
    rpc, metrics, meta = free_port(), free_port(), free_port()
    argv = rc.master_argv(rpc, metrics, meta) + [f"--wal_dir={tmp_path / 'wal'}",
                                                 f"--wal_fsync={fsync}"]
    m = rc.run_master(argv)
    a, b = rc.node(), rc.node()
    want = {}
    for i in range(12):
        w, h = (a, b) if i % 2 else (b, a)
        key = f"wal-{i}"
        want[key] = wait_until(lambda: put_on(w, key, 256 * 1024 + i, i, h), RECOVER_S,
                               f"{w.label} to put {key}", interval=0.2)
    a.ok("remove wal-0 force")
    del want["wal-0"]
    # a kill -9 loses no committed record under any policy (the bytes are
    # in the page cache); fsync matters for a crash of the machine
    kill9_and_check(rc, m, argv, [a, b], want, "wal-0", "after-wal")


def kill9_and_check(rc, m, argv, nodes, want, gone, label):
    """kill -9 the master, start it again on argv: every node reads every key of
    want back with its digest (once it has remounted), the removed key gone stays
    gone, and the nodes still move data between them."""
    m.kill9()
    rc.run_master(argv)
    for key, x in want.items():
        for r in nodes:
            got = wait_until(lambda: got_any(r, key), RECOVER_S, f"{r.label} to read {key}",
                             interval=0.2)
            assert got[1] == x, f"{r.label} reading {key}"
    assert not nodes[0].cmd(f"get {gone}").startswith("OK")
    check_all_pairs(nodes, label)


def snap_files(d):
    return sorted(p.name for p in d.glob("snap-*.snap")) if d.exists() else []


@pytest.mark.parametrize("where", ["wal_dir", "env"])
def test_master_snapshots_cut_the_log_and_restore(rc, tmp_path, monkeypatch, where):
    """Issue 14: with --enable_snapshot a forked child writes the tables
    every second while the master serves; each one deletes the log files
    the oldest snapshot kept covers.  A kill -9 and a start with
    --enable_snapshot_restore loads the newest snapshot and the log after
    it: every acknowledged object is back, before and after the snapshots.
    The snapshots go to the --wal_dir, or to MOONCAKE_SNAPSHOT_LOCAL_PATH."""
    rpc, metrics, meta = free_port(), free_port(), free_port()
    wal = tmp_path / "wal"
    snaps = wal
    if where == "env":
        snaps = tmp_path / "snaps"
        monkeypatch.setenv("MOONCAKE_SNAPSHOT_LOCAL_PATH", str(snaps))
    argv = rc.master_argv(rpc, metrics, meta) + [
        f"--wal_dir={wal}", "--enable_snapshot", "--snapshot_interval_seconds=1",
        "--snapshot_retention_count=2", "--enable_snapshot_restore"]
    m = rc.run_master(argv)
    a, b = rc.node(), rc.node()
    want = {}

    def put(i):
        w, h = (a, b) if i % 2 else (b, a)
        key = f"snap-{i}"
        want[key] = wait_until(lambda: put_on(w, key, 128 * 1024 + i, i, h), RECOVER_S,
                               f"{w.label} to put {key}", interval=0.2)

    for i in range(6):
        put(i)
    wait_until(lambda: snap_files(snaps), 30, "a first snapshot", interval=0.1)
    for i in range(6, 10):
        put(i)
    # a second one after more puts: the first log file is gone by then
    first = snap_files(snaps)[-1]
    wait_until(lambda: snap_files(snaps) and snap_files(snaps)[-1] != first, 30,
               "a second snapshot", interval=0.1)
    wait_until(lambda: not (wal / "wal-0000000000000001.log").exists(), 30,
               "the log to be cut", interval=0.1)
    # the file is in place before the parent reaps the child and counts it
    wait_until(lambda: m.metric("master_snapshot_success") >= 2, 30,
               "the second snapshot to be counted", interval=0.1)
    # (retention itself: unit_master_wal; here a third may be in place, not yet reaped)
    assert where == "wal_dir" or not snap_files(wal)
    assert m.metric("master_snapshot_fail") == 0
    # every snapshot counted has its time in the duration histogram (one page)
    st, body = m.http("/metrics")
    vals = dict(ln.rsplit(" ", 1) for ln in body.splitlines()
                if ln.startswith("master_snapshot_"))
    assert vals["master_snapshot_duration_ms_count"] == vals["master_snapshot_success"]
    assert float(vals['master_snapshot_duration_ms_bucket{le="+Inf"}']) >= 2
    for i in range(10, 14):
        put(i)
    a.ok("remove snap-0 force")
    del want["snap-0"]
    kill9_and_check(rc, m, argv, [a, b], want, "snap-0", "after-snap")


def test_a_failed_snapshot_keeps_the_log(rc, tmp_path, monkeypatch):
    """A snapshot that cannot be written (its directory cannot be made:
    MOONCAKE_SNAPSHOT_LOCAL_PATH under a regular file) is counted as
    failed, deletes nothing, and the master goes on taking puts; a
    restart replays the whole log."""
    rpc, metrics, meta = free_port(), free_port(), free_port()
    wal = tmp_path / "wal"
    (tmp_path / "file").write_text("not a directory")
    monkeypatch.setenv("MOONCAKE_SNAPSHOT_LOCAL_PATH", str(tmp_path / "file" / "snaps"))
    argv = rc.master_argv(rpc, metrics, meta) + [
        f"--wal_dir={wal}", "--enable_snapshot", "--snapshot_interval_seconds=1"]
    m = rc.run_master(argv)
    a, b = rc.node(), rc.node()
    want = {}
    for i in range(4):
        w, h = (a, b) if i % 2 else (b, a)
        key = f"fail-{i}"
        want[key] = wait_until(lambda: put_on(w, key, 64 * 1024 + i, i, h), RECOVER_S,
                               f"{w.label} to put {key}", interval=0.2)
        if i == 1:
            wait_until(lambda: (m.metric("master_snapshot_fail") or 0) >= 1, 30,
                       "a failed snapshot", interval=0.1)
    assert m.metric("master_snapshot_success") == 0
    assert (wal / "wal-0000000000000001.log").exists()
    # nor is the log rotated for a snapshot that could not start
    assert len(list(wal.glob("wal-*.log"))) == 1
    m.kill9()
    rc.run_master(argv)
    for key, x in want.items():
        got = wait_until(lambda: got_any(a, key), RECOVER_S, f"{a.label} to read {key}",
                         interval=0.2)
        assert got[1] == x, key


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (root)")
def test_a_full_disk_refuses_puts_and_keeps_what_was_acknowledged(rc, tmp_path):
    """Issue 14: the log's directory on a real file system that fills up
    (a 4 MiB tmpfs and a file that takes the rest): a put whose record
    cannot be written is answered with an error, never acknowledged; from
    then on every change is refused with FILE_WRITE_FAIL (the tables hold
    what the log lost, docs/durability.md "Commit order") while reads of
    what was acknowledged go on, even once space is back; a restart brings
    the tables back to the log: every acknowledged object is there, no
    refused one, and puts are taken again."""
    wal = tmp_path / "wal"
    wal.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "mcwal", str(wal)], check=True,
                   capture_output=True, timeout=30)
    try:
        rpc, metrics, meta = free_port(), free_port(), free_port()
        argv = rc.master_argv(rpc, metrics, meta) + [f"--wal_dir={wal}", "--wal_fsync=always"]
        m = rc.run_master(argv)
        a, b = rc.node(), rc.node()
        want, refused = {}, None
        for i in range(3):
            key = f"full-{i}"
            want[key] = wait_until(lambda: put_on(a, key, 64 * 1024, i, b), RECOVER_S,
                                   f"a to put {key}", interval=0.2)
        filler = wal / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:  # every block of the file system but the log's
            while os.write(fd, b"\1" * 4096) > 0:
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        for i in range(3, 200):  # the log's last page may take a few records more
            key = f"full-{i}"
            r = a.cmd(f"put {key} 65536 {i} seg={b.hostname}")
            if r.startswith("OK"):
                want[key] = StoreNode.fields(r)["xxh3"]
                continue
            assert r.startswith("ERR"), r
            refused = key
            break
        assert refused, "the full file system never refused a put"
        assert "No space left on device" in m.stderr_tail(20000)
        filler.unlink()
        assert a.err(f"put full-later 65536 1 seg={b.hostname}")[0] == "ERR_FILE_WRITE_FAIL"
        for key, x in want.items():  # reads go on
            assert got_any(b, key) == (64 * 1024, x), key
        kill9_and_check(rc, m, argv, [a, b], want, refused, "after-full")
        assert not a.cmd("get full-later").startswith("OK")
    finally:  # lazily: the master's files stay open until the fixture stops it
        subprocess.run(["umount", "-l", str(wal)], capture_output=True, timeout=30)
