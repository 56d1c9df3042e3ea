"""The store's REST service (``mc_store_rest_server``, ``python -m mooncake.mooncake_store_service``).

Upstream's ``mooncake.mooncake_store_service`` (spec store.md 7.6): a
process that owns one real ``MooncakeDistributedStore`` client, set up from
a ``MooncakeConfig`` (``--config FILE``, else ``MOONCAKE_CONFIG_PATH``, else
the ``MOONCAKE_*`` variables; ``-D field=value`` overrides a field), which
contributes its global segment to the cluster and answers a small REST API
over aiohttp (default port 8080)::

    PUT    /api/put          JSON {"key": K, "value": "<string>"} (stored as
                             its UTF-8 bytes): 200 {"status": "success"};
                             400 for bad JSON or a missing/invalid field;
                             500 {"error": "PUT operation failed"}
    GET    /api/get/{key}    200 the bytes (application/octet-stream);
                             404 {"error": "Key not found"}; 500 on errors
    GET    /api/exist/{key}  200 {"exists": true|false}
    DELETE /api/remove/{key} 200 {"status": "success"}; 500 otherwise (a
                             missing key included)
    DELETE /api/remove_all   200 {"status": "success removed <n> keys"}

Request bodies above 100 MB are refused with 413.  Every store call runs in
the event loop's executor, so a slow call never stalls the other requests,
and no request's failure stops the service.

Segment management (the store's extra segments; ids "<first>-<second>")::

    POST /api/mount_shm      {"name", "size", "offset"=0, "protocol"=config's,
                             "location"=""}: maps /dev/shm/<name> (no "/"
                             inside the name) -> {"status": "success",
                             "segment_ids": [...]}
    POST /api/mount          {"size" > 0, "protocol", "location"}: memory
                             allocated in the service -> {"status":
                             "success", "segment_ids": [...], "allocated_size": n}
    POST /api/unmount_shm    {"segment_ids": [...] or "id",
    POST /api/unmount         "grace_period_seconds": 0}: unmount, wait the
                             grace period, unmap -> {"status": "success"}
    POST /api/unmount_local_disk {"grace_period_seconds": 0..3600}: take the
                             SSD tier off the master, then wait

A malformed body or field is 400, a refused call 500 {"error": ... with
the store's code}.

    POST /api/reconfigure    {"mode": "decode", "path", "size", "offset"=0,
                             "protocol", "location", "grace_period_seconds"=0}:
                             make-before-break: mount the file at path, and
                             only once it is mounted unmount the segments an
                             earlier reconfigure mounted; {"mode": "prefill"}
                             unmounts them -> {"status": "success", "mode":
                             ..., "segment_ids": [the decode segments now]}.
                             A failed mount leaves the old segments serving.

When the service is ready it prints one line to stdout,
``mc_store_rest_server listening on HOST:PORT``, so scripts can wait for
it and learn the port chosen for ``--port 0``.  SIGINT and SIGTERM stop it
(the store is closed) with exit status 0.

aiohttp (Debian: python3-aiohttp) is imported by this module only;
``import mooncake.store`` never needs it.
"""

import argparse
import asyncio
import logging
import signal
import sys
import time

try:
    from aiohttp import web
except ImportError as e:  # pragma: no cover - depends on the machine
    raise ImportError(
        "mooncake.mooncake_store_service needs aiohttp (Debian: apt-get install "
        f"python3-aiohttp; pip: pip install aiohttp): {e}") from e

from mooncake.mooncake_config import MooncakeConfig

__all__ = ["MooncakeStoreService", "MAX_BODY", "DEFAULT_PORT", "main", "sync_main"]

logger = logging.getLogger("mooncake.mooncake_store_service")

DEFAULT_PORT = 8080
MAX_BODY = 100 * 1024 * 1024  # upstream's limit: 100 MB

GRACE_MAX_S = 3600


def _error(status, message):
    return web.json_response({"error": message}, status=status)


class _BadRequest(ValueError):
    """A malformed request body or field: 400 with this message."""


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _grace(body):
    g = body.get("grace_period_seconds", 0)
    if not isinstance(g, (int, float)) or isinstance(g, bool) or not 0 <= g <= GRACE_MAX_S:
        raise _BadRequest(f"'grace_period_seconds' must be a number in 0..{GRACE_MAX_S}")
    return g


class MooncakeStoreService:
    """One store client and the aiohttp application over it.

    ``store`` may be given (any object with put/get/is_exist/remove/
    remove_all, e.g. an already set up MooncakeDistributedStore); otherwise
    ``start_store_service()`` creates and sets one up from ``config``.
    """

    def __init__(self, config=None, store=None):
        self.config = config
        self.store = store
        self._runner = None
        self._site = None
        self.port = None
        self._decode_ids = []  # segments the last /api/reconfigure mounted
        self._reconf_lock = None  # an asyncio.Lock, made on the serving loop

    # -- the store -------------------------------------------------------------------

    def start_store_service(self, max_wait_time=60.0):
        """Sets up the store from the configuration; retries while the master
        is unreachable, for at most max_wait_time seconds.  Raises
        RuntimeError when setup keeps failing."""
        if self.store is not None:
            return
        if self.config is None:
            raise RuntimeError("no MooncakeConfig and no store given")
        from mooncake.store import MooncakeDistributedStore
        deadline = time.monotonic() + max(0.0, float(max_wait_time))
        delay = 0.1
        while True:
            store = MooncakeDistributedStore()
            rc = store.setup(*self.config.setup_args(), tenant_id=self.config.tenant_id,
                             enable_ssd_offload=self.config.enable_ssd_offload,
                             ssd_offload_path=self.config.ssd_offload_path)
            if rc == 0:
                self.store = store
                logger.info("store set up (master %s)", self.config.master_server_address)
                return
            store.close()
            if time.monotonic() + delay > deadline:
                raise RuntimeError(f"store setup failed with {rc} (master "
                                   f"{self.config.master_server_address})")
            logger.warning("store setup failed with %d; retrying", rc)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def close_store(self):
        if self.store is not None:
            self.store.close()
            self.store = None

    async def _call(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    # -- handlers --------------------------------------------------------------------

    async def handle_put(self, request):
        try:
            body = await request.json()
        except web.HTTPRequestEntityTooLarge:
            raise
        except (ValueError, UnicodeDecodeError):
            return _error(400, "Invalid JSON body")
        if not isinstance(body, dict):
            return _error(400, "The body must be a JSON object with 'key' and 'value'")
        key, value = body.get("key"), body.get("value")
        if not isinstance(key, str) or not key:
            return _error(400, "Missing or invalid 'key' (a non-empty string)")
        if not isinstance(value, str):
            return _error(400, "Missing or invalid 'value' (a string)")
        try:
            rc = await self._call(self.store.put, key, value.encode("utf-8"))
        except Exception:  # a store call that raises is a failed put, not a dead service
            logger.exception("put %r raised", key)
            rc = -1
        if rc != 0:
            logger.warning("put %r failed with %s", key, rc)
            return _error(500, "PUT operation failed")
        return web.json_response({"status": "success"})

    async def handle_get(self, request):
        key = request.match_info["key"]
        try:
            value = await self._call(self.store.get, key)
        except Exception:
            logger.exception("get %r raised", key)
            return _error(500, "GET operation failed")
        if not value:  # upstream's miss value: b""
            return _error(404, "Key not found")
        return web.Response(body=bytes(value), content_type="application/octet-stream")

    async def handle_exist(self, request):
        key = request.match_info["key"]
        try:
            rc = await self._call(self.store.is_exist, key)
        except Exception:
            logger.exception("is_exist %r raised", key)
            return _error(500, "EXIST operation failed")
        if rc < 0:
            return _error(500, f"EXIST operation failed ({rc})")
        return web.json_response({"exists": rc > 0})

    async def handle_remove(self, request):
        key = request.match_info["key"]
        try:
            rc = await self._call(self.store.remove, key)
        except Exception:
            logger.exception("remove %r raised", key)
            rc = -1
        if rc != 0:
            return _error(500, f"REMOVE operation failed ({rc})")
        return web.json_response({"status": "success"})

    async def handle_remove_all(self, request):
        try:
            n = await self._call(self.store.remove_all)
        except Exception:
            logger.exception("remove_all raised")
            n = -1
        if n < 0:
            return _error(500, f"REMOVE_ALL operation failed ({n})")
        return web.json_response({"status": f"success removed {n} keys"})

    # -- segment management ----------------------------------------------------------------

    async def _json_object(self, request):
        try:
            body = await request.json()
        except web.HTTPRequestEntityTooLarge:
            raise
        except (ValueError, UnicodeDecodeError):
            raise _BadRequest("Invalid JSON body")
        if not isinstance(body, dict):
            raise _BadRequest("The body must be a JSON object")
        return body

    def _protocol_location(self, body):
        default = getattr(self.config, "protocol", None) or "tcp"
        protocol, location = body.get("protocol", default), body.get("location", "")
        if not isinstance(protocol, str) or not protocol:
            raise _BadRequest("'protocol' must be a non-empty string")
        if not isinstance(location, str):
            raise _BadRequest("'location' must be a string")
        return protocol, location

    async def _segment_call(self, request, parse, call, answer):
        try:
            args = parse(await self._json_object(request))
        except _BadRequest as e:
            return _error(400, str(e))
        try:
            r = await self._call(call, *args)
        except Exception:
            logger.exception("%s raised", request.path)
            return _error(500, f"{request.path} failed")
        rc = r["ret"] if isinstance(r, dict) else r
        if rc != 0:
            logger.warning("%s failed with %s", request.path, rc)
            return _error(500, f"{request.path} failed ({rc})")
        return web.json_response(answer(r))

    async def handle_mount_shm(self, request):
        def parse(b):
            name, size, offset = b.get("name"), b.get("size"), b.get("offset", 0)
            if not isinstance(name, str) or not name.lstrip("/") or "/" in name.lstrip("/"):
                raise _BadRequest("'name' must be a POSIX shm name (no '/' inside)")
            if not _is_int(size) or size <= 0:
                raise _BadRequest("'size' must be a positive integer")
            if not _is_int(offset) or offset < 0:
                raise _BadRequest("'offset' must be a non-negative integer")
            return ("/dev/shm/" + name.lstrip("/"), size, offset) + self._protocol_location(b)
        return await self._segment_call(
            request, parse, lambda *a: self.store.mount_segment(*a),
            lambda r: {"status": "success", "segment_ids": r["segment_ids"]})

    async def handle_mount(self, request):
        def parse(b):
            size = b.get("size")
            if not _is_int(size) or size <= 0:
                raise _BadRequest("'size' must be a positive integer")
            return (size,) + self._protocol_location(b)
        return await self._segment_call(
            request, parse, lambda *a: self.store.allocate_and_mount_segment(*a),
            lambda r: {"status": "success", "segment_ids": r["segment_ids"],
                       "allocated_size": r["allocated_size"]})

    async def handle_unmount(self, request):
        def parse(b):
            ids = b.get("segment_ids")
            if isinstance(ids, str):
                ids = [ids]
            if not isinstance(ids, list) or not ids or \
                    not all(isinstance(i, str) and i for i in ids):
                raise _BadRequest("'segment_ids' must be a segment id or a list of them")
            return ids, _grace(b)
        return await self._segment_call(
            request, parse, lambda *a: self.store.unmount_and_free_segment(*a),
            lambda r: {"status": "success"})

    async def handle_unmount_local_disk(self, request):
        return await self._segment_call(
            request, lambda b: (_grace(b),),
            lambda *a: self.store.unmount_local_disk_segment(*a),
            lambda r: {"status": "success"})

    async def _unmount_ids(self, ids, grace):
        """Unmounts ids; returns those that could not be unmounted, with the codes."""
        left = []
        for sid in ids:
            try:
                r = await self._call(lambda: self.store.unmount_and_free_segment([sid], grace))
            except Exception as e:  # noqa: BLE001 - reported in the answer
                r = str(e)
            if isinstance(r, dict):
                r = r["ret"]
            if r != 0:
                left.append((sid, r))
        return left

    async def handle_reconfigure(self, request):
        try:
            b = await self._json_object(request)
            mode = b.get("mode")
            if mode not in ("decode", "prefill"):
                raise _BadRequest("'mode' must be \"decode\" or \"prefill\"")
            grace = _grace(b)
            if mode == "decode":
                path, size, offset = b.get("path"), b.get("size"), b.get("offset", 0)
                if not isinstance(path, str) or not path.startswith("/"):
                    raise _BadRequest("'path' must be an absolute file path")
                if not _is_int(size) or size <= 0:
                    raise _BadRequest("'size' must be a positive integer")
                if not _is_int(offset) or offset < 0:
                    raise _BadRequest("'offset' must be a non-negative integer")
                args = (path, size, offset) + self._protocol_location(b)
        except _BadRequest as e:
            return _error(400, str(e))
        if self._reconf_lock is None:
            self._reconf_lock = asyncio.Lock()
        async with self._reconf_lock:
            new_ids = []
            if mode == "decode":
                try:
                    r = await self._call(lambda: self.store.mount_segment(*args))
                except Exception:
                    logger.exception("%s raised", request.path)
                    return _error(500, f"{request.path} failed")
                if r["ret"] != 0:
                    return _error(500, f"{request.path} failed: cannot mount {path} "
                                  f"({r['ret']}); the decode segments stay as they were")
                new_ids = list(r["segment_ids"])
            # make before break: the old segments go only now
            left = await self._unmount_ids(self._decode_ids, grace)
            self._decode_ids = new_ids + [sid for sid, _ in left]
            if left:
                return _error(500, f"{request.path}: " + ", ".join(
                    f"segment {sid} could not be unmounted ({rc})" for sid, rc in left)
                    + f"; decode segments now {self._decode_ids}")
            return web.json_response({"status": "success", "mode": mode,
                                      "segment_ids": self._decode_ids})

    # -- the HTTP side ---------------------------------------------------------------

    def make_app(self):
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_put("/api/put", self.handle_put)
        app.router.add_get("/api/get/{key:.+}", self.handle_get)
        app.router.add_get("/api/exist/{key:.+}", self.handle_exist)
        app.router.add_delete("/api/remove_all", self.handle_remove_all)
        app.router.add_delete("/api/remove/{key:.+}", self.handle_remove)
        app.router.add_post("/api/mount_shm", self.handle_mount_shm)
        app.router.add_post("/api/mount", self.handle_mount)
        app.router.add_post("/api/unmount_shm", self.handle_unmount)
        app.router.add_post("/api/unmount", self.handle_unmount)
        app.router.add_post("/api/unmount_local_disk", self.handle_unmount_local_disk)
        app.router.add_post("/api/reconfigure", self.handle_reconfigure)
        return app

    async def start_http_service(self, port=DEFAULT_PORT, host="0.0.0.0"):
        """Starts serving; returns the port bound (useful with port 0)."""
        self._runner = web.AppRunner(self.make_app(), access_log=None)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, host, port)
        await self._site.start()
        self.port = self._runner.addresses[0][1]
        return self.port

    async def stop_http_service(self):
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def _parse_args(argv):
    p = argparse.ArgumentParser(prog="mc_store_rest_server",
                                description="Mooncake store REST service (spec store.md 7.6)")
    p.add_argument("--config", default=None,
                   help="MooncakeConfig JSON file (else MOONCAKE_CONFIG_PATH or MOONCAKE_*)")
    p.add_argument("-D", "--define", action="append", default=[], metavar="FIELD=VALUE",
                   help="override one configuration field (repeatable)")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"port to listen on (default {DEFAULT_PORT}; 0 picks one)")
    p.add_argument("--max-wait-time", type=float, default=60.0,
                   help="seconds to keep retrying the store setup while the master is "
                        "unreachable (default 60)")
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return p.parse_args(argv)


async def main(argv=None):
    """Runs the service until SIGINT/SIGTERM; returns the exit status."""
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = MooncakeConfig.load(args.config, args.define)
    except (OSError, ValueError) as e:
        print(f"mc_store_rest_server: bad configuration: {e}", file=sys.stderr)
        return 2
    service = MooncakeStoreService(config)
    loop = asyncio.get_running_loop()
    try:
        await loop.run_in_executor(None, service.start_store_service, args.max_wait_time)
    except RuntimeError as e:
        print(f"mc_store_rest_server: {e}", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        port = await service.start_http_service(args.port, args.host)
    except OSError as e:
        print(f"mc_store_rest_server: cannot listen on {args.host}:{args.port}: {e}",
              file=sys.stderr)
        service.close_store()
        return 1
    print(f"mc_store_rest_server listening on {args.host}:{port}", flush=True)
    await stop.wait()
    await service.stop_http_service()
    await loop.run_in_executor(None, service.close_store)
    return 0


def sync_main(argv=None):
    """The console script ``mc_store_rest_server``."""
    return asyncio.run(main(argv))


if __name__ == "__main__":
    sys.exit(sync_main())
