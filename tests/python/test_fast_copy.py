"""mooncake._fast_copy.concat_arrays_into (spec components.md section 5).

The copy against numpy's own concatenation of the same arrays, the slice
arguments (start, count), the thread split (ranges that start and end in
the middle of an array, zero-length arrays, more threads than bytes), and
upstream's errors: TypeError, ValueError (non-contiguous, destination too
small), OverflowError; an empty range returns 0 without touching memory.
"""

import threading

import numpy as np
import pytest

from mooncake._fast_copy import concat_arrays_into

MiB = 1 << 20


def expected(arrays):
    return b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)


def mixed_arrays(seed=0):
    rng = np.random.default_rng(seed)
    return [
        rng.integers(0, 256, 1000, dtype=np.uint8),
        np.zeros(0, np.int64),
        rng.standard_normal((17, 33)).astype(np.float32),
        np.arange(12, dtype=np.int16).reshape(3, 4),
        np.array(7, dtype=np.int64),  # 0-d
        rng.integers(0, 1 << 30, 4099, dtype=np.int32),
    ]


def test_copies_like_concatenate():
    arrays = mixed_arrays()
    want = expected(arrays)
    dest = np.full(len(want) + 64, 0xAB, np.uint8)
    n = concat_arrays_into(arrays, dest.ctypes.data, dest.nbytes)
    assert n == len(want)
    assert dest[:n].tobytes() == want
    assert (dest[n:] == 0xAB).all(), "wrote past the bytes it reported"


@pytest.mark.parametrize("start,count", [(0, -1), (2, -1), (1, 3), (5, 1), (0, 0), (6, -1),
                                         (100, 5), (3, 100)])
def test_start_and_count_select_a_slice(start, count):
    arrays = mixed_arrays(1)
    sel = arrays[start:] if count == -1 else arrays[start:start + count]
    want = expected(sel)
    dest = np.zeros(max(len(want), 1), np.uint8)
    n = concat_arrays_into(arrays, dest.ctypes.data, dest.nbytes, start=start, count=count)
    assert n == len(want)
    assert dest[:n].tobytes() == want


def test_empty_range_returns_zero_without_a_destination():
    assert concat_arrays_into([], 0, 0) == 0
    assert concat_arrays_into([np.zeros(0, np.uint8)], 0, 0) == 0
    assert concat_arrays_into([np.ones(8, np.uint8)], 0, 0, start=1) == 0


@pytest.mark.parametrize("nthreads", [1, 2, 3, 4, 7, 64])
def test_threads_split_the_destination(nthreads):
    rng = np.random.default_rng(nthreads)
    # sizes that put the range boundaries in the middle of arrays
    arrays = [rng.integers(0, 256, s, dtype=np.uint8)
              for s in (3 * MiB + 5, 1, 0, 5 * MiB - 3, 7 * MiB + 11, 123)]
    want = expected(arrays)
    dest = np.zeros(len(want), np.uint8)
    assert concat_arrays_into(arrays, dest.ctypes.data, dest.nbytes, nthreads=nthreads) == len(want)
    assert dest.tobytes() == want


def test_concurrent_callers():
    arrays = [np.full(2 * MiB, i, np.uint8) for i in range(6)]
    want = expected(arrays)
    dests = [np.zeros(len(want), np.uint8) for _ in range(4)]
    errors = []

    def run(d):
        try:
            for _ in range(3):
                assert concat_arrays_into(arrays, d.ctypes.data, d.nbytes, nthreads=2) == len(want)
        except Exception as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=run, args=(d,)) for d in dests]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    assert all(d.tobytes() == want for d in dests)


def test_not_an_ndarray_is_type_error():
    dest = np.zeros(64, np.uint8)
    with pytest.raises(TypeError, match="arrays\\[1\\]"):
        concat_arrays_into([np.zeros(4, np.uint8), b"abcd"], dest.ctypes.data, dest.nbytes)
    with pytest.raises(TypeError):
        concat_arrays_into(np.zeros(4, np.uint8), dest.ctypes.data, dest.nbytes)
    with pytest.raises(TypeError):
        concat_arrays_into(None, dest.ctypes.data, dest.nbytes)
    with pytest.raises(TypeError):
        concat_arrays_into([np.zeros(4, np.uint8)], "0x10", dest.nbytes)


def test_non_contiguous_is_value_error():
    dest = np.zeros(1024, np.uint8)
    base = np.arange(64, dtype=np.uint8)
    with pytest.raises(ValueError, match="arrays\\[1\\] is not C-contiguous"):
        concat_arrays_into([base, base[::2]], dest.ctypes.data, dest.nbytes)
    f_order = np.asfortranarray(np.arange(20, dtype=np.int32).reshape(4, 5))
    with pytest.raises(ValueError, match="is not C-contiguous"):
        concat_arrays_into([f_order], dest.ctypes.data, dest.nbytes)
    assert (dest == 0).all(), "copied something before refusing"


def test_destination_too_small_is_value_error():
    arrays = [np.zeros(100, np.uint8), np.zeros(10, np.float64)]
    dest = np.zeros(179, np.uint8)
    with pytest.raises(ValueError, match="destination buffer too small: need 180 bytes, got 179"):
        concat_arrays_into(arrays, dest.ctypes.data, dest.nbytes)


def test_out_of_range_integers():
    dest = np.zeros(16, np.uint8)
    a = [np.zeros(4, np.uint8)]
    with pytest.raises(OverflowError):
        concat_arrays_into(a, -1, 16)
    with pytest.raises(OverflowError):
        concat_arrays_into(a, dest.ctypes.data, 1 << 64)
    with pytest.raises(OverflowError):
        concat_arrays_into(a, dest.ctypes.data, -5)
    for kw in ({"start": -1}, {"count": -2}, {"nthreads": 0}, {"nthreads": 1000}):
        with pytest.raises(ValueError):
            concat_arrays_into(a, dest.ctypes.data, dest.nbytes, **kw)
