"""Issue 18 as an upstream user's script meets the package (docs/python.md,
"Issue 18 checklist"):

- a script written for upstream that imports any module of spec
  components.md section 5 (and the names python-api-and-integrations.md's
  integrations import) runs unchanged; the GPU/NPU-only modules this build
  does not have fail with ImportError, which upstream's integrations catch;
- the core modules import with aiohttp, fastapi, msgpack, pillow, torch,
  httpx and numpy all blocked, and each feature that needs one of them
  raises ImportError naming the Debian package;
- scripts/install-deps.sh installs the Debian package of every optional
  dependency the package imports;
- every method of spec store.md 9.3 and of transfer-engine.md 2.3 refuses
  arguments of the wrong type with TypeError (or ValueError), never a crash,
  and the client keeps working.
"""

import re
import subprocess
import sys
import uuid

import pytest

from conftest import ROOT

import mooncake.store as ms
from mooncake.engine import TransferEngine, TransferOpcode

PY = sys.executable
MiB = 1 << 20


def run_py(code, timeout=120):
    return subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=timeout)


# spec components.md section 5 (and section 2 for reshard, 1 for pg), with the
# names an upstream script takes from each.  A module upstream has only in GPU
# or NPU builds is in ABSENT instead.
UPSTREAM_IMPORTS = {
    "mooncake": "BufferPool RegisteredBufferPool __version__",
    "mooncake.engine": "TransferEngine TransferOpcode TransferNotify InnerTransferEngine "
                       "SharedSegment RpcInterface CoroRPCInterface ReceivedData ReceivedTensor "
                       "create_rpc_client create_rpc_server SUPPORT_CUDA",
    "mooncake.store": "MooncakeDistributedStore ReplicateConfig SoftPinAction ObjectDataType "
                      "ReplicaStatus ReplicaDescriptor MemoryDescriptor DiskDescriptor Descriptor "
                      "TaskType TaskStatus QueryTaskResponse BufferHandle BufferPool BufferLease "
                      "BufferLeaseView MooncakeHostMemAllocator ParallelAxis TensorParallelism "
                      "ReadTarget MooncakeDistributedNoFRegister bind_to_numa_node "
                      "get_alloc_func_addr get_free_func_addr",
    "mooncake.async_store": "MooncakeDistributedStoreAsync",
    "mooncake.buffer_pool": "BufferPool RegisteredBufferPool",
    "mooncake.mooncake_config": "MooncakeConfig",
    "mooncake.http_metadata_server": "main",
    "mooncake._fast_copy": "concat_arrays_into",
    "mooncake.structured_object_store": "MooncakeBundleTransfer BundleTransferPolicy "
                                        "MooncakeDataProtoRef StructuredObjectPayload "
                                        "StructuredObjectRef StructuredMemberSlice "
                                        "StructuredObjectError",
    "mooncake.dataproto_catalog": "DataProtoCatalog",
    "mooncake.mooncake_store_service": "MooncakeStoreService main sync_main",
    "mooncake.vllm_v1_proxy_server": "main",
    "mooncake.shared_segment": "create_shared_segment SharedSegment SharedSegmentError "
                               "shared_segment_supported",
    "mooncake.transfer_engine_topology_dump": "main",
    "mooncake.cli": "mooncake_master mooncake_client transfer_engine_bench",
    "mooncake.cli_client": "main",
    "mooncake.cli_bench": "main",
    "mooncake.pg": "",
    "mooncake.reshard": "",
    "mooncake.reshard.contracts": "",
    "mooncake.reshard.geometry": "",
    "mooncake.reshard.weight": "",
}
ABSENT = ["mooncake.ep", "mooncake.mooncake_ep_buffer", "mooncake.mooncake_elastic_buffer",
          "mooncake.allocator", "mooncake.allocator_ascend_npu",
          "mooncake.fabric_allocator_utils", "mooncake.mooncake_connector_v1",
          "mooncake.spdk_tgt_create", "mooncake.mooncake_ssd_register",
          "mooncake.mooncake_ssd_unregister"]
NEEDS_AIOHTTP = {"mooncake.mooncake_store_service", "mooncake.vllm_v1_proxy_server"}


def upstream_script():
    lines = ["import importlib.util",
             "HAVE_AIOHTTP = importlib.util.find_spec('aiohttp') is not None"]
    for mod, names in UPSTREAM_IMPORTS.items():
        stmt = (f"from {mod} import {', '.join(names.split())}" if names
                else f"import {mod}")
        if mod in NEEDS_AIOHTTP:
            stmt = f"if HAVE_AIOHTTP:\n    {stmt}"
        lines.append(stmt)
    lines.append("from mooncake import pg  # components.md 1.3's spelling")
    for mod in ABSENT:  # upstream's integrations wrap these in try/except ImportError
        lines += ["try:", f"    import {mod}", "except ImportError:", "    pass", "else:",
                  f"    raise SystemExit('{mod} imported: docs/python.md says absent')"]
    lines.append("print('ran unchanged')")
    return "\n".join(lines)


def test_upstream_script_importing_every_module_runs_unchanged():
    r = run_py(upstream_script())
    assert r.returncode == 0 and r.stdout.strip() == "ran unchanged", r.stderr[-3000:]


def test_docs_mark_the_absent_modules_absent():
    """docs/python.md's module table has an 'absent' row naming each (its
    first cell lists names, `allocator*` and `mooncake_ssd_[un]register`
    style patterns allowed)."""
    import fnmatch
    doc = (ROOT / "docs" / "python.md").read_text()
    status = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 3 and cells[1].startswith("`mooncake"):
            for name in cells[1].replace("`", "").split(","):
                name = name.strip().removeprefix("mooncake.")
                for n in (name.replace("[un]", ""), name.replace("[un]", "un")):
                    status[n] = cells[2]
    for mod in ABSENT:
        short = mod.removeprefix("mooncake.")
        hit = [st for pat, st in status.items() if fnmatch.fnmatchcase(short, pat)]
        assert hit and all(st == "absent" for st in hit), f"{mod}: docs/python.md says {hit}"


# ---- optional dependencies -------------------------------------------------------------

BLOCK = r"""
import sys
BLOCKED = {"aiohttp", "fastapi", "msgpack", "PIL", "torch", "httpx", "numpy"}
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked by the test")
        return None
sys.meta_path.insert(0, Block())
"""


def test_core_modules_import_with_every_optional_dependency_blocked():
    code = BLOCK + (
        "import mooncake, mooncake.store, mooncake.engine, mooncake.async_store, "
        "mooncake.buffer_pool, mooncake.mooncake_config, mooncake.cli, mooncake.cli_client, "
        "mooncake.cli_bench, mooncake.http_metadata_server, mooncake._fast_copy, "
        "mooncake.transfer_engine_topology_dump\n"
        "from mooncake.store import MooncakeDistributedStore, ReplicateConfig\n"
        "s = MooncakeDistributedStore(); c = ReplicateConfig(); c.replica_num = 1\n"
        "print(sorted(m for m in BLOCKED if m in sys.modules))\n")
    r = run_py(code)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "[]"


@pytest.mark.parametrize("stmt,module", [
    ("import mooncake.mooncake_store_service", "aiohttp"),
    ("import mooncake.vllm_v1_proxy_server", "aiohttp"),
    ("import mooncake.structured_object_store", "numpy"),
    ("import mooncake.pg", "torch"),
    ("from mooncake.shared_segment import create_shared_segment\n"
     "create_shared_segment('x', {'b': {'count': 1, 'shape': [4], 'dtype': 'float32'}}, 1, 0)",
     "numpy"),
    ("from mooncake.store import MooncakeDistributedStore\n"
     "MooncakeDistributedStore().put_tensor_with_parallelism('k', None)", "torch"),
])
def test_a_feature_without_its_dependency_names_the_debian_package(stmt, module):
    deb = {"aiohttp": "python3-aiohttp", "numpy": "python3-numpy", "torch": "python3-torch"}
    r = run_py(BLOCK + stmt)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert "ImportError" in last and f"apt-get install {deb[module]}" in last, r.stderr[-2000:]


def test_install_deps_installs_every_optional_dependency_debian_has():
    """Each module the package imports through _optional.require (or by
    hand, as aiohttp) has its Debian package in scripts/install-deps.sh."""
    from mooncake import _optional
    script = (ROOT / "scripts" / "install-deps.sh").read_text()
    pkgs = set(re.search(r'PKGS="([^"]*)"', script).group(1).split())
    src = "\n".join(p.read_text() for p in (ROOT / "python" / "mooncake").rglob("*.py")
                    if p.name != "_optional.py")
    used = set(re.findall(r'require\("([A-Za-z_]+)"', src))
    used |= {m for m in _optional.DEBIAN if re.search(rf"^\s*(import|from) {m}\b", src, re.M)}
    assert {"aiohttp", "numpy", "torch"} <= used
    missing = sorted(_optional.DEBIAN[m][0] for m in used if _optional.DEBIAN[m][0] not in pkgs)
    assert not missing, f"scripts/install-deps.sh does not install {missing}"


# ---- wrong types, every method ---------------------------------------------------------

# 9.3's methods that take no argument, or only optional ones (called elsewhere)
NO_REQUIRED_ARGS = {"close", "health_check", "get_hostname", "get_offload_rpc_read_count",
                    "remove_all", "unmount_local_disk_segment", "setup"}


class Junk:
    """An object no argument of any method accepts."""


def spec_store_methods():
    import test_store_parallelism as tsp
    return [m for m in tsp.SPEC_METHODS if m not in NO_REQUIRED_ARGS]


@pytest.fixture(scope="module")
def store(mc_master):
    s = ms.MooncakeDistributedStore()
    assert s.setup("127.0.0.1", mc_master.meta_uri, 32 * MiB, 16 * MiB, "tcp", "",
                   mc_master.addr, tenant_id="types") == 0
    yield s
    assert s.close() == 0


def test_every_store_method_refuses_wrong_types(store):
    """Each method of spec store.md 9.3, called with 1 to 6 arguments that
    are none of the types it takes, raises TypeError or ValueError: it never
    crashes, returns success, or takes the junk for a value."""
    key = f"types-{uuid.uuid4().hex}"
    assert store.put(key, b"v") == 0
    wrong = []
    for name in spec_store_methods():
        m = getattr(store, name)
        for n in range(1, 7):
            try:
                got = m(*[Junk()] * n)
            except (TypeError, ValueError):
                continue
            wrong.append(f"{name} with {n} junk argument(s) returned {got!r}")
    assert not wrong, "\n".join(wrong)
    with pytest.raises(TypeError):
        store.remove_all(Junk())
    with pytest.raises(TypeError):
        store.unmount_local_disk_segment(Junk())
    assert store.health_check() == 0
    assert store.get(key) == b"v"  # nothing above disturbed the client


ENGINE_NO_REQUIRED_ARGS = {"get_rpc_port", "get_engine", "get_engine_ptr", "get_local_topology",
                           "get_notifies", "initialize",
                           "initialize_ext"}


def test_every_engine_method_refuses_wrong_types(local):
    import test_engine_extra as tee
    te = local.te
    wrong = []
    for name in tee.ENGINE_METHODS:
        if name in ENGINE_NO_REQUIRED_ARGS:
            continue
        m = getattr(te, name)
        for n in range(1, 7):
            try:
                got = m(*[Junk()] * n)
            except (TypeError, ValueError):
                continue
            except RuntimeError as e:  # the *_on_cuda calls without CUDA say so first
                if "cuda" in name and "CUDA" in str(e):
                    continue
                raise
            wrong.append(f"{name} with {n} junk argument(s) returned {got!r}")
    assert not wrong, "\n".join(wrong)
    assert te.get_rpc_port() > 0


def test_every_spec_method_is_called_by_a_test():
    """'CI runs a test per method': each method of store.md 9.3 and
    transfer-engine.md 2.3 is called (`.name(`, or by name through getattr)
    in some file of tests/python other than this one."""
    import test_engine_extra as tee
    import test_store_parallelism as tsp
    here = ROOT / "tests" / "python"
    text = "\n".join(p.read_text() for p in here.glob("*.py")
                     if p.name != "test_upstream_surface.py")
    uncalled = [m for m in tsp.SPEC_METHODS + tee.ENGINE_METHODS
                if f".{m}(" not in text and f'"{m}"' not in text]
    assert not uncalled, f"no test calls {uncalled}"


def refusals(label, fn, ns=range(1, 7)):
    """What fn answers to 1..6 junk arguments other than TypeError/ValueError."""
    wrong = []
    for n in ns:
        try:
            got = fn(*[Junk()] * n)
        except (TypeError, ValueError):
            continue
        except Exception as e:  # noqa: BLE001 - what else it raised is the finding
            wrong.append(f"{label} with {n} junk argument(s) raised {type(e).__name__}: {e}")
        else:
            wrong.append(f"{label} with {n} junk argument(s) returned {got!r}")
    return wrong


def public_methods(obj, skip=()):
    return [(n, getattr(obj, n)) for n in dir(obj)
            if not n.startswith("_") and n not in skip and callable(getattr(obj, n))]


def test_every_module_function_refuses_wrong_types(store):
    """The callables of part 3's modules (the catalog, the bundle transfer,
    shared segments, _fast_copy, the RPC helper, engine.SharedSegment):
    junk arguments are TypeError or ValueError, never an AttributeError from
    deep inside or a junk answer."""
    from mooncake import _fast_copy, dataproto_catalog, shared_segment
    from mooncake import structured_object_store as sos
    from mooncake.engine import RpcInterface, SharedSegment
    wrong = []
    cat = dataproto_catalog.DataProtoCatalog()
    for n, m in public_methods(cat):
        wrong += refusals(f"DataProtoCatalog.{n}", m)
    wrong += refusals("dataproto_catalog.materialize", dataproto_catalog.materialize)
    wrong += refusals("MooncakeBundleTransfer()", sos.MooncakeBundleTransfer)
    bt = sos.MooncakeBundleTransfer(store, key_prefix=f"types-{uuid.uuid4().hex[:8]}")
    for n, m in public_methods(bt):
        wrong += refusals(f"MooncakeBundleTransfer.{n}", m)
    wrong += refusals("create_shared_segment", shared_segment.create_shared_segment)
    wrong += refusals("SharedSegment.create", SharedSegment.create)
    wrong += refusals("concat_arrays_into", _fast_copy.concat_arrays_into)
    rpc = RpcInterface()
    try:  # start_server serves on the calling thread: left out
        for n, m in public_methods(rpc, skip={"start_server"}):
            wrong += refusals(f"RpcInterface.{n}", m, range(1, 5))
    finally:
        rpc.close()
    assert not wrong, "\n".join(wrong)
    with pytest.raises(shared_segment.SharedSegmentError):  # upstream's callers catch this
        shared_segment.create_shared_segment(5, {}, 1, 0)


def test_docs_give_every_method_a_status():
    """docs/python.md's "Method status" has a row with a status for each
    method of store.md 9.3 and transfer-engine.md 2.3."""
    import test_engine_extra as tee
    import test_store_parallelism as tsp
    doc = (ROOT / "docs" / "python.md").read_text()
    sec = doc[doc.index("## Method status"):doc.index("## Issue 18 checklist")]
    rows = {}
    for line in sec.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 3 and cells[1].startswith("`") and cells[1].endswith("`"):
            rows[cells[1].strip("`")] = cells[2]
    missing = [m for m in tsp.SPEC_METHODS + tee.ENGINE_METHODS if not rows.get(m)]
    assert not missing, f"docs/python.md 'Method status' has no status for {missing}"


def doc_params(f):
    """The parameter names of a method from its docstring's first call
    form ("name(a, b=1, *parts, /)")."""
    doc = " ".join((f.__doc__ or "").split())
    m = re.match(r"\w+\((.*?)\)", doc)
    assert m, f"{f.__name__}: no signature in its docstring"
    return [p.split("=")[0].strip() for p in m.group(1).split(",")
            if p.strip() and p.strip() not in ("/", "...")]


def wrong_argument_findings(obj, cls, methods, valid, overrides=None, skip=()):
    """For each method and each parameter: every other argument valid, that
    one junk; anything but TypeError or ValueError is a finding."""
    found, checked = [], 0
    for name in methods:
        if name in skip:
            continue
        ps = doc_params(getattr(cls, name))
        vals = [(overrides or {}).get(name, {}).get(p, valid.get(p, KeyError)) for p in ps]
        assert KeyError not in vals, f"{name}{ps}: a parameter without a valid value here"
        for i, p in enumerate(ps):
            args = list(vals)
            args[i] = Junk()
            checked += 1
            try:
                got = getattr(obj, name)(*args)
            except (TypeError, ValueError):
                continue
            except Exception as e:  # noqa: BLE001
                found.append(f"{name}: a junk {p} raised {type(e).__name__}: {e}")
            else:
                found.append(f"{name}: a junk {p} returned {got!r}")
    return found, checked


def test_every_store_argument_refuses_wrong_types(store):
    """Each parameter of each 9.3 method (the others given valid values):
    a wrong type is TypeError or ValueError; the junk-first test above
    reaches only the first parameter."""
    import numpy as np
    import test_store_parallelism as tsp
    torch = pytest.importorskip("torch")
    buf = np.zeros(MiB, np.uint8)
    ptr = buf.ctypes.data
    assert store.register_buffer(ptr, buf.nbytes) == 0
    t = torch.zeros(4)
    valid = dict(
        key="kpos", keys=["kpos"], base_keys=["kpos"], value=b"v", values=[b"v"], config=None,
        force=False, regex_pattern="^no-such-key$", buffer_ptr=ptr, buffer_ptrs=[ptr], size=64,
        sizes=[64], metadata_buffer_ptr=ptr, metadata_size=8, all_buffer_ptrs=[[ptr]],
        all_sizes=[[64]], all_keys=[["kpos"]], all_dst_offsets=[[[0]]],
        all_src_offsets=[[[0]]], prefer_alloc_in_same_node=False, segment_ids=["no-such-id"],
        grace_period_seconds=0, segment_name="", targets=["no-such-segment"], source="a",
        target="b", task_id=(1, 2), tensor=t, tensors_list=[t], tp_rank=0, tp_size=1,
        split_dim=0, parallelism=None, parallelisms=None, writer_partition=None,
        writer_partitions=None, path="/nonexistent", offset=0, protocol="tcp", location="",
        file_name="/nonexistent/x.safetensors", read_only=False, **{"*parts": b"a"})
    overrides = {m: {"target": None, "targets": None} for m in tsp.SPEC_METHODS
                 if "with_parallelism" in m and m.startswith(("get", "batch_get"))}
    skip = {"setup", "setup_dummy", "close", "health_check", "get_hostname",
            "get_offload_rpc_read_count", "init_all",  # its own test
            "get_tensor_into_cuda", "batch_get_tensor_into_cuda"}  # test_cuda_calls_...
    try:
        found, checked = wrong_argument_findings(store, ms.MooncakeDistributedStore,
                                                 tsp.SPEC_METHODS, valid, overrides, skip)
    finally:
        assert store.unregister_buffer(ptr) == 0
    assert checked > 250
    assert not found, "\n".join(found)
    assert store.health_check() == 0


def test_every_engine_argument_refuses_wrong_types(local):
    import test_engine_extra as tee
    a, name = local.addr, local.name
    valid = dict(local_hostname="127.0.0.1", metadata_server="P2PHANDSHAKE", protocol="tcp",
                 device_name="", metadata_type="p2p", length=64, buffer_addr=a,
                 target_hostname=name, buffer=a, peer_buffer_address=a + 4096,
                 transport_hint="", opcode=TransferOpcode.Write, notify=None, buffers=[a],
                 peer_buffer_addresses=[a + 4096], lengths=[64], batch_ids=[],
                 batch_id=0, stream_ptr=0, dest_address=a, src=b"x" * 64, source_address=a,
                 capacity=64, location="*", read_only=False, buffer_addresses=[a],
                 capacities=[64], segment_name=name, peer_server_name=name)
    skip = {"initialize", "initialize_ext",  # set up already; test_engine_api.py
            "get_local_topology", "batch_transfer_async_read",  # no docstring form
            "register_memory", "batch_register_memory", "unregister_memory",
            "batch_unregister_memory",  # local's buffer: test_engine_api.py covers them
            "free_managed_buffer"}
    found, checked = wrong_argument_findings(local.te, TransferEngine, tee.ENGINE_METHODS,
                                             valid, skip=skip)
    assert 60 < checked, checked
    assert not found, "\n".join(found)
    assert local.te.get_rpc_port() > 0
