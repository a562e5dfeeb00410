// SPDX-License-Identifier: MIT
/*
 * nelssa._nelssa: the CPython extension over the GPU-node client library.
 * A C extension rather than cffi so that the buffer protocol, releasing
 * the GIL around each blocking call and exceptions carrying the library's
 * errno all live in one place, built by meson against Debian's
 * python3-dev (Documentation/python.rst).
 */
#include "nelssa_py.h"

#include <nelssa/client.h>
#include <nelssa/sparse.h>
#include <nelssa/version.h>

PyDoc_STRVAR(version_doc,
"version() -> str\n--\n\n"
"The running NELSSA libraries' version, \"MAJOR.MINOR.PATCH\"\n"
"(nelssa_version()).");

static PyObject *py_version(PyObject *mod, PyObject *unused)
{
	(void)mod;
	(void)unused;
	return PyUnicode_FromString(nelssa_version());
}

static PyMethodDef module_methods[] = {
	{ "version", py_version, METH_NOARGS, version_doc },
	{ NULL, NULL, 0, NULL },
};

PyDoc_STRVAR(module_doc,
"The C extension behind the nelssa package; import nelssa instead.");

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT,
	.m_name = "nelssa._nelssa",
	.m_doc = module_doc,
	.m_size = -1,
	.m_methods = module_methods,
};

static int add_constants(PyObject *m)
{
	static const struct {
		const char *name;
		long value;
	} k[] = {
		{ "KV_BF16", NELSSA_KV_BF16 },
		{ "KV_FP16", NELSSA_KV_FP16 },
		{ "KV_FP8_E4M3", NELSSA_KV_FP8_E4M3 },
		{ "KV_INT8", NELSSA_KV_INT8 },
		{ "PLACE_HEADS", NELSSA_PLACE_HEADS },
		{ "PLACE_CLUSTERS", NELSSA_PLACE_CLUSTERS },
		{ "ATTN_MAX_HEAD_DIM", NELSSA_ATTN_MAX_HEAD_DIM },
		{ "ATTN_MAX_GROUP", NELSSA_ATTN_MAX_GROUP },
		{ "ATTN_BF16_DOTS", NELSSA_ATTN_BF16_DOTS },
		{ "KV_PACKED", NELSSA_KV_PACKED },
		{ "KV_ADJACENT", NELSSA_KV_ADJACENT },
	};

	for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++)
		if (PyModule_AddIntConstant(m, k[i].name, k[i].value) < 0)
			return -1;
	return 0;
}

PyMODINIT_FUNC PyInit__nelssa(void);

PyMODINIT_FUNC PyInit__nelssa(void)
{
	PyObject *m = PyModule_Create(&module_def);

	if (!m)
		return NULL;
	if (npy_errors_init(m) < 0 || add_constants(m) < 0 || npy_client_init(m) < 0 ||
	    npy_pending_init(m) < 0 || npy_index_init(m) < 0 || npy_algos_init(m) < 0 ||
	    npy_logfn_init(m) < 0 || npy_policy_init(m) < 0 || npy_placement_init(m) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
