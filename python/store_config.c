/*
 * python/store_config.c - ReplicateConfig of `mooncake.store`, and the
 * copy of one into the C client's struct mc_store_config.
 *
 * ReplicateConfig keeps plain Python values behind class-level getset
 * descriptors (integrations probe hasattr(ReplicateConfig, "group_ids"), so
 * the attributes must exist on the class).  A call never reads them with
 * the GIL released: mc_py_cfg_from() copies a config (or the defaults, for
 * None) into a struct cfg that owns every string it points to, in one
 * blob, and mc_py_cfg_release() frees it after the call.  mc_py_cfg_batch()
 * and mc_py_cfg_key() give the batch calls one group id per key.
 */
#include "store_int.h"

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

PyObject *mc_py_soft_pin_action_enum, *mc_py_replica_status_enum, *mc_py_object_data_type_enum;

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
		bool t;                                                      \
		if (no_delete(v, #field) < 0 ||                              \
		    arg_bool(v, "ReplicateConfig", #field, false, &t) < 0)   \
			return -1;                                           \
		((struct rc_obj *)self)->field = t;                          \
		return 0;                                                    \
	}

RC_BOOL_FIELD(with_hard_pin)
RC_BOOL_FIELD(prefer_alloc_in_same_node)

static PyObject *rc_get_soft_pin_action(PyObject *self, void *unused)
{
	return enum_value(mc_py_soft_pin_action_enum, ((struct rc_obj *)self)->soft_pin_action);
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
	bool t;
	if (no_delete(v, "with_soft_pin") < 0 ||
	    arg_bool(v, "ReplicateConfig", "with_soft_pin", false, &t) < 0)
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
	return enum_value(mc_py_object_data_type_enum, ((struct rc_obj *)self)->data_type);
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

PyTypeObject mc_py_config_type = {
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

void mc_py_cfg_release(struct cfg *k)
{
	PyMem_Free(k->segs);
	PyMem_Free(k->gids);
	PyMem_Free(k->blob);
	k->segs = NULL;
	k->gids = NULL;
	k->blob = NULL;
}

/* A batch call: one group id per key (the C client checks the count). */
const struct mc_store_config *mc_py_cfg_batch(struct cfg *k)
{
	k->c.group_ids = k->gids;
	k->c.n_group_ids = k->ngids;
	return &k->c;
}

/* Key i of an n-key call made one key at a time: its own group when
 * group_ids has one per key, else the first. */
struct mc_store_config mc_py_cfg_key(const struct cfg *k, size_t i, size_t n)
{
	struct mc_store_config c = k->c;

	if (k->ngids == n && i < n)
		c.group_id = k->gids[i];
	c.group_ids = NULL;
	c.n_group_ids = 0;
	return c;
}

/* NULL or None = the defaults (a fresh ReplicateConfig). */
int mc_py_cfg_from(PyObject *o, const char *fname, struct cfg *k)
{
	struct rc_obj *c;
	Py_ssize_t nseg, ngid = 0, total = 0, off = 0;

	memset(k, 0, sizeof(*k));
	k->c.replica_num = 1;
	if (!o || o == Py_None)
		return 0;
	if (!PyObject_TypeCheck(o, &mc_py_config_type)) {
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
	if (c->soft_pin_ttl_ms != Py_None) {
		k->c.soft_pin_ttl_ms = PyLong_AsUnsignedLongLong(c->soft_pin_ttl_ms);
		k->upsert_refused = c->soft_pin_action != SOFT_PIN_ENABLE;
	}
	k->c.with_hard_pin = c->with_hard_pin;
	k->c.prefer_alloc_in_same_node = c->prefer_alloc_in_same_node;
	nseg = PyList_GET_SIZE(c->preferred_segments);
	/* group_ids: one per key of a batch (mc_py_cfg_batch); a single put takes
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
		mc_py_cfg_release(k);
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
