"""``transfer_engine_bench`` console entry point (upstream's
``mooncake.cli_bench:main``): runs the bundled C benchmark with the
caller's arguments (exec: same PID, output and exit status)."""

import sys

from mooncake.cli import transfer_engine_bench

__all__ = ["main"]


def main(argv=None):
    return transfer_engine_bench(argv)


if __name__ == "__main__":
    sys.exit(main())
