"""A prefill/decode (PD) proxy for vLLM v1 with the Mooncake connector.

Upstream's ``mooncake.vllm_v1_proxy_server`` (spec components.md section 5):
an OpenAI-compatible front for a disaggregated deployment, default port
8000.  Each request to ``/v1/completions`` or ``/v1/chat/completions``

1. goes to the next prefill instance (round robin) with ``max_tokens=1``
   (and ``max_completion_tokens=1``), ``stream=False`` and
   ``kv_transfer_params={"do_remote_decode": true, ...}``, so the prefill
   instance computes the KV cache and keeps it for the decoder;
2. then goes, unchanged except for the ``kv_transfer_params`` the prefill
   instance answered with, to the next decode instance, whose response
   (streamed or not) is relayed back to the client as it arrives.

An instance that refuses the connection is skipped for the next one of its
role; when no instance of a role can be reached the client gets 503
{"error": ...}.  An error status from an instance (4xx/5xx) is passed back
with its body.  ``/healthcheck`` answers 200 {"status": "ok",
"prefill_instances": N, "decode_instances": M}.

Command line (the flags of vLLM's toy PD proxy, which upstream's follows;
the spec names none)::

    python -m mooncake.vllm_v1_proxy_server --port 8000 \
        --prefiller-hosts 10.0.0.1 10.0.0.2 --prefiller-ports 8100 8100 \
        --decoder-hosts 10.0.0.3 --decoder-ports 8200

A single port is used for every host of its role.  The client's
``Authorization`` header and ``X-Request-Id`` (one is made when absent)
are passed on to both instances.  When ready it prints one line,
``vllm_v1_proxy_server listening on HOST:PORT``.

Upstream's proxy runs on FastAPI and httpx; this one uses aiohttp for both
sides (Debian: python3-aiohttp), imported by this module only.
"""

import argparse
import asyncio
import copy
import itertools
import logging
import signal
import sys
import uuid

try:
    import aiohttp
    from aiohttp import web
except ImportError as e:  # pragma: no cover - depends on the machine
    raise ImportError(
        "mooncake.vllm_v1_proxy_server needs aiohttp (Debian: apt-get install "
        f"python3-aiohttp; pip: pip install aiohttp): {e}") from e

__all__ = ["ProxyServer", "DEFAULT_PORT", "main", "sync_main"]

logger = logging.getLogger("mooncake.vllm_v1_proxy_server")

DEFAULT_PORT = 8000
MAX_BODY = 100 * 1024 * 1024
_FORWARDED = ("Authorization", "X-Request-Id")


class _Role:
    """The instances of one role, handed out round robin."""

    def __init__(self, name, urls):
        self.name = name
        self.urls = [u.rstrip("/") for u in urls]
        self._next = itertools.count()

    def order(self):
        """Every instance once, starting with the next one in turn."""
        if not self.urls:
            return []
        first = next(self._next) % len(self.urls)
        return self.urls[first:] + self.urls[:first]


class ProxyServer:
    """The proxy over prefill URLs and decode URLs (``http://host:port``)."""

    def __init__(self, prefill_urls, decode_urls, timeout=6 * 3600):
        self.prefill = _Role("prefill", prefill_urls)
        self.decode = _Role("decode", decode_urls)
        self.timeout = timeout
        self._session = None
        self._runner = None
        self.port = None

    # -- upstream calls --------------------------------------------------------------

    async def _open(self, role, path, body, headers):
        """The response of the first instance of role that accepts the
        connection, or None when none does."""
        for url in role.order():
            try:
                resp = await self._session.post(url + path, json=body, headers=headers)
            except (aiohttp.ClientConnectionError, asyncio.TimeoutError, OSError) as e:
                logger.warning("%s instance %s unreachable: %s", role.name, url, e)
                continue
            return resp
        return None

    @staticmethod
    def _prefill_body(body):
        req = copy.deepcopy(body)
        req["max_tokens"] = 1
        if "max_completion_tokens" in req:
            req["max_completion_tokens"] = 1
        req["stream"] = False
        req.pop("stream_options", None)
        req["kv_transfer_params"] = {
            "do_remote_decode": True,
            "do_remote_prefill": False,
            "remote_engine_id": None,
            "remote_block_ids": None,
            "remote_host": None,
            "remote_port": None,
        }
        return req

    @staticmethod
    async def _relay_error(resp):
        data = await resp.read()
        return web.Response(status=resp.status, body=data,
                            content_type=resp.content_type or "application/json")

    async def _handle(self, request, path):
        try:
            body = await request.json()
        except web.HTTPRequestEntityTooLarge:
            raise
        except (ValueError, UnicodeDecodeError):
            return web.json_response({"error": "Invalid JSON body"}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"error": "The body must be a JSON object"}, status=400)
        headers = {h: request.headers[h] for h in _FORWARDED if h in request.headers}
        headers.setdefault("X-Request-Id", uuid.uuid4().hex)

        resp = await self._open(self.prefill, path, self._prefill_body(body), headers)
        if resp is None:
            return web.json_response({"error": "no prefill instance is available"}, status=503)
        async with resp:
            if resp.status != 200:
                return await self._relay_error(resp)
            try:
                pre = await resp.json(content_type=None)
            except (ValueError, aiohttp.ContentTypeError):
                return web.json_response({"error": "prefill instance sent invalid JSON"},
                                         status=502)
        dec_body = dict(body)
        params = pre.get("kv_transfer_params") if isinstance(pre, dict) else None
        if params is not None:
            dec_body["kv_transfer_params"] = params

        resp = await self._open(self.decode, path, dec_body, headers)
        if resp is None:
            return web.json_response({"error": "no decode instance is available"}, status=503)
        async with resp:
            if resp.status != 200:
                return await self._relay_error(resp)
            out = web.StreamResponse(status=200, headers={
                "Content-Type": resp.headers.get("Content-Type", "application/json")})
            await out.prepare(request)
            try:
                async for chunk in resp.content.iter_any():
                    await out.write(chunk)
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                logger.warning("decode stream broke off: %s", e)
            except ConnectionResetError:  # the client went away; nothing left to send
                logger.info("client left during the decode stream")
                return out
            await out.write_eof()
            return out

    async def handle_completions(self, request):
        return await self._handle(request, "/v1/completions")

    async def handle_chat_completions(self, request):
        return await self._handle(request, "/v1/chat/completions")

    async def handle_healthcheck(self, request):
        return web.json_response({"status": "ok",
                                  "prefill_instances": len(self.prefill.urls),
                                  "decode_instances": len(self.decode.urls)})

    # -- lifecycle -------------------------------------------------------------------

    def make_app(self):
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/v1/completions", self.handle_completions)
        app.router.add_post("/v1/chat/completions", self.handle_chat_completions)
        app.router.add_get("/healthcheck", self.handle_healthcheck)
        return app

    async def start(self, port=DEFAULT_PORT, host="0.0.0.0"):
        """Starts serving; returns the port bound (useful with port 0)."""
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.timeout),
            connector=aiohttp.TCPConnector(limit=0))
        self._runner = web.AppRunner(self.make_app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self.port

    async def stop(self):
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None


def _urls(hosts, ports, role):
    if len(ports) == 1:
        ports = ports * len(hosts)
    if len(ports) != len(hosts):
        raise ValueError(f"--{role}-ports: give one port, or one per host "
                         f"({len(hosts)} hosts, {len(ports)} ports)")
    out = []
    for h, p in zip(hosts, ports):
        h = f"[{h}]" if ":" in h and not h.startswith("[") else h
        out.append(f"http://{h}:{p}")
    return out


def _parse_args(argv):
    p = argparse.ArgumentParser(prog="vllm_v1_proxy_server",
                                description="vLLM v1 prefill/decode proxy")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"port to listen on (default {DEFAULT_PORT}; 0 picks one)")
    p.add_argument("--prefiller-hosts", "--prefiller-host", nargs="+", default=["localhost"])
    p.add_argument("--prefiller-ports", "--prefiller-port", nargs="+", type=int, default=[8100])
    p.add_argument("--decoder-hosts", "--decoder-host", nargs="+", default=["localhost"])
    p.add_argument("--decoder-ports", "--decoder-port", nargs="+", type=int, default=[8200])
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


async def main(argv=None):
    """Runs the proxy until SIGINT/SIGTERM; returns the exit status."""
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        prefill = _urls(args.prefiller_hosts, args.prefiller_ports, "prefiller")
        decode = _urls(args.decoder_hosts, args.decoder_ports, "decoder")
    except ValueError as e:
        print(f"vllm_v1_proxy_server: {e}", file=sys.stderr)
        return 2
    proxy = ProxyServer(prefill, decode)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        port = await proxy.start(args.port, args.host)
    except OSError as e:
        print(f"vllm_v1_proxy_server: cannot listen on {args.host}:{args.port}: {e}",
              file=sys.stderr)
        await proxy.stop()
        return 1
    print(f"vllm_v1_proxy_server listening on {args.host}:{port}", flush=True)
    await stop.wait()
    await proxy.stop()
    return 0


def sync_main(argv=None):
    return asyncio.run(main(argv))


if __name__ == "__main__":
    sys.exit(sync_main())
