"""mooncake.pg's membership: group identity (the registration in the
group's store), views (commit, post, acknowledge, install, catch up), joins
and activation, and the resynchronisation after a failure (spec 1.4).

The functions take the group (a MooncakeProcessGroup, _pg_group.py) as
their first argument; the public calls over them
(activate_ranks, join_group, sync_after_failure, the getters) are in pg.py.
Split out of pg.py (python/mooncake/pg.py lists the modules).
"""

import time
from datetime import timedelta
from enum import IntEnum

from mooncake import _pg
from mooncake._pg_config import MAX_RANKS, SETUP_TIMEOUT_MS, _ctx, _env_ms


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
    for r in pg._bits(ranks_bits):
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
    for r in pg._bits(union):
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
