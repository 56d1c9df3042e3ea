"""mooncake.shared_segment (one rank, and two ranks over torch.distributed
gloo in two processes), mooncake.transfer_engine_topology_dump and the
cli_bench shim."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from mooncake import shared_segment as ss
from mooncake.shared_segment import SharedSegmentError, create_shared_segment

try:
    import torch
    import torch.distributed as dist
except ImportError:  # pragma: no cover
    torch = dist = None

BLOCKS = {"k": {"count": 3, "shape": (5,), "dtype": "float32"},
          "v": {"count": 2, "shape": (7, 3), "dtype": "int16"}}


def shm_files():
    return {f for f in os.listdir(ss.SHM_DIR) if f.startswith("mooncake-seg-")}


def test_single_rank_layout_and_views():
    assert ss.shared_segment_supported()
    before = shm_files()
    seg = create_shared_segment("one", BLOCKS, world_size=1, rank_id=0)
    assert shm_files() == before  # unlinked once mapped
    assert seg.layout["k"]["offset"] == 0 and seg.layout["v"]["offset"] == 4096
    assert seg.size() == 8192 and seg.base_addr() % 4096 == 0
    k = seg.arrays("k")
    assert k.shape == (3, 5) and k.dtype == np.float32
    k[:] = 1.5
    assert seg.arrays("k")[2, 4] == 1.5
    assert seg.arrays("v").shape == (2, 7, 3)
    with pytest.raises(KeyError):
        seg.arrays("nope")
    del k
    seg.close()


@pytest.mark.parametrize("kw, msg", [
    (dict(device_id=0), "CUDA build"),
    (dict(mmap=False), "mmap=False"),
    (dict(rank_id=1), "bad ranks"),
    (dict(owner_rank=-1), "bad ranks"),
    (dict(blocks={}), "non-empty"),
    (dict(blocks={"a": {"count": 0, "shape": (1,), "dtype": "f4"}}), "positive"),
    (dict(blocks={"a": {"count": 1, "shape": (1,)}}), "exactly count"),
    (dict(blocks={"a": {"count": 1, "shape": (1,), "dtype": "nodtype"}}), "bad dtype"),
    (dict(world_size=2, rank_id=0), "torch.distributed"),
])
def test_bad_arguments_are_refused(kw, msg):
    args = dict(name="bad", blocks=BLOCKS, world_size=1, rank_id=0)
    args.update(kw)
    before = shm_files()
    with pytest.raises(SharedSegmentError, match=msg):
        create_shared_segment(**args)
    assert shm_files() == before


@pytest.mark.skipif(torch is None, reason="torch (python3-torch) is not installed")
def test_torch_views():
    seg = create_shared_segment("t", {"kv": {"count": 2, "shape": (4,),
                                             "dtype": torch.bfloat16}}, 1, 0)
    t = seg.tensors("kv")
    assert t.shape == (2, 4) and t.dtype == torch.bfloat16
    t.fill_(2.0)
    assert float(seg.tensors("kv")[1, 3]) == 2.0
    with pytest.raises(TypeError, match="bfloat16"):
        seg.arrays("kv")


RANK = r"""
import sys, torch, torch.distributed as dist
from mooncake.shared_segment import create_shared_segment
rank, init = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
seg = create_shared_segment("tp", {"x": {"count": 4, "shape": (8,), "dtype": torch.int32}},
                            world_size=2, rank_id=rank, owner_rank=1)
x = seg.tensors("x")
x[rank] = rank + 10          # each rank writes its row
dist.barrier()
print(x[:2, 0].tolist(), flush=True)
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.skipif(dist is None or not dist.is_available(), reason="torch.distributed missing")
def test_two_ranks_see_the_same_memory(tmp_path):
    init = f"file://{tmp_path / 'rdv'}"
    before = shm_files()
    ps = [subprocess.Popen([sys.executable, "-c", RANK, str(r), init], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    outs = [p.communicate(timeout=120) for p in ps]
    for p, (out, err) in zip(ps, outs):
        assert p.returncode == 0, err[-3000:]
        assert out.strip().splitlines()[-1] == "[10, 11]", out
    assert shm_files() == before


def test_topology_dump_prints_json():
    r = subprocess.run([sys.executable, "-m", "mooncake.transfer_engine_topology_dump",
                        "--compact"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    topo = json.loads(r.stdout)
    assert isinstance(topo, dict)
    r = subprocess.run([sys.executable, "-m", "mooncake.transfer_engine_topology_dump",
                        "--no-such-option"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "unrecognized arguments" in r.stderr


def test_cli_bench_execs_the_benchmark():
    if not os.environ.get("MC_BUILD_DIR"):
        pytest.skip("MC_BUILD_DIR not set")
    r = subprocess.run([sys.executable, "-m", "mooncake.cli_bench", "--help"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "transfer_engine_bench" in (r.stdout + r.stderr)
