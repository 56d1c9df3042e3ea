"""``mooncake_client`` console entry point (upstream's
``mooncake.cli_client:main``): runs the bundled standalone store client
with the caller's arguments (exec: same PID, signals and exit status)."""

import sys

from mooncake.cli import mooncake_client

__all__ = ["main"]


def main(argv=None):
    return mooncake_client(argv)


if __name__ == "__main__":
    sys.exit(main())
