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
 * import time; a stored tensor is upstream's [304-byte header][raw bytes],
 * with the header codec in the library (<mooncake/tensor_hdr.h>).
 *
 * Each method is one C call (batch, ranged and session forms included);
 * the binding parses, calls with the GIL released, and builds results.
 *
 * Every argument list is held as a tuple copy while the GIL is released,
 * so another thread mutating the caller's list cannot free a key or a
 * buffer under a running call.  Argument type errors raise TypeError;
 * store failures are return values, never exceptions.
 *
 * Files: this one holds the MooncakeDistributedStore object, setup and
 * close, the method table and the module's init; the methods live in
 * store_config.c (ReplicateConfig), store_copy.c (copy-based calls,
 * BufferHandle), store_meta.c (metadata calls, replica descriptors),
 * store_zc.c (zero-copy calls, sessions), store_tensor.c (tensors, tensor
 * parallelism) and store_pool.c (BufferPool, MooncakeHostMemAllocator);
 * store_int.h declares what they share.
 */
#include "store_int.h"

/* ---- the store object -------------------------------------------------------------- */

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
		"local_hostname",     "metadata_server", "global_segment_size",
		"local_buffer_size",  "protocol",	 "rdma_devices",
		"master_server_addr", "tenant_id",	 "ssd_offload_path"};
	const char *val[9] = {NULL};
	PyObject *strs[9] = {NULL};
	bool ssd = false;
	PyObject *ret = NULL;
	struct mc_store_params p = {0};
	uint64_t gsz = 16ull << 20, lsz = 16ull << 20;
	bool bad_port;

	for (size_t i = 0; i < 9; i++) {
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
	/* as in the positional form: the SSD tier and the client HTTP server */
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
		if (i == 0)
			ssd = on;
		if (i == 1)
			p.enable_http_server = on;
	}
	{
		PyObject *v = PyDict_GetItemString(d, "client_http_port"), *str;
		const char *t;
		char *end;
		unsigned long port;
		if (v) {
			str = PyObject_Str(v);
			t = str ? PyUnicode_AsUTF8(str) : NULL;
			if (!t) {
				Py_XDECREF(str);
				goto out;
			}
			errno = 0;
			port = strtoul(t, &end, 10);
			bad_port = !*t || *end || errno || port > 65535;
			Py_DECREF(str);
			if (bad_port) {
				ret = PyLong_FromLong(ERR_INVALID_PARAMS);
				goto out;
			}
			p.http_port = (uint16_t)port;
		} else {
			p.http_port = 9300;
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
	p.enable_ssd_offload = ssd;
	p.ssd_offload_path = val[8];
	ret = do_setup(st, &p, NULL);
out:
	for (size_t i = 0; i < 9; i++)
		Py_XDECREF(strs[i]);
	return ret;
}

PyObject *mc_py_store_setup(DEFARGS)
{
	struct store_obj *st = ST(self);
	struct mc_store_params p = {0};
	const char *proto, *dev, *ssd_path = "";
	uint64_t gsz, lsz, http_port = 9300;
	bool bad1, bad2, ssd, http, verify;

	if (nargs == 1 && !kwnames && PyDict_Check(args[0]))
		return setup_dict(st, args[0]);
	PARSE("setup", 7, "local_hostname", "metadata_server", "global_segment_size",
	      "local_buffer_size", "protocol", "rdma_devices", "master_server_addr", "engine",
	      "enable_ssd_offload", "ssd_offload_path", "tenant_id", "enable_client_http_server",
	      "client_http_port", "verify");
	if (arg_str(a[0], "setup", "local_hostname", &p.local_hostname) < 0 ||
	    arg_str(a[1], "setup", "metadata_server", &p.metadata_server) < 0 ||
	    arg_size(a[2], "setup", "global_segment_size", &gsz, &bad1) < 0 ||
	    arg_size(a[3], "setup", "local_buffer_size", &lsz, &bad2) < 0 ||
	    arg_str(a[4], "setup", "protocol", &proto) < 0 ||
	    arg_str(a[5], "setup", "rdma_devices", &dev) < 0 ||
	    arg_str(a[6], "setup", "master_server_addr", &p.master_server_addr) < 0 ||
	    arg_bool(a[8], "setup", "enable_ssd_offload", false, &ssd) < 0 ||
	    (a[9] && arg_str(a[9], "setup", "ssd_offload_path", &ssd_path) < 0) ||
	    (a[10] && arg_str(a[10], "setup", "tenant_id", &p.tenant_id) < 0) ||
	    arg_bool(a[11], "setup", "enable_client_http_server", false, &http) < 0 ||
	    (a[12] && arg_u64(a[12], "setup", "client_http_port", &http_port) < 0) ||
	    arg_bool(a[13], "setup", "verify", true, &verify) < 0)
		return NULL;
	if (a[7] && a[7] != Py_None) {
		struct mc_te *te;
		if (engine_pointer(a[7], &te) < 0) /* type check before anything else */
			return NULL;
	}
	if (bad1 || bad2)
		return PyLong_FromLong(ERR_INVALID_PARAMS);
	if (http_port > 65535)
		return PyLong_FromLong(ERR_INVALID_PARAMS);
	p.enable_http_server = http;
	p.disable_verify = !verify;
	p.http_port = (uint16_t)http_port;
	p.enable_ssd_offload = ssd;
	p.ssd_offload_path = ssd_path;
	if (strcmp(dev, "auto-discovery") == 0)
		dev = "";
	p.global_segment_size = gsz;
	p.local_buffer_size = lsz;
	p.protocol = proto;
	p.rdma_devices = dev;
	return do_setup(st, &p, a[7]);
}

PyObject *mc_py_store_close(PyObject *self, PyObject *unused)
{
	struct call c;
	mc_status rc;

	call_begin(&c, ST(self), true);
	rc = mc_store_close(ST(self)->s);
	call_end(&c);
	Py_CLEAR(ST(self)->engine_ref);
	return PyLong_FromLong(rc);
}

PyObject *mc_py_store_health_check(PyObject *self, PyObject *unused)
{
	struct call c;
	int rc;
	call_begin(&c, ST(self), false);
	rc = mc_store_health_check(ST(self)->s);
	call_end(&c);
	return PyLong_FromLong(rc);
}

PyObject *mc_py_store_get_hostname(PyObject *self, PyObject *unused)
{
	struct call c;
	char name[300];
	call_begin(&c, ST(self), false);
	snprintf(name, sizeof(name), "%s",
		 mc_store_health_check(ST(self)->s) == 1 ? "" : mc_store_hostname(ST(self)->s));
	call_end(&c);
	return PyUnicode_FromString(name);
}

PyObject *mc_py_store_alloc_from_mem_pool(DEFARGS)
{
	uint64_t size;
	PARSE("alloc_from_mem_pool", 1, "size");
	void *p = NULL;
	struct call c;
	if (arg_u64(a[0], "alloc_from_mem_pool", "size", &size) < 0)
		return NULL;
	call_begin(&c, ST(self), false);
	if (size > SIZE_MAX || mc_store_alloc_from_mem_pool(ST(self)->s, (size_t)size, &p) != MC_OK)
		p = NULL; /* 0: no shared memory of that size */
	call_end(&c);
	/* a dummy's shared memory (free it with MooncakeHostMemAllocator.free);
	 * 0 on a real client, as upstream */
	return PyLong_FromVoidPtr(p);
}

PyObject *mc_py_store_get_engine_ptr(PyObject *self, PyObject *unused)
{
	struct mc_te *te;
	struct call c;
	call_begin(&c, ST(self), false);
	te = mc_store_health_check(ST(self)->s) == 1 ? NULL : mc_store_engine(ST(self)->s);
	call_end(&c);
	return PyLong_FromVoidPtr(te);
}

/* setup_dummy(mem_pool_size, local_buffer_size, server_address): attach to
 * the mooncake_client daemon of this host (mc_store_setup_dummy); 0, or
 * upstream's -1 on any failure (the library logs the cause). */
PyObject *mc_py_store_setup_dummy(DEFARGS)
{
	uint64_t pool, lbuf;
	const char *addr;
	struct call c;
	mc_status rc;
	PARSE("setup_dummy", 3, "mem_pool_size", "local_buffer_size", "server_address");
	if (arg_u64(a[0], "setup_dummy", "mem_pool_size", &pool) < 0 ||
	    arg_u64(a[1], "setup_dummy", "local_buffer_size", &lbuf) < 0 ||
	    arg_str(a[2], "setup_dummy", "server_address", &addr) < 0)
		return NULL;
	call_begin(&c, ST(self), true);
	rc = mc_store_setup_dummy(ST(self)->s, pool, lbuf, addr);
	call_end(&c);
	return PyLong_FromLong(rc == MC_OK ? 0 : -1);
}

PyObject *mc_py_store_get_offload_rpc_read_count(PyObject *self, PyObject *unused)
{
	struct call c;
	uint64_t n;
	call_begin(&c, ST(self), false);
	n = mc_store_offload_rpc_read_count(ST(self)->s);
	call_end(&c);
	return PyLong_FromUnsignedLongLong(n);
}

/* ---- methods written in Python ------------------------------------------------------ */

/*
 * The unified parallelism calls (mooncake/_tensor_parallel.py) and the
 * safetensors, CUDA and legacy set-up calls (mooncake/_store_extra.py) are
 * Python functions taking the client first; each method here imports its
 * module on first use (torch stays unimported until a tensor call) and
 * calls the function with self in front of the caller's arguments
 * (py_forward, pyargs.h).
 */
#define PYFWD(module, name)                                                   \
	static PyObject *mc_py_store_##name(DEFARGS)                          \
	{                                                                     \
		return py_forward(module, #name, self, args, nargs, kwnames); \
	}
#define PAR   "mooncake._tensor_parallel"
#define EXTRA "mooncake._store_extra"
PYFWD(PAR, put_tensor_with_parallelism)
PYFWD(PAR, upsert_tensor_with_parallelism)
PYFWD(PAR, batch_put_tensor_with_parallelism)
PYFWD(PAR, batch_upsert_tensor_with_parallelism)
PYFWD(PAR, put_tensor_with_parallelism_from)
PYFWD(PAR, upsert_tensor_with_parallelism_from)
PYFWD(PAR, batch_put_tensor_with_parallelism_from)
PYFWD(PAR, batch_upsert_tensor_with_parallelism_from)
PYFWD(PAR, get_tensor_with_parallelism)
PYFWD(PAR, batch_get_tensor_with_parallelism)
PYFWD(PAR, get_tensor_with_parallelism_into)
PYFWD(PAR, batch_get_tensor_with_parallelism_into)
PYFWD(EXTRA, save_tensor_to_safetensor)
PYFWD(EXTRA, load_tensor_from_safetensor)
PYFWD(EXTRA, init_all)
PYFWD(EXTRA, get_tensor_into_cuda)
PYFWD(EXTRA, batch_get_tensor_into_cuda)

/* ---- method table ------------------------------------------------------------------ */

#define M(name, doc)                                   \
	{                                              \
#name, FASTKW(mc_py_store_##name), doc \
	}
#define M0(name, doc)                                       \
	{                                                   \
#name, mc_py_store_##name, METH_NOARGS, doc \
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
	M(alloc_from_mem_pool, "alloc_from_mem_pool(size) -> int: on a dummy client the address "
			       "of size bytes of shared memory to register (free with "
			       "MooncakeHostMemAllocator().free); 0 on a real client"),
	M(setup_dummy, "setup_dummy(mem_pool_size, local_buffer_size, server_address) -> int: "
		       "0, or -1: attach to the mooncake_client daemon of this host as a "
		       "dummy client (mem_pool_size unused, as upstream)"),
	M0(get_offload_rpc_read_count,
	   "get_offload_rpc_read_count() -> int: objects read from other clients' disks "
	   "(LOCAL_DISK replicas, through their offload RPC) since setup"),
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
	M(register_buffer, "register_buffer(buffer_ptr, size, read_only=False) -> int: read_only "
			   "buffers are put sources only (a get into one is -600)"),
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
	M(create_copy_task, "create_copy_task(key, targets) -> ((first, second), 0) or ((0, 0), "
			    "err): copy the object to every target segment"),
	M(create_move_task, "create_move_task(key, source, target) -> (task_id, err): move its "
			    "replica on segment source to target"),
	M(change_replica,
	  "change_replica(key, replica_num) -> int (ours): give the key replica_num "
	  "memory replicas (copy tasks add, the newest extra ones are dropped); "
	  "the count once done, or a negative error code"),
	M(get_replica_count, "get_replica_count(key) -> int (ours): its memory replicas, or a "
			     "negative error code"),
	M(query_task, "query_task(task_id) -> (QueryTaskResponse, 0) or (None, err)"),
	M(unmount_segment, "unmount_segment(segment_ids, grace_period_seconds=0) -> int: unmount "
			   "this client's segment (readable for the grace period)"),
	M(mount_segment, "mount_segment(path, size, offset=0, protocol=None, location='') -> "
			 "{'ret', 'segment_ids'}: mmap a file (tmpfs, /dev/shm) and mount it"),
	M(allocate_and_mount_segment, "allocate_and_mount_segment(size, protocol=None, "
				      "location='') -> {'ret', 'segment_ids', 'allocated_size'}"),
	M(unmount_and_free_segment, "unmount_and_free_segment(segment_ids, "
				    "grace_period_seconds=0) -> int: unmount, wait, unmap"),
	M(unmount_local_disk_segment, "unmount_local_disk_segment(grace_period_seconds=0) -> "
				      "int: take the SSD tier off the master, then wait"),
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
	M(put_tensor_with_parallelism,
	  "put_tensor_with_parallelism(key, tensor, parallelism=None, config=None,\n"
	  "                            writer_partition=None) -> int"),
	M(upsert_tensor_with_parallelism,
	  "upsert_tensor_with_parallelism(key, tensor, parallelism=None, config=None,\n"
	  "                               writer_partition=None) -> int"),
	M(batch_put_tensor_with_parallelism,
	  "batch_put_tensor_with_parallelism(keys, tensors_list, parallelisms=None, config=None,\n"
	  "                                  writer_partitions=None) -> list of int"),
	M(batch_upsert_tensor_with_parallelism,
	  "batch_upsert_tensor_with_parallelism(keys, tensors_list, parallelisms=None,\n"
	  "                                     config=None, writer_partitions=None) -> list"),
	M(put_tensor_with_parallelism_from,
	  "put_tensor_with_parallelism_from(key, buffer_ptr, size, parallelism=None, config=None,\n"
	  "                                 writer_partition=None) -> int"),
	M(upsert_tensor_with_parallelism_from,
	  "upsert_tensor_with_parallelism_from(key, buffer_ptr, size, parallelism=None,\n"
	  "                                    config=None, writer_partition=None) -> int"),
	M(batch_put_tensor_with_parallelism_from,
	  "batch_put_tensor_with_parallelism_from(keys, buffer_ptrs, sizes, parallelisms=None,\n"
	  "                                       config=None, writer_partitions=None) -> list"),
	M(batch_upsert_tensor_with_parallelism_from,
	  "batch_upsert_tensor_with_parallelism_from(keys, buffer_ptrs, sizes, parallelisms=None,\n"
	  "                                          config=None, writer_partitions=None) -> list"),
	M(get_tensor_with_parallelism,
	  "get_tensor_with_parallelism(key, target=None) -> Tensor or None"),
	M(batch_get_tensor_with_parallelism,
	  "batch_get_tensor_with_parallelism(keys, targets=None) -> list of Tensor/None"),
	M(get_tensor_with_parallelism_into,
	  "get_tensor_with_parallelism_into(key, buffer_ptr, size, target=None) -> Tensor/None"),
	M(batch_get_tensor_with_parallelism_into,
	  "batch_get_tensor_with_parallelism_into(keys, buffer_ptrs, sizes, targets=None) -> list"),
	M(save_tensor_to_safetensor,
	  "save_tensor_to_safetensor(key, file_name=None) -> int: the stored tensor to a file"),
	M(load_tensor_from_safetensor,
	  "load_tensor_from_safetensor(key=None, file_name) -> Tensor or None: a file's tensor\n"
	  "(the one named key, else the first) stored under key (default: the file's name)"),
	M(init_all, "init_all(protocol, device_name, mount_segment_size=16777216) -> int"),
	M(get_tensor_into_cuda, "get_tensor_into_cuda(key, tensor) -> int: bytes copied into a "
				"CUDA tensor, or a negative code"),
	M(batch_get_tensor_into_cuda,
	  "batch_get_tensor_into_cuda(keys, tensors_list) -> list of int"),
	{NULL, NULL, 0, NULL},
};

PyTypeObject mc_py_store_type = {
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

/* ---- module ----------------------------------------------------------------------- */

/* An IntEnum named name with the given members; also added to the module,
 * and each member as a module-level alias when export is set, unless an
 * earlier enum's member holds that name. */
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
		PyObject *v;

		if (PyObject_HasAttrString(m, members[i]))
			continue;
		v = PyObject_GetAttrString(e, members[i]);
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

/* ---- module functions ------------------------------------------------------------ */

/*
 * get_alloc_func_addr() and get_free_func_addr() give the addresses of an
 * allocator pair with the signatures torch's pluggable allocators call
 * (alloc(size, device, stream), free(ptr, size, device, stream)): host memory
 * in 2 MiB huge pages where the system has them, transparent huge pages
 * (madvise) otherwise.  Sizes are rounded up to 2 MiB on both sides.
 */
#define HUGE_2M ((size_t)2 << 20)

static size_t huge_round(size_t size)
{
	return size ? (size + HUGE_2M - 1) & ~(HUGE_2M - 1) : HUGE_2M;
}

void *mc_py_hugepage_alloc(size_t size, int device, void *stream);
void mc_py_hugepage_free(void *ptr, size_t size, int device, void *stream);

void *mc_py_hugepage_alloc(size_t size, int device, void *stream)
{
	size_t n = huge_round(size);
	void *p;
	(void)device;
	(void)stream;
	p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	if (p != MAP_FAILED)
		return p;
	p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	(void)madvise(p, n, MADV_HUGEPAGE);
	return p;
}

void mc_py_hugepage_free(void *ptr, size_t size, int device, void *stream)
{
	(void)device;
	(void)stream;
	if (ptr)
		(void)munmap(ptr, huge_round(size));
}

static PyObject *get_alloc_func_addr(PyObject *mod, PyObject *unused)
{
	(void)mod;
	(void)unused;
	return PyLong_FromVoidPtr((void *)(uintptr_t)&mc_py_hugepage_alloc);
}

static PyObject *get_free_func_addr(PyObject *mod, PyObject *unused)
{
	(void)mod;
	(void)unused;
	return PyLong_FromVoidPtr((void *)(uintptr_t)&mc_py_hugepage_free);
}

static PyMethodDef module_methods[] = {
	{"get_alloc_func_addr", get_alloc_func_addr, METH_NOARGS,
	 "get_alloc_func_addr() -> int: address of alloc(size, device, stream) (host huge pages)"},
	{"get_free_func_addr", get_free_func_addr, METH_NOARGS,
	 "get_free_func_addr() -> int: address of free(ptr, size, device, stream)"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef store_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = MODULE_NAME,
	.m_doc = "Mooncake Store client (upstream-compatible Python binding over the C API).",
	.m_size = -1,
	.m_methods = module_methods,
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
	static const int ts_v[] = {0, 1, 3, 2}; /* spec store.md 1.14: FAILED 2, SUCCESS 3 */
	PyObject *m;

	if (PyType_Ready(&mc_py_config_type) < 0 || PyType_Ready(&mc_py_store_type) < 0 ||
	    PyType_Ready(&mc_py_handle_type) < 0 || PyType_Ready(&mc_py_descriptor_type) < 0 ||
	    PyType_Ready(&mc_py_mem_desc_type) < 0 || PyType_Ready(&mc_py_replica_desc_type) < 0 ||
	    PyType_Ready(&mc_py_pool_type) < 0 || PyType_Ready(&mc_py_lease_type) < 0 ||
	    PyType_Ready(&mc_py_view_type) < 0 || PyType_Ready(&mc_py_host_mem_allocator_type) < 0)
		return NULL;
	m = PyModule_Create(&store_module);
	if (!m)
		return NULL;
	if (PyModule_AddType(m, &mc_py_store_type) < 0 ||
	    PyModule_AddType(m, &mc_py_config_type) < 0 ||
	    PyModule_AddType(m, &mc_py_handle_type) < 0 ||
	    PyModule_AddType(m, &mc_py_descriptor_type) < 0 ||
	    PyModule_AddType(m, &mc_py_mem_desc_type) < 0 ||
	    PyModule_AddType(m, &mc_py_replica_desc_type) < 0 ||
	    PyModule_AddType(m, &mc_py_pool_type) < 0 ||
	    PyModule_AddType(m, &mc_py_lease_type) < 0 ||
	    PyModule_AddType(m, &mc_py_view_type) < 0 ||
	    PyModule_AddType(m, &mc_py_host_mem_allocator_type) < 0 ||
	    PyModule_AddObjectRef(m, "RegisteredBufferPool", (PyObject *)&mc_py_pool_type) < 0 ||
	    PyModule_AddStringConstant(m, "__version__", MC_VERSION_STRING) < 0)
		goto err;
	if (!mc_py_soft_pin_action_enum &&
	    !(mc_py_soft_pin_action_enum = add_enum(m, "SoftPinAction", pin, pin_v, 3, false)))
		goto err;
	if (!mc_py_replica_status_enum &&
	    !(mc_py_replica_status_enum = add_enum(m, "ReplicaStatus", rs, rs_v, 6, true)))
		goto err;
	if (!mc_py_object_data_type_enum &&
	    !(mc_py_object_data_type_enum = add_enum(m, "ObjectDataType", odt, odt_v, 10, true)))
		goto err;
	if (!mc_py_task_type_enum &&
	    !(mc_py_task_type_enum = add_enum(m, "TaskType", tt, tt_v, 2, true)))
		goto err;
	/* TaskStatus's PENDING and SUCCESS are exported; PROCESSING and FAILED
	 * stay ReplicaStatus's */
	if (!mc_py_task_status_enum &&
	    !(mc_py_task_status_enum = add_enum(m, "TaskStatus", ts, ts_v, 4, true)))
		goto err;
	if (PyModule_AddIntConstant(m, "TENSOR_METADATA_SIZE", MC_TENSOR_HDR_SIZE) < 0 ||
	    mc_py_pool_add_exceptions(m) < 0)
		goto err;
	if (add_from(m, "mooncake._tensor_parallel",
		     (const char *const[]){"ParallelAxis", "TensorParallelism", "ReadTarget",
					   NULL}) < 0 ||
	    add_from(m, "mooncake._store_extra",
		     (const char *const[]){"bind_to_numa_node", "MooncakeDistributedNoFRegister",
					   "QueryTaskResponse", "DiskDescriptor", NULL}) < 0)
		goto err;
	return m;
err:
	Py_DECREF(m);
	return NULL;
}
