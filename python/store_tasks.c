/*
 * python/store_tasks.c - copy and move tasks and the segment unmount of
 * `mooncake.store` (spec store.md 1.14, 9.3): create_copy_task,
 * create_move_task, query_task, unmount_segment.  Upstream's shapes: a
 * task id is a 2-tuple of ints; create_* answer (id, 0) or ((0, 0), err);
 * query_task answers (QueryTaskResponse, 0) or (None, err), the response
 * an object with id, type (TaskType), status (TaskStatus),
 * created_at_ms_epoch, last_updated_at_ms_epoch, assigned_client (a
 * 2-tuple) and message; unmount_segment an int.  Nothing here moves bytes:
 * the client that holds a task's source does (store/client_tasks.c).
 *
 * The extra segment calls (store/client_mount.c): mount_segment and
 * allocate_and_mount_segment answer {"ret": int, "segment_ids": [str]}
 * (allocate_and_mount_segment with "allocated_size"), the ids
 * "<first>-<second>" in decimal; unmount_and_free_segment and
 * unmount_local_disk_segment an int.  A protocol left out is the client's.
 *
 * Ours (the paper's change_replica, no upstream method): change_replica and
 * get_replica_count answer the key's count of memory replicas, or a
 * negative error code (include/mooncake/store.h, mc_store_change_replica).
 */
#include "store_int.h"

PyObject *mc_py_task_type_enum, *mc_py_task_status_enum;

static PyObject *id_tuple(uint64_t a, uint64_t b)
{
	return Py_BuildValue("(KK)", (unsigned long long)a, (unsigned long long)b);
}

static PyObject *create_result(mc_status st, const struct mc_store_task_uuid *id)
{
	if (st != MC_OK)
		return Py_BuildValue("((ii)i)", 0, 0, (int)st);
	return Py_BuildValue("(Ni)", id_tuple(id->first, id->second), 0);
}

PyObject *mc_py_store_create_copy_task(DEFARGS)
{
	struct mc_store_task_uuid id = {0, 0};
	const char *key;
	struct keys targets;
	struct call c;
	mc_status st;
	PARSE("create_copy_task", 2, "key", "targets");
	if (arg_str(a[0], "create_copy_task", "key", &key) < 0)
		return NULL;
	if (PyUnicode_Check(a[1])) {
		PyErr_SetString(PyExc_TypeError,
				"create_copy_task() targets must be a list of segment names");
		return NULL;
	}
	if (keys_from(a[1], "create_copy_task", &targets) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	st = mc_store_create_copy_task(ST(self)->s, key, targets.v, targets.n, &id);
	call_end(&c);
	keys_release(&targets);
	return create_result(st, &id);
}

/* Ours: the count of memory replicas (>= 0) or a negative error code. */
static PyObject *change_replica(PyObject *self, const char *key, uint64_t n)
{
	uint32_t count = 0;
	struct call c;
	mc_status st;

	if (n > UINT32_MAX)
		return PyLong_FromLong((long)MC_ERR_INVALID_PARAMS);
	call_begin(&c, ST(self), false);
	st = mc_store_change_replica(ST(self)->s, key, (uint32_t)n, &count);
	call_end(&c);
	return PyLong_FromLong(st != MC_OK ? (long)st : (long)count);
}

PyObject *mc_py_store_change_replica(DEFARGS)
{
	const char *key;
	uint64_t n;
	PARSE("change_replica", 2, "key", "replica_num");
	if (arg_str(a[0], "change_replica", "key", &key) < 0 ||
	    arg_u64(a[1], "change_replica", "replica_num", &n) < 0)
		return NULL;
	if (n == 0) {
		PyErr_SetString(PyExc_ValueError,
				"change_replica() replica_num must be at least 1 (to drop every "
				"replica, remove the key; get_replica_count reads the count)");
		return NULL;
	}
	return change_replica(self, key, n);
}

PyObject *mc_py_store_get_replica_count(DEFARGS)
{
	const char *key;
	PARSE("get_replica_count", 1, "key");
	if (arg_str(a[0], "get_replica_count", "key", &key) < 0)
		return NULL;
	return change_replica(self, key, 0);
}

PyObject *mc_py_store_create_move_task(DEFARGS)
{
	struct mc_store_task_uuid id = {0, 0};
	const char *key, *source, *target;
	struct call c;
	mc_status st;
	PARSE("create_move_task", 3, "key", "source", "target");
	if (arg_str(a[0], "create_move_task", "key", &key) < 0 ||
	    arg_str(a[1], "create_move_task", "source", &source) < 0 ||
	    arg_str(a[2], "create_move_task", "target", &target) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	st = mc_store_create_move_task(ST(self)->s, key, source, target, &id);
	call_end(&c);
	return create_result(st, &id);
}

/* A task id from Python: a 2-tuple of ints (or a list), as create_* answer. */
static int task_id_from(PyObject *o, struct mc_store_task_uuid *out)
{
	uint64_t *v = NULL;
	size_t n = 0;

	if (PyUnicode_Check(o) || u64s_from(o, "query_task", "task_id", &v, &n) < 0) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_TypeError,
					"query_task() task_id must be a (first, second) tuple");
		return -1;
	}
	if (n != 2) {
		PyMem_Free(v);
		PyErr_SetString(PyExc_ValueError,
				"query_task() task_id must have two ints (first, second)");
		return -1;
	}
	out->first = v[0];
	out->second = v[1];
	PyMem_Free(v);
	return 0;
}

static PyObject *task_response(const struct mc_store_task_state *t)
{
	PyObject *mod = PyImport_ImportModule("mooncake._store_extra"), *cls = NULL, *kw = NULL;
	PyObject *args = NULL, *out = NULL;

	cls = mod ? PyObject_GetAttrString(mod, "QueryTaskResponse") : NULL;
	kw = cls ? Py_BuildValue("{s:N,s:N,s:N,s:K,s:K,s:N,s:s}", "id",
				 id_tuple(t->id.first, t->id.second), "type",
				 enum_value(mc_py_task_type_enum, t->type), "status",
				 enum_value(mc_py_task_status_enum, t->status),
				 "created_at_ms_epoch", (unsigned long long)t->created_at_ms_epoch,
				 "last_updated_at_ms_epoch",
				 (unsigned long long)t->last_updated_at_ms_epoch, "assigned_client",
				 id_tuple(t->assigned_client.first, t->assigned_client.second),
				 "message", t->message)
		 : NULL;
	args = kw ? PyTuple_New(0) : NULL;
	out = args ? PyObject_Call(cls, args, kw) : NULL;
	Py_XDECREF(args);
	Py_XDECREF(kw);
	Py_XDECREF(cls);
	Py_XDECREF(mod);
	return out;
}

PyObject *mc_py_store_query_task(DEFARGS)
{
	struct mc_store_task_uuid id;
	struct mc_store_task_state t;
	struct call c;
	mc_status st;
	PyObject *r;
	PARSE("query_task", 1, "task_id");
	if (task_id_from(a[0], &id) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	st = mc_store_query_task(ST(self)->s, &id, &t);
	call_end(&c);
	if (st != MC_OK)
		return Py_BuildValue("(Oi)", Py_None, (int)st);
	r = task_response(&t);
	return r ? Py_BuildValue("(Ni)", r, 0) : NULL;
}

/* grace_period_seconds (o NULL: 0) in milliseconds, or -1 with an exception set */
static int grace_arg(PyObject *o, const char *fname, uint64_t *ms)
{
	double grace = 0;

	if (o) {
		grace = PyFloat_AsDouble(o);
		if (grace == -1 && PyErr_Occurred())
			return -1;
		if (!(grace >= 0 && grace <= 1e9)) {
			PyErr_Format(PyExc_ValueError, "%s() grace_period_seconds must be >= 0",
				     fname);
			return -1;
		}
	}
	*ms = (uint64_t)(grace * 1000.0);
	return 0;
}

typedef mc_status (*unmount_fn)(struct mc_store *, const char *, uint64_t);

/* Every id is tried; the first failure's code is returned (0: all went). */
static PyObject *unmount_ids(PyObject *self, PyObject *ids_o, PyObject *grace_o, const char *fname,
			     unmount_fn fn, bool exclusive)
{
	struct keys ids;
	uint64_t grace;
	int rc = 0;

	if (grace_arg(grace_o, fname, &grace) < 0)
		return NULL;
	if (PyUnicode_Check(ids_o)) {
		PyErr_Format(PyExc_TypeError, "%s() segment_ids must be a list of segment ids",
			     fname);
		return NULL;
	}
	if (keys_from(ids_o, fname, &ids) < 0)
		return NULL;
	for (size_t i = 0; i < ids.n; i++) {
		struct call c;
		mc_status st;

		call_begin(&c, ST(self), exclusive);
		st = fn(ST(self)->s, ids.v[i], grace);
		call_end(&c);
		if (st != MC_OK && rc == 0)
			rc = (int)st;
	}
	keys_release(&ids);
	return PyLong_FromLong(rc);
}

PyObject *mc_py_store_unmount_segment(DEFARGS)
{
	PARSE("unmount_segment", 1, "segment_ids", "grace_period_seconds");
	return unmount_ids(self, a[0], a[1], "unmount_segment", mc_store_unmount_segment, true);
}

/* the grace period is waited out: other calls go on meanwhile (shared lock) */
PyObject *mc_py_store_unmount_and_free_segment(DEFARGS)
{
	PARSE("unmount_and_free_segment", 1, "segment_ids", "grace_period_seconds");
	return unmount_ids(self, a[0], a[1], "unmount_and_free_segment",
			   mc_store_unmount_and_free_segment, false);
}

PyObject *mc_py_store_unmount_local_disk_segment(DEFARGS)
{
	uint64_t grace;
	struct call c;
	mc_status st;
	PARSE("unmount_local_disk_segment", 0, "grace_period_seconds");
	if (grace_arg(a[0], "unmount_local_disk_segment", &grace) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	st = mc_store_unmount_local_disk_segment(ST(self)->s, grace);
	call_end(&c);
	return PyLong_FromLong((long)st);
}

static PyObject *mount_result(mc_status st, const char *id, const uint64_t *allocated)
{
	PyObject *ids = st == MC_OK ? Py_BuildValue("[s]", id) : PyList_New(0);

	if (!ids)
		return NULL;
	if (allocated)
		return Py_BuildValue("{s:i,s:N,s:K}", "ret", (int)st, "segment_ids", ids,
				     "allocated_size", (unsigned long long)*allocated);
	return Py_BuildValue("{s:i,s:N}", "ret", (int)st, "segment_ids", ids);
}

/* protocol and location: NULL when absent or None */
static int opt_strs(PyObject *const *a, const char *fname, const char **protocol,
		    const char **location)
{
	*protocol = *location = NULL;
	if (a[0] && a[0] != Py_None && arg_str(a[0], fname, "protocol", protocol) < 0)
		return -1;
	if (a[1] && a[1] != Py_None && arg_str(a[1], fname, "location", location) < 0)
		return -1;
	return 0;
}

PyObject *mc_py_store_mount_segment(DEFARGS)
{
	char id[MC_STORE_SEGMENT_ID_MAX] = "";
	const char *path, *protocol, *location;
	uint64_t size, offset = 0;
	struct call c;
	mc_status st;
	PARSE("mount_segment", 2, "path", "size", "offset", "protocol", "location");
	if (arg_str(a[0], "mount_segment", "path", &path) < 0 ||
	    arg_u64(a[1], "mount_segment", "size", &size) < 0 ||
	    (a[2] && arg_u64(a[2], "mount_segment", "offset", &offset) < 0) ||
	    opt_strs(&a[3], "mount_segment", &protocol, &location) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	st = mc_store_mount_segment(ST(self)->s, path, size, offset, protocol, location, id);
	call_end(&c);
	return mount_result(st, id, NULL);
}

PyObject *mc_py_store_allocate_and_mount_segment(DEFARGS)
{
	char id[MC_STORE_SEGMENT_ID_MAX] = "";
	const char *protocol, *location;
	uint64_t size, allocated = 0;
	struct call c;
	mc_status st;
	PARSE("allocate_and_mount_segment", 1, "size", "protocol", "location");
	if (arg_u64(a[0], "allocate_and_mount_segment", "size", &size) < 0 ||
	    opt_strs(&a[1], "allocate_and_mount_segment", &protocol, &location) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	st = mc_store_allocate_and_mount_segment(ST(self)->s, size, protocol, location, id,
						 &allocated);
	call_end(&c);
	return mount_result(st, id, &allocated);
}
