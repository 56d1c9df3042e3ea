/*
 * python/pyargs.h - argument parsing shared by the two extension modules
 * (engine.c, and store.c with the store_*.c files): FASTCALL vectors
 * spread over named slots, str arguments, ints and lists.  Static inline
 * functions: each file that includes this gets its own copy of what it
 * uses, and a file that uses only some of them is not warned about the
 * rest.
 *
 * The two modules differ in one rule, kept as each was written: where an
 * int is expected, mooncake.engine takes True and False (as the pybind11
 * casters of upstream's engine do), and mooncake.store refuses them with
 * a TypeError.  A file of the engine defines PYARGS_BOOL_IS_INT before it
 * includes this header.
 */
#ifndef MC_PYTHON_PYARGS_H
#define MC_PYTHON_PYARGS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#ifdef PYARGS_BOOL_IS_INT
#define PYARGS_REFUSES_BOOL(o) false
#else
#define PYARGS_REFUSES_BOOL(o) PyBool_Check(o)
#endif

struct argspec {
	const char *fname;
	const char *const *names; /* keyword names; NULL = positional-only */
	int nreq;		  /* required arguments */
	int nmax;		  /* all arguments */
};

/* Spread a FASTCALL argument vector over out[0..nmax): positional first,
 * then keywords by name.  Missing optional arguments stay NULL. */
static inline int parse_args(const struct argspec *s, PyObject *const *args, Py_ssize_t nargs,
			     PyObject *kwnames, PyObject **out)
{
	Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;

	for (int i = 0; i < s->nmax; i++)
		out[i] = NULL;
	if (nargs > s->nmax) {
		PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)",
			     s->fname, s->nmax, nargs + nkw);
		return -1;
	}
	for (Py_ssize_t i = 0; i < nargs; i++)
		out[i] = args[i];
	if (nkw && !s->names) {
		PyErr_Format(PyExc_TypeError, "%s() takes no keyword arguments", s->fname);
		return -1;
	}
	for (Py_ssize_t k = 0; k < nkw; k++) {
		PyObject *key = PyTuple_GET_ITEM(kwnames, k);
		int j;
		for (j = 0; j < s->nmax; j++)
			if (PyUnicode_CompareWithASCIIString(key, s->names[j]) == 0)
				break;
		if (j == s->nmax) {
			PyErr_Format(PyExc_TypeError,
				     "%s() got an unexpected keyword argument '%U'", s->fname, key);
			return -1;
		}
		if (out[j]) {
			PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'",
				     s->fname, s->names[j]);
			return -1;
		}
		out[j] = args[nargs + k];
	}
	for (int i = 0; i < s->nreq; i++) {
		if (!out[i]) {
			if (s->names)
				PyErr_Format(PyExc_TypeError,
					     "%s() missing required argument '%s' (pos %d)",
					     s->fname, s->names[i], i + 1);
			else
				PyErr_Format(
					PyExc_TypeError,
					"%s() takes %d positional arguments but %zd were given",
					s->fname, s->nreq, nargs);
			return -1;
		}
	}
	return 0;
}

/* str (UTF-8) or bytes; the pointer is borrowed from o. */
static inline int arg_str(PyObject *o, const char *fname, const char *what, const char **out)
{
	const char *s;
	Py_ssize_t n;

	if (PyUnicode_Check(o)) {
		s = PyUnicode_AsUTF8AndSize(o, &n);
		if (!s)
			return -1;
	} else if (PyBytes_Check(o)) {
		s = PyBytes_AS_STRING(o);
		n = PyBytes_GET_SIZE(o);
	} else {
		PyErr_Format(PyExc_TypeError, "%s(): %s must be str, not %.100s", fname, what,
			     Py_TYPE(o)->tp_name);
		return -1;
	}
	if ((size_t)n != strlen(s)) {
		PyErr_Format(PyExc_ValueError, "%s(): %s contains a NUL character", fname, what);
		return -1;
	}
	*out = s;
	return 0;
}

/* A non-negative int below 2**64 (anything with __index__).  Floats,
 * strings and out-of-range values are TypeErrors. */
static inline int arg_u64(PyObject *o, const char *fname, const char *what, uint64_t *out)
{
	unsigned long long v;
	PyObject *idx;

	if (PYARGS_REFUSES_BOOL(o) || !PyIndex_Check(o)) {
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

/* An int that fits a C long (anything with __index__); a TypeError else. */
static inline int arg_long(PyObject *o, const char *fname, const char *what, long *out)
{
	long v;
	if (PYARGS_REFUSES_BOOL(o) || !PyIndex_Check(o)) {
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

/* A bool argument (o may be NULL: missing, def), taken as upstream's
 * pybind11 caster takes it: True, False, None (false), or an object whose
 * type has __bool__ as a number (int, float, numpy.bool_); anything else
 * (str, list, object()) is a TypeError, never a truth value: remove_all
 * with a str must not remove every key. */
static inline int arg_bool(PyObject *o, const char *fname, const char *what, bool def, bool *out)
{
	PyNumberMethods *nm;
	int v;

	if (!o) {
		*out = def;
		return 0;
	}
	if (o == Py_True || o == Py_False || o == Py_None) {
		*out = o == Py_True;
		return 0;
	}
	nm = Py_TYPE(o)->tp_as_number;
	if (!nm || !nm->nb_bool) {
		PyErr_Format(PyExc_TypeError, "%s(): %s must be a bool, not %.100s", fname, what,
			     Py_TYPE(o)->tp_name);
		return -1;
	}
	v = nm->nb_bool(o);
	if (v < 0)
		return -1;
	*out = v;
	return 0;
}

/* A list-like argument (not str/bytes; o may be NULL: missing) as a new
 * tuple, which holds references to the items for as long as the call runs,
 * whatever the caller does to its list meanwhile.  items names what the
 * list holds in the TypeError ("ints": "a list of ints"), or is NULL. */
static inline PyObject *arg_seq(PyObject *o, const char *fname, const char *what, const char *items)
{
	if (!o || PyUnicode_Check(o) || PyBytes_Check(o) || PyByteArray_Check(o) ||
	    !PySequence_Check(o)) {
		PyErr_Format(PyExc_TypeError, "%s(): %s must be a list%s%s, not %.100s", fname,
			     what, items ? " of " : "", items ? items : "",
			     o ? Py_TYPE(o)->tp_name : "nothing");
		return NULL;
	}
	return PySequence_Tuple(o);
}

/* ---- methods and names written in Python ------------------------------------------ */

/* Calls module.name(self, *args, **kw): a method of an extension type whose
 * body is a Python function taking the object first.  The module is
 * imported at the first call (the import system caches it). */
static inline PyObject *py_forward(const char *module, const char *name, PyObject *self,
				   PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
	Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
	PyObject *m, *f, *r, **v;

	m = PyImport_ImportModule(module);
	if (!m)
		return NULL;
	f = PyObject_GetAttrString(m, name);
	Py_DECREF(m);
	if (!f)
		return NULL;
	v = PyMem_Malloc((size_t)(nargs + nkw + 1) * sizeof(*v));
	if (!v) {
		Py_DECREF(f);
		return PyErr_NoMemory();
	}
	v[0] = self;
	if (nargs + nkw)
		memcpy(v + 1, args, (size_t)(nargs + nkw) * sizeof(*v));
	r = PyObject_Vectorcall(f, v, (size_t)nargs + 1, kwnames);
	PyMem_Free(v);
	Py_DECREF(f);
	return r;
}

/* Adds the names of a pure-Python module to m. */
static inline int add_from(PyObject *m, const char *module, const char *const *names)
{
	PyObject *src = PyImport_ImportModule(module);
	int rc = 0;
	if (!src)
		return -1;
	for (; rc == 0 && *names; names++) {
		PyObject *v = PyObject_GetAttrString(src, *names);
		rc = v ? PyModule_AddObjectRef(m, *names, v) : -1;
		Py_XDECREF(v);
	}
	Py_DECREF(src);
	return rc;
}

#endif
