"""Ranks that exit as soon as their last collective returned
(tests/python/test_pg.py test_exit_right_after_last_collective).

    python3 pg_exit.py ROUNDS WORLD PORT SIZE[,SIZE...]

Imports torch once and runs a TCPStore server, then ROUNDS times forks WORLD
rank processes (cheap: torch is already loaded) that init a mooncake-cpu
group on a fresh prefix of the store, run a few all_reduces of SIZE float32
elements (the sizes taken in turn, one per round: 5 is one inline message
per pair, 100000 the ring with flagged chunks) and leave at once: no rendezvous, no barrier after the last
collective; a rank ends the way a Python process does (the atexit handlers,
then the process is gone).  A rank's exit status says whether every one of
its collectives succeeded with the right sum.  Prints one line per round
("round I: exit codes [...]") and exits 0 when every rank of every round
exited 0.  The store is the parent's, so a rank's departure never takes the
store with it: what is tested is the backend's own departure.
"""

import atexit
import os
import sys
import time

import torch
import torch.distributed as dist

import mooncake.pg as mpg


def rank_body(rnd, rank, world, port, size):
    store = dist.PrefixStore(f"round{rnd}/",
                             dist.TCPStore("127.0.0.1", port, world + 1, False))
    dist.init_process_group("mooncake-cpu", store=store, rank=rank, world_size=world)
    want = world * (world + 1) / 2
    for i in range(4):
        t = torch.full((size,), float(rank + 1))
        work = dist.all_reduce(t, async_op=True)
        work.wait()
        if not mpg.get_local_success(work):
            hint = mpg.get_failed_ranks_hint(work).tolist()
            print(f"round {rnd} rank {rank}: all_reduce {i} failed, hint {hint}", flush=True)
            return 1
        if not t.eq(want).all():
            print(f"round {rnd} rank {rank}: all_reduce {i} gave {t[:4].tolist()}", flush=True)
            return 2
    return 0


ROUND_DEADLINE_S = 60.0


def reap(pids, deadline_s):
    """The ranks' exit codes; a rank still running after deadline_s is killed
    and reported as -9, so a hung rank fails its round instead of the run."""
    codes = {}
    end = time.monotonic() + deadline_s
    while len(codes) < len(pids):
        for p in pids:
            if p in codes:
                continue
            done, status = os.waitpid(p, os.WNOHANG)
            if done:
                codes[p] = os.waitstatus_to_exitcode(status)
            elif time.monotonic() > end:
                os.kill(p, 9)
                os.waitpid(p, 0)
                codes[p] = -9
        if len(codes) < len(pids):
            time.sleep(0.02)  # polling the children's exit with a deadline
    return [codes[p] for p in pids]


def main():
    rounds, world, port = (int(x) for x in sys.argv[1:4])
    sizes = [int(x) for x in sys.argv[4].split(",")]
    server = dist.TCPStore("127.0.0.1", port, world + 1, True, wait_for_workers=False)
    bad = 0
    t0 = time.monotonic()
    for rnd in range(rounds):
        pids = []
        for rank in range(world):
            pid = os.fork()
            if pid == 0:
                code = 3
                try:
                    code = rank_body(rnd, rank, world, port, sizes[rnd % len(sizes)])
                except BaseException as e:  # noqa: BLE001 (reported, then the exit status)
                    print(f"round {rnd} rank {rank}: {type(e).__name__}: {e}", flush=True)
                finally:
                    # what a Python process does at exit: atexit handlers, then gone
                    atexit._run_exitfuncs()
                    os._exit(code)
            pids.append(pid)
        codes = reap(pids, ROUND_DEADLINE_S)
        print(f"round {rnd}: exit codes {codes}", flush=True)
        bad += any(codes)
    print(f"{rounds - bad} of {rounds} rounds clean in {time.monotonic() - t0:.1f} s", flush=True)
    del server
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
