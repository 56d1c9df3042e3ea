"""mooncake.engine between processes: this process's engine (``local``) and
peer engines in their own processes (tests/python/peer.py), over TCP
loopback.  Data is checked with BLAKE2 digests computed on both sides."""

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from mooncake.engine import TransferEngine, TransferNotify, TransferOpcode

from conftest import KiB, MiB, Local, digest, free_port, pattern, poll_until

SIZES = [1, 4 * KiB - 1, 64 * KiB + 3, MiB, 16 * MiB]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s}B")
def test_write_read_both_ways(local, peer, size):
    te = local.te
    loff, roff = 13 + size % 31, 101 + size % 17
    raddr = peer.addr + roff
    # this process -> peer
    local.buf[loff:loff + size] = pattern(size, size)
    want = digest(local.buf[loff:loff + size])
    assert te.transfer_sync_write(peer.name, local.addr + loff, raddr, size) == 0
    assert peer.hash(roff, size) == want
    # peer -> this process (read back into another place)
    back = 32 * MiB
    local.buf[back:back + size] = 0
    assert te.transfer_sync_read(peer.name, local.addr + back, raddr, size) == 0
    assert digest(local.buf[back:back + size]) == want
    # the peer initiates: it writes its copy into us, then reads ours back
    dst = 40 * MiB + loff
    local.buf[dst:dst + size] = 0
    assert peer.write(local.name, roff, local.addr + dst, size) == 0
    assert digest(local.buf[dst:dst + size]) == want
    peer.zero(roff, size)
    assert peer.read(local.name, roff, local.addr + loff, size) == 0
    assert peer.hash(roff, size) == want


def test_transfer_sync_generic(local, peer):
    te = local.te
    local.buf[:MiB] = pattern(7, MiB)
    assert te.transfer_sync(peer.name, local.addr, peer.addr + MiB, MiB, TransferOpcode.Write) == 0
    assert peer.hash(MiB, MiB) == digest(local.buf[:MiB])
    local.buf[2 * MiB:3 * MiB] = 0
    assert te.transfer_sync(peer.name, local.addr + 2 * MiB, peer.addr + MiB, MiB,
                            TransferOpcode.Read) == 0
    assert digest(local.buf[2 * MiB:3 * MiB]) == digest(local.buf[:MiB])


def test_batch_forms(local, peer):
    te = local.te
    n, piece = 16, 64 * KiB + 5
    src = [i * 2 * piece for i in range(n)]
    dst = [8 * MiB + i * 3 * piece for i in range(n)]
    local.buf[:2 * n * piece] = pattern(21, 2 * n * piece)
    assert te.batch_transfer_sync_write(peer.name, [local.addr + s for s in src],
                                        [peer.addr + d for d in dst], [piece] * n) == 0
    for s, d in zip(src, dst):
        assert peer.hash(d, piece) == digest(local.buf[s:s + piece])
    # read them back in one batch to a fresh area
    back = [24 * MiB + i * piece for i in range(n)]
    local.buf[24 * MiB:24 * MiB + n * piece] = 0
    assert te.batch_transfer_sync_read(peer.name, [local.addr + b for b in back],
                                       [peer.addr + d for d in dst], [piece] * n) == 0
    for s, b in zip(src, back):
        assert digest(local.buf[b:b + piece]) == digest(local.buf[s:s + piece])
    # the generic form, both opcodes, tuples accepted
    local.buf[24 * MiB:24 * MiB + n * piece] = 0
    assert te.batch_transfer_sync(peer.name, tuple(local.addr + b for b in back),
                                  tuple(peer.addr + d for d in dst), (piece,) * n,
                                  TransferOpcode.Read) == 0
    assert digest(local.buf[back[-1]:back[-1] + piece]) == digest(local.buf[src[-1]:src[-1] + piece])
    assert te.batch_transfer_sync(peer.name, [local.addr], [peer.addr + 30 * MiB], [piece],
                                  TransferOpcode.Write) == 0
    assert peer.hash(30 * MiB, piece) == digest(local.buf[:piece])
    # list lengths differ: -1; empty lists: nothing to do
    assert te.batch_transfer_sync_write(peer.name, [local.addr], [peer.addr, peer.addr], [1]) == -1
    assert te.batch_transfer_sync_write(peer.name, [], [], []) == 0
    # the peer initiates a batch into us
    local.buf[48 * MiB:48 * MiB + n * piece] = 0
    assert peer.cmd("batch", peer=local.name, write=True, offs=dst,
                    raddrs=[local.addr + 48 * MiB + i * piece for i in range(n)],
                    lens=[piece] * n)["rc"] == 0
    for i, s in enumerate(src):
        o = 48 * MiB + i * piece
        assert digest(local.buf[o:o + piece]) == digest(local.buf[s:s + piece])


def test_pd_pattern(procs):
    """vLLM / SGLang prefill side: register the KV area once, then many
    batch_transfer_sync_write calls from a pool of 8 threads into the decode
    peer's registered memory; the decode side only registers."""
    decode = procs.peer(size=64 * MiB)
    prefill = TransferEngine()
    assert prefill.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == 0
    kv = pattern(99, 64 * MiB)
    kv_addr = kv.ctypes.data
    assert prefill.batch_register_memory([kv_addr], [kv.nbytes]) == 0
    block = 16 * KiB
    blocks_per_req = 16
    nreq = (64 * MiB) // (block * blocks_per_req)
    order = np.random.default_rng(5).permutation(nreq)

    def send(r):
        # scatter: request r moves its blocks to a permuted place on the peer
        base = int(order[r]) * block * blocks_per_req
        srcs = [kv_addr + r * block * blocks_per_req + i * block for i in range(blocks_per_req)]
        dsts = [decode.addr + base + i * block for i in range(blocks_per_req)]
        return prefill.batch_transfer_sync_write(decode.name, srcs, dsts, [block] * blocks_per_req)

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(send, range(nreq)))
    assert results == [0] * nreq
    for r in range(0, nreq, max(1, nreq // 16)):
        base = int(order[r]) * block * blocks_per_req
        n = block * blocks_per_req
        assert decode.hash(base, n) == digest(kv[r * n:(r + 1) * n])
    assert prefill.batch_unregister_memory([kv_addr]) == 0


def test_async_and_status(local, peer):
    te = local.te
    n = 64 * KiB
    local.buf[:8 * n] = pattern(31, 8 * n)
    ids = [te.batch_transfer_async_write(peer.name, [local.addr + i * n], [peer.addr + 4 * MiB + i * n], [n])
           for i in range(4)]
    ids.append(te.batch_transfer_async(peer.name, [local.addr + 4 * n, local.addr + 5 * n],
                                       [peer.addr + 4 * MiB + 4 * n, peer.addr + 4 * MiB + 5 * n],
                                       [n, n], TransferOpcode.Write))
    assert all(isinstance(i, int) and i != 0 for i in ids)
    assert te.get_batch_transfer_status(ids) == 0
    assert peer.hash(4 * MiB, 6 * n) == digest(local.buf[:6 * n])
    # async read back
    local.buf[16 * MiB:16 * MiB + 6 * n] = 0
    rid = te.batch_transfer_async_read(peer.name, [local.addr + 16 * MiB], [peer.addr + 4 * MiB], [6 * n])
    assert rid != 0
    assert te.get_batch_transfer_status([rid]) == 0
    assert digest(local.buf[16 * MiB:16 * MiB + 6 * n]) == digest(local.buf[:6 * n])
    # a freed id is unknown afterwards
    assert te.get_batch_transfer_status([rid]) == -1
    # transfer_submit_write + transfer_check_status
    bid = te.transfer_submit_write(peer.name, local.addr + 6 * n, peer.addr + 5 * MiB, n)
    assert bid != 0
    st = poll_until(lambda: te.transfer_check_status(bid) or None, 30, "transfer_check_status", 0.001)
    assert st == 1
    assert peer.hash(5 * MiB, n) == digest(local.buf[6 * n:7 * n])
    assert te.transfer_check_status(bid) == -1  # freed
    # failures: unknown peer gives id 0; a rejected range fails at submit or in status
    assert te.batch_transfer_async_write(f"127.0.0.1:{free_port()}", [local.addr], [0x1000], [8]) == 0
    assert te.transfer_submit_write(f"127.0.0.1:{free_port()}", local.addr, 0x1000, 8) == 0
    bad = te.batch_transfer_async_write(peer.name, [local.addr], [peer.addr + peer.size + (1 << 30)], [8])
    assert bad == 0 or te.get_batch_transfer_status([bad]) == -1


def test_notify(local, peer):
    te = local.te
    te.get_notifies()  # drain
    assert te.transfer_sync(peer.name, local.addr, peer.addr, 64, TransferOpcode.Write,
                            TransferNotify("agent-1", "block 7 ready")) == 0
    got = poll_until(lambda: peer.notifies() or None, 20, "notify at the peer", 0.02)
    assert got == [["agent-1", "block 7 ready"]]
    assert te.batch_transfer_sync(peer.name, [local.addr, local.addr + 64], [peer.addr, peer.addr + 64],
                                  [64, 64], TransferOpcode.Write, notify=TransferNotify("agent-1", "b2")) == 0
    got = poll_until(lambda: peer.notifies() or None, 20, "batch notify at the peer", 0.02)
    assert got == [["agent-1", "b2"]]
    # the other way: the peer notifies us
    assert peer.cmd("notify", peer=local.name, raddr=local.addr + 60 * MiB, name="peer", msg="héllo")["rc"] == 0
    got = poll_until(te.get_notifies, 20, "notify here", 0.01)
    assert [(n.name, n.msg) for n in got] == [("peer", "héllo")]
    assert all(isinstance(n, TransferNotify) for n in got)
    assert te.get_notifies() == []


def test_probe(local, peer):
    assert local.te.send_probe(peer.name) == 0
    assert peer.cmd("probe", peer=local.name)["rc"] == 0
    t0 = time.monotonic()
    assert local.te.send_probe(f"127.0.0.1:{free_port()}") != 0
    assert local.te.send_probe("not-a-host-port") != 0
    assert time.monotonic() - t0 < 15


def test_probe_dead_peer(procs, local):
    p = procs.peer(size=MiB)
    assert local.te.send_probe(p.name) == 0
    p.kill()
    assert local.te.send_probe(p.name) != 0


def test_error_values(local, peer):
    te = local.te
    dead = f"127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    assert te.transfer_sync_write(dead, local.addr, 0x1000, 8) == -1
    assert te.transfer_sync_read(dead, local.addr, 0x1000, 8) == -1
    assert te.batch_transfer_sync_write(dead, [local.addr], [0x1000], [8]) == -1
    assert te.transfer_sync_write("no-such-segment", local.addr, 0x1000, 8) == -1
    assert te.get_first_buffer_address(dead) == 0
    assert time.monotonic() - t0 < 30
    # ranges the peer never registered: refused, within bounded time
    t0 = time.monotonic()
    assert te.transfer_sync_write(peer.name, local.addr, 0x10000, 64) == -1
    assert te.transfer_sync_read(peer.name, local.addr, 0x10000, 64) == -1
    # straddles the end of the peer's buffer
    assert te.transfer_sync_write(peer.name, local.addr, peer.addr + peer.size - 32, 64) == -1
    assert te.batch_transfer_sync_read(peer.name, [local.addr, local.addr + 64],
                                       [peer.addr, 0x10000], [64, 64]) == -1
    assert time.monotonic() - t0 < 10
    # and the engine still works afterwards
    assert te.transfer_sync_write(peer.name, local.addr, peer.addr, 64) == 0
    assert te.get_first_buffer_address(peer.name) == peer.addr


def test_threads_hammer(local, peer):
    """8 threads drive one engine at once (GIL released in every call)."""
    te = local.te
    nthreads, span, piece = 8, 2 * MiB, 32 * KiB
    base = 8 * MiB
    local.buf[base:base + nthreads * span] = pattern(77, nthreads * span)
    errors = []

    def work(t):
        try:
            lo = base + t * span
            ro = t * span
            for i in range(span // piece):
                o = i * piece
                if i % 3 == 0:
                    rc = te.transfer_sync_write(peer.name, local.addr + lo + o, peer.addr + ro + o, piece)
                elif i % 3 == 1:
                    rc = te.batch_transfer_sync_write(peer.name, [local.addr + lo + o],
                                                      [peer.addr + ro + o], [piece])
                else:
                    bid = te.batch_transfer_async_write(peer.name, [local.addr + lo + o],
                                                        [peer.addr + ro + o], [piece])
                    rc = te.get_batch_transfer_status([bid]) if bid else -1
                assert rc == 0, f"thread {t} piece {i}: {rc}"
                # read a piece back into scratch space owned by this thread
                scratch = 40 * MiB + t * piece
                assert te.transfer_sync_read(peer.name, local.addr + scratch, peer.addr + ro + o, piece) == 0
                assert digest(local.buf[scratch:scratch + piece]) == digest(local.buf[lo + o:lo + o + piece])
        except Exception as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(nthreads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[0]
    assert peer.hash(0, nthreads * span) == digest(local.buf[base:base + nthreads * span])


def test_managed_buffer_as_transfer_target(local, procs):
    p = procs.peer(size=MiB)
    a = p.cmd("alloc", len=300 * KiB)["addr"]
    assert a
    local.buf[:300 * KiB] = pattern(3, 300 * KiB)
    assert local.te.transfer_sync_write(p.name, local.addr, a, 300 * KiB) == 0
    assert p.cmd("hash_addr", addr=a, len=300 * KiB)["hash"] == digest(local.buf[:300 * KiB])


def test_transfer_timeout_releases_gil(procs, monkeypatch):
    """MC_TRANSFER_TIMEOUT (here 1, raised to upstream's floor of 5 s) bounds a
    sync call to a peer that stopped answering, and other Python threads run
    meanwhile."""
    monkeypatch.setenv("MC_TRANSFER_TIMEOUT", "1")
    loc = Local(size=4 * MiB)
    p = procs.peer(size=4 * MiB)
    assert loc.te.transfer_sync_write(p.name, loc.addr, p.addr, 4096) == 0  # connected
    ticks = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    th = threading.Thread(target=spin)
    th.start()
    p.pause()
    try:
        t0 = time.monotonic()
        rc = loc.te.transfer_sync_write(p.name, loc.addr, p.addr, 64 * KiB)
        took = time.monotonic() - t0
    finally:
        p.resume()
        stop.set()
        th.join()
    assert rc == -1
    assert 4.5 <= took < 15, took
    assert ticks[0] > 100, "the GIL was held during the transfer"
    # after the peer is back, the engine carries on
    ok = poll_until(lambda: loc.te.transfer_sync_write(p.name, loc.addr, p.addr, 4096) == 0, 60,
                    "a transfer after the peer resumed", 0.1)
    assert ok
    loc.close()


def test_http_metadata(meta_server, procs, monkeypatch):
    """Named segments through the HTTP metadata server instead of P2P."""
    monkeypatch.setenv("MC_TCP_BIND_ADDRESS", "127.0.0.1")
    tag = os.getpid()
    p = procs.peer(metadata=meta_server, name=f"py-peer-{tag}", size=8 * MiB,
                   env={"MC_TCP_BIND_ADDRESS": "127.0.0.1"})
    loc = Local(size=8 * MiB, metadata=meta_server, name=f"py-local-{tag}", protocol="rdma")
    te = loc.te
    assert p.name == f"py-peer-{tag}"
    assert te.get_first_buffer_address(p.name) == p.addr
    loc.buf[:MiB] = pattern(11, MiB)
    assert te.transfer_sync_write(p.name, loc.addr, p.addr + MiB, MiB) == 0
    assert p.hash(MiB, MiB) == digest(loc.buf[:MiB])
    assert p.write(loc.name, MiB, loc.addr + 4 * MiB, MiB) == 0
    assert digest(loc.buf[4 * MiB:5 * MiB]) == digest(loc.buf[:MiB])
    assert te.send_probe(p.name) == 0
    assert te.transfer_sync_write(f"py-missing-{tag}", loc.addr, p.addr, 8) == -1
    # initialize_ext with a bare host:port and an explicit metadata type
    te2 = TransferEngine()
    host_port = meta_server.split("://", 1)[1]
    assert te2.initialize_ext(f"py-ext-{tag}", host_port, "tcp", "", "http") == 0
    assert te2.get_first_buffer_address(p.name) == p.addr
    del te2
    loc.close()
