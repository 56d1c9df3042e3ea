"""mooncake.store: the unified parallelism tensor calls, safetensors, init_all,
the CUDA-only calls on a CPU torch, bind_to_numa_node, the allocator
addresses, and the method table of spec store.md 9.3 (issue 18 part 1).

Shards written with one layout are read back with another; a missing
shard reads as None, never as a partial tensor.
"""

import ctypes
import json
import os
import struct
import uuid
import warnings

import numpy as np
import pytest

import mooncake.store as ms
from mooncake.store import (MooncakeDistributedStore, ParallelAxis, ReadTarget,
                            TensorParallelism)

torch = pytest.importorskip("torch")

MiB = 1 << 20
INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704

# Every method of spec store.md 9.3.  PENDING: not in the class yet, each named in
# docs/python.md with the issue that brings it.
SPEC_METHODS = """
setup setup_dummy init_all close health_check get_hostname alloc_from_mem_pool
mount_segment unmount_segment allocate_and_mount_segment unmount_and_free_segment
unmount_local_disk_segment put put_parts put_batch upsert upsert_parts upsert_batch get
get_batch get_buffer batch_get_buffer get_size is_exist batch_is_exist remove
remove_by_regex remove_all batch_remove register_buffer unregister_buffer put_from
put_from_with_metadata batch_put_from upsert_from batch_upsert_from get_into batch_get_into
get_into_ranges batch_put_from_multi_buffers batch_get_into_multi_buffers
batch_get_session_start batch_get_into_multi_buffer_ranges batch_get_session_end
batch_put_session_start batch_put_from_multi_buffer_ranges batch_put_session_end
batch_put_session_revoke get_replica_desc batch_get_replica_desc batch_replica_clear
create_copy_task create_move_task query_task get_offload_rpc_read_count put_tensor
upsert_tensor pub_tensor upsert_pub_tensor batch_put_tensor batch_upsert_tensor
batch_pub_tensor batch_upsert_pub_tensor get_tensor batch_get_tensor get_tensor_into
batch_get_tensor_into get_tensor_into_cuda batch_get_tensor_into_cuda put_tensor_from
upsert_tensor_from batch_put_tensor_from batch_upsert_tensor_from put_tensor_with_tp
pub_tensor_with_tp batch_put_tensor_with_tp batch_pub_tensor_with_tp get_tensor_with_tp
batch_get_tensor_with_tp get_tensor_with_tp_into batch_get_tensor_with_tp_into
put_tensor_with_tp_from batch_put_tensor_with_tp_from put_tensor_with_parallelism
upsert_tensor_with_parallelism batch_put_tensor_with_parallelism
batch_upsert_tensor_with_parallelism put_tensor_with_parallelism_from
upsert_tensor_with_parallelism_from batch_put_tensor_with_parallelism_from
batch_upsert_tensor_with_parallelism_from get_tensor_with_parallelism
batch_get_tensor_with_parallelism get_tensor_with_parallelism_into
batch_get_tensor_with_parallelism_into save_tensor_to_safetensor load_tensor_from_safetensor
""".split()
PENDING = set()
SPEC_MODULE_NAMES = """ReplicateConfig SoftPinAction ObjectDataType ReplicaStatus
ReplicaDescriptor MemoryDescriptor DiskDescriptor Descriptor TaskType TaskStatus
QueryTaskResponse BufferHandle BufferPool BufferLease BufferLeaseView MooncakeHostMemAllocator
ParallelAxis TensorParallelism ReadTarget MooncakeDistributedNoFRegister bind_to_numa_node
get_alloc_func_addr get_free_func_addr""".split() + [
    # the enums' values exported at module level (TaskStatus's PROCESSING and
    # FAILED are ReplicaStatus's, as both enums spell them)
    "UNKNOWN", "KVCACHE", "TENSOR", "WEIGHT", "SAMPLE", "ACTIVATION", "GRADIENT",
    "OPTIMIZER_STATE", "METADATA", "GENERAL", "UNDEFINED", "INITIALIZED", "PROCESSING",
    "COMPLETE", "REMOVED", "FAILED", "REPLICA_COPY", "REPLICA_MOVE", "PENDING", "SUCCESS"]
# 9.4's members of each class
SPEC_MEMBERS = {
    "ReplicateConfig": "replica_num nof_replica_num dfs_replica_num soft_pin_action "
                       "soft_pin_ttl_ms with_hard_pin preferred_segments preferred_nof_segments "
                       "preferred_segment prefer_alloc_in_same_node data_type group_ids",
    "ReplicaDescriptor": "status is_memory_replica is_disk_replica is_local_disk_replica "
                         "get_memory_descriptor get_disk_descriptor",
    "MemoryDescriptor": "buffer_descriptor",
    "DiskDescriptor": "file_path object_size",
    "Descriptor": "size buffer_address transport_endpoint",
    "QueryTaskResponse": "id type status created_at_ms_epoch last_updated_at_ms_epoch "
                         "assigned_client message",
    "BufferHandle": "ptr size len",
    "BufferPool": "acquire buffer prewarm close",
    "BufferLease": "ptr size buffer release __enter__ __exit__",
    "MooncakeHostMemAllocator": "alloc free",
    "ParallelAxis": "kind rank size split_dim expert_id stage_id",
    "TensorParallelism": "axes",
    "ReadTarget": "mode parallelism",
    "MooncakeDistributedNoFRegister": "real_register real_unregister_by_endpoint",
}


def test_every_spec_method_is_there_or_pending():
    have = set(dir(MooncakeDistributedStore))
    missing = sorted(m for m in SPEC_METHODS if m not in have and m not in PENDING)
    assert not missing, f"spec store.md 9.3 methods missing from the class: {missing}"
    landed = sorted(m for m in PENDING if m in have)
    assert not landed, f"now in the class, drop from PENDING and docs/python.md: {landed}"
    gone = sorted(n for n in SPEC_MODULE_NAMES if not hasattr(ms, n))
    assert not gone, f"spec store.md 9.4 names missing from mooncake.store: {gone}"
    assert ms.PENDING is ms.TaskStatus.PENDING and ms.SUCCESS is ms.TaskStatus.SUCCESS
    assert ms.PROCESSING is ms.ReplicaStatus.PROCESSING


def test_every_spec_class_member_is_there():
    """The members 9.4 lists per class: on the class, or (the attributes
    set per instance) on an instance."""
    probe = {"ParallelAxis": lambda c: c("tp", 0, 1),
             "TensorParallelism": lambda c: c([]),
             "ReadTarget": lambda c: c("full"),
             "ReplicateConfig": lambda c: c(),
             "QueryTaskResponse": lambda c: c(**{n: 0 for n in c.__slots__}),
             "DiskDescriptor": lambda c: c(file_path="", object_size=0)}
    missing = []
    for cls, members in SPEC_MEMBERS.items():
        c = getattr(ms, cls)
        obj = probe[cls](c) if cls in probe else None
        missing += [f"{cls}.{m}" for m in members.split()
                    if not hasattr(c, m) and not (obj is not None and hasattr(obj, m))]
    assert not missing, f"spec store.md 9.4 members missing: {missing}"
    r = ms.QueryTaskResponse(**{n: 1 for n in ms.QueryTaskResponse.__slots__})
    with pytest.raises(AttributeError, match="read-only"):
        r.status = 2  # read-only, as upstream's


@pytest.fixture(scope="module")
def store(mc_master):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", mc_master.meta_uri, 64 * MiB, 32 * MiB, "tcp", "",
                   mc_master.addr, tenant_id="parallel") == 0
    yield s
    assert s.close() == 0


@pytest.fixture
def k(request):
    return f"{request.node.name}-{uuid.uuid4().hex[:8]}"


def full_tensor(shape=(10, 6), dtype=torch.float32):
    return torch.arange(int(np.prod(shape)), dtype=torch.float64).reshape(shape).to(dtype)


def tp(rank, size, dim, kind="tp"):
    return TensorParallelism([ParallelAxis(kind, rank, size, dim)])


def test_classes_check_their_arguments():
    with pytest.raises(ValueError, match="mode"):
        ReadTarget("sideways")
    with pytest.raises(ValueError, match="needs a parallelism"):
        ReadTarget("shard")
    with pytest.raises(ValueError, match="kind"):
        ParallelAxis("xp", 0, 1)
    with pytest.raises(ValueError, match="rank"):
        ParallelAxis("tp", 2, 2)
    with pytest.raises(ValueError, match="at most one axis"):
        TensorParallelism([ParallelAxis("tp", 0, 2, 0), ParallelAxis("dp", 0, 2, 1)])
    with pytest.raises(TypeError):
        ReadTarget("full", parallelism="tp")


def test_nof_register_refuses_with_the_cause(caplog):
    from mooncake.store import MooncakeDistributedNoFRegister
    r = MooncakeDistributedNoFRegister()
    with caplog.at_level("ERROR", logger="mooncake.store"):
        assert r.real_register("nqn.2024-01.io.example:ssd", 1, "10.0.0.1") == -600
        assert r.real_unregister_by_endpoint("10.0.0.1", 4420) == -600
    assert sum("no NoF tier" in m for m in caplog.messages) == 2


def test_writer_partitions_read_back_whole_and_in_other_layouts(store, k):
    t = full_tensor((10, 6))  # torch.chunk into 3 along dim 0: rows 4, 4, 2
    for r in range(3):
        assert store.put_tensor_with_parallelism(k, t, writer_partition=(r, 3, 0)) == 0
    assert store.is_exist(f"{k}__writer_1of3_sd0") == 1
    assert store.is_exist(f"{k}__writer_manifest") == 1
    assert torch.equal(store.get_tensor_with_parallelism(k), t)
    assert torch.equal(store.get_tensor_with_parallelism(k, ReadTarget("full")), t)
    # a reader with 2 ranks on dim 0 gets torch.chunk(t, 2, 0)[r]; on dim 1 too
    for r in range(2):
        got = store.get_tensor_with_parallelism(k, ReadTarget("shard", tp(r, 2, 0)))
        assert torch.equal(got, torch.chunk(t, 2, 0)[r])
        got = store.get_tensor_with_parallelism(k, ReadTarget("shard", tp(r, 2, 1)))
        assert torch.equal(got, torch.chunk(t, 2, 1)[r])


def test_local_shards_reassemble_and_reshard(store, k):
    t = full_tensor((4, 8), torch.bfloat16)
    shards = torch.chunk(t, 4, 1)
    for r in range(4):  # each TP rank puts the shard it holds
        assert store.put_tensor_with_parallelism(k, shards[r], tp(r, 4, 1)) == 0
    assert store.is_exist(f"{k}__tp_2of4_sd1") == 1
    assert torch.equal(store.get_tensor_with_parallelism(k, ReadTarget("full")), t)
    # the same layout reads its own shard; as_stored with a parallelism names a shard
    assert torch.equal(store.get_tensor_with_parallelism(k, ReadTarget("shard", tp(3, 4, 1))),
                       shards[3])
    assert torch.equal(
        store.get_tensor_with_parallelism(k, ReadTarget("as_stored", tp(1, 4, 1))), shards[1])
    # 2 readers: each gets two stored shards joined
    for r in range(2):
        got = store.get_tensor_with_parallelism(k, ReadTarget("shard", tp(r, 2, 1)))
        assert torch.equal(got, torch.chunk(t, 2, 1)[r])


def test_replicated_axis_is_found_on_any_rank(store, k):
    t = full_tensor((6, 2))
    par = TensorParallelism([ParallelAxis("dp", 1, 2), ParallelAxis("tp", 0, 2, 0)])
    par1 = TensorParallelism([ParallelAxis("dp", 0, 2), ParallelAxis("tp", 1, 2, 0)])
    assert store.put_tensor_with_parallelism(k, t[:3], par) == 0  # dp rank 1 wrote tp 0
    assert store.put_tensor_with_parallelism(k, t[3:], par1) == 0  # dp rank 0 wrote tp 1
    assert store.is_exist(f"{k}__dp_1of2__tp_0of2_sd0") == 1
    assert torch.equal(store.get_tensor_with_parallelism(k, ReadTarget("full")), t)


def test_missing_shard_reads_none_not_partial(store, k):
    t = full_tensor((8, 2))
    for r in (0, 1, 3):  # rank 2 never writes
        assert store.put_tensor_with_parallelism(k, torch.chunk(t, 4, 0)[r], tp(r, 4, 0)) == 0
    assert store.get_tensor_with_parallelism(k, ReadTarget("full")) is None
    assert store.get_tensor_with_parallelism(k, ReadTarget("shard", tp(1, 2, 0))) is None
    # the half that lies in written shards only is served
    assert torch.equal(store.get_tensor_with_parallelism(k, ReadTarget("shard", tp(0, 2, 0))),
                       t[:4])
    assert store.get_tensor_with_parallelism(k + "-never") is None
    assert store.batch_get_tensor_with_parallelism(
        [k, k], [ReadTarget("full"), ReadTarget("shard", tp(0, 2, 0))])[0] is None
    buf = np.zeros(MiB, np.uint8)
    assert store.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    try:
        assert store.get_tensor_with_parallelism_into(k, buf.ctypes.data, buf.nbytes,
                                                      ReadTarget("full")) is None
        assert store.batch_get_tensor_with_parallelism_into(
            [k], [buf.ctypes.data], [buf.nbytes], [ReadTarget("full")]) == [None]
    finally:
        assert store.unregister_buffer(buf.ctypes.data) == 0


def test_missing_writer_partition_reads_none_not_partial(store, k):
    t = full_tensor((9, 3))
    for r in (0, 2):  # partition 1 of 3 never written
        assert store.put_tensor_with_parallelism(k, t, writer_partition=(r, 3, 0)) == 0
    assert store.get_tensor_with_parallelism(k) is None
    assert store.get_tensor_with_parallelism(k, ReadTarget("full")) is None
    assert store.get_tensor_with_parallelism(k, ReadTarget("shard", tp(0, 3, 1))) is None
    assert torch.equal(store.get_tensor_with_parallelism(k, ReadTarget("shard", tp(2, 3, 0))),
                       t[6:])


def test_bad_arguments(store, k):
    t = full_tensor((4, 4))
    assert store.put_tensor_with_parallelism(k, t, tp(0, 2, 0), writer_partition=(0, 2, 0)) \
        == INVALID_PARAMS
    assert store.put_tensor_with_parallelism(k, t, writer_partition=(2, 2, 0)) == INVALID_PARAMS
    assert store.put_tensor_with_parallelism(k, t, writer_partition=(0, 2, 5)) == INVALID_PARAMS
    with pytest.raises(TypeError):
        store.put_tensor_with_parallelism(k, [1, 2])
    with pytest.raises(TypeError):
        store.put_tensor_with_parallelism(k, t, writer_partition="0,2,0")
    with pytest.raises(TypeError):
        store.get_tensor_with_parallelism(k, "full")
    # a wrong type is TypeError even when the values are impossible too
    with pytest.raises(TypeError):
        store.put_tensor_with_parallelism(k, t, tp(0, 2, 0), 5, (0, 2, 0))
    with pytest.raises(TypeError):
        store.put_tensor_with_parallelism(7, t, tp(0, 2, 0), writer_partition=(0, 2, 0))
    with pytest.raises(TypeError):
        store.upsert_tensor_with_parallelism(k, "t", tp(0, 2, 0), writer_partition=(0, 2, 0))
    assert store.is_exist(k) == 0


def test_whole_tensor_and_batch_and_upsert(store, k):
    a, b = full_tensor((3, 3)), full_tensor((2, 5), torch.int32)
    keys = [k + "-a", k + "-b"]
    assert store.batch_put_tensor_with_parallelism(keys, [a, b]) == [0, 0]
    got = store.batch_get_tensor_with_parallelism(keys)
    assert torch.equal(got[0], a) and torch.equal(got[1], b)
    assert store.upsert_tensor_with_parallelism(keys[0], a * 2) == 0
    assert torch.equal(store.get_tensor_with_parallelism(keys[0]), a * 2)
    # a whole tensor read as one rank's shard
    got = store.get_tensor_with_parallelism(keys[1], ReadTarget("shard", tp(1, 2, 1)))
    assert torch.equal(got, torch.chunk(b, 2, 1)[1])
    res = store.batch_upsert_tensor_with_parallelism(
        keys, [a, b], writer_partitions=[(0, 1, 0), (0, 1, 1)])
    assert res == [0, 0]
    assert store.batch_put_tensor_with_parallelism(keys, [a]) == [INVALID_PARAMS] * 2


def test_from_and_into_buffers(store, k):
    t = full_tensor((8, 4))
    buf = np.zeros(MiB, np.uint8)
    ptr = buf.ctypes.data
    assert store.register_buffer(ptr, buf.nbytes) == 0
    try:
        assert store.put_tensor(k + "-src", t) == 0
        n = 304 + t.numel() * 4
        view = store.get_tensor_into(k + "-src", ptr, buf.nbytes)
        assert view is not None and torch.equal(view, t)
        # the buffer now holds [header][data]: store it as two writer partitions
        for r in range(2):
            assert store.put_tensor_with_parallelism_from(k, ptr, n,
                                                          writer_partition=(r, 2, 0)) == 0
        assert store.batch_upsert_tensor_with_parallelism_from(
            [k + "-p"], [ptr], [n], parallelisms=[tp(0, 1, 0)]) == [0]
        assert store.put_tensor_with_parallelism_from(k + "-bad", ptr, 100,
                                                      writer_partition=(0, 2, 0)) \
            == INVALID_PARAMS
        buf[:] = 0
        got = store.get_tensor_with_parallelism_into(k, ptr, buf.nbytes, ReadTarget("full"))
        assert got is not None and torch.equal(got, t)
        assert got.data_ptr() == ptr + 304  # a view of the caller's buffer
        assert store.get_tensor_with_parallelism_into(k, ptr, 200) is None  # too small
        got = store.batch_get_tensor_with_parallelism_into(
            [k, k + "-p"], [ptr, ptr + 4096], [4096, 4096],
            [ReadTarget("shard", tp(1, 2, 0)), None])
        assert torch.equal(got[0], t[4:]) and torch.equal(got[1], t)
    finally:
        assert store.unregister_buffer(ptr) == 0


def test_safetensors_round_trip(store, k, tmp_path):
    t = full_tensor((3, 5), torch.float16)
    assert store.put_tensor(k, t) == 0
    path = str(tmp_path / "one.safetensors")
    assert store.save_tensor_to_safetensor(k, path) == 0
    # the file is the safetensors format: header length, JSON, data
    data = open(path, "rb").read()
    (hlen,) = struct.unpack_from("<Q", data)
    hdr = json.loads(data[8:8 + hlen])
    assert hdr[k] == {"dtype": "F16", "shape": [3, 5], "data_offsets": [0, 30]}
    assert data[8 + hlen:] == t.numpy().tobytes()
    got = store.load_tensor_from_safetensor(k + "-loaded", path)
    assert torch.equal(got, t) and torch.equal(store.get_tensor(k + "-loaded"), t)
    # one argument is the file; the tensor is stored under the file's name
    got = store.load_tensor_from_safetensor(path)
    assert torch.equal(got, t) and torch.equal(store.get_tensor("one.safetensors"), t)
    assert store.remove("one.safetensors", True) == 0  # force: the read lease is held
    assert store.save_tensor_to_safetensor(k + "-never", path) == -704


def test_safetensors_bad_files_warn_and_read_none(store, k, tmp_path):
    bad = tmp_path / "bad.safetensors"
    for blob in (b"", struct.pack("<Q", 1 << 40), struct.pack("<Q", 4) + b"{{{{",
                 struct.pack("<Q", 2) + b"[]",
                 struct.pack("<Q", 60) + json.dumps(
                     {"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}
                 ).encode().ljust(60)):
        bad.write_bytes(blob)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            assert store.load_tensor_from_safetensor(k, str(bad)) is None
        assert any("bad.safetensors" in str(x.message) for x in w)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert store.load_tensor_from_safetensor(k, str(tmp_path / "none")) is None
    assert store.is_exist(k) == 0


def test_init_all_sets_up_from_the_environment(mc_master, monkeypatch):
    monkeypatch.setenv("MC_METADATA_SERVER", mc_master.meta_uri)
    monkeypatch.setenv("MC_MASTER_SERVER_ADDR", mc_master.addr)
    monkeypatch.setenv("MC_LOCAL_HOSTNAME", "127.0.0.1")
    s = MooncakeDistributedStore()
    assert s.init_all("tcp", "", 16 * MiB) == 0
    try:
        key = "init-all-" + uuid.uuid4().hex[:8]
        assert s.put(key, b"legacy") == 0 and s.get(key) == b"legacy"
        assert s.remove(key, True) == 0
    finally:
        assert s.close() == 0
    with pytest.raises(TypeError):
        MooncakeDistributedStore().init_all(1, "")
    with pytest.raises(TypeError):  # was -600, as an impossible value
        MooncakeDistributedStore().init_all("tcp", "", 1.5)
    assert MooncakeDistributedStore().init_all("tcp", "", -1) == INVALID_PARAMS


def test_cuda_calls_refuse_cpu_tensors(store, k):
    assert store.put_tensor(k, full_tensor((2, 2))) == 0
    with pytest.warns(RuntimeWarning, match="CUDA tensor"):
        assert store.get_tensor_into_cuda(k, torch.empty(4)) == INVALID_PARAMS
    with pytest.warns(RuntimeWarning):
        assert store.batch_get_tensor_into_cuda([k], [torch.empty(4)]) == [INVALID_PARAMS]
    with pytest.raises(TypeError):
        store.get_tensor_into_cuda(k, b"x")


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA torch and a GPU (Debian's torch is CPU-only)")
def test_cuda_calls_fill_device_tensors(store, k):
    """The working path of get_tensor_into_cuda and its batch form: the
    bytes land in the device tensor, the answer is their count, a device
    tensor too small is INVALID_PARAMS and a missing key OBJECT_NOT_FOUND."""
    src = full_tensor((8, 4))
    assert store.put_tensor(k, src) == 0
    dst = torch.zeros(32, device="cuda")
    assert store.get_tensor_into_cuda(k, dst) == src.numel() * src.element_size()
    assert torch.equal(dst.cpu(), src.reshape(-1))
    assert store.get_tensor_into_cuda(k, torch.zeros(4, device="cuda")) == INVALID_PARAMS
    assert store.get_tensor_into_cuda(k + "-none", dst) == OBJECT_NOT_FOUND
    outs = [torch.zeros(32, device="cuda"), torch.zeros(32, device="cuda")]
    assert store.batch_get_tensor_into_cuda([k, k + "-none"], outs) == \
        [src.numel() * src.element_size(), OBJECT_NOT_FOUND]
    assert torch.equal(outs[0].cpu(), src.reshape(-1))


def test_bind_to_numa_node_warns_not_raises():
    nodes = [d for d in os.listdir("/sys/devices/system/node") if d[4:].isdigit()] \
        if os.path.isdir("/sys/devices/system/node") else []
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        ms.bind_to_numa_node(999)
    assert any("no NUMA node 999" in str(x.message) for x in w)
    if len(nodes) == 1:
        with pytest.warns(RuntimeWarning, match="one NUMA node"):
            ms.bind_to_numa_node(0)
    with pytest.raises(TypeError):
        ms.bind_to_numa_node("0")


def test_allocator_addresses_are_callable():
    alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                             ctypes.c_void_p)(ms.get_alloc_func_addr())
    free = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                            ctypes.c_void_p)(ms.get_free_func_addr())
    n = 3 * MiB
    p = alloc(n, 0, None)
    assert p
    arr = (ctypes.c_uint8 * n).from_address(p)
    arr[0], arr[n - 1] = 7, 9
    assert (arr[0], arr[n - 1]) == (7, 9)
    free(p, n, 0, None)


def test_parsers_survive_mutated_input(tmp_path):
    """The safetensors reader and the manifest parser, over 400 seeded mutations
    of valid input each: a ValueError or None, never another exception."""
    import random
    from mooncake import _store_extra, _tensor_parallel

    good = tmp_path / "good.safetensors"
    _store_extra.write_safetensors(str(good), {"a": full_tensor((3, 4)),
                                               "b": torch.ones(2, dtype=torch.int8)})
    base = good.read_bytes()
    man = _tensor_parallel._manifest(0, [8, 4], 0, 2, [ParallelAxis("tp", 0, 2, 0)])
    assert _tensor_parallel._parse_manifest(man)[1] == [8, 4]
    rng = random.Random(18)
    path = tmp_path / "m.safetensors"
    for _ in range(400):
        b = bytearray(base)
        for _ in range(rng.randint(1, 6)):
            op = rng.randrange(3)
            i = rng.randrange(len(b))
            if op == 0:
                b[i] = rng.randrange(256)
            elif op == 1:
                del b[i:i + rng.randint(1, 16)]
            else:
                b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        path.write_bytes(bytes(b))
        try:
            _store_extra.read_safetensors(str(path))
        except ValueError:
            pass
        m = bytearray(man)
        m[rng.randrange(len(m))] = rng.randrange(256)
        _tensor_parallel._parse_manifest(bytes(m[:rng.randint(0, len(m))]))
