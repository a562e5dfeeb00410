// SPDX-License-Identifier: MIT
/*
 * The GPU node's algorithms as module functions: centroid scoring and
 * Top-K selection, local-window and dense attention, the LSE merges and
 * the estimate of the clusters left out.  Each checks its arrays' types
 * and shapes here, where the message can name them, then runs the C
 * function with the GIL released.
 */
#include "nelssa_py.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include <nelssa/lse.h>
#include <nelssa/sparse.h>

#define GEOM_WORDS "(group 1..64, head_dim 1..1024, scale positive and finite, finite inputs)"

/* @o: None (1/sqrt(head_dim)) or a number. */
static int get_scale(PyObject *o, uint32_t head_dim, float *scale)
{
	double s;

	if (!o || o == Py_None) {
		*scale = head_dim ? 1.0f / sqrtf((float)head_dim) : 1.0f;
		return 0;
	}
	s = PyFloat_AsDouble(o);
	if (s == -1.0 && PyErr_Occurred())
		return -1;
	*scale = (float)s;
	return 0;
}

/* q: float32 (group, head_dim). */
static int get_q(PyObject *o, struct npy_buf *q)
{
	const Py_ssize_t dims[2] = { -1, -1 };

	if (npy_buf_get(o, "q", NPY_E_F32, 0, q) < 0)
		return -1;
	if (npy_buf_shape(q, "q (group, head_dim)", 2, dims) < 0 || q->shape[0] > UINT32_MAX ||
	    q->shape[1] > UINT32_MAX) {
		npy_buf_release(q);
		return -1;
	}
	return 0;
}

/* The (o, lse) outputs of an attention over q's shape. */
static int attn_outputs(const struct npy_buf *q, PyObject *out, PyObject *lse_out,
			PyObject **o, PyObject **lse, struct npy_buf *ob, struct npy_buf *lb)
{
	*o = npy_buf_out(out, "out", 'f', 2, q->shape, ob);
	if (!*o)
		return -1;
	*lse = npy_buf_out(lse_out, "lse_out", 'f', 1, q->shape, lb);
	if (!*lse) {
		npy_buf_release(ob);
		Py_CLEAR(*o);
		return -1;
	}
	return 0;
}

/* (o, lse) or, on a failed call, the exception; drops the views. */
static PyObject *attn_result(int ret, const char *fn, PyObject *o, PyObject *lse,
			     struct npy_buf *ob, struct npy_buf *lb)
{
	PyObject *res = NULL;

	npy_buf_release(ob);
	npy_buf_release(lb);
	if (ret)
		npy_raisef(ret, "%s: %s", fn, ret == -EINVAL ? "invalid argument " GEOM_WORDS :
			   strerror(-ret));
	else
		res = PyTuple_Pack(2, o, lse);
	Py_DECREF(o);
	Py_DECREF(lse);
	return res;
}

/* Releases up to four views; for the exits. */
static void release4(struct npy_buf *a, struct npy_buf *b, struct npy_buf *c, struct npy_buf *d)
{
	if (a)
		npy_buf_release(a);
	if (b)
		npy_buf_release(b);
	if (c)
		npy_buf_release(c);
	if (d)
		npy_buf_release(d);
}

/* centroids (n, head_dim) float32 and sizes (n,) uint32 matching q. */
static int get_clusters(PyObject *co, PyObject *so, uint32_t head_dim, struct npy_buf *c,
			struct npy_buf *s)
{
	Py_ssize_t cd[2] = { -1, head_dim }, sd[1];

	memset(s, 0, sizeof(*s));
	if (npy_buf_get(co, "centroids", NPY_E_F32, 0, c) < 0)
		return -1;
	if (npy_buf_shape(c, "centroids (n_clusters, head_dim)", 2, cd) < 0 ||
	    c->shape[0] > UINT32_MAX)
		goto fail;
	sd[0] = c->shape[0];
	if (npy_buf_ids(so, "sizes", s) < 0 || npy_buf_shape(s, "sizes (n_clusters,)", 1, sd) < 0)
		goto fail;
	return 0;
fail:
	release4(c, s, NULL, NULL);
	return -1;
}

PyDoc_STRVAR(centroid_scores_doc,
"centroid_scores(q, centroids, sizes, *, scale=None) -> float32 array (n_clusters,)\n--\n\n"
"Score every cluster of one KV head (nelssa_centroid_scores()): the sum\n"
"over q's rows of softmax over the non-empty clusters of scale *\n"
"q . centroid; empty clusters (size 0) score -inf.  q float32 (group,\n"
"head_dim), centroids float32 (n_clusters, head_dim), sizes integers\n"
"(n_clusters,); scale defaults to 1/sqrt(head_dim).");

static PyObject *py_centroid_scores(PyObject *mod, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "q", "centroids", "sizes", "scale", NULL };
	PyObject *qo, *co, *so, *scale_o = NULL, *res = NULL;
	struct npy_buf q, c, s, out;
	float scale;
	int ret;

	(void)mod;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|$O:centroid_scores", kwlist, &qo, &co, &so,
					 &scale_o) || get_q(qo, &q) < 0)
		return NULL;
	if (get_scale(scale_o, (uint32_t)q.shape[1], &scale) < 0 ||
	    get_clusters(co, so, (uint32_t)q.shape[1], &c, &s) < 0) {
		npy_buf_release(&q);
		return NULL;
	}
	res = npy_buf_out(NULL, "score", 'f', 1, c.shape, &out);
	if (res) {
		Py_BEGIN_ALLOW_THREADS
		ret = nelssa_centroid_scores(q.ptr, (uint32_t)q.shape[0], (uint32_t)q.shape[1],
					     scale, c.ptr, s.ptr, (uint32_t)c.shape[0], out.ptr);
		Py_END_ALLOW_THREADS
		npy_buf_release(&out);
		if (ret) {
			Py_CLEAR(res);
			npy_raisef(ret, "nelssa_centroid_scores: %s",
				   ret == -EINVAL ? "invalid argument " GEOM_WORDS : strerror(-ret));
		}
	}
	release4(&q, &c, &s, NULL);
	return res;
}

PyDoc_STRVAR(topk_doc,
"topk(score, k) -> uint32 array\n--\n\n"
"The k best clusters by score, best first, ties to the lower id\n"
"(nelssa_topk()); clusters scoring -inf are never taken, so fewer than k\n"
"may come back.  score float32 (n_clusters,); a NaN raises Error(EINVAL).");

static PyObject *py_topk(PyObject *mod, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "score", "k", NULL };
	const Py_ssize_t dims[1] = { -1 };
	PyObject *so, *res = NULL;
	struct npy_buf s;
	uint32_t k, *ids;
	Py_ssize_t n;
	int ret;

	(void)mod;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO&:topk", kwlist, &so, npy_conv_u32, &k) ||
	    npy_buf_get(so, "score", NPY_E_F32, 0, &s) < 0)
		return NULL;
	if (npy_buf_shape(&s, "score (n_clusters,)", 1, dims) < 0 || s.shape[0] > UINT32_MAX) {
		npy_buf_release(&s);
		return NULL;
	}
	n = k < s.shape[0] ? k : s.shape[0];
	ids = PyMem_Malloc((size_t)n * 4 + 4);
	if (!ids) {
		npy_buf_release(&s);
		return PyErr_NoMemory();
	}
	Py_BEGIN_ALLOW_THREADS
	ret = nelssa_topk(s.ptr, (uint32_t)s.shape[0], k, ids);
	Py_END_ALLOW_THREADS
	if (ret < 0) {
		npy_raise(ret, ret == -EINVAL ? "nelssa_topk: a score is NaN" : NULL);
	} else {
		n = ret;
		res = npy_array_copy('I', 1, &n, ids);
	}
	PyMem_Free(ids);
	npy_buf_release(&s);
	return res;
}

PyDoc_STRVAR(select_doc,
"select(q, centroids, sizes, budget, *, far=None, far_share=None, scale=None)\n"
"    -> (ids, tokens)\n--\n\n"
"The shipped selection of one KV head's clusters (nelssa_select()):\n"
"fill a budget of tokens, first far_share of it by the mean-and-farthest\n"
"probes (far: ClusterIndex.far_keys()), the rest by centroid scores.\n"
"far_share defaults to 0.25 when far is given, else 0 (centroids alone).\n"
"Returns the uint32 ids taken, in rank order, and the tokens they hold.");

static PyObject *py_select(PyObject *mod, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "q", "centroids", "sizes", "budget", "far", "far_share", "scale",
				  NULL };
	PyObject *qo, *co, *so, *fo = NULL, *share_o = NULL, *scale_o = NULL, *res = NULL;
	struct nelssa_select_cfg cfg = NELSSA_SELECT_DEFAULT;
	struct npy_buf q, c, s, f = { 0 };
	uint64_t budget, tokens = 0;
	uint32_t *ids = NULL;
	float scale;
	Py_ssize_t n;
	int ret;

	(void)mod;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO&|$OOO:select", kwlist, &qo, &co, &so,
					 npy_conv_u64, &budget, &fo, &share_o, &scale_o) ||
	    get_q(qo, &q) < 0)
		return NULL;
	if (get_scale(scale_o, (uint32_t)q.shape[1], &scale) < 0 ||
	    get_clusters(co, so, (uint32_t)q.shape[1], &c, &s) < 0) {
		npy_buf_release(&q);
		return NULL;
	}
	if (fo == Py_None)
		fo = NULL;
	cfg.far_share = fo ? 0.25 : 0.0;
	if (share_o && share_o != Py_None) {
		cfg.far_share = PyFloat_AsDouble(share_o);
		if (cfg.far_share == -1.0 && PyErr_Occurred())
			goto out;
	}
	if (fo && (npy_buf_get(fo, "far", NPY_E_F32, 0, &f) < 0 ||
		   npy_buf_shape(&f, "far (n_clusters, head_dim)", 2, c.shape) < 0))
		goto out;
	ids = PyMem_Malloc((size_t)c.shape[0] * 4 + 4);
	if (!ids) {
		PyErr_NoMemory();
		goto out;
	}
	Py_BEGIN_ALLOW_THREADS
	ret = nelssa_select(&cfg, q.ptr, (uint32_t)q.shape[0], (uint32_t)q.shape[1], scale, c.ptr,
			    fo ? f.ptr : NULL, s.ptr, (uint32_t)c.shape[0], budget, ids, &tokens);
	Py_END_ALLOW_THREADS
	if (ret < 0) {
		npy_raisef(ret, "nelssa_select: %s", ret == -EINVAL ?
			   "invalid argument (far_share in [0, 1], far given when it is above 0, "
			   GEOM_WORDS ")" : strerror(-ret));
	} else {
		n = ret;
		res = npy_array_copy('I', 1, &n, ids);
		if (res)	/* "N" hands res's reference to the tuple */
			res = Py_BuildValue("(NK)", res, (unsigned long long)tokens);
	}
out:
	PyMem_Free(ids);
	release4(&q, &c, &s, f.have_view ? &f : NULL);
	return res;
}

PyDoc_STRVAR(unselected_doc,
"unselected(ids, sizes) -> uint32 array\n--\n\n"
"Every non-empty cluster not in ids, ascending (nelssa_unselected()):\n"
"the clusters whose estimate stands in for them.");

static PyObject *py_unselected(PyObject *mod, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "ids", "sizes", NULL };
	const Py_ssize_t dims[1] = { -1 };
	PyObject *io, *so, *res = NULL;
	struct npy_buf ids, s;
	uint32_t *out;
	Py_ssize_t n;
	int ret;

	(void)mod;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:unselected", kwlist, &io, &so) ||
	    npy_buf_ids(io, "ids", &ids) < 0)
		return NULL;
	if (npy_buf_ids(so, "sizes", &s) < 0) {
		npy_buf_release(&ids);
		return NULL;
	}
	if (npy_buf_shape(&s, "sizes", 1, dims) < 0 || s.len > UINT32_MAX || ids.len > UINT32_MAX)
		goto out;
	out = PyMem_Malloc((size_t)s.len * 4 + 4);
	if (!out) {
		PyErr_NoMemory();
		goto out;
	}
	ret = nelssa_unselected(ids.ptr, (uint32_t)ids.len, s.ptr, (uint32_t)s.len, out);
	if (ret < 0) {
		npy_raise(ret, "nelssa_unselected failed");
	} else {
		n = ret;
		res = npy_array_copy('I', 1, &n, out);
	}
	PyMem_Free(out);
out:
	release4(&ids, &s, NULL, NULL);
	return res;
}

/* k and v: the same K/V type, (tokens, head_dim). */
static int get_kv(PyObject *ko, PyObject *vo, uint32_t head_dim, struct npy_buf *k,
		  struct npy_buf *v)
{
	Py_ssize_t dims[2] = { -1, head_dim };

	if (npy_buf_get(ko, "k", NPY_E_KV, 0, k) < 0)
		return -1;
	if (npy_buf_get(vo, "v", NPY_E_KV, 0, v) < 0) {
		npy_buf_release(k);
		return -1;
	}
	if (npy_buf_shape(k, "k (tokens, head_dim)", 2, dims) < 0)
		goto fail;
	dims[0] = k->shape[0];
	if (npy_buf_shape(v, "v (tokens, head_dim)", 2, dims) < 0)
		goto fail;
	if (k->kv != v->kv) {
		PyErr_SetString(PyExc_TypeError, "k and v must be of the same type (bf16 or float16)");
		goto fail;
	}
	if (k->shape[0] > UINT32_MAX) {
		PyErr_SetString(PyExc_OverflowError, "too many tokens");
		goto fail;
	}
	return 0;
fail:
	release4(k, v, NULL, NULL);
	return -1;
}

PyDoc_STRVAR(window_attn_doc,
"window_attn(q, k, v, *, n_tokens=None, sink=4, recent=64, scale=None,\n"
"            out=None, lse_out=None) -> (o, lse)\n--\n\n"
"Attention over the local window (nelssa_window_attn()): tokens [0, sink)\n"
"and [n_tokens - recent, n_tokens) of k and v (tokens, head_dim), in token\n"
"order, bf16 bits or float16; n_tokens defaults to all of k's rows.  q\n"
"float32 (group, head_dim).  Returns float32 o (group, head_dim) and lse\n"
"(group,); no tokens give (0, -inf).  attn_flags=ATTN_BF16_DOTS rounds q\n"
"and the softmax weights to bf16 for the products, as GPU kernels do.");

static PyObject *py_window_attn(PyObject *mod, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "q", "k", "v", "n_tokens", "sink", "recent", "scale", "out",
				  "lse_out", "attn_flags", NULL };
	uint32_t flags = 0;
	PyObject *qo, *ko, *vo, *n_o = NULL, *scale_o = NULL, *out = NULL, *lse_out = NULL;
	PyObject *o, *lse;
	struct nelssa_window win = NELSSA_WINDOW_DEFAULT;
	struct nelssa_attn_geom g;
	struct npy_buf q, k, v, ob, lb;
	uint32_t n;
	int ret;

	(void)mod;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|$OO&O&OOOO&:window_attn", kwlist, &qo,
					 &ko, &vo, &n_o, npy_conv_u32, &win.sink, npy_conv_u32,
					 &win.recent, &scale_o, &out, &lse_out, npy_conv_u32,
					 &flags) ||
	    get_q(qo, &q) < 0)
		return NULL;
	if (get_kv(ko, vo, (uint32_t)q.shape[1], &k, &v) < 0) {
		npy_buf_release(&q);
		return NULL;
	}
	n = (uint32_t)k.shape[0];
	if (n_o && n_o != Py_None && (!npy_conv_u32(n_o, &n) || n > k.shape[0])) {
		if (!PyErr_Occurred())
			PyErr_Format(PyExc_ValueError, "n_tokens %u beyond k's %zd rows", n,
				     k.shape[0]);
		goto fail;
	}
	g = (struct nelssa_attn_geom){ (uint32_t)q.shape[1], (uint32_t)q.shape[0], k.kv, 0,
				       flags };
	if (get_scale(scale_o, g.head_dim, &g.scale) < 0 ||
	    attn_outputs(&q, out, lse_out, &o, &lse, &ob, &lb) < 0)
		goto fail;
	Py_BEGIN_ALLOW_THREADS
	ret = nelssa_window_attn(&g, q.ptr, k.ptr, v.ptr, n, &win, ob.ptr, lb.ptr);
	Py_END_ALLOW_THREADS
	release4(&q, &k, &v, NULL);
	return attn_result(ret, "nelssa_window_attn", o, lse, &ob, &lb);
fail:
	release4(&q, &k, &v, NULL);
	return NULL;
}

PyDoc_STRVAR(attn_dense_doc,
"attn_dense(q, k, v, *, scale=None, out=None, lse_out=None, attn_flags=0)\n"
"           -> (o, lse)\n--\n\n"
"Attention of q (group, head_dim) over every row of k and v\n"
"(nelssa_attn_dense(), the numeric core's reference kernel); attn_flags as\n"
"for window_attn().");

static PyObject *py_attn_dense(PyObject *mod, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "q", "k", "v", "scale", "out", "lse_out", "attn_flags", NULL };
	uint32_t flags = 0;
	PyObject *qo, *ko, *vo, *scale_o = NULL, *out = NULL, *lse_out = NULL, *o, *lse;
	struct nelssa_attn_geom g;
	struct npy_buf q, k, v, ob, lb;
	int ret;

	(void)mod;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|$OOOO&:attn_dense", kwlist, &qo, &ko, &vo,
					 &scale_o, &out, &lse_out, npy_conv_u32, &flags) ||
	    get_q(qo, &q) < 0)
		return NULL;
	if (get_kv(ko, vo, (uint32_t)q.shape[1], &k, &v) < 0) {
		npy_buf_release(&q);
		return NULL;
	}
	g = (struct nelssa_attn_geom){ (uint32_t)q.shape[1], (uint32_t)q.shape[0], k.kv, 0,
				       flags };
	if (get_scale(scale_o, g.head_dim, &g.scale) < 0 ||
	    attn_outputs(&q, out, lse_out, &o, &lse, &ob, &lb) < 0) {
		release4(&q, &k, &v, NULL);
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS
	ret = nelssa_attn_dense(&g, q.ptr, k.ptr, v.ptr, (size_t)k.shape[0], ob.ptr, lb.ptr);
	Py_END_ALLOW_THREADS
	release4(&q, &k, &v, NULL);
	return attn_result(ret, "nelssa_attn_dense", o, lse, &ob, &lb);
}

PyDoc_STRVAR(estimate_attn_doc,
"estimate_attn(q, centroids, vsum, sizes, ids, *, m2=None, scale=None,\n"
"              out=None, lse_out=None) -> (o, lse)\n--\n\n"
"Approximate attention over the clusters ids (nelssa_estimate_attn()):\n"
"each stands in for its members as its centroid weighted by its size;\n"
"vsum from ClusterIndex.value_sums().  With m2 (ClusterIndex.key_spread())\n"
"each is weighted by its members' mean weight to second order instead\n"
"(nelssa_estimate_attn_spread(), the shipped selection's estimate).\n"
"Merges like any other state; no ids give (0, -inf).");

static PyObject *py_estimate_attn(PyObject *mod, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "q", "centroids", "vsum", "sizes", "ids", "m2", "scale", "out",
				  "lse_out", NULL };
	PyObject *qo, *co, *vo, *so, *io, *m2o = Py_None, *scale_o = NULL, *out = NULL;
	PyObject *lse_out = NULL, *o, *lse;
	struct npy_buf q, c, vs, s, ids, m2 = { 0 }, ob, lb;
	struct nelssa_attn_geom g;
	int ret;

	(void)mod;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOO|$OOOO:estimate_attn", kwlist, &qo, &co,
					 &vo, &so, &io, &m2o, &scale_o, &out, &lse_out) ||
	    get_q(qo, &q) < 0)
		return NULL;
	if (get_clusters(co, so, (uint32_t)q.shape[1], &c, &s) < 0) {
		npy_buf_release(&q);
		return NULL;
	}
	if (npy_buf_get(vo, "vsum", NPY_E_F32, 0, &vs) < 0) {
		release4(&q, &c, &s, NULL);
		return NULL;
	}
	if (npy_buf_shape(&vs, "vsum (n_clusters, head_dim)", 2, c.shape) < 0 ||
	    npy_buf_ids(io, "ids", &ids) < 0) {
		release4(&q, &c, &s, &vs);
		return NULL;
	}
	if (m2o != Py_None &&
	    (npy_buf_get(m2o, "m2", NPY_E_F32, 0, &m2) < 0 ||
	     npy_buf_shape(&m2, "m2 (n_clusters, head_dim)", 2, c.shape) < 0))
		goto fail;
	for (Py_ssize_t i = 0; i < ids.len; i++)
		if (((const uint32_t *)ids.ptr)[i] >= c.shape[0]) {
			PyErr_Format(PyExc_ValueError, "ids[%zd] = %u beyond the %zd clusters", i,
				     ((const uint32_t *)ids.ptr)[i], c.shape[0]);
			goto fail;
		}
	g = (struct nelssa_attn_geom){ (uint32_t)q.shape[1], (uint32_t)q.shape[0],
				       NELSSA_KV_BF16, 0 };
	if (get_scale(scale_o, g.head_dim, &g.scale) < 0 ||
	    attn_outputs(&q, out, lse_out, &o, &lse, &ob, &lb) < 0)
		goto fail;
	Py_BEGIN_ALLOW_THREADS
	ret = nelssa_estimate_attn_spread(&g, q.ptr, c.ptr, m2.ptr, vs.ptr, s.ptr, ids.ptr,
					  (uint32_t)ids.len, ob.ptr, lb.ptr);
	Py_END_ALLOW_THREADS
	release4(&q, &c, &s, &vs);
	npy_buf_release(&ids);
	npy_buf_release(&m2);
	return attn_result(ret, "nelssa_estimate_attn_spread", o, lse, &ob, &lb);
fail:
	release4(&q, &c, &s, &vs);
	npy_buf_release(&ids);
	npy_buf_release(&m2);
	return NULL;
}

/* A state (o, lse): float32 o (rows, d) and lse (rows,). */
static int get_state(PyObject *oo, PyObject *lo, const char *on, const char *ln,
		     const Py_ssize_t *dims, int writable, struct npy_buf *o, struct npy_buf *l)
{
	if (npy_buf_get(oo, on, NPY_E_F32, writable, o) < 0)
		return -1;
	if (npy_buf_get(lo, ln, NPY_E_F32, writable, l) < 0) {
		npy_buf_release(o);
		return -1;
	}
	if (npy_buf_shape(o, on, 2, dims) < 0 || npy_buf_shape(l, ln, 1, dims) < 0) {
		release4(o, l, NULL, NULL);
		return -1;
	}
	return 0;
}

PyDoc_STRVAR(lse_merge_doc,
"lse_merge(o_a, lse_a, o_b, lse_b)\n--\n\n"
"Merge state b into state a in place (nelssa_lse_merge()): o float32\n"
"(rows, d), lse float32 (rows,); o_a and lse_a must be writable.  Empty\n"
"states (lse -inf) are neutral.");

static PyObject *py_lse_merge(PyObject *mod, PyObject *args)
{
	PyObject *oa_o, *la_o, *ob_o, *lb_o;
	struct npy_buf oa, la, ob, lb;
	Py_ssize_t dims[2] = { -1, -1 };

	(void)mod;
	if (!PyArg_ParseTuple(args, "OOOO:lse_merge", &oa_o, &la_o, &ob_o, &lb_o) ||
	    get_state(oa_o, la_o, "o_a", "lse_a", dims, 1, &oa, &la) < 0)
		return NULL;
	dims[0] = oa.shape[0];
	dims[1] = oa.shape[1];
	if (get_state(ob_o, lb_o, "o_b", "lse_b", dims, 0, &ob, &lb) < 0) {
		release4(&oa, &la, NULL, NULL);
		return NULL;
	}
	if (dims[0] > UINT32_MAX || dims[1] > UINT32_MAX) {
		PyErr_SetString(PyExc_OverflowError, "state too large");
	} else {
		Py_BEGIN_ALLOW_THREADS
		nelssa_lse_merge(oa.ptr, la.ptr, ob.ptr, lb.ptr, (uint32_t)dims[0],
				 (uint32_t)dims[1]);
		Py_END_ALLOW_THREADS
	}
	release4(&oa, &la, &ob, &lb);
	if (PyErr_Occurred())
		return NULL;
	Py_RETURN_NONE;
}

PyDoc_STRVAR(final_merge_doc,
"final_merge(win_o, win_lse, pnm_o, pnm_lse, *, out=None, lse_out=None)\n"
"    -> (o, lse)\n--\n\n"
"Merge the local-window state with any number of PNM states\n"
"(nelssa_final_merge()): win_o float32 (rows, d), win_lse (rows,); pnm_o\n"
"and pnm_lse sequences (or stacked arrays) of states of the same shape.\n"
"out may be win_o itself (and lse_out win_lse) to merge in place.");

static PyObject *py_final_merge(PyObject *mod, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "win_o", "win_lse", "pnm_o", "pnm_lse", "out", "lse_out", NULL };
	PyObject *wo_o, *wl_o, *po_o, *pl_o, *out = NULL, *lse_out = NULL, *res = NULL;
	PyObject *so = NULL, *sl = NULL, *o = NULL, *lse = NULL;
	struct npy_buf wo, wl, ob, lb, *bufs = NULL;
	const float **po = NULL, **pl = NULL;
	Py_ssize_t dims[2] = { -1, -1 }, n = 0, got = 0;

	(void)mod;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO|$OO:final_merge", kwlist, &wo_o, &wl_o,
					 &po_o, &pl_o, &out, &lse_out) ||
	    get_state(wo_o, wl_o, "win_o", "win_lse", dims, 0, &wo, &wl) < 0)
		return NULL;
	dims[0] = wo.shape[0];
	dims[1] = wo.shape[1];
	so = PySequence_Fast(po_o, "pnm_o must be a sequence of float32 (rows, d) arrays");
	sl = so ? PySequence_Fast(pl_o, "pnm_lse must be a sequence of float32 (rows,) arrays") :
		  NULL;
	if (!sl)
		goto out;
	n = PySequence_Fast_GET_SIZE(so);
	if (n != PySequence_Fast_GET_SIZE(sl)) {
		PyErr_SetString(PyExc_ValueError, "pnm_o and pnm_lse differ in length");
		goto out;
	}
	bufs = PyMem_Calloc((size_t)n * 2 + 1, sizeof(*bufs));
	po = PyMem_Calloc((size_t)n + 1, sizeof(*po));
	pl = PyMem_Calloc((size_t)n + 1, sizeof(*pl));
	if (!bufs || !po || !pl) {
		PyErr_NoMemory();
		goto out;
	}
	for (; got < n; got++) {
		if (get_state(PySequence_Fast_GET_ITEM(so, got), PySequence_Fast_GET_ITEM(sl, got),
			      "pnm_o[i]", "pnm_lse[i]", dims, 0, &bufs[2 * got],
			      &bufs[2 * got + 1]) < 0)
			goto out;
		po[got] = bufs[2 * got].ptr;
		pl[got] = bufs[2 * got + 1].ptr;
	}
	o = npy_buf_out(out, "out", 'f', 2, dims, &ob);
	if (!o)
		goto out;
	lse = npy_buf_out(lse_out, "lse_out", 'f', 1, dims, &lb);
	if (!lse) {
		npy_buf_release(&ob);
		goto out;
	}
	if (dims[0] > UINT32_MAX || dims[1] > UINT32_MAX) {
		PyErr_SetString(PyExc_OverflowError, "state too large");
	} else {
		Py_BEGIN_ALLOW_THREADS
		nelssa_final_merge(ob.ptr, lb.ptr, wo.ptr, wl.ptr, po, pl, (size_t)n,
				   (uint32_t)dims[0], (uint32_t)dims[1]);
		Py_END_ALLOW_THREADS
		res = PyTuple_Pack(2, o, lse);
	}
	release4(&ob, &lb, NULL, NULL);
out:
	for (Py_ssize_t i = 0; i < got; i++)
		release4(&bufs[2 * i], &bufs[2 * i + 1], NULL, NULL);
	PyMem_Free(bufs);
	PyMem_Free(po);
	PyMem_Free(pl);
	Py_XDECREF(so);
	Py_XDECREF(sl);
	Py_XDECREF(o);
	Py_XDECREF(lse);
	release4(&wo, &wl, NULL, NULL);
	return res;
}

static PyMethodDef algo_methods[] = {
	{ "centroid_scores", (PyCFunction)(void (*)(void))py_centroid_scores,
	  METH_VARARGS | METH_KEYWORDS, centroid_scores_doc },
	{ "topk", (PyCFunction)(void (*)(void))py_topk, METH_VARARGS | METH_KEYWORDS, topk_doc },
	{ "select", (PyCFunction)(void (*)(void))py_select, METH_VARARGS | METH_KEYWORDS,
	  select_doc },
	{ "unselected", (PyCFunction)(void (*)(void))py_unselected, METH_VARARGS | METH_KEYWORDS,
	  unselected_doc },
	{ "window_attn", (PyCFunction)(void (*)(void))py_window_attn,
	  METH_VARARGS | METH_KEYWORDS, window_attn_doc },
	{ "attn_dense", (PyCFunction)(void (*)(void))py_attn_dense, METH_VARARGS | METH_KEYWORDS,
	  attn_dense_doc },
	{ "estimate_attn", (PyCFunction)(void (*)(void))py_estimate_attn,
	  METH_VARARGS | METH_KEYWORDS, estimate_attn_doc },
	{ "lse_merge", (PyCFunction)py_lse_merge, METH_VARARGS, lse_merge_doc },
	{ "final_merge", (PyCFunction)(void (*)(void))py_final_merge,
	  METH_VARARGS | METH_KEYWORDS, final_merge_doc },
	{ NULL, NULL, 0, NULL },
};

int npy_algos_init(PyObject *m)
{
	return PyModule_AddFunctions(m, algo_methods);
}
