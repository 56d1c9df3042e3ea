"""mooncake.engine in one process: the module surface, argument checking,
return values before and after initialize, registration and the managed
buffers."""

import json
import threading

import numpy as np
import pytest

import mooncake
import mooncake.engine as me
from mooncake.engine import TransferEngine, TransferNotify, TransferOpcode

from conftest import KiB, MiB, Local, free_port


def built_with_cuda():
    """Whether meson found the CUDA toolkit for this build (its introspection)."""
    import json
    import os
    intro = os.path.join(os.environ.get("MC_BUILD_DIR", "build"), "meson-info",
                         "intro-dependencies.json")
    if not os.path.exists(intro):
        pytest.skip("no meson introspection to compare SUPPORT_CUDA with")
    with open(intro) as f:
        return any(d["name"] == "cuda" for d in json.load(f))


def test_module_surface():
    assert me.SUPPORT_CUDA is built_with_cuda()  # the truth for the build
    for flag in ("SUPPORT_EFA", "SUPPORT_HIP", "SUPPORT_MNNVL", "SUPPORT_MUSA",
                 "SUPPORT_INTRA_NVLINK"):
        assert getattr(me, flag) is False
    assert TransferOpcode.Read == 0 and TransferOpcode.Write == 1
    assert int(me.Read) == 0 and int(me.Write) == 1
    assert me.Read is TransferOpcode.Read and me.Write is TransferOpcode.Write
    assert TransferEngine.TransferOpcode is TransferOpcode
    assert TransferOpcode.Read.name == "Read"
    assert TransferOpcode.__module__ == "mooncake.engine"
    assert isinstance(mooncake.__version__, str) and mooncake.__version__[0].isdigit()
    # the extensions carry the C library's release, the package the
    # distribution's (upstream's release + ours as the local label)
    assert me.__version__ == mooncake.__mooncake_c_version__
    assert mooncake.__version__.endswith("+mc." + me.__version__)


def test_transfer_notify():
    n = TransferNotify()
    assert (n.name, n.msg) == ("", "")
    n = TransferNotify("agent", msg="hello")
    assert (n.name, n.msg) == ("agent", "hello")
    n.name, n.msg = "a", "b"
    assert n == TransferNotify("a", "b") and n != TransferNotify("a", "c")
    assert "a" in repr(n)
    with pytest.raises(TypeError):
        n.name = 5
    with pytest.raises(TypeError):
        TransferNotify(1)
    with pytest.raises(TypeError):
        TransferNotify(nam="x")


def test_constructor_takes_no_arguments():
    with pytest.raises(TypeError):
        TransferEngine(1)


def test_subclassable():
    class Mine(TransferEngine):
        def extra(self):
            return self.get_rpc_port()

    m = Mine()
    m.note = "x"  # a subclass gets a __dict__
    assert m.extra() == -1
    assert m.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    assert m.extra() > 0


def test_uninitialized_engine_returns_failure_values():
    te = TransferEngine()
    assert te.get_rpc_port() == -1
    assert te.register_memory(0x1000, 4096) == -1
    assert te.unregister_memory(0x1000) == -1
    assert te.batch_register_memory([0x1000], [4096]) == -1
    assert te.transfer_sync_write("127.0.0.1:1", 0x1000, 0x2000, 8) == -1
    assert te.transfer_sync_read("127.0.0.1:1", 0x1000, 0x2000, 8) == -1
    assert te.transfer_sync("127.0.0.1:1", 0x1000, 0x2000, 8, TransferOpcode.Write) == -1
    assert te.batch_transfer_sync_write("127.0.0.1:1", [0x1000], [0x2000], [8]) == -1
    assert te.batch_transfer_async_write("127.0.0.1:1", [0x1000], [0x2000], [8]) == 0
    assert te.transfer_submit_write("127.0.0.1:1", 0x1000, 0x2000, 8) == 0
    assert te.transfer_check_status(1) == -1
    assert te.get_batch_transfer_status([]) == 0
    assert te.get_notifies() == []
    assert te.send_probe("127.0.0.1:1") == -1
    assert te.allocate_managed_buffer(4096) == 0
    assert te.get_first_buffer_address("127.0.0.1:1") == 0
    assert te.get_engine() is None
    assert te.get_engine_ptr() == 0
    assert te.warmup_efa_segment("x") == 0
    assert json.loads(te.get_local_topology()) == {}


def test_initialize_is_positional_only():
    te = TransferEngine()
    with pytest.raises(TypeError):
        te.initialize(local_hostname="127.0.0.1", metadata_server="P2PHANDSHAKE",
                      protocol="tcp", device_name="")
    with pytest.raises(TypeError):
        te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp")
    with pytest.raises(TypeError):
        te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "", "extra")
    with pytest.raises(TypeError):
        te.initialize(127, "P2PHANDSHAKE", "tcp", "")
    with pytest.raises(TypeError):
        te.initialize("127.0.0.1", None, "tcp", "")
    with pytest.raises(TypeError):
        te.initialize_ext("127.0.0.1", "P2PHANDSHAKE", "tcp", "")
    assert te.get_rpc_port() == -1  # nothing was created


@pytest.mark.parametrize("protocol", ["tcp", "rdma", "efa", ""])
def test_initialize_protocols(protocol):
    """Integrations hard-code "rdma"; it falls back to TCP, as do other names."""
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", protocol, "mlx5_0,mlx5_1") == 0
    port = te.get_rpc_port()
    assert 0 < port < 65536
    assert te.send_probe(f"127.0.0.1:{port}") == 0
    # one engine per object
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", protocol, "") == -1
    assert te.get_rpc_port() == port


def test_initialize_failures():
    assert TransferEngine().initialize("127.0.0.1", "P2PHANDSHAKE", "xgmi", "") == -1
    # nothing listens there: the metadata service is unreachable
    assert TransferEngine().initialize(
        "node", f"http://127.0.0.1:{free_port()}/metadata", "tcp", "") == -1
    te = TransferEngine()
    assert te.initialize_ext("127.0.0.1", "P2PHANDSHAKE", "tcp", "", "etcd") == 0
    assert te.get_rpc_port() > 0


def test_get_engine(local):
    inner = local.te.get_engine()
    assert type(inner).__name__ == "InnerTransferEngine"
    assert inner.address == local.te.get_engine_ptr() != 0
    with pytest.raises(TypeError):
        type(inner)()


def test_get_engine_keeps_the_engine_alive():
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    port = te.get_rpc_port()
    inner = te.get_engine()
    del te
    probe = TransferEngine()
    assert probe.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    assert probe.send_probe(f"127.0.0.1:{port}") == 0  # still serving
    del inner


def test_argument_type_errors(local):
    te, name, a = local.te, local.name, local.addr
    bad_calls = [
        lambda: te.register_memory("x", 1),
        lambda: te.register_memory(1.5, 10),
        lambda: te.register_memory(-1, 10),
        lambda: te.register_memory(1 << 64, 10),
        lambda: te.register_memory(a, 10, 5),
        lambda: te.register_memory(a),
        lambda: te.register_memory(a, 10, location="*", bogus=1),
        lambda: te.unregister_memory(None),
        lambda: te.batch_register_memory(a, [1]),
        lambda: te.batch_register_memory([a], ["1"]),
        lambda: te.batch_unregister_memory("abc"),
        lambda: te.transfer_sync_write(123, a, a, 8),
        lambda: te.transfer_sync_write(name, "a", a, 8),
        lambda: te.transfer_sync_write(name, a, a, 8.0),
        lambda: te.transfer_sync_write(name, a, a),
        lambda: te.transfer_sync_read(name, a, None, 8),
        lambda: te.transfer_sync(name, a, a, 8, "Write"),
        lambda: te.transfer_sync(name, a, a, 8, 1 << 64),  # not OverflowError
        lambda: te.transfer_sync(name, a, a, 8, TransferOpcode.Write, "notify"),
        lambda: te.batch_transfer_sync_write(name, "abc", [a], [1]),
        lambda: te.batch_transfer_sync_write(name, [a], [a], ["1"]),
        lambda: te.batch_transfer_sync_read(name, [a], None, [1]),
        lambda: te.batch_transfer_sync(name, [a], [a], [1], None),
        lambda: te.batch_transfer_async_write(name, [a, "b"], [a, a], [1, 1]),
        lambda: te.batch_transfer_async(name, [a], [a], [1], 1.0),
        lambda: te.get_batch_transfer_status(5),
        lambda: te.get_batch_transfer_status(["x"]),
        lambda: te.transfer_check_status("x"),
        lambda: te.transfer_submit_write(name, a, a, -8),
        lambda: te.send_probe(None),
        lambda: te.get_first_buffer_address(1),
        lambda: te.allocate_managed_buffer("4096"),
        lambda: te.free_managed_buffer(a),
        lambda: te.write_bytes_to_buffer(a, 1234, 4),
        lambda: te.read_bytes_from_buffer("x", 1),
        lambda: te.get_local_topology(5),
        lambda: te.get_rpc_port(1),
    ]
    for i, call in enumerate(bad_calls):
        with pytest.raises(TypeError):
            call()
            pytest.fail(f"bad call #{i} did not raise")
    with pytest.raises(ValueError):
        te.transfer_sync(name, a, a, 8, 7)
    with pytest.raises(ValueError):
        te.write_bytes_to_buffer(a, b"abc", 4)
    with pytest.raises(ValueError):
        te.send_probe("a\0b")


def test_keyword_arguments(local):
    """Methods other than initialize take upstream's argument names."""
    te = local.te
    local.buf[:16] = 7
    assert te.transfer_sync_read(target_hostname=local.name, buffer=local.addr + 1024,
                                 peer_buffer_address=local.addr, length=16, transport_hint="") == 0
    assert bytes(local.buf[1024:1040]) == b"\x07" * 16
    assert te.transfer_sync(local.name, local.addr + 2048, local.addr, 16, opcode=TransferOpcode.Read,
                            notify=None) == 0
    assert te.transfer_sync(local.name, local.addr + 2048, local.addr, 16, 0) == 0  # plain int


def test_registration_errors():
    loc = Local(size=4 * MiB)
    te, a = loc.te, loc.addr
    assert te.register_memory(a + 4096, 4096) == -7  # overlaps: upstream's ERR_ADDRESS_OVERLAPPED
    assert te.register_memory(a + loc.size, 0) < 0
    assert te.unregister_memory(a + 8) < 0
    assert te.batch_register_memory([a + loc.size], [4096, 4096]) == -1  # lengths differ
    assert te.batch_register_memory([], []) == 0
    assert te.batch_unregister_memory([]) == 0
    # batch forms over a second buffer in two pieces
    other = np.zeros(2 * MiB, np.uint8)
    b = other.ctypes.data
    assert te.batch_register_memory([b, b + MiB], [MiB, MiB], "cpu:0") == 0
    assert te.get_first_buffer_address(loc.name) == min(a, b)
    assert te.batch_unregister_memory([b, b + MiB]) == 0
    assert te.register_memory(b, 2 * MiB, location="*") == 0
    assert te.unregister_memory(b) == 0
    loc.close()


def test_local_segment_loopback(local):
    """The engine's own name is a valid target (local copy path)."""
    te, a = local.te, local.addr
    local.buf[:MiB] = np.random.default_rng(1).integers(0, 256, MiB, dtype=np.uint8)
    assert te.transfer_sync_write(local.name, a, a + 8 * MiB, MiB) == 0
    assert bytes(local.buf[8 * MiB:9 * MiB]) == bytes(local.buf[:MiB])
    assert te.get_first_buffer_address(local.name) == a


def test_raw_buffer_helpers(local):
    a = local.addr + 32 * MiB
    assert local.te.write_bytes_to_buffer(a, b"hello world", 11) == 0
    assert local.te.read_bytes_from_buffer(a, 11) == b"hello world"
    assert local.te.write_bytes_to_buffer(a, bytearray(b"xy"), 1) == 0
    assert local.te.read_bytes_from_buffer(a, 2) == b"xe"
    assert local.te.write_bytes_to_buffer(a, "héllo", 6) == 0  # a str goes as UTF-8
    assert local.te.read_bytes_from_buffer(a, 6) == "héllo".encode()
    big = bytes(range(256)) * 1024
    assert local.te.write_bytes_to_buffer(a, memoryview(big), len(big)) == 0
    assert local.te.read_bytes_from_buffer(a, len(big)) == big
    assert local.te.read_bytes_from_buffer(a, 0) == b""


def test_managed_buffers():
    loc = Local(register=False)
    te = loc.te
    assert te.get_first_buffer_address(loc.name) == 0  # nothing registered yet
    a = te.allocate_managed_buffer(1000)
    assert a and a % (8 * KiB) == 0
    # the first pool is registered: its base is the segment's first buffer
    assert te.get_first_buffer_address(loc.name) == a
    assert te.write_bytes_to_buffer(a, b"managed", 7) == 0
    assert te.read_bytes_from_buffer(a, 7) == b"managed"
    b = te.allocate_managed_buffer(8 * KiB)
    c = te.allocate_managed_buffer(8 * KiB + 1)  # next class: 16 KiB
    assert len({a, b, c}) == 3 and c % (16 * KiB) == 0
    assert te.free_managed_buffer(a, 1000) == 0
    assert te.allocate_managed_buffer(4096) == a  # the freed block comes back
    assert te.free_managed_buffer(a, 4096) == 0
    assert te.free_managed_buffer(b, 8 * KiB) == 0
    assert te.free_managed_buffer(c, 9000) == 0
    assert te.free_managed_buffer(loc.addr, 4096) == -1  # not a managed block
    # the largest class and a dedicated allocation above it
    d = te.allocate_managed_buffer(256 * MiB)
    e = te.allocate_managed_buffer(300 * MiB)
    assert d and e and d != e
    assert te.write_bytes_to_buffer(e + 300 * MiB - 4, b"tail", 4) == 0
    # registered: a transfer into it through the engine works
    assert te.transfer_sync_write(loc.name, e + 300 * MiB - 4, d, 4) == 0
    assert te.read_bytes_from_buffer(d, 4) == b"tail"
    assert te.free_managed_buffer(e, 300 * MiB) == 0
    assert te.free_managed_buffer(d, 256 * MiB) == 0
    # a freed dedicated mapping is no longer registered
    assert te.transfer_sync_write(loc.name, d, e, 4) == -1
    loc.close()


def test_managed_buffers_from_threads():
    loc = Local(register=False)
    te = loc.te
    errors = []

    def work(k):
        try:
            for i in range(200):
                n = (8 << (i % 6)) * KiB
                a = te.allocate_managed_buffer(n)
                assert a
                te.write_bytes_to_buffer(a, bytes([k]) * 64, 64)
                assert te.read_bytes_from_buffer(a, 64) == bytes([k]) * 64
                assert te.free_managed_buffer(a, n) == 0
        except Exception as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    loc.close()

