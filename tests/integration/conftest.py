"""Fixtures for the multi-process integration tests.

Processes under test are started here and always killed in teardown:

* ``meta_server`` (session) -- ``mooncake_http_metadata_server --port 0`` on
  127.0.0.1, ready (and its port known) once it prints its "listening on" line;
* ``cluster`` (per test) / ``module_cluster`` (per module) -- start
  ``te_node`` processes (tests/integration/te_node.c) in either metadata
  mode and wait for their READY line.

Binaries are found through the environment the meson test sets:
MC_BUILD_DIR (the build root), MC_TE_NODE (optional, te_node's path) and
MC_HTTP_METADATA_SERVER (optional, the server's path).  Without them the
defaults point at <repo>/build.

Nothing here sleeps to synchronise: every wait is for a line on a pipe or a
condition polled against a deadline.
"""

import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("MC_BUILD_DIR", ROOT / "build"))

START_TIMEOUT = 20.0  # seconds for a process to print its ready line
CMD_TIMEOUT = 60.0  # default bound on one te_node command

MODES = ["http", "p2p"]

# Cases that repeat a path another case already covers, at a cost of many
# seconds (a second parametrisation, a bench per backend, a fixed 10 s
# period): scripts/test.sh sets MC_TEST_QUICK=1 in the sanitizer stages, so
# they run once per CI run, in the release stage.
QUICK = os.environ.get("MC_TEST_QUICK") == "1"
slow = pytest.mark.skipif(QUICK, reason="slow case, skipped with MC_TEST_QUICK=1 "
                          "(scripts/test.sh runs it in the release stage)")



def _build_sanitizer():
    """The build's b_sanitize option ("none" when absent or unknown)."""
    try:
        with open(BUILD / "meson-info" / "intro-buildoptions.json") as f:
            for o in json.load(f):
                if o.get("name") == "b_sanitize":
                    return o.get("value") or "none"
    except (OSError, ValueError):
        pass
    return "none"


# "address,undefined", "thread" or "none": sizes bounds that a sanitizer's
# allocator moves (ASan keeps freed blocks in quarantine, resident).
SANITIZER = _build_sanitizer()

# A process whose stderr holds one of these fails the test at teardown.
SANITIZER_MARKERS = ("AddressSanitizer", "LeakSanitizer", "ThreadSanitizer", "runtime error:")


def _find_binary(env, name, candidates):
    path = os.environ.get(env)
    if path:
        return Path(path)
    for c in candidates:
        p = BUILD / c
        if p.is_file() and os.access(p, os.X_OK):
            return p
    # Wherever the build put it (skip meson's object dirs).
    for dirpath, dirnames, filenames in os.walk(BUILD):
        dirnames[:] = [d for d in dirnames if not d.endswith(".p") and d != "meson-private"]
        if name in filenames:
            p = Path(dirpath) / name
            if os.access(p, os.X_OK):
                return p
    return None


def te_node_path():
    return _find_binary("MC_TE_NODE", "te_node", ["tests/integration/te_node"])


def metadata_server_path():
    return _find_binary(
        "MC_HTTP_METADATA_SERVER",
        "mooncake_http_metadata_server",
        ["tools/mooncake_http_metadata_server", "src/meta/mooncake_http_metadata_server"],
    )


class ProcError(AssertionError):
    pass


def sigstop(pid, timeout=10.0):
    """SIGSTOP pid and return once every one of its threads is stopped.

    kill() returns before the group stop reaches all threads: on a busy
    machine a worker can still serve a request that arrives a moment later
    (the same-host path answers within a millisecond), so a test that means
    "the peer no longer answers" must wait for the stop to be complete."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while True:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except OSError:
                pass  # a thread that just exited
        if states and all(s in ("T", "t") for s in states):
            return
        if time.monotonic() > deadline:
            raise ProcError(f"pid {pid} not stopped within {timeout}s (thread states {states})")
        time.sleep(0.001)


class Proc:
    """A child process with a line-oriented stdout read by a thread.

    stderr goes to a log file that teardown prints (shown by pytest only for
    failing tests)."""

    def __init__(self, argv, label, logdir, env=None):
        self.label = label
        self.argv = [str(a) for a in argv]
        self.log_path = Path(logdir) / f"{label}.stderr"
        self._log = open(self.log_path, "wb")
        self.lines = queue.Queue()
        self.p = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            bufsize=1,
            env=None if env is None else {**os.environ, **env},
        )
        self.pid = self.p.pid
        self.killed = False  # SIGKILLed on purpose by a test
        self.expect_rc = 0  # exit status expected after a polite stop
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def alive(self):
        return self.p.poll() is None

    def readline(self, timeout):
        """Next stdout line; ProcError on timeout or EOF."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise ProcError(f"{self.label}: no output within {timeout:.1f}s") from None
        if line is None:
            self.lines.put(None)  # keep reporting EOF
            rc = self.p.wait(timeout=10)
            raise ProcError(f"{self.label}: exited (rc={rc}) before answering; {self.stderr_tail()}")
        return line

    def poll_line(self, timeout):
        """Next stdout line or None if nothing arrived within timeout."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            return None
        if line is None:
            self.lines.put(None)
            raise ProcError(f"{self.label}: exited (rc={self.p.wait(timeout=10)}); {self.stderr_tail()}")
        return line

    def wait_for_line(self, pred, timeout):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProcError(f"{self.label}: expected line not seen within {timeout:.1f}s; {self.stderr_tail()}")
            line = self.readline(left)
            if pred(line):
                return line

    def rss(self):
        """Resident set size in bytes."""
        with open(f"/proc/{self.pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def kill9(self):
        self.killed = True
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
        self.p.wait(timeout=30)

    def stop(self, grace=5.0):
        """Polite quit (close stdin), then SIGKILL after grace seconds.
        Returns a complaint if the process misbehaved, else None."""
        complaint = None
        if self.alive():
            try:
                self.p.stdin.close()
            except OSError:
                pass
            try:
                self.p.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.p.wait(timeout=30)
                complaint = f"{self.label} did not exit within {grace}s of end of input"
        if complaint is None and not self.killed and self.p.returncode != self.expect_rc:
            complaint = f"{self.label} exited with status {self.p.returncode}"
        for f in (self.p.stdin, self.p.stdout):
            try:
                f.close()
            except (OSError, ValueError):
                pass
        self._log.close()
        if complaint is None:
            text = self.log_path.read_bytes().decode(errors="replace")
            for marker in SANITIZER_MARKERS:
                if marker in text:
                    complaint = f"{self.label}: '{marker}' in its stderr"
                    break
        return complaint

    def stderr_tail(self, n=4000):
        try:
            data = self.log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""
        return f"stderr of {self.label} (rc={self.p.poll()}):\n{data}" if data else f"{self.label}: no stderr"


class TeNode(Proc):
    """te_node driven over stdin/stdout (see te_node.c for the commands)."""

    def wait_ready(self):
        """Wait for READY; ProcError (with the reason) if the engine failed."""
        label = self.label
        line = self.wait_for_line(lambda l: l.startswith(("READY", "FAILED")), START_TIMEOUT)
        if line.startswith("FAILED"):
            self.expect_rc = 1
            raise ProcError(f"{label}: engine did not start: {line}; {self.stderr_tail()}")
        self.info = dict(kv.split("=", 1) for kv in line.split()[1:])
        self.name = self.info["name"]
        self.base = int(self.info["addr"], 0)
        self.size = int(self.info["size"])
        self.unreg = int(self.info["unreg"], 0)
        self.unreg_size = int(self.info["unreg_size"])
        self.rpc_port = int(self.info["rpc_port"])

    # -- raw protocol --
    def send(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def reply(self, timeout=CMD_TIMEOUT):
        return self.readline(timeout)

    def cmd(self, line, timeout=CMD_TIMEOUT):
        self.send(line)
        return self.reply(timeout)

    def ok(self, line, timeout=CMD_TIMEOUT):
        r = self.cmd(line, timeout)
        if not r.startswith("OK"):
            raise ProcError(f"{self.label}: '{line[:200]}' -> '{r}'; {self.stderr_tail()}")
        return r.split()[1:]

    # -- helpers --
    def fill(self, seed, off=None, length=None):
        self.ok(f"fill {seed}" if off is None else f"fill {seed} {off} {length}")

    def zero(self, off, length):
        self.ok(f"zero {off} {length}")

    def crc(self, off, length):
        return self.ok(f"crc {off} {length}")[0]

    def crca(self, addr, length):
        return self.ok(f"crca {addr:#x} {length}")[0]

    def open(self, seg, reopen=False):
        return int(self.ok(f"{'reopen' if reopen else 'open'} {seg}")[0])

    def remote_base(self, seg_id, index=0):
        r = self.ok(f"remote_base {seg_id} {index}")
        return int(r[0], 0), int(r[1])

    def write(self, seg_id, loff, raddr, length, timeout=CMD_TIMEOUT):
        return self.cmd(f"write {seg_id} {loff} {raddr:#x} {length}", timeout)

    def read(self, seg_id, loff, raddr, length, timeout=CMD_TIMEOUT):
        return self.cmd(f"read {seg_id} {loff} {raddr:#x} {length}", timeout)


class Cluster:
    """Starts processes for one scope and kills them all at teardown."""

    def __init__(self, request, tmp_path_factory, label):
        self.request = request
        self.logdir = tmp_path_factory.mktemp(label[:40].replace("/", "_"))
        self.procs = []
        self.count = 0
        self.tag = f"{label[:24]}-{os.getpid()}"

    def metadata_uri(self, mode):
        if mode == "p2p":
            return "P2PHANDSHAKE"
        server = self.request.getfixturevalue("meta_server")
        return server.uri

    def unique_name(self, stem="node"):
        self.count += 1
        return f"{stem}-{self.tag}-{self.count}"

    def node(self, mode, name=None, buffer="64m", extra=(), env=None):
        exe = te_node_path()
        if exe is None:
            pytest.fail(f"te_node not found under {BUILD} (set MC_BUILD_DIR or MC_TE_NODE)")
        if name is None:
            name = self.unique_name()
        argv = [exe, "--metadata", self.metadata_uri(mode), "--host", "127.0.0.1", "--buffer", buffer]
        if mode != "p2p":
            argv += ["--name", name]
        argv += list(extra)
        self.count += 1
        n = TeNode(argv, f"te_node{self.count}-{mode}", self.logdir, env)
        self.procs.append(n)  # killed at teardown even if it never gets ready
        n.wait_ready()
        return n

    def teardown(self):
        """Stop everything; fail (as a teardown error) if a process did not
        quit cleanly or a sanitizer complained."""
        complaints = [c for c in (p.stop() for p in reversed(self.procs)) if c]
        for p in self.procs:
            if p.log_path.stat().st_size:
                print(p.stderr_tail())
        assert not complaints, "; ".join(complaints)


@pytest.fixture(scope="session")
def meta_server(tmp_path_factory):
    exe = metadata_server_path()
    if exe is None:
        pytest.skip(f"mooncake_http_metadata_server not built under {BUILD}")
    logdir = tmp_path_factory.mktemp("meta_server")
    # --port 0: the server picks a free port and prints it.
    proc = Proc([exe, "--host", "127.0.0.1", "--port", "0"], "meta_server", logdir)
    try:
        line = proc.wait_for_line(lambda l: "listening on" in l, START_TIMEOUT)
        port = int(line.rsplit(":", 1)[1])
        proc.uri = f"http://127.0.0.1:{port}/metadata"
        yield proc
    finally:
        proc.kill9()
        proc.stop()


@pytest.fixture(params=MODES)
def mode(request):
    return request.param


@pytest.fixture
def cluster(request, tmp_path_factory):
    c = Cluster(request, tmp_path_factory, request.node.name)
    yield c
    c.teardown()


@pytest.fixture(scope="module")
def module_cluster(request, tmp_path_factory):
    c = Cluster(request, tmp_path_factory, request.module.__name__)
    yield c
    c.teardown()
