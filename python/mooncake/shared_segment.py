"""Host memory allocated once and mapped into every tensor-parallel rank.

``create_shared_segment(name, blocks, world_size, rank_id, owner_rank=0,
device_id=None, comm_group=None, mmap=True)`` lays the blocks
(``{block: {"count": n, "shape": (...), "dtype": torch or numpy dtype}}``)
out back to back, each at a 4 KiB-aligned offset.  The owner rank creates a
POSIX shared-memory file (``/dev/shm``) of the total size; the ranks
exchange the owner's handle (all_gather over ``comm_group``, a
``torch.distributed`` group, the default one when None), every other rank
maps the file, and after a second all_gather (everyone mapped) the owner
unlinks it, so the memory lives exactly as long as some rank maps it.
With ``world_size == 1`` no group is needed.

``SharedSegment.tensors(block)`` is a torch tensor of shape ``(count,
*shape)`` over the shared memory, ``.arrays(block)`` the numpy view;
``base_addr()``, ``size()``, ``layout``, ``close()``.  Every rank sees the
same bytes: a write by one is visible to the others (synchronise with the
group as for any shared memory).

Differences from upstream (which maps the memory through the engine's
``SharedSegment`` and can place it on a GPU): ``device_id`` other than None
and ``mmap=False`` are refused with SharedSegmentError rather than
ignored; this build has host memory only.
"""

import math
import mmap as _mmap
import os
import uuid

from mooncake._optional import optional, require

__all__ = ["SharedSegment", "SharedSegmentError", "create_shared_segment",
           "shared_segment_supported", "ALIGN"]

ALIGN = 4096
SHM_DIR = "/dev/shm"


class SharedSegmentError(RuntimeError):
    pass


class SharedSegmentTypeError(SharedSegmentError, TypeError):
    """An argument of the wrong type: a SharedSegmentError (as upstream's
    callers catch) that is also the TypeError wrong types raise."""


def shared_segment_supported():
    """True where host shared memory can be created (a writable /dev/shm)."""
    return os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK)


def _itemsize(dtype):
    torch = optional("torch")
    if torch is not None and isinstance(dtype, torch.dtype):
        return torch.empty(0, dtype=dtype).element_size()
    np = require("numpy", "mooncake.shared_segment")
    return np.dtype(dtype).itemsize


def _layout(blocks):
    if not isinstance(blocks, dict):
        raise SharedSegmentTypeError("blocks must be a dict name -> {count, shape, dtype}")
    if not blocks:
        raise SharedSegmentError("blocks must be a non-empty dict name -> {count, shape, dtype}")
    layout, off = {}, 0
    for name, b in blocks.items():
        if not isinstance(b, dict) or set(b) != {"count", "shape", "dtype"}:
            raise SharedSegmentError(f"block {name!r} needs exactly count, shape and dtype")
        count, shape = b["count"], tuple(b["shape"])
        if not isinstance(count, int) or count <= 0 or \
                not all(isinstance(d, int) and d > 0 for d in shape):
            raise SharedSegmentError(f"block {name!r}: count and shape must be positive ints")
        try:
            nbytes = count * math.prod(shape) * _itemsize(b["dtype"])
        except TypeError as e:
            raise SharedSegmentError(f"block {name!r}: bad dtype {b['dtype']!r}") from e
        off = (off + ALIGN - 1) // ALIGN * ALIGN
        layout[name] = {"offset": off, "nbytes": nbytes, "count": count, "shape": shape,
                        "dtype": b["dtype"]}
        off += nbytes
    return layout, (off + ALIGN - 1) // ALIGN * ALIGN


class SharedSegment:
    def __init__(self, name, layout, size, mm, rank_id, owner_rank):
        self.name, self.layout, self._size, self._mm = name, layout, size, mm
        self.rank_id, self.owner_rank = rank_id, owner_rank
        np = require("numpy", "mooncake.shared_segment")
        self._buf = np.frombuffer(mm, dtype=np.uint8)

    def size(self):
        return self._size

    def base_addr(self):
        return self._buf.ctypes.data

    def _block(self, name):
        try:
            return self.layout[name]
        except KeyError:
            raise KeyError(f"no block {name!r} in shared segment {self.name!r}") from None

    def arrays(self, name):
        b = self._block(name)
        torch = optional("torch")
        dt = b["dtype"]
        if torch is not None and isinstance(dt, torch.dtype):
            if dt == torch.bfloat16:
                raise TypeError(f"block {name!r} is bfloat16, which numpy lacks; use tensors()")
            dt = torch.empty(0, dtype=dt).numpy().dtype
        return self._buf[b["offset"]:b["offset"] + b["nbytes"]].view(dt).reshape(
            (b["count"], *b["shape"]))

    def tensors(self, name):
        torch = require("torch", "SharedSegment.tensors")
        b = self._block(name)
        raw = torch.from_numpy(self._buf[b["offset"]:b["offset"] + b["nbytes"]])
        dt = b["dtype"] if isinstance(b["dtype"], torch.dtype) else \
            torch.from_numpy(self.arrays(name)[:0]).dtype
        return raw.view(dt).view((b["count"], *b["shape"]))

    def close(self):
        """Drop this rank's mapping (views taken before must not be used)."""
        if self._mm is not None:
            self._buf = None
            try:
                self._mm.close()
            except BufferError as e:
                raise SharedSegmentError(f"views of segment {self.name!r} are still alive") from e
            self._mm = None


def _all_gather(obj, world_size, comm_group):
    if world_size == 1:
        return [obj]
    dist = require("torch", "a shared segment over several ranks").distributed
    if not dist.is_available() or not dist.is_initialized():
        raise SharedSegmentError("world_size > 1 needs torch.distributed initialised "
                                 "(or comm_group)")
    out = [None] * world_size
    dist.all_gather_object(out, obj, group=comm_group)
    return out


def create_shared_segment(name, blocks, world_size, rank_id, owner_rank=0, device_id=None,
                          comm_group=None, mmap=True):
    """Collective: every rank of ``comm_group`` calls it with the same
    arguments (but its own ``rank_id``); returns this rank's SharedSegment."""
    if not isinstance(name, str):
        raise SharedSegmentTypeError(f"name must be a str, not {type(name).__name__}")
    if not all(isinstance(v, int) and not isinstance(v, bool)
               for v in (world_size, rank_id, owner_rank)):
        raise SharedSegmentTypeError("world_size, rank_id and owner_rank must be ints")
    if device_id is not None:
        raise SharedSegmentError("device memory (device_id) needs a CUDA build; "
                                 "this build has host shared segments only")
    if mmap is not True:
        raise SharedSegmentError("mmap=False (pinned private memory) is not supported; "
                                 "host segments are always mapped")
    if not isinstance(name, str) or not name:
        raise SharedSegmentError("name must be a non-empty string")
    if not (isinstance(world_size, int) and world_size >= 1 and isinstance(rank_id, int)
            and 0 <= rank_id < world_size and isinstance(owner_rank, int)
            and 0 <= owner_rank < world_size):
        raise SharedSegmentError(f"bad ranks: world_size={world_size!r} rank_id={rank_id!r} "
                                 f"owner_rank={owner_rank!r}")
    if not shared_segment_supported():
        raise SharedSegmentError(f"{SHM_DIR} is not writable")
    layout, size = _layout(blocks)
    handle, path, fd = None, None, -1
    if rank_id == owner_rank:
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:64]
        path = os.path.join(SHM_DIR, f"mooncake-seg-{safe}-{uuid.uuid4().hex[:12]}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
        except OSError:
            os.close(fd)
            os.unlink(path)
            raise
        handle = {"path": path, "size": size}
    mm = None
    try:
        handles = _all_gather(handle, world_size, comm_group)
        owner = handles[owner_rank]
        err = None
        if owner is None or owner["size"] != size:
            err = "ranks disagree on the segment's layout or owner"
        else:
            try:
                if fd < 0:
                    fd = os.open(owner["path"], os.O_RDWR)
                mm = _mmap.mmap(fd, size, _mmap.MAP_SHARED, _mmap.PROT_READ | _mmap.PROT_WRITE)
            except OSError as e:
                err = f"rank {rank_id} cannot map {owner['path']}: {e}"
        # every rank reports, so none waits for a rank that failed
        errs = [e for e in _all_gather(err, world_size, comm_group) if e]
        if errs:
            if mm is not None:
                mm.close()
            raise SharedSegmentError("; ".join(errs))
    finally:
        if fd >= 0:
            os.close(fd)
        if path is not None:
            os.unlink(path)
    return SharedSegment(name, layout, size, mm, rank_id, owner_rank)
