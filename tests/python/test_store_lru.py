"""Per-segment LRU (--preferred_segment_lru, ours; paper 4.6, issue 17 part 3)
against a real mooncake_master and two in-process stores A and B.

A put that prefers a full segment evicts that segment's least recently used
objects, never another segment's, never a leased or soft-pinned one, and an
object with a replica elsewhere loses only its replica on the full segment.
Segments hold SLOTS values at most; every test fills A well past that."""

import time

import pytest

from mooncake.store import MooncakeDistributedStore, ReplicateConfig

from conftest import MasterDaemon, MiB

VAL = 256 * 1024
SEG = 4 * MiB
SLOTS = SEG // VAL  # 16: what a segment could hold with no overhead at all


@pytest.fixture
def lru(tmp_path_factory):
    # a long lease (reads protect for 10 s; tests never wait for it), batch 1
    # (exact LRU), no watermark round (the per-segment rounds alone decide)
    m = MasterDaemon(tmp_path_factory.mktemp("lru_master"),
                     extra=("--preferred_segment_lru=true", "--preferred_segment_lru_batch=1",
                            "--eviction_high_watermark_ratio=1", "--default_kv_lease_ttl=10000"))
    stores = []
    for _ in range(2):
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", m.meta_uri, SEG, 8 * MiB, "tcp", "", m.addr) == 0
        stores.append(s)
    yield m, stores[0], stores[1]
    for s in stores:
        s.close()
    m.stop()


def cfg(*segments, n=1, soft_pin=False):
    c = ReplicateConfig()
    c.replica_num = n
    c.preferred_segments = list(segments)
    if soft_pin:
        c.with_soft_pin = True
    return c


def val(i):
    return bytes([i % 251]) * VAL


def segments_of(store, key):
    return sorted(r.get_memory_descriptor().buffer_descriptor.transport_endpoint
                  for r in store.get_replica_desc(key))


def fill(store, seg, prefix, n):
    # the LRU key (a complete object's lease deadline, the PutEnd time for
    # one never read) has the master clock's millisecond resolution, and
    # objects stamped in the same millisecond go in no set order: space the
    # puts by more than a millisecond so their order is the LRU order
    for i in range(n):
        time.sleep(0.0015)
        assert store.put(f"{prefix}{i}", val(i), cfg(seg)) == 0, i


def test_full_preferred_segment_evicts_its_lru(lru):
    _, a, b = lru
    sa, sb = a.get_hostname(), b.get_hostname()
    # B's objects are older than all of A's: A's pressure must not touch them
    fill(b, sb, "lru1/b", 4)
    n = 3 * SLOTS
    fill(a, sa, "lru1/a", n)
    alive = [a.is_exist(f"lru1/a{i}") == 1 for i in range(n)]
    kept = alive.count(True)
    # exact LRU on A: the oldest went, a suffix of the most recent stayed
    assert alive == [False] * (n - kept) + [True] * kept, "".join(".x"[v] for v in alive)
    assert SLOTS // 2 <= kept <= SLOTS
    for i in range(n - kept, n):  # nothing spilled to B
        assert segments_of(a, f"lru1/a{i}") == [sa]
    for i in range(4):
        assert segments_of(b, f"lru1/b{i}") == [sb]
        assert b.get(f"lru1/b{i}") == val(i)
    assert a.get(f"lru1/a{n - 1}") == val(n - 1)


def test_leased_and_soft_pinned_objects_survive_pressure(lru):
    _, a, b = lru
    sa = a.get_hostname()
    fill(a, sa, "lru2/a", SLOTS)
    # a soft-pinned object, then the oldest unpinned one read (a read lease:
    # the block of a request in flight)
    assert a.put("lru2/pinned", val(7), cfg(sa, soft_pin=True)) == 0
    oldest = next(i for i in range(SLOTS) if a.is_exist(f"lru2/a{i}") == 1)
    assert a.get(f"lru2/a{oldest}") == val(oldest)
    fill(a, sa, "lru2/z", 3 * SLOTS)
    assert a.get("lru2/pinned") == val(7)
    assert segments_of(a, "lru2/pinned") == [sa]
    assert a.get(f"lru2/a{oldest}") == val(oldest)
    assert segments_of(a, f"lru2/a{oldest}") == [sa]
    # every other old one went (LRU), the newest stayed
    assert a.is_exist(f"lru2/a{oldest + 1}") == 0
    assert a.is_exist(f"lru2/z{3 * SLOTS - 1}") == 1


def test_eviction_drops_only_the_full_segments_replica(lru):
    _, a, b = lru
    sa, sb = a.get_hostname(), b.get_hostname()
    assert a.put("lru3/two", val(3), cfg(sa, sb, n=2)) == 0  # (a read would lease it)
    fill(a, sa, "lru3/a", 3 * SLOTS)
    # its A replica was the least recently used block there; the B one stays
    assert a.is_exist("lru3/a0") == 0
    assert segments_of(a, "lru3/two") == [sb]
    assert a.get("lru3/two") == val(3)


def test_without_the_flag_a_full_preferred_segment_spills(mc_master):
    # upstream's placement (the default): the full preferred segment is
    # skipped and the put lands elsewhere, nothing is evicted for it
    stores = []
    for _ in range(2):
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", mc_master.meta_uri, SEG, 8 * MiB, "tcp", "",
                       mc_master.addr) == 0
        stores.append(s)
    a, b = stores
    try:
        sa = a.get_hostname()
        fill(a, sa, "lru4/a", SLOTS + 4)
        assert all(a.is_exist(f"lru4/a{i}") == 1 for i in range(SLOTS + 4))
        assert any(segments_of(a, f"lru4/a{i}") != [sa] for i in range(SLOTS + 4))
    finally:
        for s in stores:
            s.close()
