"""mooncake.pg's configuration: the process-wide engine and timeouts, the
environment variables' parsing, and MooncakeBackendOptions (pg_options).

Split out of pg.py (python/mooncake/pg.py lists the modules); everything
here is importable from mooncake.pg as before.
"""

import atexit
import os
import sys
import threading
import time
import weakref

from mooncake import _pg
from mooncake._optional import require

torch = require("torch", "mooncake.pg")


MAX_RANKS = _pg.MAX_RANKS
COLL_SLOTS = 4
COLL_REGION = 32 << 20  # per direction, split over ranks and slots


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
