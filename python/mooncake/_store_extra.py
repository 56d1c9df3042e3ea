"""The remaining calls of ``mooncake.store`` that are written in Python.

Methods of ``MooncakeDistributedStore`` (bound by ``mooncake.store``, the
first argument is the client): ``save_tensor_to_safetensor``,
``load_tensor_from_safetensor``, ``init_all``, ``get_tensor_into_cuda``,
``batch_get_tensor_into_cuda``; and the module function
``bind_to_numa_node``.

safetensors files are read and written by our own code (Debian 12 has no
``safetensors`` package): an 8-byte little-endian header length, a JSON
header naming each tensor's dtype, shape and ``data_offsets`` (begin, end)
within the data that follows, an optional ``__metadata__`` map of strings,
then the data.  Tensors are little-endian; this host must be too.
"""

import ctypes
import ctypes.util
import json
import logging
import os
import struct
import sys
import warnings

ERR_INVALID_PARAMS = -600
ERR_OBJECT_NOT_FOUND = -704
ERR_FILE_OPEN_FAIL = -1101  # spec store.md 10: FILE_OPEN_FAIL
ERR_FILE_READ_FAIL = -1102
ERR_FILE_WRITE_FAIL = -1103

# safetensors dtype names <-> torch dtype attribute names
ST_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8",
    "U64": "uint64", "U32": "uint32", "U16": "uint16", "U8": "uint8",
    "BOOL": "bool", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
}
HEADER_LIMIT = 100 * 1024 * 1024  # a header bigger than this is not a safetensors file


def _torch():
    from mooncake._optional import require

    return require("torch", "the tensor calls of mooncake.store")


def _st_name(torch, dtype):
    for st, name in ST_DTYPES.items():
        if getattr(torch, name, None) == dtype:
            return st
    return None


def write_safetensors(path, tensors, metadata=None):
    """Writes {name: tensor} to path as a safetensors file."""
    torch = _torch()
    if sys.byteorder != "little":
        raise RuntimeError("safetensors files are little-endian; this host is not")
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        st = _st_name(torch, t.dtype)
        if st is None:
            raise ValueError("dtype %s has no safetensors name" % t.dtype)
        t = t.detach().cpu().contiguous()
        n = t.numel() * t.element_size()
        header[name] = {"dtype": st, "shape": list(t.shape), "data_offsets": [off, off + n]}
        blobs.append(t.reshape(-1).view(torch.uint8).numpy().tobytes() if n else b"")
        off += n
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # the data starts 8-byte aligned
    tmp = path + ".tmp.%d" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_safetensors(path):
    """[(name, tensor)] in the file's data order; ValueError for a bad file."""
    torch = _torch()
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("%s: shorter than a safetensors header" % path)
    (hlen,) = struct.unpack_from("<Q", data)
    if hlen > HEADER_LIMIT or 8 + hlen > len(data):
        raise ValueError("%s: header length %d past the file's %d bytes" % (path, hlen,
                                                                            len(data)))
    try:
        header = json.loads(data[8:8 + hlen].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError("%s: header is not JSON: %s" % (path, e)) from None
    if not isinstance(header, dict):
        raise ValueError("%s: header is not a JSON object" % path)
    base, body = 8 + hlen, len(data) - 8 - hlen
    out = []
    for name, d in header.items():
        if name == "__metadata__":
            continue
        try:
            st, shape, (b, e) = d["dtype"], d["shape"], d["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise ValueError("%s: tensor %r lacks dtype, shape or data_offsets"
                             % (path, name)) from None
        dt = getattr(torch, ST_DTYPES.get(st, ""), None)
        if dt is None:
            raise ValueError("%s: tensor %r has unknown dtype %r" % (path, name, st))
        if (not isinstance(shape, list) or
                not all(isinstance(x, int) and x >= 0 for x in shape) or
                not isinstance(b, int) or not isinstance(e, int) or not 0 <= b <= e <= body):
            raise ValueError("%s: tensor %r has a bad shape or offsets" % (path, name))
        numel = 1
        for x in shape:
            numel *= x
        esize = torch.empty(0, dtype=dt).element_size()
        if numel * esize != e - b:
            raise ValueError("%s: tensor %r: %d bytes for shape %s" % (path, name, e - b, shape))
        if numel:
            raw = torch.frombuffer(bytearray(data[base + b:base + e]), dtype=torch.uint8)
            t = raw.view(dt).reshape(shape)
        else:
            t = torch.empty(shape, dtype=dt)
        out.append((b, name, t))
    out.sort(key=lambda x: x[0])
    return [(n, t) for _, n, t in out]


def save_tensor_to_safetensor(store, key, file_name=None):
    if not isinstance(key, str) or not key:
        raise TypeError("key must be a non-empty str")
    if file_name is not None and not isinstance(file_name, str):
        raise TypeError("file_name must be a str or None")
    t = store.get_tensor(key)
    if t is None:
        return ERR_OBJECT_NOT_FOUND
    path = file_name or key
    try:
        write_safetensors(path, {key: t})
    except OSError as e:
        warnings.warn("save_tensor_to_safetensor: %s: %s" % (path, e), RuntimeWarning)
        return ERR_FILE_WRITE_FAIL
    except ValueError as e:
        warnings.warn("save_tensor_to_safetensor: %s" % e, RuntimeWarning)
        return ERR_INVALID_PARAMS
    return 0


def load_tensor_from_safetensor(store, key=None, file_name=None):
    # called with one argument, that argument is the file
    if file_name is None:
        key, file_name = None, key
    if not isinstance(file_name, str) or not file_name:
        raise TypeError("file_name must be a non-empty str")
    if key is not None and not isinstance(key, str):
        raise TypeError("key must be a str or None")
    try:
        tensors = read_safetensors(file_name)
    except OSError as e:
        warnings.warn("load_tensor_from_safetensor: %s: %s" % (file_name, e), RuntimeWarning)
        return None
    except ValueError as e:
        warnings.warn("load_tensor_from_safetensor: %s" % e, RuntimeWarning)
        return None
    if not tensors:
        return None
    t = dict(tensors).get(key) if key else None
    if t is None:
        t = tensors[0][1]
    rc = store.put_tensor(key or os.path.basename(file_name), t)
    return t if rc == 0 else None


def init_all(store, protocol, device_name, mount_segment_size=16777216):
    """The legacy one-call setup: this host as "localhost", the metadata
    server and master from MC_METADATA_SERVER and MC_MASTER_SERVER_ADDR
    (P2PHANDSHAKE and 127.0.0.1:50051 when unset), a 16 MiB local buffer."""
    if not isinstance(protocol, str) or not isinstance(device_name, str):
        raise TypeError("protocol and device_name must be str")
    if not isinstance(mount_segment_size, int) or isinstance(mount_segment_size, bool):
        raise TypeError("mount_segment_size must be an int")
    if mount_segment_size < 0:
        return ERR_INVALID_PARAMS
    return store.setup(os.environ.get("MC_LOCAL_HOSTNAME", "localhost"),
                       os.environ.get("MC_METADATA_SERVER", "P2PHANDSHAKE"),
                       mount_segment_size, 16 * 1024 * 1024, protocol, device_name,
                       os.environ.get("MC_MASTER_SERVER_ADDR", "127.0.0.1:50051"))


def _into_cuda(store, key, tensor, torch):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("tensor must be a torch.Tensor")
    if not tensor.is_cuda:
        warnings.warn("get_tensor_into_cuda needs a CUDA tensor (this torch %s CUDA)"
                      % ("has" if torch.cuda.is_available() else "has no"), RuntimeWarning)
        return ERR_INVALID_PARAMS
    if not tensor.is_contiguous():
        return ERR_INVALID_PARAMS
    t = store.get_tensor(key)
    if t is None:
        return ERR_OBJECT_NOT_FOUND
    n = t.numel() * t.element_size()
    if n > tensor.numel() * tensor.element_size():
        return ERR_INVALID_PARAMS
    if n:
        dst = tensor.reshape(-1).view(torch.uint8)[:n]
        dst.copy_(t.reshape(-1).view(torch.uint8))
    return n


def get_tensor_into_cuda(store, key, tensor):
    return _into_cuda(store, key, tensor, _torch())


def batch_get_tensor_into_cuda(store, keys, tensors_list):
    torch = _torch()
    keys, tl = list(keys), list(tensors_list)
    if len(keys) != len(tl):
        return [ERR_INVALID_PARAMS] * len(keys)
    return [_into_cuda(store, k, t, torch) for k, t in zip(keys, tl)]


def _numa_nodes():
    try:
        return sorted(int(d[4:]) for d in os.listdir("/sys/devices/system/node")
                      if d.startswith("node") and d[4:].isdigit())
    except OSError:
        return [0]


def _cpulist(node):
    with open("/sys/devices/system/node/node%d/cpulist" % node) as f:
        text = f.read().strip()
    cpus = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def bind_to_numa_node(node):
    """Binds the calling thread to the CPUs of a NUMA node and prefers its
    memory; problems are warnings, as upstream."""
    if not isinstance(node, int) or isinstance(node, bool):
        raise TypeError("node must be an int")
    nodes = _numa_nodes()
    if node not in nodes:
        warnings.warn("bind_to_numa_node: no NUMA node %d (nodes: %s)" % (node, nodes),
                      RuntimeWarning)
        return
    if len(nodes) == 1:
        warnings.warn("bind_to_numa_node: this host has one NUMA node; nothing to bind",
                      RuntimeWarning)
        return
    try:
        os.sched_setaffinity(0, _cpulist(node))  # 0: the calling thread
    except (OSError, ValueError) as e:
        warnings.warn("bind_to_numa_node: CPUs of node %d: %s" % (node, e), RuntimeWarning)
    name = ctypes.util.find_library("numa")
    try:
        lib = ctypes.CDLL(name or "libnuma.so.1")
        if lib.numa_available() < 0:
            raise OSError("numa_available() < 0")
        lib.numa_set_preferred(ctypes.c_int(node))
    except OSError as e:
        warnings.warn("bind_to_numa_node: memory of node %d not preferred (libnuma: %s)"
                      % (node, e), RuntimeWarning)


class MooncakeDistributedNoFRegister:
    """Registration of NVMe-oF namespaces as NoF SSD segments with the master
    (spec store.md 9.4).  Upstream builds it only with its experimental NoF
    tier; this master has no NoF tier, so both calls refuse: they log the
    cause and return -600 (INVALID_PARAMS, as a NoF put to this master
    does) without contacting anything."""

    INVALID_PARAMS = -600
    _WHY = ("NVMe-oF (NoF) segments are not supported: this build's master has no NoF "
            "tier; use the SSD tier (MOONCAKE_OFFLOAD_*) or mount_segment instead")

    def real_register(self, nqn="", nsid=1, traddr="", trsvcid=4420, base=0, size=1024,
                      master_server_addr="127.0.0.1:50051"):
        logging.getLogger("mooncake.store").error("real_register(%r, nsid=%r): %s", nqn,
                                                  nsid, self._WHY)
        return self.INVALID_PARAMS

    def real_unregister_by_endpoint(self, *args, **kwargs):
        logging.getLogger("mooncake.store").error("real_unregister_by_endpoint: %s", self._WHY)
        return self.INVALID_PARAMS


class _ReadOnly:
    """Attributes set once by the constructor, read-only afterwards (as
    upstream's pybind11 ``def_readonly`` fields)."""

    __slots__ = ()

    def __init__(self, **fields):
        for name in self.__slots__:
            object.__setattr__(self, name, fields.pop(name))
        if fields:
            raise TypeError("%s() got unexpected fields %s" % (type(self).__name__,
                                                               sorted(fields)))

    def __setattr__(self, name, value):
        raise AttributeError("%s.%s is read-only" % (type(self).__name__, name))

    def __repr__(self):
        return "<%s %s>" % (type(self).__name__,
                            " ".join("%s=%r" % (n, getattr(self, n)) for n in self.__slots__))


class QueryTaskResponse(_ReadOnly):
    """What ``query_task`` answers for a known task (spec store.md 9.4)."""

    __slots__ = ("id", "type", "status", "created_at_ms_epoch", "last_updated_at_ms_epoch",
                 "assigned_client", "message")


class DiskDescriptor(_ReadOnly):
    """A replica on the shared-filesystem (DFS) tier (spec store.md 9.4).
    This build has no such tier, so no replica carries one:
    ``ReplicaDescriptor.get_disk_descriptor()`` raises; the class is here so
    that code naming it imports and type-checks."""

    __slots__ = ("file_path", "object_size")
