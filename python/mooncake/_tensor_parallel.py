"""The unified tensor-parallelism calls of ``MooncakeDistributedStore``.

``put_tensor_with_parallelism`` and its upsert, batch and ``_from`` forms,
``get_tensor_with_parallelism`` and its batch and ``_into`` forms, and the
classes they take (``ParallelAxis``, ``TensorParallelism``, ``ReadTarget``),
written over the store's own calls (``put_tensor_from``, ``get_tensor``,
``batch_get_tensor``, ``is_exist``).  ``mooncake.store`` binds each
function here as a method of the class; ``store`` is the client.

What is stored (spec store.md 1.12):

- ``parallelism=TensorParallelism([...])``: the tensor given is the
  caller's local shard.  It is stored as a SHARD-layout tensor under
  ``<key>__<axis>_<rank>of<size>[_sd<d>][_eid<e>][_sid<s>]`` (one part per
  axis, in the order dp, tp, ep, pp), with its axes in the header, and the
  manifest ``<key>__parallelism_manifest`` records the global shape.
- ``writer_partition=(rank, size, split_dim)``: the tensor given is the
  whole tensor and the caller stores only its partition (``torch.chunk``
  piece ``rank``) under ``<key>__writer_<rank>of<size>_sd<dim>``, with the
  manifest ``<key>__writer_manifest``.  Ranks that all hold the whole tensor
  each write their own piece instead of every piece.
- neither: the whole tensor under ``key``, as ``pub_tensor``.

At most one axis of a parallelism may split the tensor (``split_dim`` >= 0);
the others replicate it (dp) or label it (ep's ``expert_id``, pp's
``stage_id``).  A manifest is a 64-byte header (magic 0x574d414e, version 1,
header size, dtype, ndim, split_dim, shard count, reserved) and the 8-i64
global shape, followed by our own JSON list of the axes without ranks.

Reading (``ReadTarget.mode``): ``as_stored`` returns ``key`` when the whole
tensor is stored there, the shard the target's parallelism names when it
has one, and the whole tensor reassembled otherwise; ``full`` reassembles
the whole tensor from its shards; ``shard`` returns the reader's own shard
of the target's parallelism, cut from the stored shards whatever layout
wrote them (only the stored shards that overlap it are read when both
split the same dimension).  A missing shard reads as None, never a partial
tensor.
"""

import ctypes
import json
import struct

ERR_INVALID_PARAMS = -600
ERR_OBJECT_NOT_FOUND = -704

HDR_SIZE = 304
TENSOR_MAGIC = 0x4D4F4F4E
MANIFEST_MAGIC = 0x574D414E
_HDR = struct.Struct("=IHHiiIIQQ8q8qII")
_AXIS = struct.Struct("=iiiiiiq")
_MAN = struct.Struct("=IHHiiiii8q")  # 28 bytes + 64 = 92; padded to 96

KINDS = ("dp", "tp", "ep", "pp")
KIND_CODE = {"dp": 0, "tp": 1, "ep": 2, "pp": 3}

DTYPES = (
    "float32", "float64", "int8", "uint8", "int16", "uint16", "int32",
    "uint32", "int64", "uint64", "bool", "float16", "bfloat16",
    "float8_e4m3fn", "float8_e5m2",
)


def _torch():
    from mooncake._optional import require

    return require("torch", "the tensor calls of mooncake.store")


class ParallelAxis:
    """One parallel axis: ``kind`` (dp, tp, ep, pp), this rank, the axis's
    size, the tensor dimension it splits (None: it does not split), and the
    expert or stage it belongs to (ep, pp)."""

    __slots__ = ("kind", "rank", "size", "split_dim", "expert_id", "stage_id")

    def __init__(self, kind="tp", rank=0, size=1, split_dim=None, expert_id=None,
                 stage_id=None):
        if kind not in KIND_CODE:
            raise ValueError("ParallelAxis kind must be one of dp, tp, ep, pp, not %r" % (kind,))
        for name, v in (("rank", rank), ("size", size)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError("ParallelAxis %s must be an int" % name)
        if size < 1 or not 0 <= rank < size:
            raise ValueError("ParallelAxis needs 0 <= rank < size, got rank %d size %d"
                             % (rank, size))
        for name, v in (("split_dim", split_dim), ("expert_id", expert_id),
                        ("stage_id", stage_id)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise ValueError("ParallelAxis %s must be None or an int >= 0" % name)
        self.kind, self.rank, self.size = kind, rank, size
        self.split_dim, self.expert_id, self.stage_id = split_dim, expert_id, stage_id

    def __repr__(self):
        return ("ParallelAxis(kind=%r, rank=%d, size=%d, split_dim=%r, expert_id=%r, "
                "stage_id=%r)" % (self.kind, self.rank, self.size, self.split_dim,
                                  self.expert_id, self.stage_id))

    def __eq__(self, other):
        return isinstance(other, ParallelAxis) and all(
            getattr(self, f) == getattr(other, f) for f in self.__slots__)

    def _part(self):
        s = "%s_%dof%d" % (self.kind, self.rank, self.size)
        if self.split_dim is not None:
            s += "_sd%d" % self.split_dim
        if self.expert_id is not None:
            s += "_eid%d" % self.expert_id
        if self.stage_id is not None:
            s += "_sid%d" % self.stage_id
        return s


class TensorParallelism:
    """The parallel layout of one shard: a list of ParallelAxis."""

    __slots__ = ("axes",)

    def __init__(self, axes=None):
        axes = list(axes or [])
        if len(axes) > 4:
            raise ValueError("TensorParallelism holds at most 4 axes")
        for a in axes:
            if not isinstance(a, ParallelAxis):
                raise TypeError("TensorParallelism axes must be ParallelAxis")
        if len({a.kind for a in axes}) != len(axes):
            raise ValueError("TensorParallelism: one axis of each kind at most")
        if sum(1 for a in axes if a.split_dim is not None) > 1:
            raise ValueError("TensorParallelism: at most one axis may split the tensor")
        self.axes = sorted(axes, key=lambda a: KIND_CODE[a.kind])

    def __repr__(self):
        return "TensorParallelism(axes=%r)" % (self.axes,)

    def split_axis(self):
        for a in self.axes:
            if a.split_dim is not None:
                return a
        return None


class ReadTarget:
    """What a read returns: ``as_stored`` (default), ``shard`` (the shard of
    ``parallelism``) or ``full``."""

    __slots__ = ("mode", "parallelism")

    def __init__(self, mode="as_stored", parallelism=None):
        if mode not in ("as_stored", "shard", "full"):
            raise ValueError("ReadTarget mode must be 'as_stored', 'shard' or 'full', not %r"
                             % (mode,))
        if parallelism is not None and not isinstance(parallelism, TensorParallelism):
            raise TypeError("ReadTarget parallelism must be a TensorParallelism or None")
        if mode == "shard" and parallelism is None:
            raise ValueError("ReadTarget mode 'shard' needs a parallelism")
        self.mode, self.parallelism = mode, parallelism

    def __repr__(self):
        return "ReadTarget(mode=%r, parallelism=%r)" % (self.mode, self.parallelism)


# ---- keys and manifests -------------------------------------------------------------


def shard_key(key, par):
    return key + "".join("__" + a._part() for a in par.axes)


def writer_key(key, rank, size, split_dim):
    return "%s__writer_%dof%d_sd%d" % (key, rank, size, split_dim)


def _manifest(dtype, shape, split_dim, count, axes):
    shape8 = list(shape) + [-1] * (8 - len(shape))
    fixed = _MAN.pack(MANIFEST_MAGIC, 1, 96, dtype, len(shape), split_dim, count, 0, *shape8)
    tail = json.dumps([{"kind": a.kind, "size": a.size, "split_dim": a.split_dim,
                        "expert_id": a.expert_id, "stage_id": a.stage_id} for a in axes],
                      separators=(",", ":"), sort_keys=True).encode()
    return fixed + b"\0" * (96 - len(fixed)) + tail


def _parse_manifest(b):
    """(dtype, shape, split_dim, count, axes) or None for bytes that are not one."""
    if len(b) < 96:
        return None
    v = _MAN.unpack_from(b)
    magic, version, hsize, dtype, ndim, split_dim, count = v[:7]
    if (magic != MANIFEST_MAGIC or version != 1 or hsize != 96 or not 0 <= ndim <= 8 or
            not 0 <= dtype < len(DTYPES) or count < 1 or not -1 <= split_dim < max(ndim, 1)):
        return None
    shape = list(v[8:8 + ndim])
    if any(d < 0 for d in shape):
        return None
    axes = []
    if len(b) > 96:
        try:
            for d in json.loads(b[96:].decode()):
                axes.append(ParallelAxis(d["kind"], 0, d["size"], d["split_dim"],
                                         d["expert_id"], d["stage_id"]))
        except (ValueError, KeyError, TypeError):
            return None
    return dtype, shape, split_dim, count, axes


# ---- writing ------------------------------------------------------------------------


def _dtype_code(torch, t):
    for i, name in enumerate(DTYPES):
        if getattr(torch, name, None) == t.dtype:
            return i
    return -1


def _as_bytes(torch, t):
    """A flat uint8 view of a contiguous CPU tensor's bytes."""
    return t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)


def _header(t, dtype, global_shape, axes):
    """The 304-byte header of t: FULL without axes, SHARD with them."""
    ndim = t.dim()
    local8 = list(t.shape) + [-1] * (8 - ndim)
    glob8 = list(global_shape) + [-1] * (8 - ndim)
    nbytes = t.numel() * t.element_size()
    hdr = _HDR.pack(TENSOR_MAGIC, 1, HDR_SIZE, dtype, ndim, 1 if axes else 0, 0, HDR_SIZE,
                    nbytes, *glob8, *local8, len(axes), 0)
    for i in range(4):
        if i < len(axes):
            a, idx = axes[i]
            sd = -1 if a.split_dim is None else a.split_dim
            hdr += _AXIS.pack(KIND_CODE[a.kind], idx, a.rank, a.size, sd, 0, 0)
        else:
            hdr += _AXIS.pack(0, 0, 0, 0, 0, 0, 0)
    return hdr


def _blob(torch, t, dtype, global_shape, axes):
    """[header][bytes] of t in a new uint8 tensor."""
    hdr = _header(t, dtype, global_shape, axes)
    nbytes = t.numel() * t.element_size()
    out = torch.empty(HDR_SIZE + nbytes, dtype=torch.uint8)
    out[:HDR_SIZE] = torch.frombuffer(bytearray(hdr), dtype=torch.uint8)
    if nbytes:
        out[HDR_SIZE:] = _as_bytes(torch, t)
    return out


def _prepare(torch, tensor):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("expected a torch.Tensor, got %s" % type(tensor).__name__)
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    code = _dtype_code(torch, t)
    if code < 0 or t.dim() > 8:
        return None, -1
    return t, code


def _put_tensor(store, key, t, code, global_shape, axes, config, upsert):
    """Writes contiguous CPU tensor t under key as [header][bytes]: put_parts
    of the header and the tensor's own memory (no staging copy here)."""
    hdr = _header(t, code, global_shape, axes)
    nbytes = t.numel() * t.element_size()
    fn = store.upsert_parts if upsert else store.put_parts
    if not nbytes:
        return fn(key, hdr, config=config)
    data = (ctypes.c_char * nbytes).from_address(t.data_ptr())
    return fn(key, hdr, memoryview(data).cast("B"), config=config)


def _put_manifest(store, key, data, config, upsert):
    rc = (store.upsert if upsert else store.put)(key, data, config)
    return rc


def _check_excl(key, config, parallelism, writer_partition):
    """TypeError for an argument of the wrong type (checked first, as
    upstream's pybind11 casts do), then -600 for impossible values: both
    parallelism and writer_partition, or a partition outside its range."""
    from mooncake.store import ReplicateConfig

    if not isinstance(key, str):
        raise TypeError("key must be a str, got %s" % type(key).__name__)
    if config is not None and not isinstance(config, ReplicateConfig):
        raise TypeError("config must be a ReplicateConfig or None")
    if parallelism is not None and not isinstance(parallelism, TensorParallelism):
        raise TypeError("parallelism must be a TensorParallelism or None")
    if writer_partition is not None:
        try:
            r, n, d = writer_partition
        except (TypeError, ValueError):
            raise TypeError("writer_partition must be (rank, size, split_dim)") from None
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (r, n, d)):
            raise TypeError("writer_partition must be (rank, size, split_dim) of ints")
    if parallelism is not None and writer_partition is not None:
        return ERR_INVALID_PARAMS
    if writer_partition is not None and (n < 1 or not 0 <= r < n or d < 0):
        return ERR_INVALID_PARAMS
    return 0


def _put_one(store, key, tensor, parallelism, config, writer_partition, upsert):
    torch = _torch()
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("expected a torch.Tensor, got %s" % type(tensor).__name__)
    rc = _check_excl(key, config, parallelism, writer_partition)
    if rc:
        return rc
    t, code = _prepare(torch, tensor)
    if t is None:
        return ERR_INVALID_PARAMS
    if parallelism is None and writer_partition is None:
        return _put_tensor(store, key, t, code, t.shape, [], config, upsert)
    if writer_partition is not None:
        r, n, d = writer_partition
        if d >= max(t.dim(), 1) or t.dim() == 0:
            return ERR_INVALID_PARAMS
        pieces = torch.chunk(t, n, d)
        if r >= len(pieces):  # torch.chunk gave fewer pieces: this rank's is empty
            piece = t.narrow(d, t.shape[d], 0)
        else:
            piece = pieces[r]
        piece = piece.contiguous()
        ax = ParallelAxis("tp", r, n, d)
        man = _manifest(code, list(t.shape), d, n, [ax])
        rc = _put_tensor(store, writer_key(key, r, n, d), piece, code, t.shape, [(ax, 0)],
                         config, upsert)
        if rc == 0:
            rc = _put_manifest(store, key + "__writer_manifest", man, config, upsert)
        return rc
    sa = parallelism.split_axis()
    shape = list(t.shape)
    if sa is not None:
        if sa.split_dim >= t.dim():
            return ERR_INVALID_PARAMS
        shape[sa.split_dim] *= sa.size  # even shards: the whole is size times a shard
    axes = [(a, 0) for a in parallelism.axes]
    man = _manifest(code, shape, -1 if sa is None else sa.split_dim,
                    1 if sa is None else sa.size, parallelism.axes)
    rc = _put_tensor(store, shard_key(key, parallelism), t, code, shape, axes, config, upsert)
    if rc == 0:
        rc = _put_manifest(store, key + "__parallelism_manifest", man, config, upsert)
    return rc


def _from_tensor(torch, ptr, size):
    """The tensor a stored-format buffer at ptr holds (a copy), or None."""
    if size < HDR_SIZE:
        return None
    raw = (ctypes.c_char * size).from_address(ptr)
    h = _HDR.unpack_from(raw)
    magic, version, hsize, dtype, ndim, _layout, _fl, off, nbytes = h[:9]
    if (magic != TENSOR_MAGIC or version != 1 or hsize != HDR_SIZE or
            not 0 <= dtype < len(DTYPES) or not 0 <= ndim <= 8 or off < HDR_SIZE or
            off + nbytes != size):
        return None
    shape = list(h[9 + 8:9 + 8 + ndim])
    dt = getattr(torch, DTYPES[dtype], None)
    if dt is None or any(d < 0 for d in shape):
        return None
    data = torch.frombuffer(bytearray(raw[off:off + nbytes]), dtype=torch.uint8)
    try:
        return data.view(dt).reshape(shape) if nbytes else torch.empty(shape, dtype=dt)
    except RuntimeError:
        return None


# ---- the put methods ----------------------------------------------------------------


def put_tensor_with_parallelism(store, key, tensor, parallelism=None, config=None,
                                writer_partition=None):
    return _put_one(store, key, tensor, parallelism, config, writer_partition, False)


def upsert_tensor_with_parallelism(store, key, tensor, parallelism=None, config=None,
                                   writer_partition=None):
    return _put_one(store, key, tensor, parallelism, config, writer_partition, True)


def _per_key(name, v, n):
    if v is None:
        return [None] * n
    v = list(v)
    if len(v) != n:
        raise ValueError("%s has %d entries for %d keys" % (name, len(v), n))
    return v


def _batch(store, keys, tensors_list, parallelisms, config, writer_partitions, upsert):
    keys, tl = list(keys), list(tensors_list)
    if len(keys) != len(tl):
        return [ERR_INVALID_PARAMS] * len(keys)
    ps = _per_key("parallelisms", parallelisms, len(keys))
    ws = _per_key("writer_partitions", writer_partitions, len(keys))
    return [_put_one(store, k, t, p, config, w, upsert)
            for k, t, p, w in zip(keys, tl, ps, ws)]


def batch_put_tensor_with_parallelism(store, keys, tensors_list, parallelisms=None,
                                      config=None, writer_partitions=None):
    return _batch(store, keys, tensors_list, parallelisms, config, writer_partitions, False)


def batch_upsert_tensor_with_parallelism(store, keys, tensors_list, parallelisms=None,
                                         config=None, writer_partitions=None):
    return _batch(store, keys, tensors_list, parallelisms, config, writer_partitions, True)


def _from_one(store, key, buffer_ptr, size, parallelism, config, writer_partition, upsert):
    if not isinstance(buffer_ptr, int) or not isinstance(size, int):
        raise TypeError("buffer_ptr and size must be ints")
    rc = _check_excl(key, config, parallelism, writer_partition)
    if rc:
        return rc
    if parallelism is None and writer_partition is None:
        fn = store.upsert_tensor_from if upsert else store.put_tensor_from
        return fn(key, buffer_ptr, size, config)
    if buffer_ptr == 0:
        return ERR_INVALID_PARAMS
    t = _from_tensor(_torch(), buffer_ptr, size)
    if t is None:
        return ERR_INVALID_PARAMS
    return _put_one(store, key, t, parallelism, config, writer_partition, upsert)


def put_tensor_with_parallelism_from(store, key, buffer_ptr, size, parallelism=None,
                                     config=None, writer_partition=None):
    return _from_one(store, key, buffer_ptr, size, parallelism, config, writer_partition, False)


def upsert_tensor_with_parallelism_from(store, key, buffer_ptr, size, parallelism=None,
                                        config=None, writer_partition=None):
    return _from_one(store, key, buffer_ptr, size, parallelism, config, writer_partition, True)


def _from_batch(store, keys, ptrs, sizes, parallelisms, config, writer_partitions, upsert):
    keys, ptrs, sizes = list(keys), list(ptrs), list(sizes)
    if not len(keys) == len(ptrs) == len(sizes):
        return [ERR_INVALID_PARAMS] * len(keys)
    ps = _per_key("parallelisms", parallelisms, len(keys))
    ws = _per_key("writer_partitions", writer_partitions, len(keys))
    return [_from_one(store, k, b, s, p, config, w, upsert)
            for k, b, s, p, w in zip(keys, ptrs, sizes, ps, ws)]


def batch_put_tensor_with_parallelism_from(store, keys, buffer_ptrs, sizes, parallelisms=None,
                                           config=None, writer_partitions=None):
    return _from_batch(store, keys, buffer_ptrs, sizes, parallelisms, config,
                       writer_partitions, False)


def batch_upsert_tensor_with_parallelism_from(store, keys, buffer_ptrs, sizes,
                                              parallelisms=None, config=None,
                                              writer_partitions=None):
    return _from_batch(store, keys, buffer_ptrs, sizes, parallelisms, config,
                       writer_partitions, True)


# ---- reading ------------------------------------------------------------------------


class _Layout:
    """How a key is stored: whole, by writer partition or by parallelism."""

    def __init__(self, kind, man=None):
        self.kind = kind  # "full", "writer", "par"
        if man:
            self.dtype, self.shape, self.split_dim, self.count, self.axes = man

    def shard_keys(self, store, key):
        """The stored shard keys in split order, or None if one is missing."""
        if self.kind == "writer":
            return [writer_key(key, r, self.count, self.split_dim) for r in range(self.count)]
        out = []
        split_kind = next((a.kind for a in self.axes if a.split_dim is not None), None)
        for r in range(self.count):
            # replicas (dp) may be written by any rank: the first that exists
            choices = [[]]
            for a in self.axes:
                if a.kind == split_kind:
                    ranks = [r]
                elif a.size > 1:
                    ranks = range(a.size)
                else:
                    ranks = [0]
                choices = [c + [ParallelAxis(a.kind, x, a.size, a.split_dim, a.expert_id,
                                             a.stage_id)] for c in choices for x in ranks]
            keys = [shard_key(key, TensorParallelism(c)) for c in choices]
            found = None
            if len(keys) == 1:
                found = keys[0]
            else:
                for k, e in zip(keys, store.batch_is_exist(keys)):
                    if e == 1:
                        found = k
                        break
            if found is None:
                return None
            out.append(found)
        return out


def _layout(store, key):
    ex = store.batch_is_exist([key, key + "__writer_manifest", key + "__parallelism_manifest"])
    if ex[0] == 1:
        return _Layout("full")
    for i, kind, mk in ((1, "writer", "__writer_manifest"), (2, "par", "__parallelism_manifest")):
        if ex[i] == 1:
            man = _parse_manifest(store.get(key + mk))
            if man is None:
                return None
            return _Layout(kind, man)
    return None


def _bounds(length, count):
    """torch.chunk's piece boundaries of length into count pieces."""
    step = -(-length // count) if count else 0
    out, start = [], 0
    for _ in range(count):
        end = min(start + step, length)
        out.append((start, end))
        start = end
    return out


def _whole(store, key, lay, torch, want=None):
    """The whole tensor (or, with want=(dim, lo, hi), that slice of it)."""
    if lay.kind == "full":
        t = store.get_tensor(key)
        if t is not None and want is not None:
            d, lo, hi = want
            t = t.narrow(d, lo, hi - lo)
        return t
    keys = lay.shard_keys(store, key)
    if keys is None:
        return None
    if lay.split_dim < 0:
        return store.get_tensor(keys[0])
    d = lay.split_dim
    full_len = lay.shape[d]
    if lay.kind == "writer":
        bounds = _bounds(full_len, lay.count)
    else:
        per = full_len // lay.count
        bounds = [(r * per, (r + 1) * per) for r in range(lay.count)]
    pick = list(range(lay.count))
    if want is not None and want[0] == d:
        pick = [r for r in pick if bounds[r][0] < want[2] and bounds[r][1] > want[1]]
    got = store.batch_get_tensor([keys[r] for r in pick]) if pick else []
    if any(g is None for g in got):
        return None
    if not got:
        dt = getattr(torch, DTYPES[lay.dtype])
        shape = list(lay.shape)
        shape[d] = 0
        return torch.empty(shape, dtype=dt)
    t = got[0] if len(got) == 1 else torch.cat(got, d)
    if want is not None:
        wd, lo, hi = want
        if wd == d:
            lo, hi = lo - bounds[pick[0]][0], hi - bounds[pick[0]][0]
        t = t.narrow(wd, lo, hi - lo)
    return t


def _read(store, key, target):
    if target is not None and not isinstance(target, ReadTarget):
        raise TypeError("target must be a ReadTarget or None")
    torch = _torch()
    mode = target.mode if target is not None else "as_stored"
    par = target.parallelism if target is not None else None
    if mode == "as_stored" and par is not None:
        return store.get_tensor(shard_key(key, par))
    lay = _layout(store, key)
    if lay is None:
        return None
    if mode in ("as_stored", "full"):
        return _whole(store, key, lay, torch)
    sa = par.split_axis()
    if sa is None:
        return _whole(store, key, lay, torch)
    if lay.kind == "par" and lay.split_dim == sa.split_dim and lay.count == sa.size:
        keys = lay.shard_keys(store, key)
        return None if keys is None else store.get_tensor(keys[sa.rank])
    if lay.kind != "full" and sa.split_dim >= len(lay.shape):
        return None
    shape = lay.shape if lay.kind != "full" else None
    if shape is None:
        t = store.get_tensor(key)
        if t is None or sa.split_dim >= t.dim():
            return None
        lo, hi = _bounds(t.shape[sa.split_dim], sa.size)[sa.rank]
        return t.narrow(sa.split_dim, lo, hi - lo).contiguous()
    lo, hi = _bounds(shape[sa.split_dim], sa.size)[sa.rank]
    t = _whole(store, key, lay, torch, (sa.split_dim, lo, hi))
    return None if t is None else t.contiguous()


def get_tensor_with_parallelism(store, key, target=None):
    return _read(store, key, target)


def batch_get_tensor_with_parallelism(store, keys, targets=None):
    keys = list(keys)
    ts = _per_key("targets", targets, len(keys))
    return [_read(store, k, t) for k, t in zip(keys, ts)]


def _into(store, key, buffer_ptr, size, target):
    if not isinstance(buffer_ptr, int) or not isinstance(size, int):
        raise TypeError("buffer_ptr and size must be ints")
    torch = _torch()
    t = _read(store, key, target)
    if t is None or buffer_ptr == 0:
        return None
    code = _dtype_code(torch, t)
    blob = _blob(torch, t.contiguous(), code, t.shape, [])
    if blob.numel() > size:
        return None
    dst = (ctypes.c_char * blob.numel()).from_address(buffer_ptr)
    ctypes.memmove(dst, blob.data_ptr(), blob.numel())
    if t.numel() == 0:
        return torch.empty(t.shape, dtype=t.dtype)
    view = (ctypes.c_char * (blob.numel() - HDR_SIZE)).from_address(buffer_ptr + HDR_SIZE)
    return torch.frombuffer(view, dtype=torch.uint8).view(t.dtype).reshape(t.shape)


def get_tensor_with_parallelism_into(store, key, buffer_ptr, size, target=None):
    return _into(store, key, buffer_ptr, size, target)


def batch_get_tensor_with_parallelism_into(store, keys, buffer_ptrs, sizes, targets=None):
    keys, ptrs, sizes = list(keys), list(buffer_ptrs), list(sizes)
    if not len(keys) == len(ptrs) == len(sizes):
        return [None] * len(keys)
    ts = _per_key("targets", targets, len(keys))
    return [_into(store, k, b, s, t) for k, b, s, t in zip(keys, ptrs, sizes, ts)]
