"""Heads of the FAST'25 traces for the replay tests, with or without ../shared.

The whole traces live outside the repository (MC_TRACE_DIR, by default
../shared/traces beside the checkout).  Their first SLICE_LINES lines are
committed here (traces/*_head600.jsonl.gz, 88 KB), so a fresh clone, whose
CI has no ../shared, still replays a slice of each trace against a real
conductor and store (issue 17) instead of skipping.  test_replay_tool.py
checks that the committed heads are the traces' own when both are there.
"""
import gzip
import os

TRACE_DIR = os.environ.get("MC_TRACE_DIR", "")
SLICE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "traces")
SLICE_LINES = 600
NAMES = ("conversation_trace.jsonl", "synthetic_trace.jsonl")


def full_trace(name):
    """Path of the whole shipped trace, or None when MC_TRACE_DIR lacks it."""
    p = os.path.join(TRACE_DIR, name) if TRACE_DIR else ""
    return p if p and os.path.exists(p) else None


def committed_head(name):
    """The committed first SLICE_LINES lines of trace name."""
    path = os.path.join(SLICE_DIR, name.replace(".jsonl", "_head600.jsonl.gz"))
    with gzip.open(path, "rt") as f:
        return f.readlines()


def head(name, n):
    """The first n lines of trace name: from the whole trace when it is
    there, else from the committed head (so at most SLICE_LINES)."""
    src = full_trace(name)
    if src is None:
        return committed_head(name)[:n]
    out = []
    with open(src) as f:
        for line in f:
            if len(out) == n:
                break
            out.append(line)
    return out


def write_head(tmp_path, name, n):
    """head(name, n) written to tmp_path/name; returns (path, lines)."""
    lines = head(name, n)
    t = tmp_path / name
    t.write_text("".join(lines))
    return t, len(lines)
