#!/usr/bin/env python3
"""A checkpoint fanned out through the P2P store: one holder, 1 or 3 readers.

Starts a real etcd and P2P store peers in their own processes
(tests/python/p2p_peer.py, engines in P2PHANDSHAKE mode on loopback), has
the holder register a --size-mib checkpoint split into --shard-mib shards,
then times, alternating, --runs times each:

  single   one reader pulls it (get_replica) alone;
  fanout   three readers pull it at once (total = first get_replica call
           to last return), each choosing per shard a random holder;
  chained  one reader pulls it, then the other two at once, preferring it
           (a replica) over the holder: the P2P store's replica fan-out.

and prints the medians with fanout/single and chained/single: three
readers one after another would be 3.0.

With --netns-mbit R (as root, needs `ip netns` and `tc`), each peer runs in
its own network namespace, linked to a bridge by a veth pair rate-limited
to R Mbit/s each way (tbf on both ends), engines on TCP (MC_FORCE_TCP):
the links are the bottleneck, not the CPU copies of one host, as between
machines.  Then one reader alone is bound by the holder's link; three
readers at once can approach that time only by serving each other (the
per-shard advertising of get_replica), since the holder's link carries the
checkpoint once per reader otherwise.  Each pulled copy is checked
against the holder's bytes (blake2b, after the clock stops); replicas are
deleted between runs.  See docs/benchmarks.md.

usage: bench/p2p_fanout.py [--build build] [--size-mib 1024] [--shard-mib 64] [--runs 3]
                           [--netns-mbit R]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from etcd_proc import EtcdServer  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "bench"))
from bench_netns import require, sh, tbf  # noqa: E402


NET = "10.214.0"   # the bench's bridge subnet (--netns-mbit)
BRIDGE = "mcfanbr"


def netns_up(n, mbit):
    """A bridge at NET.1 and n namespaces mcfan0.. at NET.10+i, each behind a
    veth pair limited to mbit Mbit/s in both directions."""
    netns_down(n)
    sh(f"ip link add {BRIDGE} type bridge && ip addr add {NET}.1/24 dev {BRIDGE} && "
       f"ip link set {BRIDGE} up")
    rate = tbf(mbit)
    for i in range(n):
        ns, a, b = f"mcfan{i}", f"mcfanv{i}", f"mcfane{i}"
        sh(f"ip netns add {ns} && ip link add {a} type veth peer name {b} && "
           f"ip link set {b} netns {ns} && ip link set {a} master {BRIDGE} && "
           f"ip link set {a} up && "
           f"ip netns exec {ns} ip addr add {NET}.{10 + i}/24 dev {b} && "
           f"ip netns exec {ns} ip link set {b} up && ip netns exec {ns} ip link set lo up && "
           f"tc qdisc add dev {a} root {rate} && "
           f"ip netns exec {ns} tc qdisc add dev {b} root {rate}")


def netns_down(n):
    for i in range(n):
        sh(f"ip netns del mcfan{i}", check=False)
        sh(f"ip link del mcfanv{i}", check=False)
    sh(f"ip link del {BRIDGE}", check=False)


class Peer:
    def __init__(self, build, etcd, ns=None):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [os.path.join(build, "python"), os.path.join(ROOT, "tests", "python")]),
            MC_LOG_LEVEL=os.environ.get("MC_LOG_LEVEL", "warn"))
        endpoint, prefix = etcd.endpoint, []
        if ns is not None:
            env.update(P2P_PEER_HOST=f"{NET}.{10 + ns}", MC_FORCE_TCP="true")
            endpoint = f"{NET}.1:{etcd.client_port}"
            prefix = ["ip", "netns", "exec", f"mcfan{ns}"]
        self.proc = subprocess.Popen(
            prefix + [sys.executable, os.path.join(ROOT, "tests", "python", "p2p_peer.py"),
                      endpoint, "--p2p"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env=env)

    def send(self, op, **kw):
        self.proc.stdin.write(json.dumps(dict(op=op, **kw)) + "\n")
        self.proc.stdin.flush()

    def answer(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"peer exited with {self.proc.wait()}")
        ans = json.loads(line)
        if not ans["ok"]:
            raise RuntimeError(ans)
        return ans

    def ok(self, op, **kw):
        self.send(op, **kw)
        return self.answer()

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def pull(readers, sizes, want):
    for r in readers:
        r.send("alloc", sizes=sizes)
    for r in readers:
        r.answer()
    for r in readers:
        r.send("get", name="bench/ckpt", sizes=sizes)
    answers = [r.answer() for r in readers]
    # the pulls themselves: first get_replica call to last return (the readers'
    # clocks: one host), not the buffer set-up and checking around them
    total = max(x["end"] for x in answers) - min(x["start"] for x in answers)
    if os.environ.get("P2P_BENCH_DEBUG"):
        print("  reader seconds", [round(x["seconds"], 3) for x in answers], f"wall {total:.3f}")
    for a in answers:
        if a["digest"] != want:
            raise RuntimeError("a reader's copy differs from the holder's")
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--shard-mib", type=int, default=64)
    ap.add_argument("--buffers", type=int, default=4, help="buffers the checkpoint is made of")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--netns-mbit", type=int, default=0,
                    help="peers in network namespaces behind links of this many Mbit/s")
    a = ap.parse_args()
    size = a.size_mib << 20
    sizes = [size // a.buffers] * (a.buffers - 1) + [size - size // a.buffers * (a.buffers - 1)]
    if a.netns_mbit:
        require("p2p_fanout")
        netns_up(4, a.netns_mbit)
    with tempfile.TemporaryDirectory() as tmp:
        etcd = EtcdServer(tmp, extra_hosts=[f"{NET}.1"] if a.netns_mbit else ())
        peers = []
        ns = (lambda i: i) if a.netns_mbit else (lambda i: None)
        try:
            holder = Peer(a.build, etcd, ns(0))
            readers = [Peer(a.build, etcd, ns(1 + i)) for i in range(3)]
            peers = [holder] + readers
            for p in peers:
                p.ok("hello")
            holder.ok("register", name="bench/ckpt", sizes=sizes, shard=a.shard_mib << 20, seed=1)
            want = holder.ok("hash", name="bench/ckpt")["digest"]
            times = {"single": [], "fanout": [], "chained": []}
            for _ in range(a.runs):
                for case in times:
                    if case == "single":
                        t = pull(readers[:1], sizes, want)
                    elif case == "fanout":
                        t = pull(readers, sizes, want)
                    else:
                        t = pull(readers[:1], sizes, want) + pull(readers[1:], sizes, want)
                    used = readers[:1] if case == "single" else readers
                    for r in used:
                        r.ok("delete", name="bench/ckpt")
                    times[case].append(t)
            med = {k: statistics.median(v) for k, v in times.items()}
            gib = size / (1 << 30)
            where = (f"network namespaces, links of {a.netns_mbit} Mbit/s" if a.netns_mbit
                     else "loopback")
            print(f"checkpoint {a.size_mib} MiB in {a.buffers} buffers, shards of {a.shard_mib} MiB,"
                  f" {where}, {a.runs} runs, medians:")
            for k, v in med.items():
                print(f"  {k:8s} {v:7.3f} s  ({gib * (1 if k == 'single' else 3) / v:6.2f} GiB/s "
                      f"delivered)  runs {' '.join(f'{x:.3f}' for x in times[k])}")
            print(f"  fanout/single {med['fanout'] / med['single']:.2f}x, "
                  f"chained/single {med['chained'] / med['single']:.2f}x (3 readers in turn: 3.00x)")
            holder.ok("unregister", name="bench/ckpt")
        finally:
            for p in peers:
                try:
                    p.close()
                except Exception:
                    p.proc.kill()
            etcd.stop()
            if a.netns_mbit:
                netns_down(4)


if __name__ == "__main__":
    main()
