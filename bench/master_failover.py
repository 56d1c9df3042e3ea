#!/usr/bin/env python3
"""HA failover under load: kill -9 of the leader, N times.

Starts a real etcd-server, 1 + --standbys ``mooncake_master --enable_ha``
(each with its own --wal_dir, --ha_lease_ttl_seconds=--ttl) and --clients store
clients (tests/integration/store_node, master and metadata
``etcd://...``).  Each client runs a steady loop on its own thread: put
a new key (--size bytes), then get a key it put before, then sleep
--pause_ms.  Every put that answered OK is recorded as acknowledged,
with its data's checksum.

Then --kills times: wait until every standby has loaded the leader's
snapshot and streams its log, kill -9 the leader, and note for each
client the time from the kill until its first call that started after
the kill answered OK (served again); then start the killed master again
(it rejoins as a standby, from a fresh snapshot of the new leader).

At the end every acknowledged put is read back (any client can read any
key) and compared with its checksum.  One line:

    master_failover kills=N ttl_s=T standbys=S clients=C served_again_s_p50=.. p99=.. max=..
        acked_puts=.. lost=.. mismatched=.. failed_calls=..
        failed_by=put:RPC_FAIL=..,get:..=..  (failed calls by operation and status)

(--json: one JSON object).  After a kill -9 the standby finds the leader
gone (its log stream ends, its RPC port refuses), ends its view and
serves without waiting for the lease or warming up, so served-again is
the standby's stream retry (200 ms), a few coordinator requests, the
take-over and the client's 200 ms poll of the view; a leader that is
alive but cut off would cost the lease's rest plus one TTL of warm-up.
Clients remount on connecting to the new leader, before their first call.

usage: bench/master_failover.py [--build build] [--kills 20] [--ttl 2]
                                [--standbys 1] [--clients 3] [--size 4096] [--json]
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from master_rss import find  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if pred():
                return
        except OSError:
            pass
        time.sleep(0.05)  # polling a condition with a deadline
    sys.exit(f"master_failover: timed out waiting for {what}")


class HaMaster:
    def __init__(self, exe, etcd, wal, ttl, logdir, n):
        self.argv = [exe, "--rpc_port=0", "--rpc_address=127.0.0.1", "--metrics_port=0",
                     "--metrics_host=127.0.0.1", "--enable_metric_reporting=false",
                     "--client_ttl=10", "--enable_ha", f"--ha_backend_connstring={etcd}",
                     f"--ha_lease_ttl_seconds={ttl}", f"--wal_dir={wal}"]
        self.logpath = os.path.join(logdir, f"master{n}.log")
        self.start()

    def start(self):
        self.log = open(self.logpath, "ab")
        start = self.log.tell()  # this run's lines only
        self.p = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=self.log)
        pat = re.compile(rb"listening rpc=(\d+) metrics=(\d+)")
        found = []

        def listening():
            with open(self.logpath, "rb") as f:
                f.seek(start)
                m = pat.search(f.read())
            if m:
                found.append(m)
            if self.p.poll() is not None:
                with open(self.logpath, "rb") as f:
                    tail = f.read()[-2000:].decode(errors="replace")
                sys.exit(f"master_failover: a master exited:\n{tail}")
            return m

        wait_for(listening, 30, "a master's listening line")
        self.rpc, self.metrics = (int(x) for x in found[-1].groups())

    def http(self, path):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics}{path}", timeout=5) as r:
            return r.read().decode()

    def metric(self, name):
        for line in self.http("/metrics").splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        return None

    def kill9(self):
        self.p.send_signal(signal.SIGKILL)
        self.p.wait()
        self.log.close()

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


class Client:
    """A store_node driven line by line; its load loop runs on a thread."""

    def __init__(self, exe, addr, logdir, n, size, pause_s):
        env = dict(os.environ, MC_MASTER_FAILOVER_TIMEOUT_MS="30000")
        self.p = subprocess.Popen(
            [exe, "--master", addr, "--metadata", addr, "--host", "127.0.0.1",
             "--segment", "256m", "--buffer", "16m", "--zbuf", "1m"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=open(os.path.join(logdir, f"client{n}.log"), "wb"), text=True, env=env)
        self.n = n
        self.size = size
        self.pause_s = pause_s
        self.lock = threading.Lock()  # one command at a time
        self.ops = []  # (start, end, ok)
        self.acked = {}  # key -> xxh3
        self.put_at = {}  # key -> (start, end) of its put
        self.failed = 0
        self.fail_codes = {}  # "put:RPC_FAIL" -> count
        self.stop = threading.Event()
        ready = self.p.stdout.readline()  # "READY hostname=..." or "FAILED ..."
        if not ready.startswith("READY"):
            sys.exit(f"master_failover: client {n} did not start: {ready.strip()}")

    def cmd(self, line):
        with self.lock:
            self.p.stdin.write(line + "\n")
            self.p.stdin.flush()
            return self.p.stdout.readline().strip()

    def loop(self):
        i = 0
        keys = []
        while not self.stop.is_set():
            key = f"c{self.n}-{i}"
            t0 = time.monotonic()
            r = self.cmd(f"put {key} {self.size} {i + 1000 * self.n}")
            t1 = time.monotonic()
            ok = r.startswith("OK") and "xxh3=" in r
            if r.startswith("OK") and not ok:
                print(f"client {self.n}: odd answer to put: {r!r}", file=sys.stderr)
            self.ops.append((t0, t1, ok))
            if ok:
                self.acked[key] = r.split("xxh3=")[1].split()[0]
                self.put_at[key] = (t0, t1)
                keys.append(key)
            else:
                self.fail("put", r)
            i += 1
            if keys:
                k = random.choice(keys)
                t0 = time.monotonic()
                r = self.cmd(f"get {k}")
                t1 = time.monotonic()
                self.ops.append((t0, t1, r.startswith("OK")))
                if not r.startswith("OK"):
                    self.fail("get", r)
            time.sleep(self.pause_s)

    def fail(self, op, reply):
        # "ERR NAME CODE ...": count by operation and status name
        parts = reply.split()
        what = f"{op}:{parts[1] if len(parts) > 1 and parts[0] == 'ERR' else reply[:20]}"
        self.failed += 1
        self.fail_codes[what] = self.fail_codes.get(what, 0) + 1

    def served_again(self, t_kill):
        """Seconds from t_kill to the end of the first OK call started after it."""
        for t0, t1, ok in list(self.ops):
            if t0 >= t_kill and ok:
                return t1 - t_kill
        return None

    def quit(self):
        try:
            self.cmd("quit")
        except (BrokenPipeError, OSError):
            pass
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--ttl", type=int, default=2)
    ap.add_argument("--standbys", type=int, default=1,
                    help="standby masters beside the leader")
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--pause_ms", type=float, default=20)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the logs and directories")
    a = ap.parse_args()
    if a.standbys < 1:
        sys.exit("master_failover: --standbys must be at least 1")
    master = find(a.build, "tools/mooncake_master")
    node = find(a.build, "tests/integration/store_node")
    etcd_exe = shutil.which("etcd")
    if not etcd_exe:
        sys.exit("master_failover: etcd-server is not installed")
    d = tempfile.mkdtemp(prefix="master_failover.")
    cport, pport = free_port(), free_port()
    etcd = subprocess.Popen(
        [etcd_exe, "--name", "b", "--data-dir", os.path.join(d, "etcd"),
         "--listen-client-urls", f"http://127.0.0.1:{cport}",
         "--advertise-client-urls", f"http://127.0.0.1:{cport}",
         "--listen-peer-urls", f"http://127.0.0.1:{pport}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{pport}",
         "--initial-cluster", f"b=http://127.0.0.1:{pport}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ep = f"127.0.0.1:{cport}"
    masters, clients = [], []
    try:
        wait_for(lambda: socket.create_connection(("127.0.0.1", cport), 0.2).close() is None,
                 30, "etcd")
        masters = [HaMaster(master, ep, os.path.join(d, f"wal{i}"), a.ttl, d, i)
                   for i in range(1 + a.standbys)]

        def leader():
            for m in masters:
                if m.p.poll() is None and m.http("/ha_status") == "serving":
                    return m
            return None

        def standby_ready():
            ld = leader()
            sb = [m for m in masters if m is not ld and m.p.poll() is None]
            return (ld is not None and len(sb) == a.standbys and
                    all(m.metric("ha_stream_synced") == 1 for m in sb) and
                    ld.metric("ha_standbys_streaming") == a.standbys)

        wait_for(standby_ready, 60, "a leader and synced standbys")
        addr = f"etcd://{ep}"
        clients = [Client(node, addr, d, i, a.size, a.pause_ms / 1000)
                   for i in range(a.clients)]
        threads = [threading.Thread(target=c.loop, daemon=True) for c in clients]
        for t in threads:
            t.start()
        served = []
        kills = []
        for k in range(a.kills):
            wait_for(standby_ready, 120, "a leader and synced standbys")
            time.sleep(1.0)  # some load on this leader first
            ld = leader()
            t_kill = time.monotonic()
            kills.append(t_kill)
            ld.kill9()
            for c in clients:
                wait_for(lambda: c.served_again(t_kill) is not None, 120,
                         f"client {c.n} served after kill {k + 1}")
                served.append(c.served_again(t_kill))
            ld.start()  # back as a standby
            if not a.json:
                print(f"kill {k + 1}: served again after "
                      f"{max(served[-len(clients):]):.2f} s (slowest client)", file=sys.stderr)
        for c in clients:
            c.stop.set()
        for t in threads:
            t.join(timeout=120)
        # every acknowledged put, read back through the current leader
        lost = mismatched = acked = 0
        reader = clients[0]
        for c in clients:
            for key, want in c.acked.items():
                acked += 1
                r = reader.cmd(f"get {key}")
                if not r.startswith("OK"):
                    lost += 1
                    if lost <= 10:
                        t0, t1 = c.put_at[key]
                        near = min(kills, key=lambda t: abs(t - t1)) if kills else 0
                        print(f"lost {key}: {r} (put ended {t1 - near:+.2f} s from a kill)",
                              file=sys.stderr)
                elif r.split("xxh3=")[1].split()[0] != want:
                    mismatched += 1
        res = {"bench": "master_failover", "kills": a.kills, "ttl_s": a.ttl,
               "standbys": a.standbys, "clients": a.clients, "size": a.size,
               "served_again_s_p50": round(pct(served, 0.5), 3),
               "served_again_s_p99": round(pct(served, 0.99), 3),
               "served_again_s_max": round(max(served), 3),
               "acked_puts": acked, "lost": lost, "mismatched": mismatched,
               "failed_calls": sum(c.failed for c in clients)}
        codes = {}
        for c in clients:
            for what, n in c.fail_codes.items():
                codes[what] = codes.get(what, 0) + n
        res["failed_by"] = ",".join(f"{w}={n}" for w, n in sorted(codes.items())) or "none"
        if a.json:
            print(json.dumps(res))
        else:
            print("master_failover " + " ".join(f"{k}={v}" for k, v in res.items()
                                                 if k != "bench"))
    finally:
        for c in clients:
            c.stop.set()
            c.quit()
        for m in masters:
            m.stop()
        etcd.kill()
        etcd.wait()
        if a.keep:
            print(f"kept {d}", file=sys.stderr)
        else:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
