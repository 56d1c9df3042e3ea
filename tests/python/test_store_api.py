"""mooncake.store against a real mooncake_master (the mc_master fixture).

Covers every MooncakeDistributedStore method with its success, error and miss
values (spec store.md 9, python-api-and-integrations.md), argument type errors,
a store that is not set up, concurrency, close/re-setup, the tensor format
(store.md 1.12) and the call patterns of vLLM, SGLang and LMCache.

Keys carry a per-test prefix, so tests sharing the module's store do not see
each other's objects; tests that need a clean tenant use their own tenant_id.
"""

import os
import struct
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pytest

from mooncake.store import (MooncakeDistributedStore, ReplicateConfig, SoftPinAction,
                            ReplicaStatus, ReplicaDescriptor, MemoryDescriptor, Descriptor,
                            BufferHandle)
import mooncake.store as mstore

KiB = 1 << 10
MiB = 1 << 20

INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
OBJECT_HAS_LEASE = -706
NOT_SUPPORTED = -1012
FILE_OPEN_FAIL = -1101

LEASE_S = 0.5  # mc_master runs with --default_kv_lease_ttl=500
HDR = 304


def new_store(master, seg=64 * MiB, buf=32 * MiB, **kw):
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", master.meta_uri, seg, buf, "tcp", "", master.addr, **kw)
    assert rc == 0, rc
    return s


@pytest.fixture(scope="module")
def store(mc_master):
    s = new_store(mc_master)
    yield s
    assert s.close() == 0


@pytest.fixture
def k(request):
    """A key prefix unique to the test."""
    base = f"{request.node.name}-{uuid.uuid4().hex[:8]}"
    return lambda name="": f"{base}/{name}"


@pytest.fixture
def regbuf(store):
    """A 4 MiB numpy buffer registered with the module's store."""
    b = np.zeros(4 * MiB, np.uint8)
    assert store.register_buffer(b.ctypes.data, b.nbytes) == 0
    yield b
    assert store.unregister_buffer(b.ctypes.data) == 0


def rnd(n, seed=0):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


# ---- module surface, config, enums ---------------------------------------------------


def test_module_surface():
    for name in ("MooncakeDistributedStore", "ReplicateConfig", "SoftPinAction", "ReplicaStatus",
                 "ReplicaDescriptor", "MemoryDescriptor", "Descriptor", "BufferHandle",
                 "ObjectDataType", "TaskType", "TaskStatus"):
        assert hasattr(mstore, name), name
    assert ReplicaStatus.COMPLETE == 3 and mstore.COMPLETE == ReplicaStatus.COMPLETE
    assert [m.name for m in SoftPinAction] == ["PRESERVE", "ENABLE", "DISABLE"]
    with pytest.raises(AttributeError):
        mstore.no_such_thing  # noqa: B018


def test_constructor_and_subclass():
    with pytest.raises(TypeError):
        MooncakeDistributedStore(1)

    class Sub(MooncakeDistributedStore):
        def __getattr__(self, name):
            if name.startswith("async_"):
                return lambda *a: ("wrapped", name[6:])
            raise AttributeError(name)

    s = Sub()
    s.extra = 5
    assert s.extra == 5
    assert s.async_get("x") == ("wrapped", "get")
    assert s.get("x") == b""  # real methods are found before __getattr__


def test_replicate_config():
    for f in ("replica_num", "with_soft_pin", "soft_pin_action", "soft_pin_ttl_ms", "with_hard_pin",
              "preferred_segment", "preferred_segments", "prefer_alloc_in_same_node", "group_ids",
              "nof_replica_num", "dfs_replica_num", "data_type", "preferred_nof_segments"):
        assert hasattr(ReplicateConfig, f), f
    c = ReplicateConfig()
    assert c.replica_num == 1 and c.preferred_segment == "" and c.preferred_segments == []
    assert c.soft_pin_ttl_ms is None and c.group_ids is None and not c.with_hard_pin
    assert c.soft_pin_action == SoftPinAction.PRESERVE and not c.with_soft_pin
    c.with_soft_pin = True
    assert c.soft_pin_action == SoftPinAction.ENABLE
    c.soft_pin_action = SoftPinAction.DISABLE
    assert not c.with_soft_pin
    c.soft_pin_ttl_ms = 1000
    assert c.soft_pin_ttl_ms == 1000
    c.soft_pin_ttl_ms = None
    for bad in (-1, 1 << 64, "5", 1.5):
        with pytest.raises(TypeError):
            c.soft_pin_ttl_ms = bad
    with pytest.raises(TypeError):
        c.replica_num = "two"
    with pytest.raises(TypeError):
        c.preferred_segments = [1, 2]
    with pytest.raises(TypeError):
        c.preferred_segment = 5
    c.group_ids = ["g1", "g2"]
    assert c.group_ids == ["g1", "g2"]
    c.group_ids = None
    c.preferred_segments = ("a", "b")
    assert c.preferred_segments == ["a", "b"]
    c.replica_num = 3
    assert "replica_num: 3" in str(c)
    with pytest.raises(TypeError):
        ReplicateConfig(1)


# ---- not set up --------------------------------------------------------------------


def test_not_set_up_values():
    s = MooncakeDistributedStore()
    assert s.health_check() == 1
    assert s.get_hostname() == ""
    assert s.close() == 0
    assert s.put("k", b"v") == INVALID_PARAMS
    assert s.put_parts("k", b"a", b"b") == INVALID_PARAMS
    assert s.put_batch(["k"], [b"v"]) == INVALID_PARAMS
    assert s.upsert("k", b"v") == INVALID_PARAMS
    assert s.upsert_parts("k", b"v") == INVALID_PARAMS
    assert s.upsert_batch(["k"], [b"v"]) == INVALID_PARAMS
    assert s.get("k") == b""
    assert s.get_batch(["k", "j"]) == [b""]
    assert s.get_buffer("k") is None
    assert s.batch_get_buffer(["k"]) == [None]
    assert s.get_size("k") == INVALID_PARAMS
    assert s.is_exist("k") == INVALID_PARAMS
    assert s.batch_is_exist(["k", "j"]) == [INVALID_PARAMS] * 2
    assert s.remove("k") == INVALID_PARAMS
    assert s.remove_by_regex(".*") == INVALID_PARAMS
    assert s.remove_all() == INVALID_PARAMS
    assert s.batch_remove(["k"]) == [INVALID_PARAMS]
    assert s.register_buffer(4096, 4096) == INVALID_PARAMS
    assert s.unregister_buffer(4096) == INVALID_PARAMS
    assert s.put_from("k", 4096, 10) == INVALID_PARAMS
    assert s.get_into("k", 4096, 10) == INVALID_PARAMS
    assert s.batch_put_from(["k"], [4096], [10]) == [INVALID_PARAMS]
    assert s.batch_get_into(["k"], [4096], [10]) == [INVALID_PARAMS]
    assert s.batch_put_from_multi_buffers(["k"], [[4096]], [[10]]) == [INVALID_PARAMS]
    assert s.batch_get_into_multi_buffers(["k"], [[4096]], [[10]]) == [INVALID_PARAMS]
    assert s.get_into_ranges([4096], [["k"]], [[[0]]], [[[0]]], [[[1]]]) == [[[INVALID_PARAMS]]]
    assert s.get_replica_desc("k") == []
    assert s.batch_get_replica_desc(["k"]) == {}
    assert s.batch_replica_clear(["k"]) == []
    assert s.alloc_from_mem_pool(100) == 0
    assert s.get_tensor("k") is None
    assert s.batch_get_tensor(["k"]) == [None]
    torch = pytest.importorskip("torch")
    assert s.put_tensor("k", torch.zeros(3)) == INVALID_PARAMS
    assert s.batch_put_tensor(["k"], [torch.zeros(3)]) == [INVALID_PARAMS]


# ---- argument type errors -------------------------------------------------------------


def test_argument_type_errors(store):
    bad_calls = [
        lambda: store.put(1, b"v"),
        lambda: store.put("k", 12),
        lambda: store.put("k", "text"),
        lambda: store.put("k", b"v", config=5),
        lambda: store.put("k", b"v", bogus=1),
        lambda: store.put("k"),
        lambda: store.put_parts("k", b"a", 7),
        lambda: store.put_parts(),
        lambda: store.put_parts("k", b"a", nope=None),
        lambda: store.put_batch("abc", [b"v"]),
        lambda: store.put_batch(["k"], b"v"),
        lambda: store.put_batch([1], [b"v"]),
        lambda: store.get(None),
        lambda: store.get_batch("abc"),
        lambda: store.get_batch([1, 2]),
        lambda: store.get_buffer(3),
        lambda: store.is_exist(b"\0x"),
        lambda: store.batch_is_exist(None),
        lambda: store.remove(1),
        lambda: store.register_buffer("0x10", 10),
        lambda: store.register_buffer(-1, 10),
        lambda: store.register_buffer(1.5, 10),
        lambda: store.put_from("k", 1 << 64, 1),
        lambda: store.get_into("k", 100, "10"),
        lambda: store.batch_put_from(["k"], ["x"], [1]),
        lambda: store.batch_get_into(["k"], [1], None),
        lambda: store.batch_put_from_multi_buffers(["k"], [1], [[1]]),
        lambda: store.batch_get_into_multi_buffers(["k"], [[1]], [["a"]]),
        lambda: store.get_into_ranges(["x"], [["k"]], [[[0]]], [[[0]]], [[[1]]]),
        lambda: store.get_replica_desc(None),
        lambda: store.remove_by_regex(None),
        lambda: store.setup(1, 2, 3, 4, 5, 6, 7),
        lambda: store.setup("h", "m", 1, 1, "tcp", "", "a", unknown_kw=1),
        lambda: store.setup("h", "m", 1),
        lambda: store.setup("h", "m", 1, 1, "tcp", "", "a", engine=object()),
        lambda: store.alloc_from_mem_pool("x"),
    ]
    for i, call in enumerate(bad_calls):
        with pytest.raises((TypeError, ValueError)):
            call()
            pytest.fail(f"call {i} did not raise")
    with pytest.raises(TypeError, match="unknown_kw"):
        store.setup("h", "m", 1, 1, "tcp", "", "a", unknown_kw=1)
    assert store.health_check() == 0  # nothing above disturbed the store


def test_bool_arguments_refuse_str_and_objects(store, k):
    """A bool argument takes what upstream's pybind11 caster takes (bools,
    None, ints, numpy.bool_) and refuses a str or an arbitrary object with
    a TypeError.  Failed before: they were truth values, so
    remove_all(object()) was a forced remove_all and removed every key."""
    assert store.put(k("keep"), b"1") == 0
    bad = ("yes", "", object(), [1], b"x")
    calls = [
        lambda v: store.remove_all(v),
        lambda v: store.remove_all(force=v),
        lambda v: store.remove(k("keep"), v),
        lambda v: store.remove_by_regex("^" + k("keep"), v),
        lambda v: store.batch_remove([k("keep")], v),
        lambda v: store.register_buffer(1, 1, v),
        lambda v: store.batch_get_into_multi_buffers([k("keep")], [[1]], [[1]], v),
        lambda v: store.setup("h", "m", 1, 1, "tcp", "", "a", enable_ssd_offload=v),
        lambda v: store.setup("h", "m", 1, 1, "tcp", "", "a", verify=v),
    ]
    for i, call in enumerate(calls):
        for v in bad:
            with pytest.raises(TypeError, match="must be a bool"):
                call(v)
                pytest.fail(f"call {i} took {v!r}")
    assert store.get(k("keep")) == b"1"  # nothing above removed it
    c = ReplicateConfig()
    for f in ("with_hard_pin", "with_soft_pin", "prefer_alloc_in_same_node"):
        for v in bad:
            with pytest.raises(TypeError, match="must be a bool"):
                setattr(c, f, v)
        setattr(c, f, 1)  # ints are truth values, as upstream's caster
        assert getattr(c, f) is True
        setattr(c, f, None)
        assert getattr(c, f) is False
    np = pytest.importorskip("numpy")
    assert store.remove(k("keep"), np.bool_(True)) == 0  # forced: the get above leased it
    assert store.get(k("keep")) == b""


# ---- copy-based API -----------------------------------------------------------------


def test_put_get_basic(store, k):
    assert store.put(k("a"), b"hello") == 0
    assert store.get(k("a")) == b"hello"
    assert store.get_size(k("a")) == 5
    assert store.is_exist(k("a")) == 1
    assert store.is_exist(k("missing")) == 0
    assert store.get(k("missing")) == b""
    assert store.get_size(k("missing")) == OBJECT_NOT_FOUND
    # put is insert-if-absent: 0, no overwrite
    assert store.put(k("a"), b"other value") == 0
    assert store.get(k("a")) == b"hello"
    # any bytes-like value
    for i, v in enumerate([bytearray(b"ba"), memoryview(b"mv"), np.arange(10, dtype=np.int32),
                           array_of_bytes(3)]):
        assert store.put(k(f"v{i}"), v) == 0
        assert store.get(k(f"v{i}")) == bytes(memoryview(v).cast("B"))
    # empty key, empty value
    assert store.put("", b"x") == INVALID_PARAMS
    assert store.put(k("empty"), b"") == INVALID_PARAMS
    assert store.get("") == b""


def array_of_bytes(n):
    import array
    return array.array("B", range(n))


def test_put_larger_than_local_buffer(tmp_path, k):
    # nothing stages through the local buffer (32 MiB here): unlike upstream,
    # which returns -600, the value is sent from the caller's memory.  A master
    # of its own with the default 10 s read lease: this module's 500 ms one is
    # shorter than a 33 MiB read on a loaded 2-core machine (750-850 ms seen),
    # and a read that outlives its lease is thrown away (get returns b"").
    from conftest import MasterDaemon
    m = MasterDaemon(tmp_path)
    try:
        s = new_store(m)
        v = bytes(range(256)) * (33 * MiB // 256) + b"tail"
        assert s.put(k("big"), v) == 0
        got = s.get(k("big"))
        assert len(got) == len(v) and got == v
        assert s.remove(k("big"), force=True) == 0
        assert s.close() == 0
    finally:
        m.stop()


def test_put_with_config(store, k):
    c = ReplicateConfig()
    c.with_soft_pin = True
    c.soft_pin_ttl_ms = 60000
    c.with_hard_pin = False
    c.preferred_segment = store.get_hostname()
    c.preferred_segments = [store.get_hostname()]
    c.group_ids = ["grp"]
    assert store.put(k("cfg"), b"pinned", c) == 0
    assert store.put(k("cfg2"), b"pinned", config=c) == 0
    assert store.get(k("cfg")) == b"pinned"
    same_node = ReplicateConfig()
    same_node.prefer_alloc_in_same_node = True
    # staged calls reject prefer_alloc_in_same_node (spec 9.2)
    assert store.put(k("sn"), b"x", same_node) == INVALID_PARAMS
    assert store.put_parts(k("sn"), b"x", config=same_node) == INVALID_PARAMS
    assert store.put_batch([k("sn")], [b"x"], same_node) == INVALID_PARAMS
    assert store.upsert(k("sn"), b"x", same_node) == INVALID_PARAMS


def test_put_parts_and_upsert_parts(store, k):
    assert store.put_parts(k("p"), b"ab", bytearray(b"cd"), memoryview(b"ef")) == 0
    assert store.get(k("p")) == b"abcdef"
    assert store.put_parts(k("p1"), b"only") == 0
    assert store.get(k("p1")) == b"only"
    assert store.put_parts(k("none")) == INVALID_PARAMS
    assert store.upsert_parts(k("p"), b"x", b"yz") == 0
    assert store.get(k("p")) == b"xyz"
    assert store.upsert_parts(k("new"), b"1", b"2", config=ReplicateConfig()) == 0
    assert store.get(k("new")) == b"12"


def test_put_batch_and_upsert_batch(store, k):
    keys = [k(str(i)) for i in range(5)]
    vals = [rnd(100 + i, i) for i in range(5)]
    assert store.put_batch(keys, vals) == 0
    assert store.get_batch(keys) == vals
    assert store.put_batch(keys, vals) == 0  # existing keys: still 0
    assert store.put_batch(keys, vals[:3]) == INVALID_PARAMS
    assert store.put_batch([], []) == 0
    assert store.put_batch([k("ok"), ""], [b"x", b"y"]) == INVALID_PARAMS
    assert store.upsert_batch(keys[:2], [b"new0", b"new1"]) == 0
    assert store.get_batch(keys[:2]) == [b"new0", b"new1"]
    assert store.upsert_batch(keys, [b"x"]) == INVALID_PARAMS


def test_upsert(store, k):
    assert store.upsert(k("u"), b"first") == 0
    assert store.upsert(k("u"), b"second value") == 0
    assert store.get(k("u")) == b"second value"
    assert store.get_size(k("u")) == 12


def test_upsert_refuses_a_soft_pin_ttl_without_enable(store, k):
    buf = np.zeros(4096, np.uint8)
    assert store.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    try:
        for act in (SoftPinAction.PRESERVE, SoftPinAction.DISABLE, SoftPinAction.ENABLE):
            cfg = ReplicateConfig()
            cfg.soft_pin_action = act
            cfg.soft_pin_ttl_ms = 5000
            want = 0 if act == SoftPinAction.ENABLE else INVALID_PARAMS
            key = k(f"sp{int(act)}")
            assert store.upsert(key, b"v", cfg) == want
            assert store.upsert_parts(key, b"a", b"b", config=cfg) == want
            assert store.upsert_batch([key], [b"v"], cfg) == want
            assert store.upsert_from(key, buf.ctypes.data, 16, cfg) == want
            assert store.batch_upsert_from([key], [buf.ctypes.data], [16], cfg) == [want]
            assert store.put(k(f"put{int(act)}"), b"v", cfg) == 0  # puts take it as before
            assert store.is_exist(key) == (1 if want == 0 else 0)
        cfg = ReplicateConfig()
        cfg.soft_pin_action = SoftPinAction.DISABLE  # no TTL: an upsert that unpins
        assert store.upsert(k("sp-nottl"), b"v", cfg) == 0
    finally:
        assert store.unregister_buffer(buf.ctypes.data) == 0


def test_get_batch_misses(store, k):
    assert store.put(k("a"), b"A") == 0
    assert store.get_batch([k("a"), k("nope"), k("a")]) == [b"A", b"", b"A"]
    assert store.get_batch([]) == [b""]


def test_get_buffer(store, k):
    assert store.put(k("b"), b"buffered") == 0
    h = store.get_buffer(k("b"))
    assert isinstance(h, BufferHandle)
    assert h.size() == len(h) == h.len() == 8 and h.ptr() != 0
    assert bytes(memoryview(h)) == b"buffered"
    mv = memoryview(h)
    assert mv.ndim == 1 and mv.format == "B" and mv.nbytes == 8
    assert np.frombuffer(h, np.uint8).tobytes() == b"buffered"
    assert store.get_buffer(k("missing")) is None
    hs = store.batch_get_buffer([k("b"), k("missing")])
    assert bytes(hs[0]) == b"buffered" and hs[1] is None
    assert store.batch_get_buffer([]) == []
    torch = pytest.importorskip("torch")
    t = torch.frombuffer(memoryview(h), dtype=torch.uint8)
    assert bytes(t.numpy()) == b"buffered"
    del mv, t, h


def test_batch_get_buffer_handles_share_one_reused_allocation(store, k):
    """batch_get_buffer reads a call's objects into one allocation its
    handles share (python/store_copy.c, slabs) and reuses a freed one: the
    bytes of handles still alive never change under later calls, a handle
    outlives its siblings, sizes that outgrow the first slab and misses
    are handled, and every handle is 64-byte aligned."""
    sizes = [4096, 100, 65536, 1, 300000, 4096]  # 300000 outgrows the slab
    vals = [bytes([i + 1]) * n for i, n in enumerate(sizes)]
    keys = [k(f"s{i}") for i in range(len(sizes))]
    for key, v in zip(keys, vals):
        assert store.put(key, v) == 0
    first = store.batch_get_buffer(keys + [k("missing")])
    assert first[-1] is None
    assert [bytes(h) for h in first[:-1]] == vals
    assert all(h.ptr() % 64 == 0 for h in first[:-1])
    for rnd in range(3):  # other values, read while the first handles live
        other = [k(f"o{rnd}-{i}") for i in range(4)]
        for i, key in enumerate(other):
            assert store.put(key, bytes([0x80 + i]) * 65536) == 0
        hs = store.batch_get_buffer(other)
        assert [bytes(h) for h in hs] == [bytes([0x80 + i]) * 65536 for i in range(4)]
        assert [bytes(h) for h in first[:-1]] == vals
        del hs  # freed: the next call may reuse it
    keep = first[2]
    del first  # the siblings go; keep holds the slab
    again = store.batch_get_buffer(keys)
    assert [bytes(h) for h in again] == vals
    assert bytes(keep) == vals[2] and keep.size() == 65536
    del again
    assert bytes(memoryview(keep)) == vals[2]


def test_exist_and_batch_exist(store, k):
    assert store.put(k("e"), b"1") == 0
    assert store.batch_is_exist([k("e"), k("nope")]) == [1, 0]
    assert store.batch_is_exist([]) == []


def test_remove_family(store, k):
    assert store.put(k("r"), b"1") == 0
    assert store.remove(k("r")) == 0  # a plain put grants no lease
    assert store.remove(k("r")) == OBJECT_NOT_FOUND
    assert store.put(k("leased"), b"1") == 0
    assert store.get(k("leased")) == b"1"
    assert store.remove(k("leased")) == OBJECT_HAS_LEASE
    time.sleep(LEASE_S + 0.1)
    assert store.remove(k("leased")) == 0
    assert store.put(k("forced"), b"1") == 0
    assert store.is_exist(k("forced")) == 1
    assert store.remove(k("forced"), force=True) == 0
    for i in range(4):
        assert store.put(k(f"rx{i}"), b"1") == 0
    assert store.remove_by_regex("^" + k("rx[0-2]").replace(".", r"\.")) == 3
    assert store.remove_by_regex("^" + k("rx").replace(".", r"\.") + ".*", True) == 1
    assert store.remove_by_regex("([") < 0
    assert store.put(k("b1"), b"1") == 0
    assert store.batch_remove([k("b1"), k("b2")]) == [0, OBJECT_NOT_FOUND]
    assert store.batch_remove([]) == []


def test_remove_all_is_tenant_scoped(mc_master, store, k):
    assert store.put(k("keep"), b"1") == 0
    s = new_store(mc_master, tenant_id="t-remove-all")
    try:
        for i in range(3):
            assert s.put(f"x{i}", b"1") == 0
        assert s.get(k("keep")) == b""  # another tenant's key
        assert s.remove_all() == 3
        assert s.remove_all(force=True) == 0
        assert s.get("x0") == b""
    finally:
        assert s.close() == 0
    assert store.get(k("keep")) == b"1"


# ---- zero-copy API ------------------------------------------------------------------


def test_register_buffer_errors(store):
    b = np.zeros(8192, np.uint8)
    assert store.register_buffer(0, 10) == INVALID_PARAMS
    assert store.register_buffer(b.ctypes.data, 0) == INVALID_PARAMS
    assert store.register_buffer(b.ctypes.data, b.nbytes) == 0
    assert store.unregister_buffer(b.ctypes.data) == 0
    assert store.unregister_buffer(b.ctypes.data) < 0


def test_put_from_get_into(store, k, regbuf):
    data = np.frombuffer(rnd(1 * MiB, 7), np.uint8)
    regbuf[:data.size] = data
    ptr = regbuf.ctypes.data
    assert store.put_from(k("z"), ptr, data.size) == 0
    assert store.put_from(k("zero"), ptr, 0) == 0  # size 0: a no-op
    assert store.is_exist(k("zero")) == 0
    dst = ptr + 2 * MiB
    assert store.get_into(k("z"), dst, 2 * MiB) == data.size
    assert np.array_equal(regbuf[2 * MiB:2 * MiB + data.size], data)
    assert store.get_into(k("z"), dst, data.size - 1) == INVALID_PARAMS  # too small
    assert store.get_into(k("missing"), dst, 100) == OBJECT_NOT_FOUND
    assert store.upsert_from(k("z"), ptr + 5, 100) == 0
    assert store.get(k("z")) == data[5:105].tobytes()
    cfg = ReplicateConfig()
    cfg.prefer_alloc_in_same_node = True
    assert store.put_from(k("sn"), ptr, 10, cfg) == INVALID_PARAMS
    # [metadata][data] from two buffers; failures are positive (upstream's quirk)
    assert store.put_from_with_metadata(k("md"), ptr + 100, ptr, 50, 10) == 0
    assert store.get(k("md")) == data[:10].tobytes() + data[100:150].tobytes()
    assert store.put_from_with_metadata("", ptr + 100, ptr, 50, 10) == -INVALID_PARAMS
    assert MooncakeDistributedStore().put_from_with_metadata("x", ptr, ptr, 1, 1) == -1


def test_batch_put_from_get_into(store, k, regbuf):
    ptr = regbuf.ctypes.data
    keys = [k(str(i)) for i in range(4)]
    for i in range(4):
        regbuf[i * 4096:(i + 1) * 4096] = i + 1
    assert store.batch_put_from(keys, [ptr + i * 4096 for i in range(4)], [4096] * 4) == [0] * 4
    base = ptr + MiB
    got = store.batch_get_into(keys + [k("nope")], [base + i * 4096 for i in range(5)], [4096] * 5)
    assert got == [4096] * 4 + [OBJECT_NOT_FOUND]
    for i in range(4):
        assert (regbuf[MiB + i * 4096:MiB + (i + 1) * 4096] == i + 1).all()
    # mismatched lengths: one negative entry per key
    assert store.batch_put_from(keys, [ptr], [1, 2]) == [INVALID_PARAMS] * 4
    assert store.batch_get_into(keys, [ptr] * 4, [1]) == [INVALID_PARAMS] * 4
    assert store.batch_put_from([], [], []) == []
    assert store.batch_get_into([], [], []) == []
    assert store.batch_get_into(keys[:1], [base], [10]) == [INVALID_PARAMS]  # too small
    assert store.batch_upsert_from(keys[:2], [ptr + 3 * 4096] * 2, [100, 100]) == [0, 0]
    assert store.get(keys[0]) == bytes([4]) * 100


def test_multi_buffers(store, k, regbuf):
    ptr = regbuf.ctypes.data
    regbuf[:3000] = np.frombuffer(rnd(3000, 3), np.uint8)
    keys = [k("m0"), k("m1")]
    addrs = [[ptr, ptr + 1000], [ptr + 2000]]
    sizes = [[1000, 1000], [1000]]
    assert store.batch_put_from_multi_buffers(keys, addrs, sizes) == [0, 0]
    assert store.get(keys[0]) == regbuf[:2000].tobytes()
    out = ptr + MiB
    got = store.batch_get_into_multi_buffers(keys, [[out + 1000, out], [out + 4000]],
                                             [[1000, 1000], [1000]])
    assert got == [2000, 1000]
    assert regbuf[MiB + 1000:MiB + 2000].tobytes() == regbuf[:1000].tobytes()
    assert regbuf[MiB:MiB + 1000].tobytes() == regbuf[1000:2000].tobytes()
    assert regbuf[MiB + 4000:MiB + 5000].tobytes() == regbuf[2000:3000].tobytes()
    # capacity below the object size
    assert store.batch_get_into_multi_buffers(keys[:1], [[out, out + 1000]], [[1000, 500]]) == [
        INVALID_PARAMS]
    assert store.batch_get_into_multi_buffers(keys, [[out]], [[1]]) == [INVALID_PARAMS] * 2
    assert store.batch_get_into_multi_buffers(keys[:1], [[out, out]], [[1]]) == [INVALID_PARAMS]
    assert store.batch_get_into_multi_buffers([k("nope")], [[out]], [[10]], True) == [
        OBJECT_NOT_FOUND]
    cfg = ReplicateConfig()
    cfg.prefer_alloc_in_same_node = True  # allowed on the multi-buffer path
    assert store.batch_put_from_multi_buffers([k("m2")], [[ptr]], [[64]], cfg) == [0]
    assert store.batch_put_from_multi_buffers([], [], []) == []


def test_get_into_ranges(store, k, regbuf):
    ptr = regbuf.ctypes.data
    assert store.put(k("g"), bytes(range(256)) * 4) == 0  # 1024 bytes
    res = store.get_into_ranges([ptr], [[k("g"), k("nope")]], [[[0, 100], [0]]],
                                [[[10, 1000], [0]]], [[[20, 24], [5]]])
    assert res == [[[20, 24], [OBJECT_NOT_FOUND]]]
    assert regbuf[:20].tobytes() == bytes(range(10, 30))
    assert regbuf[100:124].tobytes() == (bytes(range(256)) * 4)[1000:1024]
    # a fragment past the object's end is refused
    assert store.get_into_ranges([ptr], [[k("g")]], [[[0]]], [[[1000]]], [[[25]]]) == [
        [[INVALID_PARAMS]]]


def test_replica_desc(store, k):
    assert store.put(k("d"), b"12345") == 0
    reps = store.get_replica_desc(k("d"))
    assert len(reps) == 1
    r = reps[0]
    assert isinstance(r, ReplicaDescriptor)
    assert r.status == ReplicaStatus.COMPLETE
    assert r.is_memory_replica() and not r.is_disk_replica() and not r.is_local_disk_replica()
    md = r.get_memory_descriptor()
    assert isinstance(md, MemoryDescriptor)
    d = md.buffer_descriptor
    assert isinstance(d, Descriptor)
    assert d.size == 5 and d.buffer_address != 0
    assert d.transport_endpoint == store.get_hostname()
    assert repr(d).startswith("<Descriptor size=5 buffer_address=")
    with pytest.raises(RuntimeError):
        r.get_disk_descriptor()
    assert store.get_replica_desc(k("nope")) == []
    got = store.batch_get_replica_desc([k("d"), k("nope")])
    assert list(got) == [k("d")] and got[k("d")][0].is_memory_replica()


def test_batch_replica_clear(store, k):
    assert store.put(k("c"), b"1") == 0
    assert store.put(k("d"), b"2") == 0
    assert store.put(k("e"), b"3") == 0
    # no replica on an unknown segment
    assert store.batch_replica_clear([k("c"), k("nope")], "nowhere:1") == []
    assert store.get(k("d")) == b"2"  # a read lease protects d
    assert store.batch_replica_clear([k("c"), k("d"), k("nope")]) == [k("c")]
    assert store.is_exist(k("c")) == 0
    assert store.get(k("d")) == b"2"
    # by segment: e's only replica is on this client's segment
    assert store.batch_replica_clear([k("e")], segment_name=store.get_hostname()) == [k("e")]
    assert store.is_exist(k("e")) == 0
    assert store.batch_replica_clear([]) == []


def test_batch_put_per_key_group_ids(store, k):
    keys = [k("g1"), k("g2"), k("g3")]
    c = ReplicateConfig()
    c.group_ids = [k("G1"), k("G2")]  # bad count: every key refused
    assert store.put_batch(keys, [b"a", b"b", b"c"], c) == INVALID_PARAMS
    assert store.batch_put_from(keys, [0, 0, 0], [1, 1, 1], c) == [INVALID_PARAMS] * 3
    assert store.batch_is_exist(keys) == [0, 0, 0]
    c.group_ids = [k("G1"), k("G2"), k("G1")]
    assert store.put_batch(keys, [b"a", b"b", b"c"], c) == 0
    # a lease on g1 covers its group (g3), not g2
    assert store.is_exist(k("g1")) == 1
    assert store.remove(k("g3")) == OBJECT_HAS_LEASE
    assert store.remove(k("g2")) == 0
    # the zero-copy batch path takes one id per key as well
    buf = np.frombuffer(b"xyz" * 4, np.uint8).copy()
    assert store.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    zk = [k("z1"), k("z2")]
    c.group_ids = [k("Z1"), k("Z2")]
    assert store.batch_put_from(zk, [buf.ctypes.data] * 2, [4, 4], c) == [0, 0]
    assert store.is_exist(k("z1")) == 1
    assert store.remove(k("z2")) == 0
    c.group_ids = [k("Z3")] * 2
    mb = [k("m1"), k("m2")]
    assert store.batch_put_from_multi_buffers(mb, [[buf.ctypes.data]] * 2, [[4]] * 2, c) == [0, 0]
    assert store.is_exist(k("m1")) == 1
    assert store.remove(k("m2")) == OBJECT_HAS_LEASE
    assert store.unregister_buffer(buf.ctypes.data) == 0


def test_misc(store):
    assert store.alloc_from_mem_pool(1 << 20) == 0
    assert store.setup_dummy(1 << 20, 1 << 20, "127.0.0.1:50052") == -1  # no dummy client
    assert store.get_offload_rpc_read_count() == 0
    with pytest.raises(TypeError):
        store.setup_dummy("a", 1, "x")
    assert store.health_check() == 0
    host, port = store.get_hostname().rsplit(":", 1)
    assert host == "127.0.0.1" and 12300 <= int(port) <= 14300


# ---- setup forms, close and re-setup -------------------------------------------------


def test_setup_errors(mc_master):
    s = MooncakeDistributedStore()
    # no master there
    assert s.setup("127.0.0.1", mc_master.meta_uri, 16 * MiB, 16 * MiB, "tcp", "",
                   "127.0.0.1:1") < 0
    assert s.health_check() == 1
    assert s.setup("127.0.0.1", mc_master.meta_uri, 16 * MiB, 2 << 40, "tcp", "",
                   mc_master.addr) == INVALID_PARAMS
    # the SSD tier needs a directory: none given, or one that cannot be made
    assert s.setup("127.0.0.1", mc_master.meta_uri, 16 * MiB, 16 * MiB, "tcp", "",
                   mc_master.addr, enable_ssd_offload=True) == INVALID_PARAMS
    assert s.setup("127.0.0.1", mc_master.meta_uri, 16 * MiB, 16 * MiB, "tcp", "",
                   mc_master.addr, enable_ssd_offload=True,
                   ssd_offload_path="/proc/no/such/dir") == FILE_OPEN_FAIL
    assert s.setup({"local_hostname": "127.0.0.1"}) == INVALID_PARAMS  # no metadata_server
    assert s.setup({"local_hostname": "127.0.0.1", "metadata_server": mc_master.meta_uri,
                    "master_server_addr": mc_master.addr, "enable_ssd_offload": "true"}) == \
        INVALID_PARAMS
    assert s.setup({"local_hostname": "127.0.0.1", "metadata_server": mc_master.meta_uri,
                    "global_segment_size": "50%", "master_server_addr": mc_master.addr}) == \
        INVALID_PARAMS
    assert s.setup({"local_hostname": "127.0.0.1", "metadata_server": mc_master.meta_uri,
                    "local_buffer_size": "100", "master_server_addr": mc_master.addr}) == \
        INVALID_PARAMS  # below 1 KiB
    # the store is still usable after failures
    assert s.setup("127.0.0.1", mc_master.meta_uri, 16 * MiB, 16 * MiB, "tcp", "auto-discovery",
                   mc_master.addr, None, tenant_id="default") == 0
    assert s.setup("127.0.0.1", mc_master.meta_uri, 16 * MiB, 16 * MiB, "tcp", "",
                   mc_master.addr) == INVALID_PARAMS  # second setup without close
    assert s.close() == 0


def test_setup_dict_and_sizes(mc_master):
    s = MooncakeDistributedStore()
    cfg = {"local_hostname": "127.0.0.1", "metadata_server": mc_master.meta_uri,
           "global_segment_size": "32MB", "local_buffer_size": "0.5 gb", "protocol": "tcp",
           "rdma_devices": "", "master_server_addr": mc_master.addr, "tenant_id": "dict-t"}
    assert s.setup(cfg) == 0
    assert s.put("k", bytes(20 * MiB)) == 0  # above the default 16 MiB local buffer
    assert s.get_size("k") == 20 * MiB
    assert s.close() == 0
    cfg["global_segment_size"] = 16 * MiB  # values are stringified
    cfg["local_buffer_size"] = "16m"
    assert s.setup(cfg) == 0
    assert s.put("k2", b"v") == 0 and s.get("k2") == b"v"
    assert s.close() == 0


def test_zero_local_buffer_put_works(mc_master):
    s = new_store(mc_master, seg=16 * MiB, buf=0)
    try:
        # upstream's put fails without a local buffer; ours needs none
        assert s.put("lb0v", b"v") == 0 and s.get("lb0v") == b"v"
        assert s.remove("lb0v", force=True) == 0
        b = np.ones(4096, np.uint8)
        assert s.register_buffer(b.ctypes.data, b.nbytes) == 0
        assert s.put_from("lb0", b.ctypes.data, 4096) == 0
        assert s.get("lb0") == bytes(b)
        assert s.unregister_buffer(b.ctypes.data) == 0
    finally:
        s.close()


def test_close_and_resetup(mc_master):
    s = new_store(mc_master, tenant_id="resetup")
    own = ReplicateConfig()
    own.preferred_segment = s.get_hostname()
    assert s.put("obj", b"before", own) == 0
    assert s.get_replica_desc("obj")[0].get_memory_descriptor().buffer_descriptor \
        .transport_endpoint == own.preferred_segment
    assert s.close() == 0
    assert s.close() == 0  # idempotent
    assert s.health_check() == 1
    assert s.get("obj") == b""
    assert s.setup("127.0.0.1", mc_master.meta_uri, 16 * MiB, 16 * MiB, "tcp", "",
                   mc_master.addr, tenant_id="resetup") == 0
    assert s.health_check() == 0 and s.get_hostname()
    # the object lived in the closed client's segment: it is gone
    assert s.get("obj") == b""
    assert s.put("obj", b"after") == 0 and s.get("obj") == b"after"
    for _ in range(3):
        assert s.close() == 0
        assert s.setup("127.0.0.1", mc_master.meta_uri, 16 * MiB, 16 * MiB, "tcp", "",
                       mc_master.addr, tenant_id="resetup") == 0
    assert s.close() == 0


def test_two_stores_share_objects(mc_master, k):
    owner = new_store(mc_master, tenant_id="pair")
    client = new_store(mc_master, seg=0, tenant_id="pair")  # contributes nothing
    try:
        c = ReplicateConfig()
        c.preferred_segment = owner.get_hostname()
        assert client.put(k("x"), rnd(100 * KiB, 1), c) == 0  # lands in owner's segment
        assert owner.get(k("x")) == rnd(100 * KiB, 1)
        r = client.get_replica_desc(k("x"))[0]
        assert r.get_memory_descriptor().buffer_descriptor.transport_endpoint == \
            owner.get_hostname()
        assert client.put(k("two"), b"2") == 0
        assert owner.get(k("two")) == b"2"
    finally:
        client.close()
        owner.close()


def test_copying_gets_into_fresh_memory(mc_master, k):
    """get and get_batch read into memory fresh from the allocator, which the
    client faults in ahead of the read in runs (mem/hostmem.h): every size
    (under a page, a 64 KiB batch as glibc lays it out, one past it, runs
    too small to populate, 1 MiB and over) and missing keys anywhere come
    back as before, through the owner's own segment (memcpy) and through a
    client that holds nothing (the engine), and again after the previous
    lists are freed (glibc trims the heap, so the next batch lands in
    pages it must fault in again)."""
    owner = new_store(mc_master, seg=96 * MiB, tenant_id="fresh")
    client = new_store(mc_master, seg=0, tenant_id="fresh")
    try:
        c = ReplicateConfig()
        c.preferred_segment = owner.get_hostname()
        sizes = [1, 100, 4 * KiB, 64 * KiB, 64 * KiB + 1, 300 * KiB, MiB + 7, 3 * MiB]
        sizes += [64 * KiB] * 40  # 2.5 MiB of 64 KiB objects in one batch
        keys = [k(f"v{i}") for i in range(len(sizes))]
        vals = [rnd(n, i) for i, n in enumerate(sizes)]
        assert client.put_batch(keys, vals, c) == 0
        ask = keys[:3] + [k("missing0")] + keys[3:20] + [k("missing1")] + keys[20:]
        want = vals[:3] + [b""] + vals[3:20] + [b""] + vals[20:]
        for s in (owner, client):
            for _ in range(3):
                got = s.get_batch(ask)
                assert [len(v) for v in got] == [len(v) for v in want]
                assert got == want
                del got
            for key, val in zip(keys[:8], vals[:8]):
                assert s.get(key) == val
            assert s.get(k("missing0")) == b""
            assert s.get_batch([k("missing0"), k("missing1")]) == [b"", b""]
    finally:
        client.close()
        owner.close()


def test_concurrent_put_get(store, k):
    errors = []

    def worker(t):
        try:
            for i in range(60):
                key = k(f"{t}-{i}")
                val = rnd(1000 + t * 10 + i, t * 1000 + i)
                assert store.put(key, val) == 0
                assert store.get(key) == val
                assert store.is_exist(key) == 1
                assert store.get_batch([key, k("none")]) == [val, b""]
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]


def test_close_while_other_threads_call(mc_master):
    s = new_store(mc_master, tenant_id="close-race")
    stop = threading.Event()
    bad = []

    def worker():
        while not stop.is_set():
            rc = s.put("race", b"x")
            if rc not in (0, INVALID_PARAMS):
                bad.append(rc)
            if s.get("race") not in (b"x", b""):
                bad.append("get")

    ts = [threading.Thread(target=worker) for _ in range(4)]
    for t in ts:
        t.start()
    time.sleep(0.2)
    assert s.close() == 0
    time.sleep(0.1)
    stop.set()
    for t in ts:
        t.join(30)
    assert not bad, bad[:5]


# ---- tensors --------------------------------------------------------------------------


DTYPE_CODES = ["float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
               "int64", "uint64", "bool", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"]


def available_dtypes():
    torch = pytest.importorskip("torch")
    return [(i, getattr(torch, n)) for i, n in enumerate(DTYPE_CODES) if hasattr(torch, n)]


def sample(torch, dtype, shape=(3, 5)):
    g = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 10).to(dtype)
    return torch.randint(0, 100, shape, generator=g).to(dtype)


def test_tensor_every_dtype_round_trip(store, k):
    torch = pytest.importorskip("torch")
    for code, dt in available_dtypes():
        t = sample(torch, dt)
        key = k(str(dt))
        assert store.put_tensor(key, t) == 0, dt
        raw = store.get(key)
        assert len(raw) == HDR + t.numel() * t.element_size()
        magic, version, hsize, dtype, ndim, layout, flags, off, nbytes = struct.unpack_from(
            "=IHHiiIIQQ", raw, 0)
        assert (magic, version, hsize, dtype, ndim, layout, flags, off, nbytes) == (
            0x4D4F4F4E, 1, 304, code, 2, 0, 0, 304, t.numel() * t.element_size())
        gshape = struct.unpack_from("=8q", raw, 40)
        lshape = struct.unpack_from("=8q", raw, 104)
        assert gshape == lshape == (3, 5, -1, -1, -1, -1, -1, -1)
        assert struct.unpack_from("=I", raw, 168)[0] == 0
        back = store.get_tensor(key)
        assert back.dtype == dt and back.shape == t.shape and torch.equal(back, t), dt


def test_tensor_shapes_and_layouts(store, k):
    torch = pytest.importorskip("torch")
    cases = [torch.tensor(3.5), torch.zeros(0, 4), torch.arange(24).reshape(2, 3, 4),
             torch.arange(20.0).reshape(4, 5).t(), torch.ones(*([2] * 8))]
    for i, t in enumerate(cases):
        assert store.put_tensor(k(str(i)), t) == 0
        back = store.get_tensor(k(str(i)))
        assert back.shape == t.shape and torch.equal(back, t.contiguous())
    assert store.put_tensor(k("9d"), torch.ones(*([1] * 9))) == INVALID_PARAMS
    with pytest.raises(TypeError):
        store.put_tensor(k("np"), np.zeros(3))
    with pytest.raises(TypeError):
        store.put_tensor(5, torch.zeros(1))
    assert store.put(k("notatensor"), b"x" * 400) == 0
    assert store.get_tensor(k("notatensor")) is None
    assert store.get_tensor(k("missing")) is None


def test_tensor_into_and_from(store, k, regbuf):
    torch = pytest.importorskip("torch")
    ptr = regbuf.ctypes.data
    t = torch.arange(1000, dtype=torch.float32).reshape(10, 100)
    assert store.put_tensor(k("t"), t) == 0
    view = store.get_tensor_into(k("t"), ptr, MiB)
    assert view is not None and torch.equal(view, t)
    assert view.data_ptr() == ptr + HDR  # it views the registered buffer
    assert store.get_tensor_into(k("t"), ptr, 100) is None  # too small
    assert store.get_tensor_into(k("missing"), ptr, MiB) is None
    # the buffer now holds [header][data]: write it back zero-copy
    n = HDR + t.numel() * 4
    assert store.put_tensor_from(k("copy"), ptr, n) == 0
    assert torch.equal(store.get_tensor(k("copy")), t)
    assert store.put_tensor_from(k("bad"), ptr + 8, n - 8) == INVALID_PARAMS
    assert store.upsert_tensor_from(k("copy"), ptr, n) == 0
    assert store.batch_put_tensor_from([k("b1"), k("b2")], [ptr, ptr], [n, n]) == [0, 0]
    assert store.batch_upsert_tensor_from([k("b1")], [ptr], [n]) == [0]
    assert store.batch_put_tensor_from([k("b1")], [ptr], []) == [INVALID_PARAMS]
    views = store.batch_get_tensor_into([k("b1"), k("nope")], [ptr + MiB, ptr + 2 * MiB],
                                        [MiB, MiB])
    assert torch.equal(views[0], t) and views[1] is None


def test_tensor_batch_upsert_pub(store, k):
    torch = pytest.importorskip("torch")
    ts = [torch.full((4,), float(i)) for i in range(3)]
    keys = [k(str(i)) for i in range(3)]
    assert store.batch_put_tensor(keys, ts) == [0, 0, 0]
    got = store.batch_get_tensor(keys + [k("nope")])
    assert all(torch.equal(a, b) for a, b in zip(got, ts)) and got[3] is None
    assert store.batch_put_tensor(keys, ts[:1]) == [INVALID_PARAMS] * 3
    assert store.upsert_tensor(keys[0], ts[0] + 2) == 0
    assert torch.equal(store.get_tensor(keys[0]), ts[0] + 2)
    assert store.batch_upsert_tensor(keys[:2], [ts[1] * 3, ts[1] * 4]) == [0, 0]
    assert torch.equal(store.get_tensor(keys[1]), ts[1] * 4)
    c = ReplicateConfig()
    c.with_soft_pin = True
    assert store.pub_tensor(k("pub"), ts[2], c) == 0
    assert store.upsert_pub_tensor(k("pub"), ts[2] + 1, c) == 0
    assert torch.equal(store.get_tensor(k("pub")), ts[2] + 1)
    assert store.batch_pub_tensor([k("p2")], [ts[0]], c) == [0]
    assert store.batch_upsert_pub_tensor([k("p2")], [ts[1]]) == [0]
    assert torch.equal(store.get_tensor(k("p2")), ts[1])


def test_tensor_parallel(store, k, regbuf):
    torch = pytest.importorskip("torch")
    t = torch.arange(60, dtype=torch.float32).reshape(6, 10)
    assert store.put_tensor_with_tp(k("w"), t, tp_size=3, split_dim=1) == 0
    for r, shard in enumerate(torch.chunk(t, 3, dim=1)):
        assert store.is_exist(k("w") + f"_tp_{r}") == 1
        got = store.get_tensor_with_tp(k("w"), tp_rank=r, tp_size=3)
        assert torch.equal(got, shard.contiguous())
        raw = store.get(k("w") + f"_tp_{r}")
        assert struct.unpack_from("=I", raw, 16)[0] == 1  # SHARD
        assert struct.unpack_from("=8q", raw, 40)[:2] == (6, 10)  # global shape
        assert struct.unpack_from("=I", raw, 168)[0] == 1
        assert struct.unpack_from("=5i", raw, 176) == (1, 0, r, 3, 1)
    assert store.is_exist(k("w")) == 0
    assert store.get_tensor_with_tp(k("w"), 5, 3) is None
    # tp_size 1: the plain key
    assert store.put_tensor_with_tp(k("one"), t) == 0
    assert torch.equal(store.get_tensor_with_tp(k("one")), t)
    assert store.put_tensor_with_tp(k("bad"), t, tp_size=2, split_dim=2) == INVALID_PARAMS
    c = ReplicateConfig()
    assert store.pub_tensor_with_tp(k("pw"), t, c, 0, 2, 0) == 0
    assert torch.equal(store.get_tensor_with_tp(k("pw"), 1, 2), t[3:])
    assert store.batch_put_tensor_with_tp([k("b1"), k("b2")], [t, t * 2], tp_size=2) == [0, 0]
    assert store.batch_pub_tensor_with_tp([k("b3")], [t], c, tp_size=2, split_dim=1) == [0]
    got = store.batch_get_tensor_with_tp([k("b1"), k("b2")], tp_rank=1, tp_size=2)
    assert torch.equal(got[0], t[3:]) and torch.equal(got[1], t[3:] * 2)
    ptr = regbuf.ctypes.data
    v = store.get_tensor_with_tp_into(k("b3"), ptr, MiB, tp_rank=1, tp_size=2)
    assert torch.equal(v, t[:, 5:])
    vs = store.batch_get_tensor_with_tp_into([k("b1"), k("b2")], [ptr, ptr + MiB], [MiB, MiB],
                                             0, 2)
    assert torch.equal(vs[0], t[:3]) and torch.equal(vs[1], t[:3] * 2)
    # from a serialized full tensor in a registered buffer
    assert store.put_tensor(k("full"), t) == 0
    n = store.get_into(k("full"), ptr + 2 * MiB, MiB)
    assert store.put_tensor_with_tp_from(k("f"), ptr + 2 * MiB, n, 0, 2, 1) == 0
    assert torch.equal(store.get_tensor_with_tp(k("f"), 1, 2), t[:, 5:])
    assert store.batch_put_tensor_with_tp_from([k("g")], [ptr + 2 * MiB], [n], 0, 2, 0) == [0]
    assert torch.equal(store.get_tensor_with_tp(k("g"), 0, 2), t[:3])


def test_tensor_import_is_lazy():
    code = ("import sys; import mooncake.store as s; "
            "assert 'torch' not in sys.modules; s.MooncakeDistributedStore(); "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ.copy(), timeout=60)


# ---- integration call patterns ----------------------------------------------------------


def test_vllm_store_connector_pattern(mc_master):
    """vLLM MooncakeStoreConnector: two ranks (embedded mode), registered KV
    buffers, batch_is_exist -> batch_put_from_multi_buffers on the save path,
    batch_get_into_multi_buffers on the load path, remove_all(force) + close."""
    ranks = [MooncakeDistributedStore() for _ in range(2)]
    for s in ranks:
        assert s.setup("127.0.0.1", mc_master.meta_uri, 32 * MiB, 16 * MiB, "rdma", "",
                       mc_master.addr, tenant_id="vllm") == 0
    try:
        assert hasattr(ReplicateConfig, "group_ids")
        layers, block = 4, 2048
        kv = [np.frombuffer(rnd(layers * 8 * block, r), np.uint8).copy() for r in range(2)]
        for s, buf in zip(ranks, kv):
            assert s.register_buffer(buf.ctypes.data, buf.nbytes) == 0
        keys = [f"model@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@{i:040x}" for i in range(8)]
        save, load = ranks
        src = kv[0].ctypes.data

        def addrs(base, i):
            return [base + (layer * 8 + i) * block for layer in range(layers)]

        cfg = ReplicateConfig()
        cfg.preferred_segment = save.get_hostname()
        exist = save.batch_is_exist(keys)
        assert exist == [0] * 8
        todo = [i for i, e in enumerate(exist) if e != 1]
        cfg.group_ids = ["grp"] * len(todo)
        res = save.batch_put_from_multi_buffers([keys[i] for i in todo],
                                                [addrs(src, i) for i in todo],
                                                [[block] * layers for _ in todo], cfg)
        assert res == [0] * 8
        assert save.batch_is_exist(keys) == [1] * 8
        assert load.batch_is_exist(keys + ["nope"]) == [1] * 8 + [0]  # scheduler lookup
        dst = kv[1].ctypes.data
        got = load.batch_get_into_multi_buffers(keys, [addrs(dst, i) for i in range(8)],
                                                [[block] * layers] * 8)
        assert got == [layers * block] * 8
        assert np.array_equal(kv[0], kv[1])
        reps = load.batch_get_replica_desc(keys[:2])
        assert all(r.is_memory_replica() and not r.is_disk_replica()
                   and not r.is_local_disk_replica() for v in reps.values() for r in v)
        time.sleep(LEASE_S + 0.1)
        assert save.remove_all(force=True) == 8
        assert load.batch_get_into_multi_buffers(keys[:1], [addrs(dst, 0)], [[block] * layers]) \
            == [OBJECT_NOT_FOUND]
    finally:
        for s, buf in zip(ranks, kv):
            s.unregister_buffer(buf.ctypes.data)
        for s in ranks:
            assert s.close() == 0


@pytest.fixture
def p2p_master(tmp_path):
    """A master of its own: P2P-handshake segments must not mix with the
    module master's HTTP-metadata segments (neither side can resolve the other)."""
    from conftest import MasterDaemon
    m = MasterDaemon(tmp_path, extra=("--enable_multi_tenants=true",))
    yield m
    m.stop()


def test_sglang_hicache_pattern_with_shared_engine(p2p_master):
    """SGLang HiCache: the process's TransferEngine is handed to setup as the
    8th positional argument (get_engine()), warm-up put/is_exist/get, then
    batch_is_exist + batch_put_from and batch_get_into on host KV pools."""
    mc_master = p2p_master
    from mooncake.engine import TransferEngine
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == 0
    hostname = f"127.0.0.1:{te.get_rpc_port()}"  # SGLang's session id
    store_a = MooncakeDistributedStore()
    store_b = MooncakeDistributedStore()
    try:
        assert store_a.setup(hostname, "P2PHANDSHAKE", 32 * MiB, 16 * MiB, "rdma", "",
                             mc_master.addr, te.get_engine(), tenant_id="sgl") == 0
        assert store_a.get_hostname() == hostname
        assert store_b.setup("127.0.0.1", "P2PHANDSHAKE", 32 * MiB, 16 * MiB, "tcp", "",
                             mc_master.addr, tenant_id="sgl") == 0
        warm = "warmup-" + uuid.uuid4().hex
        assert store_a.put(warm, bytes(4096)) == 0
        assert store_a.is_exist(warm) == 1 and store_a.get(warm) == bytes(4096)
        pool = np.frombuffer(rnd(64 * 4096, 9), np.uint8).copy()
        assert store_a.register_buffer(pool.ctypes.data, pool.nbytes) == 0
        keys = [f"{uuid.uuid4().hex}_0_k" for _ in range(16)]
        assert store_a.batch_is_exist(keys) == [0] * 16
        ptrs = [pool.ctypes.data + i * 4096 for i in range(16)]
        assert store_a.batch_put_from(keys, ptrs, [4096] * 16) == [0] * 16
        dst = np.zeros(16 * 4096, np.uint8)
        assert store_b.register_buffer(dst.ctypes.data, dst.nbytes) == 0
        got = store_b.batch_get_into(keys, [dst.ctypes.data + i * 4096 for i in range(16)],
                                     [4096] * 16)
        assert all(n > 0 for n in got)
        assert np.array_equal(dst, pool[:16 * 4096])
        assert store_b.get_batch(keys[:2]) == [pool[:4096].tobytes(),
                                               pool[4096:8192].tobytes()]
        assert store_b.unregister_buffer(dst.ctypes.data) == 0
        assert store_a.unregister_buffer(pool.ctypes.data) == 0
        # without the keyword the engine is still accepted positionally; a bad one raises
        with pytest.raises(TypeError):
            MooncakeDistributedStore().setup("h", "m", 1, 1, "tcp", "", "a", 42)
    finally:
        assert store_b.close() == 0
        assert store_a.close() == 0
    del te  # the store held a reference until close; the engine goes now


def test_shared_engine_outlives_python_reference(p2p_master):
    mc_master = p2p_master
    from mooncake.engine import TransferEngine
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    s = MooncakeDistributedStore()
    # a TransferEngine object is accepted as well as its get_engine() handle
    assert s.setup(f"127.0.0.1:{te.get_rpc_port()}", "P2PHANDSHAKE", 16 * MiB, 16 * MiB,
                   "tcp", "", mc_master.addr, engine=te, tenant_id="shared2") == 0
    del te  # the store keeps it alive
    try:
        assert s.put("k", b"v") == 0 and s.get("k") == b"v"
    finally:
        assert s.close() == 0
    uninit = TransferEngine()
    assert s.setup("127.0.0.1", mc_master.meta_uri, 16 * MiB, 16 * MiB, "tcp", "",
                   mc_master.addr, uninit) == INVALID_PARAMS


def test_lmcache_pattern(mc_master):
    """LMCache mooncakestore connector: registered pinned pool, put_from under
    a preferred local segment, put_parts(header, kv), batch_get_into with <= 0
    as a miss, batch_get_buffer wrapped in memoryview/torch.frombuffer."""
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", mc_master.meta_uri, 32 * MiB, 16 * MiB, "tcp", "",
                   mc_master.addr) == 0
    pool = np.zeros(2 * MiB, np.uint8)
    try:
        assert s.register_buffer(pool.ctypes.data, pool.nbytes) == 0
        cfg = ReplicateConfig()
        cfg.replica_num = 1
        cfg.preferred_segment = s.get_hostname()
        key = "lmcache@" + uuid.uuid4().hex
        pool[:8192] = np.frombuffer(rnd(8192, 4), np.uint8)
        assert s.put_from(key, pool.ctypes.data, 8192, cfg) == 0
        assert s.is_exist(key)
        assert not s.is_exist(key + "x")
        header = struct.pack("=7i", 1, 2, 3, 4, 5, 6, 7)
        assert len(header) == 28
        assert s.put_parts(key + "m", header, pool[:100].tobytes()) == 0
        got = s.batch_get_into([key, key + "x"], [pool.ctypes.data + MiB] * 2, [8192, 8192])
        assert got[0] == 8192 and got[1] <= 0
        assert np.array_equal(pool[MiB:MiB + 8192], pool[:8192])
        bufs = s.batch_get_buffer([key + "m", key + "x"])
        assert bytes(memoryview(bufs[0]))[:28] == header and bufs[1] is None
        torch = pytest.importorskip("torch")
        t = torch.frombuffer(memoryview(bufs[0]), dtype=torch.uint8)
        assert t.numel() == 128
    finally:
        assert s.unregister_buffer(pool.ctypes.data) == 0
        assert s.close() == 0


READER = r"""
import sys
from mooncake.store import MooncakeDistributedStore
meta, addr, key = sys.argv[1:4]
s = MooncakeDistributedStore()
assert s.setup("127.0.0.1", meta, 0, 16 << 20, "tcp", "", addr, tenant_id="xproc") == 0
v = s.get(key)
assert s.put(key + "-reply", v[::-1]) == 0 or True
sys.stdout.write(v.hex())
s.close()
"""


def test_second_process_reads_and_writes(mc_master):
    s = new_store(mc_master, tenant_id="xproc")
    try:
        key = "xp-" + uuid.uuid4().hex
        val = rnd(50 * KiB, 11)
        assert s.put(key, val) == 0
        r = subprocess.run([sys.executable, "-c", READER, mc_master.meta_uri, mc_master.addr, key],
                           capture_output=True, text=True, timeout=120, env=os.environ.copy())
        assert r.returncode == 0, r.stderr[-3000:]
        assert bytes.fromhex(r.stdout) == val
        assert s.get(key + "-reply") == val[::-1]  # written by the other process into our segment
    finally:
        s.close()


# ---- BufferPool ----------------------------------------------------------------------


def test_buffer_pool(store, k):
    from mooncake.store import BufferPool, BufferLease
    import mooncake.buffer_pool as bp
    assert mstore.RegisteredBufferPool is BufferPool and bp.BufferPool is BufferPool
    with pytest.raises(TypeError):
        BufferPool(object())
    with pytest.raises(RuntimeError):
        BufferPool(MooncakeDistributedStore()).acquire(10)  # store not set up
    for bad in ({"alignment": 0}, {"min_size_class": 3000}, {"alignment": 1 << 41}):
        with pytest.raises(RuntimeError, match="alignment"):  # and ValueError
            BufferPool(store, **bad)
    pool = BufferPool(store, min_size_class=4096, alignment=1 * MiB, max_bytes=3 * MiB,
                      block_on_exhaustion=False, prewarm_size=4096, prewarm_count=2)
    assert pool.mapped_bytes == MiB
    lease = pool.acquire(5000)
    assert isinstance(lease, BufferLease) and lease.size == 5000 and lease.ptr
    mv = lease.buffer
    assert mv.nbytes == 5000 and not mv.readonly
    mv[:5] = b"hello"
    with pytest.raises(BufferError):
        lease.release()  # a view is alive
    with pytest.raises(RuntimeError, match="views"):  # upstream's type, the same error
        lease.release()
    assert store.put_from(k("pool"), lease.ptr, 5) == 0  # registered memory
    del mv
    with pool.buffer(8192) as other:
        assert store.get_into(k("pool"), other.ptr, other.size) == 5
        assert bytes(other.buffer[:5]) == b"hello"
    lease.release()
    lease.release()  # idempotent
    with pytest.raises(ValueError):
        lease.ptr  # noqa: B018
    # dedicated region above max_size_class, then exhaustion
    big = pool.acquire(MiB + 1)
    with pytest.raises(MemoryError):
        pool.acquire(MiB + 1)
    with pytest.raises(RuntimeError, match="exhausted"):
        pool.acquire(MiB + 1)
    # a zero-size lease is accepted; an overflowing size is a RuntimeError too
    with pool.acquire(0) as zero:
        assert zero.size == 0 and zero.ptr and zero.buffer.nbytes == 0
    for bad in (1 << 41, 1 << 70, -1):
        with pytest.raises(RuntimeError, match="size"):
            pool.acquire(bad)
    with pytest.raises(TimeoutError):
        pool.acquire(MiB + 1, block=True, timeout=0.05)
    t = threading.Timer(0.1, big.release)
    t.start()
    late = pool.acquire(MiB + 1, True, 5)  # waits for the release
    t.join()
    with pytest.raises(RuntimeError):
        pool.close()  # a lease is alive
    late.release()
    pool.close()
    pool.close()
    with pytest.raises(RuntimeError):
        pool.acquire(10)
