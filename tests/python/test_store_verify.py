"""End-to-end checksums (issue 16 part 1): a byte flipped in the holder's
memory is never served.  The holder is this process's own store, so the
replica's address (get_replica_desc) is written through directly."""

import ctypes

import numpy as np
import pytest

from conftest import MiB
from mooncake.store import MooncakeDistributedStore

CHECKSUM_MISMATCH = -801


@pytest.fixture(scope="module")
def store(mc_master):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", mc_master.meta_uri, 32 * MiB, 16 * MiB, "tcp", "",
                   mc_master.addr, tenant_id="verify") == 0
    yield s
    assert s.close() == 0


def flip(store, key, at):
    desc = store.get_replica_desc(key)
    assert len(desc) == 1
    addr = desc[0].get_memory_descriptor().buffer_descriptor.buffer_address
    p = ctypes.cast(addr + at, ctypes.POINTER(ctypes.c_uint8))
    p[0] ^= 0x40


def test_flipped_byte_fails_the_read_and_the_object_goes(store):
    value = np.random.default_rng(3).integers(0, 256, MiB, dtype=np.uint8).tobytes()
    assert store.put("v-one", value) == 0
    assert store.get("v-one") == value
    flip(store, "v-one", 12345)
    dst = np.zeros(MiB, np.uint8)
    assert store.register_buffer(dst.ctypes.data, MiB) == 0
    try:
        assert store.get_into("v-one", dst.ctypes.data, MiB) == CHECKSUM_MISMATCH
        assert store.get("v-one") == b""  # the replica was dropped: gone
        assert store.is_exist("v-one") == 0
    finally:
        assert store.unregister_buffer(dst.ctypes.data) == 0


def test_verify_false_reads_what_is_there(mc_master):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", mc_master.meta_uri, 16 * MiB, 16 * MiB, "tcp", "",
                   mc_master.addr, tenant_id="verify-off", verify=False) == 0
    try:
        value = bytes(range(256)) * 1024
        assert s.put("v-off", value) == 0
        flip(s, "v-off", 7)
        got = s.get("v-off")
        assert len(got) == len(value) and got[7] == value[7] ^ 0x40
    finally:
        assert s.close() == 0


def test_put_session_in_any_order_is_checked(store):
    """A put session signs its object whatever the order of its pieces
    (client_verify.c, mc_store_seq_hash): in order it is hashed as written,
    out of order the chunks written whole are staged and the rest read back
    at the end; a whole read of either is checked like a put's."""
    value = np.random.default_rng(5).integers(0, 256, MiB, dtype=np.uint8)
    src = value.ctypes.data
    assert store.register_buffer(src, MiB) == 0
    try:
        half = MiB // 2
        # in order, in two calls and two buffers per call
        assert store.batch_put_session_start(["v-sess"], [MiB]) == [0]
        assert store.batch_put_from_multi_buffer_ranges(
            ["v-sess"], [[src, src + 4096]], [[4096, half - 4096]], [[0, 4096]]) == [half]
        assert store.batch_put_from_multi_buffer_ranges(
            ["v-sess"], [[src + half]], [[half]], [[half]]) == [half]
        assert store.batch_put_session_end(["v-sess"]) == [0]
        assert store.get("v-sess") == value.tobytes()
        flip(store, "v-sess", 777)
        assert store.get("v-sess") == b""  # caught: the only replica dropped
        assert store.is_exist("v-sess") == 0
        # out of order, the second half first, then the first in unaligned
        # pieces: signed too, the flipped byte is caught
        assert store.batch_put_session_start(["v-sess2"], [MiB]) == [0]
        assert store.batch_put_from_multi_buffer_ranges(
            ["v-sess2"], [[src + half]], [[half]], [[half]]) == [half]
        assert store.batch_put_from_multi_buffer_ranges(
            ["v-sess2"], [[src + 1000, src]], [[half - 1000, 1000]], [[1000, 0]]) == [half]
        assert store.batch_put_session_end(["v-sess2"]) == [0]
        assert store.get("v-sess2") == value.tobytes()
        flip(store, "v-sess2", 777)
        assert store.get("v-sess2") == b""
        assert store.is_exist("v-sess2") == 0
    finally:
        assert store.unregister_buffer(src) == 0
