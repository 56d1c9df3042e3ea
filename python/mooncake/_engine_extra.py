"""The parts of ``mooncake.engine`` written in Python.

``TransferEngine`` methods (bound by ``mooncake.engine``; the first argument
is the engine): ``transfer_write_on_cuda``, ``transfer_read_on_cuda``,
``batch_transfer_write_on_cuda``, ``batch_transfer_read_on_cuda``; and the
class ``SharedSegment``.

The ``*_on_cuda`` calls order a transfer after the work already queued on a
CUDA stream.  Upstream enqueues a host callback on the stream that runs the
transfer (and ends the process if it fails); ours waits for the stream, runs
the transfer synchronously and raises RuntimeError if it fails, so the
caller sees the error and later work on the stream runs after the bytes
moved (the caller's thread waits instead of the stream).  They need a
build with CUDA (``SUPPORT_CUDA``) and a torch with CUDA; otherwise they
raise RuntimeError saying which is missing.
"""

import json
import mmap as _mmap
import os
import uuid


def _support_cuda():
    from mooncake import engine

    return bool(engine.SUPPORT_CUDA)


def _wait_stream(fname, stream_ptr):
    if not isinstance(stream_ptr, int) or isinstance(stream_ptr, bool) or stream_ptr < 0:
        raise TypeError("%s(): stream_ptr must be an int >= 0" % fname)
    if not _support_cuda():
        raise RuntimeError("%s() needs a build with CUDA (mooncake.engine.SUPPORT_CUDA is "
                           "False)" % fname)
    try:
        import torch
    except ImportError:
        raise RuntimeError("%s() needs torch with CUDA to reach the stream" % fname) from None
    if not torch.cuda.is_available():
        raise RuntimeError("%s(): this torch sees no CUDA device" % fname)
    if stream_ptr:
        torch.cuda.ExternalStream(stream_ptr).synchronize()
    else:
        torch.cuda.synchronize()  # the legacy default stream waits for the device


def _is_uint(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _check_args(fname, batch, target_hostname, buffer, peer_buffer_address, length,
                transport_hint):
    """TypeError for an argument of the wrong type, before anything looks for
    CUDA (as the engine's own calls, and upstream's casts, check first)."""
    if not isinstance(target_hostname, str) or not isinstance(transport_hint, str):
        raise TypeError("%s(): target_hostname and transport_hint must be str" % fname)
    named = (("buffer", buffer), ("peer_buffer_address", peer_buffer_address),
             ("length", length))
    for name, v in named:
        if batch:
            if isinstance(v, (str, bytes)) or not hasattr(v, "__len__") or \
                    not all(_is_uint(x) for x in v):
                raise TypeError("%s(): %ss must be a list of ints >= 0" % (fname, name))
        elif not _is_uint(v):
            raise TypeError("%s(): %s must be an int >= 0" % (fname, name))


def _on_cuda(engine, fname, write, batch, target_hostname, buffer, peer_buffer_address,
             length, stream_ptr=0, transport_hint=""):
    _check_args(fname, batch, target_hostname, buffer, peer_buffer_address, length,
                transport_hint)
    _wait_stream(fname, stream_ptr)
    if batch:
        fn = engine.batch_transfer_sync_write if write else engine.batch_transfer_sync_read
    else:
        fn = engine.transfer_sync_write if write else engine.transfer_sync_read
    rc = fn(target_hostname, buffer, peer_buffer_address, length, transport_hint)
    if rc != 0:
        raise RuntimeError("%s(): transfer to %r failed (%d)" % (fname, target_hostname, rc))


def transfer_write_on_cuda(engine, *args, **kw):
    _on_cuda(engine, "transfer_write_on_cuda", True, False, *args, **kw)


def transfer_read_on_cuda(engine, *args, **kw):
    _on_cuda(engine, "transfer_read_on_cuda", False, False, *args, **kw)


def batch_transfer_write_on_cuda(engine, *args, **kw):
    _on_cuda(engine, "batch_transfer_write_on_cuda", True, True, *args, **kw)


def batch_transfer_read_on_cuda(engine, *args, **kw):
    _on_cuda(engine, "batch_transfer_read_on_cuda", False, True, *args, **kw)


BLOB_VERSION = 1


class SharedSegment:
    """Host memory that one rank creates and every rank of a group maps.

    ``seg, blob = SharedSegment.create(name, size, world_size, rank_id,
    owner_rank=0, device_id=0, mmap=True, host_register=False)``; the ranks
    exchange their blobs (an all_gather of bytes) and each calls
    ``seg.complete(blobs)``; then ``seg.ready()`` is True and
    ``base_addr()`` is this process's address of the shared bytes.  The
    owner's blob names a POSIX shared-memory file; the others' blobs are
    empty.  The file is unlinked when the owner closes its segment (or the
    owner process ends), after which ranks that mapped it keep the memory.

    Host memory only: ``mmap=False`` (device memory) and
    ``host_register=True`` (cudaHostRegister) raise RuntimeError in this
    build; ``device_id`` names the GPU those would use and is otherwise
    unused.  ``device_addr()`` is 0 (no device mapping).
    """

    def __init__(self, name, size, world_size, rank_id, owner_rank):
        self._name, self._size = name, size
        self._world, self._rank, self._owner = world_size, rank_id, owner_rank
        self._map = None
        self._path = None
        self._ready = False

    @staticmethod
    def supported():
        return os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK)

    @classmethod
    def create(cls, name, size, world_size, rank_id, owner_rank=0, device_id=0, mmap=True,
               host_register=False):
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError("SharedSegment name must be a non-empty str without '/'")
        for what, v in (("size", size), ("world_size", world_size), ("rank_id", rank_id),
                        ("owner_rank", owner_rank), ("device_id", device_id)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError("SharedSegment %s must be an int" % what)
        if size <= 0 or world_size < 1 or not 0 <= rank_id < world_size or \
                not 0 <= owner_rank < world_size:
            raise ValueError("SharedSegment needs size > 0 and 0 <= rank_id, owner_rank < "
                             "world_size")
        for what, v in (("mmap", mmap), ("host_register", host_register)):
            # upstream's pybind11 bool: None, bools and numbers; a str is no flag
            if v is not None and not hasattr(type(v), "__bool__"):
                raise TypeError("SharedSegment %s must be a bool, not %s" % (what,
                                                                           type(v).__name__))
        if not mmap:
            raise RuntimeError("SharedSegment: mmap=False (device memory) needs a GPU build")
        if host_register:
            raise RuntimeError("SharedSegment: host_register=True needs a CUDA build")
        if not cls.supported():
            raise RuntimeError("SharedSegment: /dev/shm is not writable here")
        seg = cls(name, size, world_size, rank_id, owner_rank)
        blob = b""
        if rank_id == owner_rank:
            path = "/dev/shm/mc-seg-%s-%d-%s" % (name, os.getpid(), uuid.uuid4().hex[:12])
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.ftruncate(fd, size)
                seg._map = _mmap.mmap(fd, size, _mmap.MAP_SHARED)
            except OSError:
                os.unlink(path)
                raise
            finally:
                os.close(fd)
            seg._path = path
            blob = json.dumps({"v": BLOB_VERSION, "name": name, "path": path,
                               "size": size}).encode()
        return seg, blob

    def complete(self, blobs):
        if self._ready:
            return
        blobs = list(blobs)
        if len(blobs) != self._world:
            raise ValueError("SharedSegment.complete: %d blobs for world_size %d"
                             % (len(blobs), self._world))
        if self._rank != self._owner:
            try:
                d = json.loads(bytes(blobs[self._owner]).decode())
                path, size = d["path"], d["size"]
                ok = d.get("v") == BLOB_VERSION and d.get("name") == self._name
            except (ValueError, KeyError, TypeError, UnicodeDecodeError):
                raise ValueError("SharedSegment.complete: the owner's blob is not one") \
                    from None
            if not ok or size != self._size or not isinstance(path, str) or \
                    not path.startswith("/dev/shm/mc-seg-"):
                raise ValueError("SharedSegment.complete: the owner's blob is for another "
                                 "segment")
            fd = os.open(path, os.O_RDWR)
            try:
                if os.fstat(fd).st_size != size:
                    raise ValueError("SharedSegment.complete: %s is not %d bytes"
                                     % (path, size))
                self._map = _mmap.mmap(fd, size, _mmap.MAP_SHARED)
            finally:
                os.close(fd)
        self._ready = True

    def ready(self):
        return self._ready

    def _addr(self):
        import ctypes

        return ctypes.addressof(ctypes.c_char.from_buffer(self._map))

    def base_addr(self):
        return self._addr() if self._ready and self._map is not None else 0

    def device_addr(self):
        return 0

    def size(self):
        return self._size

    def close(self):
        """Unmaps (the owner also unlinks the file)."""
        if self._path:
            try:
                os.unlink(self._path)
            except FileNotFoundError:
                pass
            self._path = None
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a view of it is still alive: leave the mapping
                pass
            self._map = None
        self._ready = False

    def __del__(self):
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass
