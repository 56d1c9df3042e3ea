/*
 * python/pyargs.h - argument parsing shared by the two extension modules
 * (engine.c, and store.c with the store_*.c files): FASTCALL vectors
 * spread over named slots, and str arguments.  Static inline functions:
 * each file that includes this gets its own copy of what it uses, and a
 * file that uses only some of them is not warned about the rest.
 */
#ifndef MC_PYTHON_PYARGS_H
#define MC_PYTHON_PYARGS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

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

#endif
