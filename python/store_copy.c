/*
 * python/store_copy.c - the copy-based calls of `mooncake.store`: put,
 * upsert, put_parts, put_batch and friends, get, get_batch, get_buffer and
 * batch_get_buffer, and the BufferHandle those last two return.
 *
 * Copy-based means the bytes pass through memory the client owns: a put
 * hands the C client the caller's buffers (exported with the buffer
 * protocol and held until the call returns), and a get reads into a bytes
 * object made under the GIL by mc_store_get_alloc's allocator, or into a
 * malloc'ed copy wrapped by a BufferHandle (which offers the buffer
 * protocol and frees the copy when it dies; batch_get_buffer's handles
 * share one allocation per call, a slab, below).
 */
#include "store_int.h"

/* ---- copy-based puts -------------------------------------------------------------- */

static PyObject *put_single(PyObject *self, const char *fname, PyObject *key_o, PyObject *val_o,
			    PyObject *cfg_o, enum put_kind kind)
{
	const char *key;
	Py_buffer view;
	struct cfg cfg;
	struct call c;
	mc_status rc;

	if (arg_str(key_o, fname, "key", &key) < 0 || mc_py_cfg_from(cfg_o, fname, &cfg) < 0)
		return NULL;
	if (get_buffer(val_o, fname, &view) < 0) {
		mc_py_cfg_release(&cfg);
		return NULL;
	}
	call_begin(&c, ST(self), false);
	if (kind == PUT_UPSERT)
		rc = cfg.upsert_refused ? MC_ERR_INVALID_PARAMS
					: mc_store_upsert(ST(self)->s, key, view.buf,
							  (size_t)view.len, &cfg.c);
	else
		rc = mc_store_put(ST(self)->s, key, view.buf, (size_t)view.len, &cfg.c);
	call_end(&c);
	PyBuffer_Release(&view);
	mc_py_cfg_release(&cfg);
	return PyLong_FromLong(rc);
}

PyObject *mc_py_store_put(DEFARGS)
{
	PARSE("put", 2, "key", "value", "config");
	return put_single(self, "put", a[0], a[1], a[2], PUT_INSERT);
}

PyObject *mc_py_store_upsert(DEFARGS)
{
	PARSE("upsert", 2, "key", "value", "config");
	return put_single(self, "upsert", a[0], a[1], a[2], PUT_UPSERT);
}

/* put_parts(key, *parts, config=...) */
static PyObject *parts_common(PyObject *self, const char *fname, PyObject *const *args,
			      Py_ssize_t nargs, PyObject *kwnames, enum put_kind kind)
{
	PyObject *cfg_o = NULL, *tup;
	const char *key;
	struct bufs b = {0};
	struct cfg cfg;
	struct call c;
	const void **parts = NULL;
	size_t *lens = NULL;
	mc_status rc;
	Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;

	for (Py_ssize_t k = 0; k < nkw; k++) {
		PyObject *name = PyTuple_GET_ITEM(kwnames, k);
		if (PyUnicode_CompareWithASCIIString(name, "config") != 0) {
			PyErr_Format(PyExc_TypeError,
				     "%s() got an unexpected keyword argument '%U'", fname, name);
			return NULL;
		}
		cfg_o = args[nargs + k];
	}
	if (nargs < 1) {
		PyErr_Format(PyExc_TypeError, "%s() missing required argument 'key'", fname);
		return NULL;
	}
	if (arg_str(args[0], fname, "key", &key) < 0)
		return NULL;
	tup = PyTuple_New(nargs - 1);
	if (!tup)
		return NULL;
	for (Py_ssize_t i = 1; i < nargs; i++)
		PyTuple_SET_ITEM(tup, i - 1, Py_NewRef(args[i]));
	if (mc_py_cfg_from(cfg_o, fname, &cfg) < 0) {
		Py_DECREF(tup);
		return NULL;
	}
	if (bufs_from(tup, fname, &b) < 0)
		goto err;
	parts = PyMem_Calloc(b.n ? b.n : 1, sizeof(*parts));
	lens = PyMem_Calloc(b.n ? b.n : 1, sizeof(*lens));
	if (!parts || !lens) {
		PyErr_NoMemory();
		goto err;
	}
	for (size_t i = 0; i < b.n; i++) {
		parts[i] = b.v[i].buf;
		lens[i] = (size_t)b.v[i].len;
	}
	call_begin(&c, ST(self), false);
	if (kind == PUT_INSERT)
		rc = mc_store_put_parts(ST(self)->s, key, parts, lens, b.n, &cfg.c);
	else
		rc = cfg.upsert_refused
			     ? MC_ERR_INVALID_PARAMS
			     : mc_store_upsert_parts(ST(self)->s, key, parts, lens, b.n, &cfg.c);
	call_end(&c);
	PyMem_Free(parts);
	PyMem_Free(lens);
	bufs_release(&b);
	mc_py_cfg_release(&cfg);
	Py_DECREF(tup);
	return PyLong_FromLong(rc);
err:
	PyMem_Free(parts);
	PyMem_Free(lens);
	bufs_release(&b);
	mc_py_cfg_release(&cfg);
	Py_DECREF(tup);
	return NULL;
}

PyObject *mc_py_store_put_parts(DEFARGS)
{
	return parts_common(self, "put_parts", args, nargs, kwnames, PUT_INSERT);
}

PyObject *mc_py_store_upsert_parts(DEFARGS)
{
	return parts_common(self, "upsert_parts", args, nargs, kwnames, PUT_UPSERT);
}

/* put_batch / upsert_batch: one int, 0 if every key succeeded. */
static PyObject *batch_common(PyObject *self, const char *fname, PyObject *const *args,
			      Py_ssize_t nargs, PyObject *kwnames, enum put_kind kind)
{
	struct keys k = {0};
	struct bufs b = {0};
	struct cfg cfg;
	struct call c;
	PyObject *vals;
	const void **vp = NULL;
	size_t *lens = NULL;
	mc_status rc = MC_OK;
	PARSE(fname, 2, "keys", "values", "config");

	if (keys_from(a[0], fname, &k) < 0)
		return NULL;
	vals = arg_seq(a[1], fname, "values", NULL);
	if (!vals) {
		keys_release(&k);
		return NULL;
	}
	if (mc_py_cfg_from(a[2], fname, &cfg) < 0) {
		Py_DECREF(vals);
		keys_release(&k);
		return NULL;
	}
	if (bufs_from(vals, fname, &b) < 0)
		goto err;
	if (b.n != k.n) {
		rc = MC_ERR_INVALID_PARAMS;
		goto done;
	}
	vp = PyMem_Calloc(k.n ? k.n : 1, sizeof(*vp));
	lens = PyMem_Calloc(k.n ? k.n : 1, sizeof(*lens));
	if (!vp || !lens) {
		PyErr_NoMemory();
		goto err;
	}
	for (size_t i = 0; i < k.n; i++) {
		vp[i] = b.v[i].buf;
		lens[i] = (size_t)b.v[i].len;
	}
	call_begin(&c, ST(self), false);
	if (kind == PUT_INSERT)
		rc = mc_store_put_batch(ST(self)->s, k.v, vp, lens, k.n, mc_py_cfg_batch(&cfg),
					NULL);
	else
		rc = cfg.upsert_refused ? MC_ERR_INVALID_PARAMS
					: mc_store_upsert_batch(ST(self)->s, k.v, vp, lens, k.n,
								mc_py_cfg_batch(&cfg), NULL);
	call_end(&c);
done:
	PyMem_Free(vp);
	PyMem_Free(lens);
	bufs_release(&b);
	mc_py_cfg_release(&cfg);
	Py_DECREF(vals);
	keys_release(&k);
	return PyLong_FromLong(rc);
err:
	PyMem_Free(vp);
	PyMem_Free(lens);
	bufs_release(&b);
	mc_py_cfg_release(&cfg);
	Py_DECREF(vals);
	keys_release(&k);
	return NULL;
}

PyObject *mc_py_store_put_batch(DEFARGS)
{
	return batch_common(self, "put_batch", args, nargs, kwnames, PUT_INSERT);
}

PyObject *mc_py_store_upsert_batch(DEFARGS)
{
	return batch_common(self, "upsert_batch", args, nargs, kwnames, PUT_UPSERT);
}

/* ---- copy-based gets ------------------------------------------------------------------ */

/* mc_store_get_alloc's allocator for get(): a bytes object of the object's
 * size, made under the GIL, which the read then fills in place. */
struct bytes_alloc {
	struct call *c;
	PyObject *obj;
};

static void *bytes_alloc(void *ctx, size_t size)
{
	struct bytes_alloc *ba = ctx;
	void *p = NULL;

	if (size > (size_t)PY_SSIZE_T_MAX)
		return NULL;
	PyEval_RestoreThread(ba->c->ts);
	ba->obj = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
	if (ba->obj)
		p = PyBytes_AS_STRING(ba->obj);
	else
		PyErr_Clear(); /* get() reports failure as b"" */
	ba->c->ts = PyEval_SaveThread();
	return p;
}

PyObject *mc_py_store_get(DEFARGS)
{
	const char *key;
	struct call c;
	struct bytes_alloc ba = {&c, NULL};
	int64_t n;
	PARSE("get", 1, "key");

	if (arg_str(a[0], "get", "key", &key) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	n = mc_store_get_alloc(ST(self)->s, key, bytes_alloc, &ba);
	call_end(&c);
	if (n < 0) {
		Py_XDECREF(ba.obj);
		return PyBytes_FromStringAndSize("", 0);
	}
	return ba.obj;
}

/* mc_store_batch_get_alloc's allocator for get_batch(): object i's bytes,
 * made under the GIL, which the batch then fills in place. */
struct bytes_nth {
	struct call *c;
	PyObject **objs;
};

static void *bytes_nth(void *ctx, size_t i, size_t size)
{
	struct bytes_nth *bn = ctx;
	void *p = NULL;

	if (size > (size_t)PY_SSIZE_T_MAX)
		return NULL;
	PyEval_RestoreThread(bn->c->ts);
	bn->objs[i] = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
	if (bn->objs[i])
		p = PyBytes_AS_STRING(bn->objs[i]);
	else
		PyErr_Clear(); /* that key reads as b"" */
	bn->c->ts = PyEval_SaveThread();
	return p;
}

PyObject *mc_py_store_get_batch(DEFARGS)
{
	struct keys k;
	PyObject *out = NULL, **objs;
	int64_t *sizes;
	struct call c;
	struct bytes_nth bn = {&c, NULL};
	bool any_ready;
	PARSE("get_batch", 1, "keys");

	if (keys_from(a[0], "get_batch", &k) < 0)
		return NULL;
	objs = PyMem_Calloc(k.n ? k.n : 1, sizeof(*objs));
	sizes = PyMem_Calloc(k.n ? k.n : 1, sizeof(*sizes));
	if (!objs || !sizes) {
		PyMem_Free(objs);
		PyMem_Free(sizes);
		keys_release(&k);
		return PyErr_NoMemory();
	}
	bn.objs = objs;
	call_begin(&c, ST(self), false);
	any_ready = mc_store_health_check(ST(self)->s) != 1;
	if (any_ready && k.n)
		mc_store_batch_get_alloc(ST(self)->s, k.v, k.n, bytes_nth, &bn, sizes);
	call_end(&c);
	/* a failed batch (not set up, no keys) is upstream's one-element [b""] */
	if (!any_ready || k.n == 0) {
		out = Py_BuildValue("[y#]", "", (Py_ssize_t)0);
		goto out;
	}
	out = PyList_New((Py_ssize_t)k.n);
	for (size_t i = 0; out && i < k.n; i++) {
		PyObject *b = objs[i];
		if (sizes[i] < 0 || !b) {
			Py_XDECREF(b);
			b = PyBytes_FromStringAndSize("", 0);
		}
		objs[i] = NULL;
		if (!b) {
			Py_CLEAR(out);
			break;
		}
		PyList_SET_ITEM(out, (Py_ssize_t)i, b);
	}
out:
	for (size_t i = 0; i < k.n; i++)
		Py_XDECREF(objs[i]); /* not handed to the list */
	PyMem_Free(objs);
	PyMem_Free(sizes);
	keys_release(&k);
	return out;
}

/* ---- BufferHandle -------------------------------------------------------------------- */

/*
 * A slab: the bytes of the objects of one batch_get_buffer call, in one
 * allocation shared by its handles (sized, at each object that does not
 * fit, for the rest of the batch at that object's size), freed with the
 * last of them.  One freed slab is kept for the next call (spare_slab),
 * so a loop of batch reads reuses memory already faulted in rather than
 * allocating and freeing a buffer per object, which the C allocator may
 * return to the system and fault in again at every call.  Its handles
 * keep the whole slab alive.  refs and spare_slab change under the GIL
 * only; the allocator (slab_alloc) runs without it, on the call's own
 * slabs.
 */
struct bh_slab {
	Py_ssize_t refs; /* handles in it, and the filling call's own reference */
	size_t cap, used;
	struct bh_slab *next; /* the filling call's list */
};

#define SLAB_ALIGN     64
#define SLAB_HDR       ((sizeof(struct bh_slab) + SLAB_ALIGN - 1) & ~(size_t)(SLAB_ALIGN - 1))
#define SLAB_SPARE_MAX (256ull << 20) /* larger slabs are not kept */

static struct bh_slab *spare_slab;

static void slab_unref(struct bh_slab *sl)
{
	if (--sl->refs > 0)
		return;
	if (!spare_slab && sl->cap <= SLAB_SPARE_MAX) {
		spare_slab = sl;
		return;
	}
	free(sl);
}

struct bh_obj {
	PyObject ob_base;
	void *buf; /* malloc'ed, or in slab */
	size_t size;
	struct bh_slab *slab; /* NULL: buf is the handle's own */
};

static PyObject *handle_new(void *buf, size_t size, struct bh_slab *slab)
{
	struct bh_obj *h = PyObject_New(struct bh_obj, &mc_py_handle_type);
	if (!h)
		return NULL;
	h->buf = buf;
	h->size = size;
	h->slab = slab;
	if (slab)
		slab->refs++;
	return (PyObject *)h;
}

static PyObject *handle_wrap(void *buf, size_t size)
{
	PyObject *h = handle_new(buf, size, NULL);
	if (!h)
		free(buf);
	return h;
}

static void bh_dealloc(PyObject *self)
{
	struct bh_obj *h = (struct bh_obj *)self;

	if (h->slab)
		slab_unref(h->slab);
	else
		free(h->buf);
	PyObject_Free(self);
}

static PyObject *bh_ptr(PyObject *self, PyObject *unused)
{
	return PyLong_FromVoidPtr(((struct bh_obj *)self)->buf);
}

static PyObject *bh_size(PyObject *self, PyObject *unused)
{
	return PyLong_FromSize_t(((struct bh_obj *)self)->size);
}

static Py_ssize_t bh_len(PyObject *self)
{
	return (Py_ssize_t)((struct bh_obj *)self)->size;
}

static int bh_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
	struct bh_obj *h = (struct bh_obj *)self;
	return PyBuffer_FillInfo(view, self, h->buf, (Py_ssize_t)h->size, 0, flags);
}

static PyObject *bh_repr(PyObject *self)
{
	struct bh_obj *h = (struct bh_obj *)self;
	return PyUnicode_FromFormat("<mooncake.store.BufferHandle ptr=%p size=%zu>", h->buf,
				    h->size);
}

static PyMethodDef bh_methods[] = {
	{"ptr", bh_ptr, METH_NOARGS, "ptr() -> int: address of the data"},
	{"size", bh_size, METH_NOARGS, "size() -> int: bytes"},
	{"len", bh_size, METH_NOARGS, "len() -> int: bytes"},
	{NULL, NULL, 0, NULL},
};

static PySequenceMethods bh_as_seq = {.sq_length = bh_len};
static PyBufferProcs bh_as_buffer = {.bf_getbuffer = bh_getbuffer};

PyTypeObject mc_py_handle_type = {
	/* clang-format off */
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = MODULE_NAME ".BufferHandle",
	/* clang-format on */
	.tp_basicsize = sizeof(struct bh_obj),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "An object's bytes (buffer protocol, 1-D bytes), freed with the handle.",
	.tp_dealloc = bh_dealloc,
	.tp_repr = bh_repr,
	.tp_methods = bh_methods,
	.tp_as_sequence = &bh_as_seq,
	.tp_as_buffer = &bh_as_buffer,
};

PyObject *mc_py_store_get_buffer(DEFARGS)
{
	const char *key;
	void *buf;
	int64_t n;
	PARSE("get_buffer", 1, "key");

	if (arg_str(a[0], "get_buffer", "key", &key) < 0)
		return NULL;
	n = get_malloc(ST(self), key, &buf);
	if (n < 0)
		Py_RETURN_NONE;
	return handle_wrap(buf, (size_t)n);
}

/* One batch_get_buffer call's slabs: the allocator of mc_store_batch_get_alloc. */
struct slab_fill {
	size_t n;		/* keys in the call */
	struct bh_slab *spare;	/* taken from spare_slab, not yet used */
	struct bh_slab *slabs;	/* in use, newest first */
	void **bufs;		/* per key: where it reads to */
	struct bh_slab **owner; /* per key: in which slab */
};

static void *slab_alloc(void *ctx, size_t i, size_t size)
{
	struct slab_fill *f = ctx;
	struct bh_slab *sl = f->slabs;
	size_t need = ((size ? size : 1) + SLAB_ALIGN - 1) & ~(size_t)(SLAB_ALIGN - 1);
	void *p;

	if (need < size)
		return NULL;
	if (!sl || sl->cap - sl->used < need) {
		/* room for the rest of the batch at this size */
		size_t rest = f->n - i, cap = need;

		if (rest <= (SIZE_MAX - SLAB_HDR) / need)
			cap = need * rest;
		if (f->spare && f->spare->cap >= cap && f->spare->cap / 2 <= cap) {
			sl = f->spare;
			f->spare = NULL;
		} else {
			sl = aligned_alloc(SLAB_ALIGN, SLAB_HDR + cap);
			if (!sl && cap > need) /* the rest may not need it: this one */
				sl = aligned_alloc(SLAB_ALIGN, SLAB_HDR + (cap = need));
			if (!sl)
				return NULL;
			sl->cap = cap;
		}
		sl->refs = 1; /* the call's */
		sl->used = 0;
		sl->next = f->slabs;
		f->slabs = sl;
	}
	p = (char *)sl + SLAB_HDR + sl->used;
	sl->used += need;
	f->bufs[i] = p;
	f->owner[i] = sl;
	return p;
}

PyObject *mc_py_store_batch_get_buffer(DEFARGS)
{
	struct keys k;
	struct slab_fill f = {0};
	PyObject *out;
	int64_t *sizes;
	struct call c;
	PARSE("batch_get_buffer", 1, "keys");

	if (keys_from(a[0], "batch_get_buffer", &k) < 0)
		return NULL;
	f.n = k.n;
	f.bufs = PyMem_Calloc(k.n ? k.n : 1, sizeof(*f.bufs));
	f.owner = PyMem_Calloc(k.n ? k.n : 1, sizeof(*f.owner));
	sizes = PyMem_Calloc(k.n ? k.n : 1, sizeof(*sizes));
	if (!f.bufs || !f.owner || !sizes) {
		PyMem_Free(f.bufs);
		PyMem_Free(f.owner);
		PyMem_Free(sizes);
		keys_release(&k);
		return PyErr_NoMemory();
	}
	f.spare = spare_slab; /* under the GIL */
	spare_slab = NULL;
	call_begin(&c, ST(self), false);
	mc_store_batch_get_alloc(ST(self)->s, k.v, k.n, slab_alloc, &f, sizes);
	call_end(&c);
	out = PyList_New((Py_ssize_t)k.n);
	for (size_t i = 0; i < k.n; i++) {
		PyObject *h = NULL;
		if (sizes[i] >= 0 && f.owner[i]) {
			h = handle_new(f.bufs[i], (size_t)sizes[i], f.owner[i]);
			if (!h)
				PyErr_Clear();
		}
		h = h ? h : Py_NewRef(Py_None);
		if (out)
			PyList_SET_ITEM(out, (Py_ssize_t)i, h);
		else
			Py_DECREF(h);
	}
	while (f.slabs) { /* the call's references: a slab no handle took goes */
		struct bh_slab *sl = f.slabs;
		f.slabs = sl->next;
		slab_unref(sl);
	}
	if (f.spare) { /* not used: back, or freed if another came back meanwhile */
		f.spare->refs = 1;
		slab_unref(f.spare);
	}
	PyMem_Free(f.bufs);
	PyMem_Free(f.owner);
	PyMem_Free(sizes);
	keys_release(&k);
	return out;
}
