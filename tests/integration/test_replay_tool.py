"""mooncake_replay (tools/mooncake_replay.c) run as a program.

Bad flags exit 2 with a message, a malformed trace line exits 1 naming its
line unless --skip-bad, --json writes the keys docs/conductor.md promises,
the progress bar shows only on a terminal, --output-length-one books one
token of output, and a slice of each shipped trace (or of its committed
head, trace_slices.py) replays under every policy.
"""
import json
import os
import subprocess

import pytest

from trace_slices import NAMES, SLICE_LINES, committed_head, full_trace, write_head

REPLAY = os.environ.get("MC_REPLAY")

pytestmark = pytest.mark.skipif(not REPLAY, reason="MC_REPLAY not set")

LINE = '{"timestamp": %d, "input_length": 1024, "output_length": 3, "hash_ids": [0, %d]}\n'


def run(*args):
    return subprocess.run([REPLAY, "--quiet", *args], capture_output=True, text=True,
                          timeout=120)


def test_bad_flags_exit_2(tmp_path):
    for args in (["--nodes", "0", "--trace", "x"], ["--bogus"], ["--policy", "best", "--trace", "x"],
                 ["--pool", "shared", "--trace", "x"], [], ["--trace"]):
        p = run(*args)
        assert p.returncode == 2, (args, p.stderr)
        assert "mooncake_replay:" in p.stderr


def test_malformed_line_is_fatal_or_skipped(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(LINE % (0, 1) + LINE % (1, 2) + '{"timestamp": 2, "input_length": "x"}\n'
                     + LINE % (3, 1))
    p = run("--trace", str(trace))
    assert p.returncode == 1
    assert "line 3:" in p.stderr and "input_length" in p.stderr
    out = tmp_path / "r.json"
    p = run("--trace", str(trace), "--skip-bad", "--nodes", "1", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert "skipped 1 malformed lines (first: line 3)" in p.stderr
    r = json.loads(out.read_text())
    assert r["requests"] == 3 and r["skipped_lines"] == 1
    # [0 1], [0 2], [0 1]: the second reuses block 0, the third both
    assert r["hit_tokens"] == 512 + 1024
    assert r["token_hit_rate"] == pytest.approx(1536 / 3072)


def test_progress_bar_only_on_a_terminal(tmp_path):
    """Issue 17: a progress bar with its rate and ETA when stderr is a
    terminal; none with --quiet, and none into a pipe or a file."""
    import pty

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(LINE % (i, i + 1) for i in range(5)))

    def on_a_tty(*flags):
        master, slave = pty.openpty()
        try:
            p = subprocess.run([REPLAY, "--trace", str(trace), "--nodes", "1", *flags],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave,
                               timeout=60)
        finally:
            os.close(slave)
        chunks = []
        try:
            while True:  # the child is gone: read what it left until EIO
                data = os.read(master, 4096)
                if not data:
                    break
                chunks.append(data)
        except OSError:
            pass
        finally:
            os.close(master)
        assert p.returncode == 0, p
        return b"".join(chunks).decode(errors="replace")

    bar = on_a_tty()
    assert "] 5/5" in bar and "req/s" in bar and "eta " in bar, bar
    assert "req/s" not in on_a_tty("--quiet")
    p = subprocess.run([REPLAY, "--trace", str(trace), "--nodes", "1"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and "req/s" not in p.stderr, p.stderr


def test_missing_trace_exits_1(tmp_path):
    p = run("--trace", str(tmp_path / "none.jsonl"))
    assert p.returncode == 1 and "none.jsonl" in p.stderr


@pytest.mark.parametrize("name", ["conversation_trace.jsonl", "synthetic_trace.jsonl"])
@pytest.mark.parametrize("policy", ["random", "load", "prefix", "local", "global"])
def test_trace_slice_replays(tmp_path, name, policy):
    # 2000 lines of the shipped trace, or the 600 committed (a fresh clone)
    trace, n = write_head(tmp_path, name, 2000)
    out = tmp_path / "r.json"
    p = run("--trace", str(trace), "--nodes", "4", "--capacity-tokens", "1e6", "--policy",
            policy, "--output-length-one", "--json", str(out))
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())
    for key in ("token_hit_rate", "prefill_s_per_request", "ttft_avg_s", "requests"):
        assert key in r
    assert r["requests"] == n >= SLICE_LINES
    assert 0 <= r["token_hit_rate"] < 1
    assert r["prefill_s_per_request"] > 0
    assert r["ttft_avg_s"] >= r["prefill_s_per_request"] - 1e-9
    assert (r["fetches"] > 0) == (policy == "global")


def test_committed_heads_are_the_traces_own():
    """tests/integration/traces holds the traces' first lines, unchanged."""
    for name in NAMES:
        src = full_trace(name)
        if src is None:
            pytest.skip("no shipped traces (MC_TRACE_DIR) to compare with")
        with open(src) as f:
            want = [next(f) for _ in range(SLICE_LINES)]
        assert committed_head(name) == want, name


def test_replica_csv(tmp_path):
    src = full_trace("conversation_trace.jsonl")
    if src is None:
        pytest.skip("no shipped traces (a whole trace is replayed)")
    p = run("--trace", src, "--pool", "global", "--replicas-csv", str(tmp_path / "x.csv"))
    assert p.returncode == 2 and "--pool local" in p.stderr
    csv, out = tmp_path / "rep.csv", tmp_path / "r.json"
    p = run("--trace", src, "--nodes", "10", "--policy", "global", "--output-length-one",
            "--replicas-csv", str(csv), "--json", str(out))
    assert p.returncode == 0, p.stderr
    rows = csv.read_text().splitlines()
    assert rows[0] == "t_s,rank10,rank100,rank1000,rank10000"
    assert [int(r.split(",")[0]) for r in rows[1:4]] == [0, 30, 60]
    counts = [list(map(int, r.split(",")[1:])) for r in rows[1:]]
    assert all(0 <= c <= 10 for row in counts for c in row)
    rep = json.loads(out.read_text())["replicas"]
    # hot keys are replicated by fetching; the hottest more than the rank-10000 one
    assert rep["rank10"]["max"] >= 3
    assert rep["rank10"]["max"] >= rep["rank10000"]["max"]


def test_scheduler_and_cost_model_flags(tmp_path):
    # ten 8192-token requests 0.5 s apart on one node: each waits 0.44 s more
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(
        '{"timestamp": %d, "input_length": 8192, "output_length": 1, "hash_ids": [%s]}\n'
        % (i * 500, ", ".join(str(1000 * i + b) for b in range(16))) for i in range(10)))
    out = tmp_path / "r.json"
    p = run("--trace", str(trace), "--nodes", "1", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["rejected"] == 0
    p = run("--trace", str(trace), "--nodes", "1", "--reject", "--ttft-slo-s", "2",
            "--json", str(out))
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())
    assert 0 < r["rejected"] < 10 and r["ttft_avg_s"] <= 2
    # a model twice as fast halves the prefill time
    p = run("--trace", str(trace), "--nodes", "4", "--prefill-lin-s", "5.41e-5",
            "--prefill_quad_s=3.87e-10", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["prefill_s_per_request"] == pytest.approx(0.938316 / 2,
                                                                               rel=1e-4)
    for bad in (["--nic-bps", "0"], ["--kvcache-balancing-threshold", "x"], ["--reject=maybe"]):
        p = run("--trace", str(trace), *bad)
        assert p.returncode == 2, (bad, p.stderr)


def test_output_length_one(tmp_path):
    """--output-length-one (Fig. 10): every request decodes one token, so each
    one booked on the decode instance holds its input plus 1 token of context,
    not plus its traced output; request k, on one prefill node, finds the k
    before it already decoding (predicted TBT = 8.75 ms + 20.48 ns a token)."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(
        '{"timestamp": %d, "input_length": 1024, "output_length": 100000, '
        '"hash_ids": [%d, %d]}\n' % (i, 2 * i + 1, 2 * i + 2) for i in range(10)))
    out = tmp_path / "r.json"
    got = {}
    for one in (False, True):
        p = run("--trace", str(trace), "--nodes", "1", "--decode-nodes", "1", "--json",
                str(out), *(["--output-length-one"] if one else []))
        assert p.returncode == 0, p.stderr
        got[one] = json.loads(out.read_text())
        assert got[one]["output_length_one"] is one and got[one]["rejected"] == 0

    def tbt_avg(out_len):
        return sum(8.75e-3 + 20.48e-9 * (k * (1024 + out_len) + 1024) for k in range(10)) / 10

    assert got[True]["tbt_avg_s"] == pytest.approx(tbt_avg(1), rel=1e-9)
    assert got[False]["tbt_avg_s"] == pytest.approx(tbt_avg(100000), rel=1e-9)


def test_cost_model_file_then_flags(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(LINE % (0, 1) + LINE % (10000, 2))
    model = tmp_path / "fit.json"
    model.write_text('{"prefill_lin_s": 2.164e-4, "prefill_quad_s": 0}')
    out = tmp_path / "r.json"
    p = run("--trace", str(trace), "--cost-model", str(model), "--json", str(out))
    assert p.returncode == 0, p.stderr
    # 1024 and 512 new tokens at 2.164e-4 s each
    assert json.loads(out.read_text())["prefill_s_per_request"] == pytest.approx(
        (1024 + 512) * 2.164e-4 / 2)
    # a flag wins over the file, wherever it stands
    p = run("--prefill-lin-s", "1e-4", "--trace", str(trace), "--cost-model", str(model),
            "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["prefill_s_per_request"] == pytest.approx(1536e-4 / 2)
    model.write_text('{"prefill_lin_s": 1e-4, "gqa": 0}')
    p = run("--trace", str(trace), "--cost-model", str(model))
    assert p.returncode == 1 and "gqa" in p.stderr


def test_request_csv(tmp_path):
    """--csv: one row per request, in replay order, agreeing with the JSON."""
    trace = tmp_path / "t.jsonl"
    trace.write_text(LINE % (5, 1) + LINE % (0, 2) + LINE % (9, 1) + LINE % (7, 3))
    out, csv = tmp_path / "r.json", tmp_path / "r.csv"
    p = run("--trace", str(trace), "--nodes", "2", "--decode-nodes", "1", "--json", str(out),
            "--csv", str(csv))
    assert p.returncode == 0, p.stderr
    lines = csv.read_text().splitlines()
    head = lines[0].split(",")
    rows = [dict(zip(head, x.split(","))) for x in lines[1:]]
    r = json.loads(out.read_text())
    assert len(rows) == r["requests"] == 4
    assert [int(x["index"]) for x in rows] == [1, 0, 3, 2]  # by timestamp, file index kept
    assert [float(x["arrival_s"]) for x in rows] == [0.0, 0.005, 0.007, 0.009]
    assert sum(int(x["admitted"]) for x in rows) == r["requests"] - r["rejected"]
    assert sum(int(x["prefix_tokens"]) for x in rows) == r["hit_tokens"]
    ttfts = [float(x["ttft_s"]) for x in rows]
    assert sum(ttfts) / len(ttfts) == pytest.approx(r["ttft_avg_s"], abs=1e-5)
    assert all(int(x["decode"]) == 0 and int(x["prefill"]) in (0, 1) for x in rows)
    # an unwritable file is an error before the replay
    p = run("--trace", str(trace), "--csv", str(tmp_path / "no" / "r.csv"))
    assert p.returncode == 1 and "r.csv" in p.stderr


def test_figures_drawn_as_png(tmp_path):
    """bench/replay_figures.py --png over a slice of each trace (fig9, fig8, fig11)."""
    pytest.importorskip("matplotlib")
    import sys
    sl = tmp_path / "traces"
    sl.mkdir()
    for name in NAMES:
        write_head(sl, name, 300)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    build = os.path.dirname(os.path.dirname(REPLAY))
    p = subprocess.run([sys.executable, os.path.join(root, "bench", "replay_figures.py"),
                        "--build", build, "--traces", str(sl), "--only", "fig9,fig8,fig11",
                        "--png", str(tmp_path / "png")], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    # Fig. 8: prefill time per request without a cache (vLLM's) and over the pool
    assert "| vLLM, no prefix cache" in p.stdout and "| Mooncake, one 30M pool" in p.stdout
    for name in ("fig9.png", "fig8.png", "fig11.png"):
        data = (tmp_path / "png" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
