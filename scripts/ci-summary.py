#!/usr/bin/env python3
"""Sum the results of scripts/test.sh's stages into one closing line.

Each stage is given as `--stage NAME BUILDDIR STATUS RC`:
  NAME      label printed in front of test names (release, asan, tsan)
  BUILDDIR  meson build directory; its meson-logs/testlog.json is read
  STATUS    ok | setup-failed | build-failed | no-tests
  RC        exit code of `meson test` (-1 when it was not run)

Every meson test counts once per stage (a cmocka program is one test, however
many TAP cases it has; the cases are shown for information only). Results:
OK and EXPECTEDFAIL pass, SKIP (exit 77) is skipped, FAIL, UNEXPECTEDPASS,
TIMEOUT and ERROR fail. A stage whose setup or build failed counts as one
failed test, and so does a `meson test` that exited non-zero without any
failure in its log. A pytest run that collected no tests (exit 5) is counted
as skipped, not failed.

A failed test's "not ok" lines and the tail of its stderr are printed just
before the closing lines, so that the end of a CI log says why. The last line printed is exactly `N passed, N failed` (skips on the line before); the exit
status is 1 when anything failed, else 0.
"""
import argparse
import json
import os
import re
import sys

PASS = {"OK", "EXPECTEDFAIL"}
SKIP = {"SKIP"}
FAIL = {"FAIL", "UNEXPECTEDPASS", "TIMEOUT", "ERROR"}
PYTEST_NO_TESTS = 5


def is_pytest_no_tests(entry):
    if entry.get("returncode") != PYTEST_NO_TESTS:
        return False
    cmd = " ".join(str(c) for c in entry.get("command") or [])
    return "pytest" in cmd or "pytest" in entry.get("name", "")


def tap_cases(entry):
    out = entry.get("stdout") or ""
    if not re.search(r"^1\.\.\d+", out, re.M):
        return 0  # no TAP plan: not a TAP program
    ok = len(re.findall(r"^ok\b", out, re.M))
    not_ok = len(re.findall(r"^not ok\b", out, re.M))
    return ok + not_ok


def digest(entry, limit=8):
    """The lines that say why a failed test failed, for the tail CI shows: its
    "not ok" TAP lines with their "#" notes, pytest's FAILED/ERROR lines and
    first "E" lines, then the last lines of stderr."""
    lines = []
    out = (entry.get("stdout") or "").splitlines()
    for i, line in enumerate(out):
        if line.startswith("not ok"):
            lines.append(line)
            lines.extend(l for l in out[i + 1:i + 4] if l.startswith("#"))
    # pytest (-rfE): the short summary's FAILED/ERROR lines name the cases,
    # the "E " lines of the tracebacks say what was asserted
    lines.extend(l for l in out if l.startswith(("FAILED ", "ERROR ")))
    lines.extend([l for l in out if l.startswith("E   ")][:limit])
    err = [l for l in (entry.get("stderr") or "").splitlines() if l.strip()]
    lines.extend(err[-limit:])
    return [l[:160] for l in lines[-3 * limit:]]


def read_log(builddir):
    path = os.path.join(builddir, "meson-logs", "testlog.json")
    entries = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    entries.append(json.loads(line))
                except ValueError:
                    entries.append({"name": "<unreadable testlog line>", "result": "ERROR"})
    except FileNotFoundError:
        return None
    return entries


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stage", nargs=4, action="append", default=[],
                    metavar=("NAME", "BUILDDIR", "STATUS", "RC"))
    args = ap.parse_args()

    passed = failed = skipped = 0
    failures = []
    digests = []
    print("== test summary ==")
    for name, builddir, status, rc in args.stage:
        rc = int(rc)
        s_pass = s_fail = s_skip = cases = 0
        note = ""
        if status in ("setup-failed", "build-failed"):
            s_fail = 1
            failures.append(f"{name}/{status}")
            note = status
        elif status == "no-tests":
            note = "no tests selected"
        else:
            entries = read_log(builddir) if rc >= 0 else None
            for e in entries or []:
                res = e.get("result", "ERROR")
                tname = f"{name}/{e.get('name', '?')}"
                cases += tap_cases(e)
                if res in PASS:
                    s_pass += 1
                elif res in SKIP:
                    s_skip += 1
                elif res == "FAIL" and is_pytest_no_tests(e):
                    s_skip += 1
                    print(f"note: {tname}: pytest collected no tests (exit 5), counted as skipped")
                else:
                    s_fail += 1
                    failures.append(f"{tname} ({res}, exit {e.get('returncode')})")
                    digests.append((tname, digest(e)))
            if rc != 0 and s_fail == 0:
                # meson test failed without a failing test in its log: a missing log,
                # a bad suite name, a crash of meson itself. Unless the only cause was
                # a pytest exit 5 handled above, that is a failure.
                only_pytest5 = entries and any(
                    e.get("result") == "FAIL" and is_pytest_no_tests(e) for e in entries)
                if not only_pytest5:
                    s_fail = 1
                    what = "did not run" if rc < 0 else f"exited {rc}"
                    failures.append(f"{name}/meson-test ({what}, no failing test logged)")
            if entries is None and rc == 0:
                note = "no test log"
            elif entries is not None and not entries and rc == 0:
                note = "no tests ran"
        extra = f", {cases} TAP cases" if cases else ""
        print(f"{name:8s} {s_pass} passed, {s_fail} failed, {s_skip} skipped{extra}"
              + (f"  [{note}]" if note else ""))
        passed += s_pass
        failed += s_fail
        skipped += s_skip

    for tname, lines in digests:
        print(f"-- why {tname} failed (last lines) --")
        for line in lines:
            print(f"   {line}")
    for f in failures:
        print(f"FAILED: {f}")
    print(f"skipped: {skipped}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
