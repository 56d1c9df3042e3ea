"""mooncake.mooncake_store_service (mc_store_rest_server) against a real master.

The service runs as its own process (``python -m
mooncake.mooncake_store_service --config FILE --port 0``), sets up a real
MooncakeDistributedStore from the MooncakeConfig file, and is driven over
HTTP: put/get/exist/remove/remove_all through the REST paths of spec
store.md 7.6, the 100 MB body limit (413), bad JSON and missing fields
(400), a missing key (404), and that it keeps serving after each error.
The values it stores are read back through a second, native store client,
so the service really writes into the cluster.
"""

import http.client
import json
import os
import signal
import subprocess
import sys
import urllib.request
import uuid

import pytest

from conftest import free_port, poll_until


pytest.importorskip("aiohttp", reason="python3-aiohttp is not installed")

MiB = 1 << 20


class Service:
    def __init__(self, master, tmp_path, tenant):
        cfg = {"local_hostname": "127.0.0.1", "metadata_server": master.meta_uri,
               "master_server_address": master.addr, "protocol": "tcp", "device_name": "",
               "global_segment_size": "64MB", "local_buffer_size": "16MB",
               "tenant_id": tenant}
        path = tmp_path / "config.json"
        path.write_text(json.dumps(cfg))
        self.log_path = tmp_path / "service.stderr"
        self._log = open(self.log_path, "wb")
        self.p = subprocess.Popen(
            [sys.executable, "-m", "mooncake.mooncake_store_service", "--config", str(path),
             "--host", "127.0.0.1", "--port", "0", "--max-wait-time", "10",
             "--log-level", "WARNING"],
            stdout=subprocess.PIPE, stderr=self._log, text=True)
        line = self.p.stdout.readline()  # the ready line, or EOF when it died
        assert "listening on" in line, (line, self.stderr())
        self.port = int(line.strip().rsplit(":", 1)[1])

    def stderr(self):
        return self.log_path.read_bytes()[-3000:].decode(errors="replace")

    def request(self, method, path, body=None, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, r.getheader("Content-Type"), r.read()
        finally:
            c.close()

    def put(self, key, value):
        body = json.dumps({"key": key, "value": value}).encode()
        return self.request("PUT", "/api/put", body, {"Content-Type": "application/json"})

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                rc = self.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(timeout=20)
                raise AssertionError("the service did not stop on SIGTERM")
        else:
            rc = self.p.returncode
        self._log.close()
        return rc


@pytest.fixture(scope="module")
def tenant():
    return f"svc-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def service(mc_master, tmp_path_factory, tenant):
    s = Service(mc_master, tmp_path_factory.mktemp("svc"), tenant)
    yield s
    rc = s.stop()
    assert rc == 0, f"exit status {rc}: {s.stderr()}"
    for marker in ("Traceback", "AddressSanitizer", "runtime error:"):
        assert marker not in s.stderr(), s.stderr()


@pytest.fixture(scope="module")
def reader(mc_master, tenant):
    """A native client of the same tenant (no segment of its own)."""
    from mooncake.store import MooncakeDistributedStore
    st = MooncakeDistributedStore()
    assert st.setup("127.0.0.1", mc_master.meta_uri, 0, 16 * MiB, "tcp", "", mc_master.addr,
                    tenant_id=tenant) == 0
    yield st
    assert st.close() == 0


def ok(status, body, want=200):
    assert status == want, (status, body)
    return json.loads(body)


def test_put_get_exist_remove(service, reader):
    key = f"k-{uuid.uuid4().hex}"
    value = "hello, mooncake \u00e9\u4e2d"
    st, ctype, body = service.put(key, value)
    assert ok(st, body) == {"status": "success"}
    # in the cluster: the native client reads the UTF-8 bytes
    assert reader.get(key) == value.encode("utf-8")
    st, ctype, body = service.request("GET", f"/api/get/{key}")
    assert st == 200 and ctype == "application/octet-stream" and body == value.encode("utf-8")
    st, _, body = service.request("GET", f"/api/exist/{key}")
    assert ok(st, body) == {"exists": True}
    # the reads took a lease (500 ms on this master): until it runs out the
    # removal is refused (500, the store's -706), then it succeeds
    st, _, body = service.request("DELETE", f"/api/remove/{key}")
    if st == 500:
        assert b"-706" in body, body
        st, _, body = poll_until(
            lambda: (r := service.request("DELETE", f"/api/remove/{key}"))[0] == 200 and r,
            10, "the read lease to run out")
    assert ok(st, body) == {"status": "success"}
    assert reader.is_exist(key) == 0
    st, _, body = service.request("GET", f"/api/exist/{key}")
    assert ok(st, body) == {"exists": False}


def test_missing_key(service):
    key = f"absent-{uuid.uuid4().hex}"
    st, _, body = service.request("GET", f"/api/get/{key}")
    assert ok(st, body, 404) == {"error": "Key not found"}
    st, _, body = service.request("DELETE", f"/api/remove/{key}")
    assert st == 500 and "error" in json.loads(body)


def test_key_with_slashes_and_large_value(service, reader):
    key = f"a/b/{uuid.uuid4().hex}"
    value = "x" * (3 * MiB)
    st, _, body = service.put(key, value)
    assert ok(st, body) == {"status": "success"}
    st, _, body = service.request("GET", f"/api/get/{key}")
    assert st == 200 and body == value.encode()
    assert reader.get_size(key) == 3 * MiB


@pytest.mark.parametrize("body", [b"{not json", b"\xff\xfe", b"[1, 2]", b'{"key": "k"}',
                                  b'{"value": "v"}', b'{"key": "", "value": "v"}',
                                  b'{"key": "k", "value": 5}', b""])
def test_bad_put_is_400_and_service_keeps_serving(service, body):
    st, _, resp = service.request("PUT", "/api/put", body, {"Content-Type": "application/json"})
    assert st == 400, (st, resp)
    assert "error" in json.loads(resp)
    key = f"after-{uuid.uuid4().hex}"
    st, _, resp = service.put(key, "still here")
    assert ok(st, resp) == {"status": "success"}


def test_body_over_100mb_is_413(service):
    c = http.client.HTTPConnection("127.0.0.1", service.port, timeout=60)
    n = 100 * 1024 * 1024 + 1
    c.putrequest("PUT", "/api/put")
    c.putheader("Content-Type", "application/json")
    c.putheader("Content-Length", str(n))
    c.endheaders()
    chunk = b" " * MiB
    sent = 0
    try:
        while sent < n:
            part = chunk if n - sent >= len(chunk) else chunk[:n - sent]
            c.send(part)
            sent += len(part)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may answer and close before the whole body is in
    r = c.getresponse()
    assert r.status == 413, (r.status, r.read())
    c.close()
    key = f"after413-{uuid.uuid4().hex}"
    st, _, resp = service.put(key, "v")
    assert ok(st, resp) == {"status": "success"}


def test_remove_all_counts(service, reader):
    keys = [f"all-{uuid.uuid4().hex}" for _ in range(3)]
    for k in keys:
        assert service.put(k, "v")[0] == 200
    st, _, body = service.request("DELETE", "/api/remove_all")
    msg = ok(st, body)["status"]
    assert msg.startswith("success removed ") and msg.endswith(" keys"), msg
    assert int(msg.split()[2]) >= 3
    assert all(reader.is_exist(k) == 0 for k in keys)


def post_json(service, path, body):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    st, _, resp = service.request("POST", path, raw, {"Content-Type": "application/json"})
    return st, json.loads(resp)


def mounted_ids(master):
    url = f"http://127.0.0.1:{master.metrics}/get_segments_detail"
    with urllib.request.urlopen(url, timeout=5) as r:
        return {s["segment_id"] for s in json.loads(r.read())["segments"]}


def test_mount_paths(service, mc_master):
    def post(path, body):
        return post_json(service, path, body)

    def mounted():
        return mounted_ids(mc_master)

    st, r = post("/api/mount", {"size": 4 * MiB + 1})
    assert st == 200 and r["status"] == "success" and r["allocated_size"] > 4 * MiB, r
    (aid,) = r["segment_ids"]
    name = f"mc-svc-test-{uuid.uuid4().hex[:8]}"
    with open(f"/dev/shm/{name}", "wb") as f:
        f.truncate(4 * MiB)
    try:
        st, r = post("/api/mount_shm", {"name": name, "size": 4 * MiB})
        assert st == 200 and r["status"] == "success", r
        (sid,) = r["segment_ids"]
        assert {aid, sid} <= mounted()
        assert post("/api/unmount_shm", {"segment_ids": sid}) == (200, {"status": "success"})
        assert post("/api/unmount", {"segment_ids": [aid], "grace_period_seconds": 0}) == \
            (200, {"status": "success"})
        assert not {aid, sid} & mounted()
        # refusals: 400 for the request, 500 for the store's
        for path, body in (("/api/mount", b"{bad"), ("/api/mount", {"size": 0}),
                           ("/api/mount_shm", {"name": "a/b", "size": MiB}),
                           ("/api/unmount", {"segment_ids": []}),
                           ("/api/unmount", {"segment_ids": [aid], "grace_period_seconds": -1}),
                           ("/api/unmount_local_disk", {"grace_period_seconds": 3601})):
            st, r = post(path, body)
            assert st == 400 and "error" in r, (path, body, st, r)
        st, r = post("/api/unmount", {"segment_ids": [aid]})  # freed already
        assert st == 500 and "-600" in r["error"], r
        st, r = post("/api/mount_shm", {"name": name + "-none", "size": MiB})
        assert st == 500 and "-600" in r["error"], r
        st, r = post("/api/unmount_local_disk", {})  # no SSD tier on this service
        assert st == 500, r
    finally:
        os.unlink(f"/dev/shm/{name}")


def test_reconfigure_makes_before_it_breaks(service, mc_master):
    def post(path, body):
        return post_json(service, path, body)

    def mounted():
        return mounted_ids(mc_master)

    names = [f"/dev/shm/mc-svc-reconf-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for n in names:
        with open(n, "wb") as f:
            f.truncate(4 * MiB)
    try:
        st, r = post("/api/reconfigure", {"mode": "decode", "path": names[0], "size": 4 * MiB})
        assert st == 200 and r["mode"] == "decode", r
        (first,) = r["segment_ids"]
        assert first in mounted()
        # a mount that fails keeps the old decode segment serving
        st, r = post("/api/reconfigure", {"mode": "decode", "path": names[0] + "-none",
                                          "size": MiB})
        assert st == 500 and "-600" in r["error"] and "stay" in r["error"], r
        assert first in mounted()
        # the second decode segment replaces the first
        st, r = post("/api/reconfigure", {"mode": "decode", "path": names[1], "size": 4 * MiB})
        assert st == 200, r
        (second,) = r["segment_ids"]
        now = mounted()
        assert second in now and first not in now
        # back to prefill: no decode segment left
        assert post("/api/reconfigure", {"mode": "prefill"}) == \
            (200, {"status": "success", "mode": "prefill", "segment_ids": []})
        assert second not in mounted()
        for body in ({"mode": "mixed"}, {"mode": "decode", "path": "rel", "size": MiB},
                     {"mode": "decode", "path": names[0], "size": 0},
                     {"mode": "decode", "path": names[0], "size": MiB, "offset": -1},
                     {"mode": "prefill", "grace_period_seconds": -1}):
            st, r = post("/api/reconfigure", body)
            assert st == 400 and "error" in r, (body, st, r)
    finally:
        for n in names:
            os.unlink(n)


def test_bad_config_exits_with_message(tmp_path):
    cfg = tmp_path / "bad.json"
    cfg.write_text('{"local_hostname": "h"}')
    r = subprocess.run([sys.executable, "-m", "mooncake.mooncake_store_service", "--config",
                        str(cfg), "--port", "0"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "bad configuration" in r.stderr, r.stderr


def test_unreachable_master_gives_up(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                               "master_server_address": f"127.0.0.1:{free_port()}",
                               "global_segment_size": "16MB", "local_buffer_size": "1MB"}))
    r = subprocess.run([sys.executable, "-m", "mooncake.mooncake_store_service", "--config",
                        str(cfg), "--port", "0", "--max-wait-time", "0"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and "setup failed" in r.stderr, r.stderr


NO_AIOHTTP = r"""
import sys
sys.modules["aiohttp"] = None   # as if python3-aiohttp were not installed
import mooncake.store, mooncake.mooncake_config   # never need it
for mod in ("mooncake.mooncake_store_service", "mooncake.vllm_v1_proxy_server"):
    try:
        __import__(mod)
    except ImportError as e:
        assert "python3-aiohttp" in str(e), e
    else:
        raise SystemExit(f"{mod} imported without aiohttp")
print("ok")
"""


def test_without_aiohttp_import_error_names_the_package():
    r = subprocess.run([sys.executable, "-c", NO_AIOHTTP], capture_output=True, text=True,
                       timeout=60, env=os.environ)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
