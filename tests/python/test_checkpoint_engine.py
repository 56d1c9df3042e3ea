"""checkpoint-engine's P2P weight update (spec python-api-and-integrations.md
B.7, components.md 3.7) on our engine, end to end, in 2 and 4 processes.

Each rank does what checkpoint_engine/p2p_store.py and ps.py do:
TransferEngine() initialized in P2PHANDSHAKE mode ("tcp", with a dummy RDMA
device name, as PS_P2P_STORE_RDMA_DEVICES forces on a box without RDMA,
which the engine must ignore), address ip:get_rpc_port(); its checkpoint
shard packed into host buckets at 256-byte alignment and registered with
batch_register_memory (== 0); {p2p_store_addr, [{ptr, size, metas}]}
shared with all_gather_object over gloo; then every rank pulls every other
rank's buckets with batch_transfer_sync_read(owner, local_ptrs, remote_ptrs,
lens) (== 0) and checks each tensor against the owner's.  After
batch_unregister_memory the same read fails.  Buckets are plain CPU
tensors: pinned memory needs CUDA, which this torch build lacks.
"""

import multiprocessing
import queue
import time

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from mooncake.engine import TransferEngine  # noqa: E402


def run_rank(rank, world, init, results):
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)

    def tensors_of(r):
        g = torch.Generator().manual_seed(1000 + r)
        shapes = [(333,), (64, 129), (7, 5, 3), (4096,)]
        return {f"layer{r}.w{i}": torch.randn(s, generator=g, dtype=torch.float32)
                for i, s in enumerate(shapes)}

    def align(n, a=256):
        return (n + a - 1) // a * a

    # pack into two buckets (checkpoint-engine: max(4 GiB, largest tensor); small here)
    mine = tensors_of(rank)
    names = sorted(mine)
    groups = [names[:2], names[2:]]
    buckets, metas = [], []
    for group in groups:
        size = sum(align(mine[n].numel() * mine[n].element_size()) for n in group)
        buf = torch.zeros(size, dtype=torch.uint8)
        off, bm = 0, []
        for n in group:
            nbytes = mine[n].numel() * mine[n].element_size()
            buf[off:off + nbytes].copy_(mine[n].view(-1).view(torch.uint8))
            bm.append({"name": n, "offset": off, "nbytes": nbytes, "shape": list(mine[n].shape)})
            off += align(nbytes)
        buckets.append(buf)
        metas.append(bm)

    te = TransferEngine()
    for attempt in range(8):  # checkpoint-engine retries (port races)
        if te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "dummy_rdma0") == 0:
            break
    else:
        raise RuntimeError("initialize failed")
    addr = f"127.0.0.1:{te.get_rpc_port()}"
    ptrs = [b.data_ptr() for b in buckets]
    assert te.batch_register_memory(ptrs, [b.numel() for b in buckets]) == 0

    gathered = [None] * world
    dist.all_gather_object(gathered, {"p2p_store_addr": addr,
                                      "buckets": [{"ptr": p, "size": b.numel(), "metas": m}
                                                  for p, b, m in zip(ptrs, buckets, metas)]})

    # every rank pulls every other rank's buckets into one registered receive buffer
    checked = 0
    for owner in range(world):
        if owner == rank:
            continue
        info = gathered[owner]
        sizes = [b["size"] for b in info["buckets"]]
        recv = torch.zeros(sum(sizes), dtype=torch.uint8)
        assert te.register_memory(recv.data_ptr(), recv.numel()) == 0
        local, off = [], 0
        for s in sizes:
            local.append(recv.data_ptr() + off)
            off += s
        assert te.batch_transfer_sync_read(info["p2p_store_addr"], local,
                                           [b["ptr"] for b in info["buckets"]], sizes) == 0
        want = tensors_of(owner)
        base = 0
        for b, s in zip(info["buckets"], sizes):
            for m in b["metas"]:
                got = recv[base + m["offset"]: base + m["offset"] + m["nbytes"]]
                got = got.view(torch.float32).view(m["shape"])
                assert torch.equal(got, want[m["name"]]), (rank, owner, m["name"])
                checked += 1
            base += s
        assert te.unregister_memory(recv.data_ptr()) == 0
        owner_info = info
    dist.barrier()

    # owners unregister; a read of those addresses must now fail
    assert te.batch_unregister_memory(ptrs) == 0
    dist.barrier()
    probe = torch.zeros(64, dtype=torch.uint8)
    assert te.register_memory(probe.data_ptr(), 64) == 0
    rc = te.batch_transfer_sync_read(owner_info["p2p_store_addr"], [probe.data_ptr()],
                                     [owner_info["buckets"][0]["ptr"]], [64])
    assert rc != 0, "read of unregistered memory succeeded"
    dist.barrier()
    results.put((rank, checked))
    dist.destroy_process_group()



@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed missing")
@pytest.mark.parametrize("world", [2, 4])
def test_checkpoint_engine_p2p_update(tmp_path, world):
    # forked ranks: torch is imported once, here, not once per rank (seconds each)
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    init = f"file://{tmp_path / 'rdv'}"
    ps = [ctx.Process(target=run_rank, args=(r, world, init, results)) for r in range(world)]
    for p in ps:
        p.start()
    got = {}
    try:
        deadline = time.monotonic() + 90
        while len(got) < world and time.monotonic() < deadline:
            try:
                rank, checked = results.get(timeout=0.5)
                got[rank] = checked
            except queue.Empty:
                if not any(p.is_alive() for p in ps):
                    break  # a rank failed: its traceback is on stderr
    finally:
        for p in ps:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
    assert [p.exitcode for p in ps] == [0] * world
    # every rank checked every other rank's 4 tensors, byte for byte
    assert got == {r: 4 * (world - 1) for r in range(world)}
