"""mooncake.pg's collectives: the algorithms (ring reduce-scatter and
all-gather for large tensors, one direct exchange for small ones, pairwise
all_to_all, direct to or from the root) and the tensor checks they share
with send/recv.

_Collectives is a part of MooncakeProcessGroup (python/mooncake/_pg_group.py):
its methods run on the group's lane (_submit, _coll_op) and move data through
its _run.  Split out of pg.py (python/mooncake/pg.py lists the modules).
"""

from mooncake import _pg
from mooncake._optional import require
from mooncake._pg_config import _ctx

torch = require("torch", "mooncake.pg")
from torch._C._distributed_c10d import ReduceOp  # noqa: E402


# Tensors of at most this many bytes use one direct exchange; larger ones the ring.
DIRECT_MAX = 64 << 10

_OP_CODE = {ReduceOp.SUM: 1, ReduceOp.PRODUCT: 2, ReduceOp.MIN: 3, ReduceOp.MAX: 4}
_DT_CODE = {torch.int8: 0, torch.uint8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4,
            torch.float32: 5, torch.float64: 6, torch.bool: 7}


def _addr(t):
    return t.data_ptr()


def _nbytes(t):
    return t.numel() * t.element_size()


class _Collectives:
    """The collectives of MooncakeProcessGroup (a mixin: the group's state and
    its lane are in _pg_group.py)."""

    # --- primitive patterns over the active ranks

    def _direct_gather_all(self, state, act, src, rows):
        """rows[i] <- src of act[i] (rows[me] filled by the caller)."""
        me = self._rank
        nb = _nbytes(src)
        sends = [(p, _addr(src), nb) for p in act if p != me]
        recvs = [(p, _addr(rows[i]), nb) for i, p in enumerate(act) if p != me]
        self._run(self._coll, sends, recvs, _ctx.collective_timeout_us, state)

    def _ring_reduce_scatter(self, state, act, buf, blocks, op, dt):
        """In place on buf: afterwards block i of act[i] is reduced on act[i]."""
        k, idx = len(act), act.index(self._rank)
        nxt, prv = act[(idx + 1) % k], act[(idx - 1) % k]
        for s in range(k - 1):
            sb = blocks[(idx - s - 1) % k]
            rb = blocks[(idx - s - 2) % k]
            if not self._run(self._coll, [(nxt, _addr(sb), _nbytes(sb))],
                             [(prv, _addr(rb), _nbytes(rb), op, dt)],
                             _ctx.collective_timeout_us, state):
                return False
        return True

    def _ring_all_gather(self, state, act, blocks):
        """blocks[idx] is ours; afterwards every block is filled."""
        k, idx = len(act), act.index(self._rank)
        nxt, prv = act[(idx + 1) % k], act[(idx - 1) % k]
        for s in range(k - 1):
            sb = blocks[(idx - s) % k]
            rb = blocks[(idx - s - 1) % k]
            if not self._run(self._coll, [(nxt, _addr(sb), _nbytes(sb))],
                             [(prv, _addr(rb), _nbytes(rb))], _ctx.collective_timeout_us, state):
                return False
        return True

    @staticmethod
    def _split(flat, k):
        """k contiguous blocks of a 1-D tensor, sizes differing by at most one element."""
        n = flat.numel()
        base, extra = divmod(n, k)
        out, off = [], 0
        for i in range(k):
            c = base + (1 if i < extra else 0)
            out.append(flat[off:off + c])
            off += c
        return out

    def _reduce_rows(self, rows, op, dt, out):
        """out = rows[0] op rows[1] op ... in row order (identical on every rank)."""
        out.copy_(rows[0])
        for r in rows[1:]:
            _pg.reduce(op, dt, _addr(out), _addr(r), _nbytes(out))

    # --- the collectives

    def allreduce(self, tensors, opts=None):
        t = _one(tensors)
        op, dt = _red(opts.reduceOp if opts is not None else ReduceOp.SUM, t)
        return self._coll_op(self._allreduce, t, op, dt)

    def _allreduce(self, state, act, t, op, dt):
        k = len(act)
        if k == 1 or t.numel() == 0:
            return
        with _Contig(t) as c:
            flat = c.view(-1)
            if _nbytes(flat) <= DIRECT_MAX or flat.numel() < k:
                rows = torch.empty((k, flat.numel()), dtype=flat.dtype)
                rows[act.index(self._rank)].copy_(flat)
                self._direct_gather_all(state, act, flat, rows)
                if not state[0]:
                    self._reduce_rows(rows, op, dt, flat)
                return
            blocks = self._split(flat, k)
            if self._ring_reduce_scatter(state, act, flat, blocks, op, dt):
                self._ring_all_gather(state, act, blocks)

    def broadcast(self, tensors, opts=None):
        t = _one(tensors)
        root = opts.rootRank + opts.rootTensor if opts is not None else 0
        return self._coll_op(self._broadcast, t, root)

    def _broadcast(self, state, act, t, root):
        k, me = len(act), self._rank
        _check_root(root, act)
        if k == 1 or t.numel() == 0:
            return
        with _Contig(t) as c:
            flat = _bytes(c)
            nb = _nbytes(flat)
            if nb <= DIRECT_MAX or flat.numel() < k:
                if me == root:
                    self._run(self._coll, [(p, _addr(flat), nb) for p in act if p != me], [],
                              _ctx.collective_timeout_us, state)
                else:
                    self._run(self._coll, [], [(root, _addr(flat), nb)],
                              _ctx.collective_timeout_us, state)
                return
            # scatter from the root, then a ring all-gather
            blocks = self._split(flat, k)
            idx = act.index(me)
            if me == root:
                sends = [(p, _addr(blocks[i]), _nbytes(blocks[i]))
                         for i, p in enumerate(act) if p != me]
                ok = self._run(self._coll, sends, [], _ctx.collective_timeout_us, state)
            else:
                ok = self._run(self._coll, [], [(root, _addr(blocks[idx]), _nbytes(blocks[idx]))],
                               _ctx.collective_timeout_us, state)
            if ok:
                self._ring_all_gather(state, act, blocks)

    def _allgather_base(self, output, input, opts=None):
        _same(output, input)
        k = self.size()
        if output.numel() != input.numel() * k:
            raise ValueError(f"_allgather_base: output has {output.numel()} elements, expected "
                             f"{input.numel()} x {k}")
        return self._coll_op(self._allgather_flat, output, input)

    def _allgather_flat(self, state, act, output, input):
        with _Contig(output) as c:
            flat = _bytes(c)
            m = _nbytes(input)
            blocks = [flat[r * m:(r + 1) * m] for r in range(self.size())]
            self._allgather_blocks(state, act, blocks, input)

    def _allgather_blocks(self, state, act, blocks, input):
        """blocks[r] (uint8, contiguous, one per in-group rank) <- input of rank r."""
        k, me = len(act), self._rank
        blocks[me].copy_(_bytes(input.contiguous()))
        if k == 1 or blocks[me].numel() == 0:
            return
        ab = [blocks[r] for r in act]
        if blocks[me].numel() * k <= DIRECT_MAX * 4:
            self._direct_gather_all(state, act, blocks[me], ab)
        else:
            self._ring_all_gather(state, act, ab)

    def allgather(self, output_lists, input_list, opts=None):
        out = _one(output_lists, "output list")
        t = _one(input_list)
        k = self.size()
        if len(out) != k:
            raise ValueError(f"all_gather: the output list has {len(out)} tensors, expected {k}")
        for o in out:
            if o.numel() != t.numel() or o.dtype != t.dtype:
                raise ValueError("all_gather: every output tensor must match the input")
        def body(state):
            # straight into the caller's tensors (copies only for non-contiguous ones)
            tmp = [o if o.is_contiguous()
                   else torch.empty_like(o, memory_format=torch.contiguous_format) for o in out]
            self._allgather_blocks(state, self._active_list(), [_bytes(x) for x in tmp], t)
            for o, x in zip(out, tmp):
                if x is not o:
                    o.copy_(x)
        return self._submit(body, out)

    def _reduce_scatter_base(self, output, input, opts=None):
        _same(output, input)
        k = self.size()
        if input.numel() != output.numel() * k:
            raise ValueError(f"_reduce_scatter_base: input has {input.numel()} elements, "
                             f"expected {output.numel()} x {k}")
        op, dt = _red(opts.reduceOp if opts is not None else ReduceOp.SUM, output)
        return self._coll_op(self._reduce_scatter_flat, output, input, op, dt)

    def _reduce_scatter_flat(self, state, act, output, input, op, dt):
        k, me, m = len(act), self._rank, output.numel()
        inp = input.contiguous().view(-1)
        if k == 1:
            output.copy_(inp[me * m:(me + 1) * m].view_as(output))
            return
        if _nbytes(inp) <= DIRECT_MAX * 4:
            rows = torch.empty((k, m), dtype=inp.dtype)
            rows[act.index(me)].copy_(inp[me * m:(me + 1) * m])
            sends = [(p, _addr(inp[p * m:(p + 1) * m]), m * inp.element_size())
                     for p in act if p != me]
            recvs = [(p, _addr(rows[i]), m * inp.element_size()) for i, p in enumerate(act)
                     if p != me]
            if self._run(self._coll, sends, recvs, _ctx.collective_timeout_us, state):
                with _Contig(output) as c:
                    self._reduce_rows(rows, op, dt, c.view(-1))
            return
        work = inp.clone()
        blocks = [work[r * m:(r + 1) * m] for r in act]
        if self._ring_reduce_scatter(state, act, work, blocks, op, dt):
            output.copy_(blocks[act.index(me)].view_as(output))

    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        out = _one(output_tensors)
        lst = _one(input_lists, "input list")
        k = self.size()
        if len(lst) != k:
            raise ValueError(f"reduce_scatter: the input list has {len(lst)} tensors, expected {k}")
        for t in lst:
            if t.numel() != out.numel() or t.dtype != out.dtype:
                raise ValueError("reduce_scatter: every input tensor must match the output")
        flat = (torch.cat([t.reshape(-1) for t in lst]) if out.numel()
                else torch.empty(0, dtype=out.dtype))
        return self._reduce_scatter_base(out, flat, opts)

    def reduce(self, tensors, opts=None):
        t = _one(tensors)
        op, dt = _red(opts.reduceOp if opts is not None else ReduceOp.SUM, t)
        root = opts.rootRank + opts.rootTensor if opts is not None else 0
        return self._coll_op(self._reduce, t, root, op, dt)

    def _reduce(self, state, act, t, root, op, dt):
        k, me = len(act), self._rank
        _check_root(root, act)
        if k == 1 or t.numel() == 0:
            return
        with _Contig(t) as c:
            flat = c.view(-1)
            nb = _nbytes(flat)
            if nb <= DIRECT_MAX or flat.numel() < k:
                if me != root:
                    self._run(self._coll, [(root, _addr(flat), nb)], [],
                              _ctx.collective_timeout_us, state)
                    return
                rows = torch.empty((k, flat.numel()), dtype=flat.dtype)
                rows[act.index(me)].copy_(flat)
                recvs = [(p, _addr(rows[i]), nb) for i, p in enumerate(act) if p != me]
                if self._run(self._coll, [], recvs, _ctx.collective_timeout_us, state):
                    self._reduce_rows(rows, op, dt, flat)
                return
            # ring reduce-scatter on a copy, then the blocks go to the root
            work = flat.clone()
            blocks = self._split(work, k)
            if not self._ring_reduce_scatter(state, act, work, blocks, op, dt):
                return
            idx = act.index(me)
            if me != root:
                self._run(self._coll, [(root, _addr(blocks[idx]), _nbytes(blocks[idx]))], [],
                          _ctx.collective_timeout_us, state)
            else:
                out = self._split(flat, k)
                out[idx].copy_(blocks[idx])
                recvs = [(p, _addr(out[i]), _nbytes(out[i])) for i, p in enumerate(act) if p != me]
                self._run(self._coll, [], recvs, _ctx.collective_timeout_us, state)

    def gather(self, output_lists, input_list, opts=None):
        t = _one(input_list)
        root = opts.rootRank if opts is not None else 0
        def body(state):
            act, me, nb = self._active_list(), self._rank, _nbytes(t)
            _check_root(root, act)
            src = t.contiguous()
            if me == root:
                out = _one(output_lists, "output list")
                if len(out) != self.size():
                    raise ValueError(f"gather: the gather list has {len(out)} tensors, expected "
                                     f"{self.size()}")
                tmp = torch.empty((self.size(), t.numel()), dtype=t.dtype)
                tmp[me].copy_(src.view(-1))
                recvs = [(p, _addr(tmp[p]), nb) for p in act if p != me]
                if self._run(self._coll, [], recvs, _ctx.collective_timeout_us, state):
                    for p in act:
                        out[p].copy_(tmp[p].view_as(out[p]))
            else:
                if output_lists and any(len(x) for x in output_lists):
                    raise ValueError("gather: only the root gives a gather list")
                self._run(self._coll, [(root, _addr(src), nb)], [], _ctx.collective_timeout_us,
                          state)
        return self._submit(body, [t])

    def scatter(self, output_tensors, input_lists, opts=None):
        t = _one(output_tensors)
        root = opts.rootRank if opts is not None else 0
        def body(state):
            act, me, nb = self._active_list(), self._rank, _nbytes(t)
            _check_root(root, act)
            if me == root:
                lst = _one(input_lists, "scatter list")
                if len(lst) != self.size():
                    raise ValueError(f"scatter: the scatter list has {len(lst)} tensors, "
                                     f"expected {self.size()}")
                srcs = [x.contiguous() for x in lst]
                sends = [(p, _addr(srcs[p]), nb) for p in act if p != me]
                self._run(self._coll, sends, [], _ctx.collective_timeout_us, state)
                t.copy_(srcs[me].view_as(t))
            else:
                with _Contig(t) as c:
                    self._run(self._coll, [], [(root, _addr(c), nb)], _ctx.collective_timeout_us,
                              state)
        return self._submit(body, [t])

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        _same(output, input)
        k = self.size()
        if input.dim() == 0 or output.dim() == 0 or input[0].numel() != output[0].numel():
            raise ValueError("all_to_all_single: input and output need the same row shape")
        for t, sz in ((input, input_split_sizes), (output, output_split_sizes)):
            if not sz and t.size(0) % k:
                raise ValueError(f"all_to_all_single: {t.size(0)} rows do not split into {k} "
                                 f"equal blocks; give split sizes")
        row = input[0].numel()
        isz = list(input_split_sizes) or [input.size(0) // k] * k
        osz = list(output_split_sizes) or [output.size(0) // k] * k
        if (len(isz) != k or len(osz) != k or sum(isz) != input.size(0)
                or sum(osz) != output.size(0)):
            raise ValueError("all_to_all_single: split sizes must have size() entries summing to "
                             "the first dimension")
        def body(state):
            inp = input.contiguous()
            with _Contig(output) as out:
                es = inp.element_size() * row
                ioff = [sum(isz[:i]) * es for i in range(k)]
                ooff = [sum(osz[:i]) * es for i in range(k)]
                ib, ob = _bytes(inp).view(-1), _bytes(out).view(-1)
                self._alltoall(state, ib, ob, ioff, [s * es for s in isz], ooff,
                               [s * es for s in osz])
        return self._submit(body, [output])

    def _alltoall(self, state, ib, ob, ioff, ilen, ooff, olen):
        me, act = self._rank, self._active_list()
        ob[ooff[me]:ooff[me] + olen[me]].copy_(ib[ioff[me]:ioff[me] + ilen[me]])
        sends = [(p, ib.data_ptr() + ioff[p], ilen[p]) for p in act if p != me and ilen[p]]
        recvs = [(p, ob.data_ptr() + ooff[p], olen[p]) for p in act if p != me and olen[p]]
        self._run(self._coll, sends, recvs, _ctx.collective_timeout_us, state)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        k = self.size()
        if len(output_tensors) != k or len(input_tensors) != k:
            raise ValueError(f"all_to_all: both lists need {k} tensors")
        def body(state):
            ins = [_bytes(x.contiguous()).view(-1) for x in input_tensors]
            ib = torch.cat(ins) if ins else torch.empty(0, dtype=torch.uint8)
            olen = [_nbytes(x) for x in output_tensors]
            ob = torch.empty(sum(olen), dtype=torch.uint8)
            ilen = [x.numel() for x in ins]
            ioff = [sum(ilen[:i]) for i in range(k)]
            ooff = [sum(olen[:i]) for i in range(k)]
            self._alltoall(state, ib, ob, ioff, ilen, ooff, olen)
            if not state[0]:
                for i, o in enumerate(output_tensors):
                    o.copy_(ob[ooff[i]:ooff[i] + olen[i]].view(o.dtype).view_as(o))
        return self._submit(body, output_tensors)

    def barrier(self, opts=None):
        def body(state):
            act = self._active_list()
            if len(act) > 1:
                one = torch.ones(1, dtype=torch.int64)
                rows = torch.empty((len(act), 1), dtype=torch.int64)
                self._direct_gather_all(state, act, one, rows)
        return self._submit(body)

    def monitored_barrier(self, opts=None, wait_all_ranks=False):
        return self.barrier(opts)


# ---------------------------------------------------------------- helpers

class _Contig:
    """A contiguous view of t; copied back on exit when t was not contiguous."""

    def __init__(self, t):
        self.t = t
        self.c = t if t.is_contiguous() else t.contiguous()

    def __enter__(self):
        return self.c

    def __exit__(self, *exc):
        if self.c is not self.t:
            self.t.copy_(self.c)
        return False


def _bytes(t):
    return t.reshape(-1).view(torch.uint8) if t.dtype != torch.uint8 else t.reshape(-1)


def _one(tensors, what="tensor"):
    if len(tensors) != 1:
        raise RuntimeError("Expecting one tensor only but got multiple.")
    t = tensors[0]
    if isinstance(t, torch.Tensor):
        if t.is_sparse:
            raise RuntimeError("mooncake-cpu: sparse tensors are not supported")
        if t.device.type != "cpu":
            raise RuntimeError(f"mooncake-cpu: tensors must be on the CPU, got {t.device}")
    return t


def _same(a, b):
    if a.dtype != b.dtype or a.device != b.device:
        raise ValueError("input and output must have the same dtype and device")
    if not a.is_contiguous() or not b.is_contiguous():
        raise ValueError("input and output must be contiguous")


def _red(op, t):
    code = _OP_CODE.get(op)
    if code is None:
        raise RuntimeError(f"mooncake-cpu: reduction {op} is not supported (SUM, PRODUCT, MIN, "
                           f"MAX only)")
    dt = _DT_CODE.get(t.dtype)
    if dt is None:
        raise RuntimeError(f"mooncake-cpu: reductions of {t.dtype} are not supported (int8, "
                           f"uint8, int16, int32, int64, float32, float64, bool)")
    return code, dt


def _check_root(root, act):
    if root not in act:
        raise ValueError(f"mooncake-cpu: root {root} is not an active rank of the group")
