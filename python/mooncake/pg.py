"""mooncake.pg: the ``mooncake-cpu`` torch.distributed backend on the Transfer Engine.

Importing this module registers two backends with torch.distributed
(spec components.md 1.2, 1.9):

* ``"mooncake-cpu"``: CPU tensors; every byte moves through Transfer Engine
  WRITEs between registered mailboxes (``mooncake._pg``, python/pg.c);
* ``"mooncake"``: upstream's GPU backend; this build has none, and its creator
  says so.

Shape: ``MooncakeProcessGroup`` is a Python subclass of torch's ProcessGroup
(torch 1.13 dispatches ``dist.*`` calls to its Python methods).  Each group
owns two mailboxes, one for collectives and one for send/recv, exchanged
through the group's store.  The collectives are built here from
``Mailbox.run`` calls: ring reduce-scatter + all-gather for large tensors,
one direct exchange for small ones (DIRECT_MAX bytes), pairwise exchange for
all_to_all, direct to or from the root for gather and scatter.  Reductions
run in C over whole chunks (``_pg.reduce`` and the receive path); small
all-reduces reduce the gathered rows in rank order so every rank gets the
same bits.  Collectives run on one thread per group, in issue order, and send
and recv on one thread per (direction, peer): every call returns a work handle
at once, whose wait() blocks until the operation finished.

Failure: a collective that loses a peer (a failed WRITE, a failed probe, a
notice from another rank, or collective_timeout_us without progress) returns
normally; ``get_failed_ranks_hint(work)`` and ``get_local_success(work)`` say
what happened (spec 1.3).  With auto_deactivate (the default) the failed
ranks leave the group's active set; with auto_sync the group resynchronises
its survivors (``sync_after_failure``) before the op returns, else the next
operation refuses until ``sync_after_failure(pg)`` is called.

Membership changes (spec 1.4): a replacement, or a joiner at a new slot
below max_group_size (every mailbox spans all the slots), initialises with
is_extension and is activated by one member's ``recover_ranks``;
``deactivate_ranks`` and in-place ``join_group`` work the same way, and the
other members install the new view at their next collective (see
"Membership changes" below).  A joiner's registration
(``_register_order``) that neither equals nor extends the group's order is
rejected: its communicator is invalid (local only).  Each member
acknowledges a posted view at once (a watcher thread per group, python/pg.c);
members that do not within the acknowledgement timeout are dropped from the
view and named in ``dropped_ranks``.  Differences from upstream
(docs/python.md): no Coordinator process; the group's store coordinates.
"""

import atexit
import os
import sys
import threading
import time
import warnings
import weakref
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from datetime import timedelta
from enum import IntEnum

from mooncake import _pg
from mooncake._optional import require

torch = require("torch", "mooncake.pg")
import torch.distributed as dist  # noqa: E402
from torch._C._distributed_c10d import ProcessGroup, ReduceOp  # noqa: E402

__all__ = [
    "MooncakeBackendOptions", "MooncakeProcessGroup", "MooncakeWork", "MooncakeP2PWork",
    "ProposalStatus", "ViewUpdateStatus", "SyncAfterFailureStatus",
    "ProposeViewUpdateResponse", "SyncAfterFailureResponse",
    "set_host_ip", "set_device_filter", "set_transfer_engine",
    "set_collective_timeout_us", "set_p2p_timeout_us", "set_fault_reconciliation_window_us",
    "get_active_ranks", "get_num_synced_ranks", "get_peer_state", "activate_ranks",
    "recover_ranks", "deactivate_ranks", "join_group", "sync_after_failure",
    "get_failed_ranks_hint", "get_local_success", "get_current_epoch", "extend_group_size_to",
    "createMooncakeBackend", "createMooncakeCpuBackend",
]

MAX_RANKS = _pg.MAX_RANKS
# Tensors of at most this many bytes use one direct exchange; larger ones the ring.
DIRECT_MAX = 64 << 10
COLL_SLOTS = 4
COLL_REGION = 32 << 20  # per direction, split over ranks and slots

_OP_CODE = {ReduceOp.SUM: 1, ReduceOp.PRODUCT: 2, ReduceOp.MIN: 3, ReduceOp.MAX: 4}
_DT_CODE = {torch.int8: 0, torch.uint8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4,
            torch.float32: 5, torch.float64: 6, torch.bool: 7}


class ProposalStatus(IntEnum):
    Rejected = 0
    Applied = 1
    AppliedWithDroppedRanks = 2


ViewUpdateStatus = ProposalStatus


class SyncAfterFailureStatus(IntEnum):
    Reconciled = 0
    NoPending = 1
    Rejected = 2


class ProposeViewUpdateResponse:
    def __init__(self, status, new_epoch, dropped_ranks=(), reject_reason=""):
        self.status, self.new_epoch = status, new_epoch
        self.dropped_ranks, self.reject_reason = list(dropped_ranks), reject_reason

    def __repr__(self):
        return (f"ProposeViewUpdateResponse(status={self.status.name}, new_epoch={self.new_epoch}, "
                f"dropped_ranks={self.dropped_ranks}, reject_reason={self.reject_reason!r})")


class SyncAfterFailureResponse:
    def __init__(self, status, reject_reason=""):
        self.status, self.reject_reason = status, reject_reason

    def __repr__(self):
        return (f"SyncAfterFailureResponse(status={self.status.name}, "
                f"reject_reason={self.reject_reason!r})")


# ---------------------------------------------------------------- configuration

def _env_bool(name, default):
    """c10's bool parsing of an environment variable."""
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    s = v.strip().lower()
    if s in ("1", "true", "yes", "y", "on"):
        return True
    if s in ("0", "false", "no", "n", "off"):
        return False
    raise ValueError(f"{name}={v!r} is not a boolean (1/0, true/false, yes/no, on/off)")


def _env_size(name, default, limit=None):
    v = os.environ.get(name)
    if not v:
        return default
    s = v.strip().upper()
    mult = 1
    for suf, m in (("KB", 1 << 10), ("MB", 1 << 20), ("GB", 1 << 30), ("K", 1 << 10),
                   ("M", 1 << 20), ("G", 1 << 30), ("B", 1)):
        if s.endswith(suf):
            s, mult = s[:-len(suf)], m
            break
    try:
        n = int(s) * mult
    except ValueError:
        raise ValueError(f"{name}={v!r} is not a size") from None
    if n <= 0 or (limit is not None and n > limit):
        raise ValueError(f"{name}={v!r} is out of range (1..{limit or 'inf'} bytes)")
    return n


def _env_ms(name, default):
    """A positive duration in milliseconds from the environment."""
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return default
    try:
        n = int(v.strip())
    except ValueError:
        raise ValueError(f"{name}={v!r} is not a whole number of milliseconds") from None
    if n <= 0:
        raise ValueError(f"{name}={v!r} must be positive (milliseconds)")
    return n


# How long a leaving rank waits for its peers' engines to take its departure
# word (shutdown, destroy_process_group's collection, process exit).
DEPART_TIMEOUT_MS = 3000
# How long a group's setup waits for a peer to publish its mailboxes.
SETUP_TIMEOUT_MS = 120000


class _Context:
    """Process-wide state: the engine, the timeouts, the first store."""

    def __init__(self):
        self.lock = threading.Lock()
        self.host_ip = "127.0.0.1"
        self.device_filter = []
        self.engine = None          # ours or the user's (set_transfer_engine)
        self.engine_ptr = 0
        self.collective_timeout_us = 10_000_000
        self.p2p_timeout_us = 10_000_000
        self.fault_window_us = 30_000_000
        self.store = None

    def ensure_engine(self):
        with self.lock:
            if self.engine_ptr:
                return
            from mooncake.engine import TransferEngine
            te = TransferEngine()
            rc = te.initialize(self.host_ip, "P2PHANDSHAKE", "tcp", ",".join(self.device_filter))
            if rc != 0:
                raise RuntimeError(f"mooncake-cpu: TransferEngine.initialize({self.host_ip!r}, "
                                   f"'P2PHANDSHAKE') failed with {rc}")
            self.engine, self.engine_ptr = te, te.get_engine_ptr()


_ctx = _Context()


def set_host_ip(ip):
    """Address the process's engine listens on (default 127.0.0.1); before the first init."""
    if _ctx.engine_ptr:
        raise RuntimeError("set_host_ip: the transfer engine is already running")
    _ctx.host_ip = str(ip)


def set_device_filter(devices):
    """NICs the engine may use (its device_name); before the first init."""
    if _ctx.engine_ptr:
        raise RuntimeError("set_device_filter: the transfer engine is already running")
    _ctx.device_filter = [str(d) for d in devices]


def set_transfer_engine(engine):
    """Use an initialised mooncake.engine.TransferEngine (or None to reset)."""
    with _ctx.lock:
        if engine is None:
            _ctx.engine, _ctx.engine_ptr = None, 0
            return
        ptr = engine.get_engine_ptr()
        if not ptr:
            raise RuntimeError("set_transfer_engine: the engine is not initialised")
        _ctx.engine, _ctx.engine_ptr = engine, ptr


_live = weakref.WeakSet()  # groups not yet collected: shut down at exit


def _shutdown_all():
    """atexit: every live group leaves, within one shared deadline."""
    timeout_ms = _env_ms("MOONCAKE_PG_DEPART_TIMEOUT_MS", DEPART_TIMEOUT_MS)
    deadline = time.monotonic() + timeout_ms / 1000
    for pg in list(_live):
        try:
            pg.shutdown(max(1, int((deadline - time.monotonic()) * 1000)))
        except Exception as e:  # noqa: BLE001 (one group's trouble does not stop the others)
            print(f"mooncake-cpu: shutdown of group {pg._gid} at exit: {e}", file=sys.stderr)


atexit.register(_shutdown_all)


def _positive_us(name, us):
    us = int(us)
    if us <= 0:
        raise ValueError(f"{name}: timeout must be positive, got {us}")
    return us


def set_collective_timeout_us(us):
    _ctx.collective_timeout_us = _positive_us("set_collective_timeout_us", us)


def set_p2p_timeout_us(us):
    _ctx.p2p_timeout_us = _positive_us("set_p2p_timeout_us", us)


def set_fault_reconciliation_window_us(us):
    _ctx.fault_window_us = _positive_us("set_fault_reconciliation_window_us", us)


# ---------------------------------------------------------------- options

class MooncakeBackendOptions:
    """pg_options of init_process_group / new_group (spec 1.3 overloads).

    MooncakeBackendOptions(max_group_size[, is_extension[, auto_deactivate_on_failure,
    auto_sync_on_failure]]) or (active_ranks[, is_extension[, max_group_size]]).
    """

    def __init__(self, *args):
        self.active_ranks = None
        self.max_group_size = 0
        self.is_extension = False
        self.auto_deactivate_on_failure = None
        self.auto_sync_on_failure = None
        if not args or len(args) > 4:
            raise TypeError("MooncakeBackendOptions: 1 to 4 arguments")
        first = args[0]
        if isinstance(first, torch.Tensor):
            if len(args) > 3:
                raise TypeError("MooncakeBackendOptions(active_ranks, is_extension, "
                                "max_group_size)")
            if (first.dtype != torch.int32 or not first.is_contiguous()
                    or first.device.type != "cpu"):
                raise ValueError("active_ranks must be a contiguous CPU int32 tensor")
            self.active_ranks = first
            if len(args) > 1:
                self.is_extension = bool(args[1])
            if len(args) > 2:
                self.max_group_size = int(args[2])
        else:
            self.max_group_size = int(first)
            if len(args) > 1:
                self.is_extension = bool(args[1])
            if len(args) == 3:
                raise TypeError("MooncakeBackendOptions: give both auto_deactivate_on_failure and "
                                "auto_sync_on_failure")
            if len(args) == 4:
                self.auto_deactivate_on_failure = bool(args[2])
                self.auto_sync_on_failure = bool(args[3])


# ---------------------------------------------------------------- work

class MooncakeWork:
    """A completed operation: wait() returns at once; the hint says who failed."""

    def __init__(self, hint, tensors=(), source=-1):
        self._hint = hint
        self._tensors = list(tensors)
        self._source = source

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return self.local_success

    def exception(self):
        return None

    def result(self):
        return self._tensors

    def source_rank(self):
        return self._source

    def get_future(self):
        fut = torch.futures.Future()
        fut.set_result(self._tensors)
        return fut

    def synchronize(self):
        pass

    @property
    def failed_ranks_hint(self):
        return self._hint

    @property
    def local_success(self):
        return not bool(self._hint.any())


class MooncakeP2PWork:
    """An operation running on a worker thread (the group's collective thread,
    or a send/recv pair's); wait() blocks until it finished."""

    def __init__(self, fut, max_group_size, source=-1, runner=None):
        self._fut = fut
        self._max = max_group_size
        self._source = source
        self._runner = runner  # runs the operation in the waiting thread if not yet started

    def _done(self):
        if self._runner is not None and not self._fut.done():
            self._runner()
        return self._fut.result()

    def wait(self, timeout=None):
        self._done()
        return True

    def is_completed(self):
        return self._fut.done()

    def is_success(self):
        return self._done().local_success

    def exception(self):
        return self._fut.exception() if self._fut.done() else None

    def result(self):
        return self._done().result()

    def source_rank(self):
        return self._source

    def get_future(self):
        fut = torch.futures.Future()
        self._fut.add_done_callback(
            lambda f: fut.set_exception(f.exception()) if f.exception() else fut.set_result(
                f.result().result()))
        return fut

    def synchronize(self):
        self._done()

    @property
    def failed_ranks_hint(self):
        return self._done().failed_ranks_hint

    @property
    def local_success(self):
        return self._done().local_success


# ---------------------------------------------------------------- the collective lane

class _Op:
    def __init__(self, fn):
        self.fn = fn
        self.fut = Future()

    def run(self):
        try:
            self.fut.set_result(self.fn())
        except BaseException as e:  # handed to wait(), as torch's Work does
            self.fut.set_exception(e)


class _Lane:
    """A group's collectives, run in issue order under the group's lock: by
    the lane's thread (so async_op=True work progresses beside the caller), or
    by a caller whose wait() finds its operation not yet started, or by the
    caller of a blocking collective at once (submit(wake=False), then
    run_until: the lane's thread is not woken, so it does not contend with the
    caller for the GIL; see _caller_blocks).  Popping and running both happen
    under the group's lock, so whoever holds it runs the queue's head: the
    order holds whichever thread runs an operation, and a blocking collective
    issued after async ones runs after them.  The thread leaves after IDLE_S
    without work and starts again with the next."""

    IDLE_S = 5.0

    def __init__(self, lock):
        self.lock = lock               # the group's RLock
        self.q = deque()
        self.cv = threading.Condition(threading.Lock())
        self.thread = None

    def submit(self, fn, wake=True):
        op = _Op(fn)
        with self.cv:
            self.q.append(op)
            if not wake:  # the caller runs it (run_until) before it returns
                return op
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name="mooncake-pg-coll",
                                               daemon=True)
                self.thread.start()
            self.cv.notify()
        return op

    def _loop(self):
        while True:
            with self.cv:
                if not self.q and not self.cv.wait_for(lambda: self.q, self.IDLE_S):
                    self.thread = None
                    return
            self.run_until(None)

    def run_until(self, target):
        """Run queued operations in order until target is done (None: the queue is empty)."""
        with self.lock:
            while True:
                with self.cv:
                    if not self.q or (target is not None and target.fut.done()):
                        return
                    op = self.q.popleft()
                op.run()


def _caller_blocks():
    """Whether the torch.distributed call that issued the operation waits for it
    before it returns (its async_op is False): then the caller runs it itself
    and the lane's thread is not woken.  Anything else (async_op=True, a direct
    call of the group's method) goes to the lane's thread."""
    f = sys._getframe(2)
    while f is not None and f.f_globals.get("__name__") == __name__:
        f = f.f_back
    return (f is not None and f.f_globals.get("__name__") == _C10D
            and f.f_locals.get("async_op") is False)


_C10D = dist.distributed_c10d.__name__


# ---------------------------------------------------------------- the group

def _addr(t):
    return t.data_ptr()


def _nbytes(t):
    return t.numel() * t.element_size()


class MooncakeProcessGroup(ProcessGroup):
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

    def _move_p2p(self):
        """Send/recv move to the newest view's region at its first collective (a
        pair's send and recv on the same side of it meet), sync and rejoin; those
        issued before get a bounded wait, then the rest are aborted (pg.c announce)."""
        old, old_ep, _ = self._p2p_view
        if old is self._p2p:
            return
        with self._wlock:
            earlier = [f for f in self._p2p_futs if getattr(f, "mc_region", None) is old]
        futures_wait(earlier, ANNOUNCE_TIMEOUT_US / 1e6)
        self._p2p.announce(old, old_ep, ANNOUNCE_TIMEOUT_US, self._p2p_fresh)
        self._p2p_fresh = 0
        self._p2p_view = (self._p2p, self._epoch, self._bitmap(self._active_list()))

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

    # --- point to point

    # Each (direction, peer) has one worker thread running its operations in
    # order, so isend/irecv return at once and a send that waits for the
    # receiver's slots never holds up a receive (batch_isend_irecv in any order).

    def send(self, tensors, dst, tag=0):
        t = _one(tensors)
        region = self._check_p2p(dst)
        src = t.contiguous()
        return self._p2p_submit(("send", dst), lambda: self._p2p_run(
            [(dst, _addr(src), _nbytes(src))], [], dst, [t, src], region), region=region)

    def recv(self, tensors, src, tag=0):
        t = _one(tensors)
        region = self._check_p2p(src)
        c = t if t.is_contiguous() else t.contiguous()

        def work():
            w = self._p2p_run([], [(src, _addr(c), _nbytes(c))], src, [t], region)
            if c is not t and w.local_success:
                t.copy_(c)
            return w
        return self._p2p_submit(("recv", src), work, src, region)

    def _p2p_run(self, sends, recvs, peer, keep, region):
        state = [0]
        if (sends and sends[0][2]) or (recvs and recvs[0][2]):
            mb, ep = region  # chosen at issue (_check_p2p)
            try:
                self._run(mb, sends, recvs, _ctx.p2p_timeout_us, state)
            except _pg.CrossedView as e:
                _, lost, old_ep = e.args
                raise RuntimeError(
                    f"mooncake-cpu: recv from rank {peer}: rank {peer} sent {lost} message "
                    f"chunk(s) on the group's earlier views (up to epoch {old_ep}) that this "
                    f"rank did not receive before the membership changed (epoch {ep} now): "
                    f"they are lost, and this recv took nothing in their place (reported "
                    f"once: the next recv takes rank {peer}'s next message).  {_CROSS}") from None
            except RuntimeError:  # aborted: shutdown, or the move to a newer region
                if self._shut or mb is self._p2p:
                    raise
                raise RuntimeError(self._p2p_moved(peer, ep)) from None
        hint = torch.zeros(self._max, dtype=torch.int32)
        if state[0]:
            # the pair's stream is out of step: no more send/recv with this peer
            # (membership changes only through collectives, which every rank sees)
            with self._lock:
                self._p2p_broken |= state[0] | (1 << peer)
            for r in self._bits(state[0]):
                if r < self._max:
                    hint[r] = 1
        return MooncakeWork(hint, keep[:1])

    def _p2p_moved(self, peer, ep):
        return (f"mooncake-cpu: send/recv with rank {peer}: this rank's first collective on "
                f"a view after epoch {ep} of group {self._gid} started while it still waited "
                f"on that epoch; it did not complete: issue it again (it runs on the new view; "
                f"a message it moved part of is lost, the receiver's next recv says so).  "
                f"{_CROSS}")

    def _executor(self, key):
        """The one-thread executor of key (("coll", -1), or (direction, peer))."""
        with self._wlock:  # not self._lock: a running collective holds that one
            ex = self._p2p_workers.get(key)
            if ex is None:
                ex = ThreadPoolExecutor(1, thread_name_prefix=f"mooncake-pg-{key[0]}-{key[1]}")
                self._p2p_workers[key] = ex
        return ex

    def _p2p_submit(self, key, fn, source=-1, region=(None, 0)):
        ex = self._executor(key)
        with self._wlock:
            fut = ex.submit(fn)
            fut.mc_region = region[0]  # the move to a newer region waits for it (_move_p2p)
            self._p2p_futs.add(fut)
        fut.add_done_callback(self._p2p_done)  # at once when it is done already
        return MooncakeP2PWork(fut, self._max, source)

    def _p2p_done(self, fut):
        with self._wlock:
            self._p2p_futs.discard(fut)

    def recv_anysource(self, tensors, tag=0):
        raise RuntimeError("mooncake-cpu: recv from any source is not supported (give src=)")

    def _check_p2p(self, peer):
        if self._phase == "invalid":
            raise RuntimeError(f"mooncake-cpu: send/recv refused: this communicator is invalid "
                               f"(its registration in group {self._gid} was rejected: "
                               f"{self._rejected}); only local collectives run")
        if self._phase != "normal":
            with self._lock:
                _join(self)
        self._check_usable(connect=False)
        if not (0 <= peer < self._max) or peer == self._rank or not self._active[peer]:
            raise ValueError(f"mooncake-cpu: peer {peer} is not another active rank of the group")
        if self._p2p_broken >> peer & 1:
            raise RuntimeError(f"mooncake-cpu: an earlier send/recv with rank {peer} failed; "
                               f"the pair's stream is closed")
        # (region, epoch) of this operation: the pair's region until this rank's
        # first collective on a newer view (_move_p2p), whatever it installed
        # meanwhile, unless the peer is new in that view (only its region has it)
        mb, ep, peers = self._p2p_view
        if peers >> peer & 1:
            return mb, ep
        with self._lock:
            if self._need_connect:
                self._connect_mailboxes()
            return self._p2p, self._epoch

    # --- coalescing (torch 1.13 batch_isend_irecv): ops run as they come

    def _start_coalescing(self):
        pass

    def _end_coalescing(self, reqs):
        pass

    def allreduce_coalesced(self, tensors, opts=None):
        raise RuntimeError("mooncake-cpu: Expecting one tensor only but got multiple.")

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        raise RuntimeError("mooncake-cpu: Expecting one tensor only but got multiple.")


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


# ---------------------------------------------------------------- recovery

def _sync(pg):
    """Resynchronise the survivors through the group's store: agree on the failed set
    (union of what every survivor saw) and start fresh mailboxes under a new epoch."""
    if not pg._broken:
        return SyncAfterFailureResponse(SyncAfterFailureStatus.NoPending)
    me = pg._rank
    ep = pg._epoch + 1
    base = f"mooncake_pg/sync/{ep}/"
    pg._store.set(base + str(me), str(pg._pending))
    union = pg._pending
    waiting = [r for r in range(pg._max)
               if r != me and (pg._active[r] or not pg._auto_deactivate) and not union >> r & 1]
    keys = [base + str(r) for r in waiting]
    try:
        pg._store.wait(keys, timedelta(microseconds=_ctx.fault_window_us))
    except Exception as e:  # a survivor that never syncs
        return SyncAfterFailureResponse(SyncAfterFailureStatus.Rejected,
                                        f"survivors did not all sync within the window: {e}")
    for k in keys:
        union |= int(pg._store.get(k).decode())
    for r in MooncakeProcessGroup._bits(union):
        if r < pg._max:
            pg._active[r] = 0
    # the view, for a member that catches up past this epoch (_catch_up); every
    # survivor writes the same one (compare-and-set: never over a proposal's)
    pg._store.compare_set(_view_key(ep), "",
                          f"{ep}|{pg._bitmap(pg._active_list())}|{pg._nops}")
    pg._epoch = ep
    pg._pending = 0
    pg._broken = False
    pg._setup_mailboxes()
    pg._move_p2p()
    return SyncAfterFailureResponse(SyncAfterFailureStatus.Reconciled)


def _as_pg(pg):
    pg = pg if pg is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, MooncakeProcessGroup):
        raise RuntimeError(f"not a mooncake-cpu process group: {type(pg).__name__}")
    return pg


def _as_live_pg(pg, verb):
    """_as_pg for the calls that change or wait for membership: a group that
    destroy_process_group removed, or that was shut down, refuses."""
    if pg is None and not dist.is_initialized():
        raise RuntimeError(f"mooncake-cpu: {verb}: no default process group (never "
                           f"initialised, or destroyed)")
    pg = _as_pg(pg)
    if pg._shut or pg not in dist.distributed_c10d._pg_map:
        raise RuntimeError(f"mooncake-cpu: {verb}: group {pg._gid} was destroyed or shut down "
                           f"on this rank (destroy_process_group, shutdown or process exit)")
    return pg


def sync_after_failure(pg=None):
    pg = _as_pg(pg)
    with pg._lock:
        return _sync(pg)


def _fresh(pg):
    """The group, with the views other members committed installed (when no
    operation runs and its collective count has reached them)."""
    pg = _as_pg(pg)
    _refresh(pg)
    return pg


def get_active_ranks(pg=None):
    return _fresh(pg)._active


def get_num_synced_ranks(pg=None):
    return int(_fresh(pg)._active.sum())


def get_peer_state(pg, ranks):
    """True for each rank that is active or has declared readiness to join
    (asks the group's store: there is no local agent)."""
    pg = _fresh(pg)
    return [bool(0 <= r < pg._max and (pg._active[r] or _ready_gen(pg, r)))
            for r in ranks]


def get_current_epoch(pg=None):
    return _fresh(pg)._epoch


def get_failed_ranks_hint(work):
    if isinstance(work, (MooncakeWork, MooncakeP2PWork)):
        return work.failed_ranks_hint
    return torch.empty(0, dtype=torch.int32)


def get_local_success(work):
    if isinstance(work, (MooncakeWork, MooncakeP2PWork)):
        return work.local_success
    return True


# Membership changes (spec 1.4) without upstream's Coordinator process: the
# group's store is the coordinator, and one call from any active member is
# enough.  A rank declares readiness by bumping its counter
# mooncake_pg/ready/R (and setting mooncake_pg/ready/R/GEN).  A member that
# activates or deactivates ranks decides the next view itself and commits it
# with a compare-and-set of mooncake_pg/view/EPOCH = "EPOCH|BITS|FIRST" (the
# active bitmap, and FIRST, the index of the first collective that runs on
# it: the proposer's count of collectives, which is every member's count at
# the same point of the group's sequence).  Two members committing the same
# epoch at once: one wins, the other installs the winner's view and looks
# again (so every member making the same call, the old form, is still one
# change).  The proposer then hands joiners their activation under
# mooncake_pg/activate/R/GEN and WRITEs the view's word (EPOCH << 40 | FIRST)
# into every other rank's agent region (post_view); each rank installs the
# view when its own count of collectives reaches FIRST (_catch_up, at the
# start of an operation and in the getters): a rank behind runs the
# operations before FIRST on the old view, as its peers did.  A collective
# that a rank started on the old view although it is at or after FIRST (it
# raced with the commit) sees the word while it waits, ends, and raises
# RuntimeError: the caller issues it again, on the new view.
#
# Acknowledgements (spec 1.4: "view acknowledgements have a 20 s timeout";
# ranks that fail to acknowledge are reported in dropped_ranks with status
# AppliedWithDroppedRanks): every rank's watcher thread (Mailbox.serve_acks)
# copies the newest word posted into its agent region into its "seen" word at
# once, whatever its Python is doing; the proposer READs the seen word of
# every other member of the new view until it reaches the view's word, for at
# most the acknowledgement timeout.  The members that did not acknowledge are
# dropped: the proposer commits one more view without them (a deactivation,
# from the same FIRST, acknowledged the same way), so the group never waits
# in a collective for a rank that does not know its view; a dropped rank that
# comes back finds itself out at its next operation and rejoins with
# join_group.

ADMISSION_TIMEOUT_S = 20.0   # a target that is not ready by then is rejected (spec 1.4)
POST_TIMEOUT_US = 2_000_000  # a rank's engine that has not taken the view's word by then
ANNOUNCE_TIMEOUT_US = 2_000_000  # send/recv moving to a new view's region (pg.c announce)
_CROSS = ("Send/recv do not cross a membership change: order a pair's send and recv on the "
          "same side of it (of the new view's first collective)")
VIEW_ACK_TIMEOUT_MS = 20000  # spec 1.4; MOONCAKE_PG_VIEW_ACK_TIMEOUT_MS overrides it
ADMISSION_POLL_S = 0.01      # how often admission looks for readiness or a rival commit


def _counter(pg, key):
    return int(pg._store.add(key, 0))


def _ready_gen(pg, r):
    """The newest readiness declaration of rank r not yet activated, or 0.  A
    declaration counts once its key is there too (the counter comes first):
    an activation reads the key, and must not wait on a joiner stopped
    between the two."""
    gen = _counter(pg, f"mooncake_pg/ready/{r}")
    if gen <= _counter(pg, f"mooncake_pg/joined/{r}"):
        return 0
    return gen if _peek(pg, f"mooncake_pg/ready/{r}/{gen}") is not None else 0


def _wait_keys(pg, keys, seconds):
    try:
        pg._store.wait(keys, timedelta(seconds=seconds))
        return True
    except Exception:  # torch raises RuntimeError on a store timeout
        return False


def _view_key(ep):
    return f"mooncake_pg/view/{ep}"


def _peek(pg, key):
    """The value of key, or None, without waiting (compare_set with a sentinel
    expected value sets nothing and answers it when the key is missing)."""
    v = pg._store.compare_set(key, "\x00none", "\x00none").decode()
    return None if v == "\x00none" else v


def _parse_view(rec):
    ep, bits, first = (int(x) for x in rec.split("|"))
    return ep, bits, first


def _catch_up(pg, peek=False):
    """Install, in order, the views committed after ours (up to the newest
    posted into our agent region; with peek, also those the store has that
    were not posted yet) whose first collective is at or before our next
    one.  Returns True when a committed view waits for collectives this rank
    has not run yet.  Caller holds pg._lock."""
    if pg._agent is None or pg._phase != "normal":
        return False
    newest = pg._agent.view() >> _pg.VIEW_OP_BITS
    while True:
        key = _view_key(pg._epoch + 1)
        if pg._epoch < newest:
            rec = pg._store.get(key).decode()
        elif peek:
            rec = _peek(pg, key)
            if rec is None:
                return False
        else:
            return False
        ep, bits, first = _parse_view(rec)
        if first > pg._nops:
            return True  # operations before it still run on the current view
        _install_view(pg, ep, bits, first, connect=False)


def _refresh(pg, connect=False):
    """_catch_up when no operation runs (never inside one: a view changes
    between operations only); connect: also connect the installed view's
    mailboxes (at an operation's start)."""
    if pg._in_op or pg._phase != "normal" or pg._agent is None:
        return
    if not pg._lock.acquire(blocking=False):
        return  # an operation or a membership change runs: it catches up itself
    try:
        _catch_up(pg)
        if connect and pg._need_connect and pg._active[pg._rank]:
            pg._connect_mailboxes()
    finally:
        pg._lock.release()


def _stale(pg, op):
    """Whether a view newer than ours, starting at or before collective op,
    has been posted to this rank (op then ran on the wrong view)."""
    if pg._agent is None:
        return False
    w = pg._agent.view()
    return (w >> _pg.VIEW_OP_BITS) > pg._epoch and (w & ((1 << _pg.VIEW_OP_BITS) - 1)) <= op


def _propose(pg, ranks, activate):
    verb = "activate_ranks" if activate else "deactivate_ranks"
    if pg._shut:
        raise RuntimeError(f"mooncake-cpu: {verb}: group {pg._gid} was shut down on this rank "
                           f"(shutdown, destroy_process_group or process exit)")
    try:
        ranks = sorted({int(r) for r in ranks})
    except (TypeError, ValueError):
        raise TypeError(f"mooncake-cpu: {verb}: ranks must be a list of integers, got "
                        f"{ranks!r}") from None
    bad = [r for r in ranks if not 0 <= r < pg._max]
    if bad:
        raise ValueError(f"mooncake-cpu: {verb}: ranks {bad} are outside the group's "
                         f"{pg._max} rank slots (max_group_size)")
    ack_us = _env_ms("MOONCAKE_PG_VIEW_ACK_TIMEOUT_MS", VIEW_ACK_TIMEOUT_MS) * 1000
    with pg._lock:
        if pg._phase == "invalid":
            raise RuntimeError(f"mooncake-cpu: {verb}: this communicator is invalid (its "
                               f"registration was rejected: {pg._rejected})")
        if pg._phase != "normal":
            raise RuntimeError(f"mooncake-cpu: {verb}: this rank is not an active member yet "
                               f"(call join_group)")
        if not activate:
            # a slot no process ever held is not in the group (the order key lists them)
            held = _held_slots(pg)
            if held is not None:
                outside = [r for r in ranks if r >= held]
                if outside:
                    raise ValueError(f"mooncake-cpu: deactivate_ranks: ranks {outside} are not "
                                     f"in group {pg._gid} (its slots 0..{held - 1} hold its "
                                     f"ranks)")
        return _change(pg, ranks, activate, ack_us)


def _change(pg, ranks, activate, ack_us, silent=0):
    """Commit the view with ranks activated or deactivated (the caller holds
    pg._lock and checked its arguments), post it and await the other members'
    acknowledgements for up to ack_us; members that do not acknowledge are
    dropped (_drop).  silent: ranks already known not to answer (their word
    goes out without waiting for their engine)."""
    verb = "activate_ranks" if activate else "deactivate_ranks"
    for _ in range(MAX_RANKS * 4):  # one round per concurrent commit seen
        if _catch_up(pg, peek=True):
            return ProposeViewUpdateResponse(
                ProposalStatus.Rejected, pg._epoch,
                reject_reason="another member's membership change starts at a later "
                              "collective than this rank has run: run the collectives "
                              "before it first")
        if pg._broken and pg._auto_deactivate:
            return ProposeViewUpdateResponse(
                ProposalStatus.Rejected, pg._epoch,
                reject_reason=f"failed ranks {pg._bits(pg._pending)} are pending: call "
                              f"sync_after_failure first")
        if not pg._active[pg._rank]:
            raise RuntimeError("mooncake-cpu: rank is not active in this group")
        targets = [r for r in ranks if bool(pg._active[r]) != activate]
        if not targets:  # an equivalent call was applied already
            return ProposeViewUpdateResponse(ProposalStatus.Applied, pg._epoch)
        if not activate and pg._rank in targets:
            raise ValueError("mooncake-cpu: deactivate_ranks: a rank cannot deactivate itself")
        members = [r for r in pg._active_list() if r not in targets]
        gens = {}
        if activate:
            reason = _admit(pg, targets, gens)
            if reason is None:
                continue  # another member committed the next view meanwhile
            if reason:
                return ProposeViewUpdateResponse(ProposalStatus.Rejected, pg._epoch,
                                                 reject_reason=reason)
        bits = pg._bitmap(members + targets if activate else members)
        ep, first = pg._epoch + 1, pg._nops
        rec = f"{ep}|{bits}|{first}"
        won = pg._store.compare_set(_view_key(ep), "", rec).decode()
        if won != rec:
            continue  # another member committed this epoch: install it, look again
        old = pg._bitmap(pg._active_list())
        for r in targets if activate else ():
            # the joiner's agent region becomes the rank's (its readiness carries it)
            pg._store.set(f"mooncake_pg/agent/{r}",
                          pg._store.get(f"mooncake_pg/ready/{r}/{gens[r]}").decode())
            pg._store.set(f"mooncake_pg/activate/{r}/{gens[r]}", rec)
            pg._store.add(f"mooncake_pg/joined/{r}",
                          gens[r] - _counter(pg, f"mooncake_pg/joined/{r}"))
        _install_view(pg, ep, bits, first, connect=False)
        me = 1 << pg._rank
        missed = _post_view(pg, (old | bits) & ~me, ep, first, bits & ~me, ack_us, silent)
        if missed:
            return _drop(pg, ep, missed, ack_us, silent)
        return ProposeViewUpdateResponse(ProposalStatus.Applied, ep)
    raise RuntimeError(f"mooncake-cpu: {verb}: the group's view kept changing under this "
                       f"call")


def _drop(pg, ep, missed, ack_us, silent):
    """The members of view ep that did not acknowledge it (bitmap missed)
    leave it: one more view without them, committed, posted and acknowledged
    as any deactivation (its own laggards are dropped the same way; each
    round drops at least one rank).  AppliedWithDroppedRanks, with the newest
    epoch and every rank dropped."""
    res = _change(pg, pg._bits(missed), False, ack_us, silent | missed)
    dropped = sorted(set(pg._bits(missed)) | set(res.dropped_ranks))
    if res.status == ProposalStatus.Rejected:  # another member's view came first
        return ProposeViewUpdateResponse(
            ProposalStatus.AppliedWithDroppedRanks, res.new_epoch, dropped,
            reject_reason=f"ranks {pg._bits(missed)} did not acknowledge epoch {ep} but could "
                          f"not be taken out of it: {res.reject_reason}")
    return ProposeViewUpdateResponse(ProposalStatus.AppliedWithDroppedRanks, res.new_epoch,
                                     dropped)


def _held_slots(pg):
    """How many slots of the group's order hold a rank (None: not known)."""
    try:
        cur = pg._store.get(ORDER_KEY).decode()
    except Exception:  # noqa: BLE001 (a store without the key: a group of another build)
        return None
    return len([g for g in cur.partition("|")[2].split(",") if g])


def _admit(pg, targets, gens):
    """Wait (ADMISSION_TIMEOUT_S) for every target's readiness; fills gens;
    returns the reason for a rejection, "", or None when another member
    committed the next view meanwhile (it may have admitted the targets)."""
    deadline = time.monotonic() + ADMISSION_TIMEOUT_S
    nxt_view = _view_key(pg._epoch + 1)
    for r in targets:
        # polled: a store wait() that times out leaves torch 1.13's TCPStore
        # client out of step with its server, so no short waits here
        while True:
            gens[r] = _ready_gen(pg, r)
            if gens[r] or time.monotonic() >= deadline:
                break
            if _peek(pg, nxt_view) is not None:
                return None
            time.sleep(ADMISSION_POLL_S)
        if not gens[r]:
            return (f"rank {r} has not declared readiness (is_extension=True init or "
                    f"join_group) within {ADMISSION_TIMEOUT_S:.0f} s")
    return ""


def _post_view(pg, ranks_bits, ep, first, expect, ack_us, silent=0):
    """WRITE the view's word into the agent region of each rank of ranks_bits
    (bounded by POST_TIMEOUT_US; not awaited for the ranks of silent) and
    await, for up to ack_us, the acknowledgement of each rank of expect
    (bitmaps).  Returns the bitmap of the expected ranks that did not
    acknowledge: silent, stopped or dead ones, and those that cannot be
    reached at all (agent region never published, or the engine gone)."""
    posted = 0
    for r in MooncakeProcessGroup._bits(ranks_bits):
        v = _peek(pg, f"mooncake_pg/agent/{r}")
        if v is None:  # never published
            continue
        name, addr = v.split("|")
        if pg._agent_peers.get(r) != (name, int(addr)):
            try:
                pg._agent.connect(r, name, int(addr))
            except RuntimeError:  # its engine is gone
                continue
            pg._agent_peers[r] = (name, int(addr))
        posted |= 1 << r
    missed = 0
    if posted:
        _, missed = pg._agent.post_view(posted, ep << _pg.VIEW_OP_BITS | first, POST_TIMEOUT_US,
                                        expect & posted, ack_us, silent & posted)
    return missed | (expect & ~posted)


def _install_view(pg, ep, bits, first, connect=True):
    for r in range(pg._max):
        pg._active[r] = bits >> r & 1
    pg._epoch = ep
    pg._nops = max(pg._nops, first)
    pg._pending = 0
    pg._broken = False
    pg._p2p_broken = 0
    pg._phase = "normal"
    pg._setup_mailboxes(connect=connect)


def activate_ranks(pg, ranks):
    """Bring ranks that declared readiness (a replacement's is_extension init, or
    join_group) into the group.  One call from any active member is enough
    (every member making it is the same change); blocks until the targets are
    admitted, the view is committed and the other members of the new view
    acknowledged it (MOONCAKE_PG_VIEW_ACK_TIMEOUT_MS, default 20 s; the
    silent ones are dropped by one more view: AppliedWithDroppedRanks).  The
    other members install the view at their next collective."""
    return _propose(_as_live_pg(pg, "activate_ranks"), ranks, True)


recover_ranks = activate_ranks


def deactivate_ranks(pg, ranks):
    """Take ranks out of the group (framework-managed mode).  One call from
    any active member is enough; the remaining members acknowledge the view
    (as for activate_ranks) and install it at their next collective, and a
    live rank taken out is told (its operations then raise "rank is not
    active in this group")."""
    return _propose(_as_live_pg(pg, "deactivate_ranks"), ranks, False)


def _declare_ready(pg):
    """Readiness: the counter, then its key, which carries the agent region
    (the activating member publishes it as the rank's)."""
    pg._ready_gen = int(pg._store.add(f"mooncake_pg/ready/{pg._rank}", 1))
    pg._store.set(f"mooncake_pg/ready/{pg._rank}/{pg._ready_gen}", pg._agent_value())


def _join(pg):
    """Wait until the members activate this rank, then take part in the view."""
    if pg._phase == "normal":
        if pg._active[pg._rank] and not pg._broken:
            return
        pg._phase = "quiescing"  # in-place rejoin of a deactivated live rank
        _declare_ready(pg)
    key = f"mooncake_pg/activate/{pg._rank}/{pg._ready_gen}"
    try:
        pg._store.wait([key])  # the store's timeout (init_process_group's) bounds it
    except Exception as e:
        raise RuntimeError(f"mooncake-cpu: join_group: rank {pg._rank} was not activated "
                           f"within the store timeout: {e}") from None
    ep, bits, first = _parse_view(pg._store.get(key).decode())
    pg._nops = first  # the group's count of collectives where this rank comes in
    _install_view(pg, ep, bits, first, connect=False)
    # views committed after the one that activated this rank, posted or not (a
    # rank stopped past the acknowledgement timeout was dropped by the next one)
    _catch_up(pg, peek=True)
    if pg._active[pg._rank]:
        pg._connect_mailboxes()
        pg._move_p2p()  # its older region is from before it left: nothing pends there


def join_group(pg):
    """Declare readiness (if not done at init) and return once an activation
    that includes this rank has been applied."""
    pg = _as_live_pg(pg, "join_group")
    if pg._phase == "invalid":
        raise RuntimeError(f"mooncake-cpu: join_group: this communicator is invalid (its "
                           f"registration in group {pg._gid} was rejected: {pg._rejected})")
    with pg._lock:
        _catch_up(pg)  # a view that took this rank out, posted but not yet installed
        _join(pg)


def extend_group_size_to(pg, n):
    warnings.warn("extend_group_size_to is deprecated and does nothing", DeprecationWarning,
                  stacklevel=2)


# ---------------------------------------------------------------- creators

# Spec 1.7's GPU-only variables: this build has no GPU backend, so the CPU
# backend refuses them rather than ignore them silently (a user who sets one
# expects an effect; upstream's CPU backend ignores both).
_GPU_ONLY_ENV = {
    "MC_USE_NVLINK_IPC": "the NVLink (fabric handle) warm-up switch of the CUDA backend",
    "MC_MACA_HOST_TRANSPORT": "the host transport of MACA builds",
}


def _refuse_gpu_env():
    for name, what in _GPU_ONLY_ENV.items():
        v = os.environ.get(name)
        if v is not None and v != "":
            raise RuntimeError(f"mooncake-cpu: {name}={v!r} is {what}; this build has no GPU "
                               f"backend, so it would have no effect: unset it")


def createMooncakeCpuBackend(dist_opts, pg_options=None):
    _refuse_gpu_env()
    size, rank = dist_opts.group_size, dist_opts.group_rank
    opts = pg_options if isinstance(pg_options, MooncakeBackendOptions) else None
    if pg_options is not None and opts is None:
        raise TypeError(f"mooncake-cpu: pg_options must be MooncakeBackendOptions, got "
                        f"{type(pg_options).__name__}")
    maxg = opts.max_group_size if opts and opts.max_group_size > 0 else size
    if opts and opts.active_ranks is not None and opts.max_group_size <= 0:
        maxg = max(size, min(MAX_RANKS, opts.active_ranks.numel()))
    if not (size <= maxg <= MAX_RANKS):
        raise RuntimeError(f"mooncake-cpu: need group_size ({size}) <= max_group_size ({maxg}) "
                           f"<= {MAX_RANKS}")
    if not (0 <= rank < size):
        raise RuntimeError(f"mooncake-cpu: rank {rank} outside the group of {size}")
    gid = str(dist_opts.group_id)
    if not gid:
        raise RuntimeError("mooncake-cpu: empty group_id")
    granks = list(dist_opts.global_ranks_in_group) or list(range(size))
    if (len(granks) != size or len(set(granks)) != size
            or not all(0 <= g < MAX_RANKS for g in granks)):
        raise RuntimeError(f"mooncake-cpu: global_ranks_in_group {granks} must be {size} distinct "
                           f"ranks in [0, {MAX_RANKS})")
    deact = _env_bool("MOONCAKE_PG_AUTO_DEACTIVATE_ON_FAILURE", True)
    sync = _env_bool("MOONCAKE_PG_AUTO_SYNC_ON_FAILURE", True)
    if opts and opts.auto_deactivate_on_failure is not None:
        deact, sync = opts.auto_deactivate_on_failure, opts.auto_sync_on_failure
    if sync and not deact:
        raise RuntimeError("auto_sync_on_failure requires auto_deactivate_on_failure=true")
    active = None
    if opts and opts.active_ranks is not None:
        if opts.active_ranks.numel() < maxg:
            raise RuntimeError(f"mooncake-cpu: active_ranks has {opts.active_ranks.numel()} "
                               f"entries, fewer than max_group_size {maxg}")
        active = opts.active_ranks
    if _ctx.store is None:
        _ctx.store = dist_opts.store
    ext = bool(opts and opts.is_extension)
    kind, reason = _register_order(dist_opts.store, granks, maxg, rank, ext)
    if kind == "rejected":
        warnings.warn(f"mooncake-cpu: the registration of rank {rank} in group {gid} was "
                      f"rejected ({reason}): this communicator is invalid (local collectives "
                      f"only, send/recv refused)", RuntimeWarning, stacklevel=2)
    _barrier_fixup(dist_opts, granks, rank, kind, size)
    return MooncakeProcessGroup(dist_opts.store, rank, size, gid, granks, maxg, deact, sync, active,
                                ext, reason if kind == "rejected" else None)


# Group identity (spec 1.4) without a Coordinator: the group's store holds its
# registration, "MAX|G0,G1,..." (max_group_size and the rank order: the global
# rank of each slot) under ORDER_KEY.  Founders (is_extension=False,
# CreateOrAttach) write theirs; a joiner (is_extension=True, AttachOrExtend)
# attaches to an equal registration (a replacement), or extends one whose order
# is a proper prefix of its own, of equal capacity, with its slot in the new
# suffix (compare-and-set: a concurrent joiner makes it look again); anything
# else is rejected and its communicator is invalid.
ORDER_KEY = "mooncake_pg/order"


def _register_order(store, order, maxg, rank, ext):
    """-> (kind, reason): kind "create", "attach", "extend" or "rejected"."""
    mine = f"{maxg}|{','.join(str(g) for g in order)}"
    if not ext:
        # a founder slower than a joiner keeps the joiner's extension of its order
        cur = store.compare_set(ORDER_KEY, "", mine).decode()
        cmax, _, corder = cur.partition("|")
        if cmax != str(maxg) or not (corder + ",").startswith(mine.partition("|")[2] + ","):
            store.set(ORDER_KEY, mine)  # a new group under the same store prefix
        # joiners wait for this key: torch's compare_set wakes no waiter
        store.set(ORDER_KEY + "/founded", "1")
        return "create", ""
    limit_ms = _env_ms("MOONCAKE_PG_SETUP_TIMEOUT_MS", SETUP_TIMEOUT_MS)
    try:
        store.wait([ORDER_KEY + "/founded"], timedelta(milliseconds=limit_ms))
    except Exception:  # noqa: BLE001 (torch raises RuntimeError on a store timeout)
        return "rejected", (f"no group was founded in this store within {limit_ms / 1000:g} s "
                            f"(MOONCAKE_PG_SETUP_TIMEOUT_MS) for is_extension=True to join")
    while True:
        cur = store.get(ORDER_KEY).decode()
        if cur == mine:
            return "attach", ""
        cmax, _, corder = cur.partition("|")
        have = [int(g) for g in corder.split(",") if g]
        if int(cmax) != maxg:
            return "rejected", (f"max_group_size {maxg} differs from the group's capacity "
                                f"{cmax}")
        if not (len(have) < len(order) and list(order[:len(have)]) == have):
            return "rejected", (f"rank order {list(order)} is not a proper prefix extension of "
                                f"the group's order {have}")
        if rank < len(have):
            return "rejected", (f"rank {rank} is not in the new suffix of the order (the group "
                                f"has slots 0..{len(have) - 1} already)")
        if store.compare_set(ORDER_KEY, cur, mine).decode() == mine:
            return "extend", ""


def _barrier_fixup(dist_opts, granks, rank, kind, size):
    """torch 1.13 ends init_process_group and new_group with a store barrier
    that waits for exactly get_world_size() check-ins of the world's processes.
    A replacement's check-in would be one too many (the rank it replaces
    checks in at the founding), and a world with holes (dead ranks below the
    highest active one) has fewer processes than its size: adjust the count
    once per group so the barrier sees the processes that are there.  A joiner
    that extends the group adds the check-in its new size expects; a rejected
    one, whose communicator is invalid, brings the count to its own size."""
    c10d = dist.distributed_c10d
    key = f"{c10d.STORE_BASED_BARRIER_PREFIX}:{c10d._group_count}"
    try:
        store = dist_opts.store.underlying_store
    except AttributeError:
        return
    if kind == "attach":
        # -1 before our +1: the count never runs ahead of the founders' check-ins
        store.add(key, -1)
        return
    if kind == "extend":
        return
    if kind == "rejected":
        store.add(key, size - 1 - store.add(key, 0))
        return
    if not c10d.is_initialized() or rank != 0:
        return  # the default group itself, or not the group's first member
    world = c10d._get_default_group()
    if isinstance(world, MooncakeProcessGroup) and world._phase == "normal":
        holes = world.size() - len(world._active_list())
        if holes > 0:
            store.add(key, holes)


def createMooncakeBackend(dist_opts, pg_options=None):
    raise RuntimeError("mooncake: the GPU backend ('mooncake', CUDA tensors) is not in this "
                       "build (no CUDA collectives); use backend='mooncake-cpu' for CPU tensors")


def _register():
    plugins = dist.Backend._plugins
    if "MOONCAKE-CPU" not in plugins:
        dist.Backend.register_backend("mooncake-cpu", createMooncakeCpuBackend, extended_api=True)
    if "MOONCAKE" not in plugins:
        dist.Backend.register_backend("mooncake", createMooncakeBackend, extended_api=True)


_register()
