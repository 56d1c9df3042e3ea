"""The legacy shared-filesystem DISK tier end to end (spec store.md 5.1,
mooncake_master --root_fs_dir), with real processes and real files on the
disk (/tmp) and on tmpfs (/dev/shm):

  - a writer client puts objects (single and batch, a key the sanitising
    changes among them), then closes: its close writes every queued DISK
    file and reports it, then unmounts its segment, so no memory replica
    is left;
  - each file lies at <root_fs_dir>/<cluster_id>/<c1>/<c2>/<name> with c1
    and c2 in a..p, the key's bad characters turned into '_';
  - a reader client in another process gets every object byte-exact from
    the files alone (get and get_into);
  - a file whose value is flipped on disk is refused (the get fails, it
    never returns other bytes);
  - remove and remove_all delete the files before they return;
  - the master refuses --root_fs_dir with --enable_offload, and a missing
    directory, each with a message naming the cause.
"""

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import MiB, poll_until
from ssd_node import digest, pattern

HERE = Path(__file__).resolve().parent
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
CLUSTER = "fs_test_cluster"


def master_exe():
    exe = os.environ.get("MC_MASTER") or str(HERE.parents[1] / "build/tools/mooncake_master")
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        pytest.skip(f"mooncake_master not found ({exe})")
    return exe


class Master:
    def __init__(self, logdir, root):
        self.log_path = Path(logdir) / "master.stderr"
        self._log = open(self.log_path, "wb")
        argv = [master_exe(), "--rpc_port=0", "--metrics_port=0",
                "--enable_http_metadata_server", "--http_metadata_server_port=0",
                f"--root_fs_dir={root}", f"--cluster_id={CLUSTER}",
                "--default_kv_lease_ttl=200"]
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=self._log)
        pat = re.compile(r"listening rpc=(\d+) metrics=(\d+) metadata=(\d+)")

        def found():
            text = self.log_path.read_bytes().decode(errors="replace")
            if self.p.poll() is not None:
                raise AssertionError(f"master exited (rc={self.p.returncode}): {text[-2000:]}")
            return pat.search(text)

        m = poll_until(found, 30, "the master's 'listening' line")
        self.rpc, _, self.meta = (int(x) for x in m.groups())
        self.addr = f"127.0.0.1:{self.rpc}"
        self.meta_uri = f"http://127.0.0.1:{self.meta}/metadata"

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            self.p.wait(timeout=20)
        self._log.close()


class Node:
    """fs_node.py in its own process, driven with JSON lines."""

    def __init__(self, logdir, tag, master, segment):
        env = dict(os.environ)
        env["MC_STORE_PREFAULT"] = "off"
        self.log_path = Path(logdir) / f"{tag}.stderr"
        self._log = open(self.log_path, "wb")
        self.p = subprocess.Popen(
            [PY, str(HERE / "fs_node.py"), "--master", master.addr, "--meta", master.meta_uri,
             "--segment", str(segment)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True, env=env)
        self.lines = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(x) for x in self.p.stdout],
                         daemon=True).start()
        ready = self._read(60)
        assert ready["ready"], f"{tag} setup failed: {ready} {self.tail()}"

    def tail(self):
        return self.log_path.read_bytes()[-3000:].decode(errors="replace")

    def _read(self, timeout):
        try:
            return json.loads(self.lines.get(timeout=timeout))
        except queue.Empty:
            raise AssertionError(f"no answer from the node: {self.tail()}")

    def cmd(self, **kw):
        self.p.stdin.write(json.dumps(kw) + "\n")
        self.p.stdin.flush()
        return self._read(60)

    def close(self):
        """Close stdin: the node closes its store (DISK files drained) and exits."""
        if self.p.poll() is None:
            self.p.stdin.close()
            assert self.p.wait(timeout=60) == 0, self.tail()
        self._log.close()

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(timeout=30)
        if not self._log.closed:
            self._log.close()


OBJECTS = [("plain-1", 1 * MiB, 1), ("plain-2", 3000, 2), ("a/b:c*d", 200 * 1024, 3)]
BATCH = ["batch-0", "batch-1", "batch-2"]
BATCH_SIZE, BATCH_SEED = 64 * 1024, 100


def files_under(fsdir):
    return sorted(p for p in Path(fsdir).rglob("*") if p.is_file())


@pytest.mark.parametrize("base", ["/tmp", "/dev/shm"])
def test_disk_tier_round_trip_through_the_files(tmp_path, base):
    if not os.path.isdir(base):
        pytest.skip(f"no {base}")
    root = Path(base) / f"mc-fs-{os.getpid()}-{tmp_path.name}"
    root.mkdir()
    fsdir = root / CLUSTER
    master = Master(tmp_path, root)
    writer = reader = None
    try:
        writer = Node(tmp_path, "writer", master, 64 * MiB)
        for key, size, seed in OBJECTS:
            assert writer.cmd(op="put", key=key, size=size, seed=seed)["rc"] == 0
        assert writer.cmd(op="put_batch", keys=BATCH, size=BATCH_SIZE, seed=BATCH_SEED)["rc"] == 0
        writer.close()  # files written and reported, then its segment unmounted
        writer = None

        files = files_under(fsdir)
        assert len(files) == len(OBJECTS) + len(BATCH), files
        names = {}
        for f in files:
            rel = f.relative_to(fsdir).parts
            assert len(rel) == 3 and all(len(c) == 1 and "a" <= c <= "p" for c in rel[:2]), rel
            names[rel[2]] = f
        assert "plain-1" in names and "plain-2" in names and "batch-0" in names
        sanitised = [n for n in names if n.startswith("a_b_c_d.")]
        assert len(sanitised) == 1 and re.fullmatch(r"a_b_c_d\.[0-9a-f]{16}", sanitised[0])
        # header, key, value
        assert names["plain-2"].stat().st_size == 64 + len("plain-2") + 3000
        assert names["plain-2"].read_bytes()[:4] == b"MCFD"

        reader = Node(tmp_path, "reader", master, 0)
        for key, size, seed in OBJECTS:
            got = reader.cmd(op="get", key=key)
            assert got["rc"] == size and got["digest"] == digest(pattern(seed, size)), key
        for i, key in enumerate(BATCH):
            got = reader.cmd(op="get_into", key=key, size=BATCH_SIZE)
            assert got["rc"] == BATCH_SIZE
            assert got["digest"] == digest(pattern(BATCH_SEED + i, BATCH_SIZE)), key

        # ranges of the files, checked by the chunk-sum trailer the reader
        # rebuilds from the whole file (a file holds the value only)
        for key, size, seed in OBJECTS[0], OBJECTS[2]:
            off, n = 3 * 16384 + 7, 40000
            got = reader.cmd(op="range", key=key, off=off, len=n)
            assert got["rc"] == [[[n]]], key
            assert got["digest"] == digest(pattern(seed, size)[off:off + n]), key

        # a value byte flipped on disk: refused, never other bytes
        f = names["plain-2"]
        b = bytearray(f.read_bytes())
        b[64 + len("plain-2") + 10] ^= 0x40
        f.write_bytes(bytes(b))
        assert reader.cmd(op="get", key="plain-2")["rc"] == -1

        # remove deletes the file before it returns
        assert reader.cmd(op="remove", key="plain-1")["rc"] == 0
        assert not names["plain-1"].exists()
        assert reader.cmd(op="get", key="plain-1")["rc"] == -1
        for key in BATCH:
            assert reader.cmd(op="remove", key=key)["rc"] == 0
        assert not any(names[k].exists() for k in BATCH)
        left = files_under(fsdir)
        assert sorted(p.name for p in left) == sorted(["plain-2", sanitised[0]]), left
        # remove_all deletes the rest, the file that failed its checksum too
        assert reader.cmd(op="remove_all")["rc"] == 2
        assert files_under(fsdir) == []
    finally:
        for n in (writer, reader):
            if n:
                n.kill()
        master.stop()
        for f in files_under(root):
            f.unlink()
        for d in sorted(root.rglob("*"), reverse=True):
            d.rmdir()
        root.rmdir()


def run_master(*flags):
    return subprocess.run([master_exe(), "--rpc_port=0", "--metrics_port=0", *flags],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)


def test_root_fs_dir_refused_with_enable_offload(tmp_path):
    r = run_master(f"--root_fs_dir={tmp_path}", "--enable_offload")
    assert r.returncode == 2
    assert "root_fs_dir" in r.stderr and "enable_offload" in r.stderr, r.stderr


def test_root_fs_dir_must_exist(tmp_path):
    r = run_master(f"--root_fs_dir={tmp_path}/missing")
    assert r.returncode != 0
    assert "missing" in r.stderr and "root_fs_dir" in r.stderr, r.stderr
