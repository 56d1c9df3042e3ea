"""mooncake.store tensor calls for every dtype of the stored format (spec store.md 1.12).

Every dtype code the installed torch has goes through each tensor path
(copy and view reads, batch and upsert forms, zero-copy puts, TP shards).
Codes the installed torch lacks (Debian's torch 1.13 has no uint16/32/64 and
no float8) cannot become tensors: reads return None with a RuntimeWarning
naming the dtype; a torch dtype with no code (complex64) is refused on
write with -600 and a RuntimeWarning.
"""

import struct
import uuid

import numpy as np
import pytest

from mooncake.store import MooncakeDistributedStore

torch = pytest.importorskip("torch")

MiB = 1 << 20
HDR = 304
INVALID_PARAMS = -600

DTYPES = [  # (code, name, element size), as the stored format numbers them
    (0, "float32", 4), (1, "float64", 8), (2, "int8", 1), (3, "uint8", 1), (4, "int16", 2),
    (5, "uint16", 2), (6, "int32", 4), (7, "uint32", 4), (8, "int64", 8), (9, "uint64", 8),
    (10, "bool", 1), (11, "float16", 2), (12, "bfloat16", 2), (13, "float8_e4m3fn", 1),
    (14, "float8_e5m2", 1)]
SUPPORTED = [d for d in DTYPES if hasattr(torch, d[1])]
MISSING = [d for d in DTYPES if not hasattr(torch, d[1])]


@pytest.fixture(scope="module")
def store(mc_master):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", mc_master.meta_uri, 64 * MiB, 32 * MiB, "tcp", "",
                   mc_master.addr, tenant_id="dtypes") == 0
    yield s
    assert s.close() == 0


@pytest.fixture(scope="module")
def regbuf(store):
    b = np.zeros(4 * MiB, np.uint8)
    assert store.register_buffer(b.ctypes.data, b.nbytes) == 0
    yield b
    assert store.unregister_buffer(b.ctypes.data) == 0


@pytest.fixture
def k(request):
    base = f"{request.node.name}-{uuid.uuid4().hex[:8]}"
    return lambda name="": f"{base}/{name}"


def sample(dtype, shape=(4, 6), seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 8).to(dtype)
    return torch.randint(0, 100, shape, generator=g).to(dtype)


def same(a, b):
    return a is not None and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def raw_tensor(code, elem, shape=(2, 3)):
    """A stored tensor with dtype code and zero payload, built by hand."""
    n = 1
    for d in shape:
        n *= d
    dims = list(shape) + [-1] * (8 - len(shape))
    hdr = struct.pack("=IHHiiIIQQ", 0x4D4F4F4E, 1, HDR, code, len(shape), 0, 0, HDR, n * elem)
    hdr += struct.pack("=8q", *dims) + struct.pack("=8q", *dims) + struct.pack("=II", 0, 0)
    hdr += bytes(4 * 32)
    assert len(hdr) == HDR
    return hdr + bytes(n * elem)


def test_installed_torch_covers_the_common_dtypes():
    names = {d[1] for d in SUPPORTED}
    assert {"float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool",
            "float16", "bfloat16"} <= names


@pytest.mark.parametrize("code,name,elem", SUPPORTED, ids=[d[1] for d in SUPPORTED])
def test_supported_dtype_every_path(store, regbuf, k, code, name, elem):
    dt = getattr(torch, name)
    t = sample(dt)
    nbytes = t.numel() * elem
    # copy-based round trip, header fields
    assert store.put_tensor(k("t"), t) == 0
    raw = store.get(k("t"))
    assert len(raw) == HDR + nbytes
    assert struct.unpack_from("=i", raw, 8)[0] == code
    assert struct.unpack_from("=Q", raw, 32)[0] == nbytes
    assert same(store.get_tensor(k("t")), t)
    # batch and upsert forms
    t2 = sample(dt, seed=1)
    assert store.batch_put_tensor([k("b0"), k("b1")], [t, t2]) == [0, 0]
    got = store.batch_get_tensor([k("b0"), k("b1"), k("nope")])
    assert same(got[0], t) and same(got[1], t2) and got[2] is None
    assert store.upsert_tensor(k("t"), t2) == 0
    assert same(store.get_tensor(k("t")), t2)
    assert store.batch_upsert_tensor([k("b0")], [t2]) == [0]
    assert same(store.get_tensor(k("b0")), t2)
    # a view of the registered buffer, then the same bytes written back zero-copy
    ptr = regbuf.ctypes.data
    v = store.get_tensor_into(k("t"), ptr, MiB)
    assert same(v, t2) and v.data_ptr() == ptr + HDR
    assert store.put_tensor_from(k("from"), ptr, HDR + nbytes) == 0
    assert same(store.get_tensor(k("from")), t2)
    vs = store.batch_get_tensor_into([k("b1"), k("nope")], [ptr + MiB, ptr + 2 * MiB],
                                     [MiB, MiB])
    assert same(vs[0], t2) and vs[1] is None
    # TP shards along dim 1
    assert store.put_tensor_with_tp(k("tp"), t, tp_size=2, split_dim=1) == 0
    for r, shard in enumerate(torch.chunk(t, 2, dim=1)):
        assert same(store.get_tensor_with_tp(k("tp"), tp_rank=r, tp_size=2), shard.contiguous())
    got = store.get_tensor_with_tp_into(k("tp"), ptr + 3 * MiB, MiB, tp_rank=1, tp_size=2)
    assert same(got, torch.chunk(t, 2, dim=1)[1].contiguous())
    # empty and 0-d tensors of the dtype
    for i, e in enumerate((sample(dt, (0, 3)), sample(dt, ()))):
        assert store.put_tensor(k(f"e{i}"), e) == 0
        assert same(store.get_tensor(k(f"e{i}")), e)


@pytest.mark.skipif(not MISSING, reason="the installed torch has every stored dtype")
@pytest.mark.parametrize("code,name,elem", MISSING, ids=[d[1] for d in MISSING])
def test_missing_dtype_reads_warn_and_return_none(store, regbuf, k, code, name, elem):
    raw = raw_tensor(code, elem)
    assert store.put(k("m"), raw) == 0
    with pytest.warns(RuntimeWarning, match=rf"dtype {name} \(code {code}\).*torch"):
        assert store.get_tensor(k("m")) is None
    with pytest.warns(RuntimeWarning, match=name):
        assert store.batch_get_tensor([k("m")]) == [None]
    ptr = regbuf.ctypes.data
    with pytest.warns(RuntimeWarning, match=name):
        assert store.get_tensor_into(k("m"), ptr, MiB) is None
    # the bytes are a valid stored tensor all the same: storing them needs no torch dtype
    assert store.put_tensor_from(k("copy"), ptr, len(raw)) == 0
    assert store.get(k("copy")) == raw
    # a TP split needs the tensor, so it is refused
    with pytest.warns(RuntimeWarning, match=name):
        assert store.put_tensor_with_tp_from(k("tp"), ptr, len(raw), 0, 2, 0) == INVALID_PARAMS


def test_dtype_without_code_is_refused_on_write(store, k):
    z = torch.zeros(3, dtype=torch.complex64)
    with pytest.warns(RuntimeWarning, match="no dtype code"):
        assert store.put_tensor(k("c"), z) == INVALID_PARAMS
    with pytest.warns(RuntimeWarning, match="no dtype code"):
        assert store.batch_put_tensor([k("c"), k("f")], [z, torch.ones(2)]) == [
            INVALID_PARAMS, 0]
    assert store.is_exist(k("c")) == 0
    assert same(store.get_tensor(k("f")), torch.ones(2))
