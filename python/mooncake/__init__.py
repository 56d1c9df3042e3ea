"""Mooncake: the Transfer Engine (and, later, the distributed KV store) for Python.

Modules:
    mooncake.engine  TransferEngine, TransferOpcode, TransferNotify -- the
                     upstream-compatible binding of the Transfer Engine's C API.

Nothing is imported eagerly: ``import mooncake.engine`` loads only what it needs.
"""

__version__ = "@VERSION@"
