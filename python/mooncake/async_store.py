"""MooncakeDistributedStoreAsync: asyncio spelling of the store client.

Upstream's ``mooncake.async_store``.  The class subclasses the native
``mooncake.store.MooncakeDistributedStore``; every method ``<name>`` of it
is also reachable as ``async_<name>``, a coroutine function that runs the
blocking call in the event loop's default executor (a thread pool; the
native calls release the GIL), so many can be awaited at once::

    store = MooncakeDistributedStoreAsync()
    store.setup(...)
    await asyncio.gather(*(store.async_put(k, v) for k, v in items))

The ``async_*`` attributes are made on first use by ``__getattr__`` (which
Python calls only when normal lookup fails, so the native methods and
attributes are untouched) and cached on the instance.
"""

import asyncio
import functools

from mooncake.store import MooncakeDistributedStore

__all__ = ["MooncakeDistributedStoreAsync"]

_PREFIX = "async_"


class MooncakeDistributedStoreAsync(MooncakeDistributedStore):
    """MooncakeDistributedStore with ``async_<name>`` coroutine wrappers."""

    def __getattr__(self, name: str):
        if not name.startswith(_PREFIX) or len(name) == len(_PREFIX):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        sync_name = name[len(_PREFIX):]
        try:
            sync_method = getattr(self, sync_name)
        except AttributeError:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}' "
                                 f"(nor '{sync_name}')") from None
        if not callable(sync_method):
            raise AttributeError(f"'{sync_name}' is not callable")
        async_method = self._make_async_wrapper(sync_method)
        try:
            object.__setattr__(self, name, async_method)  # next lookups skip __getattr__
        except (AttributeError, TypeError):
            pass  # no instance dict: build it again next time
        return async_method

    @staticmethod
    def _make_async_wrapper(sync_method):
        @functools.wraps(sync_method)
        async def wrapper(*args, **kwargs):
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(
                None, functools.partial(sync_method, *args, **kwargs))

        return wrapper
