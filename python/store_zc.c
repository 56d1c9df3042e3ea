/*
 * python/store_zc.c - the zero-copy calls of `mooncake.store` and the
 * sessions (spec store.md 1.11).
 *
 * Zero-copy calls move bytes straight between the store and memory the
 * caller registered (register_buffer, or a BufferPool lease): put_from,
 * get_into, their batch forms, get_into_ranges and the multi-buffer calls,
 * which take nested lists of pointers and sizes (struct multi).  The
 * addresses are plain ints and are trusted, as upstream's; a batch whose
 * lists do not match gets one error per key rather than an exception.
 * The sessions (batch_put_session_start/end/revoke,
 * batch_get_session_start/end and the multi-buffer range calls) split a
 * put or get into its start and end so that the caller moves the bytes.
 */
#include "store_int.h"

/* ---- zero-copy calls --------------------------------------------------------------- */

PyObject *mc_py_store_register_buffer(DEFARGS)
{
	uint64_t ptr, size;
	bool ro;
	struct call c;
	mc_status rc;
	PARSE("register_buffer", 2, "buffer_ptr", "size", "read_only");
	if (arg_u64(a[0], "register_buffer", "buffer_ptr", &ptr) < 0 ||
	    arg_u64(a[1], "register_buffer", "size", &size) < 0 ||
	    arg_bool(a[2], "register_buffer", "read_only", false, &ro) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	rc = mc_store_register_buffer_flags(ST(self)->s, (void *)(uintptr_t)ptr, (size_t)size,
					    ro ? MC_STORE_BUFFER_READ_ONLY : 0);
	call_end(&c);
	return PyLong_FromLong(rc);
}

PyObject *mc_py_store_unregister_buffer(DEFARGS)
{
	uint64_t ptr;
	struct call c;
	mc_status rc;
	PARSE("unregister_buffer", 1, "buffer_ptr");
	if (arg_u64(a[0], "unregister_buffer", "buffer_ptr", &ptr) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	rc = mc_store_unregister_buffer(ST(self)->s, (void *)(uintptr_t)ptr);
	call_end(&c);
	return PyLong_FromLong(rc);
}

static PyObject *from_common(PyObject *self, const char *fname, PyObject *const *args,
			     Py_ssize_t nargs, PyObject *kwnames, enum put_kind kind)
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
	if (kind == PUT_UPSERT)
		rc = cfg.upsert_refused
			     ? MC_ERR_INVALID_PARAMS
			     : mc_store_upsert_from(ST(self)->s, key, (void *)(uintptr_t)ptr,
						    (size_t)size, &cfg.c);
	else
		rc = mc_store_put_from(ST(self)->s, key, (void *)(uintptr_t)ptr, (size_t)size,
				       &cfg.c);
	call_end(&c);
	mc_py_cfg_release(&cfg);
	return PyLong_FromLong(rc);
}

PyObject *mc_py_store_put_from(DEFARGS)
{
	return from_common(self, "put_from", args, nargs, kwnames, PUT_INSERT);
}

PyObject *mc_py_store_upsert_from(DEFARGS)
{
	return from_common(self, "upsert_from", args, nargs, kwnames, PUT_UPSERT);
}

/* put_from_with_metadata(key, buffer_ptr, metadata_buffer_ptr, size,
 * metadata_size, config=None): one object [metadata][data], gathered from
 * the two buffers.  Upstream's quirk: -1 when not set up, the positive
 * magnitude of the error when the put fails. */
PyObject *mc_py_store_put_from_with_metadata(DEFARGS)
{
	const char *key;
	uint64_t ptr, mptr, size, msize;
	struct cfg cfg;
	struct call c;
	void *bv[2];
	size_t lv[2], nb = 2;
	void *const *bufs[1] = {bv};
	const size_t *lens[1] = {lv};
	mc_status rc, res = MC_OK;
	bool ready;
	PARSE("put_from_with_metadata", 5, "key", "buffer_ptr", "metadata_buffer_ptr", "size",
	      "metadata_size", "config");
	if (arg_str(a[0], "put_from_with_metadata", "key", &key) < 0 ||
	    arg_u64(a[1], "put_from_with_metadata", "buffer_ptr", &ptr) < 0 ||
	    arg_u64(a[2], "put_from_with_metadata", "metadata_buffer_ptr", &mptr) < 0 ||
	    arg_u64(a[3], "put_from_with_metadata", "size", &size) < 0 ||
	    arg_u64(a[4], "put_from_with_metadata", "metadata_size", &msize) < 0 ||
	    mc_py_cfg_from(a[5], "put_from_with_metadata", &cfg) < 0)
		return NULL;
	bv[0] = (void *)(uintptr_t)mptr;
	lv[0] = (size_t)msize;
	bv[1] = (void *)(uintptr_t)ptr;
	lv[1] = (size_t)size;
	call_begin(&c, ST(self), false);
	ready = mc_store_health_check(ST(self)->s) != 1;
	rc = ready ? mc_store_batch_put_from_multi_buffers(ST(self)->s, &key, bufs, lens, &nb, 1,
							   &cfg.c, &res)
		   : MC_OK;
	call_end(&c);
	mc_py_cfg_release(&cfg);
	if (!ready)
		return PyLong_FromLong(-1);
	if (rc == MC_OK)
		rc = res;
	return PyLong_FromLong(rc < 0 ? -(long)rc : (long)rc);
}

PyObject *mc_py_store_get_into(DEFARGS)
{
	const char *key;
	uint64_t ptr, size;
	struct call c;
	int64_t n;
	PARSE("get_into", 3, "key", "buffer_ptr", "size");
	if (arg_str(a[0], "get_into", "key", &key) < 0 ||
	    arg_u64(a[1], "get_into", "buffer_ptr", &ptr) < 0 ||
	    arg_u64(a[2], "get_into", "size", &size) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	n = mc_store_get_into(ST(self)->s, key, (void *)(uintptr_t)ptr, (size_t)size);
	call_end(&c);
	return PyLong_FromLongLong(n);
}

/* batch_put_from / batch_upsert_from / batch_get_into */
enum zc_kind { ZC_PUT, ZC_UPSERT, ZC_GET };

static PyObject *zc_batch(PyObject *self, const char *fname, PyObject *const *args,
			  Py_ssize_t nargs, PyObject *kwnames, enum zc_kind kind)
{
	struct keys k;
	uint64_t *ptrs = NULL, *sizes = NULL;
	size_t np, ns;
	struct cfg cfg;
	struct call c;
	PyObject *out = NULL;
	void **bv = NULL;
	size_t *lv = NULL;
	mc_status *st = NULL;
	int64_t *got = NULL;
	PARSE(fname, 3, "keys", "buffer_ptrs", "sizes", "config");

	if (kind == ZC_GET && a[3]) {
		PyErr_Format(PyExc_TypeError, "%s() takes 3 arguments", fname);
		return NULL;
	}
	if (keys_from(a[0], fname, &k) < 0)
		return NULL;
	if (u64s_from(a[1], fname, "buffer_ptrs", &ptrs, &np) < 0 ||
	    u64s_from(a[2], fname, "sizes", &sizes, &ns) < 0 ||
	    mc_py_cfg_from(a[3], fname, &cfg) < 0)
		goto err;
	if (np != k.n || ns != k.n) {
		out = fill_list(k.n, ERR_INVALID_PARAMS);
		goto done;
	}
	bv = PyMem_Calloc(k.n ? k.n : 1, sizeof(*bv));
	lv = PyMem_Calloc(k.n ? k.n : 1, sizeof(*lv));
	st = PyMem_Calloc(k.n ? k.n : 1, sizeof(*st));
	got = PyMem_Calloc(k.n ? k.n : 1, sizeof(*got));
	if (!bv || !lv || !st || !got) {
		PyErr_NoMemory();
		goto done;
	}
	for (size_t i = 0; i < k.n; i++) {
		bv[i] = (void *)(uintptr_t)ptrs[i];
		lv[i] = (size_t)sizes[i];
	}
	call_begin(&c, ST(self), false);
	if (kind == ZC_GET) {
		mc_store_batch_get_into(ST(self)->s, k.v, bv, lv, k.n, got);
	} else if (kind == ZC_PUT) {
		mc_store_batch_put_from(ST(self)->s, k.v, bv, lv, k.n, mc_py_cfg_batch(&cfg), st);
	} else if (cfg.upsert_refused) {
		for (size_t i = 0; i < k.n; i++)
			st[i] = MC_ERR_INVALID_PARAMS;
	} else {
		mc_store_batch_upsert_from(ST(self)->s, k.v, bv, lv, k.n, mc_py_cfg_batch(&cfg),
					   st);
	}
	call_end(&c);
	out = kind == ZC_GET ? i64_list(got, k.n) : status_list(st, k.n);
done:
	mc_py_cfg_release(&cfg);
	PyMem_Free(bv);
	PyMem_Free(lv);
	PyMem_Free(st);
	PyMem_Free(got);
	PyMem_Free(ptrs);
	PyMem_Free(sizes);
	keys_release(&k);
	return out;
err:
	PyMem_Free(ptrs);
	PyMem_Free(sizes);
	keys_release(&k);
	return NULL;
}

PyObject *mc_py_store_batch_put_from(DEFARGS)
{
	return zc_batch(self, "batch_put_from", args, nargs, kwnames, ZC_PUT);
}

PyObject *mc_py_store_batch_upsert_from(DEFARGS)
{
	return zc_batch(self, "batch_upsert_from", args, nargs, kwnames, ZC_UPSERT);
}

PyObject *mc_py_store_batch_get_into(DEFARGS)
{
	return zc_batch(self, "batch_get_into", args, nargs, kwnames, ZC_GET);
}

/* Nested lists of pointers and sizes of the multi-buffer calls. */
struct multi {
	void ***bufs;
	size_t **lens;
	size_t *nbufs;
	size_t n;
};

static void multi_release(struct multi *m)
{
	for (size_t i = 0; i < m->n; i++) {
		if (m->bufs)
			PyMem_Free(m->bufs[i]);
		if (m->lens)
			PyMem_Free(m->lens[i]);
	}
	PyMem_Free(m->bufs);
	PyMem_Free(m->lens);
	PyMem_Free(m->nbufs);
	memset(m, 0, sizeof(*m));
}

/* 1 = parsed, 0 = shape mismatch (a per-key error), -1 = exception. */
static int multi_from(PyObject *ptrs_o, PyObject *sizes_o, size_t nkeys, const char *fname,
		      struct multi *m)
{
	PyObject *pt = NULL, *st = NULL;
	int ret = -1;

	memset(m, 0, sizeof(*m));
	pt = arg_seq(ptrs_o, fname, "all_buffer_ptrs", NULL);
	if (!pt)
		return -1;
	st = arg_seq(sizes_o, fname, "all_sizes", NULL);
	if (!st)
		goto out;
	if ((size_t)PyTuple_GET_SIZE(pt) != nkeys || (size_t)PyTuple_GET_SIZE(st) != nkeys) {
		ret = 0;
		goto out;
	}
	m->bufs = PyMem_Calloc(nkeys ? nkeys : 1, sizeof(*m->bufs));
	m->lens = PyMem_Calloc(nkeys ? nkeys : 1, sizeof(*m->lens));
	m->nbufs = PyMem_Calloc(nkeys ? nkeys : 1, sizeof(*m->nbufs));
	if (!m->bufs || !m->lens || !m->nbufs) {
		PyErr_NoMemory();
		goto out;
	}
	m->n = nkeys;
	ret = 1;
	for (size_t i = 0; i < nkeys && ret == 1; i++) {
		uint64_t *p, *s;
		size_t np, ns;
		if (u64s_from(PyTuple_GET_ITEM(pt, i), fname, "buffer_ptrs", &p, &np) < 0) {
			ret = -1;
			break;
		}
		if (u64s_from(PyTuple_GET_ITEM(st, i), fname, "sizes", &s, &ns) < 0) {
			PyMem_Free(p);
			ret = -1;
			break;
		}
		if (np != ns) {
			ret = 0;
		} else {
			/* uint64_t and pointers/size_t have the same size on our targets */
			_Static_assert(sizeof(uint64_t) == sizeof(void *), "64-bit only");
			m->bufs[i] = (void **)p;
			m->lens[i] = (size_t *)s;
			m->nbufs[i] = np;
			p = NULL;
			s = NULL;
		}
		PyMem_Free(p);
		PyMem_Free(s);
	}
out:
	if (ret != 1)
		multi_release(m);
	Py_XDECREF(pt);
	Py_XDECREF(st);
	return ret;
}

PyObject *mc_py_store_batch_put_from_multi_buffers(DEFARGS)
{
	struct keys k;
	struct multi m;
	struct cfg cfg;
	struct call c;
	mc_status *res;
	PyObject *out;
	int r;
	PARSE("batch_put_from_multi_buffers", 3, "keys", "all_buffer_ptrs", "all_sizes", "config");

	if (keys_from(a[0], "batch_put_from_multi_buffers", &k) < 0)
		return NULL;
	if (mc_py_cfg_from(a[3], "batch_put_from_multi_buffers", &cfg) < 0) {
		keys_release(&k);
		return NULL;
	}
	r = multi_from(a[1], a[2], k.n, "batch_put_from_multi_buffers", &m);
	if (r <= 0) {
		out = r < 0 ? NULL : fill_list(k.n, ERR_INVALID_PARAMS);
		goto out;
	}
	res = PyMem_Calloc(k.n ? k.n : 1, sizeof(*res));
	if (!res) {
		out = PyErr_NoMemory();
		multi_release(&m);
		goto out;
	}
	call_begin(&c, ST(self), false);
	mc_store_batch_put_from_multi_buffers(ST(self)->s, k.v, (void *const *const *)m.bufs,
					      (const size_t *const *)m.lens, m.nbufs, k.n,
					      mc_py_cfg_batch(&cfg), res);
	call_end(&c);
	out = status_list(res, k.n);
	PyMem_Free(res);
	multi_release(&m);
out:
	mc_py_cfg_release(&cfg);
	keys_release(&k);
	return out;
}

PyObject *mc_py_store_batch_get_into_multi_buffers(DEFARGS)
{
	struct keys k;
	struct multi m;
	struct call c;
	int64_t *res;
	PyObject *out;
	bool same_node;
	int r;
	PARSE("batch_get_into_multi_buffers", 3, "keys", "all_buffer_ptrs", "all_sizes",
	      "prefer_alloc_in_same_node");

	if (arg_bool(a[3], "batch_get_into_multi_buffers", "prefer_alloc_in_same_node", false,
		     &same_node) < 0 ||
	    keys_from(a[0], "batch_get_into_multi_buffers", &k) < 0)
		return NULL;
	(void)same_node; /* reads already prefer a replica in this client's segment */
	r = multi_from(a[1], a[2], k.n, "batch_get_into_multi_buffers", &m);
	if (r <= 0) {
		out = r < 0 ? NULL : fill_list(k.n, ERR_INVALID_PARAMS);
		keys_release(&k);
		return out;
	}
	res = PyMem_Calloc(k.n ? k.n : 1, sizeof(*res));
	if (!res) {
		multi_release(&m);
		keys_release(&k);
		return PyErr_NoMemory();
	}
	call_begin(&c, ST(self), false);
	mc_store_batch_get_into_multi_buffers(ST(self)->s, k.v, (void *const *const *)m.bufs,
					      (const size_t *const *)m.lens, m.nbufs, k.n, res);
	call_end(&c);
	out = i64_list(res, k.n);
	PyMem_Free(res);
	multi_release(&m);
	keys_release(&k);
	return out;
}

/* One key of get_into_ranges as parsed: its fragment lists. */
struct gir_key {
	uint64_t *d, *s, *z;
	size_t n;
	bool bad; /* lists of different lengths: every fragment -600 */
};

/*
 * get_into_ranges(buffer_ptrs, all_keys, all_dst_offsets, all_src_offsets,
 * all_sizes) -> [buffer][key][fragment]: bytes read or a negative status.
 * Every fragment of every key goes to mc_store_get_into_ranges at once (one
 * BatchGetReplicaList, one engine batch).  Lists of the wrong shape: []
 * when the outer lists differ, [] per key for a buffer whose inner lists
 * differ from its keys, -600 per fragment when a key's three lists differ.
 */
PyObject *mc_py_store_get_into_ranges(DEFARGS)
{
	PyObject *top[4] = {NULL}, **inner = NULL, *out = NULL;
	uint64_t *bufs = NULL;
	size_t nb = 0, nk = 0, nfrag = 0, r = 0, off = 0;
	struct keys *kb = NULL;
	bool *shape_ok = NULL;
	struct gir_key *gk = NULL;
	struct mc_store_range_read *reads = NULL;
	struct mc_store_range *ranges = NULL;
	int64_t *results = NULL;
	static const char *const what[4] = {"all_keys", "all_dst_offsets", "all_src_offsets",
					    "all_sizes"};
	struct call c;
	PARSE("get_into_ranges", 5, "buffer_ptrs", "all_keys", "all_dst_offsets", "all_src_offsets",
	      "all_sizes");

	if (u64s_from(a[0], "get_into_ranges", "buffer_ptrs", &bufs, &nb) < 0)
		return NULL;
	for (int t = 0; t < 4; t++)
		if (!(top[t] = arg_seq(a[t + 1], "get_into_ranges", what[t], NULL)))
			goto out;
	for (int t = 0; t < 4; t++) {
		if ((size_t)PyTuple_GET_SIZE(top[t]) != nb) {
			out = PyList_New(0);
			goto out;
		}
	}
	kb = PyMem_Calloc(nb ? nb : 1, sizeof(*kb));
	shape_ok = PyMem_Calloc(nb ? nb : 1, sizeof(*shape_ok));
	inner = PyMem_Calloc(3 * nb + 1, sizeof(*inner)); /* [b][dst, src, sizes] tuples */
	if (!kb || !shape_ok || !inner) {
		PyErr_NoMemory();
		goto out;
	}
	/* keys, and the inner lists (as tuples, so their shapes cannot change) */
	for (size_t b = 0; b < nb; b++) {
		if (keys_from(PyTuple_GET_ITEM(top[0], b), "get_into_ranges", &kb[b]) < 0)
			goto out;
		shape_ok[b] = true;
		for (int t = 1; t < 4; t++) {
			PyObject *x = arg_seq(PyTuple_GET_ITEM(top[t], b), "get_into_ranges",
					      what[t], NULL);
			if (!x)
				goto out;
			inner[3 * b + (size_t)t - 1] = x;
			if ((size_t)PyTuple_GET_SIZE(x) != kb[b].n)
				shape_ok[b] = false;
		}
		if (shape_ok[b])
			nk += kb[b].n;
	}
	gk = PyMem_Calloc(nk ? nk : 1, sizeof(*gk));
	reads = PyMem_Calloc(nk ? nk : 1, sizeof(*reads));
	if (!gk || !reads) {
		PyErr_NoMemory();
		goto out;
	}
	/* each key's fragment lists */
	for (size_t b = 0; b < nb; b++) {
		PyObject *dk = inner[3 * b], *sk = inner[3 * b + 1], *zk = inner[3 * b + 2];
		for (size_t i = 0; shape_ok[b] && i < kb[b].n; i++, r++) {
			size_t nd, ns, nz;
			if (u64s_from(PyTuple_GET_ITEM(dk, i), "get_into_ranges", "dst_offsets",
				      &gk[r].d, &nd) < 0 ||
			    u64s_from(PyTuple_GET_ITEM(sk, i), "get_into_ranges", "src_offsets",
				      &gk[r].s, &ns) < 0 ||
			    u64s_from(PyTuple_GET_ITEM(zk, i), "get_into_ranges", "sizes", &gk[r].z,
				      &nz) < 0)
				goto out;
			gk[r].n = nd;
			gk[r].bad = nd != ns || nd != nz;
			nfrag += nd;
		}
	}
	ranges = PyMem_Calloc(nfrag ? nfrag : 1, sizeof(*ranges));
	results = PyMem_Calloc(nfrag ? nfrag : 1, sizeof(*results));
	if (!ranges || !results) {
		PyErr_NoMemory();
		goto out;
	}
	r = 0;
	for (size_t b = 0; b < nb; b++) {
		for (size_t i = 0; shape_ok[b] && i < kb[b].n; i++, r++) {
			struct mc_store_range_read *rd = &reads[r];
			rd->key = kb[b].v[i];
			rd->buf = (void *)(uintptr_t)bufs[b];
			rd->ranges = &ranges[off];
			rd->results = &results[off];
			rd->nranges = gk[r].bad ? 0 : gk[r].n;
			for (size_t f = 0; f < gk[r].n; f++) {
				if (!gk[r].bad) {
					ranges[off + f].dst_offset = gk[r].d[f];
					ranges[off + f].src_offset = gk[r].s[f];
					ranges[off + f].length = gk[r].z[f];
				}
				results[off + f] = ERR_INVALID_PARAMS;
			}
			off += gk[r].n;
		}
	}
	call_begin(&c, ST(self), false);
	mc_store_get_into_ranges(ST(self)->s, reads, nk);
	call_end(&c);
	out = PyList_New((Py_ssize_t)nb);
	r = 0;
	for (size_t b = 0; out && b < nb; b++) {
		PyObject *per_buf = PyList_New((Py_ssize_t)kb[b].n);
		for (size_t i = 0; per_buf && i < kb[b].n; i++) {
			PyObject *frag;
			if (shape_ok[b]) {
				frag = i64_list(reads[r].results, gk[r].n);
				r++;
			} else {
				frag = PyList_New(0);
			}
			if (!frag) {
				Py_CLEAR(per_buf);
				break;
			}
			PyList_SET_ITEM(per_buf, (Py_ssize_t)i, frag);
		}
		if (!per_buf) {
			Py_CLEAR(out);
			break;
		}
		PyList_SET_ITEM(out, (Py_ssize_t)b, per_buf);
	}
out:
	for (size_t i = 0; gk && i < nk; i++) {
		PyMem_Free(gk[i].d);
		PyMem_Free(gk[i].s);
		PyMem_Free(gk[i].z);
	}
	for (size_t b = 0; kb && b < nb; b++)
		keys_release(&kb[b]);
	for (size_t i = 0; inner && i < 3 * nb; i++)
		Py_XDECREF(inner[i]);
	PyMem_Free(inner);
	PyMem_Free(kb);
	PyMem_Free(shape_ok);
	PyMem_Free(gk);
	PyMem_Free(reads);
	PyMem_Free(ranges);
	PyMem_Free(results);
	PyMem_Free(bufs);
	for (int t = 0; t < 4; t++)
		Py_XDECREF(top[t]);
	return out;
}

/* ---- sessions (spec store.md 1.11) ------------------------------------------------------ */

enum sess_kind { SESS_GET_START, SESS_PUT_END, SESS_PUT_REVOKE };

/* fname(keys) -> list of int */
static PyObject *sess_keys_call(PyObject *self, const char *fname, PyObject *keys_o,
				enum sess_kind kind)
{
	struct keys k;
	struct call c;
	mc_status *res;
	PyObject *out;

	if (keys_from(keys_o, fname, &k) < 0)
		return NULL;
	res = PyMem_Calloc(k.n ? k.n : 1, sizeof(*res));
	if (!res) {
		keys_release(&k);
		return PyErr_NoMemory();
	}
	call_begin(&c, ST(self), false);
	if (kind == SESS_GET_START)
		mc_store_batch_get_session_start(ST(self)->s, k.v, k.n, res);
	else if (kind == SESS_PUT_END)
		mc_store_batch_put_session_end(ST(self)->s, k.v, k.n, res);
	else
		mc_store_batch_put_session_revoke(ST(self)->s, k.v, k.n, res);
	call_end(&c);
	out = status_list(res, k.n);
	PyMem_Free(res);
	keys_release(&k);
	return out;
}

PyObject *mc_py_store_batch_get_session_start(DEFARGS)
{
	PARSE("batch_get_session_start", 1, "keys");
	return sess_keys_call(self, "batch_get_session_start", a[0], SESS_GET_START);
}

PyObject *mc_py_store_batch_put_session_end(DEFARGS)
{
	PARSE("batch_put_session_end", 1, "keys");
	return sess_keys_call(self, "batch_put_session_end", a[0], SESS_PUT_END);
}

PyObject *mc_py_store_batch_put_session_revoke(DEFARGS)
{
	PARSE("batch_put_session_revoke", 1, "keys");
	return sess_keys_call(self, "batch_put_session_revoke", a[0], SESS_PUT_REVOKE);
}

PyObject *mc_py_store_batch_get_session_end(DEFARGS)
{
	struct keys k;
	struct call c;
	mc_status rc;
	PARSE("batch_get_session_end", 1, "keys");

	if (keys_from(a[0], "batch_get_session_end", &k) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	rc = mc_store_batch_get_session_end(ST(self)->s, k.v, k.n);
	call_end(&c);
	keys_release(&k);
	return PyLong_FromLong(rc);
}

PyObject *mc_py_store_batch_put_session_start(DEFARGS)
{
	struct keys k;
	uint64_t *sizes = NULL;
	size_t ns;
	struct cfg cfg;
	struct call c;
	mc_status *res;
	PyObject *out = NULL;
	PARSE("batch_put_session_start", 2, "keys", "sizes", "config");

	if (keys_from(a[0], "batch_put_session_start", &k) < 0)
		return NULL;
	if (u64s_from(a[1], "batch_put_session_start", "sizes", &sizes, &ns) < 0)
		goto out_keys;
	if (mc_py_cfg_from(a[2], "batch_put_session_start", &cfg) < 0)
		goto out_keys;
	if (ns != k.n) {
		out = fill_list(k.n, ERR_INVALID_PARAMS);
		goto out;
	}
	res = PyMem_Calloc(k.n ? k.n : 1, sizeof(*res));
	if (!res) {
		PyErr_NoMemory();
		goto out;
	}
	call_begin(&c, ST(self), false);
	mc_store_batch_put_session_start(ST(self)->s, k.v, sizes, k.n, mc_py_cfg_batch(&cfg), res);
	call_end(&c);
	out = status_list(res, k.n);
	PyMem_Free(res);
out:
	mc_py_cfg_release(&cfg);
out_keys:
	PyMem_Free(sizes);
	keys_release(&k);
	return out;
}

static void offsets_free(uint64_t **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		PyMem_Free(v[i]);
	PyMem_Free(v);
}

/* Per-key object offsets shaped like m's buffers: 1 = parsed, 0 = shape
 * mismatch (a per-key error), -1 = exception. */
static int offsets_from(PyObject *o, const struct multi *m, const char *fname, const char *what,
			uint64_t ***out)
{
	PyObject *t = arg_seq(o, fname, what, NULL);
	uint64_t **v;
	int ret = 1;

	*out = NULL;
	if (!t)
		return -1;
	if ((size_t)PyTuple_GET_SIZE(t) != m->n) {
		Py_DECREF(t);
		return 0;
	}
	v = PyMem_Calloc(m->n ? m->n : 1, sizeof(*v));
	if (!v) {
		Py_DECREF(t);
		PyErr_NoMemory();
		return -1;
	}
	for (size_t i = 0; i < m->n && ret == 1; i++) {
		size_t no;
		if (u64s_from(PyTuple_GET_ITEM(t, i), fname, what, &v[i], &no) < 0)
			ret = -1;
		else if (no != m->nbufs[i])
			ret = 0;
	}
	Py_DECREF(t);
	if (ret != 1)
		offsets_free(v, m->n);
	else
		*out = v;
	return ret;
}

/* batch_{get_into,put_from}_multi_buffer_ranges(keys, all_buffer_ptrs,
 * all_sizes, all_{src,dst}_offsets) -> list: bytes moved or negative. */
static PyObject *sess_ranges(PyObject *self, const char *fname, PyObject *const *a, bool put)
{
	struct keys k;
	struct multi m;
	uint64_t **offs = NULL;
	struct call c;
	int64_t *res;
	PyObject *out = NULL;
	int r;

	if (keys_from(a[0], fname, &k) < 0)
		return NULL;
	r = multi_from(a[1], a[2], k.n, fname, &m);
	if (r > 0) {
		r = offsets_from(a[3], &m, fname, put ? "all_dst_offsets" : "all_src_offsets",
				 &offs);
		if (r <= 0)
			multi_release(&m);
	}
	if (r <= 0) {
		out = r < 0 ? NULL : fill_list(k.n, ERR_INVALID_PARAMS);
		keys_release(&k);
		return out;
	}
	res = PyMem_Calloc(k.n ? k.n : 1, sizeof(*res));
	if (res) {
		call_begin(&c, ST(self), false);
		if (put)
			mc_store_batch_put_from_multi_buffer_ranges(
				ST(self)->s, k.v, (void *const *const *)m.bufs,
				(const size_t *const *)m.lens, (const uint64_t *const *)offs,
				m.nbufs, k.n, res);
		else
			mc_store_batch_get_into_multi_buffer_ranges(
				ST(self)->s, k.v, (void *const *const *)m.bufs,
				(const size_t *const *)m.lens, (const uint64_t *const *)offs,
				m.nbufs, k.n, res);
		call_end(&c);
		out = i64_list(res, k.n);
		PyMem_Free(res);
	} else {
		PyErr_NoMemory();
	}
	offsets_free(offs, k.n);
	multi_release(&m);
	keys_release(&k);
	return out;
}

PyObject *mc_py_store_batch_get_into_multi_buffer_ranges(DEFARGS)
{
	PARSE("batch_get_into_multi_buffer_ranges", 4, "keys", "all_buffer_ptrs", "all_sizes",
	      "all_src_offsets");
	return sess_ranges(self, "batch_get_into_multi_buffer_ranges", a, false);
}

PyObject *mc_py_store_batch_put_from_multi_buffer_ranges(DEFARGS)
{
	PARSE("batch_put_from_multi_buffer_ranges", 4, "keys", "all_buffer_ptrs", "all_sizes",
	      "all_dst_offsets");
	return sess_ranges(self, "batch_put_from_multi_buffer_ranges", a, true);
}
