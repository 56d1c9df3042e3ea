#!/usr/bin/env python3
"""CPU per object of the store's put path: client, holder and master.

Issue 12 part 4 measures the many-holder aggregate against the engine's,
and on a machine with few cores what bounds it is the CPU each put costs
every process on the way.  This counts it, phase by phase, where a
throughput figure on a loaded machine says little: one master, one holder
(store_bench --mode=holder) and one client (store_bench --mode=agg, a
registered window of --window bytes of --size objects, all on the holder,
TCP unless --env MC_SHM_DISABLE=0) run --rounds rounds of "put" (put_from,
one key per call), "putb" (batch_put_from, --batch keys per call) or "get"
(get_into, one key per call, of keys put untimed first) then "remove"; the
utime + stime of each process (all its threads, /proc/PID/stat) is summed
over the put phases only, and divided by the objects put.  --mode getb
measures batch gets instead (batch_get_into, --batch keys per call): each
round puts the window untimed (putb), then times --get-rounds get phases
(4, as bench/store_small.py: the first asks the master for the window's
locations, the others find them in the client's location cache).

--build takes several builds, comma-separated: each run starts a fresh set
of processes from one build, and the builds alternate run by run (A/B on a
shared machine).  --env NAME=VALUE (repeatable) applies to every process;
--env-b NAME=VALUE only to the second build's (a switch A/B with one build
given twice).  --attach CMD runs CMD (a shell command; {client},
{holder}, {master} and {pids}, comma-separated, stand for the processes'
ids) from after the untimed first round to after the last, then sends it
SIGINT: for example 'strace -c -f -o /tmp/c.txt -p {client}' or
'perf record -g -o /tmp/p.data -p {pids}'.

--count EVENTS (perf's event list, e.g. 'context-switches,raw_syscalls:sys_enter,
syscalls:sys_enter_futex' or 'instructions' where the CPU has counters)
attaches one perf stat per process, started disabled and enabled only
around the timed put phases (perf's --control fifo, acknowledged), and
prints each event's count per object put, per process: counts, unlike CPU
time, do not grow with a loaded machine's contention (wake-ups aside).
The pseudo-event "sleeps" counts the times a thread of the process blocked
(sched:sched_switch with prev_state != 0): each costs a wake-up later.

usage: bench/store_put_cpu.py [--build build] [--runs 3] [--rounds 20]
                              [--size 64k] [--window 32m] [--mode putb]
                              [--batch 32] [--env N=V] [--env-b N=V]
                              [--attach CMD] [--count EVENTS]
"""
import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import master_rss  # noqa: E402
from store_aggregate import Proc, parse_size  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    """utime + stime of every thread of pid, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Counter:
    """perf stat on one process, counting only between enable() and disable()."""

    def __init__(self, pid, events):
        self.dir = tempfile.mkdtemp(prefix="put_cpu_")
        self.out = os.path.join(self.dir, "stat.csv")
        ctl, ack = (os.path.join(self.dir, n) for n in ("ctl", "ack"))
        os.mkfifo(ctl)
        os.mkfifo(ack)
        self.names = events.split(",")
        sel = []
        for ev in self.names:  # "sleeps": switches out of a thread that blocks
            sel += (["-e", "sched:sched_switch", "--filter", "prev_state != 0"]
                    if ev == "sleeps" else ["-e", ev])
        self.p = subprocess.Popen(["perf", "stat", "-x,", *sel, "-p", str(pid),
                                   "--delay=-1", f"--control=fifo:{ctl},{ack}", "-o", self.out],
                                  start_new_session=True)
        self.ctl = open(ctl, "w")
        self.ack = open(ack)

    def _say(self, what):
        self.ctl.write(what + "\n")
        self.ctl.flush()
        a = self.ack.readline()
        if "ack" not in a:  # perf writes "ack\n" and its NUL
            sys.exit(f"store_put_cpu: perf stat did not acknowledge {what}: {a!r}")

    def enable(self):
        self._say("enable")

    def disable(self):
        self._say("disable")

    def result(self):
        """{event: count} once perf has stopped."""
        os.kill(self.p.pid, signal.SIGINT)
        self.p.wait(timeout=60)
        self.ctl.close()
        self.ack.close()
        out = {}
        with open(self.out) as f:
            rows = [ln.strip().split(",") for ln in f if not ln.startswith("#")]
        for name, t in zip(self.names, [t for t in rows if len(t) > 2]):
            try:  # perf prints the events in the order asked
                out[name] = float(t[0])
            except ValueError:
                out[name] = float("nan")  # <not supported>
        return out


def one_run(build, args, env):
    old = dict(os.environ)
    os.environ["MC_SHM_DISABLE"] = "1"  # TCP unless --env MC_SHM_DISABLE=0
    os.environ.update(env)
    sb = master_rss.find(build, "bench/store_bench")
    m = master_rss.Master(master_rss.find(build, "tools/mooncake_master",
                                          "src/master/mooncake_master"))
    procs = []
    try:
        common = [f"--master={m.addr}", f"--metadata={m.meta_uri}"]
        h = Proc([sb, "--mode=holder", *common, f"--segment={2 * args.window}"],
                 "READY hostname=")
        procs.append(h)
        c = Proc([sb, "--mode=agg", *common, f"--target={h.field('hostname')}",
                  f"--sizes={args.size}", f"--window={args.window}", f"--batch={args.batch}"],
                 "READY keys=")
        procs.append(c)
        keys = int(c.field("keys"))
        pids = {"client": c.p.pid, "holder": h.p.pid, "master": m.p.pid}
        spent = dict.fromkeys(pids, 0.0)
        wall = 0.0
        att = None
        ctrs = {k: Counter(p, args.count) for k, p in pids.items()} if args.count else {}
        for r in range(args.rounds + 1):  # the first untimed: connections, first touches
            if r == 1 and args.attach:
                att = subprocess.Popen(args.attach.format(
                    pids=",".join(str(p) for p in pids.values()), **pids), shell=True,
                    start_new_session=True)
            if args.mode in ("get", "getb"):  # the window to read, put untimed
                c.p.stdin.write("putb\n")
                if not c.readline().startswith("OK"):
                    c.fail("untimed putb failed")
            for k in ctrs if r else ():
                ctrs[k].enable()
            before = {k: cpu_s(p) for k, p in pids.items()}
            t0 = None
            for _ in range(args.get_rounds if args.mode == "getb" else 1):
                c.p.stdin.write(args.mode + "\n")
                line = c.readline()
                if not line.startswith("OK"):
                    c.fail(f"answered {line.strip()!r}")
                f = dict(t.split("=") for t in line.split()[1:])
                t0 = t0 if t0 is not None else float(f["t0"])
            after = {k: cpu_s(p) for k, p in pids.items()}
            for k in ctrs if r else ():
                ctrs[k].disable()
            if r:
                wall += float(f["t1"]) - t0
                for k in pids:
                    spent[k] += after[k] - before[k]
            c.p.stdin.write("remove\n")
            c.readline()
        if att:
            os.killpg(att.pid, signal.SIGINT)
            att.wait(timeout=60)
        n = keys * args.rounds * (args.get_rounds if args.mode == "getb" else 1)
        out = {k: v / n * 1e6 for k, v in spent.items()}
        out["total"] = sum(out.values())
        out["gbps"] = n * args.size / wall / 1e9
        for k, ctr in ctrs.items():
            for ev, v in ctr.result().items():
                out[f"{k}:{ev}"] = v / n
        return out
    finally:
        for p in procs:
            p.p.stdin.close()
            p.p.wait(timeout=30)
        m.stop()
        os.environ.clear()
        os.environ.update(old)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="builds, comma-separated (A/B)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=20, help="put phases per run")
    ap.add_argument("--size", default="64k")
    ap.add_argument("--window", default="32m")
    ap.add_argument("--mode", default="putb", choices=("put", "putb", "get", "getb"))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--get-rounds", type=int, default=4,
                    help="getb: batch get phases per put (the first asks the master)")
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--env-b", action="append", default=[])
    ap.add_argument("--attach", help="a command run beside the timed rounds (see above)")
    ap.add_argument("--count", help="perf events counted per object, per process (see above)")
    args = ap.parse_args()
    args.size = parse_size(args.size)
    args.window = parse_size(args.window) // args.size * args.size
    if args.window // args.size % args.batch:
        sys.exit("store_put_cpu: --window must hold a multiple of --batch objects")
    builds = args.build.split(",")
    env = dict(e.split("=", 1) for e in args.env)
    env_b = dict(env, **dict(e.split("=", 1) for e in args.env_b))
    res = {}
    for r in range(args.runs):
        order = list(enumerate(builds))
        for i, b in (order if r % 2 == 0 else order[::-1]):
            o = one_run(b, args, env_b if i == 1 else env)
            res.setdefault(i, []).append(o)
            print(f"run {r + 1} {b}{' (env-b)' if i == 1 and args.env_b else ''}: "
                  + " ".join(f"{k} {v:.1f}" for k, v in o.items() if k != "gbps" and ":" not in k)
                  + f" us/object, {o['gbps']:.2f} GB/s, load {os.getloadavg()[0]:.1f}",
                  file=sys.stderr, flush=True)
    print(f"{args.mode} of {args.size} B objects, {args.rounds} x {args.window // args.size} "
          f"per run, medians of {args.runs} runs (CPU us per object)")
    print("| build | client | holder | master | total | GB/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for i, b in enumerate(builds):
        med = {k: statistics.median(o[k] for o in res[i]) for k in res[i][0]}
        print(f"| {b}{' ' + ' '.join(args.env_b) if i == 1 and args.env_b else ''} | "
              f"{med['client']:.1f} | {med['holder']:.1f} | {med['master']:.1f} | "
              f"{med['total']:.1f} | {med['gbps']:.2f} |")
    if not args.count:
        return
    print(f"\nevents per object {'read' if args.mode in ('get', 'getb') else 'put'} (medians of {args.runs} runs)")
    print("| build | event | client | holder | master |")
    print("|---|---|---:|---:|---:|")
    for i, b in enumerate(builds):
        evs = [k.split(":", 1)[1] for k in res[i][0] if k.startswith("client:")]
        for ev in evs:
            med = [statistics.median(o.get(f"{p}:{ev}", float("nan")) for o in res[i])
                   for p in ("client", "holder", "master")]
            print(f"| {b} | {ev} | " + " | ".join(f"{v:.3f}" for v in med) + " |")


if __name__ == "__main__":
    main()
