"""The store client's HTTP server (setup's enable_client_http_server, spec store.md 7.4).

A real client against a real mooncake_master (the mc_master fixture): /health,
/metrics (upstream's client series and the global segment's memory),
/metrics/summary, what unknown paths and methods get, the bind address, a
port already taken, and MC_STORE_CLIENT_METRIC=0.
"""

import http.client
import json
import os
import re
import socket
import uuid

import numpy as np
import pytest

from conftest import free_port
from mooncake.store import MooncakeDistributedStore

MiB = 1 << 20
INVALID_PARAMS = -600


def fetch(port, path, method="GET"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request(method, path)
        r = c.getresponse()
        return r.status, r.getheader("Content-Type"), r.read().decode()
    finally:
        c.close()


def series(text, name, **labels):
    """The value of the one sample of name whose labels include labels."""
    found = []
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\} (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        if all(have.get(k) == v for k, v in labels.items()):
            found.append(float(m.group(3)))
    assert len(found) == 1, (name, labels, found)
    return found[0]


def new_store(master, port, seg=32 * MiB, **kw):
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", master.meta_uri, seg, 16 * MiB, "tcp", "", master.addr,
                 enable_client_http_server=True, client_http_port=port, **kw)
    assert rc == 0, rc
    return s


@pytest.fixture
def served(mc_master):
    port = free_port()
    s = new_store(mc_master, port)
    yield s, port
    assert s.close() == 0


def test_health_and_routes(served):
    s, port = served
    code, ctype, body = fetch(port, "/health")
    assert code == 200 and ctype.startswith("application/json")
    assert json.loads(body) == {"status": "healthy", "code": 0}
    assert fetch(port, "/nope")[0] == 404
    assert fetch(port, "/health", "POST")[0] == 405
    code, ctype, _ = fetch(port, "/metrics/summary")
    assert code == 200 and ctype.startswith("text/plain")


def test_metrics_count_calls_and_bytes(served):
    s, port = served
    key = f"http-{uuid.uuid4().hex[:8]}"
    before = fetch(port, "/metrics")[2]
    w0 = series(before, "mooncake_transfer_write_bytes", cluster_id="mooncake_cluster")
    r0 = series(before, "mooncake_transfer_read_bytes", cluster_id="mooncake_cluster")
    puts0 = series(before, "mooncake_transfer_write_operation_count", op_name="put")

    assert s.put(key + "/a", b"x" * 5000) == 0
    buf = np.zeros(MiB, np.uint8)
    assert s.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    buf[:] = 7
    assert s.put_from(key + "/b", buf.ctypes.data, 300000) == 0
    assert s.get(key + "/a") == b"x" * 5000
    assert s.get_into(key + "/b", buf.ctypes.data, buf.nbytes) == 300000
    assert s.get(key + "/missing") == b""          # a miss: counted, not as bytes
    assert s.unregister_buffer(buf.ctypes.data) == 0

    code, ctype, text = fetch(port, "/metrics")
    assert code == 200 and ctype == "text/plain; version=0.0.4"
    assert series(text, "mooncake_transfer_write_bytes") - w0 == 5000 + 300000
    assert series(text, "mooncake_transfer_read_bytes") - r0 == 5000 + 300000
    assert series(text, "mooncake_transfer_write_operation_count", op_name="put") - puts0 == 1
    assert series(text, "mooncake_transfer_write_operation_bytes", op_name="put_from") >= 300000
    assert series(text, "mooncake_transfer_read_operation_count", op_name="get_into") >= 1
    assert series(text, "mooncake_transfer_read_operation_errors", op_name="get") >= 1
    # every histogram is cumulative and ends at its count
    n = series(text, "mooncake_transfer_put_latency_count")
    assert n >= 2
    assert series(text, "mooncake_transfer_put_latency_bucket", le="+Inf") == n
    # both puts through put credits (MC_STORE_PUT_CREDIT's default): each
    # size first asks for a block, then completes with one PutCredit; no
    # PutStart or PutEnd (a series appears once its message was sent)
    assert series(text, "mooncake_client_rpc_count", rpc_name="PUT_CREDIT") >= 4
    assert series(text, "mooncake_client_rpc_latency_count", rpc_name="PUT_CREDIT") >= 4
    assert 'rpc_name="PUT_START"' not in text and 'rpc_name="PUT_END"' not in text
    # the global segment: mapped, populated at mount (MC_STORE_PREFAULT's default)
    assert series(text, "mooncake_client_segment_bytes") == 32 * MiB
    assert series(text, "mooncake_client_segment_populated_bytes") == 32 * MiB
    assert series(text, "mooncake_client_segment_info", prefault="mount") == 1

    summary = fetch(port, "/metrics/summary")[2]
    assert "Put: " in summary and "put_from: " in summary
    assert "Segment: 33554432 bytes, 33554432 pre-faulted (mount, done)" in summary


def test_binds_the_local_host_only(mc_master):
    port = free_port()
    s = new_store(mc_master, port)
    try:
        with open("/proc/net/tcp") as f:
            rows = [ln.split() for ln in f.read().splitlines()[1:]]
        listening = [r[1] for r in rows if r[3] == "0A" and int(r[1].split(":")[1], 16) == port]
        assert listening == ["0100007F:%04X" % port], listening
    finally:
        assert s.close() == 0
    with pytest.raises(OSError):
        fetch(port, "/health")  # closed with the client


def test_port_taken_fails_setup(mc_master):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", mc_master.meta_uri, 16 * MiB, 16 * MiB, "tcp", "",
                       mc_master.addr, enable_client_http_server=True,
                       client_http_port=port) < 0
        assert s.health_check() == 1
    assert s.setup("127.0.0.1", mc_master.meta_uri, 16 * MiB, 16 * MiB, "tcp", "",
                   mc_master.addr, client_http_port=70000) == INVALID_PARAMS
    # the dict form takes the same two keys
    port = free_port()
    assert s.setup({"local_hostname": "127.0.0.1", "metadata_server": mc_master.meta_uri,
                    "master_server_addr": mc_master.addr, "global_segment_size": "16MB",
                    "enable_client_http_server": "true", "client_http_port": str(port)}) == 0
    try:
        assert fetch(port, "/health")[0] == 200
    finally:
        assert s.close() == 0


def test_metrics_switched_off(mc_master, monkeypatch):
    monkeypatch.setenv("MC_STORE_CLIENT_METRIC", "0")
    monkeypatch.setenv("MC_STORE_CLUSTER_ID", "c7")
    port = free_port()
    s = new_store(mc_master, port)
    try:
        assert fetch(port, "/metrics") == (503, "text/plain; charset=utf-8",
                                           "metrics not available\n")
        assert fetch(port, "/metrics/summary")[0] == 503
        assert fetch(port, "/health")[0] == 200
    finally:
        assert s.close() == 0
    monkeypatch.setenv("MC_STORE_CLIENT_METRIC", "1")
    port = free_port()
    s = new_store(mc_master, port)
    try:
        text = fetch(port, "/metrics")[2]
        assert series(text, "mooncake_transfer_write_bytes", cluster_id="c7") == 0
    finally:
        assert s.close() == 0
