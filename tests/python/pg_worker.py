"""One rank of the mooncake-cpu tests (tests/python/test_pg.py).

    python3 pg_worker.py SCENARIO[+SCENARIO...] RANK WORLD PORT

Runs each SCENARIO in turn against torch.distributed with backend "mooncake-cpu", checks
every result against the value computed locally, and exits 0 only when all
checks pass (an AssertionError names the first that failed).
"""

import faulthandler
import os
import signal
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
T0 = time.monotonic()


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
    within the bound the code promises with it in failed_ranks_hint, then the
    group (auto-synced) and a new group without it work.

    The bound runs from the later of the death and the survivor's call (the
    time before the death is ordinary data movement, which a loaded machine
    stretches and the promise does not cover): the collective timeout, plus
    one verdict probe (pg.c PROBE_VERDICT_MS, 1 s), plus SLACK_S for a loaded
    2-core machine.  A killed rank's engine refuses connections at once, so
    the survivors usually see it within a probe period (200 ms).  Nothing
    sleeps: the victim takes part in WARMUP all_reduces, issues one more and
    kills itself with it in progress, after writing its death time (the
    system-wide monotonic clock) to the store."""
    timeout_s, verdict_s, slack_s = 3.0, 1.0, 3.0
    mpg.set_collective_timeout_us(int(timeout_s * 1e6))
    victim = ws - 1
    store = dist.distributed_c10d._get_default_store()
    big = torch.ones(4 << 20)
    warmup = 2
    if rank == victim:
        for _ in range(warmup):
            dist.all_reduce(big)
        dist.all_reduce(big, async_op=True)  # the survivors are in it now, or soon
        store.set("pg_test/victim_died_at", repr(time.monotonic()))
        os.kill(os.getpid(), 9)
    for i in range(1000):
        t0 = time.monotonic()
        work = dist.all_reduce(big, async_op=True)
        work.wait()
        ended = time.monotonic()
        if not mpg.get_local_success(work):
            break
    else:
        raise AssertionError("the victim never died")
    assert i >= warmup, f"all_reduce {i} failed, before the victim died"
    hint = mpg.get_failed_ranks_hint(work)
    assert hint.dtype == torch.int32 and hint.numel() == ws, hint
    assert hint[victim] == 1 and hint.sum() == 1, f"hint {hint.tolist()}"
    died_at = float(store.get("pg_test/victim_died_at"))
    took = ended - max(t0, died_at)
    print(f"rank {rank}: the failed all_reduce ended {took:.2f} s after the later of its "
          f"call and the death ({ended - t0:.2f} s after its call)", flush=True)
    bound = timeout_s + verdict_s + slack_s
    assert took < bound, f"the failed all_reduce took {took:.1f} s (bound {bound:g} s)"
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


def algorithms(rank, ws):
    """The algorithms are chosen for bandwidth (issue 19): a large all_reduce,
    all_gather, reduce_scatter or broadcast goes round a ring, every step one
    message to the next active rank and one from the previous, never one
    message to every peer at once; a small all_reduce is one direct exchange
    with every peer.  Counted by wrapping MooncakeProcessGroup._run, through
    which every data movement of a collective passes."""
    calls = []
    run = mpg.MooncakeProcessGroup._run

    def spy(self, mb, sends, recvs, timeout_us, state):
        calls.append((sorted(x[0] for x in sends), sorted(x[0] for x in recvs)))
        return run(self, mb, sends, recvs, timeout_us, state)

    nxt, prv = (rank + 1) % ws, (rank - 1) % ws
    others = [r for r in range(ws) if r != rank]

    def ring(what, steps):
        got = list(calls)
        calls.clear()
        assert len(got) == steps, f"{what}: {len(got)} exchanges, want {steps}: {got}"
        assert all(c == ([nxt], [prv]) for c in got), f"{what}: not a ring: {got}"
    mpg.MooncakeProcessGroup._run = spy
    try:
        big = torch.full((LARGE,), rank + 1.0)
        dist.all_reduce(big)
        ring("all_reduce", 2 * (ws - 1))  # reduce-scatter, then all-gather
        assert big.eq(ws * (ws + 1) / 2).all()
        out = torch.empty(LARGE * ws)
        dist.all_gather_into_tensor(out, torch.full((LARGE,), float(rank)))
        ring("all_gather", ws - 1)
        assert torch.equal(out, torch.arange(ws).repeat_interleave(LARGE).float())
        part = torch.empty(LARGE)
        dist.reduce_scatter_tensor(part, torch.ones(LARGE * ws))
        ring("reduce_scatter", ws - 1)
        assert part.eq(ws).all()
        t = torch.full((LARGE,), float(rank))
        dist.broadcast(t, src=0)
        first = calls.pop(0)  # the root scatters a block to each rank, then the ring
        assert first == ((others, []) if rank == 0 else ([], [0])), first
        ring("broadcast", ws - 1)
        assert t.eq(0).all()
        small = torch.full((SMALL,), rank + 1.0)
        dist.all_reduce(small)
        assert calls == [(others, others)], f"small all_reduce: {calls}"
        assert small.eq(ws * (ws + 1) / 2).all()
    finally:
        mpg.MooncakeProcessGroup._run = run


def p2p_peer_dies(rank, ws):
    """Rank 1 is SIGKILLed while rank 0 waits in a recv from it: the recv
    returns (it does not raise: spec 1.3) within the P2P timeout plus the
    verdict probe plus slack, counted from the later of the death and the
    call, with rank 1 in failed_ranks_hint and local_success False; later
    send/recv with rank 1 refuse.  Ends the process (the world lost a rank)."""
    timeout_s, verdict_s, slack_s = 2.0, 1.0, 3.0
    mpg.set_p2p_timeout_us(int(timeout_s * 1e6))
    store = dist.distributed_c10d._get_default_store()
    msg = torch.empty(4)
    if rank == 1:
        dist.recv(msg, 0)  # the pair's stream works first
        assert msg.tolist() == [1.0, 2.0, 3.0, 4.0], msg
        # until rank 0's send has its engine's answer (a death before it would
        # fail that send, which is not what this checks)
        store.wait(["pg_test/p2p_sent"])
        store.set("pg_test/p2p_victim_died_at", repr(time.monotonic()))
        os.kill(os.getpid(), 9)
    work = dist.isend(torch.tensor([1.0, 2.0, 3.0, 4.0]), 1)
    work.wait()
    assert mpg.get_local_success(work)
    store.set("pg_test/p2p_sent", "1")
    t0 = time.monotonic()
    work = dist.irecv(msg, 1)
    work.wait()
    ended = time.monotonic()
    assert not mpg.get_local_success(work), "a recv from a dead peer succeeded"
    assert mpg.get_failed_ranks_hint(work).tolist() == [0, 1], mpg.get_failed_ranks_hint(work)
    took = ended - max(t0, float(store.get("pg_test/p2p_victim_died_at")))
    print(f"rank {rank}: the recv from the dead peer ended {took:.2f} s after the later of "
          f"its call and the death", flush=True)
    bound = timeout_s + verdict_s + slack_s
    assert took < bound, f"the failed recv took {took:.1f} s (bound {bound:g} s)"
    for call in (lambda: dist.send(torch.ones(1), 1), lambda: dist.recv(torch.ones(1), 1)):
        try:
            call()
        except RuntimeError as e:
            assert "stream is closed" in str(e), e
        else:
            raise AssertionError("send/recv with the dead peer did not refuse")
    print(f"rank {rank} p2p_peer_dies ok", flush=True)
    os._exit(0)


def spec_defaults():
    """The timeouts of spec 1.3/1.4 before any setter: collective and P2P
    10 s, fault reconciliation window 30 s, admission 20 s (there are no view
    acknowledgements to time out: members install a view at their next
    collective, docs/python.md)."""
    assert mpg._ctx.collective_timeout_us == 10_000_000, mpg._ctx.collective_timeout_us
    assert mpg._ctx.p2p_timeout_us == 10_000_000, mpg._ctx.p2p_timeout_us
    assert mpg._ctx.fault_window_us == 30_000_000, mpg._ctx.fault_window_us
    assert mpg.ADMISSION_TIMEOUT_S == 20.0


def overlap(rank, ws):
    """Work handles run beside the caller: rank 0 issues two async
    collectives that cannot finish until rank 1 joins them, and rank 1 joins
    only after a message rank 0 sends next; a backend that ran collectives at
    issue time would hang here.  Then an irecv stays pending until its peer
    sends, while its own rank sends."""
    big = torch.full((LARGE,), rank + 1.0)
    small = torch.tensor([rank * 10, rank * 10 + 1])
    outs = [torch.empty(2, dtype=torch.int64) for _ in range(ws)]
    msg = torch.empty(3, dtype=torch.int32)
    if rank == 0:
        w1 = dist.all_reduce(big, async_op=True)
        w2 = dist.all_gather(outs, small, async_op=True)
        assert not w1.is_completed() and not w2.is_completed()
        for r in range(1, ws):
            dist.send(torch.tensor([7, 8, 9], dtype=torch.int32), r)
        w2.wait()
        w1.wait()
        assert w1.is_completed() and mpg.get_local_success(w1)
    else:
        dist.recv(msg, 0)
        assert msg.tolist() == [7, 8, 9]
        dist.all_reduce(big)
        dist.all_gather(outs, small)
    assert big.eq(ws * (ws + 1) / 2).all()
    assert [o.tolist() for o in outs] == [[r * 10, r * 10 + 1] for r in range(ws)]
    # rank 1's irecv waits for rank 0, which sends only after rank 1's send
    if rank == 1:
        r = dist.irecv(msg, 0)
        assert not r.is_completed()
        dist.send(torch.tensor([1, 2, 3], dtype=torch.int32), 0)
        r.wait()
        assert r.is_completed() and msg.tolist() == [4, 5, 6]
    elif rank == 0:
        dist.recv(msg, 1)
        assert msg.tolist() == [1, 2, 3]
        dist.send(torch.tensor([4, 5, 6], dtype=torch.int32), 1)


def die_after_first_all_reduce(rank, ws):
    """The victim: one all_reduce, then death once every survivor's copy of it has
    completed. A rank's own completion says nothing of its last sends, so a
    survivor could otherwise lose the first op while another lost the second,
    and the two would pair different operations after the resync."""
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    assert t.item() == ws * (ws + 1) / 2
    store = dist.distributed_c10d._get_default_store()
    store.wait([f"pg_test/first_done/{r}" for r in range(ws) if r != rank])
    os.kill(os.getpid(), 9)


def lose(rank, ws, victim):
    """On a survivor: all_reduce until the victim's death shows (it dies after
    the first); auto-sync leaves the survivors in the group."""
    mpg.set_collective_timeout_us(3_000_000)
    t = torch.tensor([rank + 1.0])
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    assert mpg.get_local_success(work) and t.item() == ws * (ws + 1) / 2, t
    dist.distributed_c10d._get_default_store().set(f"pg_test/first_done/{rank}", "1")
    for _ in range(100):
        work = dist.all_reduce(torch.ones(1), async_op=True)
        work.wait()
        if not mpg.get_local_success(work):
            break
    else:
        raise AssertionError("the victim never died")
    assert mpg.get_failed_ranks_hint(work).nonzero().flatten().tolist() == [victim]
    assert mpg.get_active_ranks(None)[victim] == 0


def all_ranks_work(rank, ws, group=None, base=0):
    """all_reduce (direct and ring), all_gather and ring send/recv over every
    rank of the group (in-group rank i is global rank base + i): results exact."""
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t, group=group)
    assert t.item() == ws * (ws + 1) / 2, t
    big = torch.full((LARGE,), rank + 1.0)
    dist.all_reduce(big, group=group)
    assert big.eq(ws * (ws + 1) / 2).all()
    outs = [torch.empty(2, dtype=torch.int64) for _ in range(ws)]
    dist.all_gather(outs, torch.tensor([rank, 7]), group=group)
    assert [o.tolist() for o in outs] == [[r, 7] for r in range(ws)], outs
    nxt, prv = (rank + 1) % ws, (rank - 1) % ws
    got = torch.empty(1000, dtype=torch.int32)
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.full((1000,), rank,
                                                                       dtype=torch.int32),
                                               base + nxt, group),
                                    dist.P2POp(dist.irecv, got, base + prv, group)])
    for w in works:
        w.wait()
        assert mpg.get_local_success(w)
    assert got.eq(prv).all(), got[:4]


def step(rank, what):
    """A progress line (the test shows every rank's output when one fails)."""
    print(f"rank {rank}: {what} (epoch {mpg.get_current_epoch(None)}) at "
          f"{time.monotonic() - T0:.2f} s", flush=True)


def recover(rank, ws):
    """The last rank dies after one all_reduce; a replacement process (started
    by the test when it is gone; scenario "replacement") joins; the survivors
    recover it and the world of ws ranks works again."""
    victim = ws - 1
    if rank == victim:
        die_after_first_all_reduce(rank, ws)
    lose(rank, ws, victim)
    step(rank, "lost the victim")
    assert dist.get_world_size() == ws - 1 and mpg.get_current_epoch(None) == 1
    # every survivor looks before any proposes (a faster survivor's commit
    # would otherwise show here: epoch 2 between the two getters, seen once)
    store = dist.distributed_c10d._get_default_store()
    store.set(f"pg_test/lost_checked/{rank}", "1")
    store.wait([f"pg_test/lost_checked/{r}" for r in range(ws) if r != victim])
    # every survivor proposes; admission waits for the replacement's readiness
    res = mpg.recover_ranks(None, [victim])
    assert res.status == mpg.ProposalStatus.Applied, res
    assert res.new_epoch == 2 == mpg.get_current_epoch(None), res
    assert mpg.get_peer_state(None, list(range(ws))) == [True] * ws
    # an equivalent call again is a no-op
    again = mpg.recover_ranks(None, [victim])
    assert again.status == mpg.ProposalStatus.Applied and again.new_epoch == 2, again
    assert dist.get_world_size() == ws
    assert mpg.get_active_ranks(None).tolist() == [1] * ws
    step(rank, "recovered")
    all_ranks_work(rank, ws)
    step(rank, "worked with the replacement")
    # then the members take it out again (framework-managed deactivation),
    # once it has looked at its view (it is told of the change: epoch 3)
    dist.distributed_c10d._get_default_store().wait(["pg_test/replacement_checked"])
    res = mpg.deactivate_ranks(None, [victim])
    assert res.status == mpg.ProposalStatus.Applied and res.new_epoch == 3, res
    assert dist.get_world_size() == ws - 1
    step(rank, "deactivated the replacement")
    all_ranks_work(rank, ws - 1)


def replacement(rank, ws):
    # the init (is_extension) declared readiness; the first collective waits
    # for the activation, then takes part with the survivors
    assert dist.get_world_size() == ws
    all_ranks_work(rank, ws)
    step(rank, "worked with the survivors")
    assert mpg.get_current_epoch(None) == 2
    assert mpg.get_active_ranks(None).tolist() == [1] * ws
    dist.distributed_c10d._get_default_store().set("pg_test/replacement_checked", "1")
    # the members deactivate this rank next, without it; it leaves at once (the
    # departure handshake, no rendezvous); rank 0's store outlives its last call
    shut_down()
    dist.distributed_c10d._get_default_store().set("pg_test/left/replacement", "1")
    print(f"rank {rank} replacement ok", flush=True)
    os._exit(0)


# --- extension (spec 1.4 rank slots): "extend" founds a group of ws ranks with
# max_group_size EXT_MAX; "extender" processes join at slots ws, ws+1, ...
# (is_extension=True, their world size one past their slot), each started by
# a go key on the raw store once the one before is in; the last one
# (slot EXT_MAX) is refused.

EXT_MAX = 4


def ext_work(rank, ws):
    """all_reduce (direct and ring), all_gather, broadcast from the newest
    slot, and send/recv between rank 0 and the newest slot: exact results."""
    all_ranks_work(rank, ws)
    b = torch.full((3,), float(rank))
    dist.broadcast(b, src=ws - 1)
    assert b.eq(ws - 1).all(), b
    if rank == 0:
        dist.send(torch.arange(10) * ws, dst=ws - 1)
        back = torch.empty(10, dtype=torch.int64)
        dist.recv(back, src=ws - 1)
        assert back.tolist() == [i * ws + 1 for i in range(10)], back
    elif rank == ws - 1:
        got = torch.empty(10, dtype=torch.int64)
        dist.recv(got, src=0)
        assert got.tolist() == [i * ws for i in range(10)], got
        dist.send(got + 1, dst=0)


def ext_grow(rank, ws, raw):
    """From a group of ws active ranks, admit slots ws..EXT_MAX-1 in turn (every
    active member proposes each), work over the grown group each time, then
    let the refused joiner (slot EXT_MAX) try and wait for its verdict."""
    for slot in range(ws, EXT_MAX):
        if rank == 0:
            raw.set(f"pg_test/ext/go/{slot}", "1")
        res = mpg.recover_ranks(None, [slot])
        assert res.status == mpg.ProposalStatus.Applied, res
        assert dist.get_world_size() == slot + 1, dist.get_world_size()
        assert mpg.get_active_ranks(None).tolist() == [1] * (slot + 1) + [0] * (EXT_MAX - slot - 1)
        ext_work(rank, slot + 1)
        step(rank, f"worked with slot {slot}")
    if rank == 0:
        raw.set(f"pg_test/ext/go/{EXT_MAX}", "1")
    raw.wait(["pg_test/ext/refused"])


def extend(rank, ws, raw):
    assert mpg.get_active_ranks(None).tolist() == [1] * ws + [0] * (EXT_MAX - ws)
    ext_work(rank, ws)
    step(rank, "founders worked")
    ext_grow(rank, ws, raw)


def extender(rank, ws, raw):
    # the init declared readiness; the first collective waits for the activation
    assert dist.get_world_size() == ws
    ext_work(rank, ws)
    step(rank, "joined and worked")
    ext_grow(rank, ws, raw)


def ext_refused(rank, ws, raw):
    """Slot EXT_MAX of a group of capacity EXT_MAX: with that capacity the
    options are refused at once; claiming a larger one, the registration is
    rejected and the communicator is invalid (local collectives, no P2P)."""
    try:
        dist.init_process_group("mooncake-cpu", rank=rank, world_size=ws, store=raw,
                                pg_options=mpg.MooncakeBackendOptions(EXT_MAX, True))
        raise AssertionError("a join beyond max_group_size was accepted")
    except RuntimeError as e:
        assert "max_group_size" in str(e), e
    # the failed init used up a group name: the default group's store prefix
    # would no longer be the founders'
    dist.distributed_c10d._group_count = 0
    import warnings
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        dist.init_process_group("mooncake-cpu", rank=rank, world_size=ws, store=raw,
                                pg_options=mpg.MooncakeBackendOptions(ws, True))
    assert any("rejected" in str(w.message) and "capacity" in str(w.message)
               for w in warned), [str(w.message) for w in warned]
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)  # local only: the mask is {self}
    assert t.item() == rank + 1.0, t
    try:
        dist.send(torch.ones(1), dst=0)
        raise AssertionError("send on an invalid communicator was accepted")
    except RuntimeError as e:
        assert "invalid" in str(e) and "capacity" in str(e), e
    pg = dist.distributed_c10d._get_default_group()
    pg.shutdown()
    raw.set("pg_test/ext/refused", "1")
    print(f"rank {rank} ext_refused ok", flush=True)
    os._exit(0)


def rank0_dies(rank, ws):
    """Rank 0 dies (the store runs in the test, not in rank 0); the survivors
    go on in the world group (a hole at slot 0, size unchanged) and in a new
    group of the survivors."""
    if rank == 0:
        die_after_first_all_reduce(rank, ws)
    t0 = time.monotonic()
    lose(rank, ws, 0)
    print(f"rank {rank}: lost rank 0 in {time.monotonic() - t0:.2f} s", flush=True)
    assert dist.get_world_size() == ws
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    assert t.item() == ws * (ws + 1) / 2 - 1, t
    t0 = time.monotonic()
    g = dist.new_group(list(range(1, ws)))
    print(f"rank {rank}: new_group took {time.monotonic() - t0:.2f} s", flush=True)
    assert dist.get_world_size(g) == ws - 1 and dist.get_rank(g) == rank - 1
    all_ranks_work(rank - 1, ws - 1, g, 1)
    big = torch.full((LARGE,), float(rank))
    dist.all_reduce(big, group=g, op=MAX)
    assert big.eq(ws - 1).all()


# --- single-rank membership calls (spec 1.3: "one call from any online rank
# is enough"): one member calls, the others only run their next collective.

def group_pg(group=None):
    return group if group is not None else dist.distributed_c10d._get_default_group()


def solo_caller(ws):
    """The member that deactivates (not rank 0 when there are three survivors:
    any member may call)."""
    return 1 if ws > 2 else 0


def solo(rank, ws):
    """Framework-managed mode (no auto-deactivate): the last rank dies after
    one all_reduce; the survivors' next all_reduce fails with it in the hint;
    ONE survivor deactivates it and the others, which make no membership call,
    all_reduce over the survivors in the new view.  A replacement process
    (scenario solo_replacement) is then recovered by ONE other survivor and
    the world of ws ranks works again; another single call takes a live rank
    out, which is told (its next collective refuses)."""
    victim = ws - 1
    store = dist.distributed_c10d._get_default_store()
    if rank == victim:
        die_after_first_all_reduce(rank, ws)
    mpg.set_collective_timeout_us(3_000_000)
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    assert t.item() == ws * (ws + 1) / 2, t
    store.set(f"pg_test/first_done/{rank}", "1")
    for _ in range(100):
        work = dist.all_reduce(torch.ones(1), async_op=True)
        work.wait()
        if not mpg.get_local_success(work):
            break
    else:
        raise AssertionError("the victim never died")
    assert mpg.get_failed_ranks_hint(work).nonzero().flatten().tolist() == [victim]
    # framework-managed: the failure changed nothing by itself
    assert mpg.get_active_ranks(None)[victim] == 1 and mpg.get_current_epoch(None) == 0
    step(rank, "saw the victim fail")
    store.set(f"pg_test/solo/saw/{rank}", "1")
    caller = solo_caller(ws)
    if rank == caller:
        # after every survivor checked epoch 0 above (a faster caller's
        # deactivation would otherwise already show in a slower one's check)
        store.wait([f"pg_test/solo/saw/{r}" for r in range(ws - 1)])
        res = mpg.deactivate_ranks(None, [victim])
        assert res.status == mpg.ProposalStatus.Applied and res.new_epoch == 1, res
        store.set("pg_test/solo/deactivated", "1")
    else:
        # ordering only (no membership call): the next collective comes after the call
        store.wait(["pg_test/solo/deactivated"])
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    assert t.item() == (ws - 1) * ws / 2, f"all_reduce over the survivors: {t}"
    assert mpg.get_current_epoch(None) == 1
    assert dist.get_world_size() == ws - 1
    assert mpg.get_active_ranks(None).tolist() == [1] * (ws - 1) + [0]
    step(rank, "all_reduced without the victim")
    if ws > 2:
        all_ranks_work(rank, ws - 1)
    # recovery by one member (another one than the deactivation's when there is one)
    caller = ws - 2
    if rank == caller:
        res = mpg.recover_ranks(None, [victim])  # admission waits for its readiness
        assert mpg.get_peer_state(None, [victim]) == [True]
        assert res.status == mpg.ProposalStatus.Applied and res.new_epoch == 2, res
        store.set("pg_test/solo/recovered", "1")
    else:
        store.wait(["pg_test/solo/recovered"])
    all_ranks_work(rank, ws)
    assert mpg.get_current_epoch(None) == 2 and dist.get_world_size() == ws
    step(rank, "worked with the replacement")
    # the same call again, from every member now: an equivalent view, no change
    res = mpg.recover_ranks(None, [victim])
    assert res.status == mpg.ProposalStatus.Applied and res.new_epoch == 2, res
    store.set(f"pg_test/solo/again/{rank}", "1")
    # one member takes a live rank (the replacement) out: it is told
    if rank == 0:
        # after every member's repeated call (one made after the change would
        # be a new proposal: activate the rank again)
        store.wait([f"pg_test/solo/again/{r}" for r in range(1, ws)])
        res = mpg.deactivate_ranks(None, [victim])
        assert res.status == mpg.ProposalStatus.Applied and res.new_epoch == 3, res
        store.set("pg_test/solo/out", "1")
    else:
        store.wait(["pg_test/solo/out"])
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    assert t.item() == (ws - 1) * ws / 2, t
    assert mpg.get_current_epoch(None) == 3
    store.wait(["pg_test/solo/refused"])  # the replacement saw its refusal


def refused_as_taken_out():
    """On a rank another member took out: its next collective refuses."""
    try:
        dist.all_reduce(torch.ones(1))
    except RuntimeError as e:
        assert "not active in this group" in str(e), e
    else:
        raise AssertionError("a rank taken out ran a collective")


def solo_replacement(rank, ws):
    """The replacement of solo: activated by one member's recover_ranks (its
    first collective waits for that), then taken out by one member's
    deactivate_ranks, which it learns without a call: its next collective
    raises "rank is not active"."""
    store = dist.distributed_c10d._get_default_store()
    all_ranks_work(rank, ws)
    assert mpg.get_current_epoch(None) == 2
    step(rank, "worked with the survivors")
    res = mpg.recover_ranks(None, [rank])  # an equivalent call from the joined rank too
    assert res.status == mpg.ProposalStatus.Applied and res.new_epoch == 2, res
    store.set(f"pg_test/solo/again/{rank}", "1")
    store.wait(["pg_test/solo/out"])
    refused_as_taken_out()
    assert mpg.get_current_epoch(None) == 3
    assert mpg.get_active_ranks(None)[rank] == 0
    store.set("pg_test/solo/refused", "1")
    shut_down()
    store.set("pg_test/left/replacement", "1")
    print(f"rank {rank} solo_replacement ok", flush=True)
    os._exit(0)


def solo_race(rank, ws):
    """(3 ranks) Rank 2's all_reduce is already waiting on the old view when
    rank 0 alone takes rank 1 (alive) out: rank 2's operation ends with
    RuntimeError naming the change instead of waiting forever, and issued
    again it runs on the new view, paired with rank 0's.  Rank 1 is told
    (its next collective refuses), rejoins in place with join_group, and
    rank 2 alone activates it: the three all_reduce again."""
    store = dist.distributed_c10d._get_default_store()
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    assert t.item() == 6, t
    if rank == 2:
        w = dist.all_reduce(torch.tensor([3.0]), async_op=True)
        until = time.monotonic() + 60
        while not in_mailbox_run("mooncake-pg-coll"):
            assert time.monotonic() < until, "the all_reduce never started"
            time.sleep(0.001)
        store.set("pg_test/race/waiting", "1")
        try:
            w.wait()
        except RuntimeError as e:
            assert "membership of group" in str(e) and "issue it again" in str(e), e
        else:
            raise AssertionError("the all_reduce on the old view returned")
        t = torch.tensor([3.0])
        dist.all_reduce(t)
        assert t.item() == 4, f"re-issued all_reduce: {t}"
    elif rank == 0:
        store.wait(["pg_test/race/waiting"])
        res = mpg.deactivate_ranks(None, [1])
        assert res.status == mpg.ProposalStatus.Applied and res.new_epoch == 1, res
        store.set("pg_test/race/out", "1")
        t = torch.tensor([1.0])
        dist.all_reduce(t)
        assert t.item() == 4, t
    else:
        store.wait(["pg_test/race/out"])
        refused_as_taken_out()
    assert mpg.get_current_epoch(None) == 1
    step(rank, "after the race")
    if rank == 0:  # looked before rank 2's activation, which it would install
        store.set("pg_test/race/checked", "1")
    if rank == 2:
        store.wait(["pg_test/race/checked"])
        res = mpg.activate_ranks(None, [1])  # admission waits for rank 1's join_group
        assert res.status == mpg.ProposalStatus.Applied and res.new_epoch == 2, res
        store.set("pg_test/race/back", "1")
    elif rank == 1:
        mpg.join_group(None)
    else:
        store.wait(["pg_test/race/back"])
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    assert t.item() == 6, t
    assert mpg.get_current_epoch(None) == 2 and dist.get_world_size() == 3


# --- view acknowledgements (spec 1.4: a 20 s timeout; ranks that fail to
# acknowledge are reported in dropped_ranks with AppliedWithDroppedRanks)

ACK_SHORT_MS = 2000  # the acknowledgement timeout of the stopped-rank call


def stopped(pid):
    """Whether process pid is stopped (SIGSTOP took effect: state T)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0] == "T"


# x86-64 system calls a process blocked in a store wait sleeps in: read,
# poll, recvfrom, ppoll
BLOCKING_SYSCALLS = {"0", "7", "45", "271"}


def stop_while_blocked(pid):
    """SIGSTOP pid once its main thread sleeps in a blocking call (the store
    wait of its join_group): stopped between the sends of a store request,
    it would leave the store's server (one thread in torch 1.13) waiting for
    the rest, and every rank's store calls with it.  Where /proc/PID/syscall
    is unreadable the first stop is taken."""
    until = time.monotonic() + 60
    while True:
        os.kill(pid, signal.SIGSTOP)
        while not stopped(pid):
            assert time.monotonic() < until, "rank 2 never stopped"
            time.sleep(0.001)
        try:
            with open(f"/proc/{pid}/syscall") as f:
                nr = f.read().split()[0]
        except OSError:
            return
        if nr in BLOCKING_SYSCALLS:
            return
        os.kill(pid, signal.SIGCONT)
        assert time.monotonic() < until, f"rank 2 never blocked (system call {nr})"
        time.sleep(0.001)


def acks(rank, ws):
    """(3 ranks) Rank 0 alone takes live rank 2 out: rank 1, blocked in a store
    wait (no collective, no pg call), acknowledges through its watcher, so
    the call is Applied with nothing dropped, well under the 20 s timeout.
    Rank 2 rejoins in place (join_group) and is SIGSTOPped while it waits;
    rank 0 activates it with the timeout lowered to 2 s: AppliedWithDroppedRanks
    naming rank 2, after the timeout and within a bound, and the view without
    it is committed (epoch 3): ranks 0 and 1 all_reduce in it.  Resumed, rank
    2 finds itself out, rejoins, and one more activation (Applied) brings the
    three together."""
    store = dist.distributed_c10d._get_default_store()
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    assert t.item() == 6, t
    if rank == 0:
        t0 = time.monotonic()
        res = mpg.deactivate_ranks(None, [2])
        took = time.monotonic() - t0
        step(rank, f"deactivated live rank 2 in {took:.3f} s: {res}")
        assert res.status == mpg.ProposalStatus.Applied and res.new_epoch == 1, res
        assert res.dropped_ranks == [] and res.reject_reason == "", res
        # no wait for the timeout (slack for a loaded machine and ASan)
        assert took < mpg.VIEW_ACK_TIMEOUT_MS / 1000 / 2, f"took {took:.1f} s"
        store.set("pg_test/acks/out", "1")
    else:
        store.wait(["pg_test/acks/out"])
    if rank == 2:
        refused_as_taken_out()
        store.set("pg_test/acks/pid", str(os.getpid()))
        mpg.join_group(None)  # stopped in here; returns after SIGCONT
        # activated (epoch 2), then dropped for not acknowledging (epoch 3)
        assert mpg.get_current_epoch(None) == 3, mpg.get_current_epoch(None)
        assert mpg.get_active_ranks(None).tolist() == [1, 1, 0]
        step(rank, "resumed: dropped")
        mpg.join_group(None)  # rejoins; rank 0 activates it again
    elif rank == 1:
        t = torch.tensor([2.0])
        dist.all_reduce(t)
        assert t.item() == 3, t
        store.wait(["pg_test/acks/dropped"])
        t = torch.tensor([2.0])
        dist.all_reduce(t)  # on epoch 3 (it installs 2, then 3)
        assert t.item() == 3 and mpg.get_current_epoch(None) == 3, t
        store.wait(["pg_test/acks/back"])
    else:
        t = torch.tensor([1.0])
        dist.all_reduce(t)
        assert t.item() == 3, t
        pid = int(store.get("pg_test/acks/pid"))
        until = time.monotonic() + 60
        while not mpg.get_peer_state(None, [2])[0]:  # its join_group declared readiness
            assert time.monotonic() < until, "rank 2 never declared readiness"
            time.sleep(0.001)
        try:
            stop_while_blocked(pid)
            os.environ["MOONCAKE_PG_VIEW_ACK_TIMEOUT_MS"] = str(ACK_SHORT_MS)
            t0 = time.monotonic()
            res = mpg.activate_ranks(None, [2])
            took = time.monotonic() - t0
            step(rank, f"activated stopped rank 2 in {took:.3f} s: {res}")
            assert res.status == mpg.ProposalStatus.AppliedWithDroppedRanks, res
            assert res.dropped_ranks == [2] and res.new_epoch == 3, res
            # the wait is the timeout; the bound leaves slack for a loaded machine
            assert ACK_SHORT_MS / 1000 <= took < ACK_SHORT_MS / 1000 + 6, f"took {took:.1f} s"
            assert mpg.get_active_ranks(None).tolist() == [1, 1, 0]
            store.set("pg_test/acks/dropped", "1")
            t = torch.tensor([1.0])
            dist.all_reduce(t)
            assert t.item() == 3, t
        finally:
            os.kill(pid, signal.SIGCONT)
            # the default again: the activation below must not drop a slow rank
            os.environ.pop("MOONCAKE_PG_VIEW_ACK_TIMEOUT_MS", None)
        until = time.monotonic() + 60
        while not mpg.get_peer_state(None, [2])[0]:  # resumed, it rejoins
            assert time.monotonic() < until, "rank 2 never rejoined"
            time.sleep(0.001)
        res = mpg.activate_ranks(None, [2])
        assert res.status == mpg.ProposalStatus.Applied and res.dropped_ranks == [], res
        assert res.new_epoch == 4, res
        store.set("pg_test/acks/back", "1")
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    assert t.item() == 6, t
    assert mpg.get_current_epoch(None) == 4 and dist.get_world_size() == 3



def expect_p2p_error(work, *words):
    """work.wait() raises RuntimeError naming every one of words."""
    try:
        work.wait()
    except RuntimeError as e:
        for w in words:
            assert w in str(e), f"{w!r} not in: {e}"
        return str(e)
    raise AssertionError(f"no error, expected one naming {words}")


def p2p_views(rank, ws):
    """(3 ranks) Send/recv follow a membership change at the new view's first
    collective: a pair's send and recv issued on the same side of it meet,
    and one that crosses it ends with a clear error, never a hang or another
    message in place of a lost one.  1. Before rank 1 takes rank 0 out, rank
    1 isends 1.5 to rank 2, which irecvs it, and each also waits in an irecv
    from the other that nothing matches: after the first all_reduce on epoch
    1 the first pair completed, the others say "issue it again", and the
    pair then exchanges on epoch 1.  2. Rank 1 sends 30 on epoch 1 that rank
    2 does not take before rank 1 brings rank 0 back (epoch 2); after the
    first all_reduce on epoch 2 rank 1 sends 40: rank 2's recv from rank 1
    says one message was lost, and the one after it takes 40."""
    store = dist.distributed_c10d._get_default_store()
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    assert t.item() == 6, t
    again = ("first collective on a view after epoch 0", "issue it again",
             "do not cross a membership change")
    if rank == 0:
        store.wait(["pg_test/p2pv/out"])
        mpg.join_group(None)  # rank 1 brings it back (part 2)
    else:
        other = 3 - rank
        if rank == 1:
            pre = dist.isend(torch.tensor([1.5]), dst=2)
        else:
            got = torch.zeros(1)
            pre = dist.irecv(got, src=1)
        w = dist.irecv(torch.zeros(1), src=other)  # nothing matches it before the change
        if rank == 1:
            store.wait(["pg_test/p2pv/waiting"])
            res = mpg.deactivate_ranks(None, [0])
            assert res.status == mpg.ProposalStatus.Applied and res.new_epoch == 1, res
            assert not w.is_completed()  # send/recv move at the next collective
            store.set("pg_test/p2pv/out", "1")
        else:
            store.set("pg_test/p2pv/waiting", "1")
            store.wait(["pg_test/p2pv/out"])
        t = torch.ones(1)
        dist.all_reduce(t)  # the first collective on epoch 1 (ranks 1 and 2)
        assert t.item() == 2 and mpg.get_current_epoch(None) == 1, t
        pre.wait()
        assert mpg.get_local_success(pre)
        if rank == 2:
            assert got.item() == 1.5, got
        step(rank, "irecv ended: " + expect_p2p_error(w, *again, f"with rank {other}"))
        if rank == 1:
            dist.send(torch.tensor([10.0]), dst=2)
            t = torch.zeros(1)
            dist.recv(t, src=2)
            assert t.item() == 20, t
            dist.send(torch.tensor([30.0]), dst=2)  # rank 2 never takes it on epoch 1
            res = mpg.activate_ranks(None, [0])  # rank 0 rejoins in place
            assert res.status == mpg.ProposalStatus.Applied and res.new_epoch == 2, res
            store.set("pg_test/p2pv/back", "1")
        else:
            t = torch.zeros(1)
            dist.recv(t, src=1)
            assert t.item() == 10, t
            dist.send(torch.tensor([20.0]), dst=1)
            store.wait(["pg_test/p2pv/back"])  # its next collective comes after the call
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)  # the first collective on epoch 2: send/recv move
    assert t.item() == 6 and mpg.get_current_epoch(None) == 2, t
    if rank == 1:
        dist.send(torch.tensor([40.0]), dst=2)
    elif rank == 2:
        t = torch.zeros(1)
        msg = expect_p2p_error(dist.irecv(t, src=1), "recv from rank 1", "sent 1 message",
                               "earlier views (up to epoch 1)", "lost",
                               "do not cross a membership change")
        step(rank, "recv refused: " + msg)
        dist.recv(t, src=1)
        assert t.item() == 40, f"the message after the lost one: {t}"
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    assert t.item() == 6, t
    assert mpg.get_current_epoch(None) == 2 and dist.get_world_size() == 3

def manual_sync(rank, ws):
    """auto_deactivate without auto_sync (spec 1.4's second mode): the victim's
    death shows in the hint and leaves the local active set, the next
    operation refuses until sync_after_failure, which reconciles the
    survivors (a new epoch); the group then works and a second sync has
    nothing pending."""
    victim = ws - 1
    if rank == victim:
        die_after_first_all_reduce(rank, ws)
    lose(rank, ws, victim)
    assert mpg.get_current_epoch(None) == 0
    try:
        dist.all_reduce(torch.ones(1))
    except RuntimeError as e:
        assert "sync_after_failure(pg) first" in str(e), e
    else:
        raise AssertionError("an operation ran before sync_after_failure")
    res = mpg.sync_after_failure(None)
    assert res.status == mpg.SyncAfterFailureStatus.Reconciled, res
    assert mpg.get_current_epoch(None) == 1 and dist.get_world_size() == ws - 1
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    assert t.item() == (ws - 1) * ws / 2, t
    assert mpg.sync_after_failure(None).status == mpg.SyncAfterFailureStatus.NoPending


def in_mailbox_run(thread_prefix):
    """A thread named thread_prefix* is inside MooncakeProcessGroup._run."""
    frames = sys._current_frames()
    where = mpg.MooncakeProcessGroup.__module__  # _run's module (pg.py lists them)
    for th in threading.enumerate():
        f = frames.get(th.ident) if th.name.startswith(thread_prefix) else None
        while f is not None:
            if f.f_code.co_name == "_run" and f.f_globals.get("__name__") == where:
                return True
            f = f.f_back
    return False


def shutdown_recv(rank, ws):
    """A thread blocked in recv from a live peer that never sends while another
    thread shuts the group down: shutdown() stops that recv and waits for it
    (within the depart bound), the recv raises RuntimeError naming the shutdown,
    and later operations refuse.  Ends the process (the group is gone)."""
    store = dist.distributed_c10d._get_default_store()
    if rank != 0:
        store.wait(["pg_test/shutdown_done"])  # stays alive (and silent) until then
        shut_down()
        print(f"rank {rank} shutdown_recv ok", flush=True)
        store.set(f"pg_test/left/{rank}", "1")
        os._exit(0)
    pg = next(g for g in dist.distributed_c10d._pg_map
              if isinstance(g, mpg.MooncakeProcessGroup))
    got = {}

    def receiver():
        try:
            dist.recv(torch.empty(4), src=1)
            got["result"] = "returned"
        except RuntimeError as e:
            got["result"] = e

    th = threading.Thread(target=receiver)
    th.start()
    # the recv is running on its worker (inside the mailbox's run) before we shut down
    until = time.monotonic() + 60
    while not in_mailbox_run("mooncake-pg-recv-1"):
        assert time.monotonic() < until, "the recv never started"
        time.sleep(0.001)
    t0 = time.monotonic()
    pg.shutdown(timeout_ms=3000)
    took = time.monotonic() - t0
    # shutdown returned only after the recv's operation had ended: its worker
    # is out of the mailbox's run().  (Not "result" in got: the receiving
    # thread takes the exception after the operation ended, when it is next
    # scheduled, which a loaded machine delays past shutdown's return; that
    # check failed once at load average 27.)
    assert not in_mailbox_run("mooncake-pg-recv-1"), "shutdown returned while the recv still ran"
    th.join(timeout=60)
    assert not th.is_alive(), "the recv never returned"
    assert isinstance(got["result"], RuntimeError), got
    assert "shut down" in str(got["result"]), got["result"]
    print(f"rank 0: shutdown with a blocked recv took {took:.2f} s", flush=True)
    assert took < 3.0 + 5.0, f"shutdown took {took:.1f} s"  # the depart bound, with slack
    for call in (lambda: dist.send(torch.ones(4), 1), lambda: dist.all_reduce(torch.ones(4))):
        try:
            call()
        except RuntimeError as e:
            assert "shut down" in str(e), e
        else:
            raise AssertionError("an operation after shutdown did not refuse")
    store.set("pg_test/shutdown_done", "1")
    store.wait([f"pg_test/left/{r}" for r in range(1, ws)])  # the store lives in this rank
    print(f"rank {rank} shutdown_recv ok", flush=True)
    os._exit(0)


def main():
    if os.environ.get("PG_TEST_DUMP_S"):  # debugging a hang: every thread's stack, then go on
        faulthandler.dump_traceback_later(float(os.environ["PG_TEST_DUMP_S"]), repeat=True)
    scenario, rank, ws, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    spec_defaults()
    kw = {}
    if scenario in ("extend", "extender"):
        # the test hosts the store (a joiner waits for its turn before init)
        addr = os.environ.get("MOONCAKE_PGTEST_MASTER_ADDR") or "127.0.0.1"
        raw = kw["store"] = dist.TCPStore(addr, port, ws, False)
        kw["pg_options"] = mpg.MooncakeBackendOptions(EXT_MAX, scenario == "extender")
        if scenario == "extender":
            raw.wait([f"pg_test/ext/go/{rank}"])
            if rank == EXT_MAX:
                ext_refused(rank, ws, raw)
    if scenario in ("replacement", "solo_replacement"):
        kw["pg_options"] = mpg.MooncakeBackendOptions(torch.ones(ws, dtype=torch.int32), True)
    # upstream's harness variables (spec 1.7): the store's address (its port
    # comes on the command line from run_ranks) and the engines' device filter
    addr = os.environ.get("MOONCAKE_PGTEST_MASTER_ADDR") or "127.0.0.1"
    filters = [d for d in os.environ.get("MOONCAKE_PGTEST_DEVICE_FILTERS", "").split(",") if d]
    if filters:
        mpg.set_device_filter(filters)
        print(f"rank {rank}: device filter {filters}", flush=True)
    if "store" in kw:
        pass
    elif os.environ.get("PG_TEST_STORE") == "external":  # the test runs the store
        kw["store"] = dist.TCPStore(addr, port, ws, False)
    else:
        kw["init_method"] = f"tcp://{addr}:{port}"
    t0 = T0
    dist.init_process_group("mooncake-cpu", rank=rank, world_size=ws, **kw)
    print(f"rank {rank}: init took {time.monotonic() - t0:.2f} s", flush=True)
    assert dist.get_backend() == "mooncake-cpu"
    assert dist.get_world_size() == ws and dist.get_rank() == rank
    fns = {"collectives": collectives, "p2p": p2p, "groups": groups, "failure": failure,
           "recover": recover, "replacement": replacement, "rank0_dies": rank0_dies, "overlap": overlap,
           "shutdown_recv": shutdown_recv, "algorithms": algorithms,
           "p2p_peer_dies": p2p_peer_dies, "solo": solo, "solo_replacement": solo_replacement,
           "solo_race": solo_race, "manual_sync": manual_sync, "acks": acks,
           "p2p_views": p2p_views}
    if scenario in ("extend", "extender"):
        fns = {scenario: lambda r, w: globals()[scenario](r, w, raw)}
    for name in scenario.split("+"):
        fns[name](rank, ws)
    dist.barrier()
    leave(rank, scenario)
    print(f"rank {rank} {scenario} ok at {time.monotonic() - t0:.2f} s", flush=True)
    os._exit(0)  # the victim's peers: skip torch's teardown of a group with a dead rank


def shut_down():
    """Leave every group (the departure handshake a normal exit runs from atexit;
    the workers end with os._exit, which skips it)."""
    for pg in list(dist.distributed_c10d._pg_map):
        if isinstance(pg, mpg.MooncakeProcessGroup):
            pg.shutdown()


def leave(rank, scenario):
    """Leave the groups right after the last operation: no rendezvous (the
    departure handshake covers a peer still waiting for this engine's answer).
    Only the store's host (rank 0 unless the test runs it) leaves last, so no
    rank's store call loses its server."""
    store = dist.distributed_c10d._get_default_store()
    alive = [r for r in range(dist.get_world_size()) if mpg.get_active_ranks(None)[r]]
    shut_down()
    if rank == 0:
        left = [f"pg_test/left/{r}" for r in alive if r != rank]
        if {"recover", "solo"} & set(scenario.split("+")):
            left.append("pg_test/left/replacement")
        store.wait(left)
    else:
        store.set(f"pg_test/left/{rank}", "1")


if __name__ == "__main__":
    main()
