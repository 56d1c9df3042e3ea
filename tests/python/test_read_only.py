"""Read-only registrations (issue 16 part 3): a range registered read-only
serves peers' reads and refuses their writes with the bytes untouched; a
store buffer registered read-only is a put source only."""

import numpy as np
import pytest

from conftest import MiB, Local
from mooncake.store import MooncakeDistributedStore

INVALID_PARAMS = -600


def test_engine_read_only_region_refuses_remote_writes():
    a, b = Local(size=MiB), Local(size=MiB, register=False)
    try:
        b.buf[:] = 0x5A
        assert b.te.register_memory(b.addr, MiB, "*", True) == 0  # read_only
        a.buf[:4096] = np.arange(4096, dtype=np.uint8)
        assert a.te.transfer_sync_write(b.name, a.addr, b.addr, 4096) != 0
        assert a.te.transfer_sync_write(b.name, a.addr, b.addr + 8192, 16) != 0
        assert (b.buf == 0x5A).all()
        assert a.te.transfer_sync_read(b.name, a.addr + 8192, b.addr + 100, 1000) == 0
        assert (a.buf[8192:9192] == 0x5A).all()
        # and read_only by keyword; read-write is the default
        assert b.te.unregister_memory(b.addr) == 0
        assert b.te.register_memory(b.addr, MiB, read_only=False) == 0
        assert a.te.transfer_sync_write(b.name, a.addr, b.addr, 4096) == 0
        assert (b.buf[:4096] == a.buf[:4096]).all()
    finally:
        a.close()
        b.close()


@pytest.fixture(scope="module")
def store(mc_master):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", mc_master.meta_uri, 32 * MiB, 16 * MiB, "tcp", "",
                   mc_master.addr, tenant_id="readonly") == 0
    yield s
    assert s.close() == 0


def test_store_read_only_buffer_is_a_put_source_only(store):
    src = np.full(MiB, 7, np.uint8)
    dst = np.zeros(MiB, np.uint8)
    assert store.register_buffer(src.ctypes.data, MiB, read_only=True) == 0
    assert store.register_buffer(dst.ctypes.data, MiB) == 0
    try:
        assert store.put_from("ro-k", src.ctypes.data, 4096) == 0
        assert store.batch_put_from(["ro-k2"], [src.ctypes.data], [4096]) == [0]
        assert store.get_into("ro-k", src.ctypes.data, 4096) == INVALID_PARAMS
        assert store.batch_get_into(["ro-k"], [src.ctypes.data], [4096]) == [INVALID_PARAMS]
        assert store.get_into_ranges([src.ctypes.data], [["ro-k"]], [[[0]]], [[[0]]],
                                     [[[16]]]) == [[[INVALID_PARAMS]]]
        assert (src == 7).all()
        assert store.get_into("ro-k", dst.ctypes.data, 4096) == 4096
        assert (dst[:4096] == 7).all()
    finally:
        assert store.unregister_buffer(src.ctypes.data) == 0
        assert store.unregister_buffer(dst.ctypes.data) == 0
