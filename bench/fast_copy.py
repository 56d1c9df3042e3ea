#!/usr/bin/python3
"""mooncake._fast_copy.concat_arrays_into against numpy.concatenate and memcpy.

Usage (the build tree on PYTHONPATH, or an installed package)::

    /usr/bin/python3 bench/fast_copy.py --build build [--size-mib 64] [--arrays 64]
        [--threads 1,2,4] [--rounds 15] [--quick]

The same bytes are copied into the same destination (a page-faulted numpy
buffer) by

  memcpy    one ctypes.memmove of the whole size from one contiguous source
            (the reference: a single call, one thread);
  numpy     numpy.concatenate(arrays, out=dest): the arrays back to back;
  fast_N    concat_arrays_into(arrays, dest_ptr, dest_size, nthreads=N).

The arrays are --arrays equal uint8 pieces of --size-mib MiB in total.
Each round times every method once, in an order that rotates from round to
round, so slow drifts of the machine's load reach all of them alike.  One
line per method: the median and best GB/s over the rounds and the median
of the per-round ratios to memcpy (pct_of_memcpy).

Figures belong in docs/benchmarks.md only from a quiet machine; --quick is
the smoke run (4 MiB, 3 rounds).
"""

import argparse
import ctypes
import os
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=None, help="build directory (uses <build>/python)")
    ap.add_argument("--size-mib", type=int, default=64)
    ap.add_argument("--arrays", type=int, default=64)
    ap.add_argument("--threads", default="1,2,4")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="a short smoke run")
    args = ap.parse_args()
    if args.build:
        sys.path.insert(0, os.path.join(os.path.abspath(args.build), "python"))
    if args.quick:
        args.size_mib, args.rounds = 4, 3

    import numpy as np
    from mooncake._fast_copy import concat_arrays_into

    total = args.size_mib << 20
    piece = total // args.arrays
    total = piece * args.arrays
    src = np.random.default_rng(1).integers(0, 256, total, dtype=np.uint8)
    arrays = [src[i * piece:(i + 1) * piece].copy() for i in range(args.arrays)]
    dest = np.ones(total, np.uint8)  # faulted in before any timing
    dptr = dest.ctypes.data
    sptr = src.ctypes.data
    threads = [int(t) for t in args.threads.split(",") if t]

    methods = {"memcpy": lambda: ctypes.memmove(dptr, sptr, total),
               "numpy": lambda: np.concatenate(arrays, out=dest)}
    for t in threads:
        methods[f"fast_{t}"] = (lambda t=t: concat_arrays_into(arrays, dptr, total, nthreads=t))

    # correctness once, and a warm-up of every method
    for name, fn in methods.items():
        dest[:] = 0
        fn()
        if not np.array_equal(dest, src):
            print(f"fast_copy method={name} error=wrong-bytes", flush=True)
            return 1

    names = list(methods)
    secs = {n: [] for n in names}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            t0 = time.perf_counter()
            methods[n]()
            secs[n].append(time.perf_counter() - t0)
    for n in names:
        gbs = [total / s / 1e9 for s in secs[n]]
        ratios = [m / s * 100.0 for m, s in zip(secs["memcpy"], secs[n])]
        print(f"fast_copy method={n} size_mib={args.size_mib} arrays={args.arrays} "
              f"rounds={args.rounds} median_gbps={statistics.median(gbs):.2f} "
              f"best_gbps={max(gbs):.2f} pct_of_memcpy={statistics.median(ratios):.1f}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
