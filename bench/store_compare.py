#!/usr/bin/env python3
"""Mooncake Store against Redis and against the Transfer Engine, in one sitting.

On one machine, in rounds that alternate the three systems (so each sees
the same machine conditions; nothing runs concurrently):

1. redis-server 7 (Debian's) on a free port, no persistence
   (--save '' --appendonly no), measured with
   `redis-benchmark -p PORT -d SIZE -c 1 -n N -t set,get --csv` for 1 MiB and 4 MiB
   (the issue's command: one key, set and read again and again, so its value
   stays in the caches), and again with `-r K`, K keys holding 64 MiB, the
   memory the store's default rounds walk;
2. the engine's TCP bandwidth: transfer_engine_bench target + initiator
   (P2P handshake, one thread, write and read of SIZE blocks, batch 1 and 128;
   batch 1 twice: at one offset, as upstream's bench, which keeps the block in
   the caches, and walking a 64 MiB window with --window, as store_bench's
   single-key calls walk their 64 MiB of keys);
3. the store: mooncake_master (embedded metadata server, free ports), then
   bench/store_bench (a holder process contributes the segment, the client
   puts and gets with the replica on the holder, so the data crosses TCP)
   and bench/store_proto_bench (metadata calls on the wire); the single-key
   calls run twice: over a 64 MiB window of keys (store_bench's default) and
   with one key per round (--window=SIZE), the two access patterns of the
   two Redis runs; and the first fill of a fresh segment against a refill
   (store_bench --cases=cold, 512 MiB into 2 GiB), beside Redis's one-key SET;
4. optionally (--objects N) the master's RSS per object (bench/master_rss.py).

Each figure is the median over --runs rounds.  The tables show the ratios the
store is held to, each against the reference with the same access pattern:
put/get against Redis SET/GET (target >= 1.5x) and against the engine's TCP
bandwidth (target >= 60%); single-key metadata round trip (target p99 < 100
us) and batched exist (target >= 1M keys/s).

The engines are kept on TCP (MC_SHM_DISABLE=1 in their environment) unless
--shm is given, so the store's bytes cross loopback TCP as the targets assume.

With --cold MODES only the first-fill rows run: per round Redis's one-key
SET and Redis's own first fill (a fresh redis-server per size taking 512 MiB
of distinct keys, -r 10^9), then store_bench --cases=cold once per
MC_STORE_PREFAULT mode listed (their order rotated every round), reported as
first fill against refill, against Redis SET (one key overwritten: memory
reused, Redis's refill) and against Redis's first fill.

usage: bench/store_compare.py [--build build] [--runs 3] [--duration 2]
                              [--objects N] [--json] [--quick] [--shm]
                              [--cold mount,background,off]
"""
import argparse
import csv
import io
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import master_rss  # noqa: E402

MIB = 1 << 20
SIZES = [1 * MIB, 4 * MIB]
WINDOW = 64 * MIB  # store_bench's default --window: the bytes of keys a round walks
COLD_WINDOW, COLD_WINDOW_QUICK = 512 * MIB, 128 * MIB  # --cold: bytes of one first fill


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            sys.exit(f"store_compare: timed out waiting for {what}")
        time.sleep(0.05)


class Redis:
    """redis-server on a free port, no persistence."""

    def __init__(self):
        self.port = free_port()
        self.p = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind",
                                   "127.0.0.1", "--save", "", "--appendonly", "no",
                                   "--daemonize", "no"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def up():
            r = subprocess.run(["redis-cli", "-p", str(self.port), "ping"],
                               capture_output=True, text=True)
            return r.stdout.strip() == "PONG"

        wait_for(up, 20, "redis-server")

    def round(self, out, quick, modes=("one", "walk")):
        """One redis-benchmark run per size: out[(op, size)] gets a sample."""
        for size in SIZES:
            n = (200 if quick else 2000) if size == MIB else (50 if quick else 500)
            for mode in modes:
                # walk: K random keys of the 64 MiB window; n >= 30 K sets
                # them all before the GET test reads them back
                keys = ["-r", str(WINDOW // size)] if mode == "walk" else []
                r = subprocess.run(["redis-benchmark", "-p", str(self.port), "-d", str(size),
                                    "-c", "1", "-n", str(n), *keys, "-t", "set,get", "--csv"],
                                   capture_output=True, text=True, timeout=600)
                rows = {row[0]: row for row in csv.reader(io.StringIO(r.stdout)) if row}
                # columns: test, rps, avg, min, p50, p95, p99, max (ms)
                for op in ("SET", "GET"):
                    rps = float(rows[op][1])
                    out.setdefault((op, size, mode), []).append(
                        {"rps": rps, "gbps": rps * size / 1e9,
                         "p99_us": float(rows[op][6]) * 1e3})

    def first_fill(self, out, size, window):
        """Redis's own first fill: window bytes of distinct SIZE-byte keys
        into this (fresh) server, one at a time (-c 1, no pipelining), as
        store_bench --cases=cold puts window bytes into a fresh segment.
        -r 10^9: random keys, so almost surely every SET makes a new key
        and its value lands in memory the server never touched."""
        n = max(1, window // size)
        r = subprocess.run(["redis-benchmark", "-p", str(self.port), "-d", str(size),
                            "-c", "1", "-n", str(n), "-r", "1000000000", "-t", "set",
                            "--csv"], capture_output=True, text=True, timeout=600)
        rows = {row[0]: row for row in csv.reader(io.StringIO(r.stdout)) if row}
        rps = float(rows["SET"][1])
        out.setdefault(("SET", size, "first"), []).append(
            {"rps": rps, "gbps": rps * size / 1e9, "p99_us": float(rows["SET"][6]) * 1e3})

    def stop(self):
        subprocess.run(["redis-cli", "-p", str(self.port), "shutdown", "nosave"],
                       capture_output=True)
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


class Engine:
    """transfer_engine_bench: one target, one initiator run per case."""

    def __init__(self, build):
        self.exe = os.path.join(build, "tools", "transfer_engine_bench")
        self.target = subprocess.Popen(
            [self.exe, "--mode=target", "--metadata_server=P2PHANDSHAKE",
             "--local_server_name=127.0.0.1", "--buffer_size=1073741824"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.seg = self.target.stdout.readline().strip()  # printed once it serves
        if not self.seg:
            sys.exit("store_compare: transfer_engine_bench target did not start")

    def round(self, out, duration):
        for size in SIZES:
            for op in ("write", "read"):
                for batch, window in ((1, 0), (1, WINDOW), (128, 0)):
                    cmd = [self.exe, "--mode=initiator", "--metadata_server=P2PHANDSHAKE",
                           "--local_server_name=127.0.0.1", f"--segment_id={self.seg}",
                           f"--operation={op}", f"--block_size={size}",
                           f"--batch_size={batch}", "--threads=1", f"--duration={duration}",
                           "--buffer_size=1073741824", f"--window={window}"]
                    r = subprocess.run(cmd, capture_output=True, text=True,
                                       timeout=duration + 120)
                    if r.returncode:
                        sys.exit(f"store_compare: {' '.join(cmd)}: {r.stderr.strip()}")
                    gbs = float(re.search(r"throughput ([0-9.]+) GB/s", r.stdout).group(1))
                    out.setdefault((op, size, "w" if window else batch), []).append(gbs)

    def stop(self):
        self.target.send_signal(signal.SIGTERM)
        self.target.wait(timeout=30)


def json_lines(cmd):
    """Run a bench that prints one JSON object per line; exit on failure."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if r.returncode:
        sys.exit(f"store_compare: {' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
    return [json.loads(line) for line in r.stdout.splitlines()]


def store_round(build, m, data, meta, duration, quick):
    """One store_bench run (its own holder process) and one store_proto_bench
    run against the running master m."""
    bench = master_rss.find(build, "bench/store_bench")
    proto = master_rss.find(build, "bench/store_proto_bench")
    common = [bench, f"--master={m.addr}", f"--metadata={m.meta_uri}", "--runs=1",
              f"--duration={duration}", "--json"]
    for j in json_lines(common + ["--sizes=1m,4m"]):
        if "gbps" in j:
            data.setdefault((j["case"], j["size"], "walk"), []).append(j)
        else:
            meta.setdefault(("lib", j["case"], j["batch"]), []).append(j)
    # one key per round, as redis-benchmark's default command
    for size in SIZES:
        for j in json_lines(common + [f"--sizes={size}", f"--window={size}", "--cases=zc,copy"]):
            data.setdefault((j["case"], j["size"], "one"), []).append(j)
    # the first fill of a fresh segment against a refill of the same memory
    # (issue 12): 512 MiB into a fresh holder's 2 GiB segment, then again
    for j in json_lines(common + ["--sizes=1m,4m", "--cases=cold", "--window=512m",
                                  "--segment=2g"]):
        data.setdefault((j["case"], j["size"], "cold"), []).append(j)
    for j in json_lines([proto, f"--master={m.addr}", "--runs=1", f"--duration={duration}",
                         "--keys=1000", "--batch=1000", "--json"]):
        meta.setdefault(("wire", j["case"], j["batch"]), []).append(j)


def cold_round(build, m, data, modes, quick):
    """--cold: store_bench --cases=cold once per MC_STORE_PREFAULT mode, in
    the order given (the caller rotates it between rounds)."""
    bench = master_rss.find(build, "bench/store_bench")
    window = f"{(COLD_WINDOW_QUICK if quick else COLD_WINDOW) >> 20}m"
    for mode in modes:
        os.environ["MC_STORE_PREFAULT"] = mode  # read by the holder store_bench starts
        for j in json_lines([bench, f"--master={m.addr}", f"--metadata={m.meta_uri}",
                             "--runs=1", "--json", "--sizes=1m,4m", "--cases=cold",
                             f"--window={window}", "--segment=2g"]):
            data.setdefault((j["case"], j["size"], mode), []).append(j)
    os.environ.pop("MC_STORE_PREFAULT", None)


def cold_report(args, redis_s, data_s):
    """--cold: first fill against refill and against Redis's one-key SET."""
    redis = {k: med(v) for k, v in redis_s.items()}
    modes = args.cold.split(",")
    print(f"runs={args.runs} (medians; pre-fault modes alternated within each round), "
          f"transport={'default (same-host allowed)' if args.shm else 'tcp'}")
    print()
    print("| size | MC_STORE_PREFAULT | first fill GB/s | refill GB/s | first/refill | "
          "Redis SET GB/s | first x Redis | refill x Redis | Redis first fill GB/s | "
          "first x Redis first fill |")
    print("|" + "---|" * 10)
    rows = {}
    for size in SIZES:
        rd = redis.get(("SET", size, "one"))
        rf = redis.get(("SET", size, "first"))
        for mode in modes:
            c = data_s.get(("put_from_cold", size, mode))
            w = data_s.get(("put_from_warm", size, mode))
            if not c or not w:
                continue
            cg = med([j["gbps"] for j in c])
            wg = med([j["gbps"] for j in w])
            rows[f"{size >> 20}m/{mode}"] = {"first": cg, "refill": wg,
                                             "redis_set": rd["gbps"] if rd else None,
                                             "redis_first_fill": rf["gbps"] if rf else None,
                                             "first_samples": [j["gbps"] for j in c],
                                             "refill_samples": [j["gbps"] for j in w]}
            print(f"| {size >> 20} MiB | {mode} | {cg:.2f} | {wg:.2f} | {100 * cg / wg:.0f}% | "
                  + (f"{rd['gbps']:.2f} | {cg / rd['gbps']:.2f}x | {wg / rd['gbps']:.2f}x |"
                     if rd else "- | - | - |")
                  + (f" {rf['gbps']:.2f} | {cg / rf['gbps']:.2f}x |" if rf else " - | - |"))
    print()
    print("targets: first fill >= 80% of the refill and >= 1.5x Redis SET (one key, "
          "redis-benchmark -c 1)")
    print(f"Redis first fill: a fresh redis-server per size, {COLD_WINDOW >> 20} MiB of distinct "
          "keys (redis-benchmark -c 1 -r 1000000000 -n WINDOW/SIZE -t set), as the store's "
          "first fill puts that window into a fresh segment; Redis SET above is one key "
          "overwritten (its memory reused: a refill)")
    if args.json:
        print(json.dumps(rows))


def med(samples, field=None):
    """Median of a list of numbers, or of one field of a list of dicts
    (returned as a dict with every numeric field's median)."""
    if field is None and samples and isinstance(samples[0], dict):
        keys = [k for k, v in samples[0].items() if isinstance(v, (int, float))]
        return {k: statistics.median(s[k] for s in samples) for k in keys}
    return statistics.median(samples)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--objects", type=int, default=0,
                    help="also measure master RSS per object with this many objects "
                         "(e.g. 10000000)")
    ap.add_argument("--value-size", type=int, default=1024)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="one short run of everything")
    ap.add_argument("--cold", metavar="MODES",
                    help="only the first fill against the refill and Redis SET, for each "
                         "MC_STORE_PREFAULT mode listed (e.g. mount,background,off), the "
                         "modes' order rotated every round")
    ap.add_argument("--shm", action="store_true",
                    help="let the engines use the same-host transport (default: TCP only, "
                         "MC_SHM_DISABLE=1, which is what the targets are about)")
    args = ap.parse_args()
    if not args.shm:
        os.environ["MC_SHM_DISABLE"] = "1"  # inherited by every engine started below
    if args.quick:
        args.runs, args.duration = 1, 0.5

    # Rounds alternate the three systems so that each sees the same
    # machine conditions; every figure is the median over the rounds.
    redis_s, te_s, data_s, meta_s = {}, {}, {}, {}
    have_redis = shutil.which("redis-server") and shutil.which("redis-benchmark")
    if not have_redis:
        print("store_compare: redis-server/redis-benchmark not installed, skipping Redis",
              file=sys.stderr)
    rd = Redis() if have_redis else None
    if args.cold:
        modes = args.cold.split(",")
        for mode in modes:
            if mode not in ("mount", "background", "off"):
                sys.exit(f"store_compare: --cold: {mode!r} is not mount, background or off")
        m = master_rss.Master(master_rss.find(args.build, "tools/mooncake_master",
                                              "src/master/mooncake_master"))
        try:
            for i in range(args.runs):
                print(f"store_compare: round {i + 1}/{args.runs}", file=sys.stderr, flush=True)
                if rd:
                    rd.round(redis_s, args.quick, ("one",))
                    for size in SIZES:  # a fresh server per size, as a fresh holder
                        fresh = Redis()
                        try:
                            fresh.first_fill(redis_s, size, COLD_WINDOW_QUICK if args.quick
                                             else COLD_WINDOW)
                        finally:
                            fresh.stop()
                k = i % len(modes)
                cold_round(args.build, m, data_s, modes[k:] + modes[:k], args.quick)
        finally:
            m.stop()
            if rd:
                rd.stop()
        cold_report(args, redis_s, data_s)
        return
    te = Engine(args.build)
    m = master_rss.Master(master_rss.find(args.build, "tools/mooncake_master",
                                          "src/master/mooncake_master"))
    try:
        for i in range(args.runs):
            print(f"store_compare: round {i + 1}/{args.runs}", file=sys.stderr, flush=True)
            if rd:
                rd.round(redis_s, args.quick)
            te.round(te_s, args.duration)
            store_round(args.build, m, data_s, meta_s, args.duration, args.quick)
    finally:
        m.stop()
        te.stop()
        if rd:
            rd.stop()
    redis = {k: med(v) for k, v in redis_s.items()}
    te = {k: med(v) for k, v in te_s.items()}
    store = {k: dict(v[0], **med(v)) for k, v in data_s.items()}
    meta = {k: dict(v[0], **med(v)) for k, v in meta_s.items()}
    rss = (master_rss.measure(args.build, args.objects, args.value_size)
           if args.objects else None)

    if args.json:
        print(json.dumps({
            "redis": {f"{k[0]}/{k[1]}/{k[2]}": v for k, v in redis.items()},
            "te": {f"{k[0]}/{k[1]}/{k[2]}": v for k, v in te.items()},
            "store": {f"{k[0]}/{k[1]}/{k[2]}": v for k, v in store.items()},
            "meta": {f"{k[0]}/{k[1]}/{k[2]}": v for k, v in meta.items()},
            "master_rss": rss,
        }))
        return

    print(f"runs={args.runs} duration={args.duration}s (medians), "
          f"transport={'default (same-host allowed)' if args.shm else 'tcp'}")
    print()
    cases = (("put_from", "SET", "write"), ("put", "SET", "write"),
             ("batch_put_from", "SET", "write"), ("mt_put_from", "SET", "write"),
             ("put_from_cold", "SET", "write"), ("put_from_warm", "SET", "write"),
             ("get_into", "GET", "read"), ("get", "GET", "read"),
             ("batch_get_into", "GET", "read"), ("mt_get_into", "GET", "read"))
    for mode, title, tkey, tname in (
            ("walk", "Keys over a 64 MiB window (store_bench's default; redis-benchmark -r K)",
             "w", "TE b=1 walk"),
            ("one", "One key per round (store_bench --window=SIZE; redis-benchmark's default)",
             1, "TE b=1"),
            ("cold", "First fill of a fresh 2 GiB segment (cold) and a refill of the same "
             "memory (warm), 512 MiB (store_bench --cases=cold; MC_STORE_PREFAULT applies)",
             1, "TE b=1")):
        print(title)
        print()
        print(f"| size | op | store GB/s | store p99 us | Redis GB/s | x Redis | {tname} GB/s | "
              f"% of TE | TE b=128 GB/s |")
        print("|" + "---|" * 9)
        for size in SIZES:
            for case, rop, top in cases:
                st = store.get((case, size, mode))
                if not st:
                    continue
                rd = redis.get((rop, size, "one" if mode == "cold" else mode))
                t, t128 = te.get((top, size, tkey)), te.get((top, size, 128))
                label = case
                if st["batch"] > 1:
                    label += f" (batch {st['batch']})"
                if st["threads"] > 1:
                    label += f" ({st['threads']} threads)"
                cols = [f"{size >> 20} MiB", label, f"{st['gbps']:.2f}", f"{st['p99_us']:.0f}"]
                cols += ([f"{rd['gbps']:.2f}", f"{st['gbps'] / rd['gbps']:.2f}x"] if rd
                         else ["-", "-"])
                cols += [f"{t:.2f}" if t else "-", f"{100 * st['gbps'] / t:.0f}%" if t else "-",
                         f"{t128:.2f}" if t128 else "-"]
                print("| " + " | ".join(cols) + " |")
        print()
    print("targets: put/get >= 1.5x Redis SET/GET; >= 60% of the engine's TCP bandwidth")
    print("(transfer_engine_bench, one thread, same block size and direction: write for puts,")
    print(" read for gets; TE b=1 walk: batch 1 walking a 64 MiB window with --window, as the")
    print(" store's keys do; TE b=1: batch 1 at one offset, upstream's bench)")
    print()
    print("| path | call | batch | calls/s | keys/s | p50 us | p99 us |")
    print("|---|---|---|---|---|---|---|")
    for (path, case, batch), j in sorted(meta.items()):
        print(f"| {'library' if path == 'lib' else 'wire'} | {case} | {batch} | "
              f"{j['ops_per_s']:.0f} | {j['keys_per_s']:.0f} | {j['p50_us']:.1f} | "
              f"{j['p99_us']:.1f} |")
    print()
    print("targets: single-key round trip p99 < 100 us; batched exist >= 1M keys/s")
    if rss:
        print()
        print(f"master RSS: {rss['objects']} objects of {rss['value_size']} B: "
              f"{rss['rss_before_kib']} KiB -> {rss['rss_after_kib']} KiB, "
              f"{rss['bytes_per_object']:.1f} B/object "
              f"(loaded at {rss['load_keys_per_s']:.0f} keys/s)")


if __name__ == "__main__":
    main()
