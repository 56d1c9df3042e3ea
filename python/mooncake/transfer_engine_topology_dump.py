"""``transfer_engine_topology_dump``: print the Transfer Engine's topology
discovery (the NIC priority matrix, as ``TransferEngine.get_local_topology``
returns it) as JSON on stdout.

    transfer_engine_topology_dump [--device-name NICS] [--compact]

``--device-name`` is the comma-separated NIC allow-list the engine would
use ("" = all).  Upstream can also dump the TENT engine's discovery; this
build has no TENT engine, so only the Transfer Engine's matrix is printed
(on a machine without RDMA NICs, ``{}``).  Exit status 0, or 1 when
discovery fails; an unknown option is an argparse error (status 2).
"""

import argparse
import json
import sys

__all__ = ["topology", "main"]


def topology(device_name=None):
    """The discovered topology as a Python object (NIC priority matrix)."""
    from mooncake.engine import TransferEngine
    text = TransferEngine().get_local_topology(device_name)
    return json.loads(text) if text else {}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="transfer_engine_topology_dump",
                                 description="Print the Transfer Engine's topology as JSON.")
    ap.add_argument("--device-name", "--device_name", default=None,
                    help="comma-separated NIC allow-list (default: all)")
    ap.add_argument("--compact", action="store_true", help="one line, no indentation")
    args = ap.parse_args(argv)
    try:
        topo = topology(args.device_name)
    except (RuntimeError, ValueError, OSError) as e:
        print(f"transfer_engine_topology_dump: discovery failed: {e}", file=sys.stderr)
        return 1
    print(json.dumps(topo, indent=None if args.compact else 2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
