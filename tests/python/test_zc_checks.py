"""Zero-copy calls check the memory they are given (issue 11).

Every store call that takes a local pointer and a size refuses (-600) a range
that does not lie inside one registered buffer, before the master is asked
anything and before any byte moves; the engine's transfers refuse (-1) such a
local range; register_buffer / register_memory refuse memory that is not
mapped readable and writable.  Each case runs in a child process (a wild
pointer used to crash the client), which must exit normally: the parent
checks its exit status and the codes it printed.
"""

import json
import subprocess
import sys

import pytest

INVALID_PARAMS = -600

PRELUDE = r'''
import ctypes, json, sys
import numpy as np
from mooncake.store import MooncakeDistributedStore
from mooncake.engine import TransferEngine

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
PG = 4096
PROT_NONE, PROT_READ, PROT_RW = 0, 1, 3
MAP_PRIVATE_ANON = 0x02 | 0x20


def pages(n):
    p = libc.mmap(None, n * PG, PROT_RW, MAP_PRIVATE_ANON, -1, 0)
    assert p and p != ctypes.c_void_p(-1).value
    return p


def view(p, n):
    return np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(p))


out = {}


def store():
    meta, addr = sys.argv[1], sys.argv[2]
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", meta, 32 << 20, 16 << 20, "tcp", "", addr) == 0
    return s
'''

GET_INTO = PRELUDE + r'''
s = store()
p = pages(3)
v = view(p, 3 * PG)
v[:] = 0xAB
assert s.register_buffer(p, PG) == 0  # the first page only
key = "zc-get-" + sys.argv[3]
assert s.put(key, bytes(range(256)) * 32) == 0  # 8 KiB
out["get_into"] = s.get_into(key, p, 2 * PG)
out["batch_get_into"] = s.batch_get_into([key], [p], [2 * PG])
out["multi"] = s.batch_get_into_multi_buffers([key], [[p, p + PG]], [[PG, PG]])
out["multi_straddle"] = s.batch_get_into_multi_buffers([key], [[p + PG - 8]], [[2 * PG]])
out["session_start"] = s.batch_get_session_start([key])
out["ranges"] = s.batch_get_into_multi_buffer_ranges([key], [[p + 100]], [[PG]], [[0]])
s.batch_get_session_end([key])
out["canary"] = bool((v[PG:] == 0xAB).all())
out["page0_untouched"] = bool((v[:PG] == 0xAB).all())
out["fits"] = s.get_into(key, p, PG)  # the object is larger than the page: refused as before
s.close()
print(json.dumps(out))
'''

PUT_FROM = PRELUDE + r'''
s = store()
p = pages(256)  # 1 MiB mapped, 4 KiB of it registered
assert s.register_buffer(p, PG) == 0
key = "zc-put-" + sys.argv[3]
out["put_from"] = s.put_from(key, p, 1 << 20)
out["upsert_from"] = s.upsert_from(key, p, 1 << 20)
out["batch_put_from"] = s.batch_put_from([key], [p], [1 << 20])
out["batch_upsert_from"] = s.batch_upsert_from([key], [p], [1 << 20])
out["multi"] = s.batch_put_from_multi_buffers([key], [[p, p + PG]], [[PG, PG]])
out["with_metadata"] = s.put_from_with_metadata(key, p + 64, p, PG, 64)
out["exists"] = s.is_exist(key)
out["ok"] = s.put_from(key, p, PG)  # inside: still fine
s.close()
print(json.dumps(out))
'''

WILD = PRELUDE + r'''
s = store()
key = "zc-wild-" + sys.argv[3]
assert s.put(key, b"x" * 4096) == 0
out["get_into"] = s.get_into(key, 0x10, 4096)
out["put_from"] = s.put_from(key + "-p", 0x10, 4096)
out["batch_get_into"] = s.batch_get_into([key], [0x10], [4096])
out["batch_put_from"] = s.batch_put_from([key + "-p"], [0x10], [4096])
out["multi_get"] = s.batch_get_into_multi_buffers([key], [[0x10]], [[4096]])
out["multi_put"] = s.batch_put_from_multi_buffers([key + "-p"], [[0x10]], [[4096]])
out["ranges"] = s.get_into_ranges([0x10], [[key]], [[[0]]], [[[0]]], [[[64]]])
out["exists"] = s.is_exist(key + "-p")
try:
    import torch  # noqa: F401  the tensor forms need it
except ImportError:
    pass
else:
    # put_tensor_from reads the header at the pointer before it stores anything
    out["put_tensor_from"] = s.put_tensor_from(key + "-t", 0x10, 4096)
    out["batch_put_tensor_from"] = s.batch_put_tensor_from([key + "-t"], [0x10], [4096])
    out["get_tensor_into"] = repr(s.get_tensor_into(key, 0x10, 4096))
s.close()
print(json.dumps(out))
'''

REGISTER = PRELUDE + r'''
# Engines first: a hole left by munmap can be taken by the next small
# mapping anyone makes (a new thread's TLS, the sanitizer's own), and a
# registration that then succeeded would let the remote write below land
# in someone else's memory.  So make every thread before the hole, and
# check right before each use that the hole is still a hole.
s = store()
a, b = TransferEngine(), TransferEngine()
assert a.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
assert b.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
src = np.full(4096, 7, np.uint8)
assert b.register_memory(src.ctypes.data, src.nbytes) == 0
a_name = "127.0.0.1:%d" % a.get_rpc_port()
libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def hole(q):
    return libc.msync(q, PG, 1) != 0  # MS_ASYNC on an unmapped page: ENOMEM


# at a hinted address far below where new mappings go (the kernel fills
# the highest gap that fits first; 48 TiB is application memory under
# ASan's layout too), so the hole is not the next small mapping's
p = libc.mmap(0x300000000000, 4 * PG, PROT_RW, MAP_PRIVATE_ANON, -1, 0)  # a hint: 48 TiB
assert p and p != ctypes.c_void_p(-1).value
assert libc.munmap(p + PG, PG) == 0
assert libc.mprotect(p + 2 * PG, PG, PROT_READ) == 0
assert libc.mprotect(p + 3 * PG, PG, PROT_NONE) == 0
out["hole_kept"] = hole(p + PG)
out["store_hole"] = s.register_buffer(p + PG, PG)
out["store_across_hole"] = s.register_buffer(p, 2 * PG)
out["store_read_only"] = s.register_buffer(p + 2 * PG, PG)
out["store_guard"] = s.register_buffer(p + 3 * PG, PG)
out["store_wild"] = s.register_buffer(0x10, 4096)
out["store_good"] = s.register_buffer(p, PG)
out["hole_kept"] = out["hole_kept"] and hole(p + PG)
out["te_hole"] = a.register_memory(p + PG, PG)
out["te_read_only"] = a.register_memory(p + 2 * PG, PG)
out["te_batch"] = a.batch_register_memory([p, p + PG], [PG, PG])
# what a peer would have written into: nothing is published there
if out["te_hole"] != 0 and out["te_batch"] != 0:
    out["remote_write"] = b.transfer_sync_write(a_name, src.ctypes.data, p + PG, 64)
out["te_good"] = a.register_memory(p, PG)
out["remote_write_good"] = b.transfer_sync_write(a_name, src.ctypes.data, p, 64)
out["landed"] = bool((view(p, 64) == 7).all())
s.close()
print(json.dumps(out))
'''

ENGINE = PRELUDE + r'''
a, b = TransferEngine(), TransferEngine()
assert a.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
assert b.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
loc = pages(2)
dst = np.zeros(1 << 20, np.uint8)
assert a.register_memory(loc, PG) == 0  # 8 KiB mapped, 4 KiB registered
assert b.register_memory(dst.ctypes.data, dst.nbytes) == 0
view(loc, 2 * PG)[:] = 0x5A
b_name = "127.0.0.1:%d" % b.get_rpc_port()
d = dst.ctypes.data
out["write_oversized"] = a.transfer_sync_write(b_name, loc, d, 2 * PG)
out["read_oversized"] = a.transfer_sync_read(b_name, loc, d, 2 * PG)
out["write_wild"] = a.transfer_sync_write(b_name, 0x10, d, 64)
out["read_wild"] = a.transfer_sync_read(b_name, 0x10, d, 64)
out["batch"] = a.batch_transfer_sync_write(b_name, [loc, loc + PG], [d, d + PG], [64, 64])
out["batch_read"] = a.batch_transfer_sync_read(b_name, [0x10], [d], [64])
out["async"] = a.batch_transfer_async_write(b_name, [0x10], [d], [64])
out["submit"] = a.transfer_submit_write(b_name, 0x10, d, 64)
out["dst_untouched"] = bool((dst == 0).all())
out["src_untouched"] = bool((view(loc, 2 * PG) == 0x5A).all())
out["good"] = a.transfer_sync_write(b_name, loc, d, PG)
out["landed"] = bool((dst[:PG] == 0x5A).all())
print(json.dumps(out))
'''


def run_child(code, mc_master=None, tag="x"):
    args = [mc_master.meta_uri, mc_master.addr, tag] if mc_master else ["-", "-", tag]
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"child died ({r.returncode}): {r.stderr[-3000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_get_into_larger_than_the_registered_buffer(mc_master, request):
    o = run_child(GET_INTO, mc_master, request.node.name)
    assert o["get_into"] == INVALID_PARAMS
    assert o["batch_get_into"] == [INVALID_PARAMS]
    assert o["multi"] == [INVALID_PARAMS]
    assert o["multi_straddle"] == [INVALID_PARAMS]
    assert o["session_start"] == [0]
    assert o["ranges"] == [INVALID_PARAMS]
    assert o["canary"] and o["page0_untouched"]
    assert o["fits"] == INVALID_PARAMS


def test_put_from_larger_than_the_registered_buffer(mc_master, request):
    o = run_child(PUT_FROM, mc_master, request.node.name)
    assert o["put_from"] == INVALID_PARAMS
    assert o["upsert_from"] == INVALID_PARAMS
    assert o["batch_put_from"] == [INVALID_PARAMS]
    assert o["batch_upsert_from"] == [INVALID_PARAMS]
    assert o["multi"] == [INVALID_PARAMS]
    assert o["with_metadata"] == -INVALID_PARAMS  # upstream's positive magnitude
    assert o["exists"] == 0  # nothing was stored
    assert o["ok"] == 0


def test_wild_pointer_is_refused(mc_master, request):
    o = run_child(WILD, mc_master, request.node.name)
    for name in ("get_into", "put_from"):
        assert o[name] == INVALID_PARAMS, name
    for name in ("batch_get_into", "batch_put_from", "multi_get", "multi_put"):
        assert o[name] == [INVALID_PARAMS], name
    assert o["ranges"] == [[[INVALID_PARAMS]]]
    assert o["exists"] == 0
    if "put_tensor_from" in o:
        assert o["put_tensor_from"] == INVALID_PARAMS
        assert o["batch_put_tensor_from"] == [INVALID_PARAMS]
        assert o["get_tensor_into"] == "None"


def test_unmapped_registration_is_refused(mc_master, request):
    o = run_child(REGISTER, mc_master, request.node.name)
    if not o["hole_kept"]:
        pytest.skip("another mapping took the unmapped page before it was used")
    for name in ("store_hole", "store_across_hole", "store_read_only", "store_guard",
                 "store_wild"):
        assert o[name] == INVALID_PARAMS, name
    assert o["store_good"] == 0
    assert o["te_hole"] == -1 and o["te_read_only"] == -1 and o["te_batch"] == -1
    assert o["remote_write"] == -1
    assert o["te_good"] == 0 and o["remote_write_good"] == 0 and o["landed"]


def test_engine_local_range_must_be_registered():
    o = run_child(ENGINE)
    for name in ("write_oversized", "read_oversized", "write_wild", "read_wild", "batch",
                 "batch_read"):
        assert o[name] == -1, name
    assert o["async"] == 0 and o["submit"] == 0  # upstream's "no batch"
    assert o["dst_untouched"] and o["src_untouched"]
    assert o["good"] == 0 and o["landed"]
