#!/usr/bin/env python3
"""mooncake_conductor's scheduling latency on loopback (issue 17, "Performance").

Starts mooncake_master (free ports, --mount_probe=false: bench/conductor_bench
mounts fake segments, as store_proto_bench does) and mooncake_conductor
pointed at it (--port=0, its port read from its "listening" line), then runs
bench/conductor_bench against both with their pids (for the CPU time per
call) and every argument this script does not know, and stops them.  The
bench's output (a table, or one JSON object with --json) is passed through.

usage: bench/conductor_bench.py [--build build] [--conductor-arg=--http_threads=4 ...]
                                [--master-arg=...] [--build-b DIR [--conductor-b-arg=...]]
                                [--master-busy-poll-us=300]
                                [conductor_bench flags]
e.g.   bench/conductor_bench.py --blocks=1000000 --duration=10 --runs=3 --concurrency=8
       bench/conductor_bench.py --blocks=20000 --duration=5 --runs=1   # a smoke run
       bench/conductor_bench.py --build base/build-rel --build-b build-rel ...  # A/B

With --build-b a second conductor (B, that build's mooncake_conductor, with
--conductor-b-arg flags) runs beside the first (A, --build's) on the same
master and blocks, and the bench measures them alternately in the same run.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import master_rss  # noqa: E402

LISTEN_RE = re.compile(r"mooncake_conductor listening port=(\d+)")


class Conductor:
    """mooncake_conductor on a free port; its stderr is kept for errors."""

    def __init__(self, exe, master_addr, extra, env=None):
        argv = [exe, "--port=0", "--host=127.0.0.1", f"--master_server_address={master_addr}",
                *extra]
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, **(env or {})))
        self.log = []
        for line in self.p.stderr:  # bounded by the conductor's exit
            self.log.append(line)
            m = LISTEN_RE.search(line)
            if m:
                self.port = int(m.group(1))
                break
        else:
            self.p.wait()
            sys.exit(f"mooncake_conductor did not start (rc={self.p.returncode}):\n"
                     + "".join(self.log[-20:]))
        # keep draining its stderr so that it never blocks on a full pipe
        self.drain = threading.Thread(target=lambda: self.log.extend(self.p.stderr), daemon=True)
        self.drain.start()
        self.addr = f"127.0.0.1:{self.port}"

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        return self.p.returncode


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--conductor-arg", action="append", default=[],
                    help="one flag for mooncake_conductor (repeatable)")
    ap.add_argument("--master-arg", action="append", default=[],
                    help="one flag for mooncake_master (repeatable)")
    ap.add_argument("--build-b", help="a second build whose conductor is measured as B")
    ap.add_argument("--conductor-b-arg", action="append", default=[],
                    help="one flag for conductor B (repeatable)")
    ap.add_argument("--conductor-b-env", action="append", default=[], metavar="NAME=VALUE",
                    help="one environment variable for conductor B only (repeatable)")
    ap.add_argument("--conductor-log", help="write the conductors' stderr to this file at the end")
    ap.add_argument("--master-busy-poll-us", type=int,
                    help="the master's RPC busy-poll window in us, through MC_MASTER_BUSY_POLL_US "
                         "(masters of any build read it): default that variable's value, else "
                         "300, as a master behind a conductor is to run (docs/conductor.md)")
    args, rest = ap.parse_known_args()
    if args.master_busy_poll_us is not None:
        os.environ["MC_MASTER_BUSY_POLL_US"] = str(args.master_busy_poll_us)
    else:
        os.environ.setdefault("MC_MASTER_BUSY_POLL_US", "300")
    print(f"# master busy poll: {os.environ['MC_MASTER_BUSY_POLL_US']} us", flush=True)
    master_exe = master_rss.find(args.build, "tools/mooncake_master")
    conductor_exe = master_rss.find(args.build, "tools/mooncake_conductor")
    bench = master_rss.find(args.build, "bench/conductor_bench")
    # a long client_ttl: the bench pings every second, but the loader of 1 M
    # blocks on a loaded machine should not race the master's sweep
    m = master_rss.Master(master_exe, ["--client_ttl=60", *args.master_arg])
    c = cb = None
    rc = 1
    try:
        c = Conductor(conductor_exe, m.addr, args.conductor_arg)
        b_args = []
        if args.build_b:
            cb = Conductor(master_rss.find(args.build_b, "tools/mooncake_conductor"), m.addr,
                           args.conductor_b_arg,
                           dict(kv.split("=", 1) for kv in args.conductor_b_env))
            b_args = [f"--conductor-b={cb.addr}", f"--conductor-b-pid={cb.p.pid}"]
        r = subprocess.run([bench, f"--master={m.addr}", f"--conductor={c.addr}",
                            f"--master-pid={m.p.pid}", f"--conductor-pid={c.p.pid}", *b_args,
                            *rest])
        rc = r.returncode
    finally:
        for name, x in (("A", c), ("B", cb)):
            if x is not None and x.stop() not in (0, None):
                sys.stderr.write("mooncake_conductor exited badly:\n" + "".join(x.log[-20:]))
                rc = rc or 1
            if x is not None and args.conductor_log:
                x.drain.join(timeout=10)
                with open(args.conductor_log, "a", encoding="utf-8") as f:
                    f.writelines(f"{name}: {line}" for line in x.log)
        m.stop()
    return rc


if __name__ == "__main__":
    sys.exit(main())
