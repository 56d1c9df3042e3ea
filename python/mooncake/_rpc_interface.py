"""Upstream's RPC messaging helper of ``mooncake.engine`` (spec
transfer-engine.md 2.3): ``RpcInterface`` (alias ``CoroRPCInterface``),
``ReceivedData``, ``ReceivedTensor``, ``create_rpc_client``,
``create_rpc_server``.

A process sends bytes or a tensor to another process's server by
``"host:port"``; the server hands each message to the callback the user set
(``set_data_receive_callback`` / ``set_tensor_receive_callback``) and
answers once the callback returned, so ``send_data`` returning 0 means the
peer's callback ran.  Upstream carries this over coro_rpc; ours is written
from the spec's behaviour over our own framing on plain TCP, in Python (the
work per message is a few syscalls; the bytes move with ``sendall`` and
``recv_into`` straight from and into the caller's and the receiver's
buffers).  docs/python.md, "RPC helpers", lists what differs.

Wire (docs/protocol.md, "RPC helper messages").  With a cluster secret
(``MC_AUTH_SECRET_FILE`` / ``MC_AUTH_SECRET``) each connection opens with
the authentication handshake of ``mooncake._auth`` on channel ``rpc-msg``;
without one no handshake.  Then frames, each a 20-byte header::

    magic "MCRP" | version 1 (u8) | kind (u8) | flags 0 (u16) |
    meta length (u32) | payload length (u64)          (little-endian)

followed by meta and payload.  Kinds: 1 DATA (no meta; the payload is the
message), 2 TENSOR (meta: dtype length u8, dtype text such as
"torch.float32", ndim u8, ndim u64 dimensions; the payload is the
C-contiguous bytes, exactly prod(shape) * itemsize of them), 3 REPLY (server
to client; meta: status i32; no payload).  A client sends one message and
waits for its reply before the next on that connection; it keeps up to
``pool_size`` idle connections per target.

Threads: the server accepts on one thread (the caller's for
``start_server``, its own for ``start_server_async``) and serves each
connection on a thread of its own, which runs the callbacks; sends run on
the caller's thread, the ``*_async`` forms on a pool of ``pool_size``
threads that resolve the asyncio future through ``loop.call_soon_threadsafe``.
The idle-connection pool and the server's connection set are under one lock
each.

What it must never do: trust a header (every field is checked before a
byte of meta or payload is read, and a frame that stalls past
``timeout_seconds`` closes its connection: no hang, ``decode_*`` raise
``RpcProtocolError`` naming the field); read a CUDA tensor's address from
the host (a non-CUDA build refuses device tensors with RuntimeError); or
import anything heavy when ``mooncake.engine`` loads (torch only when a
tensor is rebuilt, ctypes when one is sent).
"""

import logging
import math
import mmap
import select
import selectors
import socket
import struct
import sys
import threading
import time

from mooncake import _auth

__all__ = ["RpcInterface", "CoroRPCInterface", "ReceivedData", "ReceivedTensor",
           "RpcProtocolError", "create_rpc_client", "create_rpc_server"]

log = logging.getLogger("mooncake.rpc")

CHANNEL = "rpc-msg"
MAGIC = b"MCRP"
VERSION = 1
KIND_DATA, KIND_TENSOR, KIND_REPLY = 1, 2, 3
HDR = struct.Struct("<4sBBHIQ")
META_MAX = 1 + 255 + 1 + 8 * 32  # dtype text up to 255 bytes, up to 32 dimensions
MAX_DIMS = 32
# The largest message a server takes; a header announcing more closes the
# connection.  A payload above SMALL is received into anonymous memory the
# kernel commits page by page as bytes arrive (bytearray(n) would write n
# zeros first), so a header that lies about its size costs address space,
# not memory, until the frame completes or times out.
MAX_MESSAGE_BYTES = 16 << 30
SMALL = 1 << 20
SPARE_MAX = 64 << 20  # the largest payload buffer a connection keeps for reuse

# dtype text (str(tensor.dtype)) -> bytes per element: what a TENSOR frame
# may carry; the receiver checks the payload against shape and itemsize.
DTYPES = {
    "torch.bool": 1, "torch.uint8": 1, "torch.int8": 1, "torch.int16": 2, "torch.int32": 4,
    "torch.int64": 8, "torch.float16": 2, "torch.bfloat16": 2, "torch.float32": 4,
    "torch.float64": 8, "torch.complex64": 8, "torch.complex128": 16,
    "torch.float8_e4m3fn": 1, "torch.float8_e5m2": 1,
}


class RpcProtocolError(ConnectionError):
    """Bytes on an RPC connection that are no frame of this protocol, or a
    frame cut short."""


# ---- the codec ----------------------------------------------------------------------


def encode_header(kind, meta_len, payload_len):
    return HDR.pack(MAGIC, VERSION, kind, 0, meta_len, payload_len)


_META_RANGE = {KIND_DATA: (0, 0), KIND_REPLY: (4, 4), KIND_TENSOR: (2, META_MAX)}


def decode_header(buf, kinds, max_payload=MAX_MESSAGE_BYTES):
    """(kind, meta length, payload length) of a 20-byte header; kinds: the
    kinds this end accepts."""
    if len(buf) != HDR.size:
        raise RpcProtocolError(f"rpc: a header is {HDR.size} bytes, got {len(buf)}")
    magic, ver, kind, flags, meta_len, payload_len = HDR.unpack(buf)
    if magic != MAGIC:
        what = " (an authentication frame: the peer has a cluster secret, this end none)" \
            if magic == b"MCAU" else ""
        raise RpcProtocolError(f"rpc: bad magic {bytes(magic)!r}{what}")
    if ver != VERSION:
        raise RpcProtocolError(f"rpc: unsupported version {ver}")
    if kind not in kinds:
        raise RpcProtocolError(f"rpc: unexpected frame kind {kind}")
    if flags:
        raise RpcProtocolError(f"rpc: unknown flags {flags:#x}")
    lo, hi = _META_RANGE[kind]
    if not lo <= meta_len <= hi:
        raise RpcProtocolError(f"rpc: meta length {meta_len} is out of range for kind {kind}")
    if kind == KIND_REPLY and payload_len:
        raise RpcProtocolError("rpc: a reply carries no payload")
    if payload_len > max_payload:
        raise RpcProtocolError(f"rpc: a payload of {payload_len} bytes is over the limit "
                               f"({max_payload})")
    return kind, meta_len, payload_len


def encode_tensor_meta(dtype, shape):
    d = dtype.encode()
    if len(d) > 255 or len(shape) > MAX_DIMS:
        raise ValueError("rpc: dtype text or rank too large")
    return struct.pack("<B", len(d)) + d + struct.pack(f"<B{len(shape)}Q", len(shape), *shape)


def decode_tensor_meta(meta, payload_len):
    """(dtype, shape) of a TENSOR frame's meta, checked against its payload."""
    meta = bytes(meta)
    if len(meta) < 2 or len(meta) < 1 + meta[0] + 1:
        raise RpcProtocolError("rpc: tensor meta is truncated")
    dlen = meta[0]
    try:
        dtype = meta[1:1 + dlen].decode("ascii")
    except UnicodeDecodeError:
        raise RpcProtocolError("rpc: tensor dtype is not ASCII text") from None
    if dtype not in DTYPES:
        raise RpcProtocolError(f"rpc: unknown tensor dtype {dtype!r}")
    ndim = meta[1 + dlen]
    if ndim > MAX_DIMS or len(meta) != 2 + dlen + 8 * ndim:
        raise RpcProtocolError(f"rpc: tensor meta of {len(meta)} bytes does not hold "
                               f"{ndim} dimensions")
    shape = list(struct.unpack_from(f"<{ndim}Q", meta, 2 + dlen))
    if math.prod(shape) * DTYPES[dtype] != payload_len:
        raise RpcProtocolError(f"rpc: tensor {dtype}{shape} needs "
                               f"{math.prod(shape) * DTYPES[dtype]} bytes, the frame "
                               f"carries {payload_len}")
    return dtype, shape


def decode_reply(meta):
    return struct.unpack("<i", meta)[0]


REPLY_OK = encode_header(KIND_REPLY, 4, 0) + struct.pack("<i", 0)


def _alloc(n):
    if n <= SMALL:
        return bytearray(n)
    try:
        return mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE)
    except OSError as e:
        raise MemoryError(f"rpc: no room for a payload of {n} bytes: {e}") from None


def read_exact(recv_into, n, what, alloc=_alloc):
    """n bytes (alloc(n): a bytearray, or an anonymous mmap above SMALL)
    through recv_into (a socket's, or any callable filling a memoryview and
    returning the count, 0 at the end); RpcProtocolError when the stream
    ends first."""
    buf = alloc(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = recv_into(view[got:])
        if k == 0:
            raise RpcProtocolError(f"rpc: the connection closed inside a frame ({what}: "
                                   f"{got} of {n} bytes)")
        got += k
    return buf


def read_frame(recv_into, kinds, max_payload=MAX_MESSAGE_BYTES, alloc=_alloc):
    """One frame: (kind, meta, payload), or None when the stream ended
    cleanly before a frame began; alloc(n) gives the payload's buffer."""
    first = bytearray(HDR.size)
    k = recv_into(memoryview(first))
    if k == 0:
        return None
    if k < HDR.size:
        first[k:] = read_exact(recv_into, HDR.size - k, "header")
    kind, meta_len, payload_len = decode_header(first, kinds, max_payload)
    meta = read_exact(recv_into, meta_len, "meta") if meta_len else b""
    if kind == KIND_TENSOR:
        decode_tensor_meta(meta, payload_len)  # before the payload is taken
    payload = read_exact(recv_into, payload_len, "payload", alloc) if payload_len \
        else bytearray()
    return kind, bytes(meta), payload


def _set_io_timeout(sock, seconds):
    """A blocking socket whose receives and sends give up after seconds
    (SO_RCVTIMEO / SO_SNDTIMEO: one syscall per receive, where Python's own
    timeouts poll before each), raising socket.timeout then."""
    sock.settimeout(None)
    tv = struct.pack("ll", int(seconds), int((seconds % 1) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)


class _Deadline:
    """recv_into for one frame on a socket of _set_io_timeout (the
    interface's timeout_seconds): from the first byte on the frame must
    arrive within that time (checked after each receive, so a trickling
    peer is cut within twice it).
    idle: a callable, or None; before the first byte a receive that times
    out is retried while idle() is true (a kept connection with nothing to
    say), else it is the error."""

    __slots__ = ("sock", "timeout", "idle", "end")

    def __init__(self, sock, timeout, idle=None):
        self.sock, self.timeout, self.idle = sock, timeout, idle
        self.end = None if idle else time.monotonic() + timeout

    def __call__(self, view):
        while self.end is None:
            try:
                n = self.sock.recv_into(view)
            except (socket.timeout, BlockingIOError):
                if self.idle():
                    continue
                raise socket.timeout("rpc: no frame within the timeout") from None
            self.end = time.monotonic() + self.timeout
            return n
        if time.monotonic() > self.end:
            raise socket.timeout("rpc: frame not complete within the timeout")
        try:
            return self.sock.recv_into(view)
        except BlockingIOError:  # SO_RCVTIMEO ran out
            raise socket.timeout("rpc: frame not complete within the timeout") from None


# ---- what a callback receives -------------------------------------------------------


class ReceivedData:
    """A DATA message: ``source_address`` ("ip:port" of the sender's
    connection), ``data_size``, ``get_bytes()``, ``get_memory_view()``
    (read-only, no copy)."""

    __slots__ = ("source_address", "data_size", "_data")

    def __init__(self, source_address="", data=b""):
        self.source_address = source_address
        self._data = data
        self.data_size = len(data)

    def get_bytes(self):
        return bytes(self._data)

    def get_memory_view(self):
        return memoryview(self._data).toreadonly()

    def __repr__(self):
        return f"ReceivedData(source_address={self.source_address!r}, data_size={self.data_size})"


class ReceivedTensor:
    """A TENSOR message: ``source_address``, ``shape`` (list of ints),
    ``dtype`` (text, "torch.float32"), ``total_bytes``, ``get_data_size()``,
    ``get_data_as_bytes()``, ``get_memory_view()``; ours also
    ``rebuild_tensor()``: a CPU torch tensor over the received bytes."""

    __slots__ = ("source_address", "shape", "dtype", "total_bytes", "_data")

    def __init__(self, source_address="", data=b"", shape=(), dtype=""):
        self.source_address = source_address
        self._data = data
        self.shape = list(shape)
        self.dtype = dtype
        self.total_bytes = len(data)

    def get_data_size(self):
        return len(self._data)

    def get_data_as_bytes(self):
        return bytes(self._data)

    def get_memory_view(self):
        return memoryview(self._data).toreadonly()

    def rebuild_tensor(self):
        from mooncake._optional import require
        torch = require("torch", "ReceivedTensor.rebuild_tensor()")
        dt = getattr(torch, self.dtype.rpartition(".")[2])
        if not self._data:
            return torch.empty(self.shape, dtype=dt)
        buf = self._data if isinstance(self._data, (bytearray, mmap.mmap)) \
            else bytearray(self._data)
        return torch.frombuffer(buf, dtype=dt).reshape(self.shape)

    def __repr__(self):
        return (f"ReceivedTensor(source_address={self.source_address!r}, shape={self.shape}, "
                f"dtype={self.dtype!r}, total_bytes={self.total_bytes})")


# ---- helpers ------------------------------------------------------------------------


def parse_address(addr, fname="rpc"):
    """("host", port) of "host:port" or "[v6]:port"; ValueError else."""
    if not isinstance(addr, str):
        raise TypeError(f"{fname}(): address must be str, not {type(addr).__name__}")
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{fname}(): address {addr!r} is not host:port")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return host or "0.0.0.0", int(port)


def _fmt(addr):
    host, port = addr[0], addr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _support_cuda():
    from mooncake import engine
    return bool(engine.SUPPORT_CUDA)


def _tensor_parts(fname, tensor):
    """(meta, payload buffer, keep-alive) of a tensor: torch duck typing as
    upstream (data_ptr, numel, element_size, shape, dtype)."""
    if not all(hasattr(tensor, a) for a in ("data_ptr", "numel", "element_size", "shape",
                                             "dtype")):
        raise TypeError(f"{fname}(): tensor must be a torch.Tensor, not "
                        f"{type(tensor).__name__}")
    dev = getattr(tensor, "device", None)
    if dev is not None and getattr(dev, "type", "cpu") != "cpu":
        if dev.type != "cuda":
            raise RuntimeError(f"{fname}(): a {dev.type} tensor cannot be sent; copy it to the "
                               "CPU first")
        if not _support_cuda():
            raise RuntimeError(f"{fname}(): a CUDA tensor needs a build with CUDA "
                               "(mooncake.engine.SUPPORT_CUDA is False); copy it to the CPU "
                               "first")
        tensor = tensor.detach().to("cpu")  # staged through host memory
    dtype = str(tensor.dtype)
    if dtype not in DTYPES:
        raise TypeError(f"{fname}(): dtype {dtype} cannot be sent")
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    nbytes = tensor.numel() * tensor.element_size()
    meta = encode_tensor_meta(dtype, [int(n) for n in tensor.shape])
    if nbytes == 0:
        return meta, memoryview(b""), tensor
    import ctypes
    arr = (ctypes.c_char * nbytes).from_address(tensor.data_ptr())
    return meta, memoryview(arr).cast("B"), tensor


def _data_buffer(fname, data):
    """data (bytes-like) as a flat memoryview of bytes (a copy only when it
    is not contiguous)."""
    try:
        mv = memoryview(data)
    except TypeError:
        raise TypeError(f"{fname}(): data must be bytes-like, not "
                        f"{type(data).__name__}") from None
    if not mv.c_contiguous:
        mv = memoryview(mv.tobytes())
    return mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv


def _check_count(fname, what, v):
    if type(v) is not int or v < 0:
        raise TypeError(f"{fname}(): {what} must be an int >= 0")
    return v


# ---- the interface ------------------------------------------------------------------


class RpcInterface:
    """A client, a server, or both (see the module's text)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._listen = None  # (host, port) to serve on
        self._timeout = 30.0
        self._pool_size = 10
        self._secret = None
        self._idle = {}  # target text -> [socket]
        self._executor = None
        self._data_cb = None
        self._tensor_cb = None
        self._srv = None  # the listening socket while serving
        self._srv_port = 0
        self._wake = None  # socketpair waking the accept loop
        self._conns = set()
        self._accept_thread = None
        self._serving = False
        self.max_message_bytes = MAX_MESSAGE_BYTES
        self.auth_refused = 0  # connections refused by the handshake (server side)

    # -- set-up --

    def initialize(self, listen_address="", thread_count=0, timeout_seconds=30, pool_size=10):
        """A client (listen_address "") or a server of "host:port" too; the
        server listens from start_server*.  thread_count is upstream's I/O
        thread count: ours serves each connection on its own thread.
        False when the address or the cluster secret is unusable."""
        if not isinstance(listen_address, str):
            raise TypeError("initialize(): listen_address must be str")
        for what, v in (("thread_count", thread_count), ("timeout_seconds", timeout_seconds),
                        ("pool_size", pool_size)):
            _check_count("initialize", what, v)
        self.stop_server()
        self._drop_idle()
        try:
            listen = parse_address(listen_address, "initialize") if listen_address else None
            secret = _auth.load_secret()
        except ValueError as e:
            log.error("%s", e)
            return False
        self._listen, self._secret = listen, secret
        self._timeout = float(timeout_seconds or 30)
        self._pool_size = max(1, pool_size)
        return True

    def initialize_client(self, pool_size=10, timeout_seconds=30):
        return self.initialize("", 0, timeout_seconds, pool_size)

    def initialize_server(self, listen_address, thread_count=8, timeout_seconds=30):
        return self.initialize(listen_address, thread_count, timeout_seconds, 4)

    # -- the server --

    def start_server(self):
        """Serve on the caller's thread until stop_server (from another
        thread or a callback); True once stopped, False if it could not
        listen."""
        if not self._bind():
            return False
        self._accept_loop()
        return True

    def start_server_async(self):
        """Listen now and serve from a thread of its own; False if it could
        not listen."""
        if not self._bind():
            return False
        self._accept_thread = threading.Thread(target=self._accept_loop, name="mc-rpc-accept",
                                               daemon=True)
        self._accept_thread.start()
        return True

    def stop_server(self):
        with self._lock:
            if not self._serving:
                return
            self._serving = False
            conns = list(self._conns)
            wake = self._wake
        try:
            wake[1].send(b"x")
        except OSError:
            pass
        for c in conns:  # wakes their threads' recv
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        t = self._accept_thread
        if t is not None and t is not threading.current_thread():
            t.join()
        self._accept_thread = None

    def get_server_port(self):
        """Ours: the port being served (the one chosen for port 0), 0 when
        not serving."""
        return self._srv_port if self._serving else 0

    def _bind(self):
        if self._listen is None:
            log.error("start_server(): not initialized with a listen address")
            return False
        with self._lock:
            if self._serving:
                log.error("start_server(): already serving on port %d", self._srv_port)
                return False
        host, port = self._listen
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
            fam, _, _, _, sa = infos[0]
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(sa)
            s.listen(128)
        except OSError as e:
            log.error("start_server(): cannot listen on %s: %s", _fmt(self._listen), e)
            return False
        with self._lock:
            self._srv, self._srv_port = s, s.getsockname()[1]
            self._wake = socket.socketpair()
            self._serving = True
        if self._secret is None and host not in ("127.0.0.1", "::1", "localhost"):
            log.warning("rpc server on %s without a cluster secret: anyone who reaches it can "
                        "send messages (set MC_AUTH_SECRET_FILE; docs/security.md)",
                        _fmt((host, self._srv_port)))
        return True

    def _accept_loop(self):
        srv, wake = self._srv, self._wake
        sel = selectors.DefaultSelector()
        sel.register(srv, selectors.EVENT_READ)
        sel.register(wake[0], selectors.EVENT_READ)
        try:
            while self._serving:
                for key, _ in sel.select():
                    if key.fileobj is wake[0]:
                        continue
                    try:
                        c, addr = srv.accept()
                    except OSError:
                        continue
                    with self._lock:
                        if not self._serving:
                            c.close()
                            break
                        self._conns.add(c)
                    threading.Thread(target=self._serve, args=(c, _fmt(addr)),
                                     name="mc-rpc-conn", daemon=True).start()
        finally:
            sel.close()
            srv.close()
            for s in wake:
                s.close()

    def _serve(self, c, peer):
        try:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _set_io_timeout(c, self._timeout)
            if self._secret is not None:
                try:
                    _auth.server_handshake(c, self._secret, CHANNEL)
                except (_auth.AuthError, OSError) as e:  # BlockingIOError: it stalled
                    with self._lock:
                        self.auth_refused += 1
                    log.warning("rpc: connection from %s refused: %s", peer, e)
                    return
            spare = []  # a large payload buffer nobody kept, for the next frame

            def alloc(n):
                return spare.pop() if spare and len(spare[0]) == n else _alloc(n)

            def serving():
                return self._serving

            while self._serving:
                fr = read_frame(_Deadline(c, self._timeout, serving),
                                (KIND_DATA, KIND_TENSOR), self.max_message_bytes, alloc)
                if fr is None:
                    return
                kind, meta, payload = fr
                del fr
                self._deliver(peer, kind, meta, payload)
                # the callback kept no reference (nor a view, nor a tensor
                # over it): its pages are reused instead of faulted in anew
                if isinstance(payload, mmap.mmap) and len(payload) <= SPARE_MAX and \
                        sys.getrefcount(payload) == 2:
                    spare[:] = [payload]
                del payload
                c.sendall(REPLY_OK)
        except RpcProtocolError as e:
            log.warning("rpc: connection from %s closed: %s", peer, e)
        except socket.timeout:
            log.warning("rpc: connection from %s closed: no complete frame within %g s", peer,
                        self._timeout)
        except MemoryError:
            log.warning("rpc: connection from %s closed: no memory for its message", peer)
        except OSError as e:
            if self._serving:
                log.info("rpc: connection from %s closed: %s", peer, e)
        finally:
            with self._lock:
                self._conns.discard(c)
            c.close()

    def _deliver(self, peer, kind, meta, payload):
        if kind == KIND_DATA:
            cb, msg = self._data_cb, ReceivedData(peer, payload)
        else:
            dtype, shape = decode_tensor_meta(meta, len(payload))
            cb, msg = self._tensor_cb, ReceivedTensor(peer, payload, shape, dtype)
        if cb is None:
            log.debug("rpc: %r from %s dropped: no callback set", msg, peer)
            return
        try:
            cb(msg)
        except Exception:  # the sender still gets its reply, as upstream
            log.exception("rpc: the receive callback raised on %r", msg)

    def set_data_receive_callback(self, callback):
        if not callable(callback):
            raise TypeError("set_data_receive_callback(): callback must be callable")
        self._data_cb = callback

    def set_tensor_receive_callback(self, callback):
        if not callable(callback):
            raise TypeError("set_tensor_receive_callback(): callback must be callable")
        self._tensor_cb = callback

    # -- the client --

    def _connect(self, target):
        host, port = parse_address(target, "send")
        c = socket.create_connection((host, port), timeout=self._timeout)
        try:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _set_io_timeout(c, self._timeout)
            if self._secret is not None:
                _auth.client_handshake(c, self._secret, CHANNEL)
        except BaseException:
            c.close()
            raise
        return c

    def _checkout(self, target):
        with self._lock:
            idle = self._idle.get(target)
            while idle:
                c = idle.pop()
                # an idle connection that is readable was closed (or is
                # broken): never send on it, a message must go out once
                pl = select.poll()  # poll, not select: fds past 1024 are common
                pl.register(c, select.POLLIN)
                if not pl.poll(0):
                    return c
                c.close()
        return self._connect(target)

    def _checkin(self, target, c):
        with self._lock:
            idle = self._idle.setdefault(target, [])
            if len(idle) < self._pool_size:
                idle.append(c)
                return
        c.close()

    def _drop_idle(self, target=None):
        with self._lock:
            if target is None:
                gone = [c for v in self._idle.values() for c in v]
                self._idle.clear()
            else:
                gone = self._idle.pop(target, [])
        for c in gone:
            c.close()

    def _send(self, fname, target, kind, meta, payload):
        """The status the server answered (0), or -1 when the message could
        not be delivered (logged)."""
        try:
            c = self._checkout(target)
        except (OSError, ValueError) as e:
            log.warning("%s(): cannot reach %s: %s", fname, target, e)
            return -1
        try:
            n = payload.nbytes
            hdr = encode_header(kind, len(meta), n) + meta
            if n <= 65536:
                c.sendall(hdr + payload if n else hdr)
            else:
                c.sendall(hdr)
                c.sendall(payload)
            # a reply is one fixed-size frame: one receive, checked as any
            buf = read_exact(_Deadline(c, self._timeout), len(REPLY_OK), "reply")
            decode_header(buf[:HDR.size], (KIND_REPLY,))
            status = decode_reply(buf[HDR.size:])
        except (OSError, RpcProtocolError) as e:
            c.close()
            log.warning("%s(): sending to %s failed: %s", fname, target, e)
            return -1
        self._checkin(target, c)
        return status

    def send_data(self, target_address, data):
        """Send bytes to the server at target_address ("host:port") and wait
        until its callback ran: 0, or -1 when it could not be delivered."""
        parse_address(target_address, "send_data")
        return self._send("send_data", target_address, KIND_DATA, b"",
                          _data_buffer("send_data", data))

    def send_tensor(self, target_address, tensor):
        """Send a CPU tensor (shape, dtype and bytes): 0 or -1 as send_data."""
        parse_address(target_address, "send_tensor")
        meta, buf, keep = _tensor_parts("send_tensor", tensor)
        try:
            return self._send("send_tensor", target_address, KIND_TENSOR, meta, buf)
        finally:
            del keep

    def _submit(self, fname, loop, fn, *args):
        from concurrent.futures import ThreadPoolExecutor
        if not hasattr(loop, "call_soon_threadsafe"):
            raise TypeError(f"{fname}(): loop must be an asyncio event loop")
        fut = loop.create_future()
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self._pool_size,
                                                    thread_name_prefix="mc-rpc-send")
            ex = self._executor

        def done(rc, exc):
            if fut.cancelled():
                return
            if exc is not None:
                fut.set_exception(exc)
            elif rc < 0:
                fut.set_exception(RuntimeError(f"{fname}(): sending to {args[0]} failed"))
            else:
                fut.set_result(rc)

        def run():
            try:
                rc, exc = fn(*args), None
            except Exception as e:  # noqa: BLE001 handed to the future
                rc, exc = -1, e
            try:
                loop.call_soon_threadsafe(done, rc, exc)
            except RuntimeError:  # the loop closed meanwhile
                pass

        ex.submit(run)
        return fut

    def send_data_async(self, target_address, data, loop):
        """An asyncio future of loop resolving to send_data's 0, or failing
        with RuntimeError.  The bytes are copied first unless immutable."""
        parse_address(target_address, "send_data_async")
        data = _data_buffer("send_data_async", data)
        if not isinstance(data.obj, bytes):
            data = memoryview(data.tobytes())  # the caller may change its buffer meanwhile
        return self._submit("send_data_async", loop, self._send, "send_data_async",
                            target_address, KIND_DATA, b"", data)

    def send_tensor_async(self, target_address, tensor, loop):
        """As send_data_async, for a tensor (kept alive until sent; the
        caller must not change it before the future resolves)."""
        parse_address(target_address, "send_tensor_async")
        meta, buf, keep = _tensor_parts("send_tensor_async", tensor)

        def send(*a):
            _ = keep
            return self._send(*a)

        return self._submit("send_tensor_async", loop, send, "send_tensor_async",
                            target_address, KIND_TENSOR, meta, buf)

    # -- upstream's older CoroRPCInterface calls --

    def add_remote_connection(self, remote_address):
        """Open a connection to remote_address now and keep it idle for the
        next send: True, or False when it cannot be reached."""
        try:
            self._checkin(remote_address, self._connect(remote_address))
        except (OSError, ValueError) as e:
            log.warning("add_remote_connection(): %s: %s", remote_address, e)
            return False
        return True

    def remove_remote_connection(self, remote_address):
        parse_address(remote_address, "remove_remote_connection")
        self._drop_idle(remote_address)

    def is_connected(self, remote_address):
        parse_address(remote_address, "is_connected")
        with self._lock:
            return bool(self._idle.get(remote_address))

    def close(self):
        """Ours: stop serving, close idle connections and the send threads
        (waiting for sends in flight)."""
        self._close(True)

    def _close(self, wait):
        self.stop_server()
        self._drop_idle()
        with self._lock:
            ex, self._executor = self._executor, None
        if ex is not None:
            ex.shutdown(wait=wait)

    def __del__(self):
        try:  # possibly on a send thread, which cannot wait for itself
            self._close(False)
        except Exception:  # noqa: BLE001 interpreter shutdown
            pass


CoroRPCInterface = RpcInterface


def create_rpc_client(local_rank=0, world_size=1):
    """An RpcInterface set up as a client (pool 10, timeout 30 s)."""
    _check_count("create_rpc_client", "local_rank", local_rank)
    _check_count("create_rpc_client", "world_size", world_size)
    r = RpcInterface()
    r.initialize("", 0, 30, 10)
    return r


def create_rpc_server(local_rank=0, world_size=1):
    """An RpcInterface set up to serve on 0.0.0.0:8080 (upstream's
    default; initialize_server picks another) once start_server* runs."""
    _check_count("create_rpc_server", "local_rank", local_rank)
    _check_count("create_rpc_server", "world_size", world_size)
    r = RpcInterface()
    r.initialize("0.0.0.0:8080", 0, 30, 10)
    return r


# The module's name is not upstream's: show the classes as mooncake.engine's.
for _c in (RpcInterface, ReceivedData, ReceivedTensor):
    _c.__module__ = "mooncake.engine"
del _c
