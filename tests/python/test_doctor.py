"""mooncake doctor (python/mooncake/doctor.py): against a real master and its
embedded metadata server, a port held by this test, a closed port, a missing
directory; --json shape and exit codes."""

import json
import os
import socket
import subprocess
import sys

from conftest import free_port


def doctor(*args):
    return subprocess.run([sys.executable, "-m", "mooncake.doctor", *args],
                          capture_output=True, text=True, timeout=120, env=os.environ)


def checks_of(p):
    d = json.loads(p.stdout)
    return d, {c["check"]: c for c in d["checks"]}


def test_a_healthy_setup_passes(mc_master, tmp_path):
    p = doctor("--json", "--master", mc_master.addr, "--master-http",
               f"127.0.0.1:{mc_master.metrics}", "--metadata", mc_master.meta_uri,
               "--ssd-dir", str(tmp_path), "--port", str(free_port()))
    assert p.returncode == 0, p.stdout + p.stderr
    d, c = checks_of(p)
    assert d["ok"] is True
    for name in ("master", "master admin", "metadata server", "SSD directory"):
        assert c[name]["result"] in ("ok", "warn") and c[name]["needed"], c[name]
    assert c["master admin"]["detail"].startswith("/health 200")
    assert c["clock skew"]["result"] in ("ok", "warn", "skip")
    for name in ("memlock limit", "huge pages", "network interfaces", "io_uring", "CUDA",
                 "RDMA devices"):
        assert name in c and c[name]["result"] in ("ok", "warn", "skip", "fail")
    assert all(set(x) == {"check", "result", "detail", "fix", "needed"} for x in d["checks"])


def test_what_is_needed_and_missing_fails(tmp_path):
    held = socket.socket()
    held.bind(("0.0.0.0", 0))
    held.listen(1)
    port = held.getsockname()[1]
    closed = free_port()
    try:
        p = doctor("--master", f"127.0.0.1:{closed}", "--port", str(port), "--ssd-dir",
                   str(tmp_path / "nope"), "--metadata", f"http://127.0.0.1:{closed}/metadata",
                   "--timeout", "1")
    finally:
        held.close()
    assert p.returncode == 1
    out = p.stdout
    assert f"port {port}" in out and "fix:" in out
    assert "failed:" in out.splitlines()[-1]
    for name in ("master", f"port {port}", "SSD directory", "metadata server"):
        assert name in out.splitlines()[-1], out


def test_rdma_protocol_needs_devices_and_memlock():
    p = doctor("--json", "--protocol", "rdma", "--segment-size", "1t")
    d, c = checks_of(p)
    assert c["RDMA devices"]["needed"] and c["memlock limit"]["needed"]
    if not os.path.isdir("/sys/class/infiniband") or not os.listdir("/sys/class/infiniband"):
        assert c["RDMA devices"]["result"] == "fail" and p.returncode == 1


def test_console_program_dispatch():
    from mooncake import doctor as doc
    assert doc.mooncake_main(["nosuch"]) == 2
    assert doc.mooncake_main([]) == 2
    assert doc.parse_size("4GB") == 4 << 30 and doc.parse_size("512m") == 512 << 20


def test_the_cluster_secret_row(tmp_path):
    def row(env):
        p = subprocess.run([sys.executable, "-m", "mooncake.doctor", "--json"],
                           capture_output=True, text=True, timeout=120,
                           env={k: v for k, v in {**os.environ, **env}.items() if v is not None})
        return p.returncode, checks_of(p)[1]["cluster secret"]

    off = {"MC_AUTH_SECRET_FILE": None, "MC_AUTH_SECRET": None}
    rc, c = row(off)
    assert c["result"] == "warn" and "none" in c["detail"]
    secret = tmp_path / "secret"
    secret.write_text("s\n")
    secret.chmod(0o600)
    rc, c = row({**off, "MC_AUTH_SECRET_FILE": str(secret)})
    assert c["result"] == "ok" and str(secret) in c["detail"]
    secret.chmod(0o640)  # the programs refuse it, so the doctor fails it
    rc, c = row({**off, "MC_AUTH_SECRET_FILE": str(secret)})
    assert c["result"] == "fail" and c["needed"] and "chmod 600" in c["fix"] and rc == 1
    secret.chmod(0o600)
    secret.write_text("\n")
    rc, c = row({**off, "MC_AUTH_SECRET_FILE": str(secret)})
    assert c["result"] == "fail" and c["needed"] and rc == 1
    rc, c = row({**off, "MC_AUTH_SECRET_FILE": str(tmp_path / "nope")})
    assert c["result"] == "fail" and rc == 1


def test_the_master_row_says_whether_the_secrets_agree(mc_master, tmp_path):
    """The master row runs the handshake against the RPC port: the same
    secret passes, another one, none against a master with one, and one
    against a master without fail (needed), each with its fix."""
    from conftest import MasterDaemon
    sf = tmp_path / "secret"
    sf.write_text("doctor-s3cret\n")
    sf.chmod(0o600)
    other = tmp_path / "other"
    other.write_text("not-it\n")
    other.chmod(0o600)
    secured = MasterDaemon(tmp_path, extra=(f"--auth_secret_file={sf}",))
    off = {k: v for k, v in os.environ.items() if not k.startswith("MC_AUTH_")}

    def row(master, secret_file):
        env = dict(off, **({"MC_AUTH_SECRET_FILE": str(secret_file)} if secret_file else {}))
        p = subprocess.run([sys.executable, "-m", "mooncake.doctor", "--json", "--master",
                            master.addr], capture_output=True, text=True, timeout=120, env=env)
        return p.returncode, checks_of(p)[1]["master"]

    try:
        rc, c = row(secured, sf)
        assert rc == 0 and c["result"] == "ok" and "its secret is this host's" in c["detail"], c
        rc, c = row(secured, other)
        assert rc == 1 and c["result"] == "fail" and "another secret" in c["detail"], c
        rc, c = row(secured, None)
        assert rc == 1 and c["result"] == "fail" and "requires" in c["detail"], c
        rc, c = row(mc_master, sf)
        assert rc == 1 and c["result"] == "fail" and "without a secret" in c["detail"], c
        rc, c = row(mc_master, None)
        assert rc == 0 and c["result"] == "ok" and "none on either side" in c["detail"], c
    finally:
        secured.stop()
    # the secured master counted the probes that did not prove the secret, and
    # served the one that did as a client (no refusal logged for it)
    assert "refused a connection to the master rpc port" in secured.log_path.read_text()
