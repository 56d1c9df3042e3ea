"""mooncake.engine's RPC helper (RpcInterface, CoroRPCInterface,
ReceivedData, ReceivedTensor, create_rpc_client, create_rpc_server;
python/mooncake/_rpc_interface.py) against a server in another process
(tests/python/rpc_peer.py) over loopback: data and tensors, the async
forms, the cluster-secret handshake, and what the server and the decoder do
with frames that are bad, cut short or stalled.
"""

import asyncio
import hashlib
import inspect
import json
import os
import queue
import random
import socket
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from conftest import HERE, MiB, poll_until

import mooncake.engine as eng
from mooncake import _rpc_interface as rpc

torch = pytest.importorskip("torch")


def blake(b):
    return hashlib.blake2b(memoryview(b).cast("B"), digest_size=16).hexdigest()


class RpcPeer:
    """rpc_peer.py in its own process; .addr is "127.0.0.1:port"."""

    def __init__(self, tmp_path, timeout=30, env=None):
        self.err = open(tmp_path / f"rpc_peer_{id(self)}.stderr", "w+")
        self.p = subprocess.Popen([sys.executable, str(HERE / "rpc_peer.py"), "--timeout",
                                   str(timeout)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.err, text=True, bufsize=1,
                                  env={**os.environ, **(env or {})})
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.addr = "127.0.0.1:%d" % self.next(30)["port"]

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    def next(self, timeout=30):
        try:
            m = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"rpc_peer: nothing within {timeout}s; {self.stderr()}") from None
        assert m is not None, f"rpc_peer exited: {self.stderr()}"
        return m

    def stderr(self):
        self.err.flush()
        self.err.seek(0)
        return self.err.read()[-3000:]

    def close(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
                raise AssertionError("rpc_peer did not stop on EOF")
        self.err.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    p = RpcPeer(tmp_path_factory.mktemp("rpc"), timeout=2)
    yield p
    p.close()
    assert p.p.returncode == 0


@pytest.fixture
def client():
    c = eng.create_rpc_client()
    yield c
    c.close()


# ---- the surface --------------------------------------------------------------------


def test_names_and_signatures():
    assert eng.CoroRPCInterface is eng.RpcInterface
    for n in ("RpcInterface", "CoroRPCInterface", "ReceivedData", "ReceivedTensor",
              "create_rpc_client", "create_rpc_server"):
        assert getattr(eng, n) is getattr(rpc, n), n
    sig = {n: str(inspect.signature(getattr(eng.RpcInterface, n))) for n in (
        "initialize", "initialize_client", "initialize_server", "send_data", "send_data_async",
        "send_tensor", "send_tensor_async")}
    assert sig["initialize"] == ("(self, listen_address='', thread_count=0, timeout_seconds=30, "
                                 "pool_size=10)")
    assert sig["initialize_client"] == "(self, pool_size=10, timeout_seconds=30)"
    assert sig["initialize_server"] == ("(self, listen_address, thread_count=8, "
                                        "timeout_seconds=30)")
    assert sig["send_data_async"] == "(self, target_address, data, loop)"
    assert sig["send_tensor"] == "(self, target_address, tensor)"
    for n in ("start_server", "start_server_async", "stop_server", "set_data_receive_callback",
              "set_tensor_receive_callback", "add_remote_connection", "remove_remote_connection",
              "is_connected"):
        assert callable(getattr(eng.RpcInterface, n)), n
    assert str(inspect.signature(eng.create_rpc_client)) == "(local_rank=0, world_size=1)"
    assert str(inspect.signature(eng.create_rpc_server)) == "(local_rank=0, world_size=1)"
    for n in ("source_address", "data_size", "get_bytes", "get_memory_view"):
        assert hasattr(eng.ReceivedData(), n)
    for n in ("source_address", "shape", "dtype", "total_bytes", "get_data_size",
              "get_data_as_bytes", "get_memory_view"):
        assert hasattr(eng.ReceivedTensor(), n)
    s = eng.create_rpc_server()
    assert s._listen == ("0.0.0.0", 8080) and s.get_server_port() == 0  # listens on start only


def test_argument_errors(client):
    for call in (lambda: client.send_data("127.0.0.1:1", "text"),
                 lambda: client.send_data("127.0.0.1:1", 5),
                 lambda: client.send_data(1234, b"x"),
                 lambda: client.send_tensor("127.0.0.1:1", b"not a tensor"),
                 lambda: client.send_tensor("127.0.0.1:1", np.zeros(3)),
                 lambda: client.set_data_receive_callback(5),
                 lambda: client.initialize(5),
                 lambda: client.initialize("", -1),
                 lambda: eng.create_rpc_client("0")):
        with pytest.raises(TypeError):
            call()
    for bad in ("nohost", "h:port", "h:70000", ""):
        with pytest.raises(ValueError, match="host:port"):
            client.send_data(bad, b"x")
    assert client.initialize("no-port") is False
    r = eng.RpcInterface()
    assert r.start_server() is False and r.start_server_async() is False  # no address


# ---- data and tensors to another process ------------------------------------------


def test_send_data_to_a_server_process(server, client):
    msgs = [b"hello", b"", bytearray(range(256)) * 3, memoryview(b"abcdef")[1:4],
            np.arange(1000, dtype=np.float32), np.arange(64, dtype=np.int16)[::2],
            np.random.default_rng(1).integers(0, 256, 3 * MiB + 7, dtype=np.uint8)]
    for m in msgs:
        assert client.send_data(server.addr, m) == 0
        got = server.next()
        want = np.ascontiguousarray(m) if isinstance(m, np.ndarray) else m
        assert got["kind"] == "data" and got["size"] == memoryview(want).nbytes
        assert got["digest"] == blake(want)
        assert got["src"].startswith("127.0.0.1:")
    assert client.is_connected(server.addr)  # the connection is kept for the next send
    srcs = set()
    for _ in range(3):
        assert client.send_data(server.addr, b"x") == 0
        srcs.add(server.next()["src"])
    assert len(srcs) == 1  # ... and reused
    client.remove_remote_connection(server.addr)
    assert not client.is_connected(server.addr)
    assert client.add_remote_connection(server.addr) and client.is_connected(server.addr)


def test_send_tensor_to_a_server_process(server, client):
    ts = [torch.arange(6, dtype=torch.float32).reshape(2, 3),
          torch.arange(12, dtype=torch.int64).reshape(3, 4).t(),  # not contiguous
          torch.ones(5, dtype=torch.bfloat16), torch.tensor([True, False]),
          torch.zeros(0, 4), torch.tensor(3.5, dtype=torch.float64),
          torch.randn(1 << 18)]
    for t in ts:
        assert client.send_tensor(server.addr, t) == 0
        got = server.next()
        c = t.contiguous()
        assert got["kind"] == "tensor" and got["shape"] == list(t.shape)
        assert got["dtype"] == str(t.dtype)
        assert got["total_bytes"] == c.numel() * c.element_size()
        if c.numel():
            raw = bytes(c.reshape(-1).view(torch.uint8).numpy())
            assert got["digest"] == blake(raw)


def test_async_forms(server, client):
    async def main():
        loop = asyncio.get_running_loop()
        futs = [client.send_data_async(server.addr, b"a%d" % i, loop) for i in range(8)]
        futs.append(client.send_tensor_async(server.addr, torch.ones(3, 3), loop))
        rcs = await asyncio.gather(*futs)
        with pytest.raises(RuntimeError, match="failed"):
            await client.send_data_async("127.0.0.1:1", b"x", loop)
        return rcs

    assert asyncio.run(main()) == [0] * 9
    got = [server.next() for _ in range(9)]
    assert sorted(g["kind"] for g in got) == ["data"] * 8 + ["tensor"]
    with pytest.raises(TypeError, match="event loop"):
        client.send_data_async(server.addr, b"x", None)


def test_unreachable_target_is_minus_one_at_once(client, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = "127.0.0.1:%d" % s.getsockname()[1]
    t0 = time.monotonic()
    assert client.send_data(dead, b"x") == -1
    assert client.send_tensor(dead, torch.ones(2)) == -1
    assert not client.add_remote_connection(dead)
    assert time.monotonic() - t0 < 5


def test_server_restart_is_seen_by_a_pooled_connection(tmp_path, client):
    """A pooled connection whose server went away is not written to: the
    next send opens a new one (a message goes out once)."""
    p = RpcPeer(tmp_path)
    try:
        assert client.send_data(p.addr, b"1") == 0 and p.next()["kind"] == "data"
    finally:
        p.close()
    assert client.is_connected(p.addr)
    assert client.send_data(p.addr, b"2") == -1  # nobody listens any more


# ---- in this process: callbacks, blocking start, stop ------------------------------


def test_in_process_server_callbacks_and_blocking_start(client):
    got = queue.Queue()
    s = eng.RpcInterface()
    assert s.initialize_server("127.0.0.1:0", 2, 5)
    s.set_data_receive_callback(got.put)
    s.set_tensor_receive_callback(got.put)
    ret = []
    t = threading.Thread(target=lambda: ret.append(s.start_server()))
    t.start()
    port = poll_until(s.get_server_port, 10, "the server to listen")
    addr = f"127.0.0.1:{port}"
    assert client.send_data(addr, b"payload") == 0
    d = got.get(timeout=10)
    assert isinstance(d, eng.ReceivedData) and d.get_bytes() == b"payload" and d.data_size == 7
    assert bytes(d.get_memory_view()) == b"payload" and d.get_memory_view().readonly
    x = torch.arange(10, dtype=torch.int32).reshape(2, 5)
    assert client.send_tensor(addr, x) == 0
    r = got.get(timeout=10)
    assert isinstance(r, eng.ReceivedTensor)
    assert r.shape == [2, 5] and r.dtype == "torch.int32" and r.total_bytes == 40
    assert torch.equal(r.rebuild_tensor(), x)
    big = torch.randn(3, 100_000)  # over 1 MiB: received into anonymous memory
    assert client.send_tensor(addr, big) == 0
    r = got.get(timeout=10)
    assert torch.equal(r.rebuild_tensor(), big) and r.get_data_as_bytes() == big.numpy().tobytes()
    # a callback that raises still answers the sender (logged), as upstream
    s.set_data_receive_callback(lambda m: 1 / 0)
    assert client.send_data(addr, b"boom") == 0
    assert s.start_server_async() is False  # already serving
    s.stop_server()
    t.join(10)
    assert not t.is_alive() and ret == [True] and s.get_server_port() == 0
    assert client.send_data(addr, b"after") == -1
    s.close()


def test_cuda_tensors(client, server, monkeypatch):
    """Without a CUDA build a CUDA tensor is refused (its address is no host
    memory); with one it is staged through the host.  A tensor on another
    device is refused either way."""
    class FakeDev:
        type = "cuda"

    class FakeCuda:  # a CUDA tensor as far as the duck typing sees
        device, shape, dtype = FakeDev(), (4,), torch.float32

        def data_ptr(self):
            return 0x1000  # never read

        def numel(self):
            return 4

        def element_size(self):
            return 4

        def detach(self):
            return self

        def to(self, where):
            assert where == "cpu"
            return torch.arange(4, dtype=torch.float32)

    monkeypatch.setattr(rpc, "_support_cuda", lambda: False)
    for call in (lambda: client.send_tensor(server.addr, FakeCuda()),
                 lambda: client.send_tensor_async(server.addr, FakeCuda(), None)):
        with pytest.raises(RuntimeError, match="CUDA tensor needs a build with CUDA"):
            call()
    with pytest.raises(RuntimeError, match="a meta tensor cannot be sent"):
        client.send_tensor(server.addr, torch.empty(2, device="meta"))
    monkeypatch.setattr(rpc, "_support_cuda", lambda: True)
    assert client.send_tensor(server.addr, FakeCuda()) == 0
    got = server.next()
    assert got["shape"] == [4] and got["digest"] == blake(np.arange(4, dtype=np.float32))


# ---- the cluster secret -------------------------------------------------------------


def test_cluster_secret_handshake(tmp_path, monkeypatch, caplog):
    p = RpcPeer(tmp_path, env={"MC_AUTH_SECRET": "s3cret"})
    try:
        for env, want in ((None, -1), ("other", -1), ("s3cret", 0)):
            if env is None:
                monkeypatch.delenv("MC_AUTH_SECRET", raising=False)
            else:
                monkeypatch.setenv("MC_AUTH_SECRET", env)
            monkeypatch.delenv("MC_AUTH_SECRET_FILE", raising=False)
            c = eng.create_rpc_client()
            assert c.send_data(p.addr, b"x") == want, env
            c.close()
        assert p.next()["size"] == 1  # only the one with the secret got through
        assert "the server does not hold this cluster secret" in caplog.text
        # the server logs each refusal (the client without a secret, then the
        # one with another, which hung up on the server's proof)
        poll_until(lambda: "expected a HELLO frame" in p.stderr() and
                   "closed the connection before its PROOF" in p.stderr(), 10,
                   "the server's two refusals in its log")
        monkeypatch.setenv("MC_AUTH_SECRET_FILE", str(tmp_path / "missing"))
        assert eng.create_rpc_client()._secret is None  # a bad secret file: not initialized
        assert not eng.RpcInterface().initialize("")
    finally:
        p.close()


# ---- bad frames ---------------------------------------------------------------------


def raw(server):
    host, port = rpc.parse_address(server.addr)
    return socket.create_connection((host, port), timeout=10)


def closed_by_server(s, within=10):
    s.settimeout(within)
    try:
        return s.recv(100) == b""
    except ConnectionResetError:
        return True


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_server_closes_on_bad_frames_and_keeps_serving(server, client):
    hdr, tmeta = rpc.encode_header, rpc.encode_tensor_meta
    bad = [b"GET / HTTP/1.1\r\n\r\nxxxxxxxxxxxx",  # not our magic
           struct.pack("<4sBBHIQ", b"MCRP", 2, 1, 0, 0, 0),  # version
           hdr(9, 0, 0),  # kind
           hdr(rpc.KIND_REPLY, 4, 0) + b"\0" * 4,  # a reply sent to a server
           struct.pack("<4sBBHIQ", b"MCRP", 1, 1, 1, 0, 0),  # flags
           hdr(rpc.KIND_DATA, 5, 0),  # data with meta
           hdr(rpc.KIND_DATA, 0, 1 << 62),  # over the size limit
           hdr(rpc.KIND_TENSOR, 1 << 20, 0),  # meta too long
           hdr(rpc.KIND_TENSOR, 20, 16) + tmeta("torch.float32", [4])[:20],  # meta cut
           hdr(rpc.KIND_TENSOR, 14, 16) + tmeta("torch.float32", [4])[:14],
           hdr(rpc.KIND_TENSOR, 21, 8) + tmeta("torch.int32", [3]),  # payload != shape
           hdr(rpc.KIND_TENSOR, 21, 0) + tmeta("torch.thing", [0]),
           b"MCAU\x01\x01\x20\x00" + b"\0" * 32]  # a HELLO to a server without a secret
    for frame in bad:
        s = raw(server)
        s.sendall(frame)
        assert closed_by_server(s), frame
        s.close()
    # cut short: the peer closes inside the frame
    for cut in (3, rpc.HDR.size, rpc.HDR.size + 10):
        s = raw(server)
        s.sendall((hdr(rpc.KIND_DATA, 0, 100) + b"z" * 100)[:cut])
        s.shutdown(socket.SHUT_WR)
        assert closed_by_server(s)
        s.close()
    # stalled inside a frame that announced 8 GiB: the server commits no
    # memory for what never came, and closes after its timeout (2 s here)
    s = raw(server)
    s.sendall(hdr(rpc.KIND_DATA, 0, 8 << 30) + b"z" * 10)
    t0 = time.monotonic()
    s.settimeout(0.5)
    with pytest.raises(socket.timeout):
        s.recv(1)  # the server waits for the rest
    assert rss_kib(server.p.pid) < 512 * 1024
    assert closed_by_server(s, within=15)
    assert 1.5 < time.monotonic() - t0 < 12
    s.close()
    err = server.stderr()
    for why in ("bad magic", "unsupported version", "unexpected frame kind", "unknown flags",
                "meta length", "over the limit", "does not hold", "meta is truncated",
                "needs 12 bytes", "unknown tensor dtype",
                "an authentication frame", "closed inside a frame", "no complete frame within 2 s"):
        assert why in err, why
    assert client.send_data(server.addr, b"still serving") == 0
    assert server.next()["size"] == 13


def stream(data):
    """recv_into over bytes, a few bytes at a time (as a socket may)."""
    pos = [0]
    rnd = random.Random(len(data))

    def recv_into(view):
        n = min(len(view), len(data) - pos[0], rnd.randint(1, 7))
        view[:n] = data[pos[0]:pos[0] + n]
        pos[0] += n
        return n
    return recv_into


def test_decoder_on_good_bad_and_truncated_frames():
    kinds = (rpc.KIND_DATA, rpc.KIND_TENSOR)
    meta = rpc.encode_tensor_meta("torch.int16", [2, 3])
    good = [rpc.encode_header(rpc.KIND_DATA, 0, 5) + b"hello",
            rpc.encode_header(rpc.KIND_DATA, 0, 0),
            rpc.encode_header(rpc.KIND_TENSOR, len(meta), 12) + meta + bytes(range(12))]
    assert rpc.read_frame(stream(good[0]), kinds) == (rpc.KIND_DATA, b"", bytearray(b"hello"))
    assert rpc.read_frame(stream(good[2]), kinds)[2] == bytes(range(12))
    assert rpc.decode_tensor_meta(meta, 12) == ("torch.int16", [2, 3])
    assert rpc.read_frame(stream(b""), kinds) is None  # a clean end between frames
    for g in good:
        for cut in range(1, len(g)):
            with pytest.raises(rpc.RpcProtocolError, match="closed inside a frame"):
                rpc.read_frame(stream(g[:cut]), kinds)
    with pytest.raises(rpc.RpcProtocolError, match="over the limit"):
        rpc.read_frame(stream(rpc.encode_header(rpc.KIND_DATA, 0, 1001)), kinds, 1000)
    # mutations: a frame of this protocol or RpcProtocolError, nothing else
    rnd = random.Random(18)
    outcomes = {"ok": 0, "refused": 0}
    for i in range(3000):
        b = bytearray(rnd.choice(good))
        for _ in range(rnd.randint(1, 4)):
            op = rnd.randrange(3)
            if op == 0 and b:
                b[rnd.randrange(len(b))] = rnd.randrange(256)
            elif op == 1 and b:
                del b[rnd.randrange(len(b)):]
            else:
                b[rnd.randrange(len(b) + 1):0] = bytes(rnd.randrange(256) for _ in range(3))
        try:
            fr = rpc.read_frame(stream(bytes(b)), kinds, 1 << 20)
        except rpc.RpcProtocolError:
            outcomes["refused"] += 1
            continue
        outcomes["ok"] += 1
        if fr is not None and fr[0] == rpc.KIND_TENSOR:
            dtype, shape = rpc.decode_tensor_meta(fr[1], len(fr[2]))
            assert dtype in rpc.DTYPES
    assert outcomes["refused"] > 1000 and outcomes["ok"] > 0
