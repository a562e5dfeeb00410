// SPDX-License-Identifier: MIT
/*
 * nelssa.Placer: placement of long requests across a cluster's NELSSA
 * nodes (<nelssa/placement.h>) for Python serving engines, with the C
 * client's policy.  Calls that may talk to etcd (refresh, place) run with
 * the GIL released, under the object's own lock.
 */
#include "nelssa_py.h"

#include <errno.h>

#include <nelssa/placement.h>

struct npy_placer {
	PyObject_HEAD
	struct nelssa_placer *p;
	PyThread_type_lock lock;
};

static int placer_enter(struct npy_placer *o)
{
	if (!o->lock) {
		PyErr_SetString(PyExc_ValueError, "nelssa.Placer not initialised");
		return -1;
	}
	npy_lock(o->lock);
	if (!o->p) {
		PyThread_release_lock(o->lock);
		PyErr_SetString(PyExc_ValueError, "operation on a closed nelssa.Placer");
		return -1;
	}
	return 0;
}

static int placer_init(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "etcd", "cluster", "token_bytes", "max_fill", "refresh_ms",
				  "timeout_ms", "user", "password", "cacert", "cert", "key", NULL };
	struct npy_placer *o = (struct npy_placer *)self;
	struct nelssa_placer_opts opts = { .cluster = "default" };
	struct nelssa_placer *p;
	int rc;

	if (o->p) {
		PyErr_SetString(PyExc_ValueError, "nelssa.Placer initialised twice");
		return -1;
	}
	if (!PyArg_ParseTupleAndKeywords(args, kw, "s|$sO&dO&O&zzzzz", kwlist, &opts.etcd,
					 &opts.cluster, npy_conv_u64, &opts.token_bytes,
					 &opts.max_fill, npy_conv_u32, &opts.refresh_ms,
					 npy_conv_u32, &opts.timeout_ms, &opts.user, &opts.password,
					 &opts.cacert, &opts.cert, &opts.key))
		return -1;
	if (!opts.token_bytes) {
		PyErr_SetString(PyExc_ValueError, "token_bytes: the device bytes of one token, > 0");
		return -1;
	}
	if (!(opts.max_fill >= 0 && opts.max_fill <= 1)) {
		PyErr_SetString(PyExc_ValueError, "max_fill: a share of a node's memory, 0 to 1");
		return -1;
	}
	if (!o->lock) {
		o->lock = PyThread_allocate_lock();
		if (!o->lock) {
			PyErr_NoMemory();
			return -1;
		}
	}
	Py_BEGIN_ALLOW_THREADS
	rc = nelssa_placer_open(&opts, &p);
	Py_END_ALLOW_THREADS
	if (rc) {
		npy_raisef(rc, rc == -EINVAL ? "etcd endpoints \"%s\" or cluster \"%s\" malformed" :
			   "cannot make a placer for \"%s\" (cluster \"%s\")", opts.etcd,
			   opts.cluster);
		return -1;
	}
	o->p = p;
	return 0;
}

static void placer_dealloc(PyObject *self)
{
	struct npy_placer *o = (struct npy_placer *)self;

	nelssa_placer_close(o->p);
	if (o->lock)
		PyThread_free_lock(o->lock);
	Py_TYPE(self)->tp_free(self);
}

static PyObject *placer_close(PyObject *self, PyObject *unused)
{
	struct npy_placer *o = (struct npy_placer *)self;

	(void)unused;
	if (o->lock) {
		npy_lock(o->lock);
		nelssa_placer_close(o->p);
		o->p = NULL;
		PyThread_release_lock(o->lock);
	}
	Py_RETURN_NONE;
}

static PyObject *placer_refresh(PyObject *self, PyObject *unused)
{
	struct npy_placer *o = (struct npy_placer *)self;
	int rc;

	(void)unused;
	if (placer_enter(o))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = nelssa_placer_refresh(o->p);
	Py_END_ALLOW_THREADS
	if (rc) {
		PyObject *r = npy_raisef(rc, "registry: %s", nelssa_placer_error(o->p));

		PyThread_release_lock(o->lock);
		return r;
	}
	PyThread_release_lock(o->lock);
	Py_RETURN_NONE;
}

static PyObject *placer_sync(PyObject *self, PyObject *unused)
{
	struct npy_placer *o = (struct npy_placer *)self;
	int rc;

	(void)unused;
	if (placer_enter(o))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = nelssa_placer_sync(o->p);
	Py_END_ALLOW_THREADS
	PyThread_release_lock(o->lock);
	return PyBool_FromLong(rc);
}

static PyObject *node_dict(const struct nelssa_placer_node *n)
{
	return Py_BuildValue("{s:s,s:s,s:H,s:H,s:I,s:K,s:K,s:K,s:K,s:K,s:I,s:O,s:O,s:O}",
			     "id", n->id, "host", n->host, "port", n->port,
			     "data_port", n->data_port, "devices", n->devices,
			     "kv_bytes_total", (unsigned long long)n->kv_bytes_total,
			     "cap_tokens", (unsigned long long)n->cap_tokens,
			     "used_tokens", (unsigned long long)n->used_tokens,
			     "placed_tokens", (unsigned long long)n->placed_tokens,
			     "step_us", (unsigned long long)n->step_us,
			     "steps_in_flight", n->steps_in_flight,
			     "listed", n->listed ? Py_True : Py_False,
			     "excluded", n->excluded ? Py_True : Py_False,
			     "full", n->full ? Py_True : Py_False);
}

static PyObject *placer_nodes(PyObject *self, PyObject *unused)
{
	struct npy_placer *o = (struct npy_placer *)self;
	PyObject *list;

	(void)unused;
	if (placer_enter(o))
		return NULL;
	list = PyList_New(0);
	for (uint32_t i = 0; list && i < nelssa_placer_count(o->p); i++) {
		struct nelssa_placer_node n;
		PyObject *d;

		nelssa_placer_node(o->p, i, &n);
		d = node_dict(&n);
		if (!d || PyList_Append(list, d) < 0) {
			Py_XDECREF(d);
			Py_CLEAR(list);
			break;
		}
		Py_DECREF(d);
	}
	PyThread_release_lock(o->lock);
	return list;
}

static PyObject *placer_place(PyObject *self, PyObject *args)
{
	struct npy_placer *o = (struct npy_placer *)self;
	uint64_t tokens;
	uint32_t node = 0;
	int rc;

	if (!PyArg_ParseTuple(args, "O&", npy_conv_u64, &tokens))
		return NULL;
	if (placer_enter(o))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = nelssa_placer_place(o->p, tokens, &node);
	Py_END_ALLOW_THREADS
	if (rc) {
		PyObject *r = npy_raisef(rc, "%s", rc == -EINVAL ? "tokens must be > 0" :
					 nelssa_placer_error(o->p));

		PyThread_release_lock(o->lock);
		return r;
	}
	PyThread_release_lock(o->lock);
	return PyLong_FromUnsignedLong(node);
}

/* The methods taking (node, u64) and returning nothing. */
static PyObject *node_call(PyObject *self, PyObject *args,
			   int (*fn)(struct nelssa_placer *, uint32_t, uint64_t), const char *what)
{
	struct npy_placer *o = (struct npy_placer *)self;
	uint32_t node;
	uint64_t v;
	int rc;

	if (!PyArg_ParseTuple(args, "O&O&", npy_conv_u32, &node, npy_conv_u64, &v))
		return NULL;
	if (placer_enter(o))
		return NULL;
	rc = fn(o->p, node, v);
	PyThread_release_lock(o->lock);
	if (rc)
		return npy_raisef(rc, "%s: %s", what, rc == -ENOENT ? "no such node or session" :
				  rc == -ENOSPC ? "16 sessions on that node already" :
				  "more than placed there");
	Py_RETURN_NONE;
}

static PyObject *placer_release(PyObject *self, PyObject *args)
{
	return node_call(self, args, nelssa_placer_release, "release");
}

static PyObject *placer_own(PyObject *self, PyObject *args)
{
	return node_call(self, args, nelssa_placer_own_session, "own_session");
}

static PyObject *placer_disown(PyObject *self, PyObject *args)
{
	return node_call(self, args, nelssa_placer_disown_session, "disown_session");
}

/* The methods taking a node and marking it (dead, full). */
static PyObject *node_mark(PyObject *self, PyObject *args,
			   int (*fn)(struct nelssa_placer *, uint32_t), const char *what)
{
	struct npy_placer *o = (struct npy_placer *)self;
	uint32_t node;
	int rc;

	if (!PyArg_ParseTuple(args, "O&", npy_conv_u32, &node))
		return NULL;
	if (placer_enter(o))
		return NULL;
	rc = fn(o->p, node);
	PyThread_release_lock(o->lock);
	if (rc)
		return npy_raisef(rc, "%s: no node %u", what, node);
	Py_RETURN_NONE;
}

static PyObject *placer_exclude(PyObject *self, PyObject *args)
{
	return node_mark(self, args, nelssa_placer_exclude, "exclude");
}

static PyObject *placer_full(PyObject *self, PyObject *args)
{
	return node_mark(self, args, nelssa_placer_full, "full");
}

static PyObject *placer_find(PyObject *self, PyObject *args)
{
	struct npy_placer *o = (struct npy_placer *)self;
	const char *id;
	uint32_t i;
	int rc;

	if (!PyArg_ParseTuple(args, "s", &id))
		return NULL;
	if (placer_enter(o))
		return NULL;
	rc = nelssa_placer_find(o->p, id, &i);
	PyThread_release_lock(o->lock);
	if (rc)
		return npy_raisef(rc, "no node '%s' known", id);
	return PyLong_FromUnsignedLong(i);
}

static PyObject *placer_age(PyObject *self, void *unused)
{
	struct npy_placer *o = (struct npy_placer *)self;
	uint64_t age;

	(void)unused;
	if (placer_enter(o))
		return NULL;
	age = nelssa_placer_view_age_ms(o->p);
	PyThread_release_lock(o->lock);
	if (age == UINT64_MAX)
		Py_RETURN_NONE;
	return PyLong_FromUnsignedLongLong(age);
}

static PyObject *placer_watching(PyObject *self, void *unused)
{
	struct npy_placer *o = (struct npy_placer *)self;
	int up;

	(void)unused;
	if (placer_enter(o))
		return NULL;
	up = nelssa_placer_watching(o->p);
	PyThread_release_lock(o->lock);
	return PyBool_FromLong(up);
}

static PyObject *placer_enter_ctx(PyObject *self, PyObject *unused)
{
	(void)unused;
	Py_INCREF(self);
	return self;
}

static PyObject *placer_exit_ctx(PyObject *self, PyObject *args)
{
	(void)args;
	return placer_close(self, NULL);
}

static PyMethodDef placer_methods[] = {
	{ "refresh", placer_refresh, METH_NOARGS, "Read the registry now; raises when etcd cannot be read (the last view stays)." },
	{ "sync", placer_sync, METH_NOARGS, "Read the registry if the watch saw a change or the view is older than refresh_ms; True when it was read." },
	{ "nodes", placer_nodes, METH_NOARGS, "The nodes known, as dicts, in a stable order (list index = node index)." },
	{ "place", placer_place, METH_VARARGS, "place(tokens) -> node index; raises nelssa.Error ENOSPC when no node has room." },
	{ "release", placer_release, METH_VARARGS, "release(node, tokens): tokens placed there no longer held." },
	{ "own_session", placer_own, METH_VARARGS, "own_session(node, session): a session of ours on that node." },
	{ "disown_session", placer_disown, METH_VARARGS, "disown_session(node, session): closed or lost." },
	{ "exclude", placer_exclude, METH_VARARGS, "exclude(node): found dead; not placed on until registered again." },
	{ "full", placer_full, METH_VARARGS, "full(node): refused room; skipped until its record shows more free memory." },
	{ "find", placer_find, METH_VARARGS, "find(id) -> node index." },
	{ "close", placer_close, METH_NOARGS, "Close (also on leaving a with block)." },
	{ "__enter__", placer_enter_ctx, METH_NOARGS, NULL },
	{ "__exit__", placer_exit_ctx, METH_VARARGS, NULL },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef placer_getset[] = {
	{ "view_age_ms", placer_age, NULL, "ms since the registry was read (None: never)", NULL },
	{ "watching", placer_watching, NULL, "whether the watch on the registry is made and running", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject placer_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "nelssa.Placer",
	.tp_basicsize = sizeof(struct npy_placer),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Placer(etcd, *, cluster='default', token_bytes, max_fill=0.9, refresh_ms=500,\n"
		  "       timeout_ms=2000, user=None, password=None, cacert=None, cert=None, key=None)\n"
		  "Places long requests across the NELSSA nodes an etcd registry lists\n"
		  "(Documentation/cluster.rst, Placement).",
	.tp_new = PyType_GenericNew,
	.tp_init = placer_init,
	.tp_dealloc = placer_dealloc,
	.tp_methods = placer_methods,
	.tp_getset = placer_getset,
};

int npy_placement_init(PyObject *m)
{
	return PyModule_AddType(m, &placer_type);
}
