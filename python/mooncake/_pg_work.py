"""mooncake.pg's work handles (MooncakeWork, MooncakeP2PWork) and the
collective lane: the one thread per group that runs its collectives in
issue order (or the caller itself, for a blocking call).

Split out of pg.py (python/mooncake/pg.py lists the modules).
"""

import sys
import threading
from collections import deque
from concurrent.futures import Future

from mooncake._optional import require

torch = require("torch", "mooncake.pg")
import torch.distributed as dist  # noqa: E402


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
    call of the group's method) goes to the lane's thread.  The frames of
    mooncake.pg's own modules (_ours) between here and the caller are skipped."""
    f = sys._getframe(2)
    while f is not None and _ours(f.f_globals.get("__name__")):
        f = f.f_back
    return (f is not None and f.f_globals.get("__name__") == _C10D
            and f.f_locals.get("async_op") is False)


_C10D = dist.distributed_c10d.__name__
# mooncake.pg is pg.py and its modules _pg_*.py (not the extension _pg: C frames
# are not Python frames)
_PKG = __name__.rpartition(".")[0]


def _ours(name):
    return name is not None and (name == _PKG + ".pg" or name.startswith(_PKG + "._pg_"))
