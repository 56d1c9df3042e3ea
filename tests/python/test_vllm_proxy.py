"""mooncake.vllm_v1_proxy_server: the PD proxy between fake vLLM instances.

The proxy runs as its own process (``python -m
mooncake.vllm_v1_proxy_server`` with upstream's --prefiller-*/--decoder-*
flags); the prefill and decode instances are tiny aiohttp servers in this
process (their own event loop thread) that record every request they get.
Checked: the prefill request carries max_tokens=1, stream=False and
do_remote_decode; the decode request carries the prefill's
kv_transfer_params and the client's own fields; the decode response is
streamed back chunk by chunk; round robin over two instances of each role;
an unreachable instance is skipped; 503 when no instance of a role is up;
an instance's error status is passed back; /healthcheck.
"""

import asyncio
import http.client
import json
import signal
import subprocess
import sys
import threading

import pytest

from conftest import free_port

web = pytest.importorskip("aiohttp.web", reason="python3-aiohttp is not installed")


class Fakes:
    """aiohttp servers on one event loop in a background thread."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runners = []

    def run(self, coro, timeout=30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self, name, role, status=200):
        """One fake instance; returns (port, list of recorded requests)."""
        seen = []

        async def handler(request):
            body = await request.json()
            seen.append({"path": request.path, "body": body,
                         "headers": dict(request.headers)})
            if status != 200:
                return web.json_response({"error": f"{name} says no"}, status=status)
            if role == "prefill":
                return web.json_response({"id": name, "choices": [{"text": "x"}],
                                          "kv_transfer_params": {"remote_engine_id": name,
                                                                 "remote_block_ids": [1, 2]}})
            if body.get("stream"):
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await resp.prepare(request)
                for i in range(3):
                    await resp.write(f"data: {json.dumps({'from': name, 'i': i})}\n\n".encode())
                await resp.write(b"data: [DONE]\n\n")
                await resp.write_eof()
                return resp
            return web.json_response({"id": name, "choices": [{"text": "decoded"}]})

        async def go():
            app = web.Application()
            app.router.add_post("/v1/completions", handler)
            app.router.add_post("/v1/chat/completions", handler)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.runners.append(runner)
            return runner.addresses[0][1]

        return self.run(go()), seen

    def close(self):
        for r in self.runners:
            self.run(r.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


class Proxy:
    def __init__(self, prefill_ports, decode_ports):
        argv = [sys.executable, "-m", "mooncake.vllm_v1_proxy_server", "--host", "127.0.0.1",
                "--port", "0", "--log-level", "ERROR",
                "--prefiller-hosts", *["127.0.0.1"] * len(prefill_ports),
                "--prefiller-ports", *map(str, prefill_ports),
                "--decoder-hosts", *["127.0.0.1"] * len(decode_ports),
                "--decoder-ports", *map(str, decode_ports)]
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        line = self.p.stdout.readline()
        assert "listening on" in line, (line, self.p.stderr.read() if self.p.poll() else "")
        self.port = int(line.strip().rsplit(":", 1)[1])

    def post(self, path, body, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            c.request("POST", path, body=data,
                      headers={"Content-Type": "application/json", **(headers or {})})
            r = c.getresponse()
            return r.status, r.getheader("Content-Type"), r.read()
        finally:
            c.close()

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        rc = self.p.wait(timeout=20)
        err = self.p.stderr.read()
        assert rc == 0, (rc, err)
        assert "Traceback" not in err, err


@pytest.fixture(scope="module")
def fakes():
    f = Fakes()
    yield f
    f.close()


@pytest.fixture
def pd(fakes):
    """Two prefill and two decode fakes behind one proxy."""
    p1, s1 = fakes.start("p1", "prefill")
    p2, s2 = fakes.start("p2", "prefill")
    d1, t1 = fakes.start("d1", "decode")
    d2, t2 = fakes.start("d2", "decode")
    proxy = Proxy([p1, p2], [d1, d2])
    yield proxy, (s1, s2), (t1, t2)
    proxy.stop()


def test_prefill_then_decode(pd):
    proxy, (s1, s2), (t1, t2) = pd
    req = {"model": "m", "prompt": "hello", "max_tokens": 50, "temperature": 0.5}
    st, ctype, body = proxy.post("/v1/completions", req, {"Authorization": "Bearer sk-1",
                                                          "X-Request-Id": "rid-7"})
    assert st == 200, body
    assert json.loads(body)["choices"][0]["text"] == "decoded"
    [pre] = s1 + s2
    [dec] = t1 + t2
    assert pre["path"] == dec["path"] == "/v1/completions"
    assert pre["body"]["max_tokens"] == 1 and pre["body"]["stream"] is False
    assert pre["body"]["kv_transfer_params"]["do_remote_decode"] is True
    assert pre["body"]["prompt"] == "hello" and pre["body"]["temperature"] == 0.5
    assert dec["body"]["max_tokens"] == 50 and dec["body"]["prompt"] == "hello"
    # the decoder learns where the prefill kept the KV cache
    engine = "p1" if s1 else "p2"
    assert dec["body"]["kv_transfer_params"] == {"remote_engine_id": engine,
                                                 "remote_block_ids": [1, 2]}
    for r in (pre, dec):
        assert r["headers"]["Authorization"] == "Bearer sk-1"
        assert r["headers"]["X-Request-Id"] == "rid-7"


def test_chat_completions_stream_back(pd):
    proxy, (s1, s2), (t1, t2) = pd
    req = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True,
           "max_completion_tokens": 20, "stream_options": {"include_usage": True}}
    st, ctype, body = proxy.post("/v1/chat/completions", req)
    assert st == 200 and ctype.startswith("text/event-stream"), (st, ctype)
    events = [e for e in body.decode().split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    assert [json.loads(e[6:])["i"] for e in events[:-1]] == [0, 1, 2]
    [pre] = s1 + s2
    [dec] = t1 + t2
    assert pre["path"] == "/v1/chat/completions"
    assert pre["body"]["max_completion_tokens"] == 1 and pre["body"]["max_tokens"] == 1
    assert pre["body"]["stream"] is False and "stream_options" not in pre["body"]
    assert dec["body"]["stream"] is True and dec["body"]["max_completion_tokens"] == 20


def test_round_robin(pd):
    proxy, (s1, s2), (t1, t2) = pd
    for i in range(6):
        assert proxy.post("/v1/completions", {"prompt": str(i), "max_tokens": 3})[0] == 200
    assert len(s1) == len(s2) == 3 and len(t1) == len(t2) == 3
    # alternating, not three in a row
    assert {r["body"]["prompt"] for r in s1} in ({"0", "2", "4"}, {"1", "3", "5"})


def test_unreachable_instance_is_skipped(fakes):
    p1, s1 = fakes.start("p1", "prefill")
    d1, t1 = fakes.start("d1", "decode")
    proxy = Proxy([free_port(), p1], [d1, free_port()])
    try:
        for i in range(4):
            st, _, body = proxy.post("/v1/completions", {"prompt": "x", "max_tokens": 2})
            assert st == 200, body
        assert len(s1) == 4 and len(t1) == 4
    finally:
        proxy.stop()


def test_503_when_no_instance_of_a_role_is_up(fakes):
    p1, s1 = fakes.start("p1", "prefill")
    d1, t1 = fakes.start("d1", "decode")
    proxy = Proxy([free_port()], [d1])
    try:
        st, _, body = proxy.post("/v1/completions", {"prompt": "x"})
        assert st == 503 and "prefill" in json.loads(body)["error"]
        assert t1 == [], "decode was asked without a prefill"
    finally:
        proxy.stop()
    proxy = Proxy([p1], [free_port(), free_port()])
    try:
        st, _, body = proxy.post("/v1/chat/completions", {"messages": []})
        assert st == 503 and "decode" in json.loads(body)["error"]
        assert len(s1) == 1
        assert proxy.get("/healthcheck")[0] == 200  # still serving
    finally:
        proxy.stop()


def test_instance_error_is_passed_back(fakes):
    p1, _ = fakes.start("p1", "prefill", status=400)
    d1, t1 = fakes.start("d1", "decode")
    proxy = Proxy([p1], [d1])
    try:
        st, _, body = proxy.post("/v1/completions", {"prompt": "x"})
        assert st == 400 and json.loads(body) == {"error": "p1 says no"}
        assert t1 == []
        st, _, body = proxy.post("/v1/completions", b"{oops")
        assert st == 400
    finally:
        proxy.stop()


def test_healthcheck(pd):
    proxy, _, _ = pd
    st, body = proxy.get("/healthcheck")
    assert st == 200
    assert json.loads(body) == {"status": "ok", "prefill_instances": 2, "decode_instances": 2}
