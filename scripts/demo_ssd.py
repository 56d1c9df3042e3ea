#!/usr/bin/python3
"""scripts/demo_ssd.py - Mooncake Store's SSD tier end to end, on loopback.

  1. build (meson setup build-demo if it does not exist, then ninja);
  2. start mooncake_master with --enable_offload and its embedded HTTP
     metadata server, every port chosen free;
  3. set up two store clients in this process: the *owner*, whose DRAM
     segment (MC_DEMO_SSD_POOL_MIB, default 32 MiB) is a third of the data
     and whose SSD tier lives in a fresh directory (MC_DEMO_SSD_DIR, default
     a new directory under /tmp), and a *reader* with no segment;
  4. the owner puts MC_DEMO_SSD_OBJECTS (default 96) objects of 1 MiB of
     pseudo-random data; a put that finds the pool full waits until the
     objects before it are on disk and their DRAM copies can go;
  5. the reader gets every object back and compares its digest: the objects
     that are only on disk come through the owner's offload RPC and the
     Transfer Engine;
  6. print what moved, how many objects were read from disk, and the SSD
     line of the master's /metrics/summary; exit 0, or non-zero on any
     failure or mismatch.

Run with Debian's python3 (numpy is not needed).  Environment: MC_DEMO_BUILD
(build dir, default <repo>/build-demo), MC_DEMO_SSD_OBJECTS, MC_DEMO_SSD_POOL_MIB,
MC_DEMO_SSD_DIR, MC_LOG_LEVEL (default warn).
"""

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("MC_DEMO_BUILD", ROOT / "build-demo"))
OBJECTS = int(os.environ.get("MC_DEMO_SSD_OBJECTS", "96"))
POOL_MIB = int(os.environ.get("MC_DEMO_SSD_POOL_MIB", "32"))
MiB = 1 << 20
STEP_TIMEOUT = 120  # seconds allowed for any one step


def fail(msg):
    print(f"demo_ssd: {msg}", file=sys.stderr)
    sys.exit(1)


def build():
    if not (BUILD / "build.ninja").exists():
        subprocess.run(["meson", "setup", str(BUILD), "--buildtype=release"], cwd=ROOT,
                       check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["ninja", "-C", str(BUILD)], check=True, stdout=subprocess.DEVNULL)


def value(i):
    """1 MiB of bytes that only object i has (blake2b in counter mode)."""
    out = bytearray()
    c = 0
    while len(out) < MiB:
        out += hashlib.blake2b(f"{i}/{c}".encode(), digest_size=64).digest()
        c += 1
    return bytes(out[:MiB])


def start_master(logdir):
    log = open(logdir / "master.stderr", "wb")
    p = subprocess.Popen([str(BUILD / "tools/mooncake_master"), "--rpc_port=0",
                          "--rpc_address=127.0.0.1", "--metrics_port=0",
                          "--metrics_host=127.0.0.1", "--enable_http_metadata_server",
                          "--http_metadata_server_port=0",
                          "--http_metadata_server_host=127.0.0.1", "--enable_offload=true"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
    pat = re.compile(r"listening rpc=(\d+) metrics=(\d+) metadata=(\d+)")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = pat.search((logdir / "master.stderr").read_text(errors="replace"))
        if m:
            return p, log, [int(x) for x in m.groups()]
        if p.poll() is not None:
            fail(f"the master exited: {(logdir / 'master.stderr').read_text()[-2000:]}")
        time.sleep(0.05)
    fail("the master did not start")


def main():
    if OBJECTS < 1 or POOL_MIB < 4 or OBJECTS * MiB > 8 << 30:
        fail("MC_DEMO_SSD_OBJECTS must be 1..8192, MC_DEMO_SSD_POOL_MIB at least 4")
    os.environ.setdefault("MC_LOG_LEVEL", "warn")
    os.environ.setdefault("MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS", "1")
    print("demo_ssd: building ...", flush=True)
    build()
    sys.path.insert(0, str(BUILD / "python"))
    from mooncake.store import MooncakeDistributedStore  # noqa: E402 (after the build)

    work = Path(tempfile.mkdtemp(prefix="mooncake-demo-ssd."))
    ssd = Path(os.environ.get("MC_DEMO_SSD_DIR") or tempfile.mkdtemp(prefix="mc-ssd.",
                                                                      dir="/tmp"))
    master, log, (rpc, metrics, meta) = start_master(work)
    owner = reader = None
    try:
        addr, meta_uri = f"127.0.0.1:{rpc}", f"http://127.0.0.1:{meta}/metadata"
        owner = MooncakeDistributedStore()
        rc = owner.setup("127.0.0.1", meta_uri, POOL_MIB * MiB, 16 * MiB, "tcp", "", addr,
                         enable_ssd_offload=True, ssd_offload_path=str(ssd))
        if rc != 0:
            fail(f"owner setup: {rc}")
        reader = MooncakeDistributedStore()
        rc = reader.setup("127.0.0.1", meta_uri, 0, 16 * MiB, "tcp", "", addr)
        if rc != 0:
            fail(f"reader setup: {rc}")
        print(f"demo_ssd: master rpc={rpc} metadata={meta}; owner {owner.get_hostname()} with "
              f"a {POOL_MIB} MiB pool and its SSD tier in {ssd}; reader {reader.get_hostname()}")

        digests, waits = [], 0
        t0 = time.monotonic()
        for i in range(OBJECTS):
            v = value(i)
            digests.append(hashlib.blake2b(v, digest_size=16).digest())
            deadline = time.monotonic() + STEP_TIMEOUT
            while (rc := owner.put(f"demo/{i}", v)) != 0:
                if rc != -200 or time.monotonic() > deadline:  # NO_AVAILABLE_HANDLE: pool full
                    fail(f"put demo/{i}: {rc}")
                waits += 1
                time.sleep(0.05)
        put_s = time.monotonic() - t0
        print(f"demo_ssd: put {OBJECTS} objects of 1 MiB ({OBJECTS} MiB through a {POOL_MIB} "
              f"MiB pool) in {put_s:.2f} s, {OBJECTS / put_s:.0f} MiB/s; {waits} waits for "
              f"the pool")

        on_disk = memory = 0
        deadline = time.monotonic() + STEP_TIMEOUT
        for i in range(OBJECTS):
            while True:
                kinds = [("memory" if r.is_memory_replica() else "disk")
                         for r in reader.get_replica_desc(f"demo/{i}")]
                if "disk" in kinds:
                    break
                if time.monotonic() > deadline:
                    fail(f"demo/{i} never reached the disk")
                time.sleep(0.05)
            on_disk += kinds == ["disk"]
            memory += "memory" in kinds
        print(f"demo_ssd: every object has a disk copy; {on_disk} only on disk, {memory} "
              f"still in DRAM too")

        before = reader.get_offload_rpc_read_count()
        t0 = time.monotonic()
        for i in range(OBJECTS):
            got = reader.get(f"demo/{i}")
            if hashlib.blake2b(got, digest_size=16).digest() != digests[i]:
                fail(f"demo/{i}: read back {len(got)} bytes that differ from what was put")
        get_s = time.monotonic() - t0
        from_disk = reader.get_offload_rpc_read_count() - before
        print(f"demo_ssd: the reader got all {OBJECTS} objects back byte-exact in {get_s:.2f} "
              f"s, {OBJECTS / get_s:.0f} MiB/s; {from_disk} of them from the owner's disk")
        if from_disk < 1:
            fail("nothing was read from disk")

        # the owner reports its SSD capacity each heartbeat
        deadline = time.monotonic() + STEP_TIMEOUT
        while True:
            summary = urllib.request.urlopen(
                f"http://127.0.0.1:{metrics}/metrics/summary", timeout=10).read().decode()
            ssd_line = next((ln for ln in summary.splitlines() if "SSD Storage" in ln), "")
            if ssd_line and not re.search(r"SSD Storage: 0 B /", ssd_line):
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        print("demo_ssd: master /metrics/summary:")
        for ln in summary.splitlines():
            print(f"  {ln}")
        if not ssd_line:
            fail("no SSD line in /metrics/summary")
        for name in sorted(os.listdir(ssd)):
            if name.endswith(".bucket"):
                print(f"demo_ssd: on disk: {name} ({os.path.getsize(ssd / name)} bytes)")
                break
        print("demo_ssd: OK")
    finally:
        for s in (reader, owner):
            if s is not None:
                s.close()
        master.terminate()
        master.wait(timeout=20)
        log.close()
        shutil.rmtree(work, ignore_errors=True)
        if not os.environ.get("MC_DEMO_SSD_DIR"):
            shutil.rmtree(ssd, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
