"""mooncake.pg's process group: MooncakeProcessGroup's state, its
departure, its membership view as torch sees it, its mailboxes, and the
engine of every operation (_submit on the lane, _run, _finish).  The
collectives (_pg_coll.py) and send/recv (_pg_p2p.py) are mixed in.

Split out of pg.py (python/mooncake/pg.py lists the modules).
"""

import threading
import time
from concurrent.futures import wait as futures_wait

from mooncake import _pg
from mooncake._optional import require
from mooncake._pg_coll import _Collectives
from mooncake._pg_config import (COLL_REGION, COLL_SLOTS, DEPART_TIMEOUT_MS, MAX_RANKS,
                                 SETUP_TIMEOUT_MS, _ctx, _env_ms, _env_size, _live)
from mooncake._pg_p2p import _PointToPoint
from mooncake._pg_view import _declare_ready, _join, _refresh, _stale, _sync, _wait_keys
from mooncake._pg_work import MooncakeP2PWork, MooncakeWork, _caller_blocks, _Lane

torch = require("torch", "mooncake.pg")
from torch._C._distributed_c10d import ProcessGroup  # noqa: E402


class MooncakeProcessGroup(_Collectives, _PointToPoint, ProcessGroup):
    """One communicator: in-group ranks 0..size-1, rank slots up to max_group_size."""

    def __init__(self, store, rank, size, group_id, global_ranks, max_group_size,
                 auto_deactivate, auto_sync, active_ranks=None, is_extension=False,
                 rejected=None):
        super().__init__(rank, size)
        self._store = store
        self._rank = rank
        self._declared = size
        self._gid = group_id
        self._global = list(global_ranks)
        self._max = max_group_size
        self._auto_deactivate = auto_deactivate
        self._auto_sync = auto_sync
        self._active = active_ranks if active_ranks is not None else torch.zeros(
            max_group_size, dtype=torch.int32)
        self._active.zero_()
        self._epoch = 0
        self._nops = 0             # collectives started (the same count on every member)
        self._cur_op = 0           # index of the collective running now
        self._in_op = False        # an operation body runs (size() must not install views)
        self._agent = None         # the small region other members post views into
        self._agent_peers = {}     # rank -> (segment name, address) of its agent region
        self._need_connect = False  # a view was installed; connect at the next operation
        # "isolated": a joiner (is_extension) not yet activated; "invalid": its
        # registration was rejected (rejected says why); "normal" otherwise
        self._phase = "isolated" if is_extension else "normal"
        self._rejected = rejected
        self._ready_gen = 0        # our readiness declaration awaiting activation
        self._old = []             # mailboxes of earlier epochs (writes may still read them)
        self._p2p_workers = {}     # ("send"|"recv", peer) -> one-thread executor
        self._p2p_futs = set()     # send/recv submitted and not yet done (shutdown waits)
        self._p2p_broken = 0       # peers whose send/recv stream failed
        self._pending = 0          # bitmap of ranks seen failing, not yet synced
        self._broken = False       # the mailboxes' streams are out of step
        self._lock = threading.RLock()   # held by each operation and membership change
        self._wlock = threading.Lock()   # the worker table
        self._lane = _Lane(self._lock)
        self._shut = False         # shutdown() ran: this rank left the group
        self._peer_names = {}      # rank -> the segment name its mailboxes were last in
        self._p2p_fresh = 0        # peers whose process changed since the last move
        _ctx.ensure_engine()
        if rejected is not None:
            # local collectives only (mask {self}); mailboxes never published
            self._phase = "invalid"
            self._active[rank] = 1
            self._setup_mailboxes(publish=False)
        elif is_extension:
            # a joiner: no mailboxes until the members activate it (join_group)
            self._phase = "isolated"
            self._active[rank] = 1
            self._publish_agent(publish=False)
            _declare_ready(self)
        else:
            self._phase = "normal"
            self._active[:size] = 1
            self._publish_agent()
            self._setup_mailboxes()
        _live.add(self)

    # --- departure

    def shutdown(self, timeout_ms=None):
        """Leave the group: tell every peer how much of its traffic this rank
        took and wait (at most MOONCAKE_PG_DEPART_TIMEOUT_MS, default 3 s) until
        their engines have that word, so a peer's WRITE still waiting for this
        process's answer is not failed by its exit.  Runs once, after the
        collective in progress; a send or recv running on another thread is
        stopped first (its wait() raises RuntimeError) and waited for, within
        the same bound, so none still uses the mailboxes when they go; later
        operations raise.  Called at process exit (atexit) and when the group
        object is collected (destroy_process_group); returns the ranks that did
        not answer in time."""
        if timeout_ms is None:
            timeout_ms = _env_ms("MOONCAKE_PG_DEPART_TIMEOUT_MS", DEPART_TIMEOUT_MS)
        deadline = time.monotonic() + timeout_ms / 1000
        with self._wlock:
            if self._shut:
                return []
            self._shut = True  # send/recv issued from now on refuse (_check_usable)
            running = list(self._p2p_futs)
        agent = getattr(self, "_agent", None)
        if agent is not None:
            agent.stop_acks()  # a view posted from now on finds this rank gone
        for p2p in {getattr(self, "_p2p", None), getattr(self, "_p2p_view", (None,))[0]}:
            if p2p is not None:
                p2p.abort()  # a send/recv blocked on a silent peer ends at its next pass
        mine = threading.current_thread().name.startswith("mooncake-pg-")
        if running and not mine:  # (a finaliser on a worker thread cannot wait for itself)
            futures_wait(running, max(0.0, deadline - time.monotonic()))
        with self._lock:
            late = set()
            for mb in [getattr(self, "_coll", None), getattr(self, "_p2p", None)] + self._old:
                if mb is not None:
                    left_us = max(1, int((deadline - time.monotonic()) * 1e6))
                    late.update(mb.depart(left_us))
            return sorted(late)

    def __del__(self):
        try:
            self.shutdown()
        except Exception:  # noqa: BLE001 (never raise from a finaliser)
            pass

    # --- membership view

    def size(self):
        if self._phase != "normal":
            return self._declared  # torch's rank checks in init/new_group keep working
        _refresh(self)
        act = self._active_list()
        return act[-1] + 1 if act else 0

    def rank(self):
        return self._rank

    def getBackendName(self):
        return "mooncake-cpu"

    def _get_backend_name(self):
        return "mooncake-cpu"

    def name(self):
        return "mooncake-cpu"

    def _active_list(self):
        return [r for r in range(self._max) if self._active[r]]

    def _bitmap(self, ranks):
        m = 0
        for r in ranks:
            m |= 1 << r
        return m

    # --- mailboxes

    def _publish_agent(self, publish=True):
        """The rank's agent region: a member that commits a membership change
        WRITEs the view's word into it (post_view), so this rank's next
        operation installs the view without any call of its own.  A joiner
        does not publish it here (the process it replaces may still be
        founding the group and write the same key): its readiness carries
        it, and the member that activates it publishes it."""
        self._agent = _pg.Mailbox(_ctx.engine_ptr, self._max, self._rank, 64, 1, _ctx.engine)
        self._agent.serve_acks()  # acknowledges posted views from now on (python/pg.c)
        if publish:
            self._store.set(f"mooncake_pg/agent/{self._rank}", self._agent_value())

    def _agent_value(self):
        return f"{_pg.local_name(_ctx.engine_ptr)}|{self._agent.address}"

    def _setup_mailboxes(self, publish=True, connect=True):
        # one mailbox row per rank slot (max_group_size): a joiner's slot needs no new layout
        n, me = self._max, self._rank
        slot = COLL_REGION // (n * COLL_SLOTS)
        slot = max(64 << 10, min(4 << 20, slot)) & ~0xFFF
        chunk = _env_size("MOONCAKE_P2P_CHUNK_SIZE", 16 << 20, 4 << 30)
        pool = _env_size("MOONCAKE_P2P_POOL_SIZE", 128 << 20)
        chunk = max(4096, chunk & ~0xFFF)
        p2p_slots = max(2, min(_pg.MAX_SLOTS, pool // chunk // max(1, n - 1)))
        if hasattr(self, "_coll"):
            self._old += [self._coll, self._p2p]
        # the mailboxes keep the engine object alive (set_transfer_engine may drop it)
        self._coll = _pg.Mailbox(_ctx.engine_ptr, n, me, slot, COLL_SLOTS, _ctx.engine)
        self._p2p = _pg.Mailbox(_ctx.engine_ptr, n, me, chunk, p2p_slots, _ctx.engine)
        if not hasattr(self, "_p2p_view"):
            # the region send/recv use, its epoch and the peers connected in it
            self._p2p_view = (self._p2p, self._epoch, self._bitmap(self._active_list()))
        if not publish:
            return
        name = _pg.local_name(_ctx.engine_ptr)
        key = f"mooncake_pg/{self._epoch}/"
        self._store.set(key + str(me),
                        f"{name}|{self._coll.address}|{self._p2p.address}|{n}|{slot}|{chunk}")
        self._need_connect = True
        if connect:
            self._connect_mailboxes()

    def _connect_mailboxes(self):
        """Wait for the active peers' mailboxes of this epoch and connect them."""
        n, me = self._max, self._rank
        slot, chunk = self._coll.slot_bytes, self._p2p.slot_bytes
        key = f"mooncake_pg/{self._epoch}/"
        peers = [r for r in self._active_list() if r != me]
        limit_ms = _env_ms("MOONCAKE_PG_SETUP_TIMEOUT_MS", SETUP_TIMEOUT_MS)
        for r in peers:
            if not _wait_keys(self, [key + str(r)], limit_ms / 1000):
                raise RuntimeError(
                    f"mooncake-cpu: rank {r} of group {self._gid} did not publish its mailboxes "
                    f"(store key {key + str(r)!r}) within {limit_ms / 1000:g} s "
                    f"(MOONCAKE_PG_SETUP_TIMEOUT_MS): is rank {r} running and in this group?")
            v = self._store.get(key + str(r)).decode()
            pname, caddr, paddr, pn, pslot, pchunk = v.split("|")
            if (int(pn), int(pslot), int(pchunk)) != (n, slot, chunk):
                raise RuntimeError(f"mooncake-cpu: rank {r} of group {self._gid} uses another "
                                   f"layout ({pn} ranks, slot {pslot}, chunk {pchunk}; here "
                                   f"{n}, {slot}, {chunk}): check MOONCAKE_P2P_* on every rank")
            self._coll.connect(r, pname, int(caddr))
            self._p2p.connect(r, pname, int(paddr))
            if self._peer_names.setdefault(r, pname) != pname:
                self._p2p_fresh |= 1 << r  # another process holds slot r now (a replacement)
                self._peer_names[r] = pname
        self._need_connect = False

    # --- the engine of every op

    def _check_usable(self, connect=True):
        if self._shut:
            raise RuntimeError(f"mooncake-cpu: group {self._gid} was shut down on this rank "
                               f"(shutdown, destroy_process_group or process exit)")
        if self._phase == "isolated" or self._phase == "quiescing":
            _join(self)  # a joiner's first operation waits for its activation
        _refresh(self, connect=connect)  # views another member committed (its post_view)
        if self._broken:
            raise RuntimeError(
                f"mooncake-cpu: group {self._gid} lost ranks {self._bits(self._pending)} in an "
                f"earlier operation; call mooncake.pg.sync_after_failure(pg) first")
        if not self._active[self._rank]:
            raise RuntimeError("mooncake-cpu: rank is not active in this group")

    @staticmethod
    def _bits(m):
        return [r for r in range(MAX_RANKS) if m >> r & 1]

    def _run(self, mb, sends, recvs, timeout_us, state):
        group = self._bitmap(self._active_list())
        if mb is self._coll and self._agent is not None:
            # a view committed by another member for this operation ends the wait
            ok, failed = mb.run(sends, recvs, timeout_us, group, self._agent, self._epoch,
                                self._cur_op)
        else:
            ok, failed = mb.run(sends, recvs, timeout_us, group)
        if not ok:
            state[0] |= failed
        return ok

    def _finish(self, failed, tensors=(), source=-1):
        hint = torch.zeros(self._max, dtype=torch.int32)
        if failed:
            for r in self._bits(failed):
                if r < self._max:
                    hint[r] = 1
            self._pending |= failed
            self._broken = True
            if self._auto_deactivate:
                for r in self._bits(failed):
                    if r < self._max:
                        self._active[r] = 0
                if self._auto_sync:
                    _sync(self)
        return MooncakeWork(hint, tensors, source)

    def _submit(self, body, tensors=()):
        """Queue body(state) on the group's lane, in issue order: the caller gets
        a work handle at once (async_op=True overlaps with it) and wait()
        blocks until the operation finished.  A blocking torch.distributed call
        runs the lane up to its operation here, on its own thread, and gets a
        completed handle."""
        def run():
            self._check_usable()
            self._move_p2p()  # the first collective on a new view: send/recv follow it
            state = [0]
            self._cur_op = self._nops
            self._nops += 1
            self._in_op = True
            try:
                body(state)
            except _pg.ViewChanged:
                self._nops -= 1  # not counted: the caller issues it again on the new view
                raise RuntimeError(
                    f"mooncake-cpu: the membership of group {self._gid} changed (another "
                    f"member committed a view from operation {self._cur_op}) while this "
                    f"operation ran on the old view (epoch {self._epoch}); it did not "
                    f"complete and its output tensor is undefined: issue it again (it runs "
                    f"on the new view)") from None
            finally:
                self._in_op = False
            if _stale(self, self._cur_op):
                self._nops -= 1
                raise RuntimeError(
                    f"mooncake-cpu: the membership of group {self._gid} changed (another "
                    f"member committed a view from operation {self._cur_op}) while this "
                    f"operation ran on the old view (epoch {self._epoch}); its result is "
                    f"not valid: issue it again (it runs on the new view)")
            return self._finish(state[0], tensors)
        if _caller_blocks():
            op = self._lane.submit(run, wake=False)
            self._lane.run_until(op)
        else:
            op = self._lane.submit(run)
        return MooncakeP2PWork(op.fut, self._max, runner=lambda: self._lane.run_until(op))

    def _coll_op(self, fn, *args):
        return self._submit(lambda state: fn(state, self._active_list(), *args),
                            [a for a in args if isinstance(a, torch.Tensor)][:1])
