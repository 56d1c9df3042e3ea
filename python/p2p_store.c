/*
 * python/p2p_store.c - the CPython extension `mooncake._p2p_store`.
 *
 * A thin binding of the public C API (<mooncake/p2p_store.h>): one type,
 * Store, owning one struct mc_p2p_store, and one exception, Error(code,
 * message), raised with the mc_status and mc_last_error() of a failed
 * call.  mooncake/p2p_store.py builds the user-facing P2PStore on it
 * (upstream's names, its error classes).  Every call that waits (etcd,
 * transfers, registration) runs with the GIL released; the handle is set
 * once by __init__ and freed by close() or the destructor, and a method
 * holds a reference to self for its duration, but close() racing another
 * method of the same object is the caller's error (as mc_p2p_store_free).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>

#include <mooncake/mooncake.h>
#include <mooncake/p2p_store.h>

static PyObject *p2p_error;

struct store_obj {
	PyObject_HEAD struct mc_p2p_store *s;
};

static PyObject *raise_status(mc_status st)
{
	PyObject *args = Py_BuildValue("(is)", (int)st, mc_last_error());
	if (args) {
		PyErr_SetObject(p2p_error, args);
		Py_DECREF(args);
	}
	return NULL;
}

static struct mc_p2p_store *handle(struct store_obj *self)
{
	if (!self->s)
		PyErr_SetString(PyExc_ValueError, "P2P store is closed");
	return self->s;
}

/* Two equally long lists of ints (addresses, sizes) into malloc'ed arrays. */
static int int_lists(PyObject *a, PyObject *b, void ***addrs_out, uint64_t **sizes_out,
		     size_t *n_out)
{
	PyObject *fa = PySequence_Fast(a, "addr_list must be a sequence of ints");
	PyObject *fb = fa ? PySequence_Fast(b, "size_list must be a sequence of ints") : NULL;
	Py_ssize_t n;
	void **addrs = NULL;
	uint64_t *sizes = NULL;
	int rc = -1;

	if (!fb)
		goto out;
	n = PySequence_Fast_GET_SIZE(fa);
	if (n != PySequence_Fast_GET_SIZE(fb)) {
		PyErr_Format(PyExc_ValueError, "addr_list has %zd entries, size_list %zd", n,
			     PySequence_Fast_GET_SIZE(fb));
		goto out;
	}
	addrs = calloc((size_t)n + 1, sizeof(void *));
	sizes = calloc((size_t)n + 1, sizeof(uint64_t));
	if (!addrs || !sizes) {
		PyErr_NoMemory();
		goto out;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		unsigned long long x = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(fa, i));
		unsigned long long y = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(fb, i));
		if (PyErr_Occurred())
			goto out;
		addrs[i] = (void *)(uintptr_t)x;
		sizes[i] = y;
	}
	*addrs_out = addrs;
	*sizes_out = sizes;
	*n_out = (size_t)n;
	addrs = NULL;
	sizes = NULL;
	rc = 0;
out:
	free(addrs);
	free(sizes);
	Py_XDECREF(fa);
	Py_XDECREF(fb);
	return rc;
}

static int store_init(struct store_obj *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"metadata_uri", "local_server_name", "te_metadata_uri", "protocol",
				 NULL};
	struct mc_p2p_params p = {0};
	struct mc_p2p_store *s = NULL;
	PyThreadState *ts;
	mc_status st;

	if (self->s) {
		PyErr_SetString(PyExc_RuntimeError, "P2P store already initialized");
		return -1;
	}
	if (!PyArg_ParseTupleAndKeywords(args, kw, "ss|zz", kwlist, &p.metadata_uri,
					 &p.local_server_name, &p.te_metadata_uri, &p.protocol))
		return -1;
	ts = PyEval_SaveThread();
	st = mc_p2p_store_new(&p, &s);
	PyEval_RestoreThread(ts);
	if (st) {
		raise_status(st);
		return -1;
	}
	self->s = s;
	return 0;
}

static void store_dealloc(struct store_obj *self)
{
	if (self->s) {
		PyThreadState *ts = PyEval_SaveThread();
		mc_p2p_store_free(self->s);
		PyEval_RestoreThread(ts);
	}
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *store_close(struct store_obj *self, PyObject *unused)
{
	struct mc_p2p_store *s = self->s;

	self->s = NULL;
	if (s) {
		PyThreadState *ts = PyEval_SaveThread();
		mc_p2p_store_free(s);
		PyEval_RestoreThread(ts);
	}
	Py_RETURN_NONE;
}

static PyObject *store_local_name(struct store_obj *self, PyObject *unused)
{
	struct mc_p2p_store *s = handle(self);
	return s ? PyUnicode_FromString(mc_p2p_store_local_name(s)) : NULL;
}

static PyObject *store_register(struct store_obj *self, PyObject *args)
{
	struct mc_p2p_store *s = handle(self);
	PyObject *la, *ls;
	const char *name, *location = NULL;
	unsigned long long shard;
	int force = 0;
	void **addrs;
	uint64_t *sizes;
	size_t n;
	PyThreadState *ts;
	mc_status st;

	if (!s || !PyArg_ParseTuple(args, "sOOK|zp", &name, &la, &ls, &shard, &location, &force) ||
	    int_lists(la, ls, &addrs, &sizes, &n))
		return NULL;
	ts = PyEval_SaveThread();
	st = mc_p2p_register(s, name, addrs, sizes, n, shard, location, force);
	PyEval_RestoreThread(ts);
	free(addrs);
	free(sizes);
	return st ? raise_status(st) : (Py_INCREF(Py_None), Py_None);
}

static PyObject *store_get_replica(struct store_obj *self, PyObject *args)
{
	struct mc_p2p_store *s = handle(self);
	PyObject *la, *ls;
	const char *name;
	void **addrs;
	uint64_t *sizes;
	size_t n;
	PyThreadState *ts;
	mc_status st;

	if (!s || !PyArg_ParseTuple(args, "sOO", &name, &la, &ls) ||
	    int_lists(la, ls, &addrs, &sizes, &n))
		return NULL;
	ts = PyEval_SaveThread();
	st = mc_p2p_get_replica(s, name, addrs, sizes, n);
	PyEval_RestoreThread(ts);
	free(addrs);
	free(sizes);
	return st ? raise_status(st) : (Py_INCREF(Py_None), Py_None);
}

static PyObject *name_call(struct store_obj *self, PyObject *args,
			   mc_status (*fn)(struct mc_p2p_store *, const char *))
{
	struct mc_p2p_store *s = handle(self);
	const char *name;
	PyThreadState *ts;
	mc_status st;

	if (!s || !PyArg_ParseTuple(args, "s", &name))
		return NULL;
	ts = PyEval_SaveThread();
	st = fn(s, name);
	PyEval_RestoreThread(ts);
	return st ? raise_status(st) : (Py_INCREF(Py_None), Py_None);
}

static PyObject *store_unregister(struct store_obj *self, PyObject *args)
{
	return name_call(self, args, mc_p2p_unregister);
}

static PyObject *store_delete_replica(struct store_obj *self, PyObject *args)
{
	return name_call(self, args, mc_p2p_delete_replica);
}

/* [(name, max_shard_size, total_size, [sizes...]), ...] */
static PyObject *store_list(struct store_obj *self, PyObject *args)
{
	struct mc_p2p_store *s = handle(self);
	struct mc_p2p_info *infos = NULL;
	const char *prefix = "";
	PyObject *out;
	PyThreadState *ts;
	size_t n = 0;
	mc_status st;

	if (!s || !PyArg_ParseTuple(args, "|s", &prefix))
		return NULL;
	ts = PyEval_SaveThread();
	st = mc_p2p_list(s, prefix, &infos, &n);
	PyEval_RestoreThread(ts);
	if (st)
		return raise_status(st);
	out = PyList_New((Py_ssize_t)n);
	for (size_t i = 0; out && i < n; i++) {
		PyObject *sizes = PyList_New((Py_ssize_t)infos[i].nsizes), *t;
		for (size_t k = 0; sizes && k < infos[i].nsizes; k++)
			PyList_SET_ITEM(sizes, (Py_ssize_t)k,
					PyLong_FromUnsignedLongLong(infos[i].size_list[k]));
		t = sizes ? Py_BuildValue("(sKKN)", infos[i].name,
					  (unsigned long long)infos[i].max_shard_size,
					  (unsigned long long)infos[i].total_size, sizes)
			  : NULL;
		if (!t) {
			Py_CLEAR(out);
			break;
		}
		PyList_SET_ITEM(out, (Py_ssize_t)i, t);
	}
	mc_p2p_infos_free(infos, n);
	return out;
}

static PyMethodDef store_methods[] = {
	{"close", (PyCFunction)store_close, METH_NOARGS, "free the store (and its engine)"},
	{"local_server_name", (PyCFunction)store_local_name, METH_NOARGS,
	 "the engine's real segment name"},
	{"register", (PyCFunction)store_register, METH_VARARGS,
	 "register(name, addrs, sizes, max_shard_size, location=None, force_create=False)"},
	{"unregister", (PyCFunction)store_unregister, METH_VARARGS, "unregister(name)"},
	{"get_replica", (PyCFunction)store_get_replica, METH_VARARGS,
	 "get_replica(name, addrs, sizes)"},
	{"delete_replica", (PyCFunction)store_delete_replica, METH_VARARGS, "delete_replica(name)"},
	{"list", (PyCFunction)store_list, METH_VARARGS,
	 "list(prefix='') -> [(name, max_shard_size, total_size, size_list)]"},
	{NULL, NULL, 0, NULL},
};

static PyTypeObject store_type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake._p2p_store.Store",
	.tp_basicsize = sizeof(struct store_obj),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Store(metadata_uri, local_server_name, te_metadata_uri=None, protocol=None)",
	.tp_methods = store_methods,
	.tp_init = (initproc)store_init,
	.tp_new = PyType_GenericNew,
	.tp_dealloc = (destructor)store_dealloc,
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT,
	"mooncake._p2p_store",
	"binding of <mooncake/p2p_store.h>",
	-1,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
};

PyMODINIT_FUNC PyInit__p2p_store(void);
PyMODINIT_FUNC PyInit__p2p_store(void)
{
	PyObject *m;

	if (PyType_Ready(&store_type) < 0)
		return NULL;
	m = PyModule_Create(&module);
	if (!m)
		return NULL;
	p2p_error = PyErr_NewException("mooncake._p2p_store.Error", NULL, NULL);
	Py_INCREF(&store_type);
	if (!p2p_error || PyModule_AddObject(m, "Error", p2p_error) < 0 ||
	    PyModule_AddObject(m, "Store", (PyObject *)&store_type) < 0 ||
	    PyModule_AddIntConstant(m, "MIN_ATTEMPTS", MC_P2P_MIN_ATTEMPTS) < 0 ||
	    PyModule_AddIntConstant(m, "PULL_ROUNDS", MC_P2P_PULL_ROUNDS) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	Py_INCREF(p2p_error);
	return m;
}
