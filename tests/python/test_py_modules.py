"""The pure-Python modules of the package: mooncake (the package itself),
mooncake.buffer_pool, mooncake.mooncake_config, mooncake.async_store,
mooncake.http_metadata_server and mooncake.cli.

The HTTP metadata server is checked against the C server
(tools/mooncake_http_metadata_server) with the same protocol table, so the
two cannot drift apart, and engines are run through the Python one.
"""

import asyncio
import http.client
import importlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import types

import pytest

from conftest import BUILD, ROOT, START_TIMEOUT, Local, KiB, MiB, digest, find_binary, pattern

import mooncake
from mooncake import mooncake_config
from mooncake.mooncake_config import (DEFAULT_GLOBAL_SEGMENT_SIZE, DEFAULT_LOCAL_BUFFER_SIZE,
                                      MooncakeConfig)

PY = sys.executable


def run_py(code, env=None, timeout=60):
    return subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


# ---- the package ----------------------------------------------------------------------


def test_package_imports_lazily():
    r = run_py("import sys, mooncake; "
               "print(sorted(m for m in sys.modules if m.startswith('mooncake')))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['mooncake']"


def test_package_version_and_reexports():
    assert mooncake.__version__ and "@" not in mooncake.__version__
    from mooncake import buffer_pool
    assert mooncake.BufferPool is buffer_pool.BufferPool
    assert mooncake.RegisteredBufferPool is buffer_pool.RegisteredBufferPool
    assert buffer_pool.RegisteredBufferPool is buffer_pool.BufferPool
    assert set(mooncake.__all__) == {"BufferPool", "RegisteredBufferPool"}
    with pytest.raises(AttributeError):
        mooncake.NoSuchThing  # noqa: B018


def test_distribution_version_satisfies_integrations():
    """pyproject.toml's version is mooncake.__version__ (meson.build's
    mc_dist_version), an upstream release >= what integrations require
    (checkpoint-engine >=0.3.5, vLLM >=0.3.12), with our C release as the
    local label."""
    import tomllib
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version
    import mooncake.engine
    with open(ROOT / "pyproject.toml", "rb") as f:
        proj = tomllib.load(f)["project"]
    assert "version" not in proj.get("dynamic", [])
    assert proj["version"] == mooncake.__version__
    v = Version(mooncake.__version__)
    assert v in SpecifierSet(">=0.3.5") and v in SpecifierSet(">=0.3.12")
    assert v.local == "mc." + mooncake.engine.__version__ == "mc." + mooncake.__mooncake_c_version__
    assert v.public == mooncake.__upstream_version__


def test_core_modules_need_no_optional_dependency():
    """import mooncake.store / engine / async_store / config pulls in none of
    the optional packages (aiohttp, fastapi, msgpack, pillow, torch)."""
    r = run_py("import sys, mooncake.store, mooncake.engine, mooncake.async_store, "
               "mooncake.buffer_pool, mooncake.mooncake_config, mooncake.cli; "
               "print(sorted(m for m in ('aiohttp', 'fastapi', 'msgpack', 'PIL', 'torch', "
               "'httpx') if m in sys.modules))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_missing_optional_dependency_names_the_debian_package(monkeypatch):
    from mooncake import _optional
    monkeypatch.setitem(sys.modules, "msgpack", None)  # import fails
    with pytest.raises(ImportError, match=r"feature X needs msgpack \(Debian: apt-get install "
                                          r"python3-msgpack; pip: pip install msgpack\)"):
        _optional.require("msgpack", "feature X")
    assert _optional.optional("msgpack") is None
    assert _optional.require("json", "f") is sys.modules["json"]


def test_docs_list_every_module_with_a_status():
    """docs/python.md's module table has a row (with a status) for every
    module the package installs."""
    doc = (ROOT / "docs" / "python.md").read_text()
    rows = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 3 and cells[1].startswith("`mooncake"):
            for name in cells[1].replace("`", "").split(","):
                rows[name.strip()] = cells[2]
    mods = {f"mooncake.{p.stem}" for p in (ROOT / "python" / "mooncake").glob("*.py")
            if p.stem != "__init__"} | {"mooncake", "mooncake.engine", "mooncake.store",
                                         "mooncake._fast_copy", "mooncake._pg"}
    missing = sorted(m for m in mods if m not in rows)
    assert not missing, f"docs/python.md lists no status for {missing}"
    assert all(rows[m] for m in mods)


def test_buffer_pool_is_the_store_class():
    from mooncake import buffer_pool
    try:
        from mooncake.store import BufferPool
    except (ImportError, AttributeError):
        assert buffer_pool.BufferPool is None  # upstream's fallback
    else:
        assert buffer_pool.BufferPool is BufferPool


def test_submodules_import():
    for m in ("mooncake.engine", "mooncake.mooncake_config", "mooncake.http_metadata_server",
              "mooncake.buffer_pool", "mooncake.cli", "mooncake._fast_copy", "mooncake._pg"):
        importlib.import_module(m)


def package_modules():
    """Every module of the package: the .py files of the source tree
    (subpackages included) and the extension modules the build made."""
    pkg = ROOT / "python" / "mooncake"
    mods = set()
    for p in pkg.rglob("*.py"):
        parts = p.relative_to(pkg.parent).with_suffix("").parts
        mods.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    for p in (BUILD / "python" / "mooncake").glob("*.so"):
        mods.add("mooncake." + p.name.split(".")[0])
    return sorted(mods)


def test_every_module_imports_in_a_fresh_interpreter():
    """Each module imports first thing in its own interpreter, so an import
    cycle that only bites when a module is imported before its siblings (as
    mooncake.reshard.binding's did) fails here.  A missing optional
    dependency may refuse with _optional's ImportError naming its package."""
    mods = package_modules()
    assert {"mooncake.engine", "mooncake.store", "mooncake.reshard.binding"} <= set(mods)
    procs = {m: subprocess.Popen([PY, "-c", f"import {m}"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True) for m in mods}
    bad = {}
    for m, p in procs.items():
        _, err = p.communicate(timeout=120)
        if p.returncode != 0 and "ImportError" in err and "(Debian: apt-get install" in err:
            continue
        if p.returncode != 0:
            bad[m] = err.strip().splitlines()[-1] if err.strip() else f"exit {p.returncode}"
    assert not bad, bad


def test_every_python_file_is_installed():
    """Each python/mooncake/*.py is in the meson install list, so the build
    tree and `pip install` carry it (a new module left out fails here)."""
    import re
    pkg = ROOT / "python" / "mooncake"
    listed = set(re.findall(r"'([A-Za-z0-9_]+\.py)'", (pkg / "meson.build").read_text()))
    on_disk = {f.name for f in pkg.glob("*.py") if f.name != "__init__.py"}
    assert on_disk <= listed, f"not in python/mooncake/meson.build: {sorted(on_disk - listed)}"
    built = os.path.dirname(mooncake.__file__)
    for f in on_disk:
        assert os.path.isfile(os.path.join(built, f)), f"{f} missing from {built}"


# ---- mooncake_config ------------------------------------------------------------------


CONFIG_ENV = ["MOONCAKE_CONFIG_PATH", "MOONCAKE_MASTER", "MOONCAKE_TE_META_DATA_SERVER",
              "MOONCAKE_PROTOCOL", "MOONCAKE_DEVICE", "MOONCAKE_GLOBAL_SEGMENT_SIZE",
              "MOONCAKE_LOCAL_BUFFER_SIZE", "MOONCAKE_LOCAL_HOSTNAME", "MOONCAKE_OFFLOAD_ENABLED",
              "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", "MOONCAKE_TENANT_ID",
              "MOONCAKE_ENABLE_CLIENT_HTTP_SERVER", "MOONCAKE_CLIENT_HTTP_PORT"]


@pytest.fixture
def clean_env(monkeypatch):
    for v in CONFIG_ENV:
        monkeypatch.delenv(v, raising=False)
    return monkeypatch


@pytest.mark.parametrize("text,value", [
    (65536, 65536), ("65536", 65536), ("4GB", 4 << 30), ("4 gb", 4 << 30), ("1.5g", 3 << 29),
    ("512MB", 512 << 20), ("512m", 512 << 20), ("8 KB", 8 << 10), ("8k", 8 << 10),
    ("2TB", 2 << 40), ("100b", 100), ("100 B", 100), (" 3 Mb ", 3 << 20), ("0", 0),
])
def test_size_strings(text, value):
    assert mooncake_config._parse_segment_size(text) == value


@pytest.mark.parametrize("bad", ["", "gb", "abc", "-1", "1.0.0GB", "10 XB", None, True, -5])
def test_bad_size_strings(bad):
    with pytest.raises(ValueError):
        mooncake_config._parse_segment_size(bad)


def test_from_file(tmp_path):
    p = tmp_path / "mooncake.json"
    p.write_text(json.dumps({
        "local_hostname": "node1", "metadata_server": "http://meta:8080/metadata",
        "master_server_address": "master:50051", "protocol": "RDMA", "device_name": "mlx5_0",
        "global_segment_size": "4GB", "local_buffer_size": 1 << 30,
        "enable_ssd_offload": "yes", "ssd_offload_path": "/nvme", "tenant_id": "t1",
        "enable_client_http_server": "on", "client_http_port": "9400",
        "unknown_key": 1}))
    c = MooncakeConfig.from_file(str(p))
    assert (c.local_hostname, c.metadata_server, c.master_server_address) == \
        ("node1", "http://meta:8080/metadata", "master:50051")
    assert c.protocol == "rdma" and c.device_name == "mlx5_0"
    assert c.global_segment_size == 4 << 30 and c.local_buffer_size == 1 << 30
    assert c.enable_ssd_offload is True and c.ssd_offload_path == "/nvme" and c.tenant_id == "t1"
    assert c.enable_client_http_server is True and c.client_http_port == 9400
    assert c.setup_args() == ("node1", "http://meta:8080/metadata", 4 << 30, 1 << 30, "rdma",
                              "mlx5_0", "master:50051")


def test_from_file_defaults_and_errors(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"local_hostname": "h", "metadata_server": "P2PHANDSHAKE",
                             "master_server_address": "m:50051"}))
    c = MooncakeConfig.from_file(str(p))
    assert c.global_segment_size == DEFAULT_GLOBAL_SEGMENT_SIZE == 3355443200
    assert c.local_buffer_size == DEFAULT_LOCAL_BUFFER_SIZE == 1 << 30
    assert (c.protocol, c.device_name, c.enable_ssd_offload, c.ssd_offload_path, c.tenant_id) == \
        ("tcp", "", False, "", "default")
    assert (c.enable_client_http_server, c.client_http_port) == (False, 9300)
    for missing in ("local_hostname", "metadata_server", "master_server_address"):
        d = {"local_hostname": "h", "metadata_server": "P2PHANDSHAKE",
             "master_server_address": "m:50051"}
        del d[missing]
        p.write_text(json.dumps(d))
        with pytest.raises(ValueError, match=missing):
            MooncakeConfig.from_file(str(p))
        d[missing] = ""
        p.write_text(json.dumps(d))
        with pytest.raises(ValueError, match=missing):
            MooncakeConfig.from_file(str(p))
    p.write_text(json.dumps({"local_hostname": "h", "metadata_server": "P2PHANDSHAKE",
                             "master_server_address": "m", "enable_ssd_offload": "maybe"}))
    with pytest.raises(ValueError):
        MooncakeConfig.from_file(str(p))
    p.write_text("[1, 2]")
    with pytest.raises(ValueError):
        MooncakeConfig.from_file(str(p))


def test_config_protocol_and_negative_sizes(caplog):
    base = {"local_hostname": "h", "metadata_server": "P2PHANDSHAKE",
            "master_server_address": "m:50051"}
    for bad in ("", "   ", None, 3):
        with pytest.raises(ValueError, match="protocol"):
            MooncakeConfig.from_dict(dict(base, protocol=bad))
    with caplog.at_level("WARNING", logger="mooncake.mooncake_config"):
        c = MooncakeConfig.from_dict(dict(base, protocol="Warp9"))
    assert c.protocol == "warp9"  # passed through, lower-cased
    assert any("warp9" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level("WARNING", logger="mooncake.mooncake_config"):
        MooncakeConfig.from_dict(dict(base, protocol="rdma"))
    assert not caplog.records
    for field in ("global_segment_size", "local_buffer_size"):
        for neg in (-1, -0.5, "-4GB"):
            with pytest.raises(ValueError, match=field):
                MooncakeConfig.from_dict(dict(base, **{field: neg}))


def test_load_from_env(clean_env):
    with pytest.raises(ValueError, match="MOONCAKE_MASTER"):
        MooncakeConfig.load_from_env()
    clean_env.setenv("MOONCAKE_MASTER", "10.0.0.1:50051")
    c = MooncakeConfig.load_from_env()
    assert (c.local_hostname, c.metadata_server, c.protocol, c.device_name) == \
        ("localhost", "P2PHANDSHAKE", "tcp", "")
    assert c.master_server_address == "10.0.0.1:50051"
    assert c.global_segment_size == DEFAULT_GLOBAL_SEGMENT_SIZE
    assert c.local_buffer_size == DEFAULT_LOCAL_BUFFER_SIZE
    for k, v in {"MOONCAKE_LOCAL_HOSTNAME": "10.0.0.2", "MOONCAKE_TE_META_DATA_SERVER":
                 "http://m:8080/metadata", "MOONCAKE_PROTOCOL": "Rdma", "MOONCAKE_DEVICE": "mlx5_1",
                 "MOONCAKE_GLOBAL_SEGMENT_SIZE": "2gb", "MOONCAKE_LOCAL_BUFFER_SIZE": "256 MB",
                 "MOONCAKE_OFFLOAD_ENABLED": "enable", "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH": "/ssd",
                 "MOONCAKE_TENANT_ID": "tenant", "MOONCAKE_ENABLE_CLIENT_HTTP_SERVER": "1",
                 "MOONCAKE_CLIENT_HTTP_PORT": "9555"}.items():
        clean_env.setenv(k, v)
    c = MooncakeConfig.load_from_env()
    assert c.to_dict() == {
        "local_hostname": "10.0.0.2", "metadata_server": "http://m:8080/metadata",
        "global_segment_size": 2 << 30, "local_buffer_size": 256 << 20, "protocol": "rdma",
        "device_name": "mlx5_1", "master_server_address": "10.0.0.1:50051",
        "enable_ssd_offload": True, "ssd_offload_path": "/ssd", "tenant_id": "tenant",
        "enable_client_http_server": True, "client_http_port": 9555}
    clean_env.setenv("MOONCAKE_OFFLOAD_ENABLED", "disable")
    assert MooncakeConfig.load_from_env().enable_ssd_offload is False


def test_config_path_wins_over_env(clean_env, tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"local_hostname": "from-file", "metadata_server": "P2PHANDSHAKE",
                             "master_server_address": "file:1"}))
    clean_env.setenv("MOONCAKE_MASTER", "env:2")
    clean_env.setenv("MOONCAKE_CONFIG_PATH", str(p))
    c = MooncakeConfig.load_from_env()
    assert (c.local_hostname, c.master_server_address) == ("from-file", "file:1")
    clean_env.setenv("MOONCAKE_CONFIG_PATH", str(tmp_path / "missing.json"))
    with pytest.raises(OSError):
        MooncakeConfig.load_from_env()


def test_load_with_overrides(clean_env, tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"local_hostname": "h", "metadata_server": "P2PHANDSHAKE",
                             "master_server_address": "m:1"}))
    c = MooncakeConfig.load(str(p), ["protocol=RDMA", "local_buffer_size=64MB",
                                     "master_server_address=m:2", "tenant_id=x=y"])
    assert (c.protocol, c.local_buffer_size, c.master_server_address, c.tenant_id) == \
        ("rdma", 64 << 20, "m:2", "x=y")
    with pytest.raises(ValueError):
        MooncakeConfig.load(str(p), ["no_such_field=1"])
    with pytest.raises(ValueError):
        MooncakeConfig.load(str(p), ["protocol"])
    clean_env.setenv("MOONCAKE_MASTER", "envm:3")
    assert MooncakeConfig.load(None, ["local_hostname=o"]).local_hostname == "o"


# ---- async_store ----------------------------------------------------------------------


class FakeStore:
    """Stands in for the native class: blocking methods, a plain attribute."""

    calls = None

    def __init__(self):
        self.calls = []
        self.value = 7

    def put(self, key, data, config=None):
        self.calls.append((threading.get_ident(), "put", key, data, config))
        time.sleep(0.05)
        return 0

    def get(self, key):
        self.calls.append((threading.get_ident(), "get", key))
        return b"v-" + key.encode()


@pytest.fixture
def async_store_with_fake(monkeypatch):
    fake = types.ModuleType("mooncake.store")
    fake.MooncakeDistributedStore = FakeStore
    monkeypatch.setitem(sys.modules, "mooncake.store", fake)
    monkeypatch.delitem(sys.modules, "mooncake.async_store", raising=False)
    mod = importlib.import_module("mooncake.async_store")
    yield mod
    sys.modules.pop("mooncake.async_store", None)


def test_async_store_wrappers(async_store_with_fake):
    cls = async_store_with_fake.MooncakeDistributedStoreAsync
    assert issubclass(cls, FakeStore)
    s = cls()
    assert s.value == 7 and s.get("a") == b"v-a"  # normal lookup untouched

    async def go():
        main = threading.get_ident()
        t0 = time.monotonic()
        rcs = await asyncio.gather(*(s.async_put(f"k{i}", b"x", config=i) for i in range(8)))
        took = time.monotonic() - t0
        got = await s.async_get("b")
        return main, rcs, took, got

    main, rcs, took, got = asyncio.run(go())
    assert rcs == [0] * 8 and got == b"v-b"
    assert took < 8 * 0.05, "the calls did not overlap in the executor"
    puts = [c for c in s.calls if c[1] == "put"]
    assert sorted(c[4] for c in puts) == list(range(8))  # keywords pass through
    assert all(c[0] != main for c in s.calls[1:]), "ran on the event loop's thread"
    assert asyncio.iscoroutinefunction(s.async_put)
    assert s.async_put is s.async_put  # cached on the instance
    assert s.async_put.__name__ == "put"
    for bad in ("async_nothing", "async_value", "async_", "nothing"):
        with pytest.raises(AttributeError):
            getattr(s, bad)
    assert not hasattr(s, "async_nothing")


def test_async_store_real_class():
    try:
        from mooncake.store import MooncakeDistributedStore  # noqa: F401
    except ImportError as e:
        pytest.skip(f"mooncake.store not available: {e}")
    from mooncake.async_store import MooncakeDistributedStoreAsync
    s = MooncakeDistributedStoreAsync()
    assert isinstance(s, MooncakeDistributedStore)
    assert asyncio.iscoroutinefunction(s.async_is_exist)
    with pytest.raises(AttributeError):
        s.async_no_such_method  # noqa: B018


# ---- http_metadata_server ------------------------------------------------------------


class ServerProc:
    def __init__(self, argv, logdir, label):
        self.log = open(logdir / f"{label}.stderr", "wb")
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"})
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in self.p.stdout], daemon=True).start()
        try:
            line = lines.get(timeout=START_TIMEOUT)
        except queue.Empty:
            self.p.kill()
            raise AssertionError(f"{label} printed nothing") from None
        assert "listening on" in line, line
        self.port = int(line.strip().rsplit(":", 1)[1])
        self.url = f"http://127.0.0.1:{self.port}/metadata"

    def request(self, method, path, body=None, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, r.read(), r.getheader("Content-Type")
        finally:
            c.close()

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        rc = self.p.wait(timeout=20)
        self.log.close()
        return rc


def server_argv(impl):
    if impl == "python":
        return [PY, "-m", "mooncake.http_metadata_server"]
    exe = find_binary("mooncake_http_metadata_server", ["tools/mooncake_http_metadata_server"])
    if exe is None:
        pytest.skip(f"the C server is not built under {BUILD}")
    return [str(exe)]


@pytest.fixture(params=["python", "c"])
def meta_proc(request, tmp_path):
    s = ServerProc(server_argv(request.param) + ["--host", "127.0.0.1", "--port", "0"], tmp_path,
                   request.param)
    yield s
    assert s.stop() == 0


def test_metadata_protocol(meta_proc):
    """The table of spec store.md 7.5, identical for both servers."""
    s = meta_proc
    doc = json.dumps({"segment_name": "a", "buffers": []}).encode()
    assert s.request("GET", "/metadata?key=k1")[:2] == (404, b"metadata not found")
    assert s.request("PUT", "/metadata?key=k1", doc)[:2] == (200, b"metadata updated")
    st, body, ctype = s.request("GET", "/metadata?key=k1")
    assert (st, body) == (200, doc) and ctype.startswith("application/json")
    assert s.request("PUT", "/metadata?key=k1", b"{}")[:2] == (200, b"metadata updated")
    assert s.request("GET", "/metadata?key=k1")[1] == b"{}"
    # rpc_meta keys: identical bytes are fine, different ones are refused
    assert s.request("PUT", "/metadata?key=mooncake/rpc_meta/n", b"A")[:2] == (200, b"metadata updated")
    assert s.request("PUT", "/metadata?key=mooncake/rpc_meta/n", b"A")[:2] == \
        (200, b"metadata unchanged")
    assert s.request("PUT", "/metadata?key=mooncake/rpc_meta/n", b"B")[:2] == \
        (400, b"Duplicate rpc_meta key not allowed")
    assert s.request("DELETE", "/metadata?key=mooncake/rpc_meta/n")[:2] == (200, b"metadata deleted")
    assert s.request("PUT", "/metadata?key=mooncake/rpc_meta/n", b"B")[:2] == (200, b"metadata updated")
    # encoded keys, empty bodies, binary bodies
    assert s.request("PUT", "/metadata?key=a%2Fb%20c", b"")[0] == 200
    assert s.request("GET", "/metadata?key=a/b%20c")[:2] == (200, b"")
    blob = bytes(range(256)) * 1024
    assert s.request("PUT", "/metadata?key=blob", blob)[0] == 200
    assert s.request("GET", "/metadata?key=blob")[1] == blob
    # deletes
    assert s.request("DELETE", "/metadata?key=k1")[:2] == (200, b"metadata deleted")
    assert s.request("DELETE", "/metadata?key=k1")[:2] == (404, b"metadata not found")
    assert s.request("GET", "/metadata?key=k1")[0] == 404
    # missing or empty key
    for m in ("GET", "PUT", "DELETE"):
        for q in ("", "?key=", "?other=1"):
            assert s.request(m, "/metadata" + q, b"x" if m == "PUT" else None)[:2] == \
                (400, b"Missing key parameter"), (m, q)
    assert s.request("GET", "/health")[:2] == (200, b"OK")
    assert s.request("GET", "/nowhere")[0] == 404
    assert s.request("POST", "/metadata?key=k", b"x")[0] == 405
    assert s.request("DELETE", "/health")[0] == 405


def test_metadata_concurrent_clients(meta_proc):
    s = meta_proc
    errors = []

    def work(t):
        try:
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
            for i in range(50):  # one keep-alive connection per thread
                c.request("PUT", f"/metadata?key=t{t}-{i}", body=f"{t}:{i}".encode())
                r = c.getresponse()
                assert (r.status, r.read()) == (200, b"metadata updated")
                c.request("GET", f"/metadata?key=t{t}-{i}")
                r = c.getresponse()
                assert (r.status, r.read()) == (200, f"{t}:{i}".encode())
            c.close()
        except Exception as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[0]


def test_metadata_server_cli(tmp_path):
    r = subprocess.run([PY, "-m", "mooncake.http_metadata_server", "--help"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "--port" in r.stdout and "--host" in r.stdout
    r = subprocess.run([PY, "-m", "mooncake.http_metadata_server", "--port", "70000"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    # a port that is taken: exit 1
    s = ServerProc([PY, "-m", "mooncake.http_metadata_server", "--host", "127.0.0.1", "--port",
                    "0", "--log-level", "debug"], tmp_path, "first")
    try:
        r = subprocess.run([PY, "-m", "mooncake.http_metadata_server", "--host", "127.0.0.1",
                            "--port", str(s.port)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 1, r
    finally:
        assert s.stop() == 0


def test_metadata_server_in_process():
    from mooncake.http_metadata_server import KVBootstrapServer, MetadataServer
    with MetadataServer("127.0.0.1", 0) as s:
        assert s.is_alive() and s.url == f"http://127.0.0.1:{s.port}/metadata"
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
        c.request("PUT", "/metadata?key=x", body=b"1")
        assert c.getresponse().read() == b"metadata updated"
        assert s.store == {"x": b"1"}
    assert not s.is_alive()
    k = KVBootstrapServer(0, "127.0.0.1")
    k.run()
    assert k.port and k.is_alive()
    k.close()


def test_engines_through_python_metadata_server(tmp_path, procs, monkeypatch):
    """Two engines with named segments find each other through the Python server."""
    s = ServerProc([PY, "-m", "mooncake.http_metadata_server", "--host", "127.0.0.1", "--port", "0"],
                   tmp_path, "pymeta")
    try:
        monkeypatch.setenv("MC_TCP_BIND_ADDRESS", "127.0.0.1")
        tag = os.getpid()
        p = procs.peer(metadata=s.url, name=f"pym-peer-{tag}", size=4 * MiB,
                       env={"MC_TCP_BIND_ADDRESS": "127.0.0.1"})
        loc = Local(size=4 * MiB, metadata=s.url, name=f"pym-local-{tag}", protocol="rdma")
        assert loc.te.get_first_buffer_address(p.name) == p.addr
        loc.buf[:MiB] = pattern(21, MiB)
        assert loc.te.transfer_sync_write(p.name, loc.addr, p.addr, MiB) == 0
        assert p.hash(0, MiB) == digest(loc.buf[:MiB])
        assert p.write(loc.name, 0, loc.addr + 2 * MiB, 64 * KiB) == 0
        assert digest(loc.buf[2 * MiB:2 * MiB + 64 * KiB]) == digest(loc.buf[:64 * KiB])
        loc.close()
    finally:
        assert s.stop() == 0


# ---- cli -------------------------------------------------------------------------------


def test_cli_finds_build_programs(monkeypatch):
    from mooncake import cli
    monkeypatch.setenv("MC_BUILD_DIR", str(BUILD))
    if not (BUILD / "tools" / "mooncake_master").is_file():
        pytest.skip("mooncake_master not built")
    assert cli.find_program("mooncake_master") == str(BUILD / "tools" / "mooncake_master")
    r = subprocess.run([PY, "-m", "mooncake.cli", "mooncake_master", "--version"],
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "MC_BUILD_DIR": str(BUILD)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    monkeypatch.delenv("MC_BUILD_DIR")
    r = subprocess.run([PY, "-m", "mooncake.cli", "nope"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2


@pytest.mark.parametrize("impl", ["python", "c"])
def test_metadata_server_secret(impl, tmp_path):
    """Both servers with --auth_secret_file: PUT and DELETE need the bearer
    token (401 without or with a wrong one, nothing stored), GET stays open;
    a secret file its group or others may read stops the server."""
    secret = tmp_path / "secret"
    secret.write_text("meta-s3cret\n")
    secret.chmod(0o644)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MC_AUTH_")}
    r = subprocess.run(server_argv(impl) + ["--host", "127.0.0.1", "--port", "0",
                                            "--auth_secret_file", str(secret)],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 1 and f"chmod 600 {secret}" in r.stderr, r.stderr
    secret.chmod(0o600)
    s = ServerProc(server_argv(impl) + ["--host", "127.0.0.1", "--port", "0",
                                        "--auth_secret_file", str(secret)], tmp_path, impl)
    try:
        def call(method, token=None, body=None):
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
            hdrs = {"Authorization": f"Bearer {token}"} if token else {}
            c.request(method, "/metadata?key=k", body=body, headers=hdrs)
            r = c.getresponse()
            out = (r.status, r.read())
            c.close()
            return out

        assert call("PUT", body=b"x") == (401, b"authentication required")
        assert call("PUT", "wrong", b"x")[0] == 401
        assert call("GET")[0] == 404  # nothing was stored
        assert call("PUT", "meta-s3cret", b"x") == (200, b"metadata updated")
        assert call("GET") == (200, b"x")
        assert call("DELETE")[0] == 401
        assert call("DELETE", "meta-s3cret") == (200, b"metadata deleted")
    finally:
        assert s.stop() == 0
