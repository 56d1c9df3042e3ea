"""create_copy_task, create_move_task, query_task and unmount_segment of
MooncakeDistributedStore (spec store.md 1.14, 9.3): upstream's return
shapes and codes, against a real mooncake_master and two in-process
stores (the holder's heartbeat thread executes the task)."""

import json
import time
import urllib.request

import pytest

from mooncake.store import (MooncakeDistributedStore, QueryTaskResponse, ReplicateConfig,
                            TaskStatus, TaskType)

from conftest import MasterDaemon, MiB

OBJECT_NOT_FOUND = -704
SEGMENT_NOT_FOUND = -101
REPLICA_NOT_FOUND = -710
OBJECT_HAS_LEASE = -706
INVALID_PARAMS = -600
TASK_NOT_FOUND = -1400


def new_store(master):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", master.meta_uri, 16 * MiB, 4 * MiB, "tcp", "", master.addr) == 0
    return s


def finished(store, tid, timeout=15.0):
    deadline = time.monotonic() + timeout
    while True:
        resp, err = store.query_task(tid)
        assert err == 0, err
        assert isinstance(resp, QueryTaskResponse)
        with pytest.raises(AttributeError):
            resp.status = TaskStatus.SUCCESS  # read-only, as upstream's
        if resp.status in (TaskStatus.SUCCESS, TaskStatus.FAILED):
            return resp
        assert time.monotonic() < deadline, f"task {tid} still {resp.status}"
        time.sleep(0.05)


def segment_id(master, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{master.metrics}/get_segments_detail",
                                timeout=5) as r:
        segs = json.loads(r.read())["segments"]
    return next(s["segment_id"] for s in segs if s["segment_name"] == name)


@pytest.fixture(scope="module")
def pair(mc_master):
    a, b = new_store(mc_master), new_store(mc_master)
    yield a, b
    a.close()
    b.close()


def test_copy_move_and_query(pair):
    a, b = pair
    c = ReplicateConfig()
    c.preferred_segment = a.get_hostname()
    val = bytes(range(256)) * 1024
    assert a.put("tasks/k", val, c) == 0
    # failures: ((0, 0), code) and (None, code)
    assert a.create_copy_task("tasks/none", [b.get_hostname()]) == ((0, 0), OBJECT_NOT_FOUND)
    assert a.create_copy_task("tasks/k", ["nowhere:1"]) == ((0, 0), SEGMENT_NOT_FOUND)
    assert a.create_move_task("tasks/k", b.get_hostname(), a.get_hostname()) == \
        ((0, 0), REPLICA_NOT_FOUND)
    assert a.query_task((1, 2)) == (None, TASK_NOT_FOUND)
    with pytest.raises(TypeError):
        a.create_copy_task("tasks/k", b.get_hostname())  # a str, not a list

    tid, err = b.create_copy_task("tasks/k", [b.get_hostname()])
    assert err == 0 and isinstance(tid, tuple) and len(tid) == 2 and tid != (0, 0)
    resp = finished(b, tid)
    assert resp.status == TaskStatus.SUCCESS and resp.type == TaskType.REPLICA_COPY
    assert resp.id == tid and isinstance(resp.assigned_client, tuple)
    assert resp.last_updated_at_ms_epoch >= resp.created_at_ms_epoch > 0
    assert len(b.get_replica_desc("tasks/k")) == 2
    assert b.get("tasks/k") == val

    # move b's copy back to... nowhere new: a holds one; move a's to b fails (b holds)
    tid, err = a.create_move_task("tasks/k", a.get_hostname(), b.get_hostname())
    assert err == -711 and tid == (0, 0)


def test_unmount_segment(mc_master):
    s = new_store(mc_master)
    try:
        assert s.unmount_segment(["not-an-id"]) == INVALID_PARAMS
        sid = segment_id(mc_master, s.get_hostname())
        assert s.unmount_segment([sid], grace_period_seconds=0) == 0
        assert s.unmount_segment([sid]) == INVALID_PARAMS  # not mounted any more
    finally:
        s.close()


def test_copy_from_an_extra_segment(mc_master):
    """A source replica in an extra segment (allocate_and_mount_segment) of a
    client without a global segment: that client runs the task."""
    x = MooncakeDistributedStore()
    assert x.setup("127.0.0.1", mc_master.meta_uri, 0, 4 * MiB, "tcp", "", mc_master.addr) == 0
    b = new_store(mc_master)
    try:
        r = x.allocate_and_mount_segment(8 * MiB)
        assert r["ret"] == 0, r
        (xid,) = r["segment_ids"]
        c = ReplicateConfig()
        c.preferred_segment = x.get_hostname()
        val = bytes(range(251)) * 4096
        assert b.put("tasks/extra", val, c) == 0
        (only,) = b.get_replica_desc("tasks/extra")
        tid, err = b.create_copy_task("tasks/extra", [b.get_hostname()])
        assert err == 0, err
        resp = finished(b, tid)
        assert resp.status == TaskStatus.SUCCESS, resp.message
        assert len(b.get_replica_desc("tasks/extra")) == 2
        # the copy reads back alone once the extra segment is gone
        assert x.unmount_and_free_segment([xid], 0) == 0
        assert b.get("tasks/extra") == val
    finally:
        b.close()
        x.close()

def count_reaches(store, key, want, timeout=15.0):
    """get_replica_count(key) until it is want (a copy task lands on the
    holder's next heartbeat); get_replica_count takes no lease."""
    deadline = time.monotonic() + timeout
    while (n := store.get_replica_count(key)) != want:
        assert time.monotonic() < deadline, f"{key}: {n} replicas, not {want}"
        time.sleep(0.05)


def test_change_replica(tmp_path):
    # ours (the paper's change_replica): a master of its own with exactly
    # three stores, so the segments with room are known
    m = MasterDaemon(tmp_path, extra=("--default_kv_lease_ttl=500",))
    a, b, c = new_store(m), new_store(m), new_store(m)
    try:
        cfg = ReplicateConfig()
        cfg.preferred_segment = a.get_hostname()
        val = bytes(range(256)) * 512
        assert a.put("cr/k", val, cfg) == 0
        assert a.get_replica_count("cr/k") == 1
        assert a.get_replica_count("cr/none") == OBJECT_NOT_FOUND
        assert a.change_replica("cr/none", 2) == OBJECT_NOT_FOUND
        assert a.change_replica("cr/k", 256) == INVALID_PARAMS
        assert a.change_replica("cr/k", 1) == 1  # already so: nothing to do
        with pytest.raises(ValueError):
            a.change_replica("cr/k", 0)
        with pytest.raises(TypeError):
            a.change_replica("cr/k", "2")

        # grow to 3: one copy task to the two segments that hold none
        assert b.change_replica("cr/k", 3) == 3
        count_reaches(b, "cr/k", 3)
        # more than there are segments: the count it can reach
        assert b.change_replica("cr/k", 5) == 3
        # shrink to 2 (no read yet, so no lease): the newest copy goes
        assert c.change_replica("cr/k", 2) == 2
        assert c.get_replica_count("cr/k") == 2
        assert c.get("cr/k") == val  # this read leases the key (500 ms)
        # while a reader holds the lease, no replica is dropped
        assert b.change_replica("cr/k", 1) == OBJECT_HAS_LEASE
        assert b.get_replica_count("cr/k") == 2
        # the original, on a, stayed
        held = [r.get_memory_descriptor().buffer_descriptor.transport_endpoint
                for r in c.get_replica_desc("cr/k")]
        assert len(held) == 2 and held[0] == a.get_hostname(), held
    finally:
        for s in (a, b, c):
            s.close()
        m.stop()
