#!/usr/bin/env python3
"""Counts per object of store_aggregate.py's shape, per kind of process.

bench/store_aggregate.py times 8 store clients against 4 holders beside 8
engine initiators against 4 targets; on a small host what bounds both is
the CPU each object costs every process, and a loaded host's timings say
little.  This runs one side of the same shape at a time (--clients
processes of store_bench --mode=agg against --holders of --mode=holder and
one master; or with --engine, te_call_bench --agg against --serve, the
same pairing: client i on holder i % holders), TCP only, --size objects
(64 KiB) in windows of --window bytes per client, and attaches one perf
stat per process (store_put_cpu.Counter), enabled only around the timed
phases: --rounds put (write) phases, then --rounds get (read) phases of
keys just put.  It prints each event summed over the processes of a kind
(client, holder, master; initiator, target) per object moved, put and
get apart; task-clock as microseconds.

--build takes several builds, comma-separated: each is measured in turn,
the order flipped every run (--runs), for an A/B on a shared machine.
--record DIR also records cpu-clock samples with call graphs per kind and
direction (DIR/BUILD_INDEX-RUN-put-client.data ...), for perf report.
Environment variables (MC_*_BUSY_POLL_US, MC_STORE_VERIFY ...) pass to
every process.  Needs perf and permission to attach (root).

usage: bench/agg_count.py [--build build] [--engine] [--clients 8] [--holders 4]
                          [--size 64k] [--window 32m] [--rounds 3] [--runs 1]
                          [--count EVENTS] [--record DIR]
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import master_rss  # noqa: E402
import store_aggregate as sa  # noqa: E402
from store_put_cpu import Counter  # noqa: E402

EVENTS = "task-clock,context-switches,raw_syscalls:sys_enter"


class Recorder:
    """perf record -g of some processes, recording only between enable() and disable()."""

    def __init__(self, pids, out):
        self.dir = tempfile.mkdtemp(prefix="agg_rec_")
        ctl, ack = (os.path.join(self.dir, n) for n in ("ctl", "ack"))
        os.mkfifo(ctl)
        os.mkfifo(ack)
        self.p = subprocess.Popen(["perf", "record", "-q", "-g", "-e", "cpu-clock", "-F", "2000",
                                   "-p", ",".join(map(str, pids)), "--delay=-1",
                                   f"--control=fifo:{ctl},{ack}", "-o", out],
                                  start_new_session=True, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        self.ctl = open(ctl, "w")
        self.ack = open(ack)

    def say(self, what):
        self.ctl.write(what + "\n")
        self.ctl.flush()
        if "ack" not in self.ack.readline():
            sys.exit(f"agg_count: perf record did not acknowledge {what}")

    def stop(self):
        os.kill(self.p.pid, signal.SIGINT)
        self.p.wait(timeout=60)
        self.ctl.close()
        self.ack.close()


def start(build, args, n):
    """The side's processes: (kinds {name: [pids]}, clients, all procs, master or None)."""
    if args.engine:
        tb = master_rss.find(build, "bench/te_call_bench")
        srv = [sa.Proc([tb, "--serve", f"--size={2 * n}"], "READY name=")
               for _ in range(args.holders)]
        cl = []
        for i in range(args.clients):
            t = srv[i % args.holders]
            addr = int(t.field("addr"), 16) + (i // args.holders) * n
            cl.append(sa.Proc([tb, "--agg", f"--peer={t.field('name')}", f"--addr={addr:#x}",
                               f"--block={args.size}", f"--window={n}"], "READY"))
        kinds = {"initiator": [c.p.pid for c in cl], "target": [t.p.pid for t in srv]}
        return kinds, cl, srv + cl, None
    sb = master_rss.find(build, "bench/store_bench")
    m = master_rss.Master(master_rss.find(build, "tools/mooncake_master",
                                          "src/master/mooncake_master"))
    common = [f"--master={m.addr}", f"--metadata={m.meta_uri}"]
    per = -(-args.clients // args.holders)
    srv = [sa.Proc([sb, "--mode=holder", *common, f"--segment={2 * per * n}"], "READY hostname=")
           for _ in range(args.holders)]
    cl = [sa.Proc([sb, "--mode=agg", *common, f"--target={srv[i % args.holders].field('hostname')}",
                   f"--sizes={args.size}", f"--window={n}"], "READY keys=")
          for i in range(args.clients)]
    kinds = {"client": [c.p.pid for c in cl], "holder": [h.p.pid for h in srv],
             "master": [m.p.pid]}
    return kinds, cl, srv + cl, m


def toggle(ctr, rec, what):
    """Enable or disable every counter and recorder."""
    for cs in ctr.values():
        for c in cs:
            getattr(c, what)()
    for r in rec.values():
        r.say(what)


def one(build, bi, run, args):
    """{(op, kind): {event: count per object}} of one build."""
    n = args.window // args.size * args.size
    kinds, cl, procs, m = start(build, args, n)
    put, get = ("write", "read") if args.engine else ("put", "get")
    out = {}
    try:
        for cmd in (put, get) if args.engine else (put, get, "remove"):  # untimed
            sa.phase(cl, cmd)
        objs = len(cl) * (n // args.size) * args.rounds
        for op, cmd in (("put", put), ("get", get)):
            ctr = {k: [Counter(p, args.count) for p in ps] for k, ps in kinds.items()}
            rec = {k: Recorder(ps, os.path.join(args.record, f"{bi}-{run}-{op}-{k}.data"))
                   for k, ps in kinds.items()} if args.record else {}
            if op == "get":
                sa.phase(cl, put)
            for _ in range(args.rounds):
                toggle(ctr, rec, "enable")
                sa.phase(cl, cmd)
                toggle(ctr, rec, "disable")
                if op == "put" and not args.engine:
                    sa.phase(cl, "remove")
            if not args.engine and op == "get":
                sa.phase(cl, "remove")
            for r in rec.values():
                r.stop()
            for k, cs in ctr.items():
                tot = {}
                for c in cs:
                    for ev, v in c.result().items():
                        tot[ev] = tot.get(ev, 0.0) + v
                out[(op, k)] = {ev: v / objs for ev, v in tot.items()}
    finally:
        for p in procs:
            p.stop()
        if m:
            m.stop()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--engine", action="store_true", help="the engine's side, not the store's")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--holders", type=int, default=4)
    ap.add_argument("--size", default="64k")
    ap.add_argument("--window", default="32m")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--count", default=EVENTS, help="perf stat's events")
    ap.add_argument("--record", help="also perf record per kind into this directory")
    args = ap.parse_args()
    args.size, args.window = sa.parse_size(args.size), sa.parse_size(args.window)
    if args.clients < 1 or args.holders < 1 or args.window < args.size or args.rounds < 1:
        sys.exit("agg_count: bad --clients, --holders, --size, --window or --rounds")
    if args.record:
        os.makedirs(args.record, exist_ok=True)
    os.environ["MC_SHM_DISABLE"] = "1"
    builds = args.build.split(",")
    print(f"{'engine' if args.engine else 'store'}: {args.clients} clients x {args.holders} "
          f"servers, {args.size >> 10} KiB objects, {args.rounds} rounds; per object "
          f"(task-clock in us); load average {os.getloadavg()[0]:.1f} before")
    for run in range(args.runs):
        order = list(enumerate(builds))
        for bi, b in (order if run % 2 == 0 else order[::-1]):
            res = one(b, bi, run, args)
            print(f"run {run + 1} {b} (load {os.getloadavg()[0]:.1f}):")
            for (op, kind), evs in res.items():
                cells = [f"{ev}={v * 1000:.1f}us" if ev.startswith("task-clock") else
                         f"{ev.split(':')[-1].replace('sys_enter_', '')}={v:.2f}"
                         for ev, v in evs.items()]
                print(f"  {op} {kind:9s} " + "  ".join(cells))


if __name__ == "__main__":
    main()
