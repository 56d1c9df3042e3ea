#!/usr/bin/env python3
"""Master memory per object, measured on the real daemon.

Starts mooncake_master (port 0 everywhere, ports read from its "listening"
line), reads its VmRSS, creates --objects small objects through the wire
protocol with bench/store_proto_bench --load (BatchPutStart + BatchPutEnd,
1000 keys per frame, against a fake mounted segment: the master never
touches segment memory, so none is needed), reads VmRSS again while the
objects are live, and prints

    master_rss objects=N value_size=B rss_before_kib=.. rss_after_kib=..
        bytes_per_object=.. load_keys_per_s=..

(one line; --json for a JSON object).  The in-process counterpart, which
counts the master's own allocations, is bench/master_mem_bench.c.

With --calls it also times single-key and batched metadata calls
(store_proto_bench --keys=1000 --batch=1000 --runs=3) while the objects
are live.

With --pauses removeall|unmount|idle it then times the longest pause of the
master's RPC loop around one RemoveAll (or the unmount of the segment that
holds every object; idle: no call, the machine's baseline): a second
client (store_proto_bench --probe) calls ExistKey back to back from before
the call until --after-s seconds after it, and its longest round trip is
the pause a ready client saw.  --probe-load runs the same probe during the
load (the object table's and the allocator's growth).  Beside each probe the
master's own account of its loop (/metrics master_loop_turn_*, with
--loop_turn_cpu_stats): its longest turn in wall and in CPU time and how many
turns passed 50 ms in each (and 10 ms of CPU), so a pause that was the machine (long wall, short
CPU) is told from one that was work.

usage: bench/master_rss.py [--build build] [--objects 10000000] [--value-size 1024]
                           [--calls] [--pauses removeall|unmount|idle] [--after-s 0.5]
                           [--probe-load] [--json]
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

LISTEN_RE = re.compile(r"listening rpc=(\d+) metrics=(\d+) metadata=(\d+)")


def find(build, *rel):
    for r in rel:
        p = os.path.join(build, r)
        if os.access(p, os.X_OK):
            return p
    sys.exit(f"none of {rel} built under {build}")


class Master:
    """mooncake_master on free ports; stop() sends SIGTERM and waits."""

    def __init__(self, exe, extra=(), timeout=20.0, prefix=()):
        """prefix: argv words before exe (bench_netns.Link.exec([]): run
        it in a network namespace)."""
        self.log = tempfile.NamedTemporaryFile(prefix="mooncake_master.", suffix=".log",
                                               delete=False)
        argv = [*prefix, exe, "--rpc_port=0", "--rpc_address=127.0.0.1", "--metrics_port=0",
                "--metrics_host=127.0.0.1", "--enable_http_metadata_server=true",
                "--http_metadata_server_port=0", "--http_metadata_server_host=127.0.0.1",
                "--enable_metric_reporting=false",
                # store_proto_bench mounts fake segments with no engine behind them
                "--mount_probe=false", *extra]
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=self.log)
        deadline = time.monotonic() + timeout
        while True:
            with open(self.log.name, "rb") as f:
                m = LISTEN_RE.search(f.read().decode(errors="replace"))
            if m:
                break
            if self.p.poll() is not None or time.monotonic() > deadline:
                with open(self.log.name, errors="replace") as f:
                    tail = f.read()[-2000:]
                self.stop(check=False)  # which deletes the log
                sys.exit(f"mooncake_master ({exe}) did not start:\n{tail}")
            time.sleep(0.02)
        self.rpc, self.metrics, self.meta = (int(x) for x in m.groups())
        self.addr = f"127.0.0.1:{self.rpc}"
        self.meta_uri = f"http://127.0.0.1:{self.meta}/metadata"

    def rss_kib(self):
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def stop(self, check=True, timeout=30):
        """SIGTERM and wait.  With check, a master that died of a signal
        (a crash, before or during the stop) or did not stop within 30 s
        raises, naming its log, which is then kept."""
        killed = False
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
                killed = True
        self.log.close()
        rc = self.p.returncode
        if check and (killed or rc < 0):
            why = (f"did not stop within {timeout} s of SIGTERM" if killed
                   else f"died of signal {signal.Signals(-rc).name}")
            with open(self.log.name, errors="replace") as f:
                tail = f.read()[-2000:]
            raise RuntimeError(f"mooncake_master (pid {self.p.pid}) {why}; its log "
                               f"{self.log.name} ends:\n{tail}")
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


def loop_turns(m):
    """The RPC loop's turn statistics from /metrics (master_loop_turn_*): the
    longest turn in wall and CPU time since the previous read (which this read
    resets), and the count of turns over 50 ms in each."""
    import urllib.request
    body = urllib.request.urlopen(f"http://127.0.0.1:{m.metrics}/metrics",
                                  timeout=30).read().decode()
    v = {}
    for line in body.splitlines():
        for name in ("master_loop_turn_max_us", "master_loop_turn_cpu_max_us"):
            if line.startswith(name + " "):
                v[name] = float(line.split()[1])
        for name in ("master_loop_turn_us", "master_loop_turn_cpu_us"):
            if line.startswith(name + '_bucket{le="50000"}'):
                v[name + "_le50ms"] = float(line.split()[1])
            elif line.startswith(name + '_bucket{le="10000"}'):
                v[name + "_le10ms"] = float(line.split()[1])
            elif line.startswith(name + "_count "):
                v[name + "_count"] = float(line.split()[1])
    return v


def turns_between(a, b):
    """What the loop did between two loop_turns() reads."""
    def over(name, ms=50):
        return int((b[name + "_count"] - b[name + f"_le{ms}ms"])
                   - (a[name + "_count"] - a[name + f"_le{ms}ms"]))
    return {"loop_turn_max_us": b["master_loop_turn_max_us"],
            "loop_turn_cpu_max_us": b["master_loop_turn_cpu_max_us"],
            "loop_turns": int(b["master_loop_turn_us_count"] - a["master_loop_turn_us_count"]),
            "loop_turns_over_50ms": over("master_loop_turn_us"),
            "loop_turns_over_50ms_cpu": over("master_loop_turn_cpu_us"),
            # the bound is 50 ms; below it, how many came near
            "loop_turns_over_10ms_cpu": over("master_loop_turn_cpu_us", 10)}


def start_probe(build, m):
    """A --probe client calling ExistKey back to back until its stdin closes."""
    probe = subprocess.Popen([find(build, "bench/store_proto_bench"), f"--master={m.addr}",
                              "--probe"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    if probe.stdout.readline().strip() != "READY":
        probe.kill()
        raise RuntimeError("probe did not start")
    return probe


def stop_probe(probe):
    """Its calls, longest round trip, p99, p99.9 and when the longest began (s)."""
    probe.stdin.close()
    out = probe.stdout.read()
    probe.wait(timeout=60)
    pr = re.search(r"PROBE calls=(\d+) max_us=(\S+) p99_us=(\S+) p999_us=(\S+) at_s=(\S+)",
                   out)
    if not pr:
        raise RuntimeError(f"probe printed {out!r}")
    return {"probe_calls": int(pr.group(1)), "max_pause_us": float(pr.group(2)),
            "probe_p99_us": float(pr.group(3)), "probe_p999_us": float(pr.group(4)),
            "at_s": float(pr.group(5))}


def probe_around(build, m, loader, command, reply, after_s=0.5):
    """Times the master's RPC loop around one loader command: a --probe
    client calls ExistKey back to back from before the command is sent
    until after its answer; its longest round trip is the longest pause."""
    probe = start_probe(build, m)
    turns0 = loop_turns(m)
    try:
        time.sleep(0.5)  # a baseline of ordinary round trips before the command
        loader.stdin.write(command + "\n")
        loader.stdin.flush()
        line = loader.stdout.readline()
        if not line.startswith(reply):
            raise RuntimeError(f"loader answered {line!r} to {command}")
        took = dict(kv.split("=", 1) for kv in line.split()[1:])
        time.sleep(after_s)  # and what follows: the emptied table shrinking
    finally:
        pr = stop_probe(probe)
    pr.update(turns_between(turns0, loop_turns(m)))
    at = pr.pop("at_s")
    return {"call_s": float(took["s"]), **({"count": int(took["count"])} if "count" in took
                                            else {}),
            **pr,
            # when the longest began, in seconds after the command was sent
            "max_pause_at_s": round(at - 0.5, 3)}


def measure(build, objects, value_size, master_extra=(), calls=False, pauses=None,
            after_s=0.5, probe_load=False):
    exe = find(build, "tools/mooncake_master", "src/master/mooncake_master")
    loader = find(build, "bench/store_proto_bench")
    # A long client_ttl: the loader pings every second anyway, but not while
    # it waits for a RemoveAll (--pauses), which takes minutes at 100 M.
    # --loop_turn_cpu_stats: the loop's own account of each turn in CPU time
    # beside wall time, so a pause that waited for a CPU shows as such
    m = Master(exe, [f"--client_ttl={3600 if pauses else 60}",
                     *(["--loop_turn_cpu_stats=true"] if pauses or probe_load else []),
                     *master_extra])
    try:
        before = m.rss_kib()
        lprobe = start_probe(build, m) if probe_load else None
        turns0 = loop_turns(m)
        ld = subprocess.Popen([loader, f"--master={m.addr}", f"--load={objects}",
                               f"--value-size={value_size}"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            done = None
            for line in ld.stdout:  # the loader's progress, bounded by its own exit
                if line.startswith("DONE"):
                    done = dict(kv.split("=", 1) for kv in line.split()[1:])
                    break
            if done is None:
                raise RuntimeError(f"loader failed (rc={ld.wait()})")
            if lprobe:  # the loop's longest pause while the table and allocator grew
                load_pause = stop_probe(lprobe)
                load_pause.update(turns_between(turns0, loop_turns(m)))
                lprobe = None
            after = m.rss_kib()
            if calls:  # metadata calls while the master is that full
                r = subprocess.run([loader, f"--master={m.addr}", "--keys=1000", "--batch=1000",
                                    "--runs=3", "--duration=2", "--json"],
                                   capture_output=True, text=True, check=True)
                meta = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
            if pauses:  # the longest loop pause around RemoveAll or the unmount
                reply = {"removeall": "REMOVED", "unmount": "UNMOUNTED", "idle": "IDLE"}[pauses]
                pause = probe_around(build, m, ld, pauses, reply, after_s)
        finally:
            ld.stdin.close()
            ld.wait(timeout=60)
            if lprobe:
                lprobe.kill()
                lprobe.wait()
        return {
            "objects": objects,
            "value_size": value_size,
            "rss_before_kib": before,
            "rss_after_kib": after,
            "bytes_per_object": (after - before) * 1024 / objects,
            "load_keys_per_s": float(done["keys/s"]),
            "load_s": float(done["s"]),
            **({"calls": meta} if calls else {}),
            **({"pause": dict(pause, command=pauses)} if pauses else {}),
            **({"load_pause": load_pause} if probe_load else {}),
        }
    finally:
        # freeing the objects at the stop: seconds at 10^7, longer on a loaded machine
        m.stop(timeout=120 + objects // 1_000_000)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--objects", type=int, default=10_000_000)
    ap.add_argument("--value-size", type=int, default=1024)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--pauses", choices=("removeall", "unmount", "idle"),
                    help="with the objects live, time the longest pause of the RPC loop "
                         "(a --probe client's longest ExistKey) around one RemoveAll or the "
                         "unmount of the segment holding them all (idle: around nothing, "
                         "the baseline of the machine)")
    ap.add_argument("--after-s", type=float, default=0.5,
                    help="--pauses: keep probing this long after the call's answer (the "
                         "object table shrinks in the ticks after a RemoveAll: seconds at 10 M)")
    ap.add_argument("--probe-load", action="store_true",
                    help="time the longest pause of the RPC loop (a --probe client's longest "
                         "ExistKey) while the objects are loaded: table and allocator growth")
    ap.add_argument("--calls", action="store_true",
                    help="also time single-key and batched metadata calls (store_proto_bench) "
                         "while the objects are live")
    args = ap.parse_args()
    r = measure(args.build, args.objects, args.value_size, calls=args.calls,
                pauses=args.pauses, after_s=args.after_s, probe_load=args.probe_load)
    calls = r.pop("calls", [])
    pause = r.pop("pause", None)
    load_pause = r.pop("load_pause", None)
    if args.json:
        print(json.dumps(dict(r, **({"calls": calls} if calls else {}),
                              **({"load_pause": load_pause} if load_pause else {}),
                              **({"pause": pause} if pause else {}))))
    else:
        print("master_rss " + " ".join(
            f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))
        for c in calls:
            print(f"  {c['case']} batch={c['batch']} calls/s={c['ops_per_s']:.0f} "
                  f"keys/s={c['keys_per_s']:.0f} p50_us={c['p50_us']:.1f} "
                  f"p99_us={c['p99_us']:.1f}")
        if load_pause:
            print("  load_pause " + " ".join(f"{k}={v}" for k, v in load_pause.items()))
        if pause:
            print("  pause " + " ".join(f"{k}={v}" for k, v in pause.items()))


if __name__ == "__main__":
    main()
