"""mooncake_conductor (tools/mooncake_conductor.c) over a real store.

One mooncake_master and two store_node clients (A and B, each with its own
segment) serve the whole module; each test starts its own conductor,
pointed at the master, with the flags it needs.  Block keys are put into a
chosen segment by a store client (put ... seg=NAME), instances are
registered with those segment names, and /schedule is checked to follow
the store: the instance holding the longest prefix wins when it is idle,
a busy one's prefix is fetched by another (the fetch list names the
holder), a key removed from the store stops counting at once, an SLO no
prediction can meet is answered 429, bad requests get a 4xx naming the
cause, and an instance that stops reporting is out of scheduling after
--instance_timeout and back with its next report.  Waits poll an
observable condition (a line, GET /instances) against a deadline.
"""

import json
import re
import threading
import signal
import subprocess
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest

from conftest import BUILD, START_TIMEOUT, Proc, ProcError, _find_binary
from test_store_processes import StoreCluster, wait_until

BLOCK = 512


def conductor_path():
    return _find_binary("MC_CONDUCTOR", "mooncake_conductor", ["tools/mooncake_conductor"])


class Conductor(Proc):
    def wait_listening(self):
        pat = re.compile(r"mooncake_conductor listening port=(\d+)")

        def found():
            if not self.alive():
                raise ProcError(f"conductor exited (rc={self.p.poll()}); {self.stderr_tail()}")
            return pat.search(self.log_path.read_bytes().decode(errors="replace"))

        self.port = int(wait_until(found, START_TIMEOUT, "the conductor's 'listening' line")
                        .group(1))

    def call(self, method, path, body=None, raw=None):
        """(status, decoded JSON) of one request."""
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data,
                                     method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def ok(self, method, path, body=None):
        st, j = self.call(method, path, body)
        assert 200 <= st < 300, (method, path, st, j)
        return j

    def register(self, iid, role, segment=None, **extra):
        body = {"id": iid, "role": role, **extra}
        if segment is not None:
            body["segment"] = segment
        return self.ok("POST", "/instances", body)

    def instances(self):
        return {i["id"]: i for i in self.ok("GET", "/instances")["instances"]}

    def halt(self):
        if self.alive():
            self.p.send_signal(signal.SIGTERM)
        return self.stop(grace=10.0)


@pytest.fixture(scope="module")
def store(request, tmp_path_factory):
    if conductor_path() is None:
        pytest.skip(f"mooncake_conductor not built under {BUILD}")
    # StoreCluster names its log folder after request.node: a module's is a path
    c = StoreCluster(SimpleNamespace(node=SimpleNamespace(name="conductor")), tmp_path_factory)
    c.start_master()
    c.a = c.node(segment="16m", buffer="1m", zbuf="1m")
    c.b = c.node(segment="16m", buffer="1m", zbuf="1m")
    yield c
    c.teardown()


@pytest.fixture
def conductor(store, tmp_path):
    started = []

    def start(*flags):
        argv = [conductor_path(), "--port=0", "--host=127.0.0.1", "--http_threads=2",
                f"--master_server_address=127.0.0.1:{store.master.rpc}", *flags]
        c = Conductor(argv, f"conductor{len(started)}", tmp_path)
        started.append(c)
        c.wait_listening()
        return c

    yield start
    complaints = [m for m in (c.halt() for c in started) if m]
    assert not complaints, complaints


def put_blocks(node, keys, *others):
    """Put keys from node with a replica on node's segment and on each of others'."""
    segs = " ".join(f"seg={n.hostname}" for n in (node, *others))
    for k in keys:
        node.ok(f"put {k} 4096 7 {segs} rep={1 + len(others)}")


def remove_blocks(node, keys):
    for k in keys:
        node.cmd(f"remove {k} force")


def sched(c, keys, n_blocks=None, **extra):
    body = {"keys": keys, "input_length": (n_blocks or len(keys)) * BLOCK, **extra}
    return c.call("POST", "/schedule", body)


def test_longest_prefix_then_fetch_from_it(store, conductor):
    keys = [f"t1_blk{i}" for i in range(5)]
    put_blocks(store.a, keys[:1], store.b)  # block 0 on both segments
    put_blocks(store.a, keys[1:4])
    try:
        c = conductor()
        c.register("pa", "prefill", store.a.hostname, bandwidth_Bps=10e9)
        c.register("pb", "prefill", store.b.hostname)
        c.register("d0", "decode")

        st, r = sched(c, keys)
        assert st == 200, r
        assert r["matches"] == {"pa": 4, "pb": 1}
        assert r["prefill"] == {"id": "pa", "segment": store.a.hostname}
        assert r["decode"]["id"] == "d0"
        assert (r["prefix_blocks"], r["local_blocks"], r["fetch_blocks"]) == (4, 4, 0)
        assert r["fetch_from"] is None
        assert r["ranges"] == [{"first": 0, "count": 4, "instance": "pa",
                                "segment": store.a.hostname, "fetch": False}]
        assert r["ttft_s"] == pytest.approx(r["predicted"]["queue_s"] + r["predicted"]["prefill_s"])
        assert r["tbt_s"] > 0

        # pa is busy: pb takes the request and fetches [1, 4) from pa's segment
        c.ok("POST", "/instances/pa/load", {"queue_s": 20})
        st, r = sched(c, keys)
        assert st == 200, r
        assert r["prefill"]["id"] == "pb"
        assert (r["prefix_blocks"], r["local_blocks"], r["fetch_blocks"]) == (4, 1, 3)
        assert r["fetch_from"] == {"id": "pa", "segment": store.a.hostname}
        assert r["ranges"] == [
            {"first": 0, "count": 1, "instance": "pb", "segment": store.b.hostname,
             "fetch": False},
            {"first": 1, "count": 3, "instance": "pa", "segment": store.a.hostname,
             "fetch": True}]
        assert r["predicted"]["transfer_s"] > 0
        inst = c.instances()
        assert inst["pb"]["scheduled"] == 1 and inst["pa"]["fetch_source_blocks"] == 3

        # the store is the truth: a block removed there stops counting now
        c.ok("POST", "/instances/pa/load", {"queue_s": 0})
        c.ok("POST", "/instances/pb/load", {"queue_s": 0})
        remove_blocks(store.a, keys[2:3])
        st, r = sched(c, keys)
        assert st == 200, r
        assert r["matches"] == {"pa": 2, "pb": 1}
        assert r["prefix_blocks"] == 2
    finally:
        remove_blocks(store.a, keys)


def test_tokens_hashed_into_store_keys(store, conductor):
    c = conductor("--key_prefix=t2_")
    c.register("pa", "prefill", store.a.hostname)
    c.register("pb", "prefill", store.b.hostname)
    tokens = list(range(1100))
    st, r = c.call("POST", "/schedule", {"tokens": tokens, "block_size": BLOCK})
    assert st == 200, r
    keys = r["keys"]
    assert len(keys) == 3 and all(re.fullmatch(r"t2_[0-9a-f]{16}", k) for k in keys)
    assert len(set(keys)) == 3 and r["prefix_blocks"] == 0 and r["ranges"] == []
    put_blocks(store.b, keys[:2])
    try:
        st, r = c.call("POST", "/schedule", {"tokens": tokens, "block_size": BLOCK})
        assert st == 200, r
        assert r["keys"] == keys  # the same tokens hash to the same keys
        assert r["matches"] == {"pa": 0, "pb": 2}
        assert r["prefill"]["id"] == "pb" and r["prefix_tokens"] == 1024
        assert r["ranges"] == [{"first": 0, "count": 2, "instance": "pb",
                                "segment": store.b.hostname, "fetch": False}]
        # an integer request_id is echoed as one
        st, r = c.call("POST", "/schedule", {"tokens": tokens, "request_id": -7})
        assert st == 200 and r["request_id"] == -7, r
        # a prompt that differs in block 1 shares only block 0
        other = tokens[:600] + [7] + tokens[601:]
        st, r = c.call("POST", "/schedule", {"tokens": other, "block_size": BLOCK})
        assert st == 200, r
        assert r["keys"][0] == keys[0] and r["keys"][1] != keys[1]
        assert r["matches"]["pb"] == 1
    finally:
        remove_blocks(store.b, keys)


def test_slo_breaks_answer_429(store, conductor):
    c = conductor("--ttft_slo_s=0.01")
    c.register("pa", "prefill", store.a.hostname)
    c.register("d0", "decode")
    st, r = sched(c, ["t3_x"], n_blocks=64)  # 32k tokens: seconds of prefill
    assert st == 429, r
    assert r["rejected"] == "ttft" and "TTFT" in r["error"] and "SLO" in r["error"]
    assert r["ttft_s"] > 0.01 and r["prefill"]["id"] == "pa"
    assert r["ttft_slo_s"] == 0.01 and r["ranges"] == [] and r["matches"] == {"pa": 0}
    assert c.instances()["pa"]["scheduled"] == 0  # nothing booked
    c.halt()

    c = conductor("--tbt_slo_s=0.001")
    c.register("pa", "prefill", store.a.hostname)
    c.register("d0", "decode")
    st, r = sched(c, ["t3_x"])
    assert st == 429 and r["rejected"] == "tbt" and "TBT" in r["error"], r

    # decode overloaded by its report: 0.1 s SLO, ~4.5M context tokens
    c = conductor()
    c.register("pa", "prefill", store.a.hostname)
    c.register("d0", "decode")
    assert sched(c, ["t3_x"])[0] == 200
    c.ok("POST", "/instances/d0/load", {"ctx_tokens": 5e6, "running_requests": 40})
    st, r = sched(c, ["t3_x"])
    assert st == 429 and r["rejected"] == "tbt", r

    # rejection off: the same request is admitted
    c = conductor("--ttft_slo_s=0.01", "--reject=false")
    c.register("pa", "prefill", store.a.hostname)
    assert sched(c, ["t3_x"], n_blocks=64)[0] == 200


KV_PER_TOKEN = 327680  # Table 1: 80 layers x 2 x 1024 x 2 bytes
DEFAULT_RATE = 87e9  # min(128 GB/s, 800 Gbps x 0.87)


def test_registered_bandwidth_threshold_and_reported_queue(store, conductor):
    """What instances register and report reaches Algorithm 1 in the daemon:
    a fetch runs at the slower end's registered bandwidth_Bps, the daemon's
    --kvcache_balancing_threshold gates it, and a queue reported in tokens
    is priced with the cost model's prefill_lin_s."""
    keys = [f"t11_blk{i}" for i in range(5)]
    put_blocks(store.a, keys[:1], store.b)  # block 0 on both, 1-3 on a only
    put_blocks(store.a, keys[1:4])
    try:
        c = conductor()
        c.register("pa", "prefill", store.a.hostname, bandwidth_Bps=10e9)
        c.register("pb", "prefill", store.b.hostname)  # 0: the cost model's rate
        c.ok("POST", "/instances/pa/load", {"queue_s": 20})
        st, r = sched(c, keys)
        assert st == 200 and r["prefill"]["id"] == "pb" and r["fetch_blocks"] == 3, r
        assert r["predicted"]["transfer_s"] == pytest.approx(3 * BLOCK * KV_PER_TOKEN / 10e9)
        # re-registered faster than the cost model's rate: the receiver's sets it
        c.register("pa", "prefill", store.a.hostname, bandwidth_Bps=400e9)
        c.ok("POST", "/instances/pa/load", {"queue_s": 20})
        st, r = sched(c, keys)
        assert st == 200 and r["fetch_blocks"] == 3, r
        assert r["predicted"]["transfer_s"] == pytest.approx(
            3 * BLOCK * KV_PER_TOKEN / DEFAULT_RATE)

        # best / own = 4 / 1: fetched at the default threshold (1), not above 4
        c = conductor("--kvcache_balancing_threshold=4")
        c.register("pa", "prefill", store.a.hostname)
        c.register("pb", "prefill", store.b.hostname)
        c.ok("POST", "/instances/pa/load", {"queue_s": 20})
        st, r = sched(c, keys)
        assert st == 200 and r["prefill"]["id"] == "pb", r
        assert r["fetch_from"] is None and r["fetch_blocks"] == 0, r
        assert (r["prefix_blocks"], r["local_blocks"]) == (1, 1)
        assert r["predicted"]["transfer_s"] == 0

        # a queue reported in tokens: 10,000 x 1.082e-4 s
        c.ok("POST", "/instances/pb/load", {"queue_tokens": 10000})
        assert c.instances()["pb"]["queue_s"] == pytest.approx(1.082, abs=0.05)
    finally:
        remove_blocks(store.a, keys)


def test_decode_by_predicted_tbt(store, conductor):
    """Decode selection in the daemon: the least predicted TBT once the request
    joins, from the reported context and the requests booked on each decode
    instance; a silent one is passed over."""
    tbt = lambda ctx: 8.75e-3 + 20.48e-9 * ctx  # noqa: E731 - the cost model's decode step
    c = conductor("--instance_timeout=3s")
    c.register("pa", "prefill", store.a.hostname)
    c.register("d0", "decode")
    c.register("d1", "decode")
    c.ok("POST", "/instances/d0/load", {"ctx_tokens": 2e6, "running_requests": 30})
    st, r = sched(c, ["t12_x"], n_blocks=4)
    assert st == 200 and r["decode"]["id"] == "d1", r
    assert r["tbt_s"] == pytest.approx(tbt(4 * BLOCK), rel=1e-6)
    # the request is booked on d1 (it joins when its prefill ends): d1 now
    # predicts 2048 tokens more, still far under d0's 2M
    st, r = sched(c, ["t12_x"], n_blocks=4)
    assert st == 200 and r["decode"]["id"] == "d1", r
    assert r["tbt_s"] == pytest.approx(tbt(2 * 4 * BLOCK), rel=1e-6)
    assert c.instances()["d1"]["booked_jobs"] == 2
    # d1 reports a larger context than d0's: d0 is chosen, its TBT from its report
    c.ok("POST", "/instances/d1/load", {"ctx_tokens": 3e6})
    st, r = sched(c, ["t12_x"], n_blocks=4)
    assert st == 200 and r["decode"]["id"] == "d0", r
    assert r["tbt_s"] == pytest.approx(tbt(2e6 + 4 * BLOCK), rel=1e-6)

    # d0 falls silent: d1 takes the requests although its predicted TBT is higher
    def d0_down():
        for iid in ("pa", "d1"):
            c.ok("POST", f"/instances/{iid}/load", {})  # a heartbeat
        inst = c.instances()
        return not inst["d0"]["up"] and inst["d1"]["up"]

    wait_until(d0_down, 15, "d0 to time out")
    st, r = sched(c, ["t12_x"], n_blocks=4)
    assert st == 200 and r["decode"]["id"] == "d1", r


def test_virtual_clock_books_in_the_callers_time(store, conductor):
    """--virtual_clock: queues are booked and aged in the calls' now_s, so the
    same calls predict the same queue however much wall time passes between them."""
    c = conductor("--virtual_clock=true", "--reject=false")
    c.register("pa", "prefill", store.a.hostname)
    c.ok("POST", "/instances/pa/load", {"queue_s": 5, "now_s": 100})
    for _ in range(2):  # the second call, later in wall time, sees the same queue
        st, r = sched(c, ["t9_v"], now_s=103)
        assert st == 200, r
        assert r["predicted"]["queue_s"] == 2.0
        c.ok("POST", "/instances/pa/load", {"queue_s": 5, "now_s": 100})
    # listed at the latest now_s given (103): free at 105
    assert c.instances()["pa"]["queue_s"] == pytest.approx(2.0)
    c.ok("POST", "/instances/pa/load", {"queue_s": 0, "now_s": 200})
    st, r = sched(c, ["t9_v"], now_s=200)
    assert st == 200 and r["predicted"]["queue_s"] == 0, r
    # ... and the admitted request is booked at virtual 200 + its TTFT
    assert c.instances()["pa"]["queue_s"] == pytest.approx(r["ttft_s"])

    for path, body in (("/schedule", {"keys": ["t9_v"], "input_length": BLOCK}),
                       ("/instances/pa/load", {"queue_s": 1})):
        st, r = c.call("POST", path, body)
        assert st == 400 and "now_s" in r["error"] and "required" in r["error"], r

    plain = conductor()
    plain.register("pa", "prefill", store.a.hostname)
    st, r = sched(plain, ["t9_v"], now_s=1)
    assert st == 400 and "--virtual_clock" in r["error"], r
    st, r = plain.call("POST", "/instances/pa/load", {"queue_s": 1, "now_s": 1})
    assert st == 400 and "--virtual_clock" in r["error"], r


def test_bad_requests_get_4xx(store, conductor):
    c = conductor()
    st, r = sched(c, ["k"])
    assert st == 503 and "no prefill instance" in r["error"]
    c.register("pa", "prefill", store.a.hostname)

    cases = [
        ("POST", "/schedule", b"{not json", 400, "bad JSON"),
        ("POST", "/schedule", b"[1, 2]", 400, "not an object"),
        ("POST", "/schedule", b"", 400, "empty body"),
        ("POST", "/schedule", {"keys": [], "input_length": 10}, 400, "empty key list"),
        ("POST", "/schedule", {"tokens": []}, 400, "empty token list"),
        ("POST", "/schedule", {"keys": ["a"]}, 400, "input_length"),
        ("POST", "/schedule", {"keys": ["a"], "tokens": [1], "input_length": 5}, 400, "either"),
        ("POST", "/schedule", {"keys": ["a", "b"], "input_length": 512}, 400, "more than"),
        ("POST", "/schedule", {"keys": [1.5], "input_length": 5}, 400, "keys[0]"),
        ("POST", "/schedule", {"keys": ["a"], "input_length": 5, "bogus": 1}, 400, "bogus"),
        ("POST", "/schedule", {"tokens": [-1]}, 400, "tokens[0]"),
        ("POST", "/schedule", {"keys": ["a"], "input_length": 5, "request_id": [1]}, 400,
         "request_id"),
        ("POST", "/schedule", {"keys": ["a"], "input_length": 5, "request_id": "x" * 257},
         400, "request_id"),
        ("POST", "/instances/nobody/load", {"queue_s": 1}, 404, "unknown instance \"nobody\""),
        ("DELETE", "/instances/nobody", None, 404, "unknown instance \"nobody\""),
        ("POST", "/instances/pa/load", {"queue_s": -1}, 400, ">= 0"),
        ("POST", "/instances/pa/load", {"queue": 1}, 400, "unknown field \"queue\""),
        ("POST", "/instances", {"id": "x", "role": "mixer", "segment": "s"}, 400, "role"),
        ("POST", "/instances", {"id": "a/b", "role": "prefill", "segment": "s"}, 400, "\"id\""),
        ("POST", "/instances", {"id": "x", "role": "prefill"}, 400, "segment"),
        ("POST", "/instances", {"id": "x", "role": "prefill", "segment": store.a.hostname},
         409, "pa"),
        ("GET", "/nowhere", None, 404, "no such path"),
        ("GET", "/schedule", None, 405, "does not take GET"),
    ]
    for method, path, body, want, text in cases:
        raw = body if isinstance(body, bytes) else None
        st, r = c.call(method, path, None if raw is not None else body, raw=raw)
        assert st == want and text in r["error"], (method, path, body, st, r)
    # still serving, and nothing registered by the bad calls
    assert set(c.instances()) == {"pa"}
    c.ok("DELETE", "/instances/pa")
    assert c.instances() == {}


def test_silent_instance_leaves_scheduling(store, conductor):
    keys = ["t5_b0", "t5_b1"]
    put_blocks(store.a, keys)
    try:
        c = conductor("--instance_timeout=1s")
        c.register("pa", "prefill", store.a.hostname)
        c.register("pb", "prefill", store.b.hostname)
        assert sched(c, keys)[1]["prefill"]["id"] == "pa"

        def pa_down():
            c.ok("POST", "/instances/pb/load", {"queue_s": 0})  # pb keeps reporting
            inst = c.instances()
            return not inst["pa"]["up"] and inst["pb"]["up"]

        wait_until(pa_down, 10, "pa to time out")
        st, r = sched(c, keys)
        assert st == 200 and r["prefill"]["id"] == "pb", r
        assert r["fetch_from"] is None and r["prefix_blocks"] == 0  # a silent holder is not fetched from
        # its next report brings it back
        c.ok("POST", "/instances/pa/load", {"queue_s": 0})
        assert sched(c, keys)[1]["prefill"]["id"] == "pa"
    finally:
        remove_blocks(store.a, keys)


def test_unmounted_segment_stops_counting(store, conductor):
    """The store drops a closed client's segment; its blocks stop counting at once."""
    node = store.node(segment="16m", buffer="1m", zbuf="1m")
    keys = ["t6_b0", "t6_b1"]
    put_blocks(node, keys)
    c = conductor()
    c.register("pc", "prefill", node.hostname)
    c.register("pa", "prefill", store.a.hostname)
    st, r = sched(c, keys)
    assert st == 200 and r["matches"] == {"pc": 2, "pa": 0}, r
    node.ok("close")  # unmounts the segment
    st, r = sched(c, keys)
    assert st == 200 and r["matches"] == {"pc": 0, "pa": 0}, r


def test_restarted_conductor_sees_the_store_again(store, conductor):
    """The conductor keeps no copy of where blocks live, only its instances:
    a new one knows no instance until they register again (503, 404), and
    then matches what the store holds now, changes made while it was down
    included: its view is rebuilt from the store, not from its own past."""
    keys = [f"t10_b{i}" for i in range(4)]
    put_blocks(store.a, keys)
    try:
        c = conductor()
        c.register("pa", "prefill", store.a.hostname)
        c.register("pb", "prefill", store.b.hostname)
        st, r = sched(c, keys)
        assert st == 200 and r["matches"] == {"pa": 4, "pb": 0}, r
        assert not c.halt()
        remove_blocks(store.a, keys[3:])  # the store moves on meanwhile
        put_blocks(store.b, ["t10_x"])

        c = conductor()
        assert c.instances() == {}
        st, r = sched(c, keys)
        assert st == 503 and "no prefill instance" in r["error"], r
        st, r = c.call("POST", "/instances/pa/load", {"queue_s": 0})
        assert st == 404, r
        c.register("pa", "prefill", store.a.hostname)
        c.register("pb", "prefill", store.b.hostname)
        st, r = sched(c, keys)
        assert st == 200 and r["matches"] == {"pa": 3, "pb": 0}, r
        assert r["prefill"]["id"] == "pa" and r["prefix_blocks"] == 3
        st, r = sched(c, ["t10_x"])
        assert st == 200 and r["matches"] == {"pa": 0, "pb": 1}, r
    finally:
        remove_blocks(store.a, keys)
        remove_blocks(store.b, ["t10_x"])


def test_master_gone_is_502(store, conductor, tmp_path_factory):
    other = StoreCluster(SimpleNamespace(node=SimpleNamespace(name="gone")), tmp_path_factory)
    try:
        other.start_master()
        c = conductor(f"--master_server_address=127.0.0.1:{other.master.rpc}")  # the last wins
        c.register("pa", "prefill", store.a.hostname)
        assert sched(c, ["t7_b0"])[0] == 200
        other.master.p.send_signal(signal.SIGTERM)
        other.master.p.wait(timeout=10)
        st, r = sched(c, ["t7_b0"])
        assert st == 502 and "store master" in r["error"], r
        assert c.ok("GET", "/health") == {"status": "ok"}  # still serving
    finally:
        other.teardown()


def test_concurrent_calls_book_every_request(store, conductor):
    """Schedules, load reports and listings from several threads at once: every
    admitted request is booked exactly once (the table's lock), none is lost."""
    keys = ["t8_b0", "t8_b1"]
    put_blocks(store.a, keys)
    try:
        c = conductor("--http_threads=4", "--reject=false")
        c.register("pa", "prefill", store.a.hostname)
        c.register("pb", "prefill", store.b.hostname)
        c.register("d0", "decode")
        per, errors = 15, []

        def worker(i):
            try:
                for j in range(per):
                    st, r = sched(c, keys, request_id=f"{i}.{j}")
                    if st != 200 or r["request_id"] != f"{i}.{j}":
                        errors.append((st, r))
                    c.ok("POST", f"/instances/{'pa' if j % 2 else 'd0'}/load",
                         {"queue_s": 0} if j % 2 else {"ctx_tokens": 1000})
                    c.instances()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors[:3]
        inst = c.instances()
        assert inst["pa"]["scheduled"] + inst["pb"]["scheduled"] == 6 * per
        assert inst["d0"]["scheduled"] == 6 * per
    finally:
        remove_blocks(store.a, keys)


def test_flags_help_and_prefill_model(store, conductor, tmp_path):
    exe = str(conductor_path())
    p = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0
    for flag in ("--port=8090", "--master_server_address=", "--instance_timeout=10",
                 "--reject=true", "--kvcache_balancing_threshold=1.0", "--ttft_slo_s=30",
                 "--tbt_slo_s=0.1", "--prefill_lin_s=1.082e-4", "--prefill_model="):
        assert flag in p.stdout, flag
    assert "--reject=false" not in p.stdout  # the scheduler's row is shadowed
    for args in (["--bogus"], ["--port=70000"], ["--ttft_slo_s=-1"], ["stray"]):
        p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and "mooncake_conductor:" in p.stderr, (args, p.stderr)
    bad = tmp_path / "bad.json"
    bad.write_text('{"prefill_lin_s": "fast"}')
    p = subprocess.run([exe, f"--prefill_model={bad}"], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 1 and "prefill_lin_s" in p.stderr, p.stderr

    # a fitted regression from a file: 0.1 s per token, so 512 tokens take 51.2 s
    fit = tmp_path / "fit.json"
    fit.write_text('{"prefill_lin_s": 0.1, "prefill_quad_s": 0}')
    c = conductor(f"--prefill_model={fit}")
    c.register("pa", "prefill", store.a.hostname)
    st, r = sched(c, ["t9_b0"])
    assert st == 429 and r["predicted"]["prefill_s"] == pytest.approx(51.2), r
    # and a flag after it wins over the file
    c = conductor(f"--prefill_model={fit}", "--prefill_lin_s=1e-4")
    c.register("pa", "prefill", store.a.hostname)
    st, r = sched(c, ["t9_b0"])
    assert st == 200 and r["predicted"]["prefill_s"] == pytest.approx(0.0512, rel=1e-3), r
