"""transfer_engine_bench runs unchanged against every metadata backend.

For each of http (our server), etcd (a real etcd-server), redis (a real
redis-server) and P2PHANDSHAKE: start a target, run a short initiator with
--verify (pattern written, read back and compared through the engine), and
check its result line.  etcd and redis are skipped when their servers are not
installed.  Every process is killed in teardown; waits are for output lines
or polled conditions, never sleeps.
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest

from conftest import BUILD, START_TIMEOUT, Proc, _find_binary, slow

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import etcd_proc  # noqa: E402  (the one etcd fixture of the tests)


def bench_path():
    exe = _find_binary("MC_TE_BENCH", "transfer_engine_bench", ["tools/transfer_engine_bench"])
    if exe is None:
        pytest.skip("transfer_engine_bench not built")
    return exe


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, deadline_s):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)  # polling a condition with a deadline
    return False


@pytest.fixture
def etcd_uri(tmp_path):
    if not etcd_proc.etcd_binary():
        pytest.skip("etcd-server not installed")
    server = etcd_proc.EtcdServer(str(tmp_path))
    try:
        yield f"etcd://{server.endpoint}"
    finally:
        server.stop()


@pytest.fixture
def redis_uri():
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server not installed")
    port = free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_port(port, 30), "redis-server did not start"
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(timeout=30)


def run_pair(tmp_path, uri):
    exe = bench_path()
    common = [f"--metadata_server={uri}", "--protocol=tcp", "--buffer_size=67108864"]
    target = Proc([exe, "--mode=target", "--local_server_name=bench-target" if uri !=
                   "P2PHANDSHAKE" else "--local_server_name=127.0.0.1", *common],
                  "bench_target", tmp_path)
    try:
        name = target.wait_for_line(lambda l: l.strip() != "", START_TIMEOUT).strip()
        out = subprocess.run(
            [exe, "--mode=initiator", f"--segment_id={name}",
             "--local_server_name=bench-init" if uri != "P2PHANDSHAKE"
             else "--local_server_name=127.0.0.1",
             "--operation=write", "--block_size=65536", "--batch_size=16", "--threads=2",
             "--duration=0.5", "--verify", *common],
            capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        m = re.search(r"Test completed: duration [0-9.]+, batch count (\d+), throughput "
                      r"([0-9.]+) GB/s", out.stdout)
        assert m, out.stdout
        assert int(m.group(1)) > 0
    finally:
        target.stop()


def test_bench_http(tmp_path, meta_server):
    run_pair(tmp_path, meta_server.uri)


@slow
def test_bench_p2p(tmp_path):
    run_pair(tmp_path, "P2PHANDSHAKE")


@pytest.mark.parametrize("window", [
    pytest.param("1048576", marks=slow), "1024", pytest.param("0", marks=slow)])
def test_bench_window(tmp_path, window):
    """--window walks the batches through a window (1 MiB: 16 blocks of
    64 KiB, two threads, batches of 4, so offsets wrap within the window);
    a window below the block, or 0, keeps upstream's fixed offsets."""
    exe = bench_path()
    common = ["--metadata_server=P2PHANDSHAKE", "--protocol=tcp", "--buffer_size=8388608",
              "--local_server_name=127.0.0.1"]
    target = Proc([exe, "--mode=target", *common], "bench_target", tmp_path)
    try:
        name = target.wait_for_line(lambda l: l.strip() != "", START_TIMEOUT).strip()
        for op in ("write", "read"):
            out = subprocess.run(
                [exe, "--mode=initiator", f"--segment_id={name}", f"--operation={op}",
                 "--block_size=65536", "--batch_size=4", "--threads=2", "--duration=0.3",
                 f"--window={window}", *common],
                capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stderr
            m = re.search(r"batch count (\d+)", out.stdout)
            assert m and int(m.group(1)) > 8, out.stdout
    finally:
        target.stop()


@slow
def test_bench_etcd(tmp_path, etcd_uri):
    run_pair(tmp_path, etcd_uri)


@slow
def test_bench_redis(tmp_path, redis_uri):
    run_pair(tmp_path, redis_uri)
