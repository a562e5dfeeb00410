// SPDX-License-Identifier: MIT
/*
 * nelssa.set_log_fn(): the libraries' messages to a Python callable.  The
 * library calls its hook on the thread that failed, which is inside a
 * call that released the GIL, so the trampoline takes the GIL itself
 * (PyGILState_Ensure() also works when the thread already holds it).
 * The callable is read under the GIL on every message, so replacing it
 * while another thread logs is safe.
 */
#include "nelssa_py.h"

#include <nelssa/log.h>

static PyObject *log_fn;	/* the callable, or NULL */

static void trampoline(void *ctx, int level, const char *source, const char *msg)
{
	PyGILState_STATE st;
	PyObject *fn, *r;

	(void)ctx;
	if (!Py_IsInitialized())
		return;
	st = PyGILState_Ensure();
	fn = log_fn;
	if (fn) {
		/* Keep a raised exception of the caller's: the callback must not eat it. */
		PyObject *et, *ev, *tb;

		PyErr_Fetch(&et, &ev, &tb);
		Py_INCREF(fn);
		r = PyObject_CallFunction(fn, "iss", level, source ? source : "", msg ? msg : "");
		if (!r)
			PyErr_WriteUnraisable(fn);
		Py_XDECREF(r);
		Py_DECREF(fn);
		PyErr_Restore(et, ev, tb);
	}
	PyGILState_Release(st);
}

PyDoc_STRVAR(set_log_fn_doc,
"set_log_fn(fn)\n--\n\n"
"Send the libraries' error messages to fn(level, source, message):\n"
"level a syslog number (LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG),\n"
"source 'client' or 'pnm'.  None (the default) sends them nowhere.\n"
"Process-wide.  fn runs on the thread whose call failed, with the GIL;\n"
"it must not call back into the Client whose call it reports (that\n"
"raises RuntimeError).  An exception it raises is reported as\n"
"unraisable and otherwise ignored.");

static PyObject *py_set_log_fn(PyObject *mod, PyObject *fn)
{
	PyObject *old = log_fn;

	(void)mod;
	if (fn != Py_None && !PyCallable_Check(fn)) {
		PyErr_SetString(PyExc_TypeError, "set_log_fn() takes a callable or None");
		return NULL;
	}
	log_fn = fn == Py_None ? NULL : Py_NewRef(fn);
	nelssa_set_log_fn(log_fn ? trampoline : NULL, NULL);
	Py_XDECREF(old);
	Py_RETURN_NONE;
}

static PyMethodDef log_methods[] = {
	{ "set_log_fn", (PyCFunction)py_set_log_fn, METH_O, set_log_fn_doc },
	{ NULL, NULL, 0, NULL },
};

int npy_logfn_init(PyObject *m)
{
	if (PyModule_AddIntConstant(m, "LOG_ERR", NELSSA_LOG_ERR) < 0 ||
	    PyModule_AddIntConstant(m, "LOG_WARNING", NELSSA_LOG_WARNING) < 0 ||
	    PyModule_AddIntConstant(m, "LOG_INFO", NELSSA_LOG_INFO) < 0 ||
	    PyModule_AddIntConstant(m, "LOG_DEBUG", NELSSA_LOG_DEBUG) < 0)
		return -1;
	return PyModule_AddFunctions(m, log_methods);
}
