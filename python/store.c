/* placeholder: mooncake.store is being written this session */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static struct PyModuleDef store_module = {PyModuleDef_HEAD_INIT, "mooncake.store", NULL, -1, NULL};

PyMODINIT_FUNC PyInit_store(void);
PyMODINIT_FUNC PyInit_store(void)
{
	PyErr_SetString(PyExc_ImportError, "mooncake.store is not built yet");
	return NULL;
}
