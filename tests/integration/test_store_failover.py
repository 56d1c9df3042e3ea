"""Reads that survive a dead holder (spec store.md 6.5, issue 15 part 5).

Between a holder's kill -9 and the master's unmount of its segment
(--client_ttl, 10 s here as upstream's default) GetReplicaList still lists
the replica there.  A read of an object with a second replica must not
fail meanwhile: the client tries the next complete replica when a transfer
fails, and tells the master (ReportUnreachable), which stops listing the
dead segment until its owner pings again.  Real processes: a master and
three store_node clients on loopback; every wait is a bounded poll.
"""

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_store_processes import TRANSPORTS, sc  # noqa: E402,F401  (sc: the fixture)

TTL_S = 10
WINDOW_S = 4.0  # gets after the kill, well inside the TTL
SIZE = 256 << 10


def first_segment(node, key):
    """The segment of the first replica the master lists for key."""
    return node.ok(f"replicas {key}").split()[2].rsplit(":", 2)[0]


@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_reads_survive_a_dead_holder(sc, transport):  # noqa: F811
    sc.start_master(f"--client_ttl={TTL_S}")
    env = TRANSPORTS[transport]
    a, b, c = sc.node(env=env), sc.node(env=env), sc.node(env=env)
    keys = [f"two-{i}" for i in range(6)]
    want = {}
    for i, k in enumerate(keys):
        want[k] = a.put(k, SIZE, 100 + i, f"seg={b.hostname}", f"seg={c.hostname}", "rep=2")
        r = a.ok(f"replicas {k}")
        assert "n=2" in r and b.hostname in r and c.hostname in r, r
    # the reader reads the first replica listed: kill that holder
    victim = b if first_segment(a, keys[0]) == b.hostname else c
    for k in keys:
        assert a.get(k) == (SIZE, want[k])
    victim.kill9()
    t_kill = time.monotonic()

    rounds, mounted_then = 0, None
    while rounds == 0 or time.monotonic() - t_kill < WINDOW_S:
        for k in keys:
            assert a.get(k) == (SIZE, want[k]), k
            assert a.get(k, op="get_into") == (SIZE, want[k]), k
            assert a.ok(f"exist {k}") == "OK 1"
        got = a.ok("bget_into " + " ".join(keys)).split()[1:]
        assert got == [f"{SIZE}:{want[k]}" for k in keys], got
        if rounds == 0:
            # the reads above ran while the master still had the dead holder
            mounted_then = victim.hostname in sc.master.segments()
        rounds += 1
    assert mounted_then, "the master unmounted the holder before the first read"
    # the master was told, and lists the dead holder's replicas no more
    assert sc.master.metric("master_segment_unreachable_reports_total") >= 1
    if victim.hostname in sc.master.segments():
        assert victim.hostname not in a.ok(f"replicas {keys[0]}")
    # a put meanwhile lands on the live holder only
    w = a.put("after-kill", SIZE, 7, "rep=2")
    assert victim.hostname not in a.ok("replicas after-kill")
    assert a.get("after-kill") == (SIZE, w)
