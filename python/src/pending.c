// SPDX-License-Identifier: MIT
/*
 * nelssa.Pending: a step sent with Client.step_send().  It owns the
 * output arrays (their views stay held, so nobody resizes them under the
 * library) and the library's handle, which it must spend exactly once:
 * a handle the library has spent is reused for the next step sent, so
 * cancelling it twice would cancel someone else's step.
 */
#include "nelssa_py.h"

#include <errno.h>

#include <nelssa/client.h>

enum { P_FLIGHT, P_DONE, P_FAILED, P_CANCELLED };

struct npy_pending {
	PyObject_HEAD
	struct npy_client *client;
	struct nelssa_step_pending *p;
	int state;
	PyObject *o, *lse, *err;	/* err: the exception a failed poll raised */
	struct npy_buf ob, lb;
	struct nelssa_step_times t;
};

static PyTypeObject pending_type;

PyObject *npy_pending_new(struct npy_client *c, struct nelssa_step_pending *p, PyObject *o,
			  PyObject *lse, struct npy_buf *ob, struct npy_buf *lb)
{
	struct npy_pending *self = PyObject_New(struct npy_pending, &pending_type);

	if (!self) {
		npy_buf_release(ob);
		npy_buf_release(lb);
		return NULL;
	}
	self->client = (struct npy_client *)Py_NewRef((PyObject *)c);
	self->p = p;
	self->state = P_FLIGHT;
	self->o = Py_NewRef(o);
	self->lse = Py_NewRef(lse);
	self->err = NULL;
	self->ob = *ob;
	self->lb = *lb;
	self->t = (struct nelssa_step_times){ 0 };
	return (PyObject *)self;
}

static void unpin(struct npy_pending *self)
{
	npy_buf_release(&self->ob);
	npy_buf_release(&self->lb);
}

static void pending_dealloc(struct npy_pending *self)
{
	PyObject *et, *ev, *tb;

	/* Dropped while an exception unwinds: keep that one. */
	PyErr_Fetch(&et, &ev, &tb);
	/*
	 * Dropped in flight: give the handle back, or its slot stays taken.
	 * The lock may mean a wait for another thread's call (GIL released).
	 */
	if (self->state == P_FLIGHT && npy_client_is_open(self->client) &&
	    npy_client_enter(self->client) == 0) {
		nelssa_client_step_cancel(npy_client_raw(self->client), self->p);
		npy_client_leave(self->client);
	}
	PyErr_Clear();
	PyErr_Restore(et, ev, tb);
	unpin(self);
	Py_XDECREF(self->o);
	Py_XDECREF(self->lse);
	Py_XDECREF(self->err);
	Py_XDECREF(self->client);
	PyObject_Free(self);
}

/* The step is over for good; raises the stored failure or a state error. */
static PyObject *not_done(struct npy_pending *self)
{
	if (self->state == P_FAILED && self->err) {
		PyErr_SetObject((PyObject *)Py_TYPE(self->err), self->err);
		return NULL;
	}
	PyErr_SetString(PyExc_ValueError, self->state == P_CANCELLED ?
			"the step was cancelled" : "the step's Client was closed");
	return NULL;
}

PyDoc_STRVAR(poll_doc,
"poll(timeout_ms=0) -> bool\n--\n\n"
"Collect the step: True once its outputs are in place (then result()\n"
"returns them), False when the reply is not back within timeout_ms (0:\n"
"just look; poll again later).  Raises nelssa.Error when the step failed\n"
"(as Client.step() would), and again on every later poll.  The GIL is\n"
"released while it waits.");

static PyObject *pending_poll(struct npy_pending *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "timeout_ms", NULL };
	uint32_t timeout_ms = 0;
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O&:poll", kwlist, npy_conv_u32, &timeout_ms))
		return NULL;
	if (self->state == P_DONE)
		Py_RETURN_TRUE;
	if (self->state == P_FLIGHT && !npy_client_is_open(self->client)) {
		/* close() freed the handle with the connection. */
		self->state = P_CANCELLED;
		unpin(self);
		PyErr_SetString(PyExc_ValueError, "the step's Client was closed");
		return NULL;
	}
	if (self->state != P_FLIGHT)
		return not_done(self);
	if (npy_client_enter(self->client) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	ret = nelssa_client_step_poll(npy_client_raw(self->client), self->p, timeout_ms, &self->t);
	Py_END_ALLOW_THREADS
	if (ret == -EAGAIN) {
		npy_client_leave(self->client);
		Py_RETURN_FALSE;
	}
	/* Either way the library spent the handle. */
	self->state = ret ? P_FAILED : P_DONE;
	unpin(self);
	if (ret) {
		PyObject *type, *tb;

		npy_client_raise(self->client, ret);
		npy_client_leave(self->client);
		/* Keep the exception to raise again on a later poll. */
		PyErr_Fetch(&type, &self->err, &tb);
		PyErr_NormalizeException(&type, &self->err, &tb);
		Py_XINCREF(self->err);
		PyErr_Restore(type, self->err, tb);
		return NULL;
	}
	npy_client_leave(self->client);
	Py_RETURN_TRUE;
}

PyDoc_STRVAR(cancel_doc,
"cancel()\n--\n\n"
"Give up on the step: its reply, if it comes, is dropped.  A step\n"
"already collected, failed or cancelled is left as it is.");

static PyObject *pending_cancel(struct npy_pending *self, PyObject *unused)
{
	(void)unused;
	if (self->state != P_FLIGHT)
		Py_RETURN_NONE;
	if (npy_client_is_open(self->client)) {
		if (npy_client_enter(self->client) < 0)
			return NULL;
		nelssa_client_step_cancel(npy_client_raw(self->client), self->p);
		npy_client_leave(self->client);
	}
	self->state = P_CANCELLED;
	unpin(self);
	Py_RETURN_NONE;
}

PyDoc_STRVAR(result_doc,
"result() -> (o, lse)\n--\n\n"
"The outputs of a step poll() found done: float32 (items, group,\n"
"head_dim) and (items, group).  Raises ValueError before that.");

static PyObject *pending_result(struct npy_pending *self, PyObject *unused)
{
	(void)unused;
	if (self->state == P_DONE)
		return PyTuple_Pack(2, self->o, self->lse);
	if (self->state == P_FLIGHT) {
		PyErr_SetString(PyExc_ValueError, "the step is still in flight: poll() first");
		return NULL;
	}
	return not_done(self);
}

static PyObject *pending_get_done(struct npy_pending *self, void *closure)
{
	(void)closure;
	return PyBool_FromLong(self->state == P_DONE);
}

static PyObject *pending_get_state(struct npy_pending *self, void *closure)
{
	static const char *const names[] = { "in flight", "done", "failed", "cancelled" };

	(void)closure;
	return PyUnicode_FromString(names[self->state]);
}

static PyObject *pending_get_times(struct npy_pending *self, void *closure)
{
	(void)closure;
	if (self->state != P_DONE)
		Py_RETURN_NONE;
	return Py_BuildValue("{sKsKsKsKsK}", "rtt_ns", (unsigned long long)self->t.rtt,
			     "recv_ns", (unsigned long long)self->t.recv,
			     "dispatch_ns", (unsigned long long)self->t.dispatch,
			     "device_ns", (unsigned long long)self->t.device,
			     "aggregate_ns", (unsigned long long)self->t.aggregate);
}

static PyMethodDef pending_methods[] = {
	{ "poll", (PyCFunction)(void (*)(void))pending_poll, METH_VARARGS | METH_KEYWORDS,
	  poll_doc },
	{ "cancel", (PyCFunction)pending_cancel, METH_NOARGS, cancel_doc },
	{ "result", (PyCFunction)pending_result, METH_NOARGS, result_doc },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef pending_getset[] = {
	{ "done", (getter)pending_get_done, NULL,
	  PyDoc_STR("True once poll() collected the outputs."), NULL },
	{ "state", (getter)pending_get_state, NULL,
	  PyDoc_STR("'in flight', 'done', 'failed' or 'cancelled'."), NULL },
	{ "times", (getter)pending_get_times, NULL,
	  PyDoc_STR("The step's time breakdown in ns once done, else None."), NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

PyDoc_STRVAR(pending_doc,
"A step in flight, from Client.step_send(); not created directly.\n"
"\n"
"poll() collects it, result() returns (o, lse), cancel() gives up on it.\n"
"Dropping one in flight cancels it.");

static PyTypeObject pending_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "nelssa.Pending",
	.tp_basicsize = sizeof(struct npy_pending),
	.tp_dealloc = (destructor)pending_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = pending_doc,
	.tp_methods = pending_methods,
	.tp_getset = pending_getset,
};

int npy_pending_init(PyObject *m)
{
	if (PyType_Ready(&pending_type) < 0)
		return -1;
	Py_INCREF(&pending_type);
	if (PyModule_AddObject(m, "Pending", (PyObject *)&pending_type) < 0) {
		Py_DECREF(&pending_type);
		return -1;
	}
	return 0;
}
