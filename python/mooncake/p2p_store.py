"""mooncake.p2p_store: the master-less P2P store for checkpoints.

Upstream ships this as a Go package (mooncake-p2p-store); ours is the C
library (``<mooncake/p2p_store.h>``) with this module on top.  The etcd
layout is upstream's, so Go and Python peers can share one catalog:
``mooncake/checkpoint/<name>`` holds JSON naming, for every shard of the
object, its ``gold`` holder (the process that registered it) and its
``replica_list`` (processes that pulled it).

    store = P2PStore("127.0.0.1:2379", "10.0.0.1:0")
    store.register("ckpt/step100", [addr], [size], 64 << 20)    # trainer
    store.get_replica("ckpt/step100", [dst], [size])             # inferencer
    store.delete_replica("ckpt/step100")

Addresses are integers (``tensor.data_ptr()``, ``array.ctypes.data``); the
memory must stay mapped and unchanged until ``unregister`` /
``delete_replica``.  Methods raise the exceptions below, named after
upstream's sentinel errors; their messages start with "error:" as
upstream's do.  See docs/python.md.
"""

from collections import namedtuple

from mooncake import _p2p_store

__all__ = [
    "P2PStore", "PayloadInfo", "P2PStoreError", "ErrInvalidArgument",
    "ErrAddressOverlapped", "ErrPayloadOpened", "ErrPayloadNotOpened",
    "ErrPayloadNotFound", "ErrTooManyRetries", "ErrKeyExists", "ErrTransferEngine",
    "MIN_ATTEMPTS", "PULL_ROUNDS",
]

MIN_ATTEMPTS = _p2p_store.MIN_ATTEMPTS
PULL_ROUNDS = _p2p_store.PULL_ROUNDS

PayloadInfo = namedtuple("PayloadInfo", "name max_shard_size total_size size_list")


class P2PStoreError(Exception):
    """Any failure; ``code`` is the mc_status (include/mooncake/status.h)."""

    def __init__(self, code, message):
        super().__init__(f"error: {message}")
        self.code = code


class ErrInvalidArgument(P2PStoreError):
    pass


class ErrAddressOverlapped(P2PStoreError):
    pass


class ErrPayloadOpened(P2PStoreError):
    """The name is already open (registered or replicated) in this process."""


class ErrPayloadNotOpened(P2PStoreError):
    """unregister/delete_replica of a name this process does not hold."""


class ErrPayloadNotFound(P2PStoreError):
    """No such object in the catalog."""


class ErrTooManyRetries(P2PStoreError):
    """Every attempt at some shard failed (its holders are gone)."""


class ErrKeyExists(P2PStoreError):
    """register without force_create of a name already in the catalog."""


class ErrTransferEngine(P2PStoreError):
    pass


_CLASSES = {
    -600: ErrInvalidArgument,       # MC_ERR_INVALID_PARAMS
    -2005: ErrAddressOverlapped,    # MC_ERR_ADDRESS_OVERLAPPED
    -2021: ErrPayloadOpened,        # MC_ERR_EXISTS
    -2022: ErrPayloadNotOpened,     # MC_ERR_NOT_FOUND
    -704: ErrPayloadNotFound,       # MC_ERR_OBJECT_NOT_FOUND
    -800: ErrTooManyRetries,        # MC_ERR_TRANSFER_FAIL
    -705: ErrKeyExists,             # MC_ERR_OBJECT_ALREADY_EXISTS
}


def _raise(err):
    code, message = err.args
    raise _CLASSES.get(code, ErrTransferEngine if code <= -2000 else P2PStoreError)(
        code, message) from None


class P2PStore:
    """One peer: an engine and an etcd client.

    metadata_uri: the catalog's etcd ("host:port[,host:port]" or
    "etcd://..."); local_server_name: "host:port" as upstream (the host is
    the address peers use); te_metadata_uri: the engine's metadata, by
    default the same etcd (upstream), or "P2PHANDSHAKE" (the engine is then
    named host:rpc_port); protocol: "tcp" (default) or "rdma".
    """

    def __init__(self, metadata_uri, local_server_name, te_metadata_uri=None, protocol=None):
        try:
            self._s = _p2p_store.Store(metadata_uri, local_server_name, te_metadata_uri, protocol)
        except _p2p_store.Error as e:
            _raise(e)

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except _p2p_store.Error as e:
            _raise(e)

    def close(self):
        self._s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def get_local_server_name(self):
        """The engine's real segment name: what the catalog advertises."""
        return self._call(self._s.local_server_name)

    def register(self, name, addr_list, size_list, max_shard_size, location="cpu:0",
                 force_create=False):
        """Publish the buffers as name, this process as gold holder of every shard."""
        self._call(self._s.register, name, list(addr_list), list(size_list), int(max_shard_size),
                   location, bool(force_create))

    def unregister(self, name):
        self._call(self._s.unregister, name)

    def list(self, name_prefix=""):
        return [PayloadInfo(*t) for t in self._call(self._s.list, name_prefix)]

    def get_replica(self, name, addr_list, size_list):
        """Pull name into the buffers (sizes equal to the stored size_list)."""
        self._call(self._s.get_replica, name, list(addr_list), list(size_list))

    def delete_replica(self, name):
        self._call(self._s.delete_replica, name)
