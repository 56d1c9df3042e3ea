"""Per-transfer checksums of the Transfer Engine (issue 16 part 1, the raw
engine's option): off by default, on through MC_TE_CHECKSUM=1 or
set_checksum(True); checked transfers move the same bytes, and a peer that
cannot check is refused with -1012.  Flipped bytes are covered in C
(tests/unit/test_te_checksum.c), which can reach the test hook."""

import numpy as np

from conftest import MiB, Local
from mooncake.engine import TransferEngine

NOT_SUPPORTED = -1012  # the peer cannot check (MC_ERR_NOT_SUPPORTED)


def _roundtrip(a, b, n, seed):
    a.buf[:n] = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)
    b.buf[:n] = 0
    assert a.te.transfer_sync_write(b.name, a.addr, b.addr, n) == 0
    assert (b.buf[:n] == a.buf[:n]).all()
    a.buf[n:2 * n] = 0
    assert a.te.transfer_sync_read(b.name, a.addr + n, b.addr, n) == 0
    assert (a.buf[n:2 * n] == b.buf[:n]).all()


def test_checksums_off_by_default_and_switchable():
    assert TransferEngine().set_checksum(True) == -1  # before initialize
    a, b = Local(size=16 * MiB), Local(size=16 * MiB)
    try:
        assert a.te.get_checksum() is False
        _roundtrip(a, b, 4096, 1)
        assert a.te.set_checksum(True) == 0
        assert a.te.get_checksum() is True
        for n in (4096, 4 * MiB + 3):
            _roundtrip(a, b, n, n)
        assert a.te.set_checksum(False) == 0
        assert a.te.get_checksum() is False
        _roundtrip(a, b, 65536, 2)
    finally:
        a.close()
        b.close()


def test_checksums_on_from_the_environment(monkeypatch):
    monkeypatch.setenv("MC_TE_CHECKSUM", "1")
    a, b = Local(size=16 * MiB), Local(size=16 * MiB)
    monkeypatch.delenv("MC_TE_CHECKSUM")
    try:
        assert a.te.get_checksum() is True and b.te.get_checksum() is True
        for n in (1, 32768, 4 * MiB):
            _roundtrip(a, b, n, n)
            _roundtrip(b, a, n, n + 1)
    finally:
        a.close()
        b.close()


def test_a_peer_that_cannot_check_is_refused_with_its_code(monkeypatch):
    # an initiator held to upstream's v1 framing has no room for sums
    monkeypatch.setenv("MC_TCP_PROTO", "1")
    a = Local(size=MiB)
    monkeypatch.delenv("MC_TCP_PROTO")
    b = Local(size=MiB)
    try:
        b.buf[:4096] = 0x5A
        assert a.te.set_checksum(True) == 0
        assert a.te.transfer_sync_write(b.name, a.addr, b.addr, 4096) == NOT_SUPPORTED
        assert a.te.transfer_sync_read(b.name, a.addr, b.addr, 4096) == NOT_SUPPORTED
        assert (b.buf[:4096] == 0x5A).all()
        assert a.te.set_checksum(False) == 0
        assert a.te.transfer_sync_read(b.name, a.addr, b.addr, 4096) == 0
        assert (a.buf[:4096] == 0x5A).all()
    finally:
        a.close()
        b.close()
