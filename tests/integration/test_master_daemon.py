"""mooncake_master as a separate process: flags, config file, RPC framing
rules, the admin/metrics HTTP service and the embedded metadata server.

Every master here listens on 127.0.0.1 with port 0 and reports its ports
in its "listening rpc=.. metrics=.. metadata=.." stderr line, which the
fixture waits for (no sleeps).  Raw frames are built with mcproto.py (the
32-byte header of docs/protocol.md and a few payloads), so malformed input
can be sent on purpose.
"""

import http.client
import json
import os
import re
import signal
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest

import mcproto as mp
from conftest import BUILD, SANITIZER_MARKERS, _find_binary, slow

START_TIMEOUT = 20.0
LISTEN_RE = re.compile(r"listening rpc=(\d+) metrics=(\d+) metadata=(\d+)")
# --mount_probe=false: these tests mount fake segments with no engine behind
# them (test_mount_probe.py runs the probe itself)
BASE_ARGS = ["--rpc_port=0", "--rpc_address=127.0.0.1", "--metrics_port=0",
             "--metrics_host=127.0.0.1", "--mount_probe=false"]


def master_path():
    exe = _find_binary("MC_MASTER", "mooncake_master", ["tools/mooncake_master"])
    if exe is None:
        pytest.skip(f"mooncake_master not built under {BUILD}")
    return exe


def run_master(*args, timeout=20):
    """Run to completion (for --help, --version and bad flags)."""
    return subprocess.run([str(master_path()), *args], capture_output=True, text=True,
                          timeout=timeout)


class Master:
    """A running daemon; stderr is collected by a thread."""

    def __init__(self, args, env=None, nofile=None):
        # nofile: the daemon's RLIMIT_NOFILE (prlimit), for the resource tests
        pre = [] if nofile is None else ["prlimit", f"--nofile={nofile}:{nofile}"]
        self.p = subprocess.Popen([*pre, str(master_path()), *args], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True, env=None if env is None else {**os.environ, **env})
        self.lines = []
        self.cond = threading.Condition()
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()
        line = self.wait_line(LISTEN_RE.search, START_TIMEOUT)
        m = LISTEN_RE.search(line)
        self.rpc, self.metrics, self.metadata = (int(x) for x in m.groups())

    def _read(self):
        for line in self.p.stderr:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.lines.append(None)
            self.cond.notify_all()

    def wait_line(self, pred, timeout, start=0):
        """First stderr line from index start on that satisfies pred."""
        deadline = time.monotonic() + timeout
        i = start
        with self.cond:
            while True:
                while i < len(self.lines):
                    line = self.lines[i]
                    if line is None:
                        raise AssertionError(f"master exited (rc={self.p.poll()}):\n"
                                             + self.text())
                    if pred(line):
                        return line
                    i += 1
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("expected master log line not seen:\n" + self.text())
                self.cond.wait(left)

    def text(self):
        with self.cond:
            return "\n".join(l for l in self.lines if l is not None)

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            raise AssertionError("master did not exit within 15 s of SIGTERM")
        self.t.join(timeout=5)
        log = self.text()
        assert rc == 0, f"master exited {rc}:\n{log}"
        for marker in SANITIZER_MARKERS:
            assert marker not in log, log

    # ---- helpers ----
    def conn(self):
        return mp.Conn(self.rpc)

    def http(self, method, path, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.metrics, timeout=10)
        try:
            c.request(method, path, headers=headers or {})
            r = c.getresponse()
            return r.status, r.getheader("Content-Type"), r.read().decode()
        finally:
            c.close()

    def get(self, path):
        return self.http("GET", path)


@pytest.fixture(scope="module")
def master():
    m = Master(BASE_ARGS + ["--enable_http_metadata_server=true",
                            "--http_metadata_server_port=0",
                            "--http_metadata_server_host=127.0.0.1"])
    yield m
    m.stop()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def closed_by_peer(sock, timeout=10.0):
    """Read until the master closes; True on EOF or reset.  Frames it sent
    before closing are returned as the second value."""
    sock.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return True, data
            data += chunk
    except ConnectionResetError:
        return True, data
    except socket.timeout:
        return False, data


def parse_frames(data):
    out = []
    while len(data) >= 32:
        magic, major, minor, mtype, flags, _r, status, rid, plen, _r2 = mp.HDR.unpack(data[:32])
        out.append({"type": mtype, "flags": flags, "status": status, "id": rid,
                    "payload": data[32:32 + plen]})
        data = data[32 + plen:]
    return out


# ---- command line -------------------------------------------------------------

def test_help_lists_flags_and_their_status():
    r = run_master("--help")
    assert r.returncode == 0, r.stderr
    for flag in ("--rpc_port=0", "--port=50051", "--metrics_port=9003",
                 "--default_kv_lease_ttl=10000", "--client_ttl=10", "--enable_ha=false",
                 "--eviction_high_watermark_ratio=0.90", "--memory_allocator=offset"):
        assert flag in r.stdout
    # issue 14's flags (the log, snapshots, HA) and the snapshot directory
    for flag in ("--wal_dir=", "--wal_fsync=everysec", "--enable_snapshot=false",
                 "--snapshot_interval_seconds=600", "--snapshot_retention_count=2",
                 "--enable_snapshot_restore=false", "--snapshot_child_timeout_seconds=300",
                 "--ha_backend_type=etcd", "--ha_backend_connstring=",
                 "--ha_lease_ttl_seconds=5", "--ha_sync_replicas=-1",
                 "--rpc_address=0.0.0.0", "--cluster_id=mooncake_cluster",
                 "MOONCAKE_SNAPSHOT_LOCAL_PATH=", "MC_LOG_LEVEL=info"):
        assert "\n  " + flag in r.stdout, flag
    assert "accepted, no effect in this build" in r.stdout
    assert "only the default is supported in this build" in r.stdout


def test_version():
    r = run_master("--version")
    assert r.returncode == 0
    assert re.fullmatch(r"\d+\.\d+\.\d+ \(git: ([0-9a-f]{7,}|unknown)\)\n", r.stdout), r.stdout


@pytest.mark.parametrize("args,needle", [
    (["--bogus_flag=1"], "unknown command line flag 'bogus_flag'"),
    (["positional"], "unexpected argument"),
    (["--eviction_ratio=1.5"], "eviction_ratio"),
    (["--rpc_port=70000"], "rpc_port"),
    (["--client_ttl=ten"], "client_ttl"),
    (["--rpc_port"], "missing its argument"),
    (["--enable_oplog=true"], "not supported in this build"),
    (["--ha_backend_type=k8s"], "not supported in this build"),
    (["--ha_sync_replicas=17"], "ha_sync_replicas"),
    (["--offloading_queue_limit=0"], "offloading_queue_limit"),
    (["--memory_allocator=cachelib"], "not supported in this build"),
    (["--allocation_strategy=ssd_free_ratio_first"], "not supported in this build"),
    (["--allocation_strategy=fastest"], "allocation_strategy"),
    (["--default_kv_soft_pin_ttl=2h", "--max_kv_soft_pin_ttl=1h"], "exceeds"),
    (["--cluster_id=a/b"], "cluster_id"),
])
def test_bad_flags_exit_2_with_a_reason(args, needle):
    r = run_master(*args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert needle in r.stderr, r.stderr


def test_accepted_forms_of_flags():
    """gflags spellings, durations with units and no-effect flags all start."""
    m = Master(["-rpc_port=0", "--rpc_address", "127.0.0.1", "--metrics_port=0",
                "--metrics_host=127.0.0.1", "--noenable_metric_reporting",
                "--default_kv_lease_ttl=5s", "--client_ttl=2m", "--rpc_thread_num=8",
                "--enable_ha=false", "--etcd_endpoints=http://localhost:2379",
                "--eviction_high_watermark_ratio", "1.0", "--allocation_strategy",
                "free_ratio_first"])
    try:
        with m.conn() as c:
            assert c.ping()[1] in (1, 2)
    finally:
        m.stop()


def test_config_file_and_precedence(tmp_path):
    meta_port, metrics_port = free_port(), free_port()
    yaml = tmp_path / "master.yaml"
    yaml.write_text(
        "# flat YAML, as upstream's conf/master.yaml\n"
        "rpc_port: 0\n"
        "rpc_address: \"127.0.0.1\"\n"
        f"metrics_port: {metrics_port}\n"
        "metrics_host: 127.0.0.1   # comment\n"
        "enable_http_metadata_server: true\n"
        "http_metadata_server_host: '127.0.0.1'\n"
        f"http_metadata_server_port: {meta_port}\n"
        "client_live_ttl_sec: 60\n"
        "eviction_ratio: 0.1\n"
        "some_key_of_a_newer_upstream: 1\n")
    # the file alone
    m = Master([f"--config_path={yaml}"])
    try:
        assert m.metadata == meta_port and m.metrics == metrics_port
        assert m.get("/health")[0] == 200
    finally:
        m.stop()
    # a command-line flag overrides the file, wherever it appears
    m = Master(["--http_metadata_server_port=0", f"--config_path={yaml}"])
    try:
        assert m.metrics == metrics_port
        assert m.metadata not in (0, meta_port)
    finally:
        m.stop()
    # JSON, with the config-file alias of client_ttl
    js = tmp_path / "master.json"
    js.write_text(json.dumps({"rpc_port": 0, "rpc_address": "127.0.0.1",
                              "metrics_port": 0, "metrics_host": "127.0.0.1",
                              "client_live_ttl_sec": 60, "default_kv_lease_ttl": 10000,
                              "enable_ha": False, "etcd_endpoints": "http://localhost:2379"}))
    m = Master([f"--config_path={js}"])
    m.stop()
    # a bad value in the file is an error naming the flag
    js.write_text(json.dumps({"client_live_ttl_sec": "soon"}))
    r = run_master(f"--config_path={js}")
    assert r.returncode == 2 and "client_ttl" in r.stderr, r.stderr
    js.write_text(json.dumps({"enable_oplog": True}))
    r = run_master(f"--config_path={js}")
    assert r.returncode == 2 and "not supported in this build" in r.stderr, r.stderr
    r = run_master(f"--config_path={tmp_path / 'missing.yaml'}")
    assert r.returncode == 2 and "cannot open config file" in r.stderr, r.stderr


def test_dump_config_round_trips(tmp_path):
    r = run_master("--client_ttl=2m", "--eviction_ratio=0.125", "--rpc_address=127.0.0.1",
                   "--dump-config")
    assert r.returncode == 0, r.stderr
    assert "client_ttl: 120000ms\n" in r.stdout
    assert "eviction_ratio: 0.125\n" in r.stdout
    assert 'rpc_address: "127.0.0.1"\n' in r.stdout
    f = tmp_path / "dumped.yaml"
    f.write_text(r.stdout)
    r2 = run_master(f"--config_path={f}", "--dump-config")
    assert r2.returncode == 0, r2.stderr
    assert r2.stdout == r.stdout


def test_port_in_use_exits_1():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = run_master(f"--rpc_port={port}", "--rpc_address=127.0.0.1", "--metrics_port=0",
                       "--metrics_host=127.0.0.1")
    assert r.returncode == 1, r.stderr
    assert str(port) in r.stderr


# ---- RPC ----------------------------------------------------------------------

def test_service_ready_ping_exist(master):
    with master.conn() as c:
        version = c.hello("test 1")
        assert version
        view, status = c.ping()
        assert status == 2  # NEED_REMOUNT: an unknown client
        assert c.exist("no-such-key") is False


def test_pipelined_requests_answered_by_id(master):
    with master.conn() as c:
        payload = mp.string("") + mp.key("k")
        data = b"".join(mp.frame(mp.EXIST_KEY, 1000 + i, payload) for i in range(200))
        c.send_raw(data)
        ids = set()
        for _ in range(200):
            h, p = c.recv()
            assert h["status"] == 0 and h["flags"] & mp.F_RESPONSE
            ids.add(h["id"])
        assert ids == set(range(1000, 1200))


def test_unknown_type_is_not_supported_and_connection_goes_on(master):
    with master.conn() as c:
        c.send_raw(mp.frame(999, 77, b"whatever"))
        h, p = c.recv()
        assert (h["type"], h["id"], h["status"]) == (999, 77, mp.ERR_NOT_SUPPORTED)
        assert c.ping()[1] == 2


@pytest.mark.parametrize("kind", ["bad_magic", "bad_payload", "truncated", "too_large",
                                  "response_frame"])
def test_malformed_input_closes_only_that_connection(master, kind):
    start = len(master.lines)
    with master.conn() as good, master.conn() as bad:
        assert good.ping()[1] == 2
        if kind == "bad_magic":
            bad.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"\0" * 32)
        elif kind == "bad_payload":
            bad.send_raw(mp.frame(mp.EXIST_KEY, 5, b"\xff\xff\xff"))
        elif kind == "truncated":
            bad.send_raw(mp.frame(mp.PING, 5, mp.uuid(1, 2))[:40])
            bad.sock.shutdown(socket.SHUT_WR)
        elif kind == "too_large":
            bad.send_raw(mp.HDR.pack(mp.MAGIC, 1, 0, mp.PING, 0, 0, 0, 5, 65 << 20, 0))
        elif kind == "response_frame":
            bad.send_raw(mp.frame(mp.PING, 5, struct.pack("<qB", 0, 1), flags=mp.F_RESPONSE))
        closed, data = closed_by_peer(bad.sock)
        assert closed, f"{kind}: the master kept the connection open"
        frames = parse_frames(data)
        if kind in ("bad_payload", "too_large", "response_frame"):
            # the header was readable: an error response by id, then close
            assert frames and frames[0]["id"] == 5 and frames[0]["status"] < 0, frames
        # the other connection, and new ones, are served as before
        assert good.ping()[1] == 2
        with master.conn() as c3:
            assert c3.exist("k") is False
    # one log line names the peer and the cause
    master.wait_line(lambda l: "closing connection from 127.0.0.1:" in l, 10, start)


def test_foreign_major_version_gets_invalid_version_then_close(master):
    with master.conn() as c:
        c.send_raw(mp.frame(mp.PING, 42, mp.uuid(1, 2), major=2))
        closed, data = closed_by_peer(c.sock)
        assert closed
        frames = parse_frames(data)
        assert len(frames) == 1
        assert (frames[0]["id"], frames[0]["status"]) == (42, mp.ERR_INVALID_VERSION)


def test_garbage_on_many_connections_does_not_disturb_a_client(master):
    stop = threading.Event()
    errors = []

    def flood():
        rnd = bytearray(os.urandom(4096))
        while not stop.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", master.rpc), timeout=5)
                s.sendall(rnd)
                s.close()
            except OSError as e:  # a reset while sending is fine
                if not isinstance(e, (ConnectionResetError, BrokenPipeError)):
                    errors.append(e)

    threads = [threading.Thread(target=flood) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        with master.conn() as c:
            deadline = time.monotonic() + 2.0
            n = 0
            while time.monotonic() < deadline:
                assert c.ping()[1] == 2
                assert c.exist("k") is False
                n += 1
            assert n > 50
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors


def test_idle_connections_time_out():
    m = Master(BASE_ARGS + ["--rpc_conn_timeout_seconds=1"], env={"MC_LOG_LEVEL": "info"})
    try:
        with m.conn() as idle, m.conn() as busy:
            assert idle.ping()[1] == 2
            t0 = time.monotonic()
            while time.monotonic() - t0 < 4:
                assert busy.ping()[1] == 2  # activity keeps this one open
                time.sleep(0.2)
            closed, _ = closed_by_peer(idle.sock, timeout=5)
            assert closed
            assert busy.ping()[1] == 2
        m.wait_line(lambda l: "idle for" in l, 5)
    finally:
        m.stop()


# ---- admin / metrics HTTP -------------------------------------------------------

def test_health_role_ha_status(master):
    st, ct, body = master.get("/health")
    assert st == 200 and ct.startswith("application/json")
    h = json.loads(body)
    assert h["status"] == "ok" and h["role"] == "leader" and h["ha_state"] == "serving"
    assert h["service_ready"] is True
    assert master.get("/role")[::2] == (200, "leader")
    assert master.get("/ha_status")[::2] == (200, "serving")
    assert master.get("/no/such/page")[0] == 404


def test_metrics_prometheus_text(master):
    with master.conn() as c:
        c.ping()
    st, ct, body = master.get("/metrics")
    assert st == 200 and ct == "text/plain; version=0.0.4"
    for name in ("master_key_count", "master_allocated_bytes", "master_total_capacity_bytes",
                 "master_active_clients", "master_ping_requests_total",
                 "master_exist_key_requests_total", "master_put_start_failures_total",
                 "master_batch_exist_key_items_total", "mem_cache_hit_nums_",
                 "master_successful_evictions_total", "ha_standby_state"):
        assert re.search(rf"^# TYPE {name} (gauge|counter)$", body, re.M), name
        assert re.search(rf"^{name} \d+$", body, re.M), name
    assert re.search(r"^master_ping_requests_total [1-9]\d*$", body, re.M)
    # the listening ports' bounds, one series per port (test_bounds.py provokes them)
    for name, ports in (("master_connections_refused_total", ("rpc", "admin", "metadata")),
                        ("master_accept_pauses_total", ("rpc", "admin", "metadata")),
                        ("master_deadline_cuts_total", ("rpc", "admin", "metadata")),
                        ("master_room_cuts_total", ("admin", "metadata"))):
        assert re.search(rf"^# TYPE {name} counter$", body, re.M), name
        for port in ports:
            assert re.search(rf'^{name}{{port="{port}"}} \d+$', body, re.M), (name, port)
    for name in ("master_rpc_buffer_cuts_total", "master_rpc_too_large_total"):
        assert re.search(rf"^{name} \d+$", body, re.M), name
    assert "# TYPE master_value_size_bytes histogram" in body
    buckets = re.findall(r'^master_value_size_bytes_bucket\{le="([^"]+)"\} (\d+)$', body, re.M)
    assert [b[0] for b in buckets] == ["4096", "65536", "262144", "1048576", "4194304",
                                       "16777216", "67108864", "+Inf"]
    counts = [int(b[1]) for b in buckets]
    assert counts == sorted(counts)  # cumulative
    assert re.search(r"^master_value_size_bytes_count \d+$", body, re.M)
    assert re.search(r"^master_value_size_bytes_sum \d+$", body, re.M)


def test_metrics_summary_line(master):
    st, ct, body = master.get("/metrics/summary")
    assert st == 200
    assert "\n" not in body.strip()
    assert body.startswith("role=leader, state=serving, service_ready=true, master={")
    for section in ("Mem Storage: ", "SSD Storage: ", "Keys: ", "Clients: ",
                    "Requests (Success/Total per sec): PutStart=", "Batch Requests",
                    "Eviction: Success/Attempts=", "Discard: Released/Total="):
        assert section in body, section


def test_query_key_errors_are_404_json(master):
    st, ct, body = master.get("/query_key?key=definitely-missing")
    assert st == 404 and ct.startswith("application/json")
    assert json.loads(body) == {"success": False, "error_code": -704,
                                "error_message": "OBJECT_NOT_FOUND"}


def test_batch_query_keys(master):
    st, _, body = master.get("/batch_query_keys")
    assert st == 400
    assert json.loads(body) == {"success": False,
                                "error": "No keys provided. Use ?keys=key1,key2,..."}
    st, _, body = master.get("/batch_query_keys?keys=x1,x2")
    assert st == 200
    j = json.loads(body)
    assert j["success"] is True
    assert j["data"] == {"x1": {"ok": False, "error": "OBJECT_NOT_FOUND"},
                         "x2": {"ok": False, "error": "OBJECT_NOT_FOUND"}}


def test_segment_pages_without_segments(master):
    st, _, body = master.get("/query_segment?segment=unknown-seg")
    assert (st, body) == (500, "Failed to query segment")
    st, _, body = master.get("/get_all_segments")
    assert st == 200
    st, _, body = master.get("/get_segments_detail")
    assert st == 200 and "total_segments" in json.loads(body)


def test_objects_through_rpc_and_http():
    """Mount a segment and put an object with raw frames, then read it back
    through every admin page."""
    m = Master(BASE_ARGS)
    try:
        with m.conn() as c:
            c.mount((7, 8), "node-a:1234", 0x10000000, 64 << 20, endpoint="node-a:1234")
            reps = c.put_start("obj/1", 4096)
            assert len(reps) == 1 and reps[0]["segment_name"] == "node-a:1234"
            c.put_end("obj/1")
            assert c.exist("obj/1") is True

        st, _, body = m.get("/query_key?key=obj%2F1")  # URL-decoded by the server
        assert st == 200, body
        j = json.loads(body)
        assert j["success"] is True and len(j["data"]) == 1
        d = j["data"][0]
        assert d == {"size_": 4096, "buffer_address_": reps[0]["address"], "protocol_": "tcp",
                     "transport_endpoint_": "node-a:1234"}

        st, _, body = m.get("/batch_query_keys?keys=obj/1,nope")
        j = json.loads(body)["data"]
        assert j["obj/1"]["ok"] is True and j["obj/1"]["values"][0]["size_"] == 4096
        assert j["nope"] == {"ok": False, "error": "OBJECT_NOT_FOUND"}

        assert m.get("/get_all_keys")[2] == "obj/1\n"
        assert m.get("/get_all_segments")[2] == "node-a:1234\n"
        st, _, body = m.get("/query_segment?segment=node-a:1234")
        assert st == 200
        lines = body.split("\n")
        assert lines[0] == "node-a:1234"
        assert re.fullmatch(r"Used\(bytes\): [1-9]\d*", lines[1]), body
        assert lines[2] == f"Capacity(bytes) : {64 << 20}"
        seg = json.loads(m.get("/get_segments_detail")[2])
        assert seg["total_segments"] == 1
        s0 = seg["segments"][0]
        assert s0["segment_name"] == "node-a:1234" and s0["segment_id"] == "7-8"
        assert s0["base_address"] == "0x10000000" and s0["status"] == "OK"
        assert s0["size_bytes"] == 64 << 20

        body = m.get("/metrics")[2]
        assert re.search(r"^master_key_count 1$", body, re.M)
        assert re.search(r'^segment_total_capacity_bytes\{segment="node-a:1234"\} 67108864$',
                         body, re.M)
        assert re.search(r'^segment_allocated_bytes\{segment="node-a:1234"\} [1-9]\d*$', body,
                         re.M)
        assert re.search(r'^master_value_size_bytes_bucket\{le="4096"\} 1$', body, re.M)
        summary = m.get("/metrics/summary")[2]
        assert "Keys: 1 (soft-pinned: 0)" in summary
        assert re.search(r"Mem Storage: \d+\.\d\d KB / 64\.00 MB \(0\.0%\)", summary), summary

        st, _, body = m.http("POST", "/api/v1/remove_all?force=true")
        assert st == 200 and json.loads(body) == {"success": True, "removed_count": 1}
        assert m.get("/get_all_keys")[2] == ""
        assert m.http("GET", "/api/v1/remove_all")[0] == 400
    finally:
        m.stop()


def test_admin_port_needs_the_secret_to_change_state(tmp_path):
    """With a cluster secret (MC_AUTH_SECRET_FILE), remove_all without the
    bearer token is refused (401, nothing removed) and /metrics stays open;
    a wrong secret file stops the daemon from starting (docs/security.md)."""
    secret = tmp_path / "secret"
    secret.write_text("admin-secret-42\n")
    secret.chmod(0o600)
    m = Master(BASE_ARGS, env={"MC_AUTH_SECRET_FILE": str(secret)})
    try:
        st, _, body = m.http("POST", "/api/v1/remove_all?force=true")
        assert st == 401 and body == "authentication required"
        st, _, _ = m.http("POST", "/api/v1/remove_all?force=true",
                          {"Authorization": "Bearer admin-secret-4"})
        assert st == 401
        assert m.get("/metrics")[0] == 200
        st, _, body = m.http("POST", "/api/v1/remove_all?force=true",
                             {"Authorization": "Bearer admin-secret-42"})
        assert st == 200 and json.loads(body)["success"] is True
        m.wait_line(lambda l: "refused POST /api/v1/remove_all: no bearer token" in l,
                    START_TIMEOUT)
    finally:
        m.stop()
    p = subprocess.run([str(master_path()), *BASE_ARGS], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=30,
                       env={**os.environ, "MC_AUTH_SECRET_FILE": str(tmp_path / "nope")})
    assert p.returncode != 0 and "auth secret file" in p.stderr


def test_unmount_sweep_over_the_wire():
    """An unmount answers at once; objects left without a replica are absent
    from that moment (an in-flight put's PutEnd fails), and the daemon's
    sweep erases them between other requests until the key count is exact."""
    m = Master(BASE_ARGS)
    try:
        with m.conn() as c:
            c.mount((7, 1), "a:1", 0x10000000, 64 << 20, endpoint="a:1")
            c.mount((7, 2), "b:1", 0x20000000, 64 << 20, endpoint="b:1")
            on_a = [f"a/{i}" for i in range(20000)]
            for i in range(0, len(on_a), 1000):
                part = on_a[i:i + 1000]
                assert all(st == 0 for st, _ in c.batch_put_start(part, 64,
                                                                   preferred_segment="a:1"))
                assert c.batch_put_end(part) == [0] * len(part)
            on_b = [f"b/{i}" for i in range(10)]
            assert all(st == 0 for st, _ in c.batch_put_start(on_b, 64, preferred_segment="b:1"))
            assert c.batch_put_end(on_b) == [0] * 10
            c.put_start("in-flight", 64, preferred_segment="a:1")
            c.unmount((7, 1))
            assert c.exist("a/0") is False and c.exist("a/19999") is False
            with pytest.raises(mp.StatusError) as e:
                c.put_end("in-flight")
            assert e.value.status == mp.ERR_OBJECT_NOT_FOUND
            assert c.batch_exist(on_b) == [True] * 10
            deadline = time.monotonic() + 10
            while True:  # the sweep has no event to wait on: poll its result
                body = m.get("/metrics")[2]
                if re.search(r"^master_key_count 10$", body, re.M):
                    break
                assert time.monotonic() < deadline, re.findall(r"^master_key_count .*$", body,
                                                               re.M)
                time.sleep(0.01)
            assert sorted(m.get("/get_all_keys")[2].split()) == sorted(on_b)
    finally:
        m.stop()


@slow
def test_periodic_metrics_log_line():
    m = Master(BASE_ARGS, env={"MC_LOG_LEVEL": "info"})
    try:
        # the first report comes 10 s after start
        line = m.wait_line(lambda l: "Master Admin Metrics: role=leader" in l, 15)
        assert "master={Mem Storage:" in line
    finally:
        m.stop()


# ---- embedded HTTP metadata server ------------------------------------------------

def test_embedded_metadata_server(master):
    assert master.metadata > 0
    c = http.client.HTTPConnection("127.0.0.1", master.metadata, timeout=10)
    try:
        c.request("GET", "/metadata?key=mooncake/ram/x")
        r = c.getresponse()
        assert (r.status, r.read()) == (404, b"metadata not found")
        c.request("PUT", "/metadata?key=mooncake/ram/x", body=b'{"a":1}')
        r = c.getresponse()
        assert (r.status, r.read()) == (200, b"metadata updated")
        c.request("GET", "/metadata?key=mooncake/ram/x")
        r = c.getresponse()
        assert (r.status, r.read()) == (200, b'{"a":1}')
        c.request("GET", "/health")
        r = c.getresponse()
        assert (r.status, r.read()) == (200, b"OK")
    finally:
        c.close()


def test_metadata_server_off_by_default():
    m = Master(BASE_ARGS)
    try:
        assert m.metadata == 0
    finally:
        m.stop()


# ---- the SSD tier (master side) --------------------------------------------------

def test_local_disk_refused_without_enable_offload(master):
    with master.conn() as c:
        c.hello()
        with pytest.raises(mp.StatusError) as e:
            c.mount_local_disk("127.0.0.1:50052")
        assert e.value.status == mp.ERR_UNABLE_OFFLOAD


def test_offload_round_trip_and_admin_views():
    m = Master(BASE_ARGS + ["--enable_offload=true"])
    try:
        with m.conn() as c:
            c.hello()
            c.mount((7, 1), "127.0.0.1:17001", 1 << 32, 64 << 20)
            c.mount_local_disk("127.0.0.1:50052")
            c.report_ssd_capacity(10 << 30, 1 << 30)
            reps = c.put_start("ssd-k", 4096)
            c.put_end("ssd-k")
            off, rms, wipe = c.offload_heartbeat()
            assert [(k, n, a) for _t, k, n, a in off] == [(b"ssd-k", 4096, reps[0]["address"])]
            assert rms == [] and not wipe
            # in flight: not removable
            assert c.status_of(mp.REMOVE, mp.string("") + mp.key("ssd-k") + mp.boolean(True)) \
                == mp.ERR_OBJECT_HAS_REPLICATION_TASK
            assert c.notify_offload([("", "ssd-k", 4096, 0)]) == [0]
            r = c.call(mp.GET_REPLICA_LIST, mp.string("") + mp.key("ssd-k")).replica_list()
            assert [x["type"] for x in r["replicas"]] == [0, 2]
            assert r["replicas"][1]["client_id"] == c.client_id
            assert r["replicas"][1]["endpoint"] == "127.0.0.1:50052"
            # re-registration of a copy found on disk
            assert c.notify_offload([("", "disk-only", 77, 0)]) == [0]
        st, _, body = m.get("/batch_query_keys?keys=ssd-k,disk-only")
        assert st == 200
        data = json.loads(body)["data"]
        want = {"client_id": "%d-%d" % c.client_id, "object_size": 4096,
                "transport_endpoint": "127.0.0.1:50052"}
        assert data["ssd-k"]["local_disk_values"] == [want]
        assert len(data["ssd-k"]["values"]) == 1
        assert data["disk-only"]["values"] == []
        assert data["disk-only"]["local_disk_values"][0]["object_size"] == 77
        # /query_key lists memory replicas only
        st, _, body = m.get("/query_key?key=ssd-k")
        assert st == 200 and len(json.loads(body)["data"]) == 1
        st, _, body = m.get("/metrics/summary")
        assert "SSD Storage: 1.00 GB / 10.00 GB" in body
        st, _, body = m.get("/metrics")
        assert re.search(r"^master_total_file_capacity_bytes 10737418240$", body, re.M)
        assert re.search(r"^master_offload_completed_total 1$", body, re.M)
        assert re.search(r"^master_offload_reregistered_total 1$", body, re.M)
        assert re.search(r"^master_evict_disk_replica_requests_total 0$", body, re.M)
        assert len(re.findall(r"^# TYPE master_evict_disk_replica_requests_total ", body,
                              re.M)) == 1
    finally:
        m.stop()


def test_promotion_on_hit_over_the_wire():
    m = Master(BASE_ARGS + ["--enable_offload=true", "--promotion_on_hit=true",
                            "--promotion_admission_threshold=1"])
    try:
        with m.conn() as c:
            c.hello()
            c.mount((8, 1), "127.0.0.1:17002", 1 << 32, 64 << 20)
            c.mount_local_disk("127.0.0.1:50053")
            assert c.notify_offload([("", "hot", 8192, 0)]) == [0]  # found on disk
            get = mp.string("") + mp.key("hot")
            r = c.call(mp.GET_REPLICA_LIST, get).replica_list()
            assert [x["type"] for x in r["replicas"]] == [2]
            tasks = c.promotion_heartbeat()
            assert len(tasks) == 1
            _t, k, size, rep = tasks[0]
            assert (k, size, rep["type"], rep["status"]) == (b"hot", 8192, 0, 2)
            assert rep["segment_name"] == "127.0.0.1:17002"
            assert c.notify_promotion([("", "hot", rep["id"], 0)]) == [0]
            r = c.call(mp.GET_REPLICA_LIST, get).replica_list()
            assert [x["type"] for x in r["replicas"]] == [0, 2]
            assert r["replicas"][0]["address"] == rep["address"]
        st, _, body = m.get("/metrics")
        assert re.search(r"^master_promotion_completed_total 1$", body, re.M)
        assert re.search(r"^master_promotion_completed_bytes_total 8192$", body, re.M)
        assert re.search(r"^master_promotion_in_flight 0$", body, re.M)
    finally:
        m.stop()


def test_rpc_busy_poll_us_flag_env_and_bounds():
    """--rpc_busy_poll_us (docs/conductor.md: 300 behind a conductor): its
    default is MC_MASTER_BUSY_POLL_US when that is valid, else 50; the flag
    wins over the variable; out of range is refused by name."""
    def dump(*args, env=None):
        r = subprocess.run([str(master_path()), *args, "--dump-config"], capture_output=True,
                           text=True, timeout=20, env={**os.environ, **(env or {})})
        return r
    env0 = {k: v for k, v in os.environ.items() if k != "MC_MASTER_BUSY_POLL_US"}
    r = subprocess.run([str(master_path()), "--dump-config"], capture_output=True, text=True,
                       timeout=20, env=env0)
    assert r.returncode == 0 and "rpc_busy_poll_us: 50\n" in r.stdout, r.stderr
    r = dump("--rpc_busy_poll_us=300")
    assert r.returncode == 0 and "rpc_busy_poll_us: 300\n" in r.stdout, r.stderr
    r = dump(env={"MC_MASTER_BUSY_POLL_US": "300"})
    assert r.returncode == 0 and "rpc_busy_poll_us: 300\n" in r.stdout, r.stderr
    r = dump("--rpc_busy_poll_us=0", env={"MC_MASTER_BUSY_POLL_US": "300"})
    assert r.returncode == 0 and "rpc_busy_poll_us: 0\n" in r.stdout, r.stderr
    r = dump(env={"MC_MASTER_BUSY_POLL_US": "often"})
    assert r.returncode == 0 and "rpc_busy_poll_us: 50\n" in r.stdout, r.stderr
    assert "MC_MASTER_BUSY_POLL_US" in r.stderr, r.stderr
    r = run_master("--rpc_busy_poll_us=2000000")
    assert r.returncode == 2 and "rpc_busy_poll_us" in r.stderr, r.stderr
