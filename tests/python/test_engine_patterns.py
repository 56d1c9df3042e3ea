"""mooncake.engine driven the way its integrations drive it
(spec python-api-and-integrations.md, B.1, B.3, B.7, B.11, B.12).

Each test follows one integration's call sequence against a peer engine in
another process (tests/python/peer.py) over P2P handshake, on a TCP-only
machine, with the protocol and device arguments those integrations pass.
"""

import ipaddress
import random
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from conftest import KiB, MiB, digest, pattern
from mooncake.engine import TransferEngine


def p2p_engine(protocol="rdma", device="", host="127.0.0.1"):
    te = TransferEngine()
    rc = te.initialize(host, "P2PHANDSHAKE", protocol, device)
    assert rc == 0, f"initialize({host!r}, P2PHANDSHAKE, {protocol!r}, {device!r}) -> {rc}"
    return te


def session(host, port):
    """The session name integrations build: ip:port, IPv6 in brackets."""
    try:
        if ipaddress.ip_address(host).version == 6:
            return f"[{host}]:{port}"
    except ValueError:
        pass
    return f"{host}:{port}"


# ---- B.1 vLLM MooncakeConnector ---------------------------------------------------------


def test_vllm_pd_per_layer(procs):
    """Decode registers one region per layer (older vLLM) and only receives;
    prefill registers its KV storages once with batch_register_memory and
    sends every request's blocks of all layers in one
    batch_transfer_sync_write, from a pool of 10 threads (vLLM's default
    num_workers), many calls at once to the same peer."""
    layers, layer_bytes, block = 8, 2 * MiB, 16 * KiB
    decode = procs.peer(size=MiB)
    r = decode.cmd("regions", count=layers, len=layer_bytes)
    assert r["rc"] == 0
    dst_layers = r["addrs"]

    prefill = p2p_engine("rdma", "")  # vLLM's default protocol, device ""
    assert prefill.get_rpc_port() > 0
    kv = [pattern(100 + i, layer_bytes) for i in range(layers)]
    assert prefill.batch_register_memory([a.ctypes.data for a in kv], [layer_bytes] * layers) == 0

    nblocks = layer_bytes // block
    run = 4  # contiguous runs of 4 blocks (block_len * n)
    nreq = nblocks // run
    order = np.random.default_rng(7).permutation(nreq)

    def send(req):
        srcs, dsts, lens = [], [], []
        for layer in range(layers):
            src_off = req * run * block
            dst_off = int(order[req]) * run * block
            srcs.append(kv[layer].ctypes.data + src_off)
            dsts.append(dst_layers[layer] + dst_off)
            lens.append(run * block)
        return prefill.batch_transfer_sync_write(decode.name, srcs, dsts, lens)

    with ThreadPoolExecutor(max_workers=10) as pool:
        assert list(pool.map(send, range(nreq))) == [0] * nreq
    for layer in (0, layers // 2, layers - 1):
        for req in range(0, nreq, 37):
            n = run * block
            got = decode.cmd("hash_addr", addr=dst_layers[layer] + int(order[req]) * n, len=n)
            assert got["hash"] == digest(kv[layer][req * n:(req + 1) * n]), (layer, req)


def test_vllm_failed_call_is_nonzero_and_engine_recovers(procs):
    """One bad entry (outside the peer's registered memory) makes the whole
    call non-zero, which vLLM reports as failed requests; the engine and the
    peer carry on."""
    decode = procs.peer(size=4 * MiB)
    prefill = p2p_engine()
    src = pattern(5, 4 * MiB)
    assert prefill.batch_register_memory([src.ctypes.data], [src.nbytes]) == 0
    good = [decode.addr + i * 64 * KiB for i in range(4)]
    bad = good[:3] + [decode.addr + 64 * MiB]  # far past the peer's 4 MiB
    srcs = [src.ctypes.data + i * 64 * KiB for i in range(4)]
    assert prefill.batch_transfer_sync_write(decode.name, srcs, bad, [64 * KiB] * 4) != 0
    assert prefill.batch_transfer_sync_write(decode.name, srcs, good, [64 * KiB] * 4) == 0
    assert decode.hash(0, 256 * KiB) == digest(src[:256 * KiB])
    # a peer that is not there: non-zero, no exception, no hang past the timeout
    assert prefill.batch_transfer_sync_write("127.0.0.1:1", srcs, good, [64 * KiB] * 4) != 0


def test_vllm_heterogeneous_tp_tiny_slices(procs):
    """Per-head slices for heterogeneous TP: thousands of 128-byte entries in
    one call, from several threads at once."""
    decode = procs.peer(size=8 * MiB)
    prefill = p2p_engine()
    src = pattern(9, 8 * MiB)
    assert prefill.batch_register_memory([src.ctypes.data], [src.nbytes]) == 0
    piece, per_call, threads = 128, 4096, 4
    span = piece * per_call  # 512 KiB per call

    def send(t):
        base = t * span
        # every other slice, the gaps filled by a second call: interleaved writes
        rcs = []
        for phase in (0, 1):
            idx = range(phase, per_call, 2)
            rcs.append(prefill.batch_transfer_sync_write(
                decode.name, [src.ctypes.data + base + i * piece for i in idx],
                [decode.addr + base + i * piece for i in idx], [piece] * len(idx)))
        return rcs

    with ThreadPoolExecutor(max_workers=threads) as pool:
        assert list(pool.map(send, range(threads))) == [[0, 0]] * threads
    assert decode.hash(0, threads * span) == digest(src[:threads * span])


def test_vllm_ec_dynamic_registration(procs):
    """vLLM's EC connector: per-transfer buffers registered and unregistered
    on both sides; writes into memory the receiver unregistered fail."""
    recv = procs.peer(size=MiB)
    sender = p2p_engine("tcp", "")
    for round_ in range(6):
        n = (round_ + 1) * 96 * KiB
        r = recv.cmd("regions", count=1, len=n)
        assert r["rc"] == 0
        dst = r["addrs"][0]
        src = pattern(round_, n)
        assert sender.batch_register_memory([src.ctypes.data], [n]) == 0
        assert sender.batch_transfer_sync_write(recv.name, [src.ctypes.data], [dst], [n]) == 0
        assert recv.cmd("hash_addr", addr=dst, len=n)["hash"] == digest(src)
        assert sender.unregister_memory(src.ctypes.data) == 0
        assert recv.cmd("unregister", addrs=[dst])["rc"] == 0
        # gone on the receiver: a write there is refused
        src2 = pattern(50, 4 * KiB)
        assert sender.register_memory(src2.ctypes.data, src2.nbytes) == 0
        assert sender.transfer_sync_write(recv.name, src2.ctypes.data, dst, 4 * KiB) != 0
        assert sender.batch_unregister_memory([src2.ctypes.data]) == 0
    # the receiver's main buffer is still a valid target
    src = pattern(77, 64 * KiB)
    assert sender.register_memory(src.ctypes.data, src.nbytes) == 0
    assert sender.transfer_sync_write(recv.name, src.ctypes.data, recv.addr, src.nbytes) == 0
    assert recv.hash(0, src.nbytes) == digest(src)


# ---- B.3 SGLang disaggregation -------------------------------------------------------


def ipv6_loopback():
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_sglang_pd(host):
    """SGLang's MooncakeTransferEngine: one engine per process, KV and aux
    buffers registered one by one (a repeated registration fails without
    harm), aux data with transfer_sync_write, KV with batch writes from
    several thread pools sharded by destination, session ids host:port with
    IPv6 in brackets, device given as a resolved comma list."""
    if host == "::1" and not ipv6_loopback():
        pytest.skip("no IPv6 loopback")
    prefill = p2p_engine("rdma", "mlx5_0,mlx5_1", host=host)
    decodes = [p2p_engine("rdma", "", host=host) for _ in range(2)]
    sessions = [session(host, d.get_rpc_port()) for d in decodes]
    assert len(set(sessions + [session(host, prefill.get_rpc_port())])) == 3

    kv = pattern(1, 4 * MiB)
    aux = pattern(2, 64 * KiB)
    assert prefill.register_memory(kv.ctypes.data, kv.nbytes) == 0
    assert prefill.register_memory(aux.ctypes.data, aux.nbytes) == 0
    assert prefill.register_memory(kv.ctypes.data, kv.nbytes) != 0  # not relied upon
    dkv = [np.zeros(4 * MiB, np.uint8) for _ in decodes]
    daux = [np.zeros(64 * KiB, np.uint8) for _ in decodes]
    for d, a, b in zip(decodes, dkv, daux):
        assert d.batch_register_memory([a.ctypes.data, b.ctypes.data], [a.nbytes, b.nbytes]) == 0

    page = 32 * KiB

    def ship(i):
        s, dst = sessions[i % 2], dkv[i % 2]
        pages = range((i // 2) * 8, (i // 2) * 8 + 8)
        return prefill.batch_transfer_sync_write(
            s, [kv.ctypes.data + p * page for p in pages], [dst.ctypes.data + p * page for p in pages],
            [page] * 8)

    pools = [ThreadPoolExecutor(max_workers=3) for _ in decodes]  # a pool per shard
    futs = [pools[i % 2].submit(ship, i) for i in range(2 * (4 * MiB // page // 8))]
    assert [f.result() for f in futs] == [0] * len(futs)
    for p in pools:
        p.shutdown()
    for s, b in zip(sessions, daux):
        assert prefill.transfer_sync_write(s, aux.ctypes.data, b.ctypes.data, aux.nbytes) == 0
    for a, b in zip(dkv, daux):
        assert digest(a) == digest(kv) and digest(b) == digest(aux)
    assert prefill.send_probe(sessions[0]) == 0
    assert prefill.get_engine() is not None
    assert prefill.unregister_memory(aux.ctypes.data) == 0
    assert prefill.batch_unregister_memory([kv.ctypes.data]) == 0


def test_sglang_failed_session_probe(procs):
    """A session that died fails transfers and probes (SGLang blacklists it);
    a new peer at a new session works, so un-blacklisting by probe works."""
    te = p2p_engine()
    buf = pattern(3, MiB)
    assert te.register_memory(buf.ctypes.data, buf.nbytes) == 0
    p = procs.peer(size=MiB)
    assert te.transfer_sync_write(p.name, buf.ctypes.data, p.addr, 4096) == 0
    p.kill()
    assert te.send_probe(p.name) != 0
    assert te.transfer_sync_write(p.name, buf.ctypes.data, p.addr, 4096) != 0
    q = procs.peer(size=MiB)
    assert te.send_probe(q.name) == 0
    assert te.batch_transfer_sync_write(q.name, [buf.ctypes.data], [q.addr], [MiB]) == 0
    assert q.hash(0, MiB) == digest(buf)


# ---- B.7 checkpoint-engine -----------------------------------------------------------


def test_checkpoint_engine_pull(procs):
    """checkpoint-engine's P2P store: initialize retried on failure (port
    races), a dummy RDMA device name (PS_P2P_STORE_RDMA_DEVICES on a TCP
    box) that must be ignored, weight buckets registered with
    batch_register_memory on the owner, and batch_transfer_sync_read
    pulling them into local buffers; everything asserted == 0."""
    owner = procs.peer(size=MiB)
    nb, bucket = 4, 3 * MiB
    r = owner.cmd("regions", count=nb, len=bucket, seed=200)
    assert r["rc"] == 0
    remote = r["addrs"]

    te = None
    for attempt in range(8):
        te = TransferEngine()
        if te.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "dummy_rdma_dev") == 0:
            break
        time.sleep(random.uniform(0.05, 0.2))
    else:
        pytest.fail("initialize failed 8 times")
    local = [np.zeros(bucket, np.uint8) for _ in range(nb)]
    ptrs = [a.ctypes.data for a in local]
    assert te.batch_register_memory(ptrs, [bucket] * nb) == 0
    # pull in 1 MiB pieces, as the weights are laid out in the buckets
    piece = MiB
    lp, rp, ln = [], [], []
    for b in range(nb):
        for off in range(0, bucket, piece):
            lp.append(ptrs[b] + off)
            rp.append(remote[b] + off)
            ln.append(piece)
    assert te.batch_transfer_sync_read(owner.name, lp, rp, ln) == 0
    for b in range(nb):
        assert digest(local[b]) == digest(pattern(200 + b, bucket)), b
    assert te.batch_unregister_memory(ptrs) == 0
    assert owner.cmd("unregister", addrs=remote)["rc"] == 0


def test_many_engines_initialize_concurrently():
    """Ranks start at the same moment: every engine gets its own RPC port."""
    engines, rcs = [None] * 8, [None] * 8

    def init(i):
        engines[i] = TransferEngine()
        rcs[i] = engines[i].initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "")

    ts = [threading.Thread(target=init, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert rcs == [0] * 8
    ports = [e.get_rpc_port() for e in engines]
    assert len(set(ports)) == 8 and all(p > 0 for p in ports)
    # and they reach each other
    buf = pattern(4, 64 * KiB)
    dst = np.zeros(64 * KiB, np.uint8)
    assert engines[0].register_memory(buf.ctypes.data, buf.nbytes) == 0
    assert engines[7].register_memory(dst.ctypes.data, dst.nbytes) == 0
    assert engines[0].transfer_sync_write(f"127.0.0.1:{ports[7]}", buf.ctypes.data,
                                          dst.ctypes.data, buf.nbytes) == 0
    assert digest(dst) == digest(buf)
