"""Fixtures for the mooncake.engine tests.

The test process drives one engine in-process (``Local``) and talks to peer
engines in other processes (``Peer``: tests/python/peer.py, driven over
stdin/stdout with JSON lines).  Every process started here is killed at
teardown.  Nothing sleeps to synchronise: waits are for a line on a pipe or
a condition polled against a deadline.

The build tree must be importable: meson's test sets PYTHONPATH to
<build>/python and MC_BUILD_DIR to the build root (the HTTP metadata server
is found there).
"""

import hashlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BUILD = Path(os.environ.get("MC_BUILD_DIR", ROOT / "build"))

START_TIMEOUT = 30.0
CMD_TIMEOUT = 90.0

SANITIZER_MARKERS = ("AddressSanitizer", "LeakSanitizer", "runtime error:")

try:
    import mooncake.engine  # noqa: F401
except ImportError as e:  # a clear message instead of a collection error per file
    raise pytest.UsageError(
        f"cannot import mooncake.engine ({e}); run through `meson test --suite python` "
        f"or set PYTHONPATH=<build>/python") from e

from mooncake.engine import TransferEngine  # noqa: E402

KiB = 1 << 10
MiB = 1 << 20


def pattern(seed, n):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def digest(view):
    return hashlib.blake2b(memoryview(np.ascontiguousarray(view)), digest_size=16).hexdigest()


def free_port():
    """A port nothing listens on (it was free a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def poll_until(cond, timeout, what, step=0.01):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)


class Local:
    """An engine in the test process with a registered numpy buffer."""

    def __init__(self, size=64 * MiB, metadata="P2PHANDSHAKE", name="127.0.0.1", protocol="tcp",
                 register=True):
        self.te = TransferEngine()
        rc = self.te.initialize(name, metadata, protocol, "")
        assert rc == 0, f"initialize({name!r}, {metadata!r}, {protocol!r}) -> {rc}"
        self.name = f"127.0.0.1:{self.te.get_rpc_port()}" if metadata == "P2PHANDSHAKE" else name
        self.size = size
        self.buf = np.zeros(size, np.uint8)
        self.addr = self.buf.ctypes.data
        self.registered = register
        if register:
            assert self.te.register_memory(self.addr, size) == 0

    def close(self):
        if self.te is not None:
            if self.registered:
                assert self.te.unregister_memory(self.addr) == 0
            self.te = None  # the engine goes with its last reference


class Peer:
    """tests/python/peer.py in its own process."""

    def __init__(self, logdir, label, metadata="P2PHANDSHAKE", name="127.0.0.1", protocol="tcp",
                 size=64 * MiB, env=None):
        self.label = label
        self.log_path = Path(logdir) / f"{label}.stderr"
        self._log = open(self.log_path, "wb")
        argv = [sys.executable, str(HERE / "peer.py"), "--metadata", metadata, "--name", name,
                "--protocol", protocol, "--size", str(size)]
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self._log, text=True, bufsize=1,
                                  env={**os.environ, **(env or {})})
        self.lines = queue.Queue()
        self.stopped = False
        threading.Thread(target=self._read, daemon=True).start()
        info = self._reply(START_TIMEOUT)
        if not info.get("ready"):
            raise AssertionError(f"{label} did not start: {info}; {self.stderr_tail()}")
        self.name = info["name"]
        self.addr = info["addr"]
        self.size = info["size"]
        self.rpc_port = info["rpc_port"]

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _reply(self, timeout):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"{self.label}: no reply within {timeout}s; {self.stderr_tail()}") from None
        if line is None:
            self.lines.put(None)
            raise AssertionError(f"{self.label} exited (rc={self.p.wait(10)}); {self.stderr_tail()}")
        return json.loads(line)

    def cmd(self, op, timeout=CMD_TIMEOUT, **kw):
        self.p.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.p.stdin.flush()
        r = self._reply(timeout)
        assert r.get("ok"), f"{self.label}: {op} failed: {r.get('error')}"
        return r

    # helpers
    def fill(self, seed, off=0, n=None):
        self.cmd("fill", seed=seed, off=off, len=self.size - off if n is None else n)

    def zero(self, off, n):
        self.cmd("zero", off=off, len=n)

    def hash(self, off, n):
        return self.cmd("hash", off=off, len=n)["hash"]

    def write(self, peer, off, raddr, n):
        return self.cmd("write", peer=peer, off=off, raddr=raddr, len=n)["rc"]

    def read(self, peer, off, raddr, n):
        return self.cmd("read", peer=peer, off=off, raddr=raddr, len=n)["rc"]

    def notifies(self):
        return self.cmd("notifies")["notifies"]

    def pause(self):
        """SIGSTOP, and wait until every thread stopped (delivery is asynchronous)."""
        os.kill(self.p.pid, signal.SIGSTOP)
        self.stopped = True

        def all_stopped():
            for tid in os.listdir(f"/proc/{self.p.pid}/task"):
                try:
                    with open(f"/proc/{self.p.pid}/task/{tid}/stat") as f:
                        state = f.read().rsplit(")", 1)[1].split()[0]
                except OSError:
                    continue
                if state not in ("T", "t"):
                    return False
            return True

        poll_until(all_stopped, 10, f"{self.label} to stop", 0.005)

    def resume(self):
        os.kill(self.p.pid, signal.SIGCONT)
        self.stopped = False

    def stop(self):
        """Polite stop; returns a complaint or None."""
        complaint = None
        if self.stopped:
            self.resume()
        if self.p.poll() is None:
            try:
                self.p.stdin.close()
            except OSError:
                pass
            try:
                self.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(timeout=30)
                complaint = f"{self.label} did not exit within 20s of end of input"
        if complaint is None and self.p.returncode not in (0, -signal.SIGKILL):
            complaint = f"{self.label} exited with status {self.p.returncode}"
        self._log.close()
        if complaint is None:
            text = self.log_path.read_bytes().decode(errors="replace")
            for m in SANITIZER_MARKERS:
                if m in text:
                    complaint = f"{self.label}: '{m}' in its stderr"
        return complaint

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(timeout=30)

    def stderr_tail(self, n=4000):
        try:
            data = self.log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""
        return f"stderr of {self.label}:\n{data}" if data else f"{self.label}: no stderr"


class Procs:
    """Starts peers for one scope and stops them at teardown."""

    def __init__(self, tmp_path_factory, label):
        self.logdir = tmp_path_factory.mktemp(label[:40].replace("/", "_").replace("[", "_"))
        self.peers = []

    def peer(self, **kw):
        p = Peer(self.logdir, f"peer{len(self.peers) + 1}", **kw)
        self.peers.append(p)
        return p

    def teardown(self):
        complaints = [c for c in (p.stop() for p in self.peers) if c]
        for p in self.peers:
            if p.log_path.stat().st_size:
                print(p.stderr_tail())
        assert not complaints, "; ".join(complaints)


@pytest.fixture
def procs(request, tmp_path_factory):
    c = Procs(tmp_path_factory, request.node.name)
    yield c
    c.teardown()


@pytest.fixture(scope="module")
def module_procs(request, tmp_path_factory):
    c = Procs(tmp_path_factory, request.module.__name__)
    yield c
    c.teardown()


@pytest.fixture(scope="module")
def peer(module_procs):
    """A long-lived P2P peer with a 64 MiB registered buffer."""
    return module_procs.peer()


@pytest.fixture(scope="module")
def local():
    """A long-lived P2P engine in this process with a 64 MiB registered buffer."""
    loc = Local()
    yield loc
    loc.close()


def find_binary(name, candidates):
    for c in candidates:
        p = BUILD / c
        if p.is_file() and os.access(p, os.X_OK):
            return p
    return None


@pytest.fixture(scope="session")
def meta_server(tmp_path_factory):
    """mooncake_http_metadata_server on 127.0.0.1 with a port of its choice."""
    exe = find_binary("mooncake_http_metadata_server", ["tools/mooncake_http_metadata_server"])
    if exe is None:
        pytest.skip(f"mooncake_http_metadata_server not built under {BUILD}")
    log = open(tmp_path_factory.mktemp("meta") / "meta_server.stderr", "wb")
    p = subprocess.Popen([str(exe), "--host", "127.0.0.1", "--port", "0"], stdout=subprocess.PIPE,
                         stderr=log, text=True)
    try:
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in p.stdout], daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if "listening on" in line:
                break
        port = int(line.strip().rsplit(":", 1)[1])
        yield f"http://127.0.0.1:{port}/metadata"
    finally:
        p.kill()
        p.wait(timeout=30)
        log.close()


# ---- mooncake.store: the master daemon -------------------------------------------------

class MasterDaemon:
    """mooncake_master from MC_MASTER on free ports (rpc, metrics, embedded
    HTTP metadata server); ports come from its 'listening ...' stderr line."""

    def __init__(self, logdir, extra=(), env=None):
        import re
        exe = os.environ.get("MC_MASTER") or str(BUILD / "tools" / "mooncake_master")
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            pytest.skip(f"mooncake_master not found (MC_MASTER={exe})")
        self.log_path = Path(logdir) / "master.stderr"
        self._log = open(self.log_path, "wb")
        argv = [exe, "--rpc_port=0", "--metrics_port=0", "--enable_http_metadata_server",
                "--http_metadata_server_port=0", *extra]
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=self._log, env={**os.environ, **(env or {})})
        pat = re.compile(r"listening rpc=(\d+) metrics=(\d+) metadata=(\d+)")

        def found():
            if self.p.poll() is not None:
                raise AssertionError(f"master exited (rc={self.p.returncode}): "
                                     f"{self.log_path.read_bytes()[-2000:]!r}")
            return pat.search(self.log_path.read_bytes().decode(errors="replace"))

        m = poll_until(found, START_TIMEOUT, "the master's 'listening' line")
        self.rpc, self.metrics, self.meta = (int(x) for x in m.groups())
        self.addr = f"127.0.0.1:{self.rpc}"
        self.meta_uri = f"http://127.0.0.1:{self.meta}/metadata"

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(timeout=30)
        self._log.close()


@pytest.fixture(scope="module")
def mc_master(tmp_path_factory):
    """A mooncake_master for one test module (short lease so removals are testable)."""
    m = MasterDaemon(tmp_path_factory.mktemp("master"), extra=("--default_kv_lease_ttl=500",
                                                                   "--enable_multi_tenants=true"))
    yield m
    m.stop()
