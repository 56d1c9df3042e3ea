/*
 * python/store_meta.c - the metadata calls of `mooncake.store`, which move
 * no object bytes (get_size, is_exist, batch_is_exist, remove and its
 * regex, all and batch forms), and the replica descriptors
 * (get_replica_desc, batch_get_replica_desc, batch_replica_clear).
 *
 * ReplicaDescriptor, MemoryDescriptor and Descriptor are snapshots of what
 * mc_store_get_replica_desc returned, built under the GIL after the call:
 * one small object type whose members are read through per-type member
 * tables, so the three classes share their storage and their dealloc.
 */
#include "store_int.h"

/* ---- metadata calls ----------------------------------------------------------------- */

PyObject *mc_py_store_get_size(DEFARGS)
{
	const char *key;
	struct call c;
	int64_t n;
	PARSE("get_size", 1, "key");
	if (arg_str(a[0], "get_size", "key", &key) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	n = mc_store_get_size(ST(self)->s, key);
	call_end(&c);
	return PyLong_FromLongLong(n);
}

PyObject *mc_py_store_is_exist(DEFARGS)
{
	const char *key;
	struct call c;
	int n;
	PARSE("is_exist", 1, "key");
	if (arg_str(a[0], "is_exist", "key", &key) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	n = mc_store_is_exist(ST(self)->s, key);
	call_end(&c);
	return PyLong_FromLong(n);
}

PyObject *mc_py_store_batch_is_exist(DEFARGS)
{
	struct keys k;
	struct call c;
	int *res;
	PyObject *out;
	PARSE("batch_is_exist", 1, "keys");

	if (keys_from(a[0], "batch_is_exist", &k) < 0)
		return NULL;
	res = PyMem_Calloc(k.n ? k.n : 1, sizeof(*res));
	if (!res) {
		keys_release(&k);
		return PyErr_NoMemory();
	}
	call_begin(&c, ST(self), false);
	mc_store_batch_is_exist(ST(self)->s, k.v, k.n, res);
	call_end(&c);
	out = int_list(res, k.n);
	PyMem_Free(res);
	keys_release(&k);
	return out;
}

PyObject *mc_py_store_remove(DEFARGS)
{
	const char *key;
	bool force;
	struct call c;
	mc_status rc;
	PARSE("remove", 1, "key", "force");
	if (arg_str(a[0], "remove", "key", &key) < 0 ||
	    arg_bool(a[1], "remove", "force", false, &force) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	rc = mc_store_remove(ST(self)->s, key, force);
	call_end(&c);
	return PyLong_FromLong(rc);
}

PyObject *mc_py_store_remove_by_regex(DEFARGS)
{
	const char *pat;
	bool force;
	struct call c;
	int64_t n;
	PARSE("remove_by_regex", 1, "regex_pattern", "force");
	if (arg_str(a[0], "remove_by_regex", "regex_pattern", &pat) < 0 ||
	    arg_bool(a[1], "remove_by_regex", "force", false, &force) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	n = mc_store_remove_by_regex(ST(self)->s, pat, force);
	call_end(&c);
	return PyLong_FromLongLong(n);
}

PyObject *mc_py_store_remove_all(DEFARGS)
{
	bool force;
	struct call c;
	int64_t n;
	PARSE("remove_all", 0, "force");
	if (arg_bool(a[0], "remove_all", "force", false, &force) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	n = mc_store_remove_all(ST(self)->s, force);
	call_end(&c);
	return PyLong_FromLongLong(n);
}

PyObject *mc_py_store_batch_remove(DEFARGS)
{
	struct keys k;
	bool force;
	struct call c;
	mc_status *res;
	PyObject *out;
	PARSE("batch_remove", 1, "keys", "force");

	if (arg_bool(a[1], "batch_remove", "force", false, &force) < 0 ||
	    keys_from(a[0], "batch_remove", &k) < 0)
		return NULL;
	res = PyMem_Calloc(k.n ? k.n : 1, sizeof(*res));
	if (!res) {
		keys_release(&k);
		return PyErr_NoMemory();
	}
	call_begin(&c, ST(self), false);
	mc_store_batch_remove(ST(self)->s, k.v, k.n, force, res);
	call_end(&c);
	out = status_list(res, k.n);
	PyMem_Free(res);
	keys_release(&k);
	return out;
}

/* ---- replica descriptors ----------------------------------------------------------- */

struct desc_obj {
	PyObject ob_base;
	PyObject *a, *b, *c; /* per type: see the member tables */
	uint64_t x, y;
	int type;
};

static void desc_dealloc(PyObject *self)
{
	struct desc_obj *d = (struct desc_obj *)self;
	Py_XDECREF(d->a);
	Py_XDECREF(d->b);
	Py_XDECREF(d->c);
	PyObject_Free(self);
}

static PyObject *descriptor_repr(PyObject *self)
{
	struct desc_obj *d = (struct desc_obj *)self;
	return PyUnicode_FromFormat("<Descriptor size=%llu buffer_address=%llu "
				    "transport_endpoint=%U>",
				    (unsigned long long)d->x, (unsigned long long)d->y, d->a);
}

static PyMemberDef descriptor_members[] = {
	{"size", T_ULONGLONG, offsetof(struct desc_obj, x), READONLY, "bytes"},
	{"buffer_address", T_ULONGLONG, offsetof(struct desc_obj, y), READONLY, "address"},
	{"transport_endpoint", T_OBJECT, offsetof(struct desc_obj, a), READONLY, "host:port"},
	{"segment_name", T_OBJECT, offsetof(struct desc_obj, b), READONLY, "segment"},
	{NULL, 0, 0, 0, NULL},
};

PyTypeObject mc_py_descriptor_type = {
	/* clang-format off */
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = MODULE_NAME ".Descriptor",
	/* clang-format on */
	.tp_basicsize = sizeof(struct desc_obj),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A memory replica's buffer: size, buffer_address, transport_endpoint.",
	.tp_dealloc = desc_dealloc,
	.tp_repr = descriptor_repr,
	.tp_members = descriptor_members,
};

static PyMemberDef memdesc_members[] = {
	{"buffer_descriptor", T_OBJECT, offsetof(struct desc_obj, a), READONLY, "Descriptor"},
	{NULL, 0, 0, 0, NULL},
};

PyTypeObject mc_py_mem_desc_type = {
	/* clang-format off */
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = MODULE_NAME ".MemoryDescriptor",
	/* clang-format on */
	.tp_basicsize = sizeof(struct desc_obj),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A memory replica: buffer_descriptor.",
	.tp_dealloc = desc_dealloc,
	.tp_members = memdesc_members,
};

static PyObject *rd_status(PyObject *self, void *unused)
{
	return Py_NewRef(((struct desc_obj *)self)->b);
}

static PyObject *rd_is_memory(PyObject *self, PyObject *unused)
{
	return PyBool_FromLong(((struct desc_obj *)self)->type == 0);
}

static PyObject *rd_is_local_disk(PyObject *self, PyObject *unused)
{
	return PyBool_FromLong(((struct desc_obj *)self)->type == 2); /* LOCAL_DISK */
}

static PyObject *rd_false(PyObject *self, PyObject *unused)
{
	Py_RETURN_FALSE;
}

static PyObject *rd_get_memory(PyObject *self, PyObject *unused)
{
	struct desc_obj *d = (struct desc_obj *)self;
	if (d->type != 0) {
		PyErr_SetString(PyExc_RuntimeError, "not a memory replica");
		return NULL;
	}
	return Py_NewRef(d->a);
}

static PyObject *rd_get_disk(PyObject *self, PyObject *unused)
{
	PyErr_SetString(PyExc_RuntimeError, "not a disk replica");
	return NULL;
}

static PyObject *rd_repr(PyObject *self)
{
	struct desc_obj *d = (struct desc_obj *)self;
	return PyUnicode_FromFormat("<ReplicaDescriptor status=%R memory=%R>", d->b, d->a);
}

static PyMethodDef rd_methods[] = {
	{"is_memory_replica", rd_is_memory, METH_NOARGS, "bool"},
	{"is_disk_replica", rd_false, METH_NOARGS, "bool (no shared-filesystem tier here: False)"},
	{"is_local_disk_replica", rd_is_local_disk, METH_NOARGS,
	 "bool: a copy on its owner's SSD tier, read through the owner's offload RPC"},
	{"get_memory_descriptor", rd_get_memory, METH_NOARGS, "MemoryDescriptor"},
	{"get_disk_descriptor", rd_get_disk, METH_NOARGS, "raises: no disk replicas"},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef rd_getset[] = {
	{"status", rd_status, NULL, "ReplicaStatus", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject mc_py_replica_desc_type = {
	/* clang-format off */
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = MODULE_NAME ".ReplicaDescriptor",
	/* clang-format on */
	.tp_basicsize = sizeof(struct desc_obj),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Where one replica of an object lives.",
	.tp_dealloc = desc_dealloc,
	.tp_repr = rd_repr,
	.tp_methods = rd_methods,
	.tp_getset = rd_getset,
};

static PyObject *new_desc(PyTypeObject *t)
{
	struct desc_obj *d = PyObject_New(struct desc_obj, t);
	if (!d)
		return NULL;
	d->a = d->b = d->c = NULL;
	d->x = d->y = 0;
	d->type = 0;
	return (PyObject *)d;
}

static PyObject *replica_to_py(const struct mc_store_replica_desc *r)
{
	struct desc_obj *buf, *mem, *rd;

	buf = (struct desc_obj *)new_desc(&mc_py_descriptor_type);
	if (!buf)
		return NULL;
	buf->x = r->size;
	buf->y = r->address;
	buf->a = PyUnicode_FromString(r->transport_endpoint);
	buf->b = PyUnicode_FromString(r->segment_name);
	mem = (struct desc_obj *)new_desc(&mc_py_mem_desc_type);
	if (!buf->a || !buf->b || !mem) {
		Py_DECREF(buf);
		Py_XDECREF(mem);
		return NULL;
	}
	mem->a = (PyObject *)buf;
	rd = (struct desc_obj *)new_desc(&mc_py_replica_desc_type);
	if (!rd) {
		Py_DECREF(mem);
		return NULL;
	}
	rd->a = (PyObject *)mem;
	rd->type = r->type;
	rd->b = enum_value(mc_py_replica_status_enum, r->status);
	if (!rd->b) {
		PyErr_Clear();
		rd->b = PyLong_FromLong(r->status);
	}
	if (!rd->b) {
		Py_DECREF(rd);
		return NULL;
	}
	return (PyObject *)rd;
}

#define MAX_REPLICAS 16

/* The replicas of one key as a list; an empty list on any store error. */
static PyObject *replica_list(struct store_obj *st, const char *key, bool *ok)
{
	struct mc_store_replica_desc d[MAX_REPLICAS];
	struct call c;
	int64_t n;
	PyObject *out;

	call_begin(&c, st, false);
	n = mc_store_get_replica_desc(st->s, key, d, MAX_REPLICAS);
	call_end(&c);
	*ok = n >= 0;
	if (n < 0)
		n = 0;
	if (n > MAX_REPLICAS)
		n = MAX_REPLICAS;
	out = PyList_New((Py_ssize_t)n);
	for (int64_t i = 0; out && i < n; i++) {
		PyObject *x = replica_to_py(&d[i]);
		if (!x) {
			Py_CLEAR(out);
			break;
		}
		PyList_SET_ITEM(out, (Py_ssize_t)i, x);
	}
	return out;
}

PyObject *mc_py_store_get_replica_desc(DEFARGS)
{
	const char *key;
	bool ok;
	PARSE("get_replica_desc", 1, "key");
	if (arg_str(a[0], "get_replica_desc", "key", &key) < 0)
		return NULL;
	return replica_list(ST(self), key, &ok);
}

PyObject *mc_py_store_batch_get_replica_desc(DEFARGS)
{
	struct keys k;
	PyObject *out;
	PARSE("batch_get_replica_desc", 1, "keys");
	if (keys_from(a[0], "batch_get_replica_desc", &k) < 0)
		return NULL;
	out = PyDict_New();
	for (size_t i = 0; out && i < k.n; i++) {
		bool ok;
		PyObject *l = replica_list(ST(self), k.v[i], &ok);
		if (!l) {
			Py_CLEAR(out);
			break;
		}
		/* keys whose query failed are left out */
		if (ok && PyDict_SetItem(out, PyTuple_GET_ITEM(k.tup, i), l) < 0)
			Py_CLEAR(out);
		Py_DECREF(l);
	}
	keys_release(&k);
	return out;
}

/* Clears what this client wrote (spec store.md 2.3); a failed call clears
 * nothing and, as upstream, answers an empty list. */
PyObject *mc_py_store_batch_replica_clear(DEFARGS)
{
	struct keys k;
	const char *seg = "";
	struct call c;
	bool *cleared;
	int64_t n;
	PyObject *out;
	PARSE("batch_replica_clear", 1, "keys", "segment_name");
	if (a[1] && arg_str(a[1], "batch_replica_clear", "segment_name", &seg) < 0)
		return NULL;
	if (keys_from(a[0], "batch_replica_clear", &k) < 0)
		return NULL;
	cleared = PyMem_Calloc(k.n ? k.n : 1, sizeof(*cleared));
	if (!cleared) {
		keys_release(&k);
		return PyErr_NoMemory();
	}
	call_begin(&c, ST(self), false);
	n = mc_store_batch_replica_clear(ST(self)->s, k.v, k.n, seg, cleared);
	call_end(&c);
	out = PyList_New(0);
	for (size_t i = 0; out && n > 0 && i < k.n; i++) {
		PyObject *key;

		if (!cleared[i])
			continue;
		key = PyUnicode_FromString(k.v[i]);
		if (!key || PyList_Append(out, key) < 0)
			Py_CLEAR(out);
		Py_XDECREF(key);
	}
	PyMem_Free(cleared);
	keys_release(&k);
	return out;
}
