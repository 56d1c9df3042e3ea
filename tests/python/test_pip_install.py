"""`pip install --no-build-isolation .` produces a working installation.

Slow (a full release build of the project through meson-python), so it runs
only as its own meson test (`meson test pip_install`, python/meson.build),
which sets MC_PIP_INSTALL_TEST=1; inside `python_engine` it is skipped.  It
installs into a throw-away virtual environment with the system's site
packages (Debian's pip, meson-python, numpy), offline (--no-index), and then
runs everything from outside the source and build trees with no PYTHONPATH:

- the console programs: mooncake_master --version,
  transfer_engine_topology_dump --compact,
  mooncake_http_metadata_server --help (and serving), transfer_engine_bench
  --help, mc_store_rest_server --help (where aiohttp is installed);
- every module of the source tree (python/mooncake/**/*.py and the
  extensions) imports from the installed location;
- `import mooncake.engine`, `mooncake._fast_copy` from there, with libmooncake.so taken from
  the wheel's bundled copy, and a loopback transfer through it;
- the installed metadata's version satisfies `mooncake-transfer-engine>=0.3.5`
  (checkpoint-engine's requirement) and equals `mooncake.__version__`.
"""

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(os.environ.get("MC_PIP_INSTALL_TEST") != "1",
                                reason="slow; run as the meson test 'pip_install'")


def clean_env(venv):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "MC_BUILD_DIR", "LD_LIBRARY_PATH", "LD_PRELOAD",
                        "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    for mod in ("pip", "mesonpy", "venv"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"python module {mod} is not installed")
    for prog in ("meson", "ninja", "patchelf"):
        if shutil.which(prog) is None:
            pytest.skip(f"{prog} is not installed")
    base = tmp_path_factory.mktemp("pipinst")
    v = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages",
                    str(v)], check=True, timeout=120)
    r = subprocess.run([str(v / "bin" / "python"), "-m", "pip", "install", "--no-index",
                        "--no-build-isolation", "--no-deps", "--no-cache-dir", str(ROOT)],
                       capture_output=True, text=True, timeout=1500, cwd=str(base),
                       env=clean_env(v))
    (base / "pip.log").write_text(r.stdout + r.stderr)
    assert r.returncode == 0, f"pip install failed:\n{(r.stdout + r.stderr)[-6000:]}"
    return v


def run(venv, argv, **kw):
    kw.setdefault("timeout", 60)
    return subprocess.run(argv, capture_output=True, text=True, cwd=str(venv.parent),
                          env=clean_env(venv), **kw)


def test_console_programs(venv):
    bindir = venv / "bin"
    for name in ("mooncake_master", "mooncake_http_metadata_server", "transfer_engine_bench",
                 "transfer_engine_topology_dump", "mooncake", "mooncake_client"):
        assert (bindir / name).is_file(), f"{name} not installed in {bindir}"
    r = run(venv, [str(bindir / "mooncake_master"), "--version"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip(), "mooncake_master --version printed nothing"
    r = run(venv, [str(bindir / "mooncake_http_metadata_server"), "--help"])
    assert r.returncode == 0 and "--port" in r.stdout, r.stderr
    r = run(venv, [str(bindir / "transfer_engine_bench"), "--help"])
    assert r.returncode == 0, r.stderr
    assert "error while loading shared libraries" not in r.stderr
    r = run(venv, [str(bindir / "transfer_engine_topology_dump"), "--compact"])
    assert r.returncode == 0 and isinstance(json.loads(r.stdout), dict), r.stderr
    r = run(venv, [str(bindir / "mooncake_client"), "--help"])
    assert r.returncode == 0 and "--global_segment_size" in r.stdout, r.stderr
    r = run(venv, [str(bindir / "mooncake"), "doctor", "--json"])
    assert r.returncode == 0 and "checks" in json.loads(r.stdout), r.stdout + r.stderr
    if importlib.util.find_spec("aiohttp") is not None:
        assert (bindir / "mc_store_rest_server").is_file()
        r = run(venv, [str(bindir / "mc_store_rest_server"), "--help"])
        assert r.returncode == 0 and "--max-wait-time" in r.stdout, r.stderr


def test_installed_metadata_server_serves(venv):
    p = subprocess.Popen([str(venv / "bin" / "mooncake_http_metadata_server"), "--host",
                          "127.0.0.1", "--port", "0"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=clean_env(venv),
                         cwd=str(venv.parent))
    try:
        line = p.stdout.readline()
        assert "listening on" in line, (line, p.stderr.read() if p.poll() is not None else "")
        port = int(line.strip().rsplit(":", 1)[1])
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/health")
        assert c.getresponse().read() == b"OK"
        c.close()
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=20) == 0


CHECK = r"""
import json, os, sys
import numpy as np
import mooncake, mooncake.engine, mooncake.mooncake_config, mooncake.http_metadata_server
import mooncake.buffer_pool, mooncake.cli, mooncake._fast_copy, mooncake.cli_bench, mooncake._pg
import mooncake.structured_object_store, mooncake.dataproto_catalog, mooncake.shared_segment
import mooncake.transfer_engine_topology_dump
import importlib.util
if importlib.util.find_spec("aiohttp"):
    import mooncake.mooncake_store_service, mooncake.vllm_v1_proxy_server
src = np.arange(10, dtype=np.uint8)
dst = np.zeros(10, np.uint8)
assert mooncake._fast_copy.concat_arrays_into([src], dst.ctypes.data, dst.nbytes) == 10
assert (dst == src).all()
from mooncake.engine import TransferEngine, TransferOpcode
te = TransferEngine()
assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == 0
buf = np.arange(1 << 20, dtype=np.uint8)
assert te.register_memory(buf.ctypes.data, buf.nbytes) == 0
me = f"127.0.0.1:{te.get_rpc_port()}"
assert te.transfer_sync_write(me, buf.ctypes.data, buf.ctypes.data + 65536, 4096) == 0
assert bytes(buf[65536:65536 + 4096]) == bytes(buf[:4096])
maps = open("/proc/self/maps").read()
lib = sorted({l.split()[-1] for l in maps.splitlines() if "libmooncake" in l})
from importlib.metadata import version as dist_version
from packaging.specifiers import SpecifierSet
dv = dist_version("mooncake-transfer-engine")
assert dv == mooncake.__version__, (dv, mooncake.__version__)
assert SpecifierSet(">=0.3.5").contains(dv), dv  # checkpoint-engine's requirement
print(json.dumps({"engine": mooncake.engine.__file__, "pkg": mooncake.__file__, "lib": lib,
                  "version": mooncake.__version__,
                  "master": mooncake.cli.find_program("mooncake_master")}))
"""


def source_modules():
    """Every module of the source tree: python/mooncake/**/*.py and the
    extensions python/mooncake/meson.build builds."""
    pkg = ROOT / "python" / "mooncake"
    mods = set()
    for p in pkg.rglob("*.py"):
        parts = p.relative_to(pkg.parent).with_suffix("").parts
        mods.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    import re
    build = (ROOT / "python" / "mooncake" / "meson.build").read_text()
    exts = set(re.findall(r"extension_module\(\s*'([A-Za-z0-9_]+)'", build))
    assert {"engine", "store", "_fast_copy"} <= exts, exts
    return sorted(mods | {f"mooncake.{e}" for e in exts})


EVERY = r"""
import importlib, json, sys
bad = {}
for m in sys.argv[1:]:
    try:
        mod = importlib.import_module(m)
    except ImportError as e:
        if "(Debian: apt-get install" in str(e):
            continue  # an optional dependency this host lacks, named
        bad[m] = repr(e)
    else:
        if not mod.__file__.startswith(sys.prefix):
            bad[m] = "imported from " + mod.__file__
print(json.dumps(bad))
"""


def test_every_module_is_installed(venv):
    """Each module of the source tree imports from the installed location
    (issue 18 part 4: every module installed by pip install)."""
    mods = source_modules()
    assert {"mooncake.store", "mooncake.mooncake_store_service",
            "mooncake.vllm_v1_proxy_server", "mooncake.reshard.weight"} <= set(mods)
    r = run(venv, [str(venv / "bin" / "python"), "-c", EVERY, *mods], timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {}


def test_import_from_installed_location(venv):
    r = run(venv, [str(venv / "bin" / "python"), "-c", CHECK])
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout.strip().splitlines()[-1])
    site = str(venv)
    assert info["engine"].startswith(site) and info["pkg"].startswith(site), info
    assert info["lib"] and all(p.startswith(site) for p in info["lib"]), info
    assert info["master"] and info["master"].startswith(site), info
    assert "@" not in info["version"]
    assert info["version"].startswith("0.3.12.post1+mc."), info
