"""tools/mooncake_client: the standalone store client daemon (issue 15 part 1).

It mounts its segment on a real master; a pure client's puts land there and
read back; its HTTP server answers; SIGTERM unmounts it (its objects go)
and it exits 0; bad flags exit 2 and a master that does not answer exits 1.
"""

import os
import re
import signal
import subprocess
import urllib.request
import uuid

import pytest

from conftest import BUILD, MiB, free_port, poll_until
from mooncake.store import MooncakeDistributedStore, ReplicateConfig

EXE = str(BUILD / "tools" / "mooncake_client")
pytestmark = pytest.mark.skipif(not os.access(EXE, os.X_OK), reason="no mooncake_client")


def start(tmp_path, *flags):
    log = open(tmp_path / f"client-{uuid.uuid4().hex[:6]}.stderr", "wb+")
    p = subprocess.Popen([EXE, *flags], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=log)
    pat = re.compile(rb"mooncake_client serving segment=(\S+) size=(\d+) http=(\d+)")

    def ready():
        if p.poll() is not None:
            log.seek(0)
            raise AssertionError(f"exited {p.returncode}: {log.read()[-2000:]!r}")
        log.seek(0)
        return pat.search(log.read())

    m = poll_until(ready, 60, "the daemon's serving line")
    return p, log, m.group(1).decode(), int(m.group(3))


def test_daemon_serves_its_segment_then_unmounts(mc_master, tmp_path):
    p, log, name, http = start(tmp_path, "--host=127.0.0.1",
                               f"--metadata_server={mc_master.meta_uri}",
                               f"--master_server_address={mc_master.addr}",
                               "--global_segment_size=64 MB", "--enable_http_server",
                               "--http_port=0", "--tenant_id=daemon")
    c = MooncakeDistributedStore()
    try:
        assert name.startswith("127.0.0.1:") and http > 0
        assert c.setup("127.0.0.1", mc_master.meta_uri, 0, 16 * MiB, "tcp", "", mc_master.addr,
                       tenant_id="daemon") == 0
        cfg = ReplicateConfig()
        cfg.preferred_segment = name
        val = os.urandom(1 * MiB)
        assert c.put("daemon-k", val, cfg) == 0
        assert c.get("daemon-k") == val
        reps = c.get_replica_desc("daemon-k")
        assert reps and reps[0].is_memory_replica()
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/health", timeout=10) as r:
            assert r.status == 200
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 0
        # the segment is unmounted with the daemon: its objects go with it
        poll_until(lambda: c.is_exist("daemon-k") == 0, 30, "the object to go")
    finally:
        c.close()
        if p.poll() is None:
            p.kill()
            p.wait()
        log.close()


def test_bad_flags_and_unreachable_master(tmp_path):
    for flags in (["--bogus"], ["--global_segment_size=lots"], ["--port=0"],
                  ["--enable_offload", "--start_offload_rpc_server=false"]):
        r = subprocess.run([EXE, *flags], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, (flags, r.stderr)
        assert "mooncake_client:" in r.stderr
    r = subprocess.run([EXE, "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--global_segment_size=4GB" in r.stdout
    env = dict(os.environ, MC_RPC_CONNECT_TIMEOUT_MS="2000", MC_RPC_TIMEOUT_MS="2000")
    r = subprocess.run([EXE, "--host=127.0.0.1", "--metadata_server=P2PHANDSHAKE",
                        f"--master_server_address=127.0.0.1:{free_port()}",
                        "--global_segment_size=16MB"], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 1 and "cannot set up" in r.stderr, r.stderr
