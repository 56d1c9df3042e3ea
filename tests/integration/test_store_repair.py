"""Copy and move tasks, drain jobs and replica repair over real processes
(spec store.md 1.14, 7.1, 6.5; issue 15 parts 3, 4 and 6).

A master and three store_node clients on loopback.  The master hands each
task to the client holding its source, which writes the bytes through its
Transfer Engine; reads afterwards are checked byte for byte (xxh3 of the
value).  Every wait is a bounded poll on the master's state.
"""

import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_store_processes import sc, wait_until  # noqa: E402,F401  (sc: the fixture)

SIZE = 256 << 10


def replicas(node, key):
    """The segment names of key's replicas, sorted."""
    r = node.ok(f"replicas {key}").split()
    return sorted(x.rsplit(":", 2)[0] for x in r[2:])


def task_status(node, tid):
    return int(node.fields(node.ok(f"task {tid}"))["status"])


def wait_task(node, tid, timeout=15.0):
    return wait_until(lambda: task_status(node, tid) in (2, 3) and task_status(node, tid),
                      timeout, f"task {tid} to finish")


def post(master, path, body=None):
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(f"http://127.0.0.1:{master.metrics}{path}", data=data,
                                 method="POST")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_copy_and_move_tasks(sc):  # noqa: F811
    sc.start_master()
    a, b, c = sc.node(), sc.node(), sc.node()
    want = a.put("k", SIZE, 11, f"seg={a.hostname}")
    assert replicas(a, "k") == [a.hostname]
    # the codes of bad requests
    assert a.err(f"copy nope {b.hostname}")[1] == -704
    assert a.err("copy k no-such:1")[1] == -101
    assert a.err(f"move k {b.hostname} {c.hostname}")[1] == -710
    assert a.err("task 1-2")[1] == -1400
    # a copy to two segments, executed by the holder (a), read from each
    tid = a.fields(a.ok(f"copy k {b.hostname} {c.hostname}"))["id"]
    assert wait_task(b, tid) == 3
    assert replicas(a, "k") == sorted([a.hostname, b.hostname, c.hostname])
    assert b.get("k") == (SIZE, want) and c.get("k") == (SIZE, want)
    # a move: the source replica goes, the bytes stay exact
    want2 = b.put("m", SIZE, 12, f"seg={b.hostname}")
    tid = a.fields(a.ok(f"move m {b.hostname} {c.hostname}"))["id"]
    assert wait_task(a, tid) == 3
    assert replicas(a, "m") == [c.hostname]
    assert a.get("m") == (SIZE, want2)
    assert a.err(f"move m {c.hostname} {c.hostname}")[1] == -600
    assert sc.master.metric("master_tasks_succeeded_total") == 2
    # c unmounts its own segment (the id as the admin page prints it): at once
    st, body = sc.master.http("/get_segments_detail")
    sid = next(s["segment_id"] for s in json.loads(body)["segments"]
               if s["segment_name"] == c.hostname)
    assert a.err(f"unmount {sid}")[1] == -600  # not a's segment
    c.ok(f"unmount {sid}")
    assert c.hostname not in sc.master.segments()
    assert a.err("get m")[1] == -704  # its only replica was there
    # k lost its copy on c; no segment left holds none, so its repair waits ...
    assert a.get("k") == (SIZE, want)
    assert replicas(a, "k") == sorted([a.hostname, b.hostname])
    assert sc.master.metric("master_replica_repair_under_replicated") == 1
    # ... until a new segment comes
    d = sc.node()
    wait_until(lambda: replicas(a, "k") == sorted([a.hostname, b.hostname, d.hostname]),
               10.0, "k's third copy on the new node")
    assert d.get("k") == (SIZE, want)


def test_holder_killed_replicas_come_back(sc):  # noqa: F811
    sc.start_master("--client_ttl=2")
    a, b, c = sc.node(), sc.node(), sc.node()
    keys = [f"r{i}" for i in range(24)]
    want = {k: a.put(k, SIZE, 100 + i, f"seg={b.hostname}", f"seg={c.hostname}", "rep=2")
            for i, k in enumerate(keys)}
    for k in keys:
        assert replicas(a, k) == sorted([b.hostname, c.hostname])
    b.kill9()
    t0 = time.monotonic()

    def whole():
        return all(len(replicas(a, k)) == 2 and b.hostname not in replicas(a, k)
                   for k in keys) and sc.master.metric(
            "master_replica_repair_under_replicated") == 0

    wait_until(whole, 20.0, "every object back at 2 replicas")
    took = time.monotonic() - t0
    assert took < 20.0
    assert sc.master.metric("master_replica_repairs_total") == len(keys)
    assert sc.master.metric("master_replica_repair_bytes_total") == len(keys) * SIZE
    for k in keys:
        assert replicas(a, k) == sorted([a.hostname, c.hostname])
        assert a.get(k) == (SIZE, want[k])
    # the new copies survive the other old holder's death too
    c.kill9()
    wait_until(lambda: c.hostname not in sc.master.segments(), 10.0, "c unmounted")
    for k in keys:
        assert a.get(k) == (SIZE, want[k])


def test_drain_empties_a_node(sc):  # noqa: F811
    sc.start_master()
    a, b, c = sc.node(), sc.node(), sc.node()
    keys = [f"d{i}" for i in range(16)]
    want = {k: b.put(k, SIZE, 200 + i, f"seg={b.hostname}") for i, k in enumerate(keys)}
    # bad requests: not JSON, unknown segment, unknown job
    st, body = post(sc.master, "/api/v1/drain_jobs")
    assert st == 400 and body["error_code"] == -600
    st, body = post(sc.master, "/api/v1/drain_jobs", {"segments": ["nope:1"]})
    assert st == 404 and body["error_code"] == -101
    st, body = sc.master.http("/api/v1/drain_jobs/query?job_id=1-2")
    assert st == 404 and json.loads(body)["error_code"] == -1402

    st, body = post(sc.master, "/api/v1/drain_jobs",
                    {"segments": [b.hostname], "max_concurrency": 2})
    assert st == 200 and body["status"] == "CREATED", body
    job = body["job_id"]

    def finished():
        for k in keys[:4]:  # reads keep working meanwhile
            assert a.get(k) == (SIZE, want[k])
        s, q = sc.master.http(f"/api/v1/drain_jobs/query?job_id={job}")
        q = json.loads(q)
        assert s == 200 and q["active_units"] <= 2, q
        return q["status_name"] in ("SUCCEEDED", "FAILED") and q

    q = wait_until(finished, 20.0, "the drain job")
    assert q["status_name"] == "SUCCEEDED", q
    assert q["succeeded_units"] == len(keys) and q["migrated_bytes"] == len(keys) * SIZE
    assert b.hostname not in sc.master.segments()
    for k in keys:
        assert b.hostname not in replicas(a, k)
        assert a.get(k) == (SIZE, want[k])
    # a finished job cannot be cancelled into another state
    st, body = post(sc.master, f"/api/v1/drain_jobs/cancel?job_id={job}")
    assert st == 200 and body["status_name"] == "SUCCEEDED"
