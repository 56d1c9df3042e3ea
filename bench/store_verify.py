#!/usr/bin/env python3
"""The cost of end-to-end checksums (issue 16 part 1), verification on against off.

One mooncake_master (embedded metadata server, free ports); then rounds that
alternate bench/store_bench with MC_STORE_VERIFY=1 and MC_STORE_VERIFY=0 in
its environment (the order flips every round so neither side always runs
first), each run with its own holder process so the bytes cross loopback
TCP (MC_SHM_DISABLE=1, as bench/store_compare.py), for 1 MiB and 4 MiB
objects: put_from/get_into (zero-copy), put/get (copying calls) and
batch_put_from/batch_get_into.  With verification on, every put hashes its
object (XXH3-64) and every get hashes what landed and compares.  Each
figure is the median over --runs rounds, with each side's spread (min-max);
the table shows on/off, which the issue holds to >= 95%.  The load average
is printed before and after: a figure taken with a load above half the
cores is provisional.

Over loopback on a small host the client, the holder and the master share
the cores, so every cycle the hash takes is a cycle the copies in the
kernel do not get: that figure is the CPU cost.  With --netns-mbit R (as
root, needs `ip netns` and `tc`) the holder runs in its own network
namespace behind a veth pair limited to R Mbit/s each way (tbf), the
client and the master stay in this one, and the hash has a network-bound
transfer to hide behind, as on an ordinary network.  R may be a list
(--netns-mbit 10000,25000): every round then runs both sides at each rate
in turn (the link's rate changed in place with `tc qdisc replace`, the
order of the rates and of on/off flipped every round), so the figures of
all rates come from one sitting; each row of the table names its rate.

With --cases=range, get_range reads one --range-len range (default 64
KiB) of each object at an unaligned offset (get_into_ranges): with
verification on it reads the chunks the range touches and checks each
against the writer's sums (16 KiB chunks and the object's trailer, protocol
minor 10; a minor-9 writer's 256 KiB chunks); GB/s counts the range's bytes.

usage: bench/store_verify.py [--build build] [--runs 5] [--duration 2] [--cases zc,copy,batch]
                             [--range-len 64k] [--shm] [--netns-mbit R[,R...]] [--window BYTES] [--json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import master_rss  # noqa: E402


import bench_netns  # noqa: E402

# the holder's namespace (--netns-mbit): NET.1 this namespace's end, NET.2 the holder's
LINK = bench_netns.Link("mcsv0", "10.215.0", ("mcsvh", "mcsvn"))
NS, NET = LINK.ns, LINK.net


class Holder:
    """store_bench --mode=holder in NS: its segment is where every object goes."""

    def __init__(self, build, m, env):
        argv = LINK.exec([master_rss.find(build, "bench/store_bench"), "--mode=holder",
                          f"--master={m.addr}", f"--metadata={m.meta_uri}", f"--host={NET}.2"])
        self.p = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
        line = self.p.stdout.readline()
        if not line.startswith("READY hostname="):
            self.stop()
            sys.exit(f"the holder in {NS} did not start: {line!r}")
        self.name = line.split()[1].split("=", 1)[1]

    def stop(self):
        self.p.stdin.close()
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def run_bench(build, m, verify, duration, cases, shm, netns, window, range_len):
    env = dict(os.environ, MC_STORE_VERIFY="1" if verify else "0")
    if not shm:
        env["MC_SHM_DISABLE"] = "1"
    argv = [master_rss.find(build, "bench/store_bench"), f"--master={m.addr}",
            f"--metadata={m.meta_uri}", "--runs=1", f"--duration={duration}", "--json",
            "--sizes=1m,4m", f"--cases={cases}", f"--range-len={range_len}"] + \
        ([f"--window={window}"] if window else [])
    holder = None
    if netns:
        holder = Holder(build, m, env)
        argv += [f"--target={holder.name}", f"--host={NET}.1"]
    try:
        out = subprocess.run(argv, env=env, stdout=subprocess.PIPE, check=True,
                             text=True).stdout
    finally:
        if holder:
            holder.stop()
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=2)
    ap.add_argument("--cases", default="zc,copy,batch")
    ap.add_argument("--range-len", default="64k", help="bytes of a get_range read (--cases=range)")
    ap.add_argument("--shm", action="store_true", help="let same-host engines use shm")
    ap.add_argument("--window", default="",
                    help="store_bench's --window (bytes per round; smaller for slow links)")
    ap.add_argument("--netns-mbit", default="",
                    help="holder in its own network namespace, links of R Mbit/s (root); "
                         "a comma-separated list runs each rate every round")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rates = bench_netns.parse_rates(args.netns_mbit) or [0]
    args.netns_mbit = rates[0]
    if args.netns_mbit:
        if args.shm:
            sys.exit("--netns-mbit and --shm exclude each other")
        bench_netns.require("store_verify")
        LINK.up(args.netns_mbit)

    got = {}  # (mbit, case, size, verify) -> [GB/s]
    load0 = os.getloadavg()
    extra = ([f"--rpc_address={NET}.1", f"--http_metadata_server_host={NET}.1"]
             if args.netns_mbit else [])
    try:
        m = master_rss.Master(master_rss.find(args.build, "tools/mooncake_master",
                                              "src/master/mooncake_master"), extra)
    except BaseException:
        if args.netns_mbit:
            LINK.down()
        raise
    if args.netns_mbit:
        m.addr = f"{NET}.1:{m.rpc}"
        m.meta_uri = f"http://{NET}.1:{m.meta}/metadata"
    try:
        for i in range(args.runs):
            order = (True, False) if i % 2 == 0 else (False, True)
            print(f"store_verify: round {i + 1}/{args.runs}", file=sys.stderr, flush=True)
            for mbit in (rates if i % 2 == 0 else rates[::-1]):
                if len(rates) > 1:
                    LINK.rate(mbit)
                for verify in order:
                    for j in run_bench(args.build, m, verify, args.duration, args.cases,
                                       args.shm, mbit, args.window, args.range_len):
                        if "gbps" in j:
                            got.setdefault((mbit, j["case"], j["size"], verify),
                                           []).append(j["gbps"])
    finally:
        m.stop()
        if args.netns_mbit:
            LINK.down()

    rows = []
    for (mbit, case, size, verify) in sorted(got):
        if not verify:
            continue
        ons = got[(mbit, case, size, True)]
        offs = got.get((mbit, case, size, False), [float("nan")])
        on, off = statistics.median(ons), statistics.median(offs)
        rows.append({"mbit": mbit, "case": case, "size": size, "on_gbps": round(on, 3),
                     "off_gbps": round(off, 3), "ratio": round(on / off, 3),
                     "on_min": round(min(ons), 3), "on_max": round(max(ons), 3),
                     "off_min": round(min(offs), 3), "off_max": round(max(offs), 3)})
    load1 = os.getloadavg()
    loaded = max(load0[0], load1[0]) > (os.cpu_count() or 1) / 2
    if args.json:
        print(json.dumps({"load_before": load0[0], "load_after": load1[0],
                          "cpus": os.cpu_count(), "runs": args.runs,
                          "netns_mbit": rates if rates != [0] else 0,
                          "duration": args.duration, "rows": rows}))
        return
    print(f"runs={args.runs} duration={args.duration}s (medians, min-max), "
          f"transport={'default (same-host allowed)' if args.shm else 'tcp'}"
          + (f" across namespaces at {'/'.join(map(str, rates))} Mbit/s" if args.netns_mbit
             else " over loopback") + ", "
          f"load average {load0[0]:.2f} before, {load1[0]:.2f} after on {os.cpu_count()} cpus"
          + (" (loaded: provisional)" if loaded else ""))
    print((f"{'Mbit/s':>7} " if args.netns_mbit else "") +
          f"{'case':<16} {'size':>8} {'on GB/s':>9} {'(min-max)':>13} {'off GB/s':>9} "
          f"{'(min-max)':>13} {'on/off':>7}")
    for r in rows:
        print((f"{r['mbit']:>7} " if args.netns_mbit else "") +
              f"{r['case']:<16} {r['size'] >> 20:>6}Mi {r['on_gbps']:>9.3f} "
              f"{r['on_min']:>6.2f}-{r['on_max']:<6.2f} {r['off_gbps']:>9.3f} "
              f"{r['off_min']:>6.2f}-{r['off_max']:<6.2f} {r['ratio']:>7.3f}")


if __name__ == "__main__":
    main()
