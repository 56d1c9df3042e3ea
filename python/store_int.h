/*
 * python/store_int.h - what the files of the extension `mooncake.store`
 * share (store.c and store_*.c; see store.c for the module as a whole).
 *
 * The extension is one module built from several files, one per group of
 * methods, so that each can be read on its own:
 *   store.c          the MooncakeDistributedStore object, setup/close, the
 *                    method table and the module's init
 *   store_config.c   ReplicateConfig, and its copy into a C config (mc_py_cfg_from)
 *   store_copy.c     copy-based puts and gets, BufferHandle
 *   store_meta.c     metadata calls (sizes, existence, removal, leases, ...)
 *                    and the replica descriptors
 *   store_zc.c       zero-copy calls over registered memory, and sessions
 *   store_tensor.c   tensors (the stored-tensor format is the library's,
 *                    <mooncake/tensor_hdr.h>) and tensor parallelism
 *   store_pool.c     BufferPool / BufferLease / BufferLeaseView and
 *                    MooncakeHostMemAllocator
 *
 * Here: the store's own argument helpers and the C-side argument arrays
 * every method uses (the parsers shared with mooncake.engine are in
 * pyargs.h), the object and the GIL/lock discipline of a call (struct call),
 * the config struct, the result-list builders, and the declarations of
 * what one file defines for the others (the type objects, the enums, the
 * methods the table in store.c names).  Small helpers are static inline,
 * so each file has them without a second definition; what crosses files
 * with external linkage is named mc_py_* (the extension is built with
 * hidden visibility, so none of it leaves the .so).
 */
#ifndef MC_PYTHON_STORE_INT_H
#define MC_PYTHON_STORE_INT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <ctype.h>
#include <errno.h>
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

/* Optional int argument with a default. */
static inline int opt_long(PyObject *o, long def, const char *fname, const char *what, long *out)
{
	if (!o) {
		*out = def;
		return 0;
	}
	return arg_long(o, fname, what, out);
}

/* ---- C-side argument arrays ------------------------------------------------------ */

/* Keys of a list: the tuple keeps the str objects (and their UTF-8) alive. */
struct keys {
	PyObject *tup;
	const char **v;
	size_t n;
};

static inline void keys_release(struct keys *k)
{
	PyMem_Free(k->v);
	Py_CLEAR(k->tup);
	k->v = NULL;
	k->n = 0;
}

static inline int keys_from(PyObject *o, const char *fname, struct keys *k)
{
	k->v = NULL;
	k->n = 0;
	k->tup = arg_seq(o, fname, "keys", NULL);
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
static inline int u64s_from(PyObject *o, const char *fname, const char *what, uint64_t **out,
			    size_t *n)
{
	PyObject *t = arg_seq(o, fname, what, NULL);
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

static inline void bufs_release(struct bufs *b)
{
	for (size_t i = 0; i < b->n; i++)
		PyBuffer_Release(&b->v[i]);
	PyMem_Free(b->v);
	b->v = NULL;
	b->n = 0;
}

static inline int get_buffer(PyObject *o, const char *fname, Py_buffer *view)
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

static inline int bufs_from(PyObject *tup, const char *fname, struct bufs *b)
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

/* ---- the store object (store.c) ------------------------------------------------- */

struct store_obj {
	PyObject ob_base;
	PyObject *dict;
	struct mc_store *s;
	pthread_rwlock_t lock; /* shared: calls; exclusive: setup, close */
	PyObject *engine_ref;  /* a shared engine, kept alive until close */
};

extern PyTypeObject mc_py_store_type;

/* Drop the GIL, then take the client's lock: never wait for one while
 * holding the other. */
struct call {
	PyThreadState *ts;
	struct store_obj *st;
};

static inline void call_begin(struct call *c, struct store_obj *st, bool exclusive)
{
	c->st = st;
	c->ts = PyEval_SaveThread();
	if (exclusive)
		pthread_rwlock_wrlock(&st->lock);
	else
		pthread_rwlock_rdlock(&st->lock);
}

static inline void call_end(struct call *c)
{
	pthread_rwlock_unlock(&c->st->lock);
	PyEval_RestoreThread(c->ts);
}

#define ST(self)   ((struct store_obj *)(self))

#define FASTKW(fn) (PyCFunction)(void (*)(void))(fn), METH_FASTCALL | METH_KEYWORDS
#define DEFARGS	   PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames

#define PARSE(fname, nreq, ...)                                                   \
	static const char *const names_[] = {__VA_ARGS__};                        \
	const struct argspec spec_ = {fname, names_, nreq,                        \
				      (int)(sizeof(names_) / sizeof(names_[0]))}; \
	PyObject *a[MAX_ARGS];                                                    \
	if (parse_args(&spec_, args, nargs, kwnames, a) < 0)                      \
	return NULL

/* ---- ReplicateConfig (store_config.c) --------------------------------------------- */

extern PyTypeObject mc_py_config_type;
/* The enum.IntEnum classes, made at module init (NULL before). */
extern PyObject *mc_py_soft_pin_action_enum, *mc_py_replica_status_enum,
	*mc_py_object_data_type_enum;

/* A member of enum e for v (a plain int while e is NULL). */
static inline PyObject *enum_value(PyObject *e, long v)
{
	if (!e)
		return PyLong_FromLong(v);
	return PyObject_CallFunction(e, "l", v);
}

/* A ReplicateConfig copied into C memory that the call owns. */
struct cfg {
	struct mc_store_config c; /* group_id: the first of group_ids */
	const char **segs;
	const char **gids; /* all of group_ids, for the batch calls */
	size_t ngids;
	char *blob; /* every string, NUL-separated */
	bool given;
	/* a soft-pin TTL without ENABLE (PRESERVE or DISABLE): upstream's
	 * upserts refuse it with -600 (MC_ERR_INVALID_PARAMS) */
	bool upsert_refused;
};

/* Release what mc_py_cfg_from() filled. */
void mc_py_cfg_release(struct cfg *k);

const struct mc_store_config *mc_py_cfg_batch(struct cfg *k);
struct mc_store_config mc_py_cfg_key(const struct cfg *k, size_t i, size_t n);
int mc_py_cfg_from(PyObject *o, const char *fname, struct cfg *k);

/* ---- result lists ---------------------------------------------------------------- */

/* A Python list of n ints made by item(v, i); NULL with an exception set. */
static inline PyObject *num_list(const void *v, size_t n, PyObject *(*item)(const void *, size_t))
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

static inline PyObject *int_item(const void *v, size_t i)
{
	return PyLong_FromLong(((const int *)v)[i]);
}

static inline PyObject *i64_item(const void *v, size_t i)
{
	return PyLong_FromLongLong(((const int64_t *)v)[i]);
}

static inline PyObject *status_item(const void *v, size_t i)
{
	return PyLong_FromLong(((const mc_status *)v)[i]);
}

static inline PyObject *int_list(const int *v, size_t n)
{
	return num_list(v, n, int_item);
}

static inline PyObject *i64_list(const int64_t *v, size_t n)
{
	return num_list(v, n, i64_item);
}

static inline PyObject *status_list(const mc_status *v, size_t n)
{
	return num_list(v, n, status_item);
}

/* A list of n copies of one status (mismatched batch arguments). */
static inline PyObject *fill_list(size_t n, long v)
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

/* ---- copy-based calls (store_copy.c) --------------------------------------------- */

enum put_kind { PUT_INSERT, PUT_UPSERT };

extern PyTypeObject mc_py_handle_type;

/* Read key into a malloc'ed buffer; returns the size or a negative status. */
static inline int64_t get_malloc(struct store_obj *st, const char *key, void **out)
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

/* ---- metadata calls and replica descriptors (store_meta.c) ------------------------ */

extern PyTypeObject mc_py_descriptor_type, mc_py_mem_desc_type, mc_py_replica_desc_type;

/* ---- BufferPool, MooncakeHostMemAllocator (store_pool.c) -------------------------- */

extern PyTypeObject mc_py_pool_type, mc_py_lease_type, mc_py_view_type,
	mc_py_host_mem_allocator_type;
/* BufferPoolError, BufferPoolExhausted, BufferLeaseInUse (store_pool.c). */
extern PyObject *mc_py_pool_error, *mc_py_pool_exhausted, *mc_py_lease_in_use;
int mc_py_pool_add_exceptions(PyObject *m);

/* ---- the methods of MooncakeDistributedStore, in method-table order --------------- */

PyObject *mc_py_store_setup(DEFARGS);
PyObject *mc_py_store_close(PyObject *self, PyObject *unused);
PyObject *mc_py_store_health_check(PyObject *self, PyObject *unused);
PyObject *mc_py_store_get_hostname(PyObject *self, PyObject *unused);
PyObject *mc_py_store_alloc_from_mem_pool(DEFARGS);
PyObject *mc_py_store_setup_dummy(DEFARGS);
PyObject *mc_py_store_get_offload_rpc_read_count(PyObject *self, PyObject *unused);
PyObject *mc_py_store_put_from_with_metadata(DEFARGS);
PyObject *mc_py_store_get_engine_ptr(PyObject *self, PyObject *unused);
PyObject *mc_py_store_put(DEFARGS);
PyObject *mc_py_store_put_parts(DEFARGS);
PyObject *mc_py_store_put_batch(DEFARGS);
PyObject *mc_py_store_upsert(DEFARGS);
PyObject *mc_py_store_upsert_parts(DEFARGS);
PyObject *mc_py_store_upsert_batch(DEFARGS);
PyObject *mc_py_store_get(DEFARGS);
PyObject *mc_py_store_get_batch(DEFARGS);
PyObject *mc_py_store_get_buffer(DEFARGS);
PyObject *mc_py_store_batch_get_buffer(DEFARGS);
PyObject *mc_py_store_get_size(DEFARGS);
PyObject *mc_py_store_is_exist(DEFARGS);
PyObject *mc_py_store_batch_is_exist(DEFARGS);
PyObject *mc_py_store_remove(DEFARGS);
PyObject *mc_py_store_remove_by_regex(DEFARGS);
PyObject *mc_py_store_remove_all(DEFARGS);
PyObject *mc_py_store_batch_remove(DEFARGS);
PyObject *mc_py_store_register_buffer(DEFARGS);
PyObject *mc_py_store_unregister_buffer(DEFARGS);
PyObject *mc_py_store_put_from(DEFARGS);
PyObject *mc_py_store_upsert_from(DEFARGS);
PyObject *mc_py_store_get_into(DEFARGS);
PyObject *mc_py_store_batch_put_from(DEFARGS);
PyObject *mc_py_store_batch_upsert_from(DEFARGS);
PyObject *mc_py_store_batch_get_into(DEFARGS);
PyObject *mc_py_store_get_into_ranges(DEFARGS);
PyObject *mc_py_store_batch_put_from_multi_buffers(DEFARGS);
PyObject *mc_py_store_batch_get_session_start(DEFARGS);
PyObject *mc_py_store_batch_get_into_multi_buffer_ranges(DEFARGS);
PyObject *mc_py_store_batch_get_session_end(DEFARGS);
PyObject *mc_py_store_batch_put_session_start(DEFARGS);
PyObject *mc_py_store_batch_put_from_multi_buffer_ranges(DEFARGS);
PyObject *mc_py_store_batch_put_session_end(DEFARGS);
PyObject *mc_py_store_batch_put_session_revoke(DEFARGS);
PyObject *mc_py_store_batch_get_into_multi_buffers(DEFARGS);
PyObject *mc_py_store_get_replica_desc(DEFARGS);
PyObject *mc_py_store_batch_get_replica_desc(DEFARGS);
PyObject *mc_py_store_batch_replica_clear(DEFARGS);
/* store_tasks.c */
extern PyObject *mc_py_task_type_enum, *mc_py_task_status_enum;
PyObject *mc_py_store_create_copy_task(DEFARGS);
PyObject *mc_py_store_change_replica(DEFARGS);
PyObject *mc_py_store_get_replica_count(DEFARGS);
PyObject *mc_py_store_create_move_task(DEFARGS);
PyObject *mc_py_store_query_task(DEFARGS);
PyObject *mc_py_store_unmount_segment(DEFARGS);
PyObject *mc_py_store_mount_segment(DEFARGS);
PyObject *mc_py_store_allocate_and_mount_segment(DEFARGS);
PyObject *mc_py_store_unmount_and_free_segment(DEFARGS);
PyObject *mc_py_store_unmount_local_disk_segment(DEFARGS);
PyObject *mc_py_store_put_tensor(DEFARGS);
PyObject *mc_py_store_upsert_tensor(DEFARGS);
PyObject *mc_py_store_pub_tensor(DEFARGS);
PyObject *mc_py_store_upsert_pub_tensor(DEFARGS);
PyObject *mc_py_store_batch_put_tensor(DEFARGS);
PyObject *mc_py_store_batch_upsert_tensor(DEFARGS);
PyObject *mc_py_store_batch_pub_tensor(DEFARGS);
PyObject *mc_py_store_batch_upsert_pub_tensor(DEFARGS);
PyObject *mc_py_store_get_tensor(DEFARGS);
PyObject *mc_py_store_batch_get_tensor(DEFARGS);
PyObject *mc_py_store_get_tensor_into(DEFARGS);
PyObject *mc_py_store_batch_get_tensor_into(DEFARGS);
PyObject *mc_py_store_put_tensor_from(DEFARGS);
PyObject *mc_py_store_upsert_tensor_from(DEFARGS);
PyObject *mc_py_store_batch_put_tensor_from(DEFARGS);
PyObject *mc_py_store_batch_upsert_tensor_from(DEFARGS);
PyObject *mc_py_store_put_tensor_with_tp(DEFARGS);
PyObject *mc_py_store_pub_tensor_with_tp(DEFARGS);
PyObject *mc_py_store_batch_put_tensor_with_tp(DEFARGS);
PyObject *mc_py_store_batch_pub_tensor_with_tp(DEFARGS);
PyObject *mc_py_store_get_tensor_with_tp(DEFARGS);
PyObject *mc_py_store_batch_get_tensor_with_tp(DEFARGS);
PyObject *mc_py_store_get_tensor_with_tp_into(DEFARGS);
PyObject *mc_py_store_batch_get_tensor_with_tp_into(DEFARGS);
PyObject *mc_py_store_put_tensor_with_tp_from(DEFARGS);
PyObject *mc_py_store_batch_put_tensor_with_tp_from(DEFARGS);

#endif
