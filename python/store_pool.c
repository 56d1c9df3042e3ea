/*
 * python/store_pool.c - BufferPool, BufferLease and BufferLeaseView of
 * `mooncake.store` (registered host memory for the zero-copy calls), and
 * MooncakeHostMemAllocator.  Each class's design is told at its section.
 */
#include "store_int.h"

/* ---- BufferPool ---------------------------------------------------------------------- */

/*
 * BufferPool: registered host memory handed out as leases, for the
 * zero-copy calls (put_from, get_into, the multi-buffer calls).  Upstream
 * carves leases out of the client's local buffer; the C API keeps that
 * buffer private, so the pool maps regions of its own (alignment bytes
 * each, or one per request above max_size_class) and registers them with
 * the store.  Requests are rounded up to power-of-two size classes from
 * min_size_class; a released block goes back to its class's free list.
 * max_bytes (0 = no limit) and max_regions bound the mapped memory; when
 * both are reached, acquire waits for a release (block_on_exhaustion) up to
 * its timeout (TimeoutError), or raises MemoryError.  All pool state is
 * touched with the GIL held; a blocked acquire drops the GIL while it
 * sleeps between polls.
 */

#define POOL_CLASSES 64

struct pool_region {
	void *addr;
	size_t len;
	size_t used; /* bump pointer (class regions) */
	bool dedicated;
};

struct pool_stack {
	uintptr_t *v;
	size_t n, cap;
};

struct pool_obj {
	PyObject ob_base;
	PyObject *store; /* MooncakeDistributedStore, kept alive */
	uint64_t max_bytes, min_class, max_class, alignment, max_regions;
	bool block;
	double default_timeout; /* < 0: none */
	struct pool_region *regions;
	size_t nregions;
	uint64_t mapped;
	struct pool_stack free[POOL_CLASSES];
	Py_ssize_t leases; /* alive */
	bool closed;
};

struct lease_obj {
	PyObject ob_base;
	PyObject *pool;
	void *ptr;
	size_t size; /* requested */
	int cls;     /* -1: dedicated region */
	Py_ssize_t exports;
	bool released;
};

struct view_obj {
	PyObject ob_base;
	PyObject *lease;
};

static int pool_class(const struct pool_obj *p, uint64_t size)
{
	int c = 0;
	uint64_t cs = p->min_class;
	while (cs < size && c < POOL_CLASSES - 1) {
		cs <<= 1;
		c++;
	}
	return cs >= size ? c : -1;
}

static uint64_t pool_class_size(const struct pool_obj *p, int c)
{
	return p->min_class << c;
}

static mc_status pool_register(struct pool_obj *p, void *addr, size_t len, bool reg)
{
	struct call c;
	mc_status rc;
	call_begin(&c, ST(p->store), false);
	rc = reg ? mc_store_register_buffer(ST(p->store)->s, addr, len)
		 : mc_store_unregister_buffer(ST(p->store)->s, addr);
	call_end(&c);
	return rc;
}

/* Map and register a region; NULL (no exception) when a limit forbids it
 * or the store refuses; -1 in *err with an exception set on hard errors. */
static struct pool_region *pool_add_region(struct pool_obj *p, size_t len, bool dedicated, int *err)
{
	struct pool_region *nr;
	void *addr;
	mc_status rc;

	*err = 0;
	if ((p->max_bytes && p->mapped + len > p->max_bytes) ||
	    (p->max_regions && p->nregions >= p->max_regions))
		return NULL;
	nr = PyMem_Realloc(p->regions, (p->nregions + 1) * sizeof(*nr));
	if (!nr) {
		PyErr_NoMemory();
		*err = -1;
		return NULL;
	}
	p->regions = nr;
	addr = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (addr == MAP_FAILED) {
		PyErr_NoMemory();
		*err = -1;
		return NULL;
	}
	rc = pool_register(p, addr, len, true);
	if (rc != MC_OK) {
		munmap(addr, len);
		PyErr_Format(PyExc_RuntimeError, "BufferPool: cannot register %zu bytes (%d)", len,
			     (int)rc);
		*err = -1;
		return NULL;
	}
	nr[p->nregions] = (struct pool_region){addr, len, 0, dedicated};
	p->mapped += len;
	return &nr[p->nregions++];
}

static void pool_drop_region(struct pool_obj *p, size_t i)
{
	struct pool_region *r = &p->regions[i];
	if (!ST(p->store)->s || pool_register(p, r->addr, r->len, false) != MC_OK)
		PyErr_Clear(); /* the store was closed: registrations are gone with it */
	munmap(r->addr, r->len);
	p->mapped -= r->len;
	p->regions[i] = p->regions[--p->nregions];
}

static int stack_push(struct pool_stack *s, uintptr_t v)
{
	if (s->n == s->cap) {
		size_t ncap = s->cap ? s->cap * 2 : 16;
		uintptr_t *nv = PyMem_Realloc(s->v, ncap * sizeof(*nv));
		if (!nv)
			return -1;
		s->v = nv;
		s->cap = ncap;
	}
	s->v[s->n++] = v;
	return 0;
}

/* One try: 1 got a block, 0 exhausted, -1 exception. */
static int pool_try(struct pool_obj *p, uint64_t size, void **out, int *cls_out)
{
	int c = size <= p->max_class ? pool_class(p, size) : -1;
	int err;

	if (c < 0) { /* dedicated region, rounded to pages */
		size_t len = (size_t)((size + 4095) & ~(uint64_t)4095);
		struct pool_region *r = pool_add_region(p, len, true, &err);
		if (!r)
			return err;
		*out = r->addr;
		*cls_out = -1;
		return 1;
	}
	*cls_out = c;
	if (p->free[c].n) {
		*out = (void *)p->free[c].v[--p->free[c].n];
		return 1;
	}
	{
		uint64_t cs = pool_class_size(p, c);
		for (size_t i = 0; i < p->nregions; i++) {
			struct pool_region *r = &p->regions[i];
			if (!r->dedicated && r->len - r->used >= cs) {
				*out = (char *)r->addr + r->used;
				r->used += cs;
				return 1;
			}
		}
		{
			size_t len = (size_t)(cs > p->alignment ? cs : p->alignment);
			struct pool_region *r = pool_add_region(p, len, false, &err);
			if (!r)
				return err;
			*out = r->addr;
			r->used = cs;
			return 1;
		}
	}
}

/*
 * Exceptions.  Upstream's pool raises RuntimeError for each of these; ours
 * are RuntimeError subclasses that are also the built-in error a Python
 * reader would expect (MemoryError for exhaustion, BufferError for a lease
 * with live views, ValueError for bad arguments), so either catch works.
 */
PyObject *mc_py_pool_error, *mc_py_pool_exhausted, *mc_py_lease_in_use;

static PyObject *new_exc(PyObject *m, const char *name, PyObject *extra, const char *doc)
{
	char full[96];
	PyObject *bases = PyTuple_Pack(2, PyExc_RuntimeError, extra), *e;
	if (!bases)
		return NULL;
	snprintf(full, sizeof(full), "%s.%s", MODULE_NAME, name);
	e = PyErr_NewExceptionWithDoc(full, doc, bases, NULL);
	Py_DECREF(bases);
	if (e && PyModule_AddObjectRef(m, name, e) < 0)
		Py_CLEAR(e);
	return e;
}

int mc_py_pool_add_exceptions(PyObject *m)
{
	if (!mc_py_pool_error &&
	    !(mc_py_pool_error = new_exc(m, "BufferPoolError", PyExc_ValueError,
					 "A BufferPool argument it cannot take.")))
		return -1;
	if (!mc_py_pool_exhausted &&
	    !(mc_py_pool_exhausted = new_exc(m, "BufferPoolExhausted", PyExc_MemoryError,
					     "A BufferPool with no buffer free and no blocking.")))
		return -1;
	if (!mc_py_lease_in_use &&
	    !(mc_py_lease_in_use = new_exc(m, "BufferLeaseInUse", PyExc_BufferError,
					   "A BufferLease released while views of it live.")))
		return -1;
	return 0;
}

static int pool_check_open(struct pool_obj *p)
{
	if (p->closed) {
		PyErr_SetString(PyExc_RuntimeError, "BufferPool is closed");
		return -1;
	}
	if (mc_store_health_check(ST(p->store)->s) == 1) {
		PyErr_SetString(PyExc_RuntimeError, "BufferPool: the store is not set up");
		return -1;
	}
	return 0;
}

static PyObject *pool_lease(struct pool_obj *p, uint64_t size, bool block, double timeout)
{
	struct lease_obj *l;
	void *ptr = NULL;
	int cls = -1, r;
	struct timespec t0;

	if (size > (1ull << 40)) {
		PyErr_Format(mc_py_pool_error, "BufferPool: size %llu is over the 2**40 limit",
			     (unsigned long long)size);
		return NULL;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		if (pool_check_open(p) < 0)
			return NULL;
		r = pool_try(p, size ? size : 1, &ptr, &cls); /* a zero-size lease has a block */
		if (r < 0)
			return NULL;
		if (r > 0)
			break;
		if (!block) {
			PyErr_Format(mc_py_pool_exhausted,
				     "BufferPool exhausted (%llu bytes mapped)",
				     (unsigned long long)p->mapped);
			return NULL;
		}
		if (timeout >= 0) {
			struct timespec now;
			clock_gettime(CLOCK_MONOTONIC, &now);
			if ((double)(now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9 >=
			    timeout) {
				PyErr_SetString(PyExc_TimeoutError,
						"BufferPool: no buffer released in time");
				return NULL;
			}
		}
		{
			PyThreadState *ts = PyEval_SaveThread();
			struct timespec d = {0, 1000000};
			nanosleep(&d, NULL);
			PyEval_RestoreThread(ts);
		}
		if (PyErr_CheckSignals() < 0)
			return NULL;
	}
	l = PyObject_New(struct lease_obj, &mc_py_lease_type);
	if (!l) {
		if (cls >= 0 && stack_push(&p->free[cls], (uintptr_t)ptr) < 0)
			PyErr_NoMemory();
		return NULL;
	}
	l->pool = Py_NewRef((PyObject *)p);
	l->ptr = ptr;
	l->size = (size_t)size;
	l->cls = cls;
	l->exports = 0;
	l->released = false;
	p->leases++;
	return (PyObject *)l;
}

/* Give a lease's block back (the lease is not yet marked released). */
static void lease_return(struct lease_obj *l)
{
	struct pool_obj *p = (struct pool_obj *)l->pool;
	l->released = true;
	p->leases--;
	if (l->cls >= 0) {
		if (stack_push(&p->free[l->cls], (uintptr_t)l->ptr) < 0)
			PyErr_Clear(); /* the block is lost until close, not the memory */
		return;
	}
	for (size_t i = 0; i < p->nregions; i++) {
		if (p->regions[i].addr == l->ptr) {
			pool_drop_region(p, i);
			break;
		}
	}
}

static void pool_release_all(struct pool_obj *p)
{
	while (p->nregions)
		pool_drop_region(p, p->nregions - 1);
	PyMem_Free(p->regions);
	p->regions = NULL;
	for (int c = 0; c < POOL_CLASSES; c++) {
		PyMem_Free(p->free[c].v);
		memset(&p->free[c], 0, sizeof(p->free[c]));
	}
}

static int opt_timeout(PyObject *o, double def, double *out)
{
	if (!o || o == Py_None) {
		*out = def;
		return 0;
	}
	*out = PyFloat_AsDouble(o);
	if (*out == -1.0 && PyErr_Occurred()) {
		PyErr_Clear();
		PyErr_SetString(PyExc_TypeError, "timeout must be a number or None");
		return -1;
	}
	if (*out < 0)
		*out = 0;
	return 0;
}

static int opt_u64(PyObject *o, uint64_t def, const char *what, uint64_t *out)
{
	if (!o || o == Py_None) {
		*out = def;
		return 0;
	}
	return arg_u64(o, "BufferPool", what, out);
}

static PyObject *pool_acquire_common(PyObject *self, const char *fname, PyObject *const *args,
				     Py_ssize_t nargs, PyObject *kwnames)
{
	struct pool_obj *p = (struct pool_obj *)self;
	uint64_t size;
	bool block;
	double timeout;
	PARSE(fname, 1, "size", "block", "timeout");
	if (arg_u64(a[0], fname, "size", &size) < 0) {
		if (PyLong_Check(a[0]) && !PyBool_Check(a[0])) { /* an int < 0 or past 64 bits */
			PyErr_Clear();
			PyErr_Format(mc_py_pool_error, "BufferPool.%s(): size %R is out of range",
				     fname, a[0]);
		}
		return NULL;
	}
	if (arg_bool(a[1] == Py_None ? NULL : a[1], fname, "block", p->block, &block) < 0 ||
	    opt_timeout(a[2], p->default_timeout, &timeout) < 0)
		return NULL;
	return pool_lease(p, size, block, timeout);
}

static PyObject *pool_acquire(DEFARGS)
{
	return pool_acquire_common(self, "acquire", args, nargs, kwnames);
}

static PyObject *pool_buffer(DEFARGS)
{
	return pool_acquire_common(self, "buffer", args, nargs, kwnames);
}

static PyObject *pool_prewarm(DEFARGS)
{
	struct pool_obj *p = (struct pool_obj *)self;
	uint64_t size, count;
	PyObject *held;
	int rc = 0;
	PARSE("prewarm", 2, "size", "count");
	if (arg_u64(a[0], "prewarm", "size", &size) < 0 ||
	    arg_u64(a[1], "prewarm", "count", &count) < 0)
		return NULL;
	held = PyList_New(0);
	if (!held)
		return NULL;
	for (uint64_t i = 0; i < count && rc == 0; i++) {
		PyObject *l = pool_lease(p, size, false, 0);
		rc = l ? PyList_Append(held, l) : -1;
		Py_XDECREF(l);
	}
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(held); i++) {
		struct lease_obj *l = (struct lease_obj *)PyList_GET_ITEM(held, i);
		if (!l->released)
			lease_return(l);
	}
	Py_DECREF(held);
	if (rc < 0)
		return NULL;
	Py_RETURN_NONE;
}

static PyObject *pool_close(PyObject *self, PyObject *unused)
{
	struct pool_obj *p = (struct pool_obj *)self;
	if (p->closed)
		Py_RETURN_NONE;
	if (p->leases) {
		PyErr_Format(PyExc_RuntimeError, "BufferPool.close(): %zd leases are still alive",
			     p->leases);
		return NULL;
	}
	pool_release_all(p);
	p->closed = true;
	Py_RETURN_NONE;
}

static PyObject *pool_enter(PyObject *self, PyObject *unused)
{
	return Py_NewRef(self);
}

static PyObject *pool_exit(PyObject *self, PyObject *args)
{
	PyObject *r = pool_close(self, NULL);
	if (!r)
		return NULL;
	Py_DECREF(r);
	Py_RETURN_FALSE;
}

static PyObject *pool_get_mapped(PyObject *self, void *unused)
{
	return PyLong_FromUnsignedLongLong(((struct pool_obj *)self)->mapped);
}

static PyObject *pool_get_leases(PyObject *self, void *unused)
{
	return PyLong_FromSsize_t(((struct pool_obj *)self)->leases);
}

static PyObject *pool_get_closed(PyObject *self, void *unused)
{
	return PyBool_FromLong(((struct pool_obj *)self)->closed);
}

static PyObject *pool_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *names[] = {"store",	   "max_bytes",	  "min_size_class",
				"max_size_class",  "alignment",	  "block_on_exhaustion",
				"default_timeout", "max_regions", "prewarm_size",
				"prewarm_count",   NULL};
	PyObject *store, *max_bytes = NULL, *min_c = NULL, *max_c = NULL, *align = NULL;
	PyObject *block = NULL, *dto = NULL, *max_r = NULL, *pw_size = NULL, *pw_count = NULL;
	struct pool_obj *p;
	uint64_t pws, pwc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OOOOOOOOO:BufferPool", names, &store,
					 &max_bytes, &min_c, &max_c, &align, &block, &dto, &max_r,
					 &pw_size, &pw_count))
		return NULL;
	if (!PyObject_TypeCheck(store, &mc_py_store_type)) {
		PyErr_Format(PyExc_TypeError,
			     "BufferPool(): store must be a MooncakeDistributedStore, not %.100s",
			     Py_TYPE(store)->tp_name);
		return NULL;
	}
	p = (struct pool_obj *)type->tp_alloc(type, 0);
	if (!p)
		return NULL;
	p->store = Py_NewRef(store);
	if (opt_u64(max_bytes, 0, "max_bytes", &p->max_bytes) < 0 ||
	    opt_u64(min_c, 65536, "min_size_class", &p->min_class) < 0 ||
	    opt_u64(align, 8ull << 20, "alignment", &p->alignment) < 0 ||
	    opt_u64(max_c, p->alignment, "max_size_class", &p->max_class) < 0 ||
	    opt_u64(max_r, 0, "max_regions", &p->max_regions) < 0 ||
	    arg_bool(block == Py_None ? NULL : block, "BufferPool", "block", true, &p->block) < 0 ||
	    opt_timeout(dto, -1, &p->default_timeout) < 0 ||
	    opt_u64(pw_size, 0, "prewarm_size", &pws) < 0 ||
	    opt_u64(pw_count, 0, "prewarm_count", &pwc) < 0)
		goto err;
	if (p->min_class == 0 || p->alignment == 0 || p->max_class < p->min_class ||
	    (p->min_class & (p->min_class - 1)) || p->alignment > (1ull << 40)) {
		PyErr_SetString(mc_py_pool_error, "BufferPool(): bad alignment or size classes: "
						  "min_size_class must be a power of two <= "
						  "max_size_class, alignment in [1, 2**40]");
		goto err;
	}
	if (pws && pwc) {
		PyObject *a2[2], *r;
		a2[0] = PyLong_FromUnsignedLongLong(pws);
		a2[1] = PyLong_FromUnsignedLongLong(pwc);
		r = a2[0] && a2[1] ? pool_prewarm((PyObject *)p, a2, 2, NULL) : NULL;
		Py_XDECREF(a2[0]);
		Py_XDECREF(a2[1]);
		if (!r)
			goto err;
		Py_DECREF(r);
	}
	return (PyObject *)p;
err:
	Py_DECREF(p);
	return NULL;
}

static void pool_dealloc(PyObject *self)
{
	struct pool_obj *p = (struct pool_obj *)self;
	/* no lease is alive: each holds a reference to the pool */
	if (p->store)
		pool_release_all(p);
	Py_CLEAR(p->store);
	Py_TYPE(self)->tp_free(self);
}

static PyMethodDef pool_methods[] = {
	{"acquire", FASTKW(pool_acquire), "acquire(size, block=None, timeout=None) -> BufferLease"},
	{"buffer", FASTKW(pool_buffer), "buffer(size, block=None, timeout=None) -> BufferLease"},
	{"prewarm", FASTKW(pool_prewarm), "prewarm(size, count): map blocks ahead of use"},
	{"close", pool_close, METH_NOARGS, "close(): RuntimeError while leases are alive"},
	{"__enter__", pool_enter, METH_NOARGS, NULL},
	{"__exit__", pool_exit, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef pool_getset[] = {
	{"mapped_bytes", pool_get_mapped, NULL, "bytes mapped and registered", NULL},
	{"active_leases", pool_get_leases, NULL, "leases not yet released", NULL},
	{"closed", pool_get_closed, NULL, "bool", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject mc_py_pool_type = {
	/* clang-format off */
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = MODULE_NAME ".BufferPool",
	/* clang-format on */
	.tp_basicsize = sizeof(struct pool_obj),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc = "BufferPool(store, max_bytes=0, min_size_class=65536, max_size_class=None,\n"
		  "           alignment=8 MiB, block_on_exhaustion=True, default_timeout=None,\n"
		  "           max_regions=None, prewarm_size=None, prewarm_count=0)\n"
		  "Registered host buffers for the zero-copy calls, handed out as leases.",
	.tp_new = pool_new,
	.tp_dealloc = pool_dealloc,
	.tp_methods = pool_methods,
	.tp_getset = pool_getset,
};

/* BufferLease */

static PyObject *lease_release(PyObject *self, PyObject *unused)
{
	struct lease_obj *l = (struct lease_obj *)self;
	if (l->released)
		Py_RETURN_NONE;
	if (l->exports) {
		PyErr_SetString(mc_py_lease_in_use,
				"BufferLease.release(): views of the buffer are still alive");
		return NULL;
	}
	lease_return(l);
	Py_RETURN_NONE;
}

static void lease_dealloc(PyObject *self)
{
	struct lease_obj *l = (struct lease_obj *)self;
	if (!l->released)
		lease_return(l); /* no view is alive: each holds a reference */
	Py_CLEAR(l->pool);
	PyObject_Free(self);
}

static PyObject *lease_get_ptr(PyObject *self, void *unused)
{
	struct lease_obj *l = (struct lease_obj *)self;
	if (l->released) {
		PyErr_SetString(PyExc_ValueError, "BufferLease was released");
		return NULL;
	}
	return PyLong_FromVoidPtr(l->ptr);
}

static PyObject *lease_get_size(PyObject *self, void *unused)
{
	return PyLong_FromSize_t(((struct lease_obj *)self)->size);
}

static PyObject *lease_get_buffer(PyObject *self, void *unused)
{
	struct lease_obj *l = (struct lease_obj *)self;
	struct view_obj *v;
	PyObject *mv;
	if (l->released) {
		PyErr_SetString(PyExc_ValueError, "BufferLease was released");
		return NULL;
	}
	v = PyObject_New(struct view_obj, &mc_py_view_type);
	if (!v)
		return NULL;
	v->lease = Py_NewRef(self);
	mv = PyMemoryView_FromObject((PyObject *)v);
	Py_DECREF(v);
	return mv;
}

static PyObject *lease_enter(PyObject *self, PyObject *unused)
{
	return Py_NewRef(self);
}

static PyObject *lease_exit(PyObject *self, PyObject *args)
{
	PyObject *r = lease_release(self, NULL);
	if (!r)
		return NULL;
	Py_DECREF(r);
	Py_RETURN_FALSE;
}

static PyObject *lease_repr(PyObject *self)
{
	struct lease_obj *l = (struct lease_obj *)self;
	return PyUnicode_FromFormat("<mooncake.store.BufferLease ptr=%p size=%zu%s>", l->ptr,
				    l->size, l->released ? " released" : "");
}

static PyMethodDef lease_methods[] = {
	{"release", lease_release, METH_NOARGS, "release(): BufferError while views are alive"},
	{"__enter__", lease_enter, METH_NOARGS, NULL},
	{"__exit__", lease_exit, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef lease_getset[] = {
	{"ptr", lease_get_ptr, NULL, "address (registered with the store)", NULL},
	{"size", lease_get_size, NULL, "requested bytes", NULL},
	{"buffer", lease_get_buffer, NULL, "a writable memoryview of size bytes", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject mc_py_lease_type = {
	/* clang-format off */
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = MODULE_NAME ".BufferLease",
	/* clang-format on */
	.tp_basicsize = sizeof(struct lease_obj),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A block of a BufferPool: ptr, size, buffer; release() or a with block.",
	.tp_dealloc = lease_dealloc,
	.tp_repr = lease_repr,
	.tp_methods = lease_methods,
	.tp_getset = lease_getset,
};

/* BufferLeaseView: the buffer-protocol object behind BufferLease.buffer */

static int view_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
	struct lease_obj *l = (struct lease_obj *)((struct view_obj *)self)->lease;
	if (l->released) {
		PyErr_SetString(PyExc_BufferError, "BufferLease was released");
		return -1;
	}
	if (PyBuffer_FillInfo(view, self, l->ptr, (Py_ssize_t)l->size, 0, flags) < 0)
		return -1;
	l->exports++;
	return 0;
}

static void view_releasebuffer(PyObject *self, Py_buffer *view)
{
	((struct lease_obj *)((struct view_obj *)self)->lease)->exports--;
}

static void view_dealloc(PyObject *self)
{
	Py_CLEAR(((struct view_obj *)self)->lease);
	PyObject_Free(self);
}

static PyBufferProcs view_as_buffer = {.bf_getbuffer = view_getbuffer,
				       .bf_releasebuffer = view_releasebuffer};

PyTypeObject mc_py_view_type = {
	/* clang-format off */
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = MODULE_NAME ".BufferLeaseView",
	/* clang-format on */
	.tp_basicsize = sizeof(struct view_obj),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Buffer-protocol view of a BufferLease.",
	.tp_dealloc = view_dealloc,
	.tp_as_buffer = &view_as_buffer,
};

/* ---- MooncakeHostMemAllocator ------------------------------------------------------ */

/*
 * MooncakeHostMemAllocator: shared host memory (mc_store_shm_alloc: a
 * sealed memfd mapping) that a dummy client can register whole and hand to
 * its mooncake_client daemon; a real client registers it like any other
 * memory.  SGLang allocates its host KV pools with it in standalone mode.
 * alloc(size) -> address, 0 on failure; free(ptr) -> 0, or -1 for an
 * address it did not hand out.  The mappings belong to the process (the C
 * library's table), not to the allocator object (callers use a temporary
 * one), and live until free().
 */
static PyObject *hma_alloc(PyObject *self, PyObject *arg)
{
	uint64_t size;
	void *p = NULL;
	(void)self;
	if (arg_u64(arg, "alloc", "size", &size) < 0)
		return NULL;
	if (size == 0 || size > (uint64_t)PY_SSIZE_T_MAX ||
	    mc_store_shm_alloc((size_t)size, &p) != MC_OK)
		return PyLong_FromLong(0);
	return PyLong_FromVoidPtr(p);
}

static PyObject *hma_free(PyObject *self, PyObject *arg)
{
	uint64_t addr;
	(void)self;
	if (arg_u64(arg, "free", "ptr", &addr) < 0)
		return NULL;
	return PyLong_FromLong(mc_store_shm_free((void *)(uintptr_t)addr) == MC_OK ? 0 : -1);
}

static PyMethodDef hma_methods[] = {
	{"alloc", hma_alloc, METH_O,
	 "alloc(size) -> int: address of size bytes of shared memory, "
	 "0 on failure"},
	{"free", hma_free, METH_O, "free(ptr) -> int: 0, or -1 if ptr is not from alloc()"},
	{NULL, NULL, 0, NULL},
};

PyTypeObject mc_py_host_mem_allocator_type = {
	/* clang-format off */
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = MODULE_NAME ".MooncakeHostMemAllocator",
	/* clang-format on */
	.tp_basicsize = sizeof(PyObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "MooncakeHostMemAllocator(): shared host memory for buffers.",
	.tp_new = PyType_GenericNew,
	.tp_methods = hma_methods,
};
