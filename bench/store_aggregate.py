#!/usr/bin/env python3
"""Many store clients against many holders on one host, beside the engine alone.

Issue 12 part 4: 8 client processes putting and getting against 4 holder
processes over TCP, their aggregate held against the engine's aggregate with
the same memory traffic (target: the store at >= 80% of the engine).

The store side: one mooncake_master (embedded metadata server, free ports),
--holders holder processes (bench/store_bench --mode=holder, each mounting a
segment) and --clients client processes (bench/store_bench --mode=agg, no
segment), client i placing every object on holder i % holders.  Each client
owns a window of --window bytes of SIZE-byte objects in registered memory.
The engine side: --holders targets (bench/te_call_bench --serve) and
--clients initiators (bench/te_call_bench --agg), initiator i writing and
reading its own --window bytes of target i % holders in SIZE-byte requests,
one request per synchronous call, as a store client's put_from and get_into
move one object per call.  With --batch N (N > 1) every store client puts
with batch_put_from and gets with batch_get_into of N keys per call
(store_bench's "putb" and "getb") and every initiator moves N SIZE-byte
requests per synchronous call (one batch of N requests: te_call_bench
--batch N), walking its window the same way; the window must then hold a
multiple of N objects.  Same processes per side, same bytes per call,
same bytes per phase, same working set, the same connections (each client
or initiator its own engine, MC_TCP_LANES_PER_PEER lanes to its one holder
or target) and target memory faulted in before the first phase on both
sides (a holder's segment by MC_STORE_PREFAULT=mount, the default; a
target's buffer by a memset).  What the engine side does not mirror is the
store's own work per object, which is what the ratio measures: its master
exchanges (PutStart and PutEnd, or one PutCredit with MC_STORE_PUT_CREDIT;
GetReplicaList), the checksum of the bytes (MC_STORE_VERIFY) and the
trailer of chunk sums each object carries (a second request of a few
bytes beside the value, riding the value's connection).  One object per
call, those master exchanges are a round trip per object; batched, one
per call of N objects, as a KV-cache connector moving a request's blocks
pays them.

Both sides run the same phases, started in every client at once by this
driver (one line to each client's stdin, then one answer from each):

  store:  put (put_from every key)   get (get_into every key, data checked)
          (--batch N: putb and getb, N keys per batch call)
          remove (one forced batch remove: untimed; the next round's keys)
  engine: write (every block)        read (every block)

A phase lasts from the earliest client's start to the latest client's end
(CLOCK_MONOTONIC, printed by each client), so a client scheduled late counts
against its side.  Phases repeat until --duration seconds of timed phases
have passed; a run's aggregate is the phase bytes over the phase time.
One untimed round of each side comes first (connections, first touches of
the memory).  Runs alternate the two sides (--runs of each, the order
flipped every run), and each figure is the median over the runs.

Every process shares this host's cores: with 2 cores, 8 clients and 4
holders (or targets) are time-sliced, so the figures measure the whole path
under that contention; the output says how many cores there were.

The engines are kept on TCP (MC_SHM_DISABLE=1 in every process's
environment) unless --shm is given.

CPU per object: the utime + stime (/proc/PID/stat) of a side's processes
(store: clients, holders and the master; engine: initiators and targets)
over its timed phases, divided by the objects (requests) those phases moved,
per size and direction; the store's untimed remove phases are not counted.
On a small host where every process shares the cores, the loopback
aggregate's ratio is about the inverse of this ratio.

--netns-mbit R[,R...] (root; needs `ip` and `tc`) measures the same shape a
second time with a network as the bound rather than this host's cores: the
master, the holders and the engine's targets run in their own network
namespace (bench/bench_netns.py), the clients and the initiators stay in
this one, and the two are joined by one veth pair limited to R Mbit/s each
way (tbf), the same link for both sides.  With a list, every run measures
both sides at each rate in turn (the rate changed in place, the order of
the rates flipped every run).  The loopback figures come first, as without
the option; the table of rates follows them.  On a 2-core host a rate is
the bound only where it is below what the cores allow (at 64 KiB a few
Gbit/s); the output prints each rate in GB/s beside the figures.

--engine-checksum runs the engine's side with its own end-to-end check
(MC_TE_CHECKSUM=1 in the targets' and initiators' environment only: the
initiator hashes each request's bytes, the target checks them, XXH3-64),
so that both sides hash every byte they move, as the store does with
MC_STORE_VERIFY on (its default): the ratio then compares the two with
the same integrity work rather than the store's checksum against none.

--get-rounds N runs N get (read) phases after each put (write) phase, so
most gets are of keys read before (what MC_STORE_LOCATION_CACHE serves
without the master; it is read from the environment of every process).

usage: bench/store_aggregate.py [--build build] [--clients 8] [--holders 4]
                                [--sizes 1m,64k] [--window 32m] [--duration 3]
                                [--runs 3] [--get-rounds 1] [--batch 1] [--json]
                                [--quick] [--shm] [--netns-mbit R[,R...]]
                                [--engine-checksum]
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_netns  # noqa: E402
import master_rss  # noqa: E402

MIB = 1 << 20
# --netns-mbit: the servers' namespace; NET.1 the clients' end, NET.2 the servers'
LINK = bench_netns.Link("mcag0", "10.216.0", ("mcagh", "mcagn"))
TICK = os.sysconf("SC_CLK_TCK")


def parse_size(s):
    """'64k', '1m', '2g' or a plain number of bytes."""
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    s = s.strip().lower()
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def size_label(n):
    return f"{n >> 20} MiB" if n >= MIB and n % MIB == 0 else f"{n >> 10} KiB"


def parse_reply(line):
    """'OK bytes=N t0=S t1=S p99_us=X' -> dict of floats; exit on anything else."""
    f = line.split()
    if not f or f[0] != "OK":
        sys.exit(f"store_aggregate: a client answered {line.strip()!r}")
    return {k: float(v) for k, v in (x.split("=", 1) for x in f[1:])}


class Proc:
    """A child with a line protocol on stdin/stdout; stderr to a temp file."""

    def __init__(self, argv, ready, env=None):
        self.argv = argv
        self.err = tempfile.TemporaryFile()
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.err, text=True, bufsize=1, env=env)
        self.ready = self.readline()
        if not self.ready.startswith(ready):
            self.fail(f"did not print {ready}")

    def readline(self):
        line = self.p.stdout.readline()
        if not line:
            self.fail("exited")
        return line

    def fail(self, what):
        self.p.poll()
        self.err.seek(0)
        tail = self.err.read().decode(errors="replace")[-2000:]
        sys.exit(f"store_aggregate: {shlex.join(self.argv)}: {what} "
                 f"(status {self.p.returncode}):\n{tail}")

    def field(self, name):
        for tok in self.ready.split():
            if tok.startswith(name + "="):
                return tok.split("=", 1)[1]
        self.fail(f"no {name}= in {self.ready.strip()!r}")

    def stop(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.close()  # end of input: every role exits
            except BrokenPipeError:
                pass
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.err.close()


def cpu_s(pids):
    """utime + stime of the processes pids (all their threads), in seconds."""
    ticks = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        ticks += int(rest[11]) + int(rest[12])  # fields 14 and 15
    return ticks / TICK


def phase(clients, cmd, pids=()):
    """Start cmd in every client, then collect: (bytes, seconds, worst p99 us,
    CPU seconds of the processes pids meanwhile)."""
    c0 = cpu_s(pids)
    for c in clients:
        c.p.stdin.write(cmd + "\n")
        c.p.stdin.flush()
    rs = [parse_reply(c.readline()) for c in clients]
    if "bytes" not in rs[0]:
        return None
    span = max(r["t1"] for r in rs) - min(r["t0"] for r in rs)
    return (sum(r["bytes"] for r in rs), span, max(r["p99_us"] for r in rs),
            cpu_s(pids) - c0)


def side_cmds(store, batch=1):
    """The put (write) and get (read) commands of a side's clients."""
    if not store:
        return "write", "read"
    return ("putb", "getb") if batch > 1 else ("put", "get")


def run_side(clients, store, duration, get_rounds=1, pids=(), size=1, batch=1):
    """Phases until duration seconds of them have passed; aggregate GB/s each way
    and the CPU time of the processes pids per size-byte object.
    get_rounds: get (read) phases per put (write) phase; batch: keys per store
    call (the engine's initiators take theirs from the command line)."""
    acc = {"put": [0, 0.0, 0.0, 0.0], "get": [0, 0.0, 0.0, 0.0]}
    put, get = side_cmds(store, batch)
    while acc["put"][1] + acc["get"][1] < duration:
        for op, cmd in [("put", put)] + [("get", get)] * get_rounds:
            b, t, p99, cpu = phase(clients, cmd, pids)
            a = acc[op]
            a[0] += b
            a[1] += t
            a[2] = max(a[2], p99)
            a[3] += cpu
        if store:
            phase(clients, "remove")
    return {op: {"gbps": a[0] / a[1] / 1e9, "p99_us": a[2], "bytes": a[0],
                 "cpu_us": a[3] * 1e6 / (a[0] / size)}
            for op, a in acc.items()}


def segment_bytes(args, sizes, region):
    """A holder's segment: twice the live bytes it serves (region), so that the
    allocator never runs short on a removed round; with --batch, also room
    for the put credits its clients may hold (MC_STORE_PUT_CREDIT blocks of
    each size, 64 by default, granted 32 at a time by a batch put): granted
    blocks count as used, and above the master's eviction watermark (0.90)
    they would make it evict the objects just put."""
    seg = 2 * region
    if args.batch > 1:
        try:
            credit = int(os.environ.get("MC_STORE_PUT_CREDIT", "64"))
        except ValueError:
            credit = 64
        per_holder = -(-args.clients // args.holders)
        seg += per_holder * max(credit, 0) * sum(s + 4096 for s in sizes)
    return seg


def measure(args, sizes, window, rates=(0,)):
    """One sitting of both sides: {(mbit, side, size, op): [run results]}, the
    commands.  rates (0,): every process here, over loopback; else the
    servers in LINK's namespace behind a link of each rate in turn."""
    netns = rates != (0,)
    far = LINK.exec if netns else (lambda argv: argv)
    host = [f"--host={LINK.here}"] if netns else []
    bat = [f"--batch={args.batch}"] if args.batch > 1 else []
    far_host = [f"--host={LINK.there}"] if netns else []
    per_holder = -(-args.clients // args.holders)  # clients per holder, rounded up
    region = per_holder * window  # bytes each holder or target serves at once
    sb = master_rss.find(args.build, "bench/store_bench")
    tb = master_rss.find(args.build, "bench/te_call_bench")
    exe = master_rss.find(args.build, "tools/mooncake_master", "src/master/mooncake_master")
    if netns:
        m = master_rss.Master(exe, [f"--rpc_address={LINK.there}",
                                    f"--http_metadata_server_host={LINK.there}"],
                              prefix=LINK.exec([]))
        m.addr = f"{LINK.there}:{m.rpc}"
        m.meta_uri = f"http://{LINK.there}:{m.meta}/metadata"
    else:
        m = master_rss.Master(exe)
    procs, results, cmds = [], {}, {}
    try:
        common = [f"--master={m.addr}", f"--metadata={m.meta_uri}"]
        seg = segment_bytes(args, sizes, region)
        holders = [Proc(far([sb, "--mode=holder", *common, f"--segment={seg}",
                             *far_host]), "READY hostname=") for _ in range(args.holders)]
        eng_env = dict(os.environ, MC_TE_CHECKSUM="1") if args.engine_checksum else None
        targets = [Proc(far([tb, "--serve", f"--size={region}", *far_host]), "READY name=",
                        env=eng_env) for _ in range(args.holders)]
        procs += holders + targets
        cmds["holder"] = shlex.join(holders[0].argv)
        cmds["target"] = shlex.join(targets[0].argv)
        for size in sizes:
            n = window // size * size
            sc = [Proc([sb, "--mode=agg", *common,
                        f"--target={holders[i % args.holders].field('hostname')}",
                        f"--sizes={size}", f"--window={n}", *bat, *host], "READY keys=")
                  for i in range(args.clients)]
            procs += sc
            ec = []
            for i in range(args.clients):
                t = targets[i % args.holders]
                addr = int(t.field("addr"), 16) + (i // args.holders) * n
                ec.append(Proc([tb, "--agg", f"--peer={t.field('name')}", f"--addr={addr:#x}",
                                f"--block={size}", f"--window={n}", *bat, *host], "READY",
                                env=eng_env))
            procs += ec
            cmds[f"store {size}"] = shlex.join(sc[0].argv)
            cmds[f"engine {size}"] = shlex.join(ec[0].argv)
            pids = {"store": [c.p.pid for c in sc + holders] + [m.p.pid],
                    "engine": [c.p.pid for c in ec + targets]}
            # one untimed round of each side first: connections, first touches
            for side, cl in (("store", sc), ("engine", ec)):
                for cmd in side_cmds(side == "store", args.batch) + (
                        ("remove",) if side == "store" else ()):
                    phase(cl, cmd)
            for r in range(args.runs):
                print(f"store_aggregate: {size_label(size)} run {r + 1}/{args.runs}"
                      + (f" (links of {'/'.join(map(str, rates))} Mbit/s)" if netns else ""),
                      file=sys.stderr, flush=True)
                order = (("store", sc), ("engine", ec))
                for mbit in (rates if r % 2 == 0 else rates[::-1]):
                    if len(rates) > 1:
                        LINK.rate(mbit)
                    for side, cl in (order if r % 2 == 0 else order[::-1]):
                        res = run_side(cl, side == "store", args.duration, args.get_rounds,
                                       pids[side], size, args.batch)
                        for op, v in res.items():
                            results.setdefault((mbit, side, size, op), []).append(v)
            for c in sc + ec:
                c.stop()
                procs.remove(c)
    finally:
        for p in procs:
            p.stop()
        m.stop()
    return results, cmds


def medians(results):
    return {k: {"gbps": statistics.median(x["gbps"] for x in v),
                "p99_us": statistics.median(x["p99_us"] for x in v),
                "cpu_us": statistics.median(x["cpu_us"] for x in v),
                "runs": [round(x["gbps"], 4) for x in v]}
            for k, v in results.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--holders", type=int, default=4)
    ap.add_argument("--sizes", default="1m,64k", help="object (and request) sizes")
    ap.add_argument("--window", default="32m", help="bytes each client puts and gets per phase")
    ap.add_argument("--duration", type=float, default=3.0,
                    help="seconds of timed phases per run and side")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--get-rounds", type=int, default=1,
                    help="get (read) phases per put (write) phase: gets of keys read before")
    ap.add_argument("--batch", type=int, default=1,
                    help="objects per call on both sides: store batch_put_from / "
                         "batch_get_into of N keys, engine N requests per synchronous call")
    ap.add_argument("--engine-checksum", action="store_true",
                    help="the engine's side with MC_TE_CHECKSUM=1 (both sides hash every byte)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="one short run (smoke)")
    ap.add_argument("--shm", action="store_true",
                    help="let the engines use the same-host transport (default: TCP only)")
    ap.add_argument("--netns-mbit", default="",
                    help="also run with the servers in their own network namespace behind "
                         "a link of R Mbit/s (root; a comma-separated list: each rate)")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.duration = 1, 0.5
    rates = bench_netns.parse_rates(args.netns_mbit)
    if rates:
        if args.shm:
            sys.exit("store_aggregate: --netns-mbit and --shm exclude each other")
        bench_netns.require("store_aggregate")
    if not args.shm:
        os.environ["MC_SHM_DISABLE"] = "1"  # inherited by every process below
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    window = parse_size(args.window)
    if args.clients < 1 or args.holders < 1 or min(sizes) < 8 or window < max(sizes):
        sys.exit("store_aggregate: bad --clients, --holders, --sizes or --window")
    if args.batch < 1:
        sys.exit("store_aggregate: --batch must be at least 1")
    for size in sizes:
        if window // size % args.batch:
            sys.exit(f"store_aggregate: --window {window} holds {window // size} objects of "
                     f"{size} bytes, not a multiple of --batch {args.batch}")
    ncpu = os.cpu_count()
    load0 = os.getloadavg()[0]

    results, cmds = measure(args, sizes, window)
    if rates:
        with LINK.up(rates[0]):
            more, cmds_ns = measure(args, sizes, window, tuple(rates))
        results.update(more)
        cmds.update({f"{k} (--netns-mbit)": v for k, v in cmds_ns.items()})
    med = medians(results)
    load1 = os.getloadavg()[0]

    if args.json:
        print(json.dumps({"cpus": ncpu, "clients": args.clients, "holders": args.holders,
                          "window": window, "duration": args.duration, "batch": args.batch,
                          "transport": "default" if args.shm else "tcp",
                          "load_before": load0, "load_after": load1,
                          "netns_mbit": rates,
                          "results": {f"{k[1]}/{k[2]}/{k[3]}": v for k, v in med.items()
                                      if k[0] == 0},
                          "netns": {f"{k[0]}/{k[1]}/{k[2]}/{k[3]}": v for k, v in med.items()
                                    if k[0]}}))
        return
    print(f"{args.clients} clients x {args.holders} holders on one host with {ncpu} CPU cores "
          f"(every process shares them), window {window >> 20} MiB per client, "
          f"{args.duration:g} s of phases per run, medians of {args.runs} alternating runs, "
          + (f"{args.batch} objects per call, " if args.batch > 1 else "") +
          f"transport={'default (same-host allowed)' if args.shm else 'tcp'}, "
          f"load average {load0:.2f} before, {load1:.2f} after")
    print()
    print("| size | op | store GB/s | engine GB/s | % of engine | store p99 us | "
          "engine p99 us |")
    print("|---|---|---|---|---|---|---|")
    for size in sizes:
        for op, eop in (("put", "write"), ("get", "read")):
            s, e = med[(0, "store", size, op)], med[(0, "engine", size, op)]
            print(f"| {size_label(size)} | {op} / {eop} | {s['gbps']:.2f} | {e['gbps']:.2f} | "
                  f"{100 * s['gbps'] / e['gbps']:.0f}% | {s['p99_us']:.0f} | "
                  f"{e['p99_us']:.0f} |")
    print()
    print("CPU per object over loopback (utime + stime of every process of the side over "
          "its timed phases / objects moved; store: clients, holders, master; engine: "
          "initiators, targets):")
    print()
    print("| size | op | store CPU us/object | engine CPU us/object | store / engine |")
    print("|---|---|---|---|---|")
    for size in sizes:
        for op, eop in (("put", "write"), ("get", "read")):
            s, e = med[(0, "store", size, op)], med[(0, "engine", size, op)]
            print(f"| {size_label(size)} | {op} / {eop} | {s['cpu_us']:.1f} | "
                  f"{e['cpu_us']:.1f} | {s['cpu_us'] / e['cpu_us']:.2f}x |")
    if rates:
        print()
        print("Across network namespaces (master, holders and targets behind one veth pair "
              "limited to R Mbit/s each way; clients and initiators on this side), "
              "beside loopback (CPU per object only in --json: behind a link it counts "
              "the busy polls that wait on it):")
        print()
        print("| size | op | Mbit/s (GB/s) | store GB/s | engine GB/s | % of engine | "
              "loopback % |")
        print("|---|---|---|---|---|---|---|")
        for size in sizes:
            for op, eop in (("put", "write"), ("get", "read")):
                lo = (med[(0, "store", size, op)]["gbps"] /
                      med[(0, "engine", size, op)]["gbps"])
                for mbit in rates:
                    s, e = med[(mbit, "store", size, op)], med[(mbit, "engine", size, op)]
                    print(f"| {size_label(size)} | {op} / {eop} | {mbit} ({mbit / 8000:.2f}) | "
                          f"{s['gbps']:.2f} | {e['gbps']:.2f} | "
                          f"{100 * s['gbps'] / e['gbps']:.0f}% | {100 * lo:.0f}% |")
    print()
    print("target: store aggregate >= 80% of the engine's (same processes, bytes per call, "
          "bytes per phase)")
    if args.batch > 1:
        print(f"store: batch_put_from / batch_get_into of {args.batch} keys per call; engine: "
              f"{args.batch} requests per synchronous call (one batch: new, submit, wait, "
              "discard)")
    else:
        print("store: put_from / get_into one key per call; engine: one request per "
              "synchronous call (batch new, submit, wait)")
    print("p99: the worst client's per-call p99 over the runs' phases (median over runs)")
    print("checksums: store MC_STORE_VERIFY=" + os.environ.get("MC_STORE_VERIFY", "1 (default)")
          + "; engine MC_TE_CHECKSUM=" + ("1" if args.engine_checksum
                                          else os.environ.get("MC_TE_CHECKSUM", "0 (default)")))
    print(f"get phases per put phase: {args.get_rounds}; MC_STORE_LOCATION_CACHE="
          f"{os.environ.get('MC_STORE_LOCATION_CACHE', 'unset')}")
    if ncpu and ncpu < args.clients + args.holders:
        print(f"note: {ncpu} cores for {args.clients + args.holders + 1} processes: "
              "figures include time-slicing")
    if load0 > (ncpu or 1) / 2 or load1 > (ncpu or 1) / 2:
        print("note: load average above half the cores: figures are provisional")
    print()
    print("commands (one of each; client i targets holder i % holders; "
          "MC_SHM_DISABLE=1 unless --shm):")
    for k, v in cmds.items():
        print(f"  {k}: {v}")


if __name__ == "__main__":
    main()
