"""mooncake.engine: SUPPORT_CUDA, the *_on_cuda calls where there is no GPU,
and SharedSegment (host memory one rank creates and the others map)."""

import ctypes
import os
import subprocess
import sys

import pytest

from mooncake import engine
from mooncake.engine import SharedSegment, TransferEngine


def test_on_cuda_calls_say_what_is_missing():
    te = TransferEngine()
    for name in ("transfer_write_on_cuda", "transfer_read_on_cuda",
                 "batch_transfer_write_on_cuda", "batch_transfer_read_on_cuda"):
        fn = getattr(te, name)
        args = ("peer", [0], [0], [16]) if name.startswith("batch") else ("peer", 0, 0, 16)
        with pytest.raises(RuntimeError) as e:
            fn(*args)
        msg = str(e.value)
        if not engine.SUPPORT_CUDA:
            assert "SUPPORT_CUDA is False" in msg
        else:  # a CUDA build; this machine's torch or device is what lacks
            assert "CUDA" in msg
        with pytest.raises(TypeError):
            fn(*args, stream_ptr="s")
        with pytest.raises(TypeError):  # the types are checked before CUDA is looked for
            fn("peer", 0, 0, 16) if name.startswith("batch") else fn("peer", "0", 0, 16)
    assert isinstance(engine.SUPPORT_CUDA, bool)
    assert engine.SUPPORT_EFA is False and engine.SUPPORT_HIP is False


def test_shared_segment_owner_and_peers_see_the_same_bytes():
    assert SharedSegment.supported()
    owner, blob = SharedSegment.create("t1", 1 << 20, 2, 0)
    peer, pblob = SharedSegment.create("t1", 1 << 20, 2, 1)
    assert blob and pblob == b"" and not owner.ready() and owner.base_addr() == 0
    owner.complete([blob, pblob])
    peer.complete([blob, pblob])
    assert owner.ready() and peer.ready() and peer.size() == 1 << 20
    a, b = owner.base_addr(), peer.base_addr()
    assert a and b and a != b and owner.device_addr() == 0
    ctypes.memmove(a + 100, b"hello", 5)
    assert ctypes.string_at(b + 100, 5) == b"hello"
    # another process maps the owner's blob and writes back
    code = ("import sys, ctypes; from mooncake.engine import SharedSegment\n"
            "s, _ = SharedSegment.create('t1', 1 << 20, 2, 1)\n"
            "s.complete([sys.argv[1].encode(), b''])\n"
            "assert ctypes.string_at(s.base_addr() + 100, 5) == b'hello'\n"
            "ctypes.memmove(s.base_addr() + 200, b'world', 5)\n")
    subprocess.run([sys.executable, "-c", code, blob.decode()], check=True, timeout=60,
                   env=os.environ)
    assert ctypes.string_at(a + 200, 5) == b"world"
    path = owner._path
    owner.close()
    assert not os.path.exists(path)  # the owner unlinks; the peer keeps its mapping
    assert ctypes.string_at(b + 200, 5) == b"world"
    peer.close()


def test_shared_segment_refuses_what_it_cannot_do():
    with pytest.raises(RuntimeError, match="mmap=False"):
        SharedSegment.create("t2", 4096, 1, 0, mmap=False)
    with pytest.raises(RuntimeError, match="host_register"):
        SharedSegment.create("t2", 4096, 1, 0, host_register=True)
    with pytest.raises(ValueError):
        SharedSegment.create("t2", 0, 1, 0)
    with pytest.raises(ValueError):
        SharedSegment.create("a/b", 4096, 1, 0)
    with pytest.raises(TypeError):
        SharedSegment.create("t2", "4096", 1, 0)
    for bad in ("no", object(), []):  # were truth values: mmap="no" mapped memory
        with pytest.raises(TypeError, match="must be a bool"):
            SharedSegment.create("t2", 4096, 1, 0, mmap=bad)
        with pytest.raises(TypeError, match="must be a bool"):
            SharedSegment.create("t2", 4096, 1, 0, host_register=bad)
    peer, _ = SharedSegment.create("t2", 4096, 2, 1)
    for bad in ([b"", b""], [b"{not json", b""], [b'{"v": 1, "name": "other", '
                                                   b'"path": "/dev/shm/mc-seg-x", "size": 4096}',
                                                   b""]):
        with pytest.raises(ValueError):
            peer.complete(bad)
    with pytest.raises(ValueError):
        peer.complete([b""])  # one blob for two ranks
    assert not peer.ready()


ENGINE_METHODS = """initialize initialize_ext get_rpc_port allocate_managed_buffer
free_managed_buffer transfer_sync_write transfer_sync_read transfer_sync
batch_transfer_sync_write batch_transfer_sync_read batch_transfer_sync
batch_transfer_async_write batch_transfer_async_read batch_transfer_async
get_batch_transfer_status transfer_submit_write transfer_check_status transfer_write_on_cuda
transfer_read_on_cuda batch_transfer_write_on_cuda batch_transfer_read_on_cuda
write_bytes_to_buffer read_bytes_from_buffer register_memory unregister_memory
batch_register_memory batch_unregister_memory get_local_topology get_first_buffer_address
warmup_efa_segment get_notifies send_probe get_engine get_engine_ptr""".split()
ENGINE_NAMES = """SUPPORT_CUDA SUPPORT_EFA SUPPORT_HIP SUPPORT_MNNVL SUPPORT_MUSA
SUPPORT_INTRA_NVLINK TransferOpcode Read Write TransferNotify InnerTransferEngine
SharedSegment RpcInterface CoroRPCInterface ReceivedData ReceivedTensor create_rpc_client
create_rpc_server""".split()


def test_every_spec_engine_method_is_there():
    """spec transfer-engine.md 2.3, with the RPC helper (RpcInterface, ...;
    test_rpc_interface.py)."""
    missing = [m for m in ENGINE_METHODS if not hasattr(TransferEngine, m)]
    assert not missing, f"TransferEngine lacks {missing}"
    missing = [n for n in ENGINE_NAMES if not hasattr(engine, n)]
    assert not missing, f"mooncake.engine lacks {missing}"
