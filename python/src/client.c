// SPDX-License-Identifier: MIT
/*
 * nelssa.Client: one connection to nelssad.  Every call that waits on the
 * network runs with the GIL released, so other Python threads go on while
 * a step is in flight.  The library's connection is not thread-safe, so
 * each Client carries a lock: two threads calling the same Client take
 * turns (correct, but serialised; threads should each use their own
 * Client).  The sessions opened through a Client are remembered with
 * their shapes, to size outputs and check arrays before anything is sent.
 */
#include "nelssa_py.h"

#include <errno.h>
#include <string.h>

#include <nelssa/client.h>

struct npy_client {
	PyObject_HEAD
	struct nelssa_client *c;
	PyThread_type_lock lock;
	unsigned long owner;	/* thread inside the library, 0 when none */
	uint32_t timeout_ms;
	PyObject *sessions;	/* {session id: (layers, q_heads, kv_heads, head_dim, kv_dtype, max_sel)} */
};

struct nelssa_client *npy_client_raw(struct npy_client *c)
{
	return c->c;
}

int npy_client_is_open(struct npy_client *c)
{
	return c->c != NULL;
}

int npy_client_enter(struct npy_client *self)
{
	if (!self->c) {
		PyErr_SetString(PyExc_ValueError, "operation on a closed nelssa.Client");
		return -1;
	}
	/* A log callback calling back in would wait for itself. */
	if (self->owner == PyThread_get_thread_ident()) {
		PyErr_SetString(PyExc_RuntimeError,
				"nelssa.Client re-entered from a call it is making (log callback?)");
		return -1;
	}
	npy_lock(self->lock);
	if (!self->c) {	/* closed by the thread we waited for */
		PyThread_release_lock(self->lock);
		PyErr_SetString(PyExc_ValueError, "operation on a closed nelssa.Client");
		return -1;
	}
	self->owner = PyThread_get_thread_ident();
	return 0;
}

void npy_client_leave(struct npy_client *self)
{
	self->owner = 0;
	PyThread_release_lock(self->lock);
}

PyObject *npy_client_raise(struct npy_client *self, int neg_errno)
{
	return npy_raise(neg_errno, self->c ? nelssa_client_error(self->c) : NULL);
}

/* Raises with the connection's words and leaves; for the error paths. */
static PyObject *fail_leave(struct npy_client *self, int ret)
{
	npy_client_raise(self, ret);
	npy_client_leave(self);
	return NULL;
}

static PyObject *client_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	struct npy_client *self = (struct npy_client *)type->tp_alloc(type, 0);

	(void)args;
	(void)kw;
	if (!self)
		return NULL;
	self->lock = PyThread_allocate_lock();
	self->sessions = PyDict_New();
	if (!self->lock || !self->sessions) {
		Py_DECREF(self);
		return PyErr_NoMemory();
	}
	return (PyObject *)self;
}

static int client_init(struct npy_client *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "host", "port", "timeout_ms", "name", NULL };
	struct nelssa_client_opts o = { 0 };
	struct nelssa_client *c = NULL;
	const char *name = NULL;
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "sO&|$O&z:Client", kwlist, &o.host,
					 npy_conv_u16, &o.port, npy_conv_u32, &o.timeout_ms,
					 &name))
		return -1;
	if (self->c) {
		PyErr_SetString(PyExc_RuntimeError, "nelssa.Client is already connected");
		return -1;
	}
	o.name = name;
	Py_BEGIN_ALLOW_THREADS
	ret = nelssa_client_connect(&o, &c);
	Py_END_ALLOW_THREADS
	if (ret) {
		npy_raisef(ret, "connect to %s:%u: %s", o.host, o.port,
			   c ? nelssa_client_error(c) : strerror(-ret));
		Py_BEGIN_ALLOW_THREADS
		nelssa_client_close(c);
		Py_END_ALLOW_THREADS
		return -1;
	}
	self->c = c;
	self->timeout_ms = o.timeout_ms;
	return 0;
}

/* Closes the connection; the caller holds the lock or is the last user. */
static void do_close(struct npy_client *self)
{
	struct nelssa_client *c = self->c;

	self->c = NULL;
	PyDict_Clear(self->sessions);
	Py_BEGIN_ALLOW_THREADS
	nelssa_client_close(c);
	Py_END_ALLOW_THREADS
}

static void client_dealloc(struct npy_client *self)
{
	/* Nobody else holds a reference: no lock to take. */
	if (self->c)
		do_close(self);
	Py_XDECREF(self->sessions);
	if (self->lock)
		PyThread_free_lock(self->lock);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

PyDoc_STRVAR(close_doc,
"close()\n--\n\n"
"Close the connection; the daemon reclaims its sessions and requests.\n"
"Steps still in flight are dropped (their Pending objects report the\n"
"client closed).  Closing twice is fine.");

static PyObject *client_close(struct npy_client *self, PyObject *unused)
{
	(void)unused;
	if (!self->c)
		Py_RETURN_NONE;
	if (npy_client_enter(self) < 0) {
		/* Closed by another thread meanwhile: that is what was asked. */
		if (!self->c && PyErr_ExceptionMatches(PyExc_ValueError)) {
			PyErr_Clear();
			Py_RETURN_NONE;
		}
		return NULL;
	}
	do_close(self);
	npy_client_leave(self);
	Py_RETURN_NONE;
}

static PyObject *client_enter_cm(struct npy_client *self, PyObject *unused)
{
	(void)unused;
	if (!self->c) {
		PyErr_SetString(PyExc_ValueError, "operation on a closed nelssa.Client");
		return NULL;
	}
	return Py_NewRef(self);
}

static PyObject *client_exit_cm(struct npy_client *self, PyObject *args)
{
	PyObject *r;

	(void)args;
	r = client_close(self, NULL);
	if (!r)
		return NULL;
	Py_DECREF(r);
	Py_RETURN_FALSE;
}

PyDoc_STRVAR(set_timeout_doc,
"set_timeout(timeout_ms)\n--\n\n"
"Set the most any later call waits, in milliseconds (0: 30 s).  A\n"
"stopped daemon then shows as Error(ETIMEDOUT), a dead one as\n"
"Error(ECONNRESET), never as a hang.");

static PyObject *client_set_timeout(struct npy_client *self, PyObject *arg)
{
	uint32_t ms;

	if (!npy_conv_u32(arg, &ms) || npy_client_enter(self) < 0)
		return NULL;
	nelssa_client_set_timeout(self->c, ms);
	self->timeout_ms = ms;
	npy_client_leave(self);
	Py_RETURN_NONE;
}

PyDoc_STRVAR(open_session_doc,
"open_session(layers, q_heads, kv_heads, head_dim, *, kv_dtype=KV_BF16,\n"
"             placement=PLACE_HEADS, max_batch=8, max_sel=4096,\n"
"             capacity_tokens=65536, tenant=0, attn_flags=0,\n"
"             kv_layout=KV_PACKED)\n--\n\n"
"Create a session for a model shape and return its id (an int).\n"
"The group size is q_heads // kv_heads.  attn_flags=ATTN_BF16_DOTS makes the\n"
"devices round q and the softmax weights to bf16 for their products\n"
"(Error(EOPNOTSUPP) where a device cannot).  kv_layout=KV_ADJACENT keeps\n"
"each 16-token block's K and V side by side in device memory (devices with\n"
"kv_stride; Error(EOPNOTSUPP) otherwise).  Raises Error(ENOSPC) when the\n"
"devices lack room, Error(EINVAL) for a bad shape, Error(EBUSY) at the\n"
"daemon's session limit.");

static PyObject *client_open_session(struct npy_client *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "layers", "q_heads", "kv_heads", "head_dim", "kv_dtype",
				  "placement", "max_batch", "max_sel", "capacity_tokens",
				  "tenant", "attn_flags", "kv_layout", NULL };
	struct nelssa_session_cfg cfg = { .shape.kv_dtype = NELSSA_KV_BF16, .max_batch = 8,
					  .max_sel = 4096, .capacity_tokens = 65536 };
	PyObject *key = NULL, *val = NULL;
	uint64_t id = 0;
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&O&O&|$O&O&O&O&O&O&O&O&:open_session", kwlist,
					 npy_conv_u16, &cfg.shape.layers, npy_conv_u16,
					 &cfg.shape.q_heads, npy_conv_u16, &cfg.shape.kv_heads,
					 npy_conv_u16, &cfg.shape.head_dim, npy_conv_u8,
					 &cfg.shape.kv_dtype, npy_conv_u8, &cfg.placement,
					 npy_conv_u32, &cfg.max_batch, npy_conv_u32, &cfg.max_sel,
					 npy_conv_u64, &cfg.capacity_tokens, npy_conv_u32,
					 &cfg.tenant, npy_conv_u8, &cfg.shape.attn_flags,
					 npy_conv_u8, &cfg.shape.kv_layout))
		return NULL;
	if (!cfg.shape.kv_heads || cfg.shape.q_heads % cfg.shape.kv_heads) {
		PyErr_SetString(PyExc_ValueError, "q_heads must be a non-zero multiple of kv_heads");
		return NULL;
	}
	if (npy_client_enter(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	ret = nelssa_client_session(self->c, &cfg, &id);
	Py_END_ALLOW_THREADS
	if (ret)
		return fail_leave(self, ret);
	key = PyLong_FromUnsignedLongLong(id);
	val = Py_BuildValue("(IIIIII)", cfg.shape.layers, cfg.shape.q_heads, cfg.shape.kv_heads,
			    cfg.shape.head_dim, cfg.shape.kv_dtype, cfg.max_sel);
	if (!key || !val || PyDict_SetItem(self->sessions, key, val) < 0) {
		Py_XDECREF(val);
		Py_XDECREF(key);
		npy_client_leave(self);
		return NULL;
	}
	Py_DECREF(val);
	npy_client_leave(self);
	return key;
}

/* The remembered shape of @session (borrowed), or NULL with ValueError. */
static PyObject *session_shape(struct npy_client *self, uint64_t session)
{
	PyObject *key = PyLong_FromUnsignedLongLong(session), *val;

	if (!key)
		return NULL;
	val = PyDict_GetItemWithError(self->sessions, key);
	Py_DECREF(key);
	if (!val && !PyErr_Occurred())
		PyErr_Format(PyExc_ValueError, "no session %llu opened on this Client",
			     (unsigned long long)session);
	return val;
}

static unsigned shape_at(PyObject *shape, int i)
{
	return (unsigned)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(shape, i));
}

/* The type of the rows offload() takes: the session's, or bf16 for 8-bit KV. */
static unsigned offload_kv(unsigned session_kv)
{
	return nelssa_kv_is_tiled((enum nelssa_kv_dtype)session_kv) ? NELSSA_KV_BF16 : session_kv;
}

PyDoc_STRVAR(close_session_doc,
"close_session(session)\n--\n\n"
"End a session, freeing its device memory.");

static PyObject *client_close_session(struct npy_client *self, PyObject *arg)
{
	uint64_t session;
	PyObject *key;
	int ret;

	if (!npy_conv_u64(arg, &session) || npy_client_enter(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	ret = nelssa_client_session_close(self->c, session);
	Py_END_ALLOW_THREADS
	if (ret)
		return fail_leave(self, ret);
	key = PyLong_FromUnsignedLongLong(session);
	if (key && PyDict_DelItem(self->sessions, key) < 0)
		PyErr_Clear();
	Py_XDECREF(key);
	npy_client_leave(self);
	Py_RETURN_NONE;
}

PyDoc_STRVAR(alloc_request_doc,
"alloc_request(session, request, max_tokens, max_clusters)\n--\n\n"
"Reserve device room for one request's KV: request is an id of the\n"
"caller's choosing, unique in the session; max_tokens and max_clusters\n"
"bound what its offloads and appends may hold.  Raises Error(ENOSPC)\n"
"when the session's capacity is exhausted, Error(EEXIST) for a used id.");

static PyObject *client_alloc_request(struct npy_client *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "session", "request", "max_tokens", "max_clusters", NULL };
	uint64_t session, request;
	uint32_t max_tokens, max_clusters;
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&O&O&:alloc_request", kwlist, npy_conv_u64,
					 &session, npy_conv_u64, &request, npy_conv_u32,
					 &max_tokens, npy_conv_u32, &max_clusters) ||
	    npy_client_enter(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	ret = nelssa_client_request(self->c, session, request, max_tokens, max_clusters);
	Py_END_ALLOW_THREADS
	if (ret)
		return fail_leave(self, ret);
	npy_client_leave(self);
	Py_RETURN_NONE;
}

PyDoc_STRVAR(free_request_doc,
"free_request(session, request)\n--\n\n"
"Release a request's device room.");

static PyObject *client_free_request(struct npy_client *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "session", "request", NULL };
	uint64_t session, request;
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&:free_request", kwlist, npy_conv_u64,
					 &session, npy_conv_u64, &request) ||
	    npy_client_enter(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	ret = nelssa_client_request_free(self->c, session, request);
	Py_END_ALLOW_THREADS
	if (ret)
		return fail_leave(self, ret);
	npy_client_leave(self);
	Py_RETURN_NONE;
}

/* offload() and append(): the same call, from 0 or from the old cluster count. */
static PyObject *do_offload(struct npy_client *self, PyObject *args, PyObject *kw,
			    int need_from)
{
	static char *kwlist[] = { "session", "request", "layer", "head", "index", "k", "v",
				  "from_cluster", "base", NULL };
	const char *fmt = need_from ? "O&O&O&O&O!OOO&|$O&:append" : "O&O&O&O&O!OO|O&$O&:offload";
	uint64_t session, request;
	uint16_t layer, head;
	uint32_t from = 0, base = 0;
	PyObject *ixo, *ko, *vo, *shape, *res = NULL;
	struct nelssa_cluster_index *ix;
	struct npy_buf k, v;
	Py_ssize_t dims[2];
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, npy_conv_u64, &session,
					 npy_conv_u64, &request, npy_conv_u16, &layer,
					 npy_conv_u16, &head, &npy_index_type, &ixo, &ko, &vo,
					 npy_conv_u32, &from, npy_conv_u32, &base))
		return NULL;
	if (npy_client_enter(self) < 0)
		return NULL;
	shape = session_shape(self, session);
	if (!shape) {
		npy_client_leave(self);
		return NULL;
	}
	if (npy_buf_get(ko, "k", NPY_E_KV, 0, &k) < 0) {
		npy_client_leave(self);
		return NULL;
	}
	if (npy_buf_get(vo, "v", NPY_E_KV, 0, &v) < 0) {
		npy_buf_release(&k);
		npy_client_leave(self);
		return NULL;
	}
	ix = npy_index_lock(ixo);
	if (!ix)
		goto out;
	dims[0] = (Py_ssize_t)ix->n_tokens - base;
	dims[1] = shape_at(shape, 3);
	if (layer >= shape_at(shape, 0) || head >= shape_at(shape, 2)) {
		PyErr_Format(PyExc_ValueError, "layer %u / KV head %u beyond the session's %u x %u",
			     layer, head, shape_at(shape, 0), shape_at(shape, 2));
	} else if (ix->head_dim != dims[1]) {
		PyErr_Format(PyExc_ValueError, "the index's head_dim %u is not the session's %u",
			     ix->head_dim, (unsigned)dims[1]);
	} else if (k.kv != offload_kv(shape_at(shape, 4)) || v.kv != k.kv) {
		PyErr_Format(PyExc_TypeError, "k and v must both be %s, %s",
			     offload_kv(shape_at(shape, 4)) == NELSSA_KV_FP16 ? "float16" :
			     "bf16 bits (uint16, int16 or a torch.bfloat16 tensor)",
			     offload_kv(shape_at(shape, 4)) == shape_at(shape, 4) ?
			     "the session's KV type" : "which the library quantises to 8 bits");
	} else if (from > ix->n_clusters) {
		PyErr_Format(PyExc_ValueError, "from_cluster %u beyond the index's %u clusters",
			     from, ix->n_clusters);
	} else if (base > ix->n_tokens) {
		PyErr_Format(PyExc_ValueError, "base %u beyond the index's %u tokens", base,
			     ix->n_tokens);
	} else if (npy_buf_shape(&k, "k", 2, dims) == 0 && npy_buf_shape(&v, "v", 2, dims) == 0) {
		Py_BEGIN_ALLOW_THREADS
		ret = nelssa_client_offload_rows(self->c, session, request, layer, head, ix,
						 from, k.ptr, v.ptr, base);
		Py_END_ALLOW_THREADS
		if (ret)
			npy_client_raise(self, ret);
		else
			res = Py_NewRef(Py_None);
	}
	npy_index_unlock(ixo);
out:
	npy_buf_release(&k);
	npy_buf_release(&v);
	npy_client_leave(self);
	return res;
}

PyDoc_STRVAR(offload_doc,
"offload(session, request, layer, head, index, k, v, from_cluster=0, *, base=0)\n--\n\n"
"Send the clusters [from_cluster, index.n_clusters) of one (request,\n"
"layer, KV head) with their K and V rows.  k and v hold the index's\n"
"tokens from base on in token order, shape (index.n_tokens - base,\n"
"head_dim), in the session's KV type (bf16 bits as uint16 or a\n"
"torch.bfloat16 tensor; float16).  Every row the call reads must be of a\n"
"token at or after base (nelssa_client_offload_rows(): the new clusters'\n"
"tokens, and for an 8-bit session those of the tile they start in), else\n"
"Error(EINVAL) before anything is sent.  Returns once the daemon\n"
"acknowledged every chunk.");

static PyObject *client_offload(struct npy_client *self, PyObject *args, PyObject *kw)
{
	return do_offload(self, args, kw, 0);
}

PyDoc_STRVAR(append_doc,
"append(session, request, layer, head, index, k, v, from_cluster, *, base=0)\n--\n\n"
"Send the clusters a decode-time ClusterIndex.append() added: from_cluster\n"
"is the cluster count before it (what append() returned); k and v hold\n"
"the index's tokens from base on, as for offload() -- of a 16-bit session\n"
"the new tokens alone will do (base: the token count before the append).");

static PyObject *client_append(struct npy_client *self, PyObject *args, PyObject *kw)
{
	return do_offload(self, args, kw, 1);
}

/*
 * A step's work items, parsed from (request, head, sel) triples and the
 * query array; everything stays referenced until step_items_free().
 */
struct step_items {
	uint32_t n, group, dim;
	struct nelssa_step_in *in;
	struct npy_buf *sel;
	struct npy_buf q;
};

static void step_items_free(struct step_items *s)
{
	for (uint32_t i = 0; s->sel && i < s->n; i++)
		npy_buf_release(&s->sel[i]);
	PyMem_Free(s->sel);
	PyMem_Free(s->in);
	npy_buf_release(&s->q);
}

static int step_items_get(struct npy_client *self, uint64_t session, uint16_t layer,
			  PyObject *items, PyObject *qo, struct step_items *s)
{
	PyObject *shape = session_shape(self, session), *seq;
	Py_ssize_t n, dims[3];
	uint32_t kv_heads, max_sel;

	memset(s, 0, sizeof(*s));
	if (!shape)
		return -1;
	kv_heads = shape_at(shape, 2);
	s->group = shape_at(shape, 1) / kv_heads;
	s->dim = shape_at(shape, 3);
	max_sel = shape_at(shape, 5);
	if (layer >= shape_at(shape, 0)) {
		PyErr_Format(PyExc_ValueError, "layer %u beyond the session's %u", layer,
			     shape_at(shape, 0));
		return -1;
	}
	seq = PySequence_Fast(items, "items must be a sequence of (request, head, sel)");
	if (!seq)
		return -1;
	n = PySequence_Fast_GET_SIZE(seq);
	if (n < 1 || n > UINT32_MAX) {
		PyErr_SetString(PyExc_ValueError, "a step needs at least one item");
		Py_DECREF(seq);
		return -1;
	}
	dims[0] = n;
	dims[1] = s->group;
	dims[2] = s->dim;
	if (npy_buf_get(qo, "q", NPY_E_F32, 0, &s->q) < 0 ||
	    npy_buf_shape(&s->q, "q (items, group, head_dim)", 3, dims) < 0)
		goto fail;
	s->in = PyMem_Calloc((size_t)n, sizeof(*s->in));
	s->sel = PyMem_Calloc((size_t)n, sizeof(*s->sel));
	if (!s->in || !s->sel) {
		PyErr_NoMemory();
		goto fail;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *it = PySequence_Fast_GET_ITEM(seq, i), *ro, *ho, *so;
		uint64_t request;
		uint16_t head;

		if (!PyTuple_Check(it) || PyTuple_GET_SIZE(it) != 3) {
			PyErr_Format(PyExc_TypeError, "items[%zd] must be a tuple (request, head, sel)",
				     i);
			goto fail;
		}
		ro = PyTuple_GET_ITEM(it, 0);
		ho = PyTuple_GET_ITEM(it, 1);
		so = PyTuple_GET_ITEM(it, 2);
		if (!npy_conv_u64(ro, &request) || !npy_conv_u16(ho, &head))
			goto fail;
		if (head >= kv_heads) {
			PyErr_Format(PyExc_ValueError, "items[%zd]: KV head %u beyond the session's %u",
				     i, head, kv_heads);
			goto fail;
		}
		if (npy_buf_ids(so, "sel", &s->sel[i]) < 0)
			goto fail;
		if (s->sel[i].len > max_sel) {
			PyErr_Format(PyExc_ValueError, "items[%zd]: %zd clusters selected, the session's "
				     "max_sel is %u", i, s->sel[i].len, max_sel);
			goto fail;
		}
		s->n = (uint32_t)i + 1;
		s->in[i] = (struct nelssa_step_in){
			.request = request, .head = head,
			.q = (const float *)s->q.ptr + (size_t)i * s->group * s->dim,
			.sel = s->sel[i].ptr, .nr_sel = (uint32_t)s->sel[i].len,
		};
	}
	s->n = (uint32_t)n;
	Py_DECREF(seq);
	return 0;
fail:
	Py_DECREF(seq);
	step_items_free(s);
	return -1;
}

static PyObject *times_dict(const struct nelssa_step_times *t)
{
	return Py_BuildValue("{sKsKsKsKsK}", "rtt_ns", (unsigned long long)t->rtt,
			     "recv_ns", (unsigned long long)t->recv,
			     "dispatch_ns", (unsigned long long)t->dispatch,
			     "device_ns", (unsigned long long)t->device,
			     "aggregate_ns", (unsigned long long)t->aggregate);
}

/* The output arrays of a step of @s: (o, lse) and their held views. */
static int step_outputs(struct step_items *s, PyObject *out, PyObject *lse_out, PyObject **o,
			PyObject **lse, struct npy_buf *ob, struct npy_buf *lb)
{
	const Py_ssize_t od[3] = { s->n, s->group, s->dim }, ld[2] = { s->n, s->group };

	*o = npy_buf_out(out, "out", 'f', 3, od, ob);
	if (!*o)
		return -1;
	*lse = npy_buf_out(lse_out, "lse_out", 'f', 2, ld, lb);
	if (!*lse) {
		npy_buf_release(ob);
		Py_CLEAR(*o);
		return -1;
	}
	return 0;
}

PyDoc_STRVAR(step_doc,
"step(session, layer, items, q, *, out=None, lse_out=None, return_times=False)\n--\n\n"
"One layer of a decode step on the PNM devices, waiting for the reply.\n"
"\n"
"items is a sequence of (request, kv_head, sel) tuples, sel the selected\n"
"cluster ids (numbered as in the index offloaded; a uint32 array is used\n"
"in place, other integer arrays and lists are converted).  q is float32\n"
"(len(items), group, head_dim): item i's GQA group of queries.  Returns\n"
"(o, lse): float32 (len(items), group, head_dim) and (len(items), group),\n"
"written into out/lse_out when given; with return_times=True, (o, lse,\n"
"times), times a dict of the step's rtt/recv/dispatch/device/aggregate\n"
"nanoseconds.  The GIL is released while the step runs.");

static PyObject *client_step(struct npy_client *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "session", "layer", "items", "q", "out", "lse_out",
				  "return_times", NULL };
	PyObject *items, *qo, *out = NULL, *lse_out = NULL, *o = NULL, *lse = NULL, *res = NULL;
	struct nelssa_step_times t = { 0 };
	struct npy_buf ob, lb;
	struct step_items s;
	uint64_t session;
	uint16_t layer;
	int want_times = 0, ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&OO|$OOp:step", kwlist, npy_conv_u64,
					 &session, npy_conv_u16, &layer, &items, &qo, &out,
					 &lse_out, &want_times) ||
	    npy_client_enter(self) < 0)
		return NULL;
	if (step_items_get(self, session, layer, items, qo, &s) < 0) {
		npy_client_leave(self);
		return NULL;
	}
	if (step_outputs(&s, out, lse_out, &o, &lse, &ob, &lb) == 0) {
		Py_BEGIN_ALLOW_THREADS
		ret = nelssa_client_step(self->c, session, layer, s.in, s.n, ob.ptr, lb.ptr, &t);
		Py_END_ALLOW_THREADS
		npy_buf_release(&ob);
		npy_buf_release(&lb);
		if (ret)
			npy_client_raise(self, ret);
		else if (want_times)
			res = Py_BuildValue("(OON)", o, lse, times_dict(&t));
		else
			res = PyTuple_Pack(2, o, lse);
		Py_DECREF(o);
		Py_DECREF(lse);
	}
	step_items_free(&s);
	npy_client_leave(self);
	return res;
}

PyDoc_STRVAR(step_send_doc,
"step_send(session, layer, items, q, *, out=None, lse_out=None) -> Pending\n--\n\n"
"Send one layer's step and return at once (split batch): the arguments\n"
"are those of step(); the inputs may be reused as soon as it returns.\n"
"Collect the result with Pending.poll(); at most 16 steps in flight per\n"
"Client, one per session.");

static PyObject *client_step_send(struct npy_client *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "session", "layer", "items", "q", "out", "lse_out", NULL };
	PyObject *items, *qo, *out = NULL, *lse_out = NULL, *o = NULL, *lse = NULL, *res = NULL;
	struct nelssa_step_pending *p = NULL;
	struct npy_buf ob, lb;
	struct step_items s;
	uint64_t session;
	uint16_t layer;
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&OO|$OO:step_send", kwlist, npy_conv_u64,
					 &session, npy_conv_u16, &layer, &items, &qo, &out,
					 &lse_out) ||
	    npy_client_enter(self) < 0)
		return NULL;
	if (step_items_get(self, session, layer, items, qo, &s) < 0) {
		npy_client_leave(self);
		return NULL;
	}
	if (step_outputs(&s, out, lse_out, &o, &lse, &ob, &lb) == 0) {
		Py_BEGIN_ALLOW_THREADS
		ret = nelssa_client_step_send(self->c, session, layer, s.in, s.n, ob.ptr, lb.ptr,
					      &p);
		Py_END_ALLOW_THREADS
		if (ret) {
			npy_client_raise(self, ret);
			npy_buf_release(&ob);
			npy_buf_release(&lb);
		} else {
			/* The Pending keeps the output views until the reply is in. */
			res = npy_pending_new(self, p, o, lse, &ob, &lb);
			if (!res)
				nelssa_client_step_cancel(self->c, p);
		}
		Py_DECREF(o);
		Py_DECREF(lse);
	}
	step_items_free(&s);
	npy_client_leave(self);
	return res;
}

PyDoc_STRVAR(stats_doc,
"stats() -> dict\n--\n\n"
"The daemon's counters since it started: sessions (open now, of every\n"
"client), devices, steps, items, kv_bytes, and the summed step times\n"
"recv_ns, dispatch_ns, device_ns, aggregate_ns, send_ns.");

static PyObject *client_stats(struct npy_client *self, PyObject *unused)
{
	struct nelssa_daemon_stats st;
	int ret;

	(void)unused;
	if (npy_client_enter(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	ret = nelssa_client_stats(self->c, &st);
	Py_END_ALLOW_THREADS
	if (ret)
		return fail_leave(self, ret);
	npy_client_leave(self);
	return Py_BuildValue("{sIsIsKsKsKsKsKsKsKsK}", "sessions", st.sessions,
			     "devices", st.devices, "steps", (unsigned long long)st.steps,
			     "items", (unsigned long long)st.items,
			     "kv_bytes", (unsigned long long)st.kv_bytes,
			     "recv_ns", (unsigned long long)st.recv_ns,
			     "dispatch_ns", (unsigned long long)st.dispatch_ns,
			     "device_ns", (unsigned long long)st.device_ns,
			     "aggregate_ns", (unsigned long long)st.aggregate_ns,
			     "send_ns", (unsigned long long)st.send_ns);
}

static PyObject *client_get_devices(struct npy_client *self, void *closure)
{
	uint32_t n;

	(void)closure;
	if (npy_client_enter(self) < 0)
		return NULL;
	n = nelssa_client_devices(self->c);
	npy_client_leave(self);
	return PyLong_FromUnsignedLong(n);
}

static PyObject *client_get_closed(struct npy_client *self, void *closure)
{
	(void)closure;
	return PyBool_FromLong(!self->c);
}

static PyObject *client_get_timeout(struct npy_client *self, void *closure)
{
	(void)closure;
	return PyLong_FromUnsignedLong(self->timeout_ms);
}

static PyObject *client_get_error(struct npy_client *self, void *closure)
{
	PyObject *s;

	(void)closure;
	if (npy_client_enter(self) < 0)
		return NULL;
	s = PyUnicode_DecodeUTF8(nelssa_client_error(self->c),
				 (Py_ssize_t)strlen(nelssa_client_error(self->c)), "replace");
	npy_client_leave(self);
	return s;
}

static PyObject *client_get_sessions(struct npy_client *self, void *closure)
{
	(void)closure;
	return PyDict_Copy(self->sessions);
}

static PyMethodDef client_methods[] = {
	{ "close", (PyCFunction)client_close, METH_NOARGS, close_doc },
	{ "__enter__", (PyCFunction)client_enter_cm, METH_NOARGS,
	  PyDoc_STR("__enter__()\n--\n\nReturn the client itself.") },
	{ "__exit__", (PyCFunction)client_exit_cm, METH_VARARGS,
	  PyDoc_STR("__exit__(*exc)\n--\n\nClose the client.") },
	{ "set_timeout", (PyCFunction)client_set_timeout, METH_O, set_timeout_doc },
	{ "open_session", (PyCFunction)(void (*)(void))client_open_session,
	  METH_VARARGS | METH_KEYWORDS, open_session_doc },
	{ "close_session", (PyCFunction)client_close_session, METH_O, close_session_doc },
	{ "alloc_request", (PyCFunction)(void (*)(void))client_alloc_request,
	  METH_VARARGS | METH_KEYWORDS, alloc_request_doc },
	{ "free_request", (PyCFunction)(void (*)(void))client_free_request,
	  METH_VARARGS | METH_KEYWORDS, free_request_doc },
	{ "offload", (PyCFunction)(void (*)(void))client_offload, METH_VARARGS | METH_KEYWORDS,
	  offload_doc },
	{ "append", (PyCFunction)(void (*)(void))client_append, METH_VARARGS | METH_KEYWORDS,
	  append_doc },
	{ "step", (PyCFunction)(void (*)(void))client_step, METH_VARARGS | METH_KEYWORDS,
	  step_doc },
	{ "step_send", (PyCFunction)(void (*)(void))client_step_send,
	  METH_VARARGS | METH_KEYWORDS, step_send_doc },
	{ "stats", (PyCFunction)client_stats, METH_NOARGS, stats_doc },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef client_getset[] = {
	{ "devices", (getter)client_get_devices, NULL,
	  PyDoc_STR("PNM devices the daemon serves with (from its HELLO_OK)."), NULL },
	{ "closed", (getter)client_get_closed, NULL,
	  PyDoc_STR("True once close() ran."), NULL },
	{ "timeout_ms", (getter)client_get_timeout, NULL,
	  PyDoc_STR("The timeout last set (0: the library's 30 s)."), NULL },
	{ "last_error", (getter)client_get_error, NULL,
	  PyDoc_STR("The library's words about the last failure ('' if none)."), NULL },
	{ "sessions", (getter)client_get_sessions, NULL,
	  PyDoc_STR("{session: (layers, q_heads, kv_heads, head_dim, kv_dtype, max_sel)} "
		    "of the sessions open on this Client."), NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

PyDoc_STRVAR(client_doc,
"Client(host, port, *, timeout_ms=0, name=None)\n--\n\n"
"A connection to a NELSSA node (nelssad): control over TCP, data over\n"
"UCX.  Connects at once (the GIL released); raises nelssa.Error\n"
"(ECONNREFUSED, ETIMEDOUT, EPROTONOSUPPORT, EIO) when it cannot.\n"
"timeout_ms bounds every later call (0: 30 s).  A context manager:\n"
"``with nelssa.Client(...) as c:`` closes it on exit.\n"
"\n"
"Two threads may call one Client: they take turns on its lock.  Threads\n"
"that should run at once each need their own Client.");

PyTypeObject npy_client_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "nelssa.Client",
	.tp_basicsize = sizeof(struct npy_client),
	.tp_dealloc = (destructor)client_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = client_doc,
	.tp_methods = client_methods,
	.tp_getset = client_getset,
	.tp_init = (initproc)client_init,
	.tp_new = client_new,
};

int npy_client_init(PyObject *m)
{
	if (PyType_Ready(&npy_client_type) < 0)
		return -1;
	Py_INCREF(&npy_client_type);
	if (PyModule_AddObject(m, "Client", (PyObject *)&npy_client_type) < 0) {
		Py_DECREF(&npy_client_type);
		return -1;
	}
	return 0;
}
