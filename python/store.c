/*
 * python/store.c - the CPython extension `mooncake.store`.
 *
 * Upstream ships a pybind11 module `mooncake.store` whose class
 * MooncakeDistributedStore is what vLLM's MooncakeStoreConnector, SGLang's
 * HiCache backend and LMCache's mooncakestore connector call (spec
 * store.md section 9, python-api-and-integrations.md).  This module offers
 * the same names, positional signatures, return values and miss values
 * over the public C API (<mooncake/store.h>) and nothing else.
 *
 * Objects:
 *  - MooncakeDistributedStore: one struct mc_store plus a read-write lock.
 *    The C client allows any call from any thread except setup and close,
 *    which must not race with the others; so every call takes the lock
 *    shared and setup/close take it exclusive, always after dropping the
 *    GIL (a thread never waits for the lock while holding the GIL, so the
 *    two cannot deadlock).  A shared engine passed to setup is kept alive
 *    by a reference until close.
 *  - ReplicateConfig: plain Python values behind class-level getset
 *    descriptors (integrations probe hasattr(ReplicateConfig, "group_ids")).
 *    Each call copies the config into a C struct that owns its strings, so
 *    nothing borrowed from Python is read while the GIL is released.
 *  - BufferHandle: a malloc'ed object copy with the buffer protocol.
 *  - ReplicaDescriptor / MemoryDescriptor / Descriptor: snapshots of
 *    mc_store_get_replica_desc results.
 *  - BufferPool / BufferLease / BufferLeaseView: registered host memory
 *    handed out as leases for the zero-copy calls (see its section).
 *  - MooncakeHostMemAllocator: shared host mappings owned by the module.
 *  - Enums (SoftPinAction, ReplicaStatus, ObjectDataType, TaskType,
 *    TaskStatus) as enum.IntEnum, with module-level aliases as upstream.
 *
 * Tensors: torch is imported when a tensor method is called, never at
 * import time.  A stored tensor is upstream's [304-byte header][raw bytes]
 * (spec store.md 1.12); the header is built and validated in C by the
 * library's codec (<mooncake/tensor_hdr.h>), and torch is only asked for a
 * contiguous CPU tensor, its dtype, shape and data pointer, or for an
 * empty tensor to copy into.  A stored dtype the
 * installed torch lacks reads as None with a RuntimeWarning.
 *
 * Each method is one C call (batch, ranged and session forms included);
 * the binding parses, calls with the GIL released, and builds results.
 *
 * Every argument list is held as a tuple copy while the GIL is released,
 * so another thread mutating the caller's list cannot free a key or a
 * buffer under a running call.  Argument type errors raise TypeError;
 * store failures are return values, never exceptions.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <time.h>

#include <mooncake/mooncake.h>
#include <mooncake/store.h>
#include <mooncake/tensor_hdr.h>

#include "pyargs.h"

#define MODULE_NAME	   "mooncake.store"

#define ERR_INVALID_PARAMS ((int)MC_ERR_INVALID_PARAMS) /* -600 */

/* ---- argument parsing ------------------------------------------------------------ */

#define MAX_ARGS 16

/* A non-negative int below 2**64 (anything with __index__).  Floats,
 * strings and out-of-range values are TypeErrors. */
static int arg_u64(PyObject *o, const char *fname, const char *what, uint64_t *out)
{
	unsigned long long v;
	PyObject *idx;

	if (PyBool_Check(o) || !PyIndex_Check(o)) {
		PyErr_Format(PyExc_TypeError, "%s(): %s must be an int, not %.100s", fname, what,
			     Py_TYPE(o)->tp_name);
		return -1;
	}
	idx = PyNumber_Index(o);
	if (!idx)
		return -1;
	v = PyLong_AsUnsignedLongLong(idx);
	Py_DECREF(idx);
	if (v == (unsigned long long)-1 && PyErr_Occurred()) {
		if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
			PyErr_Clear();
			PyErr_Format(PyExc_TypeError,
				     "%s(): %s must be a non-negative int below 2**64", fname,
				     what);
		}
		return -1;
	}
	*out = v;
	return 0;
}

static int arg_long(PyObject *o, const char *fname, const char *what, long *out)
{
	long v;
	if (PyBool_Check(o) || !PyIndex_Check(o)) {
		PyErr_Format(PyExc_TypeError, "%s(): %s must be an int, not %.100s", fname, what,
			     Py_TYPE(o)->tp_name);
		return -1;
	}
	v = PyLong_AsLong(o);
	if (v == -1 && PyErr_Occurred()) {
		if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
			PyErr_Clear();
			PyErr_Format(PyExc_TypeError, "%s(): %s is out of range", fname, what);
		}
		return -1;
	}
	*out = v;
	return 0;
}

/* Optional int argument with a default. */
static int opt_long(PyObject *o, long def, const char *fname, const char *what, long *out)
{
	if (!o) {
		*out = def;
		return 0;
	}
	return arg_long(o, fname, what, out);
}

/* Truth value of an optional argument. */
static int arg_bool(PyObject *o, bool def, bool *out)
{
	int v;
	if (!o) {
		*out = def;
		return 0;
	}
	v = PyObject_IsTrue(o);
	if (v < 0)
		return -1;
	*out = v;
	return 0;
}

/* A list-like argument (not str/bytes) as a new tuple: it holds references
 * to the items for as long as the call runs. */
static PyObject *arg_seq(PyObject *o, const char *fname, const char *what)
{
	if (!o || PyUnicode_Check(o) || PyBytes_Check(o) || PyByteArray_Check(o) ||
	    !PySequence_Check(o)) {
		PyErr_Format(PyExc_TypeError, "%s(): %s must be a list, not %.100s", fname, what,
			     o ? Py_TYPE(o)->tp_name : "nothing");
		return NULL;
	}
	return PySequence_Tuple(o);
}

/* ---- C-side argument arrays ------------------------------------------------------ */

/* Keys of a list: the tuple keeps the str objects (and their UTF-8) alive. */
struct keys {
	PyObject *tup;
	const char **v;
	size_t n;
};

static void keys_release(struct keys *k)
{
	PyMem_Free(k->v);
	Py_CLEAR(k->tup);
	k->v = NULL;
	k->n = 0;
}

static int keys_from(PyObject *o, const char *fname, struct keys *k)
{
	k->v = NULL;
	k->n = 0;
	k->tup = arg_seq(o, fname, "keys");
	if (!k->tup)
		return -1;
	k->n = (size_t)PyTuple_GET_SIZE(k->tup);
	k->v = PyMem_Calloc(k->n ? k->n : 1, sizeof(*k->v));
	if (!k->v) {
		keys_release(k);
		PyErr_NoMemory();
		return -1;
	}
	for (size_t i = 0; i < k->n; i++) {
		if (arg_str(PyTuple_GET_ITEM(k->tup, i), fname, "key", &k->v[i]) < 0) {
			keys_release(k);
			return -1;
		}
	}
	return 0;
}

/* A list of non-negative ints. */
static int u64s_from(PyObject *o, const char *fname, const char *what, uint64_t **out, size_t *n)
{
	PyObject *t = arg_seq(o, fname, what);
	*out = NULL;
	*n = 0;
	if (!t)
		return -1;
	*n = (size_t)PyTuple_GET_SIZE(t);
	*out = PyMem_Calloc(*n ? *n : 1, sizeof(**out));
	if (!*out) {
		Py_DECREF(t);
		PyErr_NoMemory();
		return -1;
	}
	for (size_t i = 0; i < *n; i++) {
		if (arg_u64(PyTuple_GET_ITEM(t, i), fname, what, &(*out)[i]) < 0) {
			PyMem_Free(*out);
			*out = NULL;
			Py_DECREF(t);
			return -1;
		}
	}
	Py_DECREF(t);
	return 0;
}

/* Exported buffers of a list of bytes-like values. */
struct bufs {
	Py_buffer *v;
	size_t n; /* acquired */
};

static void bufs_release(struct bufs *b)
{
	for (size_t i = 0; i < b->n; i++)
		PyBuffer_Release(&b->v[i]);
	PyMem_Free(b->v);
	b->v = NULL;
	b->n = 0;
}

static int get_buffer(PyObject *o, const char *fname, Py_buffer *view)
{
	if (PyObject_GetBuffer(o, view, PyBUF_SIMPLE) < 0) {
		PyErr_Clear();
		PyErr_Format(PyExc_TypeError,
			     "%s(): value must be a contiguous bytes-like object, not %.100s",
			     fname, Py_TYPE(o)->tp_name);
		return -1;
	}
	return 0;
}

static int bufs_from(PyObject *tup, const char *fname, struct bufs *b)
{
	size_t n = (size_t)PyTuple_GET_SIZE(tup);
	b->n = 0;
	b->v = PyMem_Calloc(n ? n : 1, sizeof(*b->v));
	if (!b->v) {
		PyErr_NoMemory();
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		if (get_buffer(PyTuple_GET_ITEM(tup, i), fname, &b->v[i]) < 0) {
			bufs_release(b);
			return -1;
		}
		b->n++;
	}
	return 0;
}

/* ---- ReplicateConfig ---------------------------------------------------------------- */

enum { SOFT_PIN_PRESERVE = 0, SOFT_PIN_ENABLE = 1, SOFT_PIN_DISABLE = 2 };

struct rc_obj {
	PyObject ob_base;
	PyObject *dict;
	unsigned long long replica_num, nof_replica_num, dfs_replica_num;
	int soft_pin_action;
	PyObject *soft_pin_ttl_ms; /* None or int */
	bool with_hard_pin;
	bool prefer_alloc_in_same_node;
	PyObject *preferred_segment;	  /* str */
	PyObject *preferred_segments;	  /* list of str */
	PyObject *preferred_nof_segments; /* list of str */
	int data_type;
	PyObject *group_ids; /* None or list of str */
};

static PyTypeObject ConfigType;
static PyObject *SoftPinActionEnum, *ReplicaStatusEnum, *ObjectDataTypeEnum;

static PyObject *rc_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	struct rc_obj *c = (struct rc_obj *)type->tp_alloc(type, 0);
	if (!c)
		return NULL;
	c->replica_num = 1;
	c->soft_pin_action = SOFT_PIN_PRESERVE;
	c->soft_pin_ttl_ms = Py_NewRef(Py_None);
	c->preferred_segment = PyUnicode_FromString("");
	c->preferred_segments = PyList_New(0);
	c->preferred_nof_segments = PyList_New(0);
	c->group_ids = Py_NewRef(Py_None);
	if (!c->preferred_segment || !c->preferred_segments || !c->preferred_nof_segments) {
		Py_DECREF(c);
		return NULL;
	}
	return (PyObject *)c;
}

static int rc_init(PyObject *self, PyObject *args, PyObject *kw)
{
	if (PyTuple_GET_SIZE(args) || (kw && PyDict_GET_SIZE(kw))) {
		PyErr_SetString(PyExc_TypeError, "ReplicateConfig() takes no arguments");
		return -1;
	}
	return 0;
}

static int rc_traverse(PyObject *self, visitproc visit, void *arg)
{
	struct rc_obj *c = (struct rc_obj *)self;
	Py_VISIT(c->dict);
	Py_VISIT(c->soft_pin_ttl_ms);
	Py_VISIT(c->preferred_segment);
	Py_VISIT(c->preferred_segments);
	Py_VISIT(c->preferred_nof_segments);
	Py_VISIT(c->group_ids);
	return 0;
}

static int rc_clear(PyObject *self)
{
	struct rc_obj *c = (struct rc_obj *)self;
	Py_CLEAR(c->dict);
	Py_CLEAR(c->soft_pin_ttl_ms);
	Py_CLEAR(c->preferred_segment);
	Py_CLEAR(c->preferred_segments);
	Py_CLEAR(c->preferred_nof_segments);
	Py_CLEAR(c->group_ids);
	return 0;
}

static void rc_dealloc(PyObject *self)
{
	PyObject_GC_UnTrack(self);
	rc_clear(self);
	Py_TYPE(self)->tp_free(self);
}

static int no_delete(PyObject *v, const char *name)
{
	if (!v) {
		PyErr_Format(PyExc_AttributeError, "cannot delete ReplicateConfig.%s", name);
		return -1;
	}
	return 0;
}

#define RC_U64_FIELD(field)                                                                    \
	static PyObject *rc_get_##field(PyObject *self, void *unused)                          \
	{                                                                                      \
		return PyLong_FromUnsignedLongLong(((struct rc_obj *)self)->field);            \
	}                                                                                      \
	static int rc_set_##field(PyObject *self, PyObject *v, void *unused)                   \
	{                                                                                      \
		uint64_t x;                                                                    \
		if (no_delete(v, #field) < 0 || arg_u64(v, "ReplicateConfig", #field, &x) < 0) \
			return -1;                                                             \
		((struct rc_obj *)self)->field = x;                                            \
		return 0;                                                                      \
	}

RC_U64_FIELD(replica_num)
RC_U64_FIELD(nof_replica_num)
RC_U64_FIELD(dfs_replica_num)

#define RC_BOOL_FIELD(field)                                                 \
	static PyObject *rc_get_##field(PyObject *self, void *unused)        \
	{                                                                    \
		return PyBool_FromLong(((struct rc_obj *)self)->field);      \
	}                                                                    \
	static int rc_set_##field(PyObject *self, PyObject *v, void *unused) \
	{                                                                    \
		int t;                                                       \
		if (no_delete(v, #field) < 0)                                \
			return -1;                                           \
		t = PyObject_IsTrue(v);                                      \
		if (t < 0)                                                   \
			return -1;                                           \
		((struct rc_obj *)self)->field = t;                          \
		return 0;                                                    \
	}

RC_BOOL_FIELD(with_hard_pin)
RC_BOOL_FIELD(prefer_alloc_in_same_node)

static PyObject *enum_value(PyObject *e, long v)
{
	if (!e)
		return PyLong_FromLong(v);
	return PyObject_CallFunction(e, "l", v);
}

static PyObject *rc_get_soft_pin_action(PyObject *self, void *unused)
{
	return enum_value(SoftPinActionEnum, ((struct rc_obj *)self)->soft_pin_action);
}

static int rc_set_soft_pin_action(PyObject *self, PyObject *v, void *unused)
{
	long x;
	if (no_delete(v, "soft_pin_action") < 0 ||
	    arg_long(v, "ReplicateConfig", "soft_pin_action", &x) < 0)
		return -1;
	if (x < SOFT_PIN_PRESERVE || x > SOFT_PIN_DISABLE) {
		PyErr_SetString(PyExc_ValueError, "soft_pin_action must be a SoftPinAction");
		return -1;
	}
	((struct rc_obj *)self)->soft_pin_action = (int)x;
	return 0;
}

/* with_soft_pin: the older boolean spelling of soft_pin_action. */
static PyObject *rc_get_with_soft_pin(PyObject *self, void *unused)
{
	return PyBool_FromLong(((struct rc_obj *)self)->soft_pin_action == SOFT_PIN_ENABLE);
}

static int rc_set_with_soft_pin(PyObject *self, PyObject *v, void *unused)
{
	int t;
	if (no_delete(v, "with_soft_pin") < 0)
		return -1;
	t = PyObject_IsTrue(v);
	if (t < 0)
		return -1;
	((struct rc_obj *)self)->soft_pin_action = t ? SOFT_PIN_ENABLE : SOFT_PIN_PRESERVE;
	return 0;
}

static PyObject *rc_get_soft_pin_ttl_ms(PyObject *self, void *unused)
{
	return Py_NewRef(((struct rc_obj *)self)->soft_pin_ttl_ms);
}

static int rc_set_soft_pin_ttl_ms(PyObject *self, PyObject *v, void *unused)
{
	struct rc_obj *c = (struct rc_obj *)self;
	uint64_t x;
	PyObject *nv;
	if (no_delete(v, "soft_pin_ttl_ms") < 0)
		return -1;
	if (v == Py_None) {
		nv = Py_NewRef(Py_None);
	} else {
		if (arg_u64(v, "ReplicateConfig", "soft_pin_ttl_ms", &x) < 0)
			return -1;
		nv = PyLong_FromUnsignedLongLong(x);
		if (!nv)
			return -1;
	}
	Py_SETREF(c->soft_pin_ttl_ms, nv);
	return 0;
}

static PyObject *rc_get_data_type(PyObject *self, void *unused)
{
	return enum_value(ObjectDataTypeEnum, ((struct rc_obj *)self)->data_type);
}

static int rc_set_data_type(PyObject *self, PyObject *v, void *unused)
{
	long x;
	if (no_delete(v, "data_type") < 0 || arg_long(v, "ReplicateConfig", "data_type", &x) < 0)
		return -1;
	if (x < 0 || x > 9) {
		PyErr_SetString(PyExc_ValueError, "data_type must be an ObjectDataType");
		return -1;
	}
	((struct rc_obj *)self)->data_type = (int)x;
	return 0;
}

static PyObject *rc_get_preferred_segment(PyObject *self, void *unused)
{
	return Py_NewRef(((struct rc_obj *)self)->preferred_segment);
}

static int rc_set_preferred_segment(PyObject *self, PyObject *v, void *unused)
{
	if (no_delete(v, "preferred_segment") < 0)
		return -1;
	if (!PyUnicode_Check(v)) {
		PyErr_Format(PyExc_TypeError, "preferred_segment must be str, not %.100s",
			     Py_TYPE(v)->tp_name);
		return -1;
	}
	Py_SETREF(((struct rc_obj *)self)->preferred_segment, Py_NewRef(v));
	return 0;
}

/* A list of str, copied (so later changes to the caller's list do not leak in). */
static PyObject *str_list(PyObject *v, const char *what)
{
	PyObject *t, *l;
	if (PyUnicode_Check(v) || PyBytes_Check(v) || !PySequence_Check(v)) {
		PyErr_Format(PyExc_TypeError, "%s must be a list of str, not %.100s", what,
			     Py_TYPE(v)->tp_name);
		return NULL;
	}
	t = PySequence_Tuple(v);
	if (!t)
		return NULL;
	for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); i++) {
		if (!PyUnicode_Check(PyTuple_GET_ITEM(t, i))) {
			PyErr_Format(PyExc_TypeError, "%s must be a list of str", what);
			Py_DECREF(t);
			return NULL;
		}
	}
	l = PySequence_List(t);
	Py_DECREF(t);
	return l;
}

#define RC_LIST_FIELD(field, nullable)                                       \
	static PyObject *rc_get_##field(PyObject *self, void *unused)        \
	{                                                                    \
		return Py_NewRef(((struct rc_obj *)self)->field);            \
	}                                                                    \
	static int rc_set_##field(PyObject *self, PyObject *v, void *unused) \
	{                                                                    \
		PyObject *l;                                                 \
		if (no_delete(v, #field) < 0)                                \
			return -1;                                           \
		if ((nullable) && v == Py_None)                              \
			l = Py_NewRef(Py_None);                              \
		else if (!(l = str_list(v, #field)))                         \
			return -1;                                           \
		Py_SETREF(((struct rc_obj *)self)->field, l);                \
		return 0;                                                    \
	}

RC_LIST_FIELD(preferred_segments, false)
RC_LIST_FIELD(preferred_nof_segments, false)
RC_LIST_FIELD(group_ids, true)

#define RC_GETSET(field, doc)                                     \
	{                                                         \
#field, rc_get_##field, rc_set_##field, doc, NULL \
	}

static PyGetSetDef rc_getset[] = {
	RC_GETSET(replica_num, "number of memory replicas (default 1)"),
	RC_GETSET(nof_replica_num, "NVMe-oF replicas (accepted, unused)"),
	RC_GETSET(dfs_replica_num, "DFS replicas (accepted, unused)"),
	RC_GETSET(soft_pin_action, "SoftPinAction: PRESERVE, ENABLE or DISABLE"),
	RC_GETSET(with_soft_pin, "bool: soft_pin_action == ENABLE"),
	RC_GETSET(soft_pin_ttl_ms, "None (the master's default) or a soft-pin TTL in ms"),
	RC_GETSET(with_hard_pin, "never evict the object"),
	RC_GETSET(preferred_segment, "segment name to place the first replica in"),
	RC_GETSET(preferred_segments, "segment names tried in order"),
	RC_GETSET(preferred_nof_segments, "NVMe-oF segment names (accepted, unused)"),
	RC_GETSET(prefer_alloc_in_same_node, "place replicas on this node (multi-buffer calls)"),
	RC_GETSET(data_type, "ObjectDataType"),
	RC_GETSET(group_ids, "None or a list of group ids"),
	{NULL, NULL, NULL, NULL, NULL},
};

static PyObject *rc_str(PyObject *self)
{
	struct rc_obj *c = (struct rc_obj *)self;
	return PyUnicode_FromFormat(
		"ReplicateConfig: { replica_num: %llu, nof_replica_num: %llu, dfs_replica_num: "
		"%llu, soft_pin_action: %d, soft_pin_ttl_ms: %R, with_hard_pin: %s, "
		"preferred_segment: %R, preferred_segments: %R, preferred_nof_segments: %R, "
		"prefer_alloc_in_same_node: %s, data_type: %d, group_ids: %R }",
		c->replica_num, c->nof_replica_num, c->dfs_replica_num, c->soft_pin_action,
		c->soft_pin_ttl_ms, c->with_hard_pin ? "true" : "false", c->preferred_segment,
		c->preferred_segments, c->preferred_nof_segments,
		c->prefer_alloc_in_same_node ? "true" : "false", c->data_type, c->group_ids);
}

static PyTypeObject ConfigType = {
	/* clang-format off */
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = MODULE_NAME ".ReplicateConfig",
	/* clang-format on */
	.tp_basicsize = sizeof(struct rc_obj),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
	.tp_doc = "ReplicateConfig(): placement and pinning of a put.",
	.tp_new = rc_new,
	.tp_init = rc_init,
	.tp_dealloc = rc_dealloc,
	.tp_traverse = rc_traverse,
	.tp_clear = rc_clear,
	.tp_getset = rc_getset,
	.tp_str = rc_str,
	.tp_repr = rc_str,
	.tp_dictoffset = offsetof(struct rc_obj, dict),
};

/* A ReplicateConfig copied into C memory that the call owns. */
struct cfg {
	struct mc_store_config c; /* group_id: the first of group_ids */
	const char **segs;
	const char **gids; /* all of group_ids, for the batch calls */
	size_t ngids;
	char *blob; /* every string, NUL-separated */
	bool given;
};

static void cfg_release(struct cfg *k)
{
	PyMem_Free(k->segs);
	PyMem_Free(k->gids);
	PyMem_Free(k->blob);
	k->segs = NULL;
	k->gids = NULL;
	k->blob = NULL;
}

/* A batch call: one group id per key (the C client checks the count). */
static const struct mc_store_config *cfg_batch(struct cfg *k)
{
	k->c.group_ids = k->gids;
	k->c.n_group_ids = k->ngids;
	return &k->c;
}

/* Key i of an n-key call made one key at a time: its own group when
 * group_ids has one per key, else the first. */
static struct mc_store_config cfg_key(const struct cfg *k, size_t i, size_t n)
{
	struct mc_store_config c = k->c;

	if (k->ngids == n && i < n)
		c.group_id = k->gids[i];
	c.group_ids = NULL;
	c.n_group_ids = 0;
	return c;
}

/* NULL or None = the defaults (a fresh ReplicateConfig). */
static int cfg_from(PyObject *o, const char *fname, struct cfg *k)
{
	struct rc_obj *c;
	Py_ssize_t nseg, ngid = 0, total = 0, off = 0;

	memset(k, 0, sizeof(*k));
	k->c.replica_num = 1;
	if (!o || o == Py_None)
		return 0;
	if (!PyObject_TypeCheck(o, &ConfigType)) {
		PyErr_Format(PyExc_TypeError, "%s(): config must be a ReplicateConfig, not %.100s",
			     fname, Py_TYPE(o)->tp_name);
		return -1;
	}
	c = (struct rc_obj *)o;
	k->given = true;
	if (c->replica_num > UINT32_MAX) {
		PyErr_Format(PyExc_TypeError, "%s(): replica_num is too large", fname);
		return -1;
	}
	k->c.replica_num = (uint32_t)c->replica_num;
	k->c.with_soft_pin = c->soft_pin_action == SOFT_PIN_ENABLE;
	if (c->soft_pin_ttl_ms != Py_None)
		k->c.soft_pin_ttl_ms = PyLong_AsUnsignedLongLong(c->soft_pin_ttl_ms);
	k->c.with_hard_pin = c->with_hard_pin;
	k->c.prefer_alloc_in_same_node = c->prefer_alloc_in_same_node;
	nseg = PyList_GET_SIZE(c->preferred_segments);
	/* group_ids: one per key of a batch (cfg_batch); a single put takes
	 * the first. */
	if (c->group_ids != Py_None)
		ngid = PyList_GET_SIZE(c->group_ids);
	for (Py_ssize_t i = 0; i < ngid; i++) {
		Py_ssize_t n;
		if (!PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(c->group_ids, i), &n))
			return -1;
		total += n + 1;
	}
	{
		Py_ssize_t n;
		if (!PyUnicode_AsUTF8AndSize(c->preferred_segment, &n))
			return -1;
		total += n + 1;
	}
	for (Py_ssize_t i = 0; i < nseg; i++) {
		Py_ssize_t n;
		if (!PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(c->preferred_segments, i), &n))
			return -1;
		total += n + 1;
	}
	k->blob = PyMem_Malloc((size_t)total);
	k->segs = PyMem_Calloc(nseg ? (size_t)nseg : 1, sizeof(*k->segs));
	k->gids = PyMem_Calloc(ngid ? (size_t)ngid : 1, sizeof(*k->gids));
	if (!k->blob || !k->segs || !k->gids) {
		cfg_release(k);
		PyErr_NoMemory();
		return -1;
	}
#define CFG_COPY(src, len, dst)                              \
	do {                                                 \
		memcpy(k->blob + off, (src), (size_t)(len)); \
		k->blob[off + (len)] = '\0';                 \
		(dst) = k->blob + off;                       \
		off += (len) + 1;                            \
	} while (0)
	{
		Py_ssize_t n;
		const char *s = PyUnicode_AsUTF8AndSize(c->preferred_segment, &n);
		CFG_COPY(s, n, k->c.preferred_segment);
	}
	for (Py_ssize_t i = 0; i < nseg; i++) {
		Py_ssize_t n;
		const char *s =
			PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(c->preferred_segments, i), &n);
		CFG_COPY(s, n, k->segs[i]);
	}
	for (Py_ssize_t i = 0; i < ngid; i++) {
		Py_ssize_t n;
		const char *s = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(c->group_ids, i), &n);
		CFG_COPY(s, n, k->gids[i]);
	}
	k->ngids = (size_t)ngid;
	if (ngid)
		k->c.group_id = k->gids[0];
#undef CFG_COPY
	k->c.preferred_segments = k->segs;
	k->c.n_preferred_segments = (size_t)nseg;
	return 0;
}

/* ---- the store object -------------------------------------------------------------- */

struct store_obj {
	PyObject ob_base;
	PyObject *dict;
	struct mc_store *s;
	pthread_rwlock_t lock; /* shared: calls; exclusive: setup, close */
	PyObject *engine_ref;  /* a shared engine, kept alive until close */
};

static PyTypeObject StoreType;

/* Drop the GIL, then take the client's lock: never wait for one while
 * holding the other. */
struct call {
	PyThreadState *ts;
	struct store_obj *st;
};

static void call_begin(struct call *c, struct store_obj *st, bool exclusive)
{
	c->st = st;
	c->ts = PyEval_SaveThread();
	if (exclusive)
		pthread_rwlock_wrlock(&st->lock);
	else
		pthread_rwlock_rdlock(&st->lock);
}

static void call_end(struct call *c)
{
	pthread_rwlock_unlock(&c->st->lock);
	PyEval_RestoreThread(c->ts);
}

#define ST(self) ((struct store_obj *)(self))

static PyObject *store_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	struct store_obj *st = (struct store_obj *)type->tp_alloc(type, 0);
	pthread_rwlockattr_t attr;
	int lrc;

	if (!st)
		return NULL;
	/* writer-preferring, so close() is not starved by a stream of calls;
	 * no thread ever takes the lock twice, so non-recursive is fine */
	pthread_rwlockattr_init(&attr);
	pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	lrc = pthread_rwlock_init(&st->lock, &attr);
	pthread_rwlockattr_destroy(&attr);
	if (lrc != 0 || mc_store_new(&st->s) != MC_OK) {
		st->s = NULL;
		Py_DECREF(st);
		PyErr_NoMemory();
		return NULL;
	}
	return (PyObject *)st;
}

static int store_init(PyObject *self, PyObject *args, PyObject *kw)
{
	if (PyTuple_GET_SIZE(args) || (kw && PyDict_GET_SIZE(kw))) {
		PyErr_SetString(PyExc_TypeError, "MooncakeDistributedStore() takes no arguments");
		return -1;
	}
	return 0;
}

static int store_traverse(PyObject *self, visitproc visit, void *arg)
{
	Py_VISIT(ST(self)->dict);
	Py_VISIT(ST(self)->engine_ref);
	return 0;
}

static int store_clear(PyObject *self)
{
	Py_CLEAR(ST(self)->dict);
	return 0;
}

static void store_dealloc(PyObject *self)
{
	struct store_obj *st = ST(self);
	PyThreadState *ts;

	PyObject_GC_UnTrack(self);
	if (st->s) {
		/* no other call can run: they all hold a reference to self */
		ts = PyEval_SaveThread();
		mc_store_free(st->s);
		PyEval_RestoreThread(ts);
		st->s = NULL;
		pthread_rwlock_destroy(&st->lock);
	}
	Py_CLEAR(st->engine_ref);
	Py_CLEAR(st->dict);
	Py_TYPE(self)->tp_free(self);
}

#define FASTKW(fn) (PyCFunction)(void (*)(void))(fn), METH_FASTCALL | METH_KEYWORDS
#define DEFARGS	   PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames
#define PARSE(fname, nreq, ...)                                                   \
	static const char *const names_[] = {__VA_ARGS__};                        \
	const struct argspec spec_ = {fname, names_, nreq,                        \
				      (int)(sizeof(names_) / sizeof(names_[0]))}; \
	PyObject *a[MAX_ARGS];                                                    \
	if (parse_args(&spec_, args, nargs, kwnames, a) < 0)                      \
	return NULL

/* ---- setup ------------------------------------------------------------------------- */

/* "4GB", "1.5 gb", "512", "16MiB"?: number + optional binary unit; -1 if bad. */
static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	double v;
	uint64_t mul = 1;

	while (isspace((unsigned char)*s))
		s++;
	if (strcasecmp(s, "infinite") == 0) {
		*out = UINT64_MAX;
		return 0;
	}
	if (!isdigit((unsigned char)*s) && *s != '.')
		return -1;
	v = strtod(s, &end);
	if (end == s || !isfinite(v) || v < 0)
		return -1;
	while (isspace((unsigned char)*end))
		end++;
	if (*end) {
		char u[4] = {0};
		size_t n = strlen(end);
		while (n && isspace((unsigned char)end[n - 1]))
			n--;
		if (n == 0 || n > 2)
			return -1;
		for (size_t i = 0; i < n; i++)
			u[i] = (char)toupper((unsigned char)end[i]);
		if (n == 2 && u[1] != 'B')
			return -1;
		switch (u[0]) {
		case 'B':
			if (n != 1)
				return -1;
			break;
		case 'K':
			mul = 1ull << 10;
			break;
		case 'M':
			mul = 1ull << 20;
			break;
		case 'G':
			mul = 1ull << 30;
			break;
		case 'T':
			mul = 1ull << 40;
			break;
		default:
			return -1;
		}
	}
	v *= (double)mul;
	if (v >= 18446744073709551616.0)
		return -1;
	*out = (uint64_t)v;
	return 0;
}

/* An int, or (in the dict form and for convenience) a size string. */
static int arg_size(PyObject *o, const char *fname, const char *what, uint64_t *out, bool *bad)
{
	const char *s;
	*bad = false;
	if (PyUnicode_Check(o)) {
		if (arg_str(o, fname, what, &s) < 0)
			return -1;
		if (parse_size(s, out) < 0)
			*bad = true;
		return 0;
	}
	return arg_u64(o, fname, what, out);
}

/* The struct mc_te behind a mooncake.engine object: an InnerTransferEngine
 * (get_engine(), .address) or the TransferEngine itself (get_engine_ptr()). */
static int engine_pointer(PyObject *o, struct mc_te **out)
{
	PyObject *v;
	void *p;

	*out = NULL;
	if (PyObject_HasAttrString(o, "address"))
		v = PyObject_GetAttrString(o, "address");
	else if (PyObject_HasAttrString(o, "get_engine_ptr"))
		v = PyObject_CallMethod(o, "get_engine_ptr", NULL);
	else {
		PyErr_Format(PyExc_TypeError,
			     "setup(): engine must be a mooncake.engine TransferEngine or the "
			     "handle from its get_engine(), not %.100s",
			     Py_TYPE(o)->tp_name);
		return -1;
	}
	if (!v)
		return -1;
	if (!PyLong_Check(v)) {
		Py_DECREF(v);
		PyErr_SetString(PyExc_TypeError, "setup(): engine address is not an int");
		return -1;
	}
	p = PyLong_AsVoidPtr(v);
	Py_DECREF(v);
	if (!p && PyErr_Occurred())
		return -1;
	*out = p;
	return 0;
}

static PyObject *do_setup(struct store_obj *st, struct mc_store_params *p, PyObject *engine_obj)
{
	struct call c;
	mc_status rc;

	if (engine_obj && engine_obj != Py_None) {
		if (engine_pointer(engine_obj, &p->engine) < 0)
			return NULL;
		if (!p->engine) /* an engine that was never initialised */
			return PyLong_FromLong(ERR_INVALID_PARAMS);
	}
	call_begin(&c, st, true);
	rc = mc_store_setup(st->s, p);
	call_end(&c);
	if (rc == MC_OK && p->engine)
		Py_XSETREF(st->engine_ref, Py_NewRef(engine_obj));
	return PyLong_FromLong(rc);
}

/* setup(config: dict): values are stringified, sizes may be "4GB". */
static PyObject *setup_dict(struct store_obj *st, PyObject *d)
{
	static const char *const keys[] = {
		"local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
		"protocol",	  "rdma_devices",    "master_server_addr",  "tenant_id"};
	const char *val[8] = {NULL};
	PyObject *strs[8] = {NULL};
	PyObject *ret = NULL;
	struct mc_store_params p = {0};
	uint64_t gsz = 16ull << 20, lsz = 16ull << 20;

	for (size_t i = 0; i < 8; i++) {
		PyObject *v = PyDict_GetItemString(d, keys[i]);
		if (!v && i == 6)
			v = PyDict_GetItemString(d, "master_server_address");
		if (!v && i == 5)
			v = PyDict_GetItemString(d, "device_name");
		if (!v)
			continue;
		strs[i] = PyObject_Str(v);
		if (!strs[i])
			goto out;
		val[i] = PyUnicode_AsUTF8(strs[i]);
		if (!val[i])
			goto out;
	}
	if (!val[0] || !val[1] || !*val[0] || !*val[1]) {
		ret = PyLong_FromLong(ERR_INVALID_PARAMS);
		goto out;
	}
	/* as in the positional form: no SSD tier, no client HTTP server */
	for (size_t i = 0; i < 2; i++) {
		static const char *const flags[] = {"enable_ssd_offload",
						    "enable_client_http_server"};
		PyObject *v = PyDict_GetItemString(d, flags[i]), *str;
		const char *t;
		bool on;
		if (!v)
			continue;
		str = PyObject_Str(v);
		t = str ? PyUnicode_AsUTF8(str) : NULL;
		if (!t) {
			Py_XDECREF(str);
			goto out;
		}
		on = !strcasecmp(t, "true") || !strcmp(t, "1") || !strcasecmp(t, "yes") ||
		     !strcasecmp(t, "on") || !strcasecmp(t, "enable");
		Py_DECREF(str);
		if (on) {
			ret = PyLong_FromLong(MC_ERR_NOT_SUPPORTED);
			goto out;
		}
	}
	if ((val[2] && parse_size(val[2], &gsz) < 0) || (val[3] && parse_size(val[3], &lsz) < 0) ||
	    (gsz && gsz < 1024) || (lsz && lsz < 1024)) {
		ret = PyLong_FromLong(ERR_INVALID_PARAMS);
		goto out;
	}
	p.local_hostname = val[0];
	p.metadata_server = val[1];
	p.global_segment_size = gsz;
	p.local_buffer_size = lsz;
	p.protocol = val[4] ? val[4] : "tcp";
	p.rdma_devices = val[5] ? val[5] : "";
	p.master_server_addr = val[6] ? val[6] : "127.0.0.1:50051";
	p.tenant_id = val[7];
	ret = do_setup(st, &p, NULL);
out:
	for (size_t i = 0; i < 8; i++)
		Py_XDECREF(strs[i]);
	return ret;
}

static PyObject *store_setup(DEFARGS)
{
	struct store_obj *st = ST(self);
	struct mc_store_params p = {0};
	const char *proto, *dev, *ssd_path = "";
	uint64_t gsz, lsz, http_port = 9300;
	bool bad1, bad2, ssd, http;

	if (nargs == 1 && !kwnames && PyDict_Check(args[0]))
		return setup_dict(st, args[0]);
	PARSE("setup", 7, "local_hostname", "metadata_server", "global_segment_size",
	      "local_buffer_size", "protocol", "rdma_devices", "master_server_addr", "engine",
	      "enable_ssd_offload", "ssd_offload_path", "tenant_id", "enable_client_http_server",
	      "client_http_port");
	if (arg_str(a[0], "setup", "local_hostname", &p.local_hostname) < 0 ||
	    arg_str(a[1], "setup", "metadata_server", &p.metadata_server) < 0 ||
	    arg_size(a[2], "setup", "global_segment_size", &gsz, &bad1) < 0 ||
	    arg_size(a[3], "setup", "local_buffer_size", &lsz, &bad2) < 0 ||
	    arg_str(a[4], "setup", "protocol", &proto) < 0 ||
	    arg_str(a[5], "setup", "rdma_devices", &dev) < 0 ||
	    arg_str(a[6], "setup", "master_server_addr", &p.master_server_addr) < 0 ||
	    arg_bool(a[8], false, &ssd) < 0 ||
	    (a[9] && arg_str(a[9], "setup", "ssd_offload_path", &ssd_path) < 0) ||
	    (a[10] && arg_str(a[10], "setup", "tenant_id", &p.tenant_id) < 0) ||
	    arg_bool(a[11], false, &http) < 0 ||
	    (a[12] && arg_u64(a[12], "setup", "client_http_port", &http_port) < 0))
		return NULL;
	(void)ssd_path;
	(void)http_port;
	if (a[7] && a[7] != Py_None) {
		struct mc_te *te;
		if (engine_pointer(a[7], &te) < 0) /* type check before anything else */
			return NULL;
	}
	if (bad1 || bad2)
		return PyLong_FromLong(ERR_INVALID_PARAMS);
	/* The C client has no SSD tier and no client HTTP server: asking for
	 * them is refused rather than silently ignored. */
	if (ssd || http)
		return PyLong_FromLong(MC_ERR_NOT_SUPPORTED);
	if (strcmp(dev, "auto-discovery") == 0)
		dev = "";
	p.global_segment_size = gsz;
	p.local_buffer_size = lsz;
	p.protocol = proto;
	p.rdma_devices = dev;
	return do_setup(st, &p, a[7]);
}

static PyObject *store_close(PyObject *self, PyObject *unused)
{
	struct call c;
	mc_status rc;

	call_begin(&c, ST(self), true);
	rc = mc_store_close(ST(self)->s);
	call_end(&c);
	Py_CLEAR(ST(self)->engine_ref);
	return PyLong_FromLong(rc);
}

static PyObject *store_health_check(PyObject *self, PyObject *unused)
{
	struct call c;
	int rc;
	call_begin(&c, ST(self), false);
	rc = mc_store_health_check(ST(self)->s);
	call_end(&c);
	return PyLong_FromLong(rc);
}

static PyObject *store_get_hostname(PyObject *self, PyObject *unused)
{
	struct call c;
	char name[300];
	call_begin(&c, ST(self), false);
	snprintf(name, sizeof(name), "%s",
		 mc_store_health_check(ST(self)->s) == 1 ? "" : mc_store_hostname(ST(self)->s));
	call_end(&c);
	return PyUnicode_FromString(name);
}

static PyObject *store_alloc_from_mem_pool(DEFARGS)
{
	uint64_t size;
	PARSE("alloc_from_mem_pool", 1, "size");
	if (arg_u64(a[0], "alloc_from_mem_pool", "size", &size) < 0)
		return NULL;
	return PyLong_FromLong(0); /* a real client has no shared pool (dummy only) */
}

static PyObject *store_get_engine_ptr(PyObject *self, PyObject *unused)
{
	struct mc_te *te;
	struct call c;
	call_begin(&c, ST(self), false);
	te = mc_store_health_check(ST(self)->s) == 1 ? NULL : mc_store_engine(ST(self)->s);
	call_end(&c);
	return PyLong_FromVoidPtr(te);
}

/* setup_dummy(mem_pool_size, local_buffer_size, server_address): the dummy
 * client (shared memory with a standalone mooncake_client) is not part of
 * the C API, so it fails with upstream's failure value. */
static PyObject *store_setup_dummy(DEFARGS)
{
	uint64_t pool, lbuf;
	const char *addr;
	PARSE("setup_dummy", 3, "mem_pool_size", "local_buffer_size", "server_address");
	if (arg_u64(a[0], "setup_dummy", "mem_pool_size", &pool) < 0 ||
	    arg_u64(a[1], "setup_dummy", "local_buffer_size", &lbuf) < 0 ||
	    arg_str(a[2], "setup_dummy", "server_address", &addr) < 0)
		return NULL;
	return PyLong_FromLong(-1);
}

static PyObject *store_get_offload_rpc_read_count(PyObject *self, PyObject *unused)
{
	return PyLong_FromLong(0); /* no SSD tier here */
}

/* ---- copy-based puts -------------------------------------------------------------- */

enum put_kind { PUT_INSERT, PUT_UPSERT };

static PyObject *put_single(PyObject *self, const char *fname, PyObject *key_o, PyObject *val_o,
			    PyObject *cfg_o, enum put_kind kind)
{
	const char *key;
	Py_buffer view;
	struct cfg cfg;
	struct call c;
	mc_status rc;

	if (arg_str(key_o, fname, "key", &key) < 0 || cfg_from(cfg_o, fname, &cfg) < 0)
		return NULL;
	if (get_buffer(val_o, fname, &view) < 0) {
		cfg_release(&cfg);
		return NULL;
	}
	call_begin(&c, ST(self), false);
	if (kind == PUT_UPSERT)
		rc = mc_store_upsert(ST(self)->s, key, view.buf, (size_t)view.len, &cfg.c);
	else
		rc = mc_store_put(ST(self)->s, key, view.buf, (size_t)view.len, &cfg.c);
	call_end(&c);
	PyBuffer_Release(&view);
	cfg_release(&cfg);
	return PyLong_FromLong(rc);
}

static PyObject *store_put(DEFARGS)
{
	PARSE("put", 2, "key", "value", "config");
	return put_single(self, "put", a[0], a[1], a[2], PUT_INSERT);
}

static PyObject *store_upsert(DEFARGS)
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
	if (cfg_from(cfg_o, fname, &cfg) < 0) {
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
		rc = mc_store_upsert_parts(ST(self)->s, key, parts, lens, b.n, &cfg.c);
	call_end(&c);
	PyMem_Free(parts);
	PyMem_Free(lens);
	bufs_release(&b);
	cfg_release(&cfg);
	Py_DECREF(tup);
	return PyLong_FromLong(rc);
err:
	PyMem_Free(parts);
	PyMem_Free(lens);
	bufs_release(&b);
	cfg_release(&cfg);
	Py_DECREF(tup);
	return NULL;
}

static PyObject *store_put_parts(DEFARGS)
{
	return parts_common(self, "put_parts", args, nargs, kwnames, PUT_INSERT);
}

static PyObject *store_upsert_parts(DEFARGS)
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
	vals = arg_seq(a[1], fname, "values");
	if (!vals) {
		keys_release(&k);
		return NULL;
	}
	if (cfg_from(a[2], fname, &cfg) < 0) {
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
		rc = mc_store_put_batch(ST(self)->s, k.v, vp, lens, k.n, cfg_batch(&cfg), NULL);
	else
		rc = mc_store_upsert_batch(ST(self)->s, k.v, vp, lens, k.n, cfg_batch(&cfg), NULL);
	call_end(&c);
done:
	PyMem_Free(vp);
	PyMem_Free(lens);
	bufs_release(&b);
	cfg_release(&cfg);
	Py_DECREF(vals);
	keys_release(&k);
	return PyLong_FromLong(rc);
err:
	PyMem_Free(vp);
	PyMem_Free(lens);
	bufs_release(&b);
	cfg_release(&cfg);
	Py_DECREF(vals);
	keys_release(&k);
	return NULL;
}

static PyObject *store_put_batch(DEFARGS)
{
	return batch_common(self, "put_batch", args, nargs, kwnames, PUT_INSERT);
}

static PyObject *store_upsert_batch(DEFARGS)
{
	return batch_common(self, "upsert_batch", args, nargs, kwnames, PUT_UPSERT);
}

/* ---- copy-based gets ------------------------------------------------------------------ */

/* Read key into a malloc'ed buffer; returns the size or a negative status. */
static int64_t get_malloc(struct store_obj *st, const char *key, void **out)
{
	struct call c;
	int64_t n;
	*out = NULL;
	call_begin(&c, st, false);
	n = mc_store_get(st->s, key, out);
	call_end(&c);
	if (n < 0)
		*out = NULL;
	return n;
}

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

static PyObject *store_get(DEFARGS)
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

static PyObject *store_get_batch(DEFARGS)
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

struct bh_obj {
	PyObject ob_base;
	void *buf; /* malloc'ed */
	size_t size;
};

static PyTypeObject HandleType;

static PyObject *handle_wrap(void *buf, size_t size)
{
	struct bh_obj *h = PyObject_New(struct bh_obj, &HandleType);
	if (!h) {
		free(buf);
		return NULL;
	}
	h->buf = buf;
	h->size = size;
	return (PyObject *)h;
}

static void bh_dealloc(PyObject *self)
{
	free(((struct bh_obj *)self)->buf);
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

static PyTypeObject HandleType = {
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

static PyObject *store_get_buffer(DEFARGS)
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

static PyObject *store_batch_get_buffer(DEFARGS)
{
	struct keys k;
	PyObject *out;
	void **bufs;
	int64_t *sizes;
	struct call c;
	PARSE("batch_get_buffer", 1, "keys");

	if (keys_from(a[0], "batch_get_buffer", &k) < 0)
		return NULL;
	bufs = PyMem_Calloc(k.n ? k.n : 1, sizeof(*bufs));
	sizes = PyMem_Calloc(k.n ? k.n : 1, sizeof(*sizes));
	if (!bufs || !sizes) {
		PyMem_Free(bufs);
		PyMem_Free(sizes);
		keys_release(&k);
		return PyErr_NoMemory();
	}
	call_begin(&c, ST(self), false);
	mc_store_batch_get(ST(self)->s, k.v, k.n, bufs, sizes);
	call_end(&c);
	out = PyList_New((Py_ssize_t)k.n);
	for (size_t i = 0; i < k.n; i++) {
		PyObject *h;
		if (sizes[i] < 0) {
			h = Py_NewRef(Py_None);
		} else {
			h = handle_wrap(bufs[i], (size_t)sizes[i]); /* owns (or frees) bufs[i] */
			if (!h)
				PyErr_Clear();
			h = h ? h : Py_NewRef(Py_None);
		}
		if (out)
			PyList_SET_ITEM(out, (Py_ssize_t)i, h);
		else
			Py_DECREF(h);
	}
	PyMem_Free(bufs);
	PyMem_Free(sizes);
	keys_release(&k);
	return out;
}

/* ---- metadata calls ----------------------------------------------------------------- */

static PyObject *store_get_size(DEFARGS)
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

static PyObject *store_is_exist(DEFARGS)
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

/* A Python list of n ints made by item(v, i); NULL with an exception set. */
static PyObject *num_list(const void *v, size_t n, PyObject *(*item)(const void *, size_t))
{
	PyObject *out = PyList_New((Py_ssize_t)n);
	for (size_t i = 0; out && i < n; i++) {
		PyObject *x = item(v, i);
		if (!x) {
			Py_CLEAR(out);
			break;
		}
		PyList_SET_ITEM(out, (Py_ssize_t)i, x);
	}
	return out;
}

static PyObject *int_item(const void *v, size_t i)
{
	return PyLong_FromLong(((const int *)v)[i]);
}

static PyObject *i64_item(const void *v, size_t i)
{
	return PyLong_FromLongLong(((const int64_t *)v)[i]);
}

static PyObject *status_item(const void *v, size_t i)
{
	return PyLong_FromLong(((const mc_status *)v)[i]);
}

static PyObject *int_list(const int *v, size_t n)
{
	return num_list(v, n, int_item);
}

static PyObject *i64_list(const int64_t *v, size_t n)
{
	return num_list(v, n, i64_item);
}

static PyObject *status_list(const mc_status *v, size_t n)
{
	return num_list(v, n, status_item);
}

static PyObject *store_batch_is_exist(DEFARGS)
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

static PyObject *store_remove(DEFARGS)
{
	const char *key;
	bool force;
	struct call c;
	mc_status rc;
	PARSE("remove", 1, "key", "force");
	if (arg_str(a[0], "remove", "key", &key) < 0 || arg_bool(a[1], false, &force) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	rc = mc_store_remove(ST(self)->s, key, force);
	call_end(&c);
	return PyLong_FromLong(rc);
}

static PyObject *store_remove_by_regex(DEFARGS)
{
	const char *pat;
	bool force;
	struct call c;
	int64_t n;
	PARSE("remove_by_regex", 1, "regex_pattern", "force");
	if (arg_str(a[0], "remove_by_regex", "regex_pattern", &pat) < 0 ||
	    arg_bool(a[1], false, &force) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	n = mc_store_remove_by_regex(ST(self)->s, pat, force);
	call_end(&c);
	return PyLong_FromLongLong(n);
}

static PyObject *store_remove_all(DEFARGS)
{
	bool force;
	struct call c;
	int64_t n;
	PARSE("remove_all", 0, "force");
	if (arg_bool(a[0], false, &force) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	n = mc_store_remove_all(ST(self)->s, force);
	call_end(&c);
	return PyLong_FromLongLong(n);
}

static PyObject *store_batch_remove(DEFARGS)
{
	struct keys k;
	bool force;
	struct call c;
	mc_status *res;
	PyObject *out;
	PARSE("batch_remove", 1, "keys", "force");

	if (arg_bool(a[1], false, &force) < 0 || keys_from(a[0], "batch_remove", &k) < 0)
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

/* ---- zero-copy calls --------------------------------------------------------------- */

static PyObject *store_register_buffer(DEFARGS)
{
	uint64_t ptr, size;
	struct call c;
	mc_status rc;
	PARSE("register_buffer", 2, "buffer_ptr", "size");
	if (arg_u64(a[0], "register_buffer", "buffer_ptr", &ptr) < 0 ||
	    arg_u64(a[1], "register_buffer", "size", &size) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	rc = mc_store_register_buffer(ST(self)->s, (void *)(uintptr_t)ptr, (size_t)size);
	call_end(&c);
	return PyLong_FromLong(rc);
}

static PyObject *store_unregister_buffer(DEFARGS)
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
	    arg_u64(a[2], fname, "size", &size) < 0 || cfg_from(a[3], fname, &cfg) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	if (kind == PUT_UPSERT)
		rc = mc_store_upsert_from(ST(self)->s, key, (void *)(uintptr_t)ptr, (size_t)size,
					  &cfg.c);
	else
		rc = mc_store_put_from(ST(self)->s, key, (void *)(uintptr_t)ptr, (size_t)size,
				       &cfg.c);
	call_end(&c);
	cfg_release(&cfg);
	return PyLong_FromLong(rc);
}

static PyObject *store_put_from(DEFARGS)
{
	return from_common(self, "put_from", args, nargs, kwnames, PUT_INSERT);
}

static PyObject *store_upsert_from(DEFARGS)
{
	return from_common(self, "upsert_from", args, nargs, kwnames, PUT_UPSERT);
}

/* put_from_with_metadata(key, buffer_ptr, metadata_buffer_ptr, size,
 * metadata_size, config=None): one object [metadata][data], gathered from
 * the two buffers.  Upstream's quirk: -1 when not set up, the positive
 * magnitude of the error when the put fails. */
static PyObject *store_put_from_with_metadata(DEFARGS)
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
	    cfg_from(a[5], "put_from_with_metadata", &cfg) < 0)
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
	cfg_release(&cfg);
	if (!ready)
		return PyLong_FromLong(-1);
	if (rc == MC_OK)
		rc = res;
	return PyLong_FromLong(rc < 0 ? -(long)rc : (long)rc);
}

static PyObject *store_get_into(DEFARGS)
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

/* A list of n copies of one status (mismatched batch arguments). */
static PyObject *fill_list(size_t n, long v)
{
	PyObject *out = PyList_New((Py_ssize_t)n);
	for (size_t i = 0; out && i < n; i++) {
		PyObject *x = PyLong_FromLong(v);
		if (!x) {
			Py_CLEAR(out);
			break;
		}
		PyList_SET_ITEM(out, (Py_ssize_t)i, x);
	}
	return out;
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
	    u64s_from(a[2], fname, "sizes", &sizes, &ns) < 0 || cfg_from(a[3], fname, &cfg) < 0)
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
		mc_store_batch_put_from(ST(self)->s, k.v, bv, lv, k.n, cfg_batch(&cfg), st);
	} else {
		mc_store_batch_upsert_from(ST(self)->s, k.v, bv, lv, k.n, cfg_batch(&cfg), st);
	}
	call_end(&c);
	out = kind == ZC_GET ? i64_list(got, k.n) : status_list(st, k.n);
done:
	cfg_release(&cfg);
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

static PyObject *store_batch_put_from(DEFARGS)
{
	return zc_batch(self, "batch_put_from", args, nargs, kwnames, ZC_PUT);
}

static PyObject *store_batch_upsert_from(DEFARGS)
{
	return zc_batch(self, "batch_upsert_from", args, nargs, kwnames, ZC_UPSERT);
}

static PyObject *store_batch_get_into(DEFARGS)
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
	pt = arg_seq(ptrs_o, fname, "all_buffer_ptrs");
	if (!pt)
		return -1;
	st = arg_seq(sizes_o, fname, "all_sizes");
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

static PyObject *store_batch_put_from_multi_buffers(DEFARGS)
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
	if (cfg_from(a[3], "batch_put_from_multi_buffers", &cfg) < 0) {
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
					      cfg_batch(&cfg), res);
	call_end(&c);
	out = status_list(res, k.n);
	PyMem_Free(res);
	multi_release(&m);
out:
	cfg_release(&cfg);
	keys_release(&k);
	return out;
}

static PyObject *store_batch_get_into_multi_buffers(DEFARGS)
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

	if (arg_bool(a[3], false, &same_node) < 0 ||
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
static PyObject *store_get_into_ranges(DEFARGS)
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
		if (!(top[t] = arg_seq(a[t + 1], "get_into_ranges", what[t])))
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
			PyObject *x =
				arg_seq(PyTuple_GET_ITEM(top[t], b), "get_into_ranges", what[t]);
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

static PyObject *store_batch_get_session_start(DEFARGS)
{
	PARSE("batch_get_session_start", 1, "keys");
	return sess_keys_call(self, "batch_get_session_start", a[0], SESS_GET_START);
}

static PyObject *store_batch_put_session_end(DEFARGS)
{
	PARSE("batch_put_session_end", 1, "keys");
	return sess_keys_call(self, "batch_put_session_end", a[0], SESS_PUT_END);
}

static PyObject *store_batch_put_session_revoke(DEFARGS)
{
	PARSE("batch_put_session_revoke", 1, "keys");
	return sess_keys_call(self, "batch_put_session_revoke", a[0], SESS_PUT_REVOKE);
}

static PyObject *store_batch_get_session_end(DEFARGS)
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

static PyObject *store_batch_put_session_start(DEFARGS)
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
	if (cfg_from(a[2], "batch_put_session_start", &cfg) < 0)
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
	mc_store_batch_put_session_start(ST(self)->s, k.v, sizes, k.n, cfg_batch(&cfg), res);
	call_end(&c);
	out = status_list(res, k.n);
	PyMem_Free(res);
out:
	cfg_release(&cfg);
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
	PyObject *t = arg_seq(o, fname, what);
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

static PyObject *store_batch_get_into_multi_buffer_ranges(DEFARGS)
{
	PARSE("batch_get_into_multi_buffer_ranges", 4, "keys", "all_buffer_ptrs", "all_sizes",
	      "all_src_offsets");
	return sess_ranges(self, "batch_get_into_multi_buffer_ranges", a, false);
}

static PyObject *store_batch_put_from_multi_buffer_ranges(DEFARGS)
{
	PARSE("batch_put_from_multi_buffer_ranges", 4, "keys", "all_buffer_ptrs", "all_sizes",
	      "all_dst_offsets");
	return sess_ranges(self, "batch_put_from_multi_buffer_ranges", a, true);
}

/* ---- replica descriptors ----------------------------------------------------------- */

struct desc_obj {
	PyObject ob_base;
	PyObject *a, *b, *c; /* per type: see the member tables */
	uint64_t x, y;
	int type;
};

static PyTypeObject DescriptorType, MemDescType, ReplicaDescType;

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

static PyTypeObject DescriptorType = {
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

static PyTypeObject MemDescType = {
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
	{"is_disk_replica", rd_false, METH_NOARGS, "bool (no disk tier here: False)"},
	{"is_local_disk_replica", rd_false, METH_NOARGS, "bool (False)"},
	{"get_memory_descriptor", rd_get_memory, METH_NOARGS, "MemoryDescriptor"},
	{"get_disk_descriptor", rd_get_disk, METH_NOARGS, "raises: no disk replicas"},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef rd_getset[] = {
	{"status", rd_status, NULL, "ReplicaStatus", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ReplicaDescType = {
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

	buf = (struct desc_obj *)new_desc(&DescriptorType);
	if (!buf)
		return NULL;
	buf->x = r->size;
	buf->y = r->address;
	buf->a = PyUnicode_FromString(r->transport_endpoint);
	buf->b = PyUnicode_FromString(r->segment_name);
	mem = (struct desc_obj *)new_desc(&MemDescType);
	if (!buf->a || !buf->b || !mem) {
		Py_DECREF(buf);
		Py_XDECREF(mem);
		return NULL;
	}
	mem->a = (PyObject *)buf;
	rd = (struct desc_obj *)new_desc(&ReplicaDescType);
	if (!rd) {
		Py_DECREF(mem);
		return NULL;
	}
	rd->a = (PyObject *)mem;
	rd->type = r->type;
	rd->b = enum_value(ReplicaStatusEnum, r->status);
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

static PyObject *store_get_replica_desc(DEFARGS)
{
	const char *key;
	bool ok;
	PARSE("get_replica_desc", 1, "key");
	if (arg_str(a[0], "get_replica_desc", "key", &key) < 0)
		return NULL;
	return replica_list(ST(self), key, &ok);
}

static PyObject *store_batch_get_replica_desc(DEFARGS)
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
static PyObject *store_batch_replica_clear(DEFARGS)
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

/* ---- tensors ------------------------------------------------------------------------ */

/* A stored tensor's bytes are [header][payload]; the header codec and its
 * validator live in the library (mooncake/tensor_hdr.h), shared with C
 * programs that read or write the same objects. */

/* Whether total bytes at buf are a valid stored tensor; *h filled if so. */
static bool tensor_decode(const void *buf, uint64_t total, struct mc_tensor_hdr *h)
{
	return mc_tensor_hdr_decode(buf, total, h) == MC_TENSOR_HDR_OK;
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

	if (cfg_from(cfg_o, fname, &cfg) < 0)
		return -1;
	w = PyMem_Calloc(n ? n : 1, sizeof(*w));
	if (!w) {
		cfg_release(&cfg);
		PyErr_NoMemory();
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		int r = wtensor_from(torch, tensors[i], fname, &w[i]);
		if (r < 0) {
			for (size_t j = 0; j < i; j++)
				wtensor_release(&w[j]);
			PyMem_Free(w);
			cfg_release(&cfg);
			return -1;
		}
		res[i] = r ? MC_ERR_INVALID_PARAMS : MC_OK;
	}
	call_begin(&c, st, false);
	for (size_t i = 0; i < n; i++) {
		struct mc_store_config ci = cfg_key(&cfg, i, n);
		if (res[i] == MC_OK)
			res[i] = wtensor_put(st->s, keys[i], &w[i], &ci, upsert);
	}
	call_end(&c);
	for (size_t i = 0; i < n; i++)
		wtensor_release(&w[i]);
	PyMem_Free(w);
	cfg_release(&cfg);
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

static PyObject *store_put_tensor(DEFARGS)
{
	PARSE("put_tensor", 2, "key", "tensor");
	return tensor_put_one(self, "put_tensor", a[0], a[1], NULL, false);
}

static PyObject *store_upsert_tensor(DEFARGS)
{
	PARSE("upsert_tensor", 2, "key", "tensor");
	return tensor_put_one(self, "upsert_tensor", a[0], a[1], NULL, true);
}

static PyObject *store_pub_tensor(DEFARGS)
{
	PARSE("pub_tensor", 2, "key", "tensor", "config");
	return tensor_put_one(self, "pub_tensor", a[0], a[1], a[2], false);
}

static PyObject *store_upsert_pub_tensor(DEFARGS)
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
	tt = arg_seq(tensors_o, fname, "tensors_list");
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

static PyObject *store_batch_put_tensor(DEFARGS)
{
	PARSE("batch_put_tensor", 2, "keys", "tensors_list");
	return tensor_put_batch(self, "batch_put_tensor", a[0], a[1], NULL, false);
}

static PyObject *store_batch_upsert_tensor(DEFARGS)
{
	PARSE("batch_upsert_tensor", 2, "keys", "tensors_list");
	return tensor_put_batch(self, "batch_upsert_tensor", a[0], a[1], NULL, true);
}

static PyObject *store_batch_pub_tensor(DEFARGS)
{
	PARSE("batch_pub_tensor", 2, "keys", "tensors_list", "config");
	return tensor_put_batch(self, "batch_pub_tensor", a[0], a[1], a[2], false);
}

static PyObject *store_batch_upsert_pub_tensor(DEFARGS)
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

static PyObject *store_get_tensor(DEFARGS)
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

static PyObject *store_batch_get_tensor(DEFARGS)
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

static PyObject *store_get_tensor_into(DEFARGS)
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

static PyObject *store_batch_get_tensor_into(DEFARGS)
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
	if (!ptr || !tensor_decode((void *)(uintptr_t)ptr, size, &h))
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
	    arg_u64(a[2], fname, "size", &size) < 0 || cfg_from(a[3], fname, &cfg) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	rc = tensor_from_buffer(ST(self)->s, key, ptr, size, &cfg.c, upsert);
	call_end(&c);
	cfg_release(&cfg);
	return PyLong_FromLong(rc);
}

static PyObject *store_put_tensor_from(DEFARGS)
{
	return tensor_from_one(self, "put_tensor_from", args, nargs, kwnames, false);
}

static PyObject *store_upsert_tensor_from(DEFARGS)
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
	if (cfg_from(a[3], fname, &cfg) < 0)
		goto out;
	res = PyMem_Calloc(k.n ? k.n : 1, sizeof(*res));
	if (res) {
		call_begin(&c, ST(self), false);
		for (size_t i = 0; i < k.n; i++) {
			struct mc_store_config ci = cfg_key(&cfg, i, k.n);
			res[i] = tensor_from_buffer(ST(self)->s, k.v[i], ptrs[i], sizes[i], &ci,
						    upsert);
		}
		call_end(&c);
		out = status_list(res, k.n);
	} else {
		PyErr_NoMemory();
	}
	cfg_release(&cfg);
out:
	PyMem_Free(res);
	PyMem_Free(ptrs);
	PyMem_Free(sizes);
	keys_release(&k);
	return out;
}

static PyObject *store_batch_put_tensor_from(DEFARGS)
{
	return tensor_from_batch(self, "batch_put_tensor_from", args, nargs, kwnames, false);
}

static PyObject *store_batch_upsert_tensor_from(DEFARGS)
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
		if (cfg_from(cfg_o, fname, &cfg) < 0) {
			wtensor_release(&one);
			return -1;
		}
		call_begin(&c, st, false);
		*out = wtensor_put(st->s, key, &one, &cfg.c, false);
		call_end(&c);
		cfg_release(&cfg);
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
	if (cfg_from(cfg_o, fname, &cfg) < 0)
		goto out;
	call_begin(&c, st, false);
	*out = MC_OK;
	for (Py_ssize_t i = 0; i < n && *out == MC_OK; i++)
		*out = wtensor_put(st->s, kv[i], &w[i], &cfg.c, false);
	call_end(&c);
	cfg_release(&cfg);
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

static PyObject *store_put_tensor_with_tp(DEFARGS)
{
	PARSE("put_tensor_with_tp", 2, "key", "tensor", "tp_rank", "tp_size", "split_dim");
	return tp_put_one(self, "put_tensor_with_tp", a[0], a[1], NULL, a[2], a[3], a[4]);
}

static PyObject *store_pub_tensor_with_tp(DEFARGS)
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
	tt = arg_seq(tensors_o, fname, "tensors_list");
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

static PyObject *store_batch_put_tensor_with_tp(DEFARGS)
{
	PARSE("batch_put_tensor_with_tp", 2, "base_keys", "tensors_list", "tp_rank", "tp_size",
	      "split_dim");
	return tp_put_batch(self, "batch_put_tensor_with_tp", a[0], a[1], NULL, a[2], a[3], a[4]);
}

static PyObject *store_batch_pub_tensor_with_tp(DEFARGS)
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

static PyObject *store_get_tensor_with_tp(DEFARGS)
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

static PyObject *store_batch_get_tensor_with_tp(DEFARGS)
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

static PyObject *store_get_tensor_with_tp_into(DEFARGS)
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

static PyObject *store_batch_get_tensor_with_tp_into(DEFARGS)
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

	if (!ptr || !tensor_decode((void *)(uintptr_t)ptr, size, &h)) {
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

static PyObject *store_put_tensor_with_tp_from(DEFARGS)
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

static PyObject *store_batch_put_tensor_with_tp_from(DEFARGS)
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

/* ---- method table ------------------------------------------------------------------ */

#define M(name, doc)                             \
	{                                        \
#name, FASTKW(store_##name), doc \
	}
#define M0(name, doc)                                 \
	{                                             \
#name, store_##name, METH_NOARGS, doc \
	}

static PyMethodDef store_methods[] = {
	M(setup, "setup(local_hostname, metadata_server, global_segment_size, local_buffer_size,\n"
		 "      protocol, rdma_devices, master_server_addr, engine=None,\n"
		 "      enable_ssd_offload=False, ssd_offload_path='', tenant_id='default',\n"
		 "      enable_client_http_server=False, client_http_port=9300) -> int\n"
		 "setup(config: dict) -> int"),
	M0(close, "close() -> int: unmount and release everything; 0 if not set up"),
	M0(health_check, "health_check() -> int: 0 healthy, 1 not set up, 2 master unreachable"),
	M0(get_hostname, "get_hostname() -> str: this client's segment name 'host:port'"),
	M(alloc_from_mem_pool, "alloc_from_mem_pool(size) -> int: 0 (dummy clients only)"),
	M(setup_dummy, "setup_dummy(mem_pool_size, local_buffer_size, server_address) -> int: "
		       "-1 (no dummy client in this build)"),
	M0(get_offload_rpc_read_count, "get_offload_rpc_read_count() -> int: 0 (no SSD tier)"),
	M(put_from_with_metadata, "put_from_with_metadata(key, buffer_ptr, metadata_buffer_ptr, "
				  "size, metadata_size, config=None) -> int"),
	M0(get_engine_ptr,
	   "get_engine_ptr() -> int: address of the engine in use (0 before setup)"),
	M(put, "put(key, value, config=None) -> int"),
	M(put_parts, "put_parts(key, *parts, config=None) -> int"),
	M(put_batch, "put_batch(keys, values, config=None) -> int"),
	M(upsert, "upsert(key, value, config=None) -> int"),
	M(upsert_parts, "upsert_parts(key, *parts, config=None) -> int"),
	M(upsert_batch, "upsert_batch(keys, values, config=None) -> int"),
	M(get, "get(key) -> bytes (b'' on any failure)"),
	M(get_batch, "get_batch(keys) -> list of bytes ([b''] if the batch fails)"),
	M(get_buffer, "get_buffer(key) -> BufferHandle or None"),
	M(batch_get_buffer, "batch_get_buffer(keys) -> list of BufferHandle/None"),
	M(get_size, "get_size(key) -> int: size or negative status"),
	M(is_exist, "is_exist(key) -> int: 1, 0 or negative"),
	M(batch_is_exist, "batch_is_exist(keys) -> list of 1/0/negative"),
	M(remove, "remove(key, force=False) -> int"),
	M(remove_by_regex, "remove_by_regex(regex_pattern, force=False) -> int: count or negative"),
	M(remove_all, "remove_all(force=False) -> int: count or negative"),
	M(batch_remove, "batch_remove(keys, force=False) -> list of int"),
	M(register_buffer, "register_buffer(buffer_ptr, size) -> int"),
	M(unregister_buffer, "unregister_buffer(buffer_ptr) -> int"),
	M(put_from, "put_from(key, buffer_ptr, size, config=None) -> int"),
	M(upsert_from, "upsert_from(key, buffer_ptr, size, config=None) -> int"),
	M(get_into, "get_into(key, buffer_ptr, size) -> int: bytes read or negative"),
	M(batch_put_from, "batch_put_from(keys, buffer_ptrs, sizes, config=None) -> list of int"),
	M(batch_upsert_from,
	  "batch_upsert_from(keys, buffer_ptrs, sizes, config=None) -> list of int"),
	M(batch_get_into, "batch_get_into(keys, buffer_ptrs, sizes) -> list of int"),
	M(get_into_ranges,
	  "get_into_ranges(buffer_ptrs, all_keys, all_dst_offsets,\n"
	  "                all_src_offsets, all_sizes) -> [buffer][key][fragment]"),
	M(batch_put_from_multi_buffers,
	  "batch_put_from_multi_buffers(keys, all_buffer_ptrs, all_sizes, config=None) -> list"),
	M(batch_get_session_start, "batch_get_session_start(keys) -> list of int: pin each key's "
				   "memory replica and lease for ranged reads"),
	M(batch_get_into_multi_buffer_ranges,
	  "batch_get_into_multi_buffer_ranges(keys, all_buffer_ptrs, all_sizes,\n"
	  "                                   all_src_offsets) -> list: bytes read or negative"),
	M(batch_get_session_end, "batch_get_session_end(keys) -> int"),
	M(batch_put_session_start,
	  "batch_put_session_start(keys, sizes, config=None) -> list of int"),
	M(batch_put_from_multi_buffer_ranges,
	  "batch_put_from_multi_buffer_ranges(keys, all_buffer_ptrs, all_sizes,\n"
	  "                                   all_dst_offsets) -> list: bytes written or negative"),
	M(batch_put_session_end,
	  "batch_put_session_end(keys) -> list of int: the objects become readable"),
	M(batch_put_session_revoke, "batch_put_session_revoke(keys) -> list of int"),
	M(batch_get_into_multi_buffers, "batch_get_into_multi_buffers(keys, all_buffer_ptrs, "
					"all_sizes, prefer_alloc_in_same_node=False) -> list"),
	M(get_replica_desc, "get_replica_desc(key) -> list of ReplicaDescriptor"),
	M(batch_get_replica_desc, "batch_get_replica_desc(keys) -> dict key -> list"),
	M(batch_replica_clear, "batch_replica_clear(keys, segment_name='') -> list of cleared "
			       "keys (objects this client wrote, lease expired)"),
	M(put_tensor, "put_tensor(key, tensor) -> int"),
	M(upsert_tensor, "upsert_tensor(key, tensor) -> int"),
	M(pub_tensor, "pub_tensor(key, tensor, config=None) -> int"),
	M(upsert_pub_tensor, "upsert_pub_tensor(key, tensor, config=None) -> int"),
	M(batch_put_tensor, "batch_put_tensor(keys, tensors_list) -> list of int"),
	M(batch_upsert_tensor, "batch_upsert_tensor(keys, tensors_list) -> list of int"),
	M(batch_pub_tensor, "batch_pub_tensor(keys, tensors_list, config=None) -> list of int"),
	M(batch_upsert_pub_tensor,
	  "batch_upsert_pub_tensor(keys, tensors_list, config=None) -> list of int"),
	M(get_tensor, "get_tensor(key) -> torch.Tensor or None"),
	M(batch_get_tensor, "batch_get_tensor(keys) -> list of Tensor/None"),
	M(get_tensor_into, "get_tensor_into(key, buffer_ptr, size) -> Tensor viewing the buffer"),
	M(batch_get_tensor_into, "batch_get_tensor_into(keys, buffer_ptrs, sizes) -> list"),
	M(put_tensor_from, "put_tensor_from(key, buffer_ptr, size, config=None) -> int"),
	M(upsert_tensor_from, "upsert_tensor_from(key, buffer_ptr, size, config=None) -> int"),
	M(batch_put_tensor_from, "batch_put_tensor_from(keys, buffer_ptrs, sizes) -> list"),
	M(batch_upsert_tensor_from, "batch_upsert_tensor_from(keys, buffer_ptrs, sizes) -> list"),
	M(put_tensor_with_tp, "put_tensor_with_tp(key, tensor, tp_rank=0, tp_size=1, "
			      "split_dim=0) -> int: writes every '<key>_tp_<r>' shard"),
	M(pub_tensor_with_tp, "pub_tensor_with_tp(key, tensor, config=None, tp_rank=0, "
			      "tp_size=1, split_dim=0) -> int"),
	M(batch_put_tensor_with_tp, "batch_put_tensor_with_tp(base_keys, tensors_list, "
				    "tp_rank=0, tp_size=1, split_dim=0) -> list"),
	M(batch_pub_tensor_with_tp, "batch_pub_tensor_with_tp(base_keys, tensors_list, "
				    "config=None, tp_rank=0, tp_size=1, split_dim=0) -> list"),
	M(get_tensor_with_tp, "get_tensor_with_tp(key, tp_rank=0, tp_size=1, split_dim=0)"),
	M(batch_get_tensor_with_tp, "batch_get_tensor_with_tp(base_keys, tp_rank=0, tp_size=1)"),
	M(get_tensor_with_tp_into, "get_tensor_with_tp_into(key, buffer_ptr, size, tp_rank=0, "
				   "tp_size=1, split_dim=0)"),
	M(batch_get_tensor_with_tp_into, "batch_get_tensor_with_tp_into(base_keys, buffer_ptrs, "
					 "sizes, tp_rank=0, tp_size=1)"),
	M(put_tensor_with_tp_from, "put_tensor_with_tp_from(key, buffer_ptr, size, tp_rank=0, "
				   "tp_size=1, split_dim=0) -> int"),
	M(batch_put_tensor_with_tp_from, "batch_put_tensor_with_tp_from(base_keys, buffer_ptrs, "
					 "sizes, tp_rank=0, tp_size=1, split_dim=0) -> list"),
	{NULL, NULL, 0, NULL},
};

static PyTypeObject StoreType = {
	/* clang-format off */
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = MODULE_NAME ".MooncakeDistributedStore",
	/* clang-format on */
	.tp_basicsize = sizeof(struct store_obj),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
	.tp_doc = "MooncakeDistributedStore(): a Mooncake Store client (call setup() first).",
	.tp_new = store_new,
	.tp_init = store_init,
	.tp_dealloc = store_dealloc,
	.tp_traverse = store_traverse,
	.tp_clear = store_clear,
	.tp_methods = store_methods,
	.tp_dictoffset = offsetof(struct store_obj, dict),
};

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

static PyTypeObject PoolType, LeaseType, ViewType;

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

	if (size == 0 || size > (1ull << 40)) {
		PyErr_SetString(PyExc_ValueError, "BufferPool: size must be in [1, 2**40]");
		return NULL;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		if (pool_check_open(p) < 0)
			return NULL;
		r = pool_try(p, size, &ptr, &cls);
		if (r < 0)
			return NULL;
		if (r > 0)
			break;
		if (!block) {
			PyErr_Format(PyExc_MemoryError, "BufferPool exhausted (%llu bytes mapped)",
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
	l = PyObject_New(struct lease_obj, &LeaseType);
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
	if (arg_u64(a[0], fname, "size", &size) < 0 ||
	    arg_bool(a[1] == Py_None ? NULL : a[1], p->block, &block) < 0 ||
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
	if (!PyObject_TypeCheck(store, &StoreType)) {
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
	    arg_bool(block == Py_None ? NULL : block, true, &p->block) < 0 ||
	    opt_timeout(dto, -1, &p->default_timeout) < 0 ||
	    opt_u64(pw_size, 0, "prewarm_size", &pws) < 0 ||
	    opt_u64(pw_count, 0, "prewarm_count", &pwc) < 0)
		goto err;
	if (p->min_class == 0 || p->alignment == 0 || p->max_class < p->min_class ||
	    (p->min_class & (p->min_class - 1)) || p->alignment > (1ull << 40)) {
		PyErr_SetString(PyExc_ValueError, "BufferPool(): min_size_class must be a power "
						  "of two <= max_size_class; alignment > 0");
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

static PyTypeObject PoolType = {
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
		PyErr_SetString(PyExc_BufferError,
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
	v = PyObject_New(struct view_obj, &ViewType);
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

static PyTypeObject LeaseType = {
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

static PyTypeObject ViewType = {
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
 * MooncakeHostMemAllocator: page-aligned shared anonymous mappings for host
 * buffers (SGLang allocates its host KV pools with it in standalone mode;
 * the memory can be registered with register_buffer like any other).
 * alloc(size) -> address, 0 on failure; free(ptr) -> 0, or -1 for an
 * address it did not hand out.  The mappings belong to the module, not to
 * the allocator object (callers use a temporary one), and live until
 * free(); the registry is touched only with the GIL held.
 */
struct hma_block {
	uintptr_t addr;
	size_t len;
};

static struct hma_block *hma_blocks;
static size_t hma_n, hma_cap;

static PyObject *hma_alloc(PyObject *self, PyObject *arg)
{
	uint64_t size;
	void *p;
	(void)self;
	if (arg_u64(arg, "alloc", "size", &size) < 0)
		return NULL;
	if (size == 0 || size > (uint64_t)PY_SSIZE_T_MAX)
		return PyLong_FromLong(0);
	if (hma_n == hma_cap) {
		size_t ncap = hma_cap ? 2 * hma_cap : 16;
		struct hma_block *v = PyMem_Realloc(hma_blocks, ncap * sizeof(*v));
		if (!v)
			return PyErr_NoMemory();
		hma_blocks = v;
		hma_cap = ncap;
	}
	p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return PyLong_FromLong(0);
	hma_blocks[hma_n].addr = (uintptr_t)p;
	hma_blocks[hma_n].len = (size_t)size;
	hma_n++;
	return PyLong_FromVoidPtr(p);
}

static PyObject *hma_free(PyObject *self, PyObject *arg)
{
	uint64_t addr;
	(void)self;
	if (arg_u64(arg, "free", "ptr", &addr) < 0)
		return NULL;
	for (size_t i = 0; i < hma_n; i++) {
		if (hma_blocks[i].addr != addr)
			continue;
		munmap((void *)hma_blocks[i].addr, hma_blocks[i].len);
		hma_blocks[i] = hma_blocks[--hma_n];
		return PyLong_FromLong(0);
	}
	return PyLong_FromLong(-1);
}

static PyMethodDef hma_methods[] = {
	{"alloc", hma_alloc, METH_O,
	 "alloc(size) -> int: address of size bytes of shared memory, "
	 "0 on failure"},
	{"free", hma_free, METH_O, "free(ptr) -> int: 0, or -1 if ptr is not from alloc()"},
	{NULL, NULL, 0, NULL},
};

static PyTypeObject HostMemAllocatorType = {
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

/* ---- module ----------------------------------------------------------------------- */

/* An IntEnum named name with the given members; also added to the module,
 * and each member as a module-level alias when export is set. */
static PyObject *add_enum(PyObject *m, const char *name, const char *const *members,
			  const int *values, int n, bool export)
{
	PyObject *enum_mod = NULL, *intenum = NULL, *list = NULL, *kw = NULL, *e = NULL;
	PyObject *args = NULL;

	enum_mod = PyImport_ImportModule("enum");
	intenum = enum_mod ? PyObject_GetAttrString(enum_mod, "IntEnum") : NULL;
	list = intenum ? PyList_New(n) : NULL;
	for (int i = 0; list && i < n; i++) {
		PyObject *t = Py_BuildValue("(si)", members[i], values[i]);
		if (!t) {
			Py_CLEAR(list);
			break;
		}
		PyList_SET_ITEM(list, i, t);
	}
	kw = list ? Py_BuildValue("{s:s}", "module", MODULE_NAME) : NULL;
	args = kw ? Py_BuildValue("(sO)", name, list) : NULL;
	e = args ? PyObject_Call(intenum, args, kw) : NULL;
	if (e && PyModule_AddObjectRef(m, name, e) < 0)
		Py_CLEAR(e);
	for (int i = 0; e && export && i < n; i++) {
		PyObject *v = PyObject_GetAttrString(e, members[i]);
		if (!v || PyModule_AddObjectRef(m, members[i], v) < 0)
			Py_CLEAR(e);
		Py_XDECREF(v);
	}
	Py_XDECREF(args);
	Py_XDECREF(kw);
	Py_XDECREF(list);
	Py_XDECREF(intenum);
	Py_XDECREF(enum_mod);
	return e; /* new reference, kept by the caller */
}

static struct PyModuleDef store_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = MODULE_NAME,
	.m_doc = "Mooncake Store client (upstream-compatible Python binding over the C API).",
	.m_size = -1,
};

PyMODINIT_FUNC PyInit_store(void);

PyMODINIT_FUNC PyInit_store(void)
{
	static const char *const pin[] = {"PRESERVE", "ENABLE", "DISABLE"};
	static const int pin_v[] = {0, 1, 2};
	static const char *const rs[] = {"UNDEFINED", "INITIALIZED", "PROCESSING",
					 "COMPLETE",  "REMOVED",     "FAILED"};
	static const int rs_v[] = {0, 1, 2, 3, 4, 5};
	static const char *const odt[] = {"UNKNOWN",  "KVCACHE",    "TENSOR",	"WEIGHT",
					  "SAMPLE",   "ACTIVATION", "GRADIENT", "OPTIMIZER_STATE",
					  "METADATA", "GENERAL"};
	static const int odt_v[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
	static const char *const tt[] = {"REPLICA_COPY", "REPLICA_MOVE"};
	static const int tt_v[] = {0, 1};
	static const char *const ts[] = {"PENDING", "PROCESSING", "SUCCESS", "FAILED"};
	static const int ts_v[] = {0, 1, 2, 3};
	PyObject *m, *e;

	if (PyType_Ready(&ConfigType) < 0 || PyType_Ready(&StoreType) < 0 ||
	    PyType_Ready(&HandleType) < 0 || PyType_Ready(&DescriptorType) < 0 ||
	    PyType_Ready(&MemDescType) < 0 || PyType_Ready(&ReplicaDescType) < 0 ||
	    PyType_Ready(&PoolType) < 0 || PyType_Ready(&LeaseType) < 0 ||
	    PyType_Ready(&ViewType) < 0 || PyType_Ready(&HostMemAllocatorType) < 0)
		return NULL;
	m = PyModule_Create(&store_module);
	if (!m)
		return NULL;
	if (PyModule_AddType(m, &StoreType) < 0 || PyModule_AddType(m, &ConfigType) < 0 ||
	    PyModule_AddType(m, &HandleType) < 0 || PyModule_AddType(m, &DescriptorType) < 0 ||
	    PyModule_AddType(m, &MemDescType) < 0 || PyModule_AddType(m, &ReplicaDescType) < 0 ||
	    PyModule_AddType(m, &PoolType) < 0 || PyModule_AddType(m, &LeaseType) < 0 ||
	    PyModule_AddType(m, &ViewType) < 0 || PyModule_AddType(m, &HostMemAllocatorType) < 0 ||
	    PyModule_AddObjectRef(m, "RegisteredBufferPool", (PyObject *)&PoolType) < 0 ||
	    PyModule_AddStringConstant(m, "__version__", MC_VERSION_STRING) < 0)
		goto err;
	if (!SoftPinActionEnum &&
	    !(SoftPinActionEnum = add_enum(m, "SoftPinAction", pin, pin_v, 3, false)))
		goto err;
	if (!ReplicaStatusEnum &&
	    !(ReplicaStatusEnum = add_enum(m, "ReplicaStatus", rs, rs_v, 6, true)))
		goto err;
	if (!ObjectDataTypeEnum &&
	    !(ObjectDataTypeEnum = add_enum(m, "ObjectDataType", odt, odt_v, 10, true)))
		goto err;
	e = add_enum(m, "TaskType", tt, tt_v, 2, true);
	if (!e)
		goto err;
	Py_DECREF(e);
	/* "PROCESSING"/"FAILED" of TaskStatus are not exported: ReplicaStatus's win */
	e = add_enum(m, "TaskStatus", ts, ts_v, 4, false);
	if (!e)
		goto err;
	Py_DECREF(e);
	if (PyModule_AddIntConstant(m, "TENSOR_METADATA_SIZE", MC_TENSOR_HDR_SIZE) < 0)
		goto err;
	return m;
err:
	Py_DECREF(m);
	return NULL;
}
