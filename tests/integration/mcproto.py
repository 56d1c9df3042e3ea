"""A small raw client of the store client <-> master protocol (docs/protocol.md).

Used by the process tests to do what the client library never does on
purpose (stop after PutStart, send malformed frames, mount a segment that
has no memory behind it) and by bench/master_rss.py to load the master with
many objects cheaply.  Only the messages those callers need have encoders;
the frame layer handles any type.

Everything is little-endian.  A frame is a 32-byte header (magic "MCST",
major, minor, type, flags, reserved, status, request id, payload length,
reserved) followed by the payload.
"""

import itertools
import os
import socket
import struct

MAGIC = b"MCST"
MAJOR, MINOR = 1, 2
HDR = struct.Struct("<4sBBHHHiQII")
assert HDR.size == 32
F_RESPONSE = 1

# Message types (pinned numbers, docs/protocol.md).
SERVICE_READY = 1
PING = 2
MOUNT_SEGMENT = 3
REMOUNT_SEGMENT = 4
UNMOUNT_SEGMENT = 5
EXIST_KEY = 16
BATCH_EXIST_KEY = 17
GET_REPLICA_LIST = 18
BATCH_GET_REPLICA_LIST = 19
GET_REPLICA_LIST_BY_REGEX = 20
PUT_START = 32
PUT_END = 33
PUT_REVOKE = 34
BATCH_PUT_START = 35
BATCH_PUT_END = 36
BATCH_PUT_REVOKE = 37
UPSERT_START = 38
UPSERT_END = 39
PUT_CREDIT = 44
REMOVE = 48
REMOVE_BY_REGEX = 49
REMOVE_ALL = 50
BATCH_REMOVE = 51
BATCH_REPLICA_CLEAR = 52
MOUNT_LOCAL_DISK_SEGMENT = 64
UNMOUNT_LOCAL_DISK_SEGMENT = 65
OFFLOAD_OBJECT_HEARTBEAT = 66
NOTIFY_OFFLOAD_SUCCESS = 67
REPORT_SSD_CAPACITY = 68
BATCH_EVICT_DISK_REPLICA = 69
PROMOTION_OBJECT_HEARTBEAT = 70
NOTIFY_PROMOTION = 71

REPLICA_MEMORY = 0
REPLICA_ALL = 4

# Status codes used by the tests (include/mooncake/status.h).
OK = 0
ERR_SEGMENT_NOT_FOUND = -101
ERR_NO_AVAILABLE_HANDLE = -200
ERR_INVALID_VERSION = -300
ERR_INVALID_KEY = -400
ERR_INVALID_PARAMS = -600
ERR_ILLEGAL_CLIENT = -601
ERR_REPLICA_IS_NOT_READY = -703
ERR_OBJECT_NOT_FOUND = -704
ERR_OBJECT_ALREADY_EXISTS = -705
ERR_OBJECT_HAS_LEASE = -706
ERR_OBJECT_HAS_REPLICATION_TASK = -708
ERR_NOT_SUPPORTED = -1012
ERR_UNABLE_OFFLOAD = -1300
ERR_PROTOCOL = -2019
ERR_TOO_LARGE = -2027


class ProtoError(Exception):
    pass


class Closed(ProtoError):
    """The peer closed the connection."""


class StatusError(ProtoError):
    def __init__(self, status, text, mtype):
        super().__init__(f"type {mtype}: status {status}: {text}")
        self.status = status
        self.text = text


# ---- payload writers --------------------------------------------------------

def u8(v):
    return struct.pack("<B", v)


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


def i64(v):
    return struct.pack("<q", v)


def boolean(v):
    return b"\x01" if v else b"\x00"


def string(s):
    b = s.encode() if isinstance(s, str) else bytes(s)
    return u32(len(b)) + b


key = string


def uuid(first, second):
    return u64(first) + u64(second)


def opt_u64(v):
    return b"\x00" if v is None else b"\x01" + u64(v)


def strlist(items):
    return u32(len(items)) + b"".join(string(s) for s in items)


def segment(seg_id, name, base, size, endpoint=None, protocol="tcp", host_id=""):
    return (uuid(*seg_id) + string(name) + u64(base) + u64(size) +
            string(endpoint if endpoint is not None else name) + string(protocol) +
            string(host_id))


def replicate_config(replica_num=1, preferred_segment="", preferred_segments=(),
                     hard_pin=False, same_node=False, host_id=""):
    return (u32(replica_num) + u32(0) + u32(0) + u8(0) + opt_u64(None) + boolean(hard_pin) +
            boolean(same_node) + u8(0) + string(preferred_segment) +
            strlist(list(preferred_segments)) + strlist([]) + string(host_id))


# ---- payload reader ---------------------------------------------------------

class Reader:
    def __init__(self, data):
        self.d = memoryview(data)
        self.pos = 0

    def take(self, n):
        if self.pos + n > len(self.d):
            raise ProtoError(f"short payload at {self.pos} (+{n} of {len(self.d)})")
        b = self.d[self.pos:self.pos + n]
        self.pos += n
        return bytes(b)

    def u8(self):
        return self.take(1)[0]

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def i32(self):
        return struct.unpack("<i", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]

    def i64(self):
        return struct.unpack("<q", self.take(8))[0]

    def boolean(self):
        return bool(self.u8())

    def string(self):
        return self.take(self.u32())

    def opt_u64(self):
        return self.u64() if self.u8() else None

    def replica(self):
        r = {"id": self.u64(), "status": self.u8(), "type": self.u8(), "size": self.u64()}
        t = r["type"]
        if t in (0, 3):
            r["address"] = self.u64()
            r["segment_name"] = self.string().decode()
            r["endpoint"] = self.string().decode()
            r["protocol"] = self.string().decode()
        elif t == 1:
            r["file_path"] = self.string().decode()
        elif t == 2:
            r["client_id"] = (self.u64(), self.u64())
            r["endpoint"] = self.string().decode()
        elif t == 100:
            r["file_path"] = self.string().decode()
            r["offset"], r["aligned_size"], r["shard_idx"] = self.u64(), self.u64(), self.u32()
        else:
            raise ProtoError(f"replica type {t}")
        return r

    def replicas(self):
        return [self.replica() for _ in range(self.u32())]

    def replica_list(self):
        lease = self.u64()
        checksum = self.opt_u64()
        return {"lease_ttl_ms": lease, "checksum": checksum, "replicas": self.replicas()}

    def done(self):
        if self.pos != len(self.d):
            raise ProtoError(f"{len(self.d) - self.pos} bytes left over")


# ---- frames -----------------------------------------------------------------

def frame(mtype, req_id, payload=b"", flags=0, status=0, major=MAJOR, magic=MAGIC):
    return HDR.pack(magic, major, MINOR, mtype, flags, 0, status, req_id, len(payload), 0) + payload


class Conn:
    """One connection to the master.  Requests are sent one at a time
    (or pipelined with send/recv) and answered by id."""

    def __init__(self, port, host="127.0.0.1", timeout=10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.ids = itertools.count(1)
        self.buf = bytearray()
        self.client_id = tuple(struct.unpack("<QQ", os.urandom(16)))

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send_raw(self, data):
        self.sock.sendall(data)

    def send(self, mtype, payload=b""):
        rid = next(self.ids)
        self.sock.sendall(frame(mtype, rid, payload))
        return rid

    def _fill(self, n):
        while len(self.buf) < n:
            try:
                chunk = self.sock.recv(max(65536, n - len(self.buf)))
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise Closed("connection closed by the master")
            self.buf += chunk

    def recv(self):
        """Next frame: (header tuple fields as dict, payload bytes)."""
        self._fill(32)
        magic, major, minor, mtype, flags, _r, status, rid, plen, view = HDR.unpack(self.buf[:32])
        if magic != MAGIC:
            raise ProtoError(f"bad magic {magic!r}")
        self._fill(32 + plen)
        payload = bytes(self.buf[32:32 + plen])
        del self.buf[:32 + plen]
        return {"major": major, "minor": minor, "type": mtype, "flags": flags,
                "status": status, "id": rid, "view": view}, payload

    def call(self, mtype, payload=b""):
        """Send one request and wait for its answer.  Returns a Reader over
        the body; raises StatusError for an error response."""
        rid = self.send(mtype, payload)
        while True:
            h, p = self.recv()
            if h["id"] == rid:
                break
        if not h["flags"] & F_RESPONSE or h["type"] != mtype:
            raise ProtoError(f"unexpected answer {h}")
        if h["status"] != 0:
            r = Reader(p)
            text = r.string().decode(errors="replace") if p else ""
            raise StatusError(h["status"], text, mtype)
        return Reader(p)

    def status_of(self, mtype, payload=b""):
        """The status of one call (0 or the error), body ignored."""
        try:
            self.call(mtype, payload)
            return 0
        except StatusError as e:
            return e.status

    # ---- messages ----
    def hello(self, version="mcproto.py 1"):
        return self.call(SERVICE_READY, string(version)).string().decode()

    def ping(self):
        r = self.call(PING, uuid(*self.client_id))
        return r.i64(), r.u8()

    def mount(self, seg_id, name, base, size, **kw):
        self.call(MOUNT_SEGMENT, uuid(*self.client_id) + segment(seg_id, name, base, size, **kw))

    def unmount(self, seg_id):
        self.call(UNMOUNT_SEGMENT, uuid(*self.client_id) + uuid(*seg_id))

    def put_start(self, k, length, tenant="", group="", **cfg):
        p = (uuid(*self.client_id) + string(tenant) + key(k) + u64(length) + string(group) +
             replicate_config(**cfg))
        return self.call(PUT_START, p).replicas()

    def put_end(self, k, tenant="", checksum=None, rtype=REPLICA_ALL):
        self.call(PUT_END, uuid(*self.client_id) + string(tenant) + u8(rtype) + key(k) +
                  opt_u64(checksum))

    def put_revoke(self, k, tenant="", rtype=REPLICA_ALL):
        self.call(PUT_REVOKE, uuid(*self.client_id) + string(tenant) + u8(rtype) + key(k))

    # ---- the SSD tier (64..69) ----
    def mount_local_disk(self, endpoint, offloading=True):
        self.call(MOUNT_LOCAL_DISK_SEGMENT,
                  uuid(*self.client_id) + boolean(offloading) + string(endpoint))

    def offload_heartbeat(self, max_items=0, offloading=True):
        """(offload [(tenant, key, size, address)], removes [(tenant, key)], remove_all)"""
        r = self.call(OFFLOAD_OBJECT_HEARTBEAT,
                      uuid(*self.client_id) + boolean(offloading) + u32(max_items))
        off = [(r.string().decode(), r.string(), r.u64(), r.u64()) for _ in range(r.u32())]
        rms = [(r.string().decode(), r.string()) for _ in range(r.u32())]
        wipe = r.boolean()
        r.done()
        return off, rms, wipe

    def notify_offload(self, items):
        """items: [(tenant, key, size, status)] -> per-item statuses"""
        p = uuid(*self.client_id) + u32(len(items)) + b"".join(
            string(t) + key(k) + u64(n) + struct.pack("<i", st) for t, k, n, st in items)
        r = self.call(NOTIFY_OFFLOAD_SUCCESS, p)
        return [r.i32() for _ in range(r.u32())]

    def promotion_heartbeat(self, max_items=0):
        """[(tenant, key, size, replica dict)]"""
        r = self.call(PROMOTION_OBJECT_HEARTBEAT, uuid(*self.client_id) + u32(max_items))
        tasks = [(r.string().decode(), r.string(), r.u64(), r.replica()) for _ in range(r.u32())]
        r.done()
        return tasks

    def notify_promotion(self, items):
        """items: [(tenant, key, replica_id, status)] -> per-item statuses"""
        p = uuid(*self.client_id) + u32(len(items)) + b"".join(
            string(t) + key(k) + u64(i) + struct.pack("<i", st) for t, k, i, st in items)
        r = self.call(NOTIFY_PROMOTION, p)
        return [r.i32() for _ in range(r.u32())]

    def report_ssd_capacity(self, total, used):
        self.call(REPORT_SSD_CAPACITY, uuid(*self.client_id) + u64(total) + u64(used))

    def batch_put_start_payload(self, keys, length, tenant="", **cfg):
        items = b"".join(key(k) + u64(length) + string("") for k in keys)
        return (uuid(*self.client_id) + string(tenant) + replicate_config(**cfg) +
                u32(len(keys)) + items)

    def batch_put_end_payload(self, keys, tenant="", rtype=REPLICA_ALL):
        items = b"".join(key(k) + opt_u64(None) for k in keys)
        return uuid(*self.client_id) + string(tenant) + u8(rtype) + u32(len(keys)) + items

    def batch_put_start(self, keys, length, tenant="", **cfg):
        r = self.call(BATCH_PUT_START, self.batch_put_start_payload(keys, length, tenant, **cfg))
        out = []
        for _ in range(r.u32()):
            st = r.i32()
            out.append((st, r.replicas() if st == 0 else None))
        return out

    def batch_put_end(self, keys, tenant=""):
        r = self.call(BATCH_PUT_END, self.batch_put_end_payload(keys, tenant))
        return [r.i32() for _ in range(r.u32())]

    def exist(self, k, tenant=""):
        return self.call(EXIST_KEY, string(tenant) + key(k)).boolean()

    def batch_exist(self, keys, tenant=""):
        r = self.call(BATCH_EXIST_KEY, string(tenant) + u32(len(keys)) +
                      b"".join(key(k) for k in keys))
        out = []
        for _ in range(r.u32()):
            st = r.i32()
            out.append(r.boolean() if st == 0 else st)
        return out

    def get_replica_list(self, k, tenant=""):
        return self.call(GET_REPLICA_LIST, string(tenant) + key(k)).replica_list()

    def remove(self, k, force=False, tenant=""):
        self.call(REMOVE, string(tenant) + key(k) + boolean(force))

    def remove_by_regex(self, pattern, force=False, tenant=""):
        return self.call(REMOVE_BY_REGEX, string(tenant) + string(pattern) + boolean(force)).i64()

    def get_by_regex(self, pattern, tenant=""):
        """The keys GetReplicaListByRegex returns (their replica lists are read and dropped)."""
        r = self.call(GET_REPLICA_LIST_BY_REGEX, string(tenant) + string(pattern))
        keys = []
        for _ in range(r.u32()):
            keys.append(r.string().decode(errors="replace"))
            r.replica_list()
        return keys

    def remove_all(self, force=True, tenant=""):
        return self.call(REMOVE_ALL, string(tenant) + boolean(force)).i64()
