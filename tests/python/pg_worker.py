"""One rank of the mooncake-cpu tests (tests/python/test_pg.py).

    python3 pg_worker.py SCENARIO[+SCENARIO...] RANK WORLD PORT

Runs each SCENARIO in turn against torch.distributed with backend "mooncake-cpu", checks
every result against the value computed locally, and exits 0 only when all
checks pass (an AssertionError names the first that failed).
"""

import os
import sys
import threading
import time

import torch
import torch.distributed as dist

import mooncake.pg as mpg

SUM, PROD, MIN, MAX = (dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN,
                       dist.ReduceOp.MAX)
# small tensors take the direct exchange, large ones (> 64 KiB) the ring; the
# large count is not a multiple of the world size, so the blocks are uneven
SMALL, LARGE = 5, 70001


def value(rank, n, dtype):
    """Rank-distinct values that reduce exactly in every dtype."""
    if dtype == torch.bool:
        return (torch.arange(n) + rank) % 3 == 0
    if dtype in (torch.float32, torch.float64):
        return (torch.arange(n, dtype=torch.float64) % 7 + rank * 0.5).to(dtype)
    return ((torch.arange(n) % 5) + rank + 1).to(dtype)


def reduce_ref(op, tensors):
    out = tensors[0].clone()
    for t in tensors[1:]:
        if out.dtype == torch.bool:
            out = out | t if op in (SUM, MAX) else out & t
        elif op == SUM:
            out = out + t
        elif op == PROD:
            out = out * t
        elif op == MIN:
            out = torch.minimum(out, t)
        else:
            out = torch.maximum(out, t)
    return out.to(tensors[0].dtype)


def check(name, got, want):
    assert got.dtype == want.dtype and torch.equal(got, want), \
        f"{name}: got {got.flatten()[:8].tolist()} want {want.flatten()[:8].tolist()}"


def collectives(rank, ws):
    for n in (SMALL, LARGE):
        # every reduce dtype and op on the direct path; a few on the ring
        dtypes = [torch.float32, torch.int32, torch.int64, torch.float64, torch.int8,
                  torch.uint8, torch.int16, torch.bool]
        if n == LARGE:
            dtypes = [torch.float32, torch.int64, torch.bool]
        for dt in dtypes:
            ops = [SUM, MAX] if dt == torch.bool else [SUM, PROD, MIN, MAX]
            if n == LARGE or dt in (torch.int8, torch.uint8, torch.int16):
                ops = [ops[0], ops[-1]] if dt == torch.bool else [SUM, MIN]
            for op in ops:
                allv = [value(r, n, dt) for r in range(ws)]
                t = allv[rank].clone()
                dist.all_reduce(t, op=op)
                check(f"all_reduce {dt} {op} n={n}", t, reduce_ref(op, allv))
                t = allv[rank].clone()
                dist.reduce(t, dst=ws - 1, op=op)
                if rank == ws - 1:
                    check(f"reduce {dt} {op} n={n}", t, reduce_ref(op, allv))
            # reduce_scatter_tensor and reduce_scatter (list)
            inp = [value(r, n * ws, dt) for r in range(ws)]
            out = torch.empty(n, dtype=dt)
            dist.reduce_scatter_tensor(out, inp[rank].clone(), op=ops[0])
            want = reduce_ref(ops[0], inp)[rank * n:(rank + 1) * n]
            check(f"reduce_scatter_tensor {dt} n={n}", out, want)
            out = torch.empty(n, dtype=dt)
            dist.reduce_scatter(out, list(inp[rank].clone().chunk(ws)), op=ops[-1])
            want = reduce_ref(ops[-1], inp)[rank * n:(rank + 1) * n]
            check(f"reduce_scatter {dt} n={n}", out, want)
        movers = (torch.float16, torch.bfloat16, torch.float32, torch.uint8, torch.int64,
                  torch.bool)
        for dt in movers if n == SMALL else (torch.float32, torch.bool):
            vdt = torch.float64 if dt in (torch.float16, torch.bfloat16) else dt
            allv = [value(r, n, vdt).to(dt) for r in range(ws)]
            # broadcast from every root
            for root in range(ws):
                t = allv[rank].clone()
                dist.broadcast(t, src=root)
                check(f"broadcast {dt} root={root} n={n}", t, allv[root])
            out = torch.empty(n * ws, dtype=dt)
            dist.all_gather_into_tensor(out, allv[rank])
            check(f"all_gather_into_tensor {dt} n={n}", out, torch.cat(allv))
            outs = [torch.empty(n, dtype=dt) for _ in range(ws)]
            dist.all_gather(outs, allv[rank])
            check(f"all_gather {dt} n={n}", torch.cat(outs), torch.cat(allv))
            gl = [torch.empty(n, dtype=dt) for _ in range(ws)] if rank == 0 else None
            dist.gather(allv[rank], gl, dst=0)
            if rank == 0:
                check(f"gather {dt} n={n}", torch.cat(gl), torch.cat(allv))
            t = torch.empty(n, dtype=dt)
            src = ws - 1
            dist.scatter(t, [value(j + 10, n, torch.float64).to(dt) for j in range(ws)]
                         if rank == src else None, src=src)
            check(f"scatter {dt} n={n}", t, value(rank + 10, n, torch.float64).to(dt))
            # all_to_all_single (equal) and all_to_all (lists)
            inp = torch.cat([value(rank * ws + j, n, torch.float64).to(dt) for j in range(ws)])
            out = torch.empty_like(inp)
            dist.all_to_all_single(out, inp)
            want = torch.cat([value(j * ws + rank, n, torch.float64).to(dt) for j in range(ws)])
            check(f"all_to_all_single {dt} n={n}", out, want)
            outs = [torch.empty(n, dtype=dt) for _ in range(ws)]
            dist.all_to_all(outs, list(inp.chunk(ws)))
            check(f"all_to_all {dt} n={n}", torch.cat(outs), want)
    # uneven all_to_all_single: rank r sends (j + 1) rows to rank j
    isz = [j + 1 for j in range(ws)]
    osz = [rank + 1] * ws
    inp = torch.cat([torch.full((j + 1, 3), rank * 100 + j, dtype=torch.int32) for j in range(ws)])
    out = torch.empty(sum(osz), 3, dtype=torch.int32)
    dist.all_to_all_single(out, inp, osz, isz)
    want = torch.cat([torch.full((rank + 1, 3), j * 100 + rank, dtype=torch.int32)
                      for j in range(ws)])
    check("all_to_all_single uneven", out, want)
    # non-contiguous tensor, async op, barrier
    t = torch.full((4, 6), rank + 1.0).t()
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    assert mpg.get_local_success(work) and not mpg.get_failed_ranks_hint(work).any()
    check("all_reduce non-contiguous", t, torch.full((6, 4), ws * (ws + 1) / 2))
    dist.barrier()
    # refusals: AVG, float16 reductions, two tensors
    for bad in (lambda: dist.all_reduce(torch.ones(2, dtype=torch.float16)),
                lambda: dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND)):
        try:
            bad()
        except RuntimeError as e:
            assert "not supported" in str(e), e
        else:
            raise AssertionError("an unsupported reduction was accepted")
    # the upstream CPU asserts (spec 1.8)
    t = torch.tensor([rank + 1], dtype=torch.int32)
    dist.all_reduce(t)
    assert t.item() == ws * (ws + 1) // 2
    objs = [None] * ws
    dist.all_gather_object(objs, {"rank": rank})
    assert objs == [{"rank": r} for r in range(ws)], objs


def p2p(rank, ws):
    # ring send/recv, several chunks (MOONCAKE_P2P_CHUNK_SIZE is small here)
    for n in (3, 300000):
        nxt, prv = (rank + 1) % ws, (rank - 1) % ws
        out = torch.arange(n, dtype=torch.float32) + rank
        got = torch.empty(n, dtype=torch.float32)
        if rank % 2 == 0:
            dist.send(out, nxt)
            dist.recv(got, prv)
        else:
            dist.recv(got, prv)
            dist.send(out, nxt)
        check(f"ring send/recv n={n}", got, torch.arange(n, dtype=torch.float32) + prv)
    # ordering: several messages from 0 to 1 arrive in order
    if rank == 0:
        for i in range(5):
            dist.send(torch.full((7,), i, dtype=torch.int64), 1)
    elif rank == 1:
        for i in range(5):
            t = torch.empty(7, dtype=torch.int64)
            dist.recv(t, 0)
            assert t.eq(i).all(), (i, t)
    # batch_isend_irecv, every rank sending first, messages far larger than
    # the slots in flight: the sends must not hold up the receives
    nxt, prv = (rank + 1) % ws, (rank - 1) % ws
    n = 300000
    got = torch.empty(n, dtype=torch.int32)
    ops = [dist.P2POp(dist.isend, torch.full((n,), rank, dtype=torch.int32), nxt),
           dist.P2POp(dist.irecv, got, prv)]
    works = dist.batch_isend_irecv(ops)
    for w in works:
        w.wait()
        assert mpg.get_local_success(w) and not mpg.get_failed_ranks_hint(w).any()
    check("batch_isend_irecv", got, torch.full((n,), prv, dtype=torch.int32))
    try:
        dist.send(torch.ones(1), rank)
    except ValueError as e:
        assert "not another active rank" in str(e)
    else:
        raise AssertionError("send to self was accepted")


def groups(rank, ws):
    # every rank calls new_group (torch's rule); members use it
    g01 = dist.new_group([0, 1])
    odd = dist.new_group([r for r in range(ws) if r % 2])
    if rank in (0, 1):
        t = torch.tensor([rank + 1.0])
        dist.all_reduce(t, group=g01)
        assert t.item() == 3.0
        big = torch.full((LARGE,), float(rank))
        dist.all_reduce(big, group=g01, op=MAX)
        assert big.eq(1.0).all()
        assert dist.get_world_size(g01) == 2
    if rank % 2:
        out = [torch.empty(1) for _ in range(dist.get_world_size(odd))]
        dist.all_gather(out, torch.tensor([float(rank)]), group=odd)
        assert [x.item() for x in out] == [float(r) for r in range(ws) if r % 2]
        dist.broadcast(t := torch.tensor([rank]), src=1, group=odd)
        assert t.item() == 1
    # the world group still works after the subgroups
    t = torch.tensor([1])
    dist.all_reduce(t)
    assert t.item() == ws
    dist.destroy_process_group(g01) if rank in (0, 1) else None


def failure(rank, ws):
    """The last rank dies in the middle of an all_reduce; the others return
    within the collective timeout with it in failed_ranks_hint, then the group
    (auto-synced) and a new group without it work."""
    timeout_s = 3.0
    mpg.set_collective_timeout_us(int(timeout_s * 1e6))
    victim = ws - 1
    big = torch.ones(4 << 20)
    if rank == victim:
        threading.Timer(0.1, lambda: os.kill(os.getpid(), 9)).start()
        while True:
            dist.all_reduce(big)
    for i in range(1000):
        t0 = time.monotonic()
        work = dist.all_reduce(big, async_op=True)
        work.wait()
        took = time.monotonic() - t0
        if not mpg.get_local_success(work):
            break
    else:
        raise AssertionError("the victim never died")
    hint = mpg.get_failed_ranks_hint(work)
    assert hint.dtype == torch.int32 and hint.numel() == ws, hint
    assert hint[victim] == 1 and hint.sum() == 1, f"hint {hint.tolist()}"
    print(f"rank {rank}: the failed all_reduce took {took:.2f} s", flush=True)
    assert took < timeout_s, f"the failed all_reduce took {took:.1f} s"
    # auto-deactivate + auto-sync: the survivors go on in the same group
    assert mpg.get_active_ranks(None)[:ws].tolist() == [1] * (ws - 1) + [0]
    assert dist.get_world_size() == ws - 1
    assert mpg.get_current_epoch(None) == 1
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    assert t.item() == sum(range(1, ws)), t
    g = dist.new_group(list(range(ws - 1)))
    t = torch.full((LARGE,), rank + 1.0)
    w = dist.all_reduce(t, group=g, async_op=True)
    w.wait()
    assert mpg.get_local_success(w)
    assert t.eq(sum(range(1, ws))).all()


def main():
    scenario, rank, ws, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    dist.init_process_group("mooncake-cpu", rank=rank, world_size=ws,
                            init_method=f"tcp://127.0.0.1:{port}")
    assert dist.get_backend() == "mooncake-cpu"
    assert dist.get_world_size() == ws and dist.get_rank() == rank
    fns = {"collectives": collectives, "p2p": p2p, "groups": groups, "failure": failure}
    for name in scenario.split("+"):
        fns[name](rank, ws)
    dist.barrier()
    print(f"rank {rank} {scenario} ok", flush=True)
    os._exit(0)  # the victim's peers: skip torch's teardown of a group with a dead rank


if __name__ == "__main__":
    main()
