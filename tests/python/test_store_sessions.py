"""mooncake.store: the calls backed by the C client's batch and ranged calls.

upsert_parts / upsert_batch / batch_upsert_from (mc_store_upsert_parts,
mc_store_upsert_batch, mc_store_batch_upsert_from), get_batch and
batch_get_buffer (mc_store_batch_get), get_into_ranges
(mc_store_get_into_ranges) and the session calls of spec store.md 1.11,
which vLLM's MooncakeStoreConnector uses for layer-wise saving and loading
when all seven exist (it probes them with getattr).
"""

import threading
import time
import uuid

import numpy as np
import pytest

from mooncake.store import MooncakeDistributedStore, ReplicateConfig

KiB = 1 << 10
MiB = 1 << 20

INVALID_PARAMS = -600
REPLICA_IS_NOT_READY = -703
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
LEASE_EXPIRED = -707

LEASE_S = 0.5  # mc_master runs with --default_kv_lease_ttl=500

SESSION_METHODS = ("batch_put_session_start", "batch_put_from_multi_buffer_ranges",
                   "batch_put_session_end", "batch_put_session_revoke",
                   "batch_get_session_start", "batch_get_into_multi_buffer_ranges",
                   "batch_get_session_end")


def new_store(master, seg=64 * MiB, buf=32 * MiB, **kw):
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", master.meta_uri, seg, buf, "tcp", "", master.addr, **kw)
    assert rc == 0, rc
    return s


@pytest.fixture(scope="module")
def pair(mc_master):
    """Two clients of one tenant: a writer and a reader with their own segments."""
    a = new_store(mc_master, tenant_id="sessions")
    b = new_store(mc_master, tenant_id="sessions")
    yield a, b
    assert b.close() == 0
    assert a.close() == 0


@pytest.fixture
def k(request):
    base = f"{request.node.name}-{uuid.uuid4().hex[:8]}"
    return lambda name="": f"{base}/{name}"


@pytest.fixture
def bufs(pair):
    """A registered 4 MiB buffer for each client of the pair."""
    out = []
    for s in pair:
        b = np.zeros(4 * MiB, np.uint8)
        assert s.register_buffer(b.ctypes.data, b.nbytes) == 0
        out.append(b)
    yield out
    for s, b in zip(pair, out):
        assert s.unregister_buffer(b.ctypes.data) == 0


def rnd(n, seed=0):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def on(store):
    c = ReplicateConfig()
    c.preferred_segment = store.get_hostname()
    return c


# ---- not set up, argument types --------------------------------------------------------


def test_new_calls_when_not_set_up():
    s = MooncakeDistributedStore()
    assert s.batch_put_session_start(["k"], [10]) == [INVALID_PARAMS]
    assert s.batch_put_from_multi_buffer_ranges(["k"], [[4096]], [[1]], [[0]]) == [
        INVALID_PARAMS]
    assert s.batch_put_session_end(["k", "j"]) == [INVALID_PARAMS] * 2
    assert s.batch_put_session_revoke(["k"]) == [INVALID_PARAMS]
    assert s.batch_get_session_start(["k"]) == [INVALID_PARAMS]
    assert s.batch_get_into_multi_buffer_ranges(["k"], [[4096]], [[1]], [[0]]) == [
        INVALID_PARAMS]
    assert s.batch_get_session_end(["k"]) == INVALID_PARAMS
    assert s.batch_upsert_from(["k"], [4096], [1]) == [INVALID_PARAMS]
    assert s.get_into_ranges([4096, 8192], [["k", "j"], ["k"]], [[[0], [1]], [[2, 3]]],
                             [[[0], [1]], [[2, 3]]], [[[1], [1]], [[1, 1]]]) == [
        [[INVALID_PARAMS], [INVALID_PARAMS]], [[INVALID_PARAMS, INVALID_PARAMS]]]
    # empty batches
    assert s.batch_put_session_start([], []) == []
    assert s.batch_get_session_start([]) == []


def test_session_argument_type_errors(pair):
    a, _ = pair
    bad_calls = [
        lambda: a.batch_put_session_start("abc", [1]),
        lambda: a.batch_put_session_start(["k"], ["1"]),
        lambda: a.batch_put_session_start(["k"], [1], config=3),
        lambda: a.batch_put_session_start(["k"], [-1]),
        lambda: a.batch_put_from_multi_buffer_ranges(["k"], [[1]], [[1]], [["x"]]),
        lambda: a.batch_put_from_multi_buffer_ranges(["k"], [[1]], [[1]]),
        lambda: a.batch_get_into_multi_buffer_ranges(["k"], [[1]], [[1]], [[0]], 5),
        lambda: a.batch_get_into_multi_buffer_ranges(["k"], [[1]], [[1]], 0),
        lambda: a.batch_put_session_end([1]),
        lambda: a.batch_put_session_revoke(None),
        lambda: a.batch_get_session_start(b"k"),
        lambda: a.batch_get_session_end([None]),
        lambda: a.get_into_ranges([0], [["k"]], [[["a"]]], [[[0]]], [[[1]]]),
        lambda: a.get_into_ranges([0], [[1]], [[[0]]], [[[0]]], [[[1]]]),
        lambda: a.batch_get_session_start(["k"], unknown=1),
    ]
    for i, call in enumerate(bad_calls):
        with pytest.raises((TypeError, ValueError)):
            call()
            pytest.fail(f"call {i} did not raise")
    assert a.health_check() == 0


# ---- upsert family, batch get --------------------------------------------------------


def test_upsert_parts_batch_and_from(pair, bufs, k):
    a, b = pair
    assert a.upsert_parts(k("p"), b"abc", bytearray(b"de"), config=on(b)) == 0
    assert b.get(k("p")) == b"abcde"
    assert b.upsert_parts(k("p"), memoryview(b"xyz")) == 0  # overwrite, other size
    assert a.get(k("p")) == b"xyz"
    assert a.upsert_parts(k("none")) == INVALID_PARAMS
    same_node = ReplicateConfig()
    same_node.prefer_alloc_in_same_node = True  # staged call: refused
    assert a.upsert_parts(k("p"), b"1", config=same_node) == INVALID_PARAMS

    keys = [k(str(i)) for i in range(4)]
    assert a.put(keys[0], b"old") == 0
    assert a.upsert_batch(keys, [rnd(100 + i, i) for i in range(4)]) == 0
    assert b.get_batch(keys) == [rnd(100 + i, i) for i in range(4)]
    # one bad key: the first failure comes back, the other keys are written
    assert a.upsert_batch([keys[0], "", keys[1]], [b"n0", b"x", b"n1"]) == INVALID_PARAMS
    assert b.get_batch([keys[0], keys[1]]) == [b"n0", b"n1"]
    assert a.upsert_batch([], []) == 0

    src = bufs[0]
    src[:8192] = np.frombuffer(rnd(8192, 5), np.uint8)
    ptr = src.ctypes.data
    c = on(b)
    c.group_ids = [k("g0"), k("g1")]
    assert a.batch_upsert_from(keys[:2], [ptr, ptr + 4096], [4096, 10], c) == [0, 0]
    assert b.get(keys[0]) == src[:4096].tobytes()
    assert b.get(keys[1]) == src[4096:4106].tobytes()
    assert a.batch_upsert_from(keys[:2], [ptr], [1, 2]) == [INVALID_PARAMS] * 2


def test_get_batch_and_buffers_in_one_batch(pair, k):
    a, b = pair
    vals = [rnd(1000 + i * 300, i) for i in range(6)]
    keys = [k(str(i)) for i in range(6)]
    for i in range(6):  # alternate owners: own-segment copies and TCP reads
        assert a.put(keys[i], vals[i], on(a if i % 2 else b)) == 0
    assert b.get_batch(keys + [k("nope")]) == vals + [b""]
    hs = a.batch_get_buffer([k("nope")] + keys)
    assert hs[0] is None and [bytes(h) for h in hs[1:]] == vals
    assert a.batch_get_buffer([""]) == [None]
    assert a.get_batch([""]) == [b""]


# ---- get_into_ranges ------------------------------------------------------------------


def test_get_into_ranges_many_buffers_and_owners(pair, bufs, k):
    a, b = pair
    obj = rnd(64 * KiB, 7)
    assert a.put(k("on-a"), obj, on(a)) == 0
    assert a.put(k("on-b"), obj, on(b)) == 0
    dst = bufs[0]
    dst[:] = 0
    p0, p1 = dst.ctypes.data, dst.ctypes.data + MiB
    res = a.get_into_ranges(
        [p0, p1],
        [[k("on-a"), k("on-b")], [k("on-b"), k("nope")]],
        [[[0, 100], [700]], [[0, 5000], [0]]],
        [[[10, 65000], [0]], [[4096, 0], [0]]],
        [[[50, 536], [1]], [[4096, 0], [8]]])
    assert res == [[[50, 536], [1]], [[4096, 0], [OBJECT_NOT_FOUND]]]
    assert dst[:50].tobytes() == obj[10:60]
    assert dst[100:636].tobytes() == obj[65000:]
    assert dst[700:701].tobytes() == obj[:1]
    assert dst[MiB:MiB + 4096].tobytes() == obj[4096:8192]
    # bounds: past the object, past the registered region, an unregistered buffer
    end = dst.ctypes.data + dst.nbytes
    res = a.get_into_ranges([end - 16, 4096], [[k("on-a"), k("on-b")], [k("on-a")]],
                            [[[0, 0], [8]], [[0]]], [[[64 * KiB - 1, 0], [0]], [[0]]],
                            [[[2, 16], [9]], [[1]]])
    assert res == [[[INVALID_PARAMS, 16], [INVALID_PARAMS]], [[INVALID_PARAMS]]]
    assert dst[-16:].tobytes() == obj[:16]
    # the other client has not registered dst
    assert b.get_into_ranges([p0], [[k("on-a")]], [[[0]]], [[[0]]], [[[1]]]) == [
        [[INVALID_PARAMS]]]
    # shapes: outer lists differ -> []; a buffer's lists differ from its keys ->
    # [] per key; a key's three lists differ -> -600 per fragment
    assert a.get_into_ranges([p0], [], [], [], []) == []
    assert a.get_into_ranges([p0], [[k("on-a"), k("on-b")]], [[[0]]], [[[0]]], [[[1]]]) == [
        [[], []]]
    assert a.get_into_ranges([p0], [[k("on-a")]], [[[0, 1]]], [[[0]]], [[[1, 1]]]) == [
        [[INVALID_PARAMS, INVALID_PARAMS]]]
    assert a.get_into_ranges([], [], [], [], []) == []


# ---- sessions ---------------------------------------------------------------------------


def test_session_methods_exist_for_capability_probes():
    s = MooncakeDistributedStore()
    assert all(callable(getattr(s, m)) for m in SESSION_METHODS)


def test_layerwise_put_and_get_sessions(pair, bufs, k):
    """vLLM's layer-wise save and load: put sessions opened once, one ranged
    write per layer (highest first here), commit at the last layer; then get
    sessions, one ranged read per layer, end."""
    a, b = pair
    layers, page, nkeys = 4, 8 * KiB, 3
    obj = layers * page
    src, dst = bufs
    src[:nkeys * obj] = np.frombuffer(rnd(nkeys * obj, 11), np.uint8)
    dst[:] = 0
    keys = [k(str(i)) for i in range(nkeys)]
    cfg = ReplicateConfig()
    cfg.replica_num = 2
    cfg.group_ids = [k("grp")] * nkeys
    assert a.batch_put_session_start(keys, [obj] * nkeys, cfg) == [0] * nkeys
    assert a.batch_put_session_start(keys[:1], [obj]) == [INVALID_PARAMS]  # already open
    for layer in reversed(range(layers)):
        ptrs = [[src.ctypes.data + i * obj + layer * page,
                 src.ctypes.data + i * obj + layer * page + page // 2] for i in range(nkeys)]
        got = a.batch_put_from_multi_buffer_ranges(
            keys, ptrs, [[page // 2] * 2] * nkeys,
            [[layer * page, layer * page + page // 2]] * nkeys)
        assert got == [page] * nkeys
        assert b.batch_is_exist(keys) == [0] * nkeys  # invisible until the end
    assert b.get(keys[0]) == b""
    assert a.batch_put_session_end(keys) == [0] * nkeys
    assert a.batch_put_session_end(keys) == [INVALID_PARAMS] * nkeys  # already ended
    assert b.get_batch(keys) == [src[i * obj:(i + 1) * obj].tobytes() for i in range(nkeys)]
    assert len(b.get_replica_desc(keys[0])) == 2

    assert b.batch_get_session_start(keys + [k("nope")]) == [0] * nkeys + [OBJECT_NOT_FOUND]
    for layer in range(layers):
        got = b.batch_get_into_multi_buffer_ranges(
            keys, [[dst.ctypes.data + i * obj + layer * page] for i in range(nkeys)],
            [[page]] * nkeys, [[layer * page]] * nkeys)
        assert got == [page] * nkeys
    assert np.array_equal(dst[:nkeys * obj], src[:nkeys * obj])
    # a range outside the object, a key without a session, shape errors
    assert b.batch_get_into_multi_buffer_ranges(
        [keys[0], k("nope")], [[dst.ctypes.data]] * 2, [[2]] * 2, [[obj - 1]] * 2) == [
        INVALID_PARAMS, INVALID_PARAMS]
    assert b.batch_get_into_multi_buffer_ranges(keys, [[dst.ctypes.data]], [[1]], [[0]]) == [
        INVALID_PARAMS] * nkeys
    assert b.batch_get_into_multi_buffer_ranges(keys[:1], [[dst.ctypes.data]], [[1]],
                                                [[0, 1]]) == [INVALID_PARAMS]
    assert b.batch_get_session_end(keys) == 0
    assert b.batch_get_into_multi_buffer_ranges(keys[:1], [[dst.ctypes.data]], [[1]],
                                                [[0]]) == [INVALID_PARAMS]
    assert b.batch_get_session_end([k("never")]) == 0


def test_put_session_start_on_existing_and_revoke(pair, bufs, k):
    a, b = pair
    assert a.put(k("x"), b"exists") == 0
    assert a.batch_put_session_start([k("x"), k("y"), ""], [6, 100, 1]) == [
        OBJECT_ALREADY_EXISTS, 0, INVALID_PARAMS]
    assert a.batch_put_session_start([k("z")], [0]) == [INVALID_PARAMS]
    assert a.batch_put_session_start([k("z")], [1, 2]) == [INVALID_PARAMS]
    ptr = bufs[0].ctypes.data
    assert a.batch_put_from_multi_buffer_ranges([k("y")], [[ptr]], [[100]], [[0]]) == [100]
    # another client cannot touch this client's session, nor read the object
    assert b.batch_put_from_multi_buffer_ranges([k("y")], [[ptr]], [[1]], [[0]]) == [
        INVALID_PARAMS]
    assert b.batch_get_session_start([k("y")]) == [REPLICA_IS_NOT_READY]
    assert a.batch_put_session_revoke([k("y"), k("x")]) == [0, INVALID_PARAMS]
    assert b.is_exist(k("y")) == 0
    assert b.put(k("y"), b"fresh") == 0  # the key is free again
    assert a.get(k("y")) == b"fresh"


def test_get_session_lease_runs_out(pair, bufs, k):
    a, b = pair
    assert a.put(k("l"), b"leased value") == 0
    dst = bufs[1].ctypes.data
    t0 = time.monotonic()
    assert b.batch_get_session_start([k("l")]) == [0]
    assert b.batch_get_into_multi_buffer_ranges([k("l")], [[dst]], [[5]], [[7]]) == [5]
    assert bufs[1][:5].tobytes() == b"value"
    time.sleep(max(0.0, LEASE_S + 0.1 - (time.monotonic() - t0)))  # the lease is a duration
    assert b.batch_get_into_multi_buffer_ranges([k("l")], [[dst]], [[5]], [[7]]) == [
        LEASE_EXPIRED]
    assert b.batch_get_session_start([k("l")]) == [0]  # renew
    assert b.batch_get_into_multi_buffer_ranges([k("l")], [[dst]], [[12]], [[0]]) == [12]
    assert bufs[1][:12].tobytes() == b"leased value"
    assert b.batch_get_session_end([k("l")]) == 0


def test_sessions_from_many_threads(pair, bufs, k):
    """Several threads write their own layers of shared put sessions at once
    (the GIL is released during transfers), then one commits."""
    a, b = pair
    nthreads, page, nkeys = 4, 16 * KiB, 4
    obj = nthreads * page
    src = bufs[0]
    src[:nkeys * obj] = np.frombuffer(rnd(nkeys * obj, 21), np.uint8)
    keys = [k(str(i)) for i in range(nkeys)]
    assert a.batch_put_session_start(keys, [obj] * nkeys) == [0] * nkeys
    errors = []

    def writer(t):
        try:
            for _ in range(5):  # rewriting a range is allowed until the end
                got = a.batch_put_from_multi_buffer_ranges(
                    keys, [[src.ctypes.data + i * obj + t * page] for i in range(nkeys)],
                    [[page]] * nkeys, [[t * page]] * nkeys)
                assert got == [page] * nkeys, got
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    ts = [threading.Thread(target=writer, args=(t,)) for t in range(nthreads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors, errors[:3]
    assert a.batch_put_session_end(keys) == [0] * nkeys
    assert b.get_batch(keys) == [src[i * obj:(i + 1) * obj].tobytes() for i in range(nkeys)]


def test_close_revokes_open_put_sessions(mc_master, k):
    s = new_store(mc_master, tenant_id="sessions")
    other = new_store(mc_master, tenant_id="sessions")
    try:
        assert s.batch_put_session_start([k("c")], [64]) == [0]
        assert s.batch_get_session_start([k("c")]) == [REPLICA_IS_NOT_READY]
        assert s.close() == 0
        assert s.batch_put_session_end([k("c")]) == [INVALID_PARAMS]
        # revoked at close: the key is free for another writer at once
        assert other.put(k("c"), b"after close") == 0
        assert other.get(k("c")) == b"after close"
    finally:
        other.close()
        s.close()


# ---- MooncakeHostMemAllocator ---------------------------------------------------------


def test_host_mem_allocator(pair, k):
    """SGLang allocates host KV pools with a temporary allocator object; the
    memory stays until free() and works as a registered buffer."""
    from mooncake.store import MooncakeHostMemAllocator
    a, b = pair
    ptr = MooncakeHostMemAllocator().alloc(1 * MiB)  # the object goes right away
    assert ptr != 0 and ptr % 4096 == 0
    view = (np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * MiB).from_address(ptr)))
    view[:4096] = np.frombuffer(rnd(4096, 31), np.uint8)
    assert a.register_buffer(ptr, MiB) == 0
    assert a.put_from(k("h"), ptr, 4096) == 0
    assert b.get(k("h")) == rnd(4096, 31)
    assert a.get_into(k("h"), ptr + 8192, 4096) == 4096
    assert view[8192:12288].tobytes() == rnd(4096, 31)
    assert a.unregister_buffer(ptr) == 0
    alloc = MooncakeHostMemAllocator()
    assert alloc.alloc(0) == 0
    del view
    assert alloc.free(ptr) == 0
    assert alloc.free(ptr) == -1
    with pytest.raises(TypeError):
        alloc.alloc("1")
