"""Copy and move tasks and drain jobs across a kill -9 of the master
(issues 14 and 15; master/tasks_wal.c).

A master on --wal_dir with three store_node clients.  Finished tasks, two
tasks still pending (their source's holder is SIGSTOPped, so nobody fetches
them) and a drain job of that holder's segment are in the log when the
master is killed; the master restarted on the same directory answers
QueryTask and the drain job's query with their states (TASK_NOT_FOUND and
404 before), and once the holder runs again and remounts, the pending tasks
are handed to it, the drain empties its segment, and every value reads back
byte for byte.  Every wait is a bounded poll.
"""

import json
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import sigstop  # noqa: E402
from test_store_recovery import RECOVER_S, free_port, got_any, rc  # noqa: E402,F401
from test_store_repair import post, replicas, task_status, wait_task  # noqa: E402
from test_store_processes import wait_until  # noqa: E402

SIZE = 256 << 10
TTL_S = 10  # the holder stays stopped across the restart, well within it


def drain_query(master, job):
    st, body = master.http(f"/api/v1/drain_jobs/query?job_id={job}")
    return st, json.loads(body)


def test_tasks_and_drain_job_survive_a_master_restart(rc, tmp_path):  # noqa: F811
    rpc, metrics, meta = free_port(), free_port(), free_port()
    argv = [x for x in rc.master_argv(rpc, metrics, meta) if not str(x).startswith("--client_ttl")]
    argv += [f"--client_ttl={TTL_S}", f"--wal_dir={tmp_path / 'wal'}"]
    m = rc.run_master(argv)
    a, b, c = rc.node(), rc.node(), rc.node()
    want = {}
    # finished before the kill: a copy and a move
    want["done-k"] = a.put("done-k", SIZE, 1, f"seg={a.hostname}")
    want["done-m"] = a.put("done-m", SIZE, 2, f"seg={a.hostname}")
    t_copy = a.fields(a.ok(f"copy done-k {b.hostname}"))["id"]
    assert wait_task(b, t_copy) == 3
    t_move = a.fields(a.ok(f"move done-m {a.hostname} {c.hostname}"))["id"]
    assert wait_task(b, t_move) == 3
    # pending at the kill: a (their source) is stopped, so nobody fetches them
    want["p-copy"] = a.put("p-copy", SIZE, 3, f"seg={a.hostname}")
    want["p-move"] = a.put("p-move", SIZE, 4, f"seg={a.hostname}")
    sigstop(a.p.pid)
    try:
        p_copy = b.fields(b.ok(f"copy p-copy {b.hostname}"))["id"]
        p_move = b.fields(b.ok(f"move p-move {a.hostname} {c.hostname}"))["id"]
        st, body = post(m, "/api/v1/drain_jobs", {"segments": [a.hostname], "max_concurrency": 2})
        assert st == 200, body
        job = body["job_id"]
        assert task_status(b, p_copy) in (0, 1) and task_status(b, p_move) in (0, 1)

        m.kill9()
        m = rc.run_master(argv)
        # the restarted master knows them all
        assert task_status(b, t_copy) == 3
        assert task_status(b, t_move) == 3
        assert task_status(b, p_copy) == 0  # pending (again)
        assert task_status(b, p_move) == 0
        st, q = drain_query(m, job)
        assert st == 200 and q["status_name"] in ("CREATED", "RUNNING"), q
        assert q["segments"] == [a.hostname], q
    finally:
        os.kill(a.p.pid, signal.SIGCONT)
    # a remounts: it is handed both tasks, then the drain moves the rest off it
    assert wait_task(b, p_copy, timeout=RECOVER_S + TTL_S) == 3
    assert wait_task(b, p_move, timeout=RECOVER_S) == 3

    def drained():
        st, q = drain_query(m, job)
        assert st == 200, q
        return q["status_name"] in ("SUCCEEDED", "FAILED", "CANCELED") and q

    q = wait_until(drained, 30.0, "the restored drain job")
    assert q["status_name"] == "SUCCEEDED", q
    wait_until(lambda: a.hostname not in m.segments(), 10.0, "a's segment unmounted")
    for key, x in want.items():
        got = wait_until(lambda: got_any(b, key), RECOVER_S, f"b to read {key}", interval=0.2)
        assert got == (SIZE, x), key
        assert a.hostname not in replicas(b, key)
    # a new task gets an id none of the logged ones had
    t_new = b.fields(b.ok(f"copy done-k {c.hostname}"))["id"]
    assert t_new not in (t_copy, t_move, p_copy, p_move, job)
    assert wait_task(b, t_new) == 3
