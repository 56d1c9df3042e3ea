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

Files (python/mooncake/, lower first; each imports only those above it):

* ``_pg_config.py``: the process-wide engine and timeouts (set_*), the
  environment's parsing, MooncakeBackendOptions;
* ``_pg_work.py``: the work handles and the collective lane (_Lane);
* ``_pg_view.py``: membership: group identity (_register_order), views
  (_propose, _change, _post_view, _catch_up), joins, _sync after a failure;
* ``_pg_coll.py``: the collective algorithms (the _Collectives mixin);
* ``_pg_p2p.py``: send/recv (the _PointToPoint mixin);
* ``_pg_group.py``: MooncakeProcessGroup: state, departure, mailboxes, the
  engine of every operation (_submit, _run, _finish);
* ``pg.py`` (this file): the public calls on a group (getters, membership
  calls), the backend creators and their registration with torch.
"""

import os
import warnings

from mooncake._optional import require

torch = require("torch", "mooncake.pg")
import torch.distributed as dist  # noqa: E402

# The parts (above); every name pg.py defined before the split is importable
# from here as before.
from mooncake._pg_config import (  # noqa: E402,F401
    COLL_REGION, COLL_SLOTS, DEPART_TIMEOUT_MS, MAX_RANKS, SETUP_TIMEOUT_MS,
    MooncakeBackendOptions, _Context, _ctx, _env_bool, _env_ms, _env_size, _live,
    _positive_us, _shutdown_all, set_collective_timeout_us, set_device_filter,
    set_fault_reconciliation_window_us, set_host_ip, set_p2p_timeout_us,
    set_transfer_engine)
from mooncake._pg_work import (  # noqa: E402,F401
    _C10D, MooncakeP2PWork, MooncakeWork, _caller_blocks, _Lane, _Op)
from mooncake._pg_view import (  # noqa: E402,F401
    ADMISSION_POLL_S, ADMISSION_TIMEOUT_S, ORDER_KEY, POST_TIMEOUT_US, VIEW_ACK_TIMEOUT_MS,
    ProposalStatus, ProposeViewUpdateResponse, SyncAfterFailureResponse,
    SyncAfterFailureStatus, ViewUpdateStatus, _admit, _catch_up, _change, _counter,
    _declare_ready, _drop, _held_slots, _install_view, _join, _parse_view, _peek,
    _post_view, _propose, _ready_gen, _refresh, _register_order, _stale, _sync,
    _view_key, _wait_keys)
from mooncake._pg_coll import (  # noqa: E402,F401
    DIRECT_MAX, _DT_CODE, _OP_CODE, _addr, _bytes, _check_root, _Contig, _nbytes, _one,
    _red, _same)
from mooncake._pg_p2p import ANNOUNCE_TIMEOUT_US, _CROSS  # noqa: E402,F401
from mooncake._pg_group import MooncakeProcessGroup  # noqa: E402

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


# ---------------------------------------------------------------- the calls on a group

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
