"""mooncake.pg's send and recv: one worker thread per (direction, peer), the
pair's region and its move to a newer view's region (pg.c announce).

_PointToPoint is a part of MooncakeProcessGroup (python/mooncake/_pg_group.py).
Split out of pg.py (python/mooncake/pg.py lists the modules).
"""

from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as futures_wait

from mooncake import _pg
from mooncake._optional import require
from mooncake._pg_coll import _addr, _nbytes, _one
from mooncake._pg_config import _ctx
from mooncake._pg_view import _join
from mooncake._pg_work import MooncakeP2PWork, MooncakeWork

torch = require("torch", "mooncake.pg")


ANNOUNCE_TIMEOUT_US = 2_000_000  # send/recv moving to a new view's region (pg.c announce)
_CROSS = ("Send/recv do not cross a membership change: order a pair's send and recv on the "
          "same side of it (of the new view's first collective)")


class _PointToPoint:
    """Send and recv of MooncakeProcessGroup (a mixin: the group's state is in
    _pg_group.py)."""

    # --- the pair's region

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
