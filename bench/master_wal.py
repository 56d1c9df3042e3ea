#!/usr/bin/env python3
"""Master put throughput and p99 with the write-ahead log off, everysec and always.

In one run, for each mode: starts mooncake_master (bench/master_rss.py's
Master: free ports, --mount_probe=false) with no log, --wal_fsync=everysec
or --wal_fsync=always on a fresh --wal_dir under --dir (default: a
temporary directory on /tmp; pass the disk you mean to measure), runs
bench/store_proto_bench --clients=N (each client loops over ExistKey,
GetReplicaList, PutStart, PutEnd and Remove on its own connection; PutEnd
and Remove are logged) for --duration seconds, and prints one line per mode

    master_wal mode=<off|everysec|always> clients=N ops/s=.. p50_us=.. p99_us=..
        vs_off=<ops/s ratio> wal_bytes=..

(--json: one JSON object per line instead).

usage: bench/master_wal.py [--build build] [--clients 4] [--duration 3] [--dir DIR]
                           [--modes off,everysec,always] [--json]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from master_rss import Master, find  # noqa: E402

LINE_RE = re.compile(r"ops/s=([\d.]+).*?p50_us=([\d.]+) p99_us=([\d.]+)")


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) if os.path.isdir(d) else 0


def run_mode(build, mode, clients, duration, base):
    exe = find(build, "tools/mooncake_master", "src/master/mooncake_master")
    bench = find(build, "bench/store_proto_bench")
    wal = os.path.join(base, f"wal-{mode}")
    extra = ["--client_ttl=60"]
    if mode != "off":
        extra += [f"--wal_dir={wal}", f"--wal_fsync={mode}"]
    m = Master(exe, extra)
    try:
        r = subprocess.run([bench, f"--master={m.addr}", f"--clients={clients}",
                            f"--duration={duration}"], capture_output=True, text=True,
                           check=True, timeout=duration * 10 + 60)
    finally:
        m.stop()
    got = LINE_RE.search(r.stdout)
    if not got:
        sys.exit(f"store_proto_bench said: {r.stdout}{r.stderr}")
    return {"mode": mode, "clients": clients, "ops_per_s": float(got.group(1)),
            "p50_us": float(got.group(2)), "p99_us": float(got.group(3)),
            "wal_bytes": dir_bytes(wal)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--dir", default=None, help="where the logs go (default: a temp dir)")
    ap.add_argument("--modes", default="off,everysec,always")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    base = tempfile.mkdtemp(prefix="master_wal.", dir=a.dir)
    try:
        rows = [run_mode(a.build, mode, a.clients, a.duration, base)
                for mode in a.modes.split(",")]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    off = next((r["ops_per_s"] for r in rows if r["mode"] == "off"), None)
    for r in rows:
        r["vs_off"] = round(r["ops_per_s"] / off, 3) if off else None
        if a.json:
            print(json.dumps(r))
        else:
            print(f"master_wal mode={r['mode']} clients={r['clients']} "
                  f"ops/s={r['ops_per_s']:.0f} p50_us={r['p50_us']:.1f} "
                  f"p99_us={r['p99_us']:.1f} vs_off={r['vs_off']} wal_bytes={r['wal_bytes']}")


if __name__ == "__main__":
    main()
