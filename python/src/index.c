// SPDX-License-Identifier: MIT
/*
 * nelssa.ClusterIndex: one (layer, KV head)'s segmented k-means index,
 * owning the library's struct nelssa_cluster_index.  Its arrays are handed
 * out as copies: append() reallocates them, so a view could dangle.  A
 * lock per index orders append() (which runs with the GIL released)
 * against everything that reads the struct, offload included.
 */
#include "nelssa_py.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <nelssa/sparse.h>

struct npy_index {
	PyObject_HEAD
	struct nelssa_cluster_index ix;
	int built;
	PyThread_type_lock lock;
};

struct nelssa_cluster_index *npy_index_lock(PyObject *o)
{
	struct npy_index *self = (struct npy_index *)o;

	npy_lock(self->lock);
	if (!self->built) {
		PyThread_release_lock(self->lock);
		PyErr_SetString(PyExc_ValueError, "the ClusterIndex was freed");
		return NULL;
	}
	return &self->ix;
}

void npy_index_unlock(PyObject *o)
{
	PyThread_release_lock(((struct npy_index *)o)->lock);
}

/* Keyword-only k-means parameters shared by the constructor and append(). */
static int parse_cfg(PyObject *args, PyObject *kw, const char *fname, PyObject **k,
		     struct nelssa_kmeans_cfg *cfg)
{
	static char *kwlist[] = { "k", "segment", "cluster_tokens", "iters", "chunk",
				  "outlier_per_mille", "outlier_cos", "outlier_ratio", NULL };
	char fmt[64];

	*cfg = NELSSA_KMEANS_DEFAULT;
	snprintf(fmt, sizeof(fmt), "O|$O&O&O&O&O&ff:%s", fname);
	return PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, k, npy_conv_u32, &cfg->segment,
					   npy_conv_u32, &cfg->cluster_tokens, npy_conv_u32,
					   &cfg->iters, npy_conv_u32, &cfg->chunk, npy_conv_u32,
					   &cfg->outlier_per_mille, &cfg->outlier_cos,
					   &cfg->outlier_ratio) ? 0 : -1;
}

static PyObject *index_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	struct npy_index *self = (struct npy_index *)type->tp_alloc(type, 0);

	(void)args;
	(void)kw;
	if (!self)
		return NULL;
	self->lock = PyThread_allocate_lock();
	if (!self->lock) {
		Py_DECREF(self);
		return PyErr_NoMemory();
	}
	return (PyObject *)self;
}

static int index_init(struct npy_index *self, PyObject *args, PyObject *kw)
{
	struct nelssa_cluster_index ix;
	struct nelssa_kmeans_cfg cfg;
	struct npy_buf k;
	PyObject *ko;
	const Py_ssize_t dims[2] = { -1, -1 };
	int ret;

	if (parse_cfg(args, kw, "ClusterIndex", &ko, &cfg) < 0)
		return -1;
	if (npy_buf_get(ko, "k", NPY_E_KV, 0, &k) < 0)
		return -1;
	if (npy_buf_shape(&k, "k (tokens, head_dim)", 2, dims) < 0 || k.shape[0] > UINT32_MAX ||
	    k.shape[1] > UINT32_MAX) {
		npy_buf_release(&k);
		return -1;
	}
	memset(&ix, 0, sizeof(ix));
	Py_BEGIN_ALLOW_THREADS
	ret = nelssa_kmeans_build(&ix, &cfg, k.kv, k.ptr, (uint32_t)k.shape[0],
				  (uint32_t)k.shape[1]);
	Py_END_ALLOW_THREADS
	npy_buf_release(&k);
	if (ret) {
		npy_raise(ret, ret == -EINVAL ?
			  "nelssa_kmeans_build: bad configuration or shape (head_dim 1..1024, "
			  "segment, cluster_tokens and iters non-zero)" : NULL);
		return -1;
	}
	npy_lock(self->lock);
	if (self->built)	/* __init__ called again: the new index replaces the old */
		nelssa_kmeans_free(&self->ix);
	self->ix = ix;
	self->built = 1;
	PyThread_release_lock(self->lock);
	return 0;
}

static void index_dealloc(struct npy_index *self)
{
	if (self->built)
		nelssa_kmeans_free(&self->ix);
	if (self->lock)
		PyThread_free_lock(self->lock);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

PyDoc_STRVAR(append_doc,
"append(k, *, cluster_tokens=16, iters=10, ...) -> int\n--\n\n"
"Cluster decode-time keys k (new_tokens, head_dim), the tokens after the\n"
"index's n_tokens, and append their clusters (nelssa_kmeans_append()).\n"
"Existing clusters are not touched.  Returns the cluster count before\n"
"the append: the from_cluster to give Client.append().");

static PyObject *index_append(struct npy_index *self, PyObject *args, PyObject *kw)
{
	struct nelssa_cluster_index *ix;
	struct nelssa_kmeans_cfg cfg;
	struct npy_buf k;
	PyObject *ko, *res = NULL;
	Py_ssize_t dims[2] = { -1, -1 };
	uint32_t before;
	int ret;

	if (parse_cfg(args, kw, "append", &ko, &cfg) < 0 ||
	    npy_buf_get(ko, "k", NPY_E_KV, 0, &k) < 0)
		return NULL;
	ix = npy_index_lock((PyObject *)self);
	if (!ix) {
		npy_buf_release(&k);
		return NULL;
	}
	dims[1] = ix->head_dim;
	if (npy_buf_shape(&k, "k (new_tokens, head_dim)", 2, dims) == 0) {
		before = ix->n_clusters;
		if (k.shape[0] > UINT32_MAX - ix->n_tokens) {
			PyErr_SetString(PyExc_OverflowError, "too many tokens for one index");
		} else {
			Py_BEGIN_ALLOW_THREADS
			ret = nelssa_kmeans_append(ix, &cfg, k.kv, k.ptr, (uint32_t)k.shape[0]);
			Py_END_ALLOW_THREADS
			if (ret)
				npy_raise(ret, "nelssa_kmeans_append failed");
			else
				res = PyLong_FromUnsignedLong(before);
		}
	}
	npy_index_unlock((PyObject *)self);
	npy_buf_release(&k);
	return res;
}

PyDoc_STRVAR(free_doc,
"free()\n--\n\n"
"Free the index's memory now (nelssa_kmeans_free()); later use raises\n"
"ValueError.  Garbage collection does the same.");

static PyObject *index_free(struct npy_index *self, PyObject *unused)
{
	(void)unused;
	npy_lock(self->lock);
	if (self->built)
		nelssa_kmeans_free(&self->ix);
	self->built = 0;
	PyThread_release_lock(self->lock);
	Py_RETURN_NONE;
}

/* Rows in token order: checks @o has n_tokens rows (of head_dim for K/V). */
static int rows_of(const struct nelssa_cluster_index *ix, PyObject *o, const char *name,
		   enum npy_elem e, struct npy_buf *b)
{
	const Py_ssize_t dims[2] = { ix->n_tokens, ix->head_dim };

	if (npy_buf_get(o, name, e, 0, b) < 0)
		return -1;
	if (e == NPY_E_KV ? npy_buf_shape(b, name, 2, dims) < 0 :
	    b->ndim < 1 || b->shape[0] != ix->n_tokens) {
		if (!PyErr_Occurred())
			PyErr_Format(PyExc_ValueError, "%s must have n_tokens (%u) rows", name,
				     ix->n_tokens);
		npy_buf_release(b);
		return -1;
	}
	return 0;
}

PyDoc_STRVAR(reorder_doc,
"reorder(rows) -> array\n--\n\n"
"Gather rows (n_tokens, ...) in token order into cluster-contiguous\n"
"order, as offload() sends them: result[i] = rows[perm[i]]\n"
"(nelssa_kv_reorder()).  Any element type; a new array of the same\n"
"type and shape.");

static PyObject *index_reorder(struct npy_index *self, PyObject *arg)
{
	struct nelssa_cluster_index *ix = npy_index_lock((PyObject *)self);
	struct npy_buf src, dst;
	PyObject *res = NULL;
	size_t row;

	if (!ix)
		return NULL;
	if (rows_of(ix, arg, "rows", NPY_E_ANY, &src) < 0)
		goto out;
	res = npy_buf_out(NULL, "rows", src.fmt, src.ndim, src.shape, &dst);
	if (res) {
		row = ix->n_tokens ? (size_t)src.view.len / ix->n_tokens : 0;
		Py_BEGIN_ALLOW_THREADS
		nelssa_kv_reorder(ix, row, src.ptr, dst.ptr);
		Py_END_ALLOW_THREADS
		npy_buf_release(&dst);
	}
	npy_buf_release(&src);
out:
	npy_index_unlock((PyObject *)self);
	return res;
}

typedef void (*per_cluster_fn)(const struct nelssa_cluster_index *ix,
			       enum nelssa_kv_dtype dtype, const void *rows, float *out);

/*
 * The view of @ix that per_cluster() hands @fn: its clusters from @first
 * on, whose members' rows start at token @base -- their store positions
 * and token numbers made relative, in @perm and @table (allocated here),
 * when @base is not 0.  -1 with ValueError when a member lies below @base.
 */
static int clusters_from(const struct nelssa_cluster_index *ix, uint32_t first, uint32_t base,
			 struct nelssa_cluster_index *sub, uint32_t **perm,
			 struct nelssa_cluster **table)
{
	const uint32_t p0 = first < ix->n_clusters ? ix->table[first].first : ix->n_tokens;

	*sub = *ix;
	sub->table += first;
	sub->centroids += (size_t)first * ix->head_dim;
	sub->n_clusters -= first;
	*perm = NULL;
	*table = NULL;
	if (!base)
		return 0;
	*perm = PyMem_Malloc(sizeof(**perm) * (ix->n_tokens - p0 + 1));
	*table = PyMem_Malloc(sizeof(**table) * (sub->n_clusters + 1));
	if (!*perm || !*table) {
		PyErr_NoMemory();
		return -1;
	}
	for (uint32_t p = p0; p < ix->n_tokens; p++) {
		if (ix->perm[p] < base) {
			PyErr_Format(PyExc_ValueError, "token %u is a member of cluster %u or later, "
				     "but the rows start at token %u", ix->perm[p], first, base);
			return -1;
		}
		(*perm)[p - p0] = ix->perm[p] - base;
	}
	for (uint32_t c = 0; c < sub->n_clusters; c++)
		(*table)[c] = (struct nelssa_cluster){ sub->table[c].first - p0,
						       sub->table[c].count };
	sub->perm = *perm;
	sub->table = *table;
	sub->n_tokens = ix->n_tokens - base;
	return 0;
}

/*
 * fp32 [n_clusters - first][head_dim] from K or V rows in token order:
 * @fn over the clusters from @first on (keyword first=, default 0), as a
 * view of the index that starts there -- each cluster's result depends on
 * its own members alone, so after append() only the new ones need it --
 * from rows of the tokens from @base on (keyword base=, default 0).
 */
static PyObject *per_cluster(struct npy_index *self, PyObject *args, PyObject *kw,
			     const char *name, per_cluster_fn fn)
{
	static char *kwlist_k[] = { "k", "first", "base", NULL };
	static char *kwlist_v[] = { "v", "first", "base", NULL };
	struct nelssa_cluster_index *ix, sub;
	struct nelssa_cluster *table = NULL;
	struct npy_buf src, dst;
	PyObject *arg, *res = NULL;
	Py_ssize_t dims[2];
	uint32_t first = 0, base = 0, *perm = NULL;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$O&O&",
					 name[0] == 'k' ? kwlist_k : kwlist_v, &arg,
					 npy_conv_u32, &first, npy_conv_u32, &base))
		return NULL;
	ix = npy_index_lock((PyObject *)self);
	if (!ix)
		return NULL;
	if (first > ix->n_clusters || base > ix->n_tokens) {
		PyErr_Format(PyExc_ValueError, "first (%u) beyond the %u clusters, or base (%u) "
			     "beyond the %u tokens", first, ix->n_clusters, base, ix->n_tokens);
		goto out;
	}
	if (clusters_from(ix, first, base, &sub, &perm, &table) < 0 ||
	    rows_of(&sub, arg, name, NPY_E_KV, &src) < 0)
		goto out;
	dims[0] = sub.n_clusters;
	dims[1] = ix->head_dim;
	res = npy_buf_out(NULL, "result", 'f', 2, dims, &dst);
	if (res) {
		Py_BEGIN_ALLOW_THREADS
		fn(&sub, src.kv, src.ptr, dst.ptr);
		Py_END_ALLOW_THREADS
		npy_buf_release(&dst);
	}
	npy_buf_release(&src);
out:
	PyMem_Free(perm);
	PyMem_Free(table);
	npy_index_unlock((PyObject *)self);
	return res;
}

PyDoc_STRVAR(value_sums_doc,
"value_sums(v, *, first=0, base=0) -> float32 array (n_clusters - first, head_dim)\n--\n\n"
"Per-cluster sums of the member V rows (nelssa_cluster_value_sums()),\n"
"v in token order (n_tokens - base, head_dim): with the centroids and\n"
"sizes, what estimate_attn() needs.  first: the clusters from there on\n"
"only (after append(), the new ones: the others' sums do not change).\n"
"base: v holds the rows of tokens from base on (after append(), the new\n"
"tokens alone will do); ValueError if a member of those clusters lies\n"
"below it.");

static PyObject *index_value_sums(struct npy_index *self, PyObject *args, PyObject *kw)
{
	return per_cluster(self, args, kw, "v", nelssa_cluster_value_sums);
}

PyDoc_STRVAR(far_keys_doc,
"far_keys(k, *, first=0, base=0) -> float32 array (n_clusters - first, head_dim)\n--\n\n"
"Each cluster's member key farthest from its centroid\n"
"(nelssa_cluster_far_keys()), k in token order: the far= of select();\n"
"first and base as for value_sums().");

static PyObject *index_far_keys(struct npy_index *self, PyObject *args, PyObject *kw)
{
	return per_cluster(self, args, kw, "k", nelssa_cluster_far_keys);
}

PyDoc_STRVAR(key_spread_doc,
"key_spread(k, *, first=0, base=0) -> float32 array (n_clusters - first, head_dim)\n--\n\n"
"Each cluster's per-channel key spread (nelssa_cluster_key_spread()):\n"
"the mean over its members of (k - centroid)^2, k in token order; the m2=\n"
"of estimate_attn(), which then weighs a cluster by its members' mean\n"
"weight instead of its mean key's.  first and base as for value_sums().");

static PyObject *index_key_spread(struct npy_index *self, PyObject *args, PyObject *kw)
{
	return per_cluster(self, args, kw, "k", nelssa_cluster_key_spread);
}

/* Property getters: copies taken under the lock. */
static PyObject *get_u32(struct npy_index *self, int which)
{
	struct nelssa_cluster_index *ix = npy_index_lock((PyObject *)self);
	PyObject *res = NULL;

	if (!ix)
		return NULL;
	switch (which) {
	case 0: res = PyLong_FromUnsignedLong(ix->head_dim); break;
	case 1: res = PyLong_FromUnsignedLong(ix->n_tokens); break;
	default: res = PyLong_FromUnsignedLong(ix->n_clusters); break;
	}
	npy_index_unlock((PyObject *)self);
	return res;
}

static PyObject *get_head_dim(struct npy_index *self, void *c)
{
	(void)c;
	return get_u32(self, 0);
}

static PyObject *get_n_tokens(struct npy_index *self, void *c)
{
	(void)c;
	return get_u32(self, 1);
}

static PyObject *get_n_clusters(struct npy_index *self, void *c)
{
	(void)c;
	return get_u32(self, 2);
}

static PyObject *get_array(struct npy_index *self, int which)
{
	struct nelssa_cluster_index *ix = npy_index_lock((PyObject *)self);
	PyObject *res = NULL;
	Py_ssize_t dims[2];
	struct npy_buf b;

	if (!ix)
		return NULL;
	switch (which) {
	case 0:	/* perm */
		dims[0] = ix->n_tokens;
		res = npy_array_copy('I', 1, dims, ix->perm);
		break;
	case 1:	/* table: the struct is two uint32s */
		dims[0] = ix->n_clusters;
		dims[1] = 2;
		res = npy_array_copy('I', 2, dims, ix->table);
		break;
	case 2:	/* sizes */
		dims[0] = ix->n_clusters;
		res = npy_buf_out(NULL, "sizes", 'I', 1, dims, &b);
		if (res) {
			for (uint32_t i = 0; i < ix->n_clusters; i++)
				((uint32_t *)b.ptr)[i] = ix->table[i].count;
			npy_buf_release(&b);
		}
		break;
	case 3:	/* centroids */
		dims[0] = ix->n_clusters;
		dims[1] = ix->head_dim;
		res = npy_array_copy('f', 2, dims, ix->centroids);
		break;
	default:	/* key_mean */
		dims[0] = ix->head_dim;
		res = npy_array_copy('f', 1, dims, ix->key_mean);
		break;
	}
	npy_index_unlock((PyObject *)self);
	return res;
}

static PyObject *get_perm(struct npy_index *self, void *c)
{
	(void)c;
	return get_array(self, 0);
}

static PyObject *get_table(struct npy_index *self, void *c)
{
	(void)c;
	return get_array(self, 1);
}

static PyObject *get_sizes(struct npy_index *self, void *c)
{
	(void)c;
	return get_array(self, 2);
}

static PyObject *get_centroids(struct npy_index *self, void *c)
{
	(void)c;
	return get_array(self, 3);
}

static PyObject *get_key_mean(struct npy_index *self, void *c)
{
	(void)c;
	return get_array(self, 4);
}

static PyObject *index_repr(struct npy_index *self)
{
	if (!self->built)
		return PyUnicode_FromString("<nelssa.ClusterIndex (freed)>");
	return PyUnicode_FromFormat("<nelssa.ClusterIndex head_dim=%u n_tokens=%u n_clusters=%u>",
				    self->ix.head_dim, self->ix.n_tokens, self->ix.n_clusters);
}

static PyMethodDef index_methods[] = {
	{ "append", (PyCFunction)(void (*)(void))index_append, METH_VARARGS | METH_KEYWORDS,
	  append_doc },
	{ "free", (PyCFunction)index_free, METH_NOARGS, free_doc },
	{ "reorder", (PyCFunction)index_reorder, METH_O, reorder_doc },
	{ "value_sums", (PyCFunction)(void (*)(void))index_value_sums,
	  METH_VARARGS | METH_KEYWORDS, value_sums_doc },
	{ "far_keys", (PyCFunction)(void (*)(void))index_far_keys, METH_VARARGS | METH_KEYWORDS,
	  far_keys_doc },
	{ "key_spread", (PyCFunction)(void (*)(void))index_key_spread,
	  METH_VARARGS | METH_KEYWORDS, key_spread_doc },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef index_getset[] = {
	{ "head_dim", (getter)get_head_dim, NULL, PyDoc_STR("Elements per key."), NULL },
	{ "n_tokens", (getter)get_n_tokens, NULL, PyDoc_STR("Tokens clustered so far."), NULL },
	{ "n_clusters", (getter)get_n_clusters, NULL, PyDoc_STR("Clusters so far (none empty)."),
	  NULL },
	{ "perm", (getter)get_perm, NULL,
	  PyDoc_STR("uint32 (n_tokens,) copy: the token at cluster-contiguous position i."),
	  NULL },
	{ "table", (getter)get_table, NULL,
	  PyDoc_STR("uint32 (n_clusters, 2) copy: each cluster's (first, count) positions."),
	  NULL },
	{ "sizes", (getter)get_sizes, NULL,
	  PyDoc_STR("uint32 (n_clusters,) copy: tokens per cluster (table[:, 1])."), NULL },
	{ "centroids", (getter)get_centroids, NULL,
	  PyDoc_STR("float32 (n_clusters, head_dim) copy: each cluster's mean key."), NULL },
	{ "key_mean", (getter)get_key_mean, NULL,
	  PyDoc_STR("float32 (head_dim,) copy: the prefill keys' mean."), NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

PyDoc_STRVAR(index_doc,
"ClusterIndex(k, *, segment=8192, cluster_tokens=16, iters=10, chunk=1024,\n"
"             outlier_per_mille=16, outlier_cos=0.5, outlier_ratio=1.15)\n--\n\n"
"Segmented k-means over one (layer, KV head)'s prefill keys k, shape\n"
"(tokens, head_dim), bf16 bits (uint16/int16, torch.bfloat16) or float16\n"
"(nelssa_kmeans_build(); deterministic).  The GIL is released while it\n"
"clusters.  Arrays are returned as copies.");

PyTypeObject npy_index_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "nelssa.ClusterIndex",
	.tp_basicsize = sizeof(struct npy_index),
	.tp_dealloc = (destructor)index_dealloc,
	.tp_repr = (reprfunc)index_repr,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = index_doc,
	.tp_methods = index_methods,
	.tp_getset = index_getset,
	.tp_init = (initproc)index_init,
	.tp_new = index_new,
};

int npy_index_init(PyObject *m)
{
	if (PyType_Ready(&npy_index_type) < 0)
		return -1;
	Py_INCREF(&npy_index_type);
	if (PyModule_AddObject(m, "ClusterIndex", (PyObject *)&npy_index_type) < 0) {
		Py_DECREF(&npy_index_type);
		return -1;
	}
	return 0;
}
