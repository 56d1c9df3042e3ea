"""Network namespaces behind rate-limited veth pairs, for the benches that
want a network, not this host's cores, to bound a transfer
(bench/store_verify.py, bench/store_aggregate.py, bench/p2p_fanout.py).

A Link is one namespace NS behind one veth pair: NET.1 is this namespace's
end, NET.2 the other's, and each end's egress is limited to R Mbit/s by a
tbf qdisc, so each direction is limited to R.  The caller runs what belongs
on the far side with link.exec(argv) (`ip netns exec NS ...`, which execs:
the child's pid is the program's own).

Needs root, `ip` (iproute2) and `tc`; require() refuses with a message
naming what is missing.  Use a Link as a context manager: it is taken down
on leaving the block, on an exception, on sys.exit and on SIGTERM or SIGHUP
(turned into SystemExit while the link is up), and up() first removes what
a killed earlier run may have left under the same names.
"""
import os
import shutil
import signal
import subprocess
import sys


def sh(cmd, check=True):
    subprocess.run(cmd, shell=True, check=check, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL if not check else None)


def tbf(mbit):
    """A tc qdisc that limits a device's egress to mbit Mbit/s."""
    return f"tbf rate {mbit}mbit burst {max(64, mbit // 8)}kb latency 100ms"


def require(prog, option="--netns-mbit"):
    """Exit with a clear message unless this process can make namespaces."""
    missing = [t for t in ("ip", "tc") if not shutil.which(t)]
    if missing:
        sys.exit(f"{prog}: {option} needs {' and '.join(missing)} (iproute2) on PATH")
    if os.geteuid() != 0:
        sys.exit(f"{prog}: {option} makes network namespaces and veth links: run it as root")


def parse_rates(s, option="--netns-mbit"):
    """'10000,25000' -> [10000, 25000]; '' -> [] (no namespaces)."""
    try:
        rates = [int(r) for r in s.split(",") if r.strip()]
    except ValueError:
        sys.exit(f"{option}: {s!r} is not a list of Mbit/s")
    if s and (not rates or any(r <= 0 for r in rates)):
        sys.exit(f"{option}: every rate must be a positive number of Mbit/s")
    return rates


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


class Link:
    """Namespace ns behind the veth pair veth = (this end, far end) on net/24."""

    def __init__(self, ns, net, veth):
        self.ns, self.net, self.veth = ns, net, veth
        self.here, self.there = f"{net}.1", f"{net}.2"
        self._saved = None

    def up(self, mbit):
        self.down()
        a, b, ns = self.veth[0], self.veth[1], self.ns
        self._saved = {s: signal.signal(s, _terminate) for s in (signal.SIGTERM, signal.SIGHUP)}
        try:
            sh(f"ip netns add {ns} && ip link add {a} type veth peer name {b} && "
               f"ip link set {b} netns {ns} && ip addr add {self.here}/24 dev {a} && "
               f"ip link set {a} up && ip netns exec {ns} ip addr add {self.there}/24 dev {b} && "
               f"ip netns exec {ns} ip link set {b} up && ip netns exec {ns} ip link set lo up")
            self.rate(mbit)
        except BaseException:
            self.down()
            raise
        return self

    def rate(self, mbit):
        """Both ends limited to mbit Mbit/s from now on (replaced in place)."""
        a, b = self.veth
        sh(f"tc qdisc replace dev {a} root {tbf(mbit)} && "
           f"ip netns exec {self.ns} tc qdisc replace dev {b} root {tbf(mbit)}")

    def down(self):
        sh(f"ip netns del {self.ns}", check=False)
        sh(f"ip link del {self.veth[0]}", check=False)
        if self._saved:
            for s, h in self._saved.items():
                signal.signal(s, h)
            self._saved = None

    def exec(self, argv):
        return ["ip", "netns", "exec", self.ns, *argv]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.down()
        return False
