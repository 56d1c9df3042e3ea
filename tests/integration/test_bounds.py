"""Resource bounds on every listening socket, with real processes.

Each test starts the process under test (mooncake_master, te_node, the
HTTP metadata server), pushes one bound (descriptors, connections, slow or
partial requests, buffered bytes) and checks that the process stays within
it while a control client is still served.  CPU time is read from
/proc/PID/stat over a measuring window, memory from /proc/PID/status and
log volume from the process's stderr: a server that hits its descriptor
limit must back off (little CPU, a bounded number of log lines) and serve
again once descriptors are freed.

The measuring windows are the only waits that are not for an event: they
are what is being measured, and they are short (a second or two).
"""

import http.client
import os
import re
import resource
import signal
import socket
import struct
import time

import pytest

import mcproto as mp
from conftest import BUILD, SANITIZER, TeNode, _find_binary, metadata_server_path, te_node_path, Proc
from test_master_daemon import BASE_ARGS, Master, closed_by_peer

CLK_TCK = os.sysconf("SC_CLK_TCK")


@pytest.fixture(autouse=True, scope="module")
def many_fds():
    """The clients here hold thousands of sockets: raise our own limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 8192) if hard != resource.RLIM_INFINITY else 8192
    if want < 4500:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is too low for these tests")
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def stop_clean(proc, sig=None):
    """Stop a Proc (end of input, or sig) and fail on a bad exit or a
    sanitizer report in its stderr."""
    if sig is not None and proc.alive():
        os.kill(proc.pid, sig)
        proc.p.wait(timeout=15)
    complaint = proc.stop()
    assert not complaint, f"{complaint}: {proc.stderr_tail()}"


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def listening_tcp_ports(pid):
    """Ports of the TCP sockets pid listens on (from /proc/net/tcp{,6})."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                parts = line.split()
                if parts[3] == "0A" and parts[9] in inodes:
                    ports.add(int(parts[1].rsplit(":", 1)[1], 16))
    return ports


def hold(port, n, data=b"", source=None):
    """n connections to port (each sent data, from address source if given);
    the ones the kernel took."""
    socks = []
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5,
                                         source_address=(source, 0) if source else None)
            if data:
                s.sendall(data)
            socks.append(s)
        except OSError:
            break
    return socks


def close_all(socks):
    for s in socks:
        s.close()
    socks.clear()


def measure(pid, log_size, seconds):
    """(CPU seconds, log bytes) the process spent over a window."""
    c0, l0 = cpu_seconds(pid), log_size()
    time.sleep(seconds)
    return cpu_seconds(pid) - c0, log_size() - l0


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# ---- master RPC ----------------------------------------------------------------

def master_log_bytes(m):
    return len(m.text())


def metric(m, name, port=None):
    """One counter of the master's /metrics (labelled port=... when port)."""
    st, _, body = m.get("/metrics")
    assert st == 200, body
    series = name + (f'{{port="{port}"}}' if port else "")
    found = re.search(rf"^{re.escape(series)} (\d+)$", body, re.M)
    assert found, f"no {series} in /metrics"
    return int(found.group(1))


def lower_nofile(pid, n):
    """Lower a running process's descriptor limit below what it may use: its
    connection caps were sized from the limit it started with, so its next
    accepts fail with EMFILE while under them."""
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (n, n))


def test_master_backs_off_on_emfile_and_resumes():
    """All three listeners (RPC, admin, metadata) at the descriptor limit."""
    m = Master(BASE_ARGS + ["--enable_http_metadata_server=true",
                            "--http_metadata_server_host=127.0.0.1",
                            "--http_metadata_server_port=0"])
    socks = []
    try:
        lower_nofile(m.p.pid, 64)
        socks = hold(m.rpc, 120)
        m.wait_line(lambda l: "Too many open files" in l, 10)
        socks += hold(m.metrics, 20) + hold(m.metadata, 20)
        with m.cond:
            first = len(m.lines)
        cpu, _ = measure(m.p.pid, lambda: 0, 2.0)
        with m.cond:
            window = [l for l in m.lines[first:] if l and "Too many open files" in l]
        assert cpu < 0.5, f"master spent {cpu:.2f} CPU-s in 2 s at its descriptor limit"
        # one line per listener per MC_ACCEPT_LOG_MS (1 s)
        for name in ("rpc:", "admin http:", "http metadata server:"):
            n = sum(name in l for l in window)
            assert n <= 3, f"{n} '{name}' accept lines in 2 s:\n" + "\n".join(window)
        close_all(socks)
        with m.conn() as c:  # served again once descriptors are free
            assert c.ping()[1] == 2
        assert served_within(m.metrics, "/health", 5.0)
        assert served_within(m.metadata, "/health", 5.0)
        # and /metrics counts the pauses of each port
        for port in ("rpc", "admin", "metadata"):
            assert metric(m, "master_accept_pauses_total", port) >= 1, port
        assert metric(m, "master_connections_refused_total", "rpc") == 0
    finally:
        close_all(socks)
        m.stop()


def partial_frame(payload_len, sent):
    hdr = mp.HDR.pack(mp.MAGIC, mp.MAJOR, mp.MINOR, mp.EXIST_KEY, 0, 0, 0, 7, payload_len, 0)
    return hdr + b"\0" * sent


def test_master_cuts_a_partial_frame_after_its_deadline():
    m = Master(BASE_ARGS + ["--rpc_frame_timeout=500ms", "--rpc_frame_min_rate=1mb"],
               env={"MC_LOG_LEVEL": "info"})
    try:
        assert metric(m, "master_deadline_cuts_total", "rpc") == 0
        with m.conn() as slow, m.conn() as control:
            t0 = time.monotonic()
            # 64 KiB announced: deadline 0.5 s + 64 KiB at 1 MiB/s = 0.56 s
            slow.send_raw(partial_frame(64 << 10, 100))
            for _ in range(3):  # trickling more bytes does not extend it
                slow.send_raw(b"\0")
                assert control.ping()[1] == 2
            closed, _ = closed_by_peer(slow.sock, timeout=5)
            took = time.monotonic() - t0
            assert closed and took < 3.0, f"closed={closed} after {took:.2f} s"
            assert control.ping()[1] == 2
        m.wait_line(lambda l: "frame not complete" in l, 5)
        assert metric(m, "master_deadline_cuts_total", "rpc") == 1
        assert metric(m, "master_rpc_buffer_cuts_total") == 0
    finally:
        m.stop()


def test_master_bounds_memory_for_incomplete_frames():
    m = Master(BASE_ARGS + ["--rpc_max_buffered_bytes=8mb", "--rpc_frame_timeout=60s"],
               env={"MC_LOG_LEVEL": "info"})
    socks = []
    try:
        rss0 = rss_bytes(m.p.pid)
        chunk = b"\0" * (3 << 20)
        cut = 0
        for _ in range(8):  # each: a 60 MiB frame, 3 MiB of it sent
            s = socket.create_connection(("127.0.0.1", m.rpc), timeout=5)
            socks.append(s)
            try:
                s.sendall(partial_frame(60 << 20, 0) + chunk)
            except (BrokenPipeError, ConnectionResetError):
                cut += 1
        # the ones beyond the global cap are closed
        for s in socks:
            closed, _ = closed_by_peer(s, timeout=0.5)
            cut += closed
        assert cut >= 4, f"only {cut} of 8 connections cut with an 8 MiB global cap"
        # the master's own count of what the partial frames hold: never past
        # the cap, and the buffers did grow (the test reached the cap's path)
        peak = metric(m, "master_rpc_buffered_bytes_peak")
        assert 2 << 20 <= peak <= 8 << 20, f"buffered peak {peak}"
        assert metric(m, "master_rpc_buffered_bytes") <= 8 << 20
        # and in resident memory: without the cap the 8 connections would
        # hold 8 x 4 MiB; ASan's allocator keeps every freed buffer of the
        # doublings resident in its quarantine, so a sanitized build gets room
        grown = rss_bytes(m.p.pid) - rss0
        limit = (16 if SANITIZER == "none" else 80) << 20
        assert grown < limit, f"master grew by {grown >> 20} MiB ({SANITIZER})"
        with m.conn() as c:
            assert c.ping()[1] == 2
        m.wait_line(lambda l: "rpc_max_buffered_bytes" in l, 5)
        assert 4 <= metric(m, "master_rpc_buffer_cuts_total") <= 8
        assert metric(m, "master_deadline_cuts_total", "rpc") == 0
    finally:
        close_all(socks)
        m.stop()


def test_master_refuses_a_frame_above_the_connection_cap():
    m = Master(BASE_ARGS + ["--rpc_max_connection_buffer=1mb"])
    try:
        with m.conn() as c:
            c.send_raw(partial_frame(2 << 20, 10))
            closed, data = closed_by_peer(c.sock, timeout=5)
            assert closed
            hdr = mp.HDR.unpack(data[:32])
            assert hdr[6] == mp.ERR_TOO_LARGE
        assert metric(m, "master_rpc_too_large_total") == 1
    finally:
        m.stop()


# ---- engine data and RPC ports ---------------------------------------------------

def start_te_node(tmp_path, env=None):
    exe = te_node_path()
    if exe is None:
        pytest.fail(f"te_node not found under {BUILD}")
    argv = [exe, "--metadata", "P2PHANDSHAKE", "--host", "127.0.0.1", "--buffer", "1m"]
    n = TeNode(argv, "te_node", tmp_path, {"MC_SHM_DISABLE": "1", **(env or {})})
    n.wait_ready()
    ports = listening_tcp_ports(n.pid) - {n.rpc_port}
    assert len(ports) == 1, ports
    n.data_port = ports.pop()
    return n


def served(port, timeout=5.0):
    """Whether a new connection to port is accepted and answered: garbage in
    place of a request header makes the engine close it (a connection left
    in the backlog just sits there)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(b"\xff" * 64)
        closed, _ = closed_by_peer(s, timeout=timeout)
        return closed
    finally:
        s.close()


@pytest.mark.parametrize("which", ["data", "rpc"])
def test_engine_backs_off_on_emfile_and_resumes(tmp_path, which):
    n = start_te_node(tmp_path)
    port = n.data_port if which == "data" else n.rpc_port
    socks = []
    try:
        lower_nofile(n.pid, 64)
        socks = hold(port, 120)
        wait_for(lambda: b"Too many open files" in n.log_path.read_bytes(), 10,
                 "the engine's accept failure")
        cpu, logged = measure(n.pid, lambda: n.log_path.stat().st_size, 2.0)
        assert cpu < 0.5, f"engine spent {cpu:.2f} CPU-s in 2 s at its descriptor limit"
        assert logged < 4 * 200, f"{logged} bytes of log in 2 s: {n.stderr_tail(1000)}"
        close_all(socks)
        assert served(port), "not served again once descriptors were freed"
    finally:
        close_all(socks)
        stop_clean(n)


def test_engine_data_port_caps_connections(tmp_path):
    n = start_te_node(tmp_path, env={"MC_TCP_MAX_CONNS": "100"})
    socks = []
    try:
        socks = hold(n.data_port, 300)
        # the ones above the cap are accepted and closed at once
        wait_for(lambda: b"the cap is 100" in n.log_path.read_bytes(), 10,
                 "the engine to refuse connections above its cap")
        wait_for(lambda: sum(closed_by_peer(s, 0.01)[0] for s in socks[-100:]) == 100, 10,
                 "the newest 100 connections to be closed")
        assert len(os.listdir(f"/proc/{n.pid}/fd")) < 100 + 60
        close_all(socks)
        assert served(n.data_port)
    finally:
        close_all(socks)
        stop_clean(n)


def test_engine_data_port_closes_idle_connections(tmp_path):
    n = start_te_node(tmp_path, env={"MC_TCP_IDLE_TIMEOUT_MS": "300"})
    try:
        s = socket.create_connection(("127.0.0.1", n.data_port), timeout=5)
        closed, _ = closed_by_peer(s, timeout=5)
        s.close()
        assert closed
    finally:
        stop_clean(n)


# ---- HTTP servers ----------------------------------------------------------------

def http_get(port, path, timeout=2.0, source=None):
    """(status, body) or None when the server did not answer."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                   source_address=(source, 0) if source else None)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        c.close()


def served_within(port, path, timeout, source=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = http_get(port, path, source=source)
        if got and got[0] == 200:
            return True
    return False


def start_meta_server(tmp_path, env=None, extra=()):
    exe = metadata_server_path()
    if exe is None:
        pytest.skip(f"mooncake_http_metadata_server not built under {BUILD}")
    p = Proc([exe, "--host", "127.0.0.1", "--port", "0", *extra], "meta_server", tmp_path,
             {"MC_LOG_LEVEL": "info", **(env or {})})
    line = p.wait_for_line(lambda l: "listening on" in l, 20)
    p.port = int(line.rsplit(":", 1)[1])
    return p


def slow_loris(port, n, byte_every=0.2, limit=10.0):
    """n clients each sending a request one byte per byte_every seconds;
    returns how long each lasted before the server cut it (None: never)."""
    import select
    socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(n)]
    for s in socks:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    t0 = time.monotonic()
    lasted = [None] * n
    try:
        while time.monotonic() - t0 < limit and None in lasted:
            live = [s for i, s in enumerate(socks) if lasted[i] is None]
            r, _, _ = select.select(live, [], [], byte_every)
            for i, s in enumerate(socks):
                if lasted[i] is not None:
                    continue
                try:
                    if s in r and not s.recv(4096):
                        lasted[i] = time.monotonic() - t0
                        continue
                    s.send(b"a")
                except OSError:
                    lasted[i] = time.monotonic() - t0
    finally:
        for s in socks:
            s.close()
    return lasted


def test_http_metadata_server_secret_flag(tmp_path):
    """--auth_secret_file: PUT and DELETE without the bearer token are
    refused (401, the key untouched), GET and /health stay open."""
    secret = tmp_path / "secret"
    secret.write_text("flag-secret\n")
    secret.chmod(0o600)
    p = start_meta_server(tmp_path, extra=("--auth_secret_file", str(secret)))

    def req(method, body=None, token=None):
        c = http.client.HTTPConnection("127.0.0.1", p.port, timeout=10)
        try:
            hdrs = {"Authorization": f"Bearer {token}"} if token else {}
            c.request(method, "/metadata?key=k", body=body, headers=hdrs)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()
    try:
        assert req("PUT", b"v1", "flag-secret")[0] == 200
        assert req("PUT", b"v2")[0] == 401
        assert req("PUT", b"v2", "flag-secre")[0] == 401
        assert req("DELETE")[0] == 401
        assert req("GET") == (200, b"v1")
        assert http_get(p.port, "/health") == (200, b"OK")
        assert req("DELETE", token="flag-secret")[0] == 200
    finally:
        stop_clean(p, signal.SIGTERM)


def test_http_metadata_server_cuts_slow_clients(tmp_path):
    import threading
    p = start_meta_server(tmp_path, {"MC_HTTP_METADATA_REQUEST_TIMEOUT_MS": "1000"})
    try:
        result = {}
        t = threading.Thread(target=lambda: result.update(lasted=slow_loris(p.port, 4)))
        t.start()
        served = 0
        while t.is_alive():  # the control client is served meanwhile
            assert http_get(p.port, "/health") == (200, b"OK")
            served += 1
        t.join()
        assert served > 5
        lasted = result["lasted"]
        assert all(x is not None and x < 4.0 for x in lasted), lasted
    finally:
        stop_clean(p, signal.SIGTERM)


def test_http_metadata_server_keeps_room_for_new_clients(tmp_path):
    p = start_meta_server(tmp_path)
    socks = []
    try:
        socks = hold(p.port, 2000)
        assert len(socks) >= 1500
        assert served_within(p.port, "/health", 5.0), "a new client was not served"
        assert b"for room" in p.log_path.read_bytes()
    finally:
        close_all(socks)
        stop_clean(p, signal.SIGTERM)


def refused_at_once(socks, wait=2.0):
    """How many of socks the server closed (refused at accept), waiting up to
    wait seconds for each."""
    return sum(closed_by_peer(s, wait)[0] for s in socks)


def test_http_metadata_server_caps_connections_per_address(tmp_path):
    p = start_meta_server(tmp_path, {"MC_HTTP_METADATA_MAX_CONNS_PER_IP": "20"})
    socks = []
    try:
        socks = hold(p.port, 50)
        assert len(socks) == 50
        # the first 20 are kept (idle, waiting for their request), the rest closed at once
        assert refused_at_once(socks[20:]) == 30
        # (the acceptor has seen all 50 by now: no need to wait for these)
        assert refused_at_once(socks[:20], wait=0.01) == 0
        assert http_get(p.port, "/health", timeout=1.0) is None  # 127.0.0.1 is at its cap
        # another address is served meanwhile, and is not cut for room
        assert http_get(p.port, "/health", source="127.0.0.2") == (200, b"OK")
        assert b"per-address cap is 20" in p.log_path.read_bytes()
        assert b"for room" not in p.log_path.read_bytes()
        close_all(socks)
        assert served_within(p.port, "/health", 5.0), "not served once its connections closed"
    finally:
        close_all(socks)
        stop_clean(p, signal.SIGTERM)


def test_master_http_ports_cap_connections_per_address():
    m = Master(BASE_ARGS + ["--metrics_max_connections_per_ip=8",
                            "--enable_http_metadata_server=true",
                            "--http_metadata_server_host=127.0.0.1",
                            "--http_metadata_server_port=0",
                            "--http_metadata_server_max_connections_per_ip=4"])
    socks = []
    try:
        socks = hold(m.metrics, 20, source="127.0.0.3")
        assert refused_at_once(socks[8:]) == 12
        meta = hold(m.metadata, 10, source="127.0.0.3")
        socks += meta
        assert refused_at_once(meta[4:]) == 6
        # the scrape comes from 127.0.0.1: served
        assert metric(m, "master_connections_refused_per_ip_total", "admin") == 12
        assert metric(m, "master_connections_refused_per_ip_total", "metadata") == 6
        assert metric(m, "master_connections_refused_total", "admin") == 0
        assert served_within(m.metadata, "/health", 5.0)
    finally:
        close_all(socks)
        m.stop()


def test_master_admin_and_metadata_served_while_rpc_is_flooded():
    m = Master(BASE_ARGS + ["--enable_http_metadata_server=true",
                            "--http_metadata_server_host=127.0.0.1",
                            "--http_metadata_server_port=0"], nofile=1024)
    socks = []
    try:
        socks = hold(m.rpc, 2000)
        socks += hold(m.metadata, 1000)
        socks += hold(m.metrics, 500)
        assert served_within(m.metrics, "/health", 5.0), "admin port not served"
        assert served_within(m.metadata, "/health", 5.0), "metadata port not served"
        close_all(socks)
        with m.conn() as c:
            assert c.ping()[1] == 2
        # the caps' refusals (and the HTTP ports' cuts for room) are counted
        assert metric(m, "master_connections_refused_total", "rpc") > 0
        for port in ("admin", "metadata"):
            turned_away = (metric(m, "master_connections_refused_total", port) +
                           metric(m, "master_room_cuts_total", port))
            assert turned_away > 0, port
    finally:
        close_all(socks)
        m.stop()


def test_engine_data_port_cuts_a_trickled_header(tmp_path):
    import select
    n = start_te_node(tmp_path, env={"MC_TCP_IO_TIMEOUT_MS": "500", "MC_LOG_LEVEL": "info"})
    try:
        s = socket.create_connection(("127.0.0.1", n.data_port), timeout=5)
        t0 = time.monotonic()
        cut = None
        while time.monotonic() - t0 < 8 and cut is None:
            try:
                s.send(b"\0")  # one byte of a header every 200 ms: progress, never whole
            except OSError:
                cut = time.monotonic() - t0
                break
            r, _, _ = select.select([s], [], [], 0.2)
            if r:
                try:
                    if not s.recv(64):
                        cut = time.monotonic() - t0
                except OSError:
                    cut = time.monotonic() - t0
        s.close()
        assert cut is not None and cut < 3.0, f"cut after {cut} s"
        assert b"request header not complete" in n.log_path.read_bytes()
    finally:
        stop_clean(n)
