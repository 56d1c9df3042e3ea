"""HTTP metadata server for the Transfer Engine (``python -m mooncake.http_metadata_server``).

A drop-in for upstream's ``mooncake.http_metadata_server`` (console script
``mooncake_http_metadata_server``): an in-memory map of opaque byte strings
that engines started with ``http://host:port/metadata`` publish their
segment descriptors to.  The protocol is the one of our C server
(tools/mooncake_http_metadata_server.c, src/meta/http_server.c) and of the
server embedded in ``mooncake_master`` (spec store.md 7.5,
transfer-engine.md 3.5)::

    GET    /metadata?key=K  200 + stored bytes (application/json)
                            404 "metadata not found"
    PUT    /metadata?key=K  200 "metadata updated"; for a key containing
                            "rpc_meta" that already exists: 200 "metadata
                            unchanged" for identical bytes, else 400
                            "Duplicate rpc_meta key not allowed"
    DELETE /metadata?key=K  200 "metadata deleted", 404 "metadata not found"
    (a missing or empty key: 400 "Missing key parameter")
    GET    /health          200 "OK"

Other paths answer 404, other methods 405, bodies above 64 MiB 413.

With a cluster secret (``--auth_secret_file FILE``, else the file
``MC_AUTH_SECRET_FILE`` names, else ``MC_AUTH_SECRET``; docs/security.md)
PUT and DELETE without ``Authorization: Bearer <secret>`` answer 401
"authentication required" before the body is read, as the C server does;
GET stays open.  A secret file its group or others may read, an empty or
unreadable one, stops the server (exit 1).  Without a secret it warns once
when it listens beyond loopback.

This implementation uses only the standard library (``http.server`` with a
thread per connection and HTTP/1.1 keep-alive, which the engines' libcurl
clients reuse), so it needs neither aiohttp nor the C binary.  When ready it
prints one line, ``mooncake_http_metadata_server listening on HOST:PORT``,
as the C server does, so scripts can wait for it and learn the port chosen
for ``--port 0``.  SIGINT and SIGTERM stop it with exit status 0.

Library use::

    server = MetadataServer("127.0.0.1", 0)
    server.start()          # serves from a background thread
    url = server.url        # "http://127.0.0.1:<port>/metadata"
    server.close()
"""

import argparse
import hmac
import ipaddress
import logging
import signal
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from mooncake._auth import load_secret

__all__ = ["MetadataServer", "KVBootstrapServer", "main"]

MAX_BODY = 64 << 20


log = logging.getLogger("mooncake.http_metadata_server")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the engines reuse connections
    server_version = "mooncake-metadata"
    sys_version = ""

    # -- plumbing --------------------------------------------------------------------

    def log_message(self, fmt, *args):  # route through logging, quiet by default
        log.debug("%s - %s", self.address_string(), fmt % args)

    def _reply(self, status, body, content_type="text/plain"):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _read_body(self):
        """The request body, or None after answering 413/400."""
        length = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return self._read_chunked()
        try:
            n = int(length) if length is not None else 0
        except ValueError:
            self._reply(HTTPStatus.BAD_REQUEST, "bad Content-Length")
            self.close_connection = True
            return None
        if n < 0 or n > MAX_BODY:
            self._reply(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "request body too large")
            self.close_connection = True
            return None
        return self.rfile.read(n) if n else b""

    def _read_chunked(self):
        parts, total = [], 0
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                self._reply(HTTPStatus.BAD_REQUEST, "bad chunk")
                self.close_connection = True
                return None
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            total += size
            if total > MAX_BODY:
                self._reply(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "request body too large")
                self.close_connection = True
                return None
            parts.append(self.rfile.read(size))
            self.rfile.readline(8)  # CRLF after the chunk

    def _route(self):
        """(path, key) with key None when absent or empty."""
        url = urlsplit(self.path)
        values = parse_qs(url.query, keep_blank_values=True).get("key")
        key = values[0] if values else None
        return url.path, key or None

    def _authorized(self, method):
        """A state change carries the bearer token when a secret is set; else
        401 (the body is not read: the connection closes)."""
        secret = self.server.secret
        if secret is None or method not in ("PUT", "DELETE"):
            return True
        got = self.headers.get("Authorization", "")
        if got.startswith("Bearer ") and hmac.compare_digest(got[7:].encode(), secret):
            return True
        log.warning("refused %s %s: %s bearer token", method, self.path,
                    "wrong" if got else "no")
        self.close_connection = True
        self.send_response(HTTPStatus.UNAUTHORIZED)
        self.send_header("WWW-Authenticate", 'Bearer realm="mooncake"')
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "23")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b"authentication required")
        return False

    # -- methods ----------------------------------------------------------------------

    def _dispatch(self, method):
        path, key = self._route()
        store = self.server.store
        if not self._authorized(method):
            return None
        if path == "/health":
            if method != "GET":
                return self._reply(HTTPStatus.METHOD_NOT_ALLOWED, "method not allowed")
            return self._reply(HTTPStatus.OK, "OK")
        if path != "/metadata":
            return self._reply(HTTPStatus.NOT_FOUND, "not found")
        if method not in ("GET", "PUT", "DELETE"):
            return self._reply(HTTPStatus.METHOD_NOT_ALLOWED, "method not allowed")
        if method == "PUT":
            body = self._read_body()  # read it even when the key is missing
            if body is None:
                return None
        if key is None:
            return self._reply(HTTPStatus.BAD_REQUEST, "Missing key parameter")
        with self.server.lock:
            if method == "GET":
                value = store.get(key)
                if value is None:
                    return self._reply(HTTPStatus.NOT_FOUND, "metadata not found")
                return self._reply(HTTPStatus.OK, value, "application/json")
            if method == "DELETE":
                if store.pop(key, None) is None:
                    return self._reply(HTTPStatus.NOT_FOUND, "metadata not found")
                return self._reply(HTTPStatus.OK, "metadata deleted")
            old = store.get(key)
            if old is not None and "rpc_meta" in key:
                # a restarted engine re-publishing the same bytes is fine; a
                # second engine claiming the name is not
                if old == body:
                    return self._reply(HTTPStatus.OK, "metadata unchanged")
                return self._reply(HTTPStatus.BAD_REQUEST, "Duplicate rpc_meta key not allowed")
            store[key] = body
            return self._reply(HTTPStatus.OK, "metadata updated")

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self._dispatch("GET")

    def do_PUT(self):  # noqa: N802
        self._dispatch("PUT")

    def do_DELETE(self):  # noqa: N802
        self._dispatch("DELETE")

    def do_POST(self):  # noqa: N802
        self._read_body()
        self._dispatch("POST")

    def do_HEAD(self):  # noqa: N802
        self._dispatch("HEAD")

    def do_PATCH(self):  # noqa: N802
        self._read_body()
        self._dispatch("PATCH")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


class MetadataServer:
    """The metadata server, served from a background thread.

    ``host``/``port`` are where to listen (port 0 picks a free one; the
    chosen one is ``self.port`` after ``start()``).  ``store`` is the dict
    of key -> bytes, shared with the request threads under ``lock``.
    """

    def __init__(self, host="0.0.0.0", port=8080, secret=None):
        self.host = host
        self.port = port
        self.secret = secret  # bytes: PUT/DELETE need "Authorization: Bearer <secret>"
        self.store = {}
        self.lock = threading.Lock()
        self._httpd = None
        self._thread = None

    def start(self):
        family_host = self.host.strip("[]")
        server_cls = _Server
        if ":" in family_host:
            import socket

            class _Server6(_Server):
                address_family = socket.AF_INET6

            server_cls = _Server6
        self._httpd = server_cls((family_host, self.port), _Handler)
        self._httpd.store = self.store
        self._httpd.lock = self.lock
        self._httpd.secret = self.secret
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        name="metadata-server", daemon=True)
        self._thread.start()
        return self

    # upstream's KVBootstrapServer spelling
    def run(self):
        self.start()
        return self._thread

    @property
    def url(self):
        host = self.host
        if host in ("0.0.0.0", ""):
            host = "127.0.0.1"
        elif ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.port}/metadata"

    def is_alive(self):
        return self._thread is not None and self._thread.is_alive()

    def close(self):
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()


class KVBootstrapServer(MetadataServer):
    """Upstream's class name: ``KVBootstrapServer(port, host="0.0.0.0")``."""

    def __init__(self, port, host="0.0.0.0"):
        super().__init__(host, port)


def _loopback(host):
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="mooncake_http_metadata_server",
        description="HTTP metadata server for the Mooncake Transfer Engine: serves "
                    "GET/PUT/DELETE /metadata?key=K and GET /health from memory until "
                    "SIGINT/SIGTERM.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--host", default="0.0.0.0", help="address to listen on")
    ap.add_argument("--port", type=int, default=8080, help="TCP port (0 picks a free port)")
    ap.add_argument("--auth_secret_file", "--auth-secret-file", default=None,
                    help="file holding the cluster secret: PUT and DELETE then need "
                         "'Authorization: Bearer <secret>' (default: MC_AUTH_SECRET_FILE, "
                         "else MC_AUTH_SECRET)")
    ap.add_argument("--log-level", default="INFO",
                    choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                    type=str.upper, help="logging level")
    args = ap.parse_args(argv)
    if not 0 <= args.port <= 65535:
        ap.error(f"invalid port {args.port} (expected 0-65535)")
    return args


def main(argv=None):
    """Entry point of ``mooncake_http_metadata_server`` and ``python -m``."""
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=getattr(logging, args.log_level),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        secret = load_secret(args.auth_secret_file)
    except ValueError as e:
        print(f"mooncake_http_metadata_server: {e}", file=sys.stderr)
        return 1
    if secret is None and not _loopback(args.host):
        log.warning("no cluster secret: anyone who reaches %s:%d can replace any engine's "
                    "descriptor (set MC_AUTH_SECRET_FILE; docs/security.md)",
                    args.host, args.port)
    server = MetadataServer(args.host, args.port, secret)
    try:
        server.start()
    except OSError as e:
        print(f"mooncake_http_metadata_server: cannot listen on {args.host}:{args.port}: {e}",
              file=sys.stderr)
        return 1
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print(f"mooncake_http_metadata_server listening on {args.host}:{server.port}", flush=True)
    log.info("HTTP metadata server started on %s:%d", args.host, server.port)
    while not stop.wait(3600):
        pass
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
