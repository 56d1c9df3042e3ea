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

and prints one line per mode

    master_restart mode=<log|snapshot> objects=N load_s=.. listen_s=.. remount_s=..
        serving_s=<listen_s + remount_s> log_bytes_per_object=..
        snapshot_bytes_per_object=.. rss_kib=..

(--json: one JSON object per line instead).

usage: bench/master_restart.py [--build build] [--objects 10000000] [--dir DIR]
                               [--modes log,snapshot] [--json]
"""
import argparse
import json
import os
import re
import shutil
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


def run_mode(build, mode, objects, base):
    exe = find(build, "tools/mooncake_master", "src/master/mooncake_master")
    loader = find(build, "bench/store_proto_bench")
    d = tempfile.mkdtemp(prefix=f"master_restart_{mode}.", dir=base)
    flags = ["--client_ttl=600", f"--wal_dir={d}", "--wal_fsync=everysec"]
    if mode == "snapshot":
        flags += ["--enable_snapshot=true", f"--snapshot_interval_seconds={SNAP_INTERVAL_S}",
                  "--enable_snapshot_restore=true"]
    try:
        m = Master(exe, flags, timeout=120)
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
            first, last, since = snapshot_count(m), None, time.monotonic()
            deadline = since + 600
            while True:
                n = snapshot_count(m)
                if n != last:
                    last, since = n, time.monotonic()
                elif n > first and time.monotonic() - since > 3 * SNAP_INTERVAL_S:
                    break
                if time.monotonic() > deadline:
                    sys.exit("snapshots did not settle within 600 s")
                time.sleep(0.5)
        ld.send_signal(signal.SIGKILL)
        ld.wait()
        kill9(m)
        log_b = files_bytes(d, lambda f: f.endswith(".log"))
        snap_b = files_bytes(d, lambda f: f.startswith("snap"))

        t0 = time.monotonic()
        m = Master(exe, flags, timeout=600)
        listen_s = time.monotonic() - t0
        try:
            r = subprocess.run([loader, f"--master={m.addr}", f"--recover={objects}"],
                               capture_output=True, text=True, timeout=600)
            got = re.search(r"RECOVERED objects=\d+ s=([\d.]+)", r.stdout)
            if r.returncode != 0 or not got:
                sys.exit(f"recover failed: {r.stdout}{r.stderr}")
            rss = m.rss_kib()
        finally:
            m.stop()
        remount_s = float(got.group(1))
        return {"mode": mode, "objects": objects, "load_s": float(done["s"]),
                "listen_s": round(listen_s, 3), "remount_s": remount_s,
                "serving_s": round(listen_s + remount_s, 3),
                "log_bytes_per_object": round(log_b / objects, 1),
                "snapshot_bytes_per_object": round(snap_b / objects, 1), "rss_kib": rss}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--objects", type=int, default=10_000_000)
    ap.add_argument("--dir", default=None, help="where the log and snapshots go (default /tmp)")
    ap.add_argument("--modes", default="log,snapshot")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    for mode in a.modes.split(","):
        if mode not in ("log", "snapshot"):
            sys.exit(f"unknown mode {mode!r} (log, snapshot)")
        r = run_mode(a.build, mode, a.objects, a.dir)
        if a.json:
            print(json.dumps(r), flush=True)
        else:
            print("master_restart " + " ".join(f"{k}={v}" for k, v in r.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
