"""mooncake.buffer_pool: the store's local-buffer pools under their public name.

Upstream's ``mooncake.buffer_pool``: ``BufferPool`` is the class of
``mooncake.store`` (implemented in the extension, python/store_pool.c) and
``RegisteredBufferPool`` is an alias of it.  Both are None when the store
extension is not built or has no BufferPool, as upstream.
"""

try:
    from mooncake.store import BufferPool
except (ImportError, AttributeError):  # depends on the built extension
    BufferPool = None

RegisteredBufferPool = BufferPool

__all__ = ["BufferPool", "RegisteredBufferPool"]
