/*
 * python/engine.c - the CPython extension `mooncake.engine`.
 *
 * Upstream Mooncake ships a pybind11 module named `engine` inside the
 * package `mooncake`; vLLM, SGLang, LMCache and checkpoint-engine import
 * `from mooncake.engine import TransferEngine` and depend on its method
 * names, positional signatures and integer return conventions (spec
 * transfer-engine.md 2.3, python-api-and-integrations.md).  This module
 * offers the same surface over the public C API (<mooncake/mooncake.h>)
 * and nothing else; it holds no transfer logic of its own.
 *
 * Objects:
 *  - TransferEngine: one struct mc_te, created by initialize() and freed
 *    when the Python object dies.  The pointer is written once, under the
 *    GIL, and never changes afterwards, so a method reads it under the GIL,
 *    drops the GIL and uses it; the object cannot die while a method runs
 *    (the call holds a reference to self).
 *  - a managed-buffer allocator (allocate_managed_buffer): upstream's
 *    16 power-of-two size classes from 8 KiB to 256 MiB, split buddy-wise
 *    (without merging) out of 2 GiB chunks that are mapped
 *    (mc_te_host_alloc: huge pages, lazy) and registered on first use;
 *    larger requests get a dedicated registered mapping.  Each block
 *    handed out is faulted in (mc_te_host_prefault, MC_STORE_PREFAULT).
 *    Protected by its own mutex, never held while waiting for the GIL.
 *  - a dict of batch deadlines for the asynchronous calls, so that
 *    get_batch_transfer_status and transfer_check_status time out as
 *    upstream does (MC_TRANSFER_TIMEOUT seconds + 1 ns per byte, counted
 *    from submission).  Only touched with the GIL held.
 *  - TransferNotify (name, msg), TransferOpcode (an IntEnum: Read=0,
 *    Write=1), InnerTransferEngine (get_engine()'s opaque handle: keeps
 *    the TransferEngine alive and exposes the struct mc_te address).
 *
 * Conventions kept from upstream: 0 on success and -1 on failure for the
 * synchronous calls, batch ids with 0 as the failure sentinel, upstream's
 * negative ERR_* codes from the (un)register calls.  Argument type errors
 * raise TypeError.  Every call that can wait (initialize, transfers,
 * (un)registration, probes, segment opens, engine teardown) runs with the
 * GIL released, so many Python threads can drive one engine at once.  The
 * release is spelled PyEval_SaveThread / PyEval_RestoreThread, which is what
 * Py_BEGIN/END_ALLOW_THREADS expand to, because clang-format cannot lay out
 * those brace-hiding macros.
 *
 * Arguments are parsed by hand from METH_FASTCALL vectors (the fast
 * parsers CPython uses for itself are not public API); keywords are
 * accepted under the names of the spec, except for initialize and
 * initialize_ext, which are positional-only as upstream.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mooncake/mooncake.h>

/* True and False are ints here, as for upstream's pybind11 casters (pyargs.h). */
#define PYARGS_BOOL_IS_INT
#include "pyargs.h"

#ifndef MC_PY_SUPPORT_CUDA
#define MC_PY_SUPPORT_CUDA 0
#endif

#define MODULE_NAME "mooncake.engine"

/* ---- argument parsing ----------------------------------------------------------- */

#define MAX_ARGS 8

/* ---- time ------------------------------------------------------------------------ */

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- status mapping ---------------------------------------------------------------- */

/* mc_status -> upstream's negative ERR_* codes (transfer_engine's error.h), which
 * the (un)register calls return to Python. */
static int upstream_err(mc_status s)
{
	switch (s) {
	case MC_OK:
		return 0;
	case MC_ERR_INVALID_PARAMS:
	case MC_ERR_BATCH_NOT_FOUND:
		return -1;
	case MC_ERR_TOO_MANY_REQUESTS:
		return -2;
	case MC_ERR_ADDRESS_NOT_REGISTERED:
	case MC_ERR_REMOTE_REJECTED:
		return -3;
	case MC_ERR_BATCH_BUSY:
		return -4;
	case MC_ERR_DEVICE_NOT_FOUND:
		return -6;
	case MC_ERR_ADDRESS_OVERLAPPED:
		return -7;
	case MC_ERR_DNS:
		return -101;
	case MC_ERR_SOCKET:
	case MC_ERR_CONN_REFUSED:
	case MC_ERR_CONN_CLOSED:
		return -102;
	case MC_ERR_MALFORMED_JSON:
		return -103;
	case MC_ERR_REJECT_HANDSHAKE:
		return -104;
	case MC_ERR_METADATA:
	case MC_ERR_SEGMENT_NOT_FOUND:
		return -200;
	case MC_ERR_ENDPOINT:
		return -201;
	case MC_ERR_CONTEXT:
		return -202;
	case MC_ERR_NOMEM:
		return -302;
	case MC_ERR_NOT_SUPPORTED:
		return -303;
	default:
		return -1;
	}
}

/* ---- managed buffers ------------------------------------------------------------------ */

#define MB_NCLASSES  16
#define MB_MIN_SHIFT 13		  /* class 0 = 8 KiB ... class 15 = 256 MiB */
#define MB_CHUNK     (2ull << 30) /* upstream's kDefaultBufferCapacity */
#define MB_MAX_CLASS (MB_NCLASSES - 1)

struct mb_stack {
	uintptr_t *v;
	size_t n, cap;
};

struct mb_range {
	uintptr_t addr;
	size_t len;
};

struct managed {
	pthread_mutex_t lock;
	struct mb_stack free[MB_NCLASSES];
	struct mb_range *chunks; /* 2 GiB pools, registered */
	size_t nchunks;
	struct mb_range *large; /* dedicated mappings above 256 MiB, registered */
	size_t nlarge;
};

static size_t class_size(int c)
{
	return (size_t)1 << (MB_MIN_SHIFT + c);
}

static int find_class(size_t len)
{
	for (int c = 0; c < MB_NCLASSES; c++)
		if (len <= class_size(c))
			return c;
	return -1;
}

static int stack_push(struct mb_stack *s, uintptr_t v)
{
	if (s->n == s->cap) {
		size_t ncap = s->cap ? s->cap * 2 : 64;
		uintptr_t *nv = realloc(s->v, ncap * sizeof(*nv));
		if (!nv)
			return -1;
		s->v = nv;
		s->cap = ncap;
	}
	s->v[s->n++] = v;
	return 0;
}

static int range_append(struct mb_range **v, size_t *n, uintptr_t addr, size_t len)
{
	struct mb_range *nv = realloc(*v, (*n + 1) * sizeof(**v));
	if (!nv)
		return -1;
	nv[*n].addr = addr;
	nv[*n].len = len;
	*v = nv;
	(*n)++;
	return 0;
}

/* Memory as the library maps it for buffers (mc_te_host_alloc: huge
 * pages, pre-faulted per MC_STORE_PREFAULT); NULL when it cannot. */
static void *map_region(size_t len)
{
	void *p;
	return mc_te_host_alloc(len, &p) == MC_OK ? p : NULL;
}

static void unmap_region(void *p)
{
	(void)mc_te_host_free(p);
}

/* Make sure class c has a free block (lock held). */
static int managed_refill_locked(struct managed *m, struct mc_te *te, int c)
{
	uintptr_t x;
	if (m->free[c].n)
		return 0;
	if (c == MB_MAX_CLASS) {
		void *p = map_region(MB_CHUNK);
		size_t slab = class_size(c);
		if (!p)
			return -1;
		if (mc_te_register(te, p, MB_CHUNK, "*", true) != MC_OK) {
			unmap_region(p);
			return -1;
		}
		if (range_append(&m->chunks, &m->nchunks, (uintptr_t)p, MB_CHUNK) < 0) {
			mc_te_deregister(te, p);
			unmap_region(p);
			return -1;
		}
		/* pushed high to low, so blocks are handed out in address order */
		for (size_t off = MB_CHUNK; off > 0; off -= slab)
			if (stack_push(&m->free[c], (uintptr_t)p + off - slab) < 0)
				return -1;
		return 0;
	}
	if (managed_refill_locked(m, te, c + 1) < 0)
		return -1;
	x = m->free[c + 1].v[--m->free[c + 1].n];
	if (stack_push(&m->free[c], x + class_size(c)) < 0 || stack_push(&m->free[c], x) < 0)
		return -1;
	return 0;
}

static uintptr_t managed_alloc(struct managed *m, struct mc_te *te, size_t len)
{
	uintptr_t addr = 0;
	int c = find_class(len);

	pthread_mutex_lock(&m->lock);
	if (c < 0) {
		size_t page = (size_t)sysconf(_SC_PAGESIZE);
		size_t size = (len + page - 1) & ~(page - 1);
		void *p = map_region(size);
		if (!p)
			goto out;
		if (mc_te_register(te, p, size, "*", true) != MC_OK) {
			unmap_region(p);
			goto out;
		}
		if (range_append(&m->large, &m->nlarge, (uintptr_t)p, size) < 0) {
			mc_te_deregister(te, p);
			unmap_region(p);
			goto out;
		}
		addr = (uintptr_t)p;
		goto out;
	}
	if (managed_refill_locked(m, te, c) == 0)
		addr = m->free[c].v[--m->free[c].n];
out:
	pthread_mutex_unlock(&m->lock);
	return addr;
}

static int managed_free(struct managed *m, struct mc_te *te, uintptr_t addr, size_t len)
{
	int rc = -1, c;

	pthread_mutex_lock(&m->lock);
	for (size_t i = 0; i < m->nlarge; i++) {
		if (m->large[i].addr == addr) {
			mc_te_deregister(te, (void *)addr);
			unmap_region((void *)addr);
			m->large[i] = m->large[--m->nlarge];
			rc = 0;
			goto out;
		}
	}
	c = find_class(len);
	if (c < 0)
		goto out;
	/* only a block of this class inside one of our chunks can go back */
	for (size_t i = 0; i < m->nchunks; i++) {
		uintptr_t base = m->chunks[i].addr;
		if (addr >= base && addr < base + m->chunks[i].len &&
		    ((addr - base) & (class_size(c) - 1)) == 0) {
			rc = stack_push(&m->free[c], addr);
			break;
		}
	}
out:
	pthread_mutex_unlock(&m->lock);
	return rc;
}

/* After the engine is gone: unmap everything (nothing can reach it any more). */
static void managed_release(struct managed *m)
{
	for (size_t i = 0; i < m->nchunks; i++)
		unmap_region((void *)m->chunks[i].addr);
	for (size_t i = 0; i < m->nlarge; i++)
		unmap_region((void *)m->large[i].addr);
	for (int c = 0; c < MB_NCLASSES; c++)
		free(m->free[c].v);
	free(m->chunks);
	free(m->large);
	pthread_mutex_destroy(&m->lock);
}

/* ---- TransferNotify -------------------------------------------------------------------- */

struct notify_obj {
	PyObject ob_base; /* PyObject_HEAD */
	PyObject *name;	  /* str */
	PyObject *msg;	  /* str */
};

static PyTypeObject NotifyType;

static PyObject *notify_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	struct notify_obj *n = (struct notify_obj *)type->tp_alloc(type, 0);
	if (!n)
		return NULL;
	n->name = PyUnicode_FromString("");
	n->msg = PyUnicode_FromString("");
	if (!n->name || !n->msg) {
		Py_DECREF(n);
		return NULL;
	}
	return (PyObject *)n;
}

static int notify_init(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"name", "msg", NULL};
	struct notify_obj *n = (struct notify_obj *)self;
	PyObject *name = NULL, *msg = NULL;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|UU:TransferNotify", kwlist, &name, &msg))
		return -1;
	if (name)
		Py_SETREF(n->name, Py_NewRef(name));
	if (msg)
		Py_SETREF(n->msg, Py_NewRef(msg));
	return 0;
}

static void notify_dealloc(PyObject *self)
{
	struct notify_obj *n = (struct notify_obj *)self;
	Py_XDECREF(n->name);
	Py_XDECREF(n->msg);
	Py_TYPE(self)->tp_free(self);
}

static PyObject *notify_repr(PyObject *self)
{
	struct notify_obj *n = (struct notify_obj *)self;
	return PyUnicode_FromFormat("TransferNotify(name=%R, msg=%R)", n->name, n->msg);
}

static PyObject *notify_richcompare(PyObject *a, PyObject *b, int op)
{
	struct notify_obj *x = (struct notify_obj *)a, *y = (struct notify_obj *)b;
	int eq;
	if ((op != Py_EQ && op != Py_NE) || !PyObject_TypeCheck(b, &NotifyType))
		Py_RETURN_NOTIMPLEMENTED;
	eq = PyObject_RichCompareBool(x->name, y->name, Py_EQ);
	if (eq == 1)
		eq = PyObject_RichCompareBool(x->msg, y->msg, Py_EQ);
	if (eq < 0)
		return NULL;
	return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

static PyObject *notify_get(PyObject *self, void *which)
{
	struct notify_obj *n = (struct notify_obj *)self;
	return Py_NewRef(which ? n->msg : n->name);
}

static int notify_set(PyObject *self, PyObject *v, void *which)
{
	struct notify_obj *n = (struct notify_obj *)self;
	if (!v || !PyUnicode_Check(v)) {
		PyErr_SetString(PyExc_TypeError, v ? "TransferNotify fields must be str"
						   : "TransferNotify fields cannot be deleted");
		return -1;
	}
	if (which)
		Py_SETREF(n->msg, Py_NewRef(v));
	else
		Py_SETREF(n->name, Py_NewRef(v));
	return 0;
}

static PyGetSetDef notify_getset[] = {
	{"name", notify_get, notify_set, "sender-chosen name (upstream: the sender's agent name)",
	 NULL},
	{"msg", notify_get, notify_set, "message text", (void *)1},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject NotifyType = {
	/* clang-format off */
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = MODULE_NAME ".TransferNotify",
	/* clang-format on */
	.tp_basicsize = sizeof(struct notify_obj),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc = "TransferNotify(name='', msg='')\n\n"
		  "A notification sent with a transfer (transfer_sync(..., notify=...)) or\n"
		  "received by get_notifies().",
	.tp_new = notify_new,
	.tp_init = notify_init,
	.tp_dealloc = notify_dealloc,
	.tp_repr = notify_repr,
	.tp_richcompare = notify_richcompare,
	.tp_getset = notify_getset,
};

/* ---- TransferEngine -------------------------------------------------------------------- */

struct engine_obj {
	PyObject ob_base;	/* PyObject_HEAD */
	struct mc_te *te;	/* NULL until initialize() succeeds; then fixed */
	int64_t timeout_ns;	/* MC_TRANSFER_TIMEOUT, read by the constructor */
	PyObject *deadlines;	/* dict: async batch id -> deadline (monotonic ns) */
	struct managed managed; /* allocate_managed_buffer's pools */
};

static PyTypeObject EngineType;
static PyTypeObject InnerType;

/* Sync calls wait MC_TRANSFER_TIMEOUT seconds plus one nanosecond per byte. */
static int64_t wait_ms(const struct engine_obj *e, uint64_t bytes)
{
	return (e->timeout_ns + (int64_t)(bytes > INT64_MAX / 2 ? INT64_MAX / 2 : bytes)) /
		       1000000 +
	       1;
}

static PyObject *engine_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	struct engine_obj *e = (struct engine_obj *)type->tp_alloc(type, 0);
	if (!e)
		return NULL;
	e->te = NULL;
	e->deadlines = PyDict_New();
	if (!e->deadlines) {
		Py_DECREF(e);
		return NULL;
	}
	memset(&e->managed, 0, sizeof(e->managed));
	pthread_mutex_init(&e->managed.lock, NULL);
	e->timeout_ns = 30LL * 1000000000;
	return (PyObject *)e;
}

static int engine_init(PyObject *self, PyObject *args, PyObject *kw)
{
	struct engine_obj *e = (struct engine_obj *)self;
	const char *env = getenv("MC_TRANSFER_TIMEOUT");
	long long secs = 30;

	if (PyTuple_GET_SIZE(args) || (kw && PyDict_GET_SIZE(kw))) {
		PyErr_SetString(PyExc_TypeError, "TransferEngine() takes no arguments");
		return -1;
	}
	if (env && *env) {
		char *end;
		long long v = strtoll(env, &end, 10);
		if (*end == '\0')
			secs = v < 5 ? 5 : v; /* upstream's floor */
	}
	if (secs > 100LL * 365 * 24 * 3600)
		secs = 100LL * 365 * 24 * 3600;
	e->timeout_ns = secs * 1000000000;
	return 0;
}

static void engine_dealloc(PyObject *self)
{
	PyThreadState *ts;
	struct engine_obj *e = (struct engine_obj *)self;
	struct mc_te *te = e->te;

	e->te = NULL;
	ts = PyEval_SaveThread();
	mc_te_free(te); /* joins the engine's threads: nothing reaches the pools after */
	managed_release(&e->managed);
	PyEval_RestoreThread(ts);
	Py_CLEAR(e->deadlines);
	Py_TYPE(self)->tp_free(self);
}

#define ENGINE(self) (((struct engine_obj *)(self))->te)

/* initialize_ext(local_hostname, metadata_server, protocol, device_name, metadata_type) */
static PyObject *do_initialize(struct engine_obj *e, const char *fname, PyObject *const *args,
			       Py_ssize_t nargs, PyObject *kwnames, bool ext)
{
	PyThreadState *ts;
	const struct argspec spec = {fname, NULL, ext ? 5 : 4, ext ? 5 : 4};
	PyObject *a[MAX_ARGS];
	const char *host, *meta, *proto, *device, *mtype = "etcd";
	char *uri = NULL;
	struct mc_te_params p = {0};
	struct mc_te *te = NULL;
	mc_status rc;

	if (parse_args(&spec, args, nargs, kwnames, a) < 0 ||
	    arg_str(a[0], fname, "local_hostname", &host) < 0 ||
	    arg_str(a[1], fname, "metadata_server", &meta) < 0 ||
	    arg_str(a[2], fname, "protocol", &proto) < 0 ||
	    arg_str(a[3], fname, "device_name", &device) < 0 ||
	    (ext && arg_str(a[4], fname, "metadata_type", &mtype) < 0))
		return NULL;
	if (e->te)
		return PyLong_FromLong(-1); /* one engine per object */
	/* Upstream's protocol argument does not select the transport: the engine
	 * auto-discovers RDMA and otherwise installs TCP.  "tcp" asks for TCP;
	 * everything else means "the best there is", which here falls back to
	 * TCP ("xgmi" is refused, as upstream does). */
	if (strcmp(proto, "xgmi") == 0)
		return PyLong_FromLong(-1);
	/* A bare "host:port" means etcd (initialize) or metadata_type (initialize_ext). */
	if (*meta && strcmp(meta, "P2PHANDSHAKE") != 0 && !strstr(meta, "://")) {
		size_t len = strlen(mtype) + strlen(meta) + 4;
		uri = PyMem_RawMalloc(len);
		if (!uri)
			return PyErr_NoMemory();
		snprintf(uri, len, "%s://%s", mtype, meta);
	}
	/* device_name: the NIC allow-list; TCP publishes their interfaces as paths */
	p.field_mask = MC_TE_PARAM_METADATA | MC_TE_PARAM_LOCAL_NAME | MC_TE_PARAM_PROTOCOL |
		       MC_TE_PARAM_DEVICES;
	p.devices = device;
	p.metadata_uri = uri ? uri : meta;
	p.local_name = host;
	p.protocol = strcmp(proto, "tcp") == 0 ? "tcp" : "rdma";

	ts = PyEval_SaveThread();
	rc = mc_te_new(&p, &te);
	PyEval_RestoreThread(ts);
	PyMem_RawFree(uri);
	if (rc != MC_OK)
		return PyLong_FromLong(-1);
	if (e->te) { /* another thread won the race */
		ts = PyEval_SaveThread();
		mc_te_free(te);
		PyEval_RestoreThread(ts);
		return PyLong_FromLong(-1);
	}
	e->te = te;
	return PyLong_FromLong(0);
}

static PyObject *engine_initialize(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
				   PyObject *kwnames)
{
	return do_initialize((struct engine_obj *)self, "initialize", args, nargs, kwnames, false);
}

static PyObject *engine_initialize_ext(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
				       PyObject *kwnames)
{
	return do_initialize((struct engine_obj *)self, "initialize_ext", args, nargs, kwnames,
			     true);
}

static PyObject *engine_get_rpc_port(PyObject *self, PyObject *unused)
{
	struct mc_te *te = ENGINE(self);
	return PyLong_FromLong(te ? (long)mc_te_rpc_port(te) : -1);
}

/* set_checksum(on): per-transfer checksums for batches made from now on. */
static PyObject *engine_set_checksum(PyObject *self, PyObject *arg)
{
	struct mc_te *te = ENGINE(self);
	int on = PyObject_IsTrue(arg);
	if (on < 0)
		return NULL;
	if (!te)
		return PyLong_FromLong(-1);
	mc_te_set_checksum(te, on != 0);
	return PyLong_FromLong(0);
}

static PyObject *engine_get_checksum(PyObject *self, PyObject *unused)
{
	struct mc_te *te = ENGINE(self);
	return PyBool_FromLong(te && mc_te_checksum(te));
}

/* ---- registration ---- */

static const char *const kw_register[] = {"buffer_addr", "capacity", "location", "read_only"};
static const char *const kw_unregister[] = {"buffer_addr"};
static const char *const kw_batch_register[] = {"buffer_addresses", "capacities", "location"};
static const char *const kw_batch_unregister[] = {"buffer_addresses"};

static PyObject *engine_register_memory(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
					PyObject *kwnames)
{
	PyThreadState *ts;
	const struct argspec spec = {"register_memory", kw_register, 2, 4};
	struct mc_te *te = ENGINE(self);
	PyObject *a[MAX_ARGS];
	uint64_t addr, len;
	const char *loc = "*";
	bool ro;
	mc_status rc;

	if (parse_args(&spec, args, nargs, kwnames, a) < 0 ||
	    arg_u64(a[0], spec.fname, "buffer_addr", &addr) < 0 ||
	    arg_u64(a[1], spec.fname, "capacity", &len) < 0 ||
	    (a[2] && arg_str(a[2], spec.fname, "location", &loc) < 0) ||
	    arg_bool(a[3], spec.fname, "read_only", false, &ro) < 0)
		return NULL;
	if (!te)
		return PyLong_FromLong(-1);
	ts = PyEval_SaveThread();
	rc = mc_te_register_flags(te, (void *)(uintptr_t)addr, (size_t)len, loc, true,
				  ro ? MC_TE_REGISTER_READ_ONLY : 0);
	PyEval_RestoreThread(ts);
	return PyLong_FromLong(upstream_err(rc));
}

static PyObject *engine_unregister_memory(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
					  PyObject *kwnames)
{
	PyThreadState *ts;
	const struct argspec spec = {"unregister_memory", kw_unregister, 1, 1};
	struct mc_te *te = ENGINE(self);
	PyObject *a[MAX_ARGS];
	uint64_t addr;
	mc_status rc;

	if (parse_args(&spec, args, nargs, kwnames, a) < 0 ||
	    arg_u64(a[0], spec.fname, "buffer_addr", &addr) < 0)
		return NULL;
	if (!te)
		return PyLong_FromLong(-1);
	ts = PyEval_SaveThread();
	rc = mc_te_deregister(te, (void *)(uintptr_t)addr);
	PyEval_RestoreThread(ts);
	return PyLong_FromLong(upstream_err(rc));
}

/* A list of ints into a PyMem_Raw array (n written to *n_out); NULL on error. */
static uint64_t *u64_list(PyObject *o, const char *fname, const char *what, Py_ssize_t *n_out)
{
	PyObject *seq = arg_seq(o, fname, what, "ints");
	uint64_t *v;
	Py_ssize_t n;

	if (!seq)
		return NULL;
	n = PySequence_Fast_GET_SIZE(seq);
	v = PyMem_RawMalloc((size_t)(n ? n : 1) * sizeof(*v));
	if (!v) {
		Py_DECREF(seq);
		PyErr_NoMemory();
		return NULL;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		if (arg_u64(PySequence_Fast_GET_ITEM(seq, i), fname, what, &v[i]) < 0) {
			PyMem_RawFree(v);
			Py_DECREF(seq);
			return NULL;
		}
	}
	Py_DECREF(seq);
	*n_out = n;
	return v;
}

static PyObject *engine_batch_register_memory(PyObject *self, PyObject *const *args,
					      Py_ssize_t nargs, PyObject *kwnames)
{
	PyThreadState *ts;
	const struct argspec spec = {"batch_register_memory", kw_batch_register, 2, 3};
	struct mc_te *te = ENGINE(self);
	PyObject *a[MAX_ARGS];
	uint64_t *addrs = NULL, *lens = NULL;
	struct mc_te_buffer *bufs = NULL;
	Py_ssize_t n = 0, m = 0;
	const char *loc = "*";
	mc_status rc;
	PyObject *ret = NULL;

	if (parse_args(&spec, args, nargs, kwnames, a) < 0 ||
	    !(addrs = u64_list(a[0], spec.fname, "buffer_addresses", &n)) ||
	    !(lens = u64_list(a[1], spec.fname, "capacities", &m)) ||
	    (a[2] && arg_str(a[2], spec.fname, "location", &loc) < 0))
		goto out;
	if (!te || n != m) {
		ret = PyLong_FromLong(-1);
		goto out;
	}
	if (n == 0) {
		ret = PyLong_FromLong(0);
		goto out;
	}
	bufs = PyMem_RawMalloc((size_t)n * sizeof(*bufs));
	if (!bufs) {
		PyErr_NoMemory();
		goto out;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		bufs[i].addr = (void *)(uintptr_t)addrs[i];
		bufs[i].length = (size_t)lens[i];
	}
	ts = PyEval_SaveThread();
	rc = mc_te_register_batch(te, bufs, (size_t)n, loc);
	PyEval_RestoreThread(ts);
	ret = PyLong_FromLong(upstream_err(rc));
out:
	PyMem_RawFree(bufs);
	PyMem_RawFree(addrs);
	PyMem_RawFree(lens);
	return ret;
}

static PyObject *engine_batch_unregister_memory(PyObject *self, PyObject *const *args,
						Py_ssize_t nargs, PyObject *kwnames)
{
	PyThreadState *ts;
	const struct argspec spec = {"batch_unregister_memory", kw_batch_unregister, 1, 1};
	struct mc_te *te = ENGINE(self);
	PyObject *a[MAX_ARGS];
	uint64_t *addrs;
	void **ptrs;
	Py_ssize_t n = 0;
	mc_status rc;

	if (parse_args(&spec, args, nargs, kwnames, a) < 0 ||
	    !(addrs = u64_list(a[0], spec.fname, "buffer_addresses", &n)))
		return NULL;
	if (!te || n == 0) {
		PyMem_RawFree(addrs);
		return PyLong_FromLong(te ? 0 : -1);
	}
	ptrs = PyMem_RawMalloc((size_t)n * sizeof(*ptrs));
	if (!ptrs) {
		PyMem_RawFree(addrs);
		return PyErr_NoMemory();
	}
	for (Py_ssize_t i = 0; i < n; i++)
		ptrs[i] = (void *)(uintptr_t)addrs[i];
	ts = PyEval_SaveThread();
	rc = mc_te_deregister_batch(te, (void *const *)ptrs, (size_t)n);
	PyEval_RestoreThread(ts);
	PyMem_RawFree(ptrs);
	PyMem_RawFree(addrs);
	return PyLong_FromLong(upstream_err(rc));
}

/* ---- managed buffers ---- */

static const char *const kw_alloc[] = {"length"};
static const char *const kw_free[] = {"buffer_addr", "length"};

static PyObject *engine_allocate_managed_buffer(PyObject *self, PyObject *const *args,
						Py_ssize_t nargs, PyObject *kwnames)
{
	PyThreadState *ts;
	const struct argspec spec = {"allocate_managed_buffer", kw_alloc, 1, 1};
	struct engine_obj *e = (struct engine_obj *)self;
	PyObject *a[MAX_ARGS];
	uint64_t len;
	uintptr_t addr = 0;

	if (parse_args(&spec, args, nargs, kwnames, a) < 0 ||
	    arg_u64(a[0], spec.fname, "length", &len) < 0)
		return NULL;
	if (!e->te || len > SIZE_MAX / 2)
		return PyLong_FromLong(0);
	ts = PyEval_SaveThread();
	addr = managed_alloc(&e->managed, e->te, (size_t)len);
	/* fault the block in now, not under the first bytes a peer writes
	 * (a no-op with MC_STORE_PREFAULT=off; a refusal only leaves it lazy) */
	if (addr && len)
		(void)mc_te_host_prefault((void *)addr, (size_t)len);
	PyEval_RestoreThread(ts);
	return PyLong_FromUnsignedLongLong(addr);
}

static PyObject *engine_free_managed_buffer(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
					    PyObject *kwnames)
{
	PyThreadState *ts;
	const struct argspec spec = {"free_managed_buffer", kw_free, 2, 2};
	struct engine_obj *e = (struct engine_obj *)self;
	PyObject *a[MAX_ARGS];
	uint64_t addr, len;
	int rc;

	if (parse_args(&spec, args, nargs, kwnames, a) < 0 ||
	    arg_u64(a[0], spec.fname, "buffer_addr", &addr) < 0 ||
	    arg_u64(a[1], spec.fname, "length", &len) < 0)
		return NULL;
	if (!e->te)
		return PyLong_FromLong(-1);
	ts = PyEval_SaveThread();
	rc = managed_free(&e->managed, e->te, (uintptr_t)addr, (size_t)len);
	PyEval_RestoreThread(ts);
	return PyLong_FromLong(rc);
}

/* ---- raw memory helpers ---- */

/* Copies above this size run without the GIL. */
#define COPY_NOGIL_MIN (64u << 10)

static const char *const kw_write_bytes[] = {"dest_address", "src", "length"};
static const char *const kw_read_bytes[] = {"source_address", "length"};

static PyObject *engine_write_bytes_to_buffer(PyObject *self, PyObject *const *args,
					      Py_ssize_t nargs, PyObject *kwnames)
{
	PyThreadState *ts;
	const struct argspec spec = {"write_bytes_to_buffer", kw_write_bytes, 3, 3};
	PyObject *a[MAX_ARGS];
	uint64_t dest, len;
	Py_buffer view;
	const char *src;
	Py_ssize_t srclen;

	if (parse_args(&spec, args, nargs, kwnames, a) < 0 ||
	    arg_u64(a[0], spec.fname, "dest_address", &dest) < 0 ||
	    arg_u64(a[2], spec.fname, "length", &len) < 0)
		return NULL;
	/* upstream takes a char *, so a str (as UTF-8) is accepted besides bytes-likes */
	view.obj = NULL;
	if (PyUnicode_Check(a[1])) {
		src = PyUnicode_AsUTF8AndSize(a[1], &srclen);
		if (!src)
			return NULL;
	} else if (PyObject_GetBuffer(a[1], &view, PyBUF_SIMPLE) == 0) {
		src = view.buf;
		srclen = view.len;
	} else {
		PyErr_Clear();
		PyErr_Format(PyExc_TypeError,
			     "write_bytes_to_buffer(): src must be bytes-like or str, not %.100s",
			     Py_TYPE(a[1])->tp_name);
		return NULL;
	}
	if (len > (uint64_t)srclen) {
		if (view.obj)
			PyBuffer_Release(&view);
		PyErr_Format(PyExc_ValueError,
			     "write_bytes_to_buffer(): length %llu exceeds the source's %zd bytes",
			     (unsigned long long)len, srclen);
		return NULL;
	}
	if (len >= COPY_NOGIL_MIN) {
		ts = PyEval_SaveThread();
		memcpy((void *)(uintptr_t)dest, src, (size_t)len);
		PyEval_RestoreThread(ts);
	} else if (len) {
		memcpy((void *)(uintptr_t)dest, src, (size_t)len);
	}
	if (view.obj)
		PyBuffer_Release(&view);
	return PyLong_FromLong(0);
}

static PyObject *engine_read_bytes_from_buffer(PyObject *self, PyObject *const *args,
					       Py_ssize_t nargs, PyObject *kwnames)
{
	PyThreadState *ts;
	const struct argspec spec = {"read_bytes_from_buffer", kw_read_bytes, 2, 2};
	PyObject *a[MAX_ARGS], *out;
	uint64_t src, len;
	char *dst;

	if (parse_args(&spec, args, nargs, kwnames, a) < 0 ||
	    arg_u64(a[0], spec.fname, "source_address", &src) < 0 ||
	    arg_u64(a[1], spec.fname, "length", &len) < 0)
		return NULL;
	if (len > PY_SSIZE_T_MAX)
		return PyErr_NoMemory();
	out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
	if (!out)
		return NULL;
	dst = PyBytes_AS_STRING(out);
	if (len >= COPY_NOGIL_MIN) {
		ts = PyEval_SaveThread();
		memcpy(dst, (const void *)(uintptr_t)src, (size_t)len);
		PyEval_RestoreThread(ts);
	} else if (len) {
		memcpy(dst, (const void *)(uintptr_t)src, (size_t)len);
	}
	return out;
}

/* ---- segments ---- */

static const char *const kw_segment[] = {"segment_name"};

static PyObject *engine_get_first_buffer_address(PyObject *self, PyObject *const *args,
						 Py_ssize_t nargs, PyObject *kwnames)
{
	PyThreadState *ts;
	const struct argspec spec = {"get_first_buffer_address", kw_segment, 1, 1};
	struct mc_te *te = ENGINE(self);
	PyObject *a[MAX_ARGS];
	const char *name;
	uint64_t addr = 0, len = 0;
	mc_segment_id seg;
	mc_status rc;

	if (parse_args(&spec, args, nargs, kwnames, a) < 0 ||
	    arg_str(a[0], spec.fname, "segment_name", &name) < 0)
		return NULL;
	if (!te)
		return PyLong_FromLong(0);
	ts = PyEval_SaveThread();
	rc = mc_te_open_segment(te, name, &seg);
	if (rc == MC_OK)
		rc = mc_te_segment_buffer(te, seg, 0, &addr, &len);
	PyEval_RestoreThread(ts);
	return PyLong_FromUnsignedLongLong(rc == MC_OK ? addr : 0);
}

static PyObject *engine_warmup_efa_segment(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
					   PyObject *kwnames)
{
	const struct argspec spec = {"warmup_efa_segment", kw_segment, 1, 1};
	PyObject *a[MAX_ARGS];
	const char *name;

	if (parse_args(&spec, args, nargs, kwnames, a) < 0 ||
	    arg_str(a[0], spec.fname, "segment_name", &name) < 0)
		return NULL;
	return PyLong_FromLong(0); /* EFA pre-connect; nothing to warm up over TCP */
}

/* ---- transfers ---- */

/* Open the peer, submit (with an optional notify), wait, discard.  GIL released. */
static int xfer_sync(struct mc_te *te, const char *peer, struct mc_xfer_req *reqs, size_t n,
		     const char *nname, const char *nmsg, int64_t timeout_ms)
{
	mc_segment_id seg;
	mc_batch_id id;
	mc_status rc;

	if (mc_te_open_segment(te, peer, &seg) != MC_OK)
		return -1;
	for (size_t i = 0; i < n; i++)
		reqs[i].target_id = seg;
	if (mc_te_batch_new(te, n, &id) != MC_OK)
		return -1;
	if (nname)
		rc = mc_te_submit_with_notify(te, id, reqs, n, nname, nmsg);
	else
		rc = mc_te_submit(te, id, reqs, n);
	if (rc == MC_OK)
		rc = mc_te_batch_wait(te, id, timeout_ms, NULL);
	/* on timeout the tasks keep running; the batch goes when they end */
	mc_te_batch_discard(te, id);
	/* with set_checksum(True): -801, or -1012 (the peer cannot check) */
	if (rc == MC_ERR_CHECKSUM_MISMATCH || (rc == MC_ERR_NOT_SUPPORTED && mc_te_checksum(te)))
		return rc;
	return rc == MC_OK ? 0 : -1;
}

/* Open and submit; the batch id, or 0.  GIL released. */
static mc_batch_id xfer_submit(struct mc_te *te, const char *peer, struct mc_xfer_req *reqs,
			       size_t n)
{
	mc_segment_id seg;
	mc_batch_id id;

	if (mc_te_open_segment(te, peer, &seg) != MC_OK)
		return 0;
	for (size_t i = 0; i < n; i++)
		reqs[i].target_id = seg;
	if (mc_te_batch_new(te, n, &id) != MC_OK)
		return 0;
	if (mc_te_submit(te, id, reqs, n) != MC_OK) {
		mc_te_batch_discard(te, id);
		return 0;
	}
	return id;
}

static int parse_opcode(PyObject *o, const char *fname, int *out)
{
	long v;
	if (arg_long(o, fname, "opcode", &v) < 0)
		return -1;
	if (v != MC_OP_READ && v != MC_OP_WRITE) {
		PyErr_Format(PyExc_ValueError, "%s(): opcode must be TransferOpcode.Read or .Write",
			     fname);
		return -1;
	}
	*out = (int)v;
	return 0;
}

/* notify: None or a TransferNotify; on success the name and msg pointers are borrowed from it. */
static int parse_notify(PyObject *o, const char *fname, const char **name, const char **msg)
{
	struct notify_obj *n;
	*name = *msg = NULL;
	if (!o || o == Py_None)
		return 0;
	if (!PyObject_TypeCheck(o, &NotifyType)) {
		PyErr_Format(PyExc_TypeError,
			     "%s(): notify must be a TransferNotify or None, not %.100s", fname,
			     Py_TYPE(o)->tp_name);
		return -1;
	}
	n = (struct notify_obj *)o;
	if (arg_str(n->name, fname, "notify.name", name) < 0 ||
	    arg_str(n->msg, fname, "notify.msg", msg) < 0)
		return -1;
	return 0;
}

/* Record when an async batch times out (GIL held). */
static void remember_deadline(struct engine_obj *e, mc_batch_id id, uint64_t bytes)
{
	PyObject *k = PyLong_FromUnsignedLongLong(id);
	PyObject *v = PyLong_FromLongLong(now_ns() + e->timeout_ns +
					  (int64_t)(bytes > INT64_MAX / 4 ? INT64_MAX / 4 : bytes));
	if (!k || !v || PyDict_SetItem(e->deadlines, k, v) < 0)
		PyErr_Clear(); /* without a record the default timeout applies */
	Py_XDECREF(k);
	Py_XDECREF(v);
}

/* Take (and forget) a batch's deadline (GIL held). */
static int64_t take_deadline(struct engine_obj *e, mc_batch_id id, bool forget)
{
	PyObject *k = PyLong_FromUnsignedLongLong(id), *v;
	int64_t d = now_ns() + e->timeout_ns;

	if (!k) {
		PyErr_Clear();
		return d;
	}
	v = PyDict_GetItemWithError(e->deadlines, k);
	if (v) {
		d = PyLong_AsLongLong(v);
		if (forget && PyDict_DelItem(e->deadlines, k) < 0)
			PyErr_Clear();
	}
	if (PyErr_Occurred())
		PyErr_Clear();
	Py_DECREF(k);
	return d;
}

/* Single-request calls:
 *   transfer_sync_write / transfer_sync_read / transfer_submit_write
 *     (target_hostname, buffer, peer_buffer_address, length, transport_hint="")
 *   transfer_sync(target_hostname, buffer, peer_buffer_address, length, opcode,
 *                 notify=None, transport_hint="") */
enum one_kind { ONE_WRITE, ONE_READ, ONE_GENERIC, ONE_SUBMIT_WRITE };

static const char *const kw_one[] = {"target_hostname", "buffer", "peer_buffer_address", "length",
				     "transport_hint"};
static const char *const kw_one_op[] = {"target_hostname", "buffer", "peer_buffer_address",
					"length",	   "opcode", "notify",
					"transport_hint"};

static PyObject *transfer_one(PyObject *self, const char *fname, enum one_kind kind,
			      PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
	PyThreadState *ts;
	const struct argspec spec_one = {fname, kw_one, 4, 5};
	const struct argspec spec_op = {fname, kw_one_op, 5, 7};
	struct engine_obj *e = (struct engine_obj *)self;
	struct mc_te *te = e->te;
	PyObject *a[MAX_ARGS];
	const char *peer, *hint, *nname = NULL, *nmsg = NULL;
	uint64_t buf, raddr, len;
	struct mc_xfer_req r;
	int opcode = kind == ONE_READ ? MC_OP_READ : MC_OP_WRITE, rc;
	PyObject *hint_obj;

	if (parse_args(kind == ONE_GENERIC ? &spec_op : &spec_one, args, nargs, kwnames, a) < 0 ||
	    arg_str(a[0], fname, "target_hostname", &peer) < 0 ||
	    arg_u64(a[1], fname, "buffer", &buf) < 0 ||
	    arg_u64(a[2], fname, "peer_buffer_address", &raddr) < 0 ||
	    arg_u64(a[3], fname, "length", &len) < 0)
		return NULL;
	if (kind == ONE_GENERIC) {
		if (parse_opcode(a[4], fname, &opcode) < 0 ||
		    parse_notify(a[5], fname, &nname, &nmsg) < 0)
			return NULL;
		hint_obj = a[6];
	} else {
		hint_obj = a[4];
	}
	/* transport_hint only means something in TENT builds; checked, then ignored */
	if (hint_obj && arg_str(hint_obj, fname, "transport_hint", &hint) < 0)
		return NULL;
	if (!te)
		return PyLong_FromLong(kind == ONE_SUBMIT_WRITE ? 0 : -1);

	r.opcode = opcode;
	r.source = (void *)(uintptr_t)buf;
	r.target_id = 0;
	r.target_offset = raddr;
	r.length = len;
	if (kind == ONE_SUBMIT_WRITE) {
		mc_batch_id id;
		ts = PyEval_SaveThread();
		id = xfer_submit(te, peer, &r, 1);
		PyEval_RestoreThread(ts);
		if (id)
			remember_deadline(e, id, len);
		return PyLong_FromUnsignedLongLong(id);
	}
	{
		int64_t tmo = wait_ms(e, len);
		ts = PyEval_SaveThread();
		rc = xfer_sync(te, peer, &r, 1, nname, nmsg, tmo);
		PyEval_RestoreThread(ts);
	}
	return PyLong_FromLong(rc);
}

static PyObject *engine_transfer_sync_write(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
					    PyObject *kwnames)
{
	return transfer_one(self, "transfer_sync_write", ONE_WRITE, args, nargs, kwnames);
}

static PyObject *engine_transfer_sync_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
					   PyObject *kwnames)
{
	return transfer_one(self, "transfer_sync_read", ONE_READ, args, nargs, kwnames);
}

static PyObject *engine_transfer_sync(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
				      PyObject *kwnames)
{
	return transfer_one(self, "transfer_sync", ONE_GENERIC, args, nargs, kwnames);
}

static PyObject *engine_transfer_submit_write(PyObject *self, PyObject *const *args,
					      Py_ssize_t nargs, PyObject *kwnames)
{
	return transfer_one(self, "transfer_submit_write", ONE_SUBMIT_WRITE, args, nargs, kwnames);
}

/* Batch calls:
 *   batch_transfer_sync_write / _read, batch_transfer_async_write / _read
 *     (target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint="")
 *   batch_transfer_sync(..., lengths, opcode, notify=None, transport_hint="")
 *   batch_transfer_async(..., lengths, opcode, transport_hint="") */
enum batch_kind { B_SYNC, B_ASYNC };

static const char *const kw_batch[] = {"target_hostname", "buffers", "peer_buffer_addresses",
				       "lengths", "transport_hint"};
static const char *const kw_batch_op[] = {"target_hostname", "buffers", "peer_buffer_addresses",
					  "lengths",	     "opcode",	"notify",
					  "transport_hint"};
static const char *const kw_batch_async_op[] = {
	"target_hostname", "buffers", "peer_buffer_addresses",
	"lengths",	   "opcode",  "transport_hint"};

/* Fill reqs[i] from the three lists (GIL held).  Returns n, or -1 with an
 * exception set, or -2 when the lists differ in length (upstream: -1/0). */
static Py_ssize_t build_reqs(const char *fname, PyObject *lbuf, PyObject *lraddr, PyObject *llen,
			     int opcode, struct mc_xfer_req **out, uint64_t *bytes_out)
{
	PyObject *s0 = NULL, *s1 = NULL, *s2 = NULL;
	struct mc_xfer_req *reqs = NULL;
	Py_ssize_t n = -1;
	uint64_t bytes = 0;

	if (!(s0 = arg_seq(lbuf, fname, "buffers", "ints")) ||
	    !(s1 = arg_seq(lraddr, fname, "peer_buffer_addresses", "ints")) ||
	    !(s2 = arg_seq(llen, fname, "lengths", "ints")))
		goto out;
	n = PySequence_Fast_GET_SIZE(s0);
	if (PySequence_Fast_GET_SIZE(s1) != n || PySequence_Fast_GET_SIZE(s2) != n) {
		n = -2;
		goto out;
	}
	reqs = PyMem_RawMalloc((size_t)(n ? n : 1) * sizeof(*reqs));
	if (!reqs) {
		PyErr_NoMemory();
		n = -1;
		goto out;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		uint64_t b, r, l;
		if (arg_u64(PySequence_Fast_GET_ITEM(s0, i), fname, "buffers", &b) < 0 ||
		    arg_u64(PySequence_Fast_GET_ITEM(s1, i), fname, "peer_buffer_addresses", &r) <
			    0 ||
		    arg_u64(PySequence_Fast_GET_ITEM(s2, i), fname, "lengths", &l) < 0) {
			PyMem_RawFree(reqs);
			reqs = NULL;
			n = -1;
			goto out;
		}
		reqs[i].opcode = opcode;
		reqs[i].source = (void *)(uintptr_t)b;
		reqs[i].target_id = 0;
		reqs[i].target_offset = r;
		reqs[i].length = l;
		bytes += l;
	}
	*out = reqs;
	*bytes_out = bytes;
out:
	Py_XDECREF(s0);
	Py_XDECREF(s1);
	Py_XDECREF(s2);
	return n;
}

static PyObject *transfer_batch(PyObject *self, const char *fname, enum batch_kind kind,
				int fixed_opcode, PyObject *const *args, Py_ssize_t nargs,
				PyObject *kwnames)
{
	PyThreadState *ts;
	const struct argspec spec_plain = {fname, kw_batch, 4, 5};
	const struct argspec spec_sync_op = {fname, kw_batch_op, 5, 7};
	const struct argspec spec_async_op = {fname, kw_batch_async_op, 5, 6};
	const struct argspec *spec;
	struct engine_obj *e = (struct engine_obj *)self;
	struct mc_te *te = e->te;
	PyObject *a[MAX_ARGS], *hint_obj;
	const char *peer, *hint, *nname = NULL, *nmsg = NULL;
	struct mc_xfer_req *reqs = NULL;
	uint64_t bytes = 0;
	int opcode = fixed_opcode;
	long fail = kind == B_ASYNC ? 0 : -1;
	Py_ssize_t n;

	if (fixed_opcode >= 0)
		spec = &spec_plain;
	else
		spec = kind == B_SYNC ? &spec_sync_op : &spec_async_op;
	if (parse_args(spec, args, nargs, kwnames, a) < 0 ||
	    arg_str(a[0], fname, "target_hostname", &peer) < 0)
		return NULL;
	if (fixed_opcode >= 0) {
		hint_obj = a[4];
	} else if (kind == B_SYNC) {
		if (parse_opcode(a[4], fname, &opcode) < 0 ||
		    parse_notify(a[5], fname, &nname, &nmsg) < 0)
			return NULL;
		hint_obj = a[6];
	} else {
		if (parse_opcode(a[4], fname, &opcode) < 0)
			return NULL;
		hint_obj = a[5];
	}
	if (hint_obj && arg_str(hint_obj, fname, "transport_hint", &hint) < 0)
		return NULL;
	n = build_reqs(fname, a[1], a[2], a[3], opcode, &reqs, &bytes);
	if (n == -1)
		return NULL;
	if (n == -2 || !te) {
		PyMem_RawFree(reqs);
		return PyLong_FromLong(fail);
	}
	if (n == 0) { /* nothing to move; an async caller gets no id to wait on */
		PyMem_RawFree(reqs);
		return PyLong_FromLong(0);
	}
	if (kind == B_ASYNC) {
		mc_batch_id id;
		ts = PyEval_SaveThread();
		id = xfer_submit(te, peer, reqs, (size_t)n);
		PyEval_RestoreThread(ts);
		PyMem_RawFree(reqs);
		if (id)
			remember_deadline(e, id, bytes);
		return PyLong_FromUnsignedLongLong(id);
	} else {
		int64_t tmo = wait_ms(e, bytes);
		int rc;
		ts = PyEval_SaveThread();
		rc = xfer_sync(te, peer, reqs, (size_t)n, nname, nmsg, tmo);
		PyEval_RestoreThread(ts);
		PyMem_RawFree(reqs);
		return PyLong_FromLong(rc);
	}
}

#define BATCH_METHOD(fn, kind, op)                                                            \
	static PyObject *engine_##fn(PyObject *self, PyObject *const *args, Py_ssize_t nargs, \
				     PyObject *kwnames)                                       \
	{                                                                                     \
		return transfer_batch(self, #fn, (kind), (op), args, nargs, kwnames);         \
	}

BATCH_METHOD(batch_transfer_sync_write, B_SYNC, MC_OP_WRITE)
BATCH_METHOD(batch_transfer_sync_read, B_SYNC, MC_OP_READ)
BATCH_METHOD(batch_transfer_sync, B_SYNC, -1)
BATCH_METHOD(batch_transfer_async_write, B_ASYNC, MC_OP_WRITE)
BATCH_METHOD(batch_transfer_async_read, B_ASYNC, MC_OP_READ)
BATCH_METHOD(batch_transfer_async, B_ASYNC, -1)

static const char *const kw_batch_ids[] = {"batch_ids"};
static const char *const kw_batch_id[] = {"batch_id"};

/* Wait for every listed batch (freeing each); 0 if all completed, else -1
 * with the rest freed as soon as their tasks end. */
static PyObject *engine_get_batch_transfer_status(PyObject *self, PyObject *const *args,
						  Py_ssize_t nargs, PyObject *kwnames)
{
	PyThreadState *ts;
	const struct argspec spec = {"get_batch_transfer_status", kw_batch_ids, 1, 1};
	struct engine_obj *e = (struct engine_obj *)self;
	struct mc_te *te = e->te;
	PyObject *a[MAX_ARGS];
	uint64_t *ids;
	int64_t *deadlines;
	Py_ssize_t n = 0;
	bool failed = false;

	if (parse_args(&spec, args, nargs, kwnames, a) < 0 ||
	    !(ids = u64_list(a[0], spec.fname, "batch_ids", &n)))
		return NULL;
	if (!te) {
		PyMem_RawFree(ids);
		return PyLong_FromLong(n ? -1 : 0);
	}
	deadlines = PyMem_RawMalloc((size_t)(n ? n : 1) * sizeof(*deadlines));
	if (!deadlines) {
		PyMem_RawFree(ids);
		return PyErr_NoMemory();
	}
	for (Py_ssize_t i = 0; i < n; i++)
		deadlines[i] = take_deadline(e, ids[i], true);
	ts = PyEval_SaveThread();
	for (Py_ssize_t i = 0; i < n; i++) {
		if (!failed) {
			int64_t left = deadlines[i] - now_ns();
			mc_status rc =
				mc_te_batch_wait(te, ids[i], left > 0 ? left / 1000000 : 0, NULL);
			if (rc != MC_OK)
				failed = true;
		}
		mc_te_batch_discard(te, ids[i]);
	}
	PyEval_RestoreThread(ts);
	PyMem_RawFree(ids);
	PyMem_RawFree(deadlines);
	return PyLong_FromLong(failed ? -1 : 0);
}

/* 1 completed (freed), 0 in progress, -1 failed (freed), -2 timed out (not freed). */
static PyObject *engine_transfer_check_status(PyObject *self, PyObject *const *args,
					      Py_ssize_t nargs, PyObject *kwnames)
{
	PyThreadState *ts;
	const struct argspec spec = {"transfer_check_status", kw_batch_id, 1, 1};
	struct engine_obj *e = (struct engine_obj *)self;
	struct mc_te *te = e->te;
	PyObject *a[MAX_ARGS];
	struct mc_xfer_status st;
	uint64_t id;
	mc_status rc;
	int ret;

	if (parse_args(&spec, args, nargs, kwnames, a) < 0 ||
	    arg_u64(a[0], spec.fname, "batch_id", &id) < 0)
		return NULL;
	if (!te)
		return PyLong_FromLong(-1);
	ts = PyEval_SaveThread();
	rc = mc_te_batch_status(te, id, &st);
	PyEval_RestoreThread(ts);
	if (rc != MC_OK)
		return PyLong_FromLong(-1); /* unknown or already freed */
	if (st.state == MC_XFER_COMPLETED || st.state == MC_XFER_FAILED) {
		ret = st.state == MC_XFER_COMPLETED ? 1 : -1;
		take_deadline(e, id, true);
		ts = PyEval_SaveThread();
		mc_te_batch_discard(te, id);
		PyEval_RestoreThread(ts);
		return PyLong_FromLong(ret);
	}
	return PyLong_FromLong(now_ns() > take_deadline(e, id, false) ? -2 : 0);
}

/* ---- notifications and probes ---- */

static PyObject *new_notify(const char *name, const char *msg)
{
	struct notify_obj *n = PyObject_New(struct notify_obj, &NotifyType);
	if (!n)
		return NULL;
	n->name = PyUnicode_DecodeUTF8(name, (Py_ssize_t)strlen(name), "surrogateescape");
	n->msg = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "surrogateescape");
	if (!n->name || !n->msg) {
		Py_DECREF(n);
		return NULL;
	}
	return (PyObject *)n;
}

static PyObject *engine_get_notifies(PyObject *self, PyObject *unused)
{
	struct mc_te *te = ENGINE(self);
	struct mc_te_notify *list = NULL;
	size_t count = 0;
	PyObject *out = PyList_New(0);

	if (!out || !te)
		return out;
	if (mc_te_notify_recv(te, &list, &count) != MC_OK)
		return out;
	for (size_t i = 0; i < count; i++) {
		PyObject *n = new_notify(list[i].name ? list[i].name : "",
					 list[i].msg ? list[i].msg : "");
		if (!n || PyList_Append(out, n) < 0) {
			Py_XDECREF(n);
			Py_CLEAR(out);
			break;
		}
		Py_DECREF(n);
	}
	mc_te_notify_free(list, count);
	return out;
}

static const char *const kw_probe[] = {"peer_server_name"};

static PyObject *engine_send_probe(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
				   PyObject *kwnames)
{
	PyThreadState *ts;
	const struct argspec spec = {"send_probe", kw_probe, 1, 1};
	struct mc_te *te = ENGINE(self);
	PyObject *a[MAX_ARGS];
	const char *peer;
	mc_status rc;

	if (parse_args(&spec, args, nargs, kwnames, a) < 0 ||
	    arg_str(a[0], spec.fname, "peer_server_name", &peer) < 0)
		return NULL;
	if (!te)
		return PyLong_FromLong(-1);
	ts = PyEval_SaveThread();
	rc = mc_te_probe(te, peer);
	PyEval_RestoreThread(ts);
	return PyLong_FromLong(rc == MC_OK ? 0 : -1);
}

/* ---- introspection ---- */

static const char *const kw_topology[] = {"device_name"};

static PyObject *engine_get_local_topology(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
					   PyObject *kwnames)
{
	const struct argspec spec = {"get_local_topology", kw_topology, 0, 1};
	PyObject *a[MAX_ARGS];
	const char *dev;

	if (parse_args(&spec, args, nargs, kwnames, a) < 0 ||
	    (a[0] && a[0] != Py_None && arg_str(a[0], spec.fname, "device_name", &dev) < 0))
		return NULL;
	/* upstream: {"cpu:N": [[preferred NICs], [other NICs]], ...}; TCP has no NICs */
	return PyUnicode_FromString("{}");
}

struct inner_obj {
	PyObject ob_base; /* PyObject_HEAD */
	PyObject *owner;  /* the TransferEngine, kept alive */
	struct mc_te *te;
};

static PyObject *engine_get_engine(PyObject *self, PyObject *unused)
{
	struct mc_te *te = ENGINE(self);
	struct inner_obj *in;
	if (!te)
		Py_RETURN_NONE;
	in = PyObject_New(struct inner_obj, &InnerType);
	if (!in)
		return NULL;
	in->owner = Py_NewRef(self);
	in->te = te;
	return (PyObject *)in;
}

static PyObject *engine_get_engine_ptr(PyObject *self, PyObject *unused)
{
	return PyLong_FromVoidPtr(ENGINE(self));
}

#define FASTKW(fn) (PyCFunction)(void (*)(void))(fn), METH_FASTCALL | METH_KEYWORDS

/* The *_on_cuda calls are written in Python (mooncake/_engine_extra.py):
 * they wait for the CUDA stream, then run the synchronous transfer. */
#define PYFWD(name)                                                                             \
	static PyObject *engine_##name(PyObject *self, PyObject *const *args, Py_ssize_t nargs, \
				       PyObject *kwnames)                                       \
	{                                                                                       \
		return py_forward("mooncake._engine_extra", #name, self, args, nargs, kwnames); \
	}
PYFWD(transfer_write_on_cuda)
PYFWD(transfer_read_on_cuda)
PYFWD(batch_transfer_write_on_cuda)
PYFWD(batch_transfer_read_on_cuda)

static PyMethodDef engine_methods[] = {
	{"initialize", FASTKW(engine_initialize),
	 "initialize(local_hostname, metadata_server, protocol, device_name, /) -> int\n\n"
	 "Create the engine.  metadata_server: 'P2PHANDSHAKE', 'http://host:port/metadata',\n"
	 "or a bare 'host:port' (etcd).  In P2P mode only the host part of local_hostname\n"
	 "is used and peers address this engine as 'host:get_rpc_port()'.  protocol 'tcp'\n"
	 "asks for TCP; any other value (e.g. 'rdma') uses the best transport available,\n"
	 "which falls back to TCP.  device_name (a NIC allow-list): with two or more\n"
	 "NICs, TCP publishes their interfaces' addresses as paths (multi-path).\n"
	 "0 on success, -1 on failure (also when already initialized)."},
	{"initialize_ext", FASTKW(engine_initialize_ext),
	 "initialize_ext(local_hostname, metadata_server, protocol, device_name, metadata_type, /)"
	 " -> int\n\nAs initialize(); a metadata_server without '://' is prefixed with "
	 "metadata_type + '://'."},
	{"get_rpc_port", engine_get_rpc_port, METH_NOARGS,
	 "get_rpc_port() -> int: the handshake/RPC port (-1 before initialize)."},
	{"set_checksum", engine_set_checksum, METH_O,
	 "set_checksum(on, /) -> int\n\nPer-transfer XXH3-64 checksums (default: "
	 "MC_TE_CHECKSUM, off) for transfers\nsubmitted from now on; a mismatch fails a "
	 "synchronous transfer with -801, a peer\nthat cannot check with -1012.  0, or -1 "
	 "before initialize."},
	{"get_checksum", engine_get_checksum, METH_NOARGS,
	 "get_checksum() -> bool: whether new transfers are checksummed."},
	{"register_memory", FASTKW(engine_register_memory),
	 "register_memory(buffer_addr, capacity, location='*', read_only=False) -> int\n\n"
	 "Register [buffer_addr, buffer_addr+capacity) for remote access; 0 or upstream's "
	 "negative ERR_* code (-7 overlap, -1 invalid).  read_only: peers may read it but a\n"
	 "remote write is refused (and it cannot be a local read's destination)."},
	{"unregister_memory", FASTKW(engine_unregister_memory),
	 "unregister_memory(buffer_addr) -> int: 0, or negative (-3 if not registered)."},
	{"batch_register_memory", FASTKW(engine_batch_register_memory),
	 "batch_register_memory(buffer_addresses, capacities, location='*') -> int\n\n"
	 "All or nothing; 0 or negative."},
	{"batch_unregister_memory", FASTKW(engine_batch_unregister_memory),
	 "batch_unregister_memory(buffer_addresses) -> int: 0 or negative (best effort)."},
	{"allocate_managed_buffer", FASTKW(engine_allocate_managed_buffer),
	 "allocate_managed_buffer(length) -> int\n\n"
	 "Address of a registered block of at least length bytes (size classes 8 KiB..256 MiB\n"
	 "from 2 GiB registered pools; larger sizes get their own registered mapping); 0 on\n"
	 "failure."},
	{"free_managed_buffer", FASTKW(engine_free_managed_buffer),
	 "free_managed_buffer(buffer_addr, length) -> int\n\n"
	 "Give a block back; length must be the length it was allocated with.  0, or -1 for\n"
	 "an address that is not a managed block of that size."},
	{"write_bytes_to_buffer", FASTKW(engine_write_bytes_to_buffer),
	 "write_bytes_to_buffer(dest_address, src, length) -> int: copy length bytes of src\n"
	 "(bytes-like, or str as UTF-8) to dest_address; 0."},
	{"read_bytes_from_buffer", FASTKW(engine_read_bytes_from_buffer),
	 "read_bytes_from_buffer(source_address, length) -> bytes"},
	{"get_first_buffer_address", FASTKW(engine_get_first_buffer_address),
	 "get_first_buffer_address(segment_name) -> int\n\n"
	 "Lowest registered buffer of that segment (this engine's own name works too); 0 if\n"
	 "it has none or cannot be opened."},
	{"warmup_efa_segment", FASTKW(engine_warmup_efa_segment),
	 "warmup_efa_segment(segment_name) -> int: 0 (nothing to warm up without EFA)."},
	{"transfer_sync_write", FASTKW(engine_transfer_sync_write),
	 "transfer_sync_write(target_hostname, buffer, peer_buffer_address, length,\n"
	 "                    transport_hint='') -> int\n\n"
	 "Write length bytes from the local buffer to the peer's absolute address and wait\n"
	 "(MC_TRANSFER_TIMEOUT seconds, default 30, minimum 5, plus 1 ns per byte).  0 or -1."},
	{"transfer_sync_read", FASTKW(engine_transfer_sync_read),
	 "transfer_sync_read(target_hostname, buffer, peer_buffer_address, length,\n"
	 "                   transport_hint='') -> int: read remote -> local; 0 or -1."},
	{"transfer_sync", FASTKW(engine_transfer_sync),
	 "transfer_sync(target_hostname, buffer, peer_buffer_address, length, opcode,\n"
	 "              notify=None, transport_hint='') -> int\n\n"
	 "opcode: TransferOpcode.Read or .Write.  notify (a TransferNotify) is delivered to\n"
	 "the peer after the transfer completed.  0 or -1."},
	{"batch_transfer_sync_write", FASTKW(engine_batch_transfer_sync_write),
	 "batch_transfer_sync_write(target_hostname, buffers, peer_buffer_addresses, lengths,\n"
	 "                          transport_hint='') -> int: one batch; 0 or -1."},
	{"batch_transfer_sync_read", FASTKW(engine_batch_transfer_sync_read),
	 "batch_transfer_sync_read(target_hostname, buffers, peer_buffer_addresses, lengths,\n"
	 "                         transport_hint='') -> int: 0 or -1."},
	{"batch_transfer_sync", FASTKW(engine_batch_transfer_sync),
	 "batch_transfer_sync(target_hostname, buffers, peer_buffer_addresses, lengths, opcode,\n"
	 "                    notify=None, transport_hint='') -> int: 0 or -1."},
	{"batch_transfer_async_write", FASTKW(engine_batch_transfer_async_write),
	 "batch_transfer_async_write(target_hostname, buffers, peer_buffer_addresses, lengths,\n"
	 "                           transport_hint='') -> int: batch id, 0 on failure."},
	{"batch_transfer_async_read", FASTKW(engine_batch_transfer_async_read),
	 "batch_transfer_async_read(...) -> int: batch id, 0 on failure."},
	{"batch_transfer_async", FASTKW(engine_batch_transfer_async),
	 "batch_transfer_async(target_hostname, buffers, peer_buffer_addresses, lengths, opcode,\n"
	 "                     transport_hint='') -> int: batch id, 0 on failure."},
	{"get_batch_transfer_status", FASTKW(engine_get_batch_transfer_status),
	 "get_batch_transfer_status(batch_ids) -> int\n\n"
	 "Wait until every listed batch completed and free them: 0; -1 as soon as one failed\n"
	 "or timed out (the rest are freed once their transfers end)."},
	{"transfer_submit_write", FASTKW(engine_transfer_submit_write),
	 "transfer_submit_write(target_hostname, buffer, peer_buffer_address, length,\n"
	 "                      transport_hint='') -> int: batch id, 0 on failure."},
	{"transfer_check_status", FASTKW(engine_transfer_check_status),
	 "transfer_check_status(batch_id) -> int\n\n"
	 "1 completed (batch freed), 0 in progress, -1 failed (freed) or unknown id,\n"
	 "-2 timed out (not freed)."},
	{"get_notifies", engine_get_notifies, METH_NOARGS,
	 "get_notifies() -> list[TransferNotify]: drain the notifications received."},
	{"send_probe", FASTKW(engine_send_probe),
	 "send_probe(peer_server_name) -> int: 0 if the peer's RPC listener answers, else -1."},
	{"get_local_topology", FASTKW(engine_get_local_topology),
	 "get_local_topology(device_name=None) -> str: the NIC priority matrix as JSON\n"
	 "('{}': this build moves data over TCP only)."},
	{"get_engine", engine_get_engine, METH_NOARGS,
	 "get_engine() -> InnerTransferEngine | None\n\n"
	 "Opaque handle of the underlying engine, for MooncakeDistributedStore.setup(...,\n"
	 "engine); keeps this TransferEngine alive.  None before initialize."},
	{"get_engine_ptr", engine_get_engine_ptr, METH_NOARGS,
	 "get_engine_ptr() -> int: address of the underlying struct mc_te (0 before "
	 "initialize)."},
	{"transfer_write_on_cuda", FASTKW(engine_transfer_write_on_cuda),
	 "transfer_write_on_cuda(target_hostname, buffer, peer_buffer_address, length,\n"
	 "                       stream_ptr=0, transport_hint='') -> None: after the work queued\n"
	 "on the CUDA stream (the caller waits for it); RuntimeError if it fails.  CUDA builds."},
	{"transfer_read_on_cuda", FASTKW(engine_transfer_read_on_cuda),
	 "transfer_read_on_cuda(target_hostname, buffer, peer_buffer_address, length,\n"
	 "                      stream_ptr=0, transport_hint='') -> None"},
	{"batch_transfer_write_on_cuda", FASTKW(engine_batch_transfer_write_on_cuda),
	 "batch_transfer_write_on_cuda(target_hostname, buffers, peer_buffer_addresses, lengths,\n"
	 "                             stream_ptr=0, transport_hint='') -> None"},
	{"batch_transfer_read_on_cuda", FASTKW(engine_batch_transfer_read_on_cuda),
	 "batch_transfer_read_on_cuda(target_hostname, buffers, peer_buffer_addresses, lengths,\n"
	 "                            stream_ptr=0, transport_hint='') -> None"},
	{NULL, NULL, 0, NULL},
};

static PyTypeObject EngineType = {
	/* clang-format off */
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = MODULE_NAME ".TransferEngine",
	/* clang-format on */
	.tp_basicsize = sizeof(struct engine_obj),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc = "TransferEngine()\n\n"
		  "Mooncake Transfer Engine.  Call initialize() first.  All addresses are ints\n"
		  "(raw pointers); calls return 0 on success and a negative value on failure\n"
		  "unless documented otherwise.  Methods that wait release the GIL and may be\n"
		  "called from many threads at once.  The constructor reads MC_TRANSFER_TIMEOUT\n"
		  "(seconds, default 30, minimum 5) for the synchronous calls.",
	.tp_new = engine_new,
	.tp_init = engine_init,
	.tp_dealloc = engine_dealloc,
	.tp_methods = engine_methods,
};

/* ---- InnerTransferEngine ---------------------------------------------------------------- */

static void inner_dealloc(PyObject *self)
{
	struct inner_obj *in = (struct inner_obj *)self;
	Py_XDECREF(in->owner);
	Py_TYPE(self)->tp_free(self);
}

static PyObject *inner_address(PyObject *self, void *unused)
{
	return PyLong_FromVoidPtr(((struct inner_obj *)self)->te);
}

static PyObject *inner_repr(PyObject *self)
{
	return PyUnicode_FromFormat("<mooncake.engine.InnerTransferEngine at %p>",
				    (void *)((struct inner_obj *)self)->te);
}

static PyGetSetDef inner_getset[] = {
	{"address", inner_address, NULL, "address of the struct mc_te (int)", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject InnerType = {
	/* clang-format off */
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = MODULE_NAME ".InnerTransferEngine",
	/* clang-format on */
	.tp_basicsize = sizeof(struct inner_obj),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Opaque handle of a TransferEngine's underlying engine (from get_engine()).\n"
		  "It keeps that TransferEngine alive; .address is the struct mc_te pointer.",
	.tp_dealloc = inner_dealloc,
	.tp_repr = inner_repr,
	.tp_getset = inner_getset,
};

/* ---- module --------------------------------------------------------------------------- */

static int add_opcode_enum(PyObject *m)
{
	PyObject *enum_mod = NULL, *intenum = NULL, *members = NULL, *kw = NULL, *op = NULL;
	PyObject *v;
	int rc = -1;

	enum_mod = PyImport_ImportModule("enum");
	if (!enum_mod)
		goto out;
	intenum = PyObject_GetAttrString(enum_mod, "IntEnum");
	members = Py_BuildValue("((si)(si))", "Read", MC_OP_READ, "Write", MC_OP_WRITE);
	kw = Py_BuildValue("{s:s}", "module", MODULE_NAME);
	if (!intenum || !members || !kw)
		goto out;
	{
		PyObject *args = Py_BuildValue("(sO)", "TransferOpcode", members);
		if (!args)
			goto out;
		op = PyObject_Call(intenum, args, kw);
		Py_DECREF(args);
	}
	if (!op || PyModule_AddObjectRef(m, "TransferOpcode", op) < 0)
		goto out;
	/* also TransferEngine.TransferOpcode, as upstream */
	if (PyDict_SetItemString(EngineType.tp_dict, "TransferOpcode", op) < 0)
		goto out;
	PyType_Modified(&EngineType);
	/* module-level aliases, as upstream's pybind11 enum exports them */
	v = PyObject_GetAttrString(op, "Read");
	if (!v || PyModule_AddObjectRef(m, "Read", v) < 0) {
		Py_XDECREF(v);
		goto out;
	}
	Py_DECREF(v);
	v = PyObject_GetAttrString(op, "Write");
	if (!v || PyModule_AddObjectRef(m, "Write", v) < 0) {
		Py_XDECREF(v);
		goto out;
	}
	Py_DECREF(v);
	rc = 0;
out:
	Py_XDECREF(op);
	Py_XDECREF(kw);
	Py_XDECREF(members);
	Py_XDECREF(intenum);
	Py_XDECREF(enum_mod);
	return rc;
}

static struct PyModuleDef engine_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = MODULE_NAME,
	.m_doc = "Mooncake Transfer Engine (upstream-compatible Python binding over the C API).",
	.m_size = -1,
};

/* Names of mooncake.engine written in Python: SharedSegment, and upstream's
 * RPC messaging helper (mooncake/_rpc_interface.py). */
static const char *const engine_extra_names[] = {"SharedSegment", NULL};
static const char *const engine_rpc_names[] = {"RpcInterface",
					       "CoroRPCInterface",
					       "ReceivedData",
					       "ReceivedTensor",
					       "create_rpc_client",
					       "create_rpc_server",
					       NULL};

PyMODINIT_FUNC PyInit_engine(void);

PyMODINIT_FUNC PyInit_engine(void)
{
	static const char *const flags[] = {"SUPPORT_CUDA", "SUPPORT_EFA",
					    "SUPPORT_HIP",  "SUPPORT_MNNVL",
					    "SUPPORT_MUSA", "SUPPORT_INTRA_NVLINK"};
	PyObject *m;

	if (PyType_Ready(&NotifyType) < 0 || PyType_Ready(&EngineType) < 0 ||
	    PyType_Ready(&InnerType) < 0)
		return NULL;
	m = PyModule_Create(&engine_module);
	if (!m)
		return NULL;
	if (PyModule_AddType(m, &EngineType) < 0 || PyModule_AddType(m, &NotifyType) < 0 ||
	    PyModule_AddType(m, &InnerType) < 0 || add_opcode_enum(m) < 0 ||
	    PyModule_AddStringConstant(m, "__version__", MC_VERSION_STRING) < 0)
		goto err;
	/* SUPPORT_CUDA: built with CUDA (GPU memory reached through the
	 * runtime when it loads); this build has none of the others */
	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
		if (PyModule_AddObjectRef(m, flags[i],
					  i == 0 && MC_PY_SUPPORT_CUDA ? Py_True : Py_False) < 0)
			goto err;
	if (add_from(m, "mooncake._engine_extra", engine_extra_names) < 0 ||
	    add_from(m, "mooncake._rpc_interface", engine_rpc_names) < 0)
		goto err;
	return m;
err:
	Py_DECREF(m);
	return NULL;
}
