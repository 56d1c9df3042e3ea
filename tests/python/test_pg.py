"""mooncake.pg: the mooncake-cpu torch.distributed backend, with real
processes over loopback (tests/python/pg_worker.py is one rank).

Each test starts WORLD ranks of one scenario and waits for them all; a rank
exits 0 only if every check of its scenario passed.  The TCPStore of
torch.distributed runs in rank 0 on a free port.
"""

import os
import subprocess
import sys
import time

import pytest

from conftest import HERE, free_port

torch = pytest.importorskip("torch")

# every rank of one test together; generous against a loaded machine
RUN_TIMEOUT = 120.0


def run_ranks(scenario, world, env_extra=None):
    port = free_port()
    env = dict(os.environ, MC_LOG_LEVEL="error", OMP_NUM_THREADS="1", **(env_extra or {}))
    procs = [subprocess.Popen([sys.executable, str(HERE / "pg_worker.py"), scenario, str(r),
                               str(world), str(port)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    deadline = time.monotonic() + RUN_TIMEOUT
    outs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            outs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [(p.returncode, o) for p, o in zip(procs, outs)]


def test_collectives_2_ranks():
    """Every collective, several dtypes and reductions, direct and ring sizes."""
    for rank, (rc, out) in enumerate(run_ranks("collectives", 2)):
        assert rc == 0 and f"rank {rank} collectives ok" in out, f"rank {rank}:\n{out}"


def test_collectives_p2p_groups_4_ranks():
    """The same on 4 ranks; then ring, ordered and batched send/recv with
    several chunks per message; then new_group subgroups (one process start
    for the three: starting torch dominates on a small machine)."""
    res = run_ranks("collectives+p2p+groups", 4,
                    {"MOONCAKE_P2P_CHUNK_SIZE": "64K", "MOONCAKE_P2P_POOL_SIZE": "256K"})
    for rank, (rc, out) in enumerate(res):
        assert rc == 0 and f"rank {rank} collectives+p2p+groups ok" in out, f"rank {rank}:\n{out}"


def test_rank_killed_mid_all_reduce():
    """Rank 3 is SIGKILLed in an all_reduce: ranks 0-2 return within the
    collective timeout with rank 3 in failed_ranks_hint, then the world group
    (auto-synced, size 3) and a new group without rank 3 work."""
    res = run_ranks("failure", 4)
    assert res[3][0] == -9, f"the victim was not killed:\n{res[3][1]}"
    for rank, (rc, out) in enumerate(res[:3]):
        assert rc == 0 and f"rank {rank} failure ok" in out, f"rank {rank}:\n{out}"
