"""A real etcd member for the tests and benches (Debian's etcd-server).

EtcdServer(tmpdir) starts one member on free 127.0.0.1 ports (from
MC_TEST_PORT_BASE upwards when set, else any free port), waits until it
answers /health, and stop() kills it.  kv_get(key) reads a key through the
v3 JSON gateway, as a peer in another language would see it.
"""

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request


def etcd_binary():
    return shutil.which("etcd") or (os.path.exists("/usr/bin/etcd") and "/usr/bin/etcd")


def _free_port(exclude=()):
    base = int(os.environ.get("MC_TEST_PORT_BASE", "0"))
    for port in (range(base, base + 1000) if base else [0]):
        if port in exclude:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free port")


class EtcdServer:
    def __init__(self, workdir, timeout=30.0, extra_hosts=()):
        """extra_hosts: more addresses to serve clients on (the same port)."""
        self.client_port = _free_port()
        self.peer_port = _free_port(exclude=(self.client_port,))
        self.endpoint = f"127.0.0.1:{self.client_port}"
        cu, pu = f"http://{self.endpoint}", f"http://127.0.0.1:{self.peer_port}"
        listen = ",".join([cu] + [f"http://{h}:{self.client_port}" for h in extra_hosts])
        self.log = open(os.path.join(workdir, "etcd.log"), "wb")
        self.proc = subprocess.Popen(
            [etcd_binary(), "--name", "p2p", "--data-dir", os.path.join(workdir, "etcd.data"),
             "--listen-client-urls", listen, "--advertise-client-urls", cu,
             "--listen-peer-urls", pu, "--initial-advertise-peer-urls", pu,
             "--initial-cluster", f"p2p={pu}"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(cu + "/health", timeout=1) as r:
                    if json.load(r).get("health") in ("true", True):
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"etcd did not start (log {self.log.name})")
            time.sleep(0.05)

    def _post(self, path, body):
        req = urllib.request.Request(f"http://{self.endpoint}/v3{path}",
                                     data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.load(r)

    def kv_get(self, key):
        """The value of key (bytes) or None."""
        ans = self._post("/kv/range", {"key": base64.b64encode(key.encode()).decode()})
        kvs = ans.get("kvs") or []
        return base64.b64decode(kvs[0].get("value", "")) if kvs else None

    def kv_put(self, key, value):
        self._post("/kv/put", {"key": base64.b64encode(key.encode()).decode(),
                               "value": base64.b64encode(value).decode()})

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()
