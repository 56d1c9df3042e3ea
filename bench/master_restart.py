#!/usr/bin/env python3
"""A master restart with N objects: time from start to serving, and bytes on disk per object.

One run per --modes entry, on a fresh directory under --dir:

  log       mooncake_master --wal_dir=D (--wal_fsync=everysec): the restart
            replays the whole log;
  snapshot  the same with --enable_snapshot --snapshot_interval_seconds=S
            --enable_snapshot_restore: after the load the run waits for a
            snapshot that started after the last put (none comes for three
            intervals: the master skips one while its log has not moved),
            so the restart loads that snapshot and no log after it.

Each run starts the master, creates --objects objects with
bench/store_proto_bench --load (BatchPutStart + BatchPutEnd of 1000 keys,
against a fake segment), then kill -9s the loader (so it cannot unmount)
and the master, and measures the bytes of log and snapshot files. It
starts the master again on the same directory and times

  listen_s   from exec to its "listening" line (the log and snapshot are
             loaded before it listens),
  remount_s  store_proto_bench --recover: the client mounting its segment
             again (which binds every replayed object) and ExistKey finding
             1,000 of them, the last key included,
  cpu_listen_s, cpu_serving_s
             the master's CPU time (user + system, all threads) when it
             listens and when the remount's checks are done: on a loaded
             host these move far less than the wall-clock times,
  load_ms    the master's own "replayed ... in N ms" (snapshot and log),
  bind_ms    the master's own time to bind the remounted segment's replicas
             (none from a build before the time was logged),

and prints one line per mode

    master_restart mode=<log|snapshot> objects=N load_s=.. listen_s=.. remount_s=..
        serving_s=<listen_s + remount_s> log_bytes_per_object=..
        snapshot_bytes_per_object=.. rss_kib=..

(--json: one JSON object per line instead).

With --compare OTHER (another build directory, e.g. one of the commit
before a change) the load is done once per mode, with --build's master,
and the restart is timed --rounds times for each build on a fresh copy of
the same directory, the order of the two alternating every round; each
round prints one line per build (restart_round build=.. listen_s=..
remount_s=.. serving_s=..), then one line per build with the medians and
the ratio of serving_s (this build / --build).  With --load_each each
build restarts from a directory its own master loaded (and, in snapshot
mode, wrote the snapshot of): for a change to what the master writes.

usage: bench/master_restart.py [--build build] [--objects 10000000] [--dir DIR]
                               [--modes log,snapshot] [--json]
                               [--compare OTHER --rounds 3 [--load_each]]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from master_rss import Master, find  # noqa: E402

SNAP_INTERVAL_S = 2


def files_bytes(d, pred):
    if not os.path.isdir(d):
        return 0
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if pred(f))


def snapshot_count(m):
    with urllib.request.urlopen(f"http://127.0.0.1:{m.metrics}/metrics", timeout=10) as r:
        text = r.read().decode()
    found = re.search(r"^master_snapshot_success(?:\{[^}]*\})? (\d+)", text, re.M)
    return int(found.group(1)) if found else 0


def kill9(m):
    m.p.send_signal(signal.SIGKILL)
    m.p.wait()
    m.log.close()
    os.unlink(m.log.name)


def flags_for(mode, d):
    flags = ["--client_ttl=600", f"--wal_dir={d}", "--wal_fsync=everysec"]
    if mode == "snapshot":
        flags += ["--enable_snapshot=true", f"--snapshot_interval_seconds={SNAP_INTERVAL_S}",
                  "--enable_snapshot_restore=true"]
    return flags


def load(build, mode, objects, d):
    """Start a master on d, load it, kill -9 both; returns the loader's seconds."""
    exe = find(build, "tools/mooncake_master", "src/master/mooncake_master")
    loader = find(build, "bench/store_proto_bench")
    m = Master(exe, flags_for(mode, d), timeout=120)
    ld = subprocess.Popen([loader, f"--master={m.addr}", f"--load={objects}"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    done = None
    for line in ld.stdout:
        if line.startswith("DONE"):
            done = dict(kv.split("=", 1) for kv in line.split()[1:])
            break
    if done is None:
        kill9(m)
        sys.exit(f"loader failed (rc={ld.wait()})")
    if mode == "snapshot":
        # The master skips a snapshot while its log has not moved, so once no
        # new one has come for three intervals the last one covers every put.
        # A snapshot still being written (its .tmp) may be the one that
        # covers the last put: wait for it too.
        first, last, since = snapshot_count(m), None, time.monotonic()
        deadline = since + 600
        while True:
            n = snapshot_count(m)
            writing = any(f.endswith(".tmp") for f in os.listdir(d))
            if n != last or writing:
                last, since = n, time.monotonic()
            elif n > first and time.monotonic() - since > 3 * SNAP_INTERVAL_S:
                break
            if time.monotonic() > deadline:
                sys.exit("snapshots did not settle within 600 s")
            time.sleep(0.5)
    ld.send_signal(signal.SIGKILL)
    ld.wait()
    kill9(m)
    return float(done["s"])


def cpu_s(pid):
    """User + system CPU seconds of a process so far (every thread)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def restart(build, mode, objects, d):
    """Start a master on the loaded d; time it to listen and the remount."""
    exe = find(build, "tools/mooncake_master", "src/master/mooncake_master")
    loader = find(build, "bench/store_proto_bench")
    t0 = time.monotonic()
    m = Master(exe, flags_for(mode, d), timeout=600)
    listen_s = time.monotonic() - t0
    cpu_listen = cpu_s(m.p.pid)
    try:
        r = subprocess.run([loader, f"--master={m.addr}", f"--recover={objects}"],
                           capture_output=True, text=True, timeout=600)
        got = re.search(r"RECOVERED objects=\d+ s=([\d.]+)", r.stdout)
        if r.returncode != 0 or not got:
            sys.exit(f"recover failed: {r.stdout}{r.stderr}")
        rss = m.rss_kib()
        cpu_serving = cpu_s(m.p.pid)
        with open(m.log.name, errors="replace") as f:
            text = f.read()
    finally:
        # freeing 10 M objects on a loaded host can take a while
        m.stop(timeout=180)
    remount_s = float(got.group(1))
    # the master's own figures, CPU-bound parts that a loaded host inflates less
    # than the round trips: the load before it listens and the remount's bind
    replay = re.search(r"wal: .*replayed \d+ records .* in (\d+) ms", text)
    bind = re.search(r"remounted: \d+ logged replicas readable again \([^,]+, (\d+) ms\)", text)
    return {"listen_s": round(listen_s, 3), "remount_s": remount_s,
            "serving_s": round(listen_s + remount_s, 3), "rss_kib": rss,
            "cpu_listen_s": round(cpu_listen, 2), "cpu_serving_s": round(cpu_serving, 2),
            "load_ms": int(replay.group(1)) if replay else None,
            "bind_ms": int(bind.group(1)) if bind else None}


def run_mode(build, mode, objects, base):
    d = tempfile.mkdtemp(prefix=f"master_restart_{mode}.", dir=base)
    try:
        load_s = load(build, mode, objects, d)
        log_b = files_bytes(d, lambda f: f.endswith(".log"))
        snap_b = files_bytes(d, lambda f: f.startswith("snap"))
        r = restart(build, mode, objects, d)
        return {"mode": mode, "objects": objects, "load_s": load_s,
                "listen_s": r["listen_s"], "remount_s": r["remount_s"],
                "serving_s": r["serving_s"], "cpu_listen_s": r["cpu_listen_s"],
                "cpu_serving_s": r["cpu_serving_s"], "load_ms": r["load_ms"],
                "bind_ms": r["bind_ms"],
                "log_bytes_per_object": round(log_b / objects, 1),
                "snapshot_bytes_per_object": round(snap_b / objects, 1), "rss_kib": r["rss_kib"]}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def compare_mode(build, other, mode, objects, base, rounds, as_json, load_each=False):
    d = tempfile.mkdtemp(prefix=f"master_restart_{mode}.", dir=base)
    dirs = {build: d, other: d}
    runs = {build: [], other: []}
    try:
        load(build, mode, objects, d)
        if load_each:
            dirs[other] = tempfile.mkdtemp(prefix=f"master_restart_{mode}.", dir=base)
            load(other, mode, objects, dirs[other])
        for i in range(rounds):
            order = (build, other) if i % 2 == 0 else (other, build)
            for b in order:
                c = dirs[b] + ".copy"
                shutil.rmtree(c, ignore_errors=True)
                # a snapshot child of the killed master may still be
                # writing (then renaming) its .tmp: a restart deletes those
                shutil.copytree(dirs[b], c, ignore=shutil.ignore_patterns("*.tmp"))
                try:
                    r = restart(b, mode, objects, c)
                finally:
                    shutil.rmtree(c, ignore_errors=True)
                r.update({"round": i, "build": b, "mode": mode, "objects": objects})
                runs[b].append(r)
                out(r, "restart_round", as_json)
        ref = statistics.median(x["serving_s"] for x in runs[build])
        for b in (build, other):
            med = {k: round(statistics.median(x[k] for x in runs[b]), 3)
                   for k in ("listen_s", "remount_s", "serving_s", "cpu_listen_s",
                             "cpu_serving_s")}
            for k in ("load_ms", "bind_ms"):
                v = [x[k] for x in runs[b] if x[k] is not None]
                med[k] = statistics.median(v) if v else None
            med.update({"build": b, "mode": mode, "objects": objects, "rounds": rounds,
                        "serving_vs_build": round(med["serving_s"] / ref, 3)})
            out(med, "restart_median", as_json)
    finally:
        for x in set(dirs.values()):
            shutil.rmtree(x, ignore_errors=True)


def out(r, name, as_json):
    if as_json:
        print(json.dumps(r), flush=True)
    else:
        print(name + " " + " ".join(f"{k}={v}" for k, v in r.items()), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--objects", type=int, default=10_000_000)
    ap.add_argument("--dir", default=None, help="where the log and snapshots go (default /tmp)")
    ap.add_argument("--modes", default="log,snapshot")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--compare", default=None, help="another build directory to time against")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--load_each", action="store_true",
                    help="with --compare: each build restarts from what its own master wrote")
    a = ap.parse_args()
    for mode in a.modes.split(","):
        if mode not in ("log", "snapshot"):
            sys.exit(f"unknown mode {mode!r} (log, snapshot)")
        if a.compare:
            compare_mode(a.build, a.compare, mode, a.objects, a.dir, a.rounds, a.json,
                         a.load_each)
        else:
            out(run_mode(a.build, mode, a.objects, a.dir), "master_restart", a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
