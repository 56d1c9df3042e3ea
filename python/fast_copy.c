/*
 * python/fast_copy.c - the CPython extension `mooncake._fast_copy`.
 *
 * One function, upstream's (spec components.md section 5):
 *
 *     concat_arrays_into(arrays, dest_ptr, dest_size, start=0, count=-1,
 *                        nthreads=1) -> int
 *
 * copies arrays[start:start+count] (all of them from start when count is
 * -1) back to back into the raw memory [dest_ptr, dest_ptr + dest_size) and
 * returns the number of bytes copied.  The structured-object store uses it
 * to pack many NumPy members into one registered buffer before a single
 * zero-copy put, where numpy.concatenate would need a second buffer.
 *
 * Shape of the code: while holding the GIL, every selected array is checked
 * (a numpy.ndarray, C-contiguous) and pinned through the buffer protocol
 * (a Py_buffer view keeps the array alive and stops it from being resized),
 * and a prefix table of destination offsets is built.  Then the GIL is
 * released and the total is split into nthreads equal byte ranges of the
 * destination; each range is copied by one thread (the caller copies the
 * first itself), walking the arrays from the one holding its first byte
 * (binary search in the prefix table).  Ranges smaller than MIN_PER_THREAD
 * are not worth a thread, so small copies use fewer threads or none.
 *
 * The arrays are recognised by numpy.ndarray (imported on first use) and
 * read through the buffer protocol, not through the NumPy C API: the
 * extension then builds without NumPy's headers and does not depend on the
 * ABI of the NumPy it meets at run time.
 *
 * Errors, as upstream: TypeError for an element that is not an ndarray (or
 * arrays not a sequence), ValueError for a non-contiguous array ("arrays[i]
 * is not C-contiguous"), for a destination too small ("destination buffer
 * too small: need N bytes, got M") and for impossible start, count or
 * nthreads, OverflowError for a pointer or size outside the unsigned 64-bit
 * range.  An empty range copies nothing and returns 0, whatever dest_ptr.
 *
 * What it must never do: touch a Python object without the GIL, or write
 * outside [dest_ptr, dest_ptr + bytes copied).  The destination pointer is
 * the caller's promise, as upstream; nothing can check it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define MAX_THREADS    64
#define MIN_PER_THREAD (1u << 20) /* below 1 MiB a thread costs more than it saves */

struct copy_job {
	const Py_buffer *views;
	const size_t *offs; /* offs[i]: destination offset of views[i]; offs[n] = total */
	size_t n;
	unsigned char *dest;
};

struct copy_range {
	const struct copy_job *job;
	size_t lo, hi;
	pthread_t tid;
	bool started;
};

/* index of the array holding destination byte `pos` (offs is ascending) */
static size_t find_array(const struct copy_job *job, size_t pos)
{
	size_t lo = 0, hi = job->n;

	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (job->offs[mid] <= pos)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

static void copy_range_run(const struct copy_range *r)
{
	const struct copy_job *job = r->job;
	size_t pos = r->lo;
	size_t i = find_array(job, pos);

	while (pos < r->hi && i < job->n) {
		size_t a_lo = job->offs[i], a_hi = job->offs[i + 1];
		size_t end = a_hi < r->hi ? a_hi : r->hi;

		if (end > pos)
			memcpy(job->dest + pos,
			       (const unsigned char *)job->views[i].buf + (pos - a_lo), end - pos);
		pos = end > pos ? end : pos;
		i++;
	}
}

static void *copy_range_thread(void *arg)
{
	copy_range_run(arg);
	return NULL;
}

/* Copies the whole job with up to nthreads threads; called without the GIL. */
static void copy_job_run(const struct copy_job *job, size_t nthreads)
{
	struct copy_range ranges[MAX_THREADS];
	size_t total = job->offs[job->n];
	size_t t, per;

	if (nthreads > total / MIN_PER_THREAD)
		nthreads = total / MIN_PER_THREAD;
	if (nthreads < 1)
		nthreads = 1;
	per = total / nthreads;
	for (t = 0; t < nthreads; t++) {
		ranges[t].job = job;
		ranges[t].lo = t * per;
		ranges[t].hi = t + 1 == nthreads ? total : (t + 1) * per;
		ranges[t].started = false;
	}
	/* a thread that cannot be started leaves its range to the caller */
	for (t = 1; t < nthreads; t++)
		ranges[t].started =
			pthread_create(&ranges[t].tid, NULL, copy_range_thread, &ranges[t]) == 0;
	copy_range_run(&ranges[0]);
	for (t = 1; t < nthreads; t++) {
		if (ranges[t].started)
			pthread_join(ranges[t].tid, NULL);
		else
			copy_range_run(&ranges[t]);
	}
}

static PyObject *ndarray_type; /* numpy.ndarray, imported on first use */

static int get_ndarray_type(void)
{
	PyObject *np;

	if (ndarray_type)
		return 0;
	np = PyImport_ImportModule("numpy");
	if (!np)
		return -1;
	ndarray_type = PyObject_GetAttrString(np, "ndarray");
	Py_DECREF(np);
	return ndarray_type ? 0 : -1;
}

/* an unsigned 64-bit integer argument; OverflowError outside the range */
static int arg_u64(PyObject *o, const char *name, uint64_t *out)
{
	unsigned long long v;

	if (!PyLong_Check(o)) {
		PyErr_Format(PyExc_TypeError, "%s must be an int, not %.80s", name,
			     Py_TYPE(o)->tp_name);
		return -1;
	}
	v = PyLong_AsUnsignedLongLong(o);
	if (v == (unsigned long long)-1 && PyErr_Occurred()) {
		if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
			PyErr_Clear();
			PyErr_Format(PyExc_OverflowError, "%s must be in [0, 2**64)", name);
		}
		return -1;
	}
	*out = v;
	return 0;
}

static int arg_ssize(PyObject *o, const char *name, Py_ssize_t *out)
{
	if (!PyLong_Check(o)) {
		PyErr_Format(PyExc_TypeError, "%s must be an int, not %.80s", name,
			     Py_TYPE(o)->tp_name);
		return -1;
	}
	*out = PyLong_AsSsize_t(o);
	return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

static void release_views(Py_buffer *views, size_t n)
{
	for (size_t i = 0; i < n; i++)
		PyBuffer_Release(&views[i]);
	PyMem_Free(views);
}

static PyObject *concat_arrays_into(PyObject *self, PyObject *args, PyObject *kwargs)
{
	static char *kwlist[] = {"arrays", "dest_ptr", "dest_size", "start",
				 "count",  "nthreads", NULL};
	PyObject *arrays, *ptr_o, *size_o, *start_o = NULL, *count_o = NULL, *thr_o = NULL;
	PyObject *seq = NULL, *ret = NULL;
	Py_ssize_t start = 0, count = -1, nthreads = 1, len, n, i;
	uint64_t dest_ptr, dest_size;
	Py_buffer *views = NULL;
	size_t *offs = NULL, done = 0, total = 0;
	struct copy_job job;
	PyThreadState *ts;

	(void)self;
	if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|OOO:concat_arrays_into", kwlist,
					 &arrays, &ptr_o, &size_o, &start_o, &count_o, &thr_o))
		return NULL;
	if (arg_u64(ptr_o, "dest_ptr", &dest_ptr) < 0 ||
	    arg_u64(size_o, "dest_size", &dest_size) < 0 ||
	    (start_o && arg_ssize(start_o, "start", &start) < 0) ||
	    (count_o && arg_ssize(count_o, "count", &count) < 0) ||
	    (thr_o && arg_ssize(thr_o, "nthreads", &nthreads) < 0))
		return NULL;
	if (start < 0) {
		PyErr_Format(PyExc_ValueError, "start must be >= 0, got %zd", start);
		return NULL;
	}
	if (count < -1) {
		PyErr_Format(PyExc_ValueError, "count must be >= 0 or -1 (all), got %zd", count);
		return NULL;
	}
	if (nthreads < 1 || nthreads > MAX_THREADS) {
		PyErr_Format(PyExc_ValueError, "nthreads must be in [1, %d], got %zd", MAX_THREADS,
			     nthreads);
		return NULL;
	}
	if (get_ndarray_type() < 0)
		return NULL;
	if (PyObject_TypeCheck(arrays, (PyTypeObject *)ndarray_type) || PyUnicode_Check(arrays) ||
	    PyBytes_Check(arrays)) {
		PyErr_SetString(PyExc_TypeError, "arrays must be a list of numpy.ndarray");
		return NULL;
	}
	seq = PySequence_Fast(arrays, "arrays must be a list of numpy.ndarray");
	if (!seq)
		return NULL;
	len = PySequence_Fast_GET_SIZE(seq);
	/* arrays[start:start+count], as a slice would clamp it */
	n = start >= len ? 0 : len - start;
	if (count >= 0 && count < n)
		n = count;
	views = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*views));
	offs = PyMem_Malloc(((size_t)n + 1) * sizeof(*offs));
	if (!views || !offs) {
		PyErr_NoMemory();
		goto out;
	}
	offs[0] = 0;
	for (i = 0; i < n; i++) {
		PyObject *a = PySequence_Fast_GET_ITEM(seq, start + i);

		if (!PyObject_TypeCheck(a, (PyTypeObject *)ndarray_type)) {
			PyErr_Format(PyExc_TypeError,
				     "arrays[%zd] is not a numpy.ndarray (got %.80s)", start + i,
				     Py_TYPE(a)->tp_name);
			goto out;
		}
		if (PyObject_GetBuffer(a, &views[i], PyBUF_RECORDS_RO) < 0) {
			PyErr_Clear();
			PyErr_Format(PyExc_ValueError, "arrays[%zd] is not readable as a buffer",
				     start + i);
			goto out;
		}
		done = (size_t)i + 1;
		if (!PyBuffer_IsContiguous(&views[i], 'C')) {
			PyErr_Format(PyExc_ValueError, "arrays[%zd] is not C-contiguous",
				     start + i);
			goto out;
		}
		if ((size_t)views[i].len > SIZE_MAX - total) {
			PyErr_SetString(PyExc_OverflowError, "total size of arrays overflows");
			goto out;
		}
		total += (size_t)views[i].len;
		offs[i + 1] = total;
	}
	if (total > dest_size) {
		PyErr_Format(PyExc_ValueError,
			     "destination buffer too small: need %zu bytes, got %llu", total,
			     (unsigned long long)dest_size);
		goto out;
	}
	if (total && (dest_ptr == 0 || dest_ptr > UINTPTR_MAX - total)) {
		PyErr_Format(PyExc_ValueError, "dest_ptr 0x%llx cannot hold %zu bytes",
			     (unsigned long long)dest_ptr, total);
		goto out;
	}
	if (total) {
		job.views = views;
		job.offs = offs;
		job.n = (size_t)n;
		job.dest = (unsigned char *)(uintptr_t)dest_ptr;
		ts = PyEval_SaveThread();
		copy_job_run(&job, (size_t)nthreads);
		PyEval_RestoreThread(ts);
	}
	ret = PyLong_FromSize_t(total);
out:
	if (views)
		release_views(views, done);
	PyMem_Free(offs);
	Py_DECREF(seq);
	return ret;
}

static PyMethodDef fast_copy_methods[] = {
	{
		.ml_name = "concat_arrays_into",
		.ml_meth = (PyCFunction)(void (*)(void))concat_arrays_into,
		.ml_flags = METH_VARARGS | METH_KEYWORDS,
		.ml_doc = "concat_arrays_into(arrays, dest_ptr, dest_size, start=0, count=-1, "
			  "nthreads=1) -> int\n\nCopy arrays[start:start+count] (C-contiguous "
			  "numpy arrays) back to back into the raw memory at dest_ptr, with the "
			  "GIL released and up to nthreads threads; returns the bytes copied.",
	},
	{.ml_name = NULL},
};

static struct PyModuleDef fast_copy_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "mooncake._fast_copy",
	.m_doc = "Multi-threaded copy of numpy arrays into raw memory (upstream's _fast_copy).",
	.m_size = -1,
	.m_methods = fast_copy_methods,
};

PyMODINIT_FUNC PyInit__fast_copy(void);

PyMODINIT_FUNC PyInit__fast_copy(void)
{
	return PyModule_Create(&fast_copy_module);
}
