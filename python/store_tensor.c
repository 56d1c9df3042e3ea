/*
 * python/store_tensor.c - the tensor calls of `mooncake.store`: put_tensor,
 * get_tensor, their batch, upsert, pub, into and from forms, and the
 * legacy tensor-parallel calls (*_with_tp: one TP axis).
 *
 * torch is imported when a tensor method is called, never at import time.
 * A stored tensor is upstream's [304-byte header][raw bytes] (spec store.md
 * 1.12); the header is built, encoded and validated by the library's codec
 * (<mooncake/tensor_hdr.h>), and torch is only asked for a contiguous CPU
 * tensor, its dtype, shape and data pointer, or for an empty tensor to
 * copy into.  A stored dtype the installed torch lacks reads as None with
 * a RuntimeWarning; bytes that are not a valid stored tensor read as None.
 *
 * Tensor parallelism: put_tensor_with_tp splits a tensor with torch.chunk
 * and writes chunk r under "<key>_tp_<r>" as a SHARD with one TP axis;
 * the get forms read one rank's shard back.
 */
#include "store_int.h"

/* ---- tensors ------------------------------------------------------------------------ */

/* A stored tensor's bytes are [header][payload]; the header codec and its
 * validator live in the library (mooncake/tensor_hdr.h), shared with C
 * programs that read or write the same objects. */

/* Whether total bytes at buf are a valid stored tensor; *h filled if so. */
static bool tensor_decode(const void *buf, uint64_t total, struct mc_tensor_hdr *h)
{
	return mc_tensor_hdr_decode(buf, total, h) == MC_OK;
}

static PyObject *import_torch(void)
{
	return PyImport_ImportModule("torch");
}

/* A tensor prepared for writing: contiguous, on the CPU, with its header. */
struct wtensor {
	PyObject *t; /* the contiguous CPU tensor (owns the data) */
	struct mc_tensor_hdr h;
	const void *data;
	size_t nbytes;
};

static void wtensor_release(struct wtensor *w)
{
	Py_CLEAR(w->t);
}

/* torch dtype -> code (-1 if unsupported). */
static int dtype_code(PyObject *torch, PyObject *dtype)
{
	for (int i = 0; i < MC_TENSOR_DTYPE_COUNT; i++) {
		PyObject *d = PyObject_GetAttrString(torch, mc_tensor_dtype_name(i));
		int eq;
		if (!d) {
			PyErr_Clear();
			continue;
		}
		eq = PyObject_RichCompareBool(d, dtype, Py_EQ);
		Py_DECREF(d);
		if (eq < 0) {
			PyErr_Clear();
			continue;
		}
		if (eq)
			return i;
	}
	return -1;
}

/* Fill the FULL-layout header of tensor t (any torch.Tensor) and keep a
 * contiguous CPU copy.  -1 with TypeError for a non-tensor; 1 for an
 * unsupported tensor (dtype, > 8 dims): the caller returns -600. */
static int wtensor_from(PyObject *torch, PyObject *t, const char *fname, struct wtensor *w)
{
	PyObject *tensor_type, *x = NULL, *dev = NULL, *dtype = NULL, *shape = NULL, *v = NULL;
	int rc = -1, is;
	long long numel;

	memset(w, 0, sizeof(*w));
	mc_tensor_hdr_init(&w->h);
	tensor_type = PyObject_GetAttrString(torch, "Tensor");
	if (!tensor_type)
		return -1;
	is = PyObject_IsInstance(t, tensor_type);
	Py_DECREF(tensor_type);
	if (is <= 0) {
		if (is == 0)
			PyErr_Format(PyExc_TypeError, "%s(): expected a torch.Tensor, not %.100s",
				     fname, Py_TYPE(t)->tp_name);
		return -1;
	}
	x = PyObject_CallMethod(t, "detach", NULL);
	if (!x)
		goto out;
	dev = PyObject_GetAttrString(x, "device");
	if (!dev)
		goto out;
	v = PyObject_GetAttrString(dev, "type");
	if (!v)
		goto out;
	if (PyUnicode_CompareWithASCIIString(v, "cpu") != 0) /* device memory: stage to host */
		Py_SETREF(x, PyObject_CallMethod(x, "cpu", NULL));
	Py_CLEAR(v);
	if (!x)
		goto out;
	Py_SETREF(x, PyObject_CallMethod(x, "contiguous", NULL));
	if (!x)
		goto out;
	dtype = PyObject_GetAttrString(x, "dtype");
	shape = dtype ? PyObject_GetAttrString(x, "shape") : NULL;
	if (!shape)
		goto out;
	w->h.dtype = dtype_code(torch, dtype);
	{
		PyObject *st = PySequence_Tuple(shape);
		if (!st)
			goto out;
		Py_SETREF(shape, st);
	}
	if (w->h.dtype < 0) {
		/* complex, quantized, uint1..7, ...: no code in the stored format */
		rc = PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
				      "%s(): %R has no dtype code in the stored tensor format; "
				      "returning -600",
				      fname, dtype) < 0
			     ? -1
			     : 1;
		goto out;
	}
	if (PyTuple_GET_SIZE(shape) > MC_TENSOR_MAX_DIMS) {
		rc = 1;
		goto out;
	}
	w->h.ndim = (int32_t)PyTuple_GET_SIZE(shape);
	for (int i = 0; i < w->h.ndim; i++) {
		long long d = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
		if (d == -1 && PyErr_Occurred())
			goto out;
		w->h.global_shape[i] = d;
		w->h.local_shape[i] = d;
	}
	v = PyObject_CallMethod(x, "numel", NULL);
	if (!v)
		goto out;
	numel = PyLong_AsLongLong(v);
	Py_CLEAR(v);
	if (numel < 0 && PyErr_Occurred())
		goto out;
	w->nbytes = (size_t)numel * mc_tensor_dtype_size(w->h.dtype);
	w->h.data_bytes = w->nbytes;
	v = PyObject_CallMethod(x, "data_ptr", NULL);
	if (!v)
		goto out;
	w->data = PyLong_AsVoidPtr(v);
	if (!w->data && PyErr_Occurred())
		goto out;
	w->t = Py_NewRef(x);
	rc = 0;
out:
	Py_XDECREF(v);
	Py_XDECREF(shape);
	Py_XDECREF(dtype);
	Py_XDECREF(dev);
	Py_XDECREF(x);
	return rc;
}

/* Write one prepared tensor (GIL released by the caller). */
static mc_status wtensor_put(struct mc_store *s, const char *key, const struct wtensor *w,
			     const struct mc_store_config *cfg, bool upsert)
{
	uint8_t hdr[MC_TENSOR_HDR_SIZE];
	const void *parts[2] = {hdr, w->data};
	size_t lens[2] = {MC_TENSOR_HDR_SIZE, w->nbytes};

	mc_tensor_hdr_encode(&w->h, hdr);

	if (upsert)
		return mc_store_upsert_parts(s, key, parts, lens, w->nbytes ? 2 : 1, cfg);
	return mc_store_put_parts(s, key, parts, lens, w->nbytes ? 2 : 1, cfg);
}

/*
 * The torch dtype object for a stored dtype code (new reference).  A code
 * the installed torch lacks (float8_* before torch 2.1, uint16/32/64
 * before 2.3; Debian's 1.13 has neither) cannot become a tensor: that is
 * reported with a RuntimeWarning naming the dtype and the torch version,
 * and NULL comes back without an exception, so the data call returns None.
 * NULL with an exception: the warning was turned into an error.
 */
static PyObject *torch_dtype(PyObject *torch, int code)
{
	PyObject *d = PyObject_GetAttrString(torch, mc_tensor_dtype_name(code)), *v;
	const char *vs;
	int w;

	if (d || !PyErr_ExceptionMatches(PyExc_AttributeError))
		return d;
	PyErr_Clear();
	v = PyObject_GetAttrString(torch, "__version__");
	vs = v && PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;
	if (!vs) {
		PyErr_Clear();
		vs = "?";
	}
	w = PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
			     "mooncake.store: the stored tensor has dtype %s (code %d), which "
			     "the installed torch %s does not have; returning None",
			     mc_tensor_dtype_name(code), code, vs);
	Py_XDECREF(v);
	(void)w; /* < 0: the warning is now the pending exception */
	return NULL;
}

static PyObject *shape_tuple(const struct mc_tensor_hdr *h)
{
	PyObject *t = PyTuple_New(h->ndim);
	for (int i = 0; t && i < h->ndim; i++) {
		PyObject *d = PyLong_FromLongLong(h->local_shape[i]);
		if (!d) {
			Py_CLEAR(t);
			break;
		}
		PyTuple_SET_ITEM(t, i, d);
	}
	return t;
}

/* A new CPU tensor holding a copy of a stored tensor's payload; None if
 * the bytes are not a valid stored tensor. */
static PyObject *tensor_from_bytes(PyObject *torch, const void *buf, uint64_t total)
{
	struct mc_tensor_hdr h;
	PyObject *dt, *shape, *kw, *empty, *t = NULL, *p;
	void *dst;

	if (!tensor_decode(buf, total, &h))
		Py_RETURN_NONE;
	dt = torch_dtype(torch, h.dtype);
	if (!dt) {
		if (PyErr_Occurred())
			return NULL;
		Py_RETURN_NONE;
	}
	shape = shape_tuple(&h);
	kw = shape ? Py_BuildValue("{s:O}", "dtype", dt) : NULL;
	empty = kw ? PyObject_GetAttrString(torch, "empty") : NULL;
	if (empty) {
		PyObject *args = PyTuple_Pack(1, shape);
		if (args)
			t = PyObject_Call(empty, args, kw);
		Py_XDECREF(args);
	}
	Py_XDECREF(empty);
	Py_XDECREF(kw);
	Py_XDECREF(shape);
	Py_DECREF(dt);
	if (!t)
		return NULL;
	if (h.data_bytes) {
		p = PyObject_CallMethod(t, "data_ptr", NULL);
		if (!p) {
			Py_DECREF(t);
			return NULL;
		}
		dst = PyLong_AsVoidPtr(p);
		Py_DECREF(p);
		memcpy(dst, (const char *)buf + h.data_offset, h.data_bytes);
	}
	return t;
}

/* A tensor viewing a stored tensor that lies at buf (a registered buffer);
 * None if invalid. */
static PyObject *tensor_view(PyObject *torch, void *buf, uint64_t total)
{
	struct mc_tensor_hdr h;
	PyObject *dt, *shape, *mv = NULL, *t = NULL, *fb = NULL, *kw = NULL, *args = NULL;

	if (!tensor_decode(buf, total, &h))
		Py_RETURN_NONE;
	if (h.data_bytes == 0)
		return tensor_from_bytes(torch, buf, total);
	dt = torch_dtype(torch, h.dtype);
	if (!dt) {
		if (PyErr_Occurred())
			return NULL;
		Py_RETURN_NONE;
	}
	shape = shape_tuple(&h);
	if (!shape)
		goto out;
	mv = PyMemoryView_FromMemory((char *)buf + h.data_offset, (Py_ssize_t)h.data_bytes,
				     PyBUF_WRITE);
	fb = mv ? PyObject_GetAttrString(torch, "frombuffer") : NULL;
	kw = fb ? Py_BuildValue("{s:O}", "dtype", dt) : NULL;
	args = kw ? PyTuple_Pack(1, mv) : NULL;
	if (args) {
		PyObject *flat = PyObject_Call(fb, args, kw);
		if (flat) {
			t = PyObject_CallMethod(flat, "reshape", "O", shape);
			Py_DECREF(flat);
		}
	}
out:
	Py_XDECREF(args);
	Py_XDECREF(kw);
	Py_XDECREF(fb);
	Py_XDECREF(mv);
	Py_XDECREF(shape);
	Py_DECREF(dt);
	return t;
}

/* Write tensors under keys (n of each); per-key statuses in res. */
static int tensors_put(struct store_obj *st, const char *fname, PyObject *torch,
		       const char *const *keys, PyObject *const *tensors, size_t n, PyObject *cfg_o,
		       bool upsert, mc_status *res)
{
	struct wtensor *w;
	struct cfg cfg;
	struct call c;

	if (mc_py_cfg_from(cfg_o, fname, &cfg) < 0)
		return -1;
	w = PyMem_Calloc(n ? n : 1, sizeof(*w));
	if (!w) {
		mc_py_cfg_release(&cfg);
		PyErr_NoMemory();
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		int r = wtensor_from(torch, tensors[i], fname, &w[i]);
		if (r < 0) {
			for (size_t j = 0; j < i; j++)
				wtensor_release(&w[j]);
			PyMem_Free(w);
			mc_py_cfg_release(&cfg);
			return -1;
		}
		res[i] = r ? MC_ERR_INVALID_PARAMS : MC_OK;
	}
	call_begin(&c, st, false);
	for (size_t i = 0; i < n; i++) {
		struct mc_store_config ci = mc_py_cfg_key(&cfg, i, n);
		if (res[i] == MC_OK)
			res[i] = upsert && cfg.upsert_refused
					 ? MC_ERR_INVALID_PARAMS
					 : wtensor_put(st->s, keys[i], &w[i], &ci, upsert);
	}
	call_end(&c);
	for (size_t i = 0; i < n; i++)
		wtensor_release(&w[i]);
	PyMem_Free(w);
	mc_py_cfg_release(&cfg);
	return 0;
}

static PyObject *tensor_put_one(PyObject *self, const char *fname, PyObject *key_o, PyObject *t,
				PyObject *cfg_o, bool upsert)
{
	const char *key;
	PyObject *torch;
	mc_status rc;
	int r;

	if (arg_str(key_o, fname, "key", &key) < 0)
		return NULL;
	torch = import_torch();
	if (!torch)
		return NULL;
	r = tensors_put(ST(self), fname, torch, &key, &t, 1, cfg_o, upsert, &rc);
	Py_DECREF(torch);
	return r < 0 ? NULL : PyLong_FromLong(rc);
}

PyObject *mc_py_store_put_tensor(DEFARGS)
{
	PARSE("put_tensor", 2, "key", "tensor");
	return tensor_put_one(self, "put_tensor", a[0], a[1], NULL, false);
}

PyObject *mc_py_store_upsert_tensor(DEFARGS)
{
	PARSE("upsert_tensor", 2, "key", "tensor");
	return tensor_put_one(self, "upsert_tensor", a[0], a[1], NULL, true);
}

PyObject *mc_py_store_pub_tensor(DEFARGS)
{
	PARSE("pub_tensor", 2, "key", "tensor", "config");
	return tensor_put_one(self, "pub_tensor", a[0], a[1], a[2], false);
}

PyObject *mc_py_store_upsert_pub_tensor(DEFARGS)
{
	PARSE("upsert_pub_tensor", 2, "key", "tensor", "config");
	return tensor_put_one(self, "upsert_pub_tensor", a[0], a[1], a[2], true);
}

static PyObject *tensor_put_batch(PyObject *self, const char *fname, PyObject *keys_o,
				  PyObject *tensors_o, PyObject *cfg_o, bool upsert)
{
	struct keys k;
	PyObject *tt, *torch = NULL, *out = NULL;
	mc_status *res = NULL;

	if (keys_from(keys_o, fname, &k) < 0)
		return NULL;
	tt = arg_seq(tensors_o, fname, "tensors_list", NULL);
	if (!tt)
		goto out;
	if ((size_t)PyTuple_GET_SIZE(tt) != k.n) {
		out = fill_list(k.n, ERR_INVALID_PARAMS);
		goto out;
	}
	torch = import_torch();
	res = PyMem_Calloc(k.n ? k.n : 1, sizeof(*res));
	if (!torch || !res) {
		if (!res)
			PyErr_NoMemory();
		goto out;
	}
	if (tensors_put(ST(self), fname, torch, k.v, &PyTuple_GET_ITEM(tt, 0), k.n, cfg_o, upsert,
			res) == 0)
		out = status_list(res, k.n);
out:
	PyMem_Free(res);
	Py_XDECREF(torch);
	Py_XDECREF(tt);
	keys_release(&k);
	return out;
}

PyObject *mc_py_store_batch_put_tensor(DEFARGS)
{
	PARSE("batch_put_tensor", 2, "keys", "tensors_list");
	return tensor_put_batch(self, "batch_put_tensor", a[0], a[1], NULL, false);
}

PyObject *mc_py_store_batch_upsert_tensor(DEFARGS)
{
	PARSE("batch_upsert_tensor", 2, "keys", "tensors_list");
	return tensor_put_batch(self, "batch_upsert_tensor", a[0], a[1], NULL, true);
}

PyObject *mc_py_store_batch_pub_tensor(DEFARGS)
{
	PARSE("batch_pub_tensor", 2, "keys", "tensors_list", "config");
	return tensor_put_batch(self, "batch_pub_tensor", a[0], a[1], a[2], false);
}

PyObject *mc_py_store_batch_upsert_pub_tensor(DEFARGS)
{
	PARSE("batch_upsert_pub_tensor", 2, "keys", "tensors_list", "config");
	return tensor_put_batch(self, "batch_upsert_pub_tensor", a[0], a[1], a[2], true);
}

/* Read key as a tensor (a new CPU tensor) or None. */
static PyObject *tensor_get_key(struct store_obj *st, PyObject *torch, const char *key)
{
	void *buf;
	int64_t n = get_malloc(st, key, &buf);
	PyObject *t;
	if (n < 0)
		Py_RETURN_NONE;
	t = tensor_from_bytes(torch, buf, (uint64_t)n);
	free(buf);
	if (!t) { /* torch refused: a data-returning call does not raise */
		PyErr_Clear();
		Py_RETURN_NONE;
	}
	return t;
}

PyObject *mc_py_store_get_tensor(DEFARGS)
{
	const char *key;
	PyObject *torch, *t;
	PARSE("get_tensor", 1, "key");
	if (arg_str(a[0], "get_tensor", "key", &key) < 0)
		return NULL;
	torch = import_torch();
	if (!torch)
		return NULL;
	t = tensor_get_key(ST(self), torch, key);
	Py_DECREF(torch);
	return t;
}

PyObject *mc_py_store_batch_get_tensor(DEFARGS)
{
	struct keys k;
	PyObject *torch, *out;
	PARSE("batch_get_tensor", 1, "keys");
	if (keys_from(a[0], "batch_get_tensor", &k) < 0)
		return NULL;
	torch = import_torch();
	if (!torch) {
		keys_release(&k);
		return NULL;
	}
	out = PyList_New((Py_ssize_t)k.n);
	for (size_t i = 0; out && i < k.n; i++) {
		PyObject *t = tensor_get_key(ST(self), torch, k.v[i]);
		if (!t) {
			Py_CLEAR(out);
			break;
		}
		PyList_SET_ITEM(out, (Py_ssize_t)i, t);
	}
	Py_DECREF(torch);
	keys_release(&k);
	return out;
}

/* get_into, then a tensor viewing the buffer; None on failure. */
static PyObject *tensor_into_key(struct store_obj *st, PyObject *torch, const char *key,
				 uint64_t ptr, uint64_t size)
{
	struct call c;
	int64_t n;
	PyObject *t;

	call_begin(&c, st, false);
	n = mc_store_get_into(st->s, key, (void *)(uintptr_t)ptr, (size_t)size);
	call_end(&c);
	if (n < 0)
		Py_RETURN_NONE;
	t = tensor_view(torch, (void *)(uintptr_t)ptr, (uint64_t)n);
	if (!t) {
		PyErr_Clear();
		Py_RETURN_NONE;
	}
	return t;
}

PyObject *mc_py_store_get_tensor_into(DEFARGS)
{
	const char *key;
	uint64_t ptr, size;
	PyObject *torch, *t;
	PARSE("get_tensor_into", 3, "key", "buffer_ptr", "size");
	if (arg_str(a[0], "get_tensor_into", "key", &key) < 0 ||
	    arg_u64(a[1], "get_tensor_into", "buffer_ptr", &ptr) < 0 ||
	    arg_u64(a[2], "get_tensor_into", "size", &size) < 0)
		return NULL;
	torch = import_torch();
	if (!torch)
		return NULL;
	t = tensor_into_key(ST(self), torch, key, ptr, size);
	Py_DECREF(torch);
	return t;
}

PyObject *mc_py_store_batch_get_tensor_into(DEFARGS)
{
	struct keys k;
	uint64_t *ptrs = NULL, *sizes = NULL;
	size_t np, ns;
	PyObject *torch = NULL, *out = NULL;
	PARSE("batch_get_tensor_into", 3, "keys", "buffer_ptrs", "sizes");
	if (keys_from(a[0], "batch_get_tensor_into", &k) < 0)
		return NULL;
	if (u64s_from(a[1], "batch_get_tensor_into", "buffer_ptrs", &ptrs, &np) < 0 ||
	    u64s_from(a[2], "batch_get_tensor_into", "sizes", &sizes, &ns) < 0)
		goto out;
	torch = import_torch();
	if (!torch)
		goto out;
	out = PyList_New((Py_ssize_t)k.n);
	for (size_t i = 0; out && i < k.n; i++) {
		PyObject *t = (np == k.n && ns == k.n)
				      ? tensor_into_key(ST(self), torch, k.v[i], ptrs[i], sizes[i])
				      : Py_NewRef(Py_None);
		if (!t) {
			Py_CLEAR(out);
			break;
		}
		PyList_SET_ITEM(out, (Py_ssize_t)i, t);
	}
out:
	Py_XDECREF(torch);
	PyMem_Free(ptrs);
	PyMem_Free(sizes);
	keys_release(&k);
	return out;
}

/* put_tensor_from(key, buffer_ptr, size): the buffer already holds a
 * stored tensor; it is validated, then written zero-copy. */
static mc_status tensor_from_buffer(struct mc_store *s, const char *key, uint64_t ptr,
				    uint64_t size, const struct mc_store_config *cfg, bool upsert)
{
	struct mc_tensor_hdr h;
	/* the header is read here first: the buffer must be registered memory */
	if (!ptr || mc_store_check_buffer(s, (void *)(uintptr_t)ptr, (size_t)size) != MC_OK ||
	    !tensor_decode((void *)(uintptr_t)ptr, size, &h))
		return MC_ERR_INVALID_PARAMS;
	return upsert ? mc_store_upsert_from(s, key, (void *)(uintptr_t)ptr, (size_t)size, cfg)
		      : mc_store_put_from(s, key, (void *)(uintptr_t)ptr, (size_t)size, cfg);
}

static PyObject *tensor_from_one(PyObject *self, const char *fname, PyObject *const *args,
				 Py_ssize_t nargs, PyObject *kwnames, bool upsert)
{
	const char *key;
	uint64_t ptr, size;
	struct cfg cfg;
	struct call c;
	mc_status rc;
	PARSE(fname, 3, "key", "buffer_ptr", "size", "config");
	if (arg_str(a[0], fname, "key", &key) < 0 || arg_u64(a[1], fname, "buffer_ptr", &ptr) < 0 ||
	    arg_u64(a[2], fname, "size", &size) < 0 || mc_py_cfg_from(a[3], fname, &cfg) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	rc = upsert && cfg.upsert_refused
		     ? MC_ERR_INVALID_PARAMS
		     : tensor_from_buffer(ST(self)->s, key, ptr, size, &cfg.c, upsert);
	call_end(&c);
	mc_py_cfg_release(&cfg);
	return PyLong_FromLong(rc);
}

PyObject *mc_py_store_put_tensor_from(DEFARGS)
{
	return tensor_from_one(self, "put_tensor_from", args, nargs, kwnames, false);
}

PyObject *mc_py_store_upsert_tensor_from(DEFARGS)
{
	return tensor_from_one(self, "upsert_tensor_from", args, nargs, kwnames, true);
}

static PyObject *tensor_from_batch(PyObject *self, const char *fname, PyObject *const *args,
				   Py_ssize_t nargs, PyObject *kwnames, bool upsert)
{
	struct keys k;
	uint64_t *ptrs = NULL, *sizes = NULL;
	size_t np, ns;
	struct cfg cfg;
	struct call c;
	mc_status *res = NULL;
	PyObject *out = NULL;
	PARSE(fname, 3, "keys", "buffer_ptrs", "sizes", "config");
	if (keys_from(a[0], fname, &k) < 0)
		return NULL;
	if (u64s_from(a[1], fname, "buffer_ptrs", &ptrs, &np) < 0 ||
	    u64s_from(a[2], fname, "sizes", &sizes, &ns) < 0)
		goto out;
	if (np != k.n || ns != k.n) {
		out = fill_list(k.n, ERR_INVALID_PARAMS);
		goto out;
	}
	if (mc_py_cfg_from(a[3], fname, &cfg) < 0)
		goto out;
	res = PyMem_Calloc(k.n ? k.n : 1, sizeof(*res));
	if (res) {
		call_begin(&c, ST(self), false);
		for (size_t i = 0; i < k.n; i++) {
			struct mc_store_config ci = mc_py_cfg_key(&cfg, i, k.n);
			res[i] = upsert && cfg.upsert_refused
					 ? MC_ERR_INVALID_PARAMS
					 : tensor_from_buffer(ST(self)->s, k.v[i], ptrs[i],
							      sizes[i], &ci, upsert);
		}
		call_end(&c);
		out = status_list(res, k.n);
	} else {
		PyErr_NoMemory();
	}
	mc_py_cfg_release(&cfg);
out:
	PyMem_Free(res);
	PyMem_Free(ptrs);
	PyMem_Free(sizes);
	keys_release(&k);
	return out;
}

PyObject *mc_py_store_batch_put_tensor_from(DEFARGS)
{
	return tensor_from_batch(self, "batch_put_tensor_from", args, nargs, kwnames, false);
}

PyObject *mc_py_store_batch_upsert_tensor_from(DEFARGS)
{
	return tensor_from_batch(self, "batch_upsert_tensor_from", args, nargs, kwnames, true);
}

/* ---- tensor parallelism (legacy single TP axis) ------------------------------------- */

/* "<key>_tp_<rank>" in a Python str. */
static PyObject *tp_key(const char *key, long rank)
{
	return PyUnicode_FromFormat("%s_tp_%ld", key, rank);
}

/*
 * Split t along split_dim into tp_size chunks (torch.chunk) and write every
 * chunk r under "<key>_tp_<r>" as a SHARD with one TP axis; tp_size <= 1
 * writes the whole tensor under key.  Returns 0 or the first failure.
 */
static int tp_put(struct store_obj *st, const char *fname, PyObject *torch, const char *key,
		  PyObject *t, PyObject *cfg_o, long tp_size, long split_dim, mc_status *out)
{
	PyObject *chunks = NULL, *ct = NULL, *keys = NULL;
	struct wtensor *w = NULL;
	const char **kv = NULL;
	struct cfg cfg;
	struct call c;
	Py_ssize_t n = 0;
	int r, ret = -1;
	int64_t global[MC_TENSOR_MAX_DIMS];
	int ndim;

	if (tp_size <= 1) {
		struct wtensor one;
		r = wtensor_from(torch, t, fname, &one);
		if (r < 0)
			return -1;
		if (r > 0) {
			*out = MC_ERR_INVALID_PARAMS;
			return 0;
		}
		if (mc_py_cfg_from(cfg_o, fname, &cfg) < 0) {
			wtensor_release(&one);
			return -1;
		}
		call_begin(&c, st, false);
		*out = wtensor_put(st->s, key, &one, &cfg.c, false);
		call_end(&c);
		mc_py_cfg_release(&cfg);
		wtensor_release(&one);
		return 0;
	}
	{
		struct wtensor whole; /* validates t and gives the global shape */
		r = wtensor_from(torch, t, fname, &whole);
		if (r < 0)
			return -1;
		ndim = whole.h.ndim;
		memcpy(global, whole.h.global_shape, sizeof(global));
		wtensor_release(&whole);
		if (r > 0 || split_dim < 0 || split_dim >= ndim || tp_size > 65536) {
			*out = MC_ERR_INVALID_PARAMS;
			return 0;
		}
	}
	chunks = PyObject_CallMethod(torch, "chunk", "Oll", t, tp_size, split_dim);
	if (!chunks)
		return -1;
	ct = PySequence_Tuple(chunks);
	if (!ct)
		goto out;
	n = PyTuple_GET_SIZE(ct);
	w = PyMem_Calloc((size_t)n + 1, sizeof(*w));
	kv = PyMem_Calloc((size_t)n + 1, sizeof(*kv));
	keys = PyTuple_New(n);
	if (!w || !kv || !keys) {
		if (!PyErr_Occurred())
			PyErr_NoMemory();
		goto out;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *kk = tp_key(key, (long)i);
		if (!kk)
			goto out;
		PyTuple_SET_ITEM(keys, i, kk);
		kv[i] = PyUnicode_AsUTF8(kk);
		if (!kv[i] || wtensor_from(torch, PyTuple_GET_ITEM(ct, i), fname, &w[i]) != 0)
			goto out;
		memcpy(w[i].h.global_shape, global, sizeof(global));
		w[i].h.layout_kind = MC_TENSOR_LAYOUT_SHARD;
		w[i].h.axis_count = 1;
		w[i].h.axes[0].kind = MC_TENSOR_AXIS_TP;
		w[i].h.axes[0].axis_index = 0;
		w[i].h.axes[0].shard_rank = (int32_t)i;
		w[i].h.axes[0].shard_count = (int32_t)n;
		w[i].h.axes[0].split_dim = (int32_t)split_dim;
	}
	if (mc_py_cfg_from(cfg_o, fname, &cfg) < 0)
		goto out;
	call_begin(&c, st, false);
	*out = MC_OK;
	for (Py_ssize_t i = 0; i < n && *out == MC_OK; i++)
		*out = wtensor_put(st->s, kv[i], &w[i], &cfg.c, false);
	call_end(&c);
	mc_py_cfg_release(&cfg);
	ret = 0;
out:
	for (Py_ssize_t i = 0; w && i < n; i++)
		wtensor_release(&w[i]);
	PyMem_Free(w);
	PyMem_Free(kv);
	Py_XDECREF(keys);
	Py_XDECREF(ct);
	Py_XDECREF(chunks);
	return ret;
}

static PyObject *tp_put_one(PyObject *self, const char *fname, PyObject *key_o, PyObject *t,
			    PyObject *cfg_o, PyObject *rank_o, PyObject *size_o, PyObject *dim_o)
{
	const char *key;
	long rank, size, dim;
	PyObject *torch;
	mc_status rc;
	int r;

	if (arg_str(key_o, fname, "key", &key) < 0 ||
	    opt_long(rank_o, 0, fname, "tp_rank", &rank) < 0 ||
	    opt_long(size_o, 1, fname, "tp_size", &size) < 0 ||
	    opt_long(dim_o, 0, fname, "split_dim", &dim) < 0)
		return NULL;
	torch = import_torch();
	if (!torch)
		return NULL;
	r = tp_put(ST(self), fname, torch, key, t, cfg_o, size, dim, &rc);
	Py_DECREF(torch);
	return r < 0 ? NULL : PyLong_FromLong(rc);
}

PyObject *mc_py_store_put_tensor_with_tp(DEFARGS)
{
	PARSE("put_tensor_with_tp", 2, "key", "tensor", "tp_rank", "tp_size", "split_dim");
	return tp_put_one(self, "put_tensor_with_tp", a[0], a[1], NULL, a[2], a[3], a[4]);
}

PyObject *mc_py_store_pub_tensor_with_tp(DEFARGS)
{
	PARSE("pub_tensor_with_tp", 2, "key", "tensor", "config", "tp_rank", "tp_size",
	      "split_dim");
	return tp_put_one(self, "pub_tensor_with_tp", a[0], a[1], a[2], a[3], a[4], a[5]);
}

static PyObject *tp_put_batch(PyObject *self, const char *fname, PyObject *keys_o,
			      PyObject *tensors_o, PyObject *cfg_o, PyObject *rank_o,
			      PyObject *size_o, PyObject *dim_o)
{
	struct keys k;
	PyObject *tt = NULL, *torch = NULL, *out = NULL;
	mc_status *res = NULL;
	long rank, size, dim;

	if (opt_long(rank_o, 0, fname, "tp_rank", &rank) < 0 ||
	    opt_long(size_o, 1, fname, "tp_size", &size) < 0 ||
	    opt_long(dim_o, 0, fname, "split_dim", &dim) < 0 || keys_from(keys_o, fname, &k) < 0)
		return NULL;
	tt = arg_seq(tensors_o, fname, "tensors_list", NULL);
	if (!tt)
		goto out;
	if ((size_t)PyTuple_GET_SIZE(tt) != k.n) {
		out = fill_list(k.n, ERR_INVALID_PARAMS);
		goto out;
	}
	torch = import_torch();
	res = PyMem_Calloc(k.n ? k.n : 1, sizeof(*res));
	if (!torch || !res) {
		if (!res)
			PyErr_NoMemory();
		goto out;
	}
	for (size_t i = 0; i < k.n; i++)
		if (tp_put(ST(self), fname, torch, k.v[i], PyTuple_GET_ITEM(tt, i), cfg_o, size,
			   dim, &res[i]) < 0)
			goto out;
	out = status_list(res, k.n);
out:
	PyMem_Free(res);
	Py_XDECREF(torch);
	Py_XDECREF(tt);
	keys_release(&k);
	return out;
}

PyObject *mc_py_store_batch_put_tensor_with_tp(DEFARGS)
{
	PARSE("batch_put_tensor_with_tp", 2, "base_keys", "tensors_list", "tp_rank", "tp_size",
	      "split_dim");
	return tp_put_batch(self, "batch_put_tensor_with_tp", a[0], a[1], NULL, a[2], a[3], a[4]);
}

PyObject *mc_py_store_batch_pub_tensor_with_tp(DEFARGS)
{
	PARSE("batch_pub_tensor_with_tp", 2, "base_keys", "tensors_list", "config", "tp_rank",
	      "tp_size", "split_dim");
	return tp_put_batch(self, "batch_pub_tensor_with_tp", a[0], a[1], a[2], a[3], a[4], a[5]);
}

/* The key a TP read uses: "<key>_tp_<rank>", or key itself when size <= 1. */
static PyObject *tp_read_key(const char *key, long rank, long size)
{
	if (size <= 1)
		return PyUnicode_FromString(key);
	return tp_key(key, rank);
}

PyObject *mc_py_store_get_tensor_with_tp(DEFARGS)
{
	const char *key, *k2;
	long rank, size, dim;
	PyObject *torch, *kk, *t;
	PARSE("get_tensor_with_tp", 1, "key", "tp_rank", "tp_size", "split_dim");
	if (arg_str(a[0], "get_tensor_with_tp", "key", &key) < 0 ||
	    opt_long(a[1], 0, "get_tensor_with_tp", "tp_rank", &rank) < 0 ||
	    opt_long(a[2], 1, "get_tensor_with_tp", "tp_size", &size) < 0 ||
	    opt_long(a[3], 0, "get_tensor_with_tp", "split_dim", &dim) < 0)
		return NULL;
	if (size > 1 && (rank < 0 || rank >= size))
		Py_RETURN_NONE;
	kk = tp_read_key(key, rank, size);
	if (!kk)
		return NULL;
	k2 = PyUnicode_AsUTF8(kk);
	torch = k2 ? import_torch() : NULL;
	t = torch ? tensor_get_key(ST(self), torch, k2) : NULL;
	Py_XDECREF(torch);
	Py_DECREF(kk);
	return t;
}

PyObject *mc_py_store_batch_get_tensor_with_tp(DEFARGS)
{
	struct keys k;
	long rank, size;
	PyObject *torch, *out;
	PARSE("batch_get_tensor_with_tp", 1, "base_keys", "tp_rank", "tp_size");
	if (opt_long(a[1], 0, "batch_get_tensor_with_tp", "tp_rank", &rank) < 0 ||
	    opt_long(a[2], 1, "batch_get_tensor_with_tp", "tp_size", &size) < 0 ||
	    keys_from(a[0], "batch_get_tensor_with_tp", &k) < 0)
		return NULL;
	torch = import_torch();
	if (!torch) {
		keys_release(&k);
		return NULL;
	}
	out = PyList_New((Py_ssize_t)k.n);
	for (size_t i = 0; out && i < k.n; i++) {
		PyObject *kk = tp_read_key(k.v[i], rank, size), *t = NULL;
		const char *k2 = kk ? PyUnicode_AsUTF8(kk) : NULL;
		if (k2)
			t = (size > 1 && (rank < 0 || rank >= size))
				    ? Py_NewRef(Py_None)
				    : tensor_get_key(ST(self), torch, k2);
		Py_XDECREF(kk);
		if (!t) {
			Py_CLEAR(out);
			break;
		}
		PyList_SET_ITEM(out, (Py_ssize_t)i, t);
	}
	Py_DECREF(torch);
	keys_release(&k);
	return out;
}

PyObject *mc_py_store_get_tensor_with_tp_into(DEFARGS)
{
	const char *key, *k2;
	uint64_t ptr, bsize;
	long rank, size, dim;
	PyObject *torch, *kk, *t;
	PARSE("get_tensor_with_tp_into", 3, "key", "buffer_ptr", "size", "tp_rank", "tp_size",
	      "split_dim");
	if (arg_str(a[0], "get_tensor_with_tp_into", "key", &key) < 0 ||
	    arg_u64(a[1], "get_tensor_with_tp_into", "buffer_ptr", &ptr) < 0 ||
	    arg_u64(a[2], "get_tensor_with_tp_into", "size", &bsize) < 0 ||
	    opt_long(a[3], 0, "get_tensor_with_tp_into", "tp_rank", &rank) < 0 ||
	    opt_long(a[4], 1, "get_tensor_with_tp_into", "tp_size", &size) < 0 ||
	    opt_long(a[5], 0, "get_tensor_with_tp_into", "split_dim", &dim) < 0)
		return NULL;
	if (size > 1 && (rank < 0 || rank >= size))
		Py_RETURN_NONE;
	kk = tp_read_key(key, rank, size);
	if (!kk)
		return NULL;
	k2 = PyUnicode_AsUTF8(kk);
	torch = k2 ? import_torch() : NULL;
	t = torch ? tensor_into_key(ST(self), torch, k2, ptr, bsize) : NULL;
	Py_XDECREF(torch);
	Py_DECREF(kk);
	return t;
}

PyObject *mc_py_store_batch_get_tensor_with_tp_into(DEFARGS)
{
	struct keys k;
	uint64_t *ptrs = NULL, *sizes = NULL;
	size_t np, ns;
	long rank, size;
	PyObject *torch = NULL, *out = NULL;
	PARSE("batch_get_tensor_with_tp_into", 3, "base_keys", "buffer_ptrs", "sizes", "tp_rank",
	      "tp_size");
	if (opt_long(a[3], 0, "batch_get_tensor_with_tp_into", "tp_rank", &rank) < 0 ||
	    opt_long(a[4], 1, "batch_get_tensor_with_tp_into", "tp_size", &size) < 0 ||
	    keys_from(a[0], "batch_get_tensor_with_tp_into", &k) < 0)
		return NULL;
	if (u64s_from(a[1], "batch_get_tensor_with_tp_into", "buffer_ptrs", &ptrs, &np) < 0 ||
	    u64s_from(a[2], "batch_get_tensor_with_tp_into", "sizes", &sizes, &ns) < 0)
		goto out;
	torch = import_torch();
	if (!torch)
		goto out;
	out = PyList_New((Py_ssize_t)k.n);
	for (size_t i = 0; out && i < k.n; i++) {
		PyObject *kk = tp_read_key(k.v[i], rank, size), *t = NULL;
		const char *k2 = kk ? PyUnicode_AsUTF8(kk) : NULL;
		if (k2)
			t = (np != k.n || ns != k.n || (size > 1 && (rank < 0 || rank >= size)))
				    ? Py_NewRef(Py_None)
				    : tensor_into_key(ST(self), torch, k2, ptrs[i], sizes[i]);
		Py_XDECREF(kk);
		if (!t) {
			Py_CLEAR(out);
			break;
		}
		PyList_SET_ITEM(out, (Py_ssize_t)i, t);
	}
out:
	Py_XDECREF(torch);
	PyMem_Free(ptrs);
	PyMem_Free(sizes);
	keys_release(&k);
	return out;
}

/* put_tensor_with_tp_from(key, buffer_ptr, size, tp_rank, tp_size, split_dim):
 * the buffer holds a stored (full) tensor; its shards are written as
 * put_tensor_with_tp does. */
static int tp_from_one(struct store_obj *st, const char *fname, PyObject *torch, const char *key,
		       uint64_t ptr, uint64_t size, long tp_size, long dim, mc_status *out)
{
	PyObject *t;
	int r;
	struct mc_tensor_hdr h;

	if (!ptr || mc_store_check_buffer(st->s, (void *)(uintptr_t)ptr, (size_t)size) != MC_OK ||
	    !tensor_decode((void *)(uintptr_t)ptr, size, &h)) {
		*out = MC_ERR_INVALID_PARAMS;
		return 0;
	}
	t = tensor_view(torch, (void *)(uintptr_t)ptr, size);
	if (!t)
		return -1;
	if (t == Py_None) {
		Py_DECREF(t);
		*out = MC_ERR_INVALID_PARAMS;
		return 0;
	}
	r = tp_put(st, fname, torch, key, t, NULL, tp_size, dim, out);
	Py_DECREF(t);
	return r;
}

PyObject *mc_py_store_put_tensor_with_tp_from(DEFARGS)
{
	const char *key;
	uint64_t ptr, bsize;
	long rank, size, dim;
	PyObject *torch;
	mc_status rc;
	int r;
	PARSE("put_tensor_with_tp_from", 3, "key", "buffer_ptr", "size", "tp_rank", "tp_size",
	      "split_dim");
	if (arg_str(a[0], "put_tensor_with_tp_from", "key", &key) < 0 ||
	    arg_u64(a[1], "put_tensor_with_tp_from", "buffer_ptr", &ptr) < 0 ||
	    arg_u64(a[2], "put_tensor_with_tp_from", "size", &bsize) < 0 ||
	    opt_long(a[3], 0, "put_tensor_with_tp_from", "tp_rank", &rank) < 0 ||
	    opt_long(a[4], 1, "put_tensor_with_tp_from", "tp_size", &size) < 0 ||
	    opt_long(a[5], 0, "put_tensor_with_tp_from", "split_dim", &dim) < 0)
		return NULL;
	torch = import_torch();
	if (!torch)
		return NULL;
	r = tp_from_one(ST(self), "put_tensor_with_tp_from", torch, key, ptr, bsize, size, dim,
			&rc);
	Py_DECREF(torch);
	return r < 0 ? NULL : PyLong_FromLong(rc);
}

PyObject *mc_py_store_batch_put_tensor_with_tp_from(DEFARGS)
{
	struct keys k;
	uint64_t *ptrs = NULL, *sizes = NULL;
	size_t np, ns;
	long rank, size, dim;
	PyObject *torch = NULL, *out = NULL;
	mc_status *res = NULL;
	PARSE("batch_put_tensor_with_tp_from", 3, "base_keys", "buffer_ptrs", "sizes", "tp_rank",
	      "tp_size", "split_dim");
	if (opt_long(a[3], 0, "batch_put_tensor_with_tp_from", "tp_rank", &rank) < 0 ||
	    opt_long(a[4], 1, "batch_put_tensor_with_tp_from", "tp_size", &size) < 0 ||
	    opt_long(a[5], 0, "batch_put_tensor_with_tp_from", "split_dim", &dim) < 0 ||
	    keys_from(a[0], "batch_put_tensor_with_tp_from", &k) < 0)
		return NULL;
	if (u64s_from(a[1], "batch_put_tensor_with_tp_from", "buffer_ptrs", &ptrs, &np) < 0 ||
	    u64s_from(a[2], "batch_put_tensor_with_tp_from", "sizes", &sizes, &ns) < 0)
		goto out;
	if (np != k.n || ns != k.n) {
		out = fill_list(k.n, ERR_INVALID_PARAMS);
		goto out;
	}
	torch = import_torch();
	res = PyMem_Calloc(k.n ? k.n : 1, sizeof(*res));
	if (!torch || !res) {
		if (!res)
			PyErr_NoMemory();
		goto out;
	}
	for (size_t i = 0; i < k.n; i++)
		if (tp_from_one(ST(self), "batch_put_tensor_with_tp_from", torch, k.v[i], ptrs[i],
				sizes[i], size, dim, &res[i]) < 0)
			goto out;
	out = status_list(res, k.n);
out:
	PyMem_Free(res);
	Py_XDECREF(torch);
	PyMem_Free(ptrs);
	PyMem_Free(sizes);
	keys_release(&k);
	return out;
}
