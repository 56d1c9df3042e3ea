"""Entry points of the console programs installed with the package.

The wheel carries the C programs inside the package directory, next to
this file (upstream's layout), where meson-python gives them an RPATH to
the bundled libmooncake.so; pip's console scripts call these functions,
which exec the program with the caller's arguments (same PID, signals and
exit status, as upstream's ``mooncake_master`` shim).

``mooncake_http_metadata_server`` is pure Python
(``mooncake.http_metadata_server:main``), as upstream.

Outside a wheel (the build tree on PYTHONPATH) the programs are looked up
under ``$MC_BUILD_DIR/tools`` as well.
"""

import os
import sys

__all__ = ["find_program", "mooncake_master", "mooncake_client", "transfer_engine_bench"]


def find_program(name):
    """Path of a bundled program, or None."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(here, name)]
    build = os.environ.get("MC_BUILD_DIR")
    if build:
        candidates.append(os.path.join(build, "tools", name))
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _exec(name, argv=None):
    path = find_program(name)
    if path is None:
        print(f"{name}: the program is not bundled with this mooncake package "
              f"({os.path.dirname(os.path.abspath(__file__))})", file=sys.stderr)
        return 127
    args = sys.argv[1:] if argv is None else list(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, [name] + args)
    return 127  # not reached


def mooncake_master(argv=None):
    """``mooncake_master``: the master daemon."""
    return _exec("mooncake_master", argv)


def mooncake_client(argv=None):
    """``mooncake_client``: the standalone store client (one per host)."""
    return _exec("mooncake_client", argv)


def transfer_engine_bench(argv=None):
    """``transfer_engine_bench``: the Transfer Engine benchmark."""
    return _exec("transfer_engine_bench", argv)


def main():
    """``python -m mooncake.cli PROGRAM [ARGS...]``."""
    progs = {"mooncake_master": mooncake_master, "mooncake_client": mooncake_client,
             "transfer_engine_bench": transfer_engine_bench}
    if len(sys.argv) < 2 or sys.argv[1] not in progs:
        print(f"usage: python -m mooncake.cli {{{','.join(progs)}}} [ARGS...]", file=sys.stderr)
        return 2
    return progs[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
