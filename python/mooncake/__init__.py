"""Mooncake: the Transfer Engine and the distributed KV store for Python.

Modules (imported on demand, nothing eagerly):
    mooncake.engine                TransferEngine, TransferOpcode, TransferNotify
    mooncake.store                 MooncakeDistributedStore, ReplicateConfig, ...
    mooncake.async_store           MooncakeDistributedStoreAsync (asyncio wrappers)
    mooncake.buffer_pool           BufferPool, RegisteredBufferPool
    mooncake.mooncake_config       MooncakeConfig (MOONCAKE_* variables, JSON file)
    mooncake.http_metadata_server  python -m mooncake.http_metadata_server --host --port
    mooncake.cli                   the console programs' entry points

As upstream, ``mooncake.BufferPool`` and ``mooncake.RegisteredBufferPool``
resolve lazily to ``mooncake.buffer_pool``'s names, and the package path is
extended over other ``mooncake`` directories on sys.path.
"""

from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

# The distribution's version: upstream's release whose API this package
# matches, with our own release (the C library's) as the local label.
__version__ = "@VERSION@"
__upstream_version__ = "@UPSTREAM_VERSION@"
__mooncake_c_version__ = "@MC_VERSION@"

__all__ = ["BufferPool", "RegisteredBufferPool"]


def __getattr__(name):
    if name in __all__:
        from mooncake import buffer_pool

        return getattr(buffer_pool, name)
    raise AttributeError(f"module 'mooncake' has no attribute '{name}'")
