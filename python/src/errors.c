// SPDX-License-Identifier: MIT
/*
 * nelssa.Error and the integer converters.  Every library call returns 0
 * or a negative errno and keeps its words for nelssa_client_error(); the
 * exception carries both, as OSError does for a system call, so callers
 * test e.errno against the errno module like any other I/O failure.
 */
#include "nelssa_py.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

PyObject *npy_error;

PyDoc_STRVAR(error_doc,
"A NELSSA library call failed.\n"
"\n"
"A subclass of OSError: ``errno`` is the positive errno the library\n"
"returned (errno.ECONNRESET, errno.ETIMEDOUT, errno.ENOSPC, ...) and\n"
"``strerror`` the library's own words for it (nelssa_client_error() for\n"
"a connection, else the call's description).");

int npy_errors_init(PyObject *m)
{
	npy_error = PyErr_NewExceptionWithDoc("nelssa.Error", error_doc, PyExc_OSError, NULL);
	if (!npy_error)
		return -1;
	Py_INCREF(npy_error);
	if (PyModule_AddObject(m, "Error", npy_error) < 0) {
		Py_DECREF(npy_error);
		return -1;
	}
	return 0;
}

PyObject *npy_raise(int neg_errno, const char *msg)
{
	int err = neg_errno < 0 ? -neg_errno : neg_errno;
	PyObject *exc;

	if (!msg || !*msg)
		msg = strerror(err);
	/* OSError(errno, strerror) fills both attributes. */
	exc = PyObject_CallFunction(npy_error, "is", err, msg);
	if (exc) {
		PyErr_SetObject(npy_error, exc);
		Py_DECREF(exc);
	}
	return NULL;
}

PyObject *npy_raisef(int neg_errno, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return npy_raise(neg_errno, msg);
}

static int conv_range(PyObject *o, unsigned long long max, unsigned long long *v)
{
	if (!PyLong_Check(o)) {
		/* bool is an int subclass and passes; floats and strings do not. */
		PyErr_Format(PyExc_TypeError, "expected an integer, got %.100s",
			     Py_TYPE(o)->tp_name);
		return 0;
	}
	*v = PyLong_AsUnsignedLongLong(o);
	if (PyErr_Occurred() || *v > max) {
		PyErr_Clear();
		PyErr_Format(PyExc_OverflowError, "integer out of range [0, %llu]", max);
		return 0;
	}
	return 1;
}

int npy_conv_u8(PyObject *o, void *out)
{
	unsigned long long v;

	if (!conv_range(o, UINT8_MAX, &v))
		return 0;
	*(uint8_t *)out = (uint8_t)v;
	return 1;
}

int npy_conv_u16(PyObject *o, void *out)
{
	unsigned long long v;

	if (!conv_range(o, UINT16_MAX, &v))
		return 0;
	*(uint16_t *)out = (uint16_t)v;
	return 1;
}

int npy_conv_u32(PyObject *o, void *out)
{
	unsigned long long v;

	if (!conv_range(o, UINT32_MAX, &v))
		return 0;
	*(uint32_t *)out = (uint32_t)v;
	return 1;
}

int npy_conv_u64(PyObject *o, void *out)
{
	unsigned long long v;

	if (!conv_range(o, UINT64_MAX, &v))
		return 0;
	*(uint64_t *)out = (uint64_t)v;
	return 1;
}
